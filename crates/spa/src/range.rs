//! Sets of disjoint byte ranges (the in-memory form of a space map).
//!
//! A [`RangeSet`] holds half-open segments `[start, start + len)` that never
//! overlap and never touch: adding a segment that abuts a neighbour merges the
//! two, so the representation of a given set of bytes is unique (two sets
//! holding the same bytes compare equal).
//!
//! The set plays two roles in the allocator, and its strictness serves both:
//! * as the *allocated* set, [`RangeSet::add`] refusing any overlap is the
//!   double-allocation check and [`RangeSet::remove`] refusing a range that is
//!   not wholly present is the double-free check — exactly the conditions on
//!   which zdb and the kernel complain when they replay a space map;
//! * as the *free* set, [`RangeSet::first_fit`] finds room for a new block.
//!
//! Segments are kept in a `BTreeMap` keyed by start (value: end), plus a
//! secondary index ordered by (length, start) so [`RangeSet::largest`] is
//! O(log n) and an allocation that cannot possibly fit fails without a scan.
//! `add`, `remove`, `contains` and `overlaps` are O(log n); `first_fit` is
//! O(log n + segments examined).

use ozfs_format::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Disjoint, non-adjacent half-open byte ranges.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start → end (exclusive).
    segs: BTreeMap<u64, u64>,
    /// (len, start) for every segment.
    by_size: BTreeSet<(u64, u64)>,
    /// Sum of all segment lengths.
    total: u64,
}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.segs
                    .iter()
                    .map(|(s, e)| format!("{s:#x}+{:#x}", e - s)),
            )
            .finish()
    }
}

