//! Files between the host and a dataset: copy a tree out of a file system
//! or snapshot, copy a local tree in, remove a file or tree.
//!
//! Copy-out is read-only (the pool's last synced state, no lock); copy-in
//! and remove write under the pool's writer and sync before they return,
//! copy-in also every `OZFS_TXG_BYTES` of data on the way.
//!
//! Invariants: a local source is never followed through a symlink (it is
//! copied as a symlink; directories are opened `O_NOFOLLOW` and walked
//! through their handles); snapshots and `readonly=on` file systems are
//! never written; the root directory of a file system is never removed.

use crate::crypt::{load_for, KeyLoad};
use crate::error::{invalid, Error, Result};
use crate::host::{open_imported, writer_for};
use ozfs_dsl::DslPool;
use ozfs_format::znode::{S_IFDIR, S_IFMT};
use ozfs_zpl::copyout::{copy_out as copy_out_zpl, CopyOptions};
use ozfs_zpl::Zpl;
use std::path::Path;

/// Open the file system of a dataset or snapshot of an imported pool.
pub fn open_fs(
    ds_name: &str,
) -> Result<(crate::host::Record, std::sync::Arc<ozfs_spa::Pool>, Zpl)> {
    open_fs_with(ds_name, &KeyLoad::default())
}

/// [`open_fs`], loading the key of an encrypted dataset as `keys` says.
pub fn open_fs_with(
    ds_name: &str,
    keys: &KeyLoad,
) -> Result<(crate::host::Record, std::sync::Arc<ozfs_spa::Pool>, Zpl)> {
    let pool_name = crate::names::pool_of(ds_name);
    let (rec, pool) = open_imported(pool_name)?;
    let ctx = |e: Error| e.context(&format!("cannot open '{ds_name}'"));
    let dsl = DslPool::open(pool.clone()).map_err(ctx)?;
    let ds = dsl
        .lookup(ds_name)
        .map_err(|_| Error::NotFound(format!("cannot open '{ds_name}': dataset does not exist")))?;
    load_for(&dsl, &ds, keys)?;
    let os = dsl.objset(&ds).map_err(|e| ctx(key_hint(e, keys)))?;
    let zpl = Zpl::open(os, ds_name).map_err(ctx)?;
    Ok((rec, pool, zpl))
}

/// A locked dataset's error, with how to give its key when none was asked for.
fn key_hint(e: Error, keys: &KeyLoad) -> Error {
    match e {
        Error::Permission(m) if !keys.wanted() => Error::Permission(format!(
            "{m} (load it with -l from its keylocation, or -L keylocation)"
        )),
        e => e,
    }
}

/// What a copy-out did (entries it could not copy are listed, the rest
/// is copied).
pub use ozfs_zpl::copyout::CopyStats;

/// `ozfs cp [-r] POOL/DS[@SNAP]:PATH DEST`: copy a file or tree out of a
/// file system or snapshot. `owners`: set owners (root only).
pub fn copy_out(ds_name: &str, path: &str, dest: &Path, recursive: bool) -> Result<CopyStats> {
    copy_out_with(ds_name, path, dest, recursive, &KeyLoad::default())
}

/// [`copy_out`], loading the key of an encrypted dataset as `keys` says
/// (`ozfs cp -l`, `-L keylocation`).
pub fn copy_out_with(
    ds_name: &str,
    path: &str,
    dest: &Path,
    recursive: bool,
    keys: &KeyLoad,
) -> Result<CopyStats> {
    let src = format!("{ds_name}:{path}");
    let (mut rec, pool, zpl) = open_fs_with(ds_name, keys)?;
    let result = (|| -> Result<CopyStats> {
        let ctx = |e: Error| e.context(&format!("cannot copy '{src}'"));
        let obj = zpl.resolve(path).map_err(ctx)?;
        let (_, attrs) = zpl.attrs(obj).map_err(ctx)?;
        if attrs.mode & S_IFMT == S_IFDIR && !recursive {
            return Err(invalid(format!(
                "ozfs cp: -r not specified; omitting directory '{src}'"
            )));
        }
        copy_out_zpl(
            &zpl,
            path,
            dest,
            CopyOptions {
                owners: unsafe_is_root(),
                xattrs: true,
            },
        )
        .map_err(|e| e.context(&format!("cannot copy '{src}' to '{}'", dest.display())))
    })();
    // Error counters are kept whatever happened.
    let saved = rec.save_counters(&pool);
    let stats = result?;
    saved.map_err(|e| e.context("could not save error counters"))?;
    Ok(stats)
}

