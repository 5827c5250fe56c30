//! Scrub: read and verify every block of the pool, repairing what is wrong.
//!
//! Theory. Everything allocated is reachable from the uberblock: the MOS
//! objset, its objects (space maps, ZAPs, DSL directories and datasets),
//! and from each DSL dataset's `ds_bp` its objset and the trees of its
//! objects. A block is visited once: a dataset's traversal skips every BP
//! born at or before its previous snapshot's txg (`ds_prev_snap_txg`),
//! because such a block — and, copy-on-write, its whole subtree — belongs
//! to that older snapshot (or a clone's origin) and is visited there.
//!
//! The walk has two phases, as OpenZFS's sorted scrub: metadata (objset
//! blocks, dnode blocks, indirect blocks) is read and verified while the
//! tree is walked, since its contents say where to go next; level-0 data
//! BPs are only collected, then sorted by device offset and verified in
//! that order by several threads in turn, so device reads stay mostly
//! sequential. Every copy is read: all DVAs (ditto blocks), all mirror
//! sides, RAID-Z parity against the data ([`ReadCtx::scrub`]). With healing
//! on, each copy proven wrong is rewritten from a verified one.
//!
//! Invariants:
//! * The caller keeps the traversed txg's blocks from being freed and
//!   reused while the scrub runs (it holds the pool's I/O hold, so no txg
//!   syncs), and turns healing on only when it is the pool's single writer.
//! * A block that cannot be verified is recorded (objset, object, level,
//!   block id) and counted; the walk goes on below whatever else it can
//!   reach. Nothing read from disk is trusted before its checksum passed.
//! * Bounded: every BP read is validated; indirect fan-out comes from the
//!   verified block's size; a metadata block (objset, indirect, dnode
//!   block) is read once per scan, by its first DVA — a hostile pool whose
//!   BPs all name the same indirect block (or dataset) would otherwise
//!   make the walk exponential in its depth.

use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::dnode::{DnodePhys, DNODE_SIZE};
use ozfs_format::dsl::DslDatasetPhys;
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::types::ot;
use ozfs_format::{BlkPtr, Result};
use ozfs_spa::Pool;
use ozfs_vdev::ReadCtx;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a block belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockRef {
    /// Dataset object of the objset (0: the MOS).
    pub objset: u64,
    /// Object number (`u64::MAX`: the objset block itself).
    pub object: u64,
    pub level: u8,
    pub blkid: u64,
}

/// Counters, as `zpool status` reports them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Allocated bytes found so far (DVA sizes of every BP visited).
    pub examined: u64,
    /// Allocated bytes read and verified so far.
    pub issued: u64,
    /// Bytes rewritten by repairs.
    pub repaired: u64,
    /// Blocks that could not be verified from any copy.
    pub errors: u64,
}

/// The outcome of a scrub.
#[derive(Debug, Default)]
pub struct ScrubResult {
    pub progress: Progress,
    /// Blocks with no good copy.
    pub bad: Vec<BlockRef>,
    /// The scrub was stopped before the end.
    pub stopped: bool,
}

struct Walker<'a> {
    pool: &'a Arc<Pool>,
    ctx: ReadCtx,
    data: Vec<(BlkPtr, BlockRef)>,
    datasets: Vec<(u64, DslDatasetPhys)>,
    bad: Mutex<Vec<BlockRef>>,
    examined: AtomicU64,
    issued: AtomicU64,
    errors: AtomicU64,
    stop: &'a AtomicBool,
    report: &'a (dyn Fn(&Progress) + Sync),
    last_report: Mutex<Instant>,
    /// Metadata blocks already walked (vdev, offset of the first DVA).
    seen: std::collections::HashSet<(u64, u64)>,
}

fn asize(bp: &BlkPtr) -> u64 {
    bp.dvas().iter().map(|d| d.asize).sum()
}

fn swap_of(bp: &BlkPtr) -> bool {
    bp.little_endian() != HOST_LITTLE_ENDIAN
}

/// What a scan does with each block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanMode {
    /// Read and check every copy; repair the bad ones.
    Scrub,
    /// Read each block once; every leaf being resilvered gets its copy
    /// (reads skip such leaves and heal onto them).
    Resilver,
}

