//! Creating pools and file systems. The MOS is laid out as zfs-fuse lays
//! out a pool-version-23 one (FORMAT.md §14.3): the object directory,
//! config, deferred-free list, metaslab arrays, the DSL directories `$MOS`
//! and `$ORIGIN` with `$ORIGIN@$ORIGIN`, and the root file system as a
//! clone of it; every later file system is created the same way under its
//! parent. A feature-flag pool (version 5000, the default) adds what the
//! versions after 23 need ([`upgrade`]: `$FREE`, `free_bpobj`, the feature
//! objects) and `creation_version`; pools of version 26 and later get
//! OpenZFS's new-format dead lists ([`crate::deadlist`]).
//!
//! A new file system's objset holds the ZPL master node (ZPL 5 with
//! system attributes from pool version 24, else 4), the delete queue and
//! the root directory; its user/group/project accounting starts complete
//! where the pool keeps it.

use crate::sync::PoolWriter;
use ozfs_codec::draid::DraidLayout;
use ozfs_dmu::tx::{random_u64, ObjsetTx};
use ozfs_dmu::{zap_tx, Objset};
use ozfs_format::dnode::{DnodePhys, DNODE_FLAG_USED_BYTES};
use ozfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use ozfs_format::objset::{
    ObjsetPhys, OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USERACCOUNTING_COMPLETE,
    OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE, OBJSET_TYPE_META, OBJSET_TYPE_ZFS,
};
use ozfs_format::types::ot;
use ozfs_format::znode::{ZplAttrs, S_IFDIR};
use ozfs_format::{BlkPtr, Error, NvList, NvValue, Result};
use ozfs_spa::label_write::POOL_STATE_ACTIVE;
use ozfs_spa::metaslab::{leaf_asize, metaslab_shift_for, Allocator, Geometry, MetaslabGroup};
use ozfs_spa::pool::DRAID;
use ozfs_spa::pool::{Pool, SPA_VERSION_FEATURES};
use ozfs_vdev::{open_path, BlockDevice, Vdev, VdevKind};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Pool version ozfs creates by default: feature flags, as OpenZFS (with
/// every feature OpenZFS 2.3 has enabled). `-o version=23` makes what
/// zfs-fuse reads.
pub const DEFAULT_POOL_VERSION: u64 = SPA_VERSION_FEATURES;
/// ZPL version of new file systems in pools of version 23 and below.
pub const ZPL_VERSION: u64 = 4;

/// ZPL version with system attributes (pool version 24 on).
pub const ZPL_VERSION_SA: u64 = 5;

/// The ZPL version of a new file system in a pool of `pool_version`: 5
/// (system attributes) from pool version 24 on, as OpenZFS, else 4.
pub fn zpl_version_for(pool_version: u64) -> u64 {
    if pool_version >= 24 {
        ZPL_VERSION_SA
    } else {
        ZPL_VERSION
    }
}
/// Pool version from which a pool may have separate intent-log devices
/// (OpenZFS's `SPA_VERSION_SLOGS`).
pub const SPA_VERSION_SLOGS: u64 = 7;
/// txg of a new pool's first sync.
pub const TXG_INITIAL: u64 = 4;

/// One top-level vdev to create.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum TopSpec {
    Disk(PathBuf),
    Mirror(Vec<PathBuf>),
    Raidz(usize, Vec<PathBuf>),
    /// A dRAID vdev (`draid[P][:Dd][:Cc][:Ss]`) over the devices.
    Draid(DraidSpec, Vec<PathBuf>),
    /// A separate intent-log device (`log DEV` or `log mirror A B`): the
    /// vdev inside, a disk or a mirror, made with `is_log` 1.
    Log(Box<TopSpec>),
}

impl TopSpec {
    /// The devices of this vdev, in order.
    pub fn devices(&self) -> &[PathBuf] {
        match self {
            TopSpec::Disk(p) => std::slice::from_ref(p),
            TopSpec::Mirror(v) | TopSpec::Raidz(_, v) | TopSpec::Draid(_, v) => v,
            TopSpec::Log(t) => t.devices(),
        }
    }

    /// Whether this is a separate intent-log device.
    pub fn is_log(&self) -> bool {
        matches!(self, TopSpec::Log(_))
    }

    /// The vdev's shape: what a log device is made of, else itself.
    pub fn shape(&self) -> &TopSpec {
        match self {
            TopSpec::Log(t) => t.shape(),
            t => t,
        }
    }

    /// The same vdev over other devices (one for each of these).
    pub fn with_devices(&self, devs: Vec<PathBuf>) -> TopSpec {
        match self {
            TopSpec::Disk(p) => TopSpec::Disk(devs.into_iter().next().unwrap_or_else(|| p.clone())),
            TopSpec::Mirror(_) => TopSpec::Mirror(devs),
            TopSpec::Raidz(n, _) => TopSpec::Raidz(*n, devs),
            TopSpec::Draid(d, _) => TopSpec::Draid(*d, devs),
            TopSpec::Log(t) => TopSpec::Log(Box::new(t.with_devices(devs))),
        }
    }
}

/// The shape a user asked for in `draid[P][:Dd][:Cc][:Ss]`: parity
/// (default 1), data columns per group (default: as many as fit, at most
/// 8), children (if given, must be the number of devices) and distributed
/// spares (default 0). [`DraidSpec::layout`] completes it as OpenZFS's
/// `zpool create` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraidSpec {
    pub nparity: u64,
    pub ndata: Option<u64>,
    pub nchildren: Option<u64>,
    pub nspares: u64,
}

impl DraidSpec {
    /// Parse a vdev keyword: None if `word` is not a dRAID one, an error
    /// naming what is wrong if it is a malformed one.
    pub fn parse(word: &str) -> Option<Result<DraidSpec>> {
        let rest = word.strip_prefix("draid")?;
        let (parity, fields) = match rest.split_once(':') {
            Some((p, f)) => (p, Some(f)),
            None => (rest, None),
        };
        let bad = |why: String| {
            Some(Err(Error::Invalid(format!(
                "invalid dRAID spec '{word}': {why}"
            ))))
        };
        let nparity = match parity {
            "" => 1,
            "1" | "2" | "3" => u64::from(parity.as_bytes()[0] - b'0'),
            _ => return bad("parity must be 1, 2 or 3".into()),
        };
        let mut spec = DraidSpec {
            nparity,
            ndata: None,
            nchildren: None,
            nspares: 0,
        };
        for f in fields.into_iter().flat_map(|f| f.split(':')) {
            let kind = &f[f.len() - f.chars().last().map_or(0, char::len_utf8)..];
            let num = &f[..f.len() - kind.len()];
            let n = match num.parse::<u64>() {
                Ok(n) if n <= ozfs_codec::draid::DRAID_MAX_CHILDREN => n,
                Ok(_) => return bad(format!("'{f}': at most 255")),
                Err(_) => return bad(format!("'{f}' is not a number followed by d, c or s")),
            };
            match kind {
                "d" if n > 0 => spec.ndata = Some(n),
                "c" => spec.nchildren = Some(n),
                "s" => spec.nspares = n,
                "d" => return bad("at least one data column".into()),
                _ => return bad(format!("'{f}' is not a number followed by d, c or s")),
            }
        }
        Some(Ok(spec))
    }

