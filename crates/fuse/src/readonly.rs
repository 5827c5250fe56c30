//! A file system served read-only through FUSE straight from the read
//! path: one [`Zpl`] (a dataset's or snapshot's objset as the pool's last
//! synced state has it), no pool writer, no transaction group.
//!
//! This is how ozfs mounts what it cannot (or must not) write: snapshots,
//! `-o ro` and `readonly=on` mounts, pools imported read-only, and file
//! systems of OpenZFS 2.x pools (features ozfs does not write, ZPL 5 with
//! system attributes, spill blocks, SA xattrs, encrypted datasets whose
//! key the caller loaded into the objset). Whatever [`Zpl`] reads, the
//! mount shows.
//!
//! ## Theory
//! * **Inodes** are object numbers, as in the read-write server (see the
//!   crate documentation): FUSE's root inode 1 stands for the ZPL root
//!   directory (object 1 is the master node, never a file), every other
//!   inode is its object number, and the generation of an entry is the
//!   znode's `gen`. Object numbers stay below 2^48; larger inodes answer
//!   ENOENT. There is no `.zfs` directory here.
//! * **Nothing changes**, so nothing is tracked: no lookup counts, no
//!   open-file table (a handle is only a number; directory handles keep
//!   the listing taken at `opendir`, retaken on `rewinddir`). Every
//!   request reads the objset afresh through the pool's block cache.
//! * **Changes** — setattr, mknod, mkdir, unlink, rmdir, symlink, rename,
//!   link, write, create, setxattr, removexattr, fallocate, and opening
//!   for writing or with `O_TRUNC` — answer EROFS; the kernel mount is
//!   `ro` as well, so most never reach the server.
//! * **Reads** of at least 64 KiB go to request threads (the objset and
//!   dnode are cloned into the job), so reads of several files proceed
//!   in parallel while the session thread takes the next request.
//! * **Names** are bytes (`Zpl::lookup` matches a name the ZAP hash cannot
//!   find — not UTF-8, or non-ASCII in a case-folding directory — by its
//!   bytes). Names
//!   longer than 255 bytes (OpenZFS's `longname` feature) are served as
//!   they are: Linux FUSE passes names up to 1024 bytes.
//! * **Device numbers** of ZPL 5 file systems are OpenZFS's (the Linux
//!   kernel's `dev_t`), converted for FUSE.
//! * **Extended attributes** are those [`Zpl::xattrs`] reads (SA xattrs,
//!   then the xattr directory). With `acltype=posix` the POSIX ACL
//!   attributes are served and the kernel is asked to enforce them
//!   (FUSE_POSIX_ACL); otherwise they are hidden and refused with
//!   EOPNOTSUPP, as in the read-write server.
//!
//! ## Invariants
//! * Nothing is ever written to the pool: the server holds no writer and
//!   the pool it reads may be opened read-only.
//! * Data from disk never panics the server: every failure is an errno
//!   (damage and I/O errors are logged through [`errno_of`]).
//! * The mount shows the pool as it was when opened: a pool changed
//!   underneath by another process is not followed.

use crate::{
    block_signals, errno_of, file_attr, is_mounted, kind_of, kind_of_dtype, mount_options,
    worker_count, Options, Res, Workers, OBJ_MASK, OFFLOAD_MIN, TTL,
};
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, Session, TimeOrNow,
};
use libc::{c_int, EINVAL, EISDIR, ENAMETOOLONG, ENODATA, ENOENT, ENOTDIR, EROFS};
use ozfs_dmu::Dnode;
use ozfs_format::znode::{ZplAttrs, S_IFDIR, S_IFLNK, S_IFMT};
use ozfs_format::Error;
use ozfs_zpl::acl;
use ozfs_zpl::fs::Zpl;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The longest name Linux FUSE passes (`FUSE_NAME_MAX`).
const NAME_MAX: usize = 1024;

/// A directory listing: (inode, type, name), `.` and `..` first.
type Listing = Vec<(u64, FileType, Vec<u8>)>;

/// The read-only file system over one [`Zpl`].
pub struct ReadOnlyFs {
    zpl: Zpl,
    opts: Options,
    /// Listings taken at `opendir` (or `rewinddir`), by handle.
    dirs: HashMap<u64, Listing>,
    next_fh: u64,
    /// (blocks, bfree, bavail, files, ffree, bsize), taken at mount.
    statfs: (u64, u64, u64, u64, u64, u32),
    workers: Workers,
}

