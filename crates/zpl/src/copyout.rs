//! Copying a file or a tree out of a file system, the way `cp -a` would:
//! contents (holes kept as holes), modes, owners, atime/mtime with
//! nanoseconds, symlinks, fifos and device nodes, extended attributes, and
//! hard links (two names of one object become two names of one new file).
//!
//! Metadata is applied after contents, and a directory's times after its
//! children, so the copy's mtimes are the pool's.
//!
//! Bounded on hostile pools: a directory object is copied once — reached
//! a second time (a loop, or a second name, which ZFS never makes) it is
//! an error for that entry, so the work follows the objects, never the
//! paths through them (two entries per directory naming the next one
//! would otherwise double the copy at every level); depth is capped; a
//! file's blocks are found through its tree, holes skipped whole.

use crate::fs::Zpl;
use ozfs_format::znode::{
    ZplAttrs, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};
use ozfs_format::{Error, Result};
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// What a copy did.
#[derive(Debug, Default, Clone)]
pub struct CopyStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub hardlinks: u64,
    pub others: u64,
    pub bytes: u64,
    /// Objects that could not be read (path, error); the copy goes on.
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

struct Copier<'a> {
    zpl: &'a Zpl,
    opts: CopyOptions,
    links: HashMap<u64, PathBuf>,
    stats: CopyStats,
    /// Directories on the current path (cycle detection).
    /// Directory objects copied (or being copied).
    dirs: std::collections::HashSet<u64>,
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("path with NUL: {}", p.display())))
}

fn os_err(what: String) -> Error {
    Error::io(what, std::io::Error::last_os_error())
}

/// Copy object at `path` of `zpl` to `dest`. If `path` is a directory, `dest` becomes a directory
/// holding its contents; if it is a file and `dest` is an existing directory, the file goes inside it.
pub fn copy_out(zpl: &Zpl, path: &str, dest: &Path, opts: CopyOptions) -> Result<CopyStats> {
    let obj = zpl.resolve(path)?;
    let (_, a) = zpl.attrs(obj)?;
    let mut target = dest.to_path_buf();
    if a.mode & S_IFMT != S_IFDIR && dest.is_dir() {
        let base = path.rsplit('/').find(|c| !c.is_empty()).unwrap_or("file");
        target = dest.join(base);
    }
    let mut c = Copier {
        zpl,
        opts,
        links: HashMap::new(),
        stats: CopyStats::default(),
        dirs: Default::default(),
    };
    c.copy(obj, &target, 0)?;
    Ok(c.stats)
}

