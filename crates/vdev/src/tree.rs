//! The vdev tree built from a config nvlist, its health, and its read path.
//! See the crate docs for the theory of checksum-driven reads.
//!
//! RAID-Z expansion: a raidz vdev's config lists in `raidz_expand_txgs` the
//! txg from which each expansion's width applies (oldest first, the last
//! being the present width, each earlier one a child narrower). A block's
//! physical birth txg (OpenZFS's `BP_GET_BIRTH`, the txg its DVAs were
//! allocated in) picks its width — the last entry at or below it, else the
//! original width — and a narrower block is placed by
//! `ozfs_codec::raidz::ExpandedRaidzMap`. Invariants: the record is checked
//! when the tree is built (strictly increasing txgs, original width above
//! the parity, no expansion in progress), and blocks of a narrower width are
//! only read, never healed.
//!
//! dRAID: a `draid` vdev's config (`nparity`, `draid_ndata`,
//! `draid_nspares`, `draid_ngroups`, its children) becomes a checked
//! `DraidLayout` when the tree is built — a bad config is refused there,
//! naming the key. A block is read stripe by stripe as `DraidMap` places
//! it; every stripe is RAID-Z math over the group's full width, so the
//! RAID-Z reconstruction serves unchanged. A distributed spare (`dspare`)
//! appears in the tree only in use — under a `spare` (or `replacing`) vdev
//! in place of a child, or as the child itself — and must be one of its
//! dRAID's own spares (checked at build): a column on it is read at the
//! same offset of the child the permutation puts at the spare's position
//! for that slice. A block is written as OpenZFS writes it: whole
//! stripes, skip sectors and empty columns as zeros (`Vdev::draid_write`).

use crate::device::BlockDevice;
use crate::report::{self, ReportKind, VdevReport};
use ozfs_codec::draid::DraidLayout;
use ozfs_codec::raidz::{reconstruct, ExpandedRaidzMap, RaidzMap};
use ozfs_format::label::VDEV_LABEL_START_SIZE;
use ozfs_format::{Error, NvList, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Error counters of one vdev, as `zpool status` shows them.
#[derive(Debug, Default)]
pub struct VdevStats {
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub cksum_errors: AtomicU64,
    /// A leaf taken out of service: too many I/O errors, or gone.
    pub faulted: std::sync::atomic::AtomicBool,
    /// With `faulted`: the device went away (ENXIO/ENODEV), shown REMOVED.
    pub removed: std::sync::atomic::AtomicBool,
    /// A leaf taken offline by `zpool offline`.
    pub offline: std::sync::atomic::AtomicBool,
    /// A leaf being resilvered: it holds no valid copy of blocks born
    /// before the resilver, so reads skip it and heal onto it.
    pub resilvering: std::sync::atomic::AtomicBool,
    /// While resilvering: blocks born after this txg are all it misses
    /// (0: everything, a new device).
    pub resilver_from: AtomicU64,
    /// I/O errors since this process opened the device (the fault
    /// threshold counts these, not the persisted lifetime counters).
    pub recent_errors: AtomicU64,
    /// Completed I/O since this process opened the pool, as `zpool iostat`
    /// counts it: a leaf counts the requests its device served, a mirror or
    /// RAID-Z vdev the blocks read from or written to it (so a mirror's
    /// write is one op on the mirror and one on each side).
    pub io: IoCounters,
}

/// Operations and bytes, read and write.
#[derive(Debug, Default)]
pub struct IoCounters {
    pub read_ops: AtomicU64,
    pub write_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

impl IoCounters {
    fn read(&self, bytes: usize) {
        self.read_ops.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    fn wrote(&self, bytes: usize) {
        self.write_ops.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    /// (read ops, write ops, read bytes, write bytes)
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.read_ops.load(Ordering::Relaxed),
            self.write_ops.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
        )
    }
}

impl VdevStats {
    pub fn add_read(&self) {
        self.read_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_cksum(&self) {
        self.cksum_errors.fetch_add(1, Ordering::Relaxed);
    }
    /// (read, write, cksum)
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.read_errors.load(Ordering::Relaxed),
            self.write_errors.load(Ordering::Relaxed),
            self.cksum_errors.load(Ordering::Relaxed),
        )
    }
    /// Set counters (restoring persisted state).
    pub fn set(&self, r: u64, w: u64, c: u64) {
        self.read_errors.store(r, Ordering::Relaxed);
        self.write_errors.store(w, Ordering::Relaxed);
        self.cksum_errors.store(c, Ordering::Relaxed);
    }
}

/// I/O errors after which a leaf is faulted.
pub const FAULT_AFTER_ERRORS: u64 = 10;

/// The root of a pool's vdev tree, replaceable while the pool is in use
/// (`zpool replace` swaps a leaf): readers get the current tree through
/// `Deref`. Every tree ever installed stays alive as long as the cell, so a
/// reference taken before a swap stays valid (the trees are small).
pub struct VdevCell {
    cur: std::sync::atomic::AtomicPtr<Vdev>,
    all: std::sync::Mutex<Vec<Arc<Vdev>>>,
}

impl VdevCell {
    pub fn new(v: Vdev) -> VdevCell {
        let a = Arc::new(v);
        VdevCell {
            cur: std::sync::atomic::AtomicPtr::new(Arc::as_ptr(&a) as *mut Vdev),
            all: std::sync::Mutex::new(vec![a]),
        }
    }

    /// The current tree, held (queued writes keep the tree they were
    /// queued on).
    pub fn current(&self) -> Option<Arc<Vdev>> {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        let cur = self.cur.load(Ordering::Acquire);
        all.iter()
            .rev()
            .find(|a| std::ptr::eq(Arc::as_ptr(a), cur))
            .cloned()
    }

    /// Install a new tree; later derefs see it.
    pub fn replace(&self, v: Vdev) {
        let a = Arc::new(v);
        let p = Arc::as_ptr(&a) as *mut Vdev;
        self.all.lock().unwrap_or_else(|e| e.into_inner()).push(a);
        self.cur.store(p, Ordering::Release);
    }
}

impl std::ops::Deref for VdevCell {
    type Target = Vdev;
    fn deref(&self) -> &Vdev {
        // SAFETY: `cur` always points into an `Arc<Vdev>` held in `all`,
        // which only grows and lives as long as `self`.
        unsafe { &*self.cur.load(Ordering::Acquire) }
    }
}

/// How a read treats the copies it finds wrong (see [`Vdev::read_block_with`]).
#[derive(Debug, Default)]
pub struct ReadCtx {
    /// Rewrite copies proven wrong with the verified data.
    pub heal: bool,
    /// Read and check every copy, not just until one verifies.
    pub scrub: bool,
    /// Visit every DVA of a block (resilver: each ditto copy may have a
    /// column on the leaf being rebuilt).
    pub all_dvas: bool,
    /// Log each repair on stderr.
    pub log: bool,
    /// Bytes rewritten by repairs.
    pub repaired: AtomicU64,
}

/// What kind of node a vdev is.
pub enum VdevKind {
    Root,
    /// A file or disk; `None` when the device could not be found.
    Leaf(Option<Arc<dyn BlockDevice>>),
    /// mirror, replacing and spare: every child holds the whole block.
    Mirror,
    Raidz {
        nparity: usize,
    },
    /// Distributed RAID (`draid`): fixed-width RAID-Z groups spread over
    /// the children through permutations (`ozfs_codec::draid`).
    Draid {
        layout: Arc<DraidLayout>,
    },
    /// A distributed spare (`dspare`, named `draid<P>-<T>-<S>`) in use in
    /// place of a child of its dRAID vdev: it has no device of its own; its
    /// space at each child offset lies on the child the permutation puts at
    /// the spare's position there (`DraidLayout::spare_child`), so it is
    /// read only through that dRAID vdev.
    DraidSpare {
        spare: usize,
    },
    /// A hole or missing top-level placeholder.
    Hole,
    /// A removed top-level vdev (`zpool remove`): no device; its blocks
    /// live where the removal mapping (a MOS object, `mapping_object`)
    /// says. The vdev layer cannot read it: the pool translates every DVA
    /// naming it through the mapping it loaded from the MOS
    /// (`ozfs_spa::indirect`) and reads the pieces from their destinations.
    Indirect {
        /// `com.delphix:indirect_object`: the mapping object.
        mapping_object: u64,
        /// `com.delphix:indirect_births`: when entries were copied (0: none).
        births_object: u64,
    },
}

/// Health as `zpool status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VdevState {
    Online,
    Degraded,
    Faulted,
    Unavail,
    Offline,
    Removed,
}