/// A layer error as an errno (a missing object is ENOENT).
fn zerr(what: &str, e: Error) -> c_int {
    match e {
        Error::NotFound(_) => ENOENT,
        e => errno_of(what, &e),
    }
}

impl ReadOnlyFs {
    /// Serve `zpl` with `opts` (its `readonly` is forced on).
    pub fn new(zpl: Zpl, mut opts: Options) -> ReadOnlyFs {
        opts.readonly = true;
        let statfs = space_of(&zpl);
        ReadOnlyFs {
            zpl,
            opts,
            dirs: HashMap::new(),
            next_fh: 1,
            statfs,
            workers: Workers::new(worker_count()),
        }
    }

    fn obj(&self, ino: u64) -> Res<u64> {
        if ino == fuser::FUSE_ROOT_ID {
            Ok(self.zpl.root)
        } else if ino > OBJ_MASK {
            Err(ENOENT)
        } else {
            Ok(ino)
        }
    }

    fn ino(&self, obj: u64) -> u64 {
        if obj == self.zpl.root {
            fuser::FUSE_ROOT_ID
        } else {
            obj
        }
    }

    fn attrs(&self, obj: u64) -> Res<(Dnode, ZplAttrs)> {
        self.zpl
            .attrs(obj)
            .map_err(|e| zerr(&format!("attributes of object {obj}"), e))
    }

    fn fattr(&self, obj: u64) -> Res<(FileAttr, u64)> {
        let (dn, a) = self.attrs(obj)?;
        let attr = file_attr(self.ino(obj), &a, dn.phys.used_bytes(), dn.phys.datablksz());
        Ok((attr, a.gen))
    }

    fn dir(&self, obj: u64) -> Res<(Dnode, ZplAttrs)> {
        let (dn, a) = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFDIR {
            return Err(ENOTDIR);
        }
        Ok((dn, a))
    }

    /// The object `name` names in directory `dn`.
    fn find(&self, dn: &Dnode, name: &[u8]) -> Res<u64> {
        // Names the hash cannot find (non-UTF-8, non-ASCII in a
        // case-folding directory) are matched by their bytes in `Zpl::lookup`.
        match self.zpl.lookup(dn, name) {
            Ok(Some(o)) => Ok(o),
            Ok(None) => Err(ENOENT),
            Err(e) => Err(zerr(&format!("lookup in directory {}", dn.object), e)),
        }
    }

    fn do_lookup(&self, parent: u64, name: &[u8]) -> Res<(FileAttr, u64)> {
        if name.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let dir = self.obj(parent)?;
        let (dn, a) = self.dir(dir)?;
        let obj = match name {
            b"." => dir,
            b".." => a.parent,
            _ => self.find(&dn, name)?,
        };
        self.fattr(obj)
    }

    fn listing(&self, ino: u64) -> Res<Listing> {
        let obj = self.obj(ino)?;
        let (dn, a) = self.dir(obj)?;
        let ents = self.zpl.readdir(&dn).map_err(|e| zerr("readdir", e))?;
        let mut out = Vec::with_capacity(ents.len() + 2);
        out.push((self.ino(obj), FileType::Directory, b".".to_vec()));
        out.push((self.ino(a.parent), FileType::Directory, b"..".to_vec()));
        for e in ents {
            let kind = if e.dtype == 0 {
                // ZPL 1 entries carry no type: ask the object.
                match self.zpl.attrs(e.object) {
                    Ok((_, a)) => kind_of(a.mode),
                    Err(_) => FileType::RegularFile,
                }
            } else {
                kind_of_dtype(e.dtype as u64)
            };
            out.push((self.ino(e.object), kind, e.name));
        }
        Ok(out)
    }

    fn do_open(&mut self, ino: u64, flags: i32) -> Res<u64> {
        let (_, a) = self.attrs(self.obj(ino)?)?;
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(if a.mode & S_IFMT == S_IFDIR {
                EISDIR
            } else {
                EROFS
            });
        }
        if flags & libc::O_TRUNC != 0 {
            return Err(EROFS);
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        Ok(fh)
    }