fn end_of(start: u64, len: u64) -> Result<u64> {
    start
        .checked_add(len)
        .ok_or_else(|| Error::Invalid(format!("range {start:#x}+{len:#x} overflows")))
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding the single range `[start, start + len)` (empty if `len` is 0).
    pub fn with_range(start: u64, len: u64) -> Result<Self> {
        let mut s = Self::new();
        s.add(start, len)?;
        Ok(s)
    }

    fn insert_seg(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        self.segs.insert(start, end);
        self.by_size.insert((end - start, start));
    }

    fn remove_seg(&mut self, start: u64, end: u64) {
        self.segs.remove(&start);
        self.by_size.remove(&(end - start, start));
    }

    /// The segment with the greatest start `<= pos`, as (start, end).
    fn seg_at_or_before(&self, pos: u64) -> Option<(u64, u64)> {
        self.segs.range(..=pos).next_back().map(|(&s, &e)| (s, e))
    }

    /// Add `[start, start + len)`. Errors if any byte of it is already present
    /// (a double allocation when this is an allocated set). `len == 0` is a no-op.
    pub fn add(&mut self, start: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = end_of(start, len)?;
        let prev = self.seg_at_or_before(start);
        if let Some((ps, pe)) = prev {
            if pe > start {
                return Err(Error::Invalid(format!(
                    "range {start:#x}+{len:#x} overlaps existing segment {ps:#x}+{:#x}",
                    pe - ps
                )));
            }
        }
        let next = self.segs.range(start..).next().map(|(&s, &e)| (s, e));
        if let Some((ns, ne)) = next {
            if ns < end {
                return Err(Error::Invalid(format!(
                    "range {start:#x}+{len:#x} overlaps existing segment {ns:#x}+{:#x}",
                    ne - ns
                )));
            }
        }
        let (mut new_start, mut new_end) = (start, end);
        if let Some((ps, pe)) = prev {
            if pe == start {
                self.remove_seg(ps, pe);
                new_start = ps;
            }
        }
        if let Some((ns, ne)) = next {
            if ns == end {
                self.remove_seg(ns, ne);
                new_end = ne;
            }
        }
        self.insert_seg(new_start, new_end);
        self.total += len;
        Ok(())
    }

    /// Remove `[start, start + len)`. Errors unless every byte of it is present
    /// (a double free when this is an allocated set). `len == 0` is a no-op.
    pub fn remove(&mut self, start: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = end_of(start, len)?;
        match self.seg_at_or_before(start) {
            Some((ss, se)) if se >= end => {
                self.remove_seg(ss, se);
                if ss < start {
                    self.insert_seg(ss, start);
                }
                if end < se {
                    self.insert_seg(end, se);
                }
                self.total -= len;
                Ok(())
            }
            _ => Err(Error::Invalid(format!(
                "range {start:#x}+{len:#x} is not wholly present"
            ))),
        }
    }

    /// Whether every byte of `[start, start + len)` is present (true for `len == 0`).
    pub fn contains(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        matches!(self.seg_at_or_before(start), Some((_, se)) if se >= end)
    }

    /// Whether any byte of `[start, start + len)` is present.
    pub fn overlaps(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let end = start.saturating_add(len);
        if matches!(self.seg_at_or_before(start), Some((_, se)) if se > start) {
            return true;
        }
        self.segs.range(start..end).next().is_some()
    }

    /// The parts of `[start, start + len)` that are present, in order, as (start, len).
    pub fn intersection(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if len == 0 {
            return out;
        }
        let end = start.saturating_add(len);
        let first = match self.seg_at_or_before(start) {
            Some((ss, _)) => ss,
            None => start,
        };
        for (&s, &e) in self.segs.range(first..end) {
            let a = s.max(start);
            let b = e.min(end);
            if a < b {
                out.push((a, b - a));
            }
        }
        out
    }

    /// The parts of `[start, start + len)` that are *not* present, in order, as (start, len).
    pub fn gaps(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let end = start.saturating_add(len);
        let mut pos = start;
        for (s, l) in self.intersection(start, len) {
            if s > pos {
                out.push((pos, s - pos));
            }
            pos = s + l;
        }
        if pos < end {
            out.push((pos, end - pos));
        }
        out
    }

    /// Bytes present.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Segments in ascending order, as (start, len).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segs.iter().map(|(&s, &e)| (s, e - s))
    }

    /// Length of the longest segment (0 if empty).
    pub fn largest(&self) -> u64 {
        self.by_size.iter().next_back().map_or(0, |&(l, _)| l)
    }

    /// Remove everything.
    pub fn clear(&mut self) {
        self.segs.clear();
        self.by_size.clear();
        self.total = 0;
    }

    /// The lowest start `s >= from`, a multiple of `align` (any value; 0
    /// or 1 mean byte alignment), such that `[s, s + size)` is wholly present.
    /// `None` if there is none at or after `from` (no wrapping).
    pub fn first_fit(&self, size: u64, align: u64, from: u64) -> Option<u64> {
        if size == 0 || self.largest() < size {
            return None;
        }
        let align = align.max(1);
        let first = match self.seg_at_or_before(from) {
            Some((ss, se)) if se > from => ss,
            _ => from,
        };
        for (&s, &e) in self.segs.range(first..) {
            if e - s < size {
                continue;
            }
            let base = s.max(from);
            // Any alignment, not only powers of two (a dRAID stripe).
            let aligned = base.checked_next_multiple_of(align)?;
            if aligned.checked_add(size).is_some_and(|x| x <= e) {
                return Some(aligned);
            }
        }
        None
    }

    /// Add every range of `other` (which must not overlap this set).
    pub fn add_all(&mut self, other: &RangeSet) -> Result<()> {
        for (s, l) in other.iter() {
            self.add(s, l)?;
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a RangeSet {
    type Item = (u64, u64);
    type IntoIter = std::iter::Map<
        std::collections::btree_map::Iter<'a, u64, u64>,
        fn((&'a u64, &'a u64)) -> (u64, u64),
    >;

    /// Segments in ascending order, as (start, len).
    fn into_iter(self) -> Self::IntoIter {
        fn seg<'b>((s, e): (&'b u64, &'b u64)) -> (u64, u64) {
            (*s, e - s)
        }
        self.segs
            .iter()
            .map(seg as fn((&'a u64, &'a u64)) -> (u64, u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_merges_and_rejects_overlap() {
        let mut r = RangeSet::new();
        r.add(0x1000, 0x1000).unwrap();
        r.add(0x3000, 0x1000).unwrap();
        assert_eq!(r.len(), 2);
        r.add(0x2000, 0x1000).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0x1000, 0x3000)]);
        assert_eq!(r.total(), 0x3000);
        assert!(r.add(0x3fff, 2).is_err());
        assert!(r.add(0xfff, 2).is_err());
        assert!(r.add(0x1800, 1).is_err());
        assert!(r.add(0, 0x10000).is_err());
        assert_eq!(r.total(), 0x3000);
        r.add(0x4000, 1).unwrap();
        r.add(0xfff, 1).unwrap();
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0xfff, 0x3002)]);
        assert!(r.add(u64::MAX, 2).is_err());
    }

    #[test]
    fn remove_splits_and_rejects_partial() {
        let mut r = RangeSet::with_range(0, 0x10000).unwrap();
        r.remove(0x4000, 0x1000).unwrap();
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            vec![(0, 0x4000), (0x5000, 0xb000)]
        );
        assert!(r.remove(0x3000, 0x2000).is_err());
        assert!(r.remove(0x4000, 1).is_err());
        assert!(r.remove(0xf000, 0x2000).is_err());
        r.remove(0, 0x4000).unwrap();
        r.remove(0xf000, 0x1000).unwrap();
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0x5000, 0xa000)]);
        assert_eq!(r.total(), 0xa000);
        assert_eq!(r.largest(), 0xa000);
    }

    #[test]
    fn queries() {
        let mut r = RangeSet::new();
        r.add(100, 50).unwrap();
        r.add(200, 10).unwrap();
        assert!(r.contains(100, 50));
        assert!(r.contains(120, 30));
        assert!(!r.contains(120, 31));
        assert!(r.contains(5, 0));
        assert!(r.overlaps(149, 10));
        assert!(!r.overlaps(150, 50));
        assert!(r.overlaps(0, 101));
        assert!(!r.overlaps(0, 100));
        assert_eq!(r.intersection(140, 65), vec![(140, 10), (200, 5)]);
        assert_eq!(r.gaps(90, 130), vec![(90, 10), (150, 50), (210, 10)]);
        assert_eq!(r.gaps(100, 50), vec![]);
        assert_eq!(r.largest(), 50);
    }

    #[test]
    fn first_fit_alignment_and_from() {
        let mut r = RangeSet::new();
        r.add(0x100, 0x300).unwrap(); // [0x100, 0x400)
        r.add(0x1000, 0x2000).unwrap(); // [0x1000, 0x3000)
        assert_eq!(r.first_fit(0x100, 0x200, 0), Some(0x200));
        assert_eq!(r.first_fit(0x300, 0x200, 0), Some(0x1000));
        assert_eq!(r.first_fit(0x100, 1, 0x150), Some(0x150));
        assert_eq!(r.first_fit(0x100, 0x100, 0x301), Some(0x1000));
        assert_eq!(r.first_fit(0x1000, 0x1000, 0x1001), Some(0x2000));
        assert_eq!(r.first_fit(0x1001, 0x1000, 0x1001), None);
        assert_eq!(r.first_fit(0x2001, 1, 0), None);
        assert_eq!(r.first_fit(0x100, 1, 0x3000), None);
    }

    #[test]
    fn matches_bitmap_model() {
        // Deterministic xorshift; compare against a bitmap of 4096 units.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut set = RangeSet::new();
        let mut bits = vec![false; 4096];
        for _ in 0..20000 {
            let s = next() % 4096;
            let l = 1 + next() % 64;
            let l = l.min(4096 - s);
            let r = (s as usize)..((s + l) as usize);
            let any = bits[r.clone()].iter().any(|&b| b);
            let all = bits[r.clone()].iter().all(|&b| b);
            assert_eq!(set.overlaps(s, l), any);
            assert_eq!(set.contains(s, l), all);
            if next() % 2 == 0 {
                assert_eq!(set.add(s, l).is_ok(), !any);
                if !any {
                    bits[r].iter_mut().for_each(|b| *b = true);
                }
            } else {
                assert_eq!(set.remove(s, l).is_ok(), all);
                if all {
                    bits[r].iter_mut().for_each(|b| *b = false);
                }
            }
            assert_eq!(set.total(), bits.iter().filter(|&&b| b).count() as u64);
            let size = 1 + next() % 32;
            let from = next() % 4096;
            let expect = (from..4096).find(|&p| {
                p + size <= 4096 && bits[p as usize..(p + size) as usize].iter().all(|&b| b)
            });
            assert_eq!(set.first_fit(size, 1, from), expect);
        }
        // Canonical form: segments never touch.
        let segs: Vec<_> = set.iter().collect();
        for w in segs.windows(2) {
            assert!(w[0].0 + w[0].1 < w[1].0);
        }
        let largest = segs.iter().map(|s| s.1).max().unwrap_or(0);
        assert_eq!(set.largest(), largest);
    }
}
