//! `zfs rename` (file systems and snapshots) and `zfs hold`/`release`.
//!
//! A file system's name is its path of DSL directories: renaming moves its
//! directory from one parent's child map to another's (same pool), and the
//! space it uses moves from the old ancestors' child space to the new
//! ones'. A snapshot's name is a key of its head's snapshot map. Holds are
//! a ZAP per snapshot (`userrefs`: tag -> time held), created on first use;
//! a held snapshot cannot be destroyed.
//!
//! Invariants: a directory never becomes its own descendant; names stay
//! unique among siblings; nothing but names and space figures changes.

use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::zap_tx;
use ozfs_format::types::ot;
use ozfs_format::{Error, Result};

/// A name component ZFS accepts ([`ozfs_format::names::check_component`]:
/// letters, digits, `_ - . : ` and space, not `.` or `..`, at most 255
/// bytes; `$` — internal names — is not among them).
pub(crate) fn valid_component(c: &str) -> bool {
    ozfs_format::names::check_component(c).is_ok()
}

impl PoolWriter {
    /// `zfs rename OLD NEW` for file systems, or `fs@a fs@b` for snapshots.
    pub fn rename_dataset(&mut self, old: &str, new: &str) -> Result<()> {
        self.check_slop(
            crate::slop::SpaceCheck::Reserved,
            3,
            &format!("cannot rename '{old}'"),
        )?;
        let dsl = self.dsl();
        let ds = dsl.lookup(old).map_err(|_| {
            Error::not_found(format!("cannot open '{old}': dataset does not exist"))
        })?;
        if dsl.lookup(new).is_ok() {
            return Err(Error::Exists(format!(
                "cannot rename to '{new}': dataset already exists"
            )));
        }
        if ds.is_snapshot {
            let (ofs, _) = old.split_once('@').unwrap_or((old, ""));
            let Some((nfs, nsnap)) = new.split_once('@') else {
                return Err(Error::Invalid(format!(
                    "cannot rename to '{new}': snapshots must be part of same dataset"
                )));
            };
            if nfs != ofs && !nfs.is_empty() {
                return Err(Error::Invalid(format!(
                    "cannot rename to '{new}': snapshots must be part of same dataset"
                )));
            }
            if !valid_component(nsnap) {
                return Err(Error::Invalid(format!(
                    "cannot rename to '{new}': invalid snapshot name"
                )));
            }
            let head = self.dir(ds.dir_obj)?.head_dataset_obj;
            let map = self.dataset(head)?.snapnames_zapobj;
            if zap_tx::lookup(&self.mos, map, nsnap.as_bytes())?.is_some() {
                return Err(Error::Exists(format!(
                    "cannot rename to '{ofs}@{nsnap}': dataset already exists"
                )));
            }
            let oshort = old.rsplit('@').next().unwrap_or(old);
            zap_tx::remove(&mut self.mos, map, oshort.as_bytes())?;
            zap_tx::add(&mut self.mos, map, nsnap.as_bytes(), 8, &[ds.ds_obj])?;
            return Ok(());
        }
        if new.contains('@') {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': not a file system name"
            )));
        }
        let Some((nparent, nleaf)) = new.rsplit_once('/') else {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': a pool cannot be renamed this way"
            )));
        };
        if ds.dir.parent_obj == 0 {
            return Err(Error::Invalid(format!(
                "cannot rename '{old}': operation does not apply to pools"
            )));
        }
        if !valid_component(nleaf) {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': invalid dataset name"
            )));
        }
        if new.starts_with(&format!("{old}/")) {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': new dataset name cannot be a descendant of current dataset name"
            )));
        }
        if new.split('/').next() != old.split('/').next() {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': datasets must be within same pool"
            )));
        }
        let np = dsl.lookup(nparent).map_err(|_| {
            Error::not_found(format!(
                "cannot rename to '{new}': parent '{nparent}' does not exist"
            ))
        })?;
        if np.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot rename to '{new}': parent is a snapshot"
            )));
        }
        let dir = self.dir(ds.dir_obj)?;
        let old_parent = dir.parent_obj;
        if old_parent != np.dir_obj {
            self.rename_crypt_check(ds.dir_obj, np.dir_obj)
                .map_err(|e| e.context(&format!("cannot rename to '{new}'")))?;
        }
        let oleaf = old.rsplit('/').next().unwrap_or(old);
        let opdir = self.dir(old_parent)?;
        zap_tx::remove(&mut self.mos, opdir.child_dir_zapobj, oleaf.as_bytes())?;
        let npdir = self.dir(np.dir_obj)?;
        zap_tx::add(
            &mut self.mos,
            npdir.child_dir_zapobj,
            nleaf.as_bytes(),
            8,
            &[ds.dir_obj],
        )?;
        // Space moves from the old ancestors to the new.
        let moved = Sums {
            dsize: dir.used_bytes as i64,
            psize: dir.compressed_bytes as i64,
            ucsize: dir.uncompressed_bytes as i64,
        };
        let neg = Sums {
            dsize: -moved.dsize,
            psize: -moved.psize,
            ucsize: -moved.ucsize,
        };
        self.apply_child_delta(old_parent, &neg)?;
        let mut d = dir;
        d.parent_obj = np.dir_obj;
        self.set_dir(ds.dir_obj, &d)?;
        self.apply_child_delta(np.dir_obj, &moved)?;
        Ok(())
    }

    /// `zfs hold TAG SNAPSHOT`.
    pub fn hold(&mut self, snap: &str, tag: &str) -> Result<()> {
        let ds = self.dsl().lookup(snap).map_err(|_| {
            Error::not_found(format!(
                "cannot hold snapshot '{snap}': dataset does not exist"
            ))
        })?;
        if !ds.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot hold '{snap}': not a snapshot"
            )));
        }
        if tag.is_empty() || tag.len() > 255 {
            return Err(Error::Invalid(format!("cannot hold '{snap}': invalid tag")));
        }
        let mut d = self.dataset(ds.ds_obj)?;
        if d.userrefs_obj == 0 {
            d.userrefs_obj = self.mos.create_zap(ot::USERREFS, 0, Vec::new(), 0, 1)?;
            self.set_dataset(ds.ds_obj, &d)?;
        }
        if zap_tx::lookup(&self.mos, d.userrefs_obj, tag.as_bytes())?.is_some() {
            return Err(Error::Exists(format!(
                "cannot hold snapshot '{snap}': tag already exists on this dataset"
            )));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|x| x.as_secs())
            .unwrap_or(0);
        zap_tx::add(&mut self.mos, d.userrefs_obj, tag.as_bytes(), 8, &[now])
    }

    /// `zfs release TAG SNAPSHOT`.
    pub fn release(&mut self, snap: &str, tag: &str) -> Result<()> {
        let ds = self.dsl().lookup(snap).map_err(|_| {
            Error::not_found(format!(
                "cannot release hold from snapshot '{snap}': dataset does not exist"
            ))
        })?;
        let d = self.dataset(ds.ds_obj)?;
        if d.userrefs_obj == 0 || !zap_tx::remove(&mut self.mos, d.userrefs_obj, tag.as_bytes())? {
            return Err(Error::Invalid(format!(
                "cannot release '{tag}' from '{snap}': no such tag on this dataset"
            )));
        }
        Ok(())
    }

    /// The holds of a snapshot: (tag, time held).
    pub fn holds(&self, snap: &str) -> Result<Vec<(String, u64)>> {
        let ds = self.dsl().lookup(snap).map_err(|_| {
            Error::not_found(format!("cannot open '{snap}': dataset does not exist"))
        })?;
        let d = self.dataset(ds.ds_obj)?;
        if d.userrefs_obj == 0 {
            return Ok(Vec::new());
        }
        Ok(zap_tx::list(&self.mos, d.userrefs_obj)?
            .into_iter()
            .map(|e| (e.name_str(), e.as_u64().unwrap_or(0)))
            .collect())
    }
}
