//! # ozfs-dsl: the dataset and snapshot layer
//!
//! The MOS (meta objset) names everything in a pool. Object 1 is the object
//! directory, a ZAP whose `root_dataset` entry is the root DSL directory. DSL
//! directories form the dataset hierarchy (a child-map ZAP per directory;
//! names starting with `$` are internal: `$MOS`, `$ORIGIN`, `$FREE`); each
//! directory's head dataset is the live file system or volume, and the
//! head's snapshot-names ZAP lists its snapshots. A dataset's `ds_bp` roots
//! its objset. Properties live in each directory's props ZAP and are
//! inherited down the hierarchy; what is not set anywhere takes its default.
//!
//! Invariants:
//! * Names are built only from ZAP keys that were read and verified; a name
//!   that cannot be found is `Error::NotFound` naming the full path.
//! * Traversal of the hierarchy is bounded (depth and count), so a corrupt
//!   child map that loops yields an error, not a hang.
//! * Read-only: nothing here writes.

pub mod brt;
mod compat_table;
pub mod create;
pub mod crypt;
pub mod ddt;
pub mod deadlist;
pub mod destroy;
pub mod features;
pub mod history;
pub mod obsolete;
pub mod pool;
pub mod promote;
pub mod props;
pub mod quota;
pub mod recv;
pub mod rename;
pub mod reservation;
pub mod rollback;
pub mod scrub;
pub mod send;
pub mod shared;
pub mod slop;
pub mod snapshot;
pub mod space;
pub mod sync;
pub mod verify;
pub mod zil;

pub use pool::{DatasetInfo, DslPool, SpaceInfo};
pub use props::{PropSource, PropValue};
