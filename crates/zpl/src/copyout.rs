//! Copying a file or a tree out of a file system, the way `cp -a` would:
//! contents (holes kept as holes), modes, owners, atime/mtime with
//! nanoseconds, symlinks, fifos and device nodes, extended attributes, and
//! hard links (two names of one object become two names of one new file).
//!
//! # Hostile pools
//!
//! The tree comes from a pool, and a pool (or a received stream) may be
//! made by anyone: its directories may list one name twice (ZAP listings
//! are not de-duplicated), hold a symlink and then a directory of the same
//! name, link one directory object under several names (a DAG, whose paths
//! grow as 2^depth) or under its own descendants (a cycle). Nothing the pool
//! says may make the copy write outside DEST. So:
//!
//! - DEST, the user's argument, is resolved once, as `cp` does (it may be a
//!   symlink to a directory the user named). Everything below it is made
//!   relative to open directory descriptors with the `*at` calls: `mkdirat`,
//!   `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `symlinkat`, `mknodat`,
//!   `linkat`; subdirectories are entered with
//!   `openat(O_DIRECTORY | O_NOFOLLOW)`. No path string built from pool
//!   names is ever handed to the kernel, so no symlink — ours or anyone
//!   else's — is followed below DEST. Paths appear only in messages.
//! - An existing entry is accepted only where a directory is wanted and a
//!   real directory is found (copying into an existing tree); anything else
//!   that exists is an error for that entry (files are created `O_EXCL`).
//! - Within one directory, the second and later entries of one name are
//!   refused (an error naming the directory and the name); the first is
//!   copied. Names that are empty, `.`, `..`, or contain `/` or NUL are
//!   refused.
//! - Every directory object is copied once: a set of all directory objects
//!   entered (not only those on the current path) refuses a second name of
//!   one ("linked more than once"), which covers hard-linked directories,
//!   DAGs and cycles and keeps the work linear in the size of the pool's
//!   tree.
//! - A file's blocks are found through its block tree, holes skipped whole
//!   ([`ozfs_dmu::Objset::next_data_block`]): a huge `maxblkid` or size
//!   costs only the blocks that exist.
//! - Metadata goes through the descriptor of what was created (files and
//!   directories: `fsetxattr`, `fchown`, `fchmod`, `futimens`), or, for
//!   what is never opened (symlinks, fifos, sockets, device nodes), through
//!   the parent's descriptor with `AT_SYMLINK_NOFOLLOW`. A symlink is never
//!   chmodded; its xattrs are set with `lsetxattr` on
//!   `/proc/self/fd/<parent>/<name>`, which follows only our own
//!   descriptor's magic link, never the final symlink.
//!   fifos, sockets and device nodes get their mode with `fchmodat`, which
//!   has no working no-follow flag on Linux; this is safe because the entry
//!   was just made by `mknodat` in a directory that is ours and mode 0700
//!   while it is filled (nobody but root can replace the entry), and the
//!   entry is checked with `fstatat(AT_SYMLINK_NOFOLLOW)` to be of the type
//!   made right before.
//!
//! # Invariants
//!
//! - Metadata is applied after contents, and a directory's metadata after
//!   its children, so the copy's mtimes are the pool's; a directory is mode
//!   0700 while it is being filled.
//! - The copy holds one open descriptor per directory level on the current
//!   path (the tree's depth is bounded by [`crate::fs::MAX_PATH_DEPTH`] and
//!   the process's open-file limit; an entry beyond either is an error).
//! - A hard link's first name is remembered as its directory's node in a
//!   tree of names shared by the whole walk (memory per remembered name is
//!   constant, not its depth) and reached again with `O_NOFOLLOW` opens
//!   from the deepest directory still open on both paths.
//! - Errors of single entries are collected in [`CopyStats::errors`] and the
//!   copy goes on; an error returned by [`copy_out`] means nothing useful
//!   could be copied (DEST unusable, the source unreadable).

use crate::fs::Zpl;
use ozfs_format::znode::{
    ZplAttrs, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};
use ozfs_format::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// What a copy did.
#[derive(Debug, Default, Clone)]
pub struct CopyStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    pub others: u64,
    pub bytes: u64,
    /// Entries that could not be copied or were refused (path, error); the
    /// copy goes on.
    pub errors: Vec<(PathBuf, String)>,
}