impl Copier<'_> {
    fn copy(&mut self, obj: u64, dest: &Path, depth: usize) -> Result<()> {
        if depth > crate::fs::MAX_PATH_DEPTH {
            return Err(Error::corrupt(
                format!("{}: object {obj}", self.zpl.name),
                "directory tree too deep",
            ));
        }
        let (dn, a) = self.zpl.attrs(obj)?;
        let fmt = a.mode & S_IFMT;
        if fmt != S_IFDIR && a.links > 1 {
            if let Some(first) = self.links.get(&obj) {
                std::fs::hard_link(first, dest)
                    .map_err(|e| Error::io(format!("link {}", dest.display()), e))?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
            self.links.insert(obj, dest.to_path_buf());
        }
        match fmt {
            S_IFDIR => {
                if !self.dirs.insert(obj) {
                    return Err(Error::corrupt(
                        format!("{}: directory object {obj}", self.zpl.name),
                        "directory reached twice (a loop or a second link)",
                    ));
                }
                // An existing directory is taken as the destination only at
                // the top (the user's, which may be a symlink to one); below,
                // only a real directory, never a symlink: a pool with two
                // entries of one name — a symlink to anywhere, then a
                // directory — must not make the copy write through it.
                let existing_dir = |d: &Path| {
                    if depth == 0 {
                        d.is_dir()
                    } else {
                        std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())
                    }
                };
                match std::fs::create_dir(dest) {
                    Ok(()) => {}
                    Err(e)
                        if e.kind() == std::io::ErrorKind::AlreadyExists && existing_dir(dest) => {}
                    Err(e) => return Err(Error::io(format!("mkdir {}", dest.display()), e)),
                }
                // Writable while we fill it.
                let _ = std::fs::set_permissions(
                    dest,
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                );
                self.stats.dirs += 1;
                let mut ents = self.zpl.readdir(&dn)?;
                ents.sort_by(|x, y| x.name.cmp(&y.name));
                for e in ents {
                    if e.name.is_empty()
                        || e.name == b"."
                        || e.name == b".."
                        || e.name.contains(&b'/')
                    {
                        self.stats.errors.push((
                            dest.to_path_buf(),
                            format!("invalid entry name {:?}", String::from_utf8_lossy(&e.name)),
                        ));
                        continue;
                    }
                    let child = dest.join(OsStr::from_bytes(&e.name));
                    if let Err(err) = self.copy(e.object, &child, depth + 1) {
                        self.stats.errors.push((child, err.to_string()));
                    }
                }
            }
            S_IFREG => {
                self.copy_file(&dn, &a, dest)?;
                self.stats.files += 1;
            }
            S_IFLNK => {
                let target = self.zpl.readlink(&dn, &a)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), dest)
                    .map_err(|e| Error::io(format!("symlink {}", dest.display()), e))?;
                self.stats.symlinks += 1;
            }
            S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK => {
                let p = cpath(dest)?;
                let rdev = if fmt == S_IFCHR || fmt == S_IFBLK {
                    let (maj, min) = crate::write::decode_rdev(a.rdev);
                    libc::makedev(maj as u32, min as u32)
                } else {
                    0
                };
                // SAFETY: p is a valid NUL-terminated path.
                let r = unsafe {
                    libc::mknod(p.as_ptr(), (fmt | (a.mode & 0o7777)) as libc::mode_t, rdev)
                };
                if r != 0 {
                    return Err(os_err(format!("mknod {}", dest.display())));
                }
                self.stats.others += 1;
            }
            other => {
                return Err(Error::corrupt(
                    format!("{}: object {obj}", self.zpl.name),
                    format!("unknown file type {other:#o}"),
                ));
            }
        }
        self.apply_meta(&a, dest, fmt)
    }

    fn copy_file(&mut self, dn: &ozfs_dmu::Dnode, a: &ZplAttrs, dest: &Path) -> Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| Error::io(format!("create {}", dest.display()), e))?;
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
        let f = &f;
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
                                        Error::io(format!("write {}", dest.display()), e)
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
            .map_err(|e| Error::io(format!("truncate {}", dest.display()), e))?;
        Ok(())
    }

    fn apply_meta(&mut self, a: &ZplAttrs, dest: &Path, fmt: u64) -> Result<()> {
        let p = cpath(dest)?;
        if self.opts.xattrs && a.xattr != 0 {
            for (name, value) in self.zpl.xattrs(a)? {
                let Ok(n) = CString::new(name.clone()) else {
                    continue;
                };
                // SAFETY: valid C strings and buffer.
                let r = unsafe {
                    libc::lsetxattr(
                        p.as_ptr(),
                        n.as_ptr(),
                        value.as_ptr().cast(),
                        value.len(),
                        0,
                    )
                };
                if r != 0 {
                    self.stats.errors.push((
                        dest.to_path_buf(),
                        format!(
                            "xattr {}: {}",
                            String::from_utf8_lossy(&name),
                            std::io::Error::last_os_error()
                        ),
                    ));
                }
            }
        }
        if self.opts.owners {
            // SAFETY: valid path.
            let r = unsafe { libc::lchown(p.as_ptr(), a.uid as libc::uid_t, a.gid as libc::gid_t) };
            if r != 0 {
                return Err(os_err(format!("chown {}", dest.display())));
            }
        }
        if fmt != S_IFLNK {
            // SAFETY: valid path.
            let r = unsafe { libc::chmod(p.as_ptr(), (a.mode & 0o7777) as libc::mode_t) };
            if r != 0 {
                return Err(os_err(format!("chmod {}", dest.display())));
            }
        }
        let ts = [
            libc::timespec {
                tv_sec: a.atime.0 as libc::time_t,
                tv_nsec: a.atime.1 as libc::c_long,
            },
            libc::timespec {
                tv_sec: a.mtime.0 as libc::time_t,
                tv_nsec: a.mtime.1 as libc::c_long,
            },
        ];
        // SAFETY: valid path and two timespecs.
        let r = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                p.as_ptr(),
                ts.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(os_err(format!("utimes {}", dest.display())));
        }
        Ok(())
    }
}
