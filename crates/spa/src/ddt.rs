//! Dedup tables (DDT): one block stored for many identical writes.
//!
//! # Theory
//!
//! A file system with `dedup` on writes its data blocks (level 0, not
//! metadata) under a strong checksum (sha256 by default; sha512, skein,
//! edonr, blake3). The checksum of the block as stored, with its logical
//! and physical sizes and compression, is the block's *key*; the pool keeps
//! one table per checksum function mapping keys to where the block lives
//! (its DVAs), when it was written (its physical birth) and how many block
//! pointers refer to it. A write whose key is in the table takes a
//! reference and points at the stored copy (`D` bit set, logical birth the
//! current txg, physical birth the entry's); a free drops one. Space is
//! given back only when a table flush finds an entry with no references.
//!
//! On disk (FORMAT facts from OpenZFS 2.3's `ddt.h`, `ddt_zap.c`, and
//! zfs-fuse's pool-v23 tables):
//!
//! * Entries live in fat ZAPs (`DMU_OT_DDT_ZAP`, flags HASH64 | UINT64_KEY |
//!   PRE_HASHED_KEY, 32 KiB blocks) keyed by the 5-word key (stored
//!   big-endian; the ZAP hash is key word 0), one object per *class*:
//!   `unique` (one reference), `duplicate` (more), `ditto` (obsolete).
//! * A value is a header byte (compression function, `0x80` for a
//!   little-endian writer) and the entry's physical records, ZLE-compressed
//!   when that makes them smaller. A *traditional* entry (the legacy
//!   format, and zfs-fuse's) has four records, one per number of copies
//!   (slot 0, ditto, unused); a *flat* one (OpenZFS's fast dedup, `FDT`)
//!   has one record with a creation time.
//! * Legacy tables are named `DDT-<checksum>-zap-<class>` in the MOS
//!   object directory; fast-dedup tables in a per-checksum directory ZAP
//!   `DDT-<checksum>` (with `version` 1 and `flags`) that also names two
//!   journal objects. `DDT-statistics` in the MOS directory maps each
//!   table object's name to its histogram: 64 buckets (by ⌊log2 refcount⌋)
//!   of 8 sums (blocks, lsize, psize, dsize, and the same per reference).
//!
//! This module is the pure part: keys, records and their encoding, the
//! histograms, and the in-memory table of a writer ([`Ddt`]), which holds
//! only the entries a txg touched — everything else is looked up on disk
//! through a [`DdtBackend`] (the committed MOS, through the block cache),
//! so a table much larger than memory costs only what a txg touches:
//! lookups read the leaves they need through the block cache, and the
//! flush edits only the leaves the touched keys fall in
//! (docs/BENCHMARKS.md measures it).
//! `ozfs_dsl::ddt` loads the table state at open and writes the touched
//! entries, their classes and histograms into the MOS every txg.
//!
//! # Invariants
//! * An entry's reference count is the number of block pointers with the
//!   `D` bit naming its key and DVAs; a record whose count reaches zero is
//!   freed (its DVAs) at the next flush, never before — a write of the
//!   same block in the same txg takes it back. A record is never
//!   rewritten while it holds a block (a write asking for more copies
//!   than it has is written apart).
//! * Every value read from disk is decoded with its length checked; a
//!   record that does not decode is an error naming the table, never a
//!   guess.
//! * A histogram in memory is what `DDT-statistics` says for the object
//!   plus the changes of entries flushed since, so the pool's dedup ratio
//!   is known without walking the table.

use ozfs_codec::compress;
use ozfs_format::blkptr::Dva;
use ozfs_format::types::{cksum as ck, comp};
use ozfs_format::{BlkPtr, Cksum, Error, Result};
use std::collections::BTreeMap;

