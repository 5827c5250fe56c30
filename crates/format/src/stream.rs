//! The ZFS send stream: `zfs send` writes it, `zfs receive` replays it.
//!
//! A stream is a sequence of 312-byte replay records, each a 4-byte type, a
//! 4-byte payload length and a union of per-type fields, some followed by a
//! payload: an `OBJECT` record by its bonus buffer (padded to 8 bytes), a
//! `WRITE` by the block's logical contents, a `SPILL` by the spill block.
//! It opens with `BEGIN` (magic 0x2F5BACBAC, version info, creation time,
//! objset type, flags, the guids of the snapshot sent and of the one it is
//! relative to — 0 for a full stream — and the snapshot's name) and closes
//! with `END`, which carries the Fletcher-4 checksum of every byte before
//! it (native byte order, accumulated word by word). The stream is written
//! in the sender's byte order; a receiver knows a foreign one by the
//! byte-swapped magic.
//!
//! Record layouts (byte offsets in the record; all integers little endian
//! here, swapped when the magic says so):
//! - BEGIN (0): 8 magic, 16 versioninfo (low 2 bits: 1 substream, 2
//!   compound; bits 2..31: feature flags), 24 creation time, 32 objset type
//!   (u32), 36 flags (u32), 40 toguid, 48 fromguid, 56 name (256 bytes).
//! - OBJECT (1): 8 object, 16 type (u32), 20 bonus type (u32), 24 block
//!   size (u32), 28 bonus length (u32), 32 checksum, 33 compression, 34 dnode
//!   slots, 35 flags, 36 raw bonus length (u32), 40 toguid.
//! - FREEOBJECTS (2): 8 first object, 16 count, 24 toguid.
//! - WRITE (3): 8 object, 16 type (u32), 24 offset, 32 length, 40 toguid,
//!   48 checksum type, 49 checksum flags, 50 compression, 56 dedup key
//!   (checksum words and properties), 96 compressed size. When the
//!   compression is not 0 (`zfs send -c`, raw) the payload is the block as
//!   stored, `compressed size` bytes; else its logical bytes.
//! - FREE (4): 8 object, 16 offset, 24 length (u64::MAX: to the end), 32 toguid.
//! - END (5): 8 checksum (4 words), 40 toguid.
//! - WRITE_BYREF (6), SPILL (7: 8 object, 16 length, 24 toguid).
//! - WRITE_EMBEDDED (8: `zfs send -e`): 8 object, 16 offset, 24 logical
//!   length, 32 toguid, 40 compression, 41 embedded type, 48 uncompressed
//!   size (u32), 52 compressed size (u32, at most 112); the compressed bytes
//!   follow, padded to 8.
//! - OBJECT_RANGE (9): raw streams' encryption parameters of a dnode block.
//!
//! Parsing never trusts a field: lengths are bounded before anything is
//! allocated, and the receiver checks object numbers and offsets.

use crate::{Cksum, Error, Result};

pub const DMU_BACKUP_MAGIC: u64 = 0x2F5B_ACBAC;
/// Size of every replay record.
pub const RECORD_SIZE: usize = 312;
pub const DRR_BEGIN: u32 = 0;
pub const DRR_OBJECT: u32 = 1;
pub const DRR_FREEOBJECTS: u32 = 2;
pub const DRR_WRITE: u32 = 3;
pub const DRR_FREE: u32 = 4;
pub const DRR_END: u32 = 5;
pub const DRR_WRITE_BYREF: u32 = 6;
pub const DRR_SPILL: u32 = 7;
pub const DRR_WRITE_EMBEDDED: u32 = 8;
pub const DRR_OBJECT_RANGE: u32 = 9;
/// BEGIN feature flags (`versioninfo >> 2`).
/// Deduplicated stream (WRITE_BYREF records).
pub const FEATURE_DEDUP: u64 = 1 << 0;
pub const FEATURE_DEDUPPROPS: u64 = 1 << 1;
/// The stream may carry SPILL records (a file system with system
/// attributes, ZPL 5).
pub const FEATURE_SA_SPILL: u64 = 1 << 2;
/// WRITE_EMBEDDED records (`zfs send -e`).
pub const FEATURE_EMBED_DATA: u64 = 1 << 16;
/// Blocks (embedded or `-c` compressed) may be lz4.
pub const FEATURE_LZ4: u64 = 1 << 17;
/// Blocks larger than 128 KiB (`zfs send -L`).
pub const FEATURE_LARGE_BLOCKS: u64 = 1 << 19;
pub const FEATURE_RESUMING: u64 = 1 << 20;
pub const FEATURE_REDACTED: u64 = 1 << 21;
/// WRITE payloads as they are stored, compressed (`zfs send -c`).
pub const FEATURE_COMPRESSED: u64 = 1 << 22;
/// Dnodes of more than one 512-byte slot.
pub const FEATURE_LARGE_DNODE: u64 = 1 << 23;
/// Encrypted blocks sent as stored (`zfs send -w`).
pub const FEATURE_RAW: u64 = 1 << 24;
/// Blocks may be zstd.
pub const FEATURE_ZSTD: u64 = 1 << 25;
pub const FEATURE_HOLDS: u64 = 1 << 26;
pub const FEATURE_SWITCH_TO_LARGE_BLOCKS: u64 = 1 << 27;
pub const FEATURE_LONGNAME: u64 = 1 << 28;
pub const FEATURE_LARGE_MICROZAP: u64 = 1 << 29;

