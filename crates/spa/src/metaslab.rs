//! Metaslabs: where new blocks go, and how freed space comes back.
//!
//! # Theory
//!
//! Every top-level vdev's allocatable address space `[0, asize)` (DVA offsets,
//! FORMAT §4.4) is cut into `ms_count = asize >> ms_shift` equal metaslabs; the
//! tail beyond `ms_count << ms_shift` is never used. Each metaslab owns one
//! space map object, an append-only log of ALLOC and FREE records whose
//! replay is the metaslab's allocated set. Only the changes of a txg are
//! appended when it syncs, so the cost of recording an allocation does not
//! grow with the size of the pool; when the log becomes much longer than the
//! set it describes it is rewritten ("condensed") as one ALLOC per segment
//! (plus, while frees are still deferred, ALLOCs for them followed by FREEs
//! under debug words naming the txg of each free, so a re-import can restore
//! the deferral; see [`Metaslab::condensed_entries`]).
//!
//! In memory a metaslab partitions its bytes into disjoint sets:
//!
//! * `allocated` — exactly what its space map says after everything emitted
//!   so far *and* the not-yet-emitted changes are replayed; its total is the
//!   space map's `smp_alloc` once the txg has synced;
//! * `free` — allocatable right now;
//! * `freeing` — freed in the open txg (recorded as FREE in the space map,
//!   but some older uberblock, and possibly the last synced one, still points
//!   at these bytes);
//! * `deferred[T]` — freed in an already synced txg `T`, still held back.
//!
//! `allocated ∪ free ∪ freeing ∪ ⋃deferred` is the whole metaslab and the sets
//! never overlap. Two more sets describe what has not been written to the
//! space map yet: `alloc_unsynced ⊆ allocated` and `free_unsynced ⊆ freeing`.
//! They are disjoint from each other because space freed in a txg can't be
//! allocated again in that txg.
//!
//! # Allocation
//!
//! [`Allocator::alloc`] picks a top-level vdev with a rotor that stays on one
//! vdev until it has handed out an *aliquot* (512 KiB times the number of RAID-Z
//! children) and then moves on, so a large write lands contiguously on each
//! vdev while consecutive large writes spread over all of them. Within the
//! vdev, the last metaslab that satisfied a request is tried first, then the
//! others in order. Within a metaslab the search is first-fit, aligned to the
//! allocation unit `2^ashift`, starting at a cursor left just past the previous
//! allocation (wrapping once to the metaslab start), so a run of allocations
//! is laid out back to back. Only `free` is searched, so nothing allocated,
//! freed in the open txg or still deferred is ever handed out. Ditto copies
//! pass the vdevs of the copies already placed in `avoid_vdevs`; those vdevs
//! are used only if no other vdev has room (a second copy on the same vdev
//! necessarily lands at a different offset). An allocation's size is the
//! PSIZE rounded to `2^ashift`, or the RAID-Z asize (FORMAT §4.3), and never
//! crosses a metaslab boundary.
//!
//! # Frees and deferral
//!
//! A free in txg `T` of bytes allocated in an earlier txg (or in an earlier
//! sync pass of `T`, whose ALLOC is already in the space map) removes them
//! from `allocated`, adds them to `freeing`, and emits a FREE record with the
//! txg's other changes. The bytes return to `free` only when
//! [`Allocator::sync_done`] is called for `T + 2` (`TXG_DEFER_SIZE` = 2), so
//! the first txg that can reuse them is `T + 3`: while txgs `T`, `T + 1` and
//! `T + 2` are being synced, the uberblocks of `T − 1`, `T` and `T + 1` — which
//! may still reference the freed block — stay intact for rewind.
//!
//! A free in txg `T` of bytes allocated in `T` whose ALLOC has not been
//! emitted yet cancels: the bytes leave `allocated` and `alloc_unsynced` and go
//! straight back to `free`, and neither record is ever written. No synced
//! uberblock can reference such a block, so immediate reuse is safe (the
//! caller must not still have a write to it in flight), and it is what lets
//! sync passes converge when metadata is rewritten within a txg.
//!
//! # Txg discipline
//!
//! All changes between two [`Allocator::sync_done`] calls belong to one txg;
//! allocating or freeing with another txg is an error, as is using a txg at or
//! below the last synced one. Each sync pass of txg `T` calls
//! [`Allocator::sync_entries`]`(T, pass)`, which returns, per changed
//! metaslab, a debug record and the ALLOC entries, then a debug record and
//! the FREE entries (each batch only if non-empty), all metaslab-relative;
//! the caller encodes and appends them to the metaslab's space map (creating
//! the object first if `sm_object` is 0) and adds [`spacemap::net_alloc`] to
//! `smp_alloc`. After the last pass, [`Allocator::sync_done`]`(T)` moves
//! `freeing` into `deferred[T]` and releases `deferred[t]` for every
//! `t <= T − 2`.
//!
//! # Invariants ([`Allocator::verify`])
//!
//! * the sets above partition every metaslab exactly; the unsynced sets are
//!   subsets of `allocated` / `freeing`;
//! * an allocation is carved out of `free` only, so it never overlaps
//!   allocated, freeing or deferred bytes;
//! * replaying everything emitted for a metaslab reproduces `allocated` after
//!   `sync_entries`, and the group's `alloc_bytes` equals Σ `smp_alloc`.