impl VdevState {
    pub fn as_str(&self) -> &'static str {
        match self {
            VdevState::Online => "ONLINE",
            VdevState::Degraded => "DEGRADED",
            VdevState::Faulted => "FAULTED",
            VdevState::Unavail => "UNAVAIL",
            VdevState::Offline => "OFFLINE",
            VdevState::Removed => "REMOVED",
        }
    }
}

/// One node of the vdev tree.
pub struct Vdev {
    pub id: u64,
    pub guid: u64,
    /// Config type string: root, disk, file, mirror, raidz, replacing, spare, hole, missing, indirect.
    pub type_name: String,
    /// Leaf path from the config (or where it was found).
    pub path: Option<String>,
    pub kind: VdevKind,
    pub children: Vec<Vdev>,
    /// Top-level only: allocation unit shift and allocatable size.
    pub ashift: u64,
    pub asize: u64,
    pub nparity: u64,
    pub stats: VdevStats,
    /// The nvlist this node was built from.
    pub config: NvList,
    /// Why a leaf is unavailable (e.g. "device too small"), for status output.
    pub aux: Option<String>,
    /// RAID-Z expansions (config `raidz_expand_txgs`): `(txg, width)` in
    /// increasing txg order — blocks born at or after `txg` (and before the
    /// next entry) were written `width` columns wide; blocks born before the
    /// first entry have the original width. Empty when never expanded.
    pub raidz_widths: Vec<(u64, usize)>,
}

/// The columns of a dRAID block's stripes, as read or rebuilt.
type Stripes = Vec<Vec<Vec<u8>>>;

/// How to open leaves while building a tree: given the leaf's guid and configured path.
pub type LeafOpener<'a> =
    dyn FnMut(u64, Option<&str>) -> Option<(Arc<dyn BlockDevice>, String)> + 'a;

const MAX_TREE_DEPTH: usize = 8;
const MAX_CHILDREN: usize = 255;

impl Vdev {
    /// Build the subtree described by `nv` (a `vdev_tree` nvlist).
    pub fn from_config(nv: &NvList, open: &mut LeafOpener<'_>) -> Result<Vdev> {
        Self::build(nv, open, 0)
    }

