//! The `.zfs` control directory: `.zfs/snapshot/<name>` shows each snapshot
//! of the mounted file system, read-only.
//!
//! Inode numbers (live objects stay below 2^48):
//! * `.zfs` is [`CTL_INO`], `.zfs/snapshot` is [`SNAPDIR_INO`];
//! * an object of snapshot number `k` (assigned on first sight, kept for
//!   the life of the mount, keyed by the snapshot's dataset object) is
//!   `SNAP_BIT | k << 48 | object`, except that the snapshot's root
//!   directory uses object number 1 (the master node, never a file), so
//!   the inode of a snapshot root is known without opening the snapshot.
//!
//! The snapshot list is read fresh (from the writer's last synced DSL
//! state) on each lookup and listing of `.zfs/snapshot`; each snapshot's
//! [`Zpl`] is opened on first use and cached (snapshots are immutable).
//! A snapshot that disappeared is dropped from the cache: its inodes then
//! answer ENOENT. Every change under `.zfs` is refused with EROFS.

use crate::{errno_of, kind_of, kind_of_dtype, systime, Res, State, OBJ_MASK};
use fuser::{FileAttr, FileType};
use libc::{EINVAL, EISDIR, ENAMETOOLONG, ENOENT, ENOTDIR, EROFS};
use ozfs_dsl::{DatasetInfo, DslPool, PropValue};
use ozfs_format::znode::{ZplAttrs, S_IFDIR, S_IFLNK, S_IFMT};
use ozfs_format::Error;
use ozfs_zpl::fs::Zpl;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;

/// `.zfs` in the root directory.
pub const CTL_INO: u64 = (1 << 63) | 1;
/// `.zfs/snapshot`.
pub const SNAPDIR_INO: u64 = (1 << 63) | 2;
/// Marks the inode of an object of a snapshot.
const SNAP_BIT: u64 = 1 << 62;
/// Snapshot numbers fit in bits 48..62.
const MAX_SNAPS: usize = 1 << 14;
/// Every inode at or above this one is under `.zfs`.
pub const VIRT_MIN: u64 = 1 << 48;
/// Name of the control directory.
pub const CTL_NAME: &[u8] = b".zfs";

/// What an inode number stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    /// An object of the mounted file system (FUSE inode, not yet mapped).
    Live(u64),
    Ctl,
    SnapDir,
    /// Snapshot number, object number (1 = the snapshot's root).
    Snap(usize, u64),
    Bad,
}

pub(crate) fn node(ino: u64) -> Node {
    if ino < VIRT_MIN {
        Node::Live(ino)
    } else if ino == CTL_INO {
        Node::Ctl
    } else if ino == SNAPDIR_INO {
        Node::SnapDir
    } else if ino >> 62 == 1 {
        Node::Snap(
            ((ino >> 48) & (MAX_SNAPS as u64 - 1)) as usize,
            ino & OBJ_MASK,
        )
    } else {
        Node::Bad
    }
}

/// EROFS when `ino` is under `.zfs`.
pub(crate) fn not_virtual(ino: u64) -> Res<()> {
    if ino >= VIRT_MIN {
        Err(EROFS)
    } else {
        Ok(())
    }
}

/// One snapshot seen by this mount.
struct Slot {
    info: DatasetInfo,
    /// Opened on first use.
    zpl: Option<Zpl>,
    /// Still listed the last time the snapshots were read.
    alive: bool,
}

/// The snapshots seen by a mount (numbers are never reused).
#[derive(Default)]
pub(crate) struct Snaps {
    slots: Vec<Slot>,
    by_ds: HashMap<u64, usize>,
    /// Creation time of the mounted dataset (times of `.zfs` directories).
    pub(crate) ctime: u64,
}

fn snap_ino(k: usize, root: u64, obj: u64) -> u64 {
    let o = if obj == root { 1 } else { obj };
    SNAP_BIT | (k as u64) << 48 | o
}

