//! The ZFS intent log (ZIL): its header, its chained log blocks and the
//! records they carry. The layouts are those of OpenZFS 2.3 (`zil.h`,
//! `zfs_log.c`), unchanged since.
//!
//! # Theory
//!
//! Every objset embeds a 192-byte `zil_header_t` (objset byte 512). Its
//! `zh_log` names the first log block of a singly linked chain; each log
//! block names the next one. A log block's checksum is *embedded*: the BP
//! that names a block carries, as its checksum words, a **verifier** —
//! two random chain GUIDs, the objset id and the block's sequence number
//! (`ZC_GUID_0`, `ZC_GUID_1`, `ZC_OBJSET`, `ZC_SEQ`) — and the block holds
//! a `zio_eck_t` (magic + four checksum words). To verify, the eck's
//! checksum words are replaced by the verifier (in the block's byte
//! order), the block is hashed, and the hash must equal the stored words.
//! A block that was allocated but never written (the normal end of the
//! chain: the writer allocates block N+1 before it writes block N) fails
//! this, and so does a stale block left over from an earlier chain.
//!
//! Two block formats exist, told apart by the BP's checksum function:
//!
//! * `zilog2` (9, every pool since version 26): a 184-byte `zil_chain_t`
//!   at the **start** — `zc_pad` (0..8), `zc_next_blk` (8..136),
//!   `zc_nused` (136..144), `zc_eck` (144..184: magic, then the checksum
//!   at 152..184). `zc_nused` counts the bytes in use *including* the
//!   chain, records fill `184..nused`. Only `roundup(nused, 4096)` bytes
//!   are written (and checksummed, fletcher4); the rest of the allocated
//!   block is garbage.
//! * `zilog` (5, pool version <= 25 and zfs-fuse): the same 184-byte
//!   structure (there called `zil_trailer_t`) at the **end** of the block;
//!   records fill `0..nused`; the whole block is checksummed with
//!   fletcher2.
//!
//! A block is accepted (as OpenZFS's `zio_checksum_error` plus
//! `zil_read_log_block` accept it) when the magic reads in either byte
//! order, `nused` fits, the checksum matches, and the next block's BP
//! carries this block's verifier with `ZC_SEQ + 1` (else the chain ends
//! here — OpenZFS zeroes the next BP when it could not allocate one, and
//! such a block is *not* replayed; its records were committed by a txg).
//!
//! Records are packed back to back, each starting with an `lr_t`
//! (`lrc_txtype`, `lrc_reclen`, `lrc_txg`, `lrc_seq`), `lrc_reclen` being
//! the whole record, padded to 8 bytes. The type-specific fixed part
//! follows, then variable data (names, copied write data, ACLs, ...). The
//! layouts are documented on each `Lr*` struct.
//!
//! # Byte order
//!
//! A log block is written in its writer's host order; a block whose magic
//! reads byteswapped has every 64-bit field of the chain and of every
//! record swapped (`lr_attr_t`'s 32-bit mask words swap as 32-bit words).
//! Names, copied write data, xattr values, scan stamps and ACE bytes are
//! byte strings and are *not* swapped. [`parse_records`] returns host-order
//! values; ACE bytes ([`LrAcl::acl`], [`LrCreateAcl::acl`]) and
//! [`Record::Unknown`] bodies are kept exactly as on disk, in the
//! writer's order. Encoders here write host order (what ozfs writes).
//!
//! # Invariants
//!
//! * Pure: no I/O. Hashing is the caller's (the codec crate depends on
//!   this one, so this crate takes fletcher as a closure).
//! * Nothing read from disk is trusted: every offset and count is checked
//!   against the record or block before it is used or allocated for, and
//!   a malformed structure is an [`Error`] naming the block or the
//!   record's offset and type — never a panic.
//! * `parse_records(encode_record(r)) == r` for every record this module
//!   produces (see the notes on each struct for the few combinations of
//!   fields that no writer produces and that therefore do not round-trip).

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::error::{Cksum, Error, Result};
use crate::label::ZEC_MAGIC;
use crate::types;

/// Size of `zil_header_t`.
pub const ZIL_HEADER_SIZE: usize = 192;
/// Size of `zil_chain_t` (and of the old `zil_trailer_t`).
pub const ZIL_CHAIN_SIZE: usize = 184;
/// Granule of a `zilog2` block's written (and checksummed) size.
pub const ZIL_MIN_BLKSZ: u64 = 4096;
/// `zh_flags`: the log was claimed and must be replayed.
pub const ZIL_REPLAY_NEEDED: u64 = 1;
/// `zh_flags`: `zh_claim_lr_seq` is meaningful (absent in old logs).
pub const ZIL_CLAIM_LR_SEQ_VALID: u64 = 2;
/// Indices of the verifier words in a log block's BP checksum.
pub const ZC_GUID_0: usize = 0;
pub const ZC_GUID_1: usize = 1;
pub const ZC_OBJSET: usize = 2;
pub const ZC_SEQ: usize = 3;

/// Offsets inside `zil_chain_t`.
const ZC_NEXT_BLK: usize = 8;
const ZC_NUSED: usize = 136;
const ZC_ECK_MAGIC: usize = 144;
const ZC_ECK_CKSUM: usize = 152;

/// Size of `lr_t`, the common record header.
pub const LR_SIZE: usize = 32;
/// Fixed part of `lr_create_t` (`_lr_create_t`).
pub const LR_CREATE_SIZE: usize = 104;
/// Fixed part of `lr_acl_create_t`.
pub const LR_ACL_CREATE_SIZE: usize = 144;
/// Fixed part of `lr_remove_t`.
pub const LR_REMOVE_SIZE: usize = 40;
/// Fixed part of `lr_link_t`.
pub const LR_LINK_SIZE: usize = 48;
/// Fixed part of `lr_rename_t`.
pub const LR_RENAME_SIZE: usize = 48;
/// Fixed part of `lr_rename_whiteout_t`.
pub const LR_RENAME_WHITEOUT_SIZE: usize = 112;
/// Size of `lr_write_t` (copied data follows it).
pub const LR_WRITE_SIZE: usize = 192;
/// Size of `lr_truncate_t`.
pub const LR_TRUNCATE_SIZE: usize = 56;
/// Fixed part of `lr_setattr_t`.
pub const LR_SETATTR_SIZE: usize = 112;
/// Fixed part of `lr_setsaxattr_t`.
pub const LR_SETSAXATTR_SIZE: usize = 48;
/// Fixed part of `lr_acl_v0_t`.
pub const LR_ACL_V0_SIZE: usize = 48;
/// Fixed part of `lr_acl_t`.
pub const LR_ACL_SIZE: usize = 80;
/// Fixed part of `lr_clone_range_t` (the BPs follow it).
pub const LR_CLONE_RANGE_SIZE: usize = 72;
/// Size of an old-style `ace_t` (TX_ACL_V0 entries).
pub const ACE_V0_SIZE: usize = 12;
/// Size of the scan stamp in `lr_attr_end_t`.
pub const AV_SCANSTAMP_SZ: usize = 32;
/// `xva_mapsize` of every current writer (so `lr_attr_t` is 72 bytes).
pub const XVA_MAPSIZE: u32 = 3;
/// `lr_mask` bit of `TX_SETATTR` saying an `lr_attr_t` follows, as
/// OpenZFS on Linux writes it (`ATTR_XVATTR`).
pub const ATTR_XVATTR_LINUX: u64 = 1 << 31;
/// The same bit as FreeBSD and illumos write it (`AT_XVATTR`; on Linux
/// this value is `ATTR_TIMES_SET`).
pub const AT_XVATTR: u64 = 0x10000;
/// Largest uid/gid that is not a FUID (`MAXUID`).
pub const MAXUID: u64 = 0x7fff_ffff;

/// Intent-log transaction types (`lrc_txtype`, `TX_*`).
pub mod tx {
    /// Commit marker: never written to disk.
    pub const COMMIT: u64 = 0;
    pub const CREATE: u64 = 1;
    pub const MKDIR: u64 = 2;
    pub const MKXATTR: u64 = 3;
    pub const SYMLINK: u64 = 4;
    pub const REMOVE: u64 = 5;
    pub const RMDIR: u64 = 6;
    pub const LINK: u64 = 7;
    pub const RENAME: u64 = 8;
    pub const WRITE: u64 = 9;
    pub const TRUNCATE: u64 = 10;
    pub const SETATTR: u64 = 11;
    pub const ACL_V0: u64 = 12;
    pub const ACL: u64 = 13;
    pub const CREATE_ACL: u64 = 14;
    pub const CREATE_ATTR: u64 = 15;
    pub const CREATE_ACL_ATTR: u64 = 16;
    pub const MKDIR_ACL: u64 = 17;
    pub const MKDIR_ATTR: u64 = 18;
    pub const MKDIR_ACL_ATTR: u64 = 19;
    /// A write whose block was already being synced (`dmu_sync` EALREADY):
    /// replay only extends the file size.
    pub const WRITE2: u64 = 20;
    pub const SETSAXATTR: u64 = 21;
    pub const RENAME_EXCHANGE: u64 = 22;
    pub const RENAME_WHITEOUT: u64 = 23;
    pub const CLONE_RANGE: u64 = 24;
    /// One past the last known type.
    pub const MAX_TYPE: u64 = 25;
    /// Flag in `lrc_txtype`: the name lookup was case-insensitive.
    pub const CI: u64 = 1 << 63;

    /// Types that may be logged out of order (their object may be gone by
    /// replay time, which is then not an error); they all keep `lr_foid`
    /// at record offset 32. `CI` is ignored.
    pub fn is_ooo(t: u64) -> bool {
        matches!(
            t & !CI,
            WRITE | TRUNCATE | SETATTR | ACL_V0 | ACL | WRITE2 | SETSAXATTR | CLONE_RANGE
        )
    }

    /// The `TX_*` name of type `t` (`CI` ignored), `"TX_UNKNOWN"` if none.
    pub fn name(t: u64) -> &'static str {
        const NAMES: [&str; MAX_TYPE as usize] = [
            "TX_COMMIT",
            "TX_CREATE",
            "TX_MKDIR",
            "TX_MKXATTR",
            "TX_SYMLINK",
            "TX_REMOVE",
            "TX_RMDIR",
            "TX_LINK",
            "TX_RENAME",
            "TX_WRITE",
            "TX_TRUNCATE",
            "TX_SETATTR",
            "TX_ACL_V0",
            "TX_ACL",
            "TX_CREATE_ACL",
            "TX_CREATE_ATTR",
            "TX_CREATE_ACL_ATTR",
            "TX_MKDIR_ACL",
            "TX_MKDIR_ATTR",
            "TX_MKDIR_ACL_ATTR",
            "TX_WRITE2",
            "TX_SETSAXATTR",
            "TX_RENAME_EXCHANGE",
            "TX_RENAME_WHITEOUT",
            "TX_CLONE_RANGE",
        ];
        usize::try_from(t & !CI)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("TX_UNKNOWN")
    }

    /// The create forms that use `lr_acl_create_t`.
    pub fn is_acl_create(t: u64) -> bool {
        matches!(
            t & !CI,
            CREATE_ACL | CREATE_ACL_ATTR | MKDIR_ACL | MKDIR_ACL_ATTR
        )
    }

    /// The create forms that carry an `lr_attr_t` right after the fixed part.
    pub fn is_attr_create(t: u64) -> bool {
        matches!(
            t & !CI,
            CREATE_ATTR | CREATE_ACL_ATTR | MKDIR_ATTR | MKDIR_ACL_ATTR
        )
    }

    /// Every type decoded as [`super::Record::Create`].
    pub fn is_create(t: u64) -> bool {
        matches!(t & !CI, CREATE | MKDIR | MKXATTR | SYMLINK)
            || is_acl_create(t)
            || is_attr_create(t)
    }
}

