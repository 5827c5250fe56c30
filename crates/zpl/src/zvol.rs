//! Volumes (ZVOLs): a dataset whose objset holds one byte array instead of
//! a POSIX tree — what OpenZFS gives virtual machines, iSCSI targets and
//! other file systems as their disks.
//!
//! # Theory
//!
//! A volume's objset (type `DMU_OST_ZVOL`, 3) holds two objects, always at
//! the same numbers: object 1 (`DMU_OT_ZVOL`) is the data, a plain DMU
//! object whose data block size is the volume's `volblocksize` (fixed at
//! creation); object 2 (`DMU_OT_ZVOL_PROP`) is a ZAP whose `size` entry is
//! the volume's `volsize`. Nothing else: no znodes, no attributes, no
//! names. Reading past what was written reads holes (zeros); a discard
//! (TRIM, `fallocate(PUNCH_HOLE)`) frees whole blocks and zeroes the
//! partial ones at its edges, as OpenZFS's `zvol_discard` frees the
//! aligned part (ozfs also zeroes the edges, so that a discarded range
//! always reads zeros, which `WRITE_ZEROES` needs).
//!
//! [`ZvolTx`] is the volume's side of an open txg, over the objset's
//! [`ObjsetTx`]: every change lands in the txg and is written by the
//! pool's next sync, as a file system's are.
//!
//! # Invariants
//!
//! * Size and block size are checked when the volume is opened
//!   (`ozfs_dmu::objset::check_zvol`: a `zvol` object, a power-of-two block
//!   size from 512 bytes to 16 MiB, a size from 1 byte to `i64::MAX`); a
//!   hostile ZAP or dnode gives an error naming the volume, never a panic
//!   or a read of the wrong object. ozfs makes and resizes volumes only to
//!   multiples of the block size, as OpenZFS does.
//! * No I/O reaches past `size`: a request that would is refused whole
//!   (EINVAL from the front ends), never clipped in silence.
//! * Shrinking frees every block past the new size before the size
//!   changes; growing only changes the size (the new space is holes).

use ozfs_dmu::tx::ObjsetTx;
use ozfs_dmu::zap_tx;
use ozfs_format::{Error, Result};

/// Object 1: the volume's data.
pub const ZVOL_OBJ: u64 = 1;
/// Object 2: the `zvol` ZAP (`size`).
pub const ZVOL_ZAP_OBJ: u64 = 2;

/// A volume's size and block size as its objset says, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZvolInfo {
    pub size: u64,
    pub blocksize: u64,
}

/// Read and check a volume's size and block size from its objset.
pub fn info(tx: &ObjsetTx) -> Result<ZvolInfo> {
    let dn = tx.dnode(ZVOL_OBJ)?;
    let size = zap_tx::lookup_u64(tx, ZVOL_ZAP_OBJ, "size")
        .map_err(|e| Error::corrupt("volume", format!("no size in its ZAP: {e}")))?;
    let (size, blocksize) =
        ozfs_dmu::objset::check_zvol(dn.phys.object_type, dn.phys.datablksz(), size)?;
    Ok(ZvolInfo { size, blocksize })
}

/// A volume's changes in an open txg.
pub struct ZvolTx<'a> {
    pub tx: &'a mut ObjsetTx,
    pub info: ZvolInfo,
}