use crate::range::RangeSet;
use crate::spacemap::{self, SmEntry, SM_ALLOC, SM_FREE};
use ozfs_codec::draid::DraidLayout;
use ozfs_format::{Error, ErrorKind, Result};
use ozfs_vdev::{Vdev, VdevKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Smallest metaslab shift (SPA_MAXBLOCKSHIFT of pool v23: 128 KiB).
pub const METASLAB_SHIFT_MIN: u32 = 17;
/// Bytes handed out on one top-level vdev before the rotor moves on (per data child).
pub const METASLAB_ALIQUOT: u64 = 512 << 10;
/// Number of synced txgs a free is held back after the txg that freed it.
pub const TXG_DEFER_SIZE: u64 = 2;
/// errno of "no space left on device".
pub const ENOSPC: i32 = 28;
/// Bytes at the start of a leaf before DVA offset 0 (2 labels + boot area).
pub const VDEV_LABEL_START_SIZE: u64 = 4 << 20;
/// Bytes at the end of a leaf after its allocatable space (2 labels).
pub const VDEV_LABEL_END_SIZE: u64 = 512 << 10;
/// Size of one vdev label; device sizes are rounded down to a multiple of it.
pub const VDEV_LABEL_SIZE: u64 = 256 << 10;

/// Index (1-based) of the highest set bit; 0 for 0 (illumos `highbit`).
pub fn highbit(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// Metaslab shift that pool v23 (zfs-fuse) chooses for a new top-level vdev:
/// `highbit(asize / 200)` (about 200 metaslabs), at least 17.
pub fn metaslab_shift_for(asize: u64) -> u32 {
    highbit(asize / 200).max(METASLAB_SHIFT_MIN)
}

/// Allocatable size of a leaf device of `device_size` bytes: rounded down to
/// a whole number of labels, minus the front labels and boot area and the
/// back labels (FORMAT §1.1). 0 if the device is too small.
pub fn leaf_asize(device_size: u64) -> u64 {
    (device_size & !(VDEV_LABEL_SIZE - 1))
        .saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

/// The error returned when nothing fits: [`Error::NoSpace`], printed as
/// `what` followed by the system's text for ENOSPC.
pub fn enospc(what: String) -> Error {
    Error::NoSpace(format!(
        "{what}: {}",
        std::io::Error::from_raw_os_error(ENOSPC)
    ))
}

/// Whether `e` is an out-of-space error (of [`enospc`], or an I/O error
/// with errno ENOSPC).
pub fn is_enospc(e: &Error) -> bool {
    e.kind() == ErrorKind::NoSpace
}

/// One allocated piece of a top-level vdev: what goes into a DVA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    pub vdev: u64,
    pub offset: u64,
    pub asize: u64,
}

/// Allocation state of one metaslab (offsets are vdev offsets, not relative).
#[derive(Debug, Clone)]
pub struct Metaslab {
    pub id: u64,
    pub start: u64,
    pub size: u64,
    /// Space map object, 0 until one has been created.
    pub sm_object: u64,
    /// Allocated ranges, as the space map says once pending changes are written.
    pub allocated: RangeSet,
    /// Allocatable now.
    free: RangeSet,
    /// Allocated in the open txg and not yet returned by `sync_entries`.
    alloc_unsynced: RangeSet,
    /// Freed in the open txg and not yet returned by `sync_entries`.
    free_unsynced: RangeSet,
    /// Everything freed in the open txg (emitted or not).
    freeing: RangeSet,
    /// Freed in synced txgs, not yet reusable, by the txg of the free.
    deferred: BTreeMap<u64, RangeSet>,
    /// Where the next first-fit search starts.
    cursor: u64,
}

fn internal(e: Error) -> Error {
    Error::Invalid(format!("metaslab state inconsistent: {e}"))
}

impl Metaslab {
    /// An entirely free metaslab covering `[start, start + size)`.
    pub fn new(id: u64, start: u64, size: u64) -> Self {
        Self {
            id,
            start,
            size,
            sm_object: 0,
            allocated: RangeSet::new(),
            free: RangeSet::with_range(start, size).unwrap_or_default(),
            alloc_unsynced: RangeSet::new(),
            free_unsynced: RangeSet::new(),
            freeing: RangeSet::new(),
            deferred: BTreeMap::new(),
            cursor: start,
        }
    }

    /// First byte past the metaslab.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }

    /// Allocated bytes (the space map's `smp_alloc` once synced).
    pub fn alloc_bytes(&self) -> u64 {
        self.allocated.total()
    }

    /// Bytes allocatable now.
    pub fn free_bytes(&self) -> u64 {
        self.free.total()
    }

    /// Bytes freed but not yet reusable (open txg and deferred txgs).
    pub fn deferred_bytes(&self) -> u64 {
        self.freeing.total() + self.deferred.values().map(RangeSet::total).sum::<u64>()
    }

    /// The allocatable ranges.
    pub fn free_set(&self) -> &RangeSet {
        &self.free
    }

    /// Ranges freed in the open txg.
    pub fn freeing_set(&self) -> &RangeSet {
        &self.freeing
    }

    /// Deferred frees by the txg that freed them.
    pub fn deferred_sets(&self) -> &BTreeMap<u64, RangeSet> {
        &self.deferred
    }

    /// The free-segment histogram OpenZFS's `metaslab_sync` stores with its
    /// space map: the segments of what is allocatable, freed in the open
    /// txg and still deferred, each set counted on its own.
    pub fn histogram(&self, sm_shift: u32) -> spacemap::SmHistogram {
        let mut h = spacemap::SmHistogram::new();
        let sets = std::iter::once(&self.free)
            .chain(std::iter::once(&self.freeing))
            .chain(self.deferred.values());
        for set in sets {
            for (_, len) in set.iter() {
                h.add(len, sm_shift);
            }
        }
        h
    }

    /// Whether there are changes `sync_entries` has not returned yet.
    pub fn is_dirty(&self) -> bool {
        !self.alloc_unsynced.is_empty() || !self.free_unsynced.is_empty()
    }

    fn has_txg_state(&self) -> bool {
        self.is_dirty() || !self.freeing.is_empty()
    }

    /// Replace the state with the replay of a space map (`entries` relative
    /// to the metaslab start). With `synced_txg`, frees recorded (per the
    /// debug words) in txgs whose deferral has not expired by then are put
    /// back into deferral instead of being made allocatable.
    pub fn load(
        &mut self,
        sm_object: u64,
        entries: &[SmEntry],
        synced_txg: Option<u64>,
    ) -> Result<()> {
        if self.has_txg_state() {
            return Err(Error::Invalid(format!(
                "metaslab {}: cannot load a space map over changes of an open txg",
                self.id
            )));
        }
        let what = |n: usize, detail: String| Error::Corrupt {
            what: format!("space map of metaslab {}", self.id),
            detail: format!("entry {n}: {detail}"),
        };
        let mut alloc = RangeSet::new();
        let mut recent: Vec<(u64, u64, u64)> = Vec::new();
        let mut cur_txg = 0u64;
        for (n, e) in entries.iter().enumerate() {
            match *e {
                SmEntry::Debug { txg, .. } => cur_txg = txg,
                SmEntry::Alloc { offset, len } | SmEntry::Free { offset, len } => {
                    if !matches!(offset.checked_add(len), Some(e) if e <= self.size) {
                        return Err(what(
                            n,
                            format!("{offset:#x}+{len:#x} beyond metaslab size {:#x}", self.size),
                        ));
                    }
                    let abs = self.start + offset;
                    if matches!(e, SmEntry::Alloc { .. }) {
                        alloc
                            .add(abs, len)
                            .map_err(|err| what(n, format!("ALLOC: {err}")))?;
                    } else {
                        alloc
                            .remove(abs, len)
                            .map_err(|err| what(n, format!("FREE: {err}")))?;
                        if let Some(st) = synced_txg {
                            if cur_txg != 0 && cur_txg <= st && cur_txg + TXG_DEFER_SIZE > st {
                                recent.push((cur_txg, abs, len));
                            }
                        }
                    }
                }
            }
        }
        // Latest frees first, so a range freed twice is deferred by its last free.
        let mut claimed = RangeSet::new();
        let mut deferred: BTreeMap<u64, RangeSet> = BTreeMap::new();
        for &(txg, s, l) in recent.iter().rev() {
            for (gs, gl) in alloc.gaps(s, l) {
                for (ps, pl) in claimed.gaps(gs, gl) {
                    claimed.add(ps, pl).map_err(internal)?;
                    deferred
                        .entry(txg)
                        .or_default()
                        .add(ps, pl)
                        .map_err(internal)?;
                }
            }
        }
        let mut free = RangeSet::new();
        for (gs, gl) in alloc.gaps(self.start, self.size) {
            for (ps, pl) in claimed.gaps(gs, gl) {
                free.add(ps, pl).map_err(internal)?;
            }
        }
        self.sm_object = sm_object;
        self.allocated = alloc;
        self.free = free;
        self.deferred = deferred;
        self.cursor = self.start;
        Ok(())
    }

    /// Carve `asize` bytes aligned to `align` out of the free set.
    fn try_alloc(&mut self, asize: u64, align: u64) -> Result<Option<u64>> {
        self.try_alloc_at(asize, align, false)
    }

    /// [`Metaslab::try_alloc`], from the metaslab's start when `lowest`
    /// (the first fit, not the next one after the last allocation).
    fn try_alloc_at(&mut self, asize: u64, align: u64, lowest: bool) -> Result<Option<u64>> {
        if asize == 0 || asize > self.size || self.free.largest() < asize {
            return Ok(None);
        }
        let from = if lowest { self.start } else { self.cursor };
        let found = self
            .free
            .first_fit(asize, align, from)
            .or_else(|| self.free.first_fit(asize, align, self.start));
        let Some(off) = found else {
            return Ok(None);
        };
        debug_assert!(off >= self.start && off + asize <= self.end());
        debug_assert!(!self.freeing.overlaps(off, asize));
        debug_assert!(self.deferred.values().all(|d| !d.overlaps(off, asize)));
        self.free.remove(off, asize).map_err(internal)?;
        self.allocated.add(off, asize).map_err(internal)?;
        self.alloc_unsynced.add(off, asize).map_err(internal)?;
        self.cursor = off + asize;
        Ok(Some(off))
    }

    /// Free `[off, off + len)` (vdev offsets). See the module docs for the
    /// cancel-or-defer rule.
    fn free_range(&mut self, off: u64, len: u64) -> Result<()> {
        self.free_range_as(off, len, true)
    }

    /// Free `[off, off + len)` never cancelling: bytes born in the open
    /// txg go to `freeing` like older ones (their ALLOC is simply never
    /// written), so they are not reused before the txg of the free and the
    /// deferral after it are on disk. Intent-log blocks are freed this way:
    /// a log block allocated in txg `T` and retired by `T`'s sync may still
    /// be named by a chain the last durable header reaches, and must keep
    /// its bytes until `T` is durable.
    fn free_range_deferred(&mut self, off: u64, len: u64) -> Result<()> {
        self.free_range_as(off, len, false)
    }

    /// The one free: bytes born in the open txg return to `free` at once
    /// when `cancel`, else wait in `freeing`; older bytes are always
    /// deferred (and recorded as a FREE).
    fn free_range_as(&mut self, off: u64, len: u64, cancel: bool) -> Result<()> {
        if len == 0
            || off < self.start
            || !matches!(off.checked_add(len), Some(e) if e <= self.end())
        {
            return Err(Error::Invalid(format!(
                "free {off:#x}+{len:#x} is not inside metaslab {} [{:#x}, {:#x})",
                self.id,
                self.start,
                self.end()
            )));
        }
        if !self.allocated.contains(off, len) {
            return Err(Error::Invalid(format!(
                "free {off:#x}+{len:#x} in metaslab {}: not (wholly) allocated (double free?)",
                self.id
            )));
        }
        let born = self.alloc_unsynced.intersection(off, len);
        let older = self.alloc_unsynced.gaps(off, len);
        for (s, l) in born {
            self.alloc_unsynced.remove(s, l).map_err(internal)?;
            self.allocated.remove(s, l).map_err(internal)?;
            if cancel {
                self.free.add(s, l).map_err(internal)?;
            } else {
                self.freeing.add(s, l).map_err(internal)?;
            }
        }
        for (s, l) in older {
            self.allocated.remove(s, l).map_err(internal)?;
            self.freeing.add(s, l).map_err(internal)?;
            self.free_unsynced.add(s, l).map_err(internal)?;
        }
        Ok(())
    }

    /// Claim `[off, off + len)`, which must be wholly free: it becomes
    /// allocated in the open txg (ZFS's `zio_claim` of intent-log blocks
    /// written after the last synced txg, which no space map records).
    fn claim_range(&mut self, off: u64, len: u64) -> Result<()> {
        if len == 0
            || off < self.start
            || !matches!(off.checked_add(len), Some(e) if e <= self.end())
            || !self.free.contains(off, len)
        {
            return Err(Error::corrupt(
                "intent log",
                format!(
                    "block {off:#x}+{len:#x} in metaslab {} is not free space: it cannot be \
                     claimed",
                    self.id
                ),
            ));
        }
        self.free.remove(off, len).map_err(internal)?;
        self.allocated.add(off, len).map_err(internal)?;
        self.alloc_unsynced.add(off, len).map_err(internal)?;
        Ok(())
    }

    /// The unsynced changes as space-map entries, then forget them.
    fn take_entries(&mut self, txg: u64, pass: u64) -> Vec<SmEntry> {
        let mut v = Vec::new();
        push_batch(
            &mut v,
            SM_ALLOC,
            pass,
            txg,
            &self.alloc_unsynced,
            self.start,
        );
        push_batch(
            &mut v,
            SM_FREE,
            pass,
            txg,
            self.free_unsynced.iter(),
            self.start,
        );
        self.alloc_unsynced.clear();
        self.free_unsynced.clear();
        v
    }

    /// End of txg `txg`: its frees become deferred; frees of txgs `<= txg - 2`
    /// (and `<= keep_after`, if given) are released.
    fn sync_done(&mut self, txg: u64, keep_after: Option<u64>) -> Result<()> {
        if self.is_dirty() {
            return Err(Error::Invalid(format!(
                "metaslab {}: sync_done({txg}) with changes not returned by sync_entries",
                self.id
            )));
        }
        if !self.freeing.is_empty() {
            let f = std::mem::take(&mut self.freeing);
            self.deferred
                .entry(txg)
                .or_default()
                .add_all(&f)
                .map_err(internal)?;
        }
        if let Some(limit) = txg.checked_sub(TXG_DEFER_SIZE) {
            let limit = keep_after.map_or(limit, |k| limit.min(k));
            let ready: Vec<u64> = self.deferred.range(..=limit).map(|(&k, _)| k).collect();
            for k in ready {
                if let Some(set) = self.deferred.remove(&k) {
                    self.free.add_all(&set).map_err(internal)?;
                }
            }
        }
        Ok(())
    }

    /// A minimal entry list describing the current allocated set: one debug
    /// word, then one ALLOC per segment; empty if nothing is allocated. It
    /// carries no record of recent frees (see [`Metaslab::condensed_entries`]).
    pub fn minimal_entries(&self, txg: u64, pass: u64) -> Vec<SmEntry> {
        let mut v = Vec::new();
        push_batch(
            &mut v,
            SM_ALLOC,
            pass,
            txg,
            self.allocated.iter(),
            self.start,
        );
        v
    }

    /// The entries that replace the space map when condensing. Replaying them
    /// gives exactly the allocated set. If nothing is waiting out its deferral
    /// this is [`Metaslab::minimal_entries`]; otherwise the still-deferred
    /// ranges are written as ALLOCs followed by FREE batches whose debug words
    /// carry the txg of each free, so that
    /// [`MetaslabGroup::load_metaslab_deferring`] can recover the deferral
    /// after a re-import.
    pub fn condensed_entries(&self, txg: u64, pass: u64) -> Vec<SmEntry> {
        if self.freeing.is_empty() && self.deferred.is_empty() {
            return self.minimal_entries(txg, pass);
        }
        // allocated ∪ freeing ∪ deferred, disjoint by the partition invariant;
        // touching segments are merged.
        let mut segs: Vec<(u64, u64)> = self.allocated.iter().chain(self.freeing.iter()).collect();
        for d in self.deferred.values() {
            segs.extend(d.iter());
        }
        segs.sort_unstable();
        let mut held: Vec<(u64, u64)> = Vec::with_capacity(segs.len());
        for (s, l) in segs {
            match held.last_mut() {
                Some((ps, pl)) if *ps + *pl >= s => *pl = (*pl).max(s + l - *ps),
                _ => held.push((s, l)),
            }
        }
        let mut v = Vec::new();
        push_batch(&mut v, SM_ALLOC, pass, txg, held, self.start);
        for (&t, d) in &self.deferred {
            push_batch(&mut v, SM_FREE, pass, t, d.iter(), self.start);
        }
        push_batch(&mut v, SM_FREE, pass, txg, self.freeing.iter(), self.start);
        v
    }

    /// Words the condensed space map ([`Metaslab::condensed_entries`]) takes at `sm_shift`.
    pub fn condensed_words(&self, sm_shift: u32) -> u64 {
        spacemap::encoded_words(&self.condensed_entries(1, 1), sm_shift)
    }

    /// Whether a space map of `sm_length` bytes is worth condensing: at least
    /// twice the condensed size and longer than `min_bytes` (e.g. one block).
    pub fn condense_worthwhile(&self, sm_length: u64, sm_shift: u32, min_bytes: u64) -> bool {
        sm_length > min_bytes && sm_length >= 2 * 8 * self.condensed_words(sm_shift)
    }

    /// Condense: [`Metaslab::condensed_entries`], which *replace* the whole
    /// space map (it must then have `smp_length` = their encoded size and
    /// `smp_alloc` = [`Metaslab::alloc_bytes`]). They include the unsynced
    /// changes, which are therefore cleared; frees stay deferred as usual.
    pub fn condense(&mut self, txg: u64, pass: u64) -> Vec<SmEntry> {
        let v = self.condensed_entries(txg, pass);
        self.alloc_unsynced.clear();
        self.free_unsynced.clear();
        v
    }

    /// Check the partition and subset invariants.
    pub fn verify(&self) -> Result<()> {
        let bad = |d: String| Error::Invalid(format!("metaslab {}: {d}", self.id));
        let mut segs: Vec<(u64, u64, &str)> = Vec::new();
        segs.extend(self.allocated.iter().map(|(s, l)| (s, l, "allocated")));
        segs.extend(self.free.iter().map(|(s, l)| (s, l, "free")));
        segs.extend(self.freeing.iter().map(|(s, l)| (s, l, "freeing")));
        for d in self.deferred.values() {
            segs.extend(d.iter().map(|(s, l)| (s, l, "deferred")));
        }
        segs.sort_unstable();
        let mut pos = self.start;
        for &(s, l, tag) in &segs {
            if s != pos {
                return Err(bad(format!(
                    "{} at {pos:#x} (next segment: {tag} {s:#x}+{l:#x})",
                    if s < pos { "overlap" } else { "hole" }
                )));
            }
            pos = s + l;
        }
        if pos != self.end() {
            return Err(bad(format!(
                "sets end at {pos:#x}, metaslab at {:#x}",
                self.end()
            )));
        }
        for (s, l) in self.alloc_unsynced.iter() {
            if !self.allocated.contains(s, l) {
                return Err(bad(format!("unsynced alloc {s:#x}+{l:#x} not allocated")));
            }
        }
        for (s, l) in self.free_unsynced.iter() {
            if !self.freeing.contains(s, l) {
                return Err(bad(format!("unsynced free {s:#x}+{l:#x} not in freeing")));
            }
        }
        if self.cursor < self.start || self.cursor > self.end() {
            return Err(bad(format!("cursor {:#x} outside", self.cursor)));
        }
        Ok(())
    }
}

/// Append a debug word and one entry of `action` per segment (start, len)
/// of `segs` (made relative to `base`), unless there are none.
fn push_batch(
    v: &mut Vec<SmEntry>,
    action: u8,
    pass: u64,
    txg: u64,
    segs: impl IntoIterator<Item = (u64, u64)>,
    base: u64,
) {
    let mut segs = segs.into_iter().peekable();
    if segs.peek().is_none() {
        return;
    }
    v.push(SmEntry::Debug { action, pass, txg });
    v.extend(segs.map(|(s, len)| {
        let offset = s - base;
        if action == SM_ALLOC {
            SmEntry::Alloc { offset, len }
        } else {
            SmEntry::Free { offset, len }
        }
    }));
}

/// The metaslabs of one top-level vdev.
#[derive(Debug, Clone)]
pub struct MetaslabGroup {
    pub vdev: u64,
    pub ashift: u32,
    pub asize: u64,
    pub ms_shift: u32,
    pub metaslabs: Vec<Metaslab>,
    /// How blocks are sized and aligned on this vdev ([`Geometry`]).
    pub geometry: Geometry,
    /// Whether new blocks may go here: false for a vdev of another
    /// allocation class than the normal one (an intent-log device, a
    /// special or dedup vdev), whose space OpenZFS keeps for its own
    /// kinds of blocks; frees there are recorded as anywhere.
    pub allocatable: bool,
    /// Whether this is a separate intent-log device (its top-level vdev's
    /// `is_log`): not allocatable, but where [`Allocator::alloc_log`] puts
    /// intent-log blocks first, as OpenZFS's log class.
    pub log: bool,
    /// Metaslab tried first.
    active: usize,
    /// The metaslab intent-log blocks go to on a vdev of the normal class
    /// (OpenZFS's embedded log metaslab): allocated lowest first, so that
    /// the log keeps coming back to the same few megabytes, and left to
    /// other blocks only when nothing else has room.
    log_ms: Option<usize>,
    /// Up to where the log metaslab's holes were filled
    /// ([`Allocator::log_warm_ranges`]); in-memory only.
    log_warm: u64,
}

/// The shape of a top-level vdev as the allocator sees it: how large a
/// block's allocation is, where one may start, and which part of each
/// `2^ms_shift` slot a metaslab covers.
///
/// * `Plain` (a disk, file or mirror): `psize` rounded to `2^ashift`,
///   aligned to `2^ashift`; metaslab `i` is `[i << ms_shift, +2^ms_shift)`.
/// * `Raidz`: the RAID-Z asize with parity and skip sectors (FORMAT §4.3);
///   otherwise as `Plain`.
/// * `Draid`: whole stripes of `W = D + P` sectors (`DraidLayout::asize`),
///   starting on a `W`-sector boundary. Metaslab `i` starts at
///   `i << ms_shift` rounded up to a stripe and holds whole stripes only,
///   as OpenZFS's `vdev_draid_metaslab_init` trims it — its space map's
///   offsets are relative to that trimmed start.
#[derive(Debug, Clone, Default)]
pub enum Geometry {
    #[default]
    Plain,
    /// RAID-Z: (children, nparity).
    Raidz {
        children: usize,
        nparity: usize,
    },
    Draid(Arc<DraidLayout>),
}

impl Geometry {
    /// The geometry of top-level vdev `top`.
    pub fn of(top: &Vdev) -> Geometry {
        match &top.kind {
            VdevKind::Raidz { nparity } => Geometry::Raidz {
                children: top.children.len(),
                nparity: *nparity,
            },
            VdevKind::Draid { layout } => Geometry::Draid(layout.clone()),
            _ => Geometry::Plain,
        }
    }

    /// Allocated size of a block of `psize` bytes.
    pub fn psize_to_asize(&self, ashift: u32, psize: u64) -> u64 {
        match self {
            Geometry::Raidz { children, nparity } => {
                ozfs_codec::raidz::raidz_asize(psize, ashift, *children, *nparity)
            }
            Geometry::Draid(l) => l.asize(psize),
            Geometry::Plain => {
                let unit = 1u64 << ashift;
                psize.div_ceil(unit) * unit
            }
        }
    }

    /// The alignment of an allocation's start.
    pub fn align(&self, ashift: u32) -> u64 {
        match self {
            Geometry::Draid(l) => (l.width() as u64) << ashift,
            _ => 1u64 << ashift,
        }
    }

    /// `(start, size)` of metaslab `id` (module doc of [`Geometry`]).
    pub fn metaslab_range(&self, ashift: u32, ms_shift: u32, id: u64) -> (u64, u64) {
        let slot = 1u64.checked_shl(ms_shift).unwrap_or(0);
        let start = id.saturating_mul(slot);
        match self {
            Geometry::Draid(_) => {
                let stripe = self.align(ashift);
                let astart = start.div_ceil(stripe).saturating_mul(stripe);
                let size = slot.saturating_sub(astart - start) / stripe * stripe;
                (astart, size)
            }
            _ => (start, slot),
        }
    }

    /// The data disks a large write is spread over (for the aliquot).
    fn width(&self) -> u64 {
        match self {
            Geometry::Raidz { children, .. } => (*children).max(1) as u64,
            Geometry::Draid(l) => l.ndisks() as u64,
            Geometry::Plain => 1,
        }
    }
}

/// Allocated size of a block of `psize` bytes on this vdev ([`Geometry`]).
pub fn psize_to_asize(group: &MetaslabGroup, psize: u64) -> u64 {
    group.geometry.psize_to_asize(group.ashift, psize)
}

impl MetaslabGroup {
    /// `asize >> ms_shift` empty metaslabs.
    pub fn new(vdev: u64, ashift: u32, asize: u64, ms_shift: u32, geometry: Geometry) -> Self {
        let count = asize.checked_shr(ms_shift).unwrap_or(0);
        let metaslabs = (0..count)
            .map(|i| {
                let (start, size) = geometry.metaslab_range(ashift, ms_shift, i);
                Metaslab::new(i, start, size)
            })
            .collect();
        Self {
            vdev,
            ashift,
            asize,
            ms_shift,
            metaslabs,
            geometry,
            allocatable: true,
            log: false,
            active: 0,
            log_ms: None,
            log_warm: 0,
        }
    }

    /// Make this the group of a separate intent-log device: no new blocks
    /// but intent-log ones ([`Allocator::alloc_log`]).
    pub fn mark_log(&mut self) {
        self.log = true;
        self.allocatable = false;
    }

    /// See [`psize_to_asize`].
    pub fn psize_to_asize(&self, psize: u64) -> u64 {
        psize_to_asize(self, psize)
    }

    /// Load metaslab `id` from its space map's entries (read by the caller).
    pub fn load_metaslab(&mut self, id: u64, sm_object: u64, entries: &[SmEntry]) -> Result<()> {
        self.ms_mut(id)?.load(sm_object, entries, None)
    }

    /// Like [`MetaslabGroup::load_metaslab`], but frees recorded in txgs whose
    /// deferral has not run out by `synced_txg` (the txg of the uberblock in
    /// use) stay unusable until it does.
    pub fn load_metaslab_deferring(
        &mut self,
        id: u64,
        sm_object: u64,
        entries: &[SmEntry],
        synced_txg: u64,
    ) -> Result<()> {
        self.ms_mut(id)?.load(sm_object, entries, Some(synced_txg))
    }

    fn ms_mut(&mut self, id: u64) -> Result<&mut Metaslab> {
        let n = self.metaslabs.len();
        usize::try_from(id)
            .ok()
            .and_then(|i| self.metaslabs.get_mut(i))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "vdev {}: metaslab {id} out of range ({n} metaslabs)",
                    self.vdev
                ))
            })
    }

    /// Bytes handed out before the rotor moves to the next vdev.
    pub fn aliquot(&self) -> u64 {
        METASLAB_ALIQUOT * self.geometry.width()
    }

    /// Allocated bytes (Σ over metaslabs; equals Σ `smp_alloc` once synced).
    pub fn alloc_bytes(&self) -> u64 {
        self.metaslabs.iter().map(Metaslab::alloc_bytes).sum()
    }

    /// Bytes allocatable now.
    pub fn free_bytes(&self) -> u64 {
        self.metaslabs.iter().map(Metaslab::free_bytes).sum()
    }

    /// Bytes freed but not yet reusable.
    pub fn deferred_bytes(&self) -> u64 {
        self.metaslabs.iter().map(Metaslab::deferred_bytes).sum()
    }

    /// Bytes covered by metaslabs (`ms_count << ms_shift`).
    pub fn total_bytes(&self) -> u64 {
        self.metaslabs.iter().map(|m| m.size).sum()
    }

    fn try_alloc(&mut self, asize: u64) -> Result<Option<u64>> {
        if asize == 0 || self.metaslabs.is_empty() || asize > 1u64 << self.ms_shift {
            return Ok(None);
        }
        let align = self.geometry.align(self.ashift);
        let n = self.metaslabs.len();
        let first = self.active.min(n - 1);
        for k in 0..n {
            let i = (first + k) % n;
            if Some(i) == self.log_ms {
                continue;
            }
            let ms = &mut self.metaslabs[i];
            if ms.free.largest() < asize {
                continue;
            }
            if let Some(off) = ms.try_alloc(asize, align)? {
                self.active = i;
                return Ok(Some(off));
            }
        }
        // Nothing else has room: the log metaslab too.
        if let Some(i) = self.log_ms {
            if let Some(off) = self.metaslabs[i].try_alloc(asize, align)? {
                return Ok(Some(off));
            }
        }
        Ok(None)
    }

    /// Allocate an intent-log block in this group's log metaslab, lowest
    /// first; a full (or first) log metaslab is replaced by the one with
    /// the most free space other than the active one.
    fn try_alloc_log(&mut self, asize: u64) -> Result<Option<u64>> {
        if asize == 0 || self.metaslabs.is_empty() || asize > 1u64 << self.ms_shift {
            return Ok(None);
        }
        let align = self.geometry.align(self.ashift);
        if let Some(i) = self.log_ms {
            if let Some(off) = self.metaslabs[i].try_alloc_at(asize, align, true)? {
                return Ok(Some(off));
            }
        }
        let n = self.metaslabs.len();
        let pick = (0..n)
            .filter(|&i| Some(i) != self.log_ms && (i != self.active || n == 1))
            .filter(|&i| self.metaslabs[i].free.largest() >= asize)
            .max_by_key(|&i| (self.metaslabs[i].free_bytes(), std::cmp::Reverse(i)));
        let Some(i) = pick else {
            return self.try_alloc(asize);
        };
        self.log_ms = Some(i);
        self.log_warm = self.metaslabs[i].start;
        self.metaslabs[i].try_alloc_at(asize, align, true)
    }

    fn free(&mut self, offset: u64, asize: u64) -> Result<()> {
        let id = offset.checked_shr(self.ms_shift).unwrap_or(0);
        let vdev = self.vdev;
        let ms = self.ms_mut(id).map_err(|_| {
            Error::Invalid(format!(
                "free {offset:#x}+{asize:#x} on vdev {vdev}: beyond the metaslabs"
            ))
        })?;
        ms.free_range(offset, asize)
    }

    /// Check every metaslab and the geometry.
    pub fn verify(&self) -> Result<()> {
        if (self.metaslabs.len() as u64) << self.ms_shift > self.asize {
            return Err(Error::Invalid(format!(
                "vdev {}: metaslabs extend past asize",
                self.vdev
            )));
        }
        for (i, ms) in self.metaslabs.iter().enumerate() {
            let (start, size) = self
                .geometry
                .metaslab_range(self.ashift, self.ms_shift, i as u64);
            if ms.id != i as u64 || ms.start != start || ms.size != size {
                return Err(Error::Invalid(format!(
                    "vdev {}: metaslab {i} has wrong geometry",
                    self.vdev
                )));
            }
            ms.verify()?;
        }
        Ok(())
    }
}

