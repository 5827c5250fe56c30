//! The operations that change a pool, as data: one [`Request`] enum, one
//! [`Response`] enum, both serde, and [`execute`], which runs a request
//! here or in the daemon.
//!
//! Whether a request is sent to the daemon is decided from the request
//! itself ([`Request::pool`]): when the daemon holds that pool it is the
//! pool's only writer, so the request goes over its socket, and what comes
//! back is the same typed [`Response`] a local run returns — the front end
//! renders one value, whichever process did the work.
//!
//! Local paths in a request are absolute (the daemon has its own working
//! directory); a stream or payload read from standard input is spooled to
//! a file in the state directory and named in the request.
//!
//! Invariants: every variant names exactly one pool; the wire form is one
//! JSON line (`{"cmd":"op","op":<Request>}`), the reply
//! `{"ok":true,"result":<Response>}` or `{"ok":false,"err":…,"kind":…}`,
//! and the error's kind survives the trip ([`error_from_wire`]).

use crate::dataset::{DestroyOpts, DestroyPlan, Received};
use crate::devices::TopSpec;
use crate::error::{Error, Result};
use crate::history::Invocation;
use crate::scan::{ProgressFn, ScanState, ScrubAction};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A change to one pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    Create {
        name: String,
        parents: bool,
        props: Vec<(String, String)>,
        /// `-u`: do not mount it.
        no_mount: bool,
        /// `-V SIZE [-s] [-b BLOCKSIZE]`: a volume, not a file system.
        #[serde(default)]
        volume: Option<crate::dataset::VolumeSpec>,
    },
    Destroy {
        name: String,
        opts: DestroyOpts,
    },
    Set {
        assigns: Vec<(String, String)>,
        datasets: Vec<String>,
    },
    /// `zpool set`.
    PoolSet {
        pool: String,
        assigns: Vec<(String, String)>,
    },
    /// `zpool upgrade POOL`: feature flags, every feature enabled.
    Upgrade {
        pool: String,
    },
    Inherit {
        prop: String,
        recursive: bool,
        datasets: Vec<String>,
    },
    Snapshot {
        names: Vec<String>,
        recursive: bool,
    },
    Rollback {
        snapshot: String,
        recursive: bool,
    },
    Clone {
        snapshot: String,
        target: String,
        no_mount: bool,
    },
    Rename {
        from: String,
        to: String,
        recursive: bool,
    },
    Promote {
        clone: String,
    },
    Hold {
        tag: String,
        snapshots: Vec<String>,
        /// false: release.
        hold: bool,
        /// `-r`: the snapshot of that name in every descendant too.
        recursive: bool,
    },
    Receive {
        target: String,
        force: bool,
        dry_run: bool,
        no_mount: bool,
        stream: Input,
    },
    Scrub {
        pool: String,
        action: ScrubAction,
    },
    Clear {
        pool: String,
        device: Option<String>,
    },
    Replace {
        pool: String,
        old: String,
        /// Absolute.
        new: String,
    },
    Offline {
        pool: String,
        devices: Vec<String>,
        /// false: online.
        offline: bool,
    },
    Attach {
        pool: String,
        device: String,
        /// Absolute.
        new: String,
    },
    Detach {
        pool: String,
        device: String,
    },
    Add {
        pool: String,
        tops: Vec<TopSpec>,
        spares: Vec<PathBuf>,
    },
    Remove {
        pool: String,
        devices: Vec<String>,
    },
    /// Copy a local file or tree (absolute) into a file system.
    CopyIn {
        src: PathBuf,
        dataset: String,
        path: String,
        recursive: bool,
        /// Load the key of an encrypted file system first (`-l`, `-L`).
        #[serde(default)]
        keys: crate::crypt::KeyLoad,
    },
    /// `zfs load-key`: prove encryption root `dataset`'s key and keep it
    /// in the process that holds the pool (the daemon).
    LoadKey {
        dataset: String,
        location: Option<String>,
        dry_run: bool,
    },
    /// `zfs unload-key`.
    UnloadKey {
        dataset: String,
    },
    /// `zfs change-key`: a new wrapping key for an encryption root (or,
    /// `inherit`, its parent's root's).
    ChangeKey {
        dataset: String,
        /// `-l`: load the current key first.
        load: bool,
        inherit: bool,
        /// `keyformat`, `keylocation`, `pbkdf2iters`.
        props: Vec<(String, String)>,
    },
    /// Remove a file or tree of a file system.
    Rm {
        dataset: String,
        path: String,
        recursive: bool,
        /// Load the key of an encrypted file system first (`-l`, `-L`).
        #[serde(default)]
        keys: crate::crypt::KeyLoad,
    },
    /// Commit the pool's open transaction group now (`zpool sync`).
    Sync {
        pool: String,
    },
    /// Store one pre-compressed record.
    RawioWrite {
        dataset: String,
        path: String,
        record: u64,
        tag: u8,
        lsize: u64,
        cksum: Option<(u8, [u64; 4])>,
        upgrade: bool,
        payload: Input,
    },
}

