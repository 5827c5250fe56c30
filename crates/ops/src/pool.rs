//! Pools as a whole: create one on devices and record it as imported.
//!
//! Invariant: a pool's record is written only after its labels and first
//! uberblocks are on its devices (a record never names a pool that is not
//! there).

use crate::devices::{spec_devices, TopSpec};
use crate::error::{Error, Result};
use crate::host::Record;
use std::path::PathBuf;

/// How to make a pool.
#[derive(Debug, Clone)]
pub struct CreateOpts {
    /// Pool version (23: what zfs-fuse reads; 5000: feature flags).
    pub version: u64,
    pub ashift: u64,
    /// Properties of the root file system (`-O`, and `-m` as `mountpoint`).
    pub fs_props: Vec<(String, String)>,
    pub spares: Vec<PathBuf>,
}

impl Default for CreateOpts {
    fn default() -> Self {
        CreateOpts {
            version: ozfs_dsl::create::DEFAULT_POOL_VERSION,
            ashift: 9,
            fs_props: Vec::new(),
            spares: Vec::new(),
        }
    }
}

/// `zpool create NAME VDEV...`: write a new pool on `tops` and record it as
/// imported. Returns its record.
pub fn create(name: &str, tops: &[TopSpec], o: &CreateOpts) -> Result<Record> {
    let fail = |e: Error| e.context(&format!("cannot create '{name}'"));
    ozfs_format::names::check_new_pool_name(name)
        .map_err(|why| Error::Invalid(format!("cannot create '{name}': {why}")))?;
    if Record::load(name).is_ok() {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': pool already exists"
        )));
    }
    if tops.is_empty() {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': at least one top-level vdev must be specified"
        )));
    }
    let mut settings = Vec::new();
    for (k, v) in &o.fs_props {
        settings.push((
            k.clone(),
            ozfs_dsl::props::parse_setting(k, v).map_err(fail)?,
        ));
    }
    let mut w = ozfs_dsl::create::create_pool(name, tops, o.ashift, o.version).map_err(fail)?;
    ozfs_dsl::create::add_spares(&mut w, &o.spares).map_err(fail)?;
    if !settings.is_empty() {
        let root = w.root_dir_obj;
        for (k, v) in &settings {
            ozfs_dsl::create::set_prop_dir(&mut w, root, k, v).map_err(fail)?;
        }
        w.sync().map_err(fail)?;
    }
    let rec = Record {
        name: name.to_string(),
        guid: w.pool.guid,
        devices: spec_devices(tops, &o.spares),
        readonly: false,
        errors: Vec::new(),
        resilvering: Vec::new(),
        offline: Vec::new(),
    };
    rec.save().map_err(fail)?;
    Ok(rec)
}
