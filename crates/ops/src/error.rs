//! Errors of operations: the format crate's [`Error`].
//!
//! An operation says what it was doing ("cannot destroy 'tank/a'") in front
//! of what went wrong with [`Error::context`], which keeps the variant, so
//! the FUSE errno, the CLI's exit code and a program's `match` see the kind
//! the lower layer chose.

pub use ozfs_format::{Error, Result};

/// A message as an error of the generic kind (a refused request).
pub fn invalid(m: impl Into<String>) -> Error {
    Error::Invalid(m.into())
}
