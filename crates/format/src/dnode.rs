//! Dnodes (`dnode_phys_t`): the 512-byte (or larger) descriptor of every DMU
//! object. FORMAT.md §5.2–5.3.
//!
//! Layout: a 64-byte header (type, shifts, counts, flags, sizes, maxblkid,
//! used), then `dn_nblkptr` 128-byte block pointers, then the bonus buffer,
//! and — when `DNODE_FLAG_SPILL_BLKPTR` is set — a spill BP in the last 128
//! bytes. A large dnode spans `1 + dn_extra_slots` consecutive 512-byte
//! slots and its bonus area extends to the end of the last slot.
//!
//! Invariants checked on decode (allocated dnodes only): 1 <= nblkptr <= 3,
//! 1 <= nlevels <= 32, 10 <= indblkshift <= 17, 1 <= datablkszsec <= 32768,
//! the bonus (plus spill BP) fits inside the dnode, and `maxblkid` is a
//! block the object can have: the tree addresses `nblkptr ×
//! 2^((indblkshift − 7) × (nlevels − 1))` level-0 blocks (ZFS adds a level
//! before `maxblkid` outgrows it), and an object holds at most 2^64 bytes,
//! so `(maxblkid + 1) × datablksz <= 2^64`
//! ([`DnodePhys::max_blkid_limit`]). Every reader may therefore size loops
//! and byte counts from `maxblkid` without overflow (`maxblkid < 2^55`).

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::bytes::{u16_at, u64_at};
use crate::error::{Error, Result};

pub const DNODE_SIZE: usize = 512;
pub const DNODE_SHIFT: u32 = 9;
/// Flag: `dn_used` is in bytes.
pub const DNODE_FLAG_USED_BYTES: u8 = 0x1;
pub const DNODE_FLAG_SPILL_BLKPTR: u8 = 0x4;
/// Flag: user/group accounting done for this dnode.
pub const DNODE_FLAG_USERUSED_ACCOUNTED: u8 = 0x2;
/// Bytes of the fixed dnode header before the block pointers.
pub const DNODE_CORE_SIZE: usize = 64;
/// Largest dnode (16 K, i.e. 32 slots).
pub const DNODE_MAX_SIZE: usize = 16 * 1024;
/// Most 512-byte slots one dnode takes.
pub const DNODE_MAX_SLOTS: u8 = (DNODE_MAX_SIZE / DNODE_SIZE) as u8;

/// Bytes a dnode of `slots` slots holds for its bonus beside one block
/// pointer and no spill block pointer.
pub fn bonus_room(slots: u8) -> usize {
    (slots as usize * DNODE_SIZE).saturating_sub(DNODE_CORE_SIZE + BLKPTR_SIZE)
}

/// The type and extra-slot count at the head of slot `slot` of a dnode
/// block (bytes 0 and 12: single bytes, no byte order); (0, 0) past its end.
pub fn slot_head_bytes(block: &[u8], slot: usize) -> (u8, u8) {
    let at = slot * DNODE_SIZE;
    match (block.get(at), block.get(at + 12)) {
        (Some(&t), Some(&e)) => (t, e),
        _ => (0, 0),
    }
}

/// The allocated dnodes among the first `slots` slots of a dnode block
/// whose slot heads `head(slot)` gives (type, extra slots): walked from the
/// block's start, each dnode stepping over its extra slots (the bytes
/// there are its own, whatever they look like), as OpenZFS lays dnodes
/// out. Yields (slot, extra slots).
pub fn dnode_starts<F: Fn(usize) -> (u8, u8)>(
    slots: usize,
    head: F,
) -> impl Iterator<Item = (usize, u8)> {
    let mut i = 0usize;
    std::iter::from_fn(move || {
        while i < slots {
            let (t, extra) = head(i);
            let at = i;
            if t != 0 {
                i += 1 + extra as usize;
                return Some((at, extra));
            }
            i += 1;
        }
        None
    })
}

/// [`dnode_starts`] of a dnode block's bytes.
pub fn block_dnode_starts(block: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    dnode_starts(block.len() / DNODE_SIZE, move |s| slot_head_bytes(block, s))
}

