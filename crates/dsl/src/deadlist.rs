//! Dead lists: the blocks a head or snapshot stopped referencing while
//! an older snapshot still does, in both of ZFS's formats.
//!
//! # Theory
//!
//! A block killed in a dataset and born after its previous snapshot is
//! freed at once; one born earlier is still referenced by that snapshot and
//! goes on the dataset's dead list instead. Destroying a snapshot splits
//! the next dataset's dead list: what was born after the destroyed
//! snapshot's predecessor is referenced by nobody any more and is freed,
//! the rest joins the destroyed snapshot's own dead list, which the next
//! dataset inherits.
//!
//! * **Old format** (pool versions below 26, which zfs-fuse writes): one
//!   bpobj (`DMU_OT_BPOBJ`, a flat array of 128-byte block pointers with
//!   counts and sums in its bonus). Splitting it reads every entry.
//! * **New format** (pool version 26 on, every OpenZFS pool): a ZAP (type
//!   50, bonus type 51, a 320-byte bonus of used/compressed/uncompressed
//!   sums) mapping a txg `k` (hex, no padding) to a bpobj holding the dead
//!   blocks born in `(k, next key]`. A head's keys are 0 and the previous
//!   snapshot txg of each of its snapshots, so a destroy moves whole
//!   entries instead of reading blocks: entries at and above the destroyed
//!   snapshot's predecessor txg are freed, the destroyed snapshot's entries
//!   are linked under the next dataset's as sub-objects (a bpobj's
//!   `bpo_subobjs` array, type 53), and a key no snapshot stands for any
//!   more is folded into the one below it.
//! * **The empty bpobj** (`empty_bpobj` feature): entries with nothing in
//!   them share one pool-wide empty bpobj, named `empty_bpobj` in the MOS
//!   directory; the feature counts the entries naming it, and at zero the
//!   object and its name go. An entry that gets a block first gets a bpobj
//!   of its own.
//!
//! Which format a dead list has is read from its object type, so pools
//! that mix them (an older ozfs's bplists in a version-5000 pool) keep
//! each dataset's chain as it is; a new dataset of a version-26-or-later
//! pool gets the new format, with the keys OpenZFS would give it
//! ([`PoolWriter::deadlist_clone`]).
//!
//! Invariants (as OpenZFS's own, `dsl_deadlist.c` / `bpobj.c`):
//! * a new-format dead list's sums are the sums of its entries' bpobjs; a
//!   bpobj's sums are those of its own entries plus its sub-objects';
//! * the empty bpobj is never written, never a sub-object, and its count
//!   equals the entries naming it; every other bpobj has one referrer;
//! * blocks are stored with their checksum cleared (unless deduplicated)
//!   and their fill count zero; an embedded block keeps only its
//!   properties and birth.
//!
//! Everything read from disk is bounded before it is used: counts by the
//! room their objects' blocks give and by [`MAX_DEAD_ENTRIES`], keys by
//! their canonical spelling, sub-object trees by depth, by size and by
//! each bpobj being met once (`Seen`).

use crate::features::EMPTY_BPOBJ;
use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::zap_tx;
use ozfs_format::types::ot;
use ozfs_format::{BlkPtr, Error, Result};

/// `DMU_OT_DEADLIST`: a new-format dead list (a ZAP).
pub const DEADLIST: u8 = 50;
/// `DMU_OT_DEADLIST_HDR`: its bonus type.
pub const DEADLIST_HDR: u8 = 51;
/// `DMU_OT_BPOBJ_SUBOBJ`: a bpobj's array of sub-bpobj object numbers.
pub const BPOBJ_SUBOBJ: u8 = 53;
/// `sizeof (dsl_deadlist_phys_t)`.
const DEADLIST_PHYS_SIZE: usize = 320;
/// `bpobj_phys_t` with sub-objects (`BPOBJ_SIZE_V2`), as OpenZFS makes
/// bpobjs while no clone keeps a livelist.
const BPOBJ_SIZE_V2: usize = 48;
/// Block size of bpobjs and sub-object arrays (`SPA_OLD_MAXBLOCKSIZE`).
const BPOBJ_BLOCKSIZE: u64 = 128 * 1024;
/// The MOS directory's name for the shared empty bpobj.
const EMPTY_BPOBJ_KEY: &str = "empty_bpobj";
/// Deepest sub-object nesting followed (OpenZFS's own stays shallow).
const MAX_SUBOBJ_DEPTH: u32 = 64;
/// Most block pointers read from one dead list (2 GiB of them).
pub const MAX_DEAD_ENTRIES: u64 = 1 << 24;

