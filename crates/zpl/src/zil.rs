//! The ZPL's side of the intent log: the records a change of a file
//! system is logged as, and their replay.
//!
//! # Theory
//!
//! Every change a mounted file system makes is remembered as an *itx* (an
//! intent-log transaction) with the txg it belongs to, in the order made.
//! Namespace and attribute changes keep their whole record (OpenZFS's
//! `zfs_log_create`, `zfs_log_remove`, … shapes, `ozfs_format::zil`);
//! a write keeps only its range, and its data is read from the file when
//! the log is committed (OpenZFS's `WR_NEED_COPY`): a file written many
//! times and never synced costs no copies, and the data logged is the
//! file's latest, which replay may write over older data without harm
//! because every later change is replayed after it. Records of txgs that
//! have committed are dropped: the objset holds them.
//!
//! Replay applies a claimed log's records to the file system in sequence
//! order, as OpenZFS's `zfs_replay.c` does: records of txgs before the
//! claim txg were committed and are skipped, so are those at or below the
//! header's replay sequence; creates make the object number, generation
//! and creation time the record gives (later records name objects by
//! number); records that may be logged out of order (writes, truncates,
//! attributes, xattrs, clones) are skipped when their object is gone; an
//! indirect write reads the block it names (written in place by its
//! `dmu_sync`) and writes the whole of it, the file then ending where the
//! write did, or where it was if further; a clone writes the blocks it
//! names as copies. A record ozfs cannot apply (an NFSv4 ACL, a type it
//! does not know) fails the replay naming the record: the caller discards
//! everything the replay staged, and the log stays for OpenZFS.
//!
//! # Invariants
//!
//! * Records are applied in sequence order, each at most once; a replay
//!   is all or nothing (one txg, which also destroys the log).
//! * Nothing from a record sizes an allocation before it was bounded by
//!   the record's own checked length (`ozfs_format::zil::parse_records`).

use crate::write::{ReplayCreate, ZplTx};
use ozfs_dmu::tx::ObjsetTx;
use ozfs_format::blkptr::BlkPtr;
use ozfs_format::zil::{self as fz, tx, LogRecord, LrCommon, Record};
use ozfs_format::{Error, Result};

const S_IFMT: u64 = 0o170000;
const S_IFDIR: u64 = 0o040000;
const S_IFLNK: u64 = 0o120000;
const S_IFCHR: u64 = 0o020000;

/// Linux `ATTR_*` bits of a setattr record's mask.
pub mod attr {
    pub const MODE: u64 = 1;
    pub const UID: u64 = 2;
    pub const GID: u64 = 4;
    pub const SIZE: u64 = 8;
    pub const ATIME: u64 = 16;
    pub const MTIME: u64 = 32;
    pub const CTIME: u64 = 64;
}

/// Which platform's attribute bits a setattr record's mask is in: the
/// writer's. OpenZFS on Linux logs the kernel's `ATTR_*` ([`attr`]);
/// Solaris and zfs-fuse — whose pools are of version 23 or less — log
/// `AT_*` (`AT_MODE` 0x2, `AT_UID` 0x4, `AT_GID` 0x8, `AT_SIZE` 0x80,
/// `AT_ATIME` 0x100, `AT_MTIME` 0x200, `AT_CTIME` 0x400). ozfs writes a
/// pool's records in the flavor its other writers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrMasks {
    Linux,
    Solaris,
}

const SOLARIS: [(u64, u64); 7] = [
    (attr::MODE, 0x2),
    (attr::UID, 0x4),
    (attr::GID, 0x8),
    (attr::SIZE, 0x80),
    (attr::ATIME, 0x100),
    (attr::MTIME, 0x200),
    (attr::CTIME, 0x400),
];

impl AttrMasks {
    /// The flavor of a pool of `version`: Solaris's up to version 23
    /// (zfs-fuse), Linux's after (OpenZFS on Linux).
    pub fn of_version(version: u64) -> AttrMasks {
        if version <= 23 {
            AttrMasks::Solaris
        } else {
            AttrMasks::Linux
        }
    }

    /// A mask of [`attr`] bits in this flavor.
    pub fn from_linux(self, m: u64) -> u64 {
        match self {
            AttrMasks::Linux => m,
            AttrMasks::Solaris => SOLARIS
                .iter()
                .filter(|(l, _)| m & l != 0)
                .fold(0, |a, (_, s)| a | s),
        }
    }

