//! # ozfs-vdev: devices, labels and the vdev tree's read path
//!
//! A pool is a tree of virtual devices. Leaves are files or block devices;
//! interior nodes are mirrors (every child holds the whole block), RAID-Z
//! groups (a block is striped in columns with 1–3 parity columns) and dRAID
//! vdevs (fixed-width RAID-Z groups spread over the children by fixed
//! permutations, with distributed spares; `ozfs_codec::draid`). The
//! top-level vdevs under the root are addressed by a DVA's vdev id.
//!
//! Theory of the read path: the vdev layer cannot tell good data from bad on
//! its own; only the block's checksum can. So every read takes a `verify`
//! callback. A mirror tries its children until one copy verifies; a RAID-Z
//! group reads its data columns, and if they do not verify (or a column
//! could not be read) it tries every combination of up to `nparity`
//! columns to rebuild from parity, in order of increasing size, until the
//! checksum matches. Each leaf counts its read errors (the device failed the
//! I/O) and checksum errors (the device returned bytes that were proven
//! wrong by a successful reconstruction) in [`VdevStats`].
//!
//! Invariants:
//! * A leaf read never extends past the device's allocatable area; offsets
//!   come from DVAs (untrusted) and are bounds-checked against `asize`.
//! * Checksum errors are charged only to devices whose bytes were proven
//!   wrong by a verified alternative; if nothing verifies, no leaf is blamed
//!   and the read fails with a checksum error.
//! * Reads never modify devices (self-healing is a later layer's choice).
//!
//! Every error charged to a counter is also reported ([`report`]) to the
//! sink the holding process installed (the daemon's event queue).

pub mod device;
pub mod labels;
pub mod report;
pub mod sim;
pub mod tree;

pub use device::{open_path, BlockDevice, FileDevice};
pub use labels::{read_labels, LabelSet};
pub use tree::{ReadCtx, Vdev, VdevCell, VdevKind, VdevState, VdevStats};
