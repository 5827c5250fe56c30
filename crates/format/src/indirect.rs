//! Device removal as OpenZFS keeps it on disk: the indirect vdev's mapping.
//!
//! Theory. `zpool remove` of a top-level vdev copies its allocated
//! segments to the other top-level vdevs and then turns it into an
//! *indirect* vdev: type `indirect` in the config, no device behind it, and
//! `com.delphix:indirect_object` naming a MOS object, the *mapping*. Block
//! pointers are not rewritten: a DVA naming the removed vdev keeps its old
//! offset, and every read of it is translated through the mapping.
//!
//! The mapping object is an array of 24-byte entries, sorted by source
//! offset, each three u64 words:
//! * word 0 (`vimep_src`): the source offset in 512-byte sectors in the low
//!   63 bits; bit 63 is a mark zdb uses, ignored here;
//! * words 1–2 (`vimep_dst`): a DVA — where the segment now lives (vdev,
//!   offset) and, in its ASIZE field, the segment's length.
//!
//! Its bonus buffer (`vdev_indirect_mapping_phys_t`) holds the highest
//! source offset mapped (`vimp_max_offset`), the bytes mapped, the number
//! of entries and, with `obsolete_counts`, the object of per-entry
//! obsolete counts (not needed to read). The births object
//! (`com.delphix:indirect_births`) tells when entries were copied; reads
//! do not need it.
//!
//! Segments were copied where space was allocated, so a block's range
//! `[offset, offset + size)` is covered by one entry or, when the copy
//! split it, by several adjacent entries whose pieces are read from their
//! destinations and reassembled. A destination may itself be an indirect
//! vdev (a second removal): the caller translates again.
//!
//! Invariants (checked by [`IndirectMapping::new`] before any lookup):
//! entries are sorted by source offset and do not overlap, every entry has
//! a non-zero length and ends at or below `vimp_max_offset`, the entry
//! count is the bonus's. [`IndirectMapping::lookup`] returns pieces that
//! exactly tile the asked range, or an error naming the first hole.

use crate::blkptr::Dva;
use crate::bytes::u64_at;
use crate::error::{Error, Result};

/// Bytes of one mapping entry (`vdev_indirect_mapping_entry_phys_t`).
pub const MAPPING_ENTRY_SIZE: usize = 24;

/// The mapping object's bonus (`vdev_indirect_mapping_phys_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MappingPhys {
    /// End of the highest source segment mapped.
    pub max_offset: u64,
    pub bytes_mapped: u64,
    pub num_entries: u64,
    /// Object of obsolete counts (`obsolete_counts`), 0 when absent.
    pub counts_object: u64,
}

impl MappingPhys {
    /// Decode the bonus (24 bytes, or 32 with the counts object).
    pub fn parse(bonus: &[u8], swap: bool) -> Result<MappingPhys> {
        let what = "indirect mapping bonus";
        Ok(MappingPhys {
            max_offset: u64_at(bonus, 0, swap, what)?,
            bytes_mapped: u64_at(bonus, 8, swap, what)?,
            num_entries: u64_at(bonus, 16, swap, what)?,
            counts_object: if bonus.len() >= 32 {
                u64_at(bonus, 24, swap, what)?
            } else {
                0
            },
        })
    }
}

/// One mapping entry: `[src, src + dst.asize)` of the indirect vdev now
/// lives at `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingEntry {
    /// Source offset in bytes.
    pub src: u64,
    /// Destination; `asize` is the segment's length.
    pub dst: Dva,
}

impl MappingEntry {
    /// Decode from the three words (already in host order).
    pub fn from_words(w: [u64; 3]) -> MappingEntry {
        MappingEntry {
            src: (w[0] & !(1u64 << 63)).wrapping_shl(9),
            dst: Dva::from_words(w[1], w[2]),
        }
    }

    /// The entry's source end (saturating: checked by `IndirectMapping::new`).
    pub fn src_end(&self) -> u64 {
        self.src.saturating_add(self.dst.asize)
    }
}

/// A piece of a translated range: `len` bytes read at `offset` of top-level
/// vdev `vdev`, landing at `at` in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub vdev: u64,
    pub offset: u64,
    pub len: u64,
    pub at: u64,
}

/// The mapping of one indirect vdev, checked (see the module invariants).
#[derive(Debug, Clone, Default)]
pub struct IndirectMapping {
    /// Top-level vdev id of the indirect vdev (for messages).
    pub vdev: u64,
    pub phys: MappingPhys,
    entries: Vec<MappingEntry>,
}