    /// A mask of this flavor in [`attr`] bits (others dropped).
    pub fn to_linux(self, m: u64) -> u64 {
        match self {
            AttrMasks::Linux => m,
            AttrMasks::Solaris => SOLARIS
                .iter()
                .filter(|(_, s)| m & s != 0)
                .fold(0, |a, (l, _)| a | l),
        }
    }
}

/// One logged change, waiting for a commit.
#[derive(Debug, Clone)]
pub enum Itx {
    /// A whole record.
    Rec(Box<Record>, u64),
    /// A write of `len` bytes at `off` of object `obj` (data read at commit).
    Write { obj: u64, off: u64, len: u64 },
}

/// An itx and the txg of its change.
#[derive(Debug, Clone)]
pub struct ItxEntry {
    pub txg: u64,
    pub itx: Itx,
}

/// A device number as a log record carries it: the Linux kernel's
/// `dev_t` (`major << 20 | minor`, what OpenZFS logs), from the form ozfs
/// stores — the 32-bit `new_encode_dev` form, or OpenZFS's 64-bit
/// `major << 32 | minor` (see the FUSE layer's `linux_dev`).
pub fn rdev_to_log(stored: u64) -> u64 {
    let (major, minor) = if stored >> 32 == 0 {
        let d = stored as u32 as u64;
        ((d & 0xfff00) >> 8, (d & 0xff) | ((d >> 12) & 0xfff00))
    } else {
        ((stored >> 32) & 0xfff, stored & 0xfffff)
    };
    (major << 20) | minor
}

