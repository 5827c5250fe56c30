//! Dataset operations: create, destroy, set, inherit, snapshot, rollback,
//! clone, rename, promote, hold/release, receive.
//!
//! Each takes typed options, runs under the pool's writer
//! ([`writer_for`]: the process's own, or a lease from the daemon), syncs
//! before it returns, and returns what it did (the datasets created, the
//! destroy plan, the streams received) for the front end to render.
//!
//! Invariants: nothing is changed before every name in the request has
//! been checked (a refused request leaves the pool as it was); a request
//! that changes several datasets syncs after each, in an order that never
//! leaves a dangling reference (snapshots before their file system,
//! children before parents).

use crate::error::{invalid, Error, Result};
use crate::host::writer_for;
use ozfs_dsl::DatasetInfo;
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::time::Instant;

fn no_such(name: &str) -> Error {
    Error::NotFound(format!("cannot open '{name}': dataset does not exist"))
}

/// `zfs create [-p] [-o prop=value]... FS`. Returns the file systems
/// created, parents first (none when `-p` found FS already there).
pub fn create(name: &str, parents: bool, props: &[(String, String)]) -> Result<Vec<String>> {
    let mut w = writer_for(name)?;
    let mut settings = Vec::new();
    let (crypt_props, props): (Vec<_>, Vec<_>) = props.iter().partition(|(k, _)| {
        matches!(
            k.as_str(),
            "encryption" | "keyformat" | "keylocation" | "pbkdf2iters"
        )
    });
    let mut crypt = Some(crate::crypt::new_crypt(name, &crypt_props)?);
    for (k, v) in props {
        settings.push((
            k.clone(),
            ozfs_dsl::props::parse_setting(k, v)
                .map_err(|e| e.context(&format!("cannot create '{name}'")))?,
        ));
    }
    let mut to_create = vec![name.to_string()];
    if parents {
        let dsl = w.dsl();
        if dsl.lookup(name).is_ok() {
            return Ok(Vec::new());
        }
        let mut cur = name.to_string();
        while let Some((parent, _)) = cur.rsplit_once('/') {
            if dsl.lookup(parent).is_ok() {
                break;
            }
            to_create.push(parent.to_string());
            cur = parent.to_string();
        }
        to_create.reverse();
    }
    for (i, n) in to_create.iter().enumerate() {
        let p = if i + 1 == to_create.len() {
            settings.clone()
        } else {
            Vec::new()
        };
        let c = if i + 1 == to_create.len() {
            crypt
                .take()
                .unwrap_or(ozfs_dsl::crypt::NewCrypt::Inherit { suite: None })
        } else {
            ozfs_dsl::crypt::NewCrypt::Inherit { suite: None }
        };
        ozfs_dsl::create::create_filesystem_crypt(&mut w, n, &p, c)?;
        w.sync()
            .map_err(|e| e.context(&format!("cannot create '{n}'")))?;
    }
    Ok(to_create)
}

/// What `zfs create -V` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    /// `volsize` in bytes.
    pub size: u64,
    /// `-b` (or `-o volblocksize=`): the block size; None for the default.
    pub blocksize: Option<u64>,
    /// `-s`: sparse (no `refreservation`).
    pub sparse: bool,
}

