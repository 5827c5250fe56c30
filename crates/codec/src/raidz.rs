//! RAID-Z geometry and parity. FORMAT.md §4.3.
//!
//! [`RaidzMap::new`] turns a DVA offset and size into columns on child devices
//! (including the single-parity 1 MiB swap quirk). [`generate_parity`] fills
//! P/Q/R; [`reconstruct`] recomputes up to `nparity` missing columns from the
//! rest by solving the system over GF(2^8) (polynomial 0x11D).

use ozfs_format::Result;

/// One column of a RAID-Z row set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzCol {
    /// Child device index.
    pub dev: usize,
    /// Byte offset on the child, relative to the start of its allocatable area (add 4 MiB for the device byte).
    pub offset: u64,
    /// Bytes in this column (multiple of 2^ashift; may be 0 for skip columns).
    pub size: u64,
}

/// The column map of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    pub nparity: usize,
    /// Columns 0..nparity are parity, the rest data, in order. Only the `acols` columns (size > 0 possible) are listed.
    pub cols: Vec<RaidzCol>,
    /// Total sectors including skip sectors.
    pub asize: u64,
}

impl RaidzMap {
    /// Map a block at DVA `offset` with physical size `psize` on a raidz of `dcols` children with `nparity` and `ashift`.
    pub fn new(
        _offset: u64,
        _psize: u64,
        _ashift: u32,
        _dcols: usize,
        _nparity: usize,
    ) -> RaidzMap {
        unimplemented!()
    }
}

/// ASIZE of a `psize` block on this raidz (FORMAT.md §4.3 formula).
pub fn raidz_asize(_psize: u64, _ashift: u32, _dcols: usize, _nparity: usize) -> u64 {
    unimplemented!()
}

/// Compute parity columns `cols[0..nparity]` from data columns `cols[nparity..]` (shorter data columns are
/// zero-extended to the length of `cols[nparity]`; parity buffers must have that length).
pub fn generate_parity(_nparity: usize, _cols: &mut [Vec<u8>]) {
    unimplemented!()
}

/// Reconstruct the columns listed in `missing` (indices into `cols`, at most `nparity` of them, parity or data)
/// from the others. Buffers of missing columns must already have the right length; their contents are overwritten.
pub fn reconstruct(_nparity: usize, _cols: &mut [Vec<u8>], _missing: &[usize]) -> Result<()> {
    unimplemented!()
}
