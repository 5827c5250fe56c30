//! A deliberately simple error type: every failure in the harness is a
//! human-readable message (command line, exit status, stdout, stderr, path).

use std::fmt;

/// Harness error: a message meant for a test failure report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

/// Result alias used throughout the testkit.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Builds an error from anything printable.
    pub fn msg(m: impl Into<String>) -> Self {
        Error(m.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(format!("I/O error: {e}"))
    }
}

/// Adds context (typically a path or an operation) to I/O results.
pub trait Context<T> {
    /// Prefixes the error message with `what`.
    fn ctx(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
}

/// `bail!("...")`-style early return for the harness.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::Error(format!($($arg)*)))
    };
}