/// Bits of an `lr_foid` holding the object number (`DN_MAX_OBJECT_SHIFT`).
const LR_FOID_OBJ_BITS: u32 = 48;

/// Object number of an `lr_foid` (its low 48 bits).
pub fn lr_foid_obj(foid: u64) -> u64 {
    foid & ((1u64 << LR_FOID_OBJ_BITS) - 1)
}

/// Dnode slots of an `lr_foid`: bits 56..64 hold slots - 1 (so 0 = one slot,
/// which keeps records of single-slot dnodes identical to old ones).
pub fn lr_foid_slots(foid: u64) -> u64 {
    (foid >> 56) + 1
}

/// An `lr_foid` for object `obj` of `slots` dnode slots (1..=256; 0 is taken as 1).
pub fn lr_foid_make(obj: u64, slots: u64) -> u64 {
    lr_foid_obj(obj) | ((slots.max(1) - 1) & 0xff) << 56
}

/// `ZIL_XVAT_SIZE`: bytes of an `lr_attr_t` with `masksize` bitmap words
/// (4 + 4·masksize bytes of mask, then `lr_attr_end_t`: attrs, crtime × 2,
/// scan stamp = 56 bytes). 72 for the usual masksize 3.
pub fn zil_xvat_size(masksize: u32) -> u64 {
    60 + 4 * masksize as u64
}

/// `ZIL_ACE_LENGTH`: ACE bytes padded to 8.
pub fn zil_ace_length(n: u64) -> u64 {
    n.div_ceil(8).saturating_mul(8)
}

/// Number of FUID domain strings that follow a non-ACL create or a setattr
/// whose owner is `uid` and group `gid`: one per distinct non-zero FUID
/// domain index (the top 32 bits).
pub fn fuid_domain_count(uid: u64, gid: u64) -> u64 {
    let (u, g) = (uid >> 32, gid >> 32);
    (u != 0) as u64 + (g != 0 && g != u) as u64
}

/// `roundup(n, 8)` for lengths already bounded by a buffer.
fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

// ---------------------------------------------------------------------------
// The header

/// `zil_header_t`, the 192 bytes at objset offset 512.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZilHeader {
    /// Txg in which the log was claimed at import (0: not claimed).
    pub claim_txg: u64,
    /// Highest record sequence number already replayed.
    pub replay_seq: u64,
    /// First log block (a hole: the log is empty).
    pub log: BlkPtr,
    /// Highest block sequence number claimed.
    pub claim_blk_seq: u64,
    /// `ZIL_REPLAY_NEEDED`, `ZIL_CLAIM_LR_SEQ_VALID`.
    pub flags: u64,
    /// Highest record sequence number claimed (valid with `ZIL_CLAIM_LR_SEQ_VALID`).
    pub claim_lr_seq: u64,
}

impl ZilHeader {
    /// Decode the objset's 192 header bytes; `swap`: the objset was written
    /// in the other byte order. The three pad words are ignored.
    pub fn decode(raw: &[u8], swap: bool) -> Result<ZilHeader> {
        if raw.len() < ZIL_HEADER_SIZE {
            return Err(Error::truncated("zil_header", ZIL_HEADER_SIZE, raw.len()));
        }
        let w = |off: usize| crate::bytes::u64_at(raw, off, swap, "zil_header");
        Ok(ZilHeader {
            claim_txg: w(0)?,
            replay_seq: w(8)?,
            log: BlkPtr::from_bytes(&raw[16..16 + BLKPTR_SIZE], swap)?,
            claim_blk_seq: w(144)?,
            flags: w(152)?,
            claim_lr_seq: w(160)?,
        })
    }

    /// Encode in host order, pad words zero.
    pub fn encode(&self) -> [u8; ZIL_HEADER_SIZE] {
        let mut out = [0u8; ZIL_HEADER_SIZE];
        out[0..8].copy_from_slice(&self.claim_txg.to_ne_bytes());
        out[8..16].copy_from_slice(&self.replay_seq.to_ne_bytes());
        out[16..16 + BLKPTR_SIZE].copy_from_slice(&self.log.to_bytes());
        out[144..152].copy_from_slice(&self.claim_blk_seq.to_ne_bytes());
        out[152..160].copy_from_slice(&self.flags.to_ne_bytes());
        out[160..168].copy_from_slice(&self.claim_lr_seq.to_ne_bytes());
        out
    }

    /// The header of a dataset that never logged: all zero, `log` a hole.
    pub fn empty() -> ZilHeader {
        ZilHeader {
            claim_txg: 0,
            replay_seq: 0,
            log: BlkPtr::default(),
            claim_blk_seq: 0,
            flags: 0,
            claim_lr_seq: 0,
        }
    }
}

// ---------------------------------------------------------------------------
// Log blocks

/// One verified log block (`zilog2`, checksum 9: `zil_chain_t` at the start,
/// records up to `zc_nused`; or the old `zilog`, checksum 5, of pool version
/// <= 25 and zfs-fuse: the same structure at the end, fletcher2 over the
/// whole block, records filling `0..nused`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBlock<'a> {
    /// The next block of the chain (host order). It carries this block's
    /// verifier with `ZC_SEQ + 1`; it may never have been written.
    pub next: BlkPtr,
    /// The record bytes (for `parse_records`).
    pub records: &'a [u8],
    /// The block was written in the other byte order.
    pub byteswapped: bool,
}

impl LogBlock<'_> {
    /// `parse_records(self.records, self.byteswapped)`.
    pub fn parse(&self) -> Result<Vec<LogRecord>> {
        parse_records(self.records, self.byteswapped)
    }
}

/// A short name of the block `bp` names, for errors.
fn block_name(bp: &BlkPtr) -> String {
    let c = bp.cksum().0;
    let d = bp.dvas()[0];
    format!(
        "intent log block (objset {}, seq {}) at <{}:{:x}>",
        c[ZC_OBJSET], c[ZC_SEQ], d.vdev, d.offset
    )
}

/// `roundup(nused, ZIL_MIN_BLKSZ)`: the bytes of a `zilog2` block that are
/// written and checksummed (None on overflow).
pub fn zil_write_size(nused: u64) -> Option<u64> {
    nused
        .checked_add(ZIL_MIN_BLKSZ - 1)
        .map(|n| n / ZIL_MIN_BLKSZ * ZIL_MIN_BLKSZ)
}

/// The verifier of the block after the one whose verifier is `v` (`ZC_SEQ + 1`).
pub fn next_verifier(v: [u64; 4]) -> [u64; 4] {
    let mut n = v;
    n[ZC_SEQ] = n[ZC_SEQ].wrapping_add(1);
    n
}

fn ne64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        a.copy_from_slice(s);
    }
    u64::from_ne_bytes(a)
}

