//! # ozfs-ops: the operations every front end calls
//!
//! What libzfs is to OpenZFS: one typed function per operation on pools and
//! datasets — import, export, create, destroy, device changes, scrub,
//! dataset create/destroy/set/inherit/snapshot/rollback/clone/rename/
//! promote/hold, send, receive, copy in and out, remove, pre-compressed
//! record I/O — each taking typed options and returning data, never
//! printing. The command line, the daemon and programs (see
//! `examples/embed.rs`) are front ends: they parse, call and render.
//!
//! The API boundary: front ends use this crate only. Below it lie the
//! layers (spa, dmu, dsl, zpl) that know the format; above it nothing
//! knows a block pointer.
//!
//! * [`host`]: the machine's imported pools (records, locks) and who holds
//!   their writers ([`host::Holder`], the daemon).
//! * [`proto`]: the operations that change a pool, as one serde request
//!   enum; [`proto::execute`] runs one here, or in the daemon when the
//!   daemon holds the pool, and returns the same typed result either way.
//! * [`client`]: the daemon's socket and life cycle.
//! * [`events`]: the daemon's event queue (`zpool events`).
//! * [`dataset`], [`devices`], [`scan`], [`copy`], [`rawio`], [`mountinfo`],
//!   [`diff`]: the operations.
//!
//! Invariants: an operation that writes a pool holds its writer (its lock,
//! or a lease from the holder) for its whole change and syncs before it
//! returns; errors keep the kind the lower layer gave them, with what the
//! operation was doing in front ([`error::Context`]).

pub mod client;
pub mod devices;
pub mod error;
pub mod events;
pub mod history;
pub mod host;
pub mod scan;

pub use error::{Error, Result};
pub mod copy;
pub mod crypt;
pub mod dataset;
pub mod diff;
pub mod mountinfo;
pub mod proto;
pub mod query;
pub mod rawio;
pub mod userspace;

/// The handles a front end holds: a pool, its writer (owned or leased).
pub use ozfs_dsl::shared::{Lease, SharedWriter, Writer};
pub use ozfs_dsl::sync::PoolWriter;
pub use ozfs_spa::Pool;
pub mod names;
pub mod pool;
pub mod status;