/// versioninfo header types.
pub const DMU_SUBSTREAM: u64 = 1;
pub const DMU_COMPOUNDSTREAM: u64 = 2;
/// BEGIN flags.
pub const DRR_FLAG_CLONE: u32 = 1;
pub const DRR_FLAG_CI_DATA: u32 = 2;
/// FREE records may follow the last block of an object.
pub const DRR_FLAG_FREERECORDS: u32 = 4;
/// OBJECT records say whether the object has a spill block
/// ([`DRR_OBJECT_SPILL`]): one they do not list loses its spill block.
pub const DRR_FLAG_SPILL_BLOCK: u32 = 8;
/// OBJECT record flag: the object has a spill block.
pub const DRR_OBJECT_SPILL: u8 = 4;
/// WRITE record flag: the checksum in its key can deduplicate.
pub const DRR_CHECKSUM_DEDUP: u8 = 1;
/// Raw record flag (OBJECT, WRITE, SPILL, OBJECT_RANGE): the block was
/// written in the other byte order than the host's.
pub const DRR_RAW_BYTESWAP: u8 = 2;
/// SPILL flag: the spill block did not change (an incremental stream).
pub const DRR_SPILL_UNMODIFIED: u8 = 4;
/// Objset type of a file system.
pub const DMU_OST_ZFS: u32 = 2;
/// `drr_type` of a volume's stream.
pub const DMU_OST_ZVOL: u32 = 3;
/// Largest block a stream may carry (16 MiB, OpenZFS's maximum).
pub const MAX_BLOCK: u64 = 16 << 20;
/// Largest BEGIN payload (a replication stream's nvlist).
pub const MAX_BEGIN_PAYLOAD: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    pub versioninfo: u64,
    pub creation_time: u64,
    pub objset_type: u32,
    pub flags: u32,
    pub toguid: u64,
    pub fromguid: u64,
    pub toname: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRec {
    pub object: u64,
    pub object_type: u32,
    pub bonustype: u32,
    pub blksz: u32,
    pub bonuslen: u32,
    pub checksum: u8,
    pub compress: u8,
    pub dn_slots: u8,
    pub flags: u8,
    pub raw_bonuslen: u32,
    pub toguid: u64,
    /// Raw streams only (else 0): the dnode's shape, which the receiver
    /// needs to rebuild it exactly (its dnode block is authenticated).
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub maxblkid: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRec {
    pub object: u64,
    pub object_type: u32,
    pub offset: u64,
    pub length: u64,
    pub toguid: u64,
    pub checksum_type: u8,
    pub checksum_flags: u8,
    pub compression: u8,
    pub key_cksum: [u64; 4],
    pub key_prop: u64,
    pub compressed_size: u64,
    /// Raw streams only (else zeros): the block's encryption parameters.
    pub crypt: RawCrypt,
}

/// The encryption parameters a raw stream carries with a protected block
/// (WRITE, SPILL) or dnode block (OBJECT_RANGE): salt and IV (zeros for a
/// block that is only authenticated) and MAC, in the bytes the writer
/// stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawCrypt {
    pub salt: [u8; 8],
    pub iv: [u8; 12],
    pub mac: [u8; 16],
}