/// Verify `data` — the whole block as read, `psize` bytes — against `bp`,
/// the pointer that named it (checksum function 5 or 9; its checksum words
/// are the verifier), as OpenZFS accepts a log block (see the module doc):
/// magic in either order; for `zilog2` `roundup(nused, 4096) <= data.len()`
/// and `nused >= 184`, checksum over those rounded bytes; for `zilog`
/// `nused <= data.len() - 184`, checksum over the whole block; the
/// embedded checksum equal to the one computed with the eck's words
/// replaced by the verifier; the next BP carrying this verifier's
/// successor. An encrypted dataset's block (`bp.uses_crypt()`) compares
/// only the folded first two words (the other two are its MAC), as
/// OpenZFS does; its records are then still ciphertext.
///
/// `fletcher(kind, bytes)` must return checksum function `kind` (5 =
/// `zilog` = fletcher2, 9 = `zilog2` = fletcher4) of `bytes` read in host
/// order — e.g. `|k, b| ozfs_codec::checksum::compute(k, b, false)
/// .map(|c| c.0).unwrap_or_default()`. (This crate cannot depend on the
/// codec crate, which depends on it.) A byteswapped block is swapped here,
/// in the copy that is hashed, so the closure never needs to know.
///
/// Errors name the block: `BadMagic`, `Corrupt` (nused out of range,
/// chain broken, not a log checksum), `Checksum` (mismatch), `Truncated`.
pub fn verify_log_block<'a>(
    data: &'a [u8],
    bp: &BlkPtr,
    fletcher: &dyn Fn(u8, &[u8]) -> [u64; 4],
) -> Result<LogBlock<'a>> {
    let kind = bp.checksum();
    let v2 = match kind {
        types::cksum::ZILOG2 => true,
        types::cksum::ZILOG => false,
        k => {
            return Err(Error::corrupt(
                block_name(bp),
                format!(
                    "checksum function {k} ({}) is not zilog or zilog2",
                    types::checksum_name(k)
                ),
            ))
        }
    };
    if data.len() < ZIL_CHAIN_SIZE {
        return Err(Error::truncated(block_name(bp), ZIL_CHAIN_SIZE, data.len()));
    }
    let chain_off = if v2 { 0 } else { data.len() - ZIL_CHAIN_SIZE };
    let chain = &data[chain_off..chain_off + ZIL_CHAIN_SIZE];
    let magic = ne64(chain, ZC_ECK_MAGIC);
    let byteswapped = if magic == ZEC_MAGIC {
        false
    } else if magic.swap_bytes() == ZEC_MAGIC {
        true
    } else {
        return Err(Error::BadMagic {
            what: format!("{}: zio_eck", block_name(bp)),
            found: magic,
        });
    };
    let rd = |off: usize| {
        let v = ne64(chain, off);
        if byteswapped {
            v.swap_bytes()
        } else {
            v
        }
    };
    let nused = rd(ZC_NUSED);
    if v2 && nused < ZIL_CHAIN_SIZE as u64 {
        return Err(Error::corrupt(
            block_name(bp),
            format!("zc_nused {nused} is less than the chain's {ZIL_CHAIN_SIZE} bytes"),
        ));
    }
    let size = if v2 {
        match zil_write_size(nused).and_then(|n| usize::try_from(n).ok()) {
            Some(n) if n <= data.len() => n,
            _ => {
                return Err(Error::corrupt(
                    block_name(bp),
                    format!(
                    "zc_nused {nused}, rounded up to {ZIL_MIN_BLKSZ}, is past the block's {} bytes",
                    data.len()
                ),
                ))
            }
        }
    } else {
        data.len()
    };
    let mut expected = [0u64; 4];
    for (i, e) in expected.iter_mut().enumerate() {
        *e = rd(ZC_ECK_CKSUM + 8 * i);
    }

    // The bytes hashed: the written region with the verifier in place of
    // the stored checksum, in the block's own order, then (for a
    // byteswapped block) every checksum word swapped so a host-order
    // fletcher computes the byteswapped variant.
    let verifier = bp.cksum().0;
    let mut copy = data[..size].to_vec();
    let ck_at = chain_off + ZC_ECK_CKSUM;
    for (i, w) in verifier.iter().enumerate() {
        let w = if byteswapped { w.swap_bytes() } else { *w };
        copy[ck_at + 8 * i..ck_at + 8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    if byteswapped {
        let unit = if v2 { 4 } else { 8 };
        for c in copy.chunks_exact_mut(unit) {
            c.reverse();
        }
    }
    let mut computed = fletcher(kind, &copy);
    if bp.uses_crypt() && bp.object_type() != types::ot::OBJSET {
        computed[0] ^= computed[2];
        computed[1] ^= computed[3];
        computed[2] = 0;
        computed[3] = 0;
        expected[2] = 0;
        expected[3] = 0;
    }
    if computed != expected {
        return Err(Error::Checksum {
            what: block_name(bp),
            expected: Cksum(expected),
            computed: Cksum(computed),
        });
    }

    let next = BlkPtr::from_bytes(&chain[ZC_NEXT_BLK..ZC_NEXT_BLK + BLKPTR_SIZE], byteswapped)?;
    if next.cksum().0 != next_verifier(verifier) {
        return Err(Error::corrupt(
            block_name(bp),
            format!(
                "the chain is broken here: the next block's verifier {} is not this one's with seq {}",
                next.cksum(),
                verifier[ZC_SEQ].wrapping_add(1)
            ),
        ));
    }
    let records = if v2 {
        // 184 <= nused <= size <= data.len() here.
        &data[ZIL_CHAIN_SIZE..nused as usize]
    } else {
        match usize::try_from(nused) {
            Ok(n) if n <= chain_off => &data[..n],
            _ => {
                return Err(Error::corrupt(
                    block_name(bp),
                    format!("zit_nused {nused} is past the {chain_off} bytes before the trailer"),
                ))
            }
        }
    };
    Ok(LogBlock {
        next,
        records,
        byteswapped,
    })
}

/// Build a `zilog2` block image in host order: `buf` is the whole block
/// (its length the block size, a multiple of 4096), `records` encoded
/// records (a multiple of 8 bytes) placed right after the 184-byte chain.
/// Sets `zc_pad = 0`, `zc_next_blk = next`, `zc_nused = 184 +
/// records.len()`, the magic, and the embedded checksum computed with
/// `verifier` (the block's own BP checksum words; `next` should carry
/// [`next_verifier`] of it). Bytes from `nused` to
/// [`zil_write_size`]`(nused)` are zeroed; bytes after that are left alone
/// — only that many need be written. `fletcher4(bytes)` is fletcher4 in
/// host order. Not for encrypted datasets.
pub fn seal_log_block(
    buf: &mut [u8],
    next: &BlkPtr,
    records: &[u8],
    verifier: [u64; 4],
    fletcher4: &dyn Fn(&[u8]) -> [u64; 4],
) -> Result<()> {
    let bs = buf.len();
    if bs == 0 || !(bs as u64).is_multiple_of(ZIL_MIN_BLKSZ) {
        return Err(Error::Invalid(format!(
            "intent log block: size {bs} is not a positive multiple of {ZIL_MIN_BLKSZ}"
        )));
    }
    if !records.len().is_multiple_of(8) {
        return Err(Error::Invalid(format!(
            "intent log block: records of {} bytes are not a multiple of 8",
            records.len()
        )));
    }
    let nused = ZIL_CHAIN_SIZE + records.len();
    if nused > bs {
        return Err(Error::Invalid(format!(
            "intent log block: {} record bytes do not fit in a {bs}-byte block",
            records.len()
        )));
    }
    // nused <= bs, which is a multiple of the granule, so this fits.
    let end = zil_write_size(nused as u64)
        .map_or(bs, |n| n as usize)
        .min(bs);
    buf[0..8].fill(0);
    buf[ZC_NEXT_BLK..ZC_NEXT_BLK + BLKPTR_SIZE].copy_from_slice(&next.to_bytes());
    buf[ZC_NUSED..ZC_NUSED + 8].copy_from_slice(&(nused as u64).to_ne_bytes());
    buf[ZC_ECK_MAGIC..ZC_ECK_MAGIC + 8].copy_from_slice(&ZEC_MAGIC.to_ne_bytes());
    for (i, w) in verifier.iter().enumerate() {
        buf[ZC_ECK_CKSUM + 8 * i..ZC_ECK_CKSUM + 8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    buf[ZIL_CHAIN_SIZE..nused].copy_from_slice(records);
    buf[nused..end].fill(0);
    let ck = fletcher4(&buf[..end]);
    for (i, w) in ck.iter().enumerate() {
        buf[ZC_ECK_CKSUM + 8 * i..ZC_ECK_CKSUM + 8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Records

/// The common header of every record (`lr_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LrCommon {
    /// `lrc_txtype` with [`tx::CI`] stripped.
    pub txtype: u64,
    /// [`tx::CI`] was set: names are matched case-insensitively.
    pub ci: bool,
    /// Whole record length, 8-aligned, >= 32 (on encode: recomputed).
    pub reclen: u64,
    /// Txg the operation belongs to (replay skips records of txgs before
    /// the claim txg: they were committed).
    pub txg: u64,
    /// Record sequence number (replay skips `seq <= zh_replay_seq`).
    pub seq: u64,
}

/// `lr_attr_t`: the optional extended attributes of a create or setattr
/// (`ZIL_XVAT_SIZE(masksize)` bytes): `lr_attr_masksize` (u32), the
/// `masksize` u32 words of the requested-attribute bitmap, then
/// `lr_attr_end_t` — the XAT0 attribute bits (u64), the create time
/// (u64 × 2) and a 32-byte scan stamp (whose first 8 bytes hold the project
/// id when `XAT_PROJID` is requested). The writer's offsets are used:
/// `attrs` at 4 + 4·masksize (OpenZFS's reader agrees for masksize 3, the
/// only value written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LrAttr {
    /// The bitmap (`masksize` = its length, >= 1).
    pub bitmap: Vec<u32>,
    pub attrs: u64,
    pub crtime: [u64; 2],
    /// Raw bytes (not byte-swapped).
    pub scanstamp: [u8; AV_SCANSTAMP_SZ],
}

impl Default for LrAttr {
    fn default() -> Self {
        LrAttr {
            bitmap: vec![0; XVA_MAPSIZE as usize],
            attrs: 0,
            crtime: [0; 2],
            scanstamp: [0; AV_SCANSTAMP_SZ],
        }
    }
}

impl LrAttr {
    /// Bytes on disk (`ZIL_XVAT_SIZE`).
    pub fn size(&self) -> usize {
        60 + 4 * self.bitmap.len()
    }
}

/// The ACL part of `lr_acl_create_t` (the `_ACL` create forms).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrCreateAcl {
    /// `lr_aclcnt`: number of ACEs.
    pub aclcnt: u64,
    /// `lr_acl_flags`.
    pub acl_flags: u64,
    /// The ACEs, `lr_acl_bytes` bytes as on disk (writer's byte order).
    pub acl: Vec<u8>,
    /// Log-specific FUIDs of the ACEs (`lr_fuidcnt` u64s).
    pub fuids: Vec<u64>,
}

/// `TX_CREATE`, `TX_MKDIR`, `TX_MKXATTR`, `TX_SYMLINK` and the `_ACL`,
/// `_ATTR`, `_ACL_ATTR` forms (`LrCommon::txtype` says which).
///
/// Layout: `_lr_create_t` (104 bytes: lr_t, doid 32, foid 40, mode 48, uid
/// 56, gid 64, gen 72, crtime 80/88, rdev 96); the `_ACL` forms extend it
/// to `lr_acl_create_t` (144: aclcnt 104, domcnt 112, fuidcnt 120,
/// acl_bytes 128, acl_flags 136). Then, in order:
/// 1. `_ATTR` forms: an `lr_attr_t` ([`LrAttr`]);
/// 2. `_ACL` forms: `acl_bytes` of ACEs padded to 8, then `fuidcnt` u64
///    FUIDs, then `domcnt` NUL-terminated domain strings;
///    other forms except `TX_SYMLINK`: [`fuid_domain_count`]`(uid, gid)`
///    NUL-terminated domain strings (none unless uid/gid are FUIDs);
/// 3. the NUL-terminated name (`TX_MKXATTR`: the empty name);
/// 4. `TX_SYMLINK`: the NUL-terminated link target right after the name.
///
/// Round trip: `acl` must be `Some` exactly for the `_ACL` forms, `xvattr`
/// for the `_ATTR` forms, `link` for `TX_SYMLINK`; a non-ACL form's
/// `domains` must number `fuid_domain_count(uid, gid)`; names hold no NUL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrCreate {
    pub doid: u64,
    /// Object number with the dnode slot count in the top 8 bits (see
    /// [`LrCreate::foid_obj`], [`LrCreate::foid_slots`]).
    pub foid: u64,
    pub mode: u64,
    pub uid: u64,
    pub gid: u64,
    pub gen: u64,
    pub crtime: [u64; 2],
    pub rdev: u64,
    pub xvattr: Option<LrAttr>,
    pub acl: Option<LrCreateAcl>,
    /// FUID domain strings (without their NULs).
    pub domains: Vec<Vec<u8>>,
    pub name: Vec<u8>,
    pub link: Option<Vec<u8>>,
}

impl LrCreate {
    /// The object number of `foid`.
    pub fn foid_obj(&self) -> u64 {
        lr_foid_obj(self.foid)
    }
    /// The dnode slots of the new object (1 for a 512-byte dnode).
    pub fn foid_slots(&self) -> u64 {
        lr_foid_slots(self.foid)
    }
}

/// `TX_REMOVE`, `TX_RMDIR`: `lr_remove_t` (doid at 32), name at 40.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrRemove {
    pub doid: u64,
    pub name: Vec<u8>,
}

/// `TX_LINK`: `lr_link_t` (doid 32, link_obj 40), name at 48.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrLink {
    pub doid: u64,
    pub link_obj: u64,
    pub name: Vec<u8>,
}

/// The whiteout-file fields of `lr_rename_whiteout_t` (like a create's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenameWhiteout {
    /// Object number and slots, as [`LrCreate::foid`].
    pub wfoid: u64,
    pub wmode: u64,
    pub wuid: u64,
    pub wgid: u64,
    pub wgen: u64,
    pub wcrtime: [u64; 2],
    pub wrdev: u64,
}

/// `TX_RENAME`, `TX_RENAME_EXCHANGE` (`lr_rename_t`: sdoid 32, tdoid 40,
/// names at 48) and `TX_RENAME_WHITEOUT` (`lr_rename_whiteout_t`: then
/// wfoid 48, wmode 56, wuid 64, wgid 72, wgen 80, wcrtime 88/96, wrdev
/// 104; names at 112). Source then target name, each NUL-terminated.
/// `whiteout` is `Some` exactly for `TX_RENAME_WHITEOUT`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrRename {
    pub sdoid: u64,
    pub tdoid: u64,
    pub sname: Vec<u8>,
    pub tname: Vec<u8>,
    pub whiteout: Option<RenameWhiteout>,
}