    /// The full layout over `devices` children: data columns by default as
    /// many as fit beside parity and spares, at most 8; the fewest groups
    /// that fill whole rows (`G · (D + P)` a multiple of `C − S`).
    pub fn layout(&self, devices: u64, ashift: u32) -> Result<DraidLayout> {
        let bad = |why: String| {
            Err(Error::Invalid(format!(
                "invalid dRAID configuration: {why}"
            )))
        };
        if let Some(c) = self.nchildren {
            if c != devices {
                return bad(format!(
                    "requested number of children ({c}) does not match the number of \
                     devices ({devices})"
                ));
            }
        }
        let room = devices.saturating_sub(self.nspares.saturating_add(self.nparity));
        let ndata = self.ndata.unwrap_or(room.min(8));
        if ndata == 0 || ndata > room {
            return bad(format!(
                "{devices} devices cannot hold {} data, {} parity and {} spare columns",
                ndata.max(1),
                self.nparity,
                self.nspares
            ));
        }
        let width = ndata + self.nparity;
        let ndisks = devices.saturating_sub(self.nspares).max(1);
        let mut ngroups = 1;
        while !(ngroups * width).is_multiple_of(ndisks) {
            ngroups += 1;
        }
        DraidLayout::new(ndata, self.nparity, self.nspares, devices, ngroups, ashift)
            .map_err(|e| Error::Invalid(format!("invalid dRAID configuration: {e}")))
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn leaf_nv(id: u64, guid: u64, path: &std::path::Path) -> NvList {
    let mut nv = NvList::new();
    nv.set("type", NvValue::String("file".into()));
    nv.set("id", NvValue::Uint64(id));
    nv.set("guid", NvValue::Uint64(guid));
    nv.set("path", NvValue::String(path.display().to_string()));
    nv.set("create_txg", NvValue::Uint64(TXG_INITIAL));
    nv
}

fn empty_dnode(t: u8, blkszsec: u16, nlevels: u8) -> DnodePhys {
    DnodePhys {
        object_type: t,
        indblkshift: 14,
        nlevels,
        nblkptr: 3,
        datablkszsec: blkszsec,
        flags: DNODE_FLAG_USED_BYTES,
        blkptr: vec![BlkPtr::default(); 3],
        ..Default::default()
    }
}

/// The meta-dnode of a new, empty objset (16 KiB dnode blocks).
pub fn empty_meta_dnode() -> DnodePhys {
    empty_dnode(ot::DNODE, 32, 7)
}

type Devices = BTreeMap<u64, (Arc<dyn BlockDevice>, String)>;

/// Open a leaf device for a new vdev: (guid, allocatable size).
fn open_new_leaf(path: &std::path::Path, devices: &mut Devices) -> Result<(u64, u64)> {
    let dev = open_path(path, true)?;
    let asize = leaf_asize(dev.size());
    if dev.size() < ozfs_format::label::SPA_MINDEVSIZE {
        return Err(Error::Invalid(format!(
            "{}: device is smaller than 64 MiB",
            path.display()
        )));
    }
    let guid = random_u64() | 1;
    devices.insert(guid, (dev, path.display().to_string()));
    Ok((guid, asize))
}

/// Open the leaves of a mirror, RAID-Z or dRAID vdev: their configs (by
/// child id) and the smallest allocatable size among them.
fn open_leaves(ps: &[PathBuf], devices: &mut Devices) -> Result<(Vec<NvList>, u64)> {
    let mut kids = Vec::new();
    let mut min = u64::MAX;
    for (i, p) in ps.iter().enumerate() {
        let (g, a) = open_new_leaf(p, devices)?;
        min = min.min(a);
        kids.push(leaf_nv(i as u64, g, p));
    }
    Ok((kids, min))
}

/// The config of top-level vdev `id` built from `t` (leaves opened into
/// `devices`), without the allocation keys; and its allocatable size.
fn top_config(id: u64, t: &TopSpec, ashift: u64, devices: &mut Devices) -> Result<(NvList, u64)> {
    let open_leaf = open_new_leaf;
    let mut nv = NvList::new();
    let asize = match t {
        // A log device is a disk or a mirror, as OpenZFS's zpool allows;
        // what marks it (`is_log`) is set with the allocation keys.
        TopSpec::Log(inner) => {
            if !matches!(**inner, TopSpec::Disk(_) | TopSpec::Mirror(_)) {
                return Err(Error::Invalid(
                    "invalid vdev specification: a log device is a disk or a mirror".into(),
                ));
            }
            return top_config(id, inner, ashift, devices);
        }
        TopSpec::Draid(spec, ps) => {
            let layout = spec.layout(ps.len() as u64, ashift as u32)?;
            let (kids, min) = open_leaves(ps, devices)?;
            let asize = layout.vdev_asize(min);
            if asize == 0 {
                return Err(Error::Invalid(format!(
                    "{}: devices too small for one group of {} rows of {} MiB",
                    layout.type_name(),
                    layout.width(),
                    ozfs_codec::draid::DRAID_ROW_HEIGHT >> 20
                )));
            }
            nv.set("type", NvValue::String("draid".into()));
            nv.set("id", NvValue::Uint64(id));
            nv.set("guid", NvValue::Uint64(random_u64() | 1));
            nv.set("nparity", NvValue::Uint64(layout.nparity as u64));
            nv.set("draid_ndata", NvValue::Uint64(layout.ndata as u64));
            nv.set("draid_nspares", NvValue::Uint64(layout.nspares as u64));
            nv.set("draid_ngroups", NvValue::Uint64(layout.ngroups));
            nv.set("children", NvValue::NvListArray(kids));
            asize
        }
        TopSpec::Disk(p) => {
            let (g, a) = open_leaf(p, devices)?;
            nv = leaf_nv(id, g, p);
            a
        }
        TopSpec::Mirror(ps) | TopSpec::Raidz(_, ps) => {
            let raidz = matches!(t, TopSpec::Raidz(..));
            let nparity = if let TopSpec::Raidz(p, _) = t { *p } else { 0 };
            if ps.len() < 2 || (raidz && ps.len() <= nparity) {
                return Err(Error::Invalid(format!(
                    "{} needs more devices",
                    if raidz { "raidz" } else { "mirror" }
                )));
            }
            let (kids, min) = open_leaves(ps, devices)?;
            nv.set(
                "type",
                NvValue::String(if raidz { "raidz" } else { "mirror" }.into()),
            );
            nv.set("id", NvValue::Uint64(id));
            nv.set("guid", NvValue::Uint64(random_u64() | 1));
            if raidz {
                nv.set("nparity", NvValue::Uint64(nparity as u64));
            }
            nv.set("children", NvValue::NvListArray(kids));
            if raidz {
                min * ps.len() as u64
            } else {
                min
            }
        }
    };
    Ok((nv, asize))
}

/// `zpool add`: a new top-level vdev from `t`, with the pool's ashift,
/// its metaslab array created in the MOS and an empty metaslab group in
/// the allocator; synced (every label then carries the new tree).
pub fn add_top(w: &mut PoolWriter, t: &TopSpec) -> Result<()> {
    let id = w.pool.root.children.len() as u64;
    let ashift = w.pool.root.children.first().map(|t| t.ashift).unwrap_or(9);
    let mut devices: Devices = BTreeMap::new();
    if matches!(t, TopSpec::Draid(..)) && crate::features::refcount(w, DRAID)?.is_none() {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!("a dRAID vdev ({DRAID} is not enabled: zpool upgrade)"),
        ));
    }
    if t.is_log() && w.version < SPA_VERSION_SLOGS {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!(
                "a log device in a version-{} pool (they need version {SPA_VERSION_SLOGS})",
                w.version
            ),
        ));
    }
    let (mut nv, asize) = top_config(id, t, ashift, &mut devices)?;
    let ms_shift = metaslab_shift_for(asize) as u64;
    let ms_array = w
        .mos
        .create_object(ot::OBJECT_ARRAY, 512, 0, Vec::new(), 1)?;
    nv.set("metaslab_array", NvValue::Uint64(ms_array));
    nv.set("metaslab_shift", NvValue::Uint64(ms_shift));
    nv.set("ashift", NvValue::Uint64(ashift));
    nv.set("asize", NvValue::Uint64(asize));
    nv.set("is_log", NvValue::Uint64(u64::from(t.is_log())));
    nv.set("create_txg", NvValue::Uint64(w.txg));
    let devs = devices.into_iter().map(|(g, (d, p))| (g, d, p)).collect();
    w.pool.add_top(nv, devs)?;
    let top = w
        .pool
        .root
        .children
        .get(id as usize)
        .ok_or_else(|| Error::Invalid("the new vdev is not in the tree".into()))?;
    let raidz = Geometry::of(top);
    let mut g = MetaslabGroup::new(id, ashift as u32, asize, ms_shift as u32, raidz);
    if t.is_log() {
        g.mark_log();
    }
    w.alloc.groups.push(g);
    w.ms_arrays.push(ms_array);
    w.config_dirty = true;
    draid_top_added(w, id)?;
    w.sync()
}