/// Pool-wide allocation state: one [`MetaslabGroup`] per top-level vdev.
#[derive(Debug, Clone)]
pub struct Allocator {
    pub groups: Vec<MetaslabGroup>,
    /// Index into `groups` of the vdev tried first.
    rotor: usize,
    /// Index into `groups` of the log group [`Allocator::alloc_log`]
    /// tries first (it moves on after every log block).
    log_rotor: usize,
    /// Bytes handed out on the rotor's vdev since it last moved.
    aliquot_used: u64,
    /// The txg the pending changes belong to, if any.
    open_txg: Option<u64>,
    /// The last txg passed to `sync_done` (or set at import).
    synced_txg: u64,
}

/// How far past a log block [`Allocator::log_warm_ranges`] fills holes.
pub const LOG_WARM_CHUNK: u64 = 4 << 20;

/// Changes to append to one metaslab's space map: (vdev, metaslab id, entries).
pub type SyncBatch = (u64, u64, Vec<SmEntry>);

impl Allocator {
    pub fn new(groups: Vec<MetaslabGroup>) -> Self {
        Self {
            groups,
            rotor: 0,
            log_rotor: 0,
            aliquot_used: 0,
            open_txg: None,
            synced_txg: 0,
        }
    }

    /// Record the last synced txg (e.g. the uberblock txg at import).
    pub fn set_synced_txg(&mut self, txg: u64) {
        self.synced_txg = txg;
    }