/// Where a request's bytes (a send stream, a record's payload) come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Input {
    /// This process's standard input (spooled to a file when the request
    /// is sent to the daemon).
    Stdin,
    File(PathBuf),
}

impl Input {
    /// Open for reading.
    pub fn open(&self, what: &str) -> Result<Box<dyn std::io::Read>> {
        match self {
            Input::Stdin => Ok(Box::new(std::io::stdin())),
            Input::File(p) => std::fs::File::open(p)
                .map(|f| Box::new(f) as Box<dyn std::io::Read>)
                .map_err(|e| Error::io(format!("{what}: {}", p.display()), e)),
        }
    }

    /// Its size when it is a regular file (for progress).
    pub fn size(&self) -> Option<u64> {
        let p = match self {
            Input::Stdin => std::path::Path::new("/proc/self/fd/0"),
            Input::File(p) => p.as_path(),
        };
        std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    }
}

/// What a running request reports as it goes.
pub struct Progress<'a> {
    /// A scan's state, about once a second.
    pub scan: &'a ProgressFn<'a>,
    /// Bytes of input consumed so far (receive).
    pub bytes: &'a (dyn Fn(u64) + Sync + 'a),
}

impl Progress<'_> {
    /// Reports nothing.
    pub fn none() -> Progress<'static> {
        Progress {
            scan: &|_| {},
            bytes: &|_| {},
        }
    }
}

/// What a request did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Response {
    Done,
    /// File systems created (parents first).
    Created(Vec<String>),
    Destroyed(DestroyPlan),
    Snapshots(Vec<String>),
    Received(Vec<Received>),
    /// A scan ran here to its end (no daemon).
    Scanned(Option<ScanStateData>),
    /// A stored record: its payload's bytes, PSIZE and LSIZE.
    Stored {
        bytes: u64,
        psize: u64,
        lsize: u64,
    },
}

/// A finished scan's state, as it travels.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScanStateData {
    pub func: String,
    pub state: String,
    pub examined: u64,
    pub repaired: u64,
    pub errors: u64,
}

impl From<&ScanState> for ScanStateData {
    fn from(s: &ScanState) -> Self {
        ScanStateData {
            func: s.func.clone(),
            state: s.state.clone(),
            examined: s.examined,
            repaired: s.repaired,
            errors: s.errors,
        }
    }
}

impl Request {
    /// The pool this request changes.
    pub fn pool(&self) -> String {
        use Request::*;
        let first = |v: &[String]| v.first().cloned().unwrap_or_default();
        let name = match self {
            Create { name, .. } | Destroy { name, .. } => name.clone(),
            Set { datasets, .. } | Inherit { datasets, .. } => first(datasets),
            Snapshot { names, .. } => first(names),
            Hold { snapshots, .. } => first(snapshots),
            Rollback { snapshot, .. } => snapshot.clone(),
            Clone { target, .. } => target.clone(),
            Rename { from, .. } => from.clone(),
            Promote { clone } => clone.clone(),
            Receive { target, .. } => target.clone(),
            Scrub { pool, .. }
            | Clear { pool, .. }
            | Replace { pool, .. }
            | Offline { pool, .. }
            | Attach { pool, .. }
            | Detach { pool, .. }
            | Add { pool, .. }
            | Remove { pool, .. }
            | Sync { pool }
            | PoolSet { pool, .. }
            | Upgrade { pool } => return pool.clone(),
            CopyIn { dataset, .. }
            | Rm { dataset, .. }
            | RawioWrite { dataset, .. }
            | LoadKey { dataset, .. }
            | UnloadKey { dataset }
            | ChangeKey { dataset, .. } => dataset.clone(),
        };
        crate::names::pool_of(&name).to_string()
    }