/// What a new dRAID top-level vdev `id` brings beside its config, as
/// OpenZFS's `spa_create`/`spa_vdev_add` do: the `draid` feature counts it,
/// and its distributed spares (`draid<P>-<id>-<s>`) join the spares list,
/// available. Nothing for other kinds of vdev.
fn draid_top_added(w: &mut PoolWriter, id: u64) -> Result<()> {
    let Some(top) = w.pool.root.children.get(id as usize) else {
        return Ok(());
    };
    let VdevKind::Draid { layout } = &top.kind else {
        return Ok(());
    };
    let (nparity, nspares, top_guid) = (layout.nparity, layout.nspares as u64, top.guid);
    crate::features::incr(w, DRAID, 1)?;
    if nspares > 0 {
        let mut spares = w.pool.spares();
        for s in 0..nspares {
            spares.push(ozfs_spa::spares::Spare {
                guid: random_u64() | 1,
                path: format!("draid{nparity}-{id}-{s}"),
                dev: None,
                distributed: Some((top_guid, s)),
            });
        }
        w.pool.set_spares(spares);
        w.spares_dirty = true;
    }
    Ok(())
}

/// `zpool add POOL spare DEV...` (and `create ... spare`): each device gets
/// a spare label and joins the MOS `spares` list; synced.
pub fn add_spares(w: &mut PoolWriter, paths: &[std::path::PathBuf]) -> Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    if w.version < 3 {
        return Err(Error::unsupported(
            "hot spares",
            format!("pool version {} (spares need version 3)", w.version),
        ));
    }
    let mut spares = w.pool.spares();
    // Every device is checked and opened before any label is written.
    let mut new = Vec::new();
    for p in paths {
        let path = p.display().to_string();
        if spares.iter().any(|s| s.path == path) || w.pool.find_leaf(&path).is_some() {
            return Err(Error::Invalid(format!("{path} is part of this pool")));
        }
        let mut devs = BTreeMap::new();
        let (guid, _) = open_new_leaf(p, &mut devs)?;
        let (dev, path) = devs
            .remove(&guid)
            .ok_or_else(|| Error::Invalid("device not opened".into()))?;
        new.push(ozfs_spa::spares::Spare {
            guid,
            path,
            dev: Some(dev),
            distributed: None,
        });
    }
    for s in &new {
        if let Some(d) = &s.dev {
            ozfs_spa::spares::write_spare_label(d.as_ref(), s.guid, w.version)?;
        }
    }
    spares.extend(new);
    w.pool.set_spares(spares);
    w.spares_dirty = true;
    w.sync()
}

/// Spares no longer in the tree get their spare label back (after a detach
/// or a completed replacement); spares that left the list for good lose
/// their labels' pool membership the same way.
pub fn relabel_spares(w: &PoolWriter, guids: &[u64]) {
    for s in w.pool.spares() {
        // A spare taken again meanwhile keeps its member labels.
        if !guids.contains(&s.guid) || w.pool.spare_state(&s) == ozfs_spa::spares::SpareState::InUse
        {
            continue;
        }
        if let Some(d) = &s.dev {
            if let Err(e) = ozfs_spa::spares::write_spare_label(d.as_ref(), s.guid, w.version) {
                eprintln!("ozfs: spare {}: label not written: {e}", s.path);
            }
        }
    }
}

/// Create a pool on the given device files and return a writer holding it
/// (already synced once, labels written, state ACTIVE).
///
/// `features` (short or full names) are enabled in a feature-flag pool
/// (`version` 5000, see [`upgrade`]); a legacy version takes none.
pub fn create_pool(
    name: &str,
    tops: &[TopSpec],
    ashift: u64,
    version: u64,
    features: &[&str],
) -> Result<PoolWriter> {
    let features_pool = version == SPA_VERSION_FEATURES;
    if !(1..=23).contains(&version) && !features_pool {
        return Err(Error::unsupported(
            "zpool create",
            format!("pool version {version} (ozfs creates versions 15 to 23, and 5000)"),
        ));
    }
    if !features_pool && !features.is_empty() {
        return Err(Error::Invalid(format!(
            "features need pool version 5000, not {version}"
        )));
    }
    if version < 15 {
        return Err(Error::unsupported(
            "zpool create",
            format!("pool version {version} (ozfs creates versions 15..=23)"),
        ));
    }
    if !(9..=16).contains(&ashift) {
        return Err(Error::Invalid(format!("ashift {ashift} must be 9..16")));
    }
    if tops.iter().all(TopSpec::is_log) {
        return Err(Error::Invalid("a pool needs at least one vdev".into()));
    }
    let pool_guid = random_u64() | 1;
    let mut devices: BTreeMap<u64, (Arc<dyn BlockDevice>, String)> = BTreeMap::new();
    let mut top_nvs = Vec::new();
    for (id, t) in tops.iter().enumerate() {
        let (mut nv, asize) = top_config(id as u64, t, ashift, &mut devices)?;
        let ms_shift = metaslab_shift_for(asize) as u64;
        // The MOS creates the metaslab arrays right after the object directory: objects 2, 3, ...
        nv.set("metaslab_array", NvValue::Uint64(2 + id as u64));
        nv.set("metaslab_shift", NvValue::Uint64(ms_shift));
        nv.set("ashift", NvValue::Uint64(ashift));
        nv.set("asize", NvValue::Uint64(asize));
        nv.set("is_log", NvValue::Uint64(u64::from(t.is_log())));
        nv.set("create_txg", NvValue::Uint64(TXG_INITIAL));
        top_nvs.push(nv);
    }
    // Build the tree over the opened devices.
    let mut opener = |guid: u64, _p: Option<&str>| devices.get(&guid).cloned();
    let mut root_nv = NvList::new();
    root_nv.set("type", NvValue::String("root".into()));
    root_nv.set("id", NvValue::Uint64(0));
    root_nv.set("guid", NvValue::Uint64(pool_guid));
    let mut root = Vdev::from_config(&root_nv, &mut opener)?;
    for nv in &top_nvs {
        root.children.push(Vdev::from_config(nv, &mut opener)?);
    }
    let mut cfg = NvList::new();
    cfg.set("version", NvValue::Uint64(version));
    cfg.set("name", NvValue::String(name.to_string()));
    let mut pool = Pool {
        name: name.to_string(),
        guid: pool_guid,
        config: cfg,
        root: ozfs_vdev::VdevCell::new(root),
        uberblock: Default::default(),
        uberblock_found: ozfs_vdev::labels::FoundUberblock {
            ub: Default::default(),
            label: 0,
            slot: 0,
            offset: 0,
        },
        mos_phys: ObjsetPhys::default(),
        readonly: false,
        device_paths: devices.values().map(|(_, p)| p.clone()).collect(),
        cache: ozfs_spa::arc::BlockCache::new(ozfs_spa::arc::BlockCache::default_budget()),
        data_cache: ozfs_spa::arc::BlockCache::new(ozfs_spa::arc::BlockCache::data_budget()),
        cache_data: Default::default(),
        external: Default::default(),
        hole_birth: Default::default(),
        label_features: Default::default(),
        active_features: Default::default(),
        checksum_salt: Default::default(),
        keys: Default::default(),
        unresolved_tops: Default::default(),
        brt: Default::default(),
        ddt: Default::default(),
        obsolete: Default::default(),
        indirect: Default::default(),
        io_hold: Default::default(),
        writeback: Default::default(),
        zil_io: Default::default(),
        heal: Default::default(),
        repaired: Default::default(),
        spares: Default::default(),
        spare_candidates: Default::default(),
    };
    pool.uberblock.version = version;
    pool.uberblock.txg = TXG_INITIAL - 1;
    // Fresh labels: no stale uberblock may outrank ours.
    pool.clear_label_rings()?;
    let mos_phys = ObjsetPhys {
        meta_dnode: empty_dnode(ot::DNODE, 32, 1),
        zil_header: vec![0u8; 192],
        os_type: OBJSET_TYPE_META,
        ..Default::default()
    };
    let pool = Arc::new(pool);
    let mut groups = Vec::new();
    for top in &pool.root.children {
        let raidz = Geometry::of(top);
        let ms_shift = top.config.get_u64("metaslab_shift").unwrap_or(17) as u32;
        let mut g = MetaslabGroup::new(top.id, top.ashift as u32, top.asize, ms_shift, raidz);
        if top.config.get_u64("is_log").unwrap_or(0) != 0 {
            g.mark_log();
        }
        groups.push(g);
    }
    let mut alloc = Allocator::new(groups);
    alloc.set_synced_txg(TXG_INITIAL - 1);
    let mos = ObjsetTx::new(Objset::from_parts(
        pool.clone(),
        BlkPtr::default(),
        mos_phys,
    ));
    let mut w = PoolWriter::new_raw(pool.clone(), alloc, mos, TXG_INITIAL, version);
    build_mos(&mut w)?;
    if features_pool {
        upgrade(&mut w, features)?;
        zap_tx::add(
            &mut w.mos,
            1,
            b"creation_version",
            8,
            &[SPA_VERSION_FEATURES],
        )?;
    }
    for id in 0..tops.len() as u64 {
        if matches!(tops.get(id as usize), Some(TopSpec::Draid(..))) {
            if crate::features::refcount(&w, DRAID)?.is_none() {
                return Err(Error::unsupported(
                    "zpool create",
                    format!("a dRAID vdev without {DRAID} (it needs a feature-flag pool)"),
                ));
            }
            draid_top_added(&mut w, id)?;
        }
    }
    w.config_dirty = true;
    w.state = POOL_STATE_ACTIVE;
    crate::ddt::load(&w)?;
    w.sync()?;
    Ok(w)
}

