//! Editing ZAP objects (the write side of [`crate::zap`]). FORMAT.md §7.
//!
//! A [`ZapObject`] is a ZAP held as its data blocks in memory (host byte
//! order), keyed by block id. Every edit changes those blocks in place and
//! records the ids it touched; the caller writes the dirty blocks out (and
//! frees the dirty ids that are no longer present: those became holes) and
//! sets the dnode's data block size to [`ZapObject::block_size`] and
//! `dn_maxblkid` to [`ZapObject::max_blkid`]. Nothing here does I/O.
//!
//! # Theory
//!
//! **Microzap.** One block of `block_size` bytes: a 64-byte header and
//! `block_size/64 - 1` slots of 64 bytes (`value`, `cd`, 50-byte name). A slot
//! is free when its first name byte is 0. An in-memory index maps
//! `(hash, cd) -> slot` (hash = [`zap::zap_hash`] with 28 bits, so comparing
//! the full masked hash is the same as comparing `hash >> 32`) and keeps the
//! set of free slots. New entries take the lowest free slot and the lowest
//! `cd` not used by another entry with the same hash. When no slot is free
//! the block grows by 512 bytes while the new size is `<= micro_max`;
//! otherwise, or when the entry cannot live in a microzap (value not a
//! single uint64, name of 50 bytes or more, or more same-hash entries than
//! one fat leaf could hold after an upgrade), the object is upgraded: a new
//! fat ZAP with the same salt and normflags receives every microzap entry
//! with its cd (slot order), then the new entry. Removal zeroes the slot;
//! a microzap never shrinks.
//!
//! **Back to a microzap** ([`ZapObject::shrink`], beyond OpenZFS, which
//! never converts a fat ZAP back). A fat ZAP with no flags whose entries
//! all fit a microzap (one uint64 value, a name under 50 bytes) and need
//! at most half of `micro_max` becomes a microzap again: the entries keep
//! their cds (so readdir cookies, hash and cd, stay valid), in list order,
//! in a block (a multiple of 512) with room for as many entries again,
//! within `micro_max`; every fat block becomes a hole (and the caller sets
//! the object's maxblkid to 0, as a micro ZAP's is). The half is the hysteresis: a directory whose size
//! hovers around the limit is not converted back and forth. Every reader
//! (OpenZFS, zfs-fuse) takes a ZAP in either form from its block 0.
//!
//! **Fat ZAP.** Block 0 is the header with the pointer table (embedded in its
//! second half: `2^(bs-4)` entries, or in `zt_numblks` external blocks from
//! `zt_blk`) mapping the top `zt_shift` hash bits to leaf blocks. A leaf
//! covers the hashes whose top `prefix_len` bits equal `prefix`, i.e. an
//! aligned run of `2^(zt_shift - prefix_len)` pointer-table entries. Within a
//! leaf, 24-byte chunks are entries, array chunks (21 payload bytes, always
//! big-endian), or free (a LIFO free list headed by `lh_freelist`). Each
//! bucket chain is kept sorted by cd (new entries go after every entry with
//! a cd <= theirs); `ZLF_ENTRIES_CDSORTED` is set on leaves of ZAPs with
//! nonzero normflags, as OpenZFS and zfs-fuse do.
//!
//! Policies (those of OpenZFS, so that its code finds what it expects):
//! * An entry needs `1 + ceil(keybytes/21) + ceil(valuebytes/21)` chunks. A
//!   leaf is split only when the entry does not fit (`lh_nfree` too small).
//!   The split leaf keeps the entries whose next hash bit is 0, the new leaf
//!   (block `zap_freeblk`, then `zap_freeblk += 1`) takes those with bit 1
//!   and the upper half of the old leaf's pointer-table run. Both get
//!   `prefix_len + 1`. Then the insert is retried.
//! * When a leaf to split already has `prefix_len == zt_shift` the pointer
//!   table doubles first. The embedded table moves into one new external
//!   block (2× the entries) once it is full; an external table of n blocks
//!   is copied into 2n newly allocated blocks and the old blocks are freed
//!   (holes); `zt_nextblk`/`zt_blks_copied` are 0 afterwards. A table left
//!   half-copied by OpenZFS is completed before the first edit.
//! * After a successful add/update, if the leaf used has
//!   `prefix_len == zt_shift` and fewer than [`ZAP_LEAF_LOW_WATER`] free
//!   chunks, the pointer table is grown ahead of time (as OpenZFS does).
//! * The table never grows past `hashbits - 2` bits; an insert that could
//!   only be placed by splitting beyond that (a leaf full of entries sharing
//!   that many hash bits) fails with an error and changes nothing.
//! * cd: the lowest value not used by another entry with the same hash
//!   (such entries always live in the same leaf); an upgrade keeps the
//!   microzap cds.
//! * Removal returns the entry's chunks to the leaf's free list (value and
//!   name chunks, then the entry chunk); leaves are never merged.
//!
//! # Invariants ([`ZapObject::verify`], also run by [`ZapObject::load`])
//! * Microzap: only block 0; size a multiple of 64; nonzero salt; names
//!   NUL-terminated within 50 bytes, unique; `(hash, cd)` unique.
//! * Fat header: magic, nonzero salt, all block ids `< zap_freeblk`, the
//!   external table exactly `2^zt_shift` entries, `zap_num_leafs` = number
//!   of distinct leaves, `zap_num_entries` = sum of `lh_nentries`.
//! * Pointer table: each leaf is referenced by exactly one aligned run of
//!   `2^(zt_shift - prefix_len)` entries starting at `prefix << (zt_shift -
//!   prefix_len)`.
//! * Leaf: every chunk is reached exactly once (free list, a bucket chain,
//!   or an array chain of an entry), so `lh_nfree + used == numchunks`; the
//!   free list has `lh_nfree` chunks; entries sit in the bucket of their
//!   hash, have the leaf's prefix, the masked hash of their name, a valid
//!   int length, arrays long enough for their lengths; chains are sorted by
//!   cd when the leaf is marked CDSORTED; `(hash, cd)` and names are unique.

use crate::error::{Error, Result};
use crate::zap::{
    self, ZapEntry, ZapHeader, CHAIN_END, MZAP_ENT_LEN, MZAP_NAME_LEN, ZAP_CHUNK_ARRAY,
    ZAP_CHUNK_ENTRY, ZAP_CHUNK_FREE, ZAP_FLAG_UINT64_KEY, ZAP_LEAF_ARRAY_BYTES, ZAP_LEAF_CHUNKSIZE,
    ZAP_LEAF_HDR_SIZE, ZAP_LEAF_MAGIC, ZAP_MAGIC, ZBT_HEADER, ZBT_LEAF, ZBT_MICRO,
    ZLF_ENTRIES_CDSORTED,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Default `zap_micro_max_size` (128 KiB).
pub const DEFAULT_MICRO_MAX: usize = 128 * 1024;
/// Default fat ZAP block shift (`fzap_default_block_shift`, 16 KiB).
pub const DEFAULT_FAT_SHIFT: u32 = 14;
/// Longest key in bytes, including the NUL of a string key.
pub const ZAP_MAXNAMELEN: usize = 256;
/// Longest value in bytes (`int_len * count`).
pub const ZAP_MAXVALUELEN: usize = 8 * 1024;
/// Free chunks below which a leaf at full prefix length makes the pointer table grow.
pub const ZAP_LEAF_LOW_WATER: usize = 20;
/// Leaf chunks a microzap entry needs after an upgrade (entry + 50-byte name + 8-byte value).
const MZAP_ENT_CHUNKS: usize = 5;
/// Microzap growth step.
const MZAP_GROW: usize = 512;

// Leaf header field offsets.
const LH_PREFIX: usize = 16;
const LH_MAGIC: usize = 24;
const LH_NFREE: usize = 28;
const LH_NENTRIES: usize = 30;
const LH_PREFIX_LEN: usize = 32;
const LH_FREELIST: usize = 34;
const LH_FLAGS: usize = 36;
// Entry chunk field offsets.
const LE_INTLEN: usize = 1;
const LE_NEXT: usize = 2;
const LE_NAME: usize = 4;
const LE_NAME_N: usize = 6;
const LE_VALUE: usize = 8;
const LE_VALUE_N: usize = 10;
const LE_CD: usize = 12;
const LE_HASH: usize = 16;
/// Next-chunk field of array and free chunks.
const LA_NEXT: usize = 22;

#[inline]
fn g16(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes([b[o], b[o + 1]])
}
#[inline]
fn p16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_ne_bytes());
}
#[inline]
fn g32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
#[inline]
fn p32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
}
#[inline]
fn g64(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
#[inline]
fn p64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Array chunks needed for `bytes` bytes.
#[inline]
fn nch(bytes: usize) -> usize {
    bytes.div_ceil(ZAP_LEAF_ARRAY_BYTES)
}

/// Top `n` bits of a hash (`ZAP_HASH_IDX`).
#[inline]
fn hash_idx(h: u64, n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        h >> (64 - n)
    }
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::corrupt("zap", detail)
}

/// Leaf geometry for a block size.
#[derive(Clone, Copy, Debug)]
struct Geo {
    bs: u32,
    nhash: usize,
    nchunks: usize,
}

impl Geo {
    fn new(block_size: usize) -> Geo {
        let bs = block_size.trailing_zeros();
        let nhash = 1usize << (bs - 5);
        let nchunks = (block_size - 2 * nhash) / ZAP_LEAF_CHUNKSIZE - 2;
        Geo { bs, nhash, nchunks }
    }
    #[inline]
    fn coff(&self, c: u16) -> usize {
        ZAP_LEAF_HDR_SIZE + 2 * self.nhash + ZAP_LEAF_CHUNKSIZE * c as usize
    }
    #[inline]
    fn hoff(&self, bucket: usize) -> usize {
        ZAP_LEAF_HDR_SIZE + 2 * bucket
    }
}

/// A key as stored: array bytes (string + NUL, or big-endian uint64 words), unit count, hash.
#[derive(Debug)]
struct Key {
    stored: Vec<u8>,
    numints: usize,
    hash: u64,
    uint64: bool,
}

/// Read-only view of a leaf (host order).
struct LeafRef<'a> {
    b: &'a [u8],
    g: Geo,
}