/// `zfs create [-p] [-s] [-b BLOCKSIZE] -V SIZE [-o prop=value]... VOL`:
/// a volume, its parents made first with `-p` (file systems). A volume
/// that is not sparse gets the `refreservation` OpenZFS gives it (unless
/// one is set); `volsize` and `volblocksize` among the properties are
/// the volume's own. Returns the datasets created, parents first.
pub fn create_volume(
    name: &str,
    parents: bool,
    spec: &VolumeSpec,
    props: &[(String, String)],
) -> Result<Vec<String>> {
    let fail = |e: Error| e.context(&format!("cannot create '{name}'"));
    let mut spec = spec.clone();
    let mut rest = Vec::new();
    for (k, v) in props {
        match k.as_str() {
            "volsize" => {
                spec.size = ozfs_dsl::props::parse_size(v)
                    .ok_or_else(|| fail(invalid(format!("bad volume size '{v}'"))))?
            }
            "volblocksize" => {
                spec.blocksize = Some(
                    ozfs_dsl::props::parse_size(v)
                        .ok_or_else(|| fail(invalid(format!("bad volume block size '{v}'"))))?,
                )
            }
            _ => rest.push((k.clone(), v.clone())),
        }
    }
    let mut w = writer_for(name)?;
    if w.dsl().lookup(name).is_ok() {
        return Err(Error::Exists(format!(
            "cannot create '{name}': dataset already exists"
        )));
    }
    let blocksize = spec
        .blocksize
        .unwrap_or_else(|| ozfs_dsl::create::volblocksize_default(w.version));
    // As `zfs create` does: a size that is not a multiple of the block
    // size is rounded up to one.
    if blocksize.is_power_of_two() && !spec.size.is_multiple_of(blocksize) {
        spec.size = spec.size.div_ceil(blocksize).saturating_mul(blocksize);
    }
    ozfs_dsl::create::check_volume(&w, spec.size, blocksize).map_err(fail)?;
    let has = |p: &str| rest.iter().any(|(k, _)| k == p);
    if !spec.sparse && !has("refreservation") && !has("reservation") {
        let copies = rest
            .iter()
            .find(|(k, _)| k == "copies")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or(1);
        let resv = ozfs_dsl::create::zvol_reservation(&w.pool.root, spec.size, blocksize, copies);
        // Pools before version 9 have no refreservation (OpenZFS then
        // sets the reservation).
        let prop = if w.version >= 9 {
            "refreservation"
        } else {
            "reservation"
        };
        rest.push((prop.to_string(), resv.to_string()));
    }
    let mut created = Vec::new();
    if parents {
        if let Some((parent, _)) = name.rsplit_once('/') {
            if w.dsl().lookup(parent).is_err() {
                drop(w);
                created = create(parent, true, &[])?;
                w = writer_for(name)?;
            }
        }
    }
    let (crypt_props, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(k, _)| {
        matches!(
            k.as_str(),
            "encryption" | "keyformat" | "keylocation" | "pbkdf2iters"
        )
    });
    let crypt_refs: Vec<&(String, String)> = crypt_props.iter().collect();
    let crypt = crate::crypt::new_crypt(name, &crypt_refs)?;
    let mut settings = Vec::new();
    for (k, v) in &rest {
        settings.push((
            k.clone(),
            ozfs_dsl::props::parse_setting(k, v).map_err(fail)?,
        ));
    }
    ozfs_dsl::create::create_volume(&mut w, name, spec.size, blocksize, &settings, crypt)?;
    w.sync().map_err(fail)?;
    created.push(name.to_string());
    Ok(created)
}

/// What `zfs destroy` is asked to do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DestroyOpts {
    /// `-r` / `-R`: descendants too.
    pub recursive: bool,
    /// `-n`: plan only.
    pub dry_run: bool,
    /// `-d`: defer (a snapshot with holds is destroyed when released; ozfs
    /// destroys what has no holds now).
    pub defer: bool,
}

/// What a destroy removed (or, dry, would remove), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestroyPlan {
    /// Snapshots, oldest first.
    pub snapshots: Vec<String>,
    /// File systems, children first.
    pub filesystems: Vec<String>,
    /// Nothing was destroyed (`-n`).
    pub dry_run: bool,
}

impl DestroyPlan {
    /// Every dataset of the plan in the order it is destroyed.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.snapshots.iter().chain(self.filesystems.iter())
    }
}