/// `zpool upgrade`: raise a version-23 pool to feature flags (version
/// 5000) in the open txg, with what the versions between need — the
/// `$FREE` directory and the `free_bpobj` list of pool version 26 (ozfs
/// frees at once, so both stay empty; snapshots taken before keep their
/// version-23 dead lists, new ones get the new format) — then enable
/// `features` ([`crate::features::enable`]). On a feature-flag pool only
/// the features are enabled. The caller syncs.
pub fn upgrade(w: &mut PoolWriter, features: &[&str]) -> Result<()> {
    if w.version > 23 && w.version < SPA_VERSION_FEATURES {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!("upgrading a version-{} pool", w.version),
        ));
    }
    w.clones_dirty = true;
    // Error logs a version-23 pool keeps are in the old, per-pool form;
    // `head_errlog` would make OpenZFS read them as per-dataset logs.
    let mut old_errlog = false;
    for k in ["errlog_last", "errlog_scrub"] {
        if let Some(o) = zap_tx::lookup(&w.mos, 1, k.as_bytes())?.and_then(|e| e.as_u64()) {
            old_errlog |= o != 0 && !zap_tx::list(&w.mos, o)?.is_empty();
        }
    }
    let features: Vec<&str> = features
        .iter()
        .copied()
        .filter(|f| {
            !(old_errlog && crate::features::feature(f).is_some_and(|x| x.name == "head_errlog"))
        })
        .collect();
    let features = &features[..];
    if zap_tx::lookup(&w.mos, 1, b"free_bpobj")?.is_none() {
        let root_dir = w.root_dir_obj;
        let root_child = w.dir(root_dir)?.child_dir_zapobj;
        let free_dir = new_dir(w, root_dir)?;
        zap_tx::add(&mut w.mos, root_child, b"$FREE", 8, &[free_dir])?;
        let free = new_bplist(w, 128 * 1024)?;
        zap_tx::add(&mut w.mos, 1, b"free_bpobj", 8, &[free])?;
    }
    if w.version != SPA_VERSION_FEATURES {
        w.version = SPA_VERSION_FEATURES;
        w.config_dirty = true;
    }
    crate::features::enable(w, features)
}

/// Every DSL directory's `dd_clones` (pool version 26 on: the head
/// datasets whose origin is one of the directory's snapshots, keyed by
/// their object number in hex), made to match the directories' origins.
/// OpenZFS removes a file system from its origin's list when destroying
/// it, and insists the entry is there; ozfs's file systems all have an
/// origin (`$ORIGIN@$ORIGIN` at least).
pub(crate) fn refresh_dir_clones(w: &mut PoolWriter) -> Result<()> {
    // Every directory, from the root down (bounded by the objects seen).
    let mut dirs: Vec<u64> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![w.root_dir_obj];
    while let Some(d) = todo.pop() {
        if !seen.insert(d) {
            return Err(Error::corrupt(
                "DSL directory tree",
                format!("directory {d} is reached twice"),
            ));
        }
        dirs.push(d);
        let child = w.dir(d)?.child_dir_zapobj;
        if child != 0 {
            for e in zap_tx::list(&w.mos, child)? {
                if let Some(c) = e.as_u64() {
                    todo.push(c);
                }
            }
        }
    }
    let mut want: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for &d in &dirs {
        let dp = w.dir(d)?;
        if dp.head_dataset_obj != 0 && dp.origin_obj != 0 {
            let od = w.dataset(dp.origin_obj)?.dir_obj;
            want.entry(od).or_default().insert(dp.head_dataset_obj);
        }
    }
    for &d in &dirs {
        let mut dp = w.dir(d)?;
        let wanted = want.remove(&d).unwrap_or_default();
        if dp.clones == 0 {
            if wanted.is_empty() {
                continue;
            }
            dp.clones = w.mos.create_zap(ot::DSL_CLONES, 0, Vec::new(), 0, 1)?;
            w.set_dir(d, &dp)?;
        }
        let have: std::collections::BTreeSet<u64> = zap_tx::list(&w.mos, dp.clones)?
            .iter()
            .filter_map(|e| e.as_u64())
            .collect();
        for gone in have.difference(&wanted) {
            zap_tx::remove(&mut w.mos, dp.clones, format!("{gone:x}").as_bytes())?;
        }
        for new in wanted.difference(&have) {
            zap_tx::add(
                &mut w.mos,
                dp.clones,
                format!("{new:x}").as_bytes(),
                8,
                &[*new],
            )?;
        }
    }
    Ok(())
}

fn dir_phys(parent: u64, child_map: u64, props: u64) -> DslDirPhys {
    DslDirPhys {
        creation_time: now_secs(),
        parent_obj: parent,
        child_dir_zapobj: child_map,
        props_zapobj: props,
        flags: 1,
        ..Default::default()
    }
}

fn new_dir(w: &mut PoolWriter, parent: u64) -> Result<u64> {
    let dir = w
        .mos
        .create_object(ot::DSL_DIR, 512, ot::DSL_DIR, vec![0u8; 256], 1)?;
    let props = w.mos.create_zap(ot::DSL_PROPS, 0, Vec::new(), 0, 1)?;
    let child = w
        .mos
        .create_zap(ot::DSL_DIR_CHILD_MAP, 0, Vec::new(), 0, 1)?;
    w.set_dir(dir, &dir_phys(parent, child, props))?;
    Ok(dir)
}

/// A new, empty pool-v23 bplist (dead lists: 128 KiB blocks).
pub(crate) fn new_bplist(w: &mut PoolWriter, blksz: u64) -> Result<u64> {
    w.mos
        .create_object(ot::BPOBJ, blksz, ot::BPOBJ_HDR, vec![0u8; 32], 1)
}

