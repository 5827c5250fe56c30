//! `refreservation`: space a file system or volume is guaranteed, charged
//! to its directory ahead of use, as OpenZFS charges it.
//!
//! # Theory
//!
//! A head dataset with `refreservation` R holds `max(R, unique)` of the
//! pool's space, not just its unique bytes: the part not yet used,
//! `max(R − unique, 0)`, is its directory's `usedbyrefreservation`
//! (`dd_used_breakdown[DD_USED_REFRSRV]`), counted in the directory's
//! `used` and, as child space, in every ancestor's — up to the root, whose
//! `used` the pool's free space is measured against. So a reservation
//! takes its space from everyone else at once, and a write to the
//! reserved dataset moves bytes from REFRSRV to HEAD without changing its
//! directory's `used` until `unique` passes R.
//!
//! OpenZFS moves the charge at every point `unique` or R changes (block
//! births and frees, snapshots, rollbacks, destroys, the property). ozfs
//! reconciles instead, once per txg after every dataset is synced
//! ([`PoolWriter::reconcile_refreservations`]): for each directory that has
//! (or had) a refreservation, REFRSRV becomes `max(R − unique, 0)` of its
//! head and the difference goes to its `used` and its ancestors' CHILD
//! and `used`. The on-disk result at each txg is the same.
//!
//! # Invariants
//!
//! * After a sync, every directory's REFRSRV is `max(R − unique(head), 0)`
//!   (0 for a directory without a head or without R), and `used` = HEAD +
//!   SNAP + CHILD + CHILD_RSRV + REFRSRV holds for it and its ancestors.
//! * The directories considered are those found with a refreservation or a
//!   nonzero REFRSRV when the writer first syncs, plus those whose
//!   property is set or cleared since; one left with neither is dropped.

use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::zap_tx;
use ozfs_format::Result;
use std::collections::BTreeSet;

/// `dd_used_breakdown` index of the unused refreservation.
pub const DD_USED_REFRSRV: usize = 4;

impl PoolWriter {
    /// The refreservation set on directory `dir` (0: none).
    pub fn refreservation(&self, dir: u64) -> Result<u64> {
        let props = self.dir(dir)?.props_zapobj;
        if props == 0 {
            return Ok(0);
        }
        Ok(zap_tx::lookup(&self.mos, props, b"refreservation")?
            .and_then(|e| e.as_u64())
            .unwrap_or(0))
    }

    /// Directory `dir`'s refreservation was set or cleared in this txg.
    pub(crate) fn refreservation_touched(&mut self, dir: u64) -> Result<()> {
        self.load_refrsrv_dirs()?;
        if let Some(s) = self.refrsrv_dirs.as_mut() {
            s.insert(dir);
        }
        Ok(())
    }

    /// Find every directory with a refreservation or a REFRSRV charge (once
    /// per writer).
    fn load_refrsrv_dirs(&mut self) -> Result<()> {
        if self.refrsrv_dirs.is_some() {
            return Ok(());
        }
        // A pool being created has no committed state to look in yet: no
        // reservation either (one set now is added when it is set).
        if self.root_dir_obj == 0 || self.mos.os.bp.is_hole() {
            self.refrsrv_dirs = Some(BTreeSet::new());
            return Ok(());
        }
        let mut set = BTreeSet::new();
        let dsl = self.dsl();
        if let Ok(root) = dsl.lookup(&self.pool.name) {
            // The committed tree; a directory this txg destroyed is not
            // in the staged state any more (skipped).
            for ds in dsl.list(&root, false, None)? {
                let dir = ds.ds.dir_obj;
                let resv = self.refreservation(dir).unwrap_or(0);
                if ds.dir.used_breakdown[DD_USED_REFRSRV] != 0 || resv != 0 {
                    set.insert(dir);
                }
            }
        }
        self.refrsrv_dirs = Some(set);
        Ok(())
    }

    /// Bring every considered directory's REFRSRV to `max(R − unique, 0)`
    /// (see the module documentation). Runs in sync, after the datasets.
    pub(crate) fn reconcile_refreservations(&mut self) -> Result<()> {
        self.load_refrsrv_dirs()?;
        let dirs: Vec<u64> = self.refrsrv_dirs.iter().flatten().copied().collect();
        for dir_obj in dirs {
            let Ok(mut dir) = self.dir(dir_obj) else {
                // Destroyed.
                if let Some(s) = self.refrsrv_dirs.as_mut() {
                    s.remove(&dir_obj);
                }
                continue;
            };
            let head = if dir.head_dataset_obj == 0 {
                None
            } else {
                self.dataset(dir.head_dataset_obj).ok()
            };
            let resv = match head {
                Some(_) => self.refreservation(dir_obj)?,
                None => 0,
            };
            let unique = head.map_or(0, |h| h.unique_bytes);
            let want = resv.saturating_sub(unique);
            let have = dir.used_breakdown[DD_USED_REFRSRV];
            if want != have {
                let delta = want as i64 - have as i64;
                dir.used_breakdown[DD_USED_REFRSRV] = want;
                dir.used_bytes = dir.used_bytes.saturating_add_signed(delta);
                let parent = dir.parent_obj;
                self.set_dir(dir_obj, &dir)?;
                if parent != 0 {
                    self.apply_child_delta(
                        parent,
                        &Sums {
                            dsize: delta,
                            psize: 0,
                            ucsize: 0,
                        },
                    )?;
                }
            }
            if resv == 0 {
                if let Some(s) = self.refrsrv_dirs.as_mut() {
                    s.remove(&dir_obj);
                }
            }
        }
        Ok(())
    }
}