/// Words of a key (`DDT_KEY_WORDS`).
pub const DDT_KEY_WORDS: usize = 5;
/// Bytes of a traditional entry's records (4 × 64).
pub const TRAD_PHYS_SIZE: usize = 256;
/// Bytes of a flat entry's record.
pub const FLAT_PHYS_SIZE: usize = 72;
/// The value header's byte-order bit (set by little-endian writers).
pub const DDT_COMPRESS_BYTEORDER_MASK: u8 = 0x80;
/// Histogram buckets.
pub const DDT_BUCKETS: usize = 64;
/// Classes, by number: ditto (obsolete), duplicate, unique.
pub const CLASS_NAMES: [&str; 3] = ["ditto", "duplicate", "unique"];
pub const CLASS_DUPLICATE: usize = 1;
pub const CLASS_UNIQUE: usize = 2;
/// The checksum functions a table may exist for.
pub const DEDUP_CHECKSUMS: [u8; 5] = [ck::SHA256, ck::SHA512, ck::SKEIN, ck::EDONR, ck::BLAKE3];
/// `DDT_FLAG_FLAT | DDT_FLAG_LOG`.
pub const DDT_FLAG_FLAT: u64 = 1;
pub const DDT_FLAG_LOG: u64 = 2;
/// OpenZFS's fast-dedup feature.
pub const FAST_DEDUP: &str = "com.klarasystems:fast_dedup";

/// The name OpenZFS gives a checksum function in table names.
pub fn checksum_name(c: u8) -> &'static str {
    match c {
        ck::SHA256 => "sha256",
        ck::SHA512 => "sha512",
        ck::SKEIN => "skein",
        ck::EDONR => "edonr",
        ck::BLAKE3 => "blake3",
        _ => "unknown",
    }
}

/// The MOS (or FDT directory) name of a table object: `DDT-sha256-zap-unique`.
pub fn object_name(checksum: u8, class: usize) -> String {
    format!(
        "DDT-{}-zap-{}",
        checksum_name(checksum),
        CLASS_NAMES.get(class).copied().unwrap_or("unknown")
    )
}

/// A block's key: its checksum and the size/compression word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DdtKey(pub [u64; DDT_KEY_WORDS]);

impl DdtKey {
    /// The key of a block stored as `psize` bytes (`lsize` logical) with
    /// compression `compress` and checksum `cksum`.
    pub fn new(cksum: &Cksum, lsize: u64, psize: u64, compress: u8, crypt: bool) -> DdtKey {
        let prop = ((lsize >> 9).saturating_sub(1) & 0xffff)
            | (((psize >> 9).saturating_sub(1) & 0xffff) << 16)
            | (u64::from(compress & 0x7f) << 32)
            | (u64::from(crypt) << 39);
        DdtKey([cksum.0[0], cksum.0[1], cksum.0[2], cksum.0[3], prop])
    }

    /// The key a deduplicated block pointer names.
    pub fn of_bp(bp: &BlkPtr) -> DdtKey {
        DdtKey::new(
            &bp.cksum(),
            bp.lsize(),
            bp.psize(),
            bp.compression(),
            bp.uses_crypt(),
        )
    }

    /// Logical size in bytes.
    pub fn lsize(&self) -> u64 {
        ((self.0[4] & 0xffff) + 1) << 9
    }

    /// Physical size in bytes.
    pub fn psize(&self) -> u64 {
        (((self.0[4] >> 16) & 0xffff) + 1) << 9
    }

    pub fn compress(&self) -> u8 {
        ((self.0[4] >> 32) & 0x7f) as u8
    }

    pub fn crypt(&self) -> bool {
        self.0[4] >> 39 & 1 != 0
    }