fn build_mos(w: &mut PoolWriter) -> Result<()> {
    let txg = w.txg;
    let objdir = w
        .mos
        .create_zap(ot::OBJECT_DIRECTORY, 0, Vec::new(), 0, 1)?;
    if objdir != 1 {
        return Err(Error::Invalid(format!(
            "object directory got object {objdir}"
        )));
    }
    for (i, top) in w.pool.root.children.iter().enumerate() {
        let want = top.config.get_u64("metaslab_array").unwrap_or(0);
        let got = w
            .mos
            .create_object(ot::OBJECT_ARRAY, 512, 0, Vec::new(), 1)?;
        if got != want || got != 2 + i as u64 {
            return Err(Error::Invalid(format!(
                "metaslab array of vdev {i} got object {got}, expected {want}"
            )));
        }
    }
    // Root DSL directory, $MOS, $ORIGIN.
    let root_dir = w
        .mos
        .create_object(ot::DSL_DIR, 512, ot::DSL_DIR, vec![0u8; 256], 1)?;
    let root_props = w.mos.create_zap(ot::DSL_PROPS, 0, Vec::new(), 0, 1)?;
    let root_child = w
        .mos
        .create_zap(ot::DSL_DIR_CHILD_MAP, 0, Vec::new(), 0, 1)?;
    w.set_dir(root_dir, &dir_phys(0, root_child, root_props))?;
    w.root_dir_obj = root_dir;
    let mos_dir = w
        .mos
        .create_object(ot::DSL_DIR, 512, ot::DSL_DIR, vec![0u8; 256], 1)?;
    let mos_props = w.mos.create_zap(ot::DSL_PROPS, 0, Vec::new(), 0, 1)?;
    let mos_child = w
        .mos
        .create_zap(ot::DSL_DIR_CHILD_MAP, 0, Vec::new(), 0, 1)?;
    w.set_dir(mos_dir, &dir_phys(root_dir, mos_child, mos_props))?;
    zap_tx::add(&mut w.mos, root_child, b"$MOS", 8, &[mos_dir])?;
    let origin_dir = w
        .mos
        .create_object(ot::DSL_DIR, 512, ot::DSL_DIR, vec![0u8; 256], 1)?;
    let origin_props = w.mos.create_zap(ot::DSL_PROPS, 0, Vec::new(), 0, 1)?;
    let origin_child = w
        .mos
        .create_zap(ot::DSL_DIR_CHILD_MAP, 0, Vec::new(), 0, 1)?;
    zap_tx::add(&mut w.mos, root_child, b"$ORIGIN", 8, &[origin_dir])?;
    // $ORIGIN head and $ORIGIN@$ORIGIN.
    let origin_ds =
        w.mos
            .create_object(ot::DSL_DATASET, 512, ot::DSL_DATASET, vec![0u8; 320], 1)?;
    let origin_snapnames = w.mos.create_zap(
        ot::DSL_DS_SNAP_MAP,
        0,
        Vec::new(),
        ozfs_format::zap::U8_TEXTPREP_TOUPPER,
        1,
    )?;
    // Dead lists: from pool version 26 $ORIGIN@$ORIGIN's is an empty
    // new-format list and the $ORIGIN head's has the one key 0, which
    // every file system's dead list starts from.
    let new_format = w.version >= 26;
    let snap_deadlist = if new_format {
        w.deadlist_alloc()?
    } else {
        new_bplist(w, 128 * 1024)?
    };
    let origin_snap =
        w.mos
            .create_object(ot::DSL_DATASET, 512, ot::DSL_DATASET, vec![0u8; 320], 1)?;
    let head_deadlist = if new_format {
        let dl = w.deadlist_alloc()?;
        w.deadlist_add_key(dl, 0)?;
        dl
    } else {
        new_bplist(w, 128 * 1024)?
    };
    let next_clones = w.mos.create_zap(37, 0, Vec::new(), 0, 1)?;
    let t = now_secs();
    w.set_dir(
        origin_dir,
        &DslDirPhys {
            head_dataset_obj: origin_ds,
            ..dir_phys(root_dir, origin_child, origin_props)
        },
    )?;
    w.set_dataset(
        origin_ds,
        &DslDatasetPhys {
            dir_obj: origin_dir,
            prev_snap_obj: origin_snap,
            prev_snap_txg: 1,
            snapnames_zapobj: origin_snapnames,
            creation_time: t,
            creation_txg: 1,
            deadlist_obj: head_deadlist,
            fsid_guid: random_u64() & ((1 << 56) - 1),
            guid: random_u64(),
            flags: 4,
            ..Default::default()
        },
    )?;
    w.set_dataset(
        origin_snap,
        &DslDatasetPhys {
            dir_obj: origin_dir,
            next_snap_obj: origin_ds,
            num_children: 1,
            creation_time: t,
            creation_txg: 1,
            deadlist_obj: snap_deadlist,
            fsid_guid: random_u64() & ((1 << 56) - 1),
            guid: random_u64(),
            flags: 4,
            next_clones_obj: next_clones,
            ..Default::default()
        },
    )?;
    zap_tx::add(&mut w.mos, origin_snapnames, b"$ORIGIN", 8, &[origin_snap])?;
    // The root file system: a clone of $ORIGIN@$ORIGIN.
    let root_ds = new_dataset(w, root_dir, origin_snap, NewObjset::Zpl)?;
    let mut rd = w.dir(root_dir)?;
    rd.head_dataset_obj = root_ds;
    rd.origin_obj = origin_snap;
    w.set_dir(root_dir, &rd)?;
    // Config, deferred frees, metaslab arrays.
    let config = w.mos.create_object(
        ot::PACKED_NVLIST,
        16384,
        ot::PACKED_NVLIST_SIZE,
        vec![0u8; 8],
        1,
    )?;
    let sync_bplist = new_bplist(w, 16384)?;
    zap_tx::add(&mut w.mos, 1, b"root_dataset", 8, &[root_dir])?;
    zap_tx::add(&mut w.mos, 1, b"config", 8, &[config])?;
    zap_tx::add(&mut w.mos, 1, b"deflate", 8, &[1])?;
    zap_tx::add(&mut w.mos, 1, b"sync_bplist", 8, &[sync_bplist])?;
    let _ = txg;
    Ok(())
}

/// Create a head dataset in DSL directory `dir` as a clone of `origin_snap`, with a fresh ZPL objset.
/// What the objset of a new dataset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewObjset {
    /// A ZPL file system: master node, root directory, delete queue.
    Zpl,
    /// A volume (ZVOL): object 1 its data in `blocksize` blocks, object 2
    /// the `zvol` ZAP holding its `size` (OpenZFS's `zvol_create_cb`).
    Zvol { size: u64, blocksize: u64 },
}

