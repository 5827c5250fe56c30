//! The DMU's write side: changes to an objset accumulate in an [`ObjsetTx`]
//! during a transaction group and are written copy-on-write by
//! [`ObjsetTx::sync`].
//!
//! Theory: every changed level-0 block is written to a new place (or, when it
//! was itself born in this txg, rewritten in place), its new BP goes into the
//! parent indirect block, which therefore also changes and is written anew,
//! and so on up to the dnode. Changed dnodes are copied into the blocks of
//! the meta-dnode (object 0), which is synced the same way, and finally the
//! objset block is written: its BP is the new root of the objset. The old
//! version of every replaced block is handed to [`Accounting::killed`],
//! which frees it or keeps it for a snapshot.
//!
//! Reads during the txg go through the same object ([`ObjsetTx::dnode`],
//! [`ObjsetTx::read_block`]), so a change is visible as soon as it is made.
//!
//! Invariants:
//! * An object's tree is never left with a BP pointing at a freed block:
//!   the new block is written before the old one is killed.
//! * Fill counts and `dn_used` are recomputed from the BPs written, never
//!   guessed; an indirect block whose children are all holes becomes a hole.
//! * `nlevels` only grows; `maxblkid` follows the highest non-hole block.
//! * Blocks read back from disk are sliced by their real length: an
//!   indirect block must be `2^indblkshift` bytes and a dnode block the
//!   meta-dnode's block size, or the sync fails with an error naming it
//!   (a hostile pool must not panic the writer). Loops over objects and
//!   blocks follow what exists ([`Objset::object_ranges`],
//!   [`Objset::next_data_block`]), never a count from disk.

use crate::objset::{Dnode, Objset};
use crate::rawio::{ExtBlock, ExternalRecord, RawRecord};
use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::dnode::{
    block_dnode_starts, bonus_room, dnode_starts, slot_head_bytes, slot_owner, DnodePhys,
    DNODE_FLAG_SPILL_BLKPTR, DNODE_FLAG_USED_BYTES, DNODE_MAX_SLOTS, DNODE_SIZE,
};
use ozfs_format::external::{tag_is_known, ExtHeader, EXT_HEADER_LEN};
use ozfs_format::types::{comp, ot};
use ozfs_format::{BlkPtr, Error, Result};
use ozfs_spa::metaslab::Allocator;
use ozfs_spa::write::BlockProps;
use ozfs_spa::Pool;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// `DMU_USERUSED_OBJECT`: the ZAP of space and objects used per user id,
/// whose dnode lives in the objset block (like the two below), not in the
/// meta-dnode.
pub const USERUSED_OBJECT: u64 = u64::MAX;
/// `DMU_GROUPUSED_OBJECT`: the same per group id.
pub const GROUPUSED_OBJECT: u64 = u64::MAX - 1;
/// `DMU_PROJECTUSED_OBJECT`: the same per project id (4 KiB objsets).
pub const PROJECTUSED_OBJECT: u64 = u64::MAX - 2;
/// `DNODE_FLAG_USERUSED_ACCOUNTED`: the dnode's space is in the ZAPs.
pub const DNODE_FLAG_USERUSED_ACCOUNTED: u8 = 0x2;
/// `DNODE_FLAG_USEROBJUSED_ACCOUNTED`: the dnode is counted in the ZAPs.
pub const DNODE_FLAG_USEROBJUSED_ACCOUNTED: u8 = 0x8;

/// Whether `obj` is one of the accounting objects of the objset block.
pub fn is_accounting_object(obj: u64) -> bool {
    obj >= PROJECTUSED_OBJECT
}

/// What a file system's objset keeps of user, group and project
/// accounting (pool version 15 on; see [`ObjsetTx::sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserAccounting {
    /// Object counts too (`userobj_accounting` enabled).
    pub objects: bool,
    /// Per project too (`project_quota` enabled; a 4 KiB objset).
    pub projects: bool,
}

/// Where block births and deaths are charged (DSL accounting, deadlists).
pub trait Accounting {
    /// A new block was written.
    fn born(&mut self, bp: &BlkPtr);
    /// A block is no longer referenced by the live objset: free it or keep it for a snapshot.
    fn killed(&mut self, pool: &Pool, alloc: &mut Allocator, bp: &BlkPtr, txg: u64) -> Result<()>;
    /// A block born in this txg was rewritten at the same DVAs (same
    /// allocated size) as `new`: its PSIZE, hence the compressed and
    /// uncompressed totals, may have changed.
    fn rewritten(&mut self, pool: &Pool, old: &BlkPtr, new: &BlkPtr);
}

/// How blocks of this objset are written.
pub trait WritePolicy {
    fn props(&self, object_type: u8, level: u8) -> BlockProps;
}

/// Accounting that simply frees (the MOS, tests).
pub struct FreeAll {
    pub deflate: bool,
    pub born_dsize: i64,
}

impl Accounting for FreeAll {
    fn born(&mut self, _bp: &BlkPtr) {}
    fn killed(&mut self, pool: &Pool, alloc: &mut Allocator, bp: &BlkPtr, txg: u64) -> Result<()> {
        pool.free_block(alloc, bp, txg)
    }
    fn rewritten(&mut self, _pool: &Pool, _old: &BlkPtr, _new: &BlkPtr) {}
}

/// Objset block size for pool versions >= 15 (2 K objset_phys).
pub const OBJSET_PHYS_SIZE_V2: usize = 2048;

/// An objset being changed in the open txg.
pub struct ObjsetTx {
    /// The committed state (for reading unchanged blocks).
    pub os: Objset,
    /// Changed dnodes (full new contents), including new and freed (type 0) ones.
    pub dnodes: BTreeMap<u64, DnodePhys>,
    /// Changed level-0 blocks: Some(contents) or None (make it a hole).
    pub data: BTreeMap<(u64, u64), Option<Vec<u8>>>,
    /// Pre-compressed records staged in this txg (issue 7). A key is never
    /// in both `data` and `ext`: staging one removes it from the other.
    pub ext: BTreeMap<(u64, u64), ExtBlock>,
    /// Objects whose whole tree must be freed before anything else is synced.
    pub free_trees: BTreeMap<u64, DnodePhys>,
    /// Staged spill blocks (system attributes that do not fit the bonus
    /// buffer): Some(contents) or None (the object loses its spill block).
    pub spills: BTreeMap<u64, Option<Vec<u8>>>,
    /// Objset block size to write.
    pub objset_size: usize,
    /// Where the next object-number search starts.
    pub obj_next: std::cell::Cell<u64>,
    /// User, group and project accounting kept at every sync (a file
    /// system's objset on a pool of version 15 or later); None: none.
    pub accounting: Option<UserAccounting>,
    /// ZAP objects decoded for editing, kept between operations (they stay
    /// valid across syncs because this objset has no other writer).
    /// Lookups fill it too (through `&self`), hence the `RefCell`.
    pub zap_cache:
        std::cell::RefCell<std::collections::HashMap<u64, ozfs_format::zap_write::ZapObject>>,
    /// A raw receive (`zfs send -w`) into an encrypted objset, without its
    /// key: level-0 blocks, spill blocks and dnode blocks are stored as the
    /// stream sealed them ([`RawBlock`]), indirect blocks get the MAC of
    /// their children, objects keep the shape the stream gives them.
    pub raw_recv: bool,
    /// The objset's intent-log header changed (`os.phys.zil_header`): the
    /// objset block is rewritten at the next sync even if nothing else is.
    pub header_dirty: bool,
    /// Raw level-0 blocks staged (never also in `data` or `ext`).
    pub raw: BTreeMap<(u64, u64), RawBlock>,
    /// Raw spill blocks staged (replacing any in `spills`).
    pub raw_spills: BTreeMap<u64, RawBlock>,
    /// The sealing of dnode blocks (by block id of the meta-dnode) as a
    /// raw stream's OBJECT_RANGE records give it.
    pub raw_dnode_blocks: BTreeMap<u64, ozfs_codec::crypt::Sealed>,
    /// Objects' `maxblkid` as a raw stream gives it (kept whatever the
    /// blocks written: it is part of the dnode's MAC).
    pub raw_maxblkid: BTreeMap<u64, u64>,
    /// Objects' `nlevels` as a raw stream gives it: their trees grow to it.
    pub raw_nlevels: BTreeMap<u64, u8>,
    /// What an upper layer derived from a few objects of this objset (the
    /// ZPL's master node and system-attribute tables), kept until one of
    /// those objects changes: every staging call below drops it when it
    /// touches a watched object, so a reader never sees a stale copy.
    derived: std::cell::RefCell<Option<Derived>>,
    /// Largest micro ZAP block this objset's pool allows (128 KiB; 1 MiB
    /// with `large_microzap`, set by the DSL writer).
    pub micro_max_cap: usize,
    /// Values an upper layer derived from one object each (a file's
    /// attributes as the front end reports them), dropped when the object
    /// changes and when a sync writes it (its allocated size moves then).
    /// (One value per type and object.)
    obj_derived: std::cell::RefCell<ObjDerived>,
}

type DerivedValue = Arc<dyn std::any::Any + Send + Sync>;

/// Values derived from single objects, one per (object, type): flat in
/// one map with a multiplicative hash (a lookup is one probe of the
/// table and the value's own cache line — listings look up tens of
/// thousands of objects in a row). `types` lists the types ever kept, so
/// an object's values are forgotten by exact keys.
#[derive(Default)]
struct ObjDerived {
    map: std::collections::HashMap<(u64, std::any::TypeId), DerivedValue, KeyHash>,
    types: Vec<std::any::TypeId>,
}

type KeyHash = std::hash::BuildHasherDefault<ozfs_spa::arc::WordHasher>;

impl ObjDerived {
    fn get<T: std::any::Any + Send + Sync>(&self, obj: u64) -> Option<&T> {
        self.map
            .get(&(obj, std::any::TypeId::of::<T>()))
            .and_then(|v| v.downcast_ref::<T>())
    }

    fn keep<T: std::any::Any + Send + Sync>(&mut self, obj: u64, value: Arc<T>) {
        if self.map.len() >= OBJ_DERIVED_MAX {
            self.map.clear();
        }
        let t = std::any::TypeId::of::<T>();
        if !self.types.contains(&t) {
            self.types.push(t);
        }
        self.map.insert((obj, t), value);
    }

    fn forget(&mut self, obj: u64) {
        if self.map.is_empty() {
            return;
        }
        for t in &self.types {
            self.map.remove(&(obj, *t));
        }
    }
}

/// Staged entries past which a txg's maps are freed by another thread.
const BACKGROUND_DROP_MIN: usize = 4096;

/// Most per-object derived values kept (the map is emptied when full).
const OBJ_DERIVED_MAX: usize = 1 << 20;

/// A value derived from the objects in `watch` (see [`ObjsetTx::derived`]).
struct Derived {
    watch: Vec<u64>,
    value: DerivedValue,
}

