//! Vdev labels and uberblocks. FORMAT.md §1.
//!
//! A leaf device carries four 256 KiB labels (two at the front, two at the
//! end). Each holds a packed nvlist describing the pool and the leaf's
//! top-level vdev, and a ring of uberblocks. The newest uberblock whose
//! embedded checksum verifies is the root of the pool.

use crate::blkptr::BlkPtr;
use crate::error::Result;

pub const VDEV_LABEL_SIZE: u64 = 256 * 1024;
pub const VDEV_LABELS: usize = 4;
/// Offset of the nvlist region (`vdev_phys_t`) inside a label.
pub const VDEV_PHYS_OFFSET: u64 = 16 * 1024;
/// Size of the nvlist region including its 40-byte checksum trailer.
pub const VDEV_PHYS_SIZE: usize = 112 * 1024;
/// Offset of the uberblock ring inside a label.
pub const UBERBLOCK_RING_OFFSET: u64 = 128 * 1024;
pub const UBERBLOCK_RING_SIZE: u64 = 128 * 1024;
/// Bytes before DVA offset 0 on every leaf: 2 labels + boot area.
pub const VDEV_LABEL_START_SIZE: u64 = 4 * 1024 * 1024;
pub const VDEV_LABEL_END_SIZE: u64 = 512 * 1024;
pub const UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;
/// `zec_magic` of an embedded checksum trailer.
pub const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;
/// Size of `zio_eck_t`.
pub const ZIO_ECK_SIZE: usize = 40;
/// Smallest device OpenZFS accepts.
pub const SPA_MINDEVSIZE: u64 = 64 * 1024 * 1024;

/// Device size rounded down to a whole label.
pub fn aligned_psize(dev_size: u64) -> u64 {
    dev_size & !(VDEV_LABEL_SIZE - 1)
}

/// Absolute device byte offset of `offset_in_label` within label `l` (0..4) of a device of `psize` (aligned) bytes.
pub fn label_offset(psize: u64, l: usize, offset_in_label: u64) -> u64 {
    offset_in_label
        + l as u64 * VDEV_LABEL_SIZE
        + if l < 2 {
            0
        } else {
            psize - VDEV_LABELS as u64 * VDEV_LABEL_SIZE
        }
}

/// Uberblock slot shift: `max(ashift, 10)` capped at 13 (OpenZFS); identical to zfs-fuse for ashift <= 13.
pub fn uberblock_shift(ashift: u64) -> u32 {
    ashift.clamp(10, 13) as u32
}

/// Where the embedded checksum of a self-checksumming region lives and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eck {
    /// True if `zec_magic` reads byteswapped (the region was written by the other endianness).
    pub byteswapped: bool,
    /// The stored checksum words (host order).
    pub cksum: [u64; 4],
}

/// Parse the 40-byte trailer at the end of `region`. Errors if the magic is neither order.
pub fn parse_eck(_region: &[u8]) -> Result<Eck> {
    unimplemented!()
}

/// Return a copy of `region` with the trailer's checksum words replaced by `verifier`
/// (written in the region's own byte order), ready to be hashed. Callers hash it with
/// SHA-256 (label/uberblock/gang) and compare with [`Eck::cksum`].
pub fn with_verifier(_region: &[u8], _verifier: [u64; 4], _byteswapped: bool) -> Vec<u8> {
    unimplemented!()
}

/// A decoded `uberblock_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Uberblock {
    pub byteswapped: bool,
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub rootbp: BlkPtr,
    pub software_version: u64,
    pub mmp_magic: u64,
    pub mmp_delay: u64,
    pub mmp_config: u64,
    pub checkpoint_txg: u64,
}

impl Uberblock {
    /// Decode from the start of a slot; checks `ub_magic` (either order). Fields past byte 168 are
    /// read only if present (zfs-fuse leaves zeros there).
    pub fn parse(_slot: &[u8]) -> Result<Uberblock> {
        unimplemented!()
    }
    /// Encode (host order) into the first 216 bytes of a zeroed slot of `slot_size` bytes (trailer NOT filled).
    pub fn encode(&self, _slot_size: usize) -> Vec<u8> {
        unimplemented!()
    }
    /// MMP sequence if valid (for tie-breaking), else 0.
    pub fn mmp_seq(&self) -> u64 {
        unimplemented!()
    }
}
