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
use crate::state::Record;
use crate::{CmdResult, Fail};
use ozfs_dsl::sync::PoolWriter;
use ozfs_fuse::{Options, State};
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
    let pool_name = ds_name.split(['/', '@']).next().unwrap_or("");
    let mut rec = Record::load(pool_name).map_err(|_| {
        Fail::Err(format!(
            "cannot mount '{ds_name}': no such pool '{pool_name}'"
        ))
    })?;
    if !readonly {
        crate::state::lock_pool(&rec.name).map_err(|e| fail(&e))?;
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
        Some(i) => i.options(readonly),
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

/// A dataset's mount-relevant properties, from the writer's synced state.
pub struct DsMount {
    pub name: String,
    pub ds_obj: u64,
    pub mountpoint: String,
    pub canmount: String,
    pub readonly: bool,
    pub atime: bool,
    /// `setuid`, `devices`, `exec`: the mount's nosuid/nodev/noexec.
    pub setuid: bool,
    pub devices: bool,
    pub exec: bool,
    pub recordsize: u64,
    pub is_snapshot: bool,
}

/// A mountpoint from a pool (the property is the pool author's) is used
/// only if it is `none`, `legacy` or `-`, or an absolute path of plain
/// components: no `.` or `..` (which would move the mount somewhere the
/// dataset's name does not say), no NUL or newline (which would corrupt
/// /proc/self/mountinfo's view of it).
pub fn check_mountpoint(mp: &str) -> Result<(), String> {
    if matches!(mp, "none" | "legacy" | "-" | "") {
        return Ok(());
    }
    if !mp.starts_with('/') {
        return Err("is not an absolute path".into());
    }
    if mp.contains(['\0', '\n']) {
        return Err("contains a NUL or newline".into());
    }
    if mp.split('/').any(|c| c == "." || c == "..") {
        return Err("has a '.' or '..' component".into());
    }
    if mp.len() > 4095 {
        return Err("is too long".into());
    }
    Ok(())
}

impl DsMount {
    /// The FUSE options of this dataset's mount (temporary options such as
    /// `-o ro` are applied by the caller on top).
    pub fn options(&self, readonly: bool) -> Options {
        Options {
            readonly: readonly || self.readonly,
            atime: self.atime,
            setuid: self.setuid,
            devices: self.devices,
            exec: self.exec,
            ..Options::new(&self.name)
        }
    }
}

pub fn ds_mount_info(w: &ozfs_dsl::sync::PoolWriter, name: &str) -> Result<DsMount, String> {
    let dsl = w.dsl();
    let ds = dsl
        .lookup(name)
        .map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    let props = dsl
        .properties(&ds, 0)
        .map_err(|e| format!("cannot open '{name}': {e}"))?;
    let text = |k: &str| {
        props
            .iter()
            .find(|(n, _, _)| n == k)
            .map(|(_, v, _)| v.render(true))
            .unwrap_or_default()
    };
    let recordsize = crate::cp::recordsize_of(&props);
    let mountpoint = text("mountpoint");
    check_mountpoint(&mountpoint)
        .map_err(|why| format!("cannot mount '{name}': mountpoint {mountpoint:?} {why}"))?;
    Ok(DsMount {
        name: name.to_string(),
        ds_obj: ds.ds_obj,
        mountpoint,
        canmount: text("canmount"),
        readonly: crate::cp::is_readonly(&props),
        atime: crate::cp::atime_on(&props),
        setuid: crate::cp::prop_on(&props, "setuid"),
        devices: crate::cp::prop_on(&props, "devices"),
        exec: crate::cp::prop_on(&props, "exec"),
        recordsize,
        is_snapshot: ds.is_snapshot,
    })
}