    /// The key as a ZAP name (big-endian words, as the leaf stores them).
    pub fn zap_name(&self) -> [u8; 40] {
        let mut n = [0u8; 40];
        for (i, w) in self.0.iter().enumerate() {
            n[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
        }
        n
    }

    /// A key read back from a ZAP name.
    pub fn from_zap_name(name: &[u8]) -> Result<DdtKey> {
        if name.len() != 40 {
            return Err(Error::corrupt(
                "dedup table",
                format!("key of {} bytes (want 40)", name.len()),
            ));
        }
        let mut k = [0u64; DDT_KEY_WORDS];
        for (i, w) in k.iter_mut().enumerate() {
            *w = u64::from_be_bytes(name[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        }
        Ok(DdtKey(k))
    }
}

/// One physical record of an entry: up to three DVAs, the references and
/// the txg the block was written (0: the record is empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DdtPhys {
    pub dva: [u64; 6],
    pub refcnt: u64,
    pub birth: u64,
    /// Flat records only: when the entry was made (seconds since 1970).
    pub class_start: u64,
}

impl DdtPhys {
    pub fn dvas(&self) -> Vec<Dva> {
        (0..3)
            .map(|i| Dva::from_words(self.dva[2 * i], self.dva[2 * i + 1]))
            .filter(|d| !d.is_empty())
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.birth == 0
    }
}

/// A table entry: four traditional records (slot = copies; slot 0 ditto)
/// or one flat record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdtEntry {
    pub flat: bool,
    pub phys: Vec<DdtPhys>,
}

impl DdtEntry {
    pub fn empty(flat: bool) -> DdtEntry {
        DdtEntry {
            flat,
            phys: vec![DdtPhys::default(); if flat { 1 } else { 4 }],
        }
    }

    /// The record blocks written with `copies` copies use.
    pub fn slot(&self, copies: usize) -> usize {
        if self.flat {
            0
        } else {
            copies.clamp(1, 3)
        }
    }

    /// References over the records that hold a block (ditto excluded).
    pub fn refcnt(&self) -> u64 {
        self.phys
            .iter()
            .enumerate()
            .filter(|(i, p)| (self.flat || *i != 0) && !p.is_empty())
            .map(|(_, p)| p.refcnt)
            .fold(0u64, u64::saturating_add)
    }

    /// The class the entry belongs in.
    pub fn class(&self) -> usize {
        if self.refcnt() > 1 {
            CLASS_DUPLICATE
        } else {
            CLASS_UNIQUE
        }
    }

    fn raw(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(if self.flat {
            FLAT_PHYS_SIZE
        } else {
            TRAD_PHYS_SIZE
        });
        for p in &self.phys {
            for w in p.dva {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&p.refcnt.to_le_bytes());
            out.extend_from_slice(&p.birth.to_le_bytes());
            if self.flat {
                out.extend_from_slice(&p.class_start.to_le_bytes());
            }
        }
        out
    }

    /// The ZAP value, as OpenZFS's `ddt_zap_compress` makes it: ZLE when
    /// it fits in fewer bytes than the records, else the records as they
    /// are (function `off`); the header's top bit says little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let raw = self.raw();
        let mut out = vec![0u8; raw.len() + 1];
        match compress::zle_compress(&raw, &mut out[1..]) {
            Some(n) if n < raw.len() => {
                out[0] = comp::ZLE | DDT_COMPRESS_BYTEORDER_MASK;
                out.truncate(n + 1);
            }
            _ => {
                out[0] = comp::OFF | DDT_COMPRESS_BYTEORDER_MASK;
                out[1..].copy_from_slice(&raw);
            }
        }
        out
    }

