//! An opened pool: its vdev tree, the uberblock in use, and block reads.

use crate::arc::{key_of, raw_key_of, BlockCache};
use crate::import::FoundPool;
use ozfs_codec::checksum;
use ozfs_codec::compress::decompress;
use ozfs_format::blkptr::{Dva, BLKPTR_SIZE};
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::external::ExtHeader;
use ozfs_format::label::{parse_eck, with_verifier, Uberblock};
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::types::{cksum, comp, ot};
use ozfs_format::{BlkPtr, Error, NvList, Result};
use ozfs_vdev::labels::FoundUberblock;
use ozfs_vdev::{BlockDevice, ReadCtx, Vdev, VdevCell, VdevKind, VdevState};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Highest SPA version ozfs reads.
pub const SPA_VERSION_MAX_LEGACY: u64 = 28;
pub const SPA_VERSION_FEATURES: u64 = 5000;
/// Features ozfs can read when active (label `features_for_read`).
pub const SUPPORTED_READ_FEATURES: &[&str] = &[
    "com.delphix:hole_birth",
    "com.delphix:embedded_data",
    "org.illumos:lz4_compress",
    "com.delphix:extensible_dataset",
    "org.zfsonlinux:large_dnode",
    "org.open-zfs:large_blocks",
    "org.freebsd:zstd_compress",
    "com.klarasystems:vdev_zaps_v2",
    // Indirect vdevs: DVAs on a removed vdev are read through its mapping
    // (`crate::indirect`). Writing such a pool is refused by the DSL.
    "com.delphix:device_removal",
    RAIDZ_EXPANSION,
    DRAID,
];

/// The active features a label config says are needed to read the pool
/// (`features_for_read`) that ozfs does not read.
pub fn unsupported_read_features(config: &NvList) -> Vec<String> {
    config
        .get_nvlist("features_for_read")
        .map(|f| {
            f.pairs
                .iter()
                .map(|(k, _)| k.clone())
                .filter(|k| !SUPPORTED_READ_FEATURES.contains(&k.as_str()))
                .collect()
        })
        .unwrap_or_default()
}

/// RAID-Z expansion (`zpool attach` to a raidz vdev): read, not written
/// (blocks keep the width they were born with, see `Vdev::raidz_width`).
pub const RAIDZ_EXPANSION: &str = "org.openzfs:raidz_expansion";

/// Distributed RAID vdevs: read and written (`ozfs_codec::draid`).
pub const DRAID: &str = "org.openzfs:draid";

/// How to open a pool.
#[derive(Debug, Clone, Default)]
pub struct PoolOptions {
    pub readonly: bool,
    /// Use this txg's uberblock (or the newest at or below it) instead of the newest.
    pub max_txg: Option<u64>,
}

/// A device with a hot-spare label: (guid, device, path).
pub type SpareCandidate = (u64, Arc<dyn BlockDevice>, String);