impl LeafRef<'_> {
    fn nfree(&self) -> usize {
        g16(self.b, LH_NFREE) as usize
    }
    fn nentries(&self) -> usize {
        g16(self.b, LH_NENTRIES) as usize
    }
    fn prefix(&self) -> u64 {
        g64(self.b, LH_PREFIX)
    }
    fn prefix_len(&self) -> u64 {
        g16(self.b, LH_PREFIX_LEN) as u64
    }
    fn freelist(&self) -> u16 {
        g16(self.b, LH_FREELIST)
    }
    fn flags(&self) -> u8 {
        self.b[LH_FLAGS]
    }
    fn bucket(&self, h: u64) -> usize {
        let shift = 64 - (self.g.bs as u64 - 5) - self.prefix_len();
        ((h >> shift) as usize) & (self.g.nhash - 1)
    }
    fn head(&self, bucket: usize) -> u16 {
        g16(self.b, self.g.hoff(bucket))
    }
    fn ctype(&self, c: u16) -> u8 {
        self.b[self.g.coff(c)]
    }
    fn f16(&self, c: u16, f: usize) -> u16 {
        g16(self.b, self.g.coff(c) + f)
    }
    fn cd(&self, c: u16) -> u32 {
        g32(self.b, self.g.coff(c) + LE_CD)
    }
    fn hash(&self, c: u16) -> u64 {
        g64(self.b, self.g.coff(c) + LE_HASH)
    }
    fn intlen(&self, c: u16) -> u8 {
        self.b[self.g.coff(c) + LE_INTLEN]
    }
    fn check(&self, c: u16, want: u8) -> Result<()> {
        if c as usize >= self.g.nchunks {
            return Err(corrupt(format!("chunk index {c} out of range")));
        }
        let t = self.ctype(c);
        if t != want {
            return Err(corrupt(format!("chunk {c} has type {t}, expected {want}")));
        }
        Ok(())
    }
    /// Does the array chain at `c` hold exactly the bytes `data` (as its first data.len() bytes)?
    fn array_eq(&self, mut c: u16, data: &[u8]) -> Result<bool> {
        for piece in data.chunks(ZAP_LEAF_ARRAY_BYTES) {
            self.check(c, ZAP_CHUNK_ARRAY)?;
            let o = self.g.coff(c);
            if &self.b[o + 1..o + 1 + piece.len()] != piece {
                return Ok(false);
            }
            c = g16(self.b, o + LA_NEXT);
        }
        Ok(true)
    }
    fn array_read(&self, mut c: u16, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            self.check(c, ZAP_CHUNK_ARRAY)?;
            let o = self.g.coff(c);
            let take = (len - out.len()).min(ZAP_LEAF_ARRAY_BYTES);
            out.extend_from_slice(&self.b[o + 1..o + 1 + take]);
            c = g16(self.b, o + LA_NEXT);
        }
        Ok(out)
    }
    /// Find the entry for `key`: (byte offset of the link pointing at it, its chunk).
    fn find(&self, key: &Key) -> Result<Option<(usize, u16)>> {
        let mut link = self.g.hoff(self.bucket(key.hash));
        for _ in 0..=self.g.nchunks {
            let c = g16(self.b, link);
            if c == CHAIN_END {
                return Ok(None);
            }
            self.check(c, ZAP_CHUNK_ENTRY)?;
            if self.hash(c) == key.hash
                && self.f16(c, LE_NAME_N) as usize == key.numints
                && self.array_eq(self.f16(c, LE_NAME), &key.stored)?
            {
                return Ok(Some((link, c)));
            }
            link = self.g.coff(c) + LE_NEXT;
        }
        Err(corrupt("bucket chain loops"))
    }
    /// Lowest cd not used by an entry with hash `h` (sorted or not).
    fn lowest_cd(&self, h: u64) -> Result<u32> {
        let mut cds = Vec::new();
        let mut c = self.head(self.bucket(h));
        let mut steps = 0;
        while c != CHAIN_END {
            self.check(c, ZAP_CHUNK_ENTRY)?;
            steps += 1;
            if steps > self.g.nchunks {
                return Err(corrupt("bucket chain loops"));
            }
            if self.hash(c) == h {
                cds.push(self.cd(c));
            }
            c = self.f16(c, LE_NEXT);
        }
        cds.sort_unstable();
        let mut cd = 0u32;
        for x in cds {
            if x == cd {
                cd += 1;
            } else if x > cd {
                break;
            }
        }
        Ok(cd)
    }
    /// Decode entry chunk `c`.
    fn entry(&self, c: u16, uint64: bool) -> Result<ZapEntry> {
        self.check(c, ZAP_CHUNK_ENTRY)?;
        let int_len = self.intlen(c);
        if !matches!(int_len, 1 | 2 | 4 | 8) {
            return Err(corrupt(format!("entry {c} int length {int_len}")));
        }
        let nn = self.f16(c, LE_NAME_N) as usize;
        let mut name = self.array_read(self.f16(c, LE_NAME), if uint64 { nn * 8 } else { nn })?;
        if !uint64 && name.last() == Some(&0) {
            name.pop();
        }
        let nv = self.f16(c, LE_VALUE_N) as usize;
        let raw = self.array_read(self.f16(c, LE_VALUE), nv * int_len as usize)?;
        let value = raw
            .chunks(int_len as usize)
            .map(|w| w.iter().fold(0u64, |a, &b| (a << 8) | b as u64))
            .collect();
        Ok(ZapEntry {
            name,
            int_len,
            value,
            cd: self.cd(c),
        })
    }
    /// All entries, bucket by bucket.
    fn entries(&self, uint64: bool, out: &mut Vec<ZapEntry>) -> Result<()> {
        for b in 0..self.g.nhash {
            let mut c = self.head(b);
            let mut steps = 0;
            while c != CHAIN_END {
                steps += 1;
                if steps > self.g.nchunks {
                    return Err(corrupt("bucket chain loops"));
                }
                out.push(self.entry(c, uint64)?);
                c = self.f16(c, LE_NEXT);
            }
        }
        Ok(())
    }
}

/// Mutable view of a leaf (host order).
struct Leaf<'a> {
    b: &'a mut [u8],
    g: Geo,
}

impl Leaf<'_> {
    fn r(&self) -> LeafRef<'_> {
        LeafRef {
            b: self.b,
            g: self.g,
        }
    }
    /// Initialize a zeroed block as an empty leaf (all chunks free, chained in order).
    fn init(&mut self, sorted: bool) {
        let n = self.g.nchunks;
        self.b[..ZAP_LEAF_HDR_SIZE].fill(0);
        p64(self.b, 0, ZBT_LEAF);
        p32(self.b, LH_MAGIC, ZAP_LEAF_MAGIC);
        p16(self.b, LH_NFREE, n as u16);
        p16(self.b, LH_FREELIST, 0);
        self.b[LH_FLAGS] = if sorted { ZLF_ENTRIES_CDSORTED } else { 0 };
        let ho = self.g.hoff(0);
        self.b[ho..ho + 2 * self.g.nhash].fill(0xff);
        for i in 0..n {
            let o = self.g.coff(i as u16);
            self.b[o..o + ZAP_LEAF_CHUNKSIZE].fill(0);
            self.b[o] = ZAP_CHUNK_FREE;
            let next = if i + 1 == n {
                CHAIN_END
            } else {
                (i + 1) as u16
            };
            p16(self.b, o + LA_NEXT, next);
        }
    }
    fn set_nfree(&mut self, v: usize) {
        p16(self.b, LH_NFREE, v as u16);
    }
    fn set_nentries(&mut self, v: usize) {
        p16(self.b, LH_NENTRIES, v as u16);
    }
    fn alloc(&mut self) -> u16 {
        let c = self.r().freelist();
        debug_assert!((c as usize) < self.g.nchunks && self.r().nfree() > 0);
        let o = self.g.coff(c);
        debug_assert_eq!(self.b[o], ZAP_CHUNK_FREE);
        let next = g16(self.b, o + LA_NEXT);
        p16(self.b, LH_FREELIST, next);
        let nf = self.r().nfree();
        self.set_nfree(nf - 1);
        c
    }
    fn free(&mut self, c: u16) {
        let o = self.g.coff(c);
        self.b[o] = ZAP_CHUNK_FREE;
        self.b[o + 1..o + LA_NEXT].fill(0);
        let head = self.r().freelist();
        p16(self.b, o + LA_NEXT, head);
        p16(self.b, LH_FREELIST, c);
        let nf = self.r().nfree();
        self.set_nfree(nf + 1);
    }
    /// Write `data` as a new array chain; CHAIN_END for no data.
    fn array_create(&mut self, data: &[u8]) -> u16 {
        let mut head = CHAIN_END;
        let mut prev: Option<u16> = None;
        for piece in data.chunks(ZAP_LEAF_ARRAY_BYTES) {
            let c = self.alloc();
            let o = self.g.coff(c);
            self.b[o] = ZAP_CHUNK_ARRAY;
            self.b[o + 1..o + 1 + piece.len()].copy_from_slice(piece);
            self.b[o + 1 + piece.len()..o + LA_NEXT].fill(0);
            p16(self.b, o + LA_NEXT, CHAIN_END);
            match prev {
                Some(p) => {
                    let po = self.g.coff(p);
                    p16(self.b, po + LA_NEXT, c);
                }
                None => head = c,
            }
            prev = Some(c);
        }
        head
    }
    /// Free a whole array chain.
    fn array_free(&mut self, mut c: u16) -> Result<()> {
        let mut steps = 0;
        while c != CHAIN_END {
            self.r().check(c, ZAP_CHUNK_ARRAY)?;
            steps += 1;
            if steps > self.g.nchunks {
                return Err(corrupt("array chain loops"));
            }
            let next = g16(self.b, self.g.coff(c) + LA_NEXT);
            self.free(c);
            c = next;
        }
        Ok(())
    }
    /// Link entry chunk `c` into its bucket, after every entry with a cd <= its cd.
    fn link(&mut self, c: u16) {
        let (h, cd) = (self.r().hash(c), self.r().cd(c));
        let mut link = self.g.hoff(self.r().bucket(h));
        loop {
            let n = g16(self.b, link);
            if n == CHAIN_END || self.r().cd(n) > cd {
                let o = self.g.coff(c);
                p16(self.b, o + LE_NEXT, n);
                p16(self.b, link, c);
                return;
            }
            link = self.g.coff(n) + LE_NEXT;
        }
    }
    /// Create an entry (the caller checked that enough chunks are free).
    fn create(&mut self, key: &Key, cd: u32, int_len: u8, vbytes: &[u8], nvalues: usize) {
        let e = self.alloc();
        let name = self.array_create(&key.stored);
        let value = self.array_create(vbytes);
        let o = self.g.coff(e);
        self.b[o..o + ZAP_LEAF_CHUNKSIZE].fill(0);
        self.b[o] = ZAP_CHUNK_ENTRY;
        self.b[o + LE_INTLEN] = int_len;
        p16(self.b, o + LE_NAME, name);
        p16(self.b, o + LE_NAME_N, key.numints as u16);
        p16(self.b, o + LE_VALUE, value);
        p16(self.b, o + LE_VALUE_N, nvalues as u16);
        p32(self.b, o + LE_CD, cd);
        p64(self.b, o + LE_HASH, key.hash);
        self.link(e);
        let ne = self.r().nentries();
        self.set_nentries(ne + 1);
    }
    /// Replace the value of entry `c` (the caller checked the chunk budget).
    fn set_value(&mut self, c: u16, int_len: u8, vbytes: &[u8], nvalues: usize) -> Result<()> {
        let old = self.r().f16(c, LE_VALUE);
        self.array_free(old)?;
        let v = self.array_create(vbytes);
        let o = self.g.coff(c);
        p16(self.b, o + LE_VALUE, v);
        p16(self.b, o + LE_VALUE_N, nvalues as u16);
        self.b[o + LE_INTLEN] = int_len;
        Ok(())
    }
    /// Remove entry `c`, linked from byte offset `link`.
    fn remove(&mut self, link: usize, c: u16) -> Result<()> {
        let (name, value, next) = {
            let r = self.r();
            (r.f16(c, LE_NAME), r.f16(c, LE_VALUE), r.f16(c, LE_NEXT))
        };
        self.array_free(name)?;
        self.array_free(value)?;
        p16(self.b, link, next);
        self.free(c);
        let ne = self.r().nentries();
        self.set_nentries(ne - 1);
        Ok(())
    }
    /// Copy the array chain at `c` into `to`, freeing it here; returns the new head.
    fn transfer_array(&mut self, mut c: u16, to: &mut Leaf<'_>) -> u16 {
        let mut head = CHAIN_END;
        let mut prev: Option<u16> = None;
        while c != CHAIN_END {
            let nc = to.alloc();
            let (o, no) = (self.g.coff(c), to.g.coff(nc));
            to.b[no..no + ZAP_LEAF_CHUNKSIZE].copy_from_slice(&self.b[o..o + ZAP_LEAF_CHUNKSIZE]);
            p16(to.b, no + LA_NEXT, CHAIN_END);
            match prev {
                Some(p) => {
                    let po = to.g.coff(p);
                    p16(to.b, po + LA_NEXT, nc);
                }
                None => head = nc,
            }
            prev = Some(nc);
            let next = g16(self.b, o + LA_NEXT);
            self.free(c);
            c = next;
        }
        head
    }
    /// Split this leaf: prefix_len + 1 for both; entries whose next hash bit is 1 move to `nl`
    /// (a freshly initialized leaf).
    fn split(&mut self, nl: &mut Leaf<'_>, sorted: bool) {
        let plen = self.r().prefix_len();
        let bit = 63 - plen;
        let prefix = self.r().prefix() << 1;
        p64(self.b, LH_PREFIX, prefix);
        p16(self.b, LH_PREFIX_LEN, (plen + 1) as u16);
        p64(nl.b, LH_PREFIX, prefix | 1);
        p16(nl.b, LH_PREFIX_LEN, (plen + 1) as u16);
        let ho = self.g.hoff(0);
        self.b[ho..ho + 2 * self.g.nhash].fill(0xff);
        if sorted {
            self.b[LH_FLAGS] |= ZLF_ENTRIES_CDSORTED;
        }
        for i in 0..self.g.nchunks as u16 {
            if self.r().ctype(i) != ZAP_CHUNK_ENTRY {
                continue;
            }
            if self.r().hash(i) & (1u64 << bit) == 0 {
                self.link(i);
                continue;
            }
            let ne = nl.alloc();
            let (o, no) = (self.g.coff(i), nl.g.coff(ne));
            nl.b[no..no + ZAP_LEAF_CHUNKSIZE].copy_from_slice(&self.b[o..o + ZAP_LEAF_CHUNKSIZE]);
            nl.link(ne);
            let name = self.transfer_array(self.r().f16(i, LE_NAME), nl);
            let value = self.transfer_array(self.r().f16(i, LE_VALUE), nl);
            p16(nl.b, no + LE_NAME, name);
            p16(nl.b, no + LE_VALUE, value);
            self.free(i);
            let (a, b) = (self.r().nentries(), nl.r().nentries());
            self.set_nentries(a - 1);
            nl.set_nentries(b + 1);
        }
    }
}