    /// Decode a ZAP value of a traditional or flat table.
    pub fn decode(value: &[u8], flat: bool) -> Result<DdtEntry> {
        let size = if flat { FLAT_PHYS_SIZE } else { TRAD_PHYS_SIZE };
        let bad = |d: String| Error::corrupt("dedup table entry", d);
        let (&hdr, body) = value
            .split_first()
            .ok_or_else(|| bad("empty value".into()))?;
        if value.len() > size + 1 {
            return Err(bad(format!(
                "value of {} bytes (at most {})",
                value.len(),
                size + 1
            )));
        }
        let func = hdr & !DDT_COMPRESS_BYTEORDER_MASK;
        let mut raw = vec![0u8; size];
        let mut swap = false;
        match func {
            // Stored as is, and (as OpenZFS reads it) never byte-swapped.
            comp::OFF => {
                if body.len() != size {
                    return Err(bad(format!("uncompressed value of {} bytes", body.len())));
                }
                raw.copy_from_slice(body);
            }
            comp::ZLE => {
                compress::zle_decompress(body, &mut raw)?;
                swap = (hdr & DDT_COMPRESS_BYTEORDER_MASK != 0)
                    != ozfs_format::bytes::HOST_LITTLE_ENDIAN;
            }
            f => return Err(bad(format!("compression function {f}"))),
        }
        let word = |i: usize| {
            let w = u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap_or_default());
            if swap {
                w.swap_bytes()
            } else {
                w
            }
        };
        let per = if flat { 9 } else { 8 };
        let n = if flat { 1 } else { 4 };
        let phys = (0..n)
            .map(|s| {
                let b = s * per;
                let mut dva = [0u64; 6];
                for (i, d) in dva.iter_mut().enumerate() {
                    *d = word(b + i);
                }
                DdtPhys {
                    dva,
                    refcnt: word(b + 6),
                    birth: word(b + 7),
                    class_start: if flat { word(b + 8) } else { 0 },
                }
            })
            .collect();
        Ok(DdtEntry { flat, phys })
    }
}

/// `ddt_stat_t`: sums over entries (or references).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DdtStat {
    pub blocks: u64,
    pub lsize: u64,
    pub psize: u64,
    pub dsize: u64,
    pub ref_blocks: u64,
    pub ref_lsize: u64,
    pub ref_psize: u64,
    pub ref_dsize: u64,
}

impl DdtStat {
    fn words(&self) -> [u64; 8] {
        [
            self.blocks,
            self.lsize,
            self.psize,
            self.dsize,
            self.ref_blocks,
            self.ref_lsize,
            self.ref_psize,
            self.ref_dsize,
        ]
    }

    fn from_words(w: &[u64]) -> DdtStat {
        let g = |i: usize| w.get(i).copied().unwrap_or(0);
        DdtStat {
            blocks: g(0),
            lsize: g(1),
            psize: g(2),
            dsize: g(3),
            ref_blocks: g(4),
            ref_lsize: g(5),
            ref_psize: g(6),
            ref_dsize: g(7),
        }
    }

    /// Add (or, with `neg`, take away) `o`, wrapping as OpenZFS's sums do.
    pub fn add(&mut self, o: &DdtStat, neg: bool) {
        let f = |a: &mut u64, b: u64| {
            *a = if neg {
                a.wrapping_sub(b)
            } else {
                a.wrapping_add(b)
            }
        };
        f(&mut self.blocks, o.blocks);
        f(&mut self.lsize, o.lsize);
        f(&mut self.psize, o.psize);
        f(&mut self.dsize, o.dsize);
        f(&mut self.ref_blocks, o.ref_blocks);
        f(&mut self.ref_lsize, o.ref_lsize);
        f(&mut self.ref_psize, o.ref_psize);
        f(&mut self.ref_dsize, o.ref_dsize);
    }

    /// What one entry counts (`ddt_stat_generate`): each record holding
    /// a block adds one block and its sizes; `dsize` sums the charged
    /// size of its DVAs (`dva_dsize`; the third is an encrypted block's
    /// IV, not a copy).
    pub fn of_entry(key: &DdtKey, e: &DdtEntry, dva_dsize: &dyn Fn(&Dva) -> u64) -> DdtStat {
        let mut s = DdtStat::default();
        let (lsize, psize) = (key.lsize(), key.psize());
        for p in &e.phys {
            if p.is_empty() {
                continue;
            }
            let mut dvas = p.dvas();
            if key.crypt() {
                dvas.truncate(2);
            }
            // Counts come from disk: u64 arithmetic wraps, as OpenZFS's.
            let dsize = dvas.iter().map(dva_dsize).fold(0u64, u64::wrapping_add);
            let r = p.refcnt;
            s.blocks = s.blocks.wrapping_add(1);
            s.lsize = s.lsize.wrapping_add(lsize);
            s.psize = s.psize.wrapping_add(psize);
            s.dsize = s.dsize.wrapping_add(dsize);
            s.ref_blocks = s.ref_blocks.wrapping_add(r);
            s.ref_lsize = s.ref_lsize.wrapping_add(lsize.wrapping_mul(r));
            s.ref_psize = s.ref_psize.wrapping_add(psize.wrapping_mul(r));
            s.ref_dsize = s.ref_dsize.wrapping_add(dsize.wrapping_mul(r));
        }
        s
    }
}