/// A block received raw: stored as the sender stored it.
#[derive(Debug, Clone)]
pub struct RawBlock {
    /// The stored bytes (PSIZE, compressed and encrypted as sent).
    pub data: Vec<u8>,
    pub compress: u8,
    pub lsize: u64,
    pub sealed: ozfs_codec::crypt::Sealed,
}

impl ObjsetTx {
    pub fn new(os: Objset) -> ObjsetTx {
        // An objset keeps the size it was written at (OpenZFS writes 4 KiB
        // ones, whose tail holds the project-used dnode); older, smaller
        // ones grow to 2 KiB, room for the user- and group-used dnodes.
        let objset_size = if os.bp.is_hole() {
            OBJSET_PHYS_SIZE_V2
        } else {
            (os.bp.lsize() as usize).clamp(
                OBJSET_PHYS_SIZE_V2,
                ozfs_format::objset::OBJSET_PHYS_SIZE_V3,
            )
        };
        ObjsetTx {
            os,
            dnodes: BTreeMap::new(),
            data: BTreeMap::new(),
            ext: BTreeMap::new(),
            free_trees: BTreeMap::new(),
            spills: BTreeMap::new(),
            objset_size,
            accounting: None,
            zap_cache: Default::default(),
            obj_next: std::cell::Cell::new(1),
            raw_recv: false,
            header_dirty: false,
            raw: BTreeMap::new(),
            raw_spills: BTreeMap::new(),
            raw_dnode_blocks: BTreeMap::new(),
            raw_maxblkid: BTreeMap::new(),
            raw_nlevels: BTreeMap::new(),
            derived: Default::default(),
            micro_max_cap: 128 * 1024,
            obj_derived: Default::default(),
        }
    }

    /// The value derived from object `obj` and kept with
    /// [`Self::keep_obj_derived`], if it is of type `T` and the object did
    /// not change (nor was synced) since.
    pub fn obj_derived<T: std::any::Any + Send + Sync>(&self, obj: u64) -> Option<Arc<T>> {
        let m = self.obj_derived.borrow();
        let v = m.map.get(&(obj, std::any::TypeId::of::<T>()))?;
        v.clone().downcast::<T>().ok()
    }

    /// [`Self::obj_derived`] seen through `f` (no reference is taken: a
    /// listing reads tens of thousands of these in a row).
    pub fn with_obj_derived<T: std::any::Any + Send + Sync, R>(
        &self,
        obj: u64,
        f: impl FnOnce(&T) -> R,
    ) -> Option<R> {
        self.obj_derived.borrow().get::<T>(obj).map(f)
    }

    /// Keep `value`, derived from object `obj` alone, until it changes.
    pub fn keep_obj_derived<T: std::any::Any + Send + Sync>(&self, obj: u64, value: Arc<T>) {
        self.obj_derived.borrow_mut().keep(obj, value);
    }