/// `ozfs cp POOL/VOLUME[@SNAP] DEST`: a volume's whole contents (its
/// `volsize` bytes of object 1, the size in object 2's ZAP) into the file
/// DEST, created or truncated, never through a symlink. Holes and all-zero
/// records are left as holes, so DEST is as sparse as the volume. Returns
/// the bytes copied.
pub fn copy_volume_out(ds_name: &str, dest: &Path) -> Result<u64> {
    copy_volume_out_with(ds_name, dest, &KeyLoad::default())
}

/// [`copy_volume_out`], loading the key of an encrypted volume as `keys` says.
pub fn copy_volume_out_with(ds_name: &str, dest: &Path, keys: &KeyLoad) -> Result<u64> {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let pool_name = crate::names::pool_of(ds_name);
    let (mut rec, pool) = open_imported(pool_name)?;
    let ctx = |e: Error| e.context(&format!("cannot copy '{ds_name}'"));
    let result = (|| -> Result<u64> {
        let dsl = DslPool::open(pool.clone()).map_err(ctx)?;
        let ds = dsl.lookup(ds_name).map_err(|_| {
            Error::NotFound(format!("cannot open '{ds_name}': dataset does not exist"))
        })?;
        load_for(&dsl, &ds, keys)?;
        let os = dsl.objset(&ds).map_err(|e| ctx(key_hint(e, keys)))?;
        if os.phys.os_type != ozfs_format::objset::OBJSET_TYPE_ZVOL {
            return Err(invalid(format!(
                "ozfs cp: '{ds_name}' is not a volume (name a path in a file system as {ds_name}:PATH)"
            )));
        }
        let size = ozfs_dmu::zap::lookup_obj(&os, 2, "size")
            .map_err(ctx)?
            .and_then(|e| e.as_u64())
            .ok_or_else(|| Error::corrupt(format!("volume '{ds_name}'"), "no size in its ZAP"))?;
        let dn = os.dnode(1).map_err(ctx)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dest)
            .map_err(|e| Error::io(format!("create {}", dest.display()), e))?;
        let werr = |e| Error::io(format!("write {}", dest.display()), e);
        const CHUNK: usize = 1 << 20;
        let mut buf = vec![0u8; CHUNK];
        // Past the object's last block the volume is a hole: nothing to
        // read, whatever size its ZAP claims.
        let written = (dn.phys.maxblkid.saturating_add(1))
            .saturating_mul(dn.phys.datablksz())
            .min(size);
        let mut off = 0u64;
        while off < written {
            let n = (written - off).min(CHUNK as u64) as usize;
            os.read_into_client(&dn, off, &mut buf[..n]).map_err(ctx)?;
            if buf[..n].iter().any(|&b| b != 0) {
                f.seek(SeekFrom::Start(off)).map_err(werr)?;
                f.write_all(&buf[..n]).map_err(werr)?;
            }
            off += n as u64;
        }
        f.set_len(size).map_err(werr)?;
        Ok(size)
    })();
    let saved = rec.save_counters(&pool);
    let n = result?;
    saved.map_err(|e| e.context("could not save error counters"))?;
    Ok(n)
}

fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Bytes of file data written before the open txg is synced (`OZFS_TXG_BYTES`, default 64 MiB).
fn dirty_sync_bytes() -> u64 {
    std::env::var("OZFS_TXG_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0)
        .unwrap_or(64 << 20)
}

/// `ozfs cp [-r] SRC POOL/DATASET:PATH`: copy a file or tree into a file system.
///
/// SRC itself and everything below it is looked at with `lstat`: a symlink
/// is copied as a symlink, never followed (as `cp -r` without `-L`), and a
/// regular file is opened with `O_NOFOLLOW | O_NONBLOCK` and must still be
/// the file `lstat` saw. Directories are opened the same way (`O_NOFOLLOW`,
/// and checked against `lstat`) and everything below one is reached through
/// its open handle, never through a path string: a directory of SRC
/// replaced by a symlink while the copy runs is not followed.
pub fn copy_in(src: &Path, ds_name: &str, path: &str, recursive: bool) -> Result<()> {
    copy_in_with(src, ds_name, path, recursive, &KeyLoad::default())
}

/// [`copy_in`], loading the key of an encrypted file system as `keys`
/// says (`ozfs cp -l`, `-L keylocation`): its new blocks are encrypted
/// with its master key.
pub fn copy_in_with(
    src: &Path,
    ds_name: &str,
    path: &str,
    recursive: bool,
    keys: &KeyLoad,
) -> Result<()> {
    let target = format!("{ds_name}:{path}");
    if ds_name.contains('@') {
        return Err(invalid(format!(
            "cannot copy into '{target}': snapshots are read-only"
        )));
    }
    let meta = std::fs::symlink_metadata(src)
        .map_err(|e| Error::io(format!("cannot copy '{}'", src.display()), e))?;
    if meta.is_dir() && !recursive {
        return Err(invalid(format!(
            "ozfs cp: -r not specified; omitting directory '{}'",
            src.display()
        )));
    }
    let pool_name = ds_name.split('/').next().unwrap_or("");
    let mut w = writer_for(pool_name)?;
    let ds = w
        .dsl()
        .lookup(ds_name)
        .map_err(|_| Error::NotFound(format!("cannot open '{ds_name}': dataset does not exist")))?;
    load_for(&w.dsl(), &ds, keys)
        .map_err(|e| e.context(&format!("cannot copy into '{target}'")))?;
    let (recordsize, xattr_sa) = {
        let dsl = w.dsl();
        let props = dsl.properties(&ds, 0)?;
        if is_readonly(&props) {
            return Err(invalid(format!(
                "cannot copy into '{target}': Read-only file system (readonly=on)"
            )));
        }
        (recordsize_of(&props), xattr_sa_of(&props))
    };
    let mut c = CopyIn {
        w: &mut w,
        ds_obj: ds.ds_obj,
        recordsize,
        xattr_sa,
        dirty: 0,
        links: std::collections::HashMap::new(),
    };
    let res = (|| -> Result<()> {
        // Where does it go? An existing directory receives SRC under its own name.
        let (parent, name) = c.target_of(path, src)?;
        c.copy(src, src, parent, &name)?;
        c.w.sync()?;
        Ok(())
    })();
    res.map_err(|e| e.context(&format!("cannot copy '{}' to '{target}'", src.display())))
}

struct CopyIn<'a> {
    w: &'a mut ozfs_dsl::sync::PoolWriter,
    ds_obj: u64,
    recordsize: u64,
    /// The `xattr` property says `sa` ([`xattr_sa_of`]).
    xattr_sa: bool,
    dirty: u64,
    links: std::collections::HashMap<(u64, u64), u64>,
}

