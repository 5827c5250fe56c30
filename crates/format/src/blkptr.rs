//! Block pointers (`blkptr_t`, 128 bytes) and DVAs. FORMAT.md §2.
//!
//! A [`BlkPtr`] keeps the 16 raw words in host order (already byteswapped if
//! the containing block was written by the other endianness) and decodes
//! fields on demand. It supports both the old (zfs-fuse, 8-bit COMP) and the
//! new (7-bit COMP + embedded bit) layouts: an embedded BP is recognised by
//! bit 39 of `blk_prop`, which old pools never set.

use crate::error::{Cksum, Result};

/// Size of one block pointer on disk.
pub const BLKPTR_SIZE: usize = 128;

/// A data virtual address: where one copy of a block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dva {
    /// Top-level vdev id.
    pub vdev: u64,
    /// Byte offset in the top-level vdev's allocatable space (already ×512).
    pub offset: u64,
    /// Allocated bytes (already ×512), including RAID-Z parity and padding.
    pub asize: u64,
    /// Points at a gang header.
    pub gang: bool,
}

impl Dva {
    /// Decode from the two words. (ASIZE bits 0..24 ×512, VDEV bits 32..64 masked to 24 bits for new pools is fine:
    /// take bits 32..56; OFFSET bits 0..63 ×512; G bit 63.)
    pub fn from_words(_w0: u64, _w1: u64) -> Dva {
        unimplemented!()
    }
    /// Encode into two words.
    pub fn to_words(&self) -> (u64, u64) {
        unimplemented!()
    }
    /// ASIZE == 0 means the DVA slot is unused.
    pub fn is_empty(&self) -> bool {
        self.asize == 0 && self.offset == 0 && self.vdev == 0
    }
}

/// A decoded block pointer.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct BlkPtr {
    /// The 16 words, host order.
    pub words: [u64; 16],
}

impl BlkPtr {
    /// Decode 128 bytes; `swap` = the containing block is in the non-host byte order.
    pub fn from_bytes(_b: &[u8], _swap: bool) -> Result<BlkPtr> {
        unimplemented!()
    }
    /// Encode as 128 bytes in host order.
    pub fn to_bytes(&self) -> [u8; BLKPTR_SIZE] {
        unimplemented!()
    }
    /// All-zero, or non-embedded with DVA[0] words both zero (hole_birth holes keep lsize/type/level/birth).
    pub fn is_hole(&self) -> bool {
        unimplemented!()
    }
    /// Embedded-data BP (E bit 39 set).
    pub fn is_embedded(&self) -> bool {
        unimplemented!()
    }
    /// The up-to-3 DVAs (empty ones included; check `is_empty`).
    pub fn dvas(&self) -> [Dva; 3] {
        unimplemented!()
    }
    /// Number of non-empty DVAs.
    pub fn ndvas(&self) -> usize {
        unimplemented!()
    }
    /// Logical size in bytes (embedded: bits 0..25 + 1).
    pub fn lsize(&self) -> u64 {
        unimplemented!()
    }
    /// Physical size in bytes (embedded: bits 25..32 + 1).
    pub fn psize(&self) -> u64 {
        unimplemented!()
    }
    /// Compression enum (7 bits if embedded... use 7 bits when bit 39 is the E bit and 8 bits otherwise is ambiguous;
    /// take bits 32..39 (7 bits) always — old pools never exceed 14).
    pub fn compression(&self) -> u8 {
        unimplemented!()
    }
    /// Checksum enum (bits 40..48); for embedded BPs this is the embedded type (etype).
    pub fn checksum(&self) -> u8 {
        unimplemented!()
    }
    /// DMU object type (bits 48..56).
    pub fn object_type(&self) -> u8 {
        unimplemented!()
    }
    /// Indirection level (bits 56..61).
    pub fn level(&self) -> u8 {
        unimplemented!()
    }
    /// Dedup bit 62.
    pub fn dedup(&self) -> bool {
        unimplemented!()
    }
    /// Byte order bit 63: true = little-endian data.
    pub fn little_endian(&self) -> bool {
        unimplemented!()
    }
    /// Logical birth txg (word 10).
    pub fn birth(&self) -> u64 {
        self.words[10]
    }
    /// Physical birth txg (word 9, or logical birth if 0).
    pub fn phys_birth(&self) -> u64 {
        if self.words[9] != 0 {
            self.words[9]
        } else {
            self.words[10]
        }
    }
    /// Fill count (word 11).
    pub fn fill(&self) -> u64 {
        self.words[11]
    }
    /// Checksum words 12..16.
    pub fn cksum(&self) -> Cksum {
        Cksum([
            self.words[12],
            self.words[13],
            self.words[14],
            self.words[15],
        ])
    }
    /// Embedded payload bytes (psize bytes), words 0-5,7-9,11-15 little-endian within each word value.
    /// Errors if not embedded or psize > 112.
    pub fn embedded_payload(&self) -> Result<Vec<u8>> {
        unimplemented!()
    }
    /// Sanity rules of FORMAT.md §2.11 that need no pool knowledge (type, comp, cksum enums, sizes <= 16M,
    /// embedded etype/psize). `what` names the BP in errors.
    pub fn validate(&self, _what: &str) -> Result<()> {
        unimplemented!()
    }
    /// zdb's full notation (`snprintf_blkptr`): e.g.
    /// `DVA[0]=<0:4a00:200> DVA[1]=<0:1204a00:200> [L0 DMU dnode] fletcher4 lzjb LE contiguous unique double size=4000L/200P birth=4L/4P fill=5 cksum=a1b2:...`
    /// Holes: `HOLE [L0 ...] size=...L birth=...L`; embedded: `EMBEDDED [L0 ...] et=0 lzjb size=...L/...P birth=...L`.
    pub fn to_zdb_string(&self) -> String {
        unimplemented!()
    }
    /// zdb's compact notation used in `-ddddd` indirect dumps (`snprintf_blkptr_compact`):
    /// `0:4a00:200 0:1204a00:200 4000L/200P F=5 B=4/4` (plus ` cksum=...` when `with_cksum`).
    pub fn to_zdb_compact(&self, _with_cksum: bool) -> String {
        unimplemented!()
    }
}

impl std::fmt::Debug for BlkPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_zdb_string())
    }
}