/// `zfs destroy [-rRnd] FS|SNAP[%SNAP][,SNAP]...`
pub fn destroy(name: &str, o: &DestroyOpts) -> Result<DestroyPlan> {
    let recursive = o.recursive;
    let mut w = writer_for(name)?;
    let dsl = w.dsl();
    let fs_name = name.split('@').next().unwrap_or(name);
    let ds = dsl.lookup(fs_name).map_err(|_| no_such(fs_name))?;
    let tree: Vec<DatasetInfo> = if recursive {
        dsl.list(&ds, false, None)?
    } else {
        vec![ds.clone()]
    };
    // Snapshots first (oldest first), then file systems (children first).
    let mut snaps: Vec<String> = Vec::new();
    let mut filesystems: Vec<String> = Vec::new();
    match name.split_once('@') {
        Some((_, spec)) => {
            for fs in &tree {
                let mut all = dsl.snapshots(fs)?;
                all.sort_by_key(|s| s.ds.creation_txg);
                let short = |s: &DatasetInfo| s.name.rsplit('@').next().unwrap_or("").to_string();
                let names: Vec<String> = all.iter().map(short).collect();
                for part in spec.split(',') {
                    match part.split_once('%') {
                        Some((from, to)) => {
                            let lo = if from.is_empty() {
                                Some(0)
                            } else {
                                names.iter().position(|n| n == from)
                            };
                            let hi = if to.is_empty() {
                                names.len().checked_sub(1)
                            } else {
                                names.iter().position(|n| n == to)
                            };
                            if let (Some(lo), Some(hi)) = (lo, hi) {
                                for s in all.iter().take(hi + 1).skip(lo) {
                                    snaps.push(s.name.clone());
                                }
                            } else if fs.name == fs_name {
                                return Err(Error::NotFound(format!(
                                    "cannot destroy '{name}': snapshot range '{part}' does not exist"
                                )));
                            }
                        }
                        None => {
                            if names.iter().any(|n| n == part) {
                                snaps.push(format!("{}@{part}", fs.name));
                            } else if !recursive {
                                return Err(Error::NotFound(format!(
                                    "could not find any snapshots to destroy; check snapshot names.\n'{}@{part}'",
                                    fs.name
                                )));
                            }
                        }
                    }
                }
            }
            if snaps.is_empty() {
                return Err(Error::NotFound(format!(
                    "could not find any snapshots to destroy; check snapshot names.\n'{name}'"
                )));
            }
        }
        None => {
            for fs in &tree {
                let mut all = dsl.snapshots(fs)?;
                if !recursive && !all.is_empty() {
                    return Err(invalid(format!(
                        "cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets:\n{}",
                        all.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join("\n")
                    )));
                }
                all.sort_by_key(|s| s.ds.creation_txg);
                snaps.extend(all.into_iter().map(|s| s.name));
                filesystems.push(fs.name.clone());
            }
            filesystems.sort_by_key(|n| std::cmp::Reverse(n.matches('/').count()));
        }
    }
    snaps.dedup();
    let plan = DestroyPlan {
        snapshots: snaps,
        filesystems,
        dry_run: o.dry_run,
    };
    if o.dry_run {
        return Ok(plan);
    }
    for v in &plan.snapshots {
        w.destroy_snapshot(v)
            .and_then(|()| w.sync())
            .map_err(|e| e.context(&format!("cannot destroy '{v}'")))?;
    }
    for v in &plan.filesystems {
        w.destroy_filesystem(v)?;
        w.sync()
            .map_err(|e| e.context(&format!("cannot destroy '{v}'")))?;
    }
    Ok(plan)
}

/// Properties fixed at creation.
const READONLY_AFTER_CREATE: &[&str] = &["version", "utf8only", "normalization", "casesensitivity"];

/// `zfs set prop=value... DATASET...`
pub fn set(assigns: &[(String, String)], datasets: &[String]) -> Result<()> {
    for ds_name in datasets {
        let mut w = writer_for(ds_name)?;
        let ds = w.dsl().lookup(ds_name).map_err(|_| no_such(ds_name))?;
        if ds.is_snapshot {
            return Err(Error::Unsupported {
                what: format!("cannot set property for '{ds_name}'"),
                detail: "snapshot properties are not supported".into(),
            });
        }
        let fail = |e: Error| e.context(&format!("cannot set property for '{ds_name}'"));
        let volume = w
            .fs_tx(ds.ds_obj)
            .is_ok_and(|t| t.os.phys.os_type == ozfs_format::objset::OBJSET_TYPE_ZVOL);
        for (k, v) in assigns {
            if k == "volsize" {
                if !volume {
                    return Err(invalid(format!(
                        "cannot set property for '{ds_name}': 'volsize' does not apply to datasets of this type"
                    )));
                }
                let size = ozfs_dsl::props::parse_size(v).ok_or_else(|| {
                    invalid(format!(
                        "cannot set property for '{ds_name}': bad volume size '{v}'"
                    ))
                })?;
                set_volsize(&mut w, &ds, size).map_err(fail)?;
                continue;
            }
            if k == "volblocksize" {
                return Err(invalid(format!(
                    "cannot set property for '{ds_name}': 'volblocksize' is readonly"
                )));
            }
            if volume && ozfs_dsl::props::FILESYSTEM_ONLY.contains(&k.as_str()) {
                return Err(invalid(format!(
                    "cannot set property for '{ds_name}': '{k}' does not apply to datasets of this type"
                )));
            }
            if READONLY_AFTER_CREATE.contains(&k.as_str()) {
                return Err(invalid(format!(
                    "cannot set property for '{ds_name}': '{k}' is readonly"
                )));
            }
            let setting = ozfs_dsl::props::parse_setting(k, v).map_err(fail)?;
            ozfs_dsl::create::set_prop_dir(&mut w, ds.dir_obj, k, &setting)?;
        }
        w.sync().map_err(fail)?;
    }
    Ok(())
}