/// Slot `rel` of a dnode block lies inside a dnode of several slots that
/// starts before it: that dnode's slot.
pub fn slot_owner<F: Fn(usize) -> (u8, u8)>(rel: usize, head: F) -> Option<usize> {
    dnode_starts(rel, head)
        .find(|&(s, extra)| s + 1 + extra as usize > rel)
        .map(|(s, _)| s)
}
/// Highest `dn_nlevels` accepted.
pub const DN_MAX_LEVELS: u8 = 32;
/// Indirect block shift range accepted (old pools use 10..=14, new 12..=17).
pub const DN_MIN_INDBLKSHIFT: u8 = 10;
pub const DN_MAX_INDBLKSHIFT: u8 = 17;

/// A decoded dnode.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DnodePhys {
    pub object_type: u8,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub bonustype: u8,
    pub checksum: u8,
    pub compress: u8,
    pub flags: u8,
    pub datablkszsec: u16,
    pub bonuslen: u16,
    pub extra_slots: u8,
    pub maxblkid: u64,
    pub used: u64,
    /// `nblkptr` block pointers.
    pub blkptr: Vec<BlkPtr>,
    /// The bonus buffer: exactly `bonuslen` bytes (still in the writer's byte order).
    pub bonus: Vec<u8>,
    /// Spill block pointer if `DNODE_FLAG_SPILL_BLKPTR`.
    pub spill: Option<BlkPtr>,
}

