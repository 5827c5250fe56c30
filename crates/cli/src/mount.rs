//! `ozfs mount [-o ro|rw] [-l] [-L keylocation] POOL/DATASET[@SNAP]
//! MOUNTPOINT`: serve a dataset through FUSE in the foreground (see the
//! `ozfs-fuse` crate for the theory: inode numbers, txg policy,
//! durability).
//!
//! Two servers, chosen before anything is locked:
//! * **read-only** (`ozfs_fuse::serve_readonly`, straight from the read
//!   path) when `-o ro` is given, for a snapshot, or when the dataset has
//!   `readonly=on`: the pool is opened read-only (any imported pool,
//!   read-only imports and OpenZFS 2.x pools included), no writer and no
//!   lock are taken. An encrypted dataset needs its key: `-l` loads it
//!   from its `keylocation`, `-L keylocation` from there; the key then
//!   lives in this process's memory only, until it exits.
//! * **read-write** (`ozfs_fuse::State` over the pool's writer) otherwise:
//!   the pool must be imported read-write, and while mounted the process
//!   is the pool's only writer (other ozfs commands that write the same
//!   pool must not run until it exits). A pool or file system ozfs cannot
//!   write (imported read-only, features ozfs does not write, ZPL 5 with
//!   system attributes) is refused with a message that names `-o ro` —
//!   a read-write request is never silently served read-only.
//!
//! The command returns when the file system is unmounted (`fusermount
//! -u`, `umount`) or on SIGINT/SIGTERM/SIGHUP, after syncing the last txg
//! (read-write); it prints nothing on success.

use crate::args::Args;
use crate::{CmdResult, Fail};
use ozfs_fuse::{Options, State};
use ozfs_ops::crypt::KeyLoad;
use ozfs_ops::host::Record;
use ozfs_ops::mountinfo::{ds_mount_info, ds_mount_info_ro, DsMount};
use ozfs_ops::{Error, PoolWriter};
use std::path::Path;
use std::sync::{Arc, Mutex};

const USAGE: &str =
    "usage: ozfs mount [-o ro|rw] [-l] [-L keylocation] POOL/DATASET[@SNAP] MOUNTPOINT";

