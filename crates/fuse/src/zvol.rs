//! A volume served as one file: the FUSE side of ozfs's block devices.
//!
//! # Theory
//!
//! ozfs has no kernel module to make `/dev/zdN`. Instead a volume is
//! served as a FUSE file system whose root *is* a regular file (mounted on
//! a file, `rootmode` a regular file's), `volsize` bytes long, and the
//! daemon attaches a loop device to that file: the kernel's block layer
//! then turns every block I/O into reads, writes, `fsync` and `fallocate`
//! of the file, which land here. The same [`State`] serves it as serves a
//! file system (its writer, txg timer, dirty-data limit, final sync): a
//! volume state has `vol` set, no ZPL root and no intent log, and only
//! the requests a file takes reach it.
//!
//! * read: the bytes at the offset (holes read zeros); a read at or past
//!   the end returns what lies before it, as for any file.
//! * write: only inside `volsize` (the loop device never writes past it;
//!   anything else gets EFBIG, never a silent extension).
//! * fallocate: `PUNCH_HOLE` (discard) and `ZERO_RANGE` (write zeroes)
//!   free whole blocks and zero the edges (`ZvolTx::discard`); plain
//!   allocation inside the volume is a no-op (copy-on-write, as OpenZFS).
//! * fsync (the block layer's FLUSH): commits the txg and waits for it.
//! * setattr: the size cannot change here (`zfs set volsize`); times and
//!   owners are not kept (a volume has none).
//!
//! # Invariants
//!
//! * Every offset and length is checked against `volsize` before any
//!   change; a refused request changes nothing.
//! * A flush answers only after every write answered before it is on
//!   stable storage (the txg is committed and waited for).

use crate::{errno_of, Res, State};
use fuser::{FileAttr, FileType};
use libc::EINVAL;
use ozfs_zpl::zvol::{ZvolTx, ZVOL_OBJ};
use std::time::{Duration, SystemTime};

impl State {
    /// This state serves a volume.
    pub fn is_volume(&self) -> bool {
        self.vol.is_some()
    }

    /// The volume's size (None: not a volume).
    pub fn volume_size(&self) -> Option<u64> {
        self.vol.map(|v| v.size)
    }

    /// Read the volume's size again (after `zfs set volsize`) and tell
    /// the kernel the file's attributes changed. Returns the new size.
    pub fn vol_refresh(&mut self) -> Result<u64, ozfs_format::Error> {
        let tx = self.writer.fs_tx(self.ds_obj)?;
        let info = ozfs_zpl::zvol::info(tx)?;
        self.vol = Some(info);
        if let Some(n) = &self.notifier {
            let _ = n.inval_inode(fuser::FUSE_ROOT_ID, -1, 0);
        }
        Ok(info.size)
    }

    /// Served read-only (a snapshot, `readonly=on`, a read-only pool).
    pub fn is_readonly(&self) -> bool {
        self.opts.readonly
    }

