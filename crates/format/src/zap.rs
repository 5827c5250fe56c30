//! ZAP objects: micro and fat. FORMAT.md §7.
//!
//! Decoding works on block-sized buffers handed in by the caller; blocks
//! beyond block 0 are fetched through a callback (`read_block(blkid)`), so
//! this module has no I/O and can be fuzzed directly. Every chain walk is
//! bounded (chunk chains by the number of chunks in a leaf, leaf iteration by
//! the pointer-table size), so a corrupt ZAP yields an error, never a loop.

use crate::error::Result;

pub const ZBT_LEAF: u64 = 0x8000_0000_0000_0000;
pub const ZBT_HEADER: u64 = 0x8000_0000_0000_0001;
pub const ZBT_MICRO: u64 = 0x8000_0000_0000_0003;
pub const ZAP_MAGIC: u64 = 0x2F52AB2AB;
pub const ZAP_LEAF_MAGIC: u32 = 0x2AB1EAF;
pub const MZAP_ENT_LEN: usize = 64;
pub const MZAP_NAME_LEN: usize = 50;
/// Normalization flag: case-fold to upper case before hashing (snapshot name ZAPs).
pub const U8_TEXTPREP_TOUPPER: u64 = 0x2;
pub const ZAP_FLAG_HASH64: u64 = 1;
pub const ZAP_FLAG_UINT64_KEY: u64 = 2;
pub const ZAP_FLAG_PRE_HASHED_KEY: u64 = 4;

/// One ZAP entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZapEntry {
    /// Key bytes: for string keys the name WITHOUT its trailing NUL; for uint64-key ZAPs the key words
    /// as 8-byte big-endian groups.
    pub name: Vec<u8>,
    /// Integer length of the value (1, 2, 4, 8). Microzap values are always 8.
    pub int_len: u8,
    /// The value's integers, each widened to u64 (microzap: exactly one).
    pub value: Vec<u64>,
    /// Collision differentiator.
    pub cd: u32,
}

impl ZapEntry {
    /// The single uint64 value (int_len 8, one integer), else None.
    pub fn as_u64(&self) -> Option<u64> {
        if self.int_len == 8 && self.value.len() == 1 {
            Some(self.value[0])
        } else {
            None
        }
    }
    /// Value as bytes (int_len 1), without a trailing NUL if present.
    pub fn as_string(&self) -> Option<String> {
        if self.int_len != 1 {
            return None;
        }
        let mut v: Vec<u8> = self.value.iter().map(|&x| x as u8).collect();
        if v.last() == Some(&0) {
            v.pop();
        }
        Some(String::from_utf8_lossy(&v).into_owned())
    }
    /// Name as (lossy) UTF-8.
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Decoded header facts of a ZAP object (from block 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZapHeader {
    Micro { salt: u64, normflags: u64 },
    Fat(FatZapHeader),
}

/// `zap_phys_t` fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FatZapHeader {
    pub ptrtbl_blk: u64,
    pub ptrtbl_numblks: u64,
    pub ptrtbl_shift: u64,
    pub ptrtbl_nextblk: u64,
    pub ptrtbl_blks_copied: u64,
    pub freeblk: u64,
    pub num_leafs: u64,
    pub num_entries: u64,
    pub salt: u64,
    pub normflags: u64,
    pub flags: u64,
}

/// CRC-64 (ECMA-182 reflected) ZAP hash of `name` (no NUL) with `salt`, folded to upper case first when
/// `normflags & U8_TEXTPREP_TOUPPER` (ASCII only), masked to the top `hashbits` (28, or 48 with HASH64).
pub fn zap_hash(_salt: u64, _name: &[u8], _normflags: u64, _hashbits: u32) -> u64 {
    unimplemented!()
}

/// Identify the kind of ZAP from block 0 (checks block type, magic, nonzero salt, sane shift).
pub fn parse_header(_block0: &[u8], _swap: bool) -> Result<ZapHeader> {
    unimplemented!()
}

/// Every entry of the ZAP. `block0` is block 0 (its length is the object's block size);
/// `read_block(n)` returns block n of the object (same size).
pub fn list(
    _block0: &[u8],
    _swap: bool,
    _read_block: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
) -> Result<Vec<ZapEntry>> {
    unimplemented!()
}

/// Look one string key up (exact byte match on the stored name; hashing uses the ZAP's normflags).
pub fn lookup(
    _block0: &[u8],
    _swap: bool,
    _name: &[u8],
    _read_block: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
) -> Result<Option<ZapEntry>> {
    unimplemented!()
}
