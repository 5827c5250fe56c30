//! Vdev labels and uberblocks. FORMAT.md §1.
//!
//! A leaf device carries four 256 KiB labels (two at the front, two at the
//! end). Each holds a packed nvlist describing the pool and the leaf's
//! top-level vdev, and a ring of uberblocks. The newest uberblock whose
//! embedded checksum verifies is the root of the pool.
//!
//! Self-checksumming regions (the label nvlist area, each uberblock slot,
//! the boot-environment block, gang headers) end with a 40-byte `zio_eck_t`:
//! `zec_magic` then four checksum words, all in the writer's byte order. To
//! verify, the checksum words are replaced by a *verifier* (for labels and
//! uberblocks: the region's absolute device offset), written in that same
//! byte order, and the whole region is hashed. This module only places the
//! verifier and decodes the structures; hashing lives in the codec crate.

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::error::{Error, Result};

pub const VDEV_LABEL_SIZE: u64 = 256 * 1024;
pub const VDEV_LABELS: usize = 4;
/// Offset of the nvlist region (`vdev_phys_t`) inside a label.
pub const VDEV_PHYS_OFFSET: u64 = 16 * 1024;
/// Size of the nvlist region including its 40-byte checksum trailer.
pub const VDEV_PHYS_SIZE: usize = 112 * 1024;
/// Offset of the uberblock ring inside a label.
pub const UBERBLOCK_RING_OFFSET: u64 = 128 * 1024;
pub const UBERBLOCK_RING_SIZE: u64 = 128 * 1024;
/// Bytes before DVA offset 0 on every leaf: 2 labels + boot area.
pub const VDEV_LABEL_START_SIZE: u64 = 4 * 1024 * 1024;
pub const VDEV_LABEL_END_SIZE: u64 = 512 * 1024;
pub const UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;
/// `zec_magic` of an embedded checksum trailer.
pub const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;
/// Size of `zio_eck_t`.
pub const ZIO_ECK_SIZE: usize = 40;
/// Smallest device OpenZFS accepts.
pub const SPA_MINDEVSIZE: u64 = 64 * 1024 * 1024;

/// Device size rounded down to a whole label.
pub fn aligned_psize(dev_size: u64) -> u64 {
    dev_size & !(VDEV_LABEL_SIZE - 1)
}

/// Absolute device byte offset of `offset_in_label` within label `l` (0..4) of a device of `psize` (aligned) bytes.
pub fn label_offset(psize: u64, l: usize, offset_in_label: u64) -> u64 {
    offset_in_label
        + l as u64 * VDEV_LABEL_SIZE
        + if l < 2 {
            0
        } else {
            psize - VDEV_LABELS as u64 * VDEV_LABEL_SIZE
        }
}

/// Uberblock slot shift: `max(ashift, 10)` capped at 13 (OpenZFS); identical to zfs-fuse for ashift <= 13.
pub fn uberblock_shift(ashift: u64) -> u32 {
    ashift.clamp(10, 13) as u32
}

/// Where the embedded checksum of a self-checksumming region lives and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eck {
    /// True if `zec_magic` reads byteswapped (the region was written by the other endianness).
    pub byteswapped: bool,
    /// The stored checksum words (host order).
    pub cksum: [u64; 4],
}

/// MMP magic stored in `ub_mmp_magic` when the MMP fields are meaningful.
pub const MMP_MAGIC: u64 = 0xa11c_ea11;
/// `ub_mmp_config` bit: the sequence field is valid.
pub const MMP_SEQ_VALID_BIT: u64 = 0x02;
/// Bytes of `uberblock_t` written by zfs-fuse (up to and including `ub_rootbp`).
pub const UBERBLOCK_OLD_SIZE: usize = 168;
/// Bytes of the current `uberblock_t` (through `ub_raidz_reflow_info`).
pub const UBERBLOCK_SIZE: usize = 216;

fn native_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(a)
}

/// Parse the 40-byte trailer at the end of `region`. Errors if the magic is neither order.
pub fn parse_eck(region: &[u8]) -> Result<Eck> {
    if region.len() < ZIO_ECK_SIZE {
        return Err(Error::truncated(
            "zio_eck trailer",
            ZIO_ECK_SIZE,
            region.len(),
        ));
    }
    let t = &region[region.len() - ZIO_ECK_SIZE..];
    let magic = native_u64(&t[0..8]);
    let byteswapped = if magic == ZEC_MAGIC {
        false
    } else if magic.swap_bytes() == ZEC_MAGIC {
        true
    } else {
        return Err(Error::BadMagic {
            what: "zio_eck trailer".into(),
            found: magic,
        });
    };
    let mut cksum = [0u64; 4];
    for (i, c) in cksum.iter_mut().enumerate() {
        let v = native_u64(&t[8 + 8 * i..16 + 8 * i]);
        *c = if byteswapped { v.swap_bytes() } else { v };
    }
    Ok(Eck { byteswapped, cksum })
}

