//! ZPL write operations: create, mkdir, symlink, link, unlink, rmdir,
//! rename, write, truncate, setattr, xattrs — on file systems of ZPL ≤ 4
//! (a legacy znode in the bonus buffer) and ZPL 5 (system attributes: the
//! bonus is an SA buffer whose layout, a list of registered attribute
//! numbers, is kept in the file system's layouts ZAP; a layout a znode
//! needs that is not there yet is added, numbered after the others, as
//! OpenZFS does).
//!
//! Every operation changes the objset through an [`ObjsetTx`], so it is
//! part of the open transaction group and becomes durable at the next sync.
//! New znodes carry a trivial ACL derived from the mode (owner@, group@,
//! everyone@ deny/allow pairs, as ZFS writes them) so that ZFS
//! implementations that consult ACLs agree with the mode bits.
//!
//! Invariants: a directory's `size` is 2 + its entries and its `links` is
//! 2 + its subdirectories; a name is added to a directory only after the
//! object it names exists; an object is freed only when its link count
//! reaches zero (open files are the daemon's business, not this layer's).

use ozfs_dmu::tx::ObjsetTx;
use ozfs_dmu::zap_tx;
use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::types::ot;
use ozfs_format::znode::{SaTables, ZplAttrs, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG, ZFS_PROJINHERIT};
use ozfs_format::{Error, Result};
use std::sync::Arc;

const ZNODE_SIZE: usize = 264;
/// Longest symlink target kept in the bonus buffer (320 − 264).
pub const SYMLINK_INLINE_MAX: usize = 56;
const FLAG_XATTR: u64 = ozfs_format::znode::zflags::XATTR;

/// A file system being written in the open txg.
pub struct ZplTx<'a> {
    pub tx: &'a mut ObjsetTx,
    pub txg: u64,
    pub root: u64,
    pub delete_queue: u64,
    pub recordsize: u64,
    /// Largest block size files may use.
    pub max_blksz: u64,
    /// ZPL 5: the system-attribute tables; None for a legacy file system.
    sa: Option<Arc<SaState>>,
    /// `xattr=sa` (OpenZFS 2.3's `on`, its default): new extended
    /// attributes of a ZPL 5 file system go into the znode's `ZPL_DXATTR`
    /// system attribute, as far as its limits allow; false (`xattr=dir`)
    /// or a legacy file system: into the xattr directory. The caller sets
    /// it from the dataset's property; it starts true.
    pub xattr_sa: bool,
    /// Intent-log replay: the next object made takes this number, dnode
    /// slots, generation and creation time (the log's), not fresh ones.
    pub replay_create: Option<ReplayCreate>,
}

/// What a replayed create fixes of the object it makes (`crate::zil`).
#[derive(Debug, Clone, Copy)]
pub struct ReplayCreate {
    pub obj: u64,
    pub slots: u8,
    pub gen: u64,
    pub crtime: (u64, u64),
}

/// Largest value kept in the SA (`DXATTR_MAX_ENTRY_SIZE`); larger ones go
/// to the xattr directory.
pub const DXATTR_MAX_ENTRY_SIZE: usize = 32768;
/// The SA xattrs of a znode take no new value once their packed nvlist is
/// larger than this (`DXATTR_MAX_SA_SIZE`, half of 128 KiB).
pub const DXATTR_MAX_SA_SIZE: usize = 65536;
/// Longest value of one system attribute (its length is 16 bits).
const SA_ATTR_MAX_LEN: usize = 65535;

/// The SA registry and layouts of a ZPL 5 file system being written.
#[derive(Clone)]
struct SaState {
    tables: SaTables,
    /// The layouts ZAP (`SA_ATTRS` → `LAYOUTS`).
    layouts_obj: u64,
}

/// Largest bonus buffer of a new znode (one 512-byte dnode slot, one
/// block pointer).
const MAX_BONUS: usize = 320;

/// Largest block ozfs gives a file it writes (1 MiB; blocks over 128 KiB
/// make the dataset list `large_blocks`).
pub const MAX_FILE_BLOCK: u64 = 1 << 20;

/// Current time as (seconds, nanoseconds).
pub fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_nanos() as u64)
}

/// Encode attributes as a znode bonus with a trivial ACL for the mode.
fn znode_bonus(a: &ZplAttrs, _keep_flags: bool) -> Vec<u8> {
    a.to_znode_trivial_acl()
}

