//! Dataset names: `POOL[/FS...][@SNAP]`, parsed once.
//!
//! A [`DatasetName`] is what every operation takes apart instead of
//! splitting strings: the pool it lives in (which decides the writer and
//! whether the daemon runs the operation), its file system path, and the
//! snapshot, if any. [`DatasetName::parse`] checks OpenZFS's naming rules
//! (`ozfs_format::names`); [`pool_of`] only finds the pool of a name that
//! may not be valid (to name it in an error).

use crate::error::{Error, Result};
use std::fmt;

/// A checked dataset or snapshot name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DatasetName {
    /// `POOL/FS/...` (the file system part, pool first).
    fs: String,
    snapshot: Option<String>,
}

impl DatasetName {
    /// Parse and check `name`.
    pub fn parse(name: &str) -> Result<DatasetName> {
        ozfs_format::names::check_name(name)
            .map_err(|why| Error::Invalid(format!("invalid dataset name '{name}': {why}")))?;
        Ok(match name.split_once('@') {
            Some((fs, snap)) => DatasetName {
                fs: fs.to_string(),
                snapshot: Some(snap.to_string()),
            },
            None => DatasetName {
                fs: name.to_string(),
                snapshot: None,
            },
        })
    }

    /// The pool.
    pub fn pool(&self) -> &str {
        pool_of(&self.fs)
    }

    /// The file system (for a snapshot, the one it belongs to).
    pub fn filesystem(&self) -> &str {
        &self.fs
    }

    /// The snapshot's short name, if this names a snapshot.
    pub fn snapshot(&self) -> Option<&str> {
        self.snapshot.as_deref()
    }

    /// The parent file system (`None` for a pool's root or a snapshot).
    pub fn parent(&self) -> Option<&str> {
        if self.snapshot.is_some() {
            return None;
        }
        self.fs.rsplit_once('/').map(|(p, _)| p)
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.snapshot {
            Some(s) => write!(f, "{}@{s}", self.fs),
            None => f.write_str(&self.fs),
        }
    }
}

/// The pool part of any name (`POOL`, `POOL/FS`, `POOL@SNAP`,
/// `POOL/FS:PATH`), checked or not.
pub fn pool_of(name: &str) -> &str {
    name.split(['/', '@', ':']).next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_apart_once() {
        let n = DatasetName::parse("tank/a/b@s1").expect("valid");
        assert_eq!(n.pool(), "tank");
        assert_eq!(n.filesystem(), "tank/a/b");
        assert_eq!(n.snapshot(), Some("s1"));
        assert_eq!(n.parent(), None);
        assert_eq!(n.to_string(), "tank/a/b@s1");
        let f = DatasetName::parse("tank/a").expect("valid");
        assert_eq!(f.parent(), Some("tank"));
        assert_eq!(DatasetName::parse("tank").expect("valid").parent(), None);
        for bad in ["tank/..", "tank/.", "tank//a", "", "tank@a@b", "ta nk/\n"] {
            assert!(DatasetName::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(pool_of("tank/a:/x"), "tank");
        assert_eq!(pool_of("tank@s"), "tank");
    }
}