/// Fat ZAP header words 2..=12.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hdr {
    blk: u64,
    numblks: u64,
    shift: u64,
    nextblk: u64,
    copied: u64,
    freeblk: u64,
    nleafs: u64,
    nentries: u64,
    salt: u64,
    normflags: u64,
    flags: u64,
}

impl Hdr {
    fn read(b0: &[u8]) -> Hdr {
        let w = |i: usize| g64(b0, 8 * i);
        Hdr {
            blk: w(2),
            numblks: w(3),
            shift: w(4),
            nextblk: w(5),
            copied: w(6),
            freeblk: w(7),
            nleafs: w(8),
            nentries: w(9),
            salt: w(10),
            normflags: w(11),
            flags: w(12),
        }
    }
    fn write(&self, b0: &mut [u8]) {
        let words = [
            self.blk,
            self.numblks,
            self.shift,
            self.nextblk,
            self.copied,
            self.freeblk,
            self.nleafs,
            self.nentries,
            self.salt,
            self.normflags,
            self.flags,
        ];
        for (i, w) in words.iter().enumerate() {
            p64(b0, 8 * (i + 2), *w);
        }
    }
    fn hashbits(&self) -> u64 {
        zap::hashbits_for(self.flags) as u64
    }
    fn uint64_key(&self) -> bool {
        self.flags & ZAP_FLAG_UINT64_KEY != 0
    }
    fn alloc_blocks(&mut self, n: u64) -> u64 {
        let b = self.freeblk;
        self.freeblk += n;
        b
    }
    /// Is `id` a block of the current external pointer table or of a copy in progress?
    fn is_table_block(&self, id: u64) -> bool {
        (self.numblks > 0 && id >= self.blk && id < self.blk + self.numblks)
            || (self.nextblk != 0 && id >= self.nextblk && id < self.nextblk + 2 * self.numblks)
    }
}

/// In-memory index of a microzap block.
#[derive(Debug, Clone)]
struct MicroIndex {
    salt: u64,
    normflags: u64,
    /// (hash, cd) -> slot.
    by_hash: BTreeMap<(u64, u32), u32>,
    free: BTreeSet<u32>,
    nslots: u32,
}

fn mz_off(slot: u32) -> usize {
    MZAP_ENT_LEN * (slot as usize + 1)
}

/// Name bytes of a microzap slot (up to the NUL), empty if the slot is free.
fn mz_name(b0: &[u8], slot: u32) -> &[u8] {
    let o = mz_off(slot) + 14;
    let raw = &b0[o..o + MZAP_NAME_LEN];
    let n = raw.iter().position(|&x| x == 0).unwrap_or(MZAP_NAME_LEN);
    &raw[..n]
}

impl MicroIndex {
    fn build(b0: &[u8]) -> Result<MicroIndex> {
        if b0.len() < 2 * MZAP_ENT_LEN || !b0.len().is_multiple_of(MZAP_ENT_LEN) {
            return Err(corrupt(format!("microzap block of {} bytes", b0.len())));
        }
        let (salt, normflags) = match zap::parse_header(b0, false)? {
            ZapHeader::Micro { salt, normflags } => (salt, normflags),
            ZapHeader::Fat(_) => return Err(corrupt("not a microzap")),
        };
        let nslots = (b0.len() / MZAP_ENT_LEN - 1) as u32;
        let mut mi = MicroIndex {
            salt,
            normflags,
            by_hash: BTreeMap::new(),
            free: BTreeSet::new(),
            nslots,
        };
        let mut names = HashSet::new();
        for slot in 0..nslots {
            let o = mz_off(slot);
            if b0[o + 14] == 0 {
                mi.free.insert(slot);
                continue;
            }
            if b0[o + 14 + MZAP_NAME_LEN - 1] != 0 {
                return Err(corrupt(format!(
                    "microzap slot {slot}: name not terminated"
                )));
            }
            let name = mz_name(b0, slot);
            if !names.insert(name.to_vec()) {
                return Err(corrupt(format!(
                    "microzap name {:?} appears twice",
                    String::from_utf8_lossy(name)
                )));
            }
            let h = zap::zap_hash(salt, name, normflags, 28);
            let cd = g32(b0, o + 8);
            if mi.by_hash.insert((h, cd), slot).is_some() {
                return Err(corrupt(format!("microzap hash {h:#x} cd {cd} used twice")));
            }
        }
        Ok(mi)
    }
    fn find(&self, b0: &[u8], name: &[u8]) -> Option<(u32, u64, u32)> {
        let h = zap::zap_hash(self.salt, name, self.normflags, 28);
        self.by_hash
            .range((h, 0)..=(h, u32::MAX))
            .find(|(_, &slot)| mz_name(b0, slot) == name)
            .map(|(&(h, cd), &slot)| (slot, h, cd))
    }
    fn same_hash(&self, h: u64) -> impl Iterator<Item = u32> + '_ {
        self.by_hash
            .range((h, 0)..=(h, u32::MAX))
            .map(|(&(_, cd), _)| cd)
    }
    fn entry(b0: &[u8], slot: u32) -> ZapEntry {
        let o = mz_off(slot);
        ZapEntry {
            name: mz_name(b0, slot).to_vec(),
            int_len: 8,
            value: vec![g64(b0, o)],
            cd: g32(b0, o + 8),
        }
    }
}

/// How [`ZapObject::fat_put`] treats an existing entry and chooses the cd.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Add,
    Update,
    AddCd(u32),
}

/// Validate and encode a value as its big-endian array bytes.
fn encode_value(int_len: u8, value: &[u64]) -> Result<Vec<u8>> {
    if !matches!(int_len, 1 | 2 | 4 | 8) {
        return Err(Error::Invalid(format!("zap value int length {int_len}")));
    }
    let il = int_len as usize;
    if value.len() * il > ZAP_MAXVALUELEN {
        return Err(Error::Invalid(format!(
            "zap value of {} bytes is longer than {ZAP_MAXVALUELEN}",
            value.len() * il
        )));
    }
    let mut out = Vec::with_capacity(value.len() * il);
    for &v in value {
        if il < 8 && v >> (8 * il) != 0 {
            return Err(Error::Invalid(format!(
                "zap value {v:#x} does not fit in {il} bytes"
            )));
        }
        out.extend_from_slice(&v.to_be_bytes()[8 - il..]);
    }
    Ok(out)
}

/// Longest string key plus its NUL where names may be long
/// (`ZAP_MAXNAMELEN_NEW`, OpenZFS's `longname` feature): 1023 bytes. Such
/// a name is looked up and removed ([`ZapObject::lookup`],
/// [`ZapObject::remove`]); new entries keep [`ZAP_MAXNAMELEN`].
pub const ZAP_MAXNAMELEN_NEW: usize = 1024;

/// Check a string key for a new entry: nonempty, no NUL, at most
/// ZAP_MAXNAMELEN - 1 bytes.
fn check_str_name(name: &[u8]) -> Result<()> {
    check_str_name_max(name, ZAP_MAXNAMELEN)
}

/// [`check_str_name`] with another limit (NUL included).
fn check_str_name_max(name: &[u8], max: usize) -> Result<()> {
    if name.is_empty() || name.contains(&0) || name.len() >= max {
        return Err(Error::Invalid(format!(
            "bad zap name {:?} ({} bytes)",
            String::from_utf8_lossy(name),
            name.len()
        )));
    }
    Ok(())
}

fn exists_err(name: &[u8]) -> Error {
    Error::Exists(format!(
        "zap entry {:?} already exists",
        String::from_utf8_lossy(name)
    ))
}

/// Leaf chunk count for a block shift.
fn leaf_chunks(shift: u32) -> usize {
    Geo::new(1usize << shift).nchunks
}

/// A ZAP object held as blocks in memory; see the module documentation.
#[derive(Debug, Clone)]
pub struct ZapObject {
    /// Block size of the object's data blocks (microzap: 512..=micro_max, multiple of 512; fat: 16384 normally).
    pub block_size: usize,
    /// Blocks by block id, host byte order. Missing ids are holes. Change them only through this API.
    pub blocks: BTreeMap<u64, Vec<u8>>,
    /// Block ids changed since the last `take_dirty()`.
    dirty: BTreeSet<u64>,
    /// zap_micro_max_size (default 128 KiB, a tunable).
    pub micro_max: usize,
    /// Fat ZAP block shift used when upgrading (14 = 16 KiB).
    pub fat_shift: u32,
    /// Microzap index; `None` for a fat ZAP.
    micro: Option<MicroIndex>,
    /// A [`Self::shrink`] found an entry no microzap can hold: not tried
    /// again until an entry is added or one with a long name removed.
    no_shrink: bool,
}

impl ZapObject {
    /// An empty 512-byte microzap (a zero salt is replaced by 1: salts must be nonzero).
    pub fn new_micro(salt: u64, normflags: u64) -> ZapObject {
        let salt = salt.max(1);
        let mut b0 = vec![0u8; 512];
        p64(&mut b0, 0, ZBT_MICRO);
        p64(&mut b0, 8, salt);
        p64(&mut b0, 16, normflags);
        let micro = MicroIndex::build(&b0).expect("fresh microzap");
        ZapObject {
            block_size: 512,
            blocks: BTreeMap::from([(0, b0)]),
            dirty: BTreeSet::from([0]),
            micro_max: DEFAULT_MICRO_MAX,
            fat_shift: DEFAULT_FAT_SHIFT,
            micro: Some(micro),
            no_shrink: false,
        }
    }

    /// An empty fat ZAP with 16 KiB blocks, as OpenZFS creates one: header (embedded pointer table,
    /// every entry -> 1, `zap_freeblk` 2) and one empty leaf at block 1.
    pub fn new_fat(salt: u64, normflags: u64, flags: u64) -> ZapObject {
        Self::new_fat_with_shift(salt, normflags, flags, DEFAULT_FAT_SHIFT)
    }

    /// [`Self::new_fat`] with another block shift (10..=17).
    pub fn new_fat_with_shift(salt: u64, normflags: u64, flags: u64, shift: u32) -> ZapObject {
        assert!((10..=17).contains(&shift), "fat zap block shift {shift}");
        let salt = salt.max(1);
        let bsize = 1usize << shift;
        let g = Geo::new(bsize);
        let mut b0 = vec![0u8; bsize];
        p64(&mut b0, 0, ZBT_HEADER);
        p64(&mut b0, 8, ZAP_MAGIC);
        let h = Hdr {
            blk: 0,
            numblks: 0,
            shift: (shift - 4) as u64,
            nextblk: 0,
            copied: 0,
            freeblk: 2,
            nleafs: 1,
            nentries: 0,
            salt,
            normflags,
            flags,
        };
        h.write(&mut b0);
        for i in 0..(1usize << h.shift) {
            p64(&mut b0, bsize / 2 + 8 * i, 1);
        }
        let mut b1 = vec![0u8; bsize];
        Leaf { b: &mut b1, g }.init(normflags != 0);
        ZapObject {
            block_size: bsize,
            blocks: BTreeMap::from([(0, b0), (1, b1)]),
            dirty: BTreeSet::from([0, 1]),
            micro_max: DEFAULT_MICRO_MAX,
            fat_shift: shift,
            micro: None,
            no_shrink: false,
        }
    }