impl<'a> ZplTx<'a> {
    /// Start writing a file system: reads its master node.
    ///
    /// What it reads (version, root, delete queue, SA tables) is kept with
    /// the objset ([`ObjsetTx::derived`]) until one of the objects it came
    /// from changes, so that a request costs no re-read of them.
    pub fn open(tx: &'a mut ObjsetTx, txg: u64, recordsize: u64) -> Result<ZplTx<'a>> {
        let meta = match tx.derived::<ZplMeta>() {
            Some(m) => m,
            None => {
                let (m, watch) = ZplMeta::load(tx)?;
                let m = Arc::new(m);
                tx.keep_derived(watch, m.clone());
                m
            }
        };
        let (root, delete_queue, sa) = (meta.root, meta.delete_queue, meta.sa.clone());
        // New files' blocks: the record size, up to MAX_FILE_BLOCK (a
        // larger record size is written in blocks of that size: every
        // metaslab of a small pool still holds one).
        let recordsize = if recordsize.is_power_of_two() && recordsize >= 512 {
            recordsize.min(MAX_FILE_BLOCK)
        } else {
            131072
        };
        Ok(ZplTx {
            tx,
            txg,
            root,
            delete_queue,
            recordsize,
            max_blksz: MAX_FILE_BLOCK,
            sa,
            xattr_sa: true,
            replay_create: None,
        })
    }

    /// The attributes of `obj`, decoded once and kept with the objset
    /// until the object changes ([`ObjsetTx::obj_derived`]).
    pub fn attrs(&self, obj: u64) -> Result<ZplAttrs> {
        if let Some(a) = self.tx.with_obj_derived(obj, |a: &ZplAttrs| a.clone()) {
            return Ok(a);
        }
        let a = self.decode_attrs(obj)?;
        self.tx.keep_obj_derived(obj, Arc::new(a.clone()));
        Ok(a)
    }

    fn decode_attrs(&self, obj: u64) -> Result<ZplAttrs> {
        let dn = self.tx.dnode(obj)?;
        if dn.phys.object_type == 0 {
            return Err(Error::not_found(format!("object {obj}")));
        }
        match (&self.sa, dn.phys.bonustype) {
            (None, ot::ZNODE) => ZplAttrs::from_znode(&dn.phys.bonus, dn.swap),
            (Some(sa), ot::SA) => {
                // A staged spill block is in host order; a committed one
                // in its block pointer's.
                let staged = self.tx.spills.contains_key(&obj);
                let spill = match dn.phys.spill {
                    Some(bp) => self.tx.spill(obj)?.map(|b| {
                        let swap = !staged
                            && !bp.is_hole()
                            && bp.little_endian() != ozfs_format::bytes::HOST_LITTLE_ENDIAN;
                        (b, swap)
                    }),
                    None => None,
                };
                crate::fs::sa_attrs(&dn.phys.bonus, dn.swap, spill, &sa.tables)
            }
            (_, t) => Err(Error::unsupported(
                format!("object {obj}"),
                format!("bonus type {t}"),
            )),
        }
    }

    /// Store attributes (the ACL is recomputed from the mode). On ZPL 5,
    /// attributes that do not fit the bonus buffer go to a spill block:
    /// the longest leading part of the layout that fits beside the spill
    /// pointer stays in the bonus, the rest gets a layout of its own.
    pub fn set_attrs(&mut self, obj: u64, a: &ZplAttrs) -> Result<()> {
        if self.sa.is_none() {
            return self.tx.set_bonus(obj, znode_bonus(a, false));
        }
        let a = &sa_form(a);
        let all = a.sa_layout_attrs();
        // The bonus room of this dnode (more for a dnode of several
        // slots) without a spill block pointer.
        let dn = self.tx.dnode(obj)?.phys;
        let had_spill = dn.spill.is_some();
        let cap = dn.max_bonuslen() + if had_spill { BLKPTR_SIZE } else { 0 };
        // Sized first, each buffer encoded once, with its layout number.
        if a.sa_size(&all) <= cap {
            let whole = a.to_sa_attrs(self.layout_num(&all)?, &all);
            if had_spill {
                self.tx.set_spill(obj, None)?;
            }
            return self.tx.set_bonus(obj, whole);
        }
        // Only the layouts used are registered.
        let room = cap.saturating_sub(BLKPTR_SIZE);
        let k = (1..=all.len())
            .rev()
            .find(|&k| a.sa_size(&all[..k]) <= room)
            .ok_or_else(|| Error::Invalid("no system attribute fits the bonus".into()))?;
        let head = a.to_sa_attrs(self.layout_num(&all[..k])?, &all[..k]);
        let rest = &all[k..];
        let spill = a.to_sa_attrs(self.layout_num(rest)?, rest);
        // The bonus shrinks first, so the spill pointer has room.
        self.tx.set_bonus(obj, head)?;
        self.tx.set_spill(obj, Some(spill))
    }

    /// The bonus type new znodes get.
    fn bonustype(&self) -> u8 {
        if self.sa.is_some() {
            ot::SA
        } else {
            ot::ZNODE
        }
    }

    /// Attributes of a new znode as this file system stores them: a
    /// legacy znode, or an SA buffer (its layout registered first if new).
    fn encode(&mut self, a: &ZplAttrs) -> Result<Vec<u8>> {
        if self.sa.is_none() {
            return Ok(znode_bonus(a, false));
        }
        let a = &sa_form(a);
        let num = self.layout_num(&a.sa_layout_attrs())?;
        let b = a.to_sa(num);
        if b.len() > MAX_BONUS {
            return Err(Error::Invalid(format!(
                "{} bytes of system attributes for a new file",
                b.len()
            )));
        }
        Ok(b)
    }

    /// The number of the SA layout listing `want`, registered (numbered
    /// after the others; 0 and 1 are reserved) if the file system has none.
    fn layout_num(&mut self, want: &[u16]) -> Result<u16> {
        let Some(sa) = &self.sa else {
            return Err(Error::Invalid("not a ZPL 5 file system".into()));
        };
        let found = sa
            .tables
            .layouts
            .iter()
            .filter(|(_, v)| **v == want)
            .map(|(n, _)| *n)
            .min();
        if let Some(n) = found {
            return Ok(n);
        }
        // The lowest free number: 0 and 1 are reserved, ten bits hold it.
        let n = (2..=0x3ffu16)
            .find(|n| !sa.tables.layouts.contains_key(n))
            .ok_or_else(|| Error::Invalid("SA layout table is full".into()))?;
        let obj = sa.layouts_obj;
        let vals: Vec<u64> = want.iter().map(|&x| x as u64).collect();
        zap_tx::update(self.tx, obj, &n.to_string(), 2, &vals)?;
        if let Some(sa) = &mut self.sa {
            Arc::make_mut(sa).tables.layouts.insert(n, want.to_vec());
        }
        Ok(n)
    }

    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(zap_tx::lookup(self.tx, dir, name)?
            .and_then(|e| e.as_u64())
            .map(|v| v & ((1 << 48) - 1)))
    }