/// `ddt_histogram_t`: 64 buckets by ⌊log2 refcount⌋.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram(pub [DdtStat; DDT_BUCKETS]);

impl Default for Histogram {
    fn default() -> Self {
        Histogram([DdtStat::default(); DDT_BUCKETS])
    }
}

impl Histogram {
    /// The 512 words stored in `DDT-statistics`.
    pub fn to_words(&self) -> Vec<u64> {
        self.0.iter().flat_map(|s| s.words()).collect()
    }

    pub fn from_words(w: &[u64]) -> Result<Histogram> {
        if w.len() != DDT_BUCKETS * 8 {
            return Err(Error::corrupt(
                "DDT-statistics",
                format!("histogram of {} words (want 512)", w.len()),
            ));
        }
        let mut h = Histogram::default();
        for (i, s) in h.0.iter_mut().enumerate() {
            *s = DdtStat::from_words(&w[i * 8..i * 8 + 8]);
        }
        Ok(h)
    }

    /// Add (or take away) an entry's statistics in its bucket.
    pub fn add_entry(&mut self, st: &DdtStat, neg: bool) {
        if st.ref_blocks == 0 {
            return;
        }
        let bucket = (63 - st.ref_blocks.leading_zeros()) as usize;
        self.0[bucket].add(st, neg);
    }

    pub fn add(&mut self, o: &Histogram) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            a.add(b, false);
        }
    }

    /// The sums over every bucket.
    pub fn total(&self) -> DdtStat {
        let mut t = DdtStat::default();
        for s in &self.0 {
            t.add(s, false);
        }
        t
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|s| *s == DdtStat::default())
    }
}

/// How the committed table is read (implemented above the SPA, where
/// ZAPs are): the value stored for `key` in object `obj`, if any.
pub trait DdtBackend: Send + Sync {
    fn lookup(&self, obj: u64, key: &DdtKey) -> Result<Option<Vec<u8>>>;
}

/// An entry touched since the last flush, with what it was on disk.
#[derive(Debug, Clone)]
pub struct Live {
    pub entry: DdtEntry,
    /// The class object it was read from (None: new).
    pub orig_class: Option<usize>,
    /// The entry as stored there (its statistics leave that object's
    /// histogram at the flush).
    pub orig: Option<DdtEntry>,
}

/// The table of one checksum function.
#[derive(Debug, Clone, Default)]
pub struct DdtTable {
    pub checksum: u8,
    /// Fast-dedup (flat entries, per-checksum directory).
    pub flat: bool,
    /// The FDT directory object (0: legacy, or not made yet).
    pub dir: u64,
    /// `flags` of the FDT directory.
    pub flags: u64,
    /// Table objects by class (0: none).
    pub objects: [u64; 3],
    /// Their histograms as `DDT-statistics` holds them, plus flushed changes.
    pub histograms: [Histogram; 3],
    /// Entries touched since the last flush, by key.
    pub live: BTreeMap<DdtKey, Live>,
}

/// Every table of a pool opened for writing.
pub struct Ddt {
    pub tables: BTreeMap<u8, DdtTable>,
    /// New tables are fast-dedup ones (the feature is enabled).
    pub new_flat: bool,
    /// The pool deflates charged sizes (`spa_deflate`): a DVA's charged
    /// size is `(asize >> 9) × vdev_deflate_ratio`, not its asize.
    pub deflate: bool,
    pub backend: Box<dyn DdtBackend>,
}