fn new_dataset(w: &mut PoolWriter, dir: u64, origin_snap: u64, kind: NewObjset) -> Result<u64> {
    let txg = w.txg;
    w.clones_dirty = true;
    let snapnames = w.mos.create_zap(
        ot::DSL_DS_SNAP_MAP,
        0,
        Vec::new(),
        ozfs_format::zap::U8_TEXTPREP_TOUPPER,
        1,
    )?;
    // The dead list the origin's head would give a clone of it.
    let (origin_head_dl, origin_txg) = {
        let o = w.dataset(origin_snap)?;
        let head = w.dir(o.dir_obj)?.head_dataset_obj;
        let dl = if head != 0 {
            w.dataset(head)?.deadlist_obj
        } else {
            0
        };
        (dl, o.creation_txg)
    };
    let deadlist = w.deadlist_clone(origin_head_dl, origin_txg, origin_snap)?;
    let ds_obj = w
        .mos
        .create_object(ot::DSL_DATASET, 512, ot::DSL_DATASET, vec![0u8; 320], 1)?;
    w.set_dataset(
        ds_obj,
        &DslDatasetPhys {
            dir_obj: dir,
            prev_snap_obj: origin_snap,
            prev_snap_txg: 1,
            snapnames_zapobj: snapnames,
            creation_time: now_secs(),
            creation_txg: txg,
            deadlist_obj: deadlist,
            fsid_guid: random_u64() & ((1 << 56) - 1),
            guid: random_u64(),
            flags: 4,
            ..Default::default()
        },
    )?;
    crate::features::inherit_dataset_features(w, origin_snap, ds_obj)?;
    let mut snap = w.dataset(origin_snap)?;
    snap.num_children += 1;
    let clones = snap.next_clones_obj;
    w.set_dataset(origin_snap, &snap)?;
    if clones != 0 {
        zap_tx::add(
            &mut w.mos,
            clones,
            format!("{ds_obj:x}").as_bytes(),
            8,
            &[ds_obj],
        )?;
    }
    if let NewObjset::Zvol { size, blocksize } = kind {
        let otx = new_zvol_objset(w, size, blocksize)?;
        w.fs.insert(ds_obj, otx);
        return Ok(ds_obj);
    }
    // The ZPL objset, its accounting complete from the start (OpenZFS's
    // `dmu_objset_create_impl_dnstats`): user and group space from pool
    // version 15, object counts and projects where their features are
    // enabled, which the dataset then lists.
    let accounting = w.fs_accounting(OBJSET_TYPE_ZFS)?;
    let mut flags = 0;
    if let Some(a) = accounting {
        flags |= OBJSET_FLAG_USERACCOUNTING_COMPLETE;
        if a.objects {
            flags |= OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE;
            crate::features::activate_on_dataset(w, ds_obj, crate::features::USEROBJ_ACCOUNTING)?;
        }
        if a.projects {
            flags |= OBJSET_FLAG_PROJECTQUOTA_COMPLETE;
            crate::features::activate_on_dataset(w, ds_obj, crate::features::PROJECT_QUOTA)?;
        }
    }
    let phys = ObjsetPhys {
        meta_dnode: empty_dnode(ot::DNODE, 32, 7),
        zil_header: vec![0u8; 192],
        os_type: OBJSET_TYPE_ZFS,
        flags,
        ..Default::default()
    };
    let mut otx = ObjsetTx::new(Objset::from_parts(w.pool.clone(), BlkPtr::default(), phys));
    if let Some(a) = accounting {
        otx.enable_accounting(a);
    }
    otx.micro_max_cap = w.micro_max_cap()?;
    let zpl_version = zpl_version_for(w.version);
    let master = otx.create_zap(ot::MASTER_NODE, 0, Vec::new(), 0, 1)?;
    // ZPL 5: the system-attribute master node, every ZPL attribute
    // registered, and the layouts (the root directory's is the first, 2).
    let sa = if zpl_version >= 5 {
        let sa_master = otx.create_zap(ot::SA_MASTER_NODE, 0, Vec::new(), 0, 1)?;
        let registry = otx.create_zap(ot::SA_ATTR_REGISTRATION, 0, Vec::new(), 0, 1)?;
        let layouts = otx.create_zap(ot::SA_ATTR_LAYOUTS, 0, Vec::new(), 0, 1)?;
        for (name, v) in ozfs_format::znode::zpl_sa_registry() {
            zap_tx::add(&mut otx, registry, name.as_bytes(), 8, &[v])?;
        }
        zap_tx::add(&mut otx, sa_master, b"REGISTRY", 8, &[registry])?;
        zap_tx::add(&mut otx, sa_master, b"LAYOUTS", 8, &[layouts])?;
        Some((sa_master, layouts))
    } else {
        None
    };
    let dq = otx.create_zap(ot::UNLINKED_SET, 0, Vec::new(), 0, 1)?;
    let t = ozfs_zpl_time();
    let attrs = ZplAttrs {
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        gen: txg,
        mode: S_IFDIR | 0o755,
        size: 2,
        parent: 0,
        links: 2,
        // Project 0, as OpenZFS gives its root where projects are kept.
        projid: (sa.is_some() && accounting.is_some_and(|a| a.projects)).then_some(0),
        ..Default::default()
    };
    let bonustype = if sa.is_some() { ot::SA } else { ot::ZNODE };
    // A full-size bonus first: the dnode keeps one block pointer.
    let root = otx.create_zap(ot::DIRECTORY_CONTENTS, bonustype, vec![0; 320], 0, 1)?;
    let mut a = attrs;
    a.parent = root;
    match sa {
        Some((sa_master, layouts)) => {
            let attrs: Vec<u64> = a.sa_layout_attrs().iter().map(|&n| n as u64).collect();
            zap_tx::add(&mut otx, layouts, b"2", 2, &attrs)?;
            otx.set_bonus(root, a.to_sa(2))?;
            zap_tx::add(&mut otx, master, b"SA_ATTRS", 8, &[sa_master])?;
        }
        None => otx.set_bonus(root, a.to_znode_trivial_acl())?,
    }
    for (k, v) in [
        ("VERSION", zpl_version),
        ("ROOT", root),
        ("DELETE_QUEUE", dq),
        ("normalization", 0),
        ("utf8only", 0),
        ("casesensitivity", 0),
    ] {
        zap_tx::add(&mut otx, master, k.as_bytes(), 8, &[v])?;
    }
    w.fs.insert(ds_obj, otx);
    Ok(ds_obj)
}

/// Object 1 of a volume: its data.
pub const ZVOL_OBJ: u64 = 1;
/// Object 2 of a volume: the ZAP of its properties (`size`).
pub const ZVOL_ZAP_OBJ: u64 = 2;

/// A volume's objset as OpenZFS's `zvol_create_cb` makes it: the data
/// object (no bonus, three block pointers, `blocksize` data blocks,
/// 128 KiB indirect blocks where the pool has feature flags) and the
/// `zvol` ZAP with `size`. No user accounting (OpenZFS keeps it for
/// file systems only).
fn new_zvol_objset(w: &mut PoolWriter, size: u64, blocksize: u64) -> Result<ObjsetTx> {
    let phys = ObjsetPhys {
        meta_dnode: empty_dnode(ot::DNODE, 32, 7),
        zil_header: vec![0u8; 192],
        os_type: ozfs_format::objset::OBJSET_TYPE_ZVOL,
        ..Default::default()
    };
    let mut otx = ObjsetTx::new(Objset::from_parts(w.pool.clone(), BlkPtr::default(), phys));
    otx.micro_max_cap = w.micro_max_cap()?;
    let data = otx.create_object(ot::ZVOL, blocksize, 0, Vec::new(), ZVOL_OBJ)?;
    let zap = otx.create_zap(ot::ZVOL_PROP, 0, Vec::new(), 0, ZVOL_ZAP_OBJ)?;
    if data != ZVOL_OBJ || zap != ZVOL_ZAP_OBJ {
        return Err(Error::Invalid(format!(
            "a new volume's objects are {data} and {zap}, not 1 and 2"
        )));
    }
    if w.version >= SPA_VERSION_FEATURES {
        otx.set_indblkshift(ZVOL_OBJ, 17)?;
    }
    zap_tx::add(&mut otx, ZVOL_ZAP_OBJ, b"size", 8, &[size])?;
    Ok(otx)
}

/// The smallest and largest `volblocksize` (512 bytes; 128 KiB, or 16 MiB
/// where `large_blocks` is enabled) and the default of new volumes
/// (OpenZFS 2.2 and later: 16 KiB; 8 KiB in pools of version 28 and
/// before, as their ZFS made them).
pub fn volblocksize_default(version: u64) -> u64 {
    if version >= SPA_VERSION_FEATURES {
        16384
    } else {
        8192
    }
}

/// Check a volume's size and block size as `zfs create -V` does.
pub fn check_volume(w: &PoolWriter, size: u64, blocksize: u64) -> Result<()> {
    let max_bs = if crate::features::refcount(w, "org.open-zfs:large_blocks")?.is_some() {
        16 << 20
    } else {
        128 << 10
    };
    if !blocksize.is_power_of_two() || !(512..=max_bs).contains(&blocksize) {
        return Err(Error::Invalid(format!(
            "'volblocksize' must be power of 2 from 512B to {}",
            if max_bs > 128 << 10 { "16M" } else { "128K" }
        )));
    }
    if size == 0 {
        return Err(Error::Invalid("volume size cannot be zero".into()));
    }
    if size > i64::MAX as u64 {
        return Err(Error::Invalid(format!("volume size {size} is too large")));
    }
    if !size.is_multiple_of(blocksize) {
        return Err(Error::Invalid(format!(
            "volume size must be a multiple of volume block size ({blocksize})"
        )));
    }
    Ok(())
}