/// An open pool.
pub struct Pool {
    pub name: String,
    pub guid: u64,
    /// The label config of the newest label (top-level keys).
    pub config: NvList,
    /// The vdev tree (replaceable in use: `zpool replace`).
    pub root: VdevCell,
    /// The uberblock in use and where it was found.
    pub uberblock: Uberblock,
    pub uberblock_found: FoundUberblock,
    pub mos_phys: ObjsetPhys,
    pub readonly: bool,
    /// Paths of the devices in use.
    pub device_paths: Vec<String>,
    /// Verified blocks kept in memory (metadata always, data when
    /// [`cache_data`](Self::cache_data) is set).
    pub cache: BlockCache,
    /// Level-0 data blocks kept in memory (when [`cache_data`](Self::cache_data)
    /// is set), apart from the metadata ([`BlockCache::data_budget`]), so
    /// that streams of data never push out the trees that find it.
    pub data_cache: BlockCache,
    /// Whether level-0 data blocks go through the cache too (long-lived
    /// servers: the daemon and mounts; one-shot commands read data once).
    pub cache_data: std::sync::atomic::AtomicBool,
    /// Readers outside the writer's lock (FUSE request threads, scrub) take
    /// an [`IoToken`] naming the synced txg whose tree they follow; while
    /// one is out, space freed after that txg is not made allocatable again
    /// (the writer asks [`Pool::oldest_hold`]), so no block such a reader
    /// follows can be reused and overwritten under it. Syncs go on.
    pub io_hold: IoHold,
    /// The queue that writes a sync's blocks, flushes, labels and
    /// uberblock in order on the pool's I/O thread ([`crate::writeback`]).
    pub writeback: Arc<crate::writeback::WriteBack>,
    /// The intent-log writer: log blocks and the flush committers share
    /// ([`crate::zilio`]).
    pub zil_io: Arc<crate::zilio::LogIo>,
    /// Rewrite copies proven wrong as reads find them (self-healing). Only
    /// the pool's single writer turns this on: a repair must never race a
    /// free and reuse of the same space.
    pub heal: std::sync::atomic::AtomicBool,
    /// Bytes rewritten by self-healing reads since open.
    pub repaired: AtomicU64,
    /// `org.ozfs:external_compression` is active: blocks with compression
    /// "external" (pre-compressed by a client) are valid. Set by the DSL
    /// layer when it reads the MOS feature objects or activates the
    /// feature; while it is off such a BP is refused as corrupt.
    pub external: std::sync::atomic::AtomicBool,
    /// The pool's checksum salt (MOS `org.illumos:checksum_salt`), keying
    /// the skein, edonr and blake3 checksums. Set once by the DSL layer
    /// when it opens the MOS object directory (the MOS itself never uses a
    /// salted checksum); until then, and in pools without one, blocks with
    /// a salted checksum are refused as unsupported, never as corrupt.
    pub checksum_salt: std::sync::OnceLock<checksum::Salt>,
    /// The removal mappings of the indirect vdevs (device removal), by
    /// top-level vdev id; installed once by the DSL layer when it opens the
    /// MOS (see [`crate::indirect`]). Until then a DVA on a removed vdev
    /// cannot be read.
    pub indirect: std::sync::OnceLock<crate::indirect::IndirectState>,
    /// Hot spares (MOS `spares`, loaded by the DSL layer).
    pub spares: std::sync::Mutex<Vec<crate::spares::Spare>>,
    /// Devices with a spare label found at open: (guid, device, path).
    /// Taken by the first [`load_spares`](Self::load_spares).
    pub spare_candidates: std::sync::Mutex<Option<Vec<SpareCandidate>>>,
    /// Encryption keys loaded in this process (see [`KeyStore`]).
    pub keys: KeyStore,
    /// Why the pool would be unavailable, while top-level vdevs no device
    /// was found for wait for [`resolve_missing_tops`](Self::resolve_missing_tops).
    pub unresolved_tops: std::sync::Mutex<Option<String>>,
    /// Block reference tables (block cloning), loaded by the DSL layer
    /// when the pool is opened for writing: frees consult them
    /// ([`crate::brt`]). None: not loaded (or no writer).
    pub brt: std::sync::Mutex<Option<crate::brt::Brt>>,
    /// Dedup tables, loaded by the DSL layer when the pool is opened for
    /// writing: dedup writes and frees of deduplicated blocks go through
    /// them ([`crate::ddt`]). None: not loaded (or no writer).
    pub ddt: std::sync::Mutex<Option<crate::ddt::Ddt>>,
    /// Ranges of removed (indirect) vdevs freed since the last sync, as
    /// (vdev, offset, size): the DSL appends them to each vdev's obsolete
    /// space map in the same txg (OpenZFS's `vdev_indirect_mark_obsolete`).
    pub obsolete: std::sync::Mutex<Vec<(u64, u64, u64)>>,
    /// `com.delphix:hole_birth` is active: a block made a hole keeps its
    /// logical size, type, level and the txg it became one, so an
    /// incremental send sees the hole. Set by the DSL layer from the MOS
    /// feature objects.
    pub hole_birth: std::sync::atomic::AtomicBool,
    /// The active features the MOS itself needs, named in every label's
    /// `features_for_read` (and the MOS config) of a feature-flag pool.
    /// Kept by the DSL layer.
    pub label_features: std::sync::Mutex<Vec<String>>,
    /// Every active feature (full names), kept by the DSL layer.
    pub active_features: std::sync::Mutex<Vec<String>>,
}

/// The encryption keys this process holds for a pool's datasets, in
/// memory only: wrapping keys by their encryption root's DSL directory
/// object, and the master keys unwrapped with them by each encrypted
/// directory's object. The DSL layer fills it (`zfs load-key`); nothing
/// here is ever written anywhere, and the keys zero themselves when the
/// last holder drops them.
#[derive(Default)]
pub struct KeyStore {
    wrapping: std::sync::Mutex<HashMap<u64, Arc<ozfs_codec::crypt::WrappingKey>>>,
    master: std::sync::Mutex<HashMap<u64, Arc<ozfs_codec::crypt::MasterKey>>>,
}

impl KeyStore {
    /// The wrapping key loaded for encryption root `root_dir`.
    pub fn wrapping(&self, root_dir: u64) -> Option<Arc<ozfs_codec::crypt::WrappingKey>> {
        lock(&self.wrapping).get(&root_dir).cloned()
    }
    /// Keep `key` as encryption root `root_dir`'s wrapping key.
    pub fn set_wrapping(&self, root_dir: u64, key: ozfs_codec::crypt::WrappingKey) {
        lock(&self.wrapping).insert(root_dir, Arc::new(key));
    }
    /// The encryption roots whose keys are loaded.
    pub fn loaded_roots(&self) -> Vec<u64> {
        let mut v: Vec<u64> = lock(&self.wrapping).keys().copied().collect();
        v.sort_unstable();
        v
    }
    /// [`Self::set_wrapping`] of a key already shared.
    pub fn set_wrapping_arc(&self, root_dir: u64, key: Arc<ozfs_codec::crypt::WrappingKey>) {
        lock(&self.wrapping).insert(root_dir, key);
    }
    /// Forget encryption root `root_dir`'s wrapping key and every master
    /// key in `dirs` (the directories it unlocked).
    pub fn unload(&self, root_dir: u64, dirs: &[u64]) {
        lock(&self.wrapping).remove(&root_dir);
        let mut m = lock(&self.master);
        for d in dirs {
            m.remove(d);
        }
    }
    /// The master key unwrapped for directory `dir`.
    pub fn master(&self, dir: u64) -> Option<Arc<ozfs_codec::crypt::MasterKey>> {
        lock(&self.master).get(&dir).cloned()
    }
    /// Keep directory `dir`'s unwrapped master key.
    pub fn set_master(
        &self,
        dir: u64,
        key: ozfs_codec::crypt::MasterKey,
    ) -> Arc<ozfs_codec::crypt::MasterKey> {
        let k = Arc::new(key);
        lock(&self.master).insert(dir, k.clone());
        k
    }
}