impl std::fmt::Debug for Ddt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ddt")
            .field("tables", &self.tables)
            .field("new_flat", &self.new_flat)
            .finish()
    }
}

/// What a dedup write found.
pub enum DedupHit {
    /// The block is stored: point at these DVAs, physically born then.
    Stored { dvas: Vec<Dva>, birth: u64 },
    /// Not stored: write it, then [`Ddt::record`].
    Write,
    /// Stored with fewer copies than asked (a flat record written at a
    /// lower `copies`): written apart as an ordinary block, the record
    /// left as it is (OpenZFS would extend it with the missing copies).
    Plain,
}

impl Ddt {
    /// The live entry for `key` in `checksum`'s table, loaded from disk
    /// (or made empty) on first touch.
    pub fn entry(&mut self, checksum: u8, key: &DdtKey) -> Result<&mut Live> {
        let new_flat = self.new_flat;
        let t = self.tables.entry(checksum).or_insert_with(|| DdtTable {
            checksum,
            flat: new_flat,
            ..Default::default()
        });
        // A table with nothing on disk nor in memory (new, or destroyed
        // since) takes the form new tables have.
        if t.live.is_empty() && t.dir == 0 && t.objects.iter().all(|&o| o == 0) {
            t.flat = new_flat;
        }
        if !t.live.contains_key(key) {
            let mut found = None;
            for class in 0..3 {
                let obj = t.objects[class];
                if obj == 0 {
                    continue;
                }
                if let Some(v) = self.backend.lookup(obj, key)? {
                    let e = DdtEntry::decode(&v, t.flat).map_err(|e| {
                        e.context(&format!("{} (object {obj})", object_name(checksum, class)))
                    })?;
                    found = Some((class, e));
                    break;
                }
            }
            let live = match found {
                Some((class, entry)) => Live {
                    orig: Some(entry.clone()),
                    entry,
                    orig_class: Some(class),
                },
                None => Live {
                    entry: DdtEntry::empty(t.flat),
                    orig_class: None,
                    orig: None,
                },
            };
            t.live.insert(*key, live);
        }
        t.live
            .get_mut(key)
            .ok_or_else(|| Error::Invalid("dedup entry vanished".into()))
    }

    /// A write of a block with `key` and `copies` copies: take a reference
    /// if the table holds it with as many copies.
    pub fn write(&mut self, checksum: u8, key: &DdtKey, copies: usize) -> Result<DedupHit> {
        let live = self.entry(checksum, key)?;
        let slot = live.entry.slot(copies);
        let p = &mut live.entry.phys[slot];
        if p.is_empty() {
            return Ok(DedupHit::Write);
        }
        if p.dvas().len() < copies.min(3) {
            return Ok(DedupHit::Plain);
        }
        p.refcnt = p.refcnt.saturating_add(1);
        Ok(DedupHit::Stored {
            dvas: p.dvas(),
            birth: p.birth,
        })
    }

    /// Record a block written for `key` at `dvas` in `txg` (after
    /// [`DedupHit::Write`]: the record is empty): one reference.
    pub fn record(
        &mut self,
        checksum: u8,
        key: &DdtKey,
        copies: usize,
        dvas: &[Dva],
        txg: u64,
        now: u64,
    ) -> Result<()> {
        let live = self.entry(checksum, key)?;
        let slot = live.entry.slot(copies);
        let flat = live.entry.flat;
        let p = &mut live.entry.phys[slot];
        if !p.is_empty() {
            return Err(Error::Invalid(format!(
                "dedup record {:016x} recorded twice",
                key.0[0]
            )));
        }
        let class_start = if p.class_start != 0 {
            p.class_start
        } else {
            now
        };
        *p = DdtPhys::default();
        for (i, d) in dvas.iter().take(3).enumerate() {
            let (a, b) = d.to_words();
            p.dva[2 * i] = a;
            p.dva[2 * i + 1] = b;
        }
        p.refcnt = 1;
        p.birth = txg;
        p.class_start = if flat { class_start } else { 0 };
        Ok(())
    }