    /// Every pool this request names must be the one it changes: a
    /// request naming datasets of two pools is refused (it could not be
    /// run by one writer).
    pub fn check(&self) -> Result<()> {
        use Request::*;
        let pool = self.pool();
        let names: Vec<&String> = match self {
            Set { datasets, .. } | Inherit { datasets, .. } => datasets.iter().collect(),
            Snapshot { names, .. } => names.iter().collect(),
            Hold { snapshots, .. } => snapshots.iter().collect(),
            Clone {
                snapshot, target, ..
            } => vec![snapshot, target],
            Rename { from, to, .. } => vec![from, to],
            _ => Vec::new(),
        };
        match names.iter().find(|n| crate::names::pool_of(n) != pool) {
            Some(n) => Err(Error::Invalid(format!(
                "'{n}' is not in pool '{pool}': one request changes one pool"
            ))),
            None => Ok(()),
        }
    }

    /// Whether a successful run changed the pool, so that ZFS would
    /// record the command in the pool's history (a dry run, a copy, a
    /// record write or a sync is not logged).
    pub fn logged(&self) -> bool {
        use Request::*;
        match self {
            Destroy { opts, .. } => !opts.dry_run,
            Receive { dry_run, .. } => !dry_run,
            CopyIn { .. }
            | Rm { .. }
            | RawioWrite { .. }
            | Sync { .. }
            | LoadKey { .. }
            | UnloadKey { .. } => false,
            _ => true,
        }
    }

    /// [`Request::run`], then, when it succeeded and changed the pool,
    /// `inv` appended to the pool's history in a txg of its own. As in
    /// ZFS, a history that cannot be written does not undo or fail the
    /// change: the error is returned beside the response.
    pub fn run_logged(
        &self,
        hooks: &Progress<'_>,
        inv: Option<&Invocation>,
    ) -> Result<(Response, Option<Error>)> {
        let r = self.run(hooks)?;
        let logged = match inv {
            Some(inv) if self.logged() => crate::history::log(&self.pool(), inv).err(),
            _ => None,
        };
        Ok((r, logged))
    }