impl CopyIn<'_> {
    fn zpl(&mut self) -> Result<ozfs_zpl::write::ZplTx<'_>> {
        let txg = self.w.txg;
        let rs = self.recordsize;
        let xattr_sa = self.xattr_sa;
        let tx = self.w.fs_tx(self.ds_obj)?;
        let mut z = ozfs_zpl::write::ZplTx::open(tx, txg, rs)?;
        z.xattr_sa = xattr_sa;
        Ok(z)
    }

    /// Reserve room for `bytes` of file data; when the pool is short only
    /// because of the open txg's reservations (worst cases), commit it and
    /// try once more.
    fn reserve(&mut self, bytes: u64) -> Result<()> {
        match self.w.reserve(bytes) {
            Err(e) if ozfs_spa::metaslab::is_enospc(&e) && self.w.has_reservations() => {
                self.w.sync()?;
                self.dirty = 0;
                self.w.reserve(bytes)
            }
            r => r,
        }
    }

    fn maybe_sync(&mut self, bytes: u64) -> Result<()> {
        self.dirty += bytes;
        if self.dirty >= dirty_sync_bytes() {
            // The txg's writes go on behind the copy; the last sync waits.
            self.w.sync_behind()?;
            self.dirty = 0;
        }
        Ok(())
    }

    /// (parent directory object, name) for copying `src` to `path` in the dataset.
    fn target_of(&mut self, path: &str, src: &Path) -> Result<(u64, Vec<u8>)> {
        use std::os::unix::ffi::OsStrExt;
        let z = self.zpl()?;
        match z.resolve(path) {
            Ok(obj) => {
                let a = z.attrs(obj)?;
                if a.mode & S_IFMT == S_IFDIR {
                    let base = src
                        .file_name()
                        .map(|n| n.as_bytes().to_vec())
                        .ok_or_else(|| {
                            ozfs_format::Error::Invalid(format!(
                                "source {} has no name",
                                src.display()
                            ))
                        })?;
                    Ok((obj, base))
                } else {
                    // An existing file is replaced, as cp does.
                    let trimmed = path.trim_end_matches('/');
                    let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
                    let parent = z.resolve(if dir.is_empty() { "/" } else { dir })?;
                    Ok((parent, name.as_bytes().to_vec()))
                }
            }
            Err(ozfs_format::Error::NotFound(_)) => {
                let trimmed = path.trim_end_matches('/');
                let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
                let parent = z.resolve(if dir.is_empty() { "/" } else { dir })?;
                Ok((parent, name.as_bytes().to_vec()))
            }
            Err(e) => Err(e),
        }
    }

    /// Copies `src` (the path used to reach it: below the top, relative to
    /// an open directory handle, `/proc/self/fd/N/name`) shown in messages
    /// as `shown`, into directory `parent` as `name`.
    fn copy(&mut self, src: &Path, shown: &Path, parent: u64, name: &[u8]) -> Result<()> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let io = |e: std::io::Error| ozfs_format::Error::io(shown.display().to_string(), e);
        let m = std::fs::symlink_metadata(src).map_err(io)?;
        let ft = m.file_type();
        let (uid, gid) = (m.uid() as u64, m.gid() as u64);
        let perm = (m.mode() & 0o7777) as u64;
        let obj;
        if ft.is_dir() {
            obj = {
                let mut z = self.zpl()?;
                match z.lookup(parent, name)? {
                    Some(o) if z.attrs(o)?.mode & S_IFMT == S_IFDIR => o,
                    Some(_) => {
                        return Err(ozfs_format::Error::Invalid(format!(
                            "{}: file exists",
                            String::from_utf8_lossy(name)
                        )))
                    }
                    None => z.mkdir(parent, name, perm, uid, gid)?,
                }
            };
            // The directory is opened without following a link and must be
            // the one `lstat` saw; its entries are then reached through this
            // handle (`/proc/self/fd/N/name`), so a directory of SRC swapped
            // for a symlink while the copy runs is never followed.
            let dir = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                    .open(src)
                    .map_err(io)?
            };
            let dm = dir.metadata().map_err(io)?;
            if (dm.dev(), dm.ino()) != (m.dev(), m.ino()) {
                return Err(ozfs_format::Error::Invalid(format!(
                    "{}: replaced while being copied",
                    shown.display()
                )));
            }
            let base = {
                use std::os::unix::io::AsRawFd;
                std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            };
            let mut ents: Vec<std::ffi::OsString> = std::fs::read_dir(&base)
                .map_err(io)?
                .flatten()
                .map(|e| e.file_name())
                .collect();
            ents.sort();
            for n in ents {
                use std::os::unix::ffi::OsStrExt;
                self.copy(&base.join(&n), &shown.join(&n), obj, n.as_bytes())?;
            }
            drop(dir);
        } else if m.nlink() > 1 && self.links.contains_key(&(m.dev(), m.ino())) {
            let target = self.links[&(m.dev(), m.ino())];
            let mut z = self.zpl()?;
            z.link(parent, name, target)?;
            return Ok(());
        } else if ft.is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            let t = std::fs::read_link(src).map_err(io)?;
            let mut z = self.zpl()?;
            obj = z.symlink(parent, name, t.as_os_str().as_bytes(), uid, gid)?;
        } else if ft.is_file() {
            obj = {
                let mut z = self.zpl()?;
                if let Some(old) = z.lookup(parent, name)? {
                    let _ = old;
                    z.unlink(parent, name)?;
                }
                z.create(parent, name, S_IFREG_MODE | perm, uid, gid, 0)?
            };
            // Not through a symlink, and not blocking on a fifo, should
            // the name have been replaced since it was looked at; then it
            // must still be the file that was looked at.
            let f = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(src)
                    .map_err(io)?
            };
            let fm = f.metadata().map_err(io)?;
            if (fm.dev(), fm.ino()) != (m.dev(), m.ino()) || !fm.is_file() {
                return Err(ozfs_format::Error::Invalid(format!(
                    "{}: replaced while being copied",
                    shown.display()
                )));
            }
            let mut off = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                use std::os::unix::fs::FileExt;
                let n = f.read_at(&mut buf, off).map_err(io)?;
                if n == 0 {
                    break;
                }
                let chunk = &buf[..n];
                if chunk.iter().any(|&b| b != 0) {
                    self.w.charge_quota(self.ds_obj, n as u64)?;
                    self.reserve(n as u64)?;
                    let mut z = self.zpl()?;
                    z.write(obj, off, chunk)?;
                }
                off += n as u64;
                self.maybe_sync(n as u64)?;
            }
            let mut z = self.zpl()?;
            let a = z.attrs(obj)?;
            if a.size < off {
                z.truncate(obj, off)?;
            }
        } else {
            let fmt = if ft.is_fifo() {
                0o010000
            } else if ft.is_char_device() {
                0o020000
            } else if ft.is_block_device() {
                0o060000
            } else {
                0o140000
            };
            let rdev = m.rdev();
            let (maj, min) = (libc::major(rdev) as u64, libc::minor(rdev) as u64);
            let mut z = self.zpl()?;
            obj = z.create(
                parent,
                name,
                fmt | perm,
                uid,
                gid,
                ozfs_zpl::write::encode_rdev(maj, min),
            )?;
        }
        if m.nlink() > 1 && !ft.is_dir() {
            self.links.insert((m.dev(), m.ino()), obj);
        }
        // xattrs
        for (xn, xv) in read_xattrs(src) {
            let mut z = self.zpl()?;
            z.set_xattr(obj, &xn, &xv)?;
        }
        let mut z = self.zpl()?;
        let mut a = z.attrs(obj)?;
        a.mode = (a.mode & S_IFMT) | perm;
        a.uid = uid;
        a.gid = gid;
        a.atime = (m.atime() as u64, m.atime_nsec() as u64);
        a.mtime = (m.mtime() as u64, m.mtime_nsec() as u64);
        z.set_attrs(obj, &a)?;
        Ok(())
    }
}