/// The bpobjs a walk of sub-object trees has met: each may be met once
/// (a bpobj has one referrer), the trees nest at most
/// [`MAX_SUBOBJ_DEPTH`] deep and hold at most [`MAX_DEAD_ENTRIES`]
/// bpobjs, so hostile trees cost bounded work.
#[derive(Default)]
struct Seen(std::collections::HashSet<u64>);

impl Seen {
    fn enter(&mut self, obj: u64, depth: u32) -> Result<()> {
        if depth > MAX_SUBOBJ_DEPTH {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                "sub-objects nested too deep",
            ));
        }
        if self.0.len() as u64 >= MAX_DEAD_ENTRIES || !self.0.insert(obj) {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                "listed twice among sub-objects, or too many of them",
            ));
        }
        Ok(())
    }
}

/// A bpobj's header (`bpobj_phys_t`): counts and sums.
#[derive(Debug, Clone, Copy, Default)]
struct BpobjHdr {
    num: u64,
    bytes: u64,
    comp: u64,
    uncomp: u64,
    subobjs: u64,
    num_subobjs: u64,
}

/// Word `i` of a bonus buffer (0 past its end: fields an old, shorter
/// header lacks).
fn word(bonus: &[u8], i: usize, swap: bool) -> u64 {
    ozfs_format::bytes::u64_at(bonus, i * 8, swap, "bonus").unwrap_or(0)
}