/// The `refreservation` a non-sparse volume of `volsize` bytes gets (the
/// arithmetic of libzfs's `zvol_volsize_to_reservation`): its data blocks
/// scaled, on RAID-Z vdevs, by what a `blocksize` block takes against a
/// 128 KiB one (`volsize_from_vdevs`: the largest over the vdevs), times
/// `copies`; plus 128 KiB for every indirect block a full volume needs
/// and the meta-dnode's seven levels, times the copies metadata gets
/// (`min(3, copies + 1)`).
pub fn zvol_reservation(root: &ozfs_vdev::Vdev, volsize: u64, blocksize: u64, copies: u64) -> u64 {
    let nblocks = volsize / blocksize.max(1);
    let mut data = 0u64;
    for top in &root.children {
        if let ozfs_vdev::VdevKind::Raidz { nparity } = top.kind {
            let n = top.children.len();
            let ashift = top.ashift as u32;
            let t = libzfs_raidz_asize(n as u64, nparity as u64, ashift, 128 << 10);
            let a = libzfs_raidz_asize(n as u64, nparity as u64, ashift, blocksize);
            if t > 0 {
                let v = (nblocks as u128 * a as u128 * (128u128 << 10) / t as u128) as u64;
                data = data.max(v);
            }
        }
    }
    if data == 0 {
        data = nblocks.saturating_mul(blocksize);
    }
    let mut numdb = 7u64;
    let mut n = nblocks;
    while n > 1 {
        n = n.div_ceil(1024);
        numdb += n;
    }
    let copies = copies.clamp(1, 3);
    numdb = numdb.saturating_mul((copies + 1).min(3));
    data.saturating_mul(copies)
        .saturating_add(numdb.saturating_mul(128 << 10))
}

/// libzfs's estimate of a RAID-Z allocation (whole parity rows, padded
/// to `nparity + 1` sectors).
fn libzfs_raidz_asize(ndisks: u64, nparity: u64, ashift: u32, blksize: u64) -> u64 {
    if ndisks <= nparity {
        return 0;
    }
    let ndata = ndisks - nparity;
    let mut a = ((blksize.max(1) - 1) >> ashift) + 1;
    a += nparity * a.div_ceil(ndata);
    (a.div_ceil(nparity + 1) * (nparity + 1)) << ashift
}

fn ozfs_zpl_time() -> (u64, u64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_nanos() as u64)
}

/// `zfs create`: a new file system `name` (its parent must exist), with
/// properties; encrypted as its parent is (a child of an encrypted file
/// system gets a key of its own under the same encryption root).
pub fn create_filesystem(
    w: &mut PoolWriter,
    name: &str,
    props: &[(String, PropSetting)],
) -> Result<u64> {
    create_filesystem_crypt(
        w,
        name,
        props,
        crate::crypt::NewCrypt::Inherit { suite: None },
    )
}

/// [`create_filesystem`], encrypted as `crypt` says (`zfs create -o
/// encryption=… -o keyformat=…`).
pub fn create_filesystem_crypt(
    w: &mut PoolWriter,
    name: &str,
    props: &[(String, PropSetting)],
    crypt: crate::crypt::NewCrypt,
) -> Result<u64> {
    create_dataset(w, name, props, crypt, NewObjset::Zpl)
}

/// `zfs create -V`: a new volume `name` of `size` bytes in `blocksize`
/// blocks, with properties (the caller adds `refreservation` for a
/// non-sparse one, [`zvol_reservation`]); encrypted as
/// [`create_filesystem_crypt`] says.
pub fn create_volume(
    w: &mut PoolWriter,
    name: &str,
    size: u64,
    blocksize: u64,
    props: &[(String, PropSetting)],
    crypt: crate::crypt::NewCrypt,
) -> Result<u64> {
    check_volume(w, size, blocksize).map_err(|e| e.context(&format!("cannot create '{name}'")))?;
    create_dataset(w, name, props, crypt, NewObjset::Zvol { size, blocksize })
}

fn create_dataset(
    w: &mut PoolWriter,
    name: &str,
    props: &[(String, PropSetting)],
    crypt: crate::crypt::NewCrypt,
    kind: NewObjset,
) -> Result<u64> {
    let (parent_name, child) = name
        .rsplit_once('/')
        .ok_or_else(|| Error::Invalid(format!("cannot create '{name}': missing dataset name")))?;
    if let Err(why) = ozfs_format::names::check_dataset_name(name) {
        return Err(Error::Invalid(format!("cannot create '{name}': {why}")));
    }
    w.check_slop(
        crate::slop::SpaceCheck::Normal,
        6,
        &format!("cannot create '{name}'"),
    )?;
    let dsl = w.dsl();
    let parent = dsl.lookup(parent_name).map_err(|_| {
        Error::not_found(format!(
            "cannot create '{name}': parent '{parent_name}' does not exist"
        ))
    })?;
    if parent.is_snapshot {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': parent is a snapshot"
        )));
    }
    let pdir = w.dir(parent.dir_obj)?;
    if zap_tx::lookup(&w.mos, pdir.child_dir_zapobj, child.as_bytes())?.is_some() {
        return Err(Error::Exists(format!(
            "cannot create '{name}': dataset already exists"
        )));
    }
    // Checked before anything is made.
    let crypt = w.plan_new_crypt(name, parent.dir_obj, crypt)?;
    let origin_snap = {
        let root = w.dir(w.root_dir_obj)?;
        let od = zap_tx::lookup_u64(&w.mos, root.child_dir_zapobj, "$ORIGIN")?;
        let odir = w.dir(od)?;
        w.dataset(odir.head_dataset_obj)?.prev_snap_obj
    };
    let dir = new_dir(w, parent.dir_obj)?;
    zap_tx::add(
        &mut w.mos,
        pdir.child_dir_zapobj,
        child.as_bytes(),
        8,
        &[dir],
    )?;
    let ds = new_dataset(w, dir, origin_snap, kind)?;
    let mut d = w.dir(dir)?;
    d.head_dataset_obj = ds;
    d.origin_obj = origin_snap;
    w.set_dir(dir, &d)?;
    for (k, v) in props {
        set_prop_dir(w, dir, k, v)?;
    }
    // Encrypted: its first objset is sealed with its new key.
    if let Some(plan) = crypt {
        let key = w.encrypt_new_dir(dir, ds, plan)?;
        w.fs.get_mut(&ds)
            .ok_or_else(|| Error::Invalid(format!("cannot create '{name}': no new objset")))?
            .os
            .key = Some(key);
    }
    Ok(ds)
}

/// `zfs clone SNAPSHOT NAME`: a new file system whose objset is the
/// snapshot's (shared, copy-on-write from here on). The snapshot counts
/// the clone among its children and in its `next_clones` map; the new
/// directory names it as origin. Nothing is copied.
pub fn clone_filesystem(w: &mut PoolWriter, origin: &str, name: &str) -> Result<u64> {
    w.check_slop(
        crate::slop::SpaceCheck::Normal,
        6,
        &format!("cannot create '{name}'"),
    )?;
    let dsl = w.dsl();
    let snap = dsl
        .lookup(origin)
        .map_err(|_| Error::not_found(format!("cannot open '{origin}': dataset does not exist")))?;
    if !snap.is_snapshot {
        return Err(Error::Invalid(format!(
            "cannot clone '{origin}': not a snapshot"
        )));
    }
    // The pool is the first component (a root snapshot is `pool@snap`).
    if name.split(['/', '@']).next() != origin.split(['/', '@']).next() {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': source and target pools differ"
        )));
    }
    let ds = create_filesystem_crypt(w, name, &[], crate::crypt::NewCrypt::Later)?;
    // Not the fresh ZPL objset: the snapshot's.
    w.fs.remove(&ds);
    // An encrypted origin's key object is shared.
    let clone_dir = w.dataset(ds)?.dir_obj;
    w.clone_dir_key(clone_dir, snap.dir_obj)
        .map_err(|e| e.context(&format!("cannot create '{name}'")))?;
    let empty_origin = {
        let d = w.dataset(ds)?;
        d.prev_snap_obj
    };
    // Undo the link to $ORIGIN made by create_filesystem.
    let mut eo = w.dataset(empty_origin)?;
    eo.num_children = eo.num_children.saturating_sub(1);
    let eclones = eo.next_clones_obj;
    w.set_dataset(empty_origin, &eo)?;
    if eclones != 0 {
        zap_tx::remove(&mut w.mos, eclones, format!("{ds:x}").as_bytes())?;
    }
    let s = snap.ds;
    let mut d = w.dataset(ds)?;
    d.prev_snap_obj = snap.ds_obj;
    d.prev_snap_txg = s.creation_txg;
    // The dead list of a clone: the keys of the origin's head below the
    // origin's txg (OpenZFS later folds them as the origin's snapshots
    // go, and needs them there).
    let origin_head = w.dir(s.dir_obj)?.head_dataset_obj;
    let head_dl = w.dataset(origin_head)?.deadlist_obj;
    let dl = w.deadlist_clone(head_dl, s.creation_txg, snap.ds_obj)?;
    w.deadlist_free(d.deadlist_obj)?;
    d.deadlist_obj = dl;
    crate::features::replace_dataset_features(w, snap.ds_obj, ds)?;
    d.bp = s.bp;
    d.referenced_bytes = s.referenced_bytes;
    d.compressed_bytes = s.compressed_bytes;
    d.uncompressed_bytes = s.uncompressed_bytes;
    d.unique_bytes = 0;
    w.set_dataset(ds, &d)?;
    let mut o = w.dataset(snap.ds_obj)?;
    o.num_children += 1;
    if o.next_clones_obj == 0 {
        o.next_clones_obj = w.mos.create_zap(ot::NEXT_CLONES, 0, Vec::new(), 0, 1)?;
    }
    let clones = o.next_clones_obj;
    w.set_dataset(snap.ds_obj, &o)?;
    zap_tx::add(&mut w.mos, clones, format!("{ds:x}").as_bytes(), 8, &[ds])?;
    let dir = d.dir_obj;
    let mut dd = w.dir(dir)?;
    dd.origin_obj = snap.ds_obj;
    w.set_dir(dir, &dd)?;
    Ok(ds)
}