/// A mutex's guard, poisoned or not (the data stays usable).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The [`IoToken`]s out, counted per synced txg.
#[derive(Debug, Default)]
pub struct IoHold {
    held: std::sync::Mutex<std::collections::BTreeMap<u64, usize>>,
}

/// A hold on the tree synced in a txg (see [`Pool::io_hold`]); released on drop.
pub struct IoToken(Arc<Pool>, u64);

/// Nothing that owns the pool goes away before its queued writes are on
/// the devices (a failure was already reported to the writer).
impl Drop for Pool {
    fn drop(&mut self) {
        self.zil_io.drain();
        let _ = self.writeback.drain();
    }
}

impl Drop for IoToken {
    fn drop(&mut self) {
        let mut h = self
            .0
            .io_hold
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = h.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                h.remove(&self.1);
            }
        }
    }
}

impl Pool {
    /// Hold the blocks of the tree synced in `synced_txg` (never blocks).
    pub fn hold_io(self: &Arc<Pool>, synced_txg: u64) -> IoToken {
        *self
            .io_hold
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(synced_txg)
            .or_default() += 1;
        IoToken(self.clone(), synced_txg)
    }

    /// The oldest synced txg some reader still follows.
    pub fn oldest_hold(&self) -> Option<u64> {
        self.io_hold
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .next()
            .copied()
    }
}

/// An indirect block of an encrypted objset authenticates its children:
/// its pointer's checksum words 2–3 hold the MAC of their authenticated
/// forms (each child's portable properties — crypt bit, type, level,
/// sizes at level 0 — and its own MAC, in order), which needs no key to
/// recompute (`zio_crypt_do_indirect_mac_checksum`). Checked on every read,
/// keyed or not: with it, an edited, reordered or unprotected child is
/// refused even when every checksum up to the uberblock was recomputed.
fn check_indirect_mac(bp: &BlkPtr, logical: &[u8]) -> Result<()> {
    let mac = ozfs_codec::crypt::indirect_mac_swapped(logical, swap_of(bp))
        .map_err(|e| e.context(&format!("indirect block {}", dva_str(bp))))?;
    if mac != bp.mac(swap_of(bp)) {
        return Err(Error::corrupt(
            "encrypted dataset",
            format!(
                "level-{} indirect block {} fails its MAC: its block pointers were changed \
                 (authentication error)",
                bp.level(),
                dva_str(bp)
            ),
        ));
    }
    Ok(())
}

fn swap_of(bp: &BlkPtr) -> bool {
    bp.little_endian() != HOST_LITTLE_ENDIAN
}

impl Pool {
    /// Whether feature `guid` (full name) is active in this pool.
    pub fn feature_active(&self, guid: &str) -> bool {
        self.active_features
            .lock()
            .map(|a| a.iter().any(|n| n == guid))
            .unwrap_or(false)
    }

