//! Dnodes (`dnode_phys_t`): the 512-byte (or larger) descriptor of every DMU
//! object. FORMAT.md §5.2–5.3.

use crate::blkptr::BlkPtr;
use crate::error::Result;

pub const DNODE_SIZE: usize = 512;
pub const DNODE_SHIFT: u32 = 9;
/// Flag: `dn_used` is in bytes.
pub const DNODE_FLAG_USED_BYTES: u8 = 0x1;
pub const DNODE_FLAG_SPILL_BLKPTR: u8 = 0x4;

/// A decoded dnode.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DnodePhys {
    pub object_type: u8,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub bonustype: u8,
    pub checksum: u8,
    pub compress: u8,
    pub flags: u8,
    pub datablkszsec: u16,
    pub bonuslen: u16,
    pub extra_slots: u8,
    pub maxblkid: u64,
    pub used: u64,
    /// `nblkptr` block pointers.
    pub blkptr: Vec<BlkPtr>,
    /// The bonus buffer: exactly `bonuslen` bytes (still in the writer's byte order).
    pub bonus: Vec<u8>,
    /// Spill block pointer if `DNODE_FLAG_SPILL_BLKPTR`.
    pub spill: Option<BlkPtr>,
}

impl DnodePhys {
    /// Decode a dnode from `buf` (512 × (1 + extra_slots) bytes are needed; the caller passes the rest of the
    /// dnode block from this slot on). `swap` = written by the other endianness. A free slot (type 0)
    /// decodes with empty blkptr/bonus. Validates nblkptr 1..=3, bonuslen fits, nlevels <= 32,
    /// indblkshift/datablkszsec sane when type != 0.
    pub fn parse(_buf: &[u8], _swap: bool) -> Result<DnodePhys> {
        unimplemented!()
    }
    /// Encode into a zeroed 512 × (1 + extra_slots) byte buffer (host order).
    pub fn encode(&self) -> Vec<u8> {
        unimplemented!()
    }
    /// Data block size in bytes.
    pub fn datablksz(&self) -> u64 {
        self.datablkszsec as u64 * 512
    }
    /// Size of this dnode in bytes.
    pub fn size(&self) -> usize {
        DNODE_SIZE * (1 + self.extra_slots as usize)
    }
    /// Space used in bytes (converts sectors if USED_BYTES flag is clear).
    pub fn used_bytes(&self) -> u64 {
        if self.flags & DNODE_FLAG_USED_BYTES != 0 {
            self.used
        } else {
            self.used << 9
        }
    }
}