/// `TX_WRITE`, `TX_WRITE2`: `lr_write_t` (foid 32, offset 40, length 48,
/// blkoff 56, blkptr 64..192), then for a copied write the data.
///
/// * Copied (`WR_COPIED` / `WR_NEED_COPY`): `reclen > 192`; the first
///   `length` bytes after the fixed part are the data (`reclen = 192 +
///   roundup(length, 8)`); `blkptr` is a hole.
/// * Indirect (`WR_INDIRECT`): `reclen == 192`, `data` empty; `blkptr`
///   names a block written with `dmu_sync` that holds the data of the
///   whole file block containing `offset` (replay writes the whole block:
///   offset rounded down to the BP's lsize, when `length` < lsize). A hole
///   BP there means zeros.
/// * `blkoff` is unused (0) by current writers; old ones stored the write's
///   offset within the block. Replay ignores it.
/// * `TX_WRITE2` (same layout) only asks replay to extend the file size to
///   `offset + length`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrWrite {
    pub foid: u64,
    pub offset: u64,
    pub length: u64,
    pub blkoff: u64,
    pub blkptr: BlkPtr,
    /// Copied data (`length` bytes), empty for an indirect write.
    pub data: Vec<u8>,
}

/// `TX_TRUNCATE`: `lr_truncate_t` (foid 32, offset 40, length 48): free
/// `length` bytes from `offset`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrTruncate {
    pub foid: u64,
    pub offset: u64,
    pub length: u64,
}

/// `TX_SETATTR`: `lr_setattr_t` (foid 32, mask 40, mode 48, uid 56, gid 64,
/// size 72, atime 80/88, mtime 96/104), then an `lr_attr_t` when the mask
/// says so, then [`fuid_domain_count`]`(uid, gid)` domain strings.
///
/// `mask` is the writer's platform `ATTR_*`/`AT_*` mask as logged (Linux:
/// `ATTR_MODE` 1, `ATTR_UID` 2, `ATTR_GID` 4, `ATTR_SIZE` 8, `ATTR_ATIME`
/// 16, `ATTR_MTIME` 32, ...). The xvattr is decoded when the mask has
/// [`ATTR_XVATTR_LINUX`] or [`AT_XVATTR`] and the record has bytes past the
/// fixed part (a Linux record with `ATTR_TIMES_SET` = 0x10000 has none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrSetattr {
    pub foid: u64,
    pub mask: u64,
    pub mode: u64,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub atime: [u64; 2],
    pub mtime: [u64; 2],
    pub xvattr: Option<LrAttr>,
    pub domains: Vec<Vec<u8>>,
}

/// `TX_ACL_V0` (`lr_acl_v0_t`: foid 32, aclcnt 40, then `aclcnt` 12-byte
/// `ace_t`s) and `TX_ACL` (`lr_acl_t`: foid 32, aclcnt 40, domcnt 48,
/// fuidcnt 56, acl_bytes 64, acl_flags 72; then `acl_bytes` of ACEs padded
/// to 8, `fuidcnt` u64 FUIDs and `domcnt` NUL-terminated domain strings).
/// The counts are those of the vectors (see [`LrAcl::domcnt`] etc.); for
/// `TX_ACL_V0` `acl.len()` must be `aclcnt * 12` and `acl_flags`, `fuids`,
/// `domains` are empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrAcl {
    pub foid: u64,
    pub aclcnt: u64,
    pub acl_flags: u64,
    /// The ACEs as on disk (writer's byte order).
    pub acl: Vec<u8>,
    pub fuids: Vec<u64>,
    pub domains: Vec<Vec<u8>>,
}

impl LrAcl {
    /// `lr_domcnt`.
    pub fn domcnt(&self) -> u64 {
        self.domains.len() as u64
    }
    /// `lr_fuidcnt`.
    pub fn fuidcnt(&self) -> u64 {
        self.fuids.len() as u64
    }
    /// `lr_acl_bytes`.
    pub fn acl_bytes(&self) -> u64 {
        self.acl.len() as u64
    }
}

/// `TX_SETSAXATTR`: `lr_setsaxattr_t` (foid 32, size 40), then the
/// NUL-terminated xattr name, then `size` bytes of value. `size == 0`
/// (empty `value`) removes the xattr.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrSetSaXattr {
    pub foid: u64,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl LrSetSaXattr {
    /// `lr_size`.
    pub fn size(&self) -> u64 {
        self.value.len() as u64
    }
}

/// `TX_CLONE_RANGE`: `lr_clone_range_t` (foid 32, offset 40, length 48,
/// blksz 56, nbps 64), then `nbps` block pointers at 72: the source
/// blocks, cloned into `foid` from `offset` (each `blksz` bytes of file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LrCloneRange {
    pub foid: u64,
    pub offset: u64,
    pub length: u64,
    pub blksz: u64,
    pub bps: Vec<BlkPtr>,
}

/// A decoded record body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Create(LrCreate),
    Remove(LrRemove),
    Link(LrLink),
    Rename(LrRename),
    Write(LrWrite),
    Truncate(LrTruncate),
    Setattr(LrSetattr),
    Acl(LrAcl),
    SetSaXattr(LrSetSaXattr),
    CloneRange(LrCloneRange),
    /// Any other type (including `TX_COMMIT` = 0, which no writer puts on
    /// disk and replay refuses): the bytes after the `lr_t`, as on disk.
    Unknown {
        common: LrCommon,
        body: Vec<u8>,
    },
}

/// One record: its header and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    pub common: LrCommon,
    pub record: Record,
}

impl LogRecord {
    /// A record of type `txtype` (without `CI`) whose `reclen` is that of
    /// its encoding (an `Unknown` body gets the same header).
    pub fn new(txtype: u64, ci: bool, txg: u64, seq: u64, record: Record) -> LogRecord {
        let mut r = LogRecord {
            common: LrCommon {
                txtype: txtype & !tx::CI,
                ci,
                reclen: 0,
                txg,
                seq,
            },
            record,
        };
        r.common.reclen = encode_record(&r).len() as u64;
        if let Record::Unknown { common, .. } = &mut r.record {
            *common = r.common.clone();
        }
        r
    }
}

/// Bounds-checked reads inside one record.
struct Rd<'a> {
    rec: &'a [u8],
    swap: bool,
    /// Offset of the record in the block's record area (for errors).
    at: usize,
    txtype: u64,
}

impl<'a> Rd<'a> {
    fn what(&self) -> String {
        format!(
            "intent log record {} at offset {}",
            tx::name(self.txtype),
            self.at
        )
    }
    fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(self.what(), detail)
    }
    /// The record must hold a fixed part of `n` bytes.
    fn need(&self, n: usize) -> Result<()> {
        if self.rec.len() < n {
            return Err(self.corrupt(format!(
                "reclen {} is shorter than its fixed part of {n} bytes",
                self.rec.len()
            )));
        }
        Ok(())
    }
    fn bytes(&self, off: usize, len: u64, field: &str) -> Result<&'a [u8]> {
        usize::try_from(len)
            .ok()
            .and_then(|n| self.rec.get(off..)?.get(..n))
            .ok_or_else(|| {
                self.corrupt(format!(
                    "{field} of {len} bytes at {off} runs past the record's {} bytes",
                    self.rec.len()
                ))
            })
    }
    fn u64(&self, off: usize) -> Result<u64> {
        let b = self.bytes(off, 8, "u64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        let v = u64::from_ne_bytes(a);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }
    fn u32(&self, off: usize) -> Result<u32> {
        let b = self.bytes(off, 4, "u32")?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        let v = u32::from_ne_bytes(a);
        Ok(if self.swap { v.swap_bytes() } else { v })
    }
    /// A NUL-terminated string at `*off`; advances past the NUL.
    fn cstr(&self, off: &mut usize, field: &str) -> Result<Vec<u8>> {
        let rest = self.rec.get(*off..).unwrap_or(&[]);
        match rest.iter().position(|&b| b == 0) {
            Some(n) => {
                *off += n + 1;
                Ok(rest[..n].to_vec())
            }
            None => Err(self.corrupt(format!(
                "{field} at {} is not NUL-terminated within the record",
                *off
            ))),
        }
    }
    /// `count` NUL-terminated strings (each takes at least one byte, so a
    /// huge count fails when the record runs out).
    fn cstrs(&self, off: &mut usize, count: u64, field: &str) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for _ in 0..count {
            out.push(self.cstr(off, field)?);
        }
        Ok(out)
    }
    /// `count` u64s at `*off`; advances.
    fn u64s(&self, off: &mut usize, count: u64, field: &str) -> Result<Vec<u64>> {
        let len = count.saturating_mul(8);
        self.bytes(*off, len, field)?;
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            out.push(self.u64(*off + 8 * i)?);
        }
        *off += 8 * count as usize;
        Ok(out)
    }
    fn blkptr(&self, off: usize) -> Result<BlkPtr> {
        BlkPtr::from_bytes(self.bytes(off, BLKPTR_SIZE as u64, "blkptr")?, self.swap)
    }
    /// An `lr_attr_t` at `*off`; advances by its size.
    fn attr(&self, off: &mut usize) -> Result<LrAttr> {
        let masksize = self.u32(*off)?;
        if masksize == 0 {
            return Err(self.corrupt(format!("lr_attr_t at {} has masksize 0", *off)));
        }
        self.bytes(*off, zil_xvat_size(masksize), "lr_attr_t")?;
        let mut bitmap = Vec::with_capacity(masksize as usize);
        for i in 0..masksize as usize {
            bitmap.push(self.u32(*off + 4 + 4 * i)?);
        }
        let end = *off + 4 + 4 * masksize as usize;
        let mut scanstamp = [0u8; AV_SCANSTAMP_SZ];
        scanstamp.copy_from_slice(self.bytes(end + 24, AV_SCANSTAMP_SZ as u64, "scanstamp")?);
        let a = LrAttr {
            bitmap,
            attrs: self.u64(end)?,
            crtime: [self.u64(end + 8)?, self.u64(end + 16)?],
            scanstamp,
        };
        *off = end + 56;
        Ok(a)
    }
}

/// Decode the records of a verified block's record area. Each record's
/// `lr_t` is read in the block's order; `reclen` must be >= 32, a multiple
/// of 8 and within the remaining bytes, and the record's fixed part must
/// fit in it — otherwise an error names the offset. `TX_COMMIT` (0), which
/// OpenZFS never writes, and any other unknown type are returned as
/// [`Record::Unknown`] (OpenZFS's replay refuses them). Sequence-number
/// and txg filtering (`zh_replay_seq`, `zh_claim_lr_seq`, claim txg) is
/// the replayer's.
pub fn parse_records(records: &[u8], byteswapped: bool) -> Result<Vec<LogRecord>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < records.len() {
        let rest = &records[at..];
        let hdr = Rd {
            rec: rest,
            swap: byteswapped,
            at,
            txtype: 0,
        };
        if rest.len() < LR_SIZE {
            return Err(Error::corrupt(
                format!("intent log record at offset {at}"),
                format!("only {} bytes left, an lr_t needs {LR_SIZE}", rest.len()),
            ));
        }
        let raw_type = hdr.u64(0)?;
        let reclen = hdr.u64(8)?;
        let common = LrCommon {
            txtype: raw_type & !tx::CI,
            ci: raw_type & tx::CI != 0,
            reclen,
            txg: hdr.u64(16)?,
            seq: hdr.u64(24)?,
        };
        let len = match usize::try_from(reclen) {
            Ok(n) if n >= LR_SIZE && n % 8 == 0 && n <= rest.len() => n,
            _ => {
                return Err(Error::corrupt(
                    format!(
                        "intent log record {} at offset {at}",
                        tx::name(common.txtype)
                    ),
                    format!(
                        "reclen {reclen} is not a multiple of 8 in {LR_SIZE}..={}",
                        rest.len()
                    ),
                ))
            }
        };
        let r = Rd {
            rec: &rest[..len],
            swap: byteswapped,
            at,
            txtype: common.txtype,
        };
        let record = decode_body(&r, &common)?;
        out.push(LogRecord { common, record });
        at += len;
    }
    Ok(out)
}

