//! Space-map entries: the on-disk log of allocations and frees of a metaslab.
//!
//! A space map object (DMU type SPACE_MAP) is an append-only array of 64-bit
//! words in the writer's byte order (FORMAT §6.5). Replaying it from the start
//! — ALLOC adds a range, FREE removes one — yields the set of allocated bytes
//! of its metaslab. Offsets and run lengths are stored in units of
//! `2^sm_shift` bytes (the vdev's ashift) and offsets are relative to the
//! metaslab start. This module converts between those words and [`SmEntry`]
//! values whose offsets and lengths are in **bytes** (still metaslab-relative).
//!
//! Word forms (bits numbered from 0 = least significant):
//! * debug: bits 63–62 = `10`, 61–60 action (0 ALLOC, 1 FREE), 59–50 sync
//!   pass, 49–0 txg. Purely informational; an all-zero debug word (only bit 63
//!   set) is padding and is dropped by [`decode`].
//! * one-word entry: bit 63 = 0, 62–16 offset (47 bits), bit 15 type
//!   (0 ALLOC, 1 FREE), 14–0 run − 1 (so at most 32768 units).
//! * two-word entry (`spacemap_v2`, never written by pool v23): first word
//!   bits 63–62 = `11`, 59–24 run − 1 (36 bits), 23–0 vdev id; second word
//!   bit 63 type, 62–0 offset. The vdev id only matters in pool-wide log space
//!   maps; in a metaslab's own map it is ignored here.
//!
//! [`encode`] writes only debug and one-word entries, which every pool version
//! reads; a long run is split into several consecutive one-word entries. The
//! caller supplies the debug words (OpenZFS writes one before each batch of
//! ALLOC or FREE entries of a sync pass; the metaslab layer does the same).
//!
//! The bonus of a space map object is [`SpaceMapHeader`]: for pool v23 just
//! the 24 bytes `smp_object`, `smp_length` (valid bytes of entries),
//! `smp_alloc` (net allocated bytes, signed). The histogram that newer pools
//! append is not used.

use crate::range::RangeSet;
use ozfs_format::{Error, Result};

/// Debug action / entry type: allocation.
pub const SM_ALLOC: u8 = 0;
/// Debug action / entry type: free.
pub const SM_FREE: u8 = 1;
/// Longest run of one one-word entry, in units.
pub const SM_RUN_MAX: u64 = 1 << 15;
/// Width of the offset field of a one-word entry.
pub const SM_OFFSET_BITS: u32 = 47;
/// Largest txg a debug word can carry.
pub const SM_DEBUG_TXG_MAX: u64 = (1 << 50) - 1;
/// Largest sync pass a debug word can carry.
pub const SM_DEBUG_PASS_MAX: u64 = (1 << 10) - 1;
/// Size of the v23 space map bonus (`space_map_phys_t` without histogram).
pub const SPACE_MAP_HEADER_SIZE: usize = 24;

/// One decoded space-map record. Offsets and lengths are in bytes, relative to
/// the metaslab start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmEntry {
    Alloc { offset: u64, len: u64 },
    Free { offset: u64, len: u64 },
    Debug { action: u8, pass: u64, txg: u64 },
}

fn corrupt(detail: String) -> Error {
    Error::Corrupt {
        what: "space map".into(),
        detail,
    }
}

fn units_to_bytes(units: u64, sm_shift: u32, word: usize) -> Result<u64> {
    units.checked_mul(1u64 << sm_shift).ok_or_else(|| {
        corrupt(format!(
            "word {word}: value {units:#x} overflows at shift {sm_shift}"
        ))
    })
}

