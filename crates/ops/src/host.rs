//! The host: what one machine knows about its imported pools, and who
//! may write them.
//!
//! * Records: one JSON file per imported pool in `$OZFS_STATE_DIR`
//!   (default `/var/lib/ozfs`), with its guid, device paths, read-only flag
//!   and per-device error counters, the way the kernel module keeps them
//!   in memory.
//! * Locks: a pool is written by one process at a time, the holder of an
//!   exclusive `flock` on `<state dir>/.<pool>.lock` — a command for the
//!   length of its run, or the daemon for as long as it holds the pool.
//! * The holder: inside the daemon, a [`Holder`] is installed; every
//!   operation that needs a pool's writer gets a lease on the daemon's
//!   shared writer from it instead of opening the pool ([`writer_for`]), and
//!   device changes update the daemon's records through it.
//!
//! * The daemon's private directory ([`private_state_dir`]): the state
//!   directory made or checked before the daemon and its log use it —
//!   owned by the daemon's user, not a link, mode 0700 — and its files
//!   opened without following links ([`open_private`]).
//!
//! Invariants: a state file is only ever named from a valid pool name; a
//! process opens a pool for writing only while holding its lock (or a
//! lease from the holder that holds it); the daemon runs only over a
//! state directory no other user owns or can write.

use crate::error::{Error, Result};
use ozfs_dsl::shared::{Lease, Writer};
use ozfs_dsl::sync::PoolWriter;
use ozfs_spa::{Pool, PoolOptions};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

pub fn state_dir() -> PathBuf {
    std::env::var_os("OZFS_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/ozfs"))
}

/// The state directory, made (mode 0700) or checked for the daemon: it
/// must be a directory, not a symbolic link, owned by the effective user;
/// another owner is refused (a chmod would not take it back from them),
/// and group or other permissions are removed.
pub fn private_state_dir() -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = state_dir();
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("create {}", parent.display()), e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::io(format!("create {}", dir.display()), e));
        }
        _ => {}
    }
    let md = std::fs::symlink_metadata(&dir)
        .map_err(|e| Error::io(format!("stat {}", dir.display()), e))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !md.file_type().is_dir() {
        return Err(Error::Permission(format!(
            "state directory {} is not a directory (a symbolic link?): refused",
            dir.display()
        )));
    }
    if md.uid() != me {
        return Err(Error::Permission(format!(
            "state directory {} is owned by uid {}, not by this user ({me}): refused",
            dir.display(),
            md.uid()
        )));
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("chmod {}", dir.display()), e))?;
    }
    Ok(dir)
}

/// Open (`append`: for appending, else for writing without truncation;
/// created 0600 if missing) a file of the private state directory without
/// following a link, and only if it is a regular file of ours with one link.
pub fn open_private(path: &std::path::Path, append: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut o = std::fs::OpenOptions::new();
    o.create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(false);
    }
    let f = o
        .open(path)
        .map_err(|e| Error::io(format!("open {} (not following links)", path.display()), e))?;
    let md = f
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !md.file_type().is_file() || md.uid() != me || md.nlink() != 1 {
        return Err(Error::Permission(format!(
            "{} is not a private regular file of this user: refused",
            path.display()
        )));
    }
    Ok(f)
}

/// The state file of pool `name`. The last line of defence against a name
/// that would leave the state directory: only a valid pool name (no `/`, no
/// `..`, nothing but `[A-Za-z0-9_.: -]`) names a file here.
fn pool_file(name: &str) -> Result<PathBuf> {
    check_name(name)?;
    Ok(state_dir().join(format!("{name}.json")))
}

/// Only a valid pool name names a file of the state directory.
pub fn check_name(name: &str) -> Result<()> {
    ozfs_format::names::check_pool_name(name)
        .map_err(|why| Error::Invalid(format!("invalid pool name {name:?}: {why}")))
}

/// Per-pool leaf states, kept across export. A hidden file (`.resilver-…`),
/// so that no listing of the state directory takes it for a pool; the old
/// name (`resilver-<guid>.json`) is still read.
fn resilver_file(guid: u64) -> PathBuf {
    state_dir().join(format!(".resilver-{guid}.json"))
}

fn old_resilver_file(guid: u64) -> PathBuf {
    state_dir().join(format!("resilver-{guid}.json"))
}