/// The stored form of a logged device number (inverse of
/// [`rdev_to_log`]): what a mount stores for a `mknod` of that device.
pub fn rdev_from_log(logged: u64) -> u64 {
    let (major, minor) = ((logged >> 20) & 0xfff, logged & 0xfffff);
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

fn common(txtype: u64) -> LrCommon {
    LrCommon {
        txtype,
        ci: false,
        reclen: 0,
        txg: 0,
        seq: 0,
    }
}

/// The record of a create (`TX_CREATE`, `TX_MKDIR`, `TX_SYMLINK`) of
/// object `obj` named `name` in `doid`, from the attributes it was made with.
pub fn create_itx(z: &ZplTx, doid: u64, name: &[u8], obj: u64) -> Result<Itx> {
    let a = z.attrs(obj)?;
    let (txtype, link) = match a.mode & S_IFMT {
        S_IFDIR => (tx::MKDIR, None),
        S_IFLNK => (tx::SYMLINK, Some(a.symlink.clone().unwrap_or_default())),
        _ => (tx::CREATE, None),
    };
    let link = match link {
        Some(l) if l.is_empty() => Some(z.tx.read(obj, 0, a.size.min(4096) as usize)?),
        l => l,
    };
    Ok(Itx::Rec(
        Box::new(Record::Create(fz::LrCreate {
            doid,
            foid: obj,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            gen: a.gen,
            crtime: [a.crtime.0, a.crtime.1],
            rdev: if a.rdev == 0 { 0 } else { rdev_to_log(a.rdev) },
            name: name.to_vec(),
            link,
            ..Default::default()
        })),
        txtype,
    ))
}

/// `TX_REMOVE` / `TX_RMDIR` of `name` in `doid`.
pub fn remove_itx(doid: u64, name: &[u8], dir: bool) -> Itx {
    Itx::Rec(
        Box::new(Record::Remove(fz::LrRemove {
            doid,
            name: name.to_vec(),
        })),
        if dir { tx::RMDIR } else { tx::REMOVE },
    )
}

/// `TX_LINK`: a new name `name` in `doid` for `obj`.
pub fn link_itx(doid: u64, name: &[u8], obj: u64) -> Itx {
    Itx::Rec(
        Box::new(Record::Link(fz::LrLink {
            doid,
            link_obj: obj,
            name: name.to_vec(),
        })),
        tx::LINK,
    )
}

/// `TX_RENAME` (or `TX_RENAME_EXCHANGE`).
pub fn rename_itx(sdoid: u64, sname: &[u8], tdoid: u64, tname: &[u8], exchange: bool) -> Itx {
    Itx::Rec(
        Box::new(Record::Rename(fz::LrRename {
            sdoid,
            tdoid,
            sname: sname.to_vec(),
            tname: tname.to_vec(),
            whiteout: None,
        })),
        if exchange {
            tx::RENAME_EXCHANGE
        } else {
            tx::RENAME
        },
    )
}

/// `TX_TRUNCATE`: free `len` bytes at `off` (0: everything from `off`, the
/// file then ending there).
pub fn truncate_itx(obj: u64, off: u64, len: u64) -> Itx {
    Itx::Rec(
        Box::new(Record::Truncate(fz::LrTruncate {
            foid: obj,
            offset: off,
            length: len,
        })),
        tx::TRUNCATE,
    )
}

/// `TX_SETATTR` of `obj`'s mode, owner, group and times as they are now.
pub fn setattr_itx(z: &ZplTx, obj: u64, mask: u64) -> Result<Itx> {
    let a = z.attrs(obj)?;
    Ok(Itx::Rec(
        Box::new(Record::Setattr(fz::LrSetattr {
            foid: obj,
            mask,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            atime: [a.atime.0, a.atime.1],
            mtime: [a.mtime.0, a.mtime.1],
            ..Default::default()
        })),
        tx::SETATTR,
    ))
}

/// `TX_SETSAXATTR`: `name` set to `value` (None: removed).
pub fn xattr_itx(obj: u64, name: &[u8], value: Option<&[u8]>) -> Itx {
    Itx::Rec(
        Box::new(Record::SetSaXattr(fz::LrSetSaXattr {
            foid: obj,
            name: name.to_vec(),
            value: value.map(<[u8]>::to_vec).unwrap_or_default(),
        })),
        tx::SETSAXATTR,
    )
}

/// The records of `itxs` (the data of writes read from the files now,
/// split into pieces every log block holds). A write whose object is gone
/// or that now lies past the end of its file logs what is left of it.
pub fn records(
    tx: &ObjsetTx,
    itxs: Vec<ItxEntry>,
    masks: AttrMasks,
) -> Result<Vec<(u64, LogRecord)>> {
    let mut out = Vec::with_capacity(itxs.len());
    for e in itxs {
        match e.itx {
            Itx::Rec(record, txtype) => {
                let mut record = *record;
                if let Record::Setattr(sa) = &mut record {
                    sa.mask = masks.from_linux(sa.mask);
                }
                out.push((
                    e.txg,
                    LogRecord {
                        common: common(txtype),
                        record,
                    },
                ))
            }
            Itx::Write { obj, off, len } => {
                let Ok(dn) = tx.dnode(obj) else { continue };
                if dn.phys.object_type == 0 {
                    continue;
                }
                let mut at = off;
                let end = off.saturating_add(len);
                while at < end {
                    let n = (end - at).min(ozfs_dsl::zil::MAX_WRITE_CHUNK as u64);
                    let data = tx.read(obj, at, n as usize)?;
                    if data.is_empty() {
                        break;
                    }
                    let got = data.len() as u64;
                    out.push((
                        e.txg,
                        LogRecord {
                            common: common(tx::WRITE),
                            record: Record::Write(fz::LrWrite {
                                foid: obj,
                                offset: at,
                                length: got,
                                blkoff: 0,
                                blkptr: BlkPtr::default(),
                                data,
                            }),
                        },
                    ));
                    at += got;
                }
            }
        }
    }
    Ok(out)
}

/// What a replay did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records applied.
    pub applied: u64,
    /// Records skipped: committed already, replayed already, or changes
    /// of objects that no longer exist.
    pub skipped: u64,
}

fn exists(z: &ZplTx, obj: u64) -> bool {
    z.tx.dnode(obj).is_ok_and(|d| d.phys.object_type != 0)
}

/// Apply `records` (a claimed log's, in order) to the file system.
/// `read_block` reads a data block an indirect write or a clone names.
pub fn replay(
    z: &mut ZplTx,
    records: &[LogRecord],
    claim_txg: u64,
    replay_seq: u64,
    masks: AttrMasks,
    read_block: &dyn Fn(&BlkPtr) -> Result<Vec<u8>>,
) -> Result<ReplayStats> {
    let mut st = ReplayStats::default();
    for r in records {
        if r.common.txg < claim_txg || r.common.seq <= replay_seq {
            st.skipped += 1;
            continue;
        }
        let name = tx::name(r.common.txtype);
        let converted;
        let r = match &r.record {
            Record::Setattr(sa) if masks != AttrMasks::Linux => {
                let mut sa = sa.clone();
                sa.mask = masks.to_linux(sa.mask);
                converted = LogRecord {
                    common: r.common.clone(),
                    record: Record::Setattr(sa),
                };
                &converted
            }
            _ => r,
        };
        match apply(z, r, read_block) {
            Ok(true) => st.applied += 1,
            Ok(false) => st.skipped += 1,
            Err(e) => {
                return Err(e.context(&format!(
                    "replaying intent-log record {} ({name}, txg {})",
                    r.common.seq, r.common.txg
                )))
            }
        }
    }
    Ok(st)
}

