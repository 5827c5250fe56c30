//! XDR-packed name/value lists (`nvlist_t`), as stored in vdev labels, the MOS
//! config object and send streams. See FORMAT.md §1.4.
//!
//! Decoding is defensive: every length is checked against the remaining
//! buffer, nesting depth is bounded ([`MAX_DEPTH`]), and element counts are
//! bounded by the bytes left, so a fuzzed nvlist costs at most linear work.
//! Encoding computes `decode_size` exactly as libnvpair does, so OpenZFS and
//! zfs-fuse accept what we pack.

use crate::error::Result;

/// Deepest nesting of embedded nvlists accepted when decoding.
pub const MAX_DEPTH: usize = 64;

/// One typed value (`data_type_t` numbers in comments).
#[derive(Debug, Clone, PartialEq)]
pub enum NvValue {
    /// 1: a flag with no value.
    Boolean,
    Byte(u8),                 // 2
    Int16(i16),               // 3
    Uint16(u16),              // 4
    Int32(i32),               // 5
    Uint32(u32),              // 6
    Int64(i64),               // 7
    Uint64(u64),              // 8
    String(String),           // 9 (invalid UTF-8 is replaced lossily)
    ByteArray(Vec<u8>),       // 10
    Int16Array(Vec<i16>),     // 11
    Uint16Array(Vec<u16>),    // 12
    Int32Array(Vec<i32>),     // 13
    Uint32Array(Vec<u32>),    // 14
    Int64Array(Vec<i64>),     // 15
    Uint64Array(Vec<u64>),    // 16
    StringArray(Vec<String>), // 17
    Hrtime(i64),              // 18
    NvList(NvList),           // 19
    NvListArray(Vec<NvList>), // 20
    BooleanValue(bool),       // 21
    Int8(i8),                 // 22
    Uint8(u8),                // 23
    BooleanArray(Vec<bool>),  // 24
    Int8Array(Vec<i8>),       // 25
    Uint8Array(Vec<u8>),      // 26
    Double(f64),              // 27
}

/// An ordered list of name/value pairs (insertion order kept; names unique in practice).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NvList {
    /// `nvl_nvflag` (1 = NV_UNIQUE_NAME for everything ZFS writes).
    pub flags: u32,
    pub pairs: Vec<(String, NvValue)>,
}

impl NvList {
    /// An empty list with NV_UNIQUE_NAME.
    pub fn new() -> Self {
        unimplemented!()
    }
    /// Decode a packed nvlist including its 4-byte header (XDR encoding 1; native 0 may be rejected as unsupported).
    /// Trailing bytes after the terminator are ignored (labels are zero-padded).
    pub fn unpack(_buf: &[u8]) -> Result<NvList> {
        unimplemented!()
    }
    /// Pack as XDR with the 4-byte header (`01 01 00 00` on little-endian hosts).
    pub fn pack_xdr(&self) -> Vec<u8> {
        unimplemented!()
    }
    /// First value named `name`.
    pub fn get(&self, _name: &str) -> Option<&NvValue> {
        unimplemented!()
    }
    /// Value as u64 (accepts Uint64, Int64, Uint32, Int32... any integer type), else None.
    pub fn get_u64(&self, _name: &str) -> Option<u64> {
        unimplemented!()
    }
    pub fn get_str(&self, _name: &str) -> Option<&str> {
        unimplemented!()
    }
    pub fn get_nvlist(&self, _name: &str) -> Option<&NvList> {
        unimplemented!()
    }
    pub fn get_nvlist_array(&self, _name: &str) -> Option<&[NvList]> {
        unimplemented!()
    }
    pub fn get_u64_array(&self, _name: &str) -> Option<&[u64]> {
        unimplemented!()
    }
    /// Replace or append a pair.
    pub fn set(&mut self, _name: &str, _value: NvValue) {
        unimplemented!()
    }
    /// Remove every pair with this name.
    pub fn remove(&mut self, _name: &str) {
        unimplemented!()
    }
    /// Render like `zdb -C` does (indented `name: value` lines, nested lists indented by 4).
    pub fn dump(&self, _indent: usize, _out: &mut String) {
        unimplemented!()
    }
}
