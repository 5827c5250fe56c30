//! Destroying a file system (no snapshots, no children): every block of its
//! objset (and of an intent log ZFS left in it) is freed, its DSL objects are removed from the MOS, its directory
//! leaves its parent's child map, and the space it used leaves the ancestors.
//!
//! Destroying a snapshot (pool-v23 dead lists): see
//! [`PoolWriter::destroy_snapshot`]. Invariant kept: every block is either
//! referenced by the head or a snapshot, or on exactly one dead list of
//! the dataset after the last snapshot that references it — or freed.

use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::{zap_tx, Objset};
use ozfs_format::types::ot;
use ozfs_format::{BlkPtr, Error, Result};

impl PoolWriter {
    /// `zfs destroy` of a file system without snapshots or children.
    pub fn destroy_filesystem(&mut self, name: &str) -> Result<()> {
        self.check_slop(
            crate::slop::SpaceCheck::ExtraReserved,
            0,
            &format!("cannot destroy '{name}'"),
        )?;
        self.clones_dirty = true;
        let dsl = self.dsl();
        let ds = dsl.lookup(name)?;
        if ds.is_snapshot {
            return Err(Error::unsupported(
                format!("cannot destroy '{name}'"),
                "destroying snapshots is not implemented yet",
            ));
        }
        if ds.dir.parent_obj == 0 {
            return Err(Error::Invalid(format!(
                "cannot destroy '{name}': operation does not apply to pools; use 'zpool destroy'"
            )));
        }
        if !dsl.child_dirs(&ds.dir)?.is_empty() {
            return Err(Error::Invalid(format!("cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets")));
        }
        if !dsl.snapshots(&ds)?.is_empty() {
            return Err(Error::Invalid(format!(
                "cannot destroy '{name}': filesystem has snapshots"
            )));
        }
        // Pending changes to it are moot.
        self.fs.remove(&ds.ds_obj);
        let txg = self.txg;
        // Free every block of the objset born after its origin (a clone
        // shares the older ones with its origin snapshot).
        let since = ds.ds.prev_snap_txg;
        self.free_intent_log(ds.ds_obj, &ds.ds.bp)?;
        for bp in self.objset_born_after(&ds.ds.bp, since)? {
            self.pool.free_block(&mut self.alloc, &bp, txg)?;
        }
        // Ancestors no longer carry its space.
        let dir = self.dir(ds.dir_obj)?;
        let parent = dir.parent_obj;
        self.apply_child_delta(
            parent,
            &Sums {
                dsize: -(dir.used_bytes as i64),
                psize: -(dir.compressed_bytes as i64),
                ucsize: -(dir.uncompressed_bytes as i64),
            },
        )?;
        // Unlink from the origin snapshot.
        let origin = ds.ds.prev_snap_obj;
        if origin != 0 {
            let mut o = self.dataset(origin)?;
            o.num_children = o.num_children.saturating_sub(1);
            let clones = o.next_clones_obj;
            self.set_dataset(origin, &o)?;
            if clones != 0 {
                zap_tx::remove(&mut self.mos, clones, format!("{:x}", ds.ds_obj).as_bytes())?;
            }
        }
        let pdir = self.dir(parent)?;
        let leaf = name.rsplit('/').next().unwrap_or(name);
        zap_tx::remove(&mut self.mos, pdir.child_dir_zapobj, leaf.as_bytes())?;
        crate::features::release_dataset(self, ds.ds_obj)?;
        self.release_dir_key(ds.dir_obj)?;
        // A directory made a ZAP (an encrypted one) gives back its
        // `extensible_dataset` count, as `dmu_object_free_zapified`.
        if self.mos.dnode(ds.dir_obj)?.phys.object_type == ot::ZAP_METADATA_NEW {
            crate::features::incr(self, crate::features::EXTENSIBLE_DATASET, -1)?;
        }
        if ds.ds.deadlist_obj != 0 {
            self.deadlist_free(ds.ds.deadlist_obj)?;
        }
        for o in [
            ds.ds.snapnames_zapobj,
            ds.ds_obj,
            dir.props_zapobj,
            dir.child_dir_zapobj,
            dir.clones,
            ds.dir_obj,
        ] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        Ok(())
    }
}