fn decode_body(r: &Rd<'_>, common: &LrCommon) -> Result<Record> {
    let t = common.txtype;
    Ok(match t {
        _ if tx::is_create(t) => Record::Create(decode_create(r, t)?),
        tx::REMOVE | tx::RMDIR => {
            r.need(LR_REMOVE_SIZE)?;
            let mut off = LR_REMOVE_SIZE;
            Record::Remove(LrRemove {
                doid: r.u64(32)?,
                name: r.cstr(&mut off, "name")?,
            })
        }
        tx::LINK => {
            r.need(LR_LINK_SIZE)?;
            let mut off = LR_LINK_SIZE;
            Record::Link(LrLink {
                doid: r.u64(32)?,
                link_obj: r.u64(40)?,
                name: r.cstr(&mut off, "name")?,
            })
        }
        tx::RENAME | tx::RENAME_EXCHANGE | tx::RENAME_WHITEOUT => {
            let wo = t == tx::RENAME_WHITEOUT;
            let fixed = if wo {
                LR_RENAME_WHITEOUT_SIZE
            } else {
                LR_RENAME_SIZE
            };
            r.need(fixed)?;
            let whiteout = if wo {
                Some(RenameWhiteout {
                    wfoid: r.u64(48)?,
                    wmode: r.u64(56)?,
                    wuid: r.u64(64)?,
                    wgid: r.u64(72)?,
                    wgen: r.u64(80)?,
                    wcrtime: [r.u64(88)?, r.u64(96)?],
                    wrdev: r.u64(104)?,
                })
            } else {
                None
            };
            let mut off = fixed;
            let sname = r.cstr(&mut off, "source name")?;
            let tname = r.cstr(&mut off, "target name")?;
            Record::Rename(LrRename {
                sdoid: r.u64(32)?,
                tdoid: r.u64(40)?,
                sname,
                tname,
                whiteout,
            })
        }
        tx::WRITE | tx::WRITE2 => {
            r.need(LR_WRITE_SIZE)?;
            let length = r.u64(48)?;
            let data = if r.rec.len() > LR_WRITE_SIZE {
                r.bytes(LR_WRITE_SIZE, length, "copied write data")?
                    .to_vec()
            } else {
                Vec::new()
            };
            Record::Write(LrWrite {
                foid: r.u64(32)?,
                offset: r.u64(40)?,
                length,
                blkoff: r.u64(56)?,
                blkptr: r.blkptr(64)?,
                data,
            })
        }
        tx::TRUNCATE => {
            r.need(LR_TRUNCATE_SIZE)?;
            Record::Truncate(LrTruncate {
                foid: r.u64(32)?,
                offset: r.u64(40)?,
                length: r.u64(48)?,
            })
        }
        tx::SETATTR => {
            r.need(LR_SETATTR_SIZE)?;
            let mask = r.u64(40)?;
            let uid = r.u64(56)?;
            let gid = r.u64(64)?;
            let mut off = LR_SETATTR_SIZE;
            let xvattr =
                if mask & (ATTR_XVATTR_LINUX | AT_XVATTR) != 0 && r.rec.len() > LR_SETATTR_SIZE {
                    Some(r.attr(&mut off)?)
                } else {
                    None
                };
            let domains = r.cstrs(&mut off, fuid_domain_count(uid, gid), "FUID domain")?;
            Record::Setattr(LrSetattr {
                foid: r.u64(32)?,
                mask,
                mode: r.u64(48)?,
                uid,
                gid,
                size: r.u64(72)?,
                atime: [r.u64(80)?, r.u64(88)?],
                mtime: [r.u64(96)?, r.u64(104)?],
                xvattr,
                domains,
            })
        }
        tx::ACL_V0 => {
            r.need(LR_ACL_V0_SIZE)?;
            let aclcnt = r.u64(40)?;
            let n = aclcnt.saturating_mul(ACE_V0_SIZE as u64);
            Record::Acl(LrAcl {
                foid: r.u64(32)?,
                aclcnt,
                acl_flags: 0,
                acl: r.bytes(LR_ACL_V0_SIZE, n, "ACEs")?.to_vec(),
                fuids: Vec::new(),
                domains: Vec::new(),
            })
        }
        tx::ACL => {
            r.need(LR_ACL_SIZE)?;
            let domcnt = r.u64(48)?;
            let fuidcnt = r.u64(56)?;
            let acl_bytes = r.u64(64)?;
            let acl = r.bytes(LR_ACL_SIZE, acl_bytes, "ACEs")?.to_vec();
            let mut off = LR_ACL_SIZE + pad8(acl.len());
            let fuids = r.u64s(&mut off, fuidcnt, "FUIDs")?;
            let domains = r.cstrs(&mut off, domcnt, "FUID domain")?;
            Record::Acl(LrAcl {
                foid: r.u64(32)?,
                aclcnt: r.u64(40)?,
                acl_flags: r.u64(72)?,
                acl,
                fuids,
                domains,
            })
        }
        tx::SETSAXATTR => {
            r.need(LR_SETSAXATTR_SIZE)?;
            let size = r.u64(40)?;
            let mut off = LR_SETSAXATTR_SIZE;
            let name = r.cstr(&mut off, "xattr name")?;
            let value = r.bytes(off, size, "xattr value")?.to_vec();
            Record::SetSaXattr(LrSetSaXattr {
                foid: r.u64(32)?,
                name,
                value,
            })
        }
        tx::CLONE_RANGE => {
            r.need(LR_CLONE_RANGE_SIZE)?;
            let nbps = r.u64(64)?;
            let n = nbps.saturating_mul(BLKPTR_SIZE as u64);
            r.bytes(LR_CLONE_RANGE_SIZE, n, "block pointers")?;
            let mut bps = Vec::with_capacity(nbps as usize);
            for i in 0..nbps as usize {
                bps.push(r.blkptr(LR_CLONE_RANGE_SIZE + BLKPTR_SIZE * i)?);
            }
            Record::CloneRange(LrCloneRange {
                foid: r.u64(32)?,
                offset: r.u64(40)?,
                length: r.u64(48)?,
                blksz: r.u64(56)?,
                bps,
            })
        }
        _ => Record::Unknown {
            common: common.clone(),
            body: r.rec[LR_SIZE..].to_vec(),
        },
    })
}

fn decode_create(r: &Rd<'_>, t: u64) -> Result<LrCreate> {
    let acl_form = tx::is_acl_create(t);
    let fixed = if acl_form {
        LR_ACL_CREATE_SIZE
    } else {
        LR_CREATE_SIZE
    };
    r.need(fixed)?;
    let uid = r.u64(56)?;
    let gid = r.u64(64)?;
    let mut off = fixed;
    let xvattr = if tx::is_attr_create(t) {
        Some(r.attr(&mut off)?)
    } else {
        None
    };
    let (acl, domains) = if acl_form {
        let domcnt = r.u64(112)?;
        let fuidcnt = r.u64(120)?;
        let acl_bytes = r.u64(128)?;
        let acl = r.bytes(off, acl_bytes, "ACEs")?.to_vec();
        off += pad8(acl.len());
        let fuids = r.u64s(&mut off, fuidcnt, "FUIDs")?;
        let domains = r.cstrs(&mut off, domcnt, "FUID domain")?;
        let a = LrCreateAcl {
            aclcnt: r.u64(104)?,
            acl_flags: r.u64(136)?,
            acl,
            fuids,
        };
        (Some(a), domains)
    } else if t == tx::SYMLINK {
        (None, Vec::new())
    } else {
        let n = fuid_domain_count(uid, gid);
        (None, r.cstrs(&mut off, n, "FUID domain")?)
    };
    let name = r.cstr(&mut off, "name")?;
    let link = if t == tx::SYMLINK {
        Some(r.cstr(&mut off, "symlink target")?)
    } else {
        None
    };
    Ok(LrCreate {
        doid: r.u64(32)?,
        foid: r.u64(40)?,
        mode: r.u64(48)?,
        uid,
        gid,
        gen: r.u64(72)?,
        crtime: [r.u64(80)?, r.u64(88)?],
        rdev: r.u64(96)?,
        xvattr,
        acl,
        domains,
        name,
        link,
    })
}

/// Record writer in host order, or the other one (`swap`, for tests of
/// foreign blocks).
struct Wr {
    out: Vec<u8>,
    swap: bool,
}

impl Wr {
    fn u64(&mut self, v: u64) {
        let v = if self.swap { v.swap_bytes() } else { v };
        self.out.extend_from_slice(&v.to_ne_bytes());
    }
    fn u32(&mut self, v: u32) {
        let v = if self.swap { v.swap_bytes() } else { v };
        self.out.extend_from_slice(&v.to_ne_bytes());
    }
    fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }
    fn cstr(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
        self.out.push(0);
    }
    fn pad8(&mut self) {
        let n = pad8(self.out.len());
        self.out.resize(n, 0);
    }
    fn blkptr(&mut self, bp: &BlkPtr) {
        for w in bp.words {
            self.u64(w);
        }
    }
    fn attr(&mut self, a: &LrAttr) {
        self.u32(a.bitmap.len() as u32);
        for &w in &a.bitmap {
            self.u32(w);
        }
        self.u64(a.attrs);
        self.u64(a.crtime[0]);
        self.u64(a.crtime[1]);
        self.raw(&a.scanstamp);
    }
}

/// Encode one record in host order: `lr_t` from `rec.common` (`reclen`
/// recomputed, `lrc_txtype` = txtype | `CI` when `ci`), then the body laid
/// out for `rec.common.txtype` as documented on each struct, padded with
/// zeros to 8 bytes. The inverse of [`parse_records`] for a record whose
/// variant matches its txtype (an `_ATTR` create with `xvattr: None` is
/// written with a zero `lr_attr_t`, an `_ACL` one with `acl: None` with an
/// empty ACL).
pub fn encode_record(rec: &LogRecord) -> Vec<u8> {
    encode_with(rec, false)
}

/// [`encode_record`] in the other byte order: the record as a host of the
/// other endianness writes it (for tests of foreign logs).
pub fn encode_record_swapped(rec: &LogRecord) -> Vec<u8> {
    encode_with(rec, true)
}