    /// Run here (this process is the pool's writer, or the daemon).
    pub fn run(&self, hooks: &Progress<'_>) -> Result<Response> {
        let progress = hooks.scan;
        use crate::{copy, dataset as ds, devices as dv, rawio, scan};
        self.check()?;
        Ok(match self {
            Request::Create {
                name,
                parents,
                props,
                volume: None,
                ..
            } => Response::Created(ds::create(name, *parents, props)?),
            Request::Create {
                name,
                parents,
                props,
                volume: Some(v),
                ..
            } => Response::Created(ds::create_volume(name, *parents, v, props)?),
            Request::Destroy { name, opts } => Response::Destroyed(ds::destroy(name, opts)?),
            Request::Set { assigns, datasets } => {
                ds::set(assigns, datasets)?;
                Response::Done
            }
            Request::Inherit {
                prop,
                recursive,
                datasets,
            } => {
                ds::inherit(prop, *recursive, datasets)?;
                Response::Done
            }
            Request::Snapshot { names, recursive } => {
                Response::Snapshots(ds::snapshot(names, *recursive)?)
            }
            Request::Rollback {
                snapshot,
                recursive,
            } => {
                ds::rollback(snapshot, *recursive)?;
                Response::Done
            }
            Request::Clone {
                snapshot, target, ..
            } => {
                ds::clone(snapshot, target)?;
                Response::Done
            }
            Request::Rename {
                from,
                to,
                recursive,
            } => {
                ds::rename(from, to, *recursive)?;
                Response::Done
            }
            Request::Promote { clone } => {
                ds::promote(clone)?;
                Response::Done
            }
            Request::Hold {
                tag,
                snapshots,
                hold,
                recursive,
            } => {
                ds::hold(tag, snapshots, *hold, *recursive)?;
                Response::Done
            }
            Request::Receive {
                target,
                force,
                dry_run,
                stream,
                ..
            } => {
                let f = stream.open("cannot receive")?;
                let mut input = std::io::BufReader::with_capacity(1 << 20, f);
                Response::Received(ds::receive(
                    target,
                    *force,
                    *dry_run,
                    &mut input,
                    &mut |b| (hooks.bytes)(b),
                )?)
            }
            Request::Scrub { pool, action } => Response::Scanned(
                scan::scrub(pool, *action, progress)?
                    .as_ref()
                    .map(ScanStateData::from),
            ),
            Request::Clear { pool, device } => {
                dv::clear(pool, device.as_deref())?;
                Response::Done
            }
            Request::Replace { pool, old, new } => {
                dv::replace(pool, old, new, progress)?;
                Response::Done
            }
            Request::Offline {
                pool,
                devices,
                offline,
            } => {
                dv::set_offline(pool, devices, *offline, progress)?;
                Response::Done
            }
            Request::Attach { pool, device, new } => {
                dv::attach(pool, device, new, progress)?;
                Response::Done
            }
            Request::Detach { pool, device } => {
                dv::detach(pool, device)?;
                Response::Done
            }
            Request::Add { pool, tops, spares } => {
                dv::add(pool, tops, spares)?;
                Response::Done
            }
            Request::Remove { pool, devices } => {
                dv::remove(pool, devices)?;
                Response::Done
            }
            Request::CopyIn {
                src,
                dataset,
                path,
                recursive,
                keys,
            } => {
                copy::copy_in_with(src, dataset, path, *recursive, keys)?;
                Response::Done
            }
            Request::LoadKey {
                dataset,
                location,
                dry_run,
            } => {
                crate::crypt::load_key(dataset, location.as_deref(), *dry_run)?;
                Response::Done
            }
            Request::UnloadKey { dataset } => {
                crate::crypt::unload_key(dataset)?;
                Response::Done
            }
            Request::ChangeKey {
                dataset,
                load,
                inherit,
                props,
            } => {
                crate::crypt::change_key(dataset, *load, *inherit, props)?;
                Response::Done
            }
            Request::Rm {
                dataset,
                path,
                recursive,
                keys,
            } => {
                copy::remove_with(dataset, path, *recursive, keys)?;
                Response::Done
            }
            Request::Sync { pool } => {
                crate::host::writer_for(pool)?.sync()?;
                Response::Done
            }
            Request::PoolSet { pool, assigns } => {
                crate::pool::set_props(pool, assigns)?;
                Response::Done
            }
            Request::Upgrade { pool } => {
                crate::pool::upgrade(pool)?;
                Response::Done
            }
            Request::RawioWrite {
                dataset,
                path,
                record,
                tag,
                lsize,
                cksum,
                upgrade,
                payload,
            } => {
                let (bytes, psize, lsize) = rawio::write_file(
                    dataset, path, *record, *tag, *lsize, *cksum, *upgrade, payload,
                )?;
                Response::Stored {
                    bytes,
                    psize,
                    lsize,
                }
            }
        })
    }
}

/// An error as it travels: its kind's name and its message.
pub fn error_to_wire(e: &Error) -> (&'static str, String) {
    (e.kind().name(), e.to_string())
}

/// The error a reply reports, of the kind it names, displaying exactly the
/// message the daemon's error displayed.
pub fn error_from_wire(kind: &str, msg: String) -> Error {
    use ozfs_format::ErrorKind as K;
    match K::from_name(kind) {
        Some(K::NotFound) => Error::NotFound(msg),
        Some(K::Exists) => Error::Exists(msg),
        Some(K::NotEmpty) => Error::NotEmpty(msg),
        Some(K::NotDir) => Error::NotDir(msg),
        Some(K::IsDir) => Error::IsDir(msg),
        Some(K::NoSpace) => Error::NoSpace(msg),
        Some(K::Busy) => Error::Busy(msg),
        Some(K::Permission) => Error::Permission(msg),
        Some(K::Quota) => Error::Quota(msg),
        // Kinds whose variants add words of their own travel as text.
        _ => Error::Invalid(msg),
    }
}

/// Run `req`: in the daemon when it holds the request's pool (and this is
/// not the daemon), here otherwise. A forwarded scan's progress is the
/// caller's to follow ([`crate::scan::wait_done`]).
pub fn execute(req: Request, hooks: &Progress<'_>) -> Result<Response> {
    execute_as(req, hooks, None)
}

/// [`execute`], recording `inv` (the command line that asked for it) in
/// the pool's history when the request changed the pool
/// ([`Request::run_logged`]; a failure to log is not the request's).
pub fn execute_as(
    req: Request,
    hooks: &Progress<'_>,
    inv: Option<&Invocation>,
) -> Result<Response> {
    req.check()?;
    let pool = req.pool();
    if crate::host::in_daemon() || pool.is_empty() || !crate::client::daemon_holds(&pool) {
        return req.run_logged(hooks, inv).map(|(r, _)| r);
    }
    forward(req, inv)
}