pub fn main(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "l", "oL")?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let mut readonly = false;
    for o in a.opt_all('o') {
        for opt in o.split(',').filter(|s| !s.is_empty()) {
            match opt {
                "ro" => readonly = true,
                "rw" => readonly = false,
                other => {
                    return Err(Fail::Usage(format!(
                        "unknown mount option '{other}'\n{USAGE}"
                    )))
                }
            }
        }
    }
    let ds_name = &a.pos[0];
    let mnt = Path::new(&a.pos[1]);
    let fail = |e: &dyn std::fmt::Display| Fail::Err(format!("cannot mount '{ds_name}': {e}"));
    if ds_name.contains('@') {
        readonly = true;
    }
    if !mnt.is_dir() {
        return Err(Fail::Err(format!(
            "cannot mount '{ds_name}': mountpoint '{}' is not a directory",
            mnt.display()
        )));
    }
    let keys = KeyLoad {
        load: a.flag('l'),
        location: a.opt('L').map(str::to_string),
    };
    let pool_name = ozfs_ops::names::pool_of(ds_name);
    let mut rec = Record::load(pool_name).map_err(|_| {
        Fail::Err(format!(
            "cannot mount '{ds_name}': no such pool '{pool_name}'"
        ))
    })?;
    // readonly=on mounts read-only, as ZFS does (read before any lock).
    if !readonly && ds_mount_info_ro(ds_name).is_ok_and(|i| i.readonly) {
        readonly = true;
    }
    if readonly {
        return mount_readonly(ds_name, mnt, &keys);
    }
    // A read-write mount of what ozfs cannot write: refused, naming -o ro.
    let cannot_write = |why: &dyn std::fmt::Display| {
        Fail::Err(format!(
            "cannot mount '{ds_name}' read-write: {why}; mount it read-only with -o ro"
        ))
    };
    if rec.readonly {
        return Err(cannot_write(&format_args!(
            "pool '{pool_name}' is imported read-only"
        )));
    }
    ozfs_ops::host::lock_pool(&rec.name).map_err(|e| fail(&e))?;
    let pool = rec.open_rw().map_err(|e| fail(&e))?;
    pool.cache_data
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let writer = PoolWriter::open(pool.clone()).map_err(|e| match e {
        e @ Error::Unsupported { .. } => cannot_write(&e),
        e => fail(&e),
    })?;
    let dsl = writer.dsl();
    let ds = dsl
        .lookup(ds_name)
        .map_err(|_| fail(&"dataset does not exist"))?;
    // An encrypted file system is written with its key (`-l`, `-L`).
    ozfs_ops::crypt::load_for(&dsl, &ds, &keys).map_err(|e| fail(&e))?;
    let info = ds_mount_info(&writer, ds_name).ok();
    // readonly=on mounts read-only, as ZFS does.
    if info.as_ref().is_some_and(|i| i.readonly) {
        readonly = true;
    }
    let recordsize = info.as_ref().map_or(131072, |i| i.recordsize);
    let atime = info.as_ref().is_none_or(|i| i.atime);
    // Without readable properties (a damaged pool) the safe flags.
    let opts = match &info {
        Some(i) => options(i, readonly),
        None => Options {
            readonly,
            atime,
            setuid: false,
            devices: false,
            exec: false,
            ..Options::new(ds_name)
        },
    };
    let st = State::new(writer, ds.ds_obj, recordsize, opts).map_err(|e| match e {
        e @ Error::Unsupported { .. } => cannot_write(&e),
        e => fail(&e),
    })?;
    let st = Arc::new(Mutex::new(st));
    let res = ozfs_fuse::serve(st, mnt);
    if let Err(e) = rec.save_counters(&pool) {
        eprintln!("ozfs: warning: could not save error counters: {e}");
    }
    res.map_err(|e| fail(&e))
}

/// Serve `ds_name` read-only from the pool's last synced state (opened
/// read-only, no lock), loading its key as `keys` says.
fn mount_readonly(ds_name: &str, mnt: &Path, keys: &KeyLoad) -> CmdResult {
    let fail = |e: &dyn std::fmt::Display| Fail::Err(format!("cannot mount '{ds_name}': {e}"));
    let (mut rec, pool, zpl) = ozfs_ops::copy::open_fs_with(ds_name, keys)?;
    // Never a silent stale view (a pool left without export, mounted
    // read-only): changes waiting in the intent log are named.
    let prefix = format!("{ds_name}: ");
    for w in ozfs_ops::pool::unreplayed_logs(&rec.name).unwrap_or_default() {
        if w.starts_with(&prefix) {
            eprintln!("ozfs mount: warning: {w}");
        }
    }
    pool.cache_data
        .store(true, std::sync::atomic::Ordering::Relaxed);
    // Without readable properties (a damaged pool) the safe flags.
    let opts = match ds_mount_info_ro(ds_name) {
        Ok(i) => options(&i, true),
        Err(_) => Options {
            readonly: true,
            setuid: false,
            devices: false,
            exec: false,
            ..Options::new(ds_name)
        },
    };
    let res = ozfs_fuse::serve_readonly(zpl, mnt, opts);
    if let Err(e) = rec.save_counters(&pool) {
        eprintln!("ozfs: warning: could not save error counters: {e}");
    }
    res.map_err(|e| fail(&e))
}

/// The FUSE options of a dataset's mount (`-o ro` on top).
fn options(i: &DsMount, readonly: bool) -> Options {
    Options {
        xattr_sa: i.xattr_sa,
        sync: ozfs_fuse::SyncMode::from_prop(&i.sync),
        log: !i.encrypted && !i.logbias_throughput && ozfs_fuse::zil_enabled(),
        ..Options::dataset(
            &i.name,
            readonly || i.readonly,
            i.atime,
            i.setuid,
            i.devices,
            i.exec,
            i.posix_acl,
        )
    }
}