impl RawCrypt {
    fn put(&self, b: &mut [u8; RECORD_SIZE], at: usize) {
        b[at..at + 8].copy_from_slice(&self.salt);
        b[at + 8..at + 20].copy_from_slice(&self.iv);
        b[at + 20..at + 36].copy_from_slice(&self.mac);
    }

    fn get(b: &[u8; RECORD_SIZE], at: usize) -> RawCrypt {
        let mut c = RawCrypt::default();
        c.salt.copy_from_slice(&b[at..at + 8]);
        c.iv.copy_from_slice(&b[at + 8..at + 20]);
        c.mac.copy_from_slice(&b[at + 20..at + 36]);
        c
    }
}

/// A SPILL record: an object's spill block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillRec {
    pub object: u64,
    /// Logical length.
    pub length: u64,
    pub toguid: u64,
    /// `DRR_RAW_BYTESWAP` (raw), `DRR_SPILL_UNMODIFIED`.
    pub flags: u8,
    /// Raw streams only (else 0): the block as stored.
    pub compression: u8,
    pub compressed_size: u64,
    pub crypt: RawCrypt,
}

/// An OBJECT_RANGE record (raw streams): the encryption parameters of the
/// dnode block holding objects `first..first + numslots`, which the
/// OBJECT records after it belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRangeRec {
    pub first: u64,
    pub numslots: u64,
    pub toguid: u64,
    pub flags: u8,
    pub crypt: RawCrypt,
}

impl WriteRec {
    /// The payload is the block as stored (`zfs send -c`, or raw):
    /// `compressed_size` bytes of `compression`.
    pub fn is_compressed(&self) -> bool {
        self.compression != 0
    }
}

/// A WRITE_EMBEDDED record: a block small enough to live in its block
/// pointer (`zfs send -e`), sent as its compressed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteEmbeddedRec {
    pub object: u64,
    pub offset: u64,
    /// Logical length (the object's block size).
    pub length: u64,
    pub toguid: u64,
    pub compression: u8,
    /// Embedded payload type (0: data).
    pub etype: u8,
    /// Uncompressed size of the payload.
    pub lsize: u32,
    /// Compressed size of the payload (at most 112 bytes).
    pub psize: u32,
}

/// One replay record (without its payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Begin(Begin),
    Object(ObjectRec),
    FreeObjects {
        first: u64,
        count: u64,
        toguid: u64,
    },
    Write(WriteRec),
    Free {
        object: u64,
        offset: u64,
        length: u64,
        toguid: u64,
    },
    End {
        cksum: Cksum,
        toguid: u64,
    },
    Spill(SpillRec),
    WriteEmbedded(WriteEmbeddedRec),
    ObjectRange(ObjectRangeRec),
    /// WRITE_BYREF and newer kinds: recognized, not replayed.
    Other {
        kind: u32,
    },
}

struct Rd<'a> {
    b: &'a [u8],
    swap: bool,
}

impl Rd<'_> {
    fn u64(&self, o: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b[o..o + 8]);
        let v = u64::from_le_bytes(a);
        if self.swap {
            v.swap_bytes()
        } else {
            v
        }
    }
    fn u32(&self, o: usize) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b[o..o + 4]);
        let v = u32::from_le_bytes(a);
        if self.swap {
            v.swap_bytes()
        } else {
            v
        }
    }
}

/// Whether a BEGIN record `b` is in the other byte order (by its magic);
/// an error if it is no BEGIN record at all.
pub fn begin_byteswapped(b: &[u8; RECORD_SIZE]) -> Result<bool> {
    let m = u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8]));
    if m == DMU_BACKUP_MAGIC {
        Ok(false)
    } else if m.swap_bytes() == DMU_BACKUP_MAGIC {
        Ok(true)
    } else {
        Err(Error::corrupt(
            "send stream",
            format!("bad magic {m:#x} in the first record (not a ZFS send stream)"),
        ))
    }
}