/// `zfs set volsize=SIZE VOL`: a multiple of the block size; shrinking
/// frees what lies past the new end. A volume whose refreservation is the
/// one its old size called for (not sparse, not set by hand) gets the one
/// its new size calls for, as libzfs does; growing needs that much room.
fn set_volsize(
    w: &mut ozfs_dsl::sync::PoolWriter,
    ds: &ozfs_dsl::DatasetInfo,
    size: u64,
) -> Result<()> {
    let (old, bs) = {
        let t = w.fs_tx(ds.ds_obj)?;
        let i = ozfs_zpl::zvol::info(t)?;
        (i.size, i.blocksize)
    };
    let copies = w
        .dsl()
        .properties(ds, 0)?
        .iter()
        .find(|(n, _, _)| n == "copies")
        .and_then(|(_, v, _)| v.render(true).parse::<u64>().ok())
        .unwrap_or(1);
    let resv = w.refreservation(ds.dir_obj)?;
    let root = w
        .pool
        .root
        .current()
        .ok_or_else(|| invalid("the pool has no vdev tree".to_string()))?;
    let auto = resv != 0 && resv == ozfs_dsl::create::zvol_reservation(&root, old, bs, copies);
    let new_resv = ozfs_dsl::create::zvol_reservation(&root, size, bs, copies);
    if auto && new_resv > resv {
        if let Some((d, root_used)) = w.pool_space()? {
            let avail = d.dspace.saturating_sub(d.slop).saturating_sub(root_used);
            if new_resv - resv > avail {
                return Err(Error::Invalid(
                    "size is greater than available space".into(),
                ));
            }
        }
    }
    {
        let t = w.fs_tx(ds.ds_obj)?;
        let mut z = ozfs_zpl::zvol::ZvolTx::open(t)?;
        z.set_size(size)?;
    }
    if auto {
        ozfs_dsl::create::set_prop_dir(
            w,
            ds.dir_obj,
            "refreservation",
            &ozfs_dsl::create::PropSetting::Num(new_resv),
        )?;
    }
    Ok(())
}

/// `zfs inherit [-r] PROP DATASET...`
pub fn inherit(prop: &str, recursive: bool, datasets: &[String]) -> Result<()> {
    for ds_name in datasets {
        let mut w = writer_for(ds_name)?;
        let dsl = w.dsl();
        let ds = dsl.lookup(ds_name).map_err(|_| no_such(ds_name))?;
        let targets = if recursive {
            dsl.list(&ds, false, None)?
        } else {
            vec![ds]
        };
        for t in targets {
            ozfs_dsl::create::clear_prop_dir(&mut w, t.dir_obj, prop)?;
        }
        w.sync()
            .map_err(|e| e.context(&format!("cannot inherit '{prop}' for '{ds_name}'")))?;
    }
    Ok(())
}

/// `zfs snapshot [-r] FS@SNAP...`. Returns the snapshots made.
pub fn snapshot(names: &[String], recursive: bool) -> Result<Vec<String>> {
    let mut made = Vec::new();
    for full in names {
        let Some((fs, snap)) = full.split_once('@') else {
            return Err(invalid(format!(
                "'{full}' is not a snapshot name (expected filesystem@snapname)"
            )));
        };
        let mut w = writer_for(fs)?;
        let list: Vec<String> = if recursive {
            let dsl = w.dsl();
            let ds = dsl.lookup(fs).map_err(|_| no_such(fs))?;
            dsl.list(&ds, false, None)?
                .into_iter()
                .map(|d| format!("{}@{snap}", d.name))
                .collect()
        } else {
            vec![full.clone()]
        };
        for n in list {
            w.snapshot(&n)?;
            made.push(n);
        }
    }
    Ok(made)
}