/// Return a copy of `region` with the trailer's checksum words replaced by `verifier`
/// (written in the region's own byte order), ready to be hashed. Callers hash it with
/// SHA-256 (label/uberblock/gang) and compare with [`Eck::cksum`].
pub fn with_verifier(region: &[u8], verifier: [u64; 4], byteswapped: bool) -> Vec<u8> {
    let mut out = region.to_vec();
    if out.len() < ZIO_ECK_SIZE {
        return out;
    }
    let base = out.len() - ZIO_ECK_SIZE;
    let put = |out: &mut Vec<u8>, off: usize, v: u64| {
        let v = if byteswapped { v.swap_bytes() } else { v };
        out[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    };
    put(&mut out, base, ZEC_MAGIC);
    for (i, w) in verifier.iter().enumerate() {
        put(&mut out, base + 8 + 8 * i, *w);
    }
    out
}

/// Store a computed checksum into the trailer of `region` (host order, magic included).
/// Does nothing if the region is shorter than a trailer.
pub fn set_eck(region: &mut [u8], cksum: [u64; 4]) {
    if region.len() < ZIO_ECK_SIZE {
        return;
    }
    let base = region.len() - ZIO_ECK_SIZE;
    region[base..base + 8].copy_from_slice(&ZEC_MAGIC.to_ne_bytes());
    for (i, w) in cksum.iter().enumerate() {
        region[base + 8 + 8 * i..base + 16 + 8 * i].copy_from_slice(&w.to_ne_bytes());
    }
}

/// A decoded `uberblock_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Uberblock {
    pub byteswapped: bool,
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub rootbp: BlkPtr,
    pub software_version: u64,
    pub mmp_magic: u64,
    pub mmp_delay: u64,
    pub mmp_config: u64,
    pub checkpoint_txg: u64,
}