const S_IFREG_MODE: u64 = 0o100000;

/// All extended attributes of a path (not following symlinks).
fn read_xattrs(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return Vec::new();
    };
    let mut names = vec![0u8; 65536];
    // SAFETY: valid path and buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let Ok(cn) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut val = vec![0u8; 65536];
        // SAFETY: valid strings and buffer.
        let r =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        if r >= 0 {
            val.truncate(r as usize);
            out.push((name.to_vec(), val));
        }
    }
    out
}

/// `ozfs rm [-r] POOL/DATASET:PATH`: remove a file, or a tree with `recursive`.
pub fn remove(ds_name: &str, path: &str, recursive: bool) -> Result<()> {
    remove_with(ds_name, path, recursive, &KeyLoad::default())
}

/// [`remove`], loading the key of an encrypted file system as `keys` says.
pub fn remove_with(ds_name: &str, path: &str, recursive: bool, keys: &KeyLoad) -> Result<()> {
    let target = format!("{ds_name}:{path}");
    if ds_name.contains('@') {
        return Err(invalid(format!(
            "cannot remove '{target}': snapshots are read-only"
        )));
    }
    let mut w = writer_for(ds_name)?;
    let ds = w
        .dsl()
        .lookup(ds_name)
        .map_err(|_| Error::NotFound(format!("cannot open '{ds_name}': dataset does not exist")))?;
    load_for(&w.dsl(), &ds, keys).map_err(|e| e.context(&format!("cannot remove '{target}'")))?;
    let props = w.dsl().properties(&ds, 0)?;
    if is_readonly(&props) {
        return Err(invalid(format!(
            "cannot remove '{target}': Read-only file system (readonly=on)"
        )));
    }
    let txg = w.txg;
    let ctx = |e: Error| e.context(&format!("cannot remove '{target}'"));
    {
        let tx = w.fs_tx(ds.ds_obj)?;
        let mut z = ozfs_zpl::write::ZplTx::open(tx, txg, 131072)?;
        let trimmed = path.trim_end_matches('/');
        if trimmed.is_empty() {
            return Err(invalid(format!(
                "cannot remove '{target}': refusing to remove the root directory"
            )));
        }
        let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        let parent = z
            .resolve(if dir.is_empty() { "/" } else { dir })
            .map_err(ctx)?;
        let obj = z.lookup(parent, name.as_bytes())?.ok_or_else(|| {
            Error::NotFound(format!(
                "cannot remove '{target}': No such file or directory"
            ))
        })?;
        let attrs = z.attrs(obj)?;
        if attrs.mode & S_IFMT == S_IFDIR {
            if !recursive {
                return Err(invalid(format!("cannot remove '{target}': Is a directory")));
            }
            remove_tree(&mut z, parent, name.as_bytes(), 0).map_err(ctx)?;
        } else {
            z.unlink(parent, name.as_bytes()).map_err(ctx)?;
        }
    }
    w.sync().map_err(ctx)
}