/// `zfs rollback [-r] SNAP`: to the most recent snapshot (`recursive`:
/// later snapshots are destroyed first, newest first).
pub fn rollback(snap: &str, recursive: bool) -> Result<()> {
    let Some((fs, _)) = snap.split_once('@') else {
        return Err(invalid(format!("cannot rollback '{snap}': not a snapshot")));
    };
    let mut w = writer_for(fs)?;
    let dsl = w.dsl();
    let target = dsl.lookup(snap).map_err(|_| no_such(snap))?;
    let head = dsl.lookup(fs).map_err(|_| no_such(fs))?;
    if head.ds.prev_snap_obj != target.ds_obj {
        let mut later: Vec<DatasetInfo> = dsl
            .snapshots(&head)?
            .into_iter()
            .filter(|s| s.ds.creation_txg > target.ds.creation_txg)
            .collect();
        if !recursive {
            return Err(invalid(format!(
                "cannot rollback to '{snap}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{}",
                later.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join("\n")
            )));
        }
        later.sort_by_key(|s| std::cmp::Reverse(s.ds.creation_txg));
        for s in later {
            w.destroy_snapshot(&s.name)
                .and_then(|()| w.sync())
                .map_err(|e| e.context(&format!("cannot destroy '{}'", s.name)))?;
        }
    }
    w.rollback_to_latest(fs)
        .and_then(|_| w.sync())
        .map_err(|e| e.context(&format!("cannot rollback '{fs}'")))
}

/// `zfs clone SNAP FS`
pub fn clone(snap: &str, name: &str) -> Result<()> {
    let mut w = writer_for(name)?;
    ozfs_dsl::create::clone_filesystem(&mut w, snap, name)
        .and_then(|_| w.sync())
        .map_err(|e| e.context(&format!("cannot create '{name}'")))
}

/// `zfs rename [-r] OLD NEW` (file systems, and snapshots; `-r` renames a
/// snapshot in every descendant that has it).
pub fn rename(old: &str, new: &str, recursive: bool) -> Result<()> {
    let mut w = writer_for(old)?;
    let pairs: Vec<(String, String)> = match (recursive, old.split_once('@')) {
        (true, Some((fs, osnap))) => {
            let nsnap = new.rsplit('@').next().unwrap_or(new);
            let dsl = w.dsl();
            let top = dsl.lookup(fs).map_err(|_| no_such(fs))?;
            dsl.list(&top, false, None)?
                .into_iter()
                .filter(|d| dsl.lookup(&format!("{}@{osnap}", d.name)).is_ok())
                .map(|d| (format!("{}@{osnap}", d.name), format!("{}@{nsnap}", d.name)))
                .collect()
        }
        (true, None) => {
            return Err(invalid("cannot rename: -r applies to snapshots only"));
        }
        (false, _) => vec![(old.to_string(), new.to_string())],
    };
    for (o, n) in pairs {
        w.rename_dataset(&o, &n)?;
    }
    w.sync()
        .map_err(|e| e.context(&format!("cannot rename '{old}'")))
}

/// `zfs hold [-r] TAG SNAP...` (`hold`) or `zfs release [-r] TAG SNAP...`
/// (`recursive`: the snapshot of that name in every descendant too).
pub fn hold(tag: &str, snaps: &[String], hold: bool, recursive: bool) -> Result<()> {
    let Some(first) = snaps.first() else {
        return Ok(());
    };
    let mut w = writer_for(first)?;
    let snaps = if recursive {
        expand_recursive(&w, snaps)?
    } else {
        snaps.to_vec()
    };
    for s in &snaps {
        if hold {
            w.hold(s, tag)?;
        } else {
            w.release(s, tag)?;
        }
    }
    w.sync()
}

/// Every `FS@SNAP` of `snaps` as `D@SNAP` for each descendant D of FS
/// (itself included) that has a snapshot of that name.
fn expand_recursive(w: &ozfs_dsl::sync::PoolWriter, snaps: &[String]) -> Result<Vec<String>> {
    let dsl = w.dsl();
    let mut out = Vec::new();
    for s in snaps {
        let Some((fs, snap)) = s.split_once('@') else {
            return Err(invalid(format!("'{s}' is not a snapshot name")));
        };
        let top = dsl.lookup(fs).map_err(|_| no_such(fs))?;
        for d in dsl.list(&top, false, None)? {
            let name = format!("{}@{snap}", d.name);
            if d.name == fs || dsl.lookup(&name).is_ok() {
                out.push(name);
            }
        }
    }
    Ok(out)
}