impl DnodePhys {
    /// Decode a dnode from `buf` (512 × (1 + extra_slots) bytes are needed; the caller passes the rest of the
    /// dnode block from this slot on). `swap` = written by the other endianness. A free slot (type 0)
    /// decodes with empty blkptr/bonus. Validates nblkptr 1..=3, bonuslen fits, nlevels <= 32,
    /// indblkshift/datablkszsec sane when type != 0.
    pub fn parse(buf: &[u8], swap: bool) -> Result<DnodePhys> {
        if buf.len() < DNODE_SIZE {
            return Err(Error::truncated("dnode", DNODE_SIZE, buf.len()));
        }
        let mut d = DnodePhys {
            object_type: buf[0],
            indblkshift: buf[1],
            nlevels: buf[2],
            nblkptr: buf[3],
            bonustype: buf[4],
            checksum: buf[5],
            compress: buf[6],
            flags: buf[7],
            datablkszsec: u16_at(buf, 8, swap, "dnode datablkszsec")?,
            bonuslen: u16_at(buf, 10, swap, "dnode bonuslen")?,
            extra_slots: buf[12],
            maxblkid: u64_at(buf, 16, swap, "dnode maxblkid")?,
            used: u64_at(buf, 24, swap, "dnode used")?,
            blkptr: Vec::new(),
            bonus: Vec::new(),
            spill: None,
        };
        if d.object_type == 0 {
            return Ok(d);
        }
        let bad = |detail: String| Err(Error::corrupt("dnode", detail));
        let size = d.size();
        if size > DNODE_MAX_SIZE {
            return bad(format!("extra_slots {} too large", d.extra_slots));
        }
        if buf.len() < size {
            return Err(Error::truncated("dnode (large)", size, buf.len()));
        }
        if !(1..=3).contains(&d.nblkptr) {
            return bad(format!("nblkptr {}", d.nblkptr));
        }
        if d.nlevels == 0 || d.nlevels > DN_MAX_LEVELS {
            return bad(format!("nlevels {}", d.nlevels));
        }
        if !(DN_MIN_INDBLKSHIFT..=DN_MAX_INDBLKSHIFT).contains(&d.indblkshift) {
            return bad(format!("indblkshift {}", d.indblkshift));
        }
        if d.datablkszsec == 0 || d.datablkszsec as u64 * 512 > crate::blkptr::SPA_MAXBLOCKSIZE {
            return bad(format!("datablkszsec {}", d.datablkszsec));
        }
        if d.maxblkid > d.max_blkid_limit() {
            return bad(format!(
                "maxblkid {} beyond the {} blocks its tree can address \
                 ({} levels, {} block pointers, indirect shift {}, block size {})",
                d.maxblkid,
                d.addressable_blocks(),
                d.nlevels,
                d.nblkptr,
                d.indblkshift,
                d.datablksz()
            ));
        }
        let has_spill = d.flags & DNODE_FLAG_SPILL_BLKPTR != 0;
        let bonus_off = DNODE_CORE_SIZE + BLKPTR_SIZE * d.nblkptr as usize;
        let bonus_end = if has_spill { size - BLKPTR_SIZE } else { size };
        if bonus_off + d.bonuslen as usize > bonus_end {
            return bad(format!(
                "bonuslen {} exceeds bonus area {}",
                d.bonuslen,
                bonus_end.saturating_sub(bonus_off)
            ));
        }
        for i in 0..d.nblkptr as usize {
            let off = DNODE_CORE_SIZE + BLKPTR_SIZE * i;
            d.blkptr
                .push(BlkPtr::from_bytes(&buf[off..off + BLKPTR_SIZE], swap)?);
        }
        d.bonus = buf[bonus_off..bonus_off + d.bonuslen as usize].to_vec();
        if has_spill {
            d.spill = Some(BlkPtr::from_bytes(&buf[size - BLKPTR_SIZE..size], swap)?);
        }
        Ok(d)
    }
    /// Bytes available for the bonus buffer in this dnode (given its size, nblkptr and spill flag).
    pub fn max_bonuslen(&self) -> usize {
        let spill = if self.flags & DNODE_FLAG_SPILL_BLKPTR != 0 {
            BLKPTR_SIZE
        } else {
            0
        };
        self.size()
            .saturating_sub(DNODE_CORE_SIZE + BLKPTR_SIZE * self.nblkptr as usize + spill)
    }
    /// Level-0 blocks this dnode's tree can address: `nblkptr ×
    /// 2^((indblkshift − 7) × (nlevels − 1))`, saturating at `u64::MAX`.
    pub fn addressable_blocks(&self) -> u64 {
        let epbs = (self.indblkshift as u32).saturating_sub(7);
        let shift = epbs.saturating_mul((self.nlevels as u32).saturating_sub(1));
        let n = self.nblkptr.max(1) as u64;
        if shift >= 64 || n.leading_zeros() < shift {
            return u64::MAX;
        }
        n << shift
    }
    /// The highest `maxblkid` this dnode can have: within what its tree
    /// addresses and, the object holding at most 2^64 bytes, with
    /// `(maxblkid + 1) × datablksz <= 2^64`.
    pub fn max_blkid_limit(&self) -> u64 {
        let by_tree = self.addressable_blocks().saturating_sub(1);
        let bs = self.datablksz().max(512);
        // ⌊2^64 / bs⌋ − 1, computed without 2^64 (bs divides 2^64 exactly
        // when 2^64 − 1 leaves the remainder bs − 1).
        let by_size = (u64::MAX / bs + u64::from(u64::MAX % bs == bs - 1)).saturating_sub(1);
        by_tree.min(by_size)
    }
    /// Indirect block size in bytes.
    pub fn indblksz(&self) -> u64 {
        1u64 << (self.indblkshift.min(63))
    }
    /// Encode into a zeroed 512 × (1 + extra_slots) byte buffer (host order).
    pub fn encode(&self) -> Vec<u8> {
        let size = self.size();
        let mut out = vec![0u8; size];
        out[0] = self.object_type;
        out[1] = self.indblkshift;
        out[2] = self.nlevels;
        out[3] = self.nblkptr;
        out[4] = self.bonustype;
        out[5] = self.checksum;
        out[6] = self.compress;
        out[7] = self.flags;
        out[8..10].copy_from_slice(&self.datablkszsec.to_ne_bytes());
        out[10..12].copy_from_slice(&self.bonuslen.to_ne_bytes());
        out[12] = self.extra_slots;
        out[16..24].copy_from_slice(&self.maxblkid.to_ne_bytes());
        out[24..32].copy_from_slice(&self.used.to_ne_bytes());
        let nbp = (self.nblkptr as usize).min(3);
        for (i, bp) in self.blkptr.iter().take(nbp).enumerate() {
            let off = DNODE_CORE_SIZE + BLKPTR_SIZE * i;
            out[off..off + BLKPTR_SIZE].copy_from_slice(&bp.to_bytes());
        }
        let bonus_off = DNODE_CORE_SIZE + BLKPTR_SIZE * nbp;
        let spill_room = if self.spill.is_some() { BLKPTR_SIZE } else { 0 };
        let room = size.saturating_sub(bonus_off + spill_room);
        let n = self.bonus.len().min(room);
        out[bonus_off..bonus_off + n].copy_from_slice(&self.bonus[..n]);
        if let Some(sp) = &self.spill {
            out[size - BLKPTR_SIZE..].copy_from_slice(&sp.to_bytes());
        }
        out
    }
    /// Data block size in bytes.
    pub fn datablksz(&self) -> u64 {
        self.datablkszsec as u64 * 512
    }
    /// Size of this dnode in bytes.
    pub fn size(&self) -> usize {
        DNODE_SIZE * (1 + self.extra_slots as usize)
    }
    /// Space used in bytes (converts sectors if USED_BYTES flag is clear).
    pub fn used_bytes(&self) -> u64 {
        if self.flags & DNODE_FLAG_USED_BYTES != 0 {
            self.used
        } else {
            self.used << 9
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of 8 slots: a 3-slot dnode at 1 whose inner slots hold
    /// bytes that look like dnode heads, a 1-slot dnode at 5.
    #[test]
    fn dnode_starts_step_over_inner_slots() {
        let mut b = vec![0u8; 8 * DNODE_SIZE];
        b[DNODE_SIZE] = 19;
        b[DNODE_SIZE + 12] = 2;
        b[2 * DNODE_SIZE] = 7; // bonus bytes of object 1
        b[3 * DNODE_SIZE + 12] = 9;
        b[5 * DNODE_SIZE] = 20;
        assert_eq!(
            block_dnode_starts(&b).collect::<Vec<_>>(),
            vec![(1, 2), (5, 0)]
        );
        let head = |s| slot_head_bytes(&b, s);
        assert_eq!(slot_owner(1, head), None);
        assert_eq!(slot_owner(2, head), Some(1));
        assert_eq!(slot_owner(3, head), Some(1));
        assert_eq!(slot_owner(4, head), None);
        assert_eq!(slot_head_bytes(&b, 8), (0, 0));
    }

    fn sample() -> DnodePhys {
        let mut bp = BlkPtr::default();
        bp.words[0] = 1;
        bp.words[1] = 0x100;
        bp.words[6] = BlkPtr::make_prop(16384, 512, 3, 7, 10, 0, false, true);
        bp.words[10] = 4;
        bp.words[11] = 3;
        DnodePhys {
            object_type: 16,
            indblkshift: 14,
            nlevels: 1,
            nblkptr: 1,
            bonustype: 16,
            checksum: 0,
            compress: 0,
            flags: DNODE_FLAG_USED_BYTES,
            datablkszsec: 1,
            bonuslen: 320,
            extra_slots: 0,
            maxblkid: 0,
            used: 0,
            blkptr: vec![bp],
            bonus: (0..320).map(|i| i as u8).collect(),
            spill: None,
        }
    }

    #[test]
    fn golden_and_round_trip() {
        let d = sample();
        let b = d.encode();
        assert_eq!(b.len(), 512);
        assert_eq!(&b[0..8], &[16, 14, 1, 1, 16, 0, 0, 1]);
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(&b[8..12], &[1, 0, 0x40, 1]);
        }
        assert_eq!(b[192], 0); // bonus starts right after the single BP
        assert_eq!(b[193], 1);
        assert_eq!(DnodePhys::parse(&b, false).unwrap(), d);
        assert_eq!(d.max_bonuslen(), 320);
        assert_eq!(d.used_bytes(), 0);
        assert_eq!(d.datablksz(), 512);
    }

    #[test]
    fn swapped_header() {
        let d = sample();
        let mut b = d.encode();
        b[8..10].reverse();
        b[10..12].reverse();
        for c in b[16..32].chunks_mut(8) {
            c.reverse();
        }
        for c in b[64..192].chunks_mut(8) {
            c.reverse();
        }
        assert_eq!(DnodePhys::parse(&b, true).unwrap(), d);
    }

    #[test]
    fn large_dnode_with_spill() {
        let mut d = sample();
        d.extra_slots = 1;
        d.bonustype = 44;
        d.flags |= DNODE_FLAG_SPILL_BLKPTR;
        d.bonuslen = (1024 - 64 - 128 - 128) as u16;
        d.bonus = vec![7; d.bonuslen as usize];
        let mut sp = BlkPtr::default();
        sp.words[10] = 9;
        sp.words[0] = 1;
        d.spill = Some(sp);
        let b = d.encode();
        assert_eq!(b.len(), 1024);
        assert_eq!(DnodePhys::parse(&b, false).unwrap(), d);
        assert!(DnodePhys::parse(&b[..600], false).is_err());
    }

    #[test]
    fn free_and_invalid() {
        let z = DnodePhys::parse(&[0u8; 512], false).unwrap();
        assert_eq!(z, DnodePhys::default());
        let d = sample();
        let mut b = d.encode();
        b[3] = 0;
        assert!(DnodePhys::parse(&b, false).is_err());
        let mut b = d.encode();
        b[3] = 2; // 2 BPs leave 192 bytes of bonus, bonuslen is 320
        assert!(DnodePhys::parse(&b, false).is_err());
        let mut b = d.encode();
        b[2] = 40;
        assert!(DnodePhys::parse(&b, false).is_err());
        assert!(DnodePhys::parse(&b[..100], false).is_err());
    }

    #[test]
    fn maxblkid_bounded_by_tree_and_size() {
        let mut d = sample();
        // One level, one BP: block 0 only.
        assert_eq!(d.addressable_blocks(), 1);
        assert_eq!(d.max_blkid_limit(), 0);
        d.maxblkid = 1;
        assert!(DnodePhys::parse(&d.encode(), false).is_err());
        // Two levels of 16 K indirects: 128 blocks per BP.
        d.nlevels = 2;
        assert_eq!(d.addressable_blocks(), 128);
        d.maxblkid = 127;
        assert_eq!(DnodePhys::parse(&d.encode(), false).unwrap(), d);
        d.maxblkid = 128;
        assert!(DnodePhys::parse(&d.encode(), false).is_err());
        // Deep trees saturate; the 2^64-byte object size then bounds it.
        d.nlevels = 32;
        assert_eq!(d.addressable_blocks(), u64::MAX);
        assert_eq!(d.max_blkid_limit(), (1 << 55) - 1);
        d.maxblkid = 1 << 58;
        assert!(DnodePhys::parse(&d.encode(), false).is_err());
        d.maxblkid = (1 << 55) - 1;
        assert!(DnodePhys::parse(&d.encode(), false).is_ok());
        d.datablkszsec = 3; // 1536-byte blocks: ⌊2^64 / 1536⌋ − 1
        assert_eq!(d.max_blkid_limit(), u64::MAX / 1536 - 1);
        d.datablkszsec = 256; // 128 K
        assert_eq!(d.max_blkid_limit(), (1 << 47) - 1);
        d.maxblkid = u64::MAX;
        assert!(DnodePhys::parse(&d.encode(), false).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0xdead_beef_cafe_f00d;
        let mut buf = vec![0u8; 4096];
        for i in 0..3000 {
            for c in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            buf[1] = 10 + (i % 8) as u8;
            buf[2] = 1 + (i % 4) as u8;
            buf[3] = 1 + (i % 3) as u8;
            buf[12] = (i % 9) as u8;
            if let Ok(d) = DnodePhys::parse(&buf, i % 2 == 0) {
                let e = d.encode();
                assert_eq!(DnodePhys::parse(&e, false).unwrap(), d);
            }
        }
    }
}
