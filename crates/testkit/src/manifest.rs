//! Tree manifests: everything about a directory tree that a faithful
//! copy-out must reproduce, in a form that can be compared and diffed.
//!
//! Compared: kind, permission bits (incl. setuid/setgid/sticky), uid, gid,
//! size (not for directories), mtime (seconds and nanoseconds; also for
//! directories and symlinks), sha256 of file contents, symlink targets,
//! `user.*` xattrs, and hard-link groups (files sharing an inode get the same
//! group id: the smallest relative path of the group, so the id is the same
//! for two trees with the same structure).  Not compared: atime, ctime,
//! inode numbers, directory sizes, block counts.
//!
//! The root of the tree is the entry `"."`; its metadata (mode, owner,
//! mtime) is compared too.  Symlinks are never followed; other file systems
//! mounted inside the tree are skipped.

use crate::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr, OsString};
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// File kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    CharDev,
    /// Block device.
    BlockDev,
    /// Unix socket.
    Socket,
}

/// One entry of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// Permission bits incl. setuid/setgid/sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (`None` for directories: not compared).
    pub size: Option<u64>,
    /// Modification time: (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Hex sha256 of the contents (regular files only).
    pub sha256: Option<String>,
    /// Link target (symlinks only).
    pub target: Option<OsString>,
    /// `user.*` extended attributes.
    pub xattrs: BTreeMap<OsString, Vec<u8>>,
    /// Hard-link group: smallest relative path among the names of this
    /// inode inside the tree (`None` if it has one name in the tree).
    pub link_group: Option<PathBuf>,
    /// Device number (char/block devices only).
    pub rdev: Option<u64>,
}

/// Options for [`Manifest::scan_with`].
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Read `user.*` xattrs (default true).  A failing listxattr is an error.
    pub xattrs: bool,
    /// Hash file contents (default true).
    pub hash: bool,
    /// Relative paths (and everything below them) to leave out.
    pub exclude: Vec<PathBuf>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            xattrs: true,
            hash: true,
            exclude: Vec::new(),
        }
    }
}

/// A scanned tree: relative path -> [`Entry`] (root = `"."`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The entries, sorted by path.
    pub entries: BTreeMap<PathBuf, Entry>,
}

fn kind_of(ft: &fs::FileType) -> Kind {
    if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else {
        Kind::Socket
    }
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error(format!("NUL in path {}", p.display())))
}

/// `user.*` xattrs of `p` (not following symlinks).  The value is fetched
/// with a size query first and then an exactly-sized buffer: zfs-fuse
/// mishandles a getxattr whose buffer is too small (returns garbage instead
/// of ERANGE).
pub fn read_xattrs(p: &Path) -> Result<BTreeMap<OsString, Vec<u8>>> {
    let c = cpath(p)?;
    let mut out = BTreeMap::new();
    let names = loop {
        // SAFETY: size query with a null buffer.
        let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error(format!("llistxattr {}: {e}", p.display())));
        }
        if n == 0 {
            return Ok(out);
        }
        let mut buf = vec![0u8; n as usize];
        // SAFETY: buf has buf.len() bytes.
        let m = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if m < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(Error(format!("llistxattr {}: {e}", p.display())));
        }
        buf.truncate(m as usize);
        break buf;
    };
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if !name.starts_with(b"user.") {
            continue;
        }
        let cname = CString::new(name).expect("no NUL");
        let value = loop {
            // SAFETY: size query.
            let n = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error(format!(
                    "lgetxattr {} {}: {e}",
                    p.display(),
                    String::from_utf8_lossy(name)
                )));
            }
            let mut buf = vec![0u8; n as usize];
            if n == 0 {
                break buf;
            }
            // SAFETY: buf has buf.len() bytes.
            let m = unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    cname.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if m < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ERANGE) {
                    continue;
                }
                return Err(Error(format!(
                    "lgetxattr {} {}: {e}",
                    p.display(),
                    String::from_utf8_lossy(name)
                )));
            }
            buf.truncate(m as usize);
            break buf;
        };
        out.insert(OsString::from_vec(name.to_vec()), value);
    }
    Ok(out)
}