    /// Take an existing object's blocks (in the byte order they were written; `swap` = other
    /// endianness) and check every invariant ([`Self::verify`]).
    pub fn load(
        block_size: usize,
        mut blocks: BTreeMap<u64, Vec<u8>>,
        swap: bool,
    ) -> Result<ZapObject> {
        let b0 = blocks.get(&0).ok_or_else(|| corrupt("no block 0"))?;
        if b0.len() != block_size || b0.len() < 8 {
            return Err(corrupt(format!(
                "block 0 has {} bytes, block size {block_size}",
                b0.len()
            )));
        }
        let bt = {
            let v = g64(b0, 0);
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        };
        let micro = bt == ZBT_MICRO;
        if swap {
            if micro {
                swap_micro(blocks.get_mut(&0).expect("block 0"));
            } else {
                swap_fat(block_size, &mut blocks)?;
            }
        }
        let mut z = ZapObject {
            block_size,
            blocks,
            dirty: BTreeSet::new(),
            micro_max: DEFAULT_MICRO_MAX,
            fat_shift: DEFAULT_FAT_SHIFT,
            micro: None,
            no_shrink: false,
        };
        if micro {
            if z.blocks.len() != 1 {
                return Err(corrupt("microzap with more than one block"));
            }
            z.micro = Some(MicroIndex::build(&z.blocks[&0])?);
        }
        z.verify()?;
        Ok(z)
    }

    /// A fat ZAP loaded with only some of its blocks (host byte order):
    /// block 0, the pointer table's blocks ([`Self::table_blocks`]) and
    /// the leaves edits need, brought in with [`Self::insert_block`] after
    /// [`Self::leaf_for`] names them — so a few entries of a very large
    /// ZAP are edited without reading it all. No invariant walk is done;
    /// anything that needs a leaf not loaded fails naming it (never
    /// answers from a partial view).
    pub fn load_sparse(block_size: usize, blocks: BTreeMap<u64, Vec<u8>>) -> Result<ZapObject> {
        let b0 = blocks.get(&0).ok_or_else(|| corrupt("no block 0"))?;
        if b0.len() != block_size || !block_size.is_power_of_two() || block_size < 1024 {
            return Err(corrupt(format!(
                "block 0 has {} bytes, block size {block_size}",
                b0.len()
            )));
        }
        if g64(b0, 0) != ZBT_HEADER || g64(b0, 8) != ZAP_MAGIC {
            return Err(corrupt("not a fat ZAP header"));
        }
        let shift = block_size.trailing_zeros();
        if blocks
            .iter()
            .any(|(id, b)| *id != 0 && b.len() != block_size)
        {
            return Err(corrupt("a block of the wrong size"));
        }
        let z = ZapObject {
            block_size,
            blocks,
            dirty: BTreeSet::new(),
            micro_max: DEFAULT_MICRO_MAX,
            fat_shift: shift,
            micro: None,
            no_shrink: false,
        };
        let h = z.hdr();
        if h.shift > 64 || h.freeblk == 0 {
            return Err(corrupt(format!("pointer table shift {}", h.shift)));
        }
        Ok(z)
    }

    /// The blocks of the pointer table (and of a copy in progress) a fat
    /// ZAP whose block 0 is `block0` keeps outside block 0.
    pub fn table_blocks(block0: &[u8]) -> Vec<u64> {
        if block0.len() < 128 {
            return Vec::new();
        }
        let h = Hdr::read(block0);
        let mut v: Vec<u64> =
            (h.blk..h.blk.saturating_add(h.numblks).min(h.blk + (1 << 24))).collect();
        if h.nextblk != 0 {
            let end = h.nextblk.saturating_add(h.numblks.saturating_mul(2));
            v.extend(h.nextblk..end.min(h.nextblk + (1 << 25)));
        }
        v
    }

    /// The leaf block `name` is (or would be) stored in.
    pub fn leaf_for(&self, name: &[u8]) -> Result<u64> {
        let h = self.hdr();
        let key = self.fat_key(&h, name)?;
        self.ptr_get(&h, hash_idx(key.hash, h.shift))
    }

    /// Whether block `id` is loaded.
    pub fn has_block(&self, id: u64) -> bool {
        self.blocks.contains_key(&id)
    }

    /// Bring block `id` (host byte order) into a sparse object.
    pub fn insert_block(&mut self, id: u64, b: Vec<u8>) -> Result<()> {
        if b.len() != self.block_size {
            return Err(corrupt(format!("block {id} has {} bytes", b.len())));
        }
        self.blocks.insert(id, b);
        Ok(())
    }

    /// Is this a microzap?
    pub fn is_micro(&self) -> bool {
        self.micro.is_some()
    }

    /// Add an entry; an error if the name exists.
    pub fn add(&mut self, name: &[u8], int_len: u8, value: &[u64]) -> Result<()> {
        self.put(name, int_len, value, Mode::Add)
    }

    /// Add an entry or replace its value.
    pub fn update(&mut self, name: &[u8], int_len: u8, value: &[u64]) -> Result<()> {
        self.put(name, int_len, value, Mode::Update)
    }

    /// Remove an entry; false if it was absent.
    pub fn remove(&mut self, name: &[u8]) -> Result<bool> {
        if let Some(mi) = &mut self.micro {
            let b0 = self.blocks.get_mut(&0).expect("microzap block 0");
            return Ok(match mi.find(b0, name) {
                Some((slot, h, cd)) => {
                    let o = mz_off(slot);
                    b0[o..o + MZAP_ENT_LEN].fill(0);
                    mi.by_hash.remove(&(h, cd));
                    mi.free.insert(slot);
                    self.dirty.insert(0);
                    true
                }
                None => false,
            });
        }
        let mut h = self.hdr();
        let key = match self.fat_key(&h, name) {
            Ok(k) => k,
            Err(_) => return Ok(false),
        };
        self.finish_ptrtbl_copy(&mut h)?;
        let blk = self.ptr_get(&h, hash_idx(key.hash, h.shift))?;
        let g = self.geo();
        let buf = self
            .blocks
            .get_mut(&blk)
            .ok_or_else(|| corrupt(format!("leaf {blk} missing")))?;
        let mut l = Leaf { b: buf, g };
        let found = l.r().find(&key)?;
        if let Some((link, c)) = found {
            l.remove(link, c)?;
            self.dirty.insert(blk);
            h.nentries -= 1;
            // The obstacle to a shrink may be gone (directory values are
            // always microzap-shaped; only a name can stand in the way).
            if name.len() >= MZAP_NAME_LEN {
                self.no_shrink = false;
            }
        }
        self.put_hdr(&h);
        Ok(found.is_some())
    }

    /// Make a fat ZAP a microzap again when its entries fit one in at
    /// most half of `micro_max` (see the module documentation); true if it
    /// did. Cheap when nothing is to be done: the entries are only listed
    /// once the count is low enough, and not again after a failed try
    /// until an entry is added or one with a long name removed.
    pub fn shrink(&mut self) -> Result<bool> {
        if self.micro.is_some() || self.no_shrink {
            return Ok(false);
        }
        let h = self.hdr();
        let n = h.nentries as usize;
        let need = ((n + 1) * MZAP_ENT_LEN).div_ceil(MZAP_GROW) * MZAP_GROW;
        if h.flags != 0 || need > self.micro_max / 2 {
            return Ok(false);
        }
        // Room for as many entries again (within the limit): the next adds
        // need not grow the block at once.
        let size = (((2 * n + 1) * MZAP_ENT_LEN).div_ceil(MZAP_GROW) * MZAP_GROW)
            .min(self.micro_max)
            .max(need);
        let ents = self.list()?;
        let fits = |e: &ZapEntry| {
            e.int_len == 8
                && e.value.len() == 1
                && check_str_name_max(&e.name, MZAP_NAME_LEN).is_ok()
        };
        if ents.len() != n || !ents.iter().all(fits) {
            self.no_shrink = true;
            return Ok(false);
        }
        let mut b0 = vec![0u8; size];
        p64(&mut b0, 0, ZBT_MICRO);
        p64(&mut b0, 8, h.salt);
        p64(&mut b0, 16, h.normflags);
        for (slot, e) in ents.iter().enumerate() {
            let o = mz_off(slot as u32);
            p64(&mut b0, o, e.value[0]);
            p32(&mut b0, o + 8, e.cd);
            b0[o + 14..o + 14 + e.name.len()].copy_from_slice(&e.name);
        }
        let mi = MicroIndex::build(&b0).map_err(|e| e.context("zap shrink"))?;
        self.dirty.extend(self.blocks.keys().copied());
        self.blocks = BTreeMap::from([(0, b0)]);
        self.block_size = size;
        self.micro = Some(mi);
        Ok(true)
    }

    /// The name normalization flags (case folding, Unicode forms): 0
    /// when names match byte for byte.
    pub fn normflags(&self) -> u64 {
        match &self.micro {
            Some(mi) => mi.normflags,
            None => self.hdr().normflags,
        }
    }

    /// Look a name up (exact byte match).
    pub fn lookup(&self, name: &[u8]) -> Result<Option<ZapEntry>> {
        if let Some(mi) = &self.micro {
            let b0 = &self.blocks[&0];
            return Ok(mi
                .find(b0, name)
                .map(|(slot, _, _)| MicroIndex::entry(b0, slot)));
        }
        let h = self.hdr();
        let key = match self.fat_key(&h, name) {
            Ok(k) => k,
            Err(_) => return Ok(None),
        };
        let blk = self.ptr_get(&h, hash_idx(key.hash, h.shift))?;
        let l = self.leaf_ref(blk)?;
        match l.find(&key)? {
            Some((_, c)) => Ok(Some(l.entry(c, key.uint64)?)),
            None => Ok(None),
        }
    }

    /// Every entry (microzap: slot order; fat: leaf by leaf in pointer-table order, bucket order).
    pub fn list(&self) -> Result<Vec<ZapEntry>> {
        if let Some(mi) = &self.micro {
            let b0 = &self.blocks[&0];
            let mut slots: Vec<u32> = mi.by_hash.values().copied().collect();
            slots.sort_unstable();
            return Ok(slots
                .into_iter()
                .map(|s| MicroIndex::entry(b0, s))
                .collect());
        }
        let h = self.hdr();
        let mut out = Vec::with_capacity(h.nentries as usize);
        let mut idx = 0u64;
        while idx < 1u64 << h.shift {
            let blk = self.ptr_get(&h, idx)?;
            let l = self.leaf_ref(blk)?;
            if l.prefix_len() > h.shift {
                return Err(corrupt(format!("leaf {blk} prefix_len > table shift")));
            }
            l.entries(h.uint64_key(), &mut out)?;
            idx += 1u64 << (h.shift - l.prefix_len());
        }
        Ok(out)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match &self.micro {
            Some(mi) => mi.by_hash.len(),
            None => self.hdr().nentries as usize,
        }
    }

    /// No entries?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block ids changed since the last call. Ids no longer in `blocks` became holes.
    pub fn take_dirty(&mut self) -> BTreeSet<u64> {
        std::mem::take(&mut self.dirty)
    }

    /// Highest block id in use (for dn_maxblkid).
    pub fn max_blkid(&self) -> u64 {
        let last = self.blocks.keys().next_back().copied().unwrap_or(0);
        if self.micro.is_some() {
            last
        } else {
            last.max(self.hdr().freeblk.saturating_sub(1))
        }
    }

    // ---------------------------------------------------------------- internals

