//! Reading through removed (indirect) vdevs: device removal's read side.
//!
//! Theory (format in [`ozfs_format::indirect`]). A top-level vdev removed
//! with `zpool remove` is an `indirect` vdev in the config
//! ([`VdevKind::Indirect`]): no device, and a MOS object mapping each of
//! its old allocated segments to where the removal copied it. Block
//! pointers keep naming the removed vdev, so every read of such a DVA is
//! translated here, in the pool, before the vdev layer is asked: the range
//! `[offset, offset + psize)` becomes one or more pieces on other
//! top-level vdevs.
//!
//! Layering. The mapping lives in MOS objects, and the MOS is read through
//! the pool, so the vdev tree cannot load it. The pool is opened first
//! (the uberblock's MOS is read: the blocks written since the removal,
//! which include the path to the mapping object, never name the removed
//! vdev), then the DSL layer reads each indirect vdev's mapping through the
//! MOS and installs the table once ([`Pool::install_indirect`]); a DVA on
//! an indirect vdev read before that is an error saying so, never a guess.
//! The vdev layer refuses to read an indirect vdev directly.
//!
//! Reads. A range inside one entry is read from the destination with the
//! BP's checksum as verifier, so mirrors and healing work there as
//! anywhere. A range split over several entries is read piece by piece
//! (each piece from the first copy its destination returns), reassembled,
//! then verified whole; a destination that is itself indirect (a later
//! removal) is translated again, at most [`MAX_CHAIN`] times.
//!
//! Invariants: a table is installed only after [`IndirectMapping::new`]
//! checked it (sorted, non-overlapping, within the mapping's max offset)
//! and every destination is a top-level vdev that holds data, the
//! destination range within its size; a range a mapping does not cover is
//! an error naming it; the indirect vdev is never written or healed.

use crate::pool::Pool;
use ozfs_format::indirect::IndirectMapping;
use ozfs_format::{Error, Result};
use ozfs_vdev::{ReadCtx, Vdev, VdevKind};
use std::collections::HashMap;

/// Removals chained through one another that a read follows at most.
pub const MAX_CHAIN: usize = 8;

/// The removal mappings of a pool, by top-level vdev id.
pub type IndirectMaps = HashMap<u64, IndirectMapping>;

/// What [`Pool::indirect`] holds once installed.
#[derive(Debug, Default)]
pub struct IndirectState {
    pub maps: IndirectMaps,
    /// Ranges read through a mapping since the pool was opened.
    pub reads: std::sync::atomic::AtomicU64,
}

impl Pool {
    /// The ids of the top-level indirect vdevs with their mapping objects.
    pub fn indirect_vdevs(&self) -> Vec<(u64, u64)> {
        self.root
            .children
            .iter()
            .filter_map(|t| match t.kind {
                VdevKind::Indirect { mapping_object, .. } => Some((t.id, mapping_object)),
                _ => None,
            })
            .collect()
    }

    /// Install the removal mappings (once; later calls are ignored), after
    /// checking every destination against the vdev tree.
    pub fn install_indirect(&self, maps: IndirectMaps) -> Result<()> {
        for (id, m) in &maps {
            for (i, e) in m.entries().iter().enumerate() {
                let bad = |why: &str| {
                    Error::corrupt(
                        format!("indirect vdev {id}: mapping"),
                        format!(
                            "entry {i} (<{:#x}+{:#x}> -> <{}:{:#x}>): {why}",
                            e.src, e.dst.asize, e.dst.vdev, e.dst.offset
                        ),
                    )
                };
                let Some(dst) = self.root.children.get(e.dst.vdev as usize) else {
                    return Err(bad(&format!(
                        "destination vdev does not exist (the pool has {})",
                        self.root.children.len()
                    )));
                };
                if matches!(dst.kind, VdevKind::Hole) {
                    return Err(bad("destination is a hole or missing vdev"));
                }
                if dst.asize != 0 && e.dst.offset.saturating_add(e.dst.asize) > dst.asize {
                    return Err(bad(&format!(
                        "destination beyond the end of vdev {} ({:#x})",
                        e.dst.vdev, dst.asize
                    )));
                }
            }
        }
        let _ = self.indirect.set(IndirectState {
            maps,
            reads: Default::default(),
        });
        Ok(())
    }