fn encode_with(rec: &LogRecord, swap: bool) -> Vec<u8> {
    let c = &rec.common;
    let t = c.txtype & !tx::CI;
    let mut w = Wr {
        out: Vec::new(),
        swap,
    };
    w.u64(t | if c.ci { tx::CI } else { 0 });
    w.u64(0); // reclen, patched below
    w.u64(c.txg);
    w.u64(c.seq);
    match &rec.record {
        Record::Create(cr) => {
            for v in [
                cr.doid,
                cr.foid,
                cr.mode,
                cr.uid,
                cr.gid,
                cr.gen,
                cr.crtime[0],
                cr.crtime[1],
                cr.rdev,
            ] {
                w.u64(v);
            }
            let acl_form = tx::is_acl_create(t);
            let no_acl = LrCreateAcl::default();
            let acl = cr.acl.as_ref().unwrap_or(&no_acl);
            if acl_form {
                w.u64(acl.aclcnt);
                w.u64(cr.domains.len() as u64);
                w.u64(acl.fuids.len() as u64);
                w.u64(acl.acl.len() as u64);
                w.u64(acl.acl_flags);
            }
            if tx::is_attr_create(t) {
                w.attr(&cr.xvattr.clone().unwrap_or_default());
            }
            if acl_form {
                w.raw(&acl.acl);
                w.out
                    .resize(w.out.len() + pad8(acl.acl.len()) - acl.acl.len(), 0);
                for &f in &acl.fuids {
                    w.u64(f);
                }
            }
            if t != tx::SYMLINK {
                for d in &cr.domains {
                    w.cstr(d);
                }
            }
            w.cstr(&cr.name);
            if t == tx::SYMLINK {
                w.cstr(cr.link.as_deref().unwrap_or(&[]));
            }
        }
        Record::Remove(r) => {
            w.u64(r.doid);
            w.cstr(&r.name);
        }
        Record::Link(r) => {
            w.u64(r.doid);
            w.u64(r.link_obj);
            w.cstr(&r.name);
        }
        Record::Rename(r) => {
            w.u64(r.sdoid);
            w.u64(r.tdoid);
            if t == tx::RENAME_WHITEOUT {
                let wo = r.whiteout.clone().unwrap_or_default();
                for v in [
                    wo.wfoid,
                    wo.wmode,
                    wo.wuid,
                    wo.wgid,
                    wo.wgen,
                    wo.wcrtime[0],
                    wo.wcrtime[1],
                    wo.wrdev,
                ] {
                    w.u64(v);
                }
            }
            w.cstr(&r.sname);
            w.cstr(&r.tname);
        }
        Record::Write(r) => {
            for v in [r.foid, r.offset, r.length, r.blkoff] {
                w.u64(v);
            }
            w.blkptr(&r.blkptr);
            w.raw(&r.data);
        }
        Record::Truncate(r) => {
            for v in [r.foid, r.offset, r.length] {
                w.u64(v);
            }
        }
        Record::Setattr(r) => {
            for v in [
                r.foid, r.mask, r.mode, r.uid, r.gid, r.size, r.atime[0], r.atime[1], r.mtime[0],
                r.mtime[1],
            ] {
                w.u64(v);
            }
            if let Some(a) = &r.xvattr {
                w.attr(a);
            }
            for d in &r.domains {
                w.cstr(d);
            }
        }
        Record::Acl(r) => {
            w.u64(r.foid);
            w.u64(r.aclcnt);
            if t == tx::ACL_V0 {
                w.raw(&r.acl);
            } else {
                w.u64(r.domains.len() as u64);
                w.u64(r.fuids.len() as u64);
                w.u64(r.acl.len() as u64);
                w.u64(r.acl_flags);
                w.raw(&r.acl);
                w.out
                    .resize(w.out.len() + pad8(r.acl.len()) - r.acl.len(), 0);
                for &f in &r.fuids {
                    w.u64(f);
                }
                for d in &r.domains {
                    w.cstr(d);
                }
            }
        }
        Record::SetSaXattr(r) => {
            w.u64(r.foid);
            w.u64(r.value.len() as u64);
            w.cstr(&r.name);
            w.raw(&r.value);
        }
        Record::CloneRange(r) => {
            for v in [r.foid, r.offset, r.length, r.blksz, r.bps.len() as u64] {
                w.u64(v);
            }
            for bp in &r.bps {
                w.blkptr(bp);
            }
        }
        Record::Unknown { body, .. } => w.raw(body),
    }
    w.pad8();
    let reclen = w.out.len() as u64;
    let reclen = if swap { reclen.swap_bytes() } else { reclen };
    w.out[8..16].copy_from_slice(&reclen.to_ne_bytes());
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::Dva;

    // Serial reference fletchers (the codec crate's are not reachable from
    // here). `swap`: read each word byteswapped.
    fn fletcher2(data: &[u8], swap: bool) -> [u64; 4] {
        let rd = |b: &[u8]| {
            let v = u64::from_ne_bytes(b.try_into().unwrap());
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        };
        let (mut a0, mut a1, mut b0, mut b1) = (0u64, 0u64, 0u64, 0u64);
        for c in data.chunks_exact(16) {
            a0 = a0.wrapping_add(rd(&c[0..8]));
            a1 = a1.wrapping_add(rd(&c[8..16]));
            b0 = b0.wrapping_add(a0);
            b1 = b1.wrapping_add(a1);
        }
        [a0, a1, b0, b1]
    }

    fn fletcher4(data: &[u8], swap: bool) -> [u64; 4] {
        let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
        for w in data.chunks_exact(4) {
            let v = u32::from_ne_bytes(w.try_into().unwrap());
            let v = if swap { v.swap_bytes() } else { v } as u64;
            a = a.wrapping_add(v);
            b = b.wrapping_add(a);
            c = c.wrapping_add(b);
            d = d.wrapping_add(c);
        }
        [a, b, c, d]
    }

    fn host_fletcher(kind: u8, data: &[u8]) -> [u64; 4] {
        match kind {
            types::cksum::ZILOG => fletcher2(data, false),
            _ => fletcher4(data, false),
        }
    }

    fn f4(data: &[u8]) -> [u64; 4] {
        fletcher4(data, false)
    }

    /// A log block BP: DVA at `offset`, block `size`, checksum `kind`, verifier `v`.
    fn log_bp(offset: u64, size: u64, kind: u8, v: [u64; 4]) -> BlkPtr {
        let mut bp = BlkPtr::default();
        bp.set_dva(
            0,
            &Dva {
                vdev: 0,
                offset,
                asize: size,
                gang: false,
            },
        );
        bp.words[6] = BlkPtr::make_prop(
            size,
            size,
            types::comp::OFF,
            kind,
            types::ot::INTENT_LOG,
            0,
            false,
            true,
        );
        bp.words[10] = 7;
        bp.set_cksum(Cksum(v));
        bp
    }

    const V: [u64; 4] = [0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 54, 9];

    fn name(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    fn sample_bp(seed: u64) -> BlkPtr {
        let mut bp = BlkPtr::default();
        for (i, w) in bp.words.iter_mut().enumerate() {
            *w = seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(i as u32)
                ^ i as u64;
        }
        bp
    }

    fn attr() -> LrAttr {
        let mut scan = [0u8; 32];
        scan[0] = 42;
        scan[31] = 7;
        LrAttr {
            bitmap: vec![0x1234, 0x8000_0001, 5],
            attrs: 0x0000_0100_0000_0002,
            crtime: [1_700_000_000, 123_456_789],
            scanstamp: scan,
        }
    }

    fn create(t: u64) -> Record {
        let acl = tx::is_acl_create(t).then(|| LrCreateAcl {
            aclcnt: 2,
            acl_flags: 0x10,
            acl: (0..13u8).collect(),
            fuids: vec![0x0000_0001_0000_03e8, 0x0000_0002_0000_0064],
        });
        let (uid, gid, domains) = if acl.is_some() {
            (1000, 100, vec![name("S-1-5-21-1"), name("S-1-5-21-2")])
        } else if t == tx::CREATE || t == tx::MKDIR_ATTR {
            // FUID owner and group in two domains.
            (
                0x0000_0001_0000_03e8,
                0x0000_0002_0000_0064,
                vec![name("dom-a"), name("dom-b")],
            )
        } else {
            (1000, 100, Vec::new())
        };
        Record::Create(LrCreate {
            doid: 34,
            foid: lr_foid_make(130, 2),
            mode: 0o100644,
            uid,
            gid,
            gen: 77,
            crtime: [1_700_000_000, 5],
            rdev: 0,
            xvattr: tx::is_attr_create(t).then(attr),
            acl,
            domains,
            name: if t == tx::MKXATTR {
                Vec::new()
            } else {
                name("file.txt")
            },
            link: (t == tx::SYMLINK).then(|| name("../target/of/link")),
        })
    }

    /// One record of every type and form.
    fn every_record() -> Vec<LogRecord> {
        let mut out = Vec::new();
        let mut seq = 1;
        let mut push = |t: u64, ci: bool, r: Record| {
            out.push(LogRecord::new(t, ci, 100 + seq, seq, r));
            seq += 1;
        };
        for t in [
            tx::CREATE,
            tx::MKDIR,
            tx::MKXATTR,
            tx::SYMLINK,
            tx::CREATE_ACL,
            tx::CREATE_ATTR,
            tx::CREATE_ACL_ATTR,
            tx::MKDIR_ACL,
            tx::MKDIR_ATTR,
            tx::MKDIR_ACL_ATTR,
        ] {
            push(t, t == tx::MKDIR, create(t));
        }
        for t in [tx::REMOVE, tx::RMDIR] {
            push(
                t,
                t == tx::REMOVE,
                Record::Remove(LrRemove {
                    doid: 34,
                    name: name("gone"),
                }),
            );
        }
        push(
            tx::LINK,
            false,
            Record::Link(LrLink {
                doid: 34,
                link_obj: 130,
                name: name("hard"),
            }),
        );
        for t in [tx::RENAME, tx::RENAME_EXCHANGE, tx::RENAME_WHITEOUT] {
            push(
                t,
                false,
                Record::Rename(LrRename {
                    sdoid: 34,
                    tdoid: 35,
                    sname: name("from"),
                    tname: name("to-a-longer-name"),
                    whiteout: (t == tx::RENAME_WHITEOUT).then(|| RenameWhiteout {
                        wfoid: lr_foid_make(200, 1),
                        wmode: 0o20000,
                        wuid: 0,
                        wgid: 0,
                        wgen: 12,
                        wcrtime: [3, 4],
                        wrdev: 0,
                    }),
                }),
            );
        }
        // Copied write (odd length: padding), indirect write, write2.
        push(
            tx::WRITE,
            false,
            Record::Write(LrWrite {
                foid: 130,
                offset: 4096,
                length: 13,
                blkoff: 0,
                blkptr: BlkPtr::default(),
                data: name("hello, world!"),
            }),
        );
        push(
            tx::WRITE,
            false,
            Record::Write(LrWrite {
                foid: 130,
                offset: 131072,
                length: 131072,
                blkoff: 0,
                blkptr: sample_bp(3),
                data: Vec::new(),
            }),
        );
        push(
            tx::WRITE2,
            false,
            Record::Write(LrWrite {
                foid: 130,
                offset: 0,
                length: 9000,
                blkoff: 0,
                blkptr: BlkPtr::default(),
                data: Vec::new(),
            }),
        );
        push(
            tx::TRUNCATE,
            false,
            Record::Truncate(LrTruncate {
                foid: 130,
                offset: 10,
                length: u64::MAX - 10,
            }),
        );
        push(
            tx::SETATTR,
            false,
            Record::Setattr(LrSetattr {
                foid: 130,
                mask: 0x3f,
                mode: 0o644,
                uid: 1,
                gid: 2,
                size: 3,
                atime: [4, 5],
                mtime: [6, 7],
                xvattr: None,
                domains: Vec::new(),
            }),
        );
        push(
            tx::SETATTR,
            false,
            Record::Setattr(LrSetattr {
                foid: 130,
                mask: ATTR_XVATTR_LINUX | 1,
                mode: 0o600,
                uid: 0x0000_0003_0000_0001,
                gid: 2,
                size: 0,
                atime: [0, 0],
                mtime: [0, 0],
                xvattr: Some(attr()),
                domains: vec![name("dom-c")],
            }),
        );
        push(
            tx::ACL_V0,
            false,
            Record::Acl(LrAcl {
                foid: 130,
                aclcnt: 3,
                acl_flags: 0,
                acl: (0..36u8).collect(),
                fuids: Vec::new(),
                domains: Vec::new(),
            }),
        );
        push(
            tx::ACL,
            false,
            Record::Acl(LrAcl {
                foid: 130,
                aclcnt: 2,
                acl_flags: 3,
                acl: (0..20u8).collect(),
                fuids: vec![7, 8, 9],
                domains: vec![name("x"), name("yy")],
            }),
        );
        push(
            tx::SETSAXATTR,
            false,
            Record::SetSaXattr(LrSetSaXattr {
                foid: 130,
                name: name("user.tag"),
                value: vec![1, 2, 3, 0, 5],
            }),
        );
        push(
            tx::SETSAXATTR,
            false,
            Record::SetSaXattr(LrSetSaXattr {
                foid: 130,
                name: name("user.gone"),
                value: Vec::new(),
            }),
        );
        push(
            tx::CLONE_RANGE,
            false,
            Record::CloneRange(LrCloneRange {
                foid: 130,
                offset: 0,
                length: 262144,
                blksz: 131072,
                bps: vec![sample_bp(1), sample_bp(2)],
            }),
        );
        push(
            77,
            true,
            Record::Unknown {
                common: LrCommon {
                    txtype: 0,
                    ci: false,
                    reclen: 0,
                    txg: 0,
                    seq: 0,
                },
                body: (0..16u8).collect(),
            },
        );
        out
    }

    fn copied_write() -> LogRecord {
        every_record()
            .into_iter()
            .find(|r| r.common.txtype == tx::WRITE)
            .unwrap()
    }

    #[test]
    fn every_variant_round_trips() {
        let recs = every_record();
        let mut all = Vec::new();
        for r in &recs {
            let enc = encode_record(r);
            assert_eq!(enc.len() % 8, 0, "{r:?}");
            assert_eq!(enc.len() as u64, r.common.reclen, "{r:?}");
            let back = parse_records(&enc, false).unwrap();
            assert_eq!(back, vec![r.clone()]);
            all.extend_from_slice(&enc);
        }
        assert_eq!(parse_records(&all, false).unwrap(), recs);
        // Every known type appears.
        let mut seen: Vec<u64> = recs.iter().map(|r| r.common.txtype).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(
            &seen[..tx::MAX_TYPE as usize - 1],
            &(1..tx::MAX_TYPE).collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn record_sizes_match_openzfs() {
        let recs = every_record();
        let len = |t: u64| {
            recs.iter()
                .find(|r| r.common.txtype == t)
                .map(|r| r.common.reclen)
                .unwrap()
        };
        // lr_remove_t + "gone\0".
        assert_eq!(len(tx::REMOVE), 48);
        // _lr_create_t + "file.txt\0" padded (no domains: uid/gid are plain).
        assert_eq!(len(tx::MKDIR), 104 + 16);
        // _lr_create_t + "file.txt\0" + "../target/of/link\0" = 104 + 9 + 18 -> 136.
        assert_eq!(len(tx::SYMLINK), 136);
        // _lr_create_t + lr_attr_t(72) + "file.txt\0".
        assert_eq!(len(tx::CREATE_ATTR), 104 + 72 + 16);
        // lr_write_t + 13 bytes padded.
        assert_eq!(copied_write().common.reclen, 192 + 16);
        assert_eq!(len(tx::TRUNCATE), 56);
        assert_eq!(len(tx::CLONE_RANGE), 72 + 256);
        assert_eq!(zil_xvat_size(XVA_MAPSIZE), 72);
    }

    fn put(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn hand_laid_records_decode() {
        // TX_WRITE, copied, 5 bytes.
        let mut w = vec![0u8; 200];
        put(&mut w, 0, tx::WRITE);
        put(&mut w, 8, 200);
        put(&mut w, 16, 9);
        put(&mut w, 24, 4);
        put(&mut w, 32, 130);
        put(&mut w, 40, 512);
        put(&mut w, 48, 5);
        w[192..197].copy_from_slice(b"abcde");
        let r = parse_records(&w, false).unwrap();
        let Record::Write(lw) = &r[0].record else {
            panic!("{r:?}")
        };
        assert_eq!((lw.foid, lw.offset, lw.length), (130, 512, 5));
        assert_eq!(lw.data, b"abcde");
        assert!(lw.blkptr.is_hole());
        assert_eq!((r[0].common.txg, r[0].common.seq), (9, 4));

        // TX_CREATE_ACL_ATTR with CI: xvattr at 144, ACL after it, then
        // FUIDs, domains, name.
        let mut c = vec![0u8; 144];
        put(&mut c, 0, tx::CREATE_ACL_ATTR | tx::CI);
        put(&mut c, 32, 4);
        put(&mut c, 40, lr_foid_make(9, 4));
        put(&mut c, 104, 1); // aclcnt
        put(&mut c, 112, 1); // domcnt
        put(&mut c, 120, 1); // fuidcnt
        put(&mut c, 128, 6); // acl_bytes
        put(&mut c, 136, 0x20); // acl_flags
        c.extend_from_slice(&3u32.to_ne_bytes()); // masksize
        for m in [1u32, 2, 3] {
            c.extend_from_slice(&m.to_ne_bytes());
        }
        c.extend_from_slice(&0x44u64.to_ne_bytes()); // attrs
        c.extend_from_slice(&11u64.to_ne_bytes());
        c.extend_from_slice(&12u64.to_ne_bytes());
        c.extend_from_slice(&[9u8; 32]);
        assert_eq!(c.len(), 144 + 72);
        c.extend_from_slice(b"ACEACE\0\0");
        c.extend_from_slice(&0xabcdu64.to_ne_bytes());
        c.extend_from_slice(b"dom\0name\0");
        c.resize(pad8(c.len()), 0);
        let n = c.len() as u64;
        put(&mut c, 8, n);
        let r = parse_records(&c, false).unwrap();
        assert!(r[0].common.ci);
        assert_eq!(r[0].common.txtype, tx::CREATE_ACL_ATTR);
        let Record::Create(cr) = &r[0].record else {
            panic!("{r:?}")
        };
        assert_eq!((cr.foid_obj(), cr.foid_slots()), (9, 4));
        let x = cr.xvattr.as_ref().unwrap();
        assert_eq!(
            (&x.bitmap[..], x.attrs, x.crtime),
            (&[1, 2, 3][..], 0x44, [11, 12])
        );
        let a = cr.acl.as_ref().unwrap();
        assert_eq!(
            (&a.acl[..], &a.fuids[..], a.acl_flags),
            (&b"ACEACE"[..], &[0xabcd][..], 0x20)
        );
        assert_eq!(cr.domains, vec![name("dom")]);
        assert_eq!(cr.name, b"name");
        assert_eq!(encode_record(&r[0]), c);
    }

    #[test]
    fn malformed_records_are_errors() {
        let ok = encode_record(&every_record()[10]); // TX_REMOVE
                                                     // reclen not 8-aligned, too small, too big.
        for bad in [41u64, 24, 4096, u64::MAX] {
            let mut b = ok.clone();
            put(&mut b, 8, bad);
            let e = parse_records(&b, false).unwrap_err().to_string();
            assert!(e.contains("offset 0") && e.contains("reclen"), "{e}");
        }
        // Fixed part longer than reclen.
        let mut b = vec![0u8; 32];
        put(&mut b, 0, tx::WRITE);
        put(&mut b, 8, 32);
        let e = parse_records(&b, false).unwrap_err().to_string();
        assert!(e.contains("TX_WRITE") && e.contains("fixed part"), "{e}");
        // Name without NUL.
        let mut b = ok.clone();
        for x in &mut b[40..] {
            *x = b'a';
        }
        assert!(parse_records(&b, false).is_err());
        // Trailing bytes shorter than an lr_t.
        let mut b = ok.clone();
        b.extend_from_slice(&[0u8; 16]);
        let e = parse_records(&b, false).unwrap_err().to_string();
        assert!(e.contains(&format!("offset {}", ok.len())), "{e}");
        // Copied write shorter than its length.
        let mut b = encode_record(&copied_write());
        put(&mut b, 48, 17);
        assert!(parse_records(&b, false).is_err());
        // TX_COMMIT comes back as Unknown.
        let mut b = vec![0u8; 40];
        put(&mut b, 8, 40);
        let r = parse_records(&b, false).unwrap();
        assert!(
            matches!(&r[0].record, Record::Unknown { common, body } if common.txtype == 0 && body.len() == 8)
        );
    }

    #[test]
    fn header_decode_encode() {
        let mut raw = [0u8; 192];
        put(&mut raw, 0, 17);
        put(&mut raw, 8, 5);
        let bp = log_bp(0x40000, 0x20000, types::cksum::ZILOG2, V);
        raw[16..144].copy_from_slice(&bp.to_bytes());
        put(&mut raw, 144, 9);
        put(&mut raw, 152, ZIL_REPLAY_NEEDED | ZIL_CLAIM_LR_SEQ_VALID);
        put(&mut raw, 160, 99);
        put(&mut raw, 168, 0xdead); // pad: ignored
        let h = ZilHeader::decode(&raw, false).unwrap();
        assert_eq!(
            h,
            ZilHeader {
                claim_txg: 17,
                replay_seq: 5,
                log: bp,
                claim_blk_seq: 9,
                flags: 3,
                claim_lr_seq: 99,
            }
        );
        let mut want = raw;
        put(&mut want, 168, 0);
        assert_eq!(h.encode(), want);
        // The other byte order.
        let mut sw = raw;
        for c in sw.chunks_exact_mut(8) {
            c.reverse();
        }
        assert_eq!(ZilHeader::decode(&sw, true).unwrap(), h);
        assert!(ZilHeader::decode(&raw[..191], false).is_err());
        let e = ZilHeader::empty();
        assert!(e.log.is_hole());
        assert_eq!(e.encode(), [0u8; 192]);
        assert_eq!(ZilHeader::decode(&[0u8; 192], false).unwrap(), e);
    }

    fn all_records_bytes() -> Vec<u8> {
        every_record().iter().flat_map(encode_record).collect()
    }

    fn sealed(size: usize, recs: &[u8]) -> (Vec<u8>, BlkPtr, BlkPtr) {
        let bp = log_bp(0x80000, size as u64, types::cksum::ZILOG2, V);
        let next = log_bp(0xa0000, size as u64, types::cksum::ZILOG2, next_verifier(V));
        let mut buf = vec![0xeeu8; size];
        seal_log_block(&mut buf, &next, recs, V, &f4).unwrap();
        (buf, bp, next)
    }

    #[test]
    fn seal_then_verify() {
        let recs = all_records_bytes();
        let (buf, bp, next) = sealed(16384, &recs);
        let nused = 184 + recs.len();
        let end = zil_write_size(nused as u64).unwrap() as usize;
        assert!(buf[nused..end].iter().all(|&b| b == 0));
        assert!(buf[end..].iter().all(|&b| b == 0xee));
        let lb = verify_log_block(&buf, &bp, &host_fletcher).unwrap();
        assert_eq!(lb.next, next);
        assert!(!lb.byteswapped);
        assert_eq!(lb.records, &recs[..]);
        assert_eq!(lb.parse().unwrap(), every_record());
        // Garbage after the written size does not matter.
        let mut b2 = buf.clone();
        b2[end..].fill(0x5a);
        assert!(verify_log_block(&b2, &bp, &host_fletcher).is_ok());
        // An empty block (no records).
        let (e, bp, _) = sealed(4096, &[]);
        let lb = verify_log_block(&e, &bp, &host_fletcher).unwrap();
        assert!(lb.records.is_empty());
        // Seal refuses bad sizes.
        let mut small = vec![0u8; 4096];
        assert!(seal_log_block(&mut small, &next, &[0u8; 4096], V, &f4).is_err());
        assert!(seal_log_block(&mut small, &next, &[0u8; 12], V, &f4).is_err());
        assert!(seal_log_block(&mut [0u8; 1000], &next, &[], V, &f4).is_err());
    }

    #[test]
    fn verify_refuses_damage() {
        let recs = all_records_bytes();
        let (buf, bp, _) = sealed(16384, &recs);
        // A flipped bit in a record, in the chain, in the checksum.
        for at in [200, 9, 160] {
            let mut b = buf.clone();
            b[at] ^= 0x10;
            let e = verify_log_block(&b, &bp, &host_fletcher).unwrap_err();
            assert!(matches!(e, Error::Checksum { .. }), "{at}: {e}");
            assert!(e.to_string().contains("seq 9"), "{e}");
        }
        // The wrong verifier (another block's seq).
        let other = log_bp(0x80000, 16384, types::cksum::ZILOG2, next_verifier(V));
        assert!(matches!(
            verify_log_block(&buf, &other, &host_fletcher),
            Err(Error::Checksum { .. })
        ));
        // Bad magic.
        let mut b = buf.clone();
        b[144] ^= 1;
        assert!(matches!(
            verify_log_block(&b, &bp, &host_fletcher),
            Err(Error::BadMagic { .. })
        ));
        // nused past the block (rounded).
        let mut b = buf.clone();
        put(&mut b, 136, 16385);
        let e = verify_log_block(&b, &bp, &host_fletcher)
            .unwrap_err()
            .to_string();
        assert!(e.contains("zc_nused 16385"), "{e}");
        put(&mut b, 136, u64::MAX);
        assert!(verify_log_block(&b, &bp, &host_fletcher).is_err());
        // Shorter than a chain; not a log checksum.
        assert!(verify_log_block(&buf[..100], &bp, &host_fletcher).is_err());
        let f4bp = log_bp(0x80000, 16384, types::cksum::FLETCHER4, V);
        assert!(verify_log_block(&buf, &f4bp, &host_fletcher).is_err());
        // A checksum-valid block whose next BP does not continue the chain.
        let mut b = buf.clone();
        let bad_next = log_bp(0xa0000, 16384, types::cksum::ZILOG2, V);
        seal_log_block(&mut b, &bad_next, &recs, V, &f4).unwrap();
        let e = verify_log_block(&b, &bp, &host_fletcher)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chain is broken"), "{e}");
        // nused below the chain size (checksum made valid).
        let mut b = vec![0u8; 4096];
        seal_log_block(&mut b, &log_bp(0, 4096, 9, next_verifier(V)), &[], V, &f4).unwrap();
        put(&mut b, 136, 100);
        let ck = {
            let mut c = b.clone();
            for (i, w) in V.iter().enumerate() {
                put(&mut c, 152 + 8 * i, *w);
            }
            f4(&c)
        };
        for (i, w) in ck.iter().enumerate() {
            put(&mut b, 152 + 8 * i, *w);
        }
        let bp4 = log_bp(0x80000, 4096, types::cksum::ZILOG2, V);
        let e = verify_log_block(&b, &bp4, &host_fletcher)
            .unwrap_err()
            .to_string();
        assert!(e.contains("less than the chain"), "{e}");
    }

    /// Byteswap every u64 of a chain image built in host order.
    fn swap_chain(chain: &mut [u8]) {
        for c in chain.chunks_exact_mut(8) {
            c.reverse();
        }
    }

    #[test]
    fn byteswapped_zilog2_block_verifies_and_parses() {
        let recs: Vec<u8> = every_record()
            .iter()
            .flat_map(encode_record_swapped)
            .collect();
        let bp = log_bp(0x80000, 16384, types::cksum::ZILOG2, V);
        let next = log_bp(0xa0000, 16384, types::cksum::ZILOG2, next_verifier(V));
        let mut buf = vec![0u8; 16384];
        let nused = 184 + recs.len();
        put(&mut buf, 136, nused as u64);
        put(&mut buf, 144, ZEC_MAGIC);
        buf[8..136].copy_from_slice(&next.to_bytes());
        for (i, w) in V.iter().enumerate() {
            put(&mut buf, 152 + 8 * i, *w);
        }
        swap_chain(&mut buf[..184]);
        buf[184..nused].copy_from_slice(&recs);
        let end = zil_write_size(nused as u64).unwrap() as usize;
        // The other-endian writer's fletcher4 is ours with swapped words.
        let ck = fletcher4(&buf[..end], true);
        for (i, w) in ck.iter().enumerate() {
            put(&mut buf, 152 + 8 * i, w.swap_bytes());
        }
        let lb = verify_log_block(&buf, &bp, &host_fletcher).unwrap();
        assert!(lb.byteswapped);
        assert_eq!(lb.next, next);
        let got = lb.parse().unwrap();
        assert_eq!(got, every_record());
        // And a flipped bit is still caught.
        buf[300] ^= 4;
        assert!(matches!(
            verify_log_block(&buf, &bp, &host_fletcher),
            Err(Error::Checksum { .. })
        ));
    }

    /// An old (`zilog`, pool v23 / zfs-fuse) block: trailer at the end,
    /// fletcher2 over everything, in host or foreign order.
    fn old_block(size: usize, recs: &[u8], swap: bool) -> Vec<u8> {
        let next = log_bp(0xa0000, size as u64, types::cksum::ZILOG, next_verifier(V));
        let mut buf = vec![0u8; size];
        buf[..recs.len()].copy_from_slice(recs);
        let t = size - 184;
        buf[t + 8..t + 136].copy_from_slice(&next.to_bytes());
        put(&mut buf, t + 136, recs.len() as u64);
        put(&mut buf, t + 144, ZEC_MAGIC);
        for (i, w) in V.iter().enumerate() {
            put(&mut buf, t + 152 + 8 * i, *w);
        }
        if swap {
            swap_chain(&mut buf[t..]);
        }
        let ck = fletcher2(&buf, swap);
        for (i, w) in ck.iter().enumerate() {
            put(
                &mut buf,
                t + 152 + 8 * i,
                if swap { w.swap_bytes() } else { *w },
            );
        }
        buf
    }

    #[test]
    fn old_zilog_blocks_verify_in_both_orders() {
        let bp = log_bp(0x80000, 8192, types::cksum::ZILOG, V);
        for swap in [false, true] {
            let recs: Vec<u8> = every_record()
                .iter()
                .flat_map(|r| encode_with(r, swap))
                .collect();
            let mut buf = old_block(8192, &recs, swap);
            let lb = verify_log_block(&buf, &bp, &host_fletcher).unwrap();
            assert_eq!(lb.byteswapped, swap);
            assert_eq!(lb.records.len(), recs.len());
            assert_eq!(lb.parse().unwrap(), every_record());
            buf[0] ^= 1;
            assert!(verify_log_block(&buf, &bp, &host_fletcher).is_err());
        }
        // nused reaching into the trailer.
        let mut buf = old_block(4096, &[], false);
        put(&mut buf, 4096 - 184 + 136, 4096 - 183);
        assert!(verify_log_block(&buf, &log_bp(0, 4096, 5, V), &host_fletcher).is_err());
    }

    #[test]
    fn encrypted_blocks_compare_folded_words() {
        let (mut buf, mut bp, _) = sealed(4096, &all_records_bytes()[..64]);
        bp.words[6] |= 1 << 61; // uses crypt
                                // Stored words: folded checksum in 0-1, a "MAC" in 2-3.
        let full = {
            let mut c = buf.clone();
            for (i, w) in V.iter().enumerate() {
                put(&mut c, 152 + 8 * i, *w);
            }
            f4(&c)
        };
        put(&mut buf, 152, full[0] ^ full[2]);
        put(&mut buf, 160, full[1] ^ full[3]);
        put(&mut buf, 168, 0x1234);
        put(&mut buf, 176, 0x5678);
        assert!(verify_log_block(&buf, &bp, &host_fletcher).is_ok());
        put(&mut buf, 152, full[0]);
        assert!(verify_log_block(&buf, &bp, &host_fletcher).is_err());
    }

    #[test]
    fn tx_helpers() {
        assert_eq!(tx::name(tx::CLONE_RANGE), "TX_CLONE_RANGE");
        assert_eq!(tx::name(tx::RENAME | tx::CI), "TX_RENAME");
        assert_eq!(tx::name(99), "TX_UNKNOWN");
        assert!(tx::is_ooo(tx::WRITE) && tx::is_ooo(tx::CLONE_RANGE));
        assert!(!tx::is_ooo(tx::CREATE) && !tx::is_ooo(tx::RENAME));
        assert_eq!(lr_foid_slots(130), 1);
        assert_eq!(lr_foid_obj(lr_foid_make(1 << 40, 3)), 1 << 40);
        assert_eq!(lr_foid_slots(lr_foid_make(5, 256)), 256);
        assert_eq!(fuid_domain_count(1, 2), 0);
        assert_eq!(fuid_domain_count(1 << 32, 1 << 32), 1);
        assert_eq!(fuid_domain_count(1 << 32, 2 << 32), 2);
        assert_eq!(fuid_domain_count(5, 2 << 32), 1);
        assert_eq!(zil_write_size(184), Some(4096));
        assert_eq!(zil_write_size(4096), Some(4096));
        assert_eq!(zil_write_size(u64::MAX), None);
    }

    /// xorshift64*.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn random_and_truncated_input_never_panics() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let good = all_records_bytes();
        for i in 0..4000 {
            let swap = i % 2 == 1;
            // Random bytes with plausible headers, truncations and mutations
            // of a valid stream.
            let buf: Vec<u8> = match i % 4 {
                0 => {
                    let n = (rng.next() % 600) as usize;
                    (0..n).map(|_| rng.next() as u8).collect()
                }
                1 => {
                    let n = (rng.next() % 64) as usize * 8 + 32;
                    let mut b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                    let t = rng.next() % 30;
                    let t = if swap { t.swap_bytes() } else { t };
                    b[0..8].copy_from_slice(&t.to_ne_bytes());
                    let l = if rng.next().is_multiple_of(2) {
                        n as u64
                    } else {
                        rng.next() % 1024
                    };
                    let l = if swap { l.swap_bytes() } else { l };
                    b[8..16].copy_from_slice(&l.to_ne_bytes());
                    b
                }
                2 => good[..(rng.next() as usize % good.len())].to_vec(),
                _ => {
                    let mut b = good.clone();
                    for _ in 0..1 + rng.next() % 8 {
                        let at = rng.next() as usize % b.len();
                        b[at] = rng.next() as u8;
                    }
                    b
                }
            };
            if let Ok(recs) = parse_records(&buf, swap) {
                // Whatever parses re-encodes to the same records (reclen aside).
                for r in recs {
                    let back = parse_records(&encode_record(&r), false).unwrap();
                    assert_eq!(back.len(), 1);
                    assert_eq!(back[0].record, r.record, "{r:?}");
                }
            }
            let bp = log_bp(0, 4096, if swap { 5 } else { 9 }, V);
            let _ = verify_log_block(&buf, &bp, &host_fletcher);
        }
    }
}