/// sha256 of zero bytes.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Hex sha256 of a file's contents.
pub fn sha256_file(p: &Path) -> Result<String> {
    let mut f = fs::File::open(p).map_err(|e| Error(format!("open {}: {e}", p.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error(format!("read {}: {e}", p.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Manifest {
    /// Scans `root` with default options.
    pub fn scan(root: impl AsRef<Path>) -> Result<Manifest> {
        Self::scan_with(root, &ScanOptions::default())
    }

    /// Scans `root`.
    pub fn scan_with(root: impl AsRef<Path>, opts: &ScanOptions) -> Result<Manifest> {
        let root = root.as_ref();
        let md =
            fs::symlink_metadata(root).map_err(|e| Error(format!("{}: {e}", root.display())))?;
        let dev = md.dev();
        let mut m = Manifest::default();
        let mut inodes: HashMap<(u64, u64), Vec<PathBuf>> = HashMap::new();
        let mut stack = vec![PathBuf::from(".")];
        while let Some(rel) = stack.pop() {
            if opts.exclude.iter().any(|x| rel.starts_with(x)) {
                continue;
            }
            let abs = if rel == Path::new(".") {
                root.to_path_buf()
            } else {
                root.join(&rel)
            };
            let md =
                fs::symlink_metadata(&abs).map_err(|e| Error(format!("{}: {e}", abs.display())))?;
            if md.dev() != dev {
                continue; // another mount inside the tree
            }
            let kind = kind_of(&md.file_type());
            let mut e = Entry {
                kind,
                mode: md.mode() & 0o7777,
                uid: md.uid(),
                gid: md.gid(),
                size: if kind == Kind::Dir {
                    None
                } else {
                    Some(md.size())
                },
                mtime: (md.mtime(), md.mtime_nsec()),
                sha256: None,
                target: None,
                xattrs: BTreeMap::new(),
                link_group: None,
                rdev: matches!(kind, Kind::CharDev | Kind::BlockDev).then(|| md.rdev()),
            };
            match kind {
                Kind::File => {
                    if opts.hash {
                        e.sha256 = Some(if md.size() == 0 {
                            // Saves an open+read per empty file (slow via FUSE).
                            EMPTY_SHA256.to_string()
                        } else {
                            sha256_file(&abs)?
                        });
                    }
                    if md.nlink() > 1 {
                        inodes
                            .entry((md.dev(), md.ino()))
                            .or_default()
                            .push(rel.clone());
                    }
                }
                Kind::Symlink => {
                    e.target = Some(
                        fs::read_link(&abs)
                            .map_err(|er| Error(format!("readlink {}: {er}", abs.display())))?
                            .into_os_string(),
                    );
                }
                Kind::Dir => {
                    let rd = fs::read_dir(&abs)
                        .map_err(|er| Error(format!("{}: {er}", abs.display())))?;
                    for de in rd {
                        let de = de.map_err(|er| Error(format!("{}: {er}", abs.display())))?;
                        stack.push(if rel == Path::new(".") {
                            PathBuf::from(de.file_name())
                        } else {
                            rel.join(de.file_name())
                        });
                    }
                }
                _ => {
                    if md.nlink() > 1 {
                        inodes
                            .entry((md.dev(), md.ino()))
                            .or_default()
                            .push(rel.clone());
                    }
                }
            }
            if opts.xattrs && matches!(kind, Kind::File | Kind::Dir) {
                e.xattrs = read_xattrs(&abs)?;
            }
            m.entries.insert(rel, e);
        }
        for (_, mut names) in inodes {
            if names.len() < 2 {
                continue;
            }
            names.sort();
            let g = names[0].clone();
            for n in names {
                if let Some(e) = m.entries.get_mut(&n) {
                    e.link_group = Some(g.clone());
                }
            }
        }
        Ok(m)
    }

    /// Number of entries (root included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no entries at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry at a relative path.
    pub fn get(&self, rel: impl AsRef<Path>) -> Option<&Entry> {
        self.entries.get(rel.as_ref())
    }

    /// A copy without the entries under (and at) `rel`.
    pub fn without(&self, rel: impl AsRef<Path>) -> Manifest {
        let rel = rel.as_ref();
        Manifest {
            entries: self
                .entries
                .iter()
                .filter(|(k, _)| !k.starts_with(rel))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The sub-tree at `rel`, re-rooted (its paths relative to `rel`, `rel`
    /// itself becomes `"."`); hard-link groups are recomputed for the
    /// sub-tree.  Useful to compare a copy-out of a sub-directory.
    pub fn subtree(&self, rel: impl AsRef<Path>) -> Manifest {
        let rel = rel.as_ref();
        let mut entries: BTreeMap<PathBuf, Entry> = BTreeMap::new();
        for (k, v) in &self.entries {
            let Ok(sub) = k.strip_prefix(rel) else {
                continue;
            };
            let key = if sub.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                sub.to_path_buf()
            };
            entries.insert(key, v.clone());
        }
        // Regroup hard links inside the sub-tree.
        let mut groups: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for (k, v) in &entries {
            if let Some(g) = &v.link_group {
                groups.entry(g.clone()).or_default().push(k.clone());
            }
        }
        for (_, names) in groups {
            let g = if names.len() >= 2 {
                Some(names[0].clone())
            } else {
                None
            };
            for n in names {
                entries.get_mut(&n).expect("entry").link_group = g.clone();
            }
        }
        Manifest { entries }
    }

    /// Total bytes of regular files.
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter(|e| e.kind == Kind::File)
            .filter_map(|e| e.size)
            .sum()
    }

    /// Every difference between `self` ("expected") and `other` ("actual"),
    /// one readable line each, at most 50 lines (then a count of the rest).
    pub fn diff(&self, other: &Manifest) -> Vec<String> {
        const CAP: usize = 50;
        let mut out = Vec::new();
        let mut total = 0usize;
        let mut push = |s: String| {
            total += 1;
            if out.len() < CAP {
                out.push(s);
            }
        };
        for (k, a) in &self.entries {
            let p = k.display();
            let Some(b) = other.entries.get(k) else {
                push(format!("missing in actual: {p} ({:?})", a.kind));
                continue;
            };
            if a.kind != b.kind {
                push(format!("{p}: kind {:?} != {:?}", a.kind, b.kind));
                continue;
            }
            if a.mode != b.mode {
                push(format!("{p}: mode {:04o} != {:04o}", a.mode, b.mode));
            }
            if (a.uid, a.gid) != (b.uid, b.gid) {
                push(format!(
                    "{p}: owner {}:{} != {}:{}",
                    a.uid, a.gid, b.uid, b.gid
                ));
            }
            if a.size != b.size {
                push(format!("{p}: size {:?} != {:?}", a.size, b.size));
            }
            if a.mtime != b.mtime {
                push(format!(
                    "{p}: mtime {}.{:09} != {}.{:09}",
                    a.mtime.0, a.mtime.1, b.mtime.0, b.mtime.1
                ));
            }
            if a.sha256 != b.sha256 && a.sha256.is_some() && b.sha256.is_some() {
                push(format!(
                    "{p}: content differs (sha256 {} != {})",
                    short(&a.sha256),
                    short(&b.sha256)
                ));
            }
            if a.target != b.target {
                push(format!(
                    "{p}: symlink target {:?} != {:?}",
                    a.target, b.target
                ));
            }
            if a.rdev != b.rdev {
                push(format!("{p}: rdev {:?} != {:?}", a.rdev, b.rdev));
            }
            if a.xattrs != b.xattrs {
                for (n, v) in &a.xattrs {
                    match b.xattrs.get(n) {
                        None => push(format!("{p}: xattr {n:?} missing in actual")),
                        Some(w) if w != v => push(format!(
                            "{p}: xattr {n:?} value differs ({} vs {} bytes: {} / {})",
                            v.len(),
                            w.len(),
                            preview(v),
                            preview(w)
                        )),
                        _ => {}
                    }
                }
                for n in b.xattrs.keys().filter(|n| !a.xattrs.contains_key(*n)) {
                    push(format!("{p}: unexpected xattr {n:?} in actual"));
                }
            }
            if a.link_group != b.link_group {
                push(format!(
                    "{p}: hard-link group {:?} != {:?}",
                    a.link_group.as_ref().map(|g| g.display().to_string()),
                    b.link_group.as_ref().map(|g| g.display().to_string())
                ));
            }
        }
        for (k, b) in &other.entries {
            if !self.entries.contains_key(k) {
                push(format!(
                    "unexpected in actual: {} ({:?})",
                    k.display(),
                    b.kind
                ));
            }
        }
        if total > out.len() {
            out.push(format!("... and {} more differences", total - out.len()));
        }
        out
    }

    /// Panics with a readable diff unless `actual` equals `self`.
    pub fn assert_same(&self, actual: &Manifest, context: &str) {
        let d = self.diff(actual);
        if !d.is_empty() {
            panic!(
                "{context}: trees differ (expected {} entries, actual {}):\n  {}",
                self.len(),
                actual.len(),
                d.join("\n  ")
            );
        }
    }
}

/// Panics with a readable diff unless the two manifests are equal.
pub fn assert_manifest_eq(expected: &Manifest, actual: &Manifest, context: &str) {
    expected.assert_same(actual, context)
}

fn short(h: &Option<String>) -> String {
    h.as_deref()
        .map(|s| s[..12.min(s.len())].to_string())
        .unwrap_or_default()
}

fn preview(v: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned();
    format!("{s:?}")
}

impl fmt::Display for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, e) in &self.entries {
            writeln!(
                f,
                "{:?} {:04o} {}:{} {:?} {}.{:09} {} {}",
                e.kind,
                e.mode,
                e.uid,
                e.gid,
                e.size,
                e.mtime.0,
                e.mtime.1,
                k.display(),
                e.target
                    .as_deref()
                    .map(OsStr::to_string_lossy)
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    }
}