    /// Assemble and open a discovered pool.
    pub fn open(found: FoundPool, opts: &PoolOptions) -> Result<Pool> {
        let name = found.name.clone();
        let what = format!("pool '{name}'");
        let version = found.version;
        if !(1..=SPA_VERSION_MAX_LEGACY).contains(&version) && version != SPA_VERSION_FEATURES {
            return Err(Error::unsupported(&what, format!("pool version {version}")));
        }
        if found.config.get_nvlist("features_for_read").is_some() {
            let unknown = unsupported_read_features(&found.config);
            if !unknown.is_empty() {
                return Err(Error::unsupported(
                    &what,
                    format!("active features not supported: {}", unknown.join(", ")),
                ));
            }

            // An expanded RAID-Z vdev is written at its current width (as
            // OpenZFS allocates after an expansion); one being expanded
            // (its reflow not finished) is refused by the DSL's
            // `check_write`, which sees every top-level vdev.
        }
        let nchildren = found.config.get_u64("vdev_children").unwrap_or(1);
        if nchildren == 0 || nchildren > 4096 {
            return Err(Error::corrupt(
                &what,
                format!("vdev_children = {nchildren}"),
            ));
        }
        // Every top-level vdev_tree the devices' labels hold, with the txg
        // of its label. The tree in use is, per top-level id, the newest;
        // a reader that finds no uberblock matching it (another process is
        // between the two halves of a label update: labels 0 and 2 are
        // written before that txg's uberblock) takes, as ZFS does, the
        // newest at or below the uberblock's txg instead.
        let mut trees: Vec<(u64, u64, &NvList)> = Vec::new();
        for d in &found.devices {
            for c in d.labels.configs.iter().flatten() {
                if c.get_u64("pool_guid") != Some(found.guid) {
                    continue;
                }
                let Some(tree) = c.get_nvlist("vdev_tree") else {
                    continue;
                };
                let id = tree.get_u64("id").unwrap_or(u64::MAX);
                if id < nchildren {
                    trees.push((id, c.get_u64("txg").unwrap_or(0), tree));
                }
            }
        }
        let pick = |max: u64| -> HashMap<u64, (u64, &NvList)> {
            let mut best: HashMap<u64, (u64, &NvList)> = HashMap::new();
            for &(id, txg, tree) in &trees {
                let better = match best.get(&id) {
                    None => true,
                    Some(&(t, _)) => (txg <= max && (t > max || txg > t)) || (t > max && txg > t),
                };
                if better {
                    best.insert(id, (txg, tree));
                }
            }
            best
        };
        let devices: HashMap<u64, (Arc<dyn BlockDevice>, String)> = found
            .devices
            .iter()
            .map(|d| (d.guid, (d.dev.clone(), d.path.display().to_string())))
            .collect();
        let build_root = |tops_cfg: &HashMap<u64, (u64, &NvList)>| -> Result<Vdev> {
            let mut opener = |guid: u64, _path: Option<&str>| devices.get(&guid).cloned();
            let mut tops = Vec::new();
            for id in 0..nchildren {
                match tops_cfg.get(&id) {
                    Some((_, tree)) => {
                        let mut top =
                            Vdev::from_config(tree, &mut opener).map_err(|e| e.context(&what))?;
                        top.check_leaf_sizes();
                        tops.push(top);
                    }
                    None => {
                        let mut nv = NvList::new();
                        nv.set("type", ozfs_format::NvValue::String("missing".into()));
                        nv.set("id", ozfs_format::NvValue::Uint64(id));
                        tops.push(Vdev::from_config(&nv, &mut opener)?);
                    }
                }
            }
            let mut root_nv = NvList::new();
            root_nv.set("type", ozfs_format::NvValue::String("root".into()));
            root_nv.set("id", ozfs_format::NvValue::Uint64(0));
            root_nv.set("guid", ozfs_format::NvValue::Uint64(found.guid));
            let mut root = Vdev::from_config(&root_nv, &mut opener)?;
            root.children = tops;
            Ok(root)
        };
        let root = build_root(&pick(u64::MAX))?;
        // Top-level vdevs no device was found for at all may need none (a
        // removed device, now an indirect vdev: only the MOS copy of the
        // config describes it). The pool is opened to find out; the DSL
        // resolves them from the MOS (`resolve_missing_tops`) or refuses
        // the pool with this error.
        let placeholders_only = root
            .children
            .iter()
            .filter(|c| c.state() == VdevState::Unavail)
            .all(|c| c.type_name == "missing");
        let mut unavail: Option<Error> = None;
        if root.state() == VdevState::Unavail {
            let mut missing: Vec<String> = Vec::new();
            for c in root
                .children
                .iter()
                .filter(|c| c.state() == VdevState::Unavail)
            {
                let mut why: Vec<String> = Vec::new();
                c.walk(0, &mut |v, _| {
                    if let VdevKind::Leaf(None) = v.kind {
                        let name = v.path.clone().unwrap_or_else(|| v.guid.to_string());
                        why.push(format!(
                            "{name}: {}",
                            v.aux.clone().unwrap_or_else(|| "missing".into())
                        ));
                    }
                });
                missing.push(format!("{} ({})", c.display_name(), why.join("; ")));
            }
            let e = Error::Invalid(format!(
                "{what}: one or more devices are unavailable beyond the pool's redundancy (top-level vdevs: {})",
                missing.join(", ")
            ));
            if !placeholders_only {
                return Err(e);
            }
            unavail = Some(e);
        }
        let full_tree = root
            .children
            .iter()
            .all(|c| !matches!(c.kind, VdevKind::Hole));
        let guid_sum = root.guid_sum();

        // Candidate uberblocks, newest first.
        let mut ubs: Vec<FoundUberblock> = found
            .devices
            .iter()
            .flat_map(|d| d.labels.uberblocks.iter().cloned())
            .collect();
        ubs.sort_by_key(|u| std::cmp::Reverse((u.ub.txg, u.ub.timestamp, u.ub.mmp_seq())));
        ubs.dedup_by_key(|u| (u.ub.txg, u.ub.timestamp));
        if let Some(max) = opts.max_txg {
            ubs.retain(|u| u.ub.txg <= max);
        }
        let mut pool = Pool {
            name: name.clone(),
            guid: found.guid,
            config: found.config.clone(),
            root: VdevCell::new(root),
            uberblock: Uberblock::default(),
            uberblock_found: FoundUberblock {
                ub: Uberblock::default(),
                label: 0,
                slot: 0,
                offset: 0,
            },
            mos_phys: ObjsetPhys::default(),
            readonly: opts.readonly,
            device_paths: found
                .devices
                .iter()
                .map(|d| d.path.display().to_string())
                .collect(),
            cache: BlockCache::new(BlockCache::default_budget()),
            data_cache: BlockCache::new(BlockCache::data_budget()),
            cache_data: Default::default(),
            external: Default::default(),
            checksum_salt: Default::default(),
            keys: KeyStore::default(),
            unresolved_tops: Default::default(),
            brt: Default::default(),
            ddt: Default::default(),
            obsolete: Default::default(),
            hole_birth: Default::default(),
            label_features: Default::default(),
            active_features: Default::default(),
            indirect: Default::default(),
            io_hold: Default::default(),
            writeback: Default::default(),
            zil_io: Default::default(),
            heal: Default::default(),
            repaired: Default::default(),
            spares: Default::default(),
            spare_candidates: std::sync::Mutex::new(Some(
                found
                    .aux
                    .iter()
                    .map(|d| (d.guid, d.dev.clone(), d.path.display().to_string()))
                    .collect(),
            )),
        };
        let mut last_err = Error::corrupt(&what, "no valid uberblock found on any device");
        // The guid sum of the tree in `pool.root`.
        let mut current = guid_sum;
        for u in ubs {
            if full_tree && u.ub.guid_sum != current {
                // The newest tree again, or the labels as they were at this
                // uberblock's txg.
                let tree = if u.ub.guid_sum == guid_sum {
                    build_root(&pick(u64::MAX)).ok()
                } else {
                    build_root(&pick(u.ub.txg)).ok().filter(|t| {
                        t.guid_sum() == u.ub.guid_sum && t.state() != VdevState::Unavail
                    })
                };
                if let Some(t) = tree {
                    current = t.guid_sum();
                    pool.root = VdevCell::new(t);
                } else {
                    last_err = Error::corrupt(
                        &what,
                        format!(
                            "uberblock txg {} guid sum {:#x} does not match the vdev tree ({:#x})",
                            u.ub.txg, u.ub.guid_sum, guid_sum
                        ),
                    );
                    continue;
                }
            }
            if !(1..=SPA_VERSION_MAX_LEGACY).contains(&u.ub.version)
                && u.ub.version != SPA_VERSION_FEATURES
            {
                last_err = Error::unsupported(
                    &what,
                    format!(
                        "uberblock txg {} has pool version {}",
                        u.ub.txg, u.ub.version
                    ),
                );
                continue;
            }
            match pool
                .read_bp(&u.ub.rootbp)
                .and_then(|b| ObjsetPhys::parse(&b, swap_of(&u.ub.rootbp)))
            {
                Ok(os) => {
                    pool.uberblock = u.ub;
                    pool.uberblock_found = u;
                    pool.mos_phys = os;
                    pool.unresolved_tops = std::sync::Mutex::new(unavail.map(|e| e.to_string()));
                    return Ok(pool);
                }
                Err(e) => {
                    last_err = e.context(&format!("{what}: MOS of uberblock txg {}", u.ub.txg))
                }
            }
        }
        Err(unavail.unwrap_or(last_err))
    }