fn put(bonus: &mut Vec<u8>, i: usize, v: u64) {
    if bonus.len() < i * 8 + 8 {
        bonus.resize(i * 8 + 8, 0);
    }
    bonus[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
}

/// A block pointer as a bpobj stores it (`bpobj_enqueue`).
fn stored(bp: &BlkPtr) -> BlkPtr {
    let mut s = *bp;
    if bp.is_embedded() {
        let (prop, birth) = (bp.words[6], bp.words[10]);
        s.words = [0; 16];
        s.words[6] = prop;
        s.words[10] = birth;
        return s;
    }
    if !bp.dedup() {
        s.words[12..16].fill(0);
    }
    s.words[11] = 0;
    s
}

/// How many `entry`-byte entries the blocks of object `dn` hold (what a
/// count read from disk must not exceed).
pub(crate) fn object_room(dn: &ozfs_dmu::Dnode, entry: u64) -> u64 {
    dn.phys
        .maxblkid
        .saturating_add(1)
        .saturating_mul(dn.phys.datablksz())
        / entry.max(1)
}

/// Whether dead list `obj` is in the new format (a ZAP of bpobjs).
pub(crate) fn is_new_format(w: &PoolWriter, obj: u64) -> Result<bool> {
    let dn = w.mos.dnode(obj)?;
    match dn.phys.object_type {
        ot::BPOBJ => Ok(false),
        DEADLIST => Ok(true),
        t => Err(Error::corrupt(
            format!("dead list object {obj}"),
            format!("type {t}, neither a bpobj nor a dead list"),
        )),
    }
}

impl PoolWriter {
    fn bpobj_hdr(&self, obj: u64) -> Result<BpobjHdr> {
        let dn = self.mos.dnode(obj)?;
        if dn.phys.object_type != ot::BPOBJ {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                format!("type {}", dn.phys.object_type),
            ));
        }
        let b = &dn.phys.bonus;
        Ok(BpobjHdr {
            num: word(b, 0, dn.swap),
            bytes: word(b, 1, dn.swap),
            comp: word(b, 2, dn.swap),
            uncomp: word(b, 3, dn.swap),
            subobjs: word(b, 4, dn.swap),
            num_subobjs: word(b, 5, dn.swap),
        })
    }

    fn set_bpobj_hdr(&mut self, obj: u64, h: &BpobjHdr) -> Result<()> {
        let mut b = self.mos.dnode(obj)?.phys.bonus;
        put(&mut b, 0, h.num);
        put(&mut b, 1, h.bytes);
        put(&mut b, 2, h.comp);
        put(&mut b, 3, h.uncomp);
        if b.len() >= BPOBJ_SIZE_V2 {
            put(&mut b, 4, h.subobjs);
            put(&mut b, 5, h.num_subobjs);
        } else if h.subobjs != 0 {
            return Err(Error::Invalid(format!(
                "bpobj {obj} has no room for sub-objects"
            )));
        }
        self.mos.set_bonus(obj, b)
    }

    /// The shared empty bpobj, if the pool has one now.
    fn empty_bpobj(&self) -> Result<Option<u64>> {
        Ok(zap_tx::lookup(&self.mos, 1, EMPTY_BPOBJ_KEY.as_bytes())?.and_then(|e| e.as_u64()))
    }

    /// A new, empty bpobj (`bpobj_alloc`): 128 KiB blocks, a header with
    /// sub-objects. (OpenZFS adds `bpo_num_freed` while `livelist` is
    /// active; a pool with it active is not written, `check_write`.)
    fn bpobj_alloc(&mut self) -> Result<u64> {
        self.mos.create_object(
            ot::BPOBJ,
            BPOBJ_BLOCKSIZE,
            ot::BPOBJ_HDR,
            vec![0; BPOBJ_SIZE_V2],
            1,
        )
    }

    /// An empty bpobj for a new dead list entry (`bpobj_alloc_empty`): the
    /// pool's shared one, counted, where `empty_bpobj` is enabled (made
    /// and named on first use); else one of the entry's own.
    fn bpobj_alloc_empty(&mut self) -> Result<u64> {
        let enabled = self.version >= ozfs_spa::pool::SPA_VERSION_FEATURES
            && crate::features::refcount(self, EMPTY_BPOBJ)?.is_some();
        if !enabled {
            return self.bpobj_alloc();
        }
        let e = match self.empty_bpobj()? {
            Some(e) => e,
            None => {
                let e = self.bpobj_alloc()?;
                zap_tx::add(&mut self.mos, 1, EMPTY_BPOBJ_KEY.as_bytes(), 8, &[e])?;
                e
            }
        };
        crate::features::incr(self, EMPTY_BPOBJ, 1)?;
        Ok(e)
    }

    /// One entry fewer names the shared empty bpobj (`bpobj_decr_empty`);
    /// the last one gone, the object and its name go too.
    fn bpobj_decr_empty(&mut self) -> Result<()> {
        crate::features::incr(self, EMPTY_BPOBJ, -1)?;
        if crate::features::refcount(self, EMPTY_BPOBJ)?.unwrap_or(0) == 0 {
            if let Some(e) = self.empty_bpobj()? {
                zap_tx::remove(&mut self.mos, 1, EMPTY_BPOBJ_KEY.as_bytes())?;
                self.mos.free_object(e)?;
            }
        }
        Ok(())
    }

    /// Append blocks to bpobj `obj` (`bpobj_enqueue`), in their stored form.
    fn bpobj_enqueue(&mut self, obj: u64, bps: &[BlkPtr]) -> Result<()> {
        if bps.is_empty() {
            return Ok(());
        }
        let mut h = self.bpobj_hdr(obj)?;
        // The count from disk must fit the object before it places a write.
        self.bpobj_room_check(obj, &h)?;
        let mut buf = Vec::with_capacity(bps.len() * 128);
        let mut sums = Sums::default();
        for bp in bps {
            buf.extend_from_slice(&stored(bp).to_bytes());
            sums.add(&self.pool, bp, 1);
        }
        self.mos.write(obj, h.num * 128, &buf)?;
        h.num += bps.len() as u64;
        h.bytes = h.bytes.wrapping_add(sums.dsize as u64);
        h.comp = h.comp.wrapping_add(sums.psize as u64);
        h.uncomp = h.uncomp.wrapping_add(sums.ucsize as u64);
        self.set_bpobj_hdr(obj, &h)
    }

    /// Make bpobj `sub` part of bpobj `parent` (`bpobj_enqueue_subobj`):
    /// the shared empty bpobj just loses a reference, an empty one is
    /// freed, any other is listed in the parent's sub-object array, its
    /// sums added to the parent's.
    fn bpobj_enqueue_subobj(&mut self, parent: u64, sub: u64) -> Result<()> {
        if Some(sub) == self.empty_bpobj()? {
            return self.bpobj_decr_empty();
        }
        let s = self.bpobj_hdr(sub)?;
        if s.num == 0 && s.num_subobjs == 0 {
            return self.bpobj_free(sub, 0);
        }
        let mut h = self.bpobj_hdr(parent)?;
        if h.num_subobjs >= MAX_DEAD_ENTRIES {
            return Err(Error::corrupt(
                format!("bpobj {parent}"),
                format!("{} sub-objects", h.num_subobjs),
            ));
        }
        if h.subobjs == 0 {
            h.subobjs = self
                .mos
                .create_object(BPOBJ_SUBOBJ, BPOBJ_BLOCKSIZE, 0, Vec::new(), 1)?;
        }
        self.mos
            .write(h.subobjs, h.num_subobjs * 8, &sub.to_ne_bytes())?;
        h.num_subobjs += 1;
        h.bytes = h.bytes.wrapping_add(s.bytes);
        h.comp = h.comp.wrapping_add(s.comp);
        h.uncomp = h.uncomp.wrapping_add(s.uncomp);
        self.set_bpobj_hdr(parent, &h)
    }

    /// The sub-objects listed by bpobj header `h` of `obj`.
    fn bpobj_subobjs(&self, obj: u64, h: &BpobjHdr) -> Result<Vec<u64>> {
        if h.subobjs == 0 || h.num_subobjs == 0 {
            return Ok(Vec::new());
        }
        if h.num_subobjs > MAX_DEAD_ENTRIES {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                format!("{} sub-objects", h.num_subobjs),
            ));
        }
        let dn = self.mos.dnode(h.subobjs)?;
        if dn.phys.object_type != BPOBJ_SUBOBJ {
            return Err(Error::corrupt(
                format!("bpobj {obj} sub-object array {}", h.subobjs),
                format!("type {}", dn.phys.object_type),
            ));
        }
        let room = object_room(&dn, 8);
        if h.num_subobjs > room {
            return Err(Error::corrupt(
                format!("bpobj {obj} sub-object array {}", h.subobjs),
                format!("{} entries in room for {room}", h.num_subobjs),
            ));
        }
        let data = self.mos.read(h.subobjs, 0, (h.num_subobjs * 8) as usize)?;
        Ok(data
            .chunks_exact(8)
            .map(|c| {
                let v = u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
                if dn.swap {
                    v.swap_bytes()
                } else {
                    v
                }
            })
            .collect())
    }

    /// Free bpobj `obj`, its sub-objects and their arrays (`bpobj_free`);
    /// the blocks they list are not freed (a bpobj only records them).
    fn bpobj_free(&mut self, obj: u64, depth: u32) -> Result<()> {
        let mut seen = Seen::default();
        self.bpobj_free_in(obj, depth, &mut seen)
    }

    fn bpobj_free_in(&mut self, obj: u64, depth: u32, seen: &mut Seen) -> Result<()> {
        seen.enter(obj, depth)?;
        let h = self.bpobj_hdr(obj)?;
        for sub in self.bpobj_subobjs(obj, &h)? {
            self.bpobj_free_in(sub, depth + 1, seen)?;
        }
        if h.subobjs != 0 {
            self.mos.free_object(h.subobjs)?;
        }
        self.mos.free_object(obj)
    }

    /// A bpobj's count checked against the room its blocks give and
    /// [`MAX_DEAD_ENTRIES`].
    fn bpobj_room_check(&self, obj: u64, h: &BpobjHdr) -> Result<()> {
        let dn = self.mos.dnode(obj)?;
        let room = object_room(&dn, 128);
        if h.num > room || h.num > MAX_DEAD_ENTRIES {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                format!("{} entries in room for {room}", h.num),
            ));
        }
        Ok(())
    }

    /// The block pointers a bpobj holds itself (not its sub-objects').
    fn bpobj_own_bps(&self, obj: u64, h: &BpobjHdr) -> Result<Vec<BlkPtr>> {
        self.bpobj_room_check(obj, h)?;
        if h.num == 0 {
            return Ok(Vec::new());
        }
        let swap = self.mos.dnode(obj)?.swap;
        let data = self.mos.read(obj, 0, (h.num * 128) as usize)?;
        data.chunks_exact(128)
            .map(|c| BlkPtr::from_bytes(c, swap))
            .collect()
    }

    /// Every block bpobj `obj` lists, its sub-objects' included, appended
    /// to `out` (at most [`MAX_DEAD_ENTRIES`] in all).
    fn bpobj_bps(&self, obj: u64, depth: u32, out: &mut Vec<BlkPtr>) -> Result<()> {
        self.bpobj_bps_in(obj, depth, out, &mut Seen::default())
    }

    fn bpobj_bps_in(
        &self,
        obj: u64,
        depth: u32,
        out: &mut Vec<BlkPtr>,
        seen: &mut Seen,
    ) -> Result<()> {
        seen.enter(obj, depth)?;
        let h = self.bpobj_hdr(obj)?;
        if (out.len() as u64).saturating_add(h.num) > MAX_DEAD_ENTRIES {
            return Err(Error::corrupt(
                format!("bpobj {obj}"),
                format!("more than {MAX_DEAD_ENTRIES} block pointers"),
            ));
        }
        out.extend(self.bpobj_own_bps(obj, &h)?);
        for sub in self.bpobj_subobjs(obj, &h)? {
            self.bpobj_bps_in(sub, depth + 1, out, seen)?;
        }
        Ok(())
    }

    /// A new-format dead list's entries: (key txg, bpobj), by key.
    fn deadlist_entries(&self, dl: u64) -> Result<Vec<(u64, u64)>> {
        let mut v = Vec::new();
        for e in zap_tx::list(&self.mos, dl)? {
            let name = e.name_str();
            let key = u64::from_str_radix(&name, 16)
                .map_err(|_| Error::corrupt(format!("dead list {dl}"), format!("key '{name}'")))?;
            let obj = e.as_u64().ok_or_else(|| {
                Error::corrupt(format!("dead list {dl}"), format!("entry {name}"))
            })?;
            v.push((key, obj));
        }
        v.sort_unstable();
        Ok(v)
    }

    fn deadlist_hdr_add(&mut self, dl: u64, used: i64, comp: i64, uncomp: i64) -> Result<()> {
        let dn = self.mos.dnode(dl)?;
        let mut b = dn.phys.bonus.clone();
        let w = |i| word(&dn.phys.bonus, i, dn.swap);
        put(&mut b, 0, w(0).wrapping_add(used as u64));
        put(&mut b, 1, w(1).wrapping_add(comp as u64));
        put(&mut b, 2, w(2).wrapping_add(uncomp as u64));
        self.mos.set_bonus(dl, b)
    }

    /// A new, empty new-format dead list (`dsl_deadlist_alloc`).
    pub(crate) fn deadlist_alloc(&mut self) -> Result<u64> {
        self.mos
            .create_zap(DEADLIST, DEADLIST_HDR, vec![0; DEADLIST_PHYS_SIZE], 0, 1)
    }

    /// Add key `k` to new-format dead list `dl`, an empty entry.
    pub(crate) fn deadlist_add_key(&mut self, dl: u64, k: u64) -> Result<()> {
        let e = self.bpobj_alloc_empty()?;
        zap_tx::add(&mut self.mos, dl, format!("{k:x}").as_bytes(), 8, &[e])
    }

    /// The dead list a new head starts with (`dsl_deadlist_clone`): in a
    /// pool before version 26 an empty bplist; else a new-format dead
    /// list with an empty entry for each key of `from` below `maxtxg`, or,
    /// when `from` is a bplist, for the previous snapshot txg of `mrs` and
    /// of each snapshot before it.
    pub(crate) fn deadlist_clone(&mut self, from: u64, maxtxg: u64, mrs: u64) -> Result<u64> {
        if self.version < 26 {
            return crate::create::new_bplist(self, BPOBJ_BLOCKSIZE);
        }
        let dl = self.deadlist_alloc()?;
        if from != 0 && is_new_format(self, from)? {
            for (k, _) in self.deadlist_entries(from)? {
                if k >= maxtxg {
                    break;
                }
                self.deadlist_add_key(dl, k)?;
            }
        } else {
            let mut keys = Vec::new();
            let mut mrs = mrs;
            while mrs != 0 {
                if keys.len() > 1 << 20 {
                    return Err(Error::corrupt("snapshot chain", "a loop"));
                }
                let d = self.dataset(mrs)?;
                keys.push(d.prev_snap_txg);
                mrs = d.prev_snap_obj;
            }
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                self.deadlist_add_key(dl, k)?;
            }
        }
        Ok(dl)
    }

    /// Put killed blocks on new-format dead list `dl`
    /// (`dsl_deadlist_insert`): each into the entry with the largest key
    /// below its birth (the first entry if none is), an entry still on the
    /// shared empty bpobj getting one of its own first.
    pub(crate) fn deadlist_insert(&mut self, dl: u64, bps: &[BlkPtr]) -> Result<()> {
        let entries = self.deadlist_entries(dl)?;
        let Some(&(first, _)) = entries.first() else {
            return Err(Error::corrupt(
                format!("dead list {dl}"),
                "no entries to put dead blocks in",
            ));
        };
        let mut by_key: std::collections::BTreeMap<u64, Vec<BlkPtr>> = Default::default();
        let mut sums = Sums::default();
        for bp in bps {
            // Entries are sorted by key: the last one below the birth.
            let i = entries.partition_point(|(k, _)| *k < bp.birth());
            let key = if i == 0 { first } else { entries[i - 1].0 };
            by_key.entry(key).or_default().push(*bp);
            sums.add(&self.pool, bp, 1);
        }
        let empty = self.empty_bpobj()?;
        for (key, list) in by_key {
            let Ok(i) = entries.binary_search_by_key(&key, |(k, _)| *k) else {
                continue;
            };
            let mut obj = entries[i].1;
            if Some(obj) == empty {
                obj = self.bpobj_alloc()?;
                self.bpobj_decr_empty()?;
                zap_tx::update(&mut self.mos, dl, &format!("{key:x}"), 8, &[obj])?;
            }
            self.bpobj_enqueue(obj, &list)?;
        }
        self.deadlist_hdr_add(dl, sums.dsize, sums.psize, sums.ucsize)
    }

    /// Entry `key` of `dl` takes bpobj `obj` in (`dle_enqueue_subobj`).
    fn deadlist_entry_take(&mut self, dl: u64, key: u64, cur: u64, obj: u64) -> Result<()> {
        if Some(cur) != self.empty_bpobj()? {
            return self.bpobj_enqueue_subobj(cur, obj);
        }
        self.bpobj_decr_empty()?;
        zap_tx::update(&mut self.mos, dl, &format!("{key:x}"), 8, &[obj])
    }

    /// Fold entry `k` of new-format dead list `dl` into the entry below it
    /// (`dsl_deadlist_remove_key`); nothing happens when `k` is not a key
    /// or is the lowest one.
    pub(crate) fn deadlist_remove_key(&mut self, dl: u64, k: u64) -> Result<()> {
        if !is_new_format(self, dl)? {
            return Ok(());
        }
        let entries = self.deadlist_entries(dl)?;
        let Some(i) = entries.iter().position(|(key, _)| *key == k) else {
            return Ok(());
        };
        if i == 0 {
            return Ok(());
        }
        let (pk, pobj) = entries[i - 1];
        zap_tx::remove(&mut self.mos, dl, format!("{k:x}").as_bytes())?;
        self.deadlist_entry_take(dl, pk, pobj, entries[i].1)
    }

    /// Free every block of the entries of new-format dead list `dl` keyed
    /// at or above `mintxg`, and the entries (what OpenZFS's
    /// `dsl_deadlist_move_bpobj` hands to the pool's free list, freed here
    /// at once). Returns their sums.
    pub(crate) fn deadlist_free_from(&mut self, dl: u64, mintxg: u64) -> Result<Sums> {
        let txg = self.txg;
        let empty = self.empty_bpobj()?;
        let mut freed = Sums::default();
        for (k, obj) in self.deadlist_entries(dl)? {
            if k < mintxg {
                continue;
            }
            zap_tx::remove(&mut self.mos, dl, format!("{k:x}").as_bytes())?;
            if Some(obj) == empty {
                self.bpobj_decr_empty()?;
                continue;
            }
            let h = self.bpobj_hdr(obj)?;
            let mut bps = Vec::new();
            self.bpobj_bps(obj, 0, &mut bps)?;
            for bp in &bps {
                if !bp.is_embedded() && !bp.is_hole() {
                    self.pool.free_block(&mut self.alloc, bp, txg)?;
                }
            }
            freed.dsize += h.bytes as i64;
            freed.psize += h.comp as i64;
            freed.ucsize += h.uncomp as i64;
            self.bpobj_free(obj, 0)?;
        }
        self.deadlist_hdr_add(dl, -freed.dsize, -freed.psize, -freed.ucsize)?;
        Ok(freed)
    }

    /// Move every entry of dead list `src` into new-format dead list `dl`
    /// (`dsl_deadlist_merge`), each under `dl`'s entry of the same key or
    /// the one below it; a bplist's blocks are inserted one by one. `src`
    /// is freed (empty by then).
    pub(crate) fn deadlist_merge(&mut self, dl: u64, src: u64) -> Result<()> {
        if !is_new_format(self, src)? {
            let bps = crate::destroy::read_bplist(self, src)?;
            if !bps.is_empty() {
                self.deadlist_insert(dl, &bps)?;
            }
            return self.mos.free_object(src);
        }
        let dst = self.deadlist_entries(dl)?;
        let Some(&(first, _)) = dst.first() else {
            return Err(Error::corrupt(format!("dead list {dl}"), "no entries"));
        };
        let empty = self.empty_bpobj()?;
        let mut cur: std::collections::BTreeMap<u64, u64> = dst.into_iter().collect();
        for (k, obj) in self.deadlist_entries(src)? {
            if Some(obj) != empty {
                let h = self.bpobj_hdr(obj)?;
                self.deadlist_hdr_add(dl, h.bytes as i64, h.comp as i64, h.uncomp as i64)?;
            }
            let tk = cur.range(..=k).next_back().map_or(first, |(t, _)| *t);
            let tobj = cur.get(&tk).copied().unwrap_or_default();
            self.deadlist_entry_take(dl, tk, tobj, obj)?;
            // The entry may now name `obj` (it was the empty bpobj).
            if let Some(e) = zap_tx::lookup(&self.mos, dl, format!("{tk:x}").as_bytes())?
                .and_then(|e| e.as_u64())
            {
                cur.insert(tk, e);
            }
            zap_tx::remove(&mut self.mos, src, format!("{k:x}").as_bytes())?;
        }
        self.mos.free_object(src)
    }

    /// Free a dead list of either format (`dsl_deadlist_free`): its entries
    /// and their bpobjs, never the blocks they list.
    pub(crate) fn deadlist_free(&mut self, dl: u64) -> Result<()> {
        if !is_new_format(self, dl)? {
            return self.mos.free_object(dl);
        }
        let empty = self.empty_bpobj()?;
        for (_, obj) in self.deadlist_entries(dl)? {
            if Some(obj) == empty {
                self.bpobj_decr_empty()?;
            } else {
                self.bpobj_free(obj, 0)?;
            }
        }
        self.mos.free_object(dl)
    }

    /// Put killed blocks on dead list `dl`, of either format.
    pub(crate) fn deadlist_append(&mut self, dl: u64, bps: &[BlkPtr], sums: &Sums) -> Result<()> {
        if bps.is_empty() {
            return Ok(());
        }
        if is_new_format(self, dl)? {
            self.deadlist_insert(dl, bps)
        } else {
            self.bplist_append(dl, bps, sums)
        }
    }
}