/// `zfs promote CLONE`
pub fn promote(name: &str) -> Result<()> {
    let mut w = writer_for(name)?;
    w.promote(name).and_then(|()| w.sync())
}

/// One stream a receive applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Received {
    pub incremental: bool,
    /// The snapshot the stream was made from (or its source's name).
    pub from_name: String,
    /// The snapshot it created.
    pub snapshot: String,
    pub bytes: u64,
    pub seconds: f64,
}

/// `zfs receive [-F] [-n] TARGET`: apply every stream of `input` (zfs
/// send -I gives several in a row), then sync. `tick` is called with the
/// bytes read so far, for progress.
pub fn receive(
    target: &str,
    force: bool,
    dry_run: bool,
    input: &mut dyn BufRead,
    tick: &mut dyn FnMut(u64),
) -> Result<Vec<Received>> {
    let fail = |e: Error| e.context("cannot receive");
    if dry_run {
        std::io::copy(input, &mut std::io::sink()).map_err(|e| Error::io("cannot receive", e))?;
        return Ok(Vec::new());
    }
    let mut w = writer_for(target)?;
    let opts = ozfs_dsl::recv::RecvOptions { force };
    let mut out = Vec::new();
    let mut first = true;
    loop {
        // Streams follow each other (zfs send -I); the input may end between them.
        let more = input
            .fill_buf()
            .map(|b| !b.is_empty())
            .map_err(|e| Error::io("cannot receive", e))?;
        if !more {
            if first {
                return Err(invalid("cannot receive: failed to read from stream"));
            }
            break;
        }
        first = false;
        let t0 = Instant::now();
        let rs = ozfs_dsl::recv::receive(&mut w, target, input, &opts, tick).map_err(fail)?;
        let secs = t0.elapsed().as_secs_f64().max(0.001);
        out.extend(rs.into_iter().map(|r| Received {
            incremental: r.incremental,
            from_name: r.from_name,
            snapshot: r.snapshot,
            bytes: r.bytes,
            seconds: secs,
        }));
        if target.contains('@') {
            break;
        }
    }
    w.sync().map_err(fail)?;
    Ok(out)
}

/// Where an incremental send starts.
#[derive(Debug, Clone)]
pub enum SendFrom {
    /// `-i SNAP`: one stream from SNAP.
    Snapshot(String),
    /// `-I SNAP`: every snapshot after SNAP, as one compound stream.
    Range(String),
}

/// The snapshot named by `-i`/`-I` (`@a`, `fs@a` or `a`) for `to` (`fs@b`).
fn from_name(from: &str, to: &str) -> String {
    let fs = to.split('@').next().unwrap_or(to);
    if let Some(s) = from.strip_prefix('@') {
        format!("{fs}@{s}")
    } else if from.contains('@') {
        from.to_string()
    } else {
        format!("{fs}@{from}")
    }
}

/// What `zfs send` will write: the (from, to) snapshot pairs, and, for a
/// compound stream (`-I`, `-R`), its header.
pub struct SendPlan {
    dsl: ozfs_dsl::DslPool,
    pairs: Vec<(Option<DatasetInfo>, DatasetInfo)>,
    repl_header: Option<ozfs_format::NvList>,
    compound: Option<String>,
    to_name: String,
    /// `-c`, `-e`, `-L`.
    pub opts: ozfs_dsl::send::SendOpts,
}

/// One stream of a plan, for `-v`/`-n`: (from snapshot, to snapshot,
/// estimated bytes).
#[derive(Debug, Clone)]
pub struct SendEstimate {
    pub from: Option<String>,
    pub to: String,
    pub bytes: u64,
}