    /// The last txg passed to [`Allocator::sync_done`] or [`Allocator::set_synced_txg`].
    pub fn synced_txg(&self) -> u64 {
        self.synced_txg
    }

    /// The txg pending changes belong to.
    pub fn open_txg(&self) -> Option<u64> {
        self.open_txg
    }

    pub fn group(&self, vdev: u64) -> Option<&MetaslabGroup> {
        self.groups.iter().find(|g| g.vdev == vdev)
    }

    pub fn group_mut(&mut self, vdev: u64) -> Option<&mut MetaslabGroup> {
        self.groups.iter_mut().find(|g| g.vdev == vdev)
    }

    fn group_index(&self, vdev: u64) -> Result<usize> {
        self.groups
            .iter()
            .position(|g| g.vdev == vdev)
            .ok_or_else(|| Error::Invalid(format!("no top-level vdev {vdev}")))
    }

    fn enter_txg(&mut self, txg: u64) -> Result<()> {
        if txg == 0 || txg <= self.synced_txg {
            return Err(Error::Invalid(format!(
                "txg {txg} is not after the last synced txg {}",
                self.synced_txg
            )));
        }
        match self.open_txg {
            Some(t) if t != txg => Err(Error::Invalid(format!(
                "txg {txg} used while txg {t} is still open"
            ))),
            _ => {
                self.open_txg = Some(txg);
                Ok(())
            }
        }
    }

