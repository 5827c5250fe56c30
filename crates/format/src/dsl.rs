//! DSL directory and dataset bonus structures. FORMAT.md §6.3.

use crate::blkptr::BlkPtr;
use crate::error::Result;

/// `dsl_dir_phys_t` (256 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DslDirPhys {
    pub creation_time: u64,
    pub head_dataset_obj: u64,
    pub parent_obj: u64,
    pub origin_obj: u64,
    pub child_dir_zapobj: u64,
    pub used_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub quota: u64,
    pub reserved: u64,
    pub props_zapobj: u64,
    pub deleg_zapobj: u64,
    pub flags: u64,
    /// HEAD, SNAP, CHILD, CHILD_RSRV, REFRSRV.
    pub used_breakdown: [u64; 5],
    pub clones: u64,
}

/// `dsl_dataset_phys_t` (320 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DslDatasetPhys {
    pub dir_obj: u64,
    pub prev_snap_obj: u64,
    pub prev_snap_txg: u64,
    pub next_snap_obj: u64,
    pub snapnames_zapobj: u64,
    pub num_children: u64,
    pub creation_time: u64,
    pub creation_txg: u64,
    pub deadlist_obj: u64,
    pub referenced_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub unique_bytes: u64,
    pub fsid_guid: u64,
    pub guid: u64,
    pub flags: u64,
    pub bp: BlkPtr,
    pub next_clones_obj: u64,
    pub props_obj: u64,
    pub userrefs_obj: u64,
}

impl DslDirPhys {
    /// Decode from a bonus buffer (>= 256 bytes... accept shorter only if >= 152 and zero-fill the rest).
    pub fn parse(_bonus: &[u8], _swap: bool) -> Result<DslDirPhys> {
        unimplemented!()
    }
    pub fn encode(&self) -> Vec<u8> {
        unimplemented!()
    }
}

impl DslDatasetPhys {
    /// Decode from a bonus buffer (needs >= 256 bytes; fields past the buffer are zero).
    pub fn parse(_bonus: &[u8], _swap: bool) -> Result<DslDatasetPhys> {
        unimplemented!()
    }
    pub fn encode(&self) -> Vec<u8> {
        unimplemented!()
    }
}
