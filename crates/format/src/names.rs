//! Pool, dataset, snapshot and bookmark names: the one set of rules.
//!
//! A name is used to build paths (state files, default mountpoints, device
//! links), to look datasets up and to print them, so a name that arrives
//! from a label, the MOS or a send stream is exactly as untrusted as one
//! typed on the command line, and passes the same checks before it is used
//! anywhere. The rules are OpenZFS's (`zfs_namecheck.c`):
//!
//! - a *component* is 1..=255 bytes of `[A-Za-z0-9_.: -]`; `.` and `..`
//!   are not components (they would climb out of a path);
//! - a *pool name* is a component that begins with a letter; the names
//!   `mirror*`, `raidz*`, `draid*`, `spare*` and `log` are reserved for
//!   vdev keywords, and `c<digit>…` looks like a Solaris disk (both refused
//!   only for new names: [`check_new_pool_name`]);
//! - a *dataset name* is a pool name followed by `/component`s;
//! - a *snapshot* is `dataset@component`, a *bookmark* `dataset#component`;
//! - a whole name is shorter than 256 bytes (`ZFS_MAX_DATASET_NAME_LEN`
//!   counts the NUL).
//!
//! Invariant: every function here is total (no panics) and allocation-free
//! on success; errors say what is wrong in words a user can act on.

/// Longest name, in bytes (OpenZFS's 256 including the NUL).
pub const MAX_NAME_LEN: usize = 255;

fn valid_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':' | b' ')
}

/// Checks one name component (between `/`, or after `@` / `#`).
pub fn check_component(c: &str) -> Result<(), String> {
    if c.is_empty() {
        return Err("empty component".into());
    }
    if c.len() > MAX_NAME_LEN {
        return Err("name is too long".into());
    }
    if c == "." || c == ".." {
        return Err(format!("'{c}' is not a valid component"));
    }
    if let Some(b) = c.bytes().find(|&b| !valid_char(b)) {
        return Err(format!(
            "invalid character '{}' in name",
            (b as char).escape_default()
        ));
    }
    Ok(())
}

/// Checks a pool name (as found on disk: the reserved-word rules of new
/// names are in [`check_new_pool_name`]).
pub fn check_pool_name(name: &str) -> Result<(), String> {
    check_component(name)?;
    if !name.as_bytes()[0].is_ascii_alphabetic() {
        return Err("name must begin with a letter".into());
    }
    Ok(())
}

/// Checks the name of a pool about to be created or renamed on import.
pub fn check_new_pool_name(name: &str) -> Result<(), String> {
    check_pool_name(name)?;
    let reserved = ["mirror", "raidz", "draid", "spare"]
        .iter()
        .any(|p| name.starts_with(p))
        || name == "log";
    if reserved {
        return Err("name is reserved".into());
    }
    let b = name.as_bytes();
    if b[0] == b'c' && b.get(1).is_some_and(|c| c.is_ascii_digit()) {
        return Err("pool name is reserved (it looks like a disk name)".into());
    }
    Ok(())
}

/// Checks a file system or volume name (`pool[/component…]`).
pub fn check_dataset_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_NAME_LEN {
        return Err("name is too long".into());
    }
    if name.contains(['@', '#']) {
        return Err("a snapshot or bookmark name where a dataset was expected".into());
    }
    let mut parts = name.split('/');
    check_pool_name(parts.next().unwrap_or(""))?;
    parts.try_for_each(check_component)
}

/// Checks a snapshot name (`dataset@snap`).
pub fn check_snapshot_name(name: &str) -> Result<(), String> {
    let Some((ds, snap)) = name.split_once('@') else {
        return Err("not a snapshot name (no '@')".into());
    };
    if name.len() > MAX_NAME_LEN {
        return Err("name is too long".into());
    }
    check_dataset_name(ds)?;
    if snap.contains('@') {
        return Err("multiple '@' delimiters in name".into());
    }
    check_component(snap)
}

/// Checks any dataset, snapshot or bookmark name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.contains('@') {
        return check_snapshot_name(name);
    }
    if let Some((ds, mark)) = name.split_once('#') {
        if name.len() > MAX_NAME_LEN {
            return Err("name is too long".into());
        }
        check_dataset_name(ds)?;
        return check_component(mark);
    }
    check_dataset_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components() {
        for ok in ["a", "a.b", "a-b_c:d e", "...", ".x", "0"] {
            assert!(check_component(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a@b", "a%b", "a\0b", "é", "a\nb"] {
            assert!(check_component(bad).is_err(), "{bad:?}");
        }
        assert!(check_component(&"x".repeat(255)).is_ok());
        assert!(check_component(&"x".repeat(256)).is_err());
    }

    #[test]
    fn pools() {
        for ok in ["tank", "t", "a.b", "mirrorless", "c"] {
            assert!(check_pool_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "./../PWNED", "..", "1tank", "_t", "a/b", "t@s", " t"] {
            assert!(check_pool_name(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "mirror", "mirror2", "raidz1", "draid", "spare0", "log", "c0t0d0",
        ] {
            assert!(check_new_pool_name(bad).is_err(), "{bad}");
            assert!(check_pool_name(bad).is_ok(), "{bad}");
        }
        assert!(check_new_pool_name("logs").is_ok());
    }

    #[test]
    fn datasets_and_snapshots() {
        for ok in [
            "tank",
            "tank/a",
            "tank/a/b c",
            "tank/a@s",
            "tank@s",
            "tank/a#m",
        ] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "tank/",
            "tank//a",
            "tank/..",
            "tank/.",
            "tank/a/../b",
            "tank@",
            "tank@a@b",
            "tank@a/b",
            "@s",
            "/tank",
            "tank/a\u{1}",
            "tank/a#",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_dataset_name("tank@s").is_err());
        assert!(check_snapshot_name("tank").is_err());
        let long = format!("tank/{}", "a".repeat(251));
        assert!(check_dataset_name(&long).is_err());
        assert!(check_dataset_name(&long[..255]).is_ok());
    }
}