impl PoolWriter {
    /// [`Self::destroy_snapshot`] where the next dataset's dead list is in
    /// the new format, as OpenZFS's `dsl_destroy_snapshot_sync_impl`: the
    /// neighbours' unique bytes from the next dead list's entries, its
    /// entries born after this snapshot's predecessor freed (blocks
    /// nobody references any more), this snapshot's entries merged into
    /// it, and this snapshot's txg folded out of the head's keys (and of
    /// its clones').
    fn destroy_snapshot_entries(
        &mut self,
        name: &str,
        snap: &crate::pool::DatasetInfo,
        prev: Option<ozfs_format::dsl::DslDatasetPhys>,
        after_branch_point: bool,
    ) -> Result<()> {
        let s = snap.ds;
        let next_obj = s.next_snap_obj;
        let mut next = self.dataset(next_obj)?;
        let mut prev_unique = 0u64;
        if let Some(p) = &prev {
            if !after_branch_point {
                prev_unique = crate::deadlist::deadlist_space_range(
                    self,
                    next.deadlist_obj,
                    p.prev_snap_txg,
                    s.prev_snap_txg,
                )?;
            }
        }
        let freed = self.deadlist_free_from(next.deadlist_obj, s.prev_snap_txg)?;
        self.deadlist_merge(next.deadlist_obj, s.deadlist_obj)?;
        next.prev_snap_obj = s.prev_snap_obj;
        next.prev_snap_txg = s.prev_snap_txg;
        self.remove_clones_key(snap.dir_obj, s.creation_txg, 0)?;
        self.settle_next_unique(next_obj, &mut next, &s, prev.as_ref())?;
        if next.next_snap_obj != 0 {
            // The head's entry for this snapshot's txg joins the one below.
            let head_obj = self.dir(snap.dir_obj)?.head_dataset_obj;
            let head_dl = self.dataset(head_obj)?.deadlist_obj;
            self.deadlist_remove_key(head_dl, s.creation_txg)?;
        }
        self.finish_snapshot_destroy(name, snap, prev, after_branch_point, prev_unique, &freed)
    }

    /// The unique bytes of `next` (object `next_obj`) once its predecessor
    /// `s` is gone, stored: a snapshot gains the blocks only `s` and it
    /// shared (born after `s`'s predecessor, dead after `s`, on the dead
    /// list after `next`); the head's are its referenced bytes less what
    /// the new predecessor `prev` still holds of them.
    fn settle_next_unique(
        &mut self,
        next_obj: u64,
        next: &mut ozfs_format::dsl::DslDatasetPhys,
        s: &ozfs_format::dsl::DslDatasetPhys,
        prev: Option<&ozfs_format::dsl::DslDatasetPhys>,
    ) -> Result<()> {
        if next.next_snap_obj != 0 {
            let after = self.dataset(next.next_snap_obj)?;
            next.unique_bytes += crate::deadlist::deadlist_space_range(
                self,
                after.deadlist_obj,
                s.prev_snap_txg,
                s.creation_txg,
            )?;
        } else {
            let mrs = prev.map_or(0, |p| p.referenced_bytes);
            let (dl, _, _) = crate::deadlist::deadlist_sums(self, next.deadlist_obj)?;
            next.unique_bytes = next.referenced_bytes.saturating_sub(mrs.saturating_sub(dl));
        }
        self.set_dataset(next_obj, next)
    }