    /// Resolve an absolute path (no symlinks).
    pub fn resolve(&self, path: &str) -> Result<u64> {
        let mut obj = self.root;
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if comp == ".." {
                obj = self.attrs(obj)?.parent;
                continue;
            }
            obj = self
                .lookup(obj, comp.as_bytes())?
                .ok_or_else(|| Error::not_found(path.to_string()))?;
        }
        Ok(obj)
    }

    fn check_name(name: &[u8]) -> Result<()> {
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.contains(&b'/')
            || name.contains(&0)
            || name.len() > 255
        {
            return Err(Error::Invalid(format!(
                "invalid file name {:?}",
                String::from_utf8_lossy(name)
            )));
        }
        Ok(())
    }

    fn dir_attrs(&self, dir: u64) -> Result<ZplAttrs> {
        let a = self.attrs(dir)?;
        if a.mode & S_IFMT != S_IFDIR {
            return Err(Error::NotDir(format!("object {dir} is not a directory")));
        }
        Ok(a)
    }

    fn add_entry(
        &mut self,
        dir: u64,
        name: &[u8],
        obj: u64,
        mode: u64,
        subdir: bool,
    ) -> Result<()> {
        let v = obj | (((mode & S_IFMT) >> 12) << 60);
        zap_tx::add(self.tx, dir, name, 8, &[v]).map_err(|e| match e {
            Error::Exists(_) => {
                Error::Exists(format!("{}: file exists", String::from_utf8_lossy(name)))
            }
            other => other,
        })?;
        let mut d = self.dir_attrs(dir)?;
        d.size += 1;
        if subdir {
            d.links += 1;
        }
        let t = now();
        d.mtime = t;
        d.ctime = t;
        self.set_attrs(dir, &d)
    }

    fn remove_entry(&mut self, dir: u64, name: &[u8], subdir: bool) -> Result<()> {
        if !zap_tx::remove_and_shrink(self.tx, dir, name)? {
            return Err(Error::not_found(String::from_utf8_lossy(name).into_owned()));
        }
        let mut d = self.dir_attrs(dir)?;
        d.size = d.size.saturating_sub(1).max(2);
        if subdir {
            d.links = d.links.saturating_sub(1).max(2);
        }
        let t = now();
        d.mtime = t;
        d.ctime = t;
        self.set_attrs(dir, &d)
    }

    fn new_znode(
        &mut self,
        parent: u64,
        mode: u64,
        uid: u64,
        gid: u64,
        rdev: u64,
    ) -> Result<(u64, ZplAttrs)> {
        let t = now();
        let is_dir = mode & S_IFMT == S_IFDIR;
        // Where projects are accounted (ZPL 5, `project_quota`), regular
        // files and directories get a project id, as OpenZFS's
        // `zfs_mknode` gives them: their parent's when it passes it on
        // (`ZFS_PROJINHERIT`), which they pass on too; else project 0.
        let (projid, pflags) = if self.sa.is_some()
            && (is_dir || mode & S_IFMT == S_IFREG)
            && self.tx.accounting.is_some_and(|a| a.projects)
        {
            let p = self.attrs(parent)?;
            if p.flags & ZFS_PROJINHERIT != 0 {
                (Some(p.projid.unwrap_or(0)), ZFS_PROJINHERIT)
            } else {
                (Some(0), 0)
            }
        } else {
            (None, 0)
        };
        let fixed = self.replay_create.take();
        let a = ZplAttrs {
            atime: t,
            mtime: t,
            ctime: t,
            crtime: fixed.map_or(t, |f| f.crtime),
            gen: fixed.map_or(self.txg, |f| f.gen),
            mode,
            size: if is_dir { 2 } else { 0 },
            parent,
            links: if is_dir { 2 } else { 1 },
            xattr: 0,
            rdev,
            flags: pflags,
            uid,
            gid,
            symlink: None,
            dxattr: None,
            projid,
        };
        let bonus = self.encode(&a)?;
        let bt = self.bonustype();
        // Made with a full-size bonus, so the dnode keeps one block
        // pointer and room for every later attribute (as OpenZFS's SA
        // znodes), then given its own.
        let placeholder = vec![0u8; if bt == ot::SA { MAX_BONUS } else { bonus.len() }];
        let obj = match (fixed, is_dir) {
            (Some(f), true) => {
                self.tx
                    .claim_zap(f.obj, ot::DIRECTORY_CONTENTS, bt, placeholder, 0, f.slots)?;
                f.obj
            }
            (Some(f), false) => {
                self.tx.claim_object(
                    f.obj,
                    ot::PLAIN_FILE_CONTENTS,
                    512,
                    bt,
                    placeholder,
                    f.slots,
                )?;
                f.obj
            }
            (None, true) => {
                self.tx
                    .create_zap(ot::DIRECTORY_CONTENTS, bt, placeholder, 0, parent)?
            }
            (None, false) => {
                self.tx
                    .create_object(ot::PLAIN_FILE_CONTENTS, 512, bt, placeholder, parent)?
            }
        };
        self.tx.set_bonus(obj, bonus)?;
        Ok((obj, a))
    }

    /// Create a file, fifo, socket or device node named `name` in `dir`.
    pub fn create(
        &mut self,
        dir: u64,
        name: &[u8],
        mode: u64,
        uid: u64,
        gid: u64,
        rdev: u64,
    ) -> Result<u64> {
        Self::check_name(name)?;
        self.dir_attrs(dir)?;
        if self.lookup(dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "{}: file exists",
                String::from_utf8_lossy(name)
            )));
        }
        let mode = if mode & S_IFMT == 0 {
            mode | S_IFREG
        } else {
            mode
        };
        if mode & S_IFMT == S_IFDIR || mode & S_IFMT == S_IFLNK {
            return Err(Error::Invalid("use mkdir/symlink".into()));
        }
        let (obj, _) = self.new_znode(dir, mode, uid, gid, rdev)?;
        self.add_entry(dir, name, obj, mode, false)?;
        Ok(obj)
    }

    pub fn mkdir(&mut self, dir: u64, name: &[u8], mode: u64, uid: u64, gid: u64) -> Result<u64> {
        Self::check_name(name)?;
        self.dir_attrs(dir)?;
        if self.lookup(dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "{}: file exists",
                String::from_utf8_lossy(name)
            )));
        }
        let mode = (mode & 0o7777) | S_IFDIR;
        let (obj, _) = self.new_znode(dir, mode, uid, gid, 0)?;
        self.add_entry(dir, name, obj, mode, true)?;
        Ok(obj)
    }

    pub fn symlink(
        &mut self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        uid: u64,
        gid: u64,
    ) -> Result<u64> {
        Self::check_name(name)?;
        if target.is_empty() || target.len() > 4096 {
            return Err(Error::Invalid(
                "symlink target must be 1..4096 bytes".into(),
            ));
        }
        self.dir_attrs(dir)?;
        if self.lookup(dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "{}: file exists",
                String::from_utf8_lossy(name)
            )));
        }
        let mode = S_IFLNK | 0o777;
        let (obj, mut a) = self.new_znode(dir, mode, uid, gid, 0)?;
        a.size = target.len() as u64;
        if self.sa.is_some() {
            // ZPL 5 keeps the target in the SA (ZPL_SYMLINK).
            a.symlink = Some(target.to_vec());
            self.set_attrs(obj, &a)?;
        } else if target.len() <= SYMLINK_INLINE_MAX {
            a.symlink = Some(target.to_vec());
            let mut b = znode_bonus(&a, false);
            b.truncate(ZNODE_SIZE);
            b.extend_from_slice(target);
            // 264 + len bytes need the single-blkptr layout.
            let mut dn = self.tx.dnode(obj)?.phys;
            dn.nblkptr = 1;
            dn.blkptr.truncate(1);
            dn.bonuslen = b.len() as u16;
            dn.bonus = b;
            self.tx.set_dnode(obj, dn);
        } else {
            let bs = (target.len() as u64).div_ceil(512) * 512;
            let mut dn = self.tx.dnode(obj)?.phys;
            dn.datablkszsec = (bs / 512) as u16;
            self.tx.set_dnode(obj, dn);
            let mut block = target.to_vec();
            block.resize(bs as usize, 0);
            self.tx.write_block(obj, 0, block);
            self.set_attrs(obj, &a)?;
        }
        self.add_entry(dir, name, obj, mode, false)?;
        Ok(obj)
    }

    /// A new name for an existing non-directory object.
    pub fn link(&mut self, dir: u64, name: &[u8], obj: u64) -> Result<()> {
        Self::check_name(name)?;
        let mut a = self.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(Error::Permission(
                "hard links to directories are not allowed".into(),
            ));
        }
        if self.lookup(dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "{}: file exists",
                String::from_utf8_lossy(name)
            )));
        }
        self.add_entry(dir, name, obj, a.mode, false)?;
        a.links += 1;
        a.ctime = now();
        self.set_attrs(obj, &a)
    }

    /// Remove a non-directory name; the object goes when its last link does.
    pub fn unlink(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        let obj = self
            .lookup(dir, name)?
            .ok_or_else(|| Error::not_found(String::from_utf8_lossy(name).into_owned()))?;
        let mut a = self.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(Error::IsDir(format!(
                "{}: is a directory",
                String::from_utf8_lossy(name)
            )));
        }
        self.remove_entry(dir, name, false)?;
        a.links = a.links.saturating_sub(1);
        if a.links == 0 {
            self.destroy_object(obj, &a)
        } else {
            a.ctime = now();
            self.set_attrs(obj, &a)
        }
    }

    fn destroy_object(&mut self, obj: u64, a: &ZplAttrs) -> Result<()> {
        if a.xattr != 0 {
            let xa = self.attrs(a.xattr)?;
            for e in zap_tx::list(self.tx, a.xattr)? {
                if let Some(v) = e.as_u64() {
                    self.tx.free_object(v & ((1 << 48) - 1))?;
                }
            }
            let _ = xa;
            self.tx.free_object(a.xattr)?;
        }
        self.tx.free_object(obj)
    }

    /// Attributes of `obj` (named `name`), which must be an empty directory.
    fn empty_dir_attrs(&self, name: &[u8], obj: u64) -> Result<ZplAttrs> {
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFDIR {
            return Err(Error::NotDir(format!(
                "{}: not a directory",
                String::from_utf8_lossy(name)
            )));
        }
        if !zap_tx::list(self.tx, obj)?.is_empty() {
            return Err(Error::NotEmpty(format!(
                "{}: directory not empty",
                String::from_utf8_lossy(name)
            )));
        }
        Ok(a)
    }

    pub fn rmdir(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        let obj = self
            .lookup(dir, name)?
            .ok_or_else(|| Error::not_found(String::from_utf8_lossy(name).into_owned()))?;
        let a = self.empty_dir_attrs(name, obj)?;
        self.remove_entry(dir, name, true)?;
        self.destroy_object(obj, &a)
    }

    /// Remove the name of the empty directory `obj` from `dir` and set its
    /// link count to 0, without freeing it (the caller frees it later).
    pub fn remove_dir_entry(&mut self, dir: u64, name: &[u8], obj: u64) -> Result<()> {
        let mut a = self.empty_dir_attrs(name, obj)?;
        self.remove_entry(dir, name, true)?;
        a.links = 0;
        a.ctime = now();
        self.set_attrs(obj, &a)
    }

    /// Rename (replacing a non-directory target, or an empty directory target).
    pub fn rename(&mut self, sdir: u64, sname: &[u8], ddir: u64, dname: &[u8]) -> Result<()> {
        Self::check_name(dname)?;
        let obj = self
            .lookup(sdir, sname)?
            .ok_or_else(|| Error::not_found(String::from_utf8_lossy(sname).into_owned()))?;
        if sdir == ddir && sname == dname {
            return Ok(());
        }
        let mut a = self.attrs(obj)?;
        let is_dir = a.mode & S_IFMT == S_IFDIR;
        if let Some(existing) = self.lookup(ddir, dname)? {
            let ea = self.attrs(existing)?;
            if ea.mode & S_IFMT == S_IFDIR {
                self.rmdir(ddir, dname)?;
            } else {
                self.unlink(ddir, dname)?;
            }
        }
        if is_dir {
            self.refuse_under_itself(obj, ddir)?;
        }
        self.remove_entry(sdir, sname, is_dir)?;
        self.add_entry(ddir, dname, obj, a.mode, is_dir)?;
        a.parent = ddir;
        a.ctime = now();
        self.set_attrs(obj, &a)
    }

    /// Refuse to move directory `dir` into `dest` when `dest` is `dir` or
    /// lies below it (followed through parent pointers, bounded).
    fn refuse_under_itself(&self, dir: u64, dest: u64) -> Result<()> {
        let mut p = dest;
        for _ in 0..4096 {
            if p == dir {
                return Err(Error::Invalid("cannot move a directory into itself".into()));
            }
            if p == self.root {
                break;
            }
            p = self.attrs(p)?.parent;
        }
        Ok(())
    }

    /// Swap two existing names atomically (`RENAME_EXCHANGE`): each name
    /// then refers to the other's object. Directories swapped between
    /// different parents get their parent pointers and the parents' link
    /// counts fixed. Refuses to put a directory under itself.
    pub fn exchange(&mut self, adir: u64, aname: &[u8], bdir: u64, bname: &[u8]) -> Result<()> {
        let missing = |n: &[u8]| Error::not_found(String::from_utf8_lossy(n).into_owned());
        let a = self.lookup(adir, aname)?.ok_or_else(|| missing(aname))?;
        let b = self.lookup(bdir, bname)?.ok_or_else(|| missing(bname))?;
        if a == b {
            return Ok(());
        }
        let mut aa = self.attrs(a)?;
        let mut ba = self.attrs(b)?;
        let a_dir = aa.mode & S_IFMT == S_IFDIR;
        let b_dir = ba.mode & S_IFMT == S_IFDIR;
        // a moves under bdir, b under adir: neither may land inside itself.
        for (obj, is_dir, dest) in [(a, a_dir, bdir), (b, b_dir, adir)] {
            if is_dir && adir != bdir {
                self.refuse_under_itself(obj, dest)?;
            }
        }
        let entry = |obj: u64, mode: u64| obj | (((mode & S_IFMT) >> 12) << 60);
        zap_tx::update_bytes(self.tx, adir, aname, 8, &[entry(b, ba.mode)])?;
        zap_tx::update_bytes(self.tx, bdir, bname, 8, &[entry(a, aa.mode)])?;
        let t = now();
        if adir != bdir && a_dir != b_dir {
            // The parent that gained a subdirectory gains its ".." link.
            let (gain, lose) = if a_dir { (bdir, adir) } else { (adir, bdir) };
            let mut g = self.dir_attrs(gain)?;
            g.links += 1;
            self.set_attrs(gain, &g)?;
            let mut l = self.dir_attrs(lose)?;
            l.links = l.links.saturating_sub(1).max(2);
            self.set_attrs(lose, &l)?;
        }
        for d in [adir, bdir] {
            let mut da = self.dir_attrs(d)?;
            da.mtime = t;
            da.ctime = t;
            self.set_attrs(d, &da)?;
        }
        aa.parent = bdir;
        aa.ctime = t;
        ba.parent = adir;
        ba.ctime = t;
        self.set_attrs(a, &aa)?;
        self.set_attrs(b, &ba)
    }

    fn blksz_for(&self, size: u64) -> u64 {
        if size <= self.recordsize {
            size.max(1).div_ceil(512) * 512
        } else {
            self.recordsize
        }
    }

    /// Write bytes into a regular file, growing it (and its block size while it has one block).
    pub fn write(&mut self, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        let mut a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFREG {
            return Err(Error::Invalid(format!(
                "object {obj} is not a regular file"
            )));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| Error::Invalid("write beyond 2^64".into()))?;
        let dn = self.tx.dnode(obj)?.phys;
        let bs = dn.datablksz();
        // A file with at most one block may grow its block up to the record size.
        if dn.maxblkid == 0 && end > bs && bs < self.recordsize {
            let new_bs = self.blksz_for(end.max(a.size));
            if new_bs != bs {
                self.grow_one_block(obj, new_bs)?;
            }
        }
        self.tx.write(obj, offset, data)?;
        if end > a.size {
            a.size = end;
        }
        let t = now();
        a.mtime = t;
        a.ctime = t;
        self.set_attrs(obj, &a)
    }

    /// Store a record a client compressed itself as record `record` of a
    /// regular file (see `ozfs_dmu::rawio`): the record is replaced whole,
    /// the file grows to cover it, mtime and ctime are set. A file with at
    /// most one block takes the record size as its block size first (as
    /// [`write`](Self::write) grows one). Returns the block's physical size.
    pub fn write_precompressed(
        &mut self,
        obj: u64,
        record: u64,
        rec: &ozfs_dmu::rawio::ExternalRecord,
    ) -> Result<u64> {
        let e = self.tx.build_external(rec)?;
        self.write_external(obj, record, e)
    }

    /// [`write_precompressed`](Self::write_precompressed) of a record
    /// already built (and so checked) by `ObjsetTx::build_external`.
    pub fn write_external(
        &mut self,
        obj: u64,
        record: u64,
        e: ozfs_dmu::rawio::ExtBlock,
    ) -> Result<u64> {
        self.tx.check_external_active()?;
        let mut a = self.attrs(obj)?;
        self.check_precompressed(obj, &a, e.lsize)?;
        // Everything is checked before the file changes.
        if record.checked_mul(e.lsize).is_none_or(|o| o >= 1 << 62) {
            return Err(Error::Invalid(format!(
                "record {record} is beyond any file"
            )));
        }
        let lsize = e.lsize;
        if self.tx.dnode(obj)?.phys.datablksz() != lsize {
            self.grow_one_block(obj, lsize)?;
        }
        let psize = self.tx.stage_external(obj, record, e)?;
        let end = (record + 1).saturating_mul(lsize);
        if end > a.size {
            a.size = end;
        }
        let t = now();
        a.mtime = t;
        a.ctime = t;
        self.set_attrs(obj, &a)?;
        Ok(psize)
    }

    /// Whether a record of `lsize` may be stored in regular file `obj`: its
    /// block size is `lsize`, or it has at most one block, no more data
    /// than `lsize`, and `lsize` is the dataset's record size (the block
    /// then grows to it). Nothing changes here.
    pub fn check_precompressed(&self, obj: u64, a: &ZplAttrs, lsize: u64) -> Result<()> {
        if a.mode & S_IFMT != S_IFREG {
            return Err(Error::Invalid(format!(
                "object {obj} is not a regular file"
            )));
        }
        let bs = self.tx.dnode(obj)?.phys.datablksz();
        if bs == lsize {
            return Ok(());
        }
        let one_block = self.tx.max_blkid(obj)? == 0 && a.size <= lsize;
        if !one_block || lsize != self.recordsize {
            return Err(Error::Invalid(format!(
                "logical size {lsize} is not the file's record size {} (recordsize {})",
                if one_block { self.recordsize } else { bs },
                self.recordsize
            )));
        }
        Ok(())
    }

    /// Give a file that has at most one block the block size `new_bs`,
    /// keeping its data (zeros after it), as ZFS grows a file's only block.
    fn grow_one_block(&mut self, obj: u64, new_bs: u64) -> Result<()> {
        let mut dn = self.tx.dnode(obj)?.phys;
        if dn.datablksz() == new_bs {
            return Ok(());
        }
        let old = self.tx.read_block(obj, 0)?;
        dn.datablkszsec = (new_bs / 512) as u16;
        self.tx.set_dnode(obj, dn);
        if let Some(mut b) = old {
            b.resize(new_bs as usize, 0);
            self.tx.write_block(obj, 0, b);
        }
        Ok(())
    }

    /// A name a new directory entry may have (what `create` checks).
    pub fn valid_name(name: &[u8]) -> Result<()> {
        Self::check_name(name)
    }

    /// Set a file's size, freeing blocks past the end.
    pub fn truncate(&mut self, obj: u64, size: u64) -> Result<()> {
        let mut a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFREG {
            return Err(Error::Invalid(format!(
                "object {obj} is not a regular file"
            )));
        }
        let dn = self.tx.dnode(obj)?.phys;
        let bs = dn.datablksz();
        // Blocks written in the open txg count too (the dnode's maxblkid does not know them yet).
        let maxblkid = self.tx.max_blkid(obj)?;
        if size < a.size && bs > 0 {
            // The tail block is changed in place: refuse before punching
            // anything if it cannot be (a record ozfs cannot decode).
            if !size.is_multiple_of(bs) {
                self.tx.check_modifiable(obj, size / bs)?;
            }
            // Only blocks that hold data are punched (never a walk over
            // every number up to maxblkid); block 0 stays unless size is 0.
            let first_free = size.div_ceil(bs).max(u64::from(size != 0));
            self.tx.punch_from(obj, first_free)?;
            // Zero the tail of the last partial block.
            if !size.is_multiple_of(bs) {
                let blkid = size / bs;
                if self.tx.read_block(obj, blkid)?.is_some() {
                    let from = (size % bs) as usize;
                    self.tx
                        .modify_block(obj, blkid, &mut |b| b[from..].fill(0))?;
                }
            }
        } else if size > a.size && maxblkid == 0 {
            // Growing a one-block file: its block grows (zeros), up to the
            // record size, as ZFS's zfs_extend does — a file larger than its
            // block must have a power-of-two block size.
            let new_bs = self.blksz_for(size);
            if new_bs > bs {
                self.grow_one_block(obj, new_bs)?;
            }
        }
        a.size = size;
        let t = now();
        a.mtime = t;
        a.ctime = t;
        self.set_attrs(obj, &a)
    }

    /// Zero `len` bytes at `offset` of a regular file without changing its
    /// size (`fallocate(FALLOC_FL_PUNCH_HOLE)`): whole blocks become holes,
    /// partial blocks are zeroed in place. The range is clipped to the size.
    pub fn punch_hole(&mut self, obj: u64, offset: u64, len: u64) -> Result<()> {
        let mut a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFREG {
            return Err(Error::Invalid(format!(
                "object {obj} is not a regular file"
            )));
        }
        let end = offset.saturating_add(len).min(a.size);
        let bs = self.tx.dnode(obj)?.phys.datablksz();
        // Partial edge blocks are changed in place: check them before any
        // block is punched.
        if bs > 0 && offset < end {
            for edge in [offset, end] {
                if !edge.is_multiple_of(bs) {
                    self.tx.check_modifiable(obj, edge / bs)?;
                }
            }
        }
        // Only blocks that hold data are visited (a hole needs no punching):
        // the work follows the blocks that exist, never the range's width
        // (a hostile size makes that as large as 2^64 bytes).
        let mut pos = offset;
        while pos < end && bs > 0 {
            let Some(blkid) = self.tx.next_block(obj, pos / bs, (end - 1) / bs, true)? else {
                break;
            };
            let bstart = blkid.saturating_mul(bs);
            let bend = bstart.saturating_add(bs);
            let from = (pos.max(bstart) - bstart) as usize;
            let to = (end.min(bend) - bstart) as usize;
            if from == 0 && to == bs as usize && blkid > 0 {
                self.tx.punch_block(obj, blkid);
            } else if self.tx.read_block(obj, blkid)?.is_some() && from < to {
                self.tx.modify_block(obj, blkid, &mut |b| {
                    let to = to.min(b.len());
                    if from < to {
                        b[from..to].fill(0);
                    }
                })?;
            }
            pos = bend;
        }
        let t = now();
        a.mtime = t;
        a.ctime = t;
        self.set_attrs(obj, &a)
    }

    /// The SA xattrs of `a` as an nvlist (empty if it has none).
    fn sa_xattr_list(a: &ZplAttrs) -> Result<ozfs_format::nvlist::NvList> {
        use ozfs_format::nvlist::{NvList, NvValue};
        let mut nv = NvList::new();
        if let Some(packed) = &a.dxattr {
            for (n, v) in crate::fs::sa_xattrs(packed)? {
                let n = String::from_utf8(n).map_err(|_| {
                    Error::corrupt("SA xattrs", "a name that is not UTF-8".to_string())
                })?;
                nv.pairs.push((n, NvValue::ByteArray(v)));
            }
        }
        Ok(nv)
    }

    /// Set (or replace) an extended attribute, as OpenZFS's Linux port
    /// does: into the SA where `xattr_sa` holds on a ZPL 5 file system and
    /// the value and the SA xattrs stay within their limits (the copy in
    /// the xattr directory, if any, goes); else into the xattr directory
    /// (the copy in the SA, if any, goes). Either way one copy remains.
    pub fn set_xattr(&mut self, obj: u64, name: &[u8], value: &[u8]) -> Result<()> {
        Self::check_name(name)?;
        if self.sa.is_some() && self.xattr_sa && self.set_sa_xattr(obj, name, Some(value))? {
            self.remove_dir_xattr(obj, name)?;
            return Ok(());
        }
        self.set_dir_xattr(obj, name, value)?;
        self.set_sa_xattr(obj, name, None)?;
        Ok(())
    }

    /// Remove extended attribute `name` of `obj` wherever it is kept;
    /// false if it had none of that name.
    pub fn remove_xattr(&mut self, obj: u64, name: &[u8]) -> Result<bool> {
        let in_sa = self.set_sa_xattr(obj, name, None)?;
        let in_dir = self.remove_dir_xattr(obj, name)?;
        Ok(in_sa || in_dir)
    }

    /// Add, replace (`Some`) or remove (`None`) `name` in the SA xattrs of
    /// `obj`. Adding returns false, changing nothing, when the value or the
    /// SA xattrs are past OpenZFS's limits (the caller uses the xattr
    /// directory); removing returns whether the name was there.
    fn set_sa_xattr(&mut self, obj: u64, name: &[u8], value: Option<&[u8]>) -> Result<bool> {
        use ozfs_format::nvlist::NvValue;
        if self.sa.is_none() {
            return Ok(false);
        }
        let mut a = self.attrs(obj)?;
        if value.is_none() && a.dxattr.is_none() {
            return Ok(false);
        }
        // SA names are UTF-8 (as every Linux xattr name is): another name
        // is not there, and is never added.
        let Ok(key) = std::str::from_utf8(name).map(str::to_string) else {
            return Ok(false);
        };
        let mut nv = Self::sa_xattr_list(&a)?;
        let had = nv.pairs.iter().any(|(n, _)| *n == key);
        match value {
            None if !had => return Ok(false),
            None => nv.pairs.retain(|(n, _)| *n != key),
            Some(v) => {
                // Only values and lists within OpenZFS's limits.
                if v.len() > DXATTR_MAX_ENTRY_SIZE || nv.packed_size() > DXATTR_MAX_SA_SIZE {
                    return Ok(false);
                }
                nv.pairs.retain(|(n, _)| *n != key);
                nv.pairs.push((key, NvValue::ByteArray(v.to_vec())));
            }
        }
        let packed = nv.pack_xdr();
        if packed.len() > SA_ATTR_MAX_LEN {
            return Ok(false);
        }
        // An emptied list stays, packed, as OpenZFS leaves it.
        a.dxattr = Some(packed);
        self.set_attrs(obj, &a)?;
        Ok(true)
    }

    /// Remove `name` from `obj`'s xattr directory; false if not there.
    fn remove_dir_xattr(&mut self, obj: u64, name: &[u8]) -> Result<bool> {
        let a = self.attrs(obj)?;
        if a.xattr == 0 || self.lookup(a.xattr, name)?.is_none() {
            return Ok(false);
        }
        self.unlink(a.xattr, name)?;
        Ok(true)
    }

    /// Give `obj` its (hidden) extended-attribute directory.
    pub fn make_xattr_dir(&mut self, obj: u64, mode: u64, uid: u64, gid: u64) -> Result<u64> {
        let mut a = self.attrs(obj)?;
        if a.xattr != 0 {
            return Err(Error::Exists(format!(
                "object {obj} already has an xattr directory"
            )));
        }
        let (xdir, mut xa) = self.new_znode(obj, S_IFDIR | (mode & 0o7777), uid, gid, 0)?;
        xa.flags |= FLAG_XATTR;
        self.set_attrs(xdir, &xa)?;
        a.xattr = xdir;
        self.set_attrs(obj, &a)?;
        Ok(xdir)
    }

    /// Set (or replace) an extended attribute, stored as a file in the xattr directory.
    fn set_dir_xattr(&mut self, obj: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let a = self.attrs(obj)?;
        let xdir = if a.xattr == 0 {
            self.make_xattr_dir(obj, S_IFDIR | 0o777, a.uid, a.gid)?
        } else {
            a.xattr
        };
        if self.lookup(xdir, name)?.is_some() {
            self.unlink(xdir, name)?;
        }
        let f = self.create(xdir, name, S_IFREG | 0o644, a.uid, a.gid, 0)?;
        let mut fa = self.attrs(f)?;
        fa.flags |= FLAG_XATTR;
        self.set_attrs(f, &fa)?;
        if !value.is_empty() {
            self.write(f, 0, value)?;
        }
        Ok(())
    }
}