/// Scan the pool whose MOS is at `rootbp`. `heal` rewrites bad copies;
/// `report` is called about once a second with the counters; `stop` ends
/// the scan early (the result says so). Only blocks born after `min_birth`
/// are visited (a resilver of a device that was away since that txg: what
/// is older is on it already); 0 for everything.
#[allow(clippy::too_many_arguments)]
pub fn scrub(
    pool: &Arc<Pool>,
    rootbp: &BlkPtr,
    mode: ScanMode,
    min_birth: u64,
    heal: bool,
    stop: &AtomicBool,
    report: &(dyn Fn(&Progress) + Sync),
) -> Result<ScrubResult> {
    let mut w = Walker {
        pool,
        ctx: ReadCtx {
            heal,
            scrub: mode == ScanMode::Scrub,
            all_dvas: true,
            log: false,
            repaired: AtomicU64::new(0),
        },
        data: Vec::new(),
        datasets: Vec::new(),
        bad: Mutex::new(Vec::new()),
        examined: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop,
        report,
        last_report: Mutex::new(Instant::now()),
        seen: Default::default(),
    };
    // Phase 1: metadata.
    if rootbp.birth() > min_birth {
        w.objset(0, rootbp, min_birth);
    }
    let mut i = 0;
    while i < w.datasets.len() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (ds_obj, ds) = w.datasets[i];
        let floor = ds.prev_snap_txg.max(min_birth);
        if !ds.bp.is_hole() && ds.bp.birth() > floor {
            w.objset(ds_obj, &ds.bp, floor);
        }
        i += 1;
    }
    // Phase 2: data, in device order.
    let mut data = std::mem::take(&mut w.data);
    data.sort_by_key(|(bp, _)| {
        let d = bp.dvas()[0];
        (d.vdev, d.offset)
    });
    w.verify_data(&data);
    let progress = w.progress();
    (w.report)(&progress);
    let mut bad = w.bad.into_inner().unwrap_or_else(|p| p.into_inner());
    bad.sort();
    Ok(ScrubResult {
        progress,
        bad,
        stopped: stop.load(Ordering::Relaxed),
    })
}

