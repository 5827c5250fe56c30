//! The project-wide error type.
//!
//! Every layer of ozfs reports failures with [`Error`]. Bad bytes read from a
//! device, a stream or the command line become an `Error` that names *what*
//! was being decoded and *where* (device, offset, object, path), never a panic.

use std::fmt;

/// Result alias used throughout ozfs.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, from a short read to an unknown pool.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A structure was cut short: `need` bytes were required, `have` were available.
    #[error("{what}: truncated (need {need} bytes, have {have})")]
    Truncated {
        what: String,
        need: usize,
        have: usize,
    },
    /// A magic number did not match.
    #[error("{what}: bad magic {found:#x}")]
    BadMagic { what: String, found: u64 },
    /// Bytes were read but do not form a valid structure.
    #[error("{what}: corrupt: {detail}")]
    Corrupt { what: String, detail: String },
    /// A checksum did not verify.
    #[error("{what}: checksum mismatch (expected {expected}, computed {computed})")]
    Checksum {
        what: String,
        expected: Cksum,
        computed: Cksum,
    },
    /// Valid, but uses something ozfs does not implement (yet).
    #[error("{what}: unsupported: {detail}")]
    Unsupported { what: String, detail: String },
    /// An operating-system I/O error on a named device or file.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A pre-compressed block whose algorithm ozfs does not decode: it can
    /// only be read raw (POSIX reads of it fail with EIO).
    #[error("{what}: pre-compressed with algorithm tag {tag}, which ozfs does not decode (read it raw with 'ozfs rawio read')")]
    Opaque { what: String, tag: u8 },
    /// A name (pool, dataset, snapshot, path, object) that does not exist.
    #[error("{0}: not found")]
    NotFound(String),
    /// A request that makes no sense (bad argument, wrong kind of object).
    #[error("{0}")]
    Invalid(String),
}

/// A 256-bit ZFS checksum (`zio_cksum_t`), printed the way zdb prints it.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Cksum(pub [u64; 4]);

impl fmt::Display for Cksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:x}:{:x}:{:x}:{:x}",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

impl fmt::Debug for Cksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            detail: detail.into(),
        }
    }
    /// Shorthand for [`Error::Truncated`].
    pub fn truncated(what: impl Into<String>, need: usize, have: usize) -> Self {
        Error::Truncated {
            what: what.into(),
            need,
            have,
        }
    }
    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Unsupported {
            what: what.into(),
            detail: detail.into(),
        }
    }
    /// Shorthand for [`Error::Io`].
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
    /// Prefix the "what" of this error with more context (e.g. the object being read).
    pub fn context(self, ctx: &str) -> Self {
        match self {
            Error::Truncated { what, need, have } => Error::Truncated {
                what: format!("{ctx}: {what}"),
                need,
                have,
            },
            Error::BadMagic { what, found } => Error::BadMagic {
                what: format!("{ctx}: {what}"),
                found,
            },
            Error::Corrupt { what, detail } => Error::Corrupt {
                what: format!("{ctx}: {what}"),
                detail,
            },
            Error::Checksum {
                what,
                expected,
                computed,
            } => Error::Checksum {
                what: format!("{ctx}: {what}"),
                expected,
                computed,
            },
            Error::Unsupported { what, detail } => Error::Unsupported {
                what: format!("{ctx}: {what}"),
                detail,
            },
            Error::Io { what, source } => Error::Io {
                what: format!("{ctx}: {what}"),
                source,
            },
            Error::Opaque { what, tag } => Error::Opaque {
                what: format!("{ctx}: {what}"),
                tag,
            },
            Error::NotFound(s) => Error::NotFound(format!("{ctx}: {s}")),
            Error::Invalid(s) => Error::Invalid(format!("{ctx}: {s}")),
        }
    }
}