fn obj_of(foid: u64) -> u64 {
    fz::lr_foid_obj(foid)
}

/// Apply one record; false when it was skipped (its object is gone).
fn apply(
    z: &mut ZplTx,
    r: &LogRecord,
    read_block: &dyn Fn(&BlkPtr) -> Result<Vec<u8>>,
) -> Result<bool> {
    let t = r.common.txtype;
    if tx::is_ooo(t) {
        let foid = match &r.record {
            Record::Write(w) => w.foid,
            Record::Truncate(x) => x.foid,
            Record::Setattr(x) => x.foid,
            Record::Acl(x) => x.foid,
            Record::SetSaXattr(x) => x.foid,
            Record::CloneRange(x) => x.foid,
            _ => 0,
        };
        if !exists(z, obj_of(foid)) {
            return Ok(false);
        }
    }
    match &r.record {
        Record::Create(c) => {
            let obj = c.foid_obj();
            let slots = u8::try_from(c.foid_slots()).map_err(|_| {
                Error::corrupt(
                    "intent log",
                    format!("create of object {obj}: bad slot count"),
                )
            })?;
            z.replay_create = Some(ReplayCreate {
                obj,
                slots,
                gen: c.gen,
                crtime: (c.crtime[0], c.crtime[1]),
            });
            let made = if tx::is_create(t) && t != tx::MKXATTR {
                match c.mode & S_IFMT {
                    S_IFDIR => z.mkdir(c.doid, &c.name, c.mode, c.uid, c.gid),
                    S_IFLNK => {
                        let target = c.link.clone().unwrap_or_default();
                        z.symlink(c.doid, &c.name, &target, c.uid, c.gid)
                    }
                    _ => {
                        let rdev = if c.rdev == 0 {
                            0
                        } else {
                            rdev_from_log(c.rdev)
                        };
                        z.create(c.doid, &c.name, c.mode, c.uid, c.gid, rdev)
                    }
                }
            } else {
                z.make_xattr_dir(c.doid, c.mode, c.uid, c.gid)
            };
            let leftover = z.replay_create.take();
            let got = made?;
            if leftover.is_some() || got != obj {
                return Err(Error::corrupt(
                    "intent log",
                    format!("create of object {obj} made object {got}"),
                ));
            }
            Ok(true)
        }
        Record::Remove(x) => {
            if t == tx::RMDIR {
                z.rmdir(x.doid, &x.name)?;
            } else {
                z.unlink(x.doid, &x.name)?;
            }
            Ok(true)
        }
        Record::Link(x) => {
            z.link(x.doid, &x.name, x.link_obj)?;
            Ok(true)
        }
        Record::Rename(x) => {
            if t == tx::RENAME_EXCHANGE {
                z.exchange(x.sdoid, &x.sname, x.tdoid, &x.tname)?;
                return Ok(true);
            }
            z.rename(x.sdoid, &x.sname, x.tdoid, &x.tname)?;
            if let Some(w) = &x.whiteout {
                let obj = fz::lr_foid_obj(w.wfoid);
                z.replay_create = Some(ReplayCreate {
                    obj,
                    slots: u8::try_from(fz::lr_foid_slots(w.wfoid)).unwrap_or(1),
                    gen: w.wgen,
                    crtime: (w.wcrtime[0], w.wcrtime[1]),
                });
                let mode = S_IFCHR | (w.wmode & 0o7777);
                let rdev = if w.wrdev == 0 {
                    0
                } else {
                    rdev_from_log(w.wrdev)
                };
                let made = z.create(x.sdoid, &x.sname, mode, w.wuid, w.wgid, rdev);
                z.replay_create = None;
                made?;
            }
            Ok(true)
        }
        Record::Write(w) => {
            let obj = obj_of(w.foid);
            let eod = w.offset.saturating_add(w.length);
            if t == tx::WRITE2 {
                if z.attrs(obj)?.size < eod {
                    z.truncate(obj, eod)?;
                }
                return Ok(true);
            }
            if !w.data.is_empty() || w.blkptr.is_hole() && w.length == 0 {
                z.write(obj, w.offset, &w.data)?;
                return Ok(true);
            }
            // Indirect: the whole block the pointer names.
            let old = z.attrs(obj)?.size;
            let lsize = w.blkptr.lsize().max(1);
            let (off, data) = if w.blkptr.is_hole() {
                (w.offset, vec![0u8; w.length as usize])
            } else {
                let d = read_block(&w.blkptr)?;
                if w.length < lsize {
                    (w.offset - w.offset % lsize, d)
                } else {
                    (w.offset, d.get(..w.length as usize).unwrap_or(&d).to_vec())
                }
            };
            z.write(obj, off, &data)?;
            let end = old.max(eod);
            if z.attrs(obj)?.size > end {
                z.truncate(obj, end)?;
            }
            Ok(true)
        }
        Record::Truncate(x) => {
            let obj = obj_of(x.foid);
            if x.length == 0 {
                z.truncate(obj, x.offset)?;
            } else {
                let size = z.attrs(obj)?.size;
                if x.offset < size {
                    z.punch_hole(obj, x.offset, x.length.min(size - x.offset))?;
                }
                let end = x.offset.saturating_add(x.length);
                if end > size {
                    z.truncate(obj, end)?;
                }
            }
            Ok(true)
        }
        Record::Setattr(x) => {
            let obj = obj_of(x.foid);
            if x.mask & attr::SIZE != 0 {
                z.truncate(obj, x.size)?;
            }
            let mut a = z.attrs(obj)?;
            if x.mask & attr::MODE != 0 {
                a.mode = (a.mode & S_IFMT) | (x.mode & 0o7777);
            }
            if x.mask & attr::UID != 0 {
                a.uid = x.uid;
            }
            if x.mask & attr::GID != 0 {
                a.gid = x.gid;
            }
            if x.mask & attr::ATIME != 0 {
                a.atime = (x.atime[0], x.atime[1]);
            }
            if x.mask & attr::MTIME != 0 {
                a.mtime = (x.mtime[0], x.mtime[1]);
            }
            a.ctime = crate::write::now();
            z.set_attrs(obj, &a)?;
            Ok(true)
        }
        Record::SetSaXattr(x) => {
            let obj = obj_of(x.foid);
            if x.value.is_empty() {
                z.remove_xattr(obj, &x.name)?;
            } else {
                z.set_xattr(obj, &x.name, &x.value)?;
            }
            Ok(true)
        }
        Record::CloneRange(x) => {
            let obj = obj_of(x.foid);
            let mut at = x.offset;
            let end = x.offset.saturating_add(x.length);
            for bp in &x.bps {
                if at >= end {
                    break;
                }
                let n = x.blksz.min(end - at) as usize;
                let data = if bp.is_hole() {
                    vec![0u8; n]
                } else {
                    let d = read_block(bp)?;
                    d.get(..n).unwrap_or(&d).to_vec()
                };
                z.write(obj, at, &data)?;
                at = at.saturating_add(x.blksz);
            }
            Ok(true)
        }
        Record::Acl(_) => Err(Error::unsupported(
            "intent log",
            "an NFSv4 ACL record (ozfs keeps POSIX ACLs only)",
        )),
        _ => Err(Error::unsupported(
            "intent log",
            format!("a record of type {} ({})", t, tx::name(t)),
        )),
    }
}