impl Record {
    /// Decode a record; the second value is the length of the payload that follows.
    pub fn parse(b: &[u8; RECORD_SIZE], swap: bool) -> Result<(Record, u64)> {
        let r = Rd { b, swap };
        let kind = r.u32(0);
        let payloadlen = r.u32(4) as u64;
        let bad = |m: String| Error::corrupt("send stream record", m);
        Ok(match kind {
            DRR_BEGIN => {
                if r.u64(8) != DMU_BACKUP_MAGIC {
                    return Err(bad(format!("BEGIN with bad magic {:#x}", r.u64(8))));
                }
                let name = &b[56..312];
                let end = name
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or_else(|| bad("BEGIN name is not NUL-terminated".into()))?;
                let toname = std::str::from_utf8(&name[..end])
                    .map_err(|_| bad("BEGIN name is not UTF-8".into()))?
                    .to_string();
                if payloadlen > MAX_BEGIN_PAYLOAD {
                    return Err(bad(format!("BEGIN payload of {payloadlen} bytes")));
                }
                (
                    Record::Begin(Begin {
                        versioninfo: r.u64(16),
                        creation_time: r.u64(24),
                        objset_type: r.u32(32),
                        flags: r.u32(36),
                        toguid: r.u64(40),
                        fromguid: r.u64(48),
                        toname,
                    }),
                    payloadlen,
                )
            }
            DRR_OBJECT => {
                let o = ObjectRec {
                    object: r.u64(8),
                    object_type: r.u32(16),
                    bonustype: r.u32(20),
                    blksz: r.u32(24),
                    bonuslen: r.u32(28),
                    checksum: b[32],
                    compress: b[33],
                    dn_slots: b[34],
                    flags: b[35],
                    raw_bonuslen: r.u32(36),
                    toguid: r.u64(40),
                    indblkshift: b[48],
                    nlevels: b[49],
                    nblkptr: b[50],
                    maxblkid: r.u64(56),
                };
                if o.bonuslen > 320 * 64 || o.raw_bonuslen > 320 * 64 {
                    return Err(bad(format!(
                        "OBJECT {} with a bonus of {} bytes ({} raw)",
                        o.object, o.bonuslen, o.raw_bonuslen
                    )));
                }
                // A raw object's payload is its whole bonus area.
                let pl = if o.raw_bonuslen != 0 {
                    o.raw_bonuslen as u64
                } else {
                    (o.bonuslen as u64).div_ceil(8) * 8
                };
                (Record::Object(o), pl)
            }
            DRR_FREEOBJECTS => (
                Record::FreeObjects {
                    first: r.u64(8),
                    count: r.u64(16),
                    toguid: r.u64(24),
                },
                0,
            ),
            DRR_WRITE => {
                let w = WriteRec {
                    object: r.u64(8),
                    object_type: r.u32(16),
                    offset: r.u64(24),
                    length: r.u64(32),
                    toguid: r.u64(40),
                    checksum_type: b[48],
                    checksum_flags: b[49],
                    compression: b[50],
                    key_cksum: [r.u64(56), r.u64(64), r.u64(72), r.u64(80)],
                    key_prop: r.u64(88),
                    compressed_size: r.u64(96),
                    crypt: RawCrypt::get(b, 104),
                };
                if w.length == 0 || w.length > MAX_BLOCK {
                    return Err(bad(format!(
                        "WRITE to object {} of {} bytes",
                        w.object, w.length
                    )));
                }
                // A compressed (or raw) payload is the block as stored:
                // never empty, never larger than the block.
                let pl = if w.is_compressed() {
                    if w.compressed_size == 0 || w.compressed_size > w.length {
                        return Err(bad(format!(
                            "WRITE to object {} of {} bytes stored in {}",
                            w.object, w.length, w.compressed_size
                        )));
                    }
                    w.compressed_size
                } else {
                    w.length
                };
                (Record::Write(w), pl)
            }
            DRR_FREE => (
                Record::Free {
                    object: r.u64(8),
                    offset: r.u64(16),
                    length: r.u64(24),
                    toguid: r.u64(32),
                },
                0,
            ),
            DRR_END => (
                Record::End {
                    cksum: Cksum([r.u64(8), r.u64(16), r.u64(24), r.u64(32)]),
                    toguid: r.u64(40),
                },
                0,
            ),
            DRR_SPILL => {
                let sp = SpillRec {
                    object: r.u64(8),
                    length: r.u64(16),
                    toguid: r.u64(24),
                    flags: b[32],
                    compression: b[33],
                    compressed_size: r.u64(40),
                    crypt: RawCrypt::get(b, 48),
                };
                if sp.length == 0 || sp.length > MAX_BLOCK || sp.compressed_size > sp.length {
                    return Err(bad(format!(
                        "SPILL of {} bytes ({} stored)",
                        sp.length, sp.compressed_size
                    )));
                }
                let pl = if sp.compressed_size != 0 {
                    sp.compressed_size
                } else {
                    sp.length
                };
                (Record::Spill(sp), pl)
            }
            DRR_WRITE_BYREF => (Record::Other { kind }, 0),
            DRR_WRITE_EMBEDDED => {
                let e = WriteEmbeddedRec {
                    object: r.u64(8),
                    offset: r.u64(16),
                    length: r.u64(24),
                    toguid: r.u64(32),
                    compression: b[40],
                    etype: b[41],
                    lsize: r.u32(48),
                    psize: r.u32(52),
                };
                // A block pointer holds at most 112 bytes of payload.
                if e.psize == 0
                    || e.psize > 112
                    || e.lsize == 0
                    || e.lsize as u64 > MAX_BLOCK
                    || e.length == 0
                    || e.length > MAX_BLOCK
                {
                    return Err(bad(format!(
                        "WRITE_EMBEDDED to object {} of {} bytes ({} stored, {} logical)",
                        e.object, e.length, e.psize, e.lsize
                    )));
                }
                let pl = (e.psize as u64).div_ceil(8) * 8;
                (Record::WriteEmbedded(e), pl)
            }
            DRR_OBJECT_RANGE => (
                Record::ObjectRange(ObjectRangeRec {
                    first: r.u64(8),
                    numslots: r.u64(16),
                    toguid: r.u64(24),
                    crypt: RawCrypt::get(b, 32),
                    flags: b[68],
                }),
                0,
            ),
            other => return Err(bad(format!("unknown record type {other}"))),
        })
    }