    /// Read `size` bytes at `offset` of top-level vdev `top`, verified by
    /// `verify`: directly, or through the removal mapping when `top` is
    /// indirect (see the module comment). `birth`: the BP's physical birth
    /// (an expanded RAID-Z vdev places a block by the width of its birth).
    pub(crate) fn read_top(
        &self,
        top: &Vdev,
        offset: u64,
        size: u64,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        self.read_top_chained(top, offset, size, Hop { birth, depth: 0 }, verify, ctx)
    }

    fn read_top_chained(
        &self,
        top: &Vdev,
        offset: u64,
        size: u64,
        hop: Hop,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        let Hop { birth, depth } = hop;
        let next = Hop {
            birth,
            depth: depth + 1,
        };
        if !matches!(top.kind, VdevKind::Indirect { .. }) {
            // A block of a txg still being written: its queued bytes, if
            // they verify; else what the devices hold once it is written.
            if let Some(d) = self.writeback.queued(top.id, offset) {
                if d.len() as u64 == size && verify(&d) {
                    return Ok(d.to_vec());
                }
            }
            self.writeback.wait_written(top.id, offset);
            return top.read_block_born(offset, size, birth, verify, ctx);
        }
        let what = format!("indirect vdev {}", top.id);
        if depth >= MAX_CHAIN {
            return Err(Error::corrupt(
                &what,
                format!("removal mappings chained more than {MAX_CHAIN} deep"),
            ));
        }
        let state = self.indirect.get();
        let map = state.and_then(|s| s.maps.get(&top.id)).ok_or_else(|| {
            Error::Invalid(format!(
                "{what}: a block on a removed vdev was read before the removal mapping \
                     was loaded from the MOS"
            ))
        })?;
        let pieces = map.lookup(offset, size)?;
        if let Some(s) = state {
            s.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let dst_of = |vdev: u64| {
            self.root.children.get(vdev as usize).ok_or_else(|| {
                Error::corrupt(
                    &what,
                    format!("mapping names vdev {vdev}, which does not exist"),
                )
            })
        };
        if let [p] = pieces.as_slice() {
            return self.read_top_chained(dst_of(p.vdev)?, p.offset, size, next, verify, ctx);
        }
        let len = usize::try_from(size)
            .map_err(|_| Error::corrupt(&what, format!("block size {size:#x}")))?;
        let mut buf = vec![0u8; len];
        let any = |_: &[u8]| true;
        for p in &pieces {
            let part = self.read_top_chained(dst_of(p.vdev)?, p.offset, p.len, next, &any, ctx)?;
            let at = p.at as usize;
            let dst = buf
                .get_mut(at..at.saturating_add(part.len()))
                .filter(|d| d.len() as u64 == p.len)
                .ok_or_else(|| {
                    Error::corrupt(&what, format!("piece at {:#x} does not fit", p.at))
                })?;
            dst.copy_from_slice(&part);
        }
        if !verify(&buf) {
            return Err(Error::corrupt(
                &what,
                format!(
                    "the block at {offset:#x}+{size:#x}, reassembled from {} pieces of the \
                     removal mapping, fails its checksum",
                    pieces.len()
                ),
            ));
        }
        Ok(buf)
    }
}

/// How a read reached a top-level vdev through removal mappings: the
/// block's physical birth (which an expanded RAID-Z destination needs) and
/// how many mappings were followed.
#[derive(Clone, Copy)]
struct Hop {
    birth: u64,
    depth: usize,
}
