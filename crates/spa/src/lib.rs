//! # ozfs-spa: storage pool allocator — finding, assembling and opening pools, and the read ZIO path
//!
//! Opening a pool: every candidate device's four labels are read
//! ([`ozfs_vdev::read_labels`]); devices are grouped by `pool_guid`; each
//! top-level vdev's subtree is taken from the newest label that describes it
//! (`top_guid`, `vdev_tree.id`); leaves are matched to devices by guid. The
//! root of the pool is the newest uberblock (largest txg, then timestamp)
//! whose embedded checksum verifies on any device; if the MOS it points to
//! cannot be read, older uberblocks are tried in turn (rewind), so one bad
//! sync never makes the pool unreadable.
//!
//! Reading a block ([`Pool::read_bp`]) is the read side of the ZIO pipeline:
//! holes become zeros; embedded BPs are decoded from the BP itself; otherwise
//! each DVA is tried in order, the vdev tree returns the first physical copy
//! whose checksum (the BP's function, in the block's byte order) verifies,
//! gang headers are followed, and the result is decompressed to exactly LSIZE.
//!
//! Space management is pure logic without I/O: [`range::RangeSet`] (disjoint
//! byte ranges), [`spacemap`] (space-map entry codec, replay, bonus header)
//! and [`metaslab`] (metaslab groups, the allocator, deferred frees, the
//! entries each txg appends to the space maps).
//!
//! Invariants:
//! * No byte from a device is used before its checksum verified.
//! * Every BP is validated (enums, sizes, DVA vdev id and bounds) before I/O.
//! * Nothing here writes.

pub mod arc;
pub mod brt;
pub mod ddt;
pub mod devices;
pub mod import;
pub mod indirect;
pub mod label_write;
pub mod metaslab;
pub mod pool;
pub mod range;
pub mod spacemap;
pub mod spares;
pub mod write;
pub mod writeback;
pub mod zilio;

pub use import::{discover, FoundPool};
pub use pool::{KeyStore, Pool, PoolOptions};