    fn zv(&mut self) -> Res<ZvolTx<'_>> {
        let tx = self
            .writer
            .fs_tx(self.ds_obj)
            .map_err(|e| errno_of("open volume", &e))?;
        ZvolTx::open(tx).map_err(|e| errno_of("open volume", &e))
    }

    /// The volume file's attributes.
    pub(crate) fn vol_attr(&mut self) -> Res<FileAttr> {
        let size = self.vol.map(|v| v.size).ok_or(EINVAL)?;
        let blksz = self.vol.map(|v| v.blocksize).unwrap_or(4096);
        let used = match &self.vol_snap {
            Some((_, dn)) => dn.phys.used_bytes(),
            None => self
                .writer
                .fs_tx(self.ds_obj)
                .ok()
                .and_then(|t| t.dnode(ZVOL_OBJ).ok())
                .map(|d| d.phys.used_bytes())
                .unwrap_or(0),
        };
        let t = self.vol_ctime;
        Ok(FileAttr {
            ino: fuser::FUSE_ROOT_ID,
            size,
            blocks: used.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::RegularFile,
            perm: 0o660,
            nlink: 1,
            uid: 0,
            gid: self.vol_gid,
            rdev: 0,
            blksize: blksz.min(1 << 20) as u32,
            flags: 0,
        })
    }

    pub(crate) fn vol_check_ino(&self, ino: u64) -> Res<()> {
        if ino == fuser::FUSE_ROOT_ID {
            Ok(())
        } else {
            Err(libc::ENOENT)
        }
    }

    pub fn vol_read(&mut self, ino: u64, offset: i64, size: u32) -> Res<Vec<u8>> {
        self.vol_check_ino(ino)?;
        if offset < 0 {
            return Err(EINVAL);
        }
        let vsize = self.vol.map(|v| v.size).ok_or(EINVAL)?;
        let off = offset as u64;
        if off >= vsize {
            return Ok(Vec::new());
        }
        let len = (size as u64).min(vsize - off) as usize;
        if let Some((os, dn)) = &self.vol_snap {
            let mut out = vec![0u8; len];
            os.read_into_client(dn, off, &mut out)
                .map_err(|e| errno_of(&format!("read volume snapshot at {off}"), &e))?;
            return Ok(out);
        }
        let z = self.zv()?;
        z.read(off, len)
            .map_err(|e| errno_of(&format!("read volume at {off}"), &e))
    }

    pub fn vol_write(&mut self, ino: u64, offset: i64, data: &[u8]) -> Res<u32> {
        self.vol_check_ino(ino)?;
        self.writable()?;
        let vsize = self.vol.map(|v| v.size).ok_or(EINVAL)?;
        if offset < 0 {
            return Err(EINVAL);
        }
        let off = offset as u64;
        if off.checked_add(data.len() as u64).is_none_or(|e| e > vsize) {
            return Err(libc::EFBIG);
        }
        let cost = self.vol_dirty_cost(off, data.len() as u64);
        self.reserve(cost)?;
        {
            let mut z = self.zv()?;
            z.write(off, data)
                .map_err(|e| errno_of(&format!("write volume at {off}"), &e))?;
        }
        self.changed();
        self.log(crate::Itx::Write {
            obj: ZVOL_OBJ,
            off,
            len: data.len() as u64,
        });
        self.dirty_bytes += cost;
        if self.dirty_bytes >= self.opts.txg_bytes {
            self.sync_behind()
                .map_err(|e| errno_of("sync (dirty data limit)", &e))?;
        }
        if self.opts.sync == crate::SyncMode::Always {
            self.sync_errno("sync=always")?;
        }
        Ok(data.len() as u32)
    }

    /// The bytes a write adds to the open txg (`ObjsetTx::dirty_cost`).
    fn vol_dirty_cost(&mut self, off: u64, len: u64) -> u64 {
        let bs = self.vol.map(|v| v.blocksize).unwrap_or(0);
        match self.writer.fs_tx(self.ds_obj) {
            Ok(tx) => tx.dirty_cost(ZVOL_OBJ, bs, off, len),
            Err(_) => len,
        }
    }

    pub fn vol_fallocate(&mut self, ino: u64, offset: i64, length: i64, mode: i32) -> Res<()> {
        self.vol_check_ino(ino)?;
        self.writable()?;
        let vsize = self.vol.map(|v| v.size).ok_or(EINVAL)?;
        if offset < 0 || length <= 0 {
            return Err(EINVAL);
        }
        let (off, len) = (offset as u64, length as u64);
        let end = off.checked_add(len).ok_or(libc::EFBIG)?;
        let zeroing = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        if mode
            & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE)
            != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        if end > vsize {
            // The size is the volume's: nothing may extend it.
            return if zeroing || mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                Err(libc::EFBIG)
            } else {
                Ok(())
            };
        }
        if !zeroing {
            return Ok(());
        }
        {
            let mut z = self.zv()?;
            z.discard(off, len)
                .map_err(|e| errno_of(&format!("discard volume at {off}"), &e))?;
        }
        self.changed();
        // As OpenZFS's `zvol_log_truncate`: a discard is a TX_TRUNCATE.
        self.log(crate::Itx::Rec(
            Box::new(ozfs_format::zil::Record::Truncate(
                ozfs_format::zil::LrTruncate {
                    foid: ZVOL_OBJ,
                    offset: off,
                    length: len,
                },
            )),
            ozfs_format::zil::tx::TRUNCATE,
        ));
        Ok(())
    }

    /// The block layer's FLUSH (an NBD client's): every answered write on
    /// stable storage when it returns — the volume's intent log committed
    /// and waited for (a txg commit where the log is off). The FUSE fsync
    /// of the loop device answers the same way without waiting here
    /// (`State::fsync_reply`).
    pub fn vol_fsync(&mut self) -> Res<()> {
        if self.opts.readonly || self.closed || self.opts.sync == crate::SyncMode::Disabled {
            return Ok(());
        }
        match self.log_commit()? {
            None => Ok(()),
            Some(c) => {
                let (tx, rx) = std::sync::mpsc::channel();
                let pool = self.writer.pool.clone();
                let done: ozfs_spa::zilio::Completion = Box::new(move |r| {
                    let _ = tx.send(r);
                });
                if let Some(done) = c.submit(&pool, done) {
                    // The commit needs a txg first (the log's first block).
                    let r = self.sync();
                    done(r);
                }
                match rx.recv() {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(errno_of("flush volume (intent log)", &e)),
                    Err(_) => Err(libc::EIO),
                }
            }
        }
    }

    pub(crate) fn vol_setattr(&mut self, ino: u64, size: Option<u64>) -> Res<FileAttr> {
        self.vol_check_ino(ino)?;
        if let Some(s) = size {
            if Some(s) != self.vol.map(|v| v.size) {
                return Err(EINVAL);
            }
        }
        self.vol_attr()
    }

    /// A time for the volume file (its dataset's creation).
    pub(crate) fn vol_times(creation: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(creation)
    }
}