impl IndirectMapping {
    /// Decode `data` (the object's contents, `num_entries` × 24 bytes at
    /// least; its blocks' byte order is `swap`) and check it.
    pub fn parse(vdev: u64, phys: MappingPhys, data: &[u8], swap: bool) -> Result<IndirectMapping> {
        let what = format!("indirect vdev {vdev}: mapping");
        let n = usize::try_from(phys.num_entries)
            .ok()
            .filter(|n| {
                n.checked_mul(MAPPING_ENTRY_SIZE)
                    .is_some_and(|b| b <= data.len())
            })
            .ok_or_else(|| {
                Error::corrupt(
                    &what,
                    format!(
                        "{} entries declared, object holds {} bytes",
                        phys.num_entries,
                        data.len()
                    ),
                )
            })?;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let o = i * MAPPING_ENTRY_SIZE;
            let w = [
                u64_at(data, o, swap, &what)?,
                u64_at(data, o + 8, swap, &what)?,
                u64_at(data, o + 16, swap, &what)?,
            ];
            entries.push(MappingEntry::from_words(w));
        }
        Self::new(vdev, phys, entries)
    }

    /// Check entries already decoded (see the module invariants).
    pub fn new(
        vdev: u64,
        phys: MappingPhys,
        entries: Vec<MappingEntry>,
    ) -> Result<IndirectMapping> {
        let what = format!("indirect vdev {vdev}: mapping");
        if entries.len() as u64 != phys.num_entries {
            return Err(Error::corrupt(
                &what,
                format!("{} entries, bonus says {}", entries.len(), phys.num_entries),
            ));
        }
        let mut prev_end = 0u64;
        for (i, e) in entries.iter().enumerate() {
            let bad = |why: String| {
                Error::corrupt(
                    &what,
                    format!(
                        "entry {i} (<{:#x}+{:#x}> -> <{}:{:#x}>): {why}",
                        e.src, e.dst.asize, e.dst.vdev, e.dst.offset
                    ),
                )
            };
            if e.dst.asize == 0 {
                return Err(bad("empty segment".into()));
            }
            let end = e
                .src
                .checked_add(e.dst.asize)
                .ok_or_else(|| bad("source range overflows".into()))?;
            if e.dst.offset.checked_add(e.dst.asize).is_none() {
                return Err(bad("destination range overflows".into()));
            }
            if i > 0 && e.src < prev_end {
                return Err(bad(format!(
                    "not sorted: starts before the end of the previous entry ({prev_end:#x})"
                )));
            }
            if end > phys.max_offset {
                return Err(bad(format!(
                    "beyond the mapping's max offset {:#x}",
                    phys.max_offset
                )));
            }
            if e.dst.vdev == vdev {
                return Err(bad("points at the removed vdev itself".into()));
            }
            prev_end = end;
        }
        Ok(IndirectMapping {
            vdev,
            phys,
            entries,
        })
    }

    pub fn entries(&self) -> &[MappingEntry] {
        &self.entries
    }

    /// The pieces holding `[offset, offset + size)` of the indirect vdev,
    /// in order; they tile the range exactly. A part of the range no entry
    /// covers is an error naming it.
    pub fn lookup(&self, offset: u64, size: u64) -> Result<Vec<Piece>> {
        let what = format!("indirect vdev {}", self.vdev);
        let end = offset.checked_add(size).ok_or_else(|| {
            Error::corrupt(&what, format!("range {offset:#x}+{size:#x} overflows"))
        })?;
        // The first entry ending after `offset`.
        let mut i = self.entries.partition_point(|e| e.src_end() <= offset);
        let mut pos = offset;
        let mut out = Vec::new();
        while pos < end {
            let Some(e) = self.entries.get(i).filter(|e| e.src <= pos) else {
                let next = self.entries.get(i).map_or(end, |e| e.src.min(end));
                return Err(Error::corrupt(
                    &what,
                    format!(
                        "{:#x}..{next:#x} of the block at {offset:#x}+{size:#x} is not in the \
                         removal mapping",
                        pos
                    ),
                ));
            };
            let take = e.src_end().min(end) - pos;
            out.push(Piece {
                vdev: e.dst.vdev,
                offset: e.dst.offset + (pos - e.src),
                len: take,
                at: pos - offset,
            });
            pos += take;
            i += 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(src: u64, len: u64, vdev: u64, dst: u64) -> MappingEntry {
        MappingEntry {
            src,
            dst: Dva {
                vdev,
                offset: dst,
                asize: len,
                gang: false,
            },
        }
    }

    fn phys(max: u64, n: u64) -> MappingPhys {
        MappingPhys {
            max_offset: max,
            num_entries: n,
            ..Default::default()
        }
    }

    fn mapping() -> IndirectMapping {
        IndirectMapping::new(
            1,
            phys(0x10000, 3),
            vec![
                entry(0x0, 0x2000, 0, 0x40000),
                entry(0x2000, 0x1000, 0, 0x90000),
                // a hole at 0x3000..0x8000
                entry(0x8000, 0x8000, 2, 0x1000),
            ],
        )
        .expect("valid mapping")
    }

    #[test]
    fn a_block_inside_one_entry_is_one_piece() {
        let p = mapping().lookup(0x800, 0x1000).unwrap();
        assert_eq!(
            p,
            vec![Piece {
                vdev: 0,
                offset: 0x40800,
                len: 0x1000,
                at: 0
            }]
        );
        let p = mapping().lookup(0x9000, 0x7000).unwrap();
        assert_eq!(
            p,
            vec![Piece {
                vdev: 2,
                offset: 0x2000,
                len: 0x7000,
                at: 0
            }]
        );
    }

    #[test]
    fn a_block_split_over_two_entries_is_reassembled_in_order() {
        let p = mapping().lookup(0x1800, 0x1000).unwrap();
        assert_eq!(
            p,
            vec![
                Piece {
                    vdev: 0,
                    offset: 0x41800,
                    len: 0x800,
                    at: 0
                },
                Piece {
                    vdev: 0,
                    offset: 0x90000,
                    len: 0x800,
                    at: 0x800
                },
            ]
        );
    }

    #[test]
    fn a_hole_in_the_mapping_is_an_error_naming_it() {
        let e = mapping().lookup(0x2800, 0x1000).unwrap_err().to_string();
        assert!(e.contains("0x3000..0x3800"), "{e}");
        assert!(e.contains("not in the removal mapping"), "{e}");
        let e = mapping().lookup(0x4000, 0x1000).unwrap_err().to_string();
        assert!(e.contains("0x4000..0x5000"), "{e}");
        // Past the last entry.
        let e = mapping().lookup(0x10000, 0x200).unwrap_err().to_string();
        assert!(e.contains("0x10000..0x10200"), "{e}");
        assert!(mapping().lookup(u64::MAX, 2).is_err());
    }

    #[test]
    fn bad_entries_are_refused_naming_them() {
        let unsorted = IndirectMapping::new(
            1,
            phys(0x10000, 2),
            vec![entry(0x4000, 0x1000, 0, 0), entry(0x1000, 0x1000, 0, 0)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            unsorted.contains("entry 1") && unsorted.contains("not sorted"),
            "{unsorted}"
        );
        let overlap = IndirectMapping::new(
            1,
            phys(0x10000, 2),
            vec![entry(0x0, 0x2000, 0, 0), entry(0x1000, 0x1000, 0, 0)],
        )
        .unwrap_err()
        .to_string();
        assert!(overlap.contains("not sorted"), "{overlap}");
        let beyond = IndirectMapping::new(1, phys(0x1000, 1), vec![entry(0x800, 0x1000, 0, 0)])
            .unwrap_err()
            .to_string();
        assert!(
            beyond.contains("entry 0") && beyond.contains("max offset"),
            "{beyond}"
        );
        let empty = IndirectMapping::new(1, phys(0x1000, 1), vec![entry(0, 0, 0, 0)])
            .unwrap_err()
            .to_string();
        assert!(empty.contains("empty segment"), "{empty}");
        let own = IndirectMapping::new(1, phys(0x1000, 1), vec![entry(0, 0x200, 1, 0)])
            .unwrap_err()
            .to_string();
        assert!(own.contains("removed vdev itself"), "{own}");
        let count = IndirectMapping::new(1, phys(0x1000, 2), vec![entry(0, 0x200, 0, 0)])
            .unwrap_err()
            .to_string();
        assert!(count.contains("bonus says 2"), "{count}");
    }

    #[test]
    fn entries_decode_from_words_and_bytes() {
        // src 0x10 sectors with the mark bit; dst vdev 3, 8 sectors, offset 0x20 sectors.
        let w = [(1u64 << 63) | 0x10, (3u64 << 32) | 8, 0x20];
        let e = MappingEntry::from_words(w);
        assert_eq!(e, entry(0x2000, 0x1000, 3, 0x4000));
        let mut data = Vec::new();
        for x in w {
            data.extend_from_slice(&x.to_ne_bytes());
        }
        let m = IndirectMapping::parse(1, phys(0x4000, 1), &data, false).unwrap();
        assert_eq!(m.entries(), &[e]);
        // More entries declared than the object holds.
        assert!(IndirectMapping::parse(1, phys(0x4000, 2), &data, false).is_err());
        let b = MappingPhys::parse(&[0u8; 16], false);
        assert!(b.is_err());
    }
}