    /// What every snapshot destroy ends with, whatever the dead lists'
    /// format: the predecessor linked to the next dataset (or, past a
    /// branch point, its clone list pointing at it) and given the unique
    /// bytes found for it, the directory charged for what was `freed`
    /// (snapshot space), the name removed, the dataset's features given
    /// back and its objects freed.
    fn finish_snapshot_destroy(
        &mut self,
        name: &str,
        snap: &crate::pool::DatasetInfo,
        prev: Option<ozfs_format::dsl::DslDatasetPhys>,
        after_branch_point: bool,
        prev_unique: u64,
        freed: &Sums,
    ) -> Result<()> {
        let s = snap.ds;
        let obj = snap.ds_obj;
        let next_obj = s.next_snap_obj;
        let prev_obj = s.prev_snap_obj;
        if let Some(mut p) = prev {
            if after_branch_point {
                if p.next_clones_obj != 0 {
                    let _ = zap_tx::remove(
                        &mut self.mos,
                        p.next_clones_obj,
                        format!("{obj:x}").as_bytes(),
                    )?;
                    zap_tx::update(
                        &mut self.mos,
                        p.next_clones_obj,
                        &format!("{next_obj:x}"),
                        8,
                        &[next_obj],
                    )?;
                }
            } else {
                p.next_snap_obj = next_obj;
                p.unique_bytes += prev_unique;
                self.set_dataset(prev_obj, &p)?;
            }
        }
        let net = Sums {
            dsize: -freed.dsize,
            psize: -freed.psize,
            ucsize: -freed.ucsize,
        };
        self.apply_dir_delta(snap.dir_obj, &net, 0, -freed.dsize)?;
        let head_obj = self.dir(snap.dir_obj)?.head_dataset_obj;
        let head = self.dataset(head_obj)?;
        let short = name.rsplit('@').next().unwrap_or(name);
        zap_tx::remove(&mut self.mos, head.snapnames_zapobj, short.as_bytes())?;
        crate::features::release_dataset(self, obj)?;
        for o in [s.next_clones_obj, s.props_obj, s.userrefs_obj, obj] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        Ok(())
    }

    /// Fold key `txg` out of the dead lists of the clones of directory
    /// `dir`'s snapshots made after it, and of their clones
    /// (`dsl_dir_remove_clones_key`).
    fn remove_clones_key(&mut self, dir: u64, txg: u64, depth: u32) -> Result<()> {
        let clones = self.dir(dir)?.clones;
        if clones == 0 {
            return Ok(());
        }
        if depth > 64 {
            return Err(Error::corrupt(
                format!("DSL directory {dir}"),
                "clones of clones nested more than 64 deep",
            ));
        }
        for e in zap_tx::list(&self.mos, clones)? {
            let Some(c) = e.as_u64() else { continue };
            let cd = self.dataset(c)?;
            let cdir = self.dir(cd.dir_obj)?;
            if cdir.origin_obj == 0 || self.dataset(cdir.origin_obj)?.creation_txg <= txg {
                continue;
            }
            self.deadlist_remove_key(cd.deadlist_obj, txg)?;
            self.remove_clones_key(cd.dir_obj, txg, depth + 1)?;
        }
        Ok(())
    }
}

/// Most dead-list entries read at once (2 GiB of block pointers): a larger
/// count in a bplist header is taken for corruption.
const MAX_BPLIST_ENTRIES: u64 = 1 << 24;

