//! `ozfs mount [-o ro|rw] POOL/DATASET[@SNAP] MOUNTPOINT`: serve a dataset
//! through FUSE in the foreground (see the `ozfs-fuse` crate for the
//! theory: inode numbers, txg policy, durability).
//!
//! The pool must be imported (read-write, unless `-o ro`). The command
//! returns when the file system is unmounted (`fusermount -u`, `umount`)
//! or on SIGINT/SIGTERM/SIGHUP, after syncing the last txg; it prints
//! nothing on success. Snapshots mount read-only.
//!
//! While mounted, the process is the pool's only writer: other ozfs
//! commands that write the same pool must not run until it exits.

use crate::args::Args;
use crate::{CmdResult, Fail};
use ozfs_fuse::{Options, State};
use ozfs_ops::host::Record;
use ozfs_ops::mountinfo::{ds_mount_info, DsMount};
use ozfs_ops::PoolWriter;
use std::path::Path;
use std::sync::{Arc, Mutex};

const USAGE: &str = "usage: ozfs mount [-o ro|rw] POOL/DATASET[@SNAP] MOUNTPOINT";

pub fn main(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "", "o")?;
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
    let pool_name = ozfs_ops::names::pool_of(ds_name);
    let mut rec = Record::load(pool_name).map_err(|_| {
        Fail::Err(format!(
            "cannot mount '{ds_name}': no such pool '{pool_name}'"
        ))
    })?;
    if !readonly {
        ozfs_ops::host::lock_pool(&rec.name).map_err(|e| fail(&e))?;
    }
    let pool = if readonly { rec.open() } else { rec.open_rw() }.map_err(|e| fail(&e))?;
    pool.cache_data
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let writer = PoolWriter::open(pool.clone()).map_err(|e| fail(&e))?;
    let dsl = writer.dsl();
    let ds = dsl
        .lookup(ds_name)
        .map_err(|_| fail(&"dataset does not exist"))?;
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
    let st = State::new(writer, ds.ds_obj, recordsize, opts).map_err(|e| fail(&e))?;
    let st = Arc::new(Mutex::new(st));
    let res = ozfs_fuse::serve(st, mnt);
    if let Err(e) = rec.save_counters(&pool) {
        eprintln!("ozfs: warning: could not save error counters: {e}");
    }
    res.map_err(|e| fail(&e))
}

/// The FUSE options of a dataset's mount (`-o ro` on top).
fn options(i: &DsMount, readonly: bool) -> Options {
    Options::dataset(
        &i.name,
        readonly || i.readonly,
        i.atime,
        i.setuid,
        i.devices,
        i.exec,
        i.posix_acl,
    )
}
