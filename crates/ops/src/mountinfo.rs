//! What decides where and how a dataset mounts: its `mountpoint`,
//! `canmount`, and the properties behind mount flags (`readonly`, `atime`,
//! `setuid`, `devices`, `exec`), read from a pool writer's state.
//!
//! Invariant: a mountpoint read from a pool is used only when it passes
//! [`check_mountpoint`] (the property is the pool author's, not the host's).

use crate::error::{Error, Result};

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
    /// `acltype=posix`: POSIX ACLs kept and enforced.
    pub posix_acl: bool,
    /// `xattr` is `on` or `sa`: new xattrs go into system attributes.
    pub xattr_sa: bool,
    pub recordsize: u64,
    pub is_snapshot: bool,
    /// Encrypted (`encryption` not `off`): mounted only with its key.
    pub encrypted: bool,
    /// The `sync` property: `standard`, `always` or `disabled`.
    pub sync: String,
    /// `logbias=throughput`.
    pub logbias_throughput: bool,
    /// A volume (served as a block device, not mounted).
    pub volume: bool,
    /// `volmode` (a volume with `none` gets no device).
    pub volmode: String,
    /// `snapdev` (`visible`: a volume's snapshots get read-only devices).
    pub snapdev: String,
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

pub fn ds_mount_info(w: &ozfs_dsl::sync::PoolWriter, name: &str) -> Result<DsMount> {
    info_of(&w.dsl(), name)
}

/// [`ds_mount_info`] from the last synced state of an imported pool,
/// opened read-only (no writer, no lock): for read-only mounts, and to
/// learn `readonly=on` before deciding how to mount.
pub fn ds_mount_info_ro(name: &str) -> Result<DsMount> {
    let (_rec, pool) = crate::host::open_imported(name)?;
    let dsl =
        ozfs_dsl::DslPool::open(pool).map_err(|e| e.context(&format!("cannot open '{name}'")))?;
    info_of(&dsl, name)
}

fn info_of(dsl: &ozfs_dsl::DslPool, name: &str) -> Result<DsMount> {
    let ds = dsl
        .lookup(name)
        .map_err(|_| Error::NotFound(format!("cannot open '{name}': dataset does not exist")))?;
    let props = dsl
        .properties(&ds, 0)
        .map_err(|e| e.context(&format!("cannot open '{name}'")))?;
    let text = |k: &str| {
        props
            .iter()
            .find(|(n, _, _)| n == k)
            .map(|(_, v, _)| v.render(true))
            .unwrap_or_default()
    };
    let recordsize = crate::copy::recordsize_of(&props);
    let mountpoint = text("mountpoint");
    check_mountpoint(&mountpoint).map_err(|why| {
        Error::Invalid(format!(
            "cannot mount '{name}': mountpoint {mountpoint:?} {why}"
        ))
    })?;
    Ok(DsMount {
        name: name.to_string(),
        ds_obj: ds.ds_obj,
        mountpoint,
        canmount: text("canmount"),
        readonly: crate::copy::is_readonly(&props),
        atime: crate::copy::atime_on(&props),
        setuid: crate::copy::prop_on(&props, "setuid"),
        devices: crate::copy::prop_on(&props, "devices"),
        exec: crate::copy::prop_on(&props, "exec"),
        posix_acl: text("acltype") == "posix",
        xattr_sa: crate::copy::xattr_sa_of(&props),
        recordsize,
        is_snapshot: ds.is_snapshot,
        encrypted: !matches!(text("encryption").as_str(), "" | "off"),
        sync: text("sync"),
        logbias_throughput: text("logbias") == "throughput",
        volume: text("type") == "volume",
        volmode: text("volmode"),
        snapdev: text("snapdev"),
    })
}