    /// Allocate space for a block of `psize` bytes in `txg`, preferring vdevs
    /// not in `avoid_vdevs`. Errors with ENOSPC ([`is_enospc`]) if nothing fits.
    pub fn alloc(&mut self, psize: u64, txg: u64, avoid_vdevs: &[u64]) -> Result<Extent> {
        if psize == 0 {
            return Err(Error::Invalid("allocation of 0 bytes".into()));
        }
        self.enter_txg(txg)?;
        let n = self.groups.len();
        for relaxed in [false, true] {
            for k in 0..n {
                let gi = (self.rotor + k) % n;
                let avoided = avoid_vdevs.contains(&self.groups[gi].vdev);
                if avoided != relaxed || !self.groups[gi].allocatable {
                    continue;
                }
                let g = &mut self.groups[gi];
                let asize = g.psize_to_asize(psize);
                if let Some(offset) = g.try_alloc(asize)? {
                    let ext = Extent {
                        vdev: g.vdev,
                        offset,
                        asize,
                    };
                    debug_assert!(offset + asize <= (g.metaslabs.len() as u64) << g.ms_shift);
                    if avoid_vdevs.is_empty() {
                        let aliquot = g.aliquot();
                        if gi != self.rotor {
                            self.rotor = gi;
                            self.aliquot_used = 0;
                        }
                        self.aliquot_used += asize;
                        if self.aliquot_used >= aliquot {
                            self.rotor = (gi + 1) % n;
                            self.aliquot_used = 0;
                        }
                    }
                    return Ok(ext);
                }
            }
        }
        Err(enospc(format!(
            "out of space: no metaslab can hold a {psize}-byte block"
        )))
    }

    /// Allocate an intent-log block of `psize` bytes in `txg`: on a
    /// separate log device ([`MetaslabGroup::log`]) when the pool has one
    /// with room, as OpenZFS's `zio_alloc_zil` tries its log class first —
    /// the log groups taken in turn, one block each — else in the normal
    /// class, in each vdev's log metaslab (`MetaslabGroup::log_ms`), lowest
    /// first, as OpenZFS 2.x keeps one metaslab per vdev for its embedded
    /// log class: freed log blocks are reused where the host already
    /// stores bytes ([`Allocator::log_warm_ranges`]).
    pub fn alloc_log(&mut self, psize: u64, txg: u64) -> Result<Extent> {
        if psize == 0 {
            return Err(Error::Invalid("allocation of 0 bytes".into()));
        }
        let n = self.groups.len();
        if self.groups.iter().any(|g| g.log) {
            self.enter_txg(txg)?;
            for k in 0..n {
                let gi = (self.log_rotor + k) % n;
                let g = &mut self.groups[gi];
                if !g.log {
                    continue;
                }
                let asize = g.psize_to_asize(psize);
                if let Some(offset) = g.try_alloc(asize)? {
                    self.log_rotor = (gi + 1) % n;
                    return Ok(Extent {
                        vdev: g.vdev,
                        offset,
                        asize,
                    });
                }
            }
        }
        self.enter_txg(txg)?;
        for k in 0..n {
            let gi = (self.rotor + k) % n;
            let g = &mut self.groups[gi];
            if !g.allocatable {
                continue;
            }
            let asize = g.psize_to_asize(psize);
            if let Some(offset) = g.try_alloc_log(asize)? {
                return Ok(Extent {
                    vdev: g.vdev,
                    offset,
                    asize,
                });
            }
        }
        Err(enospc(format!(
            "out of space: no metaslab can hold a {psize}-byte log block"
        )))
    }

    /// The ranges whose holes should be filled before log block `ext`
    /// (just returned by [`Allocator::alloc_log`]) is written, so that it
    /// and the log blocks after it overwrite bytes the host already stores
    /// (see `BlockDevice::fill_holes`): when `ext` reaches past its log
    /// metaslab's watermark, `ext` itself and the free space up to
    /// [`LOG_WARM_CHUNK`] past it, and the watermark moves there. Only free
    /// space (which nothing writes while the caller holds the allocator)
    /// and `ext` (whose write is the caller's) are named.
    pub fn log_warm_ranges(&mut self, ext: &Extent) -> Vec<(u64, u64)> {
        let Ok(gi) = self.group_index(ext.vdev) else {
            return Vec::new();
        };
        let g = &mut self.groups[gi];
        if !matches!(g.geometry, Geometry::Plain) || g.log {
            return Vec::new();
        }
        let Some(i) = g.log_ms else {
            return Vec::new();
        };
        let ms = &g.metaslabs[i];
        let end = ext.offset + ext.asize;
        if ext.offset < ms.start || end > ms.end() || end <= g.log_warm {
            return Vec::new();
        }
        let from = g.log_warm.max(ms.start);
        let to = end.saturating_add(LOG_WARM_CHUNK).min(ms.end());
        let mut v = vec![(ext.offset, ext.asize)];
        v.extend(ms.free.intersection(from, to - from));
        g.log_warm = to;
        v
    }

    /// Free an allocation made by [`Allocator::alloc`] (or loaded from a
    /// space map) in `txg`. Errors if any of it is not allocated.
    pub fn free(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64) -> Result<()> {
        let gi = self.group_index(vdev)?;
        self.enter_txg(txg)?;
        self.groups[gi].free(offset, asize)
    }

    /// Free an intent-log block in `txg`, deferred even when it was
    /// allocated in `txg` (see `Metaslab::free_range_deferred`).
    pub fn free_deferred(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64) -> Result<()> {
        let gi = self.group_index(vdev)?;
        self.enter_txg(txg)?;
        let g = &mut self.groups[gi];
        let id = offset.checked_shr(g.ms_shift).unwrap_or(u64::MAX);
        g.ms_mut(id)?.free_range_deferred(offset, asize)
    }

    /// Claim an allocation a space map does not record (an intent-log
    /// block written after the last synced txg): it must be free, and
    /// becomes allocated in `txg`.
    pub fn claim(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64) -> Result<()> {
        let gi = self.group_index(vdev)?;
        self.enter_txg(txg)?;
        let g = &mut self.groups[gi];
        let id = offset.checked_shr(g.ms_shift).unwrap_or(u64::MAX);
        let ms = g.ms_mut(id).map_err(|_| {
            Error::corrupt(
                "intent log",
                format!("block {offset:#x} on vdev {vdev} lies beyond the metaslabs"),
            )
        })?;
        ms.claim_range(offset, asize)
    }

    /// Whether `[offset, offset + asize)` of `vdev` is wholly allocated.
    pub fn is_allocated(&self, vdev: u64, offset: u64, asize: u64) -> bool {
        let Ok(gi) = self.group_index(vdev) else {
            return false;
        };
        let g = &self.groups[gi];
        let id = offset.checked_shr(g.ms_shift).unwrap_or(u64::MAX);
        g.metaslabs
            .get(id as usize)
            .is_some_and(|m| m.allocated.contains(offset, asize))
    }

    /// [`Allocator::free`] of an [`Extent`].
    pub fn free_extent(&mut self, e: &Extent, txg: u64) -> Result<()> {
        self.free(e.vdev, e.offset, e.asize, txg)
    }

    /// The space-map entries each changed metaslab must append for sync pass
    /// `pass` of `txg` (metaslab-relative offsets); the changes are then
    /// considered written.
    pub fn sync_entries(&mut self, txg: u64, pass: u64) -> Result<Vec<SyncBatch>> {
        if matches!(self.open_txg, Some(t) if t != txg)
            || (self.open_txg.is_none() && txg <= self.synced_txg)
        {
            return Err(Error::Invalid(format!(
                "sync_entries({txg}) but the open txg is {:?} (last synced {})",
                self.open_txg, self.synced_txg
            )));
        }
        if pass == 0 || pass > spacemap::SM_DEBUG_PASS_MAX {
            return Err(Error::Invalid(format!("sync pass {pass} out of range")));
        }
        let mut out = Vec::new();
        for g in &mut self.groups {
            for ms in &mut g.metaslabs {
                if ms.is_dirty() {
                    out.push((g.vdev, ms.id, ms.take_entries(txg, pass)));
                }
            }
        }
        Ok(out)
    }

