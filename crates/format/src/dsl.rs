//! DSL directory and dataset bonus structures. FORMAT.md §6.3.
//!
//! Both are arrays of uint64 in the writer's byte order (`ds_bp` being 16 of
//! them), living in the bonus buffer of DSL_DIR / DSL_DATASET objects (or of
//! zapified 0xC4 objects). Decoding tolerates short buffers where the stub
//! contract says so, treating the missing tail as zero.

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::error::{Error, Result};

/// Size of `dsl_dir_phys_t`.
pub const DSL_DIR_PHYS_SIZE: usize = 256;
/// Size of `dsl_dataset_phys_t`.
pub const DSL_DATASET_PHYS_SIZE: usize = 320;
/// `dd_flags`: the used breakdown is maintained.
pub const DD_FLAG_USED_BREAKDOWN: u64 = 1;
/// `ds_flags` bits.
pub const DS_FLAG_INCONSISTENT: u64 = 0x1;
pub const DS_FLAG_NOPROMOTE: u64 = 0x2;
pub const DS_FLAG_UNIQUE_ACCURATE: u64 = 0x4;
pub const DS_FLAG_DEFER_DESTROY: u64 = 0x8;
pub const DS_FLAG_CI_DATASET: u64 = 0x10000;

/// Read u64 word `i` of `b` (zero past the end), in the writer's order.
fn word(b: &[u8], i: usize, swap: bool) -> u64 {
    match b.get(i * 8..i * 8 + 8) {
        Some(s) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            let v = u64::from_ne_bytes(a);
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        }
        None => 0,
    }
}

fn put(out: &mut [u8], i: usize, v: u64) {
    out[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
}

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
    pub fn parse(bonus: &[u8], swap: bool) -> Result<DslDirPhys> {
        if bonus.len() < 152 {
            return Err(Error::truncated("dsl_dir_phys", 152, bonus.len()));
        }
        let w = |i| word(bonus, i, swap);
        Ok(DslDirPhys {
            creation_time: w(0),
            head_dataset_obj: w(1),
            parent_obj: w(2),
            origin_obj: w(3),
            child_dir_zapobj: w(4),
            used_bytes: w(5),
            compressed_bytes: w(6),
            uncompressed_bytes: w(7),
            quota: w(8),
            reserved: w(9),
            props_zapobj: w(10),
            deleg_zapobj: w(11),
            flags: w(12),
            used_breakdown: [w(13), w(14), w(15), w(16), w(17)],
            clones: w(18),
        })
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; DSL_DIR_PHYS_SIZE];
        let vals = [
            self.creation_time,
            self.head_dataset_obj,
            self.parent_obj,
            self.origin_obj,
            self.child_dir_zapobj,
            self.used_bytes,
            self.compressed_bytes,
            self.uncompressed_bytes,
            self.quota,
            self.reserved,
            self.props_zapobj,
            self.deleg_zapobj,
            self.flags,
        ];
        for (i, v) in vals.iter().enumerate() {
            put(&mut out, i, *v);
        }
        for (i, v) in self.used_breakdown.iter().enumerate() {
            put(&mut out, 13 + i, *v);
        }
        put(&mut out, 18, self.clones);
        out
    }
}