    /// Replace the placeholders of top-level vdevs no device was found
    /// for with their configs from `mos_tops` (the MOS copy of the pool
    /// config's top-level vdevs) when those need no device — an indirect
    /// vdev (a removed data device) or a hole (a removed log device). Any
    /// placeholder left makes
    /// this the error the open deferred (devices unavailable).
    pub fn resolve_missing_tops(&self, mos_tops: &[NvList]) -> Result<()> {
        let Some(err) = lock(&self.unresolved_tops).clone() else {
            return Ok(());
        };
        let mut tops: Vec<NvList> = Vec::new();
        let mut left = false;
        for c in self.root.children.iter() {
            let from_mos = (c.type_name == "missing")
                .then(|| mos_tops.iter().find(|t| t.get_u64("id") == Some(c.id)))
                .flatten()
                .filter(|t| matches!(t.get_str("type"), Some("indirect" | "hole")));
            match from_mos {
                Some(t) => tops.push(t.clone()),
                None => {
                    left |= c.type_name == "missing";
                    tops.push(c.config.clone());
                }
            }
        }
        if left {
            return Err(Error::Invalid(err));
        }
        self.install_with(tops, Vec::new(), None)?;
        *lock(&self.unresolved_tops) = None;
        Ok(())
    }

    /// The pool's health.
    pub fn state(&self) -> VdevState {
        self.root.state()
    }

    /// Top-level vdev by id, checked.
    fn top(&self, vdev: u64) -> Result<&Vdev> {
        self.root.children.get(vdev as usize).ok_or_else(|| {
            Error::corrupt(
                "block pointer",
                format!(
                    "DVA names vdev {vdev}, pool has {}",
                    self.root.children.len()
                ),
            )
        })
    }

