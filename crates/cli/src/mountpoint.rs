//! Mountpoints resolved as a careful kernel file system would: without
//! following symbolic links, and only through directories no other user
//! can change.
//!
//! [`prepare`] walks the path from `/` one component at a time with
//! `openat(O_PATH | O_NOFOLLOW | O_DIRECTORY)`, creating missing
//! directories with `mkdirat` (mode 0755) on the way. Every directory it
//! looks into must be owned by root or the daemon's user and writable by
//! nobody else — or sticky and owned by root (as `/tmp`): there, other
//! users may add names but not replace ours. A symbolic link anywhere on
//! the path, `..`, or an untrusted directory refuses the mount. The caller
//! mounts onto `/proc/self/fd/N` of the directory it opened, so what it
//! checked is what it mounts on, whatever is renamed meanwhile.
//!
//! Invariant: no path handed to `mount(2)` by the daemon was resolved
//! through a symbolic link or a directory another user can write.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// An opened, checked mountpoint directory.
pub struct Target {
    /// The mountpoint as text: absolute, without `.`, `..` or links.
    pub path: PathBuf,
    /// The directory itself (`O_PATH`).
    pub fd: OwnedFd,
}

impl Target {
    /// What to hand to `mount(2)`: the opened directory itself.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

/// `p` as an absolute path without `.` components or repeated slashes;
/// `..` is refused (resolving it would need the links we refuse).
pub fn normalize(p: &Path) -> Result<PathBuf, String> {
    if !p.is_absolute() {
        return Err(format!("mountpoint '{}' is not absolute", p.display()));
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("mountpoint '{}' contains '..'", p.display()))
            }
        }
    }
    Ok(out)
}

fn open_at(dir: Option<&OwnedFd>, name: &[u8]) -> std::io::Result<OwnedFd> {
    let c = CString::new(name).map_err(std::io::Error::other)?;
    let base = dir.map(|d| d.as_raw_fd()).unwrap_or(libc::AT_FDCWD);
    // SAFETY: openat with a NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::openat(
            base,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_fd(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed stat buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

/// Whether names in a directory of this owner and mode can be changed only
/// by root and `me`.
pub fn trusted(uid: u32, mode: u32, me: u32) -> bool {
    let owner_ok = uid == 0 || uid == me;
    let nobody_else_writes = mode & 0o022 == 0;
    let sticky_root = mode & libc::S_ISVTX != 0 && uid == 0;
    owner_ok && (nobody_else_writes || sticky_root)
}

/// Open (creating what is missing) and check mountpoint `p`; see the
/// module's documentation.
pub fn prepare(p: &Path) -> Result<Target, String> {
    let path = normalize(p)?;
    let fail = |m: String| format!("mountpoint {}: {m}", path.display());
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut fd = open_at(None, b"/").map_err(|e| fail(format!("open /: {e}")))?;
    let mut here = PathBuf::from("/");
    for c in path.components() {
        let Component::Normal(name) = c else { continue };
        let st = stat_fd(&fd).map_err(|e| fail(format!("{}: {e}", here.display())))?;
        if !trusted(st.st_uid, st.st_mode, me) {
            return Err(fail(format!(
                "{} is writable by another user (owner {}, mode {:o}): refused",
                here.display(),
                st.st_uid,
                st.st_mode & 0o7777
            )));
        }
        let name = name.as_bytes();
        let next = match open_at(Some(&fd), name) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let c = CString::new(name).map_err(|e| fail(e.to_string()))?;
                // SAFETY: mkdirat relative to a directory we hold open.
                if unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(fail(format!(
                            "failed to create {}: {e}",
                            here.join(as_path(name)).display()
                        )));
                    }
                }
                open_at(Some(&fd), name)
            }
            r => r,
        };
        here.push(as_path(name));
        fd = next.map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) | Some(libc::ELOOP) => fail(format!(
                "{} is a symbolic link or not a directory: refused",
                here.display()
            )),
            _ => fail(format!("{}: {e}", here.display())),
        })?;
    }
    let st = stat_fd(&fd).map_err(|e| fail(e.to_string()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(fail("not a directory".into()));
    }
    Ok(Target { path, fd })
}

fn as_path(b: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_refuses_dotdot() {
        assert_eq!(
            normalize(Path::new("/a//b/./c/")).unwrap(),
            Path::new("/a/b/c")
        );
        assert!(normalize(Path::new("/a/../b")).is_err());
        assert!(normalize(Path::new("rel")).is_err());
    }

    #[test]
    fn trust_rules() {
        assert!(trusted(0, 0o40755, 0));
        assert!(trusted(0, 0o41777, 0)); // /tmp
        assert!(!trusted(1000, 0o40755, 0));
        assert!(!trusted(0, 0o40777, 0));
        assert!(!trusted(0, 0o40775, 0));
        assert!(!trusted(1000, 0o41777, 0));
    }
}