/// Options for a copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Keep owners (needs root).
    pub owners: bool,
    pub xattrs: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            owners: true,
            xattrs: true,
        }
    }
}

/// A directory below the copy's root, as its name and its parent's node:
/// the nodes of one walk share their prefixes, so remembering a place costs
/// one pointer whatever its depth.
struct PathNode {
    name: CString,
    /// None: the parent is the copy's root.
    up: Option<Rc<PathNode>>,
}

/// One open directory on the current path of the walk.
struct Level {
    fd: OwnedFd,
    /// None for the copy's root.
    node: Option<Rc<PathNode>>,
}

/// Where the first name of a multiply-linked object was made: its
/// directory (None: the copy's root) and its name there.
#[derive(Clone)]
struct FirstName {
    dir: Option<Rc<PathNode>>,
    name: CString,
}

struct Copier<'a> {
    zpl: &'a Zpl,
    opts: CopyOptions,
    links: HashMap<u64, FirstName>,
    /// Every directory object entered so far.
    seen_dirs: HashSet<u64>,
    /// Open directories from the copy's root to the one being filled.
    stack: Vec<Level>,
    stats: CopyStats,
}

fn os_err(what: String) -> Error {
    Error::io(what, std::io::Error::last_os_error())
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("path with NUL: {}", p.display())))
}

/// Whether a directory entry's name can be created as one name in one
/// directory.
fn valid_name(n: &[u8]) -> bool {
    !n.is_empty() && n != b"." && n != b".." && !n.contains(&b'/') && !n.contains(&0)
}

/// `open(path, flags)` for the user's own paths (DEST and its parent).
fn open_path(p: &Path, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn open_at(dir: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: name is a valid C string; dir is an open descriptor.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Enter the directory `name` of `dir` without following a link.
fn open_dir_at(dir: RawFd, name: &CStr) -> std::io::Result<OwnedFd> {
    open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: the file type bits, if any.
fn type_at(dir: RawFd, name: &CStr) -> Option<u32> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, C string and stat buffer.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    (r == 0).then_some(st.st_mode & libc::S_IFMT)
}

fn type_word(t: u32) -> &'static str {
    match t {
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFREG => "a regular file",
        libc::S_IFIFO => "a fifo",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "something else",
    }
}

/// Open DEST as the directory that receives a copied directory's
/// contents: an existing directory the user named (followed, as `cp`
/// does), or a new one made in DEST's parent.
fn dest_dir(dest: &Path) -> Result<OwnedFd> {
    let shown = dest.display().to_string();
    match open_path(dest, libc::O_RDONLY | libc::O_DIRECTORY) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(Error::NotDir(format!(
                "{shown}: exists and is not a directory"
            )))
        }
        Err(e) => return Err(Error::io(shown, e)),
    }
    let (parent, name) = split_dest(dest)?;
    let pfd = open_path(&parent, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| Error::io(parent.display().to_string(), e))?;
    make_dir(pfd.as_raw_fd(), &name, &shown)
}

/// DEST's parent directory and last name (DEST does not exist yet).
fn split_dest(dest: &Path) -> Result<(PathBuf, CString)> {
    let name = dest
        .file_name()
        .filter(|n| valid_name(n.as_bytes()))
        .ok_or_else(|| Error::Invalid(format!("{}: not a usable name", dest.display())))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, cpath(Path::new(name))?))
}

/// `mkdirat` (mode 0700), or an existing real directory, then entered
/// without following a link.
fn make_dir(parent: RawFd, name: &CStr, shown: &str) -> Result<OwnedFd> {
    // SAFETY: valid descriptor and C string.
    if unsafe { libc::mkdirat(parent, name.as_ptr(), 0o700) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(Error::io(format!("mkdir {shown}"), e));
        }
    }
    open_dir_at(parent, name).map_err(|e| match type_at(parent, name) {
        Some(t) if t != libc::S_IFDIR => Error::NotDir(format!(
            "{shown}: exists and is {} where a directory is wanted",
            type_word(t)
        )),
        _ => Error::io(format!("open {shown}"), e),
    })
}