    /// Read and verify the physical (PSIZE, still compressed) bytes of a non-hole, non-embedded BP,
    /// trying each DVA in turn.
    pub fn read_physical(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        let ctx = ReadCtx {
            heal: self.heal.load(std::sync::atomic::Ordering::Relaxed),
            log: true,
            ..Default::default()
        };
        let r = self.read_physical_with(bp, &ctx);
        let n = ctx.repaired.load(std::sync::atomic::Ordering::Relaxed);
        if n > 0 {
            self.repaired
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    /// Read and verify a block's physical bytes as `ctx` says (healing,
    /// scrubbing). Ditto copies: a DVA whose copy failed is rewritten from
    /// the verified one when healing; a scrub reads and checks every DVA.
    pub fn read_physical_with(&self, bp: &BlkPtr, ctx: &ReadCtx) -> Result<Vec<u8>> {
        bp.validate("block pointer")?;
        let psize = bp.psize();
        let swap = swap_of(bp);
        let ck = bp.checksum();
        let expected = bp.cksum();
        let salt = self.checksum_salt.get();
        // A block ozfs cannot verify is not read at all: reported as
        // unsupported (naming the function), never as "no copy passed its
        // checksum", and never healed (a copy that cannot be checked cannot
        // be proven wrong).
        if let Some(e) = checksum::unsupported_reason(ck, salt.is_some()) {
            return Err(e);
        }
        // A block of an encrypted dataset (other than its objset) keeps a
        // MAC in checksum words 2–3: only words 0–1, a truncated checksum
        // of the stored bytes, are checked here — without any key, so
        // scrubs and self-healing work on locked datasets too.
        // A checksum not strong enough for dedup (fletcher, edon-r) is
        // folded first: words 2–3 XORed into 0–1.
        let truncated = bp.uses_crypt() && bp.object_type() != ot::OBJSET;
        let fold = truncated && !checksum::dedup_capable(ck);
        let verify = |d: &[u8]| -> bool {
            if ck == cksum::OFF || ck == cksum::NOPARITY {
                return true;
            }
            match checksum::compute_salted(ck, d, swap, salt) {
                Ok(mut c) if truncated => {
                    if fold {
                        c.0[0] ^= c.0[2];
                        c.0[1] ^= c.0[3];
                    }
                    c.0[..2] == expected.0[..2]
                }
                Ok(c) => c == expected,
                Err(_) => false,
            }
        };
        let mut last: Option<Error> = None;
        let mut good: Option<Vec<u8>> = None;
        let mut bad: Vec<Dva> = Vec::new();
        for dva in bp.dvas().iter().filter(|d| !d.is_empty()) {
            if good.is_some() && !ctx.scrub && !ctx.all_dvas {
                break;
            }
            let top = match self.top(dva.vdev) {
                Ok(t) => t,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            if top.asize != 0 && dva.offset.saturating_add(dva.asize) > top.asize {
                last = Some(Error::corrupt(
                    "block pointer",
                    format!(
                        "DVA <{}:{:x}:{:x}> beyond the end of vdev {} ({:#x})",
                        dva.vdev, dva.offset, dva.asize, dva.vdev, top.asize
                    ),
                ));
                continue;
            }
            let r = if dva.gang {
                self.read_gang(top, dva.vdev, dva.offset, bp, &verify, ctx)
            } else {
                self.read_top(top, dva.offset, psize, bp.phys_birth(), &verify, ctx)
            };
            match r {
                Ok(d) => {
                    if good.is_none() {
                        good = Some(d);
                    }
                }
                Err(e) => {
                    if !dva.gang {
                        bad.push(*dva);
                    }
                    last = Some(e);
                }
            }
        }
        let Some(good) = good else {
            return Err(last.unwrap_or_else(|| Error::corrupt("block pointer", "no DVA")));
        };
        if ctx.heal {
            for d in bad {
                let Ok(top) = self.top(d.vdev) else { continue };
                // A removed vdev has nothing to write to (its copy was
                // read through the mapping: the destination healed it).
                if matches!(top.kind, VdevKind::Indirect { .. }) {
                    continue;
                }
                match top.write_padded(d.offset, &good) {
                    Ok(()) => {
                        let unit = 1u64 << top.ashift;
                        let n = (good.len() as u64).div_ceil(unit).saturating_mul(unit);
                        ctx.repaired
                            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                        if ctx.log {
                            eprintln!(
                                "ozfs: repaired ditto copy <{}:{:#x}:{:#x}>",
                                d.vdev, d.offset, d.asize
                            );
                        }
                    }
                    Err(e) => eprintln!("ozfs: repair of <{}:{:#x}> failed: {e}", d.vdev, d.offset),
                }
            }
        }
        Ok(good)
    }

    fn read_gang(
        &self,
        top: &Vdev,
        vdev: u64,
        offset: u64,
        bp: &BlkPtr,
        verify: &dyn Fn(&[u8]) -> bool,
        ctx: &ReadCtx,
    ) -> Result<Vec<u8>> {
        let phys_birth = bp.phys_birth();
        let hdr_verify = |d: &[u8]| -> bool {
            let Ok(eck) = parse_eck(d) else { return false };
            let data = with_verifier(d, [vdev, offset, phys_birth, 0], eck.byteswapped);
            checksum::sha256(&data).0 == eck.cksum
        };
        let hdr = self.read_top(top, offset, 512, phys_birth, &hdr_verify, ctx)?;
        let eck = parse_eck(&hdr)?;
        let mut data = Vec::with_capacity(bp.psize() as usize);
        for i in 0..3 {
            let child = BlkPtr::from_bytes(
                &hdr[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE],
                eck.byteswapped,
            )?;
            if child.is_hole() {
                continue;
            }
            data.extend_from_slice(&self.read_physical_with(&child, ctx)?);
            if data.len() as u64 > bp.psize() {
                return Err(Error::corrupt(
                    "gang block",
                    "children larger than the gang BP's PSIZE",
                ));
            }
        }
        if data.len() as u64 != bp.psize() {
            return Err(Error::corrupt(
                "gang block",
                format!("children hold {} bytes, BP says {}", data.len(), bp.psize()),
            ));
        }
        if !verify(&data) {
            return Err(Error::corrupt(
                "gang block",
                "assembled data fails the BP checksum",
            ));
        }
        Ok(data)
    }

    /// Read a block through the cache: a hit costs no I/O; a miss reads,
    /// verifies and keeps the block. `data` says a level-0 data block (kept
    /// only when [`cache_data`](Self::cache_data) is on).
    pub fn read_bp_cached(&self, bp: &BlkPtr, data: bool) -> Result<Arc<Vec<u8>>> {
        self.read_bp_cached_keyed(bp, data, None)
    }

    /// [`read_bp_cached`](Self::read_bp_cached) for a block of an objset
    /// whose master key is `key` (see [`read_bp_keyed`](Self::read_bp_keyed)).
    /// The plain form and the keyless form of an encrypted dnode block are
    /// cached apart.
    pub fn read_bp_cached_keyed(
        &self,
        bp: &BlkPtr,
        data: bool,
        key: Option<&ozfs_codec::crypt::MasterKey>,
    ) -> Result<Arc<Vec<u8>>> {
        self.read_through(bp, data, key, true)
    }

    /// A block through its cache (metadata, or file data where the pool
    /// caches it): a hit costs no I/O; a miss is read, verified and, with
    /// `keep`, kept.
    fn read_through(
        &self,
        bp: &BlkPtr,
        data: bool,
        key: Option<&ozfs_codec::crypt::MasterKey>,
        keep: bool,
    ) -> Result<Arc<Vec<u8>>> {
        let use_cache = !data || self.cache_data.load(std::sync::atomic::Ordering::Relaxed);
        let mut ck = if use_cache { key_of(bp) } else { None };
        // A protected level-0 block read without its key was not
        // authenticated: it never stands in for the keyed read.
        if key.is_none() && bp.uses_crypt() && bp.level() == 0 {
            if let Some(k) = ck.as_mut() {
                k[2] |= 1 << 62;
            }
        }
        let cache = if data { &self.data_cache } else { &self.cache };
        if let Some(k) = &ck {
            if let Some(b) = cache.get(k) {
                return Ok(b);
            }
        }
        let b = Arc::new(self.read_bp_inner(bp, None, key)?);
        if let Some(k) = ck.filter(|_| keep) {
            cache.insert(k, b.clone());
        }
        Ok(b)
    }

    /// A data block read whole by a client: from the cache when it is
    /// there, else read and handed over without being kept. (A buffered
    /// reader's kernel keeps the pages itself; a direct reader of whole
    /// blocks asked for no cache, as OpenZFS's Direct I/O bypasses the
    /// ARC for aligned reads; and a stream of them through the cache
    /// would fault in fresh memory for every block.) Partial reads keep
    /// their block: the next one is likely its neighbour.
    pub fn read_bp_passing(
        &self,
        bp: &BlkPtr,
        key: Option<&ozfs_codec::crypt::MasterKey>,
    ) -> Result<Arc<Vec<u8>>> {
        self.read_through(bp, true, key, false)
    }

    /// Read a block's logical contents (exactly LSIZE bytes).
    pub fn read_bp(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        self.read_bp_inner(bp, None, None)
    }

    /// Read a block's logical contents with `key`, the master key of the
    /// encrypted objset it belongs to: an encrypted block is verified,
    /// then decrypted (its MAC checked), then decompressed. Without a key
    /// an encrypted dnode block is returned as stored — its dnodes' cores
    /// and block pointers are plain, only some bonus buffers are not — so
    /// locked datasets can still be walked; any other encrypted block is
    /// refused, naming the missing key.
    pub fn read_bp_keyed(
        &self,
        bp: &BlkPtr,
        key: Option<&ozfs_codec::crypt::MasterKey>,
    ) -> Result<Vec<u8>> {
        self.read_bp_inner(bp, None, key)
    }

    /// Scrub one block: every copy read and verified (and, with
    /// `ctx.heal`, repaired); returns the logical contents (an encrypted
    /// block's stored bytes: a scrub needs no key).
    pub fn scrub_bp(&self, bp: &BlkPtr, ctx: &ReadCtx) -> Result<Vec<u8>> {
        self.read_bp_inner(bp, Some(ctx), None)
    }

    fn read_bp_inner(
        &self,
        bp: &BlkPtr,
        ctx: Option<&ReadCtx>,
        key: Option<&ozfs_codec::crypt::MasterKey>,
    ) -> Result<Vec<u8>> {
        let lsize = bp.lsize() as usize;
        // A key is given only for a block of an encrypted objset (the DSL
        // says so, not the pointer): every block there is protected, and a
        // pointer that claims otherwise (crypt bit clear, or embedded
        // plaintext) was not written by ZFS — read as plain it would put an
        // attacker's bytes in the dataset under valid checksums.
        if key.is_some() && !bp.is_hole() && (bp.is_embedded() || !bp.uses_crypt()) {
            return Err(Error::corrupt(
                "encrypted dataset",
                format!(
                    "{} block pointer {} is not protected (crypt bit clear or embedded): refused",
                    ozfs_format::types::object_type_name(bp.object_type()),
                    dva_str(bp)
                ),
            ));
        }
        if bp.is_embedded() {
            bp.validate("embedded block pointer")?;
            let payload = bp.embedded_payload()?;
            let mut out = vec![0u8; lsize];
            decompress_into(bp.compression(), &payload, &mut out)?;
            return Ok(out);
        }
        if bp.is_hole() {
            return Ok(vec![0u8; lsize]);
        }
        let c = bp.compression();
        if c == comp::EXTERNAL && ctx.is_none() {
            // Through the raw cache: a record read raw (or prefetched) is
            // decoded without I/O.
            let img = self.read_external_image(bp)?;
            return self.decode_external(bp, &img);
        }
        if bp.is_encrypted() && key.is_none() && ctx.is_none() && bp.object_type() != ot::DNODE {
            return Err(Error::Permission(format!(
                "{} block of an encrypted dataset: its key is not loaded (zfs load-key)",
                ozfs_format::types::object_type_name(bp.object_type())
            )));
        }
        let mut phys = match ctx {
            Some(ctx) => self.read_physical_with(bp, ctx)?,
            None => self.read_physical(bp)?,
        };
        // A block of an unencrypted type (not the objset, which its opener
        // checks) is authenticated by an HMAC of its stored bytes.
        if let Some(k) = key {
            if bp.is_authenticated() && bp.object_type() != ot::OBJSET {
                k.verify_authenticated(bp, swap_of(bp), &phys)?;
            }
        }
        if bp.is_encrypted() {
            match key {
                Some(k) => phys = k.decrypt_block(bp, swap_of(bp), phys)?,
                None if ctx.is_some() => return Ok(phys),
                None if !is_uncompressed(c) => {
                    return Err(Error::Permission(
                        "compressed dnode block of an encrypted dataset: its key is not loaded"
                            .into(),
                    ))
                }
                None => {}
            }
        }
        if c == comp::EXTERNAL {
            return self.decode_external(bp, &phys);
        }
        let out = if is_uncompressed(c) {
            if phys.len() != lsize {
                return Err(Error::corrupt(
                    "block pointer",
                    format!(
                        "uncompressed block with PSIZE {} != LSIZE {lsize}",
                        phys.len()
                    ),
                ));
            }
            phys
        } else {
            let mut out = vec![0u8; lsize];
            decompress_into(c, &phys, &mut out)?;
            out
        };
        if bp.uses_crypt() && bp.level() > 0 {
            check_indirect_mac(bp, &out)?;
        }
        Ok(out)
    }

    /// The smallest allocation unit of any top-level vdev: what the
    /// physical size of a pre-compressed block is rounded up to.
    pub fn min_sector(&self) -> u64 {
        self.root
            .children
            .iter()
            .filter(|t| t.ashift >= 9)
            .map(|t| 1u64 << t.ashift.min(17))
            .min()
            .unwrap_or(512)
    }

    /// Whether pre-compressed blocks are valid in this pool (feature active).
    pub fn external_active(&self) -> bool {
        self.external.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The verified physical image of a pre-compressed block (header,
    /// payload, zero tail), through the cache under [`raw_key_of`]: a raw
    /// read that was prefetched costs no I/O, and a later decoded read of
    /// the same block decodes from memory.
    pub fn read_external_image(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.check_external(bp)?;
        let key = raw_key_of(bp);
        if let Some(k) = &key {
            if let Some(b) = self.cache.get(k) {
                return Ok(b);
            }
        }
        let b = Arc::new(self.read_physical(bp)?);
        ExtHeader::parse(&b).map_err(|e| e.context(&format!("block {}", dva_str(bp))))?;
        if let Some(k) = key {
            self.cache.insert(k, b.clone());
        }
        Ok(b)
    }

    /// Whether `bp` may be a pre-compressed block here: the feature is
    /// active, it is a level-0 block, and PSIZE ≤ LSIZE.
    pub fn check_external(&self, bp: &BlkPtr) -> Result<()> {
        if !self.external_active() {
            return Err(Error::corrupt(
                "block pointer",
                format!(
                    "compression 'external' at {} in a pool without org.ozfs:external_compression",
                    dva_str(bp)
                ),
            ));
        }
        if bp.psize() > bp.lsize() || bp.level() != 0 {
            return Err(Error::corrupt(
                "block pointer",
                format!(
                    "pre-compressed block at {} with level {}, PSIZE {:#x} > LSIZE {:#x}",
                    dva_str(bp),
                    bp.level(),
                    bp.psize(),
                    bp.lsize()
                ),
            ));
        }
        Ok(())
    }

    /// The logical record of a pre-compressed block: its header is checked
    /// and its payload decoded with the client's algorithm. An algorithm
    /// ozfs does not know is [`Error::Opaque`] (EIO through POSIX).
    pub fn decode_external(&self, bp: &BlkPtr, phys: &[u8]) -> Result<Vec<u8>> {
        self.check_external(bp)?;
        let what = format!("pre-compressed block at {}", dva_str(bp));
        let h = ExtHeader::parse(phys).map_err(|e| e.context(&what))?;
        let mut out = vec![0u8; bp.lsize() as usize];
        ozfs_codec::compress::external_decompress(h.tag, h.payload(phys), &mut out)
            .map_err(|e| e.context(&what))?;
        Ok(out)
    }

    /// Raw read through a top-level vdev (zdb -R): no checksum, RAID-Z data columns assembled.
    pub fn read_raw(&self, vdev: u64, offset: u64, size: u64) -> Result<Vec<u8>> {
        // Any range may hold queued blocks: read what is on the devices
        // once they are all written.
        let _ = self.writeback.drain();
        let top = self.top(vdev)?;
        top.read_block(offset, size, &|_| true)
    }
}

/// A BP's first DVA as zdb prints it, for error messages.
fn dva_str(bp: &BlkPtr) -> String {
    let d = bp.dvas()[0];
    format!("<{}:{:x}:{:x}>", d.vdev, d.offset, d.asize)
}

fn is_uncompressed(c: u8) -> bool {
    c == comp::OFF || c == comp::INHERIT || c == comp::EMPTY
}

fn decompress_into(c: u8, src: &[u8], dst: &mut [u8]) -> Result<()> {
    if is_uncompressed(c) {
        if src.len() < dst.len() {
            return Err(Error::corrupt(
                "block",
                "uncompressed payload shorter than LSIZE",
            ));
        }
        let n = dst.len();
        dst.copy_from_slice(&src[..n]);
        return Ok(());
    }
    decompress(c, src, dst)
}