fn name_of(info: &DatasetInfo) -> &str {
    info.name.rsplit_once('@').map(|x| x.1).unwrap_or("")
}

fn zerr(what: &str, e: Error) -> libc::c_int {
    match e {
        Error::NotFound(_) => ENOENT,
        e => errno_of(what, &e),
    }
}

impl State {
    /// The mounted dataset as the DSL (last synced state) sees it.
    fn head(&self, dsl: &DslPool) -> Result<DatasetInfo, Error> {
        let ds = dsl.dataset(self.ds_obj)?;
        let dir = dsl.dir(ds.dir_obj)?;
        Ok(DatasetInfo {
            name: self.opts.fsname.clone(),
            ds_obj: self.ds_obj,
            is_snapshot: dir.head_dataset_obj != self.ds_obj,
            dir_obj: ds.dir_obj,
            dir,
            ds,
        })
    }

    /// Creation time of the mounted dataset (0 when unknown).
    pub(crate) fn dataset_ctime(&self) -> u64 {
        let dsl = self.writer.dsl();
        dsl.dataset(self.ds_obj)
            .map(|d| d.creation_time)
            .unwrap_or(0)
    }

    /// `snapdir=visible` on the mounted dataset (read fresh).
    pub(crate) fn snapdir_visible(&self) -> bool {
        let dsl = self.writer.dsl();
        let Ok(head) = self.head(&dsl) else {
            return false;
        };
        dsl.properties(&head, 0)
            .map(|p| {
                p.iter()
                    .any(|(n, v, _)| n == "snapdir" && *v == PropValue::Text("visible".into()))
            })
            .unwrap_or(false)
    }

    /// The current snapshots (name, number), oldest first.
    fn snap_list(&mut self) -> Res<Vec<(String, usize)>> {
        let dsl = self.writer.dsl();
        let list = self
            .head(&dsl)
            .and_then(|h| dsl.snapshots(&h))
            .map_err(|e| errno_of("list snapshots", &e))?;
        let snaps = &mut self.snaps;
        for s in snaps.slots.iter_mut() {
            s.alive = false;
        }
        let mut out = Vec::with_capacity(list.len());
        for info in list {
            let k = match snaps.by_ds.get(&info.ds_obj) {
                Some(&k) => k,
                None => {
                    if snaps.slots.len() >= MAX_SNAPS {
                        continue;
                    }
                    let k = snaps.slots.len();
                    snaps.by_ds.insert(info.ds_obj, k);
                    snaps.slots.push(Slot {
                        info: info.clone(),
                        zpl: None,
                        alive: true,
                    });
                    k
                }
            };
            let slot = &mut snaps.slots[k];
            slot.alive = true;
            // A renamed snapshot keeps its number.
            slot.info.name = info.name.clone();
            out.push((name_of(&info).to_string(), k));
        }
        for s in snaps.slots.iter_mut() {
            if !s.alive {
                s.zpl = None;
            }
        }
        Ok(out)
    }

    /// Snapshot `k`'s file system (opened on first use).
    fn snap_zpl(&mut self, k: usize) -> Res<&Zpl> {
        let dsl = self.writer.dsl();
        let slot = self.snaps.slots.get_mut(k).ok_or(ENOENT)?;
        if !slot.alive {
            return Err(ENOENT);
        }
        if slot.zpl.is_none() {
            let z = dsl
                .objset(&slot.info)
                .and_then(|os| Zpl::open(os, &slot.info.name))
                .map_err(|e| zerr("open snapshot", e))?;
            slot.zpl = Some(z);
        }
        slot.zpl.as_ref().ok_or(ENOENT)
    }