    /// Encode this record (little endian). The header's payload length is
    /// 0, as OpenZFS writes it for every record but BEGIN (a receiver
    /// knows each payload's length from the record's own fields; BEGIN's
    /// is set by the writer of its payload).
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        let p64 = |b: &mut [u8; RECORD_SIZE], o: usize, v: u64| {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes())
        };
        let p32 = |b: &mut [u8; RECORD_SIZE], o: usize, v: u32| {
            b[o..o + 4].copy_from_slice(&v.to_le_bytes())
        };
        match self {
            Record::Begin(g) => {
                p32(&mut b, 0, DRR_BEGIN);
                p64(&mut b, 8, DMU_BACKUP_MAGIC);
                p64(&mut b, 16, g.versioninfo);
                p64(&mut b, 24, g.creation_time);
                p32(&mut b, 32, g.objset_type);
                p32(&mut b, 36, g.flags);
                p64(&mut b, 40, g.toguid);
                p64(&mut b, 48, g.fromguid);
                let n = g.toname.as_bytes();
                let n = &n[..n.len().min(255)];
                b[56..56 + n.len()].copy_from_slice(n);
            }
            Record::Object(o) => {
                p32(&mut b, 0, DRR_OBJECT);
                p64(&mut b, 8, o.object);
                p32(&mut b, 16, o.object_type);
                p32(&mut b, 20, o.bonustype);
                p32(&mut b, 24, o.blksz);
                p32(&mut b, 28, o.bonuslen);
                b[32] = o.checksum;
                b[33] = o.compress;
                b[34] = o.dn_slots;
                b[35] = o.flags;
                p32(&mut b, 36, o.raw_bonuslen);
                p64(&mut b, 40, o.toguid);
                b[48] = o.indblkshift;
                b[49] = o.nlevels;
                b[50] = o.nblkptr;
                p64(&mut b, 56, o.maxblkid);
            }
            Record::FreeObjects {
                first,
                count,
                toguid,
            } => {
                p32(&mut b, 0, DRR_FREEOBJECTS);
                p64(&mut b, 8, *first);
                p64(&mut b, 16, *count);
                p64(&mut b, 24, *toguid);
            }
            Record::Write(w) => {
                p32(&mut b, 0, DRR_WRITE);
                p64(&mut b, 8, w.object);
                p32(&mut b, 16, w.object_type);
                p64(&mut b, 24, w.offset);
                p64(&mut b, 32, w.length);
                p64(&mut b, 40, w.toguid);
                b[48] = w.checksum_type;
                b[49] = w.checksum_flags;
                b[50] = w.compression;
                for (i, k) in w.key_cksum.iter().enumerate() {
                    p64(&mut b, 56 + 8 * i, *k);
                }
                p64(&mut b, 88, w.key_prop);
                p64(&mut b, 96, w.compressed_size);
                w.crypt.put(&mut b, 104);
            }
            Record::Free {
                object,
                offset,
                length,
                toguid,
            } => {
                p32(&mut b, 0, DRR_FREE);
                p64(&mut b, 8, *object);
                p64(&mut b, 16, *offset);
                p64(&mut b, 24, *length);
                p64(&mut b, 32, *toguid);
            }
            Record::End { cksum, toguid } => {
                p32(&mut b, 0, DRR_END);
                for (i, w) in cksum.0.iter().enumerate() {
                    p64(&mut b, 8 + 8 * i, *w);
                }
                p64(&mut b, 40, *toguid);
            }
            Record::Spill(sp) => {
                p32(&mut b, 0, DRR_SPILL);
                p64(&mut b, 8, sp.object);
                p64(&mut b, 16, sp.length);
                p64(&mut b, 24, sp.toguid);
                b[32] = sp.flags;
                b[33] = sp.compression;
                p64(&mut b, 40, sp.compressed_size);
                sp.crypt.put(&mut b, 48);
            }
            Record::ObjectRange(r) => {
                p32(&mut b, 0, DRR_OBJECT_RANGE);
                p64(&mut b, 8, r.first);
                p64(&mut b, 16, r.numslots);
                p64(&mut b, 24, r.toguid);
                r.crypt.put(&mut b, 32);
                b[68] = r.flags;
            }
            Record::WriteEmbedded(e) => {
                p32(&mut b, 0, DRR_WRITE_EMBEDDED);
                p64(&mut b, 8, e.object);
                p64(&mut b, 16, e.offset);
                p64(&mut b, 24, e.length);
                p64(&mut b, 32, e.toguid);
                b[40] = e.compression;
                b[41] = e.etype;
                p32(&mut b, 48, e.lsize);
                p32(&mut b, 52, e.psize);
            }
            Record::Other { kind } => p32(&mut b, 0, *kind),
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let recs = vec![
            Record::Begin(Begin {
                versioninfo: 1,
                creation_time: 7,
                objset_type: DMU_OST_ZFS,
                flags: 0,
                toguid: 0x1234,
                fromguid: 0,
                toname: "p/a@s".into(),
            }),
            Record::Object(ObjectRec {
                object: 5,
                object_type: 19,
                bonustype: 17,
                blksz: 131072,
                bonuslen: 264,
                checksum: 0,
                compress: 0,
                dn_slots: 0,
                flags: 0,
                raw_bonuslen: 0,
                toguid: 0x1234,
                indblkshift: 0,
                nlevels: 0,
                nblkptr: 0,
                maxblkid: 0,
            }),
            Record::Free {
                object: 5,
                offset: 0,
                length: u64::MAX,
                toguid: 0x1234,
            },
            Record::WriteEmbedded(WriteEmbeddedRec {
                object: 7,
                offset: 131072,
                length: 131072,
                toguid: 0x1234,
                compression: 15,
                etype: 0,
                lsize: 131072,
                psize: 61,
            }),
            Record::End {
                cksum: Cksum([1, 2, 3, 4]),
                toguid: 0x1234,
            },
        ];
        for r in recs {
            let b = r.encode();
            let (back, _) = Record::parse(&b, false).unwrap();
            assert_eq!(back, r);
        }
    }

    #[test]
    fn hostile_lengths_refused() {
        let mut w = Record::Write(WriteRec {
            object: 1,
            object_type: 19,
            offset: 0,
            length: 512,
            toguid: 1,
            checksum_type: 7,
            checksum_flags: 0,
            compression: 0,
            key_cksum: [0; 4],
            key_prop: 0,
            compressed_size: 0,
            crypt: RawCrypt::default(),
        })
        .encode();
        w[32..40].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(Record::parse(&w, false).is_err());
        let mut b = [0u8; RECORD_SIZE];
        b[0] = 99;
        assert!(Record::parse(&b, false).is_err());
        let b = [0u8; RECORD_SIZE];
        assert!(begin_byteswapped(&b).is_err());
    }
}