/// Every block dead list `dl` (either format) lists.
pub(crate) fn deadlist_bps(w: &PoolWriter, dl: u64) -> Result<Vec<BlkPtr>> {
    if !is_new_format(w, dl)? {
        return crate::destroy::read_bplist(w, dl);
    }
    let mut out = Vec::new();
    let empty = w.empty_bpobj()?;
    for (_, obj) in w.deadlist_entries(dl)? {
        if Some(obj) != empty {
            w.bpobj_bps(obj, 0, &mut out)?;
        }
    }
    Ok(out)
}

/// What is wrong with new-format dead list `dl`'s structure (the space
/// check, `crate::space`): an entry's bpobj whose sums are not those of
/// its blocks and sub-objects, or holding a block born at or before its
/// key. Also returns how many entries name the shared empty bpobj.
pub(crate) fn check_structure(w: &PoolWriter, dl: u64) -> Result<(Vec<String>, u64)> {
    let mut problems = Vec::new();
    if !is_new_format(w, dl)? {
        return Ok((problems, 0));
    }
    let empty = w.empty_bpobj()?;
    let mut empties = 0;
    fn sums(
        w: &PoolWriter,
        obj: u64,
        depth: u32,
        key: u64,
        problems: &mut Vec<String>,
        seen: &mut Seen,
    ) -> Result<u64> {
        seen.enter(obj, depth)?;
        let h = w.bpobj_hdr(obj)?;
        let own = w.bpobj_own_bps(obj, &h)?;
        let mut total: u64 = own.iter().map(|b| w.pool.dsize(b, true)).sum();
        for b in &own {
            if b.birth() <= key {
                problems.push(format!(
                    "bpobj {obj} under key {key} holds a block born in txg {}",
                    b.birth()
                ));
            }
        }
        for sub in w.bpobj_subobjs(obj, &h)? {
            total = total.wrapping_add(sums(w, sub, depth + 1, key, problems, seen)?);
        }
        if total != h.bytes {
            problems.push(format!(
                "bpobj {obj}: {} bytes in its header, {total} in its blocks",
                h.bytes
            ));
        }
        Ok(total)
    }
    let mut seen = Seen::default();
    for (k, obj) in w.deadlist_entries(dl)? {
        if Some(obj) == empty {
            empties += 1;
            continue;
        }
        sums(w, obj, 0, k, &mut problems, &mut seen)?;
    }
    Ok((problems, empties))
}

