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
    #[error("{0}")]
    NotFound(String),
    /// A request that makes no sense (bad argument, wrong kind of object).
    #[error("{0}")]
    Invalid(String),
    /// The name to be created (file, dataset, tag, entry) is already there.
    #[error("{0}")]
    Exists(String),
    /// A directory that must be empty is not.
    #[error("{0}")]
    NotEmpty(String),
    /// A directory was needed and something else was found.
    #[error("{0}")]
    NotDir(String),
    /// A non-directory was needed and a directory was found.
    #[error("{0}")]
    IsDir(String),
    /// Not enough free space for the request.
    #[error("{0}")]
    NoSpace(String),
    /// The object is in use (held, mounted, open) and cannot be changed.
    #[error("{0}")]
    Busy(String),
    /// The operation is not permitted on this object, whoever asks.
    #[error("{0}")]
    Permission(String),
    /// A dataset's `quota` or `refquota` leaves no room for the request.
    #[error("{0}")]
    Quota(String),
}

/// What kind of failure an [`Error`] is, independent of its message: what
/// a caller acts on (an errno for FUSE, an exit path for the CLI). Its
/// [`name`](ErrorKind::name) travels on a wire and comes back through
/// [`from_name`](ErrorKind::from_name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    Exists,
    NotEmpty,
    NotDir,
    IsDir,
    NoSpace,
    Busy,
    Unsupported,
    Corrupt,
    Permission,
    Invalid,
    Io,
    Usage,
    Quota,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::NotFound,
        ErrorKind::Exists,
        ErrorKind::NotEmpty,
        ErrorKind::NotDir,
        ErrorKind::IsDir,
        ErrorKind::NoSpace,
        ErrorKind::Busy,
        ErrorKind::Unsupported,
        ErrorKind::Corrupt,
        ErrorKind::Permission,
        ErrorKind::Invalid,
        ErrorKind::Io,
        ErrorKind::Usage,
        ErrorKind::Quota,
    ];

    /// The snake_case name of the kind (stable: it travels on a wire).
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::Exists => "exists",
            ErrorKind::NotEmpty => "not_empty",
            ErrorKind::NotDir => "not_dir",
            ErrorKind::IsDir => "is_dir",
            ErrorKind::NoSpace => "no_space",
            ErrorKind::Busy => "busy",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Permission => "permission",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Io => "io",
            ErrorKind::Usage => "usage",
            ErrorKind::Quota => "quota",
        }
    }

    /// The kind named `name` (as given by [`name`](ErrorKind::name)).
    pub fn from_name(name: &str) -> Option<Self> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The errno that reports this kind (EIO for an I/O error whose OS
    /// error is not known).
    pub fn errno(&self) -> i32 {
        match self {
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::Exists => libc::EEXIST,
            ErrorKind::NotEmpty => libc::ENOTEMPTY,
            ErrorKind::NotDir => libc::ENOTDIR,
            ErrorKind::IsDir => libc::EISDIR,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::Busy => libc::EBUSY,
            ErrorKind::Unsupported => libc::EOPNOTSUPP,
            ErrorKind::Corrupt => libc::EIO,
            ErrorKind::Permission => libc::EPERM,
            ErrorKind::Invalid | ErrorKind::Usage => libc::EINVAL,
            ErrorKind::Io => libc::EIO,
            ErrorKind::Quota => libc::EDQUOT,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Truncated { .. }
            | Error::BadMagic { .. }
            | Error::Corrupt { .. }
            | Error::Checksum { .. } => ErrorKind::Corrupt,
            Error::Unsupported { .. } | Error::Opaque { .. } => ErrorKind::Unsupported,
            Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                ErrorKind::NoSpace
            }
            Error::Io { .. } => ErrorKind::Io,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Exists(_) => ErrorKind::Exists,
            Error::NotEmpty(_) => ErrorKind::NotEmpty,
            Error::NotDir(_) => ErrorKind::NotDir,
            Error::IsDir(_) => ErrorKind::IsDir,
            Error::NoSpace(_) => ErrorKind::NoSpace,
            Error::Busy(_) => ErrorKind::Busy,
            Error::Permission(_) => ErrorKind::Permission,
            Error::Quota(_) => ErrorKind::Quota,
        }
    }

    /// The errno that reports this error to a POSIX caller: the kind's
    /// ([`ErrorKind::errno`]), except that an I/O error gives its own OS
    /// error and a pre-compressed block ozfs cannot decode gives EIO (a
    /// read of it fails; only a raw read gets its bytes).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Opaque { .. } => libc::EIO,
            e => e.kind().errno(),
        }
    }

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
    /// `what` does not exist: "WHAT: not found" (a message that says it
    /// all is `NotFound(message)`).
    pub fn not_found(what: impl Into<String>) -> Self {
        Error::NotFound(format!("{}: not found", what.into()))
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
            Error::Exists(s) => Error::Exists(format!("{ctx}: {s}")),
            Error::NotEmpty(s) => Error::NotEmpty(format!("{ctx}: {s}")),
            Error::NotDir(s) => Error::NotDir(format!("{ctx}: {s}")),
            Error::IsDir(s) => Error::IsDir(format!("{ctx}: {s}")),
            Error::NoSpace(s) => Error::NoSpace(format!("{ctx}: {s}")),
            Error::Busy(s) => Error::Busy(format!("{ctx}: {s}")),
            Error::Permission(s) => Error::Permission(format!("{ctx}: {s}")),
            Error::Quota(s) => Error::Quota(format!("{ctx}: {s}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(code: Option<i32>) -> Error {
        let source = match code {
            Some(c) => std::io::Error::from_raw_os_error(c),
            None => std::io::Error::other("no os error"),
        };
        Error::io("dev", source)
    }

    #[test]
    fn kind_and_errno_of_every_variant() {
        let s = || "m".to_string();
        let cases: Vec<(Error, ErrorKind, i32)> = vec![
            (Error::truncated("x", 2, 1), ErrorKind::Corrupt, libc::EIO),
            (
                Error::BadMagic {
                    what: s(),
                    found: 1,
                },
                ErrorKind::Corrupt,
                libc::EIO,
            ),
            (Error::corrupt("x", "y"), ErrorKind::Corrupt, libc::EIO),
            (
                Error::Checksum {
                    what: s(),
                    expected: Cksum::default(),
                    computed: Cksum([1, 0, 0, 0]),
                },
                ErrorKind::Corrupt,
                libc::EIO,
            ),
            (
                Error::unsupported("x", "y"),
                ErrorKind::Unsupported,
                libc::EOPNOTSUPP,
            ),
            (io(Some(libc::EROFS)), ErrorKind::Io, libc::EROFS),
            (io(Some(libc::ENXIO)), ErrorKind::Io, libc::ENXIO),
            (io(None), ErrorKind::Io, libc::EIO),
            (io(Some(libc::ENOSPC)), ErrorKind::NoSpace, libc::ENOSPC),
            (
                Error::Opaque { what: s(), tag: 9 },
                ErrorKind::Unsupported,
                libc::EIO,
            ),
            (Error::NotFound(s()), ErrorKind::NotFound, libc::ENOENT),
            (Error::Invalid(s()), ErrorKind::Invalid, libc::EINVAL),
            (Error::Exists(s()), ErrorKind::Exists, libc::EEXIST),
            (Error::NotEmpty(s()), ErrorKind::NotEmpty, libc::ENOTEMPTY),
            (Error::NotDir(s()), ErrorKind::NotDir, libc::ENOTDIR),
            (Error::IsDir(s()), ErrorKind::IsDir, libc::EISDIR),
            (Error::NoSpace(s()), ErrorKind::NoSpace, libc::ENOSPC),
            (Error::Busy(s()), ErrorKind::Busy, libc::EBUSY),
            (Error::Permission(s()), ErrorKind::Permission, libc::EPERM),
            (Error::Quota(s()), ErrorKind::Quota, libc::EDQUOT),
        ];
        for (e, kind, errno) in cases {
            assert_eq!(e.kind(), kind, "{e:?}");
            assert_eq!(e.errno(), errno, "{e:?}");
            // Context keeps the kind.
            let c = e.context("ctx");
            assert_eq!(c.kind(), kind, "{c:?}");
            assert_eq!(c.errno(), errno, "{c:?}");
        }
    }

    #[test]
    fn typed_messages_print_as_given() {
        for e in [
            Error::Invalid("msg".into()),
            Error::Exists("msg".into()),
            Error::NotEmpty("msg".into()),
            Error::NotDir("msg".into()),
            Error::IsDir("msg".into()),
            Error::NoSpace("msg".into()),
            Error::Busy("msg".into()),
            Error::Permission("msg".into()),
        ] {
            assert_eq!(e.to_string(), "msg");
            assert_eq!(e.context("d").to_string(), "d: msg");
        }
    }

    #[test]
    fn kind_names_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for k in ErrorKind::ALL {
            assert!(seen.insert(k.name()), "duplicate name {}", k.name());
            assert_eq!(ErrorKind::from_name(k.name()), Some(k));
            assert_eq!(k.to_string(), k.name());
            assert!(k
                .name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(ErrorKind::from_name("NotFound"), None);
        assert_eq!(ErrorKind::from_name(""), None);
        assert_eq!(ErrorKind::Usage.errno(), libc::EINVAL);
    }
}