    fn build(nv: &NvList, open: &mut LeafOpener<'_>, depth: usize) -> Result<Vdev> {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::corrupt("vdev tree", "nested too deeply"));
        }
        let type_name = nv
            .get_str("type")
            .ok_or_else(|| Error::corrupt("vdev tree", "vdev without a type"))?
            .to_string();
        let id = nv.get_u64("id").unwrap_or(0);
        let guid = nv.get_u64("guid").unwrap_or(0);
        let mut path = nv.get_str("path").map(str::to_string);
        let nparity = nv.get_u64("nparity").unwrap_or(0);
        // The allocation unit sizes every read and RAID-Z column: a
        // shift from a (hostile) config is bounded before it shifts.
        // (0, as some writers leave it on leaves, means unset.)
        let ashift = nv.get_u64("ashift").filter(|&a| a != 0).unwrap_or(9);
        if !(9..=16).contains(&ashift) {
            return Err(Error::corrupt("vdev tree", format!("ashift {ashift}")));
        }
        let kind = match type_name.as_str() {
            "root" => VdevKind::Root,
            "disk" | "file" => {
                let found = open(guid, path.as_deref());
                match found {
                    Some((dev, p)) => {
                        path = Some(p);
                        VdevKind::Leaf(Some(dev))
                    }
                    None => VdevKind::Leaf(None),
                }
            }
            "mirror" | "replacing" | "spare" => VdevKind::Mirror,
            "raidz" => {
                if !(1..=3).contains(&nparity) {
                    return Err(Error::corrupt(
                        "vdev tree",
                        format!("raidz with nparity {nparity}"),
                    ));
                }
                VdevKind::Raidz {
                    nparity: nparity as usize,
                }
            }
            "draid" => VdevKind::Draid {
                layout: Arc::new(draid_layout(nv, nparity, ashift)?),
            },
            "dspare" => VdevKind::DraidSpare {
                spare: draid_spare_id(nv)?,
            },
            "hole" | "missing" => VdevKind::Hole,
            "indirect" => VdevKind::Indirect {
                mapping_object: nv.get_u64("com.delphix:indirect_object").ok_or_else(|| {
                    Error::corrupt(
                        "vdev tree",
                        format!("indirect vdev {id} without com.delphix:indirect_object"),
                    )
                })?,
                births_object: nv.get_u64("com.delphix:indirect_births").unwrap_or(0),
            },
            other => {
                return Err(Error::unsupported(
                    "vdev tree",
                    format!("vdev type '{other}'"),
                ))
            }
        };
        let mut children = Vec::new();
        if let Some(kids) = nv.get_nvlist_array("children") {
            if kids.len() > MAX_CHILDREN {
                return Err(Error::corrupt("vdev tree", "too many children"));
            }
            for k in kids {
                children.push(Self::build(k, open, depth + 1)?);
            }
        }
        match kind {
            VdevKind::Mirror | VdevKind::Raidz { .. } if children.is_empty() => {
                return Err(Error::corrupt(
                    "vdev tree",
                    format!("{type_name} vdev without children"),
                ));
            }
            VdevKind::Raidz { nparity } if children.len() <= nparity => {
                return Err(Error::corrupt(
                    "vdev tree",
                    "raidz with no more children than parity",
                ));
            }
            _ => {}
        }
        if let VdevKind::Draid { layout } = &kind {
            check_draid_spares(&children, layout, guid)?;
        }
        let raidz_widths = match kind {
            VdevKind::Raidz { nparity } => raidz_expansions(nv, children.len(), nparity)?,
            _ => Vec::new(),
        };
        let v = Vdev {
            raidz_widths,
            id,
            guid,
            type_name,
            path,
            kind,
            children,
            ashift,
            asize: nv.get_u64("asize").unwrap_or(0),
            nparity,
            stats: VdevStats::default(),
            config: nv.clone(),
            aux: None,
        };
        if nv.get_u64("offline") == Some(1) {
            v.stats.offline.store(true, Ordering::Relaxed);
        }
        Ok(v)
    }

    /// Name as `zpool status` shows it: path for leaves, `mirror-0`/`raidz2-1` for interior vdevs.
    pub fn display_name(&self) -> String {
        match &self.kind {
            VdevKind::Leaf(_) => self.path.clone().unwrap_or_else(|| self.guid.to_string()),
            VdevKind::Raidz { nparity } => format!("raidz{}-{}", nparity, self.id),
            VdevKind::Draid { layout } => format!("{}-{}", layout.type_name(), self.id),
            // A distributed spare is named by its config's path
            // (`draid<P>-<T>-<S>`); without one, by its number alone.
            VdevKind::DraidSpare { spare } => self
                .path
                .clone()
                .unwrap_or_else(|| format!("dspare-{spare}")),
            VdevKind::Root => "root".into(),
            _ => format!("{}-{}", self.type_name, self.id),
        }
    }

    /// Parity columns of a RAID-Z or dRAID vdev (0 for other kinds).
    pub fn parity_count(&self) -> usize {
        match &self.kind {
            VdevKind::Raidz { nparity } => *nparity,
            VdevKind::Draid { layout } => layout.nparity,
            _ => 0,
        }
    }

    /// Whether this vdev or a leaf below is being resilvered.
    pub fn resilvering(&self) -> bool {
        self.stats.resilvering.load(Ordering::Relaxed)
            || self.children.iter().any(|c| c.resilvering())
    }

    /// Health, derived from which leaves are present and in service.
    pub fn state(&self) -> VdevState {
        match &self.kind {
            VdevKind::Leaf(Some(_)) if self.stats.offline.load(Ordering::Relaxed) => {
                VdevState::Offline
            }
            VdevKind::Leaf(Some(_)) if self.stats.faulted.load(Ordering::Relaxed) => {
                if self.stats.removed.load(Ordering::Relaxed) {
                    VdevState::Removed
                } else {
                    VdevState::Faulted
                }
            }
            VdevKind::Leaf(Some(_)) => VdevState::Online,
            // Needs no device: its data lives on the other vdevs.
            VdevKind::Indirect { .. } => VdevState::Online,
            // Its space is on the dRAID's children, whose health counts there.
            VdevKind::DraidSpare { .. } => VdevState::Online,
            VdevKind::Leaf(None) | VdevKind::Hole => VdevState::Unavail,
            VdevKind::Mirror => {
                let bad = self
                    .children
                    .iter()
                    .filter(|c| !matches!(c.state(), VdevState::Online | VdevState::Degraded))
                    .count();
                let deg = self
                    .children
                    .iter()
                    .filter(|c| c.state() != VdevState::Online || c.resilvering())
                    .count();
                if bad == self.children.len() {
                    VdevState::Unavail
                } else if deg > 0 {
                    VdevState::Degraded
                } else {
                    VdevState::Online
                }
            }
            VdevKind::Raidz { .. } | VdevKind::Draid { .. } => {
                let nparity = self.parity_count();
                let bad = self
                    .children
                    .iter()
                    .filter(|c| !matches!(c.state(), VdevState::Online | VdevState::Degraded))
                    .count();
                let deg = self
                    .children
                    .iter()
                    .filter(|c| c.state() != VdevState::Online || c.resilvering())
                    .count();
                if bad > nparity {
                    VdevState::Unavail
                } else if deg > 0 {
                    VdevState::Degraded
                } else {
                    VdevState::Online
                }
            }
            VdevKind::Root => {
                // A "hole" (the place of a removed log device) holds no
                // data and is never part of the pool's health; "missing" is.
                let states: Vec<VdevState> = self
                    .children
                    .iter()
                    .filter(|c| c.type_name != "hole")
                    .map(|c| c.state())
                    .collect();
                // A top-level vdev out of service takes its data with it.
                if states.iter().any(|s| {
                    matches!(
                        s,
                        VdevState::Unavail
                            | VdevState::Faulted
                            | VdevState::Offline
                            | VdevState::Removed
                    )
                }) {
                    VdevState::Unavail
                } else if states.iter().any(|s| *s != VdevState::Online) {
                    VdevState::Degraded
                } else {
                    VdevState::Online
                }
            }
        }
    }

    /// Mark leaves whose device is smaller than the space the config says they
    /// hold as unavailable (a truncated or replaced device must not be read past its end).
    pub fn check_leaf_sizes(&mut self) {
        let need = match &self.kind {
            VdevKind::Raidz { .. } => self.asize / self.children.len().max(1) as u64,
            VdevKind::Draid { layout } => layout.child_need(self.asize),
            _ => self.asize,
        };
        for c in &mut self.children {
            c.check_sizes_below(need);
        }
        if let VdevKind::Leaf(_) = self.kind {
            self.check_sizes_below(self.asize);
        }
    }

    fn check_sizes_below(&mut self, need: u64) {
        if let VdevKind::Leaf(Some(dev)) = &self.kind {
            let psize = ozfs_format::label::aligned_psize(dev.size());
            let usable = psize
                .saturating_sub(VDEV_LABEL_START_SIZE + ozfs_format::label::VDEV_LABEL_END_SIZE);
            if usable < need {
                self.aux = Some(format!(
                    "device too small ({} bytes, needs {})",
                    dev.size(),
                    need + VDEV_LABEL_START_SIZE + ozfs_format::label::VDEV_LABEL_END_SIZE
                ));
                self.kind = VdevKind::Leaf(None);
            }
        }
        for c in &mut self.children {
            c.check_sizes_below(need);
        }
    }

    /// Sum of the guids of this node and all descendants (for `ub_guid_sum`).
    pub fn guid_sum(&self) -> u64 {
        self.children
            .iter()
            .fold(self.guid, |s, c| s.wrapping_add(c.guid_sum()))
    }

    /// Visit every node, depth first, with its depth.
    pub fn walk<'a>(&'a self, depth: usize, f: &mut dyn FnMut(&'a Vdev, usize)) {
        f(self, depth);
        for c in &self.children {
            c.walk(depth + 1, f);
        }
    }

    /// Visit every leaf mutably... (read-only walk of leaves).
    pub fn leaves(&self) -> Vec<&Vdev> {
        let mut v = Vec::new();
        self.walk(0, &mut |n, _| {
            if matches!(n.kind, VdevKind::Leaf(_)) {
                v.push(n);
            }
        });
        v
    }

    /// Read `size` raw bytes at `offset` of this vdev's allocatable space without verification
    /// (leaves directly; mirrors from the first child that answers). Used for RAID-Z columns.
    pub fn read_phys(&self, offset: u64, size: u64) -> Result<Vec<u8>> {
        match &self.kind {
            VdevKind::Leaf(Some(dev)) => {
                if !self.usable() || self.stats.resilvering.load(Ordering::Relaxed) {
                    return Err(self.unavailable());
                }
                let dev_off = offset
                    .checked_add(VDEV_LABEL_START_SIZE)
                    .ok_or_else(|| Error::corrupt("DVA", "offset overflows"))?;
                let mut buf = vec![0u8; size as usize];
                match dev.read_at(&mut buf, dev_off) {
                    Ok(()) => {
                        self.stats.io.read(buf.len());
                        Ok(buf)
                    }
                    Err(e) => {
                        self.stats.add_read();
                        self.report_io(false, &e, dev_off, size);
                        self.io_failed(&e);
                        Err(e)
                    }
                }
            }
            VdevKind::Leaf(None) | VdevKind::Hole => Err(Error::Io {
                what: format!("vdev {}", self.display_name()),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "device unavailable"),
            }),
            VdevKind::Indirect { .. } => Err(self.indirect_error()),
            VdevKind::Mirror => {
                let mut last = None;
                for c in &self.children {
                    match c.read_phys(offset, size) {
                        Ok(b) => return Ok(b),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| Error::corrupt("mirror", "no children")))
            }
            VdevKind::Raidz { .. } | VdevKind::Draid { .. } | VdevKind::Root => Err(
                Error::Invalid("raw read of a raidz, draid or root vdev".into()),
            ),
            VdevKind::DraidSpare { .. } => Err(Error::Invalid(format!(
                "vdev {}: a distributed spare is read through its dRAID vdev",
                self.display_name()
            ))),
        }
    }

    /// Write `data` (a physical block, length a multiple of 512) at DVA `offset`
    /// of this top-level vdev: every present mirror side, or RAID-Z columns with
    /// parity. Leaves that are missing are skipped (the pool is degraded); the
    /// write fails if fewer copies than the redundancy needs could be written.
    pub fn write_block(&self, offset: u64, data: &[u8]) -> Result<()> {
        match &self.kind {
            VdevKind::Leaf(Some(dev)) => {
                if !self.usable() {
                    return Err(self.unavailable());
                }
                let dev_off = offset
                    .checked_add(VDEV_LABEL_START_SIZE)
                    .ok_or_else(|| Error::corrupt("DVA", "offset overflows"))?;
                dev.write_at(data, dev_off)
                    .inspect(|()| self.stats.io.wrote(data.len()))
                    .inspect_err(|e| {
                        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                        self.report_io(true, e, dev_off, data.len() as u64);
                        self.io_failed(e);
                    })
            }
            VdevKind::Leaf(None) | VdevKind::Hole => Err(Error::Io {
                what: format!("vdev {}", self.display_name()),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "device unavailable"),
            }),
            VdevKind::Indirect { .. } => Err(self.indirect_error()),
            VdevKind::Mirror => {
                let mut ok = 0;
                let mut last = None;
                for c in &self.children {
                    match c.write_block(offset, data) {
                        // A side being resilvered holds no copy reads trust.
                        Ok(()) if !c.resilvering() => ok += 1,
                        Ok(()) => {}
                        Err(e) => last = Some(e),
                    }
                }
                if ok == 0 {
                    return Err(last.unwrap_or_else(|| Error::corrupt("mirror", "no children")));
                }
                self.stats.io.wrote(data.len());
                Ok(())
            }
            VdevKind::Raidz { nparity } => {
                let nparity = *nparity;
                let unit = 1u64 << self.ashift;
                let psize = data.len() as u64;
                let map = RaidzMap::new(
                    offset,
                    psize,
                    self.ashift as u32,
                    self.children.len(),
                    nparity,
                );
                let mut cols: Vec<Vec<u8>> = Vec::with_capacity(map.cols.len());
                let mut pos = 0usize;
                for (i, c) in map.cols.iter().enumerate() {
                    let mut b = vec![0u8; c.size as usize];
                    if i >= nparity {
                        let n = (c.size as usize).min(data.len().saturating_sub(pos));
                        b[..n].copy_from_slice(&data[pos..pos + n]);
                        pos += c.size as usize;
                    }
                    cols.push(b);
                }
                let _ = unit;
                ozfs_codec::raidz::generate_parity(nparity, &mut cols);
                let mut failed = 0;
                let mut last = None;
                for (c, buf) in map.cols.iter().zip(cols.iter()) {
                    if c.size == 0 {
                        continue;
                    }
                    let r = match self.children.get(c.dev) {
                        Some(child) if child.resilvering() => {
                            // Written, but not a column reads trust yet.
                            let _ = child.write_block(c.offset, buf);
                            Err(Error::Invalid("column on a resilvering device".into()))
                        }
                        Some(child) => child.write_block(c.offset, buf),
                        None => Err(Error::corrupt("raidz map", "column on a missing child")),
                    };
                    if let Err(e) = r {
                        failed += 1;
                        last = Some(e);
                    }
                }
                if failed > nparity {
                    return Err(last.unwrap_or_else(|| Error::corrupt("raidz", "write failed")));
                }
                self.stats.io.wrote(data.len());
                Ok(())
            }
            VdevKind::Draid { layout } => self.draid_write(layout, offset, data),
            VdevKind::DraidSpare { .. } => Err(Error::Invalid(format!(
                "vdev {}: a distributed spare is written through its dRAID vdev",
                self.display_name()
            ))),
            VdevKind::Root => Err(Error::Invalid("write to the root vdev".into())),
        }
    }

    /// [`write_block`](Self::write_block) of `data` zero-padded to this
    /// vdev's allocation unit (whole RAID-Z columns and 4K sectors).
    pub fn write_padded(&self, offset: u64, data: &[u8]) -> Result<()> {
        let unit = 1u64 << self.ashift;
        let padded = (data.len() as u64).div_ceil(unit).saturating_mul(unit) as usize;
        if padded == data.len() {
            return self.write_block(offset, data);
        }
        let mut b = Vec::with_capacity(padded);
        b.extend_from_slice(data);
        b.resize(padded, 0);
        self.write_block(offset, &b)
    }

    /// Fill the holes of `[offset, offset + len)` of this (top-level or
    /// mirror) vdev on every usable leaf not being resilvered (see
    /// [`BlockDevice::fill_holes`]; the same range of every mirror side).
    /// RAID-Z and dRAID vdevs spread a range over their children in ways
    /// this does not follow: they are left alone. Best effort: returns the
    /// bytes written, errors are reported to the caller, who may ignore
    /// them (nothing is lost: a hole stays a hole).
    pub fn fill_holes(&self, offset: u64, len: u64) -> Result<u64> {
        match &self.kind {
            VdevKind::Leaf(Some(dev)) => {
                if !self.usable() || self.resilvering() {
                    return Ok(0);
                }
                let dev_off = offset
                    .checked_add(VDEV_LABEL_START_SIZE)
                    .ok_or_else(|| Error::corrupt("DVA", "offset overflows"))?;
                dev.fill_holes(dev_off, len)
            }
            VdevKind::Mirror => {
                let mut n = 0;
                for c in &self.children {
                    n += c.fill_holes(offset, len)?;
                }
                Ok(n)
            }
            _ => Ok(0),
        }
    }

    /// Flush every present leaf in service below this vdev. A leaf whose
    /// flush fails is charged (and faulted if it went away); the flush
    /// fails only if no leaf could be flushed.
    pub fn flush(&self) -> Result<()> {
        let mut ok = 0;
        let mut last = None;
        for l in self.leaves() {
            if let VdevKind::Leaf(Some(dev)) = &l.kind {
                if !l.usable() {
                    continue;
                }
                match dev.flush() {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        l.note_write_error(&e);
                        last = Some(e);
                    }
                }
            }
        }
        match last {
            Some(e) if ok == 0 => Err(e),
            None if ok == 0 => Err(self.unavailable()),
            _ => Ok(()),
        }
    }

    /// Flush every top-level vdev: each must have flushed a leaf (see
    /// [`flush`](Self::flush)), or the pool's data is not known durable.
    pub fn flush_all_tops(&self) -> Result<()> {
        if !matches!(self.kind, VdevKind::Root) {
            return self.flush();
        }
        for t in &self.children {
            if matches!(t.kind, VdevKind::Hole | VdevKind::Indirect { .. }) {
                continue;
            }
            t.flush()?;
        }
        Ok(())
    }

    /// How many columns wide a block born in txg `birth` (its physical
    /// birth) was written on this raidz vdev: the width of the last
    /// expansion completed at or before `birth`, else the original width.
    pub fn raidz_width(&self, birth: u64) -> usize {
        let original = self.children.len().saturating_sub(self.raidz_widths.len());
        self.raidz_widths
            .iter()
            .rev()
            .find(|&&(txg, _)| txg <= birth)
            .map_or(original, |&(_, w)| w)
    }

    /// Read a block of `psize` bytes at DVA `offset`, returning the first
    /// version that `verify` accepts. Charges checksum errors to devices proven wrong.
    pub fn read_block(
        &self,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>> {
        self.read_block_with(offset, psize, verify, &ReadCtx::default())
    }

    /// [`read_block`](Self::read_block) with self-healing and scrub
    /// behaviour as `ctx` says: with `heal`, every copy proven wrong (a
    /// mirror side or a RAID-Z column that failed verification or could not
    /// be read) is rewritten in place with the verified data; with `scrub`,
    /// every copy is read and checked even when the first one verifies
    /// (all mirror sides; RAID-Z parity against the data).
    ///
    /// Reads with the vdev's current geometry: on an expanded RAID-Z vdev
    /// that is right only for blocks born after the last expansion; reads of
    /// blocks say their birth through [`read_block_born`](Self::read_block_born).
    pub fn read_block_with(
        &self,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        self.read_block_born(offset, psize, u64::MAX, verify, ctx)
    }

    /// [`read_block_with`](Self::read_block_with) of a block born in txg
    /// `birth` (the BP's physical birth): on a RAID-Z vdev expanded since,
    /// the block keeps the width it was written with ([`Vdev::raidz_width`]).
    pub fn read_block_born(
        &self,
        offset: u64,
        psize: u64,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        match &self.kind {
            VdevKind::Leaf(_) => {
                let data = self.read_phys(offset, psize)?;
                if verify(&data) {
                    Ok(data)
                } else {
                    self.charge_cksum(offset, psize);
                    Err(self.cksum_error(offset, psize))
                }
            }
            VdevKind::Mirror => {
                let mut last = None;
                let mut bad: Vec<&Vdev> = Vec::new();
                let mut good = None;
                let mut rest = self.children.iter();
                for c in rest.by_ref() {
                    match c.read_block_born(offset, psize, birth, verify, ctx) {
                        Ok(b) => {
                            good = Some(b);
                            break;
                        }
                        Err(e) => {
                            bad.push(c);
                            last = Some(e);
                        }
                    }
                }
                let Some(good) = good else {
                    return Err(last.unwrap_or_else(|| self.cksum_error(offset, psize)));
                };
                if ctx.scrub {
                    for c in rest {
                        if c.read_block_born(offset, psize, birth, verify, ctx)
                            .is_err()
                        {
                            bad.push(c);
                        }
                    }
                } else {
                    // Sides being resilvered get their copy too.
                    bad.extend(rest.filter(|c| c.resilvering()));
                }
                if ctx.heal {
                    for c in bad {
                        c.repair(offset, &good, ctx);
                    }
                }
                self.stats.io.read(good.len());
                Ok(good)
            }
            VdevKind::Raidz { nparity } => {
                let width = self.raidz_width(birth);
                if width == self.children.len() {
                    self.raidz_read(*nparity, offset, psize, verify, ctx)
                } else {
                    self.raidz_read_expanded(*nparity, width, offset, psize, verify)
                }
                .inspect(|b| self.stats.io.read(b.len()))
            }
            VdevKind::Draid { layout } => self
                .draid_read(layout, offset, psize, verify)
                .inspect(|b| self.stats.io.read(b.len())),
            VdevKind::DraidSpare { .. } => Err(Error::Invalid(format!(
                "vdev {}: a distributed spare is read through its dRAID vdev",
                self.display_name()
            ))),
            VdevKind::Hole | VdevKind::Root => Err(Error::corrupt(
                format!("vdev {}", self.display_name()),
                "block pointer refers to a vdev that holds no data",
            )),
            VdevKind::Indirect { .. } => Err(self.indirect_error()),
        }
    }

    /// A removed vdev is read only through the pool's removal mapping.
    fn indirect_error(&self) -> Error {
        Error::Invalid(format!(
            "vdev {}: a removed (indirect) vdev is read through the pool's removal mapping, \
             never directly",
            self.display_name()
        ))
    }

    fn cksum_error(&self, offset: u64, psize: u64) -> Error {
        Error::corrupt(
            format!(
                "vdev {} offset {:#x} size {:#x}",
                self.display_name(),
                offset,
                psize
            ),
            "no copy passed its checksum",
        )
    }

    /// Rewrite `data` at `offset` of this vdev (a mirror side or a RAID-Z
    /// column) because its copy was proven wrong; counted and logged.
    /// Missing devices are skipped (nothing to repair on them).
    fn repair(&self, offset: u64, data: &[u8], ctx: &ReadCtx) {
        if !self.present() {
            return;
        }
        let r = match self.kind {
            // A spare or replacing vdev in a RAID-Z column or mirror: the
            // copy goes to every present child; one that landed (even on a
            // child being rebuilt) is the repair.
            VdevKind::Mirror => {
                let mut landed = false;
                let mut last = None;
                for c in &self.children {
                    if c.present() {
                        match c.write_block(offset, data) {
                            Ok(()) => landed = true,
                            Err(e) => last = Some(e),
                        }
                    }
                }
                match (landed, last) {
                    (true, _) => Ok(()),
                    (false, Some(e)) => Err(e),
                    (false, None) => Err(self.unavailable()),
                }
            }
            _ => self.write_block(offset, data),
        };
        match r {
            Ok(()) => {
                ctx.repaired.fetch_add(data.len() as u64, Ordering::Relaxed);
                // Copies written onto a device being resilvered are its
                // rebuilding, not repairs of damage: not logged.
                if ctx.log && !self.resilvering() {
                    eprintln!(
                        "ozfs: repaired {} bytes on {} at offset {:#x}",
                        data.len(),
                        self.display_name(),
                        offset
                    );
                }
            }
            Err(e) => eprintln!(
                "ozfs: repair of {} at offset {offset:#x} failed: {e}",
                self.display_name()
            ),
        }
    }

    /// A leaf that is neither faulted nor offline (interior vdevs: true).
    pub fn usable(&self) -> bool {
        !self.stats.faulted.load(Ordering::Relaxed) && !self.stats.offline.load(Ordering::Relaxed)
    }

    /// A write to this leaf outside the block path (labels) failed.
    pub fn note_write_error(&self, e: &Error) {
        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        self.report_io(true, e, 0, 0);
        self.io_failed(e);
    }

    fn unavailable(&self) -> Error {
        Error::Io {
            what: format!("vdev {}", self.display_name()),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "device unavailable"),
        }
    }

    /// An I/O error on this leaf: a device that went away, or one that
    /// keeps failing ([`FAULT_AFTER_ERRORS`]), is faulted — no more I/O
    /// goes to it and the pool runs degraded while its redundancy allows.
    fn io_failed(&self, e: &Error) {
        let gone = matches!(e, Error::Io { source, .. }
            // ENXIO, ENODEV: the device went away.
            if matches!(source.raw_os_error(), Some(6) | Some(19))
                || source.kind() == std::io::ErrorKind::NotFound);
        let recent = self.stats.recent_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if gone {
            self.stats.removed.store(true, Ordering::Relaxed);
        }
        if (gone || recent >= FAULT_AFTER_ERRORS)
            && !self.stats.faulted.swap(true, Ordering::Relaxed)
        {
            self.report(ReportKind::Faulted { removed: gone }, 0, 0);
            eprintln!(
                "ozfs: device {} faulted ({}): {e}",
                self.display_name(),
                if gone { "gone" } else { "too many I/O errors" }
            );
        }
    }

    /// A leaf that is present, in service and not being resilvered: it
    /// holds a copy of every block (a mirror-like vdev — mirror, spare,
    /// replacing — when one child does; other interior vdevs: all do).
    pub fn present_whole(&self) -> bool {
        match &self.kind {
            VdevKind::Leaf(d) => {
                d.is_some() && self.usable() && !self.stats.resilvering.load(Ordering::Relaxed)
            }
            VdevKind::Hole | VdevKind::Indirect { .. } => false,
            VdevKind::Mirror => self.children.iter().any(|c| c.present_whole()),
            _ => self.children.iter().all(|c| c.present_whole()),
        }
    }

    /// Whether a repair can be written here: a present leaf, a mirror-like
    /// vdev with one present child, other interior vdevs with all.
    fn present(&self) -> bool {
        match &self.kind {
            VdevKind::Leaf(d) => d.is_some() && self.usable(),
            VdevKind::Hole | VdevKind::Indirect { .. } => false,
            VdevKind::Mirror => self.children.iter().any(|c| c.present()),
            _ => self.children.iter().all(|c| c.present()),
        }
    }

    fn raidz_read(
        &self,
        nparity: usize,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        let dcols = self.children.len();
        let map = RaidzMap::new(offset, psize, self.ashift as u32, dcols, nparity);
        let ncols = map.cols.len();
        let mut cols: Vec<Vec<u8>> = Vec::with_capacity(ncols);
        let mut failed: Vec<usize> = Vec::new();
        // Read data columns first; parity only when needed.
        let read_col = |c: usize| -> Option<Vec<u8>> {
            let col = map.cols[c];
            let child = self.children.get(col.dev)?;
            child.read_phys(col.offset, col.size).ok()
        };
        for c in 0..ncols {
            if c < nparity {
                cols.push(Vec::new());
                continue;
            }
            match read_col(c) {
                Some(b) => cols.push(b),
                None => {
                    failed.push(c);
                    cols.push(vec![0u8; map.cols[c].size as usize]);
                }
            }
        }
        let assemble = |cols: &[Vec<u8>]| assemble_data(cols, nparity, psize);
        if failed.is_empty() {
            let data = assemble(&cols);
            if verify(&data) {
                // Scrub: check the parity. Resilver: a leaf being rebuilt
                // may hold a parity column of this block.
                let parity_resilvering = ctx.heal
                    && map.cols[..nparity].iter().any(|c| {
                        c.size > 0 && self.children.get(c.dev).is_some_and(|ch| ch.resilvering())
                    });
                if ctx.scrub || parity_resilvering {
                    self.raidz_check_parity(nparity, &map, &mut cols, ctx);
                }
                if ctx.heal {
                    self.raidz_fill_spared(nparity, &map, &cols, ctx);
                }
                return Ok(data);
            }
        }
        // Need parity.
        for (c, col) in cols.iter_mut().enumerate().take(nparity) {
            match read_col(c) {
                Some(b) => *col = b,
                None => {
                    failed.push(c);
                    *col = vec![0u8; map.cols[c].size as usize];
                }
            }
        }
        if failed.len() > nparity {
            return Err(Error::Io {
                what: format!(
                    "{} offset {:#x}: {} of {} columns unreadable",
                    self.display_name(),
                    offset,
                    failed.len(),
                    ncols
                ),
                source: std::io::Error::other("too many unreadable columns for the parity"),
            });
        }
        // Try combinations of extra suspect columns, smallest first.
        let others: Vec<usize> = (0..ncols).filter(|c| !failed.contains(c)).collect();
        let extra_max = nparity - failed.len();
        for extra in 0..=extra_max {
            let mut combo = Vec::new();
            let mut found = None;
            combinations(&others, extra, 0, &mut combo, &mut |chosen| {
                let mut missing: Vec<usize> = failed.clone();
                missing.extend_from_slice(chosen);
                if !missing.iter().any(|&m| m >= nparity) {
                    return false; // only parity missing: data already tried
                }
                let mut trial = cols.clone();
                if reconstruct(nparity, &mut trial, &missing).is_err() {
                    return false;
                }
                let data = assemble(&trial);
                if verify(&data) {
                    found = Some((trial, missing));
                    true
                } else {
                    false
                }
            });
            if let Some((trial, missing)) = found {
                for &m in &missing {
                    let wrong = !failed.contains(&m) && trial[m] != cols[m];
                    if wrong {
                        if let Some(child) = self.children.get(map.cols[m].dev) {
                            child.charge_cksum(map.cols[m].offset, map.cols[m].size);
                        }
                    }
                    // Proven wrong, or unreadable on a present device: heal.
                    if ctx.heal && (wrong || failed.contains(&m)) && map.cols[m].size > 0 {
                        if let Some(child) = self.children.get(map.cols[m].dev) {
                            child.repair(map.cols[m].offset, &trial[m], ctx);
                        }
                    }
                }
                if ctx.heal {
                    self.raidz_fill_spared(nparity, &map, &trial, ctx);
                }
                return Ok(assemble(&trial));
            }
        }
        self.charge_cksum(offset, psize);
        Err(self.cksum_error(offset, psize))
    }

    /// Read a block written `width` columns wide before this raidz was
    /// expanded (module doc of `ozfs_codec::raidz`, "Expanded RAID-Z").
    /// Each child is read once, over the span holding the block's sectors on
    /// it; a child that cannot be read loses its sectors. When the data does
    /// not verify, reconstruction assumes sets of failed *children* (the
    /// unreadable ones plus up to `nparity` suspects, fewest first) and
    /// rebuilds every row that lost sectors to them, as long as no row lost
    /// more than the parity covers. Such blocks are only read: healing and
    /// the scrub's parity check need the writer, which refuses these pools.
    fn raidz_read_expanded(
        &self,
        nparity: usize,
        width: usize,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>> {
        let nchild = self.children.len();
        let ashift = self.ashift as u32;
        let unit = 1usize << ashift;
        let em = ExpandedRaidzMap::new(offset, psize, ashift, width, nchild, nparity)
            .map_err(|e| e.context(&format!("{} offset {offset:#x}", self.display_name())))?;
        let ncols = em.map.cols.len();
        // The span of each child this block occupies: [lo, hi).
        let mut span: Vec<Option<(u64, u64)>> = vec![None; nchild];
        for c in 0..ncols {
            for i in 0..em.rows_of(c) {
                let (d, o) = em.sector(c, i);
                let e = span[d].get_or_insert((o, o));
                e.0 = e.0.min(o);
                e.1 = e.1.max(o + unit as u64);
            }
        }
        let bufs: Vec<Option<(u64, Vec<u8>)>> = span
            .iter()
            .enumerate()
            .map(|(d, s)| {
                let (lo, hi) = (*s)?;
                let child = self.children.get(d)?;
                child.read_phys(lo, hi - lo).ok().map(|b| (lo, b))
            })
            .collect();
        let failed: Vec<usize> = (0..nchild)
            .filter(|&d| span[d].is_some() && bufs[d].is_none())
            .collect();
        // Gather the columns (failed children's sectors stay zero).
        let mut cols: Vec<Vec<u8>> = em
            .map
            .cols
            .iter()
            .map(|c| vec![0u8; c.size as usize])
            .collect();
        for (c, col) in cols.iter_mut().enumerate() {
            for (i, dst) in col.chunks_exact_mut(unit).enumerate() {
                let (d, o) = em.sector(c, i as u64);
                if let Some((lo, b)) = &bufs[d] {
                    let at = (o - lo) as usize;
                    if let Some(src) = b.get(at..at + unit) {
                        dst.copy_from_slice(src);
                    }
                }
            }
        }
        let assemble = |cols: &[Vec<u8>]| assemble_data(cols, nparity, psize);
        // Unless a data sector is on a child that could not be read, the data
        // as read may verify (a lost parity sector does not matter).
        let data_lost = (nparity..ncols)
            .any(|c| (0..em.rows_of(c)).any(|i| failed.contains(&em.sector(c, i).0)));
        if !data_lost {
            let data = assemble(&cols);
            if verify(&data) {
                return Ok(data);
            }
        }
        let suspects: Vec<usize> = (0..nchild)
            .filter(|&d| span[d].is_some() && !failed.contains(&d))
            .collect();
        let rows = em.rows_of(0);
        for extra in 0..=nparity {
            let mut combo = Vec::new();
            let mut found: Option<(Vec<Vec<u8>>, Vec<usize>)> = None;
            combinations(&suspects, extra, 0, &mut combo, &mut |chosen| {
                let lost = |d: usize| failed.contains(&d) || chosen.contains(&d);
                let mut trial = cols.clone();
                let mut rebuilt_data = false;
                for i in 0..rows {
                    let missing: Vec<usize> = (0..ncols)
                        .filter(|&c| i < em.rows_of(c) && lost(em.sector(c, i).0))
                        .collect();
                    if missing.is_empty() {
                        continue;
                    }
                    if missing.len() > nparity {
                        return false;
                    }
                    if missing.iter().all(|&c| c < nparity) {
                        continue;
                    }
                    let at = (i as usize) * unit;
                    let mut row: Vec<Vec<u8>> = trial
                        .iter()
                        .map(|col| col.get(at..at + unit).map_or_else(Vec::new, <[u8]>::to_vec))
                        .collect();
                    if reconstruct(nparity, &mut row, &missing).is_err() {
                        return false;
                    }
                    for &c in &missing {
                        if let Some(dst) = trial[c].get_mut(at..at + unit) {
                            dst.copy_from_slice(&row[c]);
                        }
                    }
                    rebuilt_data = true;
                }
                if !rebuilt_data {
                    return false;
                }
                let data = assemble(&trial);
                if verify(&data) {
                    found = Some((trial, chosen.to_vec()));
                    true
                } else {
                    false
                }
            });
            if let Some((trial, chosen)) = found {
                for d in chosen {
                    let wrong = (0..ncols).any(|c| {
                        (0..em.rows_of(c)).any(|i| {
                            let at = (i as usize) * unit;
                            em.sector(c, i).0 == d
                                && trial[c].get(at..at + unit) != cols[c].get(at..at + unit)
                        })
                    });
                    if wrong {
                        if let (Some(child), Some((lo, hi))) = (self.children.get(d), span[d]) {
                            child.charge_cksum(lo, hi - lo);
                        }
                    }
                }
                return Ok(assemble(&trial));
            }
        }
        self.charge_cksum(offset, psize);
        Err(self.cksum_error(offset, psize))
    }

    /// Read a block of a dRAID vdev (`ozfs_codec::draid`): one or two
    /// full-width stripes, each RAID-Z math over `D + P` columns.
    ///
    /// The data columns are read first; when the data does not verify (or a
    /// column could not be read) the parity is read too and reconstruction
    /// assumes sets of failed *children* — the unreadable columns plus up to
    /// `nparity` suspect children, fewest first — rebuilding in every stripe
    /// the columns on them, as long as no stripe lost more than its parity
    /// covers. Within a stripe every child holds one column, so for a
    /// one-stripe block this is the RAID-Z search by column; a block split
    /// over two groups may have a column on the same child in both, and
    /// both are suspected together. Empty data columns hold zeros by
    /// definition and are never read. A damaged column is not rewritten
    /// (healed) here: a scrub reports it.
    fn draid_read(
        &self,
        layout: &DraidLayout,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>> {
        let map = layout
            .map(offset, psize)
            .map_err(|e| e.context(&self.display_name()))?;
        if self.asize > 0
            && offset
                .checked_add(map.asize)
                .is_none_or(|end| end > self.asize)
        {
            return Err(Error::corrupt(
                format!("vdev {}", self.display_name()),
                format!(
                    "block at {offset:#x} ({:#x} bytes allocated) past the vdev's {:#x} bytes",
                    map.asize, self.asize
                ),
            ));
        }
        let np = layout.nparity;
        let rows: Vec<&RaidzMap> = map.rows.iter().map(|r| &r.map).collect();
        let mut cols: Stripes = rows
            .iter()
            .map(|m| vec![Vec::new(); m.cols.len()])
            .collect();
        // (stripe, column) pairs that could not be read.
        let mut failed: Vec<(usize, usize)> = Vec::new();
        let read = |r: usize, c: usize, cols: &mut Stripes, failed: &mut Vec<(usize, usize)>| {
            let col = rows[r].cols[c];
            if col.size == 0 {
                return;
            }
            match self.draid_column(layout, col.dev, col.offset, col.size, 0) {
                Ok(b) => cols[r][c] = b,
                Err(_) => {
                    failed.push((r, c));
                    cols[r][c] = vec![0u8; col.size as usize];
                }
            }
        };
        for (r, m) in rows.iter().enumerate() {
            for c in np..m.cols.len() {
                read(r, c, &mut cols, &mut failed);
            }
        }
        let assemble = |cols: &Stripes| {
            let mut out = Vec::with_capacity(psize as usize);
            for row in cols {
                for c in row.iter().skip(np) {
                    out.extend_from_slice(c);
                }
            }
            out.truncate(psize as usize);
            out
        };
        if failed.is_empty() {
            let data = assemble(&cols);
            if verify(&data) {
                return Ok(data);
            }
        }
        for (r, _) in rows.iter().enumerate() {
            for c in 0..np {
                read(r, c, &mut cols, &mut failed);
            }
        }
        if let Some(r) = (0..rows.len()).find(|&r| failed.iter().filter(|f| f.0 == r).count() > np)
        {
            return Err(Error::Io {
                what: format!(
                    "{} offset {:#x}: {} of {} columns of a stripe unreadable",
                    self.display_name(),
                    offset,
                    failed.iter().filter(|f| f.0 == r).count(),
                    rows[r].cols.len()
                ),
                source: std::io::Error::other("too many unreadable columns for the parity"),
            });
        }
        // Children holding a column of this block that was read.
        let mut suspects: Vec<usize> = Vec::new();
        for (r, m) in rows.iter().enumerate() {
            for (c, col) in m.cols.iter().enumerate() {
                if col.size > 0 && !failed.contains(&(r, c)) && !suspects.contains(&col.dev) {
                    suspects.push(col.dev);
                }
            }
        }
        suspects.sort_unstable();
        // A bound on the search (a wide dRAID with a large block would
        // otherwise try millions of combinations): past it, the block is
        // reported damaged rather than read for ever.
        const MAX_TRIALS: usize = 4096;
        let mut trials = 0usize;
        for extra in 0..=np {
            let mut combo = Vec::new();
            let mut found: Option<(Stripes, Vec<usize>)> = None;
            combinations(&suspects, extra, 0, &mut combo, &mut |chosen| {
                trials += 1;
                if trials > MAX_TRIALS {
                    return true;
                }
                let mut trial = cols.clone();
                let mut rebuilt_data = false;
                for (r, m) in rows.iter().enumerate() {
                    let missing: Vec<usize> = (0..m.cols.len())
                        .filter(|&c| {
                            m.cols[c].size > 0
                                && (failed.contains(&(r, c)) || chosen.contains(&m.cols[c].dev))
                        })
                        .collect();
                    if missing.len() > np {
                        return false;
                    }
                    if missing.iter().all(|&c| c < np) {
                        continue;
                    }
                    if reconstruct(np, &mut trial[r], &missing).is_err() {
                        return false;
                    }
                    rebuilt_data = true;
                }
                if !rebuilt_data {
                    return false;
                }
                let data = assemble(&trial);
                if verify(&data) {
                    found = Some((trial, chosen.to_vec()));
                    true
                } else {
                    false
                }
            });
            if let Some((trial, chosen)) = found {
                for (r, m) in rows.iter().enumerate() {
                    for (c, col) in m.cols.iter().enumerate() {
                        let wrong = chosen.contains(&col.dev)
                            && !failed.contains(&(r, c))
                            && trial[r][c] != cols[r][c];
                        if wrong {
                            if let Some(child) = self.children.get(col.dev) {
                                child.charge_cksum(col.offset, col.size);
                            }
                        }
                    }
                }
                return Ok(assemble(&trial));
            }
        }
        self.charge_cksum(offset, psize);
        Err(self.cksum_error(offset, psize))
    }

    fn draid_member_read(
        &self,
        top: &Vdev,
        layout: &DraidLayout,
        offset: u64,
        size: u64,
        depth: usize,
    ) -> Result<Vec<u8>> {
        match &self.kind {
            VdevKind::DraidSpare { spare } => {
                let target = self.draid_spare_target(layout, *spare, offset, depth)?;
                top.draid_column(layout, target, offset, size, depth + 1)
            }
            VdevKind::Mirror => {
                let mut last = None;
                for c in &self.children {
                    match c.draid_member_read(top, layout, offset, size, depth) {
                        Ok(b) => return Ok(b),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| self.unavailable()))
            }
            _ => self.read_phys(offset, size),
        }
    }

    /// Write a block of this dRAID vdev (`ozfs_codec::draid`), as OpenZFS
    /// writes one: every stripe full width, each column as long as the
    /// parity — a short data column padded with a zero skip sector, an
    /// empty one written as a zero sector — and the parity computed over
    /// them all, so that any `nparity` columns of a stripe can be rebuilt
    /// and a scrub can check every sector. A column on a child being
    /// resilvered is written but not counted; the write fails when a stripe
    /// lost more columns than its parity covers.
    fn draid_write(&self, layout: &DraidLayout, offset: u64, data: &[u8]) -> Result<()> {
        let psize = data.len() as u64;
        let map = layout
            .map(offset, psize)
            .map_err(|e| e.context(&self.display_name()))?;
        if self.asize > 0
            && offset
                .checked_add(map.asize)
                .is_none_or(|end| end > self.asize)
        {
            return Err(Error::Invalid(format!(
                "vdev {}: write at {offset:#x} ({:#x} bytes allocated) past the vdev's {:#x} bytes",
                self.display_name(),
                map.asize,
                self.asize
            )));
        }
        let np = layout.nparity;
        for row in &map.rows {
            let m = &row.map;
            let len = m.cols.iter().map(|c| c.size).max().unwrap_or(0) as usize;
            let mut cols = vec![vec![0u8; len]; m.cols.len()];
            let mut pos = usize::try_from(row.data_start).unwrap_or(usize::MAX);
            for (c, buf) in m.cols.iter().zip(cols.iter_mut()).skip(np) {
                let n = (c.size as usize).min(data.len().saturating_sub(pos));
                if n > 0 {
                    buf[..n].copy_from_slice(&data[pos..pos + n]);
                }
                pos = pos.saturating_add(c.size as usize);
            }
            ozfs_codec::raidz::generate_parity(np, &mut cols);
            let mut failed = 0;
            let mut last = None;
            for (c, buf) in m.cols.iter().zip(cols.iter()) {
                if let Err(e) = self.draid_column_write(layout, c.dev, c.offset, buf, 0) {
                    failed += 1;
                    last = Some(e);
                }
            }
            if failed > np {
                return Err(last.unwrap_or_else(|| Error::corrupt("draid", "write failed")));
            }
        }
        self.stats.io.wrote(data.len());
        Ok(())
    }

    /// Write one column of this dRAID vdev to child `child` (the mirror
    /// of [`Vdev::draid_column`]): every side of a spare or replacing vdev,
    /// and a distributed spare's space on the child that holds it at
    /// `offset`. Fails if no side that reads trust took it.
    fn draid_column_write(
        &self,
        layout: &DraidLayout,
        child: usize,
        offset: u64,
        buf: &[u8],
        depth: usize,
    ) -> Result<()> {
        let c = self.children.get(child).ok_or_else(|| {
            Error::corrupt(
                format!("vdev {}", self.display_name()),
                format!("column on child {child} of {}", self.children.len()),
            )
        })?;
        c.draid_member_write(self, layout, offset, buf, depth)
    }

    fn draid_member_write(
        &self,
        top: &Vdev,
        layout: &DraidLayout,
        offset: u64,
        buf: &[u8],
        depth: usize,
    ) -> Result<()> {
        match &self.kind {
            VdevKind::DraidSpare { spare } => {
                let target = self.draid_spare_target(layout, *spare, offset, depth)?;
                top.draid_column_write(layout, target, offset, buf, depth + 1)
            }
            VdevKind::Mirror => {
                let mut ok = 0;
                let mut last = None;
                for c in &self.children {
                    match c.draid_member_write(top, layout, offset, buf, depth) {
                        Ok(()) if !c.resilvering() => ok += 1,
                        Ok(()) => {}
                        Err(e) => last = Some(e),
                    }
                }
                if ok == 0 {
                    return Err(last.unwrap_or_else(|| self.unavailable()));
                }
                Ok(())
            }
            _ => {
                self.write_block(offset, buf)?;
                if self.resilvering() {
                    return Err(Error::Invalid("column on a resilvering device".into()));
                }
                Ok(())
            }
        }
    }

    /// The child of the dRAID vdev that holds distributed spare `spare`'s
    /// space at `offset` (`depth`: spares followed so far; a spare's child
    /// could itself hold a spare in use, so the chain is bounded by the
    /// number of spares).
    fn draid_spare_target(
        &self,
        layout: &DraidLayout,
        spare: usize,
        offset: u64,
        depth: usize,
    ) -> Result<usize> {
        if depth > layout.nspares {
            return Err(Error::corrupt(
                format!("vdev {}", self.display_name()),
                "distributed spares map onto each other in a loop",
            ));
        }
        layout.spare_child(spare, offset)
    }

    /// Read `size` bytes at `offset` of child `child` of this dRAID vdev,
    /// following a spare or replacing vdev to the side that answers and a
    /// distributed spare to the child that holds its space at `offset`
    /// (`depth`: distributed spares followed so far).
    fn draid_column(
        &self,
        layout: &DraidLayout,
        child: usize,
        offset: u64,
        size: u64,
        depth: usize,
    ) -> Result<Vec<u8>> {
        let c = self.children.get(child).ok_or_else(|| {
            Error::corrupt(
                format!("vdev {}", self.display_name()),
                format!("column on child {child} of {}", self.children.len()),
            )
        })?;
        c.draid_member_read(self, layout, offset, size, depth)
    }

    /// A column whose device is a spare or replacing vdev reads from the
    /// side that holds it; the side being resilvered gets the column here
    /// (`cols`: the verified data columns; parity columns, when empty,
    /// are computed).
    fn raidz_fill_spared(&self, nparity: usize, map: &RaidzMap, cols: &[Vec<u8>], ctx: &ReadCtx) {
        let spared = |c: usize| {
            map.cols[c].size > 0
                && self
                    .children
                    .get(map.cols[c].dev)
                    .is_some_and(|ch| !matches!(ch.kind, VdevKind::Leaf(_)) && ch.resilvering())
        };
        let wanted: Vec<usize> = (0..map.cols.len()).filter(|&c| spared(c)).collect();
        if wanted.is_empty() {
            return;
        }
        let mut full: Vec<Vec<u8>> = cols.to_vec();
        if wanted.iter().any(|&c| c < nparity) && full[..nparity].iter().any(|p| p.is_empty()) {
            for (c, p) in full.iter_mut().enumerate().take(nparity) {
                *p = vec![0u8; map.cols[c].size as usize];
            }
            ozfs_codec::raidz::generate_parity(nparity, &mut full);
        }
        for c in wanted {
            if let Some(child) = self.children.get(map.cols[c].dev) {
                child.fill_resilvering(map.cols[c].offset, &full[c], ctx);
            }
        }
    }

    /// Write `data` at `offset` to the leaves below that are being
    /// resilvered (their copy is the missing one).
    fn fill_resilvering(&self, offset: u64, data: &[u8], ctx: &ReadCtx) {
        match self.kind {
            VdevKind::Leaf(_) => {
                if self.stats.resilvering.load(Ordering::Relaxed) {
                    self.repair(offset, data, ctx);
                }
            }
            _ => {
                for c in &self.children {
                    if c.resilvering() {
                        c.fill_resilvering(offset, data, ctx);
                    }
                }
            }
        }
    }

    /// Scrub of a RAID-Z block whose data verified: the parity columns on
    /// the devices must equal the parity of the data; a column that does
    /// not is charged a checksum error and (healing) rewritten.
    fn raidz_check_parity(
        &self,
        nparity: usize,
        map: &RaidzMap,
        cols: &mut [Vec<u8>],
        ctx: &ReadCtx,
    ) {
        let mut want: Vec<Vec<u8>> = cols.to_vec();
        for (c, w) in want.iter_mut().enumerate().take(nparity) {
            *w = vec![0u8; map.cols[c].size as usize];
        }
        ozfs_codec::raidz::generate_parity(nparity, &mut want);
        for (c, want_c) in want.iter().enumerate().take(nparity) {
            let col = map.cols[c];
            if col.size == 0 {
                continue;
            }
            let Some(child) = self.children.get(col.dev) else {
                continue;
            };
            let ok = match child.read_phys(col.offset, col.size) {
                Ok(b) => b == *want_c,
                Err(_) => false,
            };
            if !ok {
                if child.present() && !child.resilvering() {
                    child.charge_cksum(col.offset, col.size);
                }
                if ctx.heal {
                    child.repair(col.offset, want_c, ctx);
                }
            }
        }
    }

    /// Charge a checksum error to this vdev for the `size` bytes at DVA
    /// `offset` (reported, see [`crate::report`]).
    fn charge_cksum(&self, offset: u64, size: u64) {
        self.stats.add_cksum();
        self.report(ReportKind::Checksum, self.io_offset(offset), size);
    }

    /// Where an I/O at DVA `offset` lands on this vdev, as OpenZFS reports
    /// it: on a leaf's device, past the front labels.
    fn io_offset(&self, offset: u64) -> u64 {
        match self.kind {
            VdevKind::Leaf(_) => offset.saturating_add(VDEV_LABEL_START_SIZE),
            _ => offset,
        }
    }

    /// Report an I/O error charged to this leaf (`dev_off`: on the device).
    fn report_io(&self, write: bool, e: &Error, dev_off: u64, size: u64) {
        let errno = match e {
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(5),
            _ => 5,
        };
        self.report(ReportKind::Io { write, errno }, dev_off, size);
    }

    /// Hand a report about this vdev to the process's sink.
    fn report(&self, kind: ReportKind, offset: u64, size: u64) {
        report::report(|| VdevReport {
            kind,
            vdev_guid: self.guid,
            vdev_type: self.type_name.clone(),
            vdev_path: self.path.clone(),
            offset,
            size,
            errors: self.stats.get(),
        });
    }
}

/// Call `f` with every `k`-subset of `items` (in lexicographic order) until it returns true.
fn combinations(
    items: &[usize],
    k: usize,
    start: usize,
    cur: &mut Vec<usize>,
    f: &mut dyn FnMut(&[usize]) -> bool,
) -> bool {
    if cur.len() == k {
        return f(cur);
    }
    for i in start..items.len() {
        cur.push(items[i]);
        if combinations(items, k, i + 1, cur, f) {
            return true;
        }
        cur.pop();
    }
    false
}

/// The expansion record of a raidz vdev's config: `raidz_expand_txgs` lists
/// the txg at which each expansion completed, oldest first; the last one
/// made the vdev its present width, each earlier one a child narrower.
/// Refused: an expansion still in progress (`raidz_expanding`, whose
/// half-moved rows ozfs does not place), txgs not strictly increasing, or
/// more expansions than the children allow (the original width must exceed
/// the parity).
fn raidz_expansions(nv: &NvList, nchild: usize, nparity: usize) -> Result<Vec<(u64, usize)>> {
    if nv.contains("raidz_expanding") {
        return Err(Error::unsupported(
            "vdev tree",
            "a RAID-Z expansion in progress (raidz_expanding); let it finish under OpenZFS",
        ));
    }
    if !nv.contains("raidz_expand_txgs") {
        return Ok(Vec::new());
    }
    let txgs = nv
        .get_u64_array("raidz_expand_txgs")
        .ok_or_else(|| Error::corrupt("vdev tree", "raidz_expand_txgs is not a uint64 array"))?;
    if txgs.len() + nparity >= nchild {
        return Err(Error::corrupt(
            "vdev tree",
            format!(
                "raidz_expand_txgs lists {} expansions of a raidz{nparity} of {nchild} children",
                txgs.len()
            ),
        ));
    }
    if let Some(w) = txgs.windows(2).find(|w| w[0] >= w[1]) {
        return Err(Error::corrupt(
            "vdev tree",
            format!(
                "raidz_expand_txgs out of order: txg {} listed after {}",
                w[1], w[0]
            ),
        ));
    }
    let n = txgs.len();
    Ok(txgs
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, nchild - (n - 1 - i)))
        .collect())
}