/// A payload larger than this is refused (and never spooled whole).
pub const MAX_PAYLOAD: u64 = 16 << 20;

/// Send `req` to the daemon, spooling standard input first where the
/// request reads it.
fn forward(mut req: Request, inv: Option<&Invocation>) -> Result<Response> {
    if let Request::CopyIn { src, .. } = &mut req {
        if let Ok(abs) = std::path::absolute(&*src) {
            *src = abs;
        }
    }
    let mut spool = None;
    let (input, cap, verb) = match &mut req {
        Request::Receive { stream, .. } => (Some(stream), u64::MAX, "receive"),
        Request::RawioWrite { payload, .. } => (Some(payload), MAX_PAYLOAD + 1, "write"),
        _ => (None, 0, ""),
    };
    if let Some(input @ Input::Stdin) = input {
        use std::io::Read;
        let p = crate::host::state_dir().join(format!(".recv-{}.stream", std::process::id()));
        let copied = std::fs::File::create(&p)
            .and_then(|mut f| std::io::copy(&mut std::io::stdin().lock().take(cap), &mut f));
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&p);
            return Err(Error::io(
                format!("cannot {verb}: spooling standard input"),
                e,
            ));
        }
        *input = Input::File(p.clone());
        spool = Some(p);
    }
    let v = serde_json::json!({"cmd": "op", "op": req, "history": inv});
    let reply = crate::client::call(&v);
    if let Some(p) = spool {
        let _ = std::fs::remove_file(p);
    }
    let reply = match reply {
        Some(r) => r?.check()?,
        None => return Err(Error::Invalid("the ozfs daemon went away".into())),
    };
    serde_json::from_value(reply.v["result"].clone())
        .map_err(|e| Error::Invalid(format!("ozfs daemon: bad reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_one_pool() {
        let r = Request::Clone {
            snapshot: "tank/a@s".into(),
            target: "other/b".into(),
            no_mount: false,
        };
        assert_eq!(r.pool(), "other");
        let e = r.check().expect_err("two pools");
        assert!(
            e.to_string().contains("one request changes one pool"),
            "{e}"
        );
        let ok = Request::Rm {
            dataset: "tank/a".into(),
            path: "/x".into(),
            recursive: false,
            keys: Default::default(),
        };
        assert_eq!(ok.pool(), "tank");
        ok.check().expect("one pool");
    }

    #[test]
    fn requests_travel_as_json_and_back() {
        let r = Request::Destroy {
            name: "tank/a@s1%s3".into(),
            opts: DestroyOpts {
                recursive: true,
                dry_run: true,
                defer: false,
            },
        };
        let v = serde_json::to_value(&r).expect("serialize");
        let back: Request = serde_json::from_value(v).expect("deserialize");
        match back {
            Request::Destroy { name, opts } => {
                assert_eq!(name, "tank/a@s1%s3");
                assert!(opts.recursive && opts.dry_run && !opts.defer);
            }
            other => panic!("came back as {other:?}"),
        }
    }

    #[test]
    fn error_kinds_survive_the_wire_with_their_text() {
        let cases = [
            Error::NotFound("cannot open 'tank/x': dataset does not exist".into()),
            Error::not_found("tank/x"),
            Error::Exists("cannot create 'tank/a': dataset already exists".into()),
            Error::NotEmpty("d: directory not empty".into()),
            Error::NotDir("d: not a directory".into()),
            Error::IsDir("d: is a directory".into()),
            Error::Busy("cannot destroy 'tank/a': dataset is busy".into()),
            Error::Permission("hard links to directories are not allowed".into()),
            Error::Invalid("bad".into()),
        ];
        for e in cases {
            let (kind, msg) = error_to_wire(&e);
            let back = error_from_wire(kind, msg.clone());
            assert_eq!(back.kind(), e.kind(), "{e}");
            assert_eq!(back.to_string(), e.to_string());
            assert_eq!(back.errno(), e.errno());
        }
        // Kinds whose display adds words travel as text, message intact.
        let c = Error::corrupt("label 0", "bad nvlist");
        let (kind, msg) = error_to_wire(&c);
        assert_eq!(kind, "corrupt");
        assert_eq!(error_from_wire(kind, msg).to_string(), c.to_string());
    }
}