fn remove_tree(
    z: &mut ozfs_zpl::write::ZplTx<'_>,
    parent: u64,
    name: &[u8],
    depth: usize,
) -> Result<()> {
    if depth > 4096 {
        return Err(ozfs_format::Error::Invalid(
            "directory tree too deep".into(),
        ));
    }
    let obj = z
        .lookup(parent, name)?
        .ok_or_else(|| ozfs_format::Error::NotFound(String::from_utf8_lossy(name).into_owned()))?;
    let a = z.attrs(obj)?;
    if a.mode & S_IFMT == S_IFDIR {
        let ents = ozfs_dmu::zap_tx::list(z.tx, obj)?;
        for e in ents {
            remove_tree(z, obj, &e.name, depth + 1)?;
        }
        z.rmdir(parent, name)
    } else {
        z.unlink(parent, name)
    }
}

/// A dataset's `recordsize` property (128 KiB when it cannot be read).
pub fn recordsize_of(props: &[(String, ozfs_dsl::PropValue, ozfs_dsl::PropSource)]) -> u64 {
    props
        .iter()
        .find(|(n, _, _)| n == "recordsize")
        .and_then(|(_, v, _)| match v {
            ozfs_dsl::PropValue::Bytes(b) => Some(*b),
            _ => None,
        })
        .unwrap_or(131072)
}

/// Whether a dataset's new xattrs go into system attributes: its `xattr`
/// property is `on` or `sa` (OpenZFS 2.3's meaning; a file system without
/// system attributes keeps xattrs in directories whatever it says).
pub fn xattr_sa_of(props: &[(String, ozfs_dsl::PropValue, ozfs_dsl::PropSource)]) -> bool {
    !props.iter().any(|(n, v, _)| {
        n == "xattr" && matches!(v, ozfs_dsl::PropValue::Text(t) if t == "dir" || t == "off")
    })
}

/// Whether a dataset's `readonly` property is on.
/// An on/off property that is not `off` (`atime`, `setuid`, `devices`,
/// `exec`: on by default).
pub fn prop_on(props: &[(String, ozfs_dsl::PropValue, ozfs_dsl::PropSource)], name: &str) -> bool {
    !props
        .iter()
        .any(|(n, v, _)| n == name && *v == ozfs_dsl::PropValue::Text("off".into()))
}

/// The `atime` property is not `off`.
pub fn atime_on(props: &[(String, ozfs_dsl::PropValue, ozfs_dsl::PropSource)]) -> bool {
    prop_on(props, "atime")
}

pub fn is_readonly(props: &[(String, ozfs_dsl::PropValue, ozfs_dsl::PropSource)]) -> bool {
    props
        .iter()
        .any(|(n, v, _)| n == "readonly" && *v == ozfs_dsl::PropValue::Text("on".into()))
}