impl DslDatasetPhys {
    /// Decode from a bonus buffer (needs >= 256 bytes; fields past the buffer are zero).
    pub fn parse(bonus: &[u8], swap: bool) -> Result<DslDatasetPhys> {
        if bonus.len() < 256 {
            return Err(Error::truncated("dsl_dataset_phys", 256, bonus.len()));
        }
        let w = |i| word(bonus, i, swap);
        Ok(DslDatasetPhys {
            dir_obj: w(0),
            prev_snap_obj: w(1),
            prev_snap_txg: w(2),
            next_snap_obj: w(3),
            snapnames_zapobj: w(4),
            num_children: w(5),
            creation_time: w(6),
            creation_txg: w(7),
            deadlist_obj: w(8),
            referenced_bytes: w(9),
            compressed_bytes: w(10),
            uncompressed_bytes: w(11),
            unique_bytes: w(12),
            fsid_guid: w(13),
            guid: w(14),
            flags: w(15),
            bp: BlkPtr::from_bytes(&bonus[128..128 + BLKPTR_SIZE], swap)?,
            next_clones_obj: w(32),
            props_obj: w(33),
            userrefs_obj: w(34),
        })
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; DSL_DATASET_PHYS_SIZE];
        let vals = [
            self.dir_obj,
            self.prev_snap_obj,
            self.prev_snap_txg,
            self.next_snap_obj,
            self.snapnames_zapobj,
            self.num_children,
            self.creation_time,
            self.creation_txg,
            self.deadlist_obj,
            self.referenced_bytes,
            self.compressed_bytes,
            self.uncompressed_bytes,
            self.unique_bytes,
            self.fsid_guid,
            self.guid,
            self.flags,
        ];
        for (i, v) in vals.iter().enumerate() {
            put(&mut out, i, *v);
        }
        out[128..128 + BLKPTR_SIZE].copy_from_slice(&self.bp.to_bytes());
        put(&mut out, 32, self.next_clones_obj);
        put(&mut out, 33, self.props_obj);
        put(&mut out, 34, self.userrefs_obj);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_round_trip() {
        let d = DslDirPhys {
            creation_time: 1,
            head_dataset_obj: 2,
            parent_obj: 3,
            origin_obj: 4,
            child_dir_zapobj: 5,
            used_bytes: 6,
            compressed_bytes: 7,
            uncompressed_bytes: 8,
            quota: 9,
            reserved: 10,
            props_zapobj: 11,
            deleg_zapobj: 12,
            flags: DD_FLAG_USED_BREAKDOWN,
            used_breakdown: [14, 15, 16, 17, 18],
            clones: 19,
        };
        let b = d.encode();
        assert_eq!(b.len(), 256);
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(b[8], 2); // dd_head_dataset_obj @ 8
            assert_eq!(b[104], 14); // used_breakdown[HEAD] @ 104
            assert_eq!(b[144], 19); // dd_clones @ 144
        }
        assert_eq!(DslDirPhys::parse(&b, false).unwrap(), d);
        let short = DslDirPhys::parse(&b[..152], false).unwrap();
        assert_eq!(short.clones, 19);
        let mut sw = b.clone();
        for c in sw.chunks_mut(8) {
            c.reverse();
        }
        assert_eq!(DslDirPhys::parse(&sw, true).unwrap(), d);
        assert!(DslDirPhys::parse(&b[..100], false).is_err());
    }

    #[test]
    fn dataset_round_trip() {
        let mut bp = BlkPtr::default();
        bp.words[0] = 1;
        bp.words[1] = 0x55;
        bp.words[6] = BlkPtr::make_prop(2048, 512, 3, 7, 11, 0, false, true);
        bp.words[10] = 9;
        let d = DslDatasetPhys {
            dir_obj: 2,
            prev_snap_obj: 3,
            prev_snap_txg: 1,
            creation_txg: 1,
            referenced_bytes: 4096,
            guid: 0xfeed,
            flags: DS_FLAG_UNIQUE_ACCURATE,
            bp,
            next_clones_obj: 77,
            props_obj: 78,
            userrefs_obj: 79,
            ..Default::default()
        };
        let b = d.encode();
        assert_eq!(b.len(), 320);
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(b[112], 0xed); // ds_guid @ 112
            assert_eq!(b[128], 1); // ds_bp @ 128
            assert_eq!(b[256], 77); // ds_next_clones_obj @ 256
        }
        assert_eq!(DslDatasetPhys::parse(&b, false).unwrap(), d);
        let short = DslDatasetPhys::parse(&b[..256], false).unwrap();
        assert_eq!(short.next_clones_obj, 0);
        assert_eq!(short.bp, bp);
        assert!(DslDatasetPhys::parse(&b[..200], false).is_err());
    }
}