/// Copy object at `path` of `zpl` to `dest`. If `path` is a directory, `dest` becomes a directory
/// holding its contents (an existing directory receives them); if it is a file and `dest` is an
/// existing directory, the file goes inside it under its own name.
pub fn copy_out(zpl: &Zpl, path: &str, dest: &Path, opts: CopyOptions) -> Result<CopyStats> {
    let obj = zpl.resolve(path)?;
    let (dn, a) = zpl.attrs(obj)?;
    let mut c = Copier {
        zpl,
        opts,
        links: HashMap::new(),
        seen_dirs: HashSet::new(),
        stack: Vec::new(),
        stats: CopyStats::default(),
    };
    if a.mode & S_IFMT == S_IFDIR {
        let fd = dest_dir(dest)?;
        c.seen_dirs.insert(obj);
        c.fill_dir(&dn, &a, fd, None, dest)?;
        return Ok(c.stats);
    }
    // A single object: into DEST if it is a directory, else as DEST.
    let (parent, name, shown) = match open_path(dest, libc::O_RDONLY | libc::O_DIRECTORY) {
        Ok(fd) => {
            let base = path
                .rsplit('/')
                .find(|c| !c.is_empty() && *c != ".")
                .filter(|c| valid_name(c.as_bytes()))
                .unwrap_or("file");
            (fd, cpath(Path::new(base))?, dest.join(base))
        }
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT)
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            let (parent, name) = split_dest(dest)?;
            let pfd = open_path(&parent, libc::O_RDONLY | libc::O_DIRECTORY)
                .map_err(|e| Error::io(parent.display().to_string(), e))?;
            (pfd, name, dest.to_path_buf())
        }
        Err(e) => return Err(Error::io(dest.display().to_string(), e)),
    };
    c.copy_entry(parent.as_raw_fd(), &name, obj, &shown, 0)?;
    Ok(c.stats)
}