impl Walker<'_> {
    fn progress(&self) -> Progress {
        Progress {
            examined: self.examined.load(Ordering::Relaxed),
            issued: self.issued.load(Ordering::Relaxed),
            repaired: self.ctx.repaired.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    fn maybe_report(&self) {
        let Ok(mut t) = self.last_report.try_lock() else {
            return;
        };
        if t.elapsed() >= Duration::from_millis(500) {
            *t = Instant::now();
            drop(t);
            (self.report)(&self.progress());
        }
    }

    fn failed(&self, at: BlockRef) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut b) = self.bad.lock() {
            b.push(at);
        }
    }

    /// Read and verify a metadata block; None (recorded) if no copy is
    /// good, or if this scan has walked it already.
    fn meta(&mut self, bp: &BlkPtr, at: BlockRef) -> Option<Vec<u8>> {
        let d = bp.dvas()[0];
        if !self.seen.insert((d.vdev, d.offset)) {
            return None;
        }
        let r = self.pool.scrub_bp(bp, &self.ctx);
        self.issued.fetch_add(asize(bp), Ordering::Relaxed);
        self.maybe_report();
        match r {
            Ok(d) => Some(d),
            Err(_) => {
                self.failed(at);
                None
            }
        }
    }

    fn objset(&mut self, os: u64, bp: &BlkPtr, min_birth: u64) {
        if bp.is_hole() {
            return;
        }
        let at = BlockRef {
            objset: os,
            object: u64::MAX,
            level: 0,
            blkid: 0,
        };
        self.examined.fetch_add(asize(bp), Ordering::Relaxed);
        let Some(raw) = self.meta(bp, at) else { return };
        let Ok(phys) = ObjsetPhys::parse(&raw, swap_of(bp)) else {
            self.failed(at);
            return;
        };
        self.dnode_tree(os, 0, &phys.meta_dnode, min_birth);
        for (obj, dn) in [
            (u64::MAX - 1, &phys.userused_dnode),
            (u64::MAX - 2, &phys.groupused_dnode),
            (u64::MAX - 3, &phys.projectused_dnode),
        ] {
            if dn.object_type != 0 {
                self.dnode_tree(os, obj, dn, min_birth);
            }
        }
    }

    fn dnode_tree(&mut self, os: u64, obj: u64, dn: &DnodePhys, min_birth: u64) {
        if dn.nlevels == 0 {
            return;
        }
        for (i, bp) in dn.blkptr.iter().enumerate() {
            self.bp(os, obj, dn, bp, dn.nlevels - 1, i as u64, min_birth);
        }
        if let Some(sp) = &dn.spill {
            if !sp.is_hole() && !sp.is_embedded() && sp.birth() > min_birth {
                self.examined.fetch_add(asize(sp), Ordering::Relaxed);
                let at = BlockRef {
                    objset: os,
                    object: obj,
                    level: 0,
                    blkid: u64::MAX,
                };
                self.data.push((*sp, at));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn bp(
        &mut self,
        os: u64,
        obj: u64,
        dn: &DnodePhys,
        bp: &BlkPtr,
        level: u8,
        blkid: u64,
        min_birth: u64,
    ) {
        if bp.is_hole() || bp.is_embedded() || bp.birth() <= min_birth {
            return;
        }
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        let at = BlockRef {
            objset: os,
            object: obj,
            level,
            blkid,
        };
        self.examined.fetch_add(asize(bp), Ordering::Relaxed);
        if level > 0 {
            let Some(block) = self.meta(bp, at) else {
                return;
            };
            let epbs = dn.indblkshift.saturating_sub(7).min(20) as u32;
            let swap = swap_of(bp);
            for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
                match BlkPtr::from_bytes(raw, swap) {
                    Ok(child) => self.bp(
                        os,
                        obj,
                        dn,
                        &child,
                        level - 1,
                        (blkid << epbs) | i as u64,
                        min_birth,
                    ),
                    Err(_) => self.failed(at),
                }
            }
            return;
        }
        if obj == 0 && dn.object_type == ot::DNODE {
            // A block of dnodes: every object in it.
            let Some(block) = self.meta(bp, at) else {
                return;
            };
            let swap = swap_of(bp);
            let per = (block.len() / DNODE_SIZE) as u64;
            let mut slot = 0usize;
            while slot < block.len() / DNODE_SIZE {
                let objid = blkid.saturating_mul(per).saturating_add(slot as u64);
                match DnodePhys::parse(&block[slot * DNODE_SIZE..], swap) {
                    Ok(child) => {
                        slot += 1 + child.extra_slots as usize;
                        // Object 0 is the meta-dnode itself, never a child:
                        // a dnode there would make the walk loop.
                        if child.object_type == 0 || objid == 0 {
                            continue;
                        }
                        // By bonus type: extensible datasets are ZAPs.
                        if os == 0 && child.bonustype == ot::DSL_DATASET {
                            if let Ok(ds) = DslDatasetPhys::parse(&child.bonus, swap) {
                                self.datasets.push((objid, ds));
                            }
                        }
                        self.dnode_tree(os, objid, &child, min_birth);
                    }
                    Err(_) => {
                        self.failed(BlockRef {
                            objset: os,
                            object: objid,
                            level: 0,
                            blkid: 0,
                        });
                        slot += 1;
                    }
                }
            }
            return;
        }
        self.data.push((*bp, at));
    }

    /// Verify the collected level-0 blocks (sorted by offset): threads take
    /// consecutive batches in turn.
    fn verify_data(&self, data: &[(BlkPtr, BlockRef)]) {
        const BATCH: usize = 32;
        let next = AtomicUsize::new(0);
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, 8);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    if self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let start = next.fetch_add(BATCH, Ordering::Relaxed);
                    if start >= data.len() {
                        return;
                    }
                    for (bp, at) in &data[start..(start + BATCH).min(data.len())] {
                        let r = self.pool.read_physical_with(bp, &self.ctx);
                        self.issued.fetch_add(asize(bp), Ordering::Relaxed);
                        if r.is_err() {
                            self.failed(*at);
                        }
                    }
                    self.maybe_report();
                });
            }
        });
    }
}
