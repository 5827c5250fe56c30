//! Objset headers (`objset_phys_t`, 1 K / 2 K / 4 K). FORMAT.md §5.1.

use crate::dnode::DnodePhys;
use crate::error::Result;

pub const OBJSET_TYPE_NONE: u64 = 0;
pub const OBJSET_TYPE_META: u64 = 1;
pub const OBJSET_TYPE_ZFS: u64 = 2;
pub const OBJSET_TYPE_ZVOL: u64 = 3;

/// A decoded objset header.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjsetPhys {
    pub meta_dnode: DnodePhys,
    /// Raw 192-byte ZIL header.
    pub zil_header: Vec<u8>,
    pub os_type: u64,
    pub flags: u64,
    /// Present when the block is >= 2 K (zero/empty dnode otherwise).
    pub userused_dnode: DnodePhys,
    pub groupused_dnode: DnodePhys,
    /// Present when the block is >= 4 K.
    pub projectused_dnode: DnodePhys,
}

impl ObjsetPhys {
    /// Decode from a 1 K, 2 K or 4 K block (missing tail = zero). `swap` as elsewhere.
    pub fn parse(_buf: &[u8], _swap: bool) -> Result<ObjsetPhys> {
        unimplemented!()
    }
    /// Encode into `size` (1024/2048/4096) bytes, host order.
    pub fn encode(&self, _size: usize) -> Vec<u8> {
        unimplemented!()
    }
}