    /// The value an upper layer derived and kept with [`Self::keep_derived`],
    /// if it is of type `T` and none of the objects it was derived from
    /// changed since.
    pub fn derived<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let d = self.derived.borrow();
        d.as_ref()
            .and_then(|d| d.value.clone().downcast::<T>().ok())
    }

    /// Keep `value`, derived from the objects `watch`, until one of them
    /// is changed in this objset.
    pub fn keep_derived<T: std::any::Any + Send + Sync>(&self, watch: Vec<u64>, value: Arc<T>) {
        *self.derived.borrow_mut() = Some(Derived { watch, value });
    }

    /// Object `obj` is about to be changed by its caller directly (a raw
    /// spill block): forget what was derived from it.
    pub fn forget_derived(&mut self, obj: u64) {
        self.touch(obj);
    }

    /// Object `obj` is about to change: forget what was derived from it.
    fn touch(&mut self, obj: u64) {
        let d = self.derived.get_mut();
        if d.as_ref().is_some_and(|d| d.watch.contains(&obj)) {
            *d = None;
        }
        self.obj_derived.get_mut().forget(obj);
    }

    /// Stage a raw block (a raw receive's WRITE).
    pub fn write_raw(&mut self, obj: u64, blkid: u64, b: RawBlock) {
        self.touch(obj);
        self.data.remove(&(obj, blkid));
        self.ext.remove(&(obj, blkid));
        self.raw.insert((obj, blkid), b);
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.os.pool
    }

    /// Whether anything changed.
    pub fn is_dirty(&self) -> bool {
        self.header_dirty
            || !self.dnodes.is_empty()
            || !self.data.is_empty()
            || !self.ext.is_empty()
            || !self.free_trees.is_empty()
            || !self.spills.is_empty()
            || !self.raw.is_empty()
            || !self.raw_spills.is_empty()
    }

    /// Keep user, group (and, as `a` says, object and project) accounting
    /// from the next sync on. Project accounting needs the 4 KiB objset,
    /// which the objset grows to, as OpenZFS grows it once `project_quota`
    /// is enabled.
    pub fn enable_accounting(&mut self, a: UserAccounting) {
        if a.projects {
            self.objset_size = self
                .objset_size
                .max(ozfs_format::objset::OBJSET_PHYS_SIZE_V3);
        }
        self.accounting = Some(a);
    }

    /// Current dnode of `obj` (changed or committed).
    pub fn dnode(&self, obj: u64) -> Result<Dnode> {
        if is_accounting_object(obj) {
            let phys = match self.dnodes.get(&obj) {
                Some(d) => d.clone(),
                None => match obj {
                    USERUSED_OBJECT => self.os.phys.userused_dnode.clone(),
                    GROUPUSED_OBJECT => self.os.phys.groupused_dnode.clone(),
                    _ => self.os.phys.projectused_dnode.clone(),
                },
            };
            if phys.object_type == 0 {
                return Err(Error::not_found(format!("accounting object {obj:#x}")));
            }
            return Ok(Dnode {
                object: obj,
                phys,
                swap: self.os.swap && !self.dnodes.contains_key(&obj),
            });
        }
        if let Some(d) = self.dnodes.get(&obj) {
            if d.object_type == 0 {
                return Err(Error::not_found(format!("object {obj}")));
            }
            return Ok(Dnode {
                object: obj,
                phys: d.clone(),
                swap: false,
            });
        }
        if self.free_trees.contains_key(&obj) {
            return Err(Error::not_found(format!("object {obj}")));
        }
        self.committed_dnode(obj)
    }

    /// The committed dnode of `obj`. In a raw receive its bonus is the
    /// whole bonus area as stored (encrypted: its bytes past `bonuslen`
    /// are ciphertext the dnode block's MAC covers), so that writing the
    /// dnode again keeps them.
    fn committed_dnode(&self, obj: u64) -> Result<Dnode> {
        let mut d = self.os.dnode(obj)?;
        if self.raw_recv && d.phys.object_type != 0 {
            if let Some(sb) = self.os.dnode_block_of(obj)? {
                let span = d.phys.size();
                let spill = if d.phys.spill.is_some() {
                    BLKPTR_SIZE
                } else {
                    0
                };
                let from = sb.at + 64 + BLKPTR_SIZE * d.phys.nblkptr as usize;
                let to = (sb.at + span).saturating_sub(spill);
                if let Some(area) = sb.bytes.get(from..to) {
                    d.phys.bonus = area.to_vec();
                }
            }
        }
        Ok(d)
    }

    /// Change a dnode (bonus, block size, type...).
    pub fn set_dnode(&mut self, obj: u64, dn: DnodePhys) {
        self.touch(obj);
        self.dnodes.insert(obj, dn);
    }

    /// Current contents of level-0 block `blkid` of `obj` (None = hole).
    pub fn read_block(&self, obj: u64, blkid: u64) -> Result<Option<Vec<u8>>> {
        if let Some(d) = self.data.get(&(obj, blkid)) {
            return Ok(d.clone());
        }
        if let Some(e) = self.ext.get(&(obj, blkid)) {
            return e.decode().map(Some);
        }
        if self.free_trees.contains_key(&obj) && !self.dnodes.contains_key(&obj) {
            return Ok(None);
        }
        let dn = self.dnode(obj)?;
        if self.free_trees.contains_key(&obj) {
            return Ok(None);
        }
        // A dnode changed in this txg still points at its committed tree.
        self.os.read_block(&dn, blkid)
    }

    /// The first block at or after `from` (up to `last` inclusive) that holds
    /// data (`want_data`) or is a hole (`!want_data`), counting this txg's
    /// changes; None if there is none in the range. Spans under a hole
    /// indirect block are skipped whole, so a sparse file costs by its data.
    pub fn next_block(
        &self,
        obj: u64,
        from: u64,
        last: u64,
        want_data: bool,
    ) -> Result<Option<u64>> {
        let dn = self.dnode(obj)?;
        let committed_gone = self.free_trees.contains_key(&obj);
        if want_data {
            return self.next_data(obj, &dn, from, last, committed_gone);
        }
        let epbs = dn.phys.indblkshift.saturating_sub(7).clamp(1, 20) as u32;
        let mut b = from;
        while b <= last {
            let has = match self.data.get(&(obj, b)) {
                Some(d) => d.is_some(),
                None if self.ext.contains_key(&(obj, b)) => true,
                None if committed_gone || b > dn.phys.maxblkid => false,
                None => {
                    // A hole L1 covers 2^epbs blocks: skip the span unless
                    // this txg changed something inside it.
                    if dn.phys.nlevels > 1 {
                        if let Some(l1) = self.os.block_bp(&dn, 1, b >> epbs)? {
                            if l1.is_hole() {
                                let end = ((b >> epbs) + 1) << epbs;
                                let dirty_data = self
                                    .data
                                    .range((obj, b)..(obj, end))
                                    .find(|(_, d)| d.is_some())
                                    .map(|((_, k), _)| *k);
                                let dirty_ext = self
                                    .ext
                                    .range((obj, b)..(obj, end))
                                    .next()
                                    .map(|(k, _)| k.1);
                                let dirty = match (dirty_data, dirty_ext) {
                                    (Some(a), Some(e)) => Some(a.min(e)),
                                    (a, e) => a.or(e),
                                };
                                if !want_data {
                                    return Ok(Some(b));
                                }
                                match dirty {
                                    Some(k) => b = k,
                                    None => b = end,
                                }
                                continue;
                            }
                        }
                    }
                    matches!(self.os.block_bp(&dn, 0, b)?, Some(bp) if !bp.is_hole())
                }
            };
            if has == want_data {
                return Ok(Some(b));
            }
            b += 1;
        }
        Ok(None)
    }

    /// [`next_block`](Self::next_block) for data: the first of this txg's
    /// staged blocks and the committed blocks (found through the tree,
    /// holes skipped whole) that holds data. The work follows the blocks
    /// that exist, however far apart.
    fn next_data(
        &self,
        obj: u64,
        dn: &Dnode,
        from: u64,
        last: u64,
        committed_gone: bool,
    ) -> Result<Option<u64>> {
        let dirty = |b: u64| -> Option<u64> {
            let d = self
                .data
                .range((obj, b)..=(obj, last))
                .find(|(_, d)| d.is_some())
                .map(|((_, k), _)| *k);
            let e = self
                .ext
                .range((obj, b)..=(obj, last))
                .next()
                .map(|(k, _)| k.1);
            match (d, e) {
                (Some(a), Some(e)) => Some(a.min(e)),
                (a, e) => a.or(e),
            }
        };
        let mut b = from;
        while b <= last {
            let staged = dirty(b);
            let committed = if committed_gone {
                None
            } else {
                self.os.next_data_block(dn, b)?.filter(|&c| c <= last)
            };
            match (staged, committed) {
                (Some(s), Some(c)) if s <= c => return Ok(Some(s)),
                (_, Some(c)) => {
                    // A committed block punched in this txg is a hole now.
                    if matches!(self.data.get(&(obj, c)), Some(None)) {
                        b = c + 1;
                        continue;
                    }
                    return Ok(Some(c));
                }
                (s, None) => return Ok(s),
            }
        }
        Ok(None)
    }

    /// Whether `obj`'s data is unchanged in this txg: no block staged or
    /// freed, and its dnode, if changed (an access time, a mode), still
    /// names the committed block tree. Its committed dnode's blocks are
    /// then its data, and may be read without this tx.
    pub fn data_is_clean(&self, obj: u64) -> bool {
        let blocks = (obj, 0)..=(obj, u64::MAX);
        if self.free_trees.contains_key(&obj)
            || self.data.range(blocks.clone()).next().is_some()
            || self.ext.range(blocks.clone()).next().is_some()
            || self.raw.range(blocks).next().is_some()
        {
            return false;
        }
        let Some(now) = self.dnodes.get(&obj) else {
            return true;
        };
        let Ok(was) = self.os.dnode(obj) else {
            return false;
        };
        let was = &was.phys;
        now.object_type == was.object_type
            && now.indblkshift == was.indblkshift
            && now.nlevels == was.nlevels
            && now.nblkptr == was.nblkptr
            && now.datablkszsec == was.datablkszsec
            && now.maxblkid == was.maxblkid
            && now.extra_slots == was.extra_slots
            && now.blkptr == was.blkptr
    }

    /// Replace block `blkid` of `obj` (length must be the object's block size).
    pub fn write_block(&mut self, obj: u64, blkid: u64, data: Vec<u8>) {
        self.touch(obj);
        self.ext.remove(&(obj, blkid));
        self.raw.remove(&(obj, blkid));
        self.data.insert((obj, blkid), Some(data));
    }

    /// Stage a pre-compressed record as block `blkid` of `obj`, replacing
    /// the whole record (see [`crate::rawio`]). The pool must have
    /// `org.ozfs:external_compression` active (the DSL layer activates it).
    /// Returns the physical size the block will have.
    pub fn write_precompressed(
        &mut self,
        obj: u64,
        blkid: u64,
        rec: &ExternalRecord,
    ) -> Result<u64> {
        let e = self.build_external(rec)?;
        self.stage_external(obj, blkid, e)
    }

    /// Check and build the stored form of a client's record (tag, payload
    /// size, the client's checksum) without staging anything: callers
    /// validate before they change a file.
    pub fn build_external(&self, rec: &ExternalRecord) -> Result<ExtBlock> {
        ExtBlock::build(rec, self.os.pool.min_sector())
    }

    /// Pre-compressed records may be staged: the pool has the feature.
    pub fn check_external_active(&self) -> Result<()> {
        if self.os.key.is_some() || self.raw_recv {
            return Err(Error::unsupported(
                "pre-compressed record",
                "an encrypted dataset does not take pre-compressed records",
            ));
        }
        if self.os.pool.external_active() {
            return Ok(());
        }
        Err(Error::unsupported(
            format!("pool '{}'", self.os.pool.name),
            "pre-compressed records need the feature org.ozfs:external_compression",
        ))
    }

    /// Stage a record built by [`build_external`](Self::build_external) as
    /// block `blkid` of `obj`, whose block size must be its logical size.
    /// Returns its physical size.
    pub fn stage_external(&mut self, obj: u64, blkid: u64, e: ExtBlock) -> Result<u64> {
        self.check_external_active()?;
        self.touch(obj);
        let dn = self.dnode(obj)?;
        let bs = dn.phys.datablksz();
        if e.lsize != bs {
            return Err(Error::Invalid(format!(
                "object {obj}: logical size {} is not its record size {bs}",
                e.lsize
            )));
        }
        if blkid.checked_mul(bs).is_none_or(|o| o >= 1 << 62) {
            return Err(Error::Invalid(format!("record {blkid} is beyond any file")));
        }
        let psize = e.image.len() as u64;
        self.data.remove(&(obj, blkid));
        self.ext.insert((obj, blkid), e);
        Ok(psize)
    }

    /// Refuse, before anything changes, a partial change of a block that
    /// is a pre-compressed record ozfs cannot decode ([`Error::Opaque`]).
    pub fn check_modifiable(&self, obj: u64, blkid: u64) -> Result<()> {
        self.modifiable_tag(obj, blkid).map(|_| ())
    }

    /// [`external_tag`](Self::external_tag) of a block that may be changed
    /// in place: [`Error::Opaque`] when ozfs cannot decode it.
    fn modifiable_tag(&self, obj: u64, blkid: u64) -> Result<Option<u8>> {
        match self.external_tag(obj, blkid)? {
            Some(t) if !tag_is_known(t) => Err(Error::Opaque {
                what: format!("object {obj} block {blkid}"),
                tag: t,
            }),
            tag => Ok(tag),
        }
    }

    /// The algorithm tag of block `blkid` of `obj` if it is (staged or
    /// committed as) a pre-compressed record.
    pub fn external_tag(&self, obj: u64, blkid: u64) -> Result<Option<u8>> {
        if let Some(e) = self.ext.get(&(obj, blkid)) {
            return Ok(Some(e.header()?.tag));
        }
        if self.data.contains_key(&(obj, blkid)) || self.free_trees.contains_key(&obj) {
            return Ok(None);
        }
        let dn = self.dnode(obj)?;
        if blkid > dn.phys.maxblkid {
            return Ok(None);
        }
        match self.os.block_bp(&dn, 0, blkid)? {
            Some(bp) if !bp.is_hole() && bp.compression() == comp::EXTERNAL => {
                let img = self.os.pool.read_external_image(&bp)?;
                Ok(Some(ExtHeader::parse(&img)?.tag))
            }
            _ => Ok(None),
        }
    }

    /// Change part of block `blkid` of `obj` in place: a plain block is
    /// read, changed and staged plain; a pre-compressed one whose algorithm
    /// ozfs knows is decoded, changed and compressed again with the same
    /// algorithm (stored plain when it no longer fits); one ozfs cannot
    /// decode is refused ([`Error::Opaque`]) and left as it was.
    pub fn modify_block(
        &mut self,
        obj: u64,
        blkid: u64,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<()> {
        self.touch(obj);
        let bs = self.dnode(obj)?.phys.datablksz() as usize;
        let tag = self.modifiable_tag(obj, blkid)?;
        // A block this txg already holds whole (staged data is never also
        // a pre-compressed or raw record) is changed where it is.
        if tag.is_none() {
            if let Some(Some(b)) = self.data.get_mut(&(obj, blkid)) {
                if b.len() == bs {
                    f(b);
                    return Ok(());
                }
            }
        }
        let mut block = self.read_block(obj, blkid)?.unwrap_or_default();
        block.resize(bs, 0);
        f(&mut block);
        if let Some(t) = tag {
            let max = bs.saturating_sub(EXT_HEADER_LEN);
            if let Some(payload) = ozfs_codec::compress::external_compress(t, &block, max)? {
                let rec = ExternalRecord {
                    tag: t,
                    lsize: bs as u64,
                    payload,
                    cksum: None,
                };
                let e = ExtBlock::build(&rec, self.os.pool.min_sector())?;
                self.data.remove(&(obj, blkid));
                self.ext.insert((obj, blkid), e);
                return Ok(());
            }
        }
        self.write_block(obj, blkid, block);
        Ok(())
    }

    /// Records `first .. first + count` of `obj` read raw, counting this
    /// txg's changes (see [`crate::rawio`]).
    pub fn read_raw(&self, obj: u64, first: u64, count: u64) -> Result<Vec<(u64, RawRecord)>> {
        let dn = self.dnode(obj)?;
        let bs = dn.phys.datablksz();
        let last = self.max_blkid(obj)?;
        let end = first.saturating_add(count).min(last.saturating_add(1));
        let mut committed = Vec::new();
        if !self.free_trees.contains_key(&obj) {
            let mut b = first;
            while b < end {
                let part = self.os.read_raw(&dn, b, end - b)?;
                match part.last() {
                    Some((k, _)) => b = k + 1,
                    None => break,
                }
                committed.extend(part);
            }
        }
        let mut committed = committed.into_iter().peekable();
        let mut out = Vec::new();
        for b in first..end {
            let old = match committed.peek() {
                Some((k, _)) if *k == b => committed.next().map(|(_, r)| r),
                _ => None,
            };
            let r = if let Some(e) = self.ext.get(&(obj, b)) {
                RawRecord::from_staged(e)?
            } else if let Some(d) = self.data.get(&(obj, b)) {
                match d {
                    Some(d) => RawRecord::Plain {
                        data: Arc::new(d.clone()),
                    },
                    None => RawRecord::Hole { lsize: bs },
                }
            } else {
                old.unwrap_or(RawRecord::Hole { lsize: bs })
            };
            out.push((b, r));
        }
        Ok(out)
    }

    /// Highest block id of `obj`, counting blocks changed in this txg.
    pub fn max_blkid(&self, obj: u64) -> Result<u64> {
        let dn = self.dnode(obj)?;
        let dirty = self
            .data
            .range((obj, 0)..=(obj, u64::MAX))
            .filter(|(_, d)| d.is_some())
            .map(|((_, b), _)| *b)
            .chain(self.ext.range((obj, 0)..=(obj, u64::MAX)).map(|(k, _)| k.1))
            .max()
            .unwrap_or(0);
        Ok(dn.phys.maxblkid.max(dirty))
    }

    /// Make every block of `obj` from `first` on a hole (truncation). Only
    /// the blocks that hold data are visited, however large `maxblkid`.
    pub fn punch_from(&mut self, obj: u64, first: u64) -> Result<()> {
        let last = self.max_blkid(obj)?;
        let mut b = first;
        while b <= last {
            let Some(k) = self.next_block(obj, b, last, true)? else {
                break;
            };
            self.punch_block(obj, k);
            b = k + 1;
        }
        Ok(())
    }

    /// Make block `blkid` of `obj` a hole.
    pub fn punch_block(&mut self, obj: u64, blkid: u64) {
        self.touch(obj);
        self.ext.remove(&(obj, blkid));
        self.raw.remove(&(obj, blkid));
        self.data.insert((obj, blkid), None);
    }

    /// Read `len` bytes at `offset` of an object (holes are zeros).
    pub fn read(&self, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        let dn = self.dnode(obj)?;
        let bs = dn.phys.datablksz();
        if bs == 0 {
            return Err(Error::corrupt(format!("object {obj}"), "block size 0"));
        }
        let mut out = vec![0u8; len];
        let mut done = 0usize;
        while done < len {
            let pos = offset.saturating_add(done as u64);
            let blkid = pos / bs;
            let inner = (pos % bs) as usize;
            let n = (bs as usize - inner).min(len - done);
            // Blocks are borrowed (dirty ones from this txg, committed ones
            // from the pool's cache): only the wanted bytes are copied.
            let dirty = self.data.get(&(obj, blkid));
            let committed;
            let decoded;
            let b: Option<&[u8]> = match dirty {
                Some(d) => d.as_deref(),
                None if self.ext.contains_key(&(obj, blkid)) => {
                    decoded = self.read_block(obj, blkid)?;
                    decoded.as_deref()
                }
                None if self.free_trees.contains_key(&obj) => None,
                None => {
                    committed = self.os.data_block(&dn, blkid)?;
                    committed.as_deref().map(|v| v.as_slice())
                }
            };
            if let Some(b) = b {
                // Past a short block's end (hostile datablkszsec): zeros.
                let src = b.get(inner..).unwrap_or_default();
                let avail = src.len().min(n);
                out[done..done + avail].copy_from_slice(&src[..avail]);
            }
            done += n;
        }
        Ok(out)
    }

    /// The bytes a write of `len` at `off` of `obj`, whose data blocks are
    /// `bs` bytes, adds to this txg: the whole of each block it touches
    /// that is not dirty yet (at least `len`), as OpenZFS's dirty
    /// accounting charges whole dbufs. Past 256 blocks every block counts.
    pub fn dirty_cost(&self, obj: u64, bs: u64, off: u64, len: u64) -> u64 {
        if bs == 0 || len == 0 {
            return len;
        }
        let first = off / bs;
        let last = off.saturating_add(len - 1) / bs;
        let fresh = if last - first > 256 {
            last - first + 1
        } else {
            (first..=last)
                .filter(|b| !self.data.contains_key(&(obj, *b)))
                .count() as u64
        };
        len.max(fresh.saturating_mul(bs))
    }

    /// Write bytes at `offset` of an object (read-modify-write of partial blocks).
    pub fn write(&mut self, obj: u64, offset: u64, buf: &[u8]) -> Result<()> {
        let dn = self.dnode(obj)?;
        let bs = dn.phys.datablksz();
        if bs == 0 {
            return Err(Error::corrupt(format!("object {obj}"), "block size 0"));
        }
        // Only the first and last blocks can be partial. A write that
        // spans several blocks checks both before any block changes; one
        // within a single block is checked by modify_block itself.
        if !buf.is_empty() {
            let end = offset.saturating_add(buf.len() as u64);
            let (first, last) = (offset / bs, (end - 1) / bs);
            if first != last {
                if !offset.is_multiple_of(bs) {
                    self.check_modifiable(obj, first)?;
                }
                if !end.is_multiple_of(bs) {
                    self.check_modifiable(obj, last)?;
                }
            }
        }
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset.saturating_add(done as u64);
            let blkid = pos / bs;
            let inner = (pos % bs) as usize;
            let n = (bs as usize - inner).min(buf.len() - done);
            let src = &buf[done..done + n];
            if n == bs as usize {
                self.write_block(obj, blkid, src.to_vec());
            } else {
                self.modify_block(obj, blkid, &mut |b| {
                    b[inner..inner + n].copy_from_slice(src)
                })?;
            }
            done += n;
        }
        Ok(())
    }

    /// Find a free object number at or above `start` (slot 0 never used).
    pub fn alloc_object(&self, start: u64) -> Result<u64> {
        let meta = self.dnode_meta();
        let capacity = meta
            .maxblkid
            .saturating_add(1)
            .saturating_mul(meta.datablksz())
            / DNODE_SIZE as u64;
        // Continue after the last allocation (like os_obj_next) instead of
        // rescanning from the hint every time: creating N files stays O(N).
        let mut obj = start.max(1).max(self.obj_next.get());
        loop {
            if obj >= capacity
                && !self.dnodes.contains_key(&obj)
                && !self.free_trees.contains_key(&obj)
                && self.owner_of_slot(obj)?.is_none()
            {
                return Ok(obj);
            }
            let free = match self.dnodes.get(&obj) {
                Some(d) => d.object_type == 0 && !self.free_trees.contains_key(&obj),
                None => {
                    if self.free_trees.contains_key(&obj) {
                        false
                    } else {
                        match self.os.dnode(obj) {
                            Ok(d) => d.phys.object_type == 0,
                            Err(Error::NotFound(_)) => true,
                            Err(e) => return Err(e),
                        }
                    }
                }
            };
            if free && self.owner_of_slot(obj)?.is_none() {
                return Ok(obj);
            }
            obj += 1;
            if obj > (1 << 48) {
                return Err(Error::Invalid("no free object numbers".into()));
            }
        }
    }

    /// Create a new object: returns its number. `bonus` is stored as given; the number of block
    /// pointers follows the bonus size as ZFS chooses it (FORMAT.md §5.2).
    pub fn create_object(
        &mut self,
        object_type: u8,
        blksz: u64,
        bonustype: u8,
        bonus: Vec<u8>,
        hint: u64,
    ) -> Result<u64> {
        let obj = self.alloc_object(hint)?;
        self.obj_next.set(obj + 1);
        self.put_new_dnode(obj, object_type, blksz, bonustype, bonus, 1)?;
        Ok(obj)
    }

    /// Give a new, still empty object created in this txg indirect blocks
    /// of `2^shift` bytes (10 to 17) instead of the default 16 KiB.
    pub fn set_indblkshift(&mut self, obj: u64, shift: u8) -> Result<()> {
        let dn = self.dnodes.get_mut(&obj).filter(|d| {
            d.object_type != 0 && d.maxblkid == 0 && d.blkptr.iter().all(|b| b.is_hole())
        });
        let Some(dn) = dn else {
            return Err(Error::Invalid(format!(
                "object {obj}: indirect block size set on an object that is not new and empty"
            )));
        };
        if !(10..=17).contains(&shift) {
            return Err(Error::Invalid(format!("indirect block shift {shift}")));
        }
        dn.indblkshift = shift;
        Ok(())
    }

    /// The dnode of a new object at `obj` taking `slots` 512-byte dnode
    /// slots: block pointers as many as the bonus leaves room for
    /// (FORMAT.md §5.2), one level, 16 KiB indirects.
    fn put_new_dnode(
        &mut self,
        obj: u64,
        object_type: u8,
        blksz: u64,
        bonustype: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<()> {
        self.touch(obj);
        let room = bonus_room(slots);
        if !(1..=DNODE_MAX_SLOTS).contains(&slots)
            || bonus.len() > room
            || blksz == 0
            || !blksz.is_multiple_of(512)
            || blksz > ozfs_format::blkptr::SPA_MAXBLOCKSIZE
        {
            return Err(Error::Invalid(format!(
                "object {obj}: {slots} slots, bonus {} bytes, block size {blksz}",
                bonus.len()
            )));
        }
        let nblkptr = (1 + (room - bonus.len()) / BLKPTR_SIZE).clamp(1, 3) as u8;
        let dn = DnodePhys {
            object_type,
            indblkshift: 14,
            nlevels: 1,
            nblkptr,
            bonustype,
            flags: DNODE_FLAG_USED_BYTES,
            datablkszsec: (blksz / 512) as u16,
            bonuslen: bonus.len() as u16,
            extra_slots: slots - 1,
            blkptr: vec![BlkPtr::default(); nblkptr as usize],
            bonus,
            ..Default::default()
        };
        // The extra slots are this dnode's now: no freed slot there may
        // write its zeros over it at sync.
        for s in obj + 1..obj + slots as u64 {
            self.dnodes.remove(&s);
        }
        self.dnodes.insert(obj, dn);
        Ok(())
    }

    /// The type and extra slots of the dnode that starts at slot `obj`
    /// ((0, 0) for a free slot), changed or committed. Meaningful only for
    /// a slot that is not inside another dnode ([`Self::owner_of_slot`]).
    pub fn slot_head(&self, obj: u64) -> Result<(u8, u8)> {
        let committed = self.os.dnode_block_of(obj)?;
        Ok(self.head_over(obj, committed.as_ref().map(|b| (&b.bytes[..], b.at))))
    }

    /// [`Self::slot_head`] of `obj` given its committed dnode block and
    /// the slot's offset there.
    fn head_over(&self, obj: u64, committed: Option<(&[u8], usize)>) -> (u8, u8) {
        if let Some(d) = self.dnodes.get(&obj) {
            return (d.object_type, d.extra_slots);
        }
        if self.free_trees.contains_key(&obj) {
            return (0, 0);
        }
        committed.map_or((0, 0), |(b, at)| slot_head_bytes(b, at / DNODE_SIZE))
    }

    /// Slots per dnode block (a dnode never crosses one).
    fn slots_per_block(&self) -> u64 {
        (self.dnode_meta().datablksz() / DNODE_SIZE as u64).max(1)
    }

    /// When slot `obj` lies inside a dnode of several slots (a large
    /// dnode), the object that dnode belongs to: the slot's dnode block,
    /// with this txg's changes over it, walked from its start
    /// ([`ozfs_format::dnode::slot_owner`]). The committed block is read
    /// once (through the block cache), no dnode decoded.
    pub fn owner_of_slot(&self, obj: u64) -> Result<Option<u64>> {
        let rel = (obj % self.slots_per_block()) as usize;
        if rel == 0 {
            return Ok(None);
        }
        let base = obj - rel as u64;
        let committed = self.os.dnode_block_of(base)?;
        let block = committed.as_ref().map(|b| (&b.bytes[..], b.at));
        let head = |s: usize| {
            let at = block.map(|(b, at)| (b, at + s * DNODE_SIZE));
            self.head_over(base + s as u64, at)
        };
        Ok(slot_owner(rel, head).map(|s| base + s as u64))
    }

    /// Allocate object number `obj` (which must be free in this txg) with
    /// the given shape: how `zfs receive` recreates a sender's objects.
    /// A dnode of several slots must lie within one dnode block, every
    /// slot of it free.
    pub fn claim_object(
        &mut self,
        obj: u64,
        object_type: u8,
        blksz: u64,
        bonustype: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<()> {
        if obj == 0 || obj >= 1 << 48 {
            return Err(Error::Invalid(format!("object number {obj} out of range")));
        }
        let per = self.slots_per_block();
        if slots == 0 || obj % per + slots as u64 > per {
            return Err(Error::Invalid(format!(
                "object {obj}: {slots} dnode slots cross a dnode block"
            )));
        }
        if let Some(o) = self.owner_of_slot(obj)? {
            return Err(Error::Invalid(format!(
                "object {obj} lies inside object {o}'s dnode"
            )));
        }
        for s in obj..obj + slots as u64 {
            if self.slot_head(s)?.0 != 0 {
                return Err(Error::Invalid(format!("object {s} is in use")));
            }
        }
        self.put_new_dnode(obj, object_type, blksz, bonustype, bonus, slots)
    }

    /// Allocated object numbers in [`first`, `end`): committed ones (up to
    /// the meta-dnode's size) and ones created in this txg, ascending. The
    /// work follows the objects that exist, never the width of the range.
    pub fn allocated_in(&self, first: u64, end: u64) -> Result<Vec<u64>> {
        let mut v = BTreeSet::new();
        // Committed objects: only in the dnode blocks that exist in the
        // range (found through the meta-dnode's tree, holes skipped whole).
        let meta = self.os.meta_dnode();
        let per = meta.phys.datablksz() / DNODE_SIZE as u64;
        if per == 0 {
            return Err(Error::corrupt("meta-dnode", "block size below one dnode"));
        }
        let mut blk = first / per;
        while blk.saturating_mul(per) < end {
            let Some(b) = self.os.next_data_block(&meta, blk)? else {
                break;
            };
            let lo = b.saturating_mul(per).max(first);
            let hi = b.saturating_add(1).saturating_mul(per).min(end);
            // Dnodes from the block's start, each over its extra slots.
            let base = b.saturating_mul(per);
            let committed = self.os.dnode_block_of(base)?;
            let block = committed.as_ref().map(|b| (&b.bytes[..], b.at));
            let head = |s: usize| {
                let at = block.map(|(bytes, at)| (bytes, at + s * DNODE_SIZE));
                self.head_over(base + s as u64, at)
            };
            for (s, _) in dnode_starts(hi.saturating_sub(base) as usize, head) {
                if base + s as u64 >= lo {
                    v.insert(base + s as u64);
                }
            }
            blk = b + 1;
        }
        for (&obj, d) in self.dnodes.range(first..end.max(first)) {
            if d.object_type != 0 {
                v.insert(obj);
            }
        }
        Ok(v.into_iter().collect())
    }

    /// One past the highest object number that may be allocated (committed
    /// dnode blocks and objects changed in this txg).
    pub fn object_limit(&self) -> u64 {
        let meta = self.dnode_meta();
        let capacity = meta
            .maxblkid
            .saturating_add(1)
            .saturating_mul(meta.datablksz())
            / DNODE_SIZE as u64;
        let dirty = self.dnodes.keys().next_back().map(|k| k + 1).unwrap_or(0);
        capacity.max(dirty)
    }

    /// Create a new (micro) ZAP object.
    pub fn create_zap(
        &mut self,
        object_type: u8,
        bonustype: u8,
        bonus: Vec<u8>,
        normflags: u64,
        hint: u64,
    ) -> Result<u64> {
        let z = ozfs_format::zap_write::ZapObject::new_micro(random_u64() | 1, normflags);
        let bs = z.block_size as u64;
        let obj = self.create_object(object_type, bs, bonustype, bonus, hint)?;
        if let Some(b) = z.blocks.get(&0) {
            self.write_block(obj, 0, b.clone());
        }
        Ok(obj)
    }

    /// [`claim_object`](Self::claim_object) of a new (micro) ZAP object.
    pub fn claim_zap(
        &mut self,
        obj: u64,
        object_type: u8,
        bonustype: u8,
        bonus: Vec<u8>,
        normflags: u64,
        slots: u8,
    ) -> Result<()> {
        let z = ozfs_format::zap_write::ZapObject::new_micro(random_u64() | 1, normflags);
        let bs = z.block_size as u64;
        self.claim_object(obj, object_type, bs, bonustype, bonus, slots)?;
        if let Some(b) = z.blocks.get(&0) {
            self.write_block(obj, 0, b.clone());
        }
        Ok(())
    }

    /// Give object `obj` a spill block holding `data` (None: take its
    /// spill block away), written at sync; the dnode's bonus room shrinks
    /// by the spill block pointer at once.
    pub fn set_spill(&mut self, obj: u64, data: Option<Vec<u8>>) -> Result<()> {
        self.touch(obj);
        let mut dn = self.dnode(obj)?.phys;
        if data.is_some() && dn.spill.is_none() {
            // The spill block pointer takes the bonus's last 128 bytes.
            let cap = dn.max_bonuslen().saturating_sub(BLKPTR_SIZE);
            if dn.bonus.len() > cap {
                return Err(Error::Invalid(format!(
                    "object {obj}: a bonus of {} bytes leaves no room for a spill block pointer",
                    dn.bonus.len()
                )));
            }
            dn.flags |= DNODE_FLAG_SPILL_BLKPTR;
            dn.spill = Some(BlkPtr::default());
        }
        if data.is_none() {
            // The committed block is freed at sync; the room is back now.
            dn.spill = None;
            dn.flags &= !DNODE_FLAG_SPILL_BLKPTR;
        }
        if let Some(d) = &data {
            if d.is_empty() || d.len() > 128 * 1024 {
                return Err(Error::Invalid(format!(
                    "object {obj}: a spill block of {} bytes",
                    d.len()
                )));
            }
        }
        self.dnodes.insert(obj, dn);
        self.spills.insert(obj, data);
        Ok(())
    }

    /// The contents of `obj`'s spill block (staged or committed), if any.
    pub fn spill(&self, obj: u64) -> Result<Option<Vec<u8>>> {
        if let Some(s) = self.spills.get(&obj) {
            return Ok(s.clone());
        }
        // A slot freed in this txg has no committed spill block any more.
        if self.free_trees.contains_key(&obj) {
            return Ok(None);
        }
        match self.os.dnode(obj).map(|d| d.phys.spill) {
            Ok(Some(bp)) if !bp.is_hole() => Ok(Some(self.os.read_bp(&bp)?)),
            Ok(_) | Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replace an object's bonus buffer (no longer than its capacity).
    pub fn set_bonus(&mut self, obj: u64, bonus: Vec<u8>) -> Result<()> {
        self.touch(obj);
        let mut dn = self.dnode(obj)?.phys;
        let cap = dn.max_bonuslen();
        if bonus.len() > cap {
            return Err(Error::Invalid(format!(
                "bonus of {} bytes exceeds object {obj}'s {cap}",
                bonus.len()
            )));
        }
        dn.bonuslen = bonus.len() as u16;
        dn.bonus = bonus;
        self.dnodes.insert(obj, dn);
        Ok(())
    }

    fn dnode_meta(&self) -> DnodePhys {
        self.dnodes
            .get(&0)
            .cloned()
            .unwrap_or_else(|| self.os.phys.meta_dnode.clone())
    }

    /// The level-0 blocks staged for `obj` in this txg (data, holes and
    /// external records), by block id. The data blocks are taken out of
    /// the txg (a sync hands them on to the devices without a copy: they
    /// are left to no one else — the sync clears the txg's maps).
    fn staged_blocks(&mut self, obj: u64) -> Vec<(u64, Staged<'static>)> {
        let mut mine = self.data.split_off(&(obj, 0));
        if let Some(next) = obj.checked_add(1) {
            let mut rest = mine.split_off(&(next, 0));
            self.data.append(&mut rest);
        }
        let mut blocks: Vec<(u64, Staged<'static>)> = mine
            .into_iter()
            .map(|((_, b), d)| {
                let s = match d {
                    Some(d) => Staged::Data(std::borrow::Cow::Owned(d)),
                    None => Staged::Hole,
                };
                (b, s)
            })
            .collect();
        blocks.extend(
            self.ext
                .range((obj, 0)..=(obj, u64::MAX))
                .map(|((_, b), e)| (*b, Staged::External(e.clone()))),
        );
        blocks.extend(
            self.raw
                .range((obj, 0)..=(obj, u64::MAX))
                .map(|((_, b), r)| (*b, Staged::Raw(r.clone()))),
        );
        blocks.sort_by_key(|(b, _)| *b);
        blocks
    }

    /// The committed dnode that starts at slot `obj`, if one does (not a
    /// free slot, nor one inside another object's large dnode).
    fn committed_head(&self, obj: u64) -> Result<Option<Dnode>> {
        // A slot inside another object's large dnode holds no dnode.
        if self.os.bp.is_hole() || self.os.slot_owner(obj)?.is_some_and(|o| o != obj) {
            return Ok(None);
        }
        match self.os.dnode(obj) {
            Ok(d) if d.phys.object_type != 0 => Ok(Some(d)),
            Ok(_) | Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Apply a sync's accounting changes to the accounting ZAPs (made, as
    /// 512-byte micro ZAPs, if the objset has none yet: OpenZFS makes the
    /// user and group ones at the first sync with accounting, the project
    /// one once project accounting is on). An entry that reaches zero is
    /// removed; arithmetic wraps, as OpenZFS's does.
    fn apply_charges(&mut self, a: UserAccounting, charges: &Charges) -> Result<()> {
        let mut objs = vec![USERUSED_OBJECT, GROUPUSED_OBJECT];
        if a.projects {
            objs.push(PROJECTUSED_OBJECT);
        }
        for &obj in &objs {
            if matches!(self.dnode(obj), Err(Error::NotFound(_))) {
                self.create_accounting_zap(obj);
            }
        }
        for (&(obj, id, objects), &delta) in &charges.by_key {
            if delta == 0 || !objs.contains(&obj) {
                continue;
            }
            let key = if objects {
                format!("obj-{id:x}")
            } else {
                format!("{id:x}")
            };
            let cur = crate::zap_tx::lookup(self, obj, key.as_bytes())?
                .and_then(|e| e.as_u64())
                .unwrap_or(0);
            let new = cur.wrapping_add(delta as u64);
            if new == 0 {
                crate::zap_tx::remove(self, obj, key.as_bytes())?;
            } else {
                crate::zap_tx::update(self, obj, &key, 8, &[new])?;
            }
        }
        Ok(())
    }

    /// A new, empty accounting ZAP at `obj` (one of the objset block's
    /// dnodes), as OpenZFS's `zap_create_claim` makes it: type 39, no
    /// bonus, 512-byte micro ZAP, 128 KiB indirect blocks.
    fn create_accounting_zap(&mut self, obj: u64) {
        let z = ozfs_format::zap_write::ZapObject::new_micro(random_u64() | 1, 0);
        let dn = DnodePhys {
            object_type: ot::USERGROUP_USED,
            indblkshift: 17,
            nlevels: 1,
            nblkptr: 3,
            flags: DNODE_FLAG_USED_BYTES,
            datablkszsec: (z.block_size / 512) as u16,
            blkptr: vec![BlkPtr::default(); 3],
            ..Default::default()
        };
        self.dnodes.insert(obj, dn);
        self.zap_cache.get_mut().remove(&obj);
        if let Some(b) = z.blocks.get(&0) {
            self.write_block(obj, 0, b.clone());
        }
    }

    /// Free an object: its whole tree goes at sync, its slot becomes free.
    pub fn free_object(&mut self, obj: u64) -> Result<()> {
        self.touch(obj);
        self.zap_cache.get_mut().remove(&obj);
        self.spills.remove(&obj);
        self.raw_spills.remove(&obj);
        self.raw_maxblkid.remove(&obj);
        self.raw_nlevels.remove(&obj);
        let committed = match self.os.dnode(obj) {
            Ok(d) => Some(d.phys),
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let extra = match self.dnodes.get(&obj) {
            Some(d) => d.extra_slots,
            None => committed.as_ref().map_or(0, |c| c.extra_slots),
        };
        if let Some(c) = committed {
            if c.object_type != 0 {
                self.free_trees.insert(obj, c);
            }
        }
        self.data.retain(|(o, _), _| *o != obj);
        self.ext.retain(|(o, _), _| *o != obj);
        self.raw.retain(|(o, _), _| *o != obj);
        // Every slot of the dnode becomes free (and is zeroed at sync).
        for s in obj..=obj + extra as u64 {
            self.dnodes.insert(s, DnodePhys::default());
        }
        Ok(())
    }

    /// Write everything changed; returns the objset's new BP.
    pub fn sync(
        &mut self,
        alloc: &mut Allocator,
        txg: u64,
        policy: &dyn WritePolicy,
        acct: &mut dyn Accounting,
    ) -> Result<BlkPtr> {
        let pool = self.os.pool.clone();
        // 1. Whole trees of freed objects.
        let frees = std::mem::take(&mut self.free_trees);
        for (obj, dn) in &frees {
            let d = Dnode {
                object: *obj,
                phys: dn.clone(),
                swap: false,
            };
            let mut bps = Vec::new();
            self.os.walk_tree(&d, &mut |_, _, bp| {
                bps.push(*bp);
                Ok(())
            })?;
            if let Some(sp) = dn.spill.filter(|b| !b.is_hole()) {
                bps.push(sp);
            }
            for bp in bps {
                acct.killed(&pool, alloc, &bp, txg)?;
            }
        }
        // 2. Every object with changed blocks or a changed dnode (not object 0).
        let mut objs: BTreeSet<u64> = self
            .data
            .keys()
            .chain(self.ext.keys())
            .chain(self.raw.keys())
            .map(|(o, _)| *o)
            .filter(|o| *o != 0)
            .collect();
        objs.extend(self.dnodes.keys().copied().filter(|o| *o != 0));
        objs.retain(|o| !is_accounting_object(*o));
        let spills = std::mem::take(&mut self.spills);
        let raw_spills = std::mem::take(&mut self.raw_spills);
        // What was derived from objects whose blocks this sync writes or
        // frees may name their allocated size, which changes now (a dnode
        // changed alone keeps its blocks: what was derived stays true).
        let derived = self.obj_derived.get_mut();
        for (o, _) in self
            .data
            .keys()
            .chain(self.ext.keys())
            .chain(self.raw.keys())
        {
            derived.forget(*o);
        }
        for o in frees.keys().chain(spills.keys()).chain(raw_spills.keys()) {
            derived.forget(*o);
        }
        let accounting = self.accounting;
        let mut charges = Charges::default();
        let mut meta = self.dnode_meta();
        let mut meta_dirty: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let meta_bs = meta.datablksz();
        if meta_bs < DNODE_SIZE as u64 {
            return Err(Error::corrupt("meta-dnode", "block size below one dnode"));
        }
        for obj in objs {
            // A dnode changed in this txg is in host order; one taken from
            // disk keeps its bonus in the objset's order.
            let (mut dn, dn_swap) = match self.dnodes.get(&obj) {
                Some(d) => (d.clone(), false),
                None => {
                    let d = self.committed_dnode(obj)?;
                    (d.phys, d.swap)
                }
            };
            if accounting.is_some() {
                // What the committed dnode contributed goes out...
                if let Some(old) = self.committed_head(obj)? {
                    charges.charge(&old.phys, old.swap, -1);
                }
            }
            // A freed-then-reused slot starts from an empty tree.
            if frees.contains_key(&obj) {
                let keep_type = dn.object_type;
                if keep_type != 0 {
                    dn.blkptr.iter_mut().for_each(|b| *b = BlkPtr::default());
                    dn.maxblkid = 0;
                    dn.used = 0;
                }
            }
            let blocks = self.staged_blocks(obj);
            if dn.object_type != 0 && !blocks.is_empty() {
                sync_tree(
                    &self.os,
                    &pool,
                    alloc,
                    txg,
                    policy,
                    acct,
                    &mut dn,
                    blocks,
                    &|_| 1,
                    self.raw_nlevels.get(&obj).copied().unwrap_or(0),
                )?;
            }
            if let Some(&m) = self.raw_maxblkid.get(&obj) {
                // A raw receive keeps the sender's maxblkid (its MAC covers it).
                dn.maxblkid = m;
            }
            if let Some(&nl) = self.raw_nlevels.get(&obj) {
                // Grown only along blocks written; a deeper tree with none
                // to write cannot be made here (its dnode's MAC needs it).
                if dn.object_type != 0 && dn.nlevels < nl {
                    return Err(Error::unsupported(
                        format!("raw OBJECT {obj}"),
                        format!(
                            "a tree of {nl} levels over {} without blocks written to grow it",
                            dn.nlevels
                        ),
                    ));
                }
            }
            if let Some(r) = raw_spills.get(&obj).filter(|_| dn.object_type != 0) {
                let old = match self.os.dnode(obj) {
                    Ok(d) if d.phys.object_type != 0 && !frees.contains_key(&obj) => {
                        d.phys.spill.unwrap_or_default()
                    }
                    Ok(_) | Err(Error::NotFound(_)) => BlkPtr::default(),
                    Err(e) => return Err(e),
                };
                let mut used = dn.used_bytes() as i64;
                if !old.is_hole() {
                    used -= pool.dsize(&old, true) as i64;
                    acct.killed(&pool, alloc, &old, txg)?;
                }
                let bp = write_raw_block(&pool, alloc, txg, r, &policy.props(ot::SA, 0), 1)?;
                acct.born(&bp);
                used += pool.dsize(&bp, true) as i64;
                dn.spill = Some(bp);
                dn.flags |= DNODE_FLAG_SPILL_BLKPTR;
                dn.used = used.max(0) as u64;
                dn.flags |= DNODE_FLAG_USED_BYTES;
            } else if let Some(staged) = spills.get(&obj).filter(|_| dn.object_type != 0) {
                // A freed-and-reused slot's old spill block went with its
                // tree in step 1.
                let old = if frees.contains_key(&obj) {
                    BlkPtr::default()
                } else {
                    match self.os.dnode(obj) {
                        Ok(d) if d.phys.object_type != 0 => d.phys.spill.unwrap_or_default(),
                        Ok(_) | Err(Error::NotFound(_)) => BlkPtr::default(),
                        Err(e) => return Err(e),
                    }
                };
                sync_spill(&pool, alloc, txg, policy, acct, &old, &mut dn, staged)?;
            }
            if let Some(a) = accounting {
                // ...and what it holds now comes in, marked as counted.
                if dn.object_type != 0 {
                    dn.flags |= DNODE_FLAG_USERUSED_ACCOUNTED;
                    if a.objects {
                        dn.flags |= DNODE_FLAG_USEROBJUSED_ACCOUNTED;
                    }
                    charges.charge(&dn, dn_swap, 1);
                }
            }
            // Copy the dnode into its meta-dnode block.
            let off = obj * DNODE_SIZE as u64;
            let blkid = off / meta_bs;
            if let std::collections::btree_map::Entry::Vacant(e) = meta_dirty.entry(blkid) {
                let cur = match self.data.get(&(0, blkid)) {
                    Some(Some(b)) => b.clone(),
                    _ => {
                        let md = Dnode {
                            object: 0,
                            phys: meta.clone(),
                            swap: self.os.swap,
                        };
                        match self.os.read_block_swap(&md, blkid)? {
                            Some((b, _)) if b.len() as u64 != meta_bs => {
                                return Err(Error::corrupt(
                                    format!("dnode block {blkid}"),
                                    format!(
                                        "{} bytes, the meta-dnode declares {meta_bs}-byte blocks",
                                        b.len()
                                    ),
                                ))
                            }
                            Some((b, swap)) if swap => reencode_dnode_block(&b, true)?,
                            Some((b, _)) => b,
                            None => vec![0u8; meta_bs as usize],
                        }
                    }
                };
                e.insert(cur);
            }
            let buf = meta_dirty
                .get_mut(&blkid)
                .ok_or_else(|| Error::Invalid("meta block".into()))?;
            let inner = (off % meta_bs) as usize;
            let enc = if dn.object_type == 0 {
                vec![0u8; DNODE_SIZE]
            } else {
                dn.encode()
            };
            if inner + enc.len() > buf.len() {
                return Err(Error::Invalid(format!(
                    "dnode of object {obj} crosses a dnode block"
                )));
            }
            buf[inner..inner + enc.len()].copy_from_slice(&enc);
            self.dnodes.insert(obj, dn);
        }
        // 3. The accounting objects (in the objset block).
        let mut phys = self.os.phys.clone();
        if let Some(a) = accounting {
            self.apply_charges(a, &charges)?;
            for obj in [USERUSED_OBJECT, GROUPUSED_OBJECT, PROJECTUSED_OBJECT] {
                let blocks = self.staged_blocks(obj);
                let Some(mut dn) = self.dnodes.get(&obj).cloned() else {
                    continue;
                };
                if !blocks.is_empty() {
                    sync_tree(
                        &self.os,
                        &pool,
                        alloc,
                        txg,
                        policy,
                        acct,
                        &mut dn,
                        blocks,
                        &|_| 1,
                        0,
                    )?;
                }
                match obj {
                    USERUSED_OBJECT => phys.userused_dnode = dn,
                    GROUPUSED_OBJECT => phys.groupused_dnode = dn,
                    _ => phys.projectused_dnode = dn,
                }
            }
        }
        // 4. The meta-dnode itself.
        let meta_blocks: Vec<(u64, Staged)> = if self.raw_recv {
            // Dnode blocks as the raw stream sealed them (OBJECT_RANGE);
            // one left without dnodes is a hole.
            let mut v = Vec::with_capacity(meta_dirty.len());
            for (b, d) in meta_dirty {
                if d.iter().all(|&x| x == 0) {
                    v.push((b, Staged::Hole));
                    continue;
                }
                let sealed = *self.raw_dnode_blocks.get(&b).ok_or_else(|| {
                    Error::corrupt(
                        format!("dnode block {b} of a raw receive"),
                        "no OBJECT_RANGE record gave its encryption parameters",
                    )
                })?;
                v.push((
                    b,
                    Staged::Raw(RawBlock {
                        lsize: d.len() as u64,
                        data: d,
                        compress: comp::OFF,
                        sealed,
                    }),
                ));
            }
            v
        } else {
            meta_dirty
                .into_iter()
                .map(|(b, d)| (b, Staged::Data(std::borrow::Cow::Owned(d))))
                .collect()
        };
        if !meta_blocks.is_empty() {
            // Allocated dnodes, each counted once however many slots.
            let fill = |b: &[u8]| -> u64 { block_dnode_starts(b).count() as u64 };
            sync_tree(
                &self.os,
                &pool,
                alloc,
                txg,
                policy,
                acct,
                &mut meta,
                meta_blocks,
                &fill,
                0,
            )?;
        }
        if let Some(&m) = self.raw_maxblkid.get(&0) {
            meta.maxblkid = m;
        }
        // 5. The objset block.
        phys.meta_dnode = meta.clone();
        let bytes = phys.encode(self.objset_size);
        let fill: u64 = meta.blkptr.iter().map(|b| b.fill()).sum();
        let p = policy.props(ot::OBJSET, 0);
        let old = self.os.bp;
        let bp = match pool.rewrite_block(alloc, &old, txg, &bytes, &p, fill)? {
            Some(bp) => {
                acct.rewritten(&pool, &old, &bp);
                bp
            }
            None => {
                let bp = pool.write_block(alloc, txg, &bytes, &p, fill)?;
                acct.born(&bp);
                if !old.is_hole() {
                    acct.killed(&pool, alloc, &old, txg)?;
                }
                bp
            }
        };
        self.header_dirty = false;
        // The new committed state (read with the same key).
        let key = self.os.key.take();
        self.os = Objset::from_parts(pool.clone(), bp, phys);
        self.os.key = key;
        // What the txg staged goes; a large txg's maps (a dnode and a
        // buffer per object, every block written) are freed by another
        // thread so the next txg does not wait for it.
        let staged = (
            std::mem::take(&mut self.dnodes),
            std::mem::take(&mut self.data),
            std::mem::take(&mut self.ext),
            std::mem::take(&mut self.raw),
            std::mem::take(&mut self.raw_spills),
        );
        if staged.0.len() + staged.1.len() > BACKGROUND_DROP_MIN {
            // (Should no thread be had, the maps go with the closure here.)
            let _ = std::thread::Builder::new()
                .name("ozfs-free".into())
                .spawn(move || drop(staged));
        }
        // `raw_dnode_blocks` and `raw_maxblkid` stay for the whole raw
        // receive: a dnode block may change again in a later txg.
        Ok(bp)
    }
}

/// The accounting changes of one sync: bytes and objects per
/// (accounting object, id), as OpenZFS's `userquota_updates_task` sums
/// them before applying them with `zap_increment`.
#[derive(Debug, Default)]
struct Charges {
    /// (accounting object, id, object count?) → signed change; the ZAP
    /// keys (the id in hex, `obj-` before it for object counts) are made
    /// once per sync, in [`ObjsetTx::apply_charges`].
    by_key: BTreeMap<(u64, u64, bool), i64>,
}

impl Charges {
    /// Add (`sign` 1) or take out (`sign` -1) what dnode `dn` contributes:
    /// with `USERUSED_ACCOUNTED`, 512 bytes plus its used space to its user,
    /// group and project; with `USEROBJUSED_ACCOUNTED`, one object to each.
    /// A dnode whose bonus names no owner (no znode) contributes nothing.
    fn charge(&mut self, dn: &DnodePhys, swap: bool, sign: i64) {
        let Some((uid, gid, projid)) = ozfs_format::znode::owner_ids(dn.bonustype, &dn.bonus, swap)
        else {
            return;
        };
        let used = if dn.flags & DNODE_FLAG_USED_BYTES != 0 {
            dn.used
        } else {
            dn.used << 9
        };
        let bytes = (DNODE_SIZE as u64).wrapping_add(used) as i64;
        for (obj, id) in [
            (USERUSED_OBJECT, uid),
            (GROUPUSED_OBJECT, gid),
            (PROJECTUSED_OBJECT, projid),
        ] {
            if dn.flags & DNODE_FLAG_USERUSED_ACCOUNTED != 0 {
                *self.by_key.entry((obj, id, false)).or_default() += sign.wrapping_mul(bytes);
            }
            if dn.flags & DNODE_FLAG_USEROBJUSED_ACCOUNTED != 0 {
                *self.by_key.entry((obj, id, true)).or_default() += sign;
            }
        }
    }
}

/// Write (or drop) object `obj`'s staged spill block: a block of its own
/// (system attributes, metadata policy) whose pointer sits at the end of
/// the dnode; the one it replaces is freed and `dn_used` follows.
#[allow(clippy::too_many_arguments)]
fn sync_spill(
    pool: &Arc<Pool>,
    alloc: &mut Allocator,
    txg: u64,
    policy: &dyn WritePolicy,
    acct: &mut dyn Accounting,
    old: &BlkPtr,
    dn: &mut DnodePhys,
    staged: &Option<Vec<u8>>,
) -> Result<()> {
    let old = *old;
    let mut used = dn.used_bytes() as i64;
    if !old.is_hole() {
        used -= pool.dsize(&old, true) as i64;
        acct.killed(pool, alloc, &old, txg)?;
    }
    match staged {
        Some(data) => {
            let mut block = data.clone();
            block.resize(block.len().div_ceil(512) * 512, 0);
            let p = policy.props(ot::SA, 0);
            let bp = pool.write_block(alloc, txg, &block, &p, 1)?;
            acct.born(&bp);
            used += pool.dsize(&bp, true) as i64;
            dn.spill = Some(bp);
            dn.flags |= DNODE_FLAG_SPILL_BLKPTR;
        }
        None => {
            dn.spill = None;
            dn.flags &= !DNODE_FLAG_SPILL_BLKPTR;
        }
    }
    dn.used = used.max(0) as u64;
    dn.flags |= DNODE_FLAG_USED_BYTES;
    Ok(())
}

/// 64 random bits from the operating system (guids, salts).
pub fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_ne_bytes(b);
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (std::process::id() as u64).rotate_left(32)
}

/// Re-encode a dnode block written in the other byte order into host order.
fn reencode_dnode_block(b: &[u8], swap: bool) -> Result<Vec<u8>> {
    let mut out = vec![0u8; b.len()];
    let mut i = 0;
    while i + DNODE_SIZE <= b.len() {
        let d = DnodePhys::parse(&b[i..], swap)?;
        if d.object_type != 0 {
            let e = d.encode();
            out[i..i + e.len()].copy_from_slice(&e);
            i += e.len().max(DNODE_SIZE);
        } else {
            i += DNODE_SIZE;
        }
    }
    Ok(out)
}

/// A level-0 block to write at sync.
enum Staged<'a> {
    Hole,
    /// The txg's staged bytes, taken or borrowed (a sync copies nothing:
    /// an uncompressed block goes to the devices as it was staged).
    Data(std::borrow::Cow<'a, [u8]>),
    External(ExtBlock),
    Raw(RawBlock),
}

/// Levels needed so that `nblkptr × epb^(nlevels-1) > maxblkid`.
fn levels_for(maxblkid: u64, nblkptr: u64, epbs: u32) -> u8 {
    let mut levels = 1u8;
    let mut cap = nblkptr as u128;
    while cap <= maxblkid as u128 && levels < 32 {
        cap <<= epbs;
        levels += 1;
    }
    levels
}

/// The block pointer of a block made a hole in `txg` where `old` was.
/// With `hole_birth` active, a block that held data keeps its logical
/// size, type and level and gets `txg` as its (logical) birth, as OpenZFS
/// records it, so an incremental send from an earlier snapshot sees the
/// hole; a hole stays the hole it was (its birth kept). Without the
/// feature every hole is all zeros.
fn punched(pool: &Pool, old: &BlkPtr, txg: u64, object_type: u8, level: u8, lsize: u64) -> BlkPtr {
    if !pool.hole_birth.load(std::sync::atomic::Ordering::Relaxed) {
        return BlkPtr::default();
    }
    if old.is_hole() {
        return *old;
    }
    let mut bp = BlkPtr::default();
    bp.words[6] = BlkPtr::make_prop(lsize, 0, 0, 0, object_type, level, false, false);
    bp.words[10] = txg;
    bp
}

/// Write the changed level-0 blocks of one object and every indirect block above them.
#[allow(clippy::too_many_arguments)]
fn sync_tree(
    os: &Objset,
    pool: &Pool,
    alloc: &mut Allocator,
    txg: u64,
    policy: &dyn WritePolicy,
    acct: &mut dyn Accounting,
    dn: &mut DnodePhys,
    blocks: Vec<(u64, Staged)>,
    l0_fill: &dyn Fn(&[u8]) -> u64,
    min_levels: u8,
) -> Result<()> {
    let nblkptr = dn.nblkptr.max(1) as u64;
    if dn.blkptr.len() < nblkptr as usize {
        dn.blkptr.resize(nblkptr as usize, BlkPtr::default());
    }
    let epbs = (dn.indblkshift as u32).saturating_sub(7);
    if !(3..=17).contains(&epbs) {
        return Err(Error::corrupt(
            format!("dnode of type {}", dn.object_type),
            format!("indirect block shift {}", dn.indblkshift),
        ));
    }
    let ibs = 1usize << dn.indblkshift;
    let max_dirty = blocks
        .iter()
        .filter(|(_, d)| !matches!(d, Staged::Hole))
        .map(|(b, _)| *b)
        .max();
    // Indirect blocks being changed: (level, blkid) -> contents.
    let mut ind: BTreeMap<(u8, u64), Vec<u8>> = BTreeMap::new();
    // Grow the tree if a new block lies beyond what it can address.
    let mut nlevels = dn.nlevels.max(1);
    if let Some(m) = max_dirty {
        let need = levels_for(m.max(dn.maxblkid), nblkptr, epbs).max(min_levels);
        while nlevels < need {
            let mut b = vec![0u8; ibs];
            for (i, bp) in dn.blkptr.iter().enumerate() {
                b[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE].copy_from_slice(&bp.to_bytes());
            }
            // Shift existing in-memory indirect blocks' keys are unaffected (their levels stay).
            ind.insert((nlevels, 0), b);
            dn.blkptr.iter_mut().for_each(|x| *x = BlkPtr::default());
            nlevels += 1;
        }
    }
    // A hole staged past what the tree reaches (a block written and then
    // truncated away in the same txg, the tree never grown for it) is a
    // hole already: nothing to write.
    let reach = (nlevels as u32 - 1)
        .checked_mul(epbs)
        .and_then(|shift| nblkptr.checked_shl(shift))
        .unwrap_or(u64::MAX);
    let mut blocks = blocks;
    blocks.retain(|(b, s)| !(matches!(s, Staged::Hole) && *b >= reach));
    let committed = Dnode {
        object: 0,
        phys: dn.clone(),
        swap: false,
    };
    // BP at (level, blkid) of the current (possibly grown) tree.
    fn get_bp(
        os: &Objset,
        ind: &mut BTreeMap<(u8, u64), Vec<u8>>,
        dn: &DnodePhys,
        nlevels: u8,
        epbs: u32,
        level: u8,
        blkid: u64,
    ) -> Result<BlkPtr> {
        if level + 1 >= nlevels {
            let idx = blkid as usize;
            return Ok(dn.blkptr.get(idx).copied().unwrap_or_default());
        }
        let pk = (level + 1, blkid >> epbs);
        let idx = (blkid & ((1 << epbs) - 1)) as usize;
        let ibs = 1usize << (epbs + 7);
        if !ind.contains_key(&pk) {
            let pbp = get_bp(os, ind, dn, nlevels, epbs, level + 1, blkid >> epbs)?;
            let b = if pbp.is_hole() && pbp.birth() != 0 {
                // A hole with a birth (hole_birth) hands it to its children,
                // as OpenZFS does when it fills one in: each keeps saying
                // "a hole since this txg" to an incremental send.
                let lsize = if level == 0 {
                    dn.datablksz()
                } else {
                    ibs as u64
                };
                let mut child = BlkPtr::default();
                child.words[6] =
                    BlkPtr::make_prop(lsize, 0, 0, 0, pbp.object_type(), level, false, false);
                child.words[10] = pbp.birth();
                child.to_bytes().repeat(ibs / BLKPTR_SIZE)
            } else if pbp.is_hole() {
                vec![0u8; ibs]
            } else {
                let swap = pbp.little_endian() != HOST_LITTLE_ENDIAN;
                let raw = os.pool.read_bp(&pbp)?;
                // Indices below 2^epbs must fall inside it: an indirect
                // block is exactly 2^indblkshift bytes.
                if raw.len() != ibs {
                    return Err(Error::corrupt(
                        format!("indirect block at level {}", level + 1),
                        format!(
                            "{} bytes, its dnode's indirect block size is {ibs}",
                            raw.len()
                        ),
                    ));
                }
                if swap {
                    let mut v = vec![0u8; raw.len()];
                    for (i, c) in raw.chunks_exact(BLKPTR_SIZE).enumerate() {
                        v[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE]
                            .copy_from_slice(&BlkPtr::from_bytes(c, true)?.to_bytes());
                    }
                    v
                } else {
                    raw
                }
            };
            ind.insert(pk, b);
        }
        let raw = ind
            .get(&pk)
            .and_then(|b| b.get(idx * BLKPTR_SIZE..(idx + 1) * BLKPTR_SIZE))
            .ok_or_else(|| Error::corrupt("indirect block", "index past its end"))?;
        BlkPtr::from_bytes(raw, false)
    }
    let _ = committed;
    let mut used = dn.used_bytes() as i64;
    let deflate_unknown = false;
    let _ = deflate_unknown;
    let mut maxblkid = dn.maxblkid;
    // Level 0. Blocks that need a new home are compressed in parallel first.
    let mut parents: BTreeSet<u64> = BTreeSet::new();
    let p0 = policy.props(dn.object_type, 0);
    let mut olds = Vec::with_capacity(blocks.len());
    for (blkid, _) in &blocks {
        if nlevels == 1 && *blkid >= nblkptr {
            return Err(Error::Invalid(format!(
                "block {blkid} beyond a single-level object"
            )));
        }
        olds.push(get_bp(os, &mut ind, dn, nlevels, epbs, 0, *blkid)?);
    }
    // Blocks that need a new home are handed to the encoders whole (their
    // fill counted first); those born in this txg are rewritten in place.
    let mut fills = Vec::with_capacity(blocks.len());
    let mut fresh = Vec::new();
    for ((_, d), old) in blocks.iter_mut().zip(&olds) {
        let mut fill = 0;
        if let Staged::Data(c) = d {
            fill = l0_fill(c);
            if old.birth() != txg {
                fresh.push((std::mem::take(c), p0.clone()));
            }
        }
        fills.push(fill);
    }
    let mut encoded = ozfs_spa::write::encode_many(fresh)?.into_iter();
    for (((blkid, data), old), fill) in blocks.into_iter().zip(olds).zip(fills) {
        let p = &p0;
        let hole = || punched(pool, &old, txg, dn.object_type, 0, dn.datablksz());
        let new = match &data {
            Staged::Hole => hole(),
            Staged::External(e) => {
                // Stored as the client sent it: no compression, no
                // in-place rewrite; its checksum is the client's when given.
                // Never into an encrypted objset: the record would be
                // stored in the clear.
                if p.seal.is_some() {
                    return Err(Error::unsupported(
                        "pre-compressed record",
                        "an encrypted dataset does not take pre-compressed records",
                    ));
                }
                let (f, c) = match e.cksum {
                    Some(fc) => fc,
                    None if p.checksum == ozfs_format::types::cksum::OFF => {
                        (p.checksum, Default::default())
                    }
                    None => (
                        p.checksum,
                        ozfs_codec::checksum::compute_salted(
                            p.checksum,
                            &e.image,
                            false,
                            p.salt.as_ref(),
                        )?,
                    ),
                };
                let pe = BlockProps {
                    checksum: f,
                    dedup: p.dedup && f == p.checksum,
                    ..p.clone()
                };
                let enc = ozfs_spa::write::Encoded {
                    data: e.image.to_vec(),
                    compress: comp::EXTERNAL,
                    lsize: e.lsize,
                    cksum: c,
                    sealed: None,
                };
                let bp = pool.write_encoded(alloc, txg, enc, &pe, 1)?;
                acct.born(&bp);
                bp
            }
            Staged::Raw(r) => {
                // Stored as the raw stream sealed it: never recompressed,
                // re-encrypted or rewritten in place; checksummed as the
                // dataset's policy says (as OpenZFS's receiver does).
                let pe = p.clone();
                let fill = if dn.object_type == ot::DNODE {
                    l0_fill(&r.data)
                } else {
                    1
                };
                let bp = write_raw_block(pool, alloc, txg, r, &pe, fill)?;
                acct.born(&bp);
                bp
            }
            Staged::Data(d) => {
                let in_place = if old.birth() == txg {
                    pool.rewrite_block(alloc, &old, txg, d, p, fill)?
                } else {
                    None
                };
                match in_place {
                    Some(bp) => {
                        acct.rewritten(pool, &old, &bp);
                        bp
                    }
                    None => {
                        let enc = if old.birth() == txg {
                            ozfs_spa::write::encode(d, p)?
                        } else {
                            encoded
                                .next()
                                .ok_or_else(|| Error::Invalid("encoder lost a block".into()))?
                        };
                        let bp = match enc {
                            Some(e) => pool.write_encoded(alloc, txg, e, p, fill)?,
                            None => hole(),
                        };
                        if !bp.is_hole() {
                            acct.born(&bp);
                        }
                        bp
                    }
                }
            }
        };
        let replaced_in_place = !new.is_hole() && !old.is_hole() && new.dvas()[0] == old.dvas()[0];
        if !replaced_in_place {
            if !old.is_hole() {
                used -= pool.dsize(&old, true) as i64;
                acct.killed(pool, alloc, &old, txg)?;
            }
            used += pool.dsize(&new, true) as i64;
        } else {
            used += pool.dsize(&new, true) as i64 - pool.dsize(&old, true) as i64;
        }
        if !new.is_hole() && blkid > maxblkid {
            maxblkid = blkid;
        }
        set_bp(&mut ind, dn, nlevels, epbs, 0, blkid, &new);
        if nlevels > 1 {
            parents.insert(blkid >> epbs);
        }
    }
    // Indirect levels.
    for level in 1..nlevels {
        let mut next: BTreeSet<u64> = BTreeSet::new();
        for &blkid in &parents {
            let old = get_bp(os, &mut ind, dn, nlevels, epbs, level, blkid)?;
            let Some(content) = ind.get(&(level, blkid)) else {
                continue;
            };
            let mut fill = 0u64;
            let mut any = false;
            for c in content.chunks_exact(BLKPTR_SIZE) {
                let bp = BlkPtr::from_bytes(c, false)?;
                if !bp.is_hole() {
                    any = true;
                    fill += bp.fill();
                }
            }
            let p = policy.props(dn.object_type, level);
            let new = if !any {
                punched(pool, &old, txg, dn.object_type, level, ibs as u64)
            } else {
                let content = content.clone();
                match pool.rewrite_block(alloc, &old, txg, &content, &p, fill)? {
                    Some(bp) => {
                        acct.rewritten(pool, &old, &bp);
                        bp
                    }
                    None => {
                        let bp = pool.write_block(alloc, txg, &content, &p, fill)?;
                        if !bp.is_hole() {
                            acct.born(&bp);
                        }
                        bp
                    }
                }
            };
            let replaced_in_place =
                !new.is_hole() && !old.is_hole() && new.dvas()[0] == old.dvas()[0];
            if !replaced_in_place {
                if !old.is_hole() {
                    used -= pool.dsize(&old, true) as i64;
                    acct.killed(pool, alloc, &old, txg)?;
                }
                used += pool.dsize(&new, true) as i64;
            } else {
                used += pool.dsize(&new, true) as i64 - pool.dsize(&old, true) as i64;
            }
            set_bp(&mut ind, dn, nlevels, epbs, level, blkid, &new);
            if level + 1 < nlevels {
                next.insert(blkid >> epbs);
            }
        }
        parents = next;
    }
    // maxblkid: if the highest block became a hole, search downward in what we know.
    if nlevels == 1 {
        // A single level holds only its block pointers.
        maxblkid = maxblkid.min(nblkptr - 1);
    }
    if maxblkid >= dn.maxblkid {
        // Only lower it when the top blocks are all holes (truncation).
        // Look only at level-1 blocks this sync holds (checked before
        // `get_bp`, which would load — or make up, for a hole — the next
        // one): the search is bounded by the blocks changed, never by how
        // far below a (possibly hostile) maxblkid the data ends.
        while maxblkid > 0 {
            if nlevels > 1 && !ind.contains_key(&(1, maxblkid >> epbs)) {
                break;
            }
            if !get_bp(os, &mut ind, dn, nlevels, epbs, 0, maxblkid)?.is_hole() {
                break;
            }
            maxblkid -= 1;
        }
    }
    dn.maxblkid = maxblkid;
    dn.nlevels = nlevels;
    dn.used = used.max(0) as u64;
    dn.flags |= DNODE_FLAG_USED_BYTES;
    Ok(())
}

/// Write a raw-received block as it was sealed ([`RawBlock`]).
fn write_raw_block(
    pool: &Pool,
    alloc: &mut Allocator,
    txg: u64,
    r: &RawBlock,
    p: &BlockProps,
    fill: u64,
) -> Result<BlkPtr> {
    let enc = ozfs_spa::write::encode_sealed(r.data.clone(), r.compress, r.lsize, p, r.sealed)?;
    pool.write_encoded(alloc, txg, enc, p, fill)
}

fn set_bp(
    ind: &mut BTreeMap<(u8, u64), Vec<u8>>,
    dn: &mut DnodePhys,
    nlevels: u8,
    epbs: u32,
    level: u8,
    blkid: u64,
    bp: &BlkPtr,
) {
    if level + 1 >= nlevels {
        if let Some(slot) = dn.blkptr.get_mut(blkid as usize) {
            *slot = *bp;
        }
        return;
    }
    let pk = (level + 1, blkid >> epbs);
    let idx = (blkid & ((1 << epbs) - 1)) as usize;
    if let Some(slot) = ind
        .get_mut(&pk)
        .and_then(|b| b.get_mut(idx * BLKPTR_SIZE..(idx + 1) * BLKPTR_SIZE))
    {
        slot.copy_from_slice(&bp.to_bytes());
    }
}