/// (leaf guid, txg) pairs.
pub type LeafTxgs = Vec<(u64, u64)>;

/// Leaf states of pool `guid` that its labels do not carry (kept beside
/// the records and across export): leaves whose resilver has not completed,
/// and offline leaves with the txg they went offline after — each as
/// (leaf guid, txg).
pub fn resilvering_of(guid: u64) -> (LeafTxgs, LeafTxgs) {
    let Ok(s) = std::fs::read_to_string(resilver_file(guid))
        .or_else(|_| std::fs::read_to_string(old_resilver_file(guid)))
    else {
        return (Vec::new(), Vec::new());
    };
    let v: Value = serde_json::from_str(&s).unwrap_or(Value::Null);
    let list = |a: &Value| -> Vec<(u64, u64)> {
        a.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| Some((e[0].as_str()?.parse().ok()?, e[1].as_u64()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    (list(&v["resilvering"]), list(&v["offline"]))
}

fn save_resilvering(guid: u64, res: &[(u64, u64)], off: &[(u64, u64)]) -> Result<()> {
    let f = resilver_file(guid);
    let _ = std::fs::remove_file(old_resilver_file(guid));
    if res.is_empty() && off.is_empty() {
        let _ = std::fs::remove_file(&f);
        return Ok(());
    }
    let enc = |l: &[(u64, u64)]| -> Vec<Value> {
        l.iter().map(|(g, t)| json!([g.to_string(), t])).collect()
    };
    let v = json!({"resilvering": enc(res), "offline": enc(off)});
    std::fs::write(&f, v.to_string()).map_err(|e| Error::io(format!("write {}", f.display()), e))
}

/// One imported pool's record.
#[derive(Debug, Clone)]
pub struct Record {
    pub name: String,
    pub guid: u64,
    pub devices: Vec<String>,
    pub readonly: bool,
    /// leaf guid -> (read, write, cksum); key 0 guid for interior vdevs uses their guid too.
    pub errors: Vec<(u64, [u64; 3])>,
    /// Leaves whose resilver has not completed: (guid, txg after which they
    /// miss blocks). Restored at every open, so a half-filled device is
    /// never trusted after a crash or an export; the next resilver or
    /// scrub that completes clears it.
    pub resilvering: Vec<(u64, u64)>,
    /// Offline leaves and the txg after which they miss blocks (so that
    /// `zpool online` resilvers only those, even after an export).
    pub offline: Vec<(u64, u64)>,
}

impl Record {
    pub fn save(&self) -> Result<()> {
        let dir = state_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        let v = json!({
            "name": self.name,
            "guid": self.guid.to_string(),
            "devices": self.devices,
            "readonly": self.readonly,
            "errors": self.errors.iter().map(|(g, c)| json!([g.to_string(), c[0], c[1], c[2]])).collect::<Vec<_>>(),

        });
        let file = pool_file(&self.name)?;
        save_resilvering(self.guid, &self.resilvering, &self.offline)?;
        let tmp = dir.join(format!(".{}.json.tmp", self.name));
        std::fs::write(&tmp, v.to_string())
            .map_err(|e| Error::io(format!("write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, file).map_err(|e| Error::io("rename state file", e))
    }

    pub fn load(name: &str) -> Result<Record> {
        let p = pool_file(name)
            .map_err(|_| Error::NotFound(format!("pool '{name}' (not imported)")))?;
        let s = std::fs::read_to_string(&p)
            .map_err(|_| Error::NotFound(format!("pool '{name}' (not imported)")))?;
        let v: Value = serde_json::from_str(&s)
            .map_err(|e| Error::corrupt(p.display().to_string(), e.to_string()))?;
        let bad = || Error::corrupt(p.display().to_string(), "malformed state file");
        let guid = v["guid"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .ok_or_else(bad)?;
        let devices = v["devices"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .filter_map(|d| d.as_str().map(String::from))
            .collect();
        let errors = v["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| {
                        let g = e[0].as_str()?.parse().ok()?;
                        Some((g, [e[1].as_u64()?, e[2].as_u64()?, e[3].as_u64()?]))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (resilvering, offline) = resilvering_of(guid);
        // The file's own idea of the name must be the name it is filed under.
        if v["name"].as_str().is_some_and(|n| n != name) {
            return Err(bad());
        }
        Ok(Record {
            name: name.to_string(),
            guid,
            devices,
            readonly: v["readonly"].as_bool().unwrap_or(true),
            errors,
            resilvering,
            offline,
        })
    }

    pub fn remove(name: &str) -> Result<()> {
        let p = pool_file(name)
            .map_err(|_| Error::NotFound(format!("pool '{name}' (not imported)")))?;
        std::fs::remove_file(p)
            .map_err(|_| Error::NotFound(format!("pool '{name}' (not imported)")))
    }

    /// Names of all imported pools.
    pub fn all() -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(state_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                // `<pool>.scan.json` is a pool's scan state, not a pool;
                // `resilver-<guid>.json` (older versions) is leaf state.
                n.strip_suffix(".json")
                    .filter(|s| !s.starts_with('.') && !s.ends_with(".scan"))
                    .filter(|s| {
                        !s.strip_prefix("resilver-")
                            .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .filter(|s| ozfs_format::names::check_pool_name(s).is_ok())
                    .map(String::from)
            })
            .collect();
        v.sort();
        v
    }

    /// Open this pool from its devices and restore its error counters.
    pub fn open(&self) -> Result<Arc<Pool>> {
        self.open_mode(false)
    }

    /// Open for writing (the pool must have been imported read-write).
    pub fn open_rw(&self) -> Result<Arc<Pool>> {
        if self.readonly {
            return Err(Error::Invalid(format!(
                "pool '{}' is imported read-only",
                self.name
            )));
        }
        self.open_mode(true)
    }

    fn open_mode(&self, writable: bool) -> Result<Arc<Pool>> {
        let paths: Vec<PathBuf> = self.devices.iter().map(PathBuf::from).collect();
        let found = ozfs_spa::import::discover_paths_mode(&paths, writable)
            .into_iter()
            .find(|p| p.guid == self.guid)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "pool '{}': no devices of this pool are available",
                    self.name
                ))
            })?;
        let mut pool = Pool::open(
            found,
            &PoolOptions {
                readonly: self.readonly,
                max_txg: None,
            },
        )?;
        // The imported name (`zpool import ID NEWNAME`, or a label's name
        // that passed the checks) is the pool's name from now on; the next
        // sync writes it into the labels and the MOS config, as ZFS does.
        pool.name = self.name.clone();
        let o = std::sync::atomic::Ordering::Relaxed;
        pool.root.walk(0, &mut |v, _| {
            if let Some((_, c)) = self.errors.iter().find(|(g, _)| *g == v.guid) {
                v.stats.set(c[0], c[1], c[2]);
            }
            if let Some((_, from)) = self.resilvering.iter().find(|(g, _)| *g == v.guid) {
                v.stats.resilvering.store(true, o);
                v.stats.resilver_from.store(*from, o);
            }
            if let Some((_, from)) = self.offline.iter().find(|(g, _)| *g == v.guid) {
                v.stats.resilver_from.store(*from, o);
            }
        });
        Ok(Arc::new(pool))
    }

    /// Store the pool's current error counters.
    /// (And which leaves still await their resilver.)
    pub fn save_counters(&mut self, pool: &Pool) -> Result<()> {
        let mut errs = Vec::new();
        let mut res = Vec::new();
        let mut off = Vec::new();
        let o = std::sync::atomic::Ordering::Relaxed;
        pool.root.walk(0, &mut |v, _| {
            let (r, w, c) = v.stats.get();
            if r + w + c > 0 {
                errs.push((v.guid, [r, w, c]));
            }
            if v.stats.resilvering.load(o) {
                res.push((v.guid, v.stats.resilver_from.load(o)));
            }
            if v.stats.offline.load(o) {
                off.push((v.guid, v.stats.resilver_from.load(o)));
            }
        });
        self.errors = errs;
        self.resilvering = res;
        self.offline = off;
        self.save()
    }
}

/// Take the pool's writer lock (an exclusive `flock` on `<state dir>/.<pool>.lock`)
/// for the rest of this process, so that two ozfs commands never write one
/// pool at the same time.
pub fn lock_pool(name: &str) -> Result<()> {
    // A process that already holds the lock keeps it (a program running
    // several operations on one pool takes it once).
    static HELD: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if held.iter().any(|n| n == name) {
        return Ok(());
    }
    let f = lock_pool_file(name)?;
    // Held until the process exits.
    std::mem::forget(f);
    held.push(name.to_string());
    Ok(())
}

/// The pool's writer lock, held as long as the returned file is open (the
/// daemon keeps it while it holds the pool).
pub fn lock_pool_file(name: &str) -> Result<std::fs::File> {
    use std::os::unix::io::AsRawFd;
    let dir = state_dir();
    check_name(name)?;
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let path = dir.join(format!(".{name}.lock"));
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    // SAFETY: flock on a valid descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        // (Never ask from inside the daemon: it would wait for itself.)
        if !in_daemon() && crate::client::daemon_holds(name) {
            return Err(Error::Invalid(format!(
                "pool '{name}' is busy: held by the ozfs daemon; use its mounts ('ozfs zfs mount')"
            )));
        }
        return Err(Error::Invalid(format!(
            "pool '{name}' is busy: another ozfs command is changing it"
        )));
    }
    Ok(f)
}

/// The process that holds pools for others (the daemon): it lends its
/// writers and keeps the records of what it holds.
pub trait Holder: Send + Sync {
    /// A lease on the writer of `pool`; `None` when this holder does not hold it.
    fn lease(&self, pool: &str) -> Option<Result<Lease>>;
    /// Change the record of a held pool (its device list) and save it with
    /// the pool's current counters and leaf states.
    fn update_record(&self, pool: &str, change: &mut dyn FnMut(&mut Record)) -> Result<()>;
    /// Start a scan of a held pool in the background.
    fn start_scan(&self, pool: &str, mode: ozfs_dsl::scrub::ScanMode) -> Result<()>;
    /// Zero the error counters of a held pool (all devices, or one).
    fn clear(&self, pool: &str, dev: Option<&str>) -> Result<()>;
}

static HOLDER: std::sync::OnceLock<Arc<dyn Holder>> = std::sync::OnceLock::new();

/// Install this process's holder (the daemon does, once, at start).
pub fn set_holder(h: Arc<dyn Holder>) {
    let _ = HOLDER.set(h);
}

/// This process's holder, if it is the daemon.
pub fn holder() -> Option<&'static Arc<dyn Holder>> {
    HOLDER.get()
}

/// Is this process the daemon?
pub fn in_daemon() -> bool {
    HOLDER.get().is_some()
}

/// Open a pool that `zpool import` has recorded (read-only, at its last
/// synced state).
pub fn open_imported(name: &str) -> Result<(Record, Arc<Pool>)> {
    let name = crate::names::pool_of(name);
    let rec = Record::load(name)
        .map_err(|_| Error::NotFound(format!("cannot open '{name}': no such pool")))?;
    let pool = rec
        .open()
        .map_err(|e| e.context(&format!("cannot open '{name}'")))?;
    Ok((rec, pool))
}

/// The writer of the pool of `dataset` (a pool, dataset or snapshot name):
/// inside the daemon a lease on the writer it holds; elsewhere the pool
/// opened for writing under its lock (held until this process exits).
pub fn writer_for(dataset: &str) -> Result<Writer> {
    let pool_name = crate::names::pool_of(dataset);
    if let Some(h) = holder() {
        return match h.lease(pool_name) {
            Some(l) => l
                .map(Writer::Shared)
                .map_err(|e| e.context(&format!("cannot open '{pool_name}'"))),
            None => Err(Error::Invalid(format!(
                "cannot open '{pool_name}': the ozfs daemon does not hold this pool"
            ))),
        };
    }
    lock_pool(pool_name).map_err(|e| e.context(&format!("cannot open '{dataset}'")))?;
    let rec = Record::load(pool_name).map_err(|_| {
        Error::NotFound(format!(
            "cannot open '{dataset}': no such pool '{pool_name}'"
        ))
    })?;
    let pool = rec
        .open_rw()
        .map_err(|e| e.context(&format!("cannot open '{dataset}'")))?;
    PoolWriter::open(pool)
        .map(Writer::Own)
        .map_err(|e| e.context(&format!("cannot open '{dataset}'")))
}
