//! Taking snapshots (pool version 23 layout, FORMAT.md §6.3 "Snapshot").
//!
//! A snapshot is a new dataset object that takes over the head's current
//! objset BP, sizes and dead list; the head gets an empty dead list and the
//! snapshot as its previous snapshot, so from the next txg on every block
//! the head kills that was born at or before the snapshot goes to the head's
//! dead list instead of being freed. The file system's pending changes are
//! synced first, so the snapshot holds exactly what was written before it.

use crate::sync::PoolWriter;
use ozfs_dmu::tx::random_u64;
use ozfs_dmu::zap_tx;
use ozfs_format::dsl::DslDatasetPhys;
use ozfs_format::types::ot;
use ozfs_format::{Error, Result};

impl PoolWriter {
    /// `zfs snapshot fs@name`: returns the snapshot's dataset object.
    pub fn snapshot(&mut self, full: &str) -> Result<u64> {
        self.snapshot_as(full, None)
    }

    /// A snapshot with a given guid and creation time (`zfs receive`: the
    /// sender's, so that later incremental streams find their source).
    pub fn snapshot_as(&mut self, full: &str, ident: Option<(u64, u64)>) -> Result<u64> {
        let (fs, snap) = full
            .split_once('@')
            .ok_or_else(|| Error::Invalid(format!("'{full}' is not a snapshot name")))?;
        if let Err(why) = ozfs_format::names::check_snapshot_name(full) {
            return Err(Error::Invalid(format!(
                "cannot create snapshot '{full}': {why}"
            )));
        }
        // A snapshot names no intent log (OpenZFS's `zil_suspend`): a
        // live one is closed by this sync, everything it held committed.
        if let Ok(h) = self.dsl().lookup(fs) {
            if !self.zil_live(h.ds_obj) && !h.is_snapshot && !h.ds.bp.is_hole() {
                // A log waiting for its replay would be frozen into the
                // snapshot, naming blocks the replay then frees.
                let os = ozfs_dmu::objset::Objset::open(self.pool.clone(), &h.ds.bp)?;
                if crate::space::zil_has_records(&self.pool, &os.phys.zil_header, os.swap)? {
                    return Err(Error::Busy(format!(
                        "cannot create snapshot '{full}': the intent log of '{fs}' holds \
                         records not replayed; mount it read-write first"
                    )));
                }
            }
            self.zil_close(h.ds_obj);
        }
        self.sync()?;
        self.check_slop(
            crate::slop::SpaceCheck::Normal,
            3,
            &format!("cannot create snapshot '{full}'"),
        )?;
        let dsl = self.dsl();
        let head = dsl
            .lookup(fs)
            .map_err(|_| Error::not_found(format!("cannot open '{fs}': dataset does not exist")))?;
        if head.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot create snapshot '{full}': '{fs}' is a snapshot"
            )));
        }
        if zap_tx::lookup(&self.mos, head.ds.snapnames_zapobj, snap.as_bytes())?.is_some() {
            return Err(Error::Exists(format!(
                "cannot create snapshot '{full}': dataset already exists"
            )));
        }
        let txg = self.txg;
        let mut h = self.dataset(head.ds_obj)?;
        // The head's new dead list: every key of the old one (which the
        // snapshot keeps), and the previous snapshot's txg.
        let new_deadlist = self.deadlist_clone(h.deadlist_obj, u64::MAX, h.prev_snap_obj)?;
        if crate::deadlist::is_new_format(self, new_deadlist)? {
            self.deadlist_add_key(new_deadlist, h.prev_snap_txg)?;
        }
        let snap_obj =
            self.mos
                .create_object(ot::DSL_DATASET, 512, ot::DSL_DATASET, vec![0u8; 320], 1)?;
        crate::features::inherit_dataset_features(self, head.ds_obj, snap_obj)?;
        self.snapshot_ivset_guid(h.dir_obj, snap_obj)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let s = DslDatasetPhys {
            dir_obj: h.dir_obj,
            prev_snap_obj: h.prev_snap_obj,
            prev_snap_txg: h.prev_snap_txg,
            next_snap_obj: head.ds_obj,
            snapnames_zapobj: 0,
            num_children: 1,
            creation_time: ident.map(|i| i.1).unwrap_or(now),
            creation_txg: txg,
            deadlist_obj: h.deadlist_obj,
            referenced_bytes: h.referenced_bytes,
            compressed_bytes: h.compressed_bytes,
            uncompressed_bytes: h.uncompressed_bytes,
            // Everything the snapshot holds is still shared with the head.
            unique_bytes: 0,
            fsid_guid: random_u64() & ((1 << 56) - 1),
            guid: ident.map(|i| i.0).unwrap_or_else(random_u64),
            flags: h.flags,
            bp: h.bp,
            next_clones_obj: 0,
            props_obj: 0,
            userrefs_obj: 0,
        };
        self.set_dataset(snap_obj, &s)?;
        if h.prev_snap_obj != 0 {
            let mut prev = self.dataset(h.prev_snap_obj)?;
            if prev.next_snap_obj == head.ds_obj {
                prev.next_snap_obj = snap_obj;
                self.set_dataset(h.prev_snap_obj, &prev)?;
            } else if prev.next_clones_obj != 0 {
                // The first snapshot of a clone takes the head's place
                // among its origin's clones.
                let hk = format!("{:x}", head.ds_obj);
                if zap_tx::remove(&mut self.mos, prev.next_clones_obj, hk.as_bytes())? {
                    zap_tx::add(
                        &mut self.mos,
                        prev.next_clones_obj,
                        format!("{snap_obj:x}").as_bytes(),
                        8,
                        &[snap_obj],
                    )?;
                }
            }
        }
        h.prev_snap_obj = snap_obj;
        h.prev_snap_txg = txg;
        h.unique_bytes = 0;
        h.deadlist_obj = new_deadlist;
        self.set_dataset(head.ds_obj, &h)?;
        zap_tx::add(
            &mut self.mos,
            h.snapnames_zapobj,
            snap.as_bytes(),
            8,
            &[snap_obj],
        )?;
        self.sync()?;
        Ok(snap_obj)
    }
}