/// Plan `zfs send [-R] [-i|-I FROM] SNAP` from the pool's last synced state.
pub fn send_plan(to_name: &str, from: Option<&SendFrom>, replicate: bool) -> Result<SendPlan> {
    if !to_name.contains('@') {
        return Err(invalid(format!("cannot send '{to_name}': not a snapshot")));
    }
    let pool_name = crate::names::pool_of(to_name);
    let (_, pool) = crate::host::open_imported(pool_name)?;
    let dsl = ozfs_dsl::DslPool::open(pool)
        .map_err(|e| e.context(&format!("cannot open '{pool_name}'")))?;
    let lookup = |n: &str| dsl.lookup(n).map_err(|_| no_such(n));
    let to = lookup(to_name)?;
    let mut pairs = Vec::new();
    let mut repl_header = None;
    match from {
        _ if replicate => {
            // A replication stream: every descendant with this snapshot.
            let (head_name, tosnap) = to_name.split_once('@').unwrap_or((to_name, ""));
            let head = lookup(head_name)?;
            let from = from.map(|f| match f {
                SendFrom::Snapshot(s) | SendFrom::Range(s) => {
                    s.rsplit('@').next().unwrap_or(s).to_string()
                }
            });
            let (hdr, p) = ozfs_dsl::send::replication_plan(&dsl, &head, tosnap, from.as_deref())
                .map_err(|e| e.context(&format!("cannot send '{to_name}'")))?;
            pairs = p;
            repl_header = Some(hdr);
        }
        Some(SendFrom::Snapshot(f)) => pairs.push((Some(lookup(&from_name(f, to_name))?), to)),
        Some(SendFrom::Range(f)) => {
            let from = lookup(&from_name(f, to_name))?;
            let head = lookup(to_name.split('@').next().unwrap_or(""))?;
            let mut snaps: Vec<DatasetInfo> = dsl
                .snapshots(&head)?
                .into_iter()
                .filter(|s| {
                    s.ds.creation_txg > from.ds.creation_txg
                        && s.ds.creation_txg <= to.ds.creation_txg
                })
                .collect();
            snaps.sort_by_key(|s| s.ds.creation_txg);
            let mut prev = from;
            for s in snaps {
                pairs.push((Some(prev), s.clone()));
                prev = s;
            }
        }
        None => pairs.push((None, to)),
    }
    // -R names the snapshot asked for; -I the last one sent.
    let compound = if repl_header.is_some() {
        Some(to_name.to_string())
    } else if matches!(from, Some(SendFrom::Range(_))) {
        Some(
            pairs
                .last()
                .map(|p| p.1.name.clone())
                .unwrap_or(to_name.to_string()),
        )
    } else {
        None
    };
    Ok(SendPlan {
        dsl,
        pairs,
        repl_header,
        compound,
        to_name: to_name.to_string(),
        opts: Default::default(),
    })
}

impl SendPlan {
    /// The streams and their estimated sizes.
    pub fn estimates(&self) -> Vec<SendEstimate> {
        self.pairs
            .iter()
            .map(|(f, t)| SendEstimate {
                from: f.as_ref().map(|f| f.name.clone()),
                to: t.name.clone(),
                bytes: t.ds.referenced_bytes,
            })
            .collect()
    }

    /// Write the stream(s) to `out`; `tick` sees the bytes written so far.
    /// Returns the bytes written.
    pub fn write(&self, out: &mut dyn std::io::Write, tick: &mut dyn FnMut(u64)) -> Result<u64> {
        let mut sent = 0;
        if let Some(name) = &self.compound {
            sent += ozfs_dsl::send::compound_header(out, name, self.repl_header.as_ref())
                .map_err(|e| e.context(&format!("cannot send '{name}'")))?;
        }
        for (f, t) in &self.pairs {
            let base = sent;
            sent += ozfs_dsl::send::send_with(
                &self.dsl,
                t,
                f.as_ref(),
                out,
                &mut |b| tick(base + b),
                &self.opts,
            )
            .map_err(|e| e.context(&format!("cannot send '{}'", t.name)))?;
        }
        if self.compound.is_some() {
            sent += ozfs_dsl::send::compound_end(out)
                .map_err(|e| e.context(&format!("cannot send '{}'", self.to_name)))?;
        }
        Ok(sent)
    }
}

/// `zfs send SNAP > out`: a full stream of one snapshot. Returns the bytes
/// written.
pub fn send(snap: &str, out: &mut dyn std::io::Write) -> Result<u64> {
    send_plan(snap, None, false)?.write(out, &mut |_| {})
}