impl PoolWriter {
    /// Free the intent log ZFS left in the objset at `bp` of file system
    /// `ds_obj`, which is being destroyed or rolled back (ZFS destroys the
    /// log then too). A chain another dataset's
    /// objset names as well (a snapshot or clone ozfs took of a file
    /// system with a log copies its header) is left alone.
    pub(crate) fn free_intent_log(&mut self, ds_obj: u64, bp: &BlkPtr) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        let os = Objset::open(self.pool.clone(), bp)?;
        self.zil.remove(&ds_obj);
        let chain =
            crate::zil::allocated_blocks(&self.pool, &os.phys.zil_header, os.swap, self.txg)?;
        let Some(first) = chain.first().map(|b| b.dvas()[0]) else {
            return Ok(());
        };
        for obj in 1..self.mos.os.max_object() {
            if obj == ds_obj {
                continue;
            }
            let dn = match self.mos.dnode(obj) {
                Ok(d) if d.phys.bonustype == ot::DSL_DATASET => d,
                Ok(_) | Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            let other = ozfs_format::dsl::DslDatasetPhys::parse(&dn.phys.bonus, dn.swap)?;
            if other.bp.is_hole() {
                continue;
            }
            let oos = Objset::open(self.pool.clone(), &other.bp)?;
            let named = oos
                .phys
                .zil_header
                .get(16..16 + 128)
                .map(|b| BlkPtr::from_bytes(b, oos.swap))
                .transpose()?;
            if named.is_some_and(|n| !n.is_hole() && !n.is_embedded() && n.dvas()[0] == first) {
                return Ok(());
            }
        }
        // Deferred like every log block (a crash before this txg leaves
        // the log named by the last header, whole).
        let txg = self.txg;
        for b in chain {
            let d = b.dvas()[0];
            if self.alloc.is_allocated(d.vdev, d.offset, d.asize) {
                self.alloc.free_deferred(d.vdev, d.offset, d.asize, txg)?;
            }
        }
        Ok(())
    }

    /// Every BP of the objset at `bp` born after `since`, the objset block
    /// included (what a file system alone holds, over its origin).
    pub(crate) fn objset_born_after(&self, bp: &BlkPtr, since: u64) -> Result<Vec<BlkPtr>> {
        if bp.is_hole() || bp.birth() <= since {
            return Ok(Vec::new());
        }
        let os = Objset::open(self.pool.clone(), bp)?;
        let mut v = os.bps_born_after(since)?;
        v.push(*bp);
        Ok(v)
    }
}

/// The entries of a pool-v23 dead list (a bplist object).
pub(crate) fn read_bplist(w: &PoolWriter, obj: u64) -> Result<Vec<BlkPtr>> {
    let dn = w.mos.dnode(obj)?;
    let entries = bplist_len(&w.pool, obj, &dn)?;
    // Bounded above (room, pool size): read through this txg's changes.
    parse_bplist(&w.mos.read(obj, 0, (entries * 128) as usize)?, dn.swap)
}

/// The number of entries of pool-v23 bplist `obj` (its dnode `dn`),
/// checked against the type, the room its blocks have and what the pool
/// can hold: every entry names a block of at least one 512-byte sector
/// (4 × that for slack: a deduplicated block is killed once per reference).
pub(crate) fn bplist_len(pool: &ozfs_spa::Pool, obj: u64, dn: &ozfs_dmu::Dnode) -> Result<u64> {
    if dn.phys.object_type != ot::BPOBJ {
        return Err(Error::unsupported(
            format!("dead list object {obj}"),
            format!("type {} (only pool-v23 bplists)", dn.phys.object_type),
        ));
    }
    let entries = ozfs_format::bytes::u64_at(&dn.phys.bonus, 0, dn.swap, "bplist entries")?;
    let room = crate::deadlist::object_room(dn, 128);
    let sectors: u64 = pool
        .root
        .children
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.asize))
        / 512;
    let max = room.min(MAX_BPLIST_ENTRIES).min(sectors.saturating_mul(4));
    if entries > max {
        return Err(Error::corrupt(
            format!("dead list object {obj}"),
            format!("{entries} entries in room for {max}"),
        ));
    }
    Ok(entries)
}

/// The block pointers of a bplist's data.
pub(crate) fn parse_bplist(data: &[u8], swap: bool) -> Result<Vec<BlkPtr>> {
    data.chunks_exact(128)
        .map(|c| BlkPtr::from_bytes(c, swap))
        .collect()
}