    /// Whether any metaslab has changes not yet returned by `sync_entries`.
    pub fn is_dirty(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.metaslabs.iter().any(Metaslab::is_dirty))
    }

    /// `txg` is completely synced: its frees start their deferral and frees
    /// of txgs `<= txg - 2` become allocatable (so space freed in `T` is
    /// reusable from txg `T + 3`).
    pub fn sync_done(&mut self, txg: u64) -> Result<()> {
        self.sync_done_keeping(txg, None)
    }

    /// [`sync_done`](Self::sync_done), but frees of txgs after `keep_after`
    /// stay deferred: readers still follow blocks of the tree synced in
    /// `keep_after` (see `Pool::io_hold`), so that space must not be reused.
    pub fn sync_done_keeping(&mut self, txg: u64, keep_after: Option<u64>) -> Result<()> {
        if matches!(self.open_txg, Some(t) if t != txg) || txg <= self.synced_txg {
            return Err(Error::Invalid(format!(
                "sync_done({txg}) but the open txg is {:?} (last synced {})",
                self.open_txg, self.synced_txg
            )));
        }
        if self.is_dirty() {
            return Err(Error::Invalid(format!(
                "sync_done({txg}) with changes not returned by sync_entries"
            )));
        }
        for g in &mut self.groups {
            for ms in &mut g.metaslabs {
                ms.sync_done(txg, keep_after)?;
            }
        }
        self.synced_txg = txg;
        self.open_txg = None;
        Ok(())
    }

    /// Condense metaslab `ms_id` of `vdev` during pass `pass` of `txg`: the
    /// entries that replace its whole space map (see [`Metaslab::condense`]).
    pub fn condense(&mut self, vdev: u64, ms_id: u64, txg: u64, pass: u64) -> Result<Vec<SmEntry>> {
        let gi = self.group_index(vdev)?;
        self.enter_txg(txg)?;
        Ok(self.groups[gi].ms_mut(ms_id)?.condense(txg, pass))
    }

    /// Allocated bytes in the pool.
    pub fn space_used(&self) -> u64 {
        self.groups.iter().map(MetaslabGroup::alloc_bytes).sum()
    }

    /// Bytes allocatable now (on the vdevs new blocks may go to).
    pub fn free_space(&self) -> u64 {
        self.allocatable().map(MetaslabGroup::free_bytes).sum()
    }

    /// Bytes freed but not yet reusable (on the vdevs new blocks may go to).
    pub fn deferred_space(&self) -> u64 {
        self.allocatable().map(MetaslabGroup::deferred_bytes).sum()
    }

    /// Bytes covered by the metaslabs of the vdevs new blocks may go to.
    pub fn total_space(&self) -> u64 {
        self.allocatable().map(MetaslabGroup::total_bytes).sum()
    }

    /// The groups new blocks may go to (`MetaslabGroup::allocatable`).
    fn allocatable(&self) -> impl Iterator<Item = &MetaslabGroup> {
        self.groups.iter().filter(|g| g.allocatable)
    }

    /// Check every group; totals add up.
    pub fn verify(&self) -> Result<()> {
        for g in &self.groups {
            g.verify()?;
        }
        let sum: u64 = self
            .groups
            .iter()
            .map(|g| g.alloc_bytes() + g.free_bytes() + g.deferred_bytes())
            .sum();
        let total: u64 = self.groups.iter().map(MetaslabGroup::total_bytes).sum();
        if sum != total {
            return Err(Error::Invalid(format!(
                "used + free + deferred = {sum} != total {total}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spacemap::{decode, encode, net_alloc};
    use std::collections::HashMap;

    const K: u64 = 1024;
    const M: u64 = 1024 * 1024;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn sync(a: &mut Allocator, txg: u64) -> Vec<SyncBatch> {
        let b = a.sync_entries(txg, 1).unwrap();
        a.sync_done(txg).unwrap();
        b
    }

    #[test]
    fn metaslab_shift_rule() {
        // Real zfs-fuse pool: asize 204996608 (a 200 MiB file) -> metaslab_shift 20.
        assert_eq!(leaf_asize(200 * M), 204_996_608);
        assert_eq!(metaslab_shift_for(204_996_608), 20);
        // 128 MiB file: asize = 128 MiB - 4.5 MiB = 129499136; /200 = 647495 -> highbit 20.
        assert_eq!(leaf_asize(128 * M), 129_499_136);
        assert_eq!(metaslab_shift_for(leaf_asize(128 * M)), 20);
        // Sizes are rounded down to whole labels first.
        assert_eq!(leaf_asize(128 * M + 256 * K - 1), 129_499_136);
        assert_eq!(metaslab_shift_for(leaf_asize(64 * M)), 19);
        assert_eq!(metaslab_shift_for(1 << 40), 33);
        assert_eq!(metaslab_shift_for(10 * M), 17);
        assert_eq!(metaslab_shift_for(0), 17);
        assert_eq!(leaf_asize(M), 0);
        assert_eq!(highbit(1), 1);
        assert_eq!(highbit(0x8000_0000_0000_0000), 64);
        let g = MetaslabGroup::new(0, 9, 204_996_608, 20, Geometry::Plain);
        assert_eq!(g.metaslabs.len(), 195);
    }

    #[test]
    fn asize_rounding() {
        let plain = MetaslabGroup::new(0, 12, 64 * M, 20, Geometry::Plain);
        assert_eq!(plain.psize_to_asize(512), 4096);
        assert_eq!(plain.psize_to_asize(4097), 8192);
        assert_eq!(plain.psize_to_asize(128 * K), 128 * K);
        let rz1 = MetaslabGroup::new(
            0,
            9,
            64 * M,
            20,
            Geometry::Raidz {
                children: 5,
                nparity: 1,
            },
        );
        // a = 1; a += 1 * ceil(1/4) = 2; roundup(2, 2) = 2 sectors.
        assert_eq!(rz1.psize_to_asize(512), 1024);
        // a = 256; a += ceil(256/4) = 320; roundup(320, 2) = 320.
        assert_eq!(rz1.psize_to_asize(128 * K), 320 * 512);
        // a = 3; a += ceil(3/4) = 4.
        assert_eq!(rz1.psize_to_asize(1536), 4 * 512);
        let rz2 = MetaslabGroup::new(
            0,
            12,
            64 * M,
            20,
            Geometry::Raidz {
                children: 6,
                nparity: 2,
            },
        );
        // a = 1; a += 2 * 1 = 3; roundup(3, 3) = 3.
        assert_eq!(rz2.psize_to_asize(4096), 3 * 4096);
        // a = 5; a += 2 * ceil(5/4) = 9; roundup(9, 3) = 9.
        assert_eq!(rz2.psize_to_asize(5 * 4096), 9 * 4096);
        assert_eq!(rz2.aliquot(), 6 * METASLAB_ALIQUOT);
    }

    /// dRAID (`draid2:3d:8c:1s`, ashift 12: stripes of 5 sectors, 20 KiB):
    /// metaslabs trimmed to whole stripes as `vdev_draid_metaslab_init`
    /// trims them, blocks in whole stripes, every allocation on a stripe
    /// boundary however the sizes mix, and frees of them accepted.
    #[test]
    fn draid_metaslabs_and_allocations_are_whole_stripes() {
        let layout = DraidLayout::new(3, 2, 1, 8, 7, 12).unwrap();
        let g = Geometry::Draid(Arc::new(layout));
        let stripe = 20 * K;
        assert_eq!(g.metaslab_range(12, 24, 0), (0, 16 * M / stripe * stripe));
        // 16 MiB rounded up to 20 KiB: 820 stripes; 818 whole ones fit
        // in what is left of the slot.
        assert_eq!(g.metaslab_range(12, 24, 1), (820 * stripe, 818 * stripe));
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 12, 64 * M, 24, g)]);
        assert_eq!(a.groups[0].psize_to_asize(512), stripe);
        // 128 KiB = 32 sectors: 11 stripes of 3 data sectors.
        assert_eq!(a.groups[0].psize_to_asize(128 * K), 11 * stripe);
        a.groups[0].verify().unwrap();
        let mut got = Vec::new();
        for i in 0..600u64 {
            let psize = [512, 4 * K, 128 * K, 13 * K][(i % 4) as usize];
            let e = a.alloc(psize, 4, &[]).unwrap();
            assert_eq!(e.offset % stripe, 0, "allocation {i} at {:#x}", e.offset);
            assert_eq!(e.asize % stripe, 0);
            let (start, size) = g_range(&a, e.offset);
            assert!(e.offset >= start && e.offset + e.asize <= start + size);
            got.push(e);
        }
        for e in got.iter().step_by(3) {
            a.free_extent(e, 4).unwrap();
        }
        a.groups[0].verify().unwrap();
    }

    #[test]
    fn log_blocks_go_to_log_devices() {
        let mut groups = vec![
            MetaslabGroup::new(0, 9, 64 * M, 24, Geometry::Plain),
            MetaslabGroup::new(1, 9, 16 * M, 20, Geometry::Plain),
            MetaslabGroup::new(2, 9, 16 * M, 20, Geometry::Plain),
        ];
        groups[1].mark_log();
        groups[2].mark_log();
        let mut a = Allocator::new(groups);
        // Normal blocks never go to a log device.
        for _ in 0..64 {
            assert_eq!(a.alloc(128 * K, 4, &[]).unwrap().vdev, 0);
        }
        // Log blocks take the log devices in turn.
        let v: Vec<u64> = (0..4)
            .map(|_| a.alloc_log(4 * K, 4).unwrap().vdev)
            .collect();
        assert_eq!(v, [1, 2, 1, 2]);
        // Totals count the normal class only.
        assert_eq!(a.total_space(), 64 * M);
        // Full log devices: the normal class takes the log blocks.
        let mut on_logs = 0u64;
        while a.alloc_log(128 * K, 4).unwrap().vdev != 0 {
            on_logs += 1;
            assert!(on_logs <= 256, "more log blocks than the log devices hold");
        }
        assert!(a.groups[1].free_bytes() + a.groups[2].free_bytes() < 2 * 16 * 128 * K);
        a.verify().unwrap();
        // Without log devices alloc_log takes the normal class.
        let mut b = Allocator::new(vec![MetaslabGroup::new(0, 9, 8 * M, 20, Geometry::Plain)]);
        assert_eq!(b.alloc_log(512, 4).unwrap().vdev, 0);
    }

    #[test]
    fn embedded_log_metaslab_lowest_first_and_warm_ranges() {
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 12, 64 * M, 24, Geometry::Plain)]);
        // Some normal blocks first: the log picks another metaslab.
        let n0 = a.alloc(128 * K, 4, &[]).unwrap();
        let l0 = a.alloc_log(8 * K, 4).unwrap();
        let lms = l0.offset >> 24;
        assert_ne!(lms, n0.offset >> 24, "the log shares the active metaslab");
        assert_eq!(
            l0.offset,
            lms << 24,
            "not the lowest offset of its metaslab"
        );
        // Warm ranges: the block, then free space up to the chunk past it.
        let w = a.log_warm_ranges(&l0);
        assert_eq!(w[0], (l0.offset, 8 * K));
        assert_eq!(w[1], (l0.offset + 8 * K, LOG_WARM_CHUNK));
        // The next block lies inside the warmed range: nothing more to do.
        let l1 = a.alloc_log(8 * K, 4).unwrap();
        assert_eq!(l1.offset, l0.offset + 8 * K);
        assert!(a.log_warm_ranges(&l1).is_empty());
        // Normal blocks stay out of the log metaslab while others have room.
        for _ in 0..100 {
            assert_ne!(a.alloc(128 * K, 4, &[]).unwrap().offset >> 24, lms);
        }
        // A freed log block is reused first once its deferral ran out.
        a.free_deferred(0, l0.offset, l0.asize, 4).unwrap();
        for t in 4..8 {
            sync(&mut a, t);
        }
        let l2 = a.alloc_log(8 * K, 8).unwrap();
        assert_eq!(l2.offset, l0.offset);
        a.verify().unwrap();
    }

    fn g_range(a: &Allocator, offset: u64) -> (u64, u64) {
        let g = &a.groups[0];
        g.geometry
            .metaslab_range(g.ashift, g.ms_shift, offset >> g.ms_shift)
    }

    #[test]
    fn sequential_allocations_are_contiguous() {
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 9, 64 * M, 24, Geometry::Plain)]);
        for i in 0..300u64 {
            let e = a.alloc(128 * K, 4, &[]).unwrap();
            assert_eq!(
                e,
                Extent {
                    vdev: 0,
                    offset: i * 128 * K,
                    asize: 128 * K
                }
            );
        }
        // Mixed sizes continue back to back too.
        let e1 = a.alloc(512, 4, &[]).unwrap();
        let e2 = a.alloc(128 * K, 4, &[]).unwrap();
        assert_eq!(e1.offset, 300 * 128 * K);
        assert_eq!(e2.offset, e1.offset + 512);
        a.verify().unwrap();

        // Two vdevs: one aliquot (512 KiB) per vdev, then the rotor moves on.
        let mut a = Allocator::new(vec![
            MetaslabGroup::new(0, 9, 64 * M, 24, Geometry::Plain),
            MetaslabGroup::new(1, 9, 64 * M, 24, Geometry::Plain),
        ]);
        let got: Vec<(u64, u64)> = (0..16)
            .map(|_| {
                let e = a.alloc(128 * K, 4, &[]).unwrap();
                (e.vdev, e.offset / (128 * K))
            })
            .collect();
        let want: Vec<(u64, u64)> = (0..16u64)
            .map(|i| ((i / 4) % 2, (i / 8) * 4 + i % 4))
            .collect();
        assert_eq!(got, want);
        // A metaslab boundary is never crossed: 16 MiB metaslabs hold 128 x 128 KiB.
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 9, 40 * M, 24, Geometry::Plain)]);
        for _ in 0..200 {
            let e = a.alloc(96 * K, 4, &[]).unwrap();
            assert_eq!(e.offset >> 24, (e.offset + e.asize - 1) >> 24);
        }
    }

    #[test]
    fn ditto_copies_avoid_vdevs() {
        let mut a = Allocator::new(vec![
            MetaslabGroup::new(0, 9, 16 * M, 20, Geometry::Plain),
            MetaslabGroup::new(1, 12, 16 * M, 20, Geometry::Plain),
        ]);
        let d0 = a.alloc(4096, 4, &[]).unwrap();
        let d1 = a.alloc(4096, 4, &[d0.vdev]).unwrap();
        assert_ne!(d0.vdev, d1.vdev);
        let d2 = a.alloc(4096, 4, &[d0.vdev, d1.vdev]).unwrap();
        assert!(d2 != d0 && d2 != d1);
        // The rotor was not disturbed by the ditto allocations.
        let n = a.alloc(4096, 4, &[]).unwrap();
        assert_eq!(n.vdev, d0.vdev);
        // Single vdev: falls back to the same vdev at another offset.
        let mut a = Allocator::new(vec![MetaslabGroup::new(7, 9, 16 * M, 20, Geometry::Plain)]);
        let e0 = a.alloc(4096, 4, &[]).unwrap();
        let e1 = a.alloc(4096, 4, &[7]).unwrap();
        assert_eq!(e1.vdev, 7);
        assert_ne!(e0.offset, e1.offset);
    }

    #[test]
    fn enospc_and_deferred_reuse() {
        // 1 MiB + a tail: 8 metaslabs of 128 KiB; the tail is never used.
        let mut a = Allocator::new(vec![MetaslabGroup::new(
            0,
            9,
            M + 100 * K,
            17,
            Geometry::Plain,
        )]);
        let mut ext = Vec::new();
        for _ in 0..8 {
            ext.push(a.alloc(128 * K, 5, &[]).unwrap());
        }
        let err = a.alloc(512, 5, &[]).unwrap_err();
        assert!(is_enospc(&err), "{err}");
        assert!(matches!(err, Error::NoSpace(_)), "{err:?}");
        assert_eq!(err.errno(), ENOSPC);
        assert!(
            err.to_string()
                .ends_with(&std::io::Error::from_raw_os_error(ENOSPC).to_string()),
            "{err}"
        );
        assert!(ext.iter().all(|e| e.offset + e.asize <= M));
        assert_eq!(a.space_used(), M);
        assert_eq!(a.free_space(), 0);
        sync(&mut a, 5);
        for e in &ext {
            a.free_extent(e, 6).unwrap();
        }
        assert!(a.free_extent(&ext[0], 6).is_err(), "double free");
        assert_eq!(a.space_used(), 0);
        assert!(is_enospc(&a.alloc(512, 6, &[]).unwrap_err()));
        let b = sync(&mut a, 6);
        assert_eq!(b.len(), 8);
        assert!(is_enospc(&a.alloc(512, 7, &[]).unwrap_err()));
        sync(&mut a, 7);
        assert!(is_enospc(&a.alloc(512, 8, &[]).unwrap_err()));
        assert_eq!(a.deferred_space(), M);
        sync(&mut a, 8);
        // Freed in 6 -> reusable in 9 = 6 + 3.
        assert_eq!(a.free_space(), M);
        for _ in 0..8 {
            a.alloc(128 * K, 9, &[]).unwrap();
        }
        assert!(is_enospc(&a.alloc(512, 9, &[]).unwrap_err()));
        a.verify().unwrap();
    }

    #[test]
    fn same_txg_free_cancels_until_emitted() {
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 9, 8 * M, 20, Geometry::Plain)]);
        let e = a.alloc(8 * K, 10, &[]).unwrap();
        a.free_extent(&e, 10).unwrap();
        assert_eq!(a.space_used(), 0);
        assert_eq!(a.deferred_space(), 0);
        assert!(!a.is_dirty());
        // Immediately reusable.
        let e2 = a.alloc(8 * K, 10, &[]).unwrap();
        assert_eq!(e2.offset, e.offset + 8 * K); // cursor moved on, but...
        let e3 = a.alloc(8 * M - 16 * K, 10, &[]);
        assert!(e3.is_err()); // larger than a metaslab
        let b = a.sync_entries(10, 1).unwrap();
        assert_eq!(
            b,
            vec![(
                0,
                0,
                vec![
                    SmEntry::Debug {
                        action: SM_ALLOC,
                        pass: 1,
                        txg: 10
                    },
                    SmEntry::Alloc {
                        offset: 8 * K,
                        len: 8 * K
                    },
                ]
            )]
        );
        // Freed in pass 2 after its ALLOC was emitted: a real, deferred free.
        a.free_extent(&e2, 10).unwrap();
        let b = a.sync_entries(10, 2).unwrap();
        assert_eq!(
            b,
            vec![(
                0,
                0,
                vec![
                    SmEntry::Debug {
                        action: SM_FREE,
                        pass: 2,
                        txg: 10
                    },
                    SmEntry::Free {
                        offset: 8 * K,
                        len: 8 * K
                    },
                ]
            )]
        );
        a.sync_done(10).unwrap();
        assert_eq!(a.deferred_space(), 8 * K);
        // The cancelled range [0, 8K) is free again; the deferred [8K, 16K) is not.
        let ms0 = &a.groups[0].metaslabs[0];
        assert!(ms0.free_set().contains(0, 8 * K));
        assert!(!ms0.free_set().overlaps(8 * K, 8 * K));
        // Fill the metaslab: the wrapped first-fit uses [0, 8K) and never [8K, 16K).
        let mut offs = Vec::new();
        while let Ok(e) = a.alloc(8 * K, 11, &[]) {
            offs.push(e.offset);
        }
        assert!(offs.contains(&0));
        assert!(!offs.contains(&(8 * K)));
        assert_eq!(offs.len() as u64, 8 * M / (8 * K) - 1);
        a.verify().unwrap();
    }

    #[test]
    fn misuse_is_reported() {
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 9, 8 * M, 20, Geometry::Plain)]);
        assert!(a.free(0, 0, 512, 5).is_err(), "free of unallocated");
        let e = a.alloc(4 * K, 5, &[]).unwrap();
        assert!(a.alloc(4 * K, 6, &[]).is_err(), "txg 5 still open");
        assert!(a.free(1, e.offset, e.asize, 5).is_err(), "no vdev 1");
        assert!(
            a.free(0, e.offset, e.asize + 512, 5).is_err(),
            "partly unallocated"
        );
        assert!(a.free(0, 8 * M, 512, 5).is_err(), "beyond metaslabs");
        assert!(a.alloc(0, 5, &[]).is_err());
        assert!(a.sync_done(5).is_err(), "unsynced changes");
        assert!(a.sync_entries(6, 1).is_err());
        assert!(a.sync_entries(5, 0).is_err());
        sync(&mut a, 5);
        assert!(a.alloc(4 * K, 5, &[]).is_err(), "txg 5 already synced");
        assert!(a.sync_done(5).is_err());
        // A free straddling two metaslabs.
        let mut a = Allocator::new(vec![MetaslabGroup::new(0, 9, 8 * M, 20, Geometry::Plain)]);
        let mut last = None;
        for _ in 0..9 {
            last = Some(a.alloc(128 * K, 5, &[]).unwrap());
        }
        let l = last.unwrap();
        assert_eq!(l.offset, M);
        assert!(a.free(0, M - 512, 1024, 5).is_err());
        a.verify().unwrap();
    }

    #[test]
    fn load_and_condense() {
        let sh = 9;
        let mut g = MetaslabGroup::new(3, sh, 4 * M, 20, Geometry::Plain);
        let entries = vec![
            SmEntry::Debug {
                action: SM_ALLOC,
                pass: 1,
                txg: 4,
            },
            SmEntry::Alloc {
                offset: 0,
                len: 64 * K,
            },
            SmEntry::Debug {
                action: SM_FREE,
                pass: 1,
                txg: 9,
            },
            SmEntry::Free {
                offset: 0,
                len: 8 * K,
            },
            SmEntry::Debug {
                action: SM_FREE,
                pass: 1,
                txg: 10,
            },
            SmEntry::Free {
                offset: 16 * K,
                len: 8 * K,
            },
        ];
        g.load_metaslab(1, 77, &entries).unwrap();
        g.load_metaslab_deferring(2, 78, &entries, 10).unwrap();
        assert!(g.load_metaslab(4, 1, &entries).is_err());
        let bad = [SmEntry::Alloc {
            offset: M - 512,
            len: 1024,
        }];
        assert!(g.load_metaslab(0, 1, &bad).is_err());
        let dbl = [SmEntry::Free {
            offset: 0,
            len: 512,
        }];
        assert!(g.load_metaslab(0, 1, &dbl).is_err());
        let m1 = &g.metaslabs[1];
        assert_eq!(m1.sm_object, 77);
        assert_eq!(m1.alloc_bytes(), 48 * K);
        assert_eq!(m1.free_bytes(), M - 48 * K);
        let m2 = &g.metaslabs[2];
        // Txg 9's free expired at sync_done(11)? No: synced 10, so 9 and 10 are still held.
        assert_eq!(m2.deferred_bytes(), 16 * K);
        assert_eq!(m2.free_bytes(), M - 64 * K);
        let mut a = Allocator::new(vec![g]);
        a.set_synced_txg(10);
        a.verify().unwrap();
        a.sync_done(11).unwrap();
        // Released txg 9's free, not txg 10's.
        assert_eq!(a.groups[0].metaslabs[2].deferred_bytes(), 8 * K);
        a.sync_done(12).unwrap();
        assert_eq!(a.groups[0].metaslabs[2].deferred_bytes(), 0);

        // Condense: churn, then the condensed map replays to the same set.
        let mut rng = Rng(12345);
        let mut live: Vec<Extent> = Vec::new();
        let mut log: Vec<SmEntry> = entries.clone();
        for txg in 13..40 {
            for _ in 0..20 {
                if rng.below(3) > 0 || live.is_empty() {
                    if let Ok(e) = a.alloc(512 * (1 + rng.below(16)), txg, &[]) {
                        live.push(e);
                    }
                } else {
                    let e = live.swap_remove(rng.below(live.len() as u64) as usize);
                    a.free_extent(&e, txg).unwrap();
                }
            }
            for (_, ms, ents) in a.sync_entries(txg, 1).unwrap() {
                if ms == 1 {
                    log.extend(ents);
                }
            }
            a.sync_done(txg).unwrap();
        }
        let ms1 = &a.groups[0].metaslabs[1];
        let long = encode(&log, sh).unwrap();
        let replayed = spacemap::replay(&decode(&long, false, sh).unwrap()).unwrap();
        let shifted: Vec<(u64, u64)> = ms1.allocated.iter().map(|(s, l)| (s - M, l)).collect();
        assert_eq!(replayed.iter().collect::<Vec<_>>(), shifted);
        let c = a.condense(3, 1, 40, 1).unwrap();
        let short = encode(&c, sh).unwrap();
        assert_eq!(
            short.len() as u64,
            8 * a.groups[0].metaslabs[1].condensed_words(sh)
        );
        assert!(short.len() < long.len());
        assert!(a.groups[0].metaslabs[1].condense_worthwhile(long.len() as u64, sh, 0));
        let r2 = spacemap::replay(&decode(&short, false, sh).unwrap()).unwrap();
        assert_eq!(r2, replayed);
        assert_eq!(net_alloc(&c) as u64, a.groups[0].metaslabs[1].alloc_bytes());
        a.sync_done(40).unwrap();
        a.verify().unwrap();
    }

    /// Model-based check of the whole life cycle over three vdevs (one RAID-Z).
    #[test]
    fn model_random_cycles() {
        for seed in [1u64, 0xdead_beef, 0x1234_5678_9abc] {
            model_run(seed, 300);
        }
    }

    fn model_run(seed: u64, txgs: u64) {
        let mut rng = Rng(seed);
        let mut a = Allocator::new(vec![
            MetaslabGroup::new(0, 9, 8 * M + 12345, 20, Geometry::Plain),
            MetaslabGroup::new(1, 12, 6 * M, 20, Geometry::Plain),
            MetaslabGroup::new(
                2,
                9,
                12 * M + 4096,
                20,
                Geometry::Raidz {
                    children: 5,
                    nparity: 2,
                },
            ),
        ]);
        let shifts: HashMap<u64, (u32, u32)> = a
            .groups
            .iter()
            .map(|g| (g.vdev, (g.ashift, g.ms_shift)))
            .collect();
        // On-disk model: space map bytes and smp_alloc per (vdev, ms).
        let mut maps: HashMap<(u64, u64), (Vec<u8>, i64)> = HashMap::new();
        // Live blocks: extent, birth txg, ALLOC emitted?
        let mut live: Vec<(Extent, u64, bool)> = Vec::new();
        // Non-cancelled frees: (extent, txg freed).
        let mut held: Vec<(Extent, u64)> = Vec::new();
        let mut enospc_seen = 0;
        let mut cancels = 0;
        let first = 4;
        for txg in first..first + txgs {
            held.retain(|&(_, t)| txg < t + 3);
            let passes = 1 + rng.below(3);
            for pass in 1..=passes {
                let ops = rng.below(40);
                for _ in 0..ops {
                    let r = rng.below(100);
                    if r < 55 || live.is_empty() {
                        let psize = match rng.below(4) {
                            0 => 512,
                            1 => 4096,
                            2 => 128 * K,
                            _ => 512 * (1 + rng.below(256)),
                        };
                        let avoid: Vec<u64> = match rng.below(4) {
                            0 => vec![rng.below(3)],
                            1 => vec![rng.below(3), rng.below(3)],
                            _ => vec![],
                        };
                        match a.alloc(psize, txg, &avoid) {
                            Ok(e) => {
                                let g = a.group(e.vdev).unwrap();
                                assert_eq!(e.asize, g.psize_to_asize(psize));
                                assert_eq!(e.offset % (1 << g.ashift), 0);
                                assert_eq!(
                                    e.offset >> g.ms_shift,
                                    (e.offset + e.asize - 1) >> g.ms_shift
                                );
                                assert!(
                                    e.offset + e.asize <= (g.metaslabs.len() as u64) << g.ms_shift
                                );
                                for (l, _, _) in &live {
                                    assert!(
                                        l.vdev != e.vdev
                                            || l.offset + l.asize <= e.offset
                                            || e.offset + e.asize <= l.offset,
                                        "double allocation {e:?} vs {l:?}"
                                    );
                                }
                                for (h, t) in &held {
                                    assert!(
                                        h.vdev != e.vdev
                                            || h.offset + h.asize <= e.offset
                                            || e.offset + e.asize <= h.offset,
                                        "{e:?} in txg {txg} reuses {h:?} freed in txg {t}"
                                    );
                                }
                                live.push((e, txg, false));
                            }
                            Err(err) => {
                                assert!(is_enospc(&err), "{err}");
                                enospc_seen += 1;
                            }
                        }
                    } else {
                        let i = rng.below(live.len() as u64) as usize;
                        let (e, birth, emitted) = live.swap_remove(i);
                        a.free_extent(&e, txg).unwrap();
                        if birth == txg && !emitted {
                            cancels += 1;
                        } else {
                            held.push((e, txg));
                        }
                        if rng.below(20) == 0 {
                            assert!(a.free_extent(&e, txg).is_err(), "double free accepted");
                        }
                    }
                }
                for (vdev, ms, ents) in a.sync_entries(txg, pass).unwrap() {
                    let (sh, _) = shifts[&vdev];
                    let m = maps.entry((vdev, ms)).or_default();
                    m.0.extend(encode(&ents, sh).unwrap());
                    m.1 += net_alloc(&ents);
                }
                for l in live.iter_mut() {
                    if l.1 == txg {
                        l.2 = true;
                    }
                }
                if rng.below(3) == 0 {
                    let gi = rng.below(3) as usize;
                    let vdev = a.groups[gi].vdev;
                    let ms = rng.below(a.groups[gi].metaslabs.len() as u64);
                    let c = a.condense(vdev, ms, txg, pass).unwrap();
                    let (sh, _) = shifts[&vdev];
                    maps.insert((vdev, ms), (encode(&c, sh).unwrap(), net_alloc(&c)));
                }
            }
            a.sync_done(txg).unwrap();
            assert_eq!(a.space_used(), live.iter().map(|l| l.0.asize).sum::<u64>());
            if txg % 10 == 0 || txg == first + txgs - 1 {
                a.verify().unwrap();
                check_maps(&a, &maps, &shifts);
            }
        }
        eprintln!(
            "seed {seed:#x}: {} live, {enospc_seen} ENOSPC, {cancels} cancels, used {} of {}",
            live.len(),
            a.space_used(),
            a.total_space()
        );
        assert!(enospc_seen > 0, "the pool never filled up");
        assert!(cancels > 0);

        // Re-import from the space maps: same allocated sets, and nothing freed
        // in the last two txgs is allocatable.
        let last = first + txgs - 1;
        let mut b = Allocator::new(
            a.groups
                .iter()
                .map(|g| {
                    MetaslabGroup::new(g.vdev, g.ashift, g.asize, g.ms_shift, g.geometry.clone())
                })
                .collect(),
        );
        for ((vdev, ms), (bytes, _)) in &maps {
            let (sh, _) = shifts[vdev];
            let ents = decode(bytes, false, sh).unwrap();
            b.group_mut(*vdev)
                .unwrap()
                .load_metaslab_deferring(*ms, 100 + ms, &ents, last)
                .unwrap();
        }
        b.set_synced_txg(last);
        b.verify().unwrap();
        for (ga, gb) in a.groups.iter().zip(&b.groups) {
            for (ma, mb) in ga.metaslabs.iter().zip(&gb.metaslabs) {
                assert_eq!(ma.allocated, mb.allocated);
            }
        }
        assert_eq!(a.space_used(), b.space_used());
        for (h, t) in &held {
            if *t + 2 > last {
                let g = b.group(h.vdev).unwrap();
                let ms = &g.metaslabs[(h.offset >> g.ms_shift) as usize];
                assert!(
                    !ms.free_set().overlaps(h.offset, h.asize),
                    "{h:?} freed in {t}"
                );
            }
        }
    }

    fn check_maps(
        a: &Allocator,
        maps: &HashMap<(u64, u64), (Vec<u8>, i64)>,
        shifts: &HashMap<u64, (u32, u32)>,
    ) {
        let mut total = 0i64;
        for g in &a.groups {
            let mut group_alloc = 0i64;
            for ms in &g.metaslabs {
                let (sh, _) = shifts[&g.vdev];
                let expect: Vec<(u64, u64)> = ms
                    .allocated
                    .iter()
                    .map(|(s, l)| (s - ms.start, l))
                    .collect();
                match maps.get(&(g.vdev, ms.id)) {
                    Some((bytes, smp_alloc)) => {
                        let set = spacemap::replay(&decode(bytes, false, sh).unwrap()).unwrap();
                        assert_eq!(set.iter().collect::<Vec<_>>(), expect);
                        assert_eq!(*smp_alloc as u64, ms.alloc_bytes());
                        group_alloc += smp_alloc;
                    }
                    None => assert!(expect.is_empty()),
                }
            }
            assert_eq!(group_alloc as u64, g.alloc_bytes());
            total += group_alloc;
        }
        assert_eq!(total as u64, a.space_used());
    }
}