/// A property value as stored.
#[derive(Debug, Clone)]
pub enum PropSetting {
    Num(u64),
    Text(String),
}

/// Store a property in a DSL directory's props ZAP.
pub fn set_prop_dir(w: &mut PoolWriter, dir: u64, name: &str, v: &PropSetting) -> Result<()> {
    crate::props::check_for_pool(w, name, v)?;
    w.check_slop(
        crate::slop::SpaceCheck::Reserved,
        2,
        &format!("cannot set property '{name}'"),
    )?;
    let v = &crate::props::for_pool_version(w.version, name, v);
    // A salted checksum needs the pool's salt.
    if let ("checksum" | "dedup", PropSetting::Num(n)) = (name, v) {
        use ozfs_format::types::cksum;
        if [cksum::SKEIN, cksum::EDONR, cksum::BLAKE3]
            .iter()
            .any(|&c| c as u64 == *n & 0xff)
        {
            crate::props::ensure_checksum_salt(w)?;
        }
    }
    // A quota lives in the directory itself (`dd_quota`), where every ZFS
    // reads it; an older ozfs's copy in the properties object goes.
    if let ("quota", PropSetting::Num(n)) = (name, v) {
        let mut d = w.dir(dir)?;
        d.quota = *n;
        w.set_dir(dir, &d)?;
        if d.props_zapobj != 0 {
            zap_tx::remove(&mut w.mos, d.props_zapobj, b"quota")?;
        }
        return Ok(());
    }
    let props = w.dir(dir)?.props_zapobj;
    store_prop(w, props, name, v)?;
    if name == "refreservation" {
        w.refreservation_touched(dir)?;
    }
    Ok(())
}

/// A text pool property as stored in the MOS `pool_props` ZAP (None:
/// not set).
pub fn pool_prop_text(w: &PoolWriter, name: &str) -> Result<Option<String>> {
    let Some(props) = zap_tx::lookup(&w.mos, 1, b"pool_props")?.and_then(|e| e.as_u64()) else {
        return Ok(None);
    };
    Ok(zap_tx::lookup(&w.mos, props, name.as_bytes())?.and_then(|e| e.as_string()))
}

/// Store a pool property in the MOS `pool_props` ZAP (DMU_OT_POOL_PROPS,
/// named in the object directory), made on first use as ZFS makes it:
/// numbers and indexes as one `u64`, text as a NUL-terminated string.
pub fn set_pool_prop(w: &mut PoolWriter, name: &str, v: &PropSetting) -> Result<()> {
    // The MOS object directory is object 1.
    let dir = 1;
    let props = match zap_tx::lookup(&w.mos, dir, b"pool_props")?.and_then(|e| e.as_u64()) {
        Some(o) => o,
        None => {
            let o = w.mos.create_zap(ot::POOL_PROPS, 0, Vec::new(), 0, 1)?;
            zap_tx::add(&mut w.mos, dir, b"pool_props", 8, &[o])?;
            o
        }
    };
    store_prop(w, props, name, v)
}

/// A property value into properties ZAP `props`: a number as one `u64`,
/// text as a NUL-terminated string, as ZFS stores them.
fn store_prop(w: &mut PoolWriter, props: u64, name: &str, v: &PropSetting) -> Result<()> {
    match v {
        PropSetting::Num(n) => zap_tx::update(&mut w.mos, props, name, 8, &[*n]),
        PropSetting::Text(s) => {
            let mut vals: Vec<u64> = s.bytes().map(|b| b as u64).collect();
            vals.push(0);
            zap_tx::update(&mut w.mos, props, name, 1, &vals)
        }
    }
}

/// Remove a property (inherit).
pub fn clear_prop_dir(w: &mut PoolWriter, dir: u64, name: &str) -> Result<bool> {
    if name == "quota" {
        let mut d = w.dir(dir)?;
        if d.quota != 0 {
            d.quota = 0;
            w.set_dir(dir, &d)?;
        }
    }
    let props = w.dir(dir)?.props_zapobj;
    let removed = zap_tx::remove(&mut w.mos, props, name.as_bytes())?;
    if name == "refreservation" {
        w.refreservation_touched(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(word: &str, devices: u64) -> Result<(u64, u64, u64, u64, u64)> {
        let spec = DraidSpec::parse(word).ok_or_else(|| Error::Invalid("not draid".into()))??;
        let l = spec.layout(devices, 12)?;
        Ok((
            l.nparity as u64,
            l.ndata as u64,
            l.children as u64,
            l.nspares as u64,
            l.ngroups,
        ))
    }

    /// Shapes as OpenZFS's `zpool create` completes them: data columns
    /// as many as fit (at most 8), the fewest groups filling whole rows.
    /// The corpus's `c8-draid` (`draid1:3d:1s`, 5 disks) has 1 group.
    #[test]
    fn draid_specs_complete_as_openzfs_completes_them() {
        assert!(DraidSpec::parse("mirror").is_none());
        assert_eq!(shape("draid1:3d:1s", 5).unwrap(), (1, 3, 5, 1, 1));
        assert_eq!(shape("draid", 5).unwrap(), (1, 4, 5, 0, 1));
        assert_eq!(shape("draid2:3d:1s", 8).unwrap(), (2, 3, 8, 1, 7));
        assert_eq!(shape("draid2:8c", 8).unwrap(), (2, 6, 8, 0, 1));
        // 8 data columns at most: 20 disks, double parity, 2 spares:
        // groups of 10 over 18 disks, 9 a slice.
        assert_eq!(shape("draid2:2s", 20).unwrap(), (2, 8, 20, 2, 9));
        assert_eq!(shape("draid3:2d:7c:1s", 7).unwrap(), (3, 2, 7, 1, 6));
        for (word, n) in [
            ("draid0", 5),
            ("draid4", 5),
            ("draid1:0d", 5),
            ("draid1:6c", 5),
            ("draid1:4d:1s", 5),
            ("draid1:3q", 5),
            ("draid1:3é", 5),
            ("draid1:é", 5),
            ("draid1:18446744073709551615s", 5),
            ("draid1:256c", 256),
            ("draid1:", 5),
            ("draid1:d", 5),
            ("draid1", 1),
        ] {
            assert!(shape(word, n).is_err(), "{word} over {n}");
        }
    }
}