impl PoolWriter {
    /// `zfs destroy fs@snap` (pool-v23 dead lists, as ZFS does it): the
    /// next dataset's dead list is split — entries born before this
    /// snapshot's predecessor are still held by it and move to this
    /// snapshot's dead list, which becomes the next one's; the others were
    /// this snapshot's alone and are freed. Unique bytes of the neighbours
    /// and the directory's snapshot space follow.
    pub fn destroy_snapshot(&mut self, name: &str) -> Result<()> {
        self.check_slop(
            crate::slop::SpaceCheck::ExtraReserved,
            0,
            &format!("cannot destroy '{name}'"),
        )?;
        let dsl = self.dsl();
        let snap = dsl.lookup(name).map_err(|_| {
            Error::not_found(format!(
                "could not find any snapshots to destroy; check snapshot names.\n'{name}'"
            ))
        })?;
        if !snap.is_snapshot {
            return Err(Error::Invalid(format!("'{name}' is not a snapshot")));
        }
        let s = snap.ds;
        if s.num_children > 1 {
            return Err(Error::Invalid(format!(
                "cannot destroy '{name}': snapshot has dependent clones\nuse '-R' to destroy the following datasets"
            )));
        }
        if s.userrefs_obj != 0 && !zap_tx::list(&self.mos, s.userrefs_obj)?.is_empty() {
            return Err(Error::Busy(format!(
                "cannot destroy snapshot {name}: dataset is busy (it has holds)"
            )));
        }
        // Pending changes of the head are committed first (they may put
        // blocks on its dead list).
        self.sync()?;
        let txg = self.txg;
        let obj = snap.ds_obj;
        let next_obj = s.next_snap_obj;
        let mut next = self.dataset(next_obj)?;
        let prev_obj = s.prev_snap_obj;
        let prev = if prev_obj != 0 {
            Some(self.dataset(prev_obj)?)
        } else {
            None
        };
        let after_branch_point = prev.as_ref().is_some_and(|p| p.next_snap_obj != obj);
        if crate::deadlist::is_new_format(self, next.deadlist_obj)? {
            return self.destroy_snapshot_entries(name, &snap, prev, after_branch_point);
        }
        // A bplist chain ends in bplists: a new-format dead list before a
        // bplist one is no chain any ZFS makes; refused before any change.
        if crate::deadlist::is_new_format(self, s.deadlist_obj)? {
            return Err(Error::corrupt(
                format!("cannot destroy '{name}'"),
                "its dead list is in the new format but the next dataset's is a bplist",
            ));
        }
        // Split the next dataset's dead list.
        let mut keep = Vec::new();
        let mut keep_sums = Sums::default();
        let mut freed = Sums::default();
        let mut prev_unique = 0u64;
        let pool = self.pool.clone();
        for bp in read_bplist(self, next.deadlist_obj)? {
            if bp.birth() <= s.prev_snap_txg {
                if let Some(p) = &prev {
                    if !after_branch_point && bp.birth() > p.prev_snap_txg {
                        prev_unique += pool.dsize(&bp, true);
                    }
                }
                keep_sums.add(&pool, &bp, 1);
                keep.push(bp);
            } else {
                freed.add(&pool, &bp, 1);
                if !bp.is_embedded() {
                    self.pool.free_block(&mut self.alloc, &bp, txg)?;
                }
            }
        }
        self.deadlist_append(s.deadlist_obj, &keep, &keep_sums)?;
        self.mos.free_object(next.deadlist_obj)?;
        next.deadlist_obj = s.deadlist_obj;
        next.prev_snap_obj = s.prev_snap_obj;
        next.prev_snap_txg = s.prev_snap_txg;
        self.settle_next_unique(next_obj, &mut next, &s, prev.as_ref())?;
        self.finish_snapshot_destroy(name, &snap, prev, after_branch_point, prev_unique, &freed)
    }
}