/// The shared empty bpobj's object and its feature count, for the space
/// check: (object, count).
pub(crate) fn empty_bpobj_state(w: &PoolWriter) -> Result<(Option<u64>, Option<u64>)> {
    Ok((
        w.empty_bpobj()?,
        if w.version >= ozfs_spa::pool::SPA_VERSION_FEATURES {
            crate::features::refcount(w, EMPTY_BPOBJ)?
        } else {
            None
        },
    ))
}

/// A dead list's (used, compressed, uncompressed) bytes from its header.
pub(crate) fn deadlist_sums(w: &PoolWriter, dl: u64) -> Result<(u64, u64, u64)> {
    let dn = w.mos.dnode(dl)?;
    let b = &dn.phys.bonus;
    Ok(if is_new_format(w, dl)? {
        (
            word(b, 0, dn.swap),
            word(b, 1, dn.swap),
            word(b, 2, dn.swap),
        )
    } else {
        (
            word(b, 1, dn.swap),
            word(b, 2, dn.swap),
            word(b, 3, dn.swap),
        )
    })
}

/// Bytes (dsize) of dead list `dl`'s blocks born in (`min`, `max`]: from
/// the blocks of a bplist; from the sums of the entries keyed in
/// [`min`, `max`) of a new-format one (`dsl_deadlist_space_range`, exact
/// when the bounds are keys).
pub(crate) fn deadlist_space_range(w: &PoolWriter, dl: u64, min: u64, max: u64) -> Result<u64> {
    if !is_new_format(w, dl)? {
        return Ok(crate::destroy::read_bplist(w, dl)?
            .iter()
            .filter(|b| b.birth() > min && b.birth() <= max)
            .map(|b| w.pool.dsize(b, true))
            .sum());
    }
    let empty = w.empty_bpobj()?;
    let mut used = 0u64;
    for (k, obj) in w.deadlist_entries(dl)? {
        if k >= min && k < max && Some(obj) != empty {
            used = used.wrapping_add(w.bpobj_hdr(obj)?.bytes);
        }
    }
    Ok(used)
}