impl Uberblock {
    /// Decode from the start of a slot; checks `ub_magic` (either order). Fields past byte 168 are
    /// read only if present (zfs-fuse leaves zeros there).
    pub fn parse(slot: &[u8]) -> Result<Uberblock> {
        if slot.len() < UBERBLOCK_OLD_SIZE {
            return Err(Error::truncated(
                "uberblock",
                UBERBLOCK_OLD_SIZE,
                slot.len(),
            ));
        }
        let magic = native_u64(&slot[0..8]);
        let byteswapped = if magic == UBERBLOCK_MAGIC {
            false
        } else if magic.swap_bytes() == UBERBLOCK_MAGIC {
            true
        } else {
            return Err(Error::BadMagic {
                what: "uberblock".into(),
                found: magic,
            });
        };
        let word = |off: usize| -> u64 {
            match slot.get(off..off + 8) {
                Some(b) => {
                    let v = native_u64(b);
                    if byteswapped {
                        v.swap_bytes()
                    } else {
                        v
                    }
                }
                None => 0,
            }
        };
        let rootbp = BlkPtr::from_bytes(&slot[40..40 + BLKPTR_SIZE], byteswapped)?;
        Ok(Uberblock {
            byteswapped,
            version: word(8),
            txg: word(16),
            guid_sum: word(24),
            timestamp: word(32),
            rootbp,
            software_version: word(168),
            mmp_magic: word(176),
            mmp_delay: word(184),
            mmp_config: word(192),
            checkpoint_txg: word(200),
        })
    }
    /// Encode (host order) into the first 216 bytes of a zeroed slot of `slot_size` bytes (trailer NOT filled).
    pub fn encode(&self, slot_size: usize) -> Vec<u8> {
        let mut out = vec![0u8; slot_size.max(UBERBLOCK_SIZE)];
        let mut put = |off: usize, v: u64| out[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        put(0, UBERBLOCK_MAGIC);
        put(8, self.version);
        put(16, self.txg);
        put(24, self.guid_sum);
        put(32, self.timestamp);
        put(168, self.software_version);
        put(176, self.mmp_magic);
        put(184, self.mmp_delay);
        put(192, self.mmp_config);
        put(200, self.checkpoint_txg);
        out[40..40 + BLKPTR_SIZE].copy_from_slice(&self.rootbp.to_bytes());
        out
    }
    /// MMP sequence if valid (for tie-breaking), else 0.
    pub fn mmp_seq(&self) -> u64 {
        if self.mmp_magic == MMP_MAGIC && self.mmp_config & MMP_SEQ_VALID_BIT != 0 {
            (self.mmp_config >> 32) & 0xffff
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_offsets() {
        let psize = aligned_psize(64 * 1024 * 1024 + 1000);
        assert_eq!(psize, 64 * 1024 * 1024);
        assert_eq!(label_offset(psize, 0, VDEV_PHYS_OFFSET), 16 * 1024);
        assert_eq!(label_offset(psize, 1, 0), 256 * 1024);
        assert_eq!(label_offset(psize, 2, 0), psize - 512 * 1024);
        assert_eq!(label_offset(psize, 3, 128 * 1024), psize - 128 * 1024);
        assert_eq!(uberblock_shift(9), 10);
        assert_eq!(uberblock_shift(12), 12);
        assert_eq!(uberblock_shift(16), 13);
    }

    #[test]
    fn eck_native_and_swapped() {
        let mut region = vec![0xAAu8; 1024];
        set_eck(&mut region, [1, 2, 3, 4]);
        let e = parse_eck(&region).unwrap();
        assert!(!e.byteswapped);
        assert_eq!(e.cksum, [1, 2, 3, 4]);
        // Golden bytes on a little-endian host: magic 11 7a 0c b1 7a da 10 02.
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(
                &region[1024 - 40..1024 - 32],
                &[0x11, 0x7a, 0x0c, 0xb1, 0x7a, 0xda, 0x10, 0x02]
            );
        }
        let v = with_verifier(&region, [0x4000, 0, 0, 0], false);
        assert_eq!(&v[..984], &region[..984]);
        assert_eq!(native_u64(&v[1024 - 32..]), 0x4000);
        assert_eq!(native_u64(&v[1024 - 40..]), ZEC_MAGIC);

        // A region written by the other endianness.
        let mut other = vec![0u8; 512];
        let b = 512 - 40;
        other[b..b + 8].copy_from_slice(&ZEC_MAGIC.swap_bytes().to_ne_bytes());
        other[b + 8..b + 16].copy_from_slice(&7u64.swap_bytes().to_ne_bytes());
        let e = parse_eck(&other).unwrap();
        assert!(e.byteswapped);
        assert_eq!(e.cksum[0], 7);
        let v = with_verifier(&other, [0x20000, 0, 0, 0], true);
        assert_eq!(native_u64(&v[b + 8..]).swap_bytes(), 0x20000);
        assert_eq!(native_u64(&v[b..]).swap_bytes(), ZEC_MAGIC);

        assert!(parse_eck(&[0u8; 100]).is_err());
        assert!(parse_eck(&[0u8; 10]).is_err());
    }

    fn sample_ub() -> Uberblock {
        let mut bp = BlkPtr::default();
        bp.words[0] = 1;
        bp.words[1] = 0x25;
        bp.words[6] = 0x8003_0b07_0003_0003;
        bp.words[10] = 4;
        bp.words[11] = 30;
        Uberblock {
            byteswapped: false,
            version: 23,
            txg: 4,
            guid_sum: 0xdead_beef_1234,
            timestamp: 1_700_000_000,
            rootbp: bp,
            software_version: 5000,
            mmp_magic: MMP_MAGIC,
            mmp_delay: 0,
            mmp_config: (5u64 << 32) | MMP_SEQ_VALID_BIT,
            checkpoint_txg: 0,
        }
    }

    #[test]
    fn uberblock_round_trip() {
        let ub = sample_ub();
        let slot = ub.encode(1024);
        assert_eq!(slot.len(), 1024);
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(&slot[0..8], &[0x0c, 0xb1, 0xba, 0, 0, 0, 0, 0]);
            assert_eq!(slot[8], 23);
            assert_eq!(slot[16], 4);
        }
        let back = Uberblock::parse(&slot).unwrap();
        assert_eq!(back, ub);
        assert_eq!(back.mmp_seq(), 5);
        // zfs-fuse sized struct: tail fields read as zero.
        let short = Uberblock::parse(&slot[..168]).unwrap();
        assert_eq!(short.software_version, 0);
        assert_eq!(short.mmp_seq(), 0);
        assert!(Uberblock::parse(&slot[..100]).is_err());
        assert!(Uberblock::parse(&[0u8; 1024]).is_err());
    }

    #[test]
    fn uberblock_byteswapped() {
        let ub = sample_ub();
        let slot = ub.encode(1024);
        let mut sw = slot.clone();
        for c in sw[..216].chunks_mut(8) {
            c.reverse();
        }
        let back = Uberblock::parse(&sw).unwrap();
        assert!(back.byteswapped);
        assert_eq!(back.txg, 4);
        assert_eq!(back.rootbp, ub.rootbp);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 88172645463325252;
        let mut buf = vec![0u8; 1024];
        for i in 0..2000 {
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if i % 2 == 0 {
                buf[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_ne_bytes());
            }
            let n = (x as usize) % buf.len();
            let _ = Uberblock::parse(&buf[..n]).map(|u| (u.mmp_seq(), u.rootbp.to_zdb_string()));
            let _ = parse_eck(&buf[..n]);
        }
    }
}