    fn put(&mut self, name: &[u8], int_len: u8, value: &[u64], mode: Mode) -> Result<()> {
        let vbytes = encode_value(int_len, value)?;
        self.no_shrink = false;
        if let Some(mi) = &self.micro {
            check_str_name(name)?;
            let b0 = &self.blocks[&0];
            let found = mi.find(b0, name);
            if found.is_some() && mode == Mode::Add {
                return Err(exists_err(name));
            }
            let fits = int_len == 8 && value.len() == 1 && name.len() < MZAP_NAME_LEN;
            match found {
                Some((slot, _, _)) if fits => {
                    let b0 = self.blocks.get_mut(&0).expect("block 0");
                    p64(b0, mz_off(slot), value[0]);
                    self.dirty.insert(0);
                    return Ok(());
                }
                None if fits => {
                    let h = zap::zap_hash(mi.salt, name, mi.normflags, 28);
                    let same = mi.same_hash(h).count();
                    let canfit = (same + 1) * MZAP_ENT_CHUNKS < leaf_chunks(self.fat_shift);
                    let room = !mi.free.is_empty() || self.block_size + MZAP_GROW <= self.micro_max;
                    if canfit && room {
                        self.micro_insert(name, h, value[0]);
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.upgrade()?;
        }
        let mut h = self.hdr();
        let key = self.fat_key(&h, name)?;
        // New or updated entries keep the classic name limit.
        if !key.uint64 {
            check_str_name(name)?;
        }
        let r = self.fat_put(&mut h, &key, int_len, &vbytes, value.len(), mode);
        self.put_hdr(&h);
        r
    }

    /// Insert a new microzap entry (the caller checked it fits; grows the block if needed).
    fn micro_insert(&mut self, name: &[u8], h: u64, value: u64) {
        let mi = self.micro.as_mut().expect("microzap");
        let b0 = self.blocks.get_mut(&0).expect("block 0");
        if mi.free.is_empty() {
            self.block_size += MZAP_GROW;
            b0.resize(self.block_size, 0);
            let n = (self.block_size / MZAP_ENT_LEN - 1) as u32;
            mi.free.extend(mi.nslots..n);
            mi.nslots = n;
        }
        let mut cd = 0u32;
        for x in mi.same_hash(h) {
            if x != cd {
                break;
            }
            cd += 1;
        }
        let slot = mi.free.pop_first().expect("free slot");
        let o = mz_off(slot);
        b0[o..o + MZAP_ENT_LEN].fill(0);
        p64(b0, o, value);
        p32(b0, o + 8, cd);
        b0[o + 14..o + 14 + name.len()].copy_from_slice(name);
        mi.by_hash.insert((h, cd), slot);
        self.dirty.insert(0);
    }

    /// Convert the microzap into a fat ZAP holding the same entries (with their cds).
    fn upgrade(&mut self) -> Result<()> {
        if !(10..=17).contains(&self.fat_shift) {
            return Err(Error::Invalid(format!(
                "fat zap block shift {} (10..=17)",
                self.fat_shift
            )));
        }
        let mi = self.micro.as_ref().expect("microzap");
        let b0 = &self.blocks[&0];
        let mut f = ZapObject::new_fat_with_shift(mi.salt, mi.normflags, 0, self.fat_shift);
        f.micro_max = self.micro_max;
        for slot in 0..mi.nslots {
            let name = mz_name(b0, slot);
            if name.is_empty() {
                continue;
            }
            let value = g64(b0, mz_off(slot));
            let cd = g32(b0, mz_off(slot) + 8);
            let mut h = f.hdr();
            let key = f.fat_key(&h, name)?;
            let r = f.fat_put(&mut h, &key, 8, &value.to_be_bytes(), 1, Mode::AddCd(cd));
            f.put_hdr(&h);
            r.map_err(|e| e.context("zap upgrade"))?;
        }
        self.block_size = f.block_size;
        self.dirty.extend(f.blocks.keys().copied());
        self.blocks = f.blocks;
        self.micro = None;
        Ok(())
    }

    fn geo(&self) -> Geo {
        Geo::new(self.block_size)
    }

    fn hdr(&self) -> Hdr {
        Hdr::read(&self.blocks[&0])
    }

    fn put_hdr(&mut self, h: &Hdr) {
        let b0 = self.blocks.get_mut(&0).expect("block 0");
        if Hdr::read(b0) != *h {
            h.write(b0);
            self.dirty.insert(0);
        }
    }

    fn leaf_ref(&self, blk: u64) -> Result<LeafRef<'_>> {
        if blk == 0 {
            return Err(corrupt("pointer table points at block 0"));
        }
        let b = self
            .blocks
            .get(&blk)
            .ok_or_else(|| corrupt(format!("leaf {blk} missing")))?;
        if b.len() != self.block_size || g64(b, 0) != ZBT_LEAF {
            return Err(corrupt(format!("block {blk} is not a leaf")));
        }
        Ok(LeafRef { b, g: self.geo() })
    }

    fn fat_key(&self, h: &Hdr, name: &[u8]) -> Result<Key> {
        if h.uint64_key() {
            if name.is_empty() || !name.len().is_multiple_of(8) || name.len() > ZAP_MAXNAMELEN {
                return Err(Error::Invalid(format!(
                    "uint64 zap key of {} bytes",
                    name.len()
                )));
            }
            let words: Vec<u64> = name
                .chunks(8)
                .map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")))
                .collect();
            return Ok(Key {
                stored: name.to_vec(),
                numints: words.len(),
                hash: zap::zap_hash_u64_key(h.salt, &words, h.flags),
                uint64: true,
            });
        }
        check_str_name_max(name, ZAP_MAXNAMELEN_NEW)?;
        let mut stored = Vec::with_capacity(name.len() + 1);
        stored.extend_from_slice(name);
        stored.push(0);
        Ok(Key {
            numints: stored.len(),
            stored,
            hash: zap::zap_hash(h.salt, name, h.normflags, h.hashbits() as u32),
            uint64: false,
        })
    }

    fn ptr_get(&self, h: &Hdr, idx: u64) -> Result<u64> {
        let g = self.geo();
        if h.numblks == 0 {
            return Ok(g64(
                &self.blocks[&0],
                self.block_size / 2 + 8 * idx as usize,
            ));
        }
        let per = g.bs as u64 - 3;
        let blk = h.blk + (idx >> per);
        let b = self
            .blocks
            .get(&blk)
            .ok_or_else(|| corrupt(format!("pointer table block {blk} missing")))?;
        Ok(g64(b, 8 * (idx & ((1 << per) - 1)) as usize))
    }

    /// Set `count` pointer-table entries from `start` to `val`.
    fn ptr_set_range(&mut self, h: &Hdr, start: u64, count: u64, val: u64) -> Result<()> {
        let g = self.geo();
        if h.numblks == 0 {
            let b0 = self.blocks.get_mut(&0).expect("block 0");
            for i in start..start + count {
                p64(b0, self.block_size / 2 + 8 * i as usize, val);
            }
            self.dirty.insert(0);
            return Ok(());
        }
        let per = g.bs as u64 - 3;
        let mut i = start;
        while i < start + count {
            let blk = h.blk + (i >> per);
            let b = self
                .blocks
                .get_mut(&blk)
                .ok_or_else(|| corrupt(format!("pointer table block {blk} missing")))?;
            let blk_end = ((i >> per) + 1) << per;
            let end = blk_end.min(start + count);
            for j in i..end {
                p64(b, 8 * (j & ((1 << per) - 1)) as usize, val);
            }
            self.dirty.insert(blk);
            i = end;
        }
        Ok(())
    }

    /// Complete a pointer-table copy that OpenZFS left in progress (`zt_nextblk != 0`).
    fn finish_ptrtbl_copy(&mut self, h: &mut Hdr) -> Result<()> {
        if h.nextblk == 0 {
            return Ok(());
        }
        let newblk = h.nextblk;
        self.copy_ptrtbl(h, newblk)
    }

    /// Copy the external table (h.blk, h.numblks) doubled into 2*numblks blocks at `newblk`,
    /// free the old blocks and switch the header over.
    fn copy_ptrtbl(&mut self, h: &mut Hdr, newblk: u64) -> Result<()> {
        let bsize = self.block_size;
        let half = bsize / 16; // entries in half a block
        for b in 0..h.numblks {
            let old = self
                .blocks
                .get(&(h.blk + b))
                .ok_or_else(|| corrupt(format!("pointer table block {} missing", h.blk + b)))?;
            let mut lo = vec![0u8; bsize];
            let mut hi = vec![0u8; bsize];
            for i in 0..half {
                let (v1, v2) = (g64(old, 8 * i), g64(old, 8 * (i + half)));
                p64(&mut lo, 16 * i, v1);
                p64(&mut lo, 16 * i + 8, v1);
                p64(&mut hi, 16 * i, v2);
                p64(&mut hi, 16 * i + 8, v2);
            }
            for (k, nb) in [(0, lo), (1, hi)] {
                self.blocks.insert(newblk + 2 * b + k, nb);
                self.dirty.insert(newblk + 2 * b + k);
            }
        }
        for b in 0..h.numblks {
            self.blocks.remove(&(h.blk + b));
            self.dirty.insert(h.blk + b);
        }
        h.blk = newblk;
        h.numblks *= 2;
        h.shift += 1;
        h.nextblk = 0;
        h.copied = 0;
        Ok(())
    }

    /// Double the pointer table.
    fn grow_ptrtbl(&mut self, h: &mut Hdr) -> Result<()> {
        if h.shift >= h.hashbits() - 2 {
            return Err(Error::Invalid(format!(
                "zap pointer table cannot grow past {} bits",
                h.shift
            )));
        }
        let g = self.geo();
        let half = self.block_size / 2;
        if h.numblks == 0 {
            let n = 1usize << h.shift;
            if h.shift < g.bs as u64 - 4 {
                // Room left in the embedded table: double in place.
                let b0 = self.blocks.get_mut(&0).expect("block 0");
                for i in (0..n).rev() {
                    let v = g64(b0, half + 8 * i);
                    p64(b0, half + 16 * i, v);
                    p64(b0, half + 16 * i + 8, v);
                }
                h.shift += 1;
                self.dirty.insert(0);
                return Ok(());
            }
            let newblk = h.alloc_blocks(1);
            let b0 = &self.blocks[&0];
            let mut nb = vec![0u8; self.block_size];
            for i in 0..n {
                let v = g64(b0, half + 8 * i);
                p64(&mut nb, 16 * i, v);
                p64(&mut nb, 16 * i + 8, v);
            }
            self.blocks.insert(newblk, nb);
            self.dirty.insert(newblk);
            h.blk = newblk;
            h.numblks = 1;
            h.shift += 1;
            return Ok(());
        }
        let newblk = h.alloc_blocks(2 * h.numblks);
        self.copy_ptrtbl(h, newblk)
    }

    /// Split the leaf at `blk` (which holds `hash`), growing the pointer table first if needed.
    fn expand_leaf(&mut self, h: &mut Hdr, blk: u64, hash: u64) -> Result<()> {
        let g = self.geo();
        let (old_plen, common) = {
            let l = self.leaf_ref(blk)?;
            let mut common = 64u64;
            for i in 0..g.nchunks as u16 {
                if l.ctype(i) == ZAP_CHUNK_ENTRY {
                    common = common.min((l.hash(i) ^ hash).leading_zeros() as u64);
                }
            }
            (l.prefix_len(), common)
        };
        // Separating these entries needs prefix_len common+1, within the table's reach.
        if common + 1 > h.hashbits() - 2 {
            return Err(Error::Invalid(format!(
                "zap leaf {blk} is full of entries sharing {common} hash bits"
            )));
        }
        if old_plen == h.shift {
            self.grow_ptrtbl(h)?;
        }
        let prefix_diff = h.shift - (old_plen + 1);
        let sibling = (hash_idx(hash, old_plen + 1) | 1) << prefix_diff;
        let newblk = h.alloc_blocks(1);
        h.nleafs += 1;
        let sorted = h.normflags != 0;
        let mut nb = vec![0u8; self.block_size];
        let mut nl = Leaf { b: &mut nb, g };
        nl.init(sorted);
        {
            let ob = self.blocks.get_mut(&blk).expect("leaf");
            Leaf { b: ob, g }.split(&mut nl, sorted);
        }
        self.blocks.insert(newblk, nb);
        self.dirty.insert(blk);
        self.dirty.insert(newblk);
        self.ptr_set_range(h, sibling, 1u64 << prefix_diff, newblk)
    }

    /// Add or update a fat ZAP entry. `h` is the header, written back by the caller.
    fn fat_put(
        &mut self,
        h: &mut Hdr,
        key: &Key,
        int_len: u8,
        vbytes: &[u8],
        nvalues: usize,
        mode: Mode,
    ) -> Result<()> {
        let g = self.geo();
        let need = 1 + nch(key.stored.len()) + nch(vbytes.len());
        if need > g.nchunks {
            return Err(Error::Invalid(format!(
                "zap entry needs {need} chunks, a leaf has {}",
                g.nchunks
            )));
        }
        self.finish_ptrtbl_copy(h)?;
        let blk = loop {
            let blk = self.ptr_get(h, hash_idx(key.hash, h.shift))?;
            self.leaf_ref(blk)?;
            let buf = self.blocks.get_mut(&blk).expect("leaf");
            let mut l = Leaf { b: buf, g };
            let nfree = l.r().nfree();
            match l.r().find(key)? {
                Some(_) if mode != Mode::Update => {
                    let n = key.stored.len() - usize::from(!key.uint64);
                    return Err(exists_err(&key.stored[..n]));
                }
                Some((_, c)) => {
                    let old = nch(l.r().f16(c, LE_VALUE_N) as usize * l.r().intlen(c) as usize);
                    if nfree + old >= nch(vbytes.len()) {
                        l.set_value(c, int_len, vbytes, nvalues)?;
                        self.dirty.insert(blk);
                        break blk;
                    }
                }
                None => {
                    if nfree >= need {
                        let cd = match mode {
                            Mode::AddCd(cd) => cd,
                            _ => l.r().lowest_cd(key.hash)?,
                        };
                        l.create(key, cd, int_len, vbytes, nvalues);
                        self.dirty.insert(blk);
                        h.nentries += 1;
                        break blk;
                    }
                }
            }
            self.expand_leaf(h, blk, key.hash)?;
        };
        let l = self.leaf_ref(blk)?;
        if l.prefix_len() == h.shift && l.nfree() < ZAP_LEAF_LOW_WATER && h.shift < h.hashbits() - 2
        {
            self.grow_ptrtbl(h)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- verification

    /// Check every invariant listed in the module documentation.
    pub fn verify(&self) -> Result<()> {
        match &self.micro {
            Some(mi) => self.verify_micro(mi),
            None => self.verify_fat(),
        }
    }

    fn verify_micro(&self, mi: &MicroIndex) -> Result<()> {
        if self.blocks.len() != 1 {
            return Err(corrupt("microzap with more than one block"));
        }
        let b0 = self.blocks.get(&0).ok_or_else(|| corrupt("no block 0"))?;
        if b0.len() != self.block_size {
            return Err(corrupt("microzap block size mismatch"));
        }
        let fresh = MicroIndex::build(b0)?;
        if fresh.by_hash != mi.by_hash || fresh.free != mi.free || fresh.nslots != mi.nslots {
            return Err(corrupt("microzap index out of date"));
        }
        Ok(())
    }

    fn verify_fat(&self) -> Result<()> {
        let bsize = self.block_size;
        if !bsize.is_power_of_two() || !(512..=1 << 17).contains(&bsize) {
            return Err(corrupt(format!("fat zap block size {bsize}")));
        }
        for (id, b) in &self.blocks {
            if b.len() != bsize {
                return Err(corrupt(format!("block {id} has {} bytes", b.len())));
            }
        }
        let b0 = self.blocks.get(&0).ok_or_else(|| corrupt("no block 0"))?;
        if !matches!(zap::parse_header(b0, false)?, ZapHeader::Fat(_)) {
            return Err(corrupt("block 0 is not a fat zap header"));
        }
        let h = Hdr::read(b0);
        let g = self.geo();
        let bs = g.bs as u64;
        if h.freeblk < 2 {
            return Err(corrupt(format!("zap_freeblk {}", h.freeblk)));
        }
        if let Some(&last) = self.blocks.keys().next_back() {
            if last >= h.freeblk {
                return Err(corrupt(format!(
                    "block {last} at or beyond zap_freeblk {}",
                    h.freeblk
                )));
            }
        }
        if h.numblks == 0 {
            if h.shift > bs - 4 || h.nextblk != 0 || h.blk != 0 {
                return Err(corrupt("bad embedded pointer table"));
            }
        } else {
            if h.shift < bs - 3 || h.numblks != 1 << (h.shift - (bs - 3)) {
                return Err(corrupt(format!(
                    "external pointer table of {} blocks for shift {}",
                    h.numblks, h.shift
                )));
            }
            if h.blk == 0 || h.blk + h.numblks > h.freeblk {
                return Err(corrupt("external pointer table out of range"));
            }
            for b in h.blk..h.blk + h.numblks {
                if !self.blocks.contains_key(&b) {
                    return Err(corrupt(format!("pointer table block {b} missing")));
                }
            }
            if h.nextblk != 0
                && (h.copied > h.numblks
                    || h.nextblk + 2 * h.numblks > h.freeblk
                    || h.nextblk < h.blk + h.numblks && h.blk < h.nextblk + 2 * h.numblks)
            {
                return Err(corrupt("pointer table copy out of range"));
            }
        }
        let mut leaves = BTreeSet::new();
        let mut total = 0u64;
        let mut idx = 0u64;
        while idx < 1u64 << h.shift {
            let blk = self.ptr_get(&h, idx)?;
            if h.is_table_block(blk) {
                return Err(corrupt(format!(
                    "pointer table points at table block {blk}"
                )));
            }
            let l = self.leaf_ref(blk)?;
            if g32(l.b, LH_MAGIC) != ZAP_LEAF_MAGIC {
                return Err(corrupt(format!("leaf {blk} bad magic")));
            }
            let plen = l.prefix_len();
            if plen > h.shift {
                return Err(corrupt(format!(
                    "leaf {blk} prefix_len {plen} > {}",
                    h.shift
                )));
            }
            let run = 1u64 << (h.shift - plen);
            if !idx.is_multiple_of(run) || l.prefix() != idx >> (h.shift - plen) {
                return Err(corrupt(format!(
                    "leaf {blk} prefix {:#x}/{plen} at table index {idx}",
                    l.prefix()
                )));
            }
            for j in idx..idx + run {
                if self.ptr_get(&h, j)? != blk {
                    return Err(corrupt(format!("table entry {j} breaks leaf {blk}'s run")));
                }
            }
            if !leaves.insert(blk) {
                return Err(corrupt(format!("leaf {blk} referenced by two runs")));
            }
            total += verify_leaf(&l, &h).map_err(|e| e.context(&format!("zap leaf {blk}")))?;
            idx += run;
        }
        if h.nleafs != leaves.len() as u64 {
            return Err(corrupt(format!(
                "zap_num_leafs {} but {} leaves",
                h.nleafs,
                leaves.len()
            )));
        }
        if h.nentries != total {
            return Err(corrupt(format!(
                "zap_num_entries {} but leaves hold {total}",
                h.nentries
            )));
        }
        for (id, b) in &self.blocks {
            if *id != 0
                && !h.is_table_block(*id)
                && !leaves.contains(id)
                && b.iter().any(|&x| x != 0)
            {
                return Err(corrupt(format!("stray block {id}")));
            }
        }
        Ok(())
    }
}

/// Check one leaf; returns its entry count.
fn verify_leaf(l: &LeafRef<'_>, h: &Hdr) -> Result<u64> {
    let n = l.g.nchunks;
    let mut seen = vec![false; n];
    let mut claim = |c: u16, what: &str| -> Result<()> {
        let i = c as usize;
        if i >= n {
            return Err(corrupt(format!("{what} chunk {c} out of range")));
        }
        if seen[i] {
            return Err(corrupt(format!("chunk {c} reached twice ({what})")));
        }
        seen[i] = true;
        Ok(())
    };
    // Free list.
    let mut c = l.freelist();
    let mut nfree = 0;
    while c != CHAIN_END {
        claim(c, "free")?;
        l.check(c, ZAP_CHUNK_FREE)?;
        nfree += 1;
        c = l.f16(c, LA_NEXT);
    }
    if nfree != l.nfree() {
        return Err(corrupt(format!(
            "lh_nfree {} but {nfree} free chunks",
            l.nfree()
        )));
    }
    let hashbits = h.hashbits();
    let low_mask = if hashbits >= 64 {
        0
    } else {
        (1u64 << (64 - hashbits)) - 1
    };
    let sorted = l.flags() & ZLF_ENTRIES_CDSORTED != 0;
    let plen = l.prefix_len();
    let mut used = 0usize;
    let mut ids = HashSet::new();
    let mut count = 0u64;
    for b in 0..l.g.nhash {
        let mut c = l.head(b);
        let mut prev_cd: Option<u32> = None;
        while c != CHAIN_END {
            claim(c, "entry")?;
            l.check(c, ZAP_CHUNK_ENTRY)?;
            used += 1;
            count += 1;
            let eh = l.hash(c);
            let cd = l.cd(c);
            if l.bucket(eh) != b {
                return Err(corrupt(format!("entry {c} in bucket {b}, hash {eh:#x}")));
            }
            if hash_idx(eh, plen) != l.prefix() {
                return Err(corrupt(format!(
                    "entry {c} hash {eh:#x} outside the prefix"
                )));
            }
            if eh & low_mask != 0 {
                return Err(corrupt(format!("entry {c} hash {eh:#x} has low bits")));
            }
            if sorted && prev_cd.is_some_and(|p| p > cd) {
                return Err(corrupt(format!("bucket {b} not sorted by cd")));
            }
            prev_cd = Some(cd);
            if !ids.insert((eh, cd)) {
                return Err(corrupt(format!("hash {eh:#x} cd {cd} used twice")));
            }
            let il = l.intlen(c);
            if !matches!(il, 1 | 2 | 4 | 8) {
                return Err(corrupt(format!("entry {c} int length {il}")));
            }
            let name_len = l.f16(c, LE_NAME_N) as usize * if h.uint64_key() { 8 } else { 1 };
            let value_len = l.f16(c, LE_VALUE_N) as usize * il as usize;
            for (first, len) in [
                (l.f16(c, LE_NAME), name_len),
                (l.f16(c, LE_VALUE), value_len),
            ] {
                let mut a = first;
                let mut k = 0;
                while a != CHAIN_END {
                    claim(a, "array")?;
                    l.check(a, ZAP_CHUNK_ARRAY)?;
                    k += 1;
                    a = l.f16(a, LA_NEXT);
                }
                used += k;
                if k < nch(len) {
                    return Err(corrupt(format!(
                        "entry {c}: array of {k} chunks for {len} bytes"
                    )));
                }
            }
            let stored = l.array_read(l.f16(c, LE_NAME), name_len)?;
            let expect = if h.uint64_key() {
                let words: Vec<u64> = stored
                    .chunks(8)
                    .map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")))
                    .collect();
                Some(zap::zap_hash_u64_key(h.salt, &words, h.flags))
            } else {
                if stored.last() != Some(&0) || stored[..stored.len() - 1].contains(&0) {
                    return Err(corrupt(format!("entry {c}: name not a C string")));
                }
                let name = &stored[..stored.len() - 1];
                // Our normalization is ASCII-only; skip the check where it may differ.
                (h.normflags == 0 || name.is_ascii())
                    .then(|| zap::zap_hash(h.salt, name, h.normflags, hashbits as u32))
            };
            if expect.is_some_and(|x| x != eh) {
                return Err(corrupt(format!("entry {c}: hash does not match its name")));
            }
            c = l.f16(c, LE_NEXT);
        }
    }
    if count != l.nentries() as u64 {
        return Err(corrupt(format!(
            "lh_nentries {} but {count} entries",
            l.nentries()
        )));
    }
    if nfree + used != n {
        return Err(corrupt(format!("{nfree} free + {used} used chunks != {n}")));
    }
    Ok(count)
}

/// Byteswap a microzap block in place.
fn swap_micro(b: &mut [u8]) {
    for o in (0..MZAP_ENT_LEN).step_by(8) {
        b[o..o + 8].reverse();
    }
    for o in (MZAP_ENT_LEN..b.len()).step_by(MZAP_ENT_LEN) {
        b[o..o + 8].reverse();
        b[o + 8..o + 12].reverse();
        b[o + 12..o + 14].reverse();
    }
}

fn swap_u64s(b: &mut [u8]) {
    for w in b.chunks_exact_mut(8) {
        w.reverse();
    }
}

/// Byteswap a leaf block in place (chunk types are single bytes, so order-independent).
fn swap_leaf(b: &mut [u8], g: Geo) -> Result<()> {
    for (o, n) in [
        (0, 8),
        (8, 8),
        (16, 8),
        (24, 4),
        (28, 2),
        (30, 2),
        (32, 2),
        (34, 2),
    ] {
        b[o..o + n].reverse();
    }
    for i in 0..g.nhash {
        let o = g.hoff(i);
        b[o..o + 2].reverse();
    }
    for c in 0..g.nchunks as u16 {
        let o = g.coff(c);
        match b[o] {
            ZAP_CHUNK_ENTRY => {
                for (f, n) in [(2, 2), (4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 8)] {
                    b[o + f..o + f + n].reverse();
                }
            }
            ZAP_CHUNK_ARRAY | ZAP_CHUNK_FREE => b[o + LA_NEXT..o + LA_NEXT + 2].reverse(),
            t => return Err(corrupt(format!("chunk {c} of unknown type {t}"))),
        }
    }
    Ok(())
}

/// Byteswap every block of a fat ZAP: header and pointer-table blocks are uint64 arrays, the
/// rest leaves (all-zero blocks are left alone).
fn swap_fat(block_size: usize, blocks: &mut BTreeMap<u64, Vec<u8>>) -> Result<()> {
    if !block_size.is_power_of_two() || !(512..=1 << 17).contains(&block_size) {
        return Err(corrupt(format!("fat zap block size {block_size}")));
    }
    let g = Geo::new(block_size);
    let b0 = blocks.get_mut(&0).expect("block 0");
    swap_u64s(b0);
    let h = Hdr::read(b0);
    for (id, b) in blocks.iter_mut() {
        if *id == 0 {
            continue;
        }
        if b.len() != block_size {
            return Err(corrupt(format!("block {id} has {} bytes", b.len())));
        }
        if h.is_table_block(*id) {
            swap_u64s(b);
        } else if b.iter().any(|&x| x != 0) {
            swap_leaf(b, g).map_err(|e| e.context(&format!("zap leaf {id}")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zap::U8_TEXTPREP_TOUPPER;
    use std::collections::BTreeMap as Map;

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

    type Model = Map<Vec<u8>, (u8, Vec<u64>)>;

    /// Read the object back with the independent reader in `zap.rs`.
    fn reader_list(z: &ZapObject) -> Vec<ZapEntry> {
        zap::list(&z.blocks[&0], false, &mut |n| {
            z.blocks
                .get(&n)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("block {n}")))
        })
        .unwrap()
    }

    fn as_model(l: Vec<ZapEntry>) -> Model {
        let n = l.len();
        let m: Model = l
            .into_iter()
            .map(|e| (e.name, (e.int_len, e.value)))
            .collect();
        assert_eq!(m.len(), n, "duplicate names listed");
        m
    }

    /// Every entry's cd, by name.
    fn cds_of(z: &ZapObject) -> Map<Vec<u8>, u32> {
        z.list()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.cd))
            .collect()
    }

    fn check_all(z: &ZapObject, model: &Model) {
        z.verify().unwrap();
        assert_eq!(z.len(), model.len());
        assert_eq!(&as_model(z.list().unwrap()), model);
        assert_eq!(&as_model(reader_list(z)), model);
        let b0 = &z.blocks[&0];
        for (name, (il, v)) in model.iter().take(50) {
            let e = z.lookup(name).unwrap().unwrap();
            assert_eq!((&e.int_len, &e.value), (il, v));
            let e2 = zap::lookup(b0, false, name, &mut |n| Ok(z.blocks[&n].clone()))
                .unwrap()
                .unwrap();
            assert_eq!(e, e2);
        }
    }

    /// A pool of names: varied lengths (1..=255), the 49/50-byte microzap edge, non-ASCII UTF-8.
    fn names(rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
        let mut out = BTreeSet::new();
        out.insert(vec![b'x'; 49]);
        out.insert(vec![b'y'; 50]);
        out.insert("é".repeat(24).into_bytes()); // 48 bytes
        out.insert("日本語のファイル名".as_bytes().to_vec());
        out.insert(vec![b'z'; 255]);
        while out.len() < n {
            let len = match rng.below(10) {
                0..=5 => 1 + rng.below(20),
                6 | 7 => 20 + rng.below(40),
                8 => 45 + rng.below(10),
                _ => 60 + rng.below(196),
            } as usize;
            let mut s = String::new();
            while s.len() < len {
                let ch = match rng.below(12) {
                    0 => 'ß',
                    1 => 'ж',
                    2 => '€',
                    3 => '😀',
                    _ => (b'a' + rng.below(26) as u8) as char,
                };
                if s.len() + ch.len_utf8() > len {
                    break;
                }
                s.push(ch);
            }
            if !s.is_empty() {
                out.insert(s.into_bytes());
            }
        }
        out.into_iter().collect()
    }

    fn value(rng: &mut Rng, micro_only: bool) -> (u8, Vec<u64>) {
        if micro_only {
            return (8, vec![rng.next()]);
        }
        match rng.below(10) {
            0..=4 => (8, vec![rng.next()]),
            5 => (8, (0..1 + rng.below(40)).map(|_| rng.next()).collect()),
            6 | 7 => (1, (0..rng.below(300)).map(|_| rng.below(256)).collect()),
            8 => (
                2,
                (0..1 + rng.below(30)).map(|_| rng.below(65536)).collect(),
            ),
            _ => (
                4,
                (0..1 + rng.below(10)).map(|_| rng.below(1 << 32)).collect(),
            ),
        }
    }

    fn model_run(seed: u64, steps: usize, micro_only: bool, micro_max: usize, npool: usize) {
        let mut rng = Rng(seed);
        let pool = names(&mut rng, npool);
        let mut z = ZapObject::new_micro(rng.next() | 1, 0);
        z.micro_max = micro_max;
        let mut model = Model::new();
        let mut was_micro = true;
        let mut snap = Map::new();
        for step in 0..steps {
            let name = &pool[rng.below(pool.len() as u64) as usize];
            let long = micro_only && name.len() >= MZAP_NAME_LEN && rng.below(4) != 0;
            let name = if long { &pool[0] } else { name };
            match rng.below(10) {
                0..=3 => {
                    let (il, v) = value(&mut rng, micro_only);
                    let r = z.add(name, il, &v);
                    if model.contains_key(name) {
                        assert!(
                            matches!(r, Err(Error::Exists(ref s)) if s.contains("already exists"))
                        );
                    } else {
                        r.unwrap();
                        model.insert(name.clone(), (il, v));
                    }
                }
                4..=6 => {
                    let (il, v) = value(&mut rng, micro_only);
                    z.update(name, il, &v).unwrap();
                    model.insert(name.clone(), (il, v));
                }
                _ => {
                    assert_eq!(z.remove(name).unwrap(), model.remove(name).is_some());
                }
            }
            match model.get(name) {
                Some((il, v)) => {
                    let e = z.lookup(name).unwrap().unwrap();
                    assert_eq!((&e.int_len, &e.value), (il, v));
                }
                None => assert!(z.lookup(name).unwrap().is_none()),
            }
            if was_micro && !z.is_micro() {
                was_micro = false;
                check_all(&z, &model);
            }
            if step % 97 == 0 {
                check_all(&z, &model);
                // Every block that changed, appeared or vanished is reported dirty.
                let dirty = z.take_dirty();
                for id in snap.keys().chain(z.blocks.keys()) {
                    if snap.get(id) != z.blocks.get(id) {
                        assert!(dirty.contains(id), "block {id} changed but is not dirty");
                    }
                }
                snap = z.blocks.clone();
                assert_eq!(z.max_blkid(), *z.blocks.keys().next_back().unwrap());
            }
        }
        check_all(&z, &model);
        // Drain.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for k in keys {
            assert!(z.remove(&k).unwrap());
            model.remove(&k);
        }
        check_all(&z, &model);
        assert!(z.is_empty());
    }

    #[test]
    fn zap_write_model_mixed() {
        model_run(0x1234_5678_9abc_def1, 6000, false, DEFAULT_MICRO_MAX, 3000);
    }

    #[test]
    fn zap_write_model_micro_values() {
        // u64 values only: stays micro until the block would pass micro_max.
        model_run(0xfeed_f00d_1234_0001, 5000, true, DEFAULT_MICRO_MAX, 1500);
        model_run(0xfeed_f00d_1234_0002, 3000, true, 4096, 400);
    }

    #[test]
    fn a_fat_zap_shrinks_back_to_a_micro_zap() {
        // 3000 entries (fat), removed one by one: the ZAP stays fat while
        // its entries would need more than half of micro_max (1023 at 128
        // KiB), then becomes a microzap holding the same entries with the
        // same cds, read the same by the independent reader.
        let mut z = ZapObject::new_micro(0x77aa, 0);
        let mut model = Model::new();
        for i in 0..3000u64 {
            let name = format!("file-{i:05}").into_bytes();
            z.add(&name, 8, &[i | (8 << 60)]).unwrap();
            model.insert(name, (8, vec![i | (8 << 60)]));
        }
        assert!(!z.is_micro());
        let cds = cds_of(&z);
        let fat_blocks: BTreeSet<u64> = z.blocks.keys().copied().collect();
        z.take_dirty();
        for i in 0..3000u64 {
            let name = format!("file-{i:05}").into_bytes();
            assert!(z.remove(&name).unwrap());
            model.remove(&name);
            let shrunk = z.shrink().unwrap();
            let left = 2999 - i as usize;
            assert_eq!(shrunk, left == 1023, "after removing to {left}");
            assert_eq!(z.is_micro(), left <= 1023, "{left} entries");
            if shrunk {
                check_all(&z, &model);
                assert_eq!(
                    z.block_size,
                    2048 * 64,
                    "room for 2 x 1023 entries + header"
                );
                assert_eq!(z.blocks.keys().copied().collect::<Vec<_>>(), [0]);
                // Every fat block is dirty: block 0 rewritten, the rest holes.
                assert_eq!(z.take_dirty(), fat_blocks);
                for e in z.list().unwrap() {
                    assert_eq!(cds[&e.name], e.cd);
                }
            }
        }
        check_all(&z, &model);
        assert!(z.is_micro() && z.is_empty());

        // An entry no microzap can hold (a 50-byte name) keeps it fat
        // until that entry goes.
        let mut z = ZapObject::new_micro(0x77ab, 0);
        let mut model = Model::new();
        let long = vec![b'L'; 50];
        for i in 0..2100u64 {
            let name = format!("f{i}").into_bytes();
            z.add(&name, 8, &[i]).unwrap();
            model.insert(name, (8, vec![i]));
        }
        z.add(&long, 8, &[1]).unwrap();
        for i in 0..2000u64 {
            let name = format!("f{i}").into_bytes();
            z.remove(&name).unwrap();
            model.remove(&name);
            assert!(!z.shrink().unwrap());
        }
        assert!(!z.is_micro());
        z.remove(&long).unwrap();
        assert!(z.shrink().unwrap());
        assert!(z.is_micro());
        check_all(&z, &model);
        // Uint64-key ZAPs (flags) never become microzaps.
        let mut z = ZapObject::new_fat(9, 0, ZAP_FLAG_UINT64_KEY);
        assert!(!z.shrink().unwrap());
    }

    #[test]
    fn zap_write_micro_grows_then_upgrades() {
        let mut z = ZapObject::new_micro(0x5a17, 0);
        let mut model = Model::new();
        let mut size = 512;
        for i in 0..2047u64 {
            let name = format!("file-{i:05}").into_bytes();
            z.add(&name, 8, &[i]).unwrap();
            model.insert(name, (8, vec![i]));
            assert!(z.is_micro());
            let slots = size / 64 - 1;
            if i as usize + 1 > slots {
                size += 512;
            }
            assert_eq!(z.block_size, size, "after {} entries", i + 1);
            assert_eq!(z.blocks[&0].len(), size);
        }
        assert_eq!(z.block_size, 128 * 1024);
        check_all(&z, &model);
        let cds = cds_of(&z);
        z.take_dirty();
        z.add(b"one-more", 8, &[7]).unwrap();
        model.insert(b"one-more".to_vec(), (8, vec![7]));
        assert!(!z.is_micro());
        assert_eq!(z.block_size, 16384);
        let dirty = z.take_dirty();
        assert_eq!(dirty, z.blocks.keys().copied().collect());
        assert!(z.blocks.len() > 3, "upgrade of 2048 entries splits leaves");
        check_all(&z, &model);
        for e in z.list().unwrap() {
            if let Some(cd) = cds.get(&e.name) {
                assert_eq!(*cd, e.cd);
            }
        }
        match zap::parse_header(&z.blocks[&0], false).unwrap() {
            ZapHeader::Fat(h) => {
                assert_eq!(h.salt, 0x5a17);
                assert_eq!(h.num_entries, 2048);
                assert_eq!(h.freeblk - 1, z.max_blkid());
            }
            _ => panic!("not fat"),
        }
    }

    #[test]
    fn zap_write_micro_max_tunable() {
        let mut z = ZapObject::new_micro(99, 0);
        z.micro_max = 4096;
        for i in 0..63u64 {
            z.add(format!("n{i}").as_bytes(), 8, &[i]).unwrap();
        }
        assert!(z.is_micro());
        assert_eq!(z.block_size, 4096);
        z.add(b"n63", 8, &[63]).unwrap();
        assert!(!z.is_micro());
        assert_eq!(z.len(), 64);
        z.verify().unwrap();
        // Non-u64 values and long names upgrade immediately.
        let mut z = ZapObject::new_micro(99, 0);
        z.add(b"a", 8, &[1]).unwrap();
        z.update(b"a", 8, &[1, 2]).unwrap();
        assert!(!z.is_micro());
        let mut z = ZapObject::new_micro(99, 0);
        z.add(&[b'q'; 49], 8, &[1]).unwrap();
        assert!(z.is_micro());
        z.add(&[b'q'; 50], 8, &[1]).unwrap();
        assert!(!z.is_micro());
        assert_eq!(z.lookup(&[b'q'; 49]).unwrap().unwrap().value, vec![1]);
    }

    #[test]
    fn zap_write_collisions_and_cds() {
        // With TOUPPER, case variants share a hash and get distinct cds.
        for fat in [false, true] {
            let mut z = if fat {
                ZapObject::new_fat(0x77, U8_TEXTPREP_TOUPPER, 0)
            } else {
                ZapObject::new_micro(0x77, U8_TEXTPREP_TOUPPER)
            };
            z.add(b"snap", 8, &[1]).unwrap();
            z.add(b"SNAP", 8, &[2]).unwrap();
            z.add(b"Snap", 8, &[3]).unwrap();
            let cd = |z: &ZapObject, n: &[u8]| z.lookup(n).unwrap().unwrap().cd;
            assert_eq!(
                (cd(&z, b"snap"), cd(&z, b"SNAP"), cd(&z, b"Snap")),
                (0, 1, 2)
            );
            assert!(z.remove(b"SNAP").unwrap());
            z.add(b"sNAP", 8, &[4]).unwrap();
            assert_eq!(cd(&z, b"sNAP"), 1);
            assert_eq!(z.is_micro(), !fat);
            z.verify().unwrap();
            if fat {
                let l = LeafRef {
                    b: &z.blocks[&1],
                    g: z.geo(),
                };
                assert_eq!(l.flags() & ZLF_ENTRIES_CDSORTED, ZLF_ENTRIES_CDSORTED);
            }
        }
        // Many same-hash entries: a microzap upgrades before one leaf could not hold them; a fat
        // ZAP refuses (without damage) once a leaf is full of one hash.
        let variants: Vec<Vec<u8>> = (0..1024u32)
            .map(|m| {
                b"abcdefghij"
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| {
                        if m >> i & 1 != 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect()
            })
            .collect();
        let mut z = ZapObject::new_micro(5, U8_TEXTPREP_TOUPPER);
        let mut model = Model::new();
        for (i, v) in variants.iter().enumerate().take(127) {
            z.add(v, 8, &[i as u64]).unwrap();
            model.insert(v.clone(), (8, vec![i as u64]));
        }
        assert!(z.is_micro());
        z.add(&variants[127], 8, &[127]).unwrap();
        model.insert(variants[127].clone(), (8, vec![127]));
        assert!(!z.is_micro());
        check_all(&z, &model);
        let mut failed = false;
        for (i, v) in variants.iter().enumerate().skip(128).take(200) {
            match z.add(v, 8, &[i as u64]) {
                Ok(()) => {
                    model.insert(v.clone(), (8, vec![i as u64]));
                }
                Err(e) => {
                    assert!(e.to_string().contains("sharing"), "{e}");
                    failed = true;
                }
            }
        }
        assert!(failed);
        check_all(&z, &model);
        let cds: BTreeSet<u32> = z.list().unwrap().iter().map(|e| e.cd).collect();
        assert_eq!(cds.len(), model.len());
    }

    /// Names of `entry-<i>` plus `pad + i % 20` filler bytes.
    fn bulk_name(i: u64, pad: usize) -> Vec<u8> {
        let mut s = format!("entry-{i}-");
        s.extend(std::iter::repeat_n('x', pad + (i % 20) as usize));
        s.into_bytes()
    }

    fn fat_bulk(n: usize, pad: usize, expect_external: bool) {
        let mut z = ZapObject::new_fat(0xabcdef, 0, 0);
        let names: Vec<Vec<u8>> = (0..n as u64).map(|i| bulk_name(i, pad)).collect();
        let t = std::time::Instant::now();
        for (i, name) in names.iter().enumerate() {
            z.add(name, 8, &[i as u64]).unwrap();
        }
        eprintln!("{n} fat inserts: {:?}", t.elapsed());
        let h = z.hdr();
        eprintln!(
            "shift {} numblks {} leaves {} freeblk {}",
            h.shift, h.numblks, h.nleafs, h.freeblk
        );
        assert_eq!(h.nentries, n as u64);
        if expect_external {
            assert!(h.numblks > 0);
        }
        z.verify().unwrap();
        let listed = reader_list(&z);
        assert_eq!(listed.len(), n);
        for i in (0..n).step_by(997) {
            let e = z.lookup(&names[i]).unwrap().unwrap();
            assert_eq!(e.value, vec![i as u64]);
        }
        let t = std::time::Instant::now();
        for name in &names {
            assert!(z.remove(name).unwrap());
        }
        eprintln!("{n} fat removes: {:?}", t.elapsed());
        z.verify().unwrap();
        assert!(z.is_empty());
        assert!(z.list().unwrap().is_empty());
        assert!(reader_list(&z).is_empty());
        assert_eq!(z.hdr().nleafs, h.nleafs);
    }

    #[test]
    fn zap_write_fat_20k() {
        // Short names: 3-4 chunks per entry, the embedded table suffices.
        fat_bulk(20_000, 0, false);
    }

    #[test]
    fn zap_write_fat_100k() {
        // ~100-byte names (7-8 chunks per entry): more than 1024 leaves are needed, so the
        // pointer table must move out of the header block.
        fat_bulk(100_000, 80, true);
    }

    #[test]
    fn zap_write_load_swap_and_resume() {
        let mut rng = Rng(42);
        let mut z = ZapObject::new_fat(0x1111, 0, 0);
        let mut model = Model::new();
        for i in 0..3000u64 {
            let (il, v) = value(&mut rng, false);
            let name = format!("k{i}").into_bytes();
            z.add(&name, il, &v).unwrap();
            model.insert(name, (il, v));
        }
        // Other-endian copy: the reader (swap=true) and load(swap=true) agree.
        let mut swapped = z.blocks.clone();
        swap_fat(z.block_size, &mut swapped).unwrap();
        let l = zap::list(&swapped[&0], true, &mut |n| Ok(swapped[&n].clone())).unwrap();
        assert_eq!(as_model(l), model);
        let mut z2 = ZapObject::load(z.block_size, swapped, true).unwrap();
        assert_eq!(z2.blocks, z.blocks);
        z2.update(b"k5", 8, &[5]).unwrap();
        model.insert(b"k5".to_vec(), (8, vec![5]));
        check_all(&z2, &model);
        // A microzap from the reference encoder, loaded swapped and edited.
        let mut mz =
            zap::encode_microzap(&[(b"ROOT", 3), (b"VERSION", 4)], 0x1234, 0, 1024).unwrap();
        swap_micro(&mut mz);
        let mut m = ZapObject::load(1024, Map::from([(0, mz)]), true).unwrap();
        assert!(m.is_micro());
        m.add(b"DELETE_QUEUE", 8, &[2]).unwrap();
        assert_eq!(m.lookup(b"ROOT").unwrap().unwrap().value, vec![3]);
        assert_eq!(m.len(), 3);
        m.verify().unwrap();
        // A single-leaf fat ZAP from the reference encoder.
        let blocks = zap::encode_fat_zap_single_leaf(
            &[(b"a", 8, &[1]), (b"s", 1, &[104, 105, 0])],
            9,
            0,
            16384,
        )
        .unwrap();
        let mut f = ZapObject::load(
            16384,
            blocks
                .into_iter()
                .enumerate()
                .map(|(i, b)| (i as u64, b))
                .collect(),
            false,
        )
        .unwrap();
        f.add(b"b", 8, &[2]).unwrap();
        assert!(f.remove(b"s").unwrap());
        f.verify().unwrap();
        assert_eq!(f.len(), 2);
        // Corruption is caught at load.
        let mut bad = z.blocks.clone();
        let b1 = bad.get_mut(&1).unwrap();
        b1[LH_NFREE] ^= 1;
        assert!(ZapObject::load(z.block_size, bad, false).is_err());
    }

    #[test]
    fn zap_write_finishes_partial_table_copy() {
        // 4 KiB blocks: a 256-entry embedded table, ~50 entries per leaf.
        let mut z = ZapObject::new_fat_with_shift(0x2222, 0, 0, 12);
        for i in 0..30_000u64 {
            z.add(format!("e{i}").as_bytes(), 8, &[i]).unwrap();
        }
        let mut h = z.hdr();
        assert!(h.numblks >= 2, "external table has doubled at least once");
        // Simulate OpenZFS half-way through doubling the table: new blocks allocated, none copied.
        h.nextblk = h.alloc_blocks(2 * h.numblks);
        z.put_hdr(&h);
        z.verify().unwrap();
        let z2 = ZapObject::load(z.block_size, z.blocks.clone(), false).unwrap();
        let mut z2 = z2;
        z2.add(b"new", 8, &[1]).unwrap();
        let h2 = z2.hdr();
        assert_eq!((h2.nextblk, h2.copied), (0, 0));
        assert_eq!(h2.shift, h.shift + 1);
        z2.verify().unwrap();
        assert_eq!(reader_list(&z2).len(), 30_001);
    }

    #[test]
    fn zap_write_uint64_keys() {
        let mut z = ZapObject::new_fat(0x3333, 0, ZAP_FLAG_UINT64_KEY | zap::ZAP_FLAG_HASH64);
        let mut model = Model::new();
        for i in 0..5000u64 {
            let key: Vec<u8> = [i, i * 7].iter().flat_map(|w| w.to_be_bytes()).collect();
            z.add(&key, 8, &[i, i + 1]).unwrap();
            model.insert(key, (8, vec![i, i + 1]));
        }
        z.verify().unwrap();
        assert_eq!(as_model(z.list().unwrap()), model);
        assert_eq!(as_model(reader_list(&z)), model);
        assert!(z.add(b"abc", 8, &[1]).is_err());
        // The reader finds binary keys by their hash, as OpenZFS does,
        // and pre-hashed ones (a dedup table's) by their first word.
        let mut rd = |n: u64| {
            z.blocks
                .get(&n)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("block {n}")))
        };
        for i in [0u64, 17, 4999] {
            let key: Vec<u8> = [i, i * 7].iter().flat_map(|w| w.to_be_bytes()).collect();
            let e = zap::lookup(&z.blocks[&0], false, &key, &mut rd)
                .unwrap()
                .unwrap();
            assert_eq!(e.value, vec![i, i + 1]);
        }
        let absent: Vec<u8> = [1u64, 1].iter().flat_map(|w| w.to_be_bytes()).collect();
        assert!(zap::lookup(&z.blocks[&0], false, &absent, &mut rd)
            .unwrap()
            .is_none());
        let flags = ZAP_FLAG_UINT64_KEY | zap::ZAP_FLAG_HASH64 | zap::ZAP_FLAG_PRE_HASHED_KEY;
        let mut d = ZapObject::new_fat_with_shift(0x4444, 0, flags, 15);
        for i in 1..3000u64 {
            let key: Vec<u8> = [i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i, 0, 0, 1]
                .iter()
                .flat_map(|w| w.to_be_bytes())
                .collect();
            d.add(&key, 1, &[0x82, i & 0xff]).unwrap();
        }
        d.verify().unwrap();
        let mut rd = |n: u64| {
            d.blocks
                .get(&n)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("block {n}")))
        };
        let i = 1234u64;
        let key: Vec<u8> = [i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i, 0, 0, 1]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        let e = zap::lookup(&d.blocks[&0], false, &key, &mut rd)
            .unwrap()
            .unwrap();
        assert_eq!(e.value, vec![0x82, i & 0xff]);
    }

    #[test]
    fn zap_write_rejects_bad_input() {
        let mut z = ZapObject::new_micro(1, 0);
        assert!(z.add(b"", 8, &[1]).is_err());
        assert!(z.add(b"a\0b", 8, &[1]).is_err());
        assert!(z.add(&[b'a'; 256], 8, &[1]).is_err());
        assert!(z.add(b"a", 3, &[1]).is_err());
        assert!(z.add(b"a", 1, &[256]).is_err());
        assert!(z.add(b"a", 8, &vec![0; 1025]).is_err());
        assert!(z.is_micro() && z.is_empty());
        z.add(&[b'a'; 255], 1, &vec![7; 8192]).unwrap();
        assert!(!z.is_micro());
        z.verify().unwrap();
        assert_eq!(z.lookup(&[b'a'; 255]).unwrap().unwrap().value.len(), 8192);
        assert!(!z.remove(b"nope").unwrap());
        assert!(z.lookup(b"").unwrap().is_none());
    }
}
