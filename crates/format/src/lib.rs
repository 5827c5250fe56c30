//! # ozfs-format: every on-disk structure of ZFS, and nothing else
//!
//! This crate owns the byte layouts of ZFS (see `../shared/FORMAT.md` and the
//! OpenZFS headers): XDR nvlists, vdev labels and uberblocks, block pointers
//! (including embedded, hole and gang forms), dnodes, objsets, DSL directories
//! and datasets, ZAP objects (micro and fat), the ZPL znode, and the intent
//! log (header, log blocks and records).
//!
//! It performs **no I/O**. Callers hand it bytes; it hands back typed views or
//! an [`Error`] naming what was malformed. Multi-block structures (fat ZAPs,
//! indirect trees) are decoded through callbacks that fetch a block, so the
//! decoders here can be fuzzed without a pool.
//!
//! Invariants:
//! * Decoding never panics and never allocates more than a bounded multiple of
//!   its input (lengths read from disk are checked against the buffer first).
//! * Byte order: every parser takes the order the writer used (`byteswap`
//!   means "the data is in the opposite order of this host") and returns
//!   host-order values.
//! * Unknown keys and enum values are carried, not rejected, unless they make
//!   the structure meaningless.

pub mod blkptr;
pub mod bytes;
pub mod dnode;
pub mod dsl;
pub mod error;
pub mod external;
pub mod history;
pub mod indirect;
pub mod label;
pub mod names;
pub mod nvlist;
pub mod nvnative;
pub mod objset;
pub mod stream;
pub mod types;
pub mod zap;
pub mod zap_write;
pub mod zil;
pub mod znode;

pub use blkptr::{BlkPtr, CryptParams, Dva};
pub use error::{Cksum, Error, ErrorKind, Result};
pub use nvlist::{NvList, NvValue};