impl<'a> ZvolTx<'a> {
    /// The volume whose objset `tx` changes.
    pub fn open(tx: &'a mut ObjsetTx) -> Result<ZvolTx<'a>> {
        let info = info(tx)?;
        Ok(ZvolTx { tx, info })
    }

    fn check(&self, off: u64, len: u64) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.info.size => Ok(()),
            _ => Err(Error::Invalid(format!(
                "volume I/O of {len} bytes at {off} reaches past its size {}",
                self.info.size
            ))),
        }
    }

    /// `len` bytes at `off` (holes read as zeros).
    pub fn read(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        self.check(off, len as u64)?;
        self.tx.read(ZVOL_OBJ, off, len)
    }

    /// Write `data` at `off`.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        self.check(off, data.len() as u64)?;
        self.tx.write(ZVOL_OBJ, off, data)
    }

    /// Make `[off, off + len)` read as zeros: whole blocks freed, partial
    /// edge blocks zeroed in place (only where they hold data).
    pub fn discard(&mut self, off: u64, len: u64) -> Result<()> {
        self.check(off, len)?;
        let bs = self.info.blocksize;
        let end = off + len;
        if len == 0 {
            return Ok(());
        }
        for edge in [off, end] {
            if !edge.is_multiple_of(bs) {
                self.tx.check_modifiable(ZVOL_OBJ, edge / bs)?;
            }
        }
        let mut pos = off;
        while pos < end {
            let Some(blkid) = self
                .tx
                .next_block(ZVOL_OBJ, pos / bs, (end - 1) / bs, true)?
            else {
                break;
            };
            let bstart = blkid * bs;
            let from = (pos.max(bstart) - bstart) as usize;
            let to = (end.min(bstart + bs) - bstart) as usize;
            if from == 0 && to == bs as usize {
                self.tx.punch_block(ZVOL_OBJ, blkid);
            } else if from < to && self.tx.read_block(ZVOL_OBJ, blkid)?.is_some() {
                self.tx.modify_block(ZVOL_OBJ, blkid, &mut |b| {
                    let to = to.min(b.len());
                    if from < to {
                        b[from..to].fill(0);
                    }
                })?;
            }
            pos = bstart + bs;
        }
        Ok(())
    }

    /// `zfs set volsize=`: a new size, a positive multiple of the block
    /// size; shrinking frees what lies past it first.
    pub fn set_size(&mut self, size: u64) -> Result<()> {
        let bs = self.info.blocksize;
        if size == 0 || !size.is_multiple_of(bs) || size > i64::MAX as u64 {
            return Err(Error::Invalid(format!(
                "volume size must be a multiple of volume block size ({bs})"
            )));
        }
        if size < self.info.size {
            self.tx.punch_from(ZVOL_OBJ, size / bs)?;
        }
        zap_tx::update(self.tx, ZVOL_ZAP_OBJ, "size", 8, &[size])?;
        self.info.size = size;
        Ok(())
    }
}

/// Replay the intent log a volume's last writer left (OpenZFS's
/// `zvol_replay_write` / `zvol_replay_truncate`), in OpenZFS's order:
/// claim, replay the records of txgs not committed, free the chain. A
/// volume's log holds writes of object 1 (copied, or indirect: the block
/// the pointer names) and truncates (discards); any other record is an
/// error naming it. Returns the records applied (None: no log).
pub fn replay_if_needed(w: &mut ozfs_dsl::sync::PoolWriter, ds_obj: u64) -> Result<Option<u64>> {
    use ozfs_format::zil::{tx, Record};
    crate::zil::replay_framed(w, ds_obj, |w, records, h| {
        let pool = w.pool.clone();
        let otx = w.fs_tx(ds_obj)?;
        let mut z = ZvolTx::open(otx)?;
        let mut applied = 0;
        for r in records {
            if r.common.txg < h.claim_txg || r.common.seq <= h.replay_seq {
                continue;
            }
            match &r.record {
                Record::Write(wr) if r.common.txtype & 0xff == tx::WRITE => {
                    if wr.foid != ZVOL_OBJ {
                        return Err(Error::corrupt(
                            "volume intent log",
                            format!("a write of object {}", wr.foid),
                        ));
                    }
                    let (off, data) = if !wr.data.is_empty() {
                        (wr.offset, wr.data.clone())
                    } else if wr.blkptr.is_hole() {
                        (wr.offset, vec![0u8; wr.length.min(MAX_REPLAY) as usize])
                    } else {
                        let d = pool.read_bp(&wr.blkptr)?;
                        let lsize = wr.blkptr.lsize().max(1);
                        if wr.length < lsize {
                            (wr.offset - wr.offset % lsize, d)
                        } else {
                            (
                                wr.offset,
                                d.get(..wr.length as usize).unwrap_or(&d).to_vec(),
                            )
                        }
                    };
                    let len = (data.len() as u64).min(z.info.size.saturating_sub(off));
                    if len > 0 {
                        z.write(off, &data[..len as usize])?;
                    }
                }
                Record::Truncate(t) => {
                    let end = t.offset.saturating_add(t.length).min(z.info.size);
                    if t.offset < end {
                        z.discard(t.offset, end - t.offset)?;
                    }
                }
                other => {
                    return Err(Error::unsupported(
                        "volume intent log",
                        format!(
                            "record type {} ({:?}) in a volume's log",
                            r.common.txtype,
                            std::mem::discriminant(other)
                        ),
                    ))
                }
            }
            applied += 1;
        }
        Ok(applied)
    })
}

/// Largest hole-pointer write a replay expands to zeros.
const MAX_REPLAY: u64 = 16 << 20;