    fn do_readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let (dn, a) = self.attrs(self.obj(ino)?)?;
        if a.mode & S_IFMT != S_IFLNK {
            return Err(EINVAL);
        }
        self.zpl.readlink(&dn, &a).map_err(|e| zerr("readlink", e))
    }

    /// Every extended attribute of an inode (name, value), the ACL ones
    /// only where ACLs are kept.
    fn xattrs(&self, ino: u64) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
        let (_, a) = self.attrs(self.obj(ino)?)?;
        if a.xattr == 0 && a.dxattr.is_none() {
            return Ok(Vec::new());
        }
        let mut all = self
            .zpl
            .xattrs(&a)
            .map_err(|e| zerr(&format!("xattrs of inode {ino}"), e))?;
        if !self.opts.posix_acl {
            all.retain(|(n, _)| !acl::is_acl_name(n));
        }
        Ok(all)
    }

    fn get_xattr(&self, ino: u64, name: &[u8]) -> Res<Vec<u8>> {
        crate::posix_acl_refused(self.opts.posix_acl, name)?;
        self.xattrs(ino)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or(ENODATA)
    }

    fn list_xattrs(&self, ino: u64) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        for (n, _) in self.xattrs(ino)? {
            out.extend_from_slice(&n);
            out.push(0);
        }
        Ok(out)
    }
}

/// statfs of a read-only mount: the dataset's referenced bytes plus the
/// pool's free space as the total, the free space as free (OpenZFS's
/// `zfs_statvfs` rule), objects in use from the objset's dnode fill.
fn space_of(zpl: &Zpl) -> (u64, u64, u64, u64, u64, u32) {
    const BS: u64 = 4096;
    let (referenced, avail) = ozfs_dsl::DslPool::open(zpl.os.pool.clone())
        .map(|dsl| {
            let ds = dsl.lookup(&zpl.name).ok();
            let referenced = ds.as_ref().map_or(0, |d| d.ds.referenced_bytes);
            let pool = dsl.space().and_then(|s| dsl.available(&s)).unwrap_or(0);
            // The quotas covering the dataset bound it too.
            let avail = match ds.as_ref().map(|d| dsl.quota_room(d)) {
                Some(Ok(Some(room))) => pool.min(room),
                _ => pool,
            };
            (referenced, avail)
        })
        .unwrap_or((0, 0));
    let used_objs = zpl.os.object_count();
    let ffree = avail / 512;
    (
        referenced.saturating_add(avail) / BS,
        avail / BS,
        avail / BS,
        used_objs.saturating_add(ffree),
        ffree,
        BS as u32,
    )
}