/// Decode a space map's valid bytes (`smp_length` of them). `swap` means the
/// words are in the opposite byte order of this host. Padding debug words are
/// dropped; other debug words are returned as [`SmEntry::Debug`].
pub fn decode(data: &[u8], swap: bool, sm_shift: u32) -> Result<Vec<SmEntry>> {
    Ok(decode_inner(data, swap, sm_shift)?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

/// Decode a *log* space map (the `log_spacemap` feature: one per synced
/// txg, shared by every metaslab of the pool, in 512-byte units from the
/// start of each vdev): each allocation or free with the top-level vdev
/// its two-word entry names. A one-word entry (which names no vdev) is
/// corrupt here.
pub fn decode_log(data: &[u8], swap: bool) -> Result<Vec<(u64, SmEntry)>> {
    let mut out = Vec::new();
    for (n, (vdev, e)) in decode_inner(data, swap, 9)?.into_iter().enumerate() {
        match (vdev, e) {
            (_, SmEntry::Debug { .. }) => {}
            (Some(v), e) => out.push((v, e)),
            (None, _) => {
                return Err(corrupt(format!(
                    "log space map entry {n} names no vdev (a one-word entry)"
                )))
            }
        }
    }
    Ok(out)
}

/// The entries, each with the vdev id of a two-word entry.
fn decode_inner(data: &[u8], swap: bool, sm_shift: u32) -> Result<Vec<(Option<u64>, SmEntry)>> {
    if sm_shift >= 64 {
        return Err(corrupt(format!("sm_shift {sm_shift} too large")));
    }
    if data.len() & 7 != 0 {
        return Err(corrupt(format!(
            "length {} is not a multiple of 8",
            data.len()
        )));
    }
    let words: Vec<u64> = data
        .chunks_exact(8)
        .map(|c| {
            let v = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        })
        .collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        match w >> 62 {
            0b10 => {
                let action = ((w >> 60) & 3) as u8;
                let pass = (w >> 50) & SM_DEBUG_PASS_MAX;
                let txg = w & SM_DEBUG_TXG_MAX;
                if action != 0 || pass != 0 || txg != 0 {
                    out.push((None, SmEntry::Debug { action, pass, txg }));
                }
                i += 1;
            }
            0b11 => {
                let Some(&w2) = words.get(i + 1) else {
                    return Err(corrupt(format!(
                        "word {i}: two-word entry cut short by the end of the map"
                    )));
                };
                let run = ((w >> 24) & ((1u64 << 36) - 1)) + 1;
                let offset = w2 & ((1u64 << 63) - 1);
                let len = units_to_bytes(run, sm_shift, i)?;
                let offset = units_to_bytes(offset, sm_shift, i)?;
                let vdev = w & ((1u64 << 24) - 1);
                out.push((
                    Some(vdev),
                    if w2 >> 63 == 0 {
                        SmEntry::Alloc { offset, len }
                    } else {
                        SmEntry::Free { offset, len }
                    },
                ));
                i += 2;
            }
            _ => {
                let run = (w & 0x7fff) + 1;
                let offset = (w >> 16) & ((1u64 << SM_OFFSET_BITS) - 1);
                let len = units_to_bytes(run, sm_shift, i)?;
                let offset = units_to_bytes(offset, sm_shift, i)?;
                out.push((
                    None,
                    if (w >> 15) & 1 == 0 {
                        SmEntry::Alloc { offset, len }
                    } else {
                        SmEntry::Free { offset, len }
                    },
                ));
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Encode entries as debug and one-word words in host byte order. Errors if
/// an offset or length is not a multiple of `2^sm_shift`, a length is 0, an
/// offset does not fit 47 bits of units, or a debug field is out of range.
pub fn encode(entries: &[SmEntry], sm_shift: u32) -> Result<Vec<u8>> {
    let words = encode_words(entries, sm_shift)?;
    let mut out = Vec::with_capacity(words.len() * 8);
    for w in words {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    Ok(out)
}

/// [`encode`], returning the words instead of their bytes.
pub fn encode_words(entries: &[SmEntry], sm_shift: u32) -> Result<Vec<u64>> {
    if sm_shift >= 64 {
        return Err(Error::Invalid(format!("sm_shift {sm_shift} too large")));
    }
    let unit = 1u64 << sm_shift;
    let mut out = Vec::with_capacity(entries.len() + entries.len() / 4);
    for (n, e) in entries.iter().enumerate() {
        let (offset, len, ty) = match *e {
            SmEntry::Debug { action, pass, txg } => {
                if action > 3 || pass > SM_DEBUG_PASS_MAX || txg > SM_DEBUG_TXG_MAX {
                    return Err(Error::Invalid(format!(
                        "space map entry {n}: debug fields out of range (action {action}, pass {pass}, txg {txg})"
                    )));
                }
                out.push((0b10u64 << 62) | (u64::from(action) << 60) | (pass << 50) | txg);
                continue;
            }
            SmEntry::Alloc { offset, len } => (offset, len, 0u64),
            SmEntry::Free { offset, len } => (offset, len, 1u64),
        };
        if len == 0 || offset & (unit - 1) != 0 || len & (unit - 1) != 0 {
            return Err(Error::Invalid(format!(
                "space map entry {n}: {offset:#x}+{len:#x} is not a nonempty multiple of {unit:#x}"
            )));
        }
        let mut off_u = offset >> sm_shift;
        let mut run_u = len >> sm_shift;
        while run_u > 0 {
            if off_u >> SM_OFFSET_BITS != 0 {
                return Err(Error::Invalid(format!(
                    "space map entry {n}: offset {offset:#x} does not fit {SM_OFFSET_BITS} bits of units"
                )));
            }
            let r = run_u.min(SM_RUN_MAX);
            out.push((off_u << 16) | (ty << 15) | (r - 1));
            off_u += r;
            run_u -= r;
        }
    }
    Ok(out)
}

/// Replay entries into the allocated set (metaslab-relative byte offsets).
/// Errors, as zdb would complain, on an ALLOC of anything already allocated or
/// a FREE of anything not allocated.
pub fn replay(entries: &[SmEntry]) -> Result<RangeSet> {
    let mut set = RangeSet::new();
    replay_into(&mut set, entries, 0)?;
    Ok(set)
}

/// Replay entries into `set`, adding `base` to every offset.
pub fn replay_into(set: &mut RangeSet, entries: &[SmEntry], base: u64) -> Result<()> {
    for (n, e) in entries.iter().enumerate() {
        match *e {
            SmEntry::Alloc { offset, len } => set
                .add(base.saturating_add(offset), len)
                .map_err(|err| corrupt(format!("entry {n}: ALLOC {offset:#x}+{len:#x}: {err}")))?,
            SmEntry::Free { offset, len } => set
                .remove(base.saturating_add(offset), len)
                .map_err(|err| corrupt(format!("entry {n}: FREE {offset:#x}+{len:#x}: {err}")))?,
            SmEntry::Debug { .. } => {}
        }
    }
    Ok(())
}

/// Net allocated bytes of entries (Σ ALLOC − Σ FREE): the change to `smp_alloc`.
pub fn net_alloc(entries: &[SmEntry]) -> i64 {
    entries.iter().fold(0i64, |acc, e| match *e {
        SmEntry::Alloc { len, .. } => acc.wrapping_add(len as i64),
        SmEntry::Free { len, .. } => acc.wrapping_sub(len as i64),
        SmEntry::Debug { .. } => acc,
    })
}

/// Number of 64-bit words [`encode`] produces for `entries` (for size estimates).
pub fn encoded_words(entries: &[SmEntry], sm_shift: u32) -> u64 {
    entries
        .iter()
        .map(|e| match *e {
            SmEntry::Debug { .. } => 1,
            SmEntry::Alloc { len, .. } | SmEntry::Free { len, .. } => {
                (len >> sm_shift.min(63)).div_ceil(SM_RUN_MAX).max(1)
            }
        })
        .sum()
}

/// The bonus of a space map object (`space_map_phys_t`, first three fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceMapHeader {
    /// `smp_object`: the space map's own object number.
    pub object: u64,
    /// `smp_length`: bytes of valid entries.
    pub length: u64,
    /// `smp_alloc`: net allocated bytes.
    pub alloc: i64,
}

impl SpaceMapHeader {
    /// Parse from a bonus buffer (24 bytes, or the 320-byte form of newer pools).
    pub fn parse(bonus: &[u8], swap: bool) -> Result<Self> {
        use ozfs_format::bytes::u64_at;
        Ok(Self {
            object: u64_at(bonus, 0, swap, "space map header")?,
            length: u64_at(bonus, 8, swap, "space map header")?,
            alloc: u64_at(bonus, 16, swap, "space map header")? as i64,
        })
    }

    /// The 24-byte v23 bonus in host byte order.
    pub fn encode(&self) -> [u8; SPACE_MAP_HEADER_SIZE] {
        let mut out = [0u8; SPACE_MAP_HEADER_SIZE];
        out[0..8].copy_from_slice(&self.object.to_ne_bytes());
        out[8..16].copy_from_slice(&self.length.to_ne_bytes());
        out[16..24].copy_from_slice(&self.alloc.to_ne_bytes());
        out
    }

    /// Account for `bytes` of newly appended encoded entries.
    pub fn append(&mut self, entries: &[SmEntry], bytes: u64) {
        self.length += bytes;
        self.alloc = self.alloc.wrapping_add(net_alloc(entries));
    }

    /// Write the three header fields over the start of `bonus` (24 bytes,
    /// or the 320-byte `space_map_phys_t`, whose histogram is left alone).
    pub fn store(&self, bonus: &mut Vec<u8>) {
        if bonus.len() < SPACE_MAP_HEADER_SIZE {
            bonus.resize(SPACE_MAP_HEADER_SIZE, 0);
        }
        bonus[..SPACE_MAP_HEADER_SIZE].copy_from_slice(&self.encode());
    }
}

/// Size of the whole `space_map_phys_t` (`spacemap_histogram`): the header,
/// five pad words and [`SPACE_MAP_HISTOGRAM_SIZE`] histogram buckets.
pub const SPACE_MAP_PHYS_SIZE: usize = 320;
/// Buckets of a space map's free-segment histogram.
pub const SPACE_MAP_HISTOGRAM_SIZE: usize = 32;
/// Byte offset of the histogram in `space_map_phys_t`.
const SPACE_MAP_HISTOGRAM_OFFSET: usize = 64;

/// A space map's histogram of free segments (`smp_histogram`), as OpenZFS
/// keeps it with `spacemap_histogram` active: bucket `i` counts free
/// segments of `2^(i + sm_shift)` up to twice that; segments smaller than
/// `2^sm_shift` are not counted, and those beyond the last bucket are
/// counted in it, each as `2^(k - 31 - sm_shift)` segments of its size
/// (where `2^k` is the segment's bucket), so the bucket still sums space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmHistogram(pub [u64; SPACE_MAP_HISTOGRAM_SIZE]);

impl SmHistogram {
    pub fn new() -> Self {
        SmHistogram([0; SPACE_MAP_HISTOGRAM_SIZE])
    }

    /// Count one free segment of `len` bytes.
    pub fn add(&mut self, len: u64, sm_shift: u32) {
        if len == 0 {
            return;
        }
        let k = 63 - len.leading_zeros();
        if k < sm_shift {
            return;
        }
        let last = SPACE_MAP_HISTOGRAM_SIZE as u32 - 1;
        let idx = (k - sm_shift).min(last);
        let scale = k - sm_shift - idx;
        let slot = &mut self.0[idx as usize];
        *slot = slot.saturating_add(1u64.checked_shl(scale).unwrap_or(u64::MAX));
    }

    /// Store into a 320-byte bonus (host byte order); a 24-byte bonus (no
    /// histogram, the feature inactive when it was made) is left alone.
    pub fn store(&self, bonus: &mut [u8]) {
        if bonus.len() < SPACE_MAP_PHYS_SIZE {
            return;
        }
        for (i, v) in self.0.iter().enumerate() {
            let at = SPACE_MAP_HISTOGRAM_OFFSET + i * 8;
            bonus[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
    }
}

impl Default for SmHistogram {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of(bytes: &[u8]) -> Vec<u64> {
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn golden_one_word_entries() {
        // ALLOC offset 0x2000 len 0x1000 at sm_shift 9: offset 0x10 units, run 8.
        // word = 0x10 << 16 | 0 << 15 | (8 - 1)
        let e = [SmEntry::Alloc {
            offset: 0x2000,
            len: 0x1000,
        }];
        assert_eq!(
            words_of(&encode(&e, 9).unwrap()),
            vec![0x0000_0000_0010_0007]
        );
        let e = [SmEntry::Free {
            offset: 0x2000,
            len: 0x1000,
        }];
        assert_eq!(
            words_of(&encode(&e, 9).unwrap()),
            vec![0x0000_0000_0010_8007]
        );
        // Debug: action FREE, pass 1, txg 4 = 1<<63 | 1<<60 | 1<<50 | 4.
        let e = [SmEntry::Debug {
            action: SM_FREE,
            pass: 1,
            txg: 4,
        }];
        assert_eq!(
            words_of(&encode(&e, 9).unwrap()),
            vec![0x9004_0000_0000_0004]
        );
        // ashift 12: ALLOC offset 0x7ff000 len 0x20000 -> offset 0x7ff, run 32.
        let e = [SmEntry::Alloc {
            offset: 0x7f_f000,
            len: 0x2_0000,
        }];
        assert_eq!(
            words_of(&encode(&e, 12).unwrap()),
            vec![0x0000_0000_07ff_001f]
        );
        for sh in [9, 12] {
            let e = [
                SmEntry::Debug {
                    action: 0,
                    pass: 3,
                    txg: 123456,
                },
                SmEntry::Alloc {
                    offset: 0x7f_f000,
                    len: 0x2_0000,
                },
                SmEntry::Free {
                    offset: 0,
                    len: 1 << sh,
                },
            ];
            assert_eq!(decode(&encode(&e, sh).unwrap(), false, sh).unwrap(), e);
        }
    }

    #[test]
    fn long_runs_are_split() {
        let sh = 9;
        let len = (SM_RUN_MAX * 2 + 5) << sh;
        let e = [SmEntry::Alloc { offset: 512, len }];
        let w = encode_words(&e, sh).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(encoded_words(&e, sh), 3);
        assert_eq!(w[0], (1 << 16) | 0x7fff);
        assert_eq!(w[1], ((1 + SM_RUN_MAX) << 16) | 0x7fff);
        assert_eq!(w[2], ((1 + 2 * SM_RUN_MAX) << 16) | 4);
        let d = decode(&encode(&e, sh).unwrap(), false, sh).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(replay(&d).unwrap(), replay(&e).unwrap());
        assert_eq!(net_alloc(&d), len as i64);
    }

    #[test]
    fn encode_rejects_bad_entries() {
        let bad = |e: SmEntry| encode(&[e], 9).is_err();
        assert!(bad(SmEntry::Alloc {
            offset: 0x100,
            len: 0x200
        }));
        assert!(bad(SmEntry::Alloc {
            offset: 0x200,
            len: 0x300
        }));
        assert!(bad(SmEntry::Free { offset: 0, len: 0 }));
        assert!(bad(SmEntry::Alloc {
            offset: 1 << (47 + 9),
            len: 512
        }));
        assert!(!bad(SmEntry::Alloc {
            offset: ((1 << 47) - 1) << 9,
            len: 512
        }));
        assert!(bad(SmEntry::Debug {
            action: 0,
            pass: 1024,
            txg: 1
        }));
        assert!(bad(SmEntry::Debug {
            action: 0,
            pass: 1,
            txg: 1 << 50
        }));
    }

    #[test]
    fn decode_two_word_padding_and_swap() {
        let sh = 12;
        // Two-word FREE: run 100000 units, vdev 0, offset 0x12345 units.
        let w1 = (0b11u64 << 62) | ((100_000u64 - 1) << 24);
        let w2 = (1u64 << 63) | 0x12345;
        // Two-word ALLOC with a vdev id (ignored), offset 7, run 1.
        let w3 = (0b11u64 << 62) | 5;
        let w4 = 7u64;
        let pad = 1u64 << 63;
        let words = [
            0x8004_0000_0000_0009u64, // debug ALLOC pass 1 txg 9
            w3,
            w4,
            pad,
            w1,
            w2,
            0x0000_0000_0001_0000, // one-word ALLOC offset 1 run 1
        ];
        let mut bytes = Vec::new();
        for w in words {
            bytes.extend_from_slice(&w.to_ne_bytes());
        }
        let expect = vec![
            SmEntry::Debug {
                action: 0,
                pass: 1,
                txg: 9,
            },
            SmEntry::Alloc {
                offset: 7 << sh,
                len: 1 << sh,
            },
            SmEntry::Free {
                offset: 0x12345 << sh,
                len: 100_000 << sh,
            },
            SmEntry::Alloc {
                offset: 1 << sh,
                len: 1 << sh,
            },
        ];
        assert_eq!(decode(&bytes, false, sh).unwrap(), expect);
        let swapped: Vec<u8> = words
            .iter()
            .flat_map(|w| w.swap_bytes().to_ne_bytes())
            .collect();
        assert_eq!(decode(&swapped, true, sh).unwrap(), expect);
        // Truncated two-word entry, ragged length.
        assert!(decode(&bytes[..5 * 8], false, sh).is_err());
        assert!(decode(&bytes[..13], false, sh).is_err());
        // Offsets that overflow in bytes.
        let huge = [(0b11u64 << 62), (1u64 << 62)];
        let hb: Vec<u8> = huge.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert!(decode(&hb, false, sh).is_err());
    }

    #[test]
    fn replay_detects_double_alloc_and_free() {
        let a = |o, l| SmEntry::Alloc { offset: o, len: l };
        let f = |o, l| SmEntry::Free { offset: o, len: l };
        let set = replay(&[a(0, 0x4000), f(0x1000, 0x1000), a(0x1000, 0x800)]).unwrap();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            vec![(0, 0x1800), (0x2000, 0x2000)]
        );
        assert!(replay(&[a(0, 0x4000), a(0x3000, 0x2000)]).is_err());
        assert!(replay(&[a(0, 0x4000), f(0x3000, 0x2000)]).is_err());
        assert!(replay(&[f(0, 0x200)]).is_err());
    }

    #[test]
    fn header_roundtrip() {
        let h = SpaceMapHeader {
            object: 42,
            length: 4096,
            alloc: -512,
        };
        let b = h.encode();
        assert_eq!(SpaceMapHeader::parse(&b, false).unwrap(), h);
        let mut sw = [0u8; 24];
        for i in 0..3 {
            let v = u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            sw[i * 8..i * 8 + 8].copy_from_slice(&v.swap_bytes().to_ne_bytes());
        }
        assert_eq!(SpaceMapHeader::parse(&sw, true).unwrap(), h);
        assert!(SpaceMapHeader::parse(&b[..20], false).is_err());
        let mut h2 = SpaceMapHeader::default();
        let e = [
            SmEntry::Alloc {
                offset: 0,
                len: 0x3000,
            },
            SmEntry::Free {
                offset: 0,
                len: 0x1000,
            },
        ];
        h2.append(&e, 16);
        assert_eq!((h2.length, h2.alloc), (16, 0x2000));
    }

    /// Buckets as OpenZFS's `space_map_histogram_add` fills them (sm_shift
    /// 12): a segment counts in the bucket of its highest bit less the
    /// shift; below 2^12 nothing; past the 32nd bucket, scaled into it.
    #[test]
    fn histogram_buckets() {
        let mut h = SmHistogram::new();
        for len in [0x800, 0x1000, 0x1fff, 0x2000, 0x6000, 1 << 43, 1 << 45] {
            h.add(len, 12);
        }
        let mut want = [0u64; SPACE_MAP_HISTOGRAM_SIZE];
        want[0] = 2; // 0x1000, 0x1fff (0x800 is below the shift)
        want[1] = 1; // 0x2000
        want[2] = 1; // 0x6000
        want[31] = 1 + 4; // 2^43 is the last bucket; 2^45 counts as 4 of it
        assert_eq!(h.0, want);
        let mut bonus = vec![0xAAu8; SPACE_MAP_PHYS_SIZE];
        h.store(&mut bonus);
        assert_eq!(&bonus[..64], &[0xAAu8; 64][..], "header and pad untouched");
        assert_eq!(u64::from_ne_bytes(bonus[64..72].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(bonus[312..320].try_into().unwrap()), 5);
        let mut short = vec![0u8; SPACE_MAP_HEADER_SIZE];
        h.store(&mut short);
        assert_eq!(
            short,
            vec![0u8; SPACE_MAP_HEADER_SIZE],
            "no histogram in a v0 bonus"
        );
    }
}