impl Copier<'_> {
    /// Copy the contents of directory `dn` into `fd` (already made or
    /// opened, and already counted in `seen_dirs`), then apply its metadata.
    fn fill_dir(
        &mut self,
        dn: &ozfs_dmu::Dnode,
        a: &ZplAttrs,
        fd: OwnedFd,
        node: Option<Rc<PathNode>>,
        shown: &Path,
    ) -> Result<()> {
        // Writable while we fill it, and closed to others.
        // SAFETY: fd is an open descriptor.
        unsafe { libc::fchmod(fd.as_raw_fd(), 0o700) };
        self.stats.dirs += 1;
        let mut ents = self.zpl.readdir(dn)?;
        // Stable: entries of one name keep the listing's order.
        ents.sort_by(|x, y| x.name.cmp(&y.name));
        let dfd = fd.as_raw_fd();
        self.stack.push(Level { fd, node });
        for (i, e) in ents.iter().enumerate() {
            let lossy = String::from_utf8_lossy(&e.name);
            if i > 0 && ents[i - 1].name == e.name {
                self.stats.errors.push((
                    shown.to_path_buf(),
                    format!(
                        "duplicate entry name '{lossy}' (object {}) in directory object {}: \
                         only the first '{lossy}' is copied",
                        e.object, dn.object
                    ),
                ));
                continue;
            }
            if !valid_name(&e.name) {
                self.stats
                    .errors
                    .push((shown.to_path_buf(), format!("invalid entry name {lossy:?}")));
                continue;
            }
            let child = shown.join(OsStr::from_bytes(&e.name));
            let Ok(cname) = CString::new(e.name.clone()) else {
                continue; // NUL refused by valid_name
            };
            let depth = self.stack.len();
            if let Err(err) = self.copy_entry(dfd, &cname, e.object, &child, depth) {
                self.stats.errors.push((child, err.to_string()));
            }
        }
        let level = self.stack.pop();
        match level {
            Some(l) => self.meta_fd(a, l.fd.as_raw_fd(), shown),
            None => Ok(()),
        }
    }

    /// Copy object `obj` as entry `name` of the open directory `parent`.
    fn copy_entry(
        &mut self,
        parent: RawFd,
        name: &CStr,
        obj: u64,
        shown: &Path,
        depth: usize,
    ) -> Result<()> {
        if depth > crate::fs::MAX_PATH_DEPTH {
            return Err(Error::corrupt(
                format!("{}: object {obj}", self.zpl.name),
                "directory tree too deep",
            ));
        }
        let (dn, a) = self.zpl.attrs(obj)?;
        let fmt = a.mode & S_IFMT;
        if fmt != S_IFDIR && a.links > 1 {
            if let Some(first) = self.links.get(&obj).cloned() {
                self.link_to(&first, parent, name, shown)?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        match fmt {
            S_IFDIR => {
                if !self.seen_dirs.insert(obj) {
                    return Err(Error::corrupt(
                        self.zpl.name.clone(),
                        format!(
                            "directory object {obj} is linked more than once \
                             (a hard-linked directory, a DAG or a cycle); \
                             copied only under its first name"
                        ),
                    ));
                }
                let fd = make_dir(parent, name, &shown.display().to_string())?;
                let node = Rc::new(PathNode {
                    name: name.to_owned(),
                    up: self.stack.last().and_then(|l| l.node.clone()),
                });
                return self.fill_dir(&dn, &a, fd, Some(node), shown);
            }
            S_IFREG => {
                let f = open_at(
                    parent,
                    name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                    0o600,
                )
                .map_err(|e| Error::io(format!("create {}", shown.display()), e))?;
                self.remember(obj, &a, name);
                let f = std::fs::File::from(f);
                self.copy_file(&dn, &a, &f, shown)?;
                self.stats.files += 1;
                self.meta_fd(&a, f.as_raw_fd(), shown)?;
            }
            S_IFLNK => {
                let target = self.zpl.readlink(&dn, &a)?;
                let t = CString::new(target).map_err(|_| {
                    Error::corrupt(
                        format!("{}: symlink object {obj}", self.zpl.name),
                        "target contains NUL",
                    )
                })?;
                // SAFETY: valid C strings and descriptor.
                if unsafe { libc::symlinkat(t.as_ptr(), parent, name.as_ptr()) } != 0 {
                    return Err(os_err(format!("symlink {}", shown.display())));
                }
                self.remember(obj, &a, name);
                self.stats.symlinks += 1;
                self.meta_at(&a, parent, name, fmt, shown)?;
            }
            S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK => {
                let rdev = if fmt == S_IFCHR || fmt == S_IFBLK {
                    let (maj, min) = crate::write::decode_rdev(a.rdev);
                    libc::makedev(maj as u32, min as u32)
                } else {
                    0
                };
                // SAFETY: valid C string and descriptor.
                let r = unsafe {
                    libc::mknodat(parent, name.as_ptr(), (fmt | 0o600) as libc::mode_t, rdev)
                };
                if r != 0 {
                    return Err(os_err(format!("mknod {}", shown.display())));
                }
                self.remember(obj, &a, name);
                self.stats.others += 1;
                self.meta_at(&a, parent, name, fmt, shown)?;
            }
            other => {
                return Err(Error::corrupt(
                    format!("{}: object {obj}", self.zpl.name),
                    format!("unknown file type {other:#o}"),
                ));
            }
        }
        Ok(())
    }

    /// Remember where the first name of a multiply-linked object was made.
    fn remember(&mut self, obj: u64, a: &ZplAttrs, name: &CStr) {
        if a.links > 1 {
            if let Some(l) = self.stack.last() {
                let dir = l.node.clone();
                self.links.insert(
                    obj,
                    FirstName {
                        dir,
                        name: name.to_owned(),
                    },
                );
            }
        }
    }

    /// `linkat` from the first name of an object to `name` in `parent`:
    /// the first name's directory is reached from the deepest directory
    /// open on both paths, one `O_NOFOLLOW` open per name.
    fn link_to(&self, first: &FirstName, parent: RawFd, name: &CStr, shown: &Path) -> Result<()> {
        if self.stack.is_empty() {
            return Err(Error::Invalid(format!(
                "{}: hard link outside a directory copy",
                shown.display()
            )));
        }
        // The first name's directories, from below the root down.
        let mut chain: Vec<&PathNode> = Vec::new();
        let mut n = first.dir.as_deref();
        while let Some(node) = n {
            chain.push(node);
            n = node.up.as_deref();
        }
        chain.reverse();
        let common = chain
            .iter()
            .zip(self.stack[1..].iter())
            .take_while(|(c, l)| l.node.as_deref().is_some_and(|n| std::ptr::eq(**c, n)))
            .count();
        // common < stack.len(): the root plus at most every level below it.
        let mut dir = self.stack[common].fd.as_raw_fd();
        let mut held: Option<OwnedFd> = None;
        for d in &chain[common..] {
            let fd = open_dir_at(dir, &d.name).map_err(|e| {
                Error::io(
                    format!("link {}: open its first name's directory", shown.display()),
                    e,
                )
            })?;
            dir = fd.as_raw_fd();
            held = Some(fd);
        }
        // SAFETY: valid descriptors and C strings; flags 0: a symlink is linked, not followed.
        let r = unsafe { libc::linkat(dir, first.name.as_ptr(), parent, name.as_ptr(), 0) };
        drop(held);
        if r != 0 {
            return Err(os_err(format!("link {}", shown.display())));
        }
        Ok(())
    }

    fn copy_file(
        &mut self,
        dn: &ozfs_dmu::Dnode,
        a: &ZplAttrs,
        f: &std::fs::File,
        shown: &Path,
    ) -> Result<()> {
        let bs = dn.phys.datablksz();
        if bs == 0 {
            return Err(Error::corrupt(
                format!("object {}", dn.object),
                "block size 0",
            ));
        }
        // Past maxblkid there are only holes: a corrupt, huge `size` must not
        // turn into an endless loop over blocks that cannot exist. Within it,
        // the blocks are found through the tree (holes skipped whole), so a
        // huge maxblkid costs nothing either.
        let nblocks = a.size.div_ceil(bs).min(dn.phys.maxblkid.saturating_add(1));
        // Large files: several threads each take every Nth block (read, verify,
        // decompress and write are independent per block); small files: one.
        let threads = if nblocks >= 16 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .clamp(1, 4) as u64
        } else {
            1
        };
        let os = &self.zpl.os;
        let copied = std::thread::scope(|scope| -> Result<u64> {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || -> Result<u64> {
                        let mut bytes = 0u64;
                        let mut from = 0;
                        while let Some(blkid) = os.next_data_block(dn, from)? {
                            if blkid >= nblocks {
                                break;
                            }
                            from = blkid + 1;
                            if blkid % threads != t {
                                continue;
                            }
                            if let Some(block) = os.read_block(dn, blkid)? {
                                let off = blkid * bs;
                                let n = (a.size - off).min(block.len() as u64) as usize;
                                let data = &block[..n];
                                // Keep all-zero blocks sparse.
                                if data.iter().any(|&b| b != 0) {
                                    f.write_all_at(data, off).map_err(|e| {
                                        Error::io(format!("write {}", shown.display()), e)
                                    })?;
                                    bytes += n as u64;
                                }
                            }
                        }
                        Ok(bytes)
                    })
                })
                .collect();
            let mut total = 0;
            for w in workers {
                total += w
                    .join()
                    .map_err(|_| Error::Invalid("copy thread panicked".into()))??;
            }
            Ok(total)
        })?;
        self.stats.bytes += copied;
        f.set_len(a.size)
            .map_err(|e| Error::io(format!("truncate {}", shown.display()), e))?;
        Ok(())
    }

    /// The object's xattrs, each handed to `set`, which returns 0 or -1
    /// with errno; failures are recorded and the copy goes on.
    fn xattrs(
        &mut self,
        a: &ZplAttrs,
        shown: &Path,
        mut set: impl FnMut(&CStr, &[u8]) -> libc::c_int,
    ) -> Result<()> {
        if !self.opts.xattrs || (a.xattr == 0 && a.dxattr.is_none()) {
            return Ok(());
        }
        for (name, value) in self.zpl.xattrs(a)? {
            let Ok(n) = CString::new(name.clone()) else {
                self.stats.errors.push((
                    shown.to_path_buf(),
                    format!("xattr {:?}: name with NUL", String::from_utf8_lossy(&name)),
                ));
                continue;
            };
            if set(&n, &value) != 0 {
                self.stats.errors.push((
                    shown.to_path_buf(),
                    format!(
                        "xattr {}: {}",
                        String::from_utf8_lossy(&name),
                        std::io::Error::last_os_error()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Metadata of a file or directory we hold open: xattrs, owner, mode,
    /// times, all through the descriptor.
    fn meta_fd(&mut self, a: &ZplAttrs, raw: RawFd, shown: &Path) -> Result<()> {
        self.xattrs(a, shown, |n, v| {
            // SAFETY: open descriptor, valid C string and buffer.
            unsafe { libc::fsetxattr(raw, n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
        })?;
        if self.opts.owners {
            // SAFETY: open descriptor.
            if unsafe { libc::fchown(raw, a.uid as libc::uid_t, a.gid as libc::gid_t) } != 0 {
                return Err(os_err(format!("chown {}", shown.display())));
            }
        }
        // After chown, which clears set-id bits.
        // SAFETY: open descriptor.
        if unsafe { libc::fchmod(raw, (a.mode & 0o7777) as libc::mode_t) } != 0 {
            return Err(os_err(format!("chmod {}", shown.display())));
        }
        let ts = times(a);
        // SAFETY: open descriptor and two timespecs.
        if unsafe { libc::futimens(raw, ts.as_ptr()) } != 0 {
            return Err(os_err(format!("utimes {}", shown.display())));
        }
        Ok(())
    }

    /// Metadata of an entry we never open (symlink, fifo, socket, device),
    /// through its parent's descriptor without following it.
    fn meta_at(
        &mut self,
        a: &ZplAttrs,
        parent: RawFd,
        name: &CStr,
        fmt: u64,
        shown: &Path,
    ) -> Result<()> {
        if self.opts.xattrs && (a.xattr != 0 || a.dxattr.is_some()) {
            // lsetxattr does not follow the last name; /proc/self/fd/N is
            // our own descriptor of the parent.
            let mut p = format!("/proc/self/fd/{parent}/").into_bytes();
            p.extend_from_slice(name.to_bytes());
            let p = CString::new(p)
                .map_err(|_| Error::Invalid(format!("{}: name with NUL", shown.display())))?;
            self.xattrs(a, shown, |n, v| {
                // SAFETY: valid C strings and buffer.
                unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
            })?;
        }
        if self.opts.owners {
            // SAFETY: valid descriptor and C string.
            let r = unsafe {
                libc::fchownat(
                    parent,
                    name.as_ptr(),
                    a.uid as libc::uid_t,
                    a.gid as libc::gid_t,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r != 0 {
                return Err(os_err(format!("chown {}", shown.display())));
            }
        }
        if fmt != S_IFLNK {
            // fchmodat cannot refuse to follow a link; the entry was made by
            // us just now in a directory only we can change (mode 0700), and
            // is checked not to be one.
            let want = match fmt {
                S_IFIFO => libc::S_IFIFO,
                S_IFCHR => libc::S_IFCHR,
                S_IFBLK => libc::S_IFBLK,
                _ => libc::S_IFSOCK,
            };
            if type_at(parent, name) != Some(want) {
                return Err(Error::Invalid(format!(
                    "{}: changed under the copy",
                    shown.display()
                )));
            }
            // SAFETY: valid descriptor and C string.
            let r = unsafe {
                libc::fchmodat(parent, name.as_ptr(), (a.mode & 0o7777) as libc::mode_t, 0)
            };
            if r != 0 {
                return Err(os_err(format!("chmod {}", shown.display())));
            }
        }
        let ts = times(a);
        // SAFETY: valid descriptor, C string and two timespecs.
        let r = unsafe {
            libc::utimensat(
                parent,
                name.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(os_err(format!("utimes {}", shown.display())));
        }
        Ok(())
    }
}

/// atime and mtime as `utimensat` wants them.
fn times(a: &ZplAttrs) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: a.atime.0 as libc::time_t,
            tv_nsec: a.atime.1 as libc::c_long,
        },
        libc::timespec {
            tv_sec: a.mtime.0 as libc::time_t,
            tv_nsec: a.mtime.1 as libc::c_long,
        },
    ]
}