    /// A free of deduplicated block `bp`: drop one reference. False when
    /// the table has no record of it (the caller frees its DVAs, as
    /// OpenZFS does for a pruned entry).
    pub fn free(&mut self, bp: &BlkPtr) -> Result<bool> {
        let key = DdtKey::of_bp(bp);
        let checksum = bp.checksum();
        if !self.tables.contains_key(&checksum) {
            return Ok(false);
        }
        let live = self.entry(checksum, &key)?;
        let first = bp.dvas()[0];
        let birth = bp.phys_birth();
        let flat = live.entry.flat;
        for (i, p) in live.entry.phys.iter_mut().enumerate() {
            if p.is_empty() || (!flat && i == 0) {
                continue;
            }
            let d0 = p.dvas().first().copied();
            if d0.is_some_and(|d| d.vdev == first.vdev && d.offset == first.offset)
                && p.birth == birth
            {
                if p.refcnt == 0 {
                    return Err(Error::corrupt(
                        format!("dedup table entry {:016x}", key.0[0]),
                        "a free of a block whose references are already gone",
                    ));
                }
                p.refcnt -= 1;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a flush has work.
    pub fn dirty(&self) -> bool {
        self.tables.values().any(|t| !t.live.is_empty())
    }

    /// Take the records of touched entries whose references are all gone
    /// (and obsolete ditto records) out of them, as the block pointers
    /// that free them (`ddt_bp_create`: the record's DVAs and birth, the
    /// key's checksum, sizes and compression, no dedup bit); the caller
    /// frees those through the pool (gang blocks and removed vdevs
    /// included) once the table's lock is released.
    pub fn take_unreferenced(&mut self) -> Vec<BlkPtr> {
        let mut out = Vec::new();
        for t in self.tables.values_mut() {
            let checksum = t.checksum;
            for (key, l) in t.live.iter_mut() {
                let flat = l.entry.flat;
                for (i, p) in l.entry.phys.iter_mut().enumerate() {
                    let ditto = !flat && i == 0;
                    if p.is_empty() || (p.refcnt > 0 && !ditto) {
                        continue;
                    }
                    out.push(record_bp(checksum, key, p));
                    *p = DdtPhys::default();
                }
            }
        }
        out
    }
}

/// The block pointer of a record (`ddt_bp_create`), to free it with.
pub fn record_bp(checksum: u8, key: &DdtKey, p: &DdtPhys) -> BlkPtr {
    let mut bp = BlkPtr::default();
    bp.words[..6].copy_from_slice(&p.dva);
    bp.words[6] = BlkPtr::make_prop(
        key.lsize(),
        key.psize(),
        key.compress(),
        checksum,
        ozfs_format::types::ot::DEDUP,
        0,
        false,
        ozfs_format::bytes::HOST_LITTLE_ENDIAN,
    ) | (u64::from(key.crypt()) << 61);
    bp.words[10] = p.birth;
    bp.words[11] = 1;
    bp.set_cksum(Cksum([key.0[0], key.0[1], key.0[2], key.0[3]]));
    bp
}

/// `dedupratio` from totals: `ref_dsize · 100 / dsize`, 100 for no table.
pub fn dedup_ratio_percent(total: &DdtStat) -> u64 {
    if total.dsize == 0 {
        100
    } else {
        ((total.ref_dsize as u128 * 100) / total.dsize as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// Entry A of OpenZFS 2.3's `c5-dedup` (`DDT-sha256-zap-duplicate`):
    /// its ZAP name and its 73-byte flat value, decoded and encoded back
    /// byte for byte (ZLE gives up on it: stored as is, header 0x82).
    #[test]
    fn a_flat_entry_openzfs_wrote() {
        let name = hex(
            "12f37c242838697a 93c2f9b6a7f99d05 acea6f384af0ddb8 af9437bf92cc6c56 0000000200ff00ff",
        );
        let key = DdtKey::from_zap_name(&name).unwrap();
        assert_eq!(key.zap_name().to_vec(), name);
        assert_eq!(
            (key.lsize(), key.psize(), key.compress()),
            (0x20000, 0x20000, 2)
        );
        let value = hex("82 0001000000000000 5011000000000000 \
             0000000000000000 0000000000000000 0000000000000000 0000000000000000 \
             0400000000000000 0c00000000000000 f8b4056b00000000");
        let e = DdtEntry::decode(&value, true).unwrap();
        let p = e.phys[0];
        assert_eq!((p.refcnt, p.birth, p.class_start), (4, 12, 1795536120));
        let d = p.dvas();
        assert_eq!((d[0].vdev, d[0].offset, d[0].asize), (0, 0x22a000, 0x20000));
        assert_eq!(e.encode(), value);
        assert_eq!(e.class(), CLASS_DUPLICATE);
        // The blake3/lz4 entry's key: psize 0xe000 of 0x20000, lz4.
        let k = DdtKey(hex_words("09f37d2982adaa83 0 0 0 0000000f006f00ff"));
        assert_eq!((k.lsize(), k.psize(), k.compress()), (0x20000, 0xe000, 15));
    }

    fn hex_words(s: &str) -> [u64; 5] {
        let v: Vec<u64> = s
            .split_whitespace()
            .map(|w| u64::from_str_radix(w, 16).unwrap())
            .collect();
        [v[0], v[1], v[2], v[3], v[4]]
    }

    /// The same record in a traditional entry (slot 1) compresses with ZLE
    /// to the 15 bytes OpenZFS's `ddt_zap_compress` gives (derived with
    /// its algorithm: header 0x8e, then the runs).
    #[test]
    fn a_traditional_entry_compresses_as_openzfs_compresses_it() {
        let mut e = DdtEntry::empty(false);
        e.phys[1] = DdtPhys {
            dva: [0x100, 0x1150, 0, 0, 0, 0],
            refcnt: 4,
            birth: 12,
            class_start: 0,
        };
        let v = e.encode();
        assert_eq!(v, hex("8e 80 00 01 45 01 50 11 65 00 04 46 00 0c c6"));
        assert_eq!(DdtEntry::decode(&v, false).unwrap(), e);
        assert_eq!(e.refcnt(), 4);
        // Damaged values are errors, not guesses.
        assert!(DdtEntry::decode(&v[..3], false).is_err());
        assert!(DdtEntry::decode(&[0x83, 1, 2], false).is_err());
        assert!(DdtEntry::decode(&[], true).is_err());
        assert!(DdtEntry::decode(&[0x82; 80], true).is_err());
    }

    /// `c5-dedup`'s histograms: the duplicate sha256 table holds 16 blocks
    /// of 128 KiB with 4 references each, in bucket 2.
    #[test]
    fn histograms_bucket_by_refcount() {
        let key = DdtKey::new(&Cksum([1, 2, 3, 4]), 0x20000, 0x20000, 2, false);
        let mut e = DdtEntry::empty(true);
        e.phys[0] = DdtPhys {
            dva: [0x100, 0x1150, 0, 0, 0, 0],
            refcnt: 4,
            birth: 12,
            class_start: 1,
        };
        let st = DdtStat::of_entry(&key, &e, &|d: &Dva| d.asize);
        let mut h = Histogram::default();
        for _ in 0..16 {
            h.add_entry(&st, false);
        }
        let w = h.to_words();
        assert_eq!(
            &w[16..24],
            &[16, 2097152, 2097152, 2097152, 64, 8388608, 8388608, 8388608]
        );
        assert_eq!(w.iter().filter(|&&x| x != 0).count(), 8);
        assert_eq!(Histogram::from_words(&w).unwrap(), h);
        assert_eq!(dedup_ratio_percent(&h.total()), 400);
        // c5's totals: 3.19x.
        let t = DdtStat {
            dsize: 3080192,
            ref_dsize: 9830400,
            ..Default::default()
        };
        assert_eq!(dedup_ratio_percent(&t), 319);
    }
}