    /// Attributes of `.zfs` and `.zfs/snapshot`.
    fn ctl_attr(&self, ino: u64) -> FileAttr {
        let t = systime((self.snaps.ctime, 0));
        FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::Directory,
            perm: 0o555,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 512,
            flags: 0,
        }
    }

    /// Object number and attributes of an object of snapshot `k` (`o` as
    /// coded in the inode: 1 = root).
    fn snap_attrs(&mut self, k: usize, o: u64) -> Res<(u64, ozfs_dmu::Dnode, ZplAttrs)> {
        let z = self.snap_zpl(k)?;
        let obj = if o == 1 { z.root } else { o };
        let (dn, a) = z.attrs(obj).map_err(|e| zerr("snapshot attributes", e))?;
        Ok((obj, dn, a))
    }

    fn snap_fattr(&mut self, k: usize, o: u64) -> Res<(FileAttr, u64)> {
        let (obj, dn, a) = self.snap_attrs(k, o)?;
        let root = self.snap_zpl(k)?.root;
        let attr = crate::file_attr(
            snap_ino(k, root, obj),
            &a,
            dn.phys.used_bytes(),
            dn.phys.datablksz(),
        );
        Ok((attr, a.gen))
    }

    /// getattr of an inode under `.zfs` (or a bad one).
    pub(crate) fn v_getattr(&mut self, ino: u64) -> Res<(FileAttr, u64)> {
        match node(ino) {
            Node::Ctl | Node::SnapDir => Ok((self.ctl_attr(ino), 0)),
            Node::Snap(k, o) => self.snap_fattr(k, o),
            Node::Live(_) | Node::Bad => Err(ENOENT),
        }
    }

    /// lookup in a directory under `.zfs`.
    pub(crate) fn v_lookup(&mut self, parent: u64, name: &[u8]) -> Res<(FileAttr, u64)> {
        if name.len() > 255 {
            return Err(ENAMETOOLONG);
        }
        match node(parent) {
            Node::Ctl => match name {
                b"." | b"snapshot" => {
                    self.v_getattr(if name == b"." { CTL_INO } else { SNAPDIR_INO })
                }
                b".." => self.v_getattr_live_root(),
                _ => Err(ENOENT),
            },
            Node::SnapDir => match name {
                b"." => self.v_getattr(SNAPDIR_INO),
                b".." => self.v_getattr(CTL_INO),
                _ => {
                    let list = self.snap_list()?;
                    let k = list
                        .iter()
                        .find(|(n, _)| n.as_bytes() == name)
                        .map(|x| x.1)
                        .ok_or(ENOENT)?;
                    self.snap_fattr(k, 1)
                }
            },
            Node::Snap(k, o) => {
                let (obj, dn, a) = self.snap_attrs(k, o)?;
                if a.mode & S_IFMT != S_IFDIR {
                    return Err(ENOTDIR);
                }
                let z = self.snap_zpl(k)?;
                let root = z.root;
                let target = match name {
                    b"." => obj,
                    b".." if obj == root => return self.v_getattr(SNAPDIR_INO),
                    b".." => a.parent,
                    _ => z
                        .lookup(&dn, name)
                        .map_err(|e| match e {
                            // Non-UTF-8 names cannot be in the directory.
                            Error::Invalid(_) => ENOENT,
                            e => zerr("snapshot lookup", e),
                        })?
                        .ok_or(ENOENT)?,
                };
                let ino = snap_ino(k, root, target);
                self.snap_fattr(k, ino & OBJ_MASK)
            }
            Node::Live(_) | Node::Bad => Err(ENOENT),
        }
    }

    fn v_getattr_live_root(&mut self) -> Res<(FileAttr, u64)> {
        let root = self.obj(fuser::FUSE_ROOT_ID);
        self.fattr(root)
    }

    /// `.`, `..` and the entries of a directory under `.zfs`.
    pub(crate) fn v_listing(&mut self, ino: u64) -> Res<Vec<(u64, FileType, Vec<u8>)>> {
        let dir = FileType::Directory;
        match node(ino) {
            Node::Ctl => Ok(vec![
                (CTL_INO, dir, b".".to_vec()),
                (fuser::FUSE_ROOT_ID, dir, b"..".to_vec()),
                (SNAPDIR_INO, dir, b"snapshot".to_vec()),
            ]),
            Node::SnapDir => {
                let mut out = vec![
                    (SNAPDIR_INO, dir, b".".to_vec()),
                    (CTL_INO, dir, b"..".to_vec()),
                ];
                for (name, k) in self.snap_list()? {
                    out.push((snap_ino(k, 0, 1), dir, name.into_bytes()));
                }
                Ok(out)
            }
            Node::Snap(k, o) => {
                let (obj, dn, a) = self.snap_attrs(k, o)?;
                if a.mode & S_IFMT != S_IFDIR {
                    return Err(ENOTDIR);
                }
                let z = self.snap_zpl(k)?;
                let root = z.root;
                let parent = if obj == root {
                    SNAPDIR_INO
                } else {
                    snap_ino(k, root, a.parent)
                };
                let ents = z.readdir(&dn).map_err(|e| zerr("snapshot readdir", e))?;
                let mut out = Vec::with_capacity(ents.len() + 2);
                out.push((snap_ino(k, root, obj), dir, b".".to_vec()));
                out.push((parent, dir, b"..".to_vec()));
                for e in ents {
                    let kind = if e.dtype == 0 {
                        match z.attrs(e.object) {
                            Ok((_, a)) => kind_of(a.mode),
                            Err(_) => FileType::RegularFile,
                        }
                    } else {
                        kind_of_dtype(e.dtype as u64)
                    };
                    out.push((snap_ino(k, root, e.object), kind, e.name));
                }
                Ok(out)
            }
            Node::Live(_) | Node::Bad => Err(ENOENT),
        }
    }

    /// open / opendir of an inode under `.zfs`: read-only.
    pub(crate) fn v_open(&mut self, ino: u64, flags: i32) -> Res<u64> {
        let (a, _) = self.v_getattr(ino)?;
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(if a.kind == FileType::Directory {
                EISDIR
            } else {
                EROFS
            });
        }
        if flags & libc::O_TRUNC != 0 {
            return Err(EROFS);
        }
        Ok(self.new_handle(ino))
    }

    pub(crate) fn v_read(&mut self, ino: u64, offset: i64, size: u32) -> Res<Vec<u8>> {
        let Node::Snap(k, o) = node(ino) else {
            return match node(ino) {
                Node::Ctl | Node::SnapDir => Err(EISDIR),
                _ => Err(ENOENT),
            };
        };
        let (_, dn, a) = self.snap_attrs(k, o)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(EISDIR);
        }
        let z = self.snap_zpl(k)?;
        z.read(&dn, &a, offset.max(0) as u64, size as usize)
            .map_err(|e| zerr("snapshot read", e))
    }

    pub(crate) fn v_readlink(&mut self, ino: u64) -> Res<Vec<u8>> {
        let Node::Snap(k, o) = node(ino) else {
            return Err(EINVAL);
        };
        let (_, dn, a) = self.snap_attrs(k, o)?;
        if a.mode & S_IFMT != S_IFLNK {
            return Err(EINVAL);
        }
        let z = self.snap_zpl(k)?;
        z.readlink(&dn, &a)
            .map_err(|e| zerr("snapshot readlink", e))
    }

    /// Extended attributes (name, value) of an inode under `.zfs`.
    pub(crate) fn v_xattrs(&mut self, ino: u64) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
        let Node::Snap(k, o) = node(ino) else {
            return match node(ino) {
                Node::Ctl | Node::SnapDir => Ok(Vec::new()),
                _ => Err(ENOENT),
            };
        };
        let (_, _, a) = self.snap_attrs(k, o)?;
        let z = self.snap_zpl(k)?;
        z.xattrs(&a).map_err(|e| zerr("snapshot xattrs", e))
    }
}

/// Whether `name` in directory `parent` (a FUSE inode) is `.zfs` of the root.
pub(crate) fn is_ctl_name(parent: u64, name: &std::ffi::OsStr) -> bool {
    parent == fuser::FUSE_ROOT_ID && name.as_bytes() == CTL_NAME
}