impl Filesystem for ReadOnlyFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), c_int> {
        let _ = config.set_max_readahead(1 << 20);
        if self.opts.posix_acl {
            // The kernel checks access against the ACLs it reads with
            // getxattr.
            use fuser::consts::FUSE_POSIX_ACL;
            if let Err(missing) = config.add_capabilities(FUSE_POSIX_ACL) {
                eprintln!("ozfs mount: the kernel lacks POSIX ACL support ({missing:#x}): acltype=posix is not enforced");
            }
        }
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match self.do_lookup(parent, name.as_bytes()) {
            Ok((a, gen)) => reply.entry(&TTL, &a, gen),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.obj(ino).and_then(|o| self.fattr(o)) {
            Ok((a, _)) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        reply.error(EROFS);
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.do_readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        _req: &Request<'_>,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(EROFS);
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(EROFS);
    }

    fn unlink(&mut self, _req: &Request<'_>, _parent: u64, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(EROFS);
    }

    fn rmdir(&mut self, _req: &Request<'_>, _parent: u64, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(EROFS);
    }

    fn symlink(
        &mut self,
        _req: &Request<'_>,
        _parent: u64,
        _name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(EROFS);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        _parent: u64,
        _name: &OsStr,
        _newparent: u64,
        _newname: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(EROFS);
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _newparent: u64,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(EROFS);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        match self.do_open(ino, flags) {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let (dn, a) = match self.obj(ino).and_then(|o| self.attrs(o)) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        if a.mode & S_IFMT == S_IFDIR {
            return reply.error(EISDIR);
        }
        let off = offset.max(0) as u64;
        if off >= a.size {
            return reply.data(&[]);
        }
        let len = (a.size - off).min(size as u64) as usize;
        if size < OFFLOAD_MIN {
            return match self.zpl.os.read(&dn, off, len) {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno_of(&format!("read object {}", dn.object), &e)),
            };
        }
        let os = self.zpl.os.clone();
        self.workers.run(Box::new(move || {
            let mut out = vec![0u8; len];
            match os.read_into_client(&dn, off, &mut out) {
                Ok(()) => reply.data(&out),
                Err(e) => reply.error(errno_of(&format!("read object {}", dn.object), &e)),
            }
        }));
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _offset: i64,
        _data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        reply.error(EROFS);
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        // Nothing is ever dirty.
        reply.ok();
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _offset: i64,
        _length: i64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(EROFS);
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.listing(ino) {
            Ok(l) => {
                let fh = self.next_fh;
                self.next_fh += 1;
                self.dirs.insert(fh, l);
                reply.opened(fh, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if offset == 0 || !self.dirs.contains_key(&fh) {
            // First read or rewinddir: take a fresh listing.
            match self.listing(ino) {
                Ok(l) => {
                    self.dirs.insert(fh, l);
                }
                Err(e) => return reply.error(e),
            }
        }
        let Some(list) = self.dirs.get(&fh) else {
            return reply.error(libc::EIO);
        };
        for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let (blocks, bfree, bavail, files, ffree, bsize) = self.statfs;
        reply.statfs(blocks, bfree, bavail, files, ffree, bsize, 255, bsize);
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(EROFS);
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        match self.get_xattr(ino, name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        match self.list_xattrs(ino) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, _ino: u64, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(EROFS);
    }

    fn access(&mut self, _req: &Request<'_>, ino: u64, mask: i32, reply: ReplyEmpty) {
        // Only reached without default_permissions; the kernel checks
        // modes. Writing is never allowed.
        if let Err(e) = self.obj(ino).and_then(|o| self.attrs(o)) {
            return reply.error(e);
        }
        if mask & libc::W_OK != 0 {
            return reply.error(EROFS);
        }
        reply.ok();
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(EROFS);
    }
}

/// Mount `zpl` read-only on `mountpoint` (the per-mount flags from `opts`:
/// `nosuid`, `nodev`, `noexec` as the dataset's properties say, plus `ro`,
/// `default_permissions`, `allow_other`) and serve requests until it is
/// unmounted (`fusermount -u`, `umount`) or the process gets SIGINT,
/// SIGTERM or SIGHUP: then it is unmounted (detached if busy, and the
/// process exits 0 at once) and the function returns.
pub fn serve_readonly(zpl: Zpl, mountpoint: &Path, mut opts: Options) -> std::io::Result<()> {
    let sigset = block_signals();
    opts.readonly = true;
    let mount_opts = mount_options(&opts);
    let mountpoint: PathBuf = mountpoint.canonicalize()?;
    let mut session = Session::new(ReadOnlyFs::new(zpl, opts), &mountpoint, &mount_opts)?;
    crate::raise_readahead(&mountpoint);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(m) = crate::shared::newest_on(&mountpoint) {
        crate::shared::watch_mount(m, stop.clone());
    }

    // Termination signals: unmount (the request loop then ends), or
    // detach a busy mount and exit (nothing is pending: nothing to lose).
    let mnt = mountpoint.clone();
    std::thread::spawn(move || {
        let mut sig: c_int = 0;
        // SAFETY: waits for one of the blocked signals in `sigset`.
        if unsafe { libc::sigwait(&sigset, &mut sig) } != 0 {
            return;
        }
        let Ok(cmnt) = std::ffi::CString::new(mnt.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: unmounting our own mount point by path.
        if unsafe { libc::umount2(cmnt.as_ptr(), 0) } == 0 {
            return;
        }
        // SAFETY: as above; lazy unmount of a busy mount.
        unsafe { libc::umount2(cmnt.as_ptr(), libc::MNT_DETACH) };
        std::process::exit(0);
    });

    let res = session.run();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    // Make sure the mount is gone if the loop ended for another reason.
    if is_mounted(&mountpoint) {
        session.unmount();
    }
    res
}