/// Device number as pool-version-23 ZPL stores it in `zp_rdev`: the Linux
/// 32-bit encoding `minor & 0xff | major << 8 | (minor & !0xff) << 12`
/// (what zfs-fuse writes: `c 1 3` is 0x103).
pub fn encode_rdev(major: u64, minor: u64) -> u64 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// (major, minor) of a stored device number: the 32-bit form above, or a
/// 64-bit `(major << 32) | minor` value written by other ZFS ports.
pub fn decode_rdev(v: u64) -> (u64, u64) {
    if v >> 32 != 0 {
        return (v >> 32, v & 0xffff_ffff);
    }
    ((v >> 8) & 0xfff, (v & 0xff) | ((v >> 12) & 0xfff00))
}

/// Attributes as a ZPL 5 file system keeps them: a device number as the
/// Linux kernel's `dev_t` (`major << 20 | minor`), which OpenZFS stores.
fn sa_form(a: &ZplAttrs) -> ZplAttrs {
    let mut a = a.clone();
    // A 64-bit `major << 32 | minor` (illumos) stays as it is.
    if a.rdev != 0 && a.rdev >> 32 == 0 {
        let (major, minor) = decode_rdev(a.rdev);
        a.rdev = (major << 20) | minor;
    }
    a
}

/// The SA tables of a ZPL 5 file system (master node `SA_ATTRS`).
/// The master node's facts a file system is written by.
struct ZplMeta {
    root: u64,
    delete_queue: u64,
    sa: Option<Arc<SaState>>,
}

