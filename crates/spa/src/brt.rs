//! Block reference tables (OpenZFS's block cloning, `com.fudosecurity:block_cloning`):
//! what a free must consult before it gives a block's space back.
//!
//! Theory. Cloning a block (`copy_file_range`, `cp --reflink`) writes a
//! second block pointer to the same DVAs without touching the first, so no
//! block pointer says it is shared. Each top-level vdev with cloned blocks
//! has a table: a ZAP keyed by the offset of the block's first DVA whose
//! value is the number of *extra* references (references − 1), beside an
//! array of 16-bit counters, one per 16 MiB of the vdev, of the entries in
//! that range (so a free in a range with none needs no lookup), and a
//! header (`brt_vdev_phys_t`: entry count, the space the cloned blocks use
//! once, and the space cloning saved).
//!
//! A free of a block with an entry takes one reference instead of freeing:
//! the saved space drops by the block's charged size; when the count
//! reaches zero the entry goes, the used space drops, the range's counter
//! and the entry count drop — and the next free of the block frees it.
//! These in-memory changes are written to the MOS in the txg whose frees
//! made them (`ozfs_dsl::brt`), as OpenZFS's `brt_sync` does; a table left
//! without entries is destroyed and the feature's count drops with it.
//!
//! Invariants: a block with an entry is never freed; every entry change of
//! a txg is in the same txg's MOS; counters never go below zero (a table
//! that says otherwise is an error naming it, and nothing is freed).
//! ozfs makes no clones: tables only shrink.

use std::collections::{BTreeMap, HashMap};

/// OpenZFS's range size (`BRT_RANGESIZE`).
pub const BRT_RANGESIZE: u64 = 16 << 20;

/// The table of one top-level vdev.
#[derive(Debug, Clone, Default)]
pub struct BrtVdev {
    /// The MOS object holding the counters (data) and the header (bonus).
    pub obj: u64,
    /// The entries ZAP (`bvp_mos_entries`).
    pub entries_obj: u64,
    /// Entries per range, host order.
    pub entcount: Vec<u16>,
    /// The counters as stored are in the other byte order.
    pub entcount_swapped: bool,
    pub totalcount: u64,
    pub usedspace: u64,
    pub savedspace: u64,
    /// Offset of the first DVA → extra references, as loaded.
    pub entries: HashMap<u64, u64>,
    /// Offsets whose count changed since the last flush → new count (0:
    /// the entry goes).
    pub dirty: BTreeMap<u64, u64>,
}

/// Every table of a pool, loaded when it is opened for writing.
#[derive(Debug, Clone, Default)]
pub struct Brt {
    /// `bvp_rangesize` (OpenZFS's 16 MiB).
    pub rangesize: u64,
    /// The pool deflates charged sizes (`spa_deflate`).
    pub deflate: bool,
    /// By top-level vdev id.
    pub vdevs: BTreeMap<u64, BrtVdev>,
}

impl Brt {
    /// Take one reference of a block whose first DVA is at (`vdev`,
    /// `offset`) and whose charged size `dsize` gives, if it has an entry:
    /// true means the block stays allocated (the caller must not free it).
    /// A free of a block in a range without entries (nearly every free)
    /// costs two lookups and never computes the size.
    pub fn decref(&mut self, vdev: u64, offset: u64, dsize: impl FnOnce() -> u64) -> bool {
        let Some(v) = self.vdevs.get_mut(&vdev) else {
            return false;
        };
        let idx = offset.checked_div(self.rangesize).unwrap_or(u64::MAX);
        if v.entcount.get(idx as usize).copied().unwrap_or(0) == 0 {
            return false;
        }
        let count = v
            .dirty
            .get(&offset)
            .or_else(|| v.entries.get(&offset))
            .copied()
            .unwrap_or(0);
        if count == 0 {
            return false;
        }
        let count = count - 1;
        let dsize = dsize();
        v.dirty.insert(offset, count);
        v.savedspace = v.savedspace.saturating_sub(dsize);
        if count == 0 {
            v.usedspace = v.usedspace.saturating_sub(dsize);
            v.totalcount = v.totalcount.saturating_sub(1);
            if let Some(c) = v.entcount.get_mut(idx as usize) {
                *c = c.saturating_sub(1);
            }
        }
        true
    }

    /// Whether any table has changes to write.
    pub fn dirty(&self) -> bool {
        self.vdevs.values().any(|v| !v.dirty.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_taken_before_space_is_freed() {
        let mut v = BrtVdev {
            entcount: vec![0, 1, 0],
            totalcount: 1,
            usedspace: 4096,
            savedspace: 8192,
            ..Default::default()
        };
        let off = BRT_RANGESIZE + 8192;
        v.entries.insert(off, 2);
        let mut b = Brt {
            rangesize: BRT_RANGESIZE,
            deflate: false,
            vdevs: BTreeMap::from([(0, v)]),
        };
        // Another range, another vdev, another offset: freed.
        assert!(!b.decref(0, 4096, || 4096));
        assert!(!b.decref(1, off, || 4096));
        assert!(!b.decref(0, off + 4096, || 4096));
        // Three references: two frees keep it, the third frees it.
        assert!(b.decref(0, off, || 4096));
        assert!(b.decref(0, off, || 4096));
        assert!(!b.decref(0, off, || 4096));
        let v = &b.vdevs[&0];
        assert_eq!(v.dirty.get(&off), Some(&0));
        assert_eq!((v.totalcount, v.usedspace, v.savedspace), (0, 0, 0));
        assert_eq!(v.entcount, vec![0, 0, 0]);
    }
}
