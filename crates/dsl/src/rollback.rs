//! `zfs rollback`: a file system goes back to its most recent snapshot.
//!
//! Theory (pool-v23 dead lists). The head's pending changes are dropped;
//! every block of its tree born after the snapshot is freed (nothing else
//! refers to it), and so is an intent log ZFS left in it; the head takes
//! the snapshot's objset BP and sizes; the blocks on its dead list (born
//! before the snapshot, killed since) are the head's again, so the dead list is emptied (not freed) and the space it
//! charged to snapshots returns to the head; the snapshot, sharing all it
//! has with the head again, has no unique bytes left.
//!
//! Invariants: only the most recent snapshot can be the target (later ones
//! would first have to be destroyed, `-r`); the snapshot's blocks are never
//! touched.

use crate::sync::PoolWriter;
use ozfs_format::{Error, Result};

impl PoolWriter {
    /// Roll file system `name` back to its most recent snapshot; returns the
    /// snapshot's dataset object.
    pub fn rollback_to_latest(&mut self, name: &str) -> Result<u64> {
        self.check_slop(
            crate::slop::SpaceCheck::Reserved,
            1,
            &format!("cannot rollback '{name}'"),
        )?;
        let dsl = self.dsl();
        let head = dsl.lookup(name).map_err(|_| {
            Error::not_found(format!("cannot open '{name}': dataset does not exist"))
        })?;
        if head.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot rollback '{name}': not a file system"
            )));
        }
        let snap_obj = head.ds.prev_snap_obj;
        let snap = if snap_obj != 0 {
            Some(self.dataset(snap_obj)?)
        } else {
            None
        };
        let Some(mut snap) = snap.filter(|s| s.dir_obj == head.dir_obj) else {
            return Err(Error::Invalid(format!(
                "cannot rollback '{name}': there are no snapshots of this dataset"
            )));
        };
        // Pending changes are moot.
        self.fs.remove(&head.ds_obj);
        let txg = self.txg;
        let since = head.ds.prev_snap_txg;
        if head.ds.bp.to_bytes() != snap.bp.to_bytes() {
            self.free_intent_log(head.ds_obj, &head.ds.bp)?;
        }
        let mut freed = crate::sync::Sums::default();
        let pool = self.pool.clone();
        for bp in self.objset_born_after(&head.ds.bp, since)? {
            freed.add(&pool, &bp, 1);
            self.pool.free_block(&mut self.alloc, &bp, txg)?;
        }
        // The dead list's blocks are the head's again.
        // Only what was charged to this directory moves back: blocks born
        // after its origin (a clone's older blocks are its origin's).
        let origin_txg = self.origin_txg(head.dir_obj)?;
        let dead = crate::deadlist::deadlist_space_range(
            self,
            head.ds.deadlist_obj,
            origin_txg,
            u64::MAX,
        )? as i64;
        // A fresh dead list with the keys below the snapshot's txg (as the
        // clone OpenZFS rolls back through gets).
        let new_dl = self.deadlist_clone(head.ds.deadlist_obj, snap.creation_txg, snap_obj)?;
        self.deadlist_free(head.ds.deadlist_obj)?;
        let mut h = self.dataset(head.ds_obj)?;
        h.bp = snap.bp;
        h.referenced_bytes = snap.referenced_bytes;
        h.compressed_bytes = snap.compressed_bytes;
        h.uncompressed_bytes = snap.uncompressed_bytes;
        h.unique_bytes = 0;
        h.deadlist_obj = new_dl;
        self.set_dataset(head.ds_obj, &h)?;
        if snap.next_snap_obj == head.ds_obj {
            snap.unique_bytes = 0;
            self.set_dataset(snap_obj, &snap)?;
        }
        let net = crate::sync::Sums {
            dsize: -freed.dsize,
            psize: -freed.psize,
            ucsize: -freed.ucsize,
        };
        self.apply_dir_delta(head.dir_obj, &net, -freed.dsize + dead, -dead)?;
        Ok(snap_obj)
    }
}