impl ZplMeta {
    /// Read them, with the objects they came from.
    fn load(tx: &ObjsetTx) -> Result<(ZplMeta, Vec<u64>)> {
        let version = zap_tx::lookup_u64(tx, 1, "VERSION")?;
        if version > 5 {
            return Err(Error::unsupported(
                "file system",
                format!("writing ZPL version {version}"),
            ));
        }
        let mut watch = vec![1];
        let sa = if version == 5 {
            let (sa, objs) = load_sa(tx)?;
            watch.extend(objs);
            Some(Arc::new(sa))
        } else {
            None
        };
        let root = zap_tx::lookup_u64(tx, 1, "ROOT")?;
        let delete_queue = zap_tx::lookup_u64(tx, 1, "DELETE_QUEUE").unwrap_or(0);
        Ok((
            ZplMeta {
                root,
                delete_queue,
                sa,
            },
            watch,
        ))
    }
}

/// The SA tables, with the objects they were read from.
fn load_sa(tx: &ObjsetTx) -> Result<(SaState, [u64; 3])> {
    let master = zap_tx::lookup_u64(tx, 1, "SA_ATTRS")?;
    let registry = zap_tx::lookup_u64(tx, master, "REGISTRY")?;
    let layouts_obj = zap_tx::lookup_u64(tx, master, "LAYOUTS")?;
    let tables = SaTables::from_zap_entries(
        &zap_tx::list(tx, registry)?,
        &zap_tx::list(tx, layouts_obj)?,
    )?;
    // ozfs encodes attributes by OpenZFS's numbering (the order OpenZFS
    // registers them in): a file system numbered otherwise, or missing an
    // attribute ozfs writes, is not written (its readers could not decode
    // what ozfs would write).
    for (n, (name, len, _)) in ozfs_format::znode::ZPL_SA_ATTRS.iter().enumerate() {
        if !ozfs_format::znode::ZPL_SA_WRITTEN.contains(&(n as u16)) {
            continue;
        }
        match tables.registry.get(&(n as u16)) {
            Some((r, l)) if r == name && l == len => {}
            Some((r, _)) => {
                return Err(Error::unsupported(
                    "file system",
                    format!("writing system attributes registered as {r} = {n} (OpenZFS numbers them otherwise)"),
                ))
            }
            None => {
                return Err(Error::unsupported(
                    "file system",
                    format!("writing system attribute {name}, which its registry lacks"),
                ))
            }
        }
    }
    Ok((
        SaState {
            tables,
            layouts_obj,
        },
        [master, registry, layouts_obj],
    ))
}