/// The layout of a `draid` vdev from its config (`draid_ndata`,
/// `draid_nspares`, `draid_ngroups`, `nparity`, the children), checked.
fn draid_layout(nv: &NvList, nparity: u64, ashift: u64) -> Result<DraidLayout> {
    let key = |k: &str| {
        nv.get_u64(k)
            .ok_or_else(|| Error::corrupt("vdev tree", format!("draid vdev without {k}")))
    };
    let children = nv.get_nvlist_array("children").map_or(0, |k| k.len()) as u64;
    DraidLayout::new(
        key("draid_ndata")?,
        nparity,
        key("draid_nspares")?,
        children,
        key("draid_ngroups")?,
        ashift as u32,
    )
}

/// Which of its dRAID's spares a `dspare` is: config `spareid`, else the
/// last number of its name `draid<P>-<T>-<S>`.
fn draid_spare_id(nv: &NvList) -> Result<usize> {
    let from_name = || {
        let name = nv.get_str("path")?;
        let rest = name.strip_prefix("draid")?;
        let mut parts = rest.split('-');
        let (_, _, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        s.parse::<u64>().ok()
    };
    let id = nv.get_u64("spareid").or_else(from_name).ok_or_else(|| {
        Error::corrupt(
            "vdev tree",
            "distributed spare without spareid or a draid<P>-<T>-<S> name",
        )
    })?;
    usize::try_from(id)
        .ok()
        .filter(|&i| i < ozfs_codec::draid::DRAID_MAX_SPARES as usize)
        .ok_or_else(|| Error::corrupt("vdev tree", format!("distributed spare id {id}")))
}

/// Every distributed spare under a dRAID vdev must be one of its own
/// spares (its space is only defined by that vdev's permutations).
fn check_draid_spares(children: &[Vdev], layout: &DraidLayout, guid: u64) -> Result<()> {
    let mut err = None;
    for c in children {
        c.walk(0, &mut |n, _| {
            if let VdevKind::DraidSpare { spare } = n.kind {
                let top = n.config.get_u64("top_guid");
                if spare >= layout.nspares || top.is_some_and(|t| t != guid) {
                    err.get_or_insert_with(|| {
                        Error::corrupt(
                            "vdev tree",
                            format!(
                                "distributed spare {} is not one of the {} spares of {}",
                                n.display_name(),
                                layout.nspares,
                                layout.type_name()
                            ),
                        )
                    });
                }
            }
        });
    }
    err.map_or(Ok(()), Err)
}

/// A RAID-Z block's data: its data columns (after the `nparity` parity
/// columns) end to end, cut to `psize`.
fn assemble_data(cols: &[Vec<u8>], nparity: usize, psize: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(psize as usize);
    for c in cols.iter().skip(nparity) {
        out.extend_from_slice(c);
    }
    out.truncate(psize as usize);
    out
}