/// Replay the log of file system `ds_obj` if its header asks for it (a
/// claimed log with records), then destroy the log, all in the open txg,
/// and sync. An empty claimed log is only destroyed. Returns what the
/// replay did, None when there was no log. On failure nothing the replay
/// staged is kept and the log stays (the file system is then not written).
pub fn replay_if_needed(
    w: &mut ozfs_dsl::sync::PoolWriter,
    ds_obj: u64,
    recordsize: u64,
    xattr_sa: bool,
) -> Result<Option<ReplayStats>> {
    replay_framed(w, ds_obj, |w, records, h| {
        let txg = w.txg;
        let version = w.version;
        let pool = w.pool.clone();
        let otx = w.fs_tx(ds_obj)?;
        let mut z = ZplTx::open(otx, txg, recordsize)?;
        z.xattr_sa = xattr_sa;
        let masks = AttrMasks::of_version(version);
        replay(&mut z, records, h.claim_txg, h.replay_seq, masks, &|bp| {
            pool.read_bp(bp)
        })
    })
}

/// The frame of every replay, in OpenZFS's order: claim the log of
/// `ds_obj` (unless claimed), read its chain (bounded), let `apply` replay
/// the records (none when the header says no replay is needed), then
/// destroy the chain and commit the txg — all or nothing: a failure drops
/// what was staged and keeps the log. None when there is no log. Shared
/// by file systems ([`replay_if_needed`]) and volumes
/// (`crate::zvol::replay_if_needed`).
pub(crate) fn replay_framed<T>(
    w: &mut ozfs_dsl::sync::PoolWriter,
    ds_obj: u64,
    apply: impl FnOnce(&mut ozfs_dsl::sync::PoolWriter, &[LogRecord], &fz::ZilHeader) -> Result<T>,
) -> Result<Option<T>> {
    w.zil_begin_replay(ds_obj);
    let r = (|| {
        let (h, keyed) = {
            let otx = w.fs_tx(ds_obj)?;
            (
                fz::ZilHeader::decode(&otx.os.phys.zil_header, otx.os.swap)?,
                otx.os.key.is_some(),
            )
        };
        if h.log.is_hole() {
            w.zil_end_replay(ds_obj);
            return Ok(None);
        }
        let h = if h.claim_txg == 0 {
            w.zil_claim(ds_obj)?
        } else {
            h
        };
        let needed = h.flags & fz::ZIL_REPLAY_NEEDED != 0;
        if needed && keyed {
            return Err(Error::unsupported(
                format!("dataset object {ds_obj}"),
                "its intent log is encrypted: ozfs does not replay encrypted logs yet \
                 (import the pool with OpenZFS once, or read it with -o readonly=on)",
            ));
        }
        // Read whole either way: every block it names is freed with it.
        let mut chain = ozfs_dsl::zil::read_chain(&w.pool, &h, ds_obj, None);
        if !needed {
            chain.records.clear();
        }
        let out = apply(w, &chain.records, &h)?;
        w.zil_destroy_replayed(ds_obj, &chain)?;
        w.sync()?;
        Ok(Some(out))
    })();
    if r.is_err() {
        w.zil_abort_replay(ds_obj);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenZFS logs `mknod c 1 3` as the kernel's dev_t 0x100003 and
    /// `b 7 0` as 0x700000 (seen in its `zdb -ivv`); ozfs stores the FUSE
    /// form 0x103 / 0x700 (what zfs-fuse stores too), and reads OpenZFS's
    /// 64-bit `1 << 32 | 3`.
    /// zfs-fuse logs a truncate with `AT_SIZE` (0x80) and a chmod with
    /// `AT_MODE` (0x2), as Solaris does (seen in its logs: read as Linux
    /// bits they were a uid change and nothing).
    #[test]
    fn setattr_masks_follow_the_writers_platform() {
        let s = AttrMasks::of_version(23);
        assert_eq!(s, AttrMasks::Solaris);
        assert_eq!(AttrMasks::of_version(5000), AttrMasks::Linux);
        assert_eq!(s.to_linux(0x80), attr::SIZE);
        assert_eq!(s.to_linux(0x2), attr::MODE);
        assert_eq!(s.to_linux(0x300), attr::ATIME | attr::MTIME);
        assert_eq!(s.from_linux(attr::MODE | attr::UID | attr::GID), 0xe);
        assert_eq!(s.to_linux(s.from_linux(0x7f)), 0x7f);
        assert_eq!(AttrMasks::Linux.from_linux(0x9), 0x9);
    }

    #[test]
    fn device_numbers_convert_as_openzfs_logs_them() {
        assert_eq!(rdev_from_log(0x100003), 0x103);
        assert_eq!(rdev_from_log(0x700000), 0x700);
        assert_eq!(rdev_to_log(0x103), 0x100003);
        assert_eq!(rdev_to_log((1 << 32) | 3), 0x100003);
        // Large minors round-trip (c 300 70000).
        assert_eq!(rdev_to_log(0x11112c70), (300 << 20) | 70000);
        assert_eq!(rdev_from_log((300 << 20) | 70000), 0x11112c70);
    }
}
