//! The pool writer: one open transaction group and its sync.
//!
//! [`PoolWriter`] holds the pool's allocation state ([`Allocator`], loaded
//! from the space maps), the MOS changes of the open txg ([`ObjsetTx`]) and
//! the changes of every file system being written. [`PoolWriter::sync`]
//! commits the txg bottom up:
//!
//! 1. each changed dataset's objset is written (data, indirect blocks,
//!    dnodes, objset block); births and deaths are charged to the dataset,
//!    its DSL directory and the ancestors; blocks still referenced by the
//!    newest snapshot go to the dataset's dead list instead of being freed;
//! 2. the dataset and directory bonus buffers (and the dead lists) change in
//!    the MOS; the MOS is written; every allocation and free since the last
//!    pass is appended to its metaslab's space map, which changes the MOS
//!    again — so the MOS is synced in passes until a pass allocates nothing
//!    (blocks born in this txg are rewritten in place, which is what makes
//!    the passes converge); what a pass allocated and freed for the MOS is
//!    charged to `$MOS` in the next pass, so the txg ends with the MOS
//!    accounted exactly;
//! 3. when space is checked (`crate::space`: debug builds,
//!    `OZFS_CHECK_SPACE=1`), every total the DSL keeps is compared with the
//!    blocks; a mismatch fails the sync here, before anything is committed,
//!    and the writer commits nothing more;
//! 4. devices are flushed, the uberblock is written into every label (with
//!    the config labels around it when the config changed) and flushed.
//!
//! Invariants: the uberblock is the only commit point — nothing reachable
//! from the previous uberblock is overwritten (space freed in txg T is
//! reusable only from T+3, see `ozfs_spa::metaslab`); space maps describe
//! exactly the blocks reachable from the new uberblock plus deferred frees;
//! every block is charged once, to the dataset and directory that hold it
//! (a total never goes below zero: under the space check that is an error,
//! otherwise it is clamped).

use crate::pool::DslPool;
use ozfs_dmu::tx::{Accounting, ObjsetTx, WritePolicy};
use ozfs_dmu::{zap_tx, Objset};
use ozfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use ozfs_format::label::Uberblock;
use ozfs_format::types::{cksum, comp, ot};
use ozfs_format::{BlkPtr, Error, NvList, NvValue, Result};
use ozfs_spa::label_write::POOL_STATE_ACTIVE;
use ozfs_spa::metaslab::{Allocator, Geometry, MetaslabGroup};
use ozfs_spa::spacemap::{self, SmEntry, SpaceMapHeader};
use ozfs_spa::write::BlockProps;
use ozfs_spa::Pool;
use ozfs_vdev::VdevKind;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Space map data block size of pool version 23.
pub const SPACE_MAP_BLOCKSIZE: u64 = 4096;
/// Dead-list (bplist) block size.
pub const BPLIST_BLOCKSIZE: u64 = 128 * 1024;
const MAX_SYNC_PASSES: u64 = 40;

/// Space maps shorter than this are never condensed (`OZFS_CONDENSE_MIN_BYTES`, default 16 KiB).
fn condense_min_bytes() -> u64 {
    std::env::var("OZFS_CONDENSE_MIN_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4 * SPACE_MAP_BLOCKSIZE)
}

/// Why the writer stops when a sync fails between writing the dedup
/// tables into the MOS and committing (cleared by the commit).
const DDT_UNCOMMITTED: &str = "a sync that wrote the dedup tables failed before it committed";

/// Sync pass from which MOS blocks are written uncompressed (as ZFS's
/// `SYNC_PASS_DONT_COMPRESS`): a block born in this txg can then be
/// rewritten in place in later passes, since its size no longer changes
/// with its contents — without this, a block whose compressed size keeps
/// changing is reallocated every pass and the passes need not converge.
const SYNC_PASS_DONT_COMPRESS: u64 = 5;

/// Write policy of the MOS: metadata everywhere, compressed (until
/// [`SYNC_PASS_DONT_COMPRESS`]) as OpenZFS compresses metadata — lz4 where
/// the pool has `lz4_compress` active, else lzjb —, fletcher4, three copies.
pub struct MosPolicy {
    pub compress: bool,
    /// The metadata algorithm (see [`meta_compress`]).
    pub algorithm: u8,
}

/// How OpenZFS compresses metadata (`zio_compress_select` of "on"): lz4
/// once the pool has `lz4_compress` active, lzjb before.
pub fn meta_compress(pool: &ozfs_spa::pool::Pool) -> u8 {
    if pool.feature_active(crate::features::LZ4) {
        comp::LZ4
    } else {
        comp::LZJB
    }
}

impl WritePolicy for MosPolicy {
    fn props(&self, object_type: u8, level: u8) -> BlockProps {
        BlockProps {
            object_type,
            level,
            checksum: cksum::FLETCHER4,
            compress: if self.compress {
                self.algorithm
            } else {
                comp::OFF
            },
            copies: 3,
            salt: None,
            seal: None,
            dedup: false,
            dedup_verify: false,
        }
    }
}

/// Write policy of a file system, from its properties.
#[derive(Debug, Clone)]
pub struct FsPolicy {
    pub checksum: u8,
    pub compress: u8,
    pub copies: usize,
    /// The pool's checksum salt (salted checksums of data blocks).
    pub salt: Option<ozfs_codec::checksum::Salt>,
    /// An encrypted dataset's sealer (its master key, or a raw receive).
    pub seal: Option<std::sync::Arc<ozfs_codec::crypt::Sealer>>,
    /// Data blocks go through the dedup table (`checksum` is its
    /// function), verified byte for byte on a match with `dedup_verify`.
    pub dedup: bool,
    pub dedup_verify: bool,
    /// The algorithm of metadata blocks ([`meta_compress`]).
    pub meta_compress: u8,
}

impl WritePolicy for FsPolicy {
    fn props(&self, object_type: u8, level: u8) -> BlockProps {
        let data = level == 0 && !ozfs_format::types::object_type_is_metadata(object_type);
        let seal = self.seal.clone();
        if data {
            BlockProps {
                object_type,
                level,
                checksum: self.checksum,
                compress: self.compress,
                copies: self.copies,
                salt: self.salt,
                // Encrypted blocks are not deduplicated (OpenZFS keys
                // their table by an HMAC; ozfs writes them apart).
                dedup: self.dedup && seal.is_none(),
                dedup_verify: self.dedup_verify,
                seal,
            }
        } else {
            BlockProps {
                object_type,
                level,
                checksum: cksum::FLETCHER4,
                compress: self.meta_compress,
                copies: (self.copies + 1).min(3),
                salt: None,
                seal,
                dedup: false,
                dedup_verify: false,
            }
        }
    }
}

#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Sums {
    pub(crate) dsize: i64,
    pub(crate) psize: i64,
    pub(crate) ucsize: i64,
}

impl Sums {
    pub(crate) fn add(&mut self, pool: &Pool, bp: &BlkPtr, sign: i64) {
        self.dsize += sign * pool.dsize(bp, true) as i64;
        self.psize += sign * bp.charged_psize() as i64;
        self.ucsize += sign * bp.charged_ucsize() as i64;
    }
}

/// Births and deaths in a dataset during one sync.
struct DsAcct {
    prev_snap_txg: u64,
    born: Sums,
    freed: Sums,
    dead: Sums,
    dead_bps: Vec<BlkPtr>,
    pool: Arc<Pool>,
    /// Per-dataset features the blocks born need listed on the dataset.
    features: std::collections::BTreeSet<&'static str>,
}

/// The per-dataset features a block born in a dataset makes active there
/// (OpenZFS's `dsl_dataset_block_born`): `large_blocks` past 128 KiB (and
/// `large_microzap` for a directory block that large: fat ZAP blocks never
/// are, so it is a micro ZAP), and the feature of its checksum and of its
/// compression, if any.
pub(crate) fn block_features(bp: &BlkPtr) -> impl Iterator<Item = &'static str> {
    use ozfs_format::types::{cksum, comp};
    let big = !bp.is_embedded() && bp.lsize() > ozfs_format::blkptr::SPA_OLD_MAXBLOCKSIZE;
    let large = big.then_some(crate::features::LARGE_BLOCKS);
    let microzap = (big && bp.object_type() == ozfs_format::types::ot::DIRECTORY_CONTENTS)
        .then_some(crate::features::LARGE_MICROZAP);
    let sum = if bp.is_embedded() {
        None
    } else {
        match bp.checksum() {
            cksum::SHA512 => Some(crate::features::SHA512),
            cksum::SKEIN => Some(crate::features::SKEIN),
            cksum::EDONR => Some(crate::features::EDONR),
            cksum::BLAKE3 => Some(crate::features::BLAKE3),
            _ => None,
        }
    };
    let zstd = (bp.compression() == comp::ZSTD).then_some(crate::features::ZSTD);
    large.into_iter().chain(microzap).chain(sum).chain(zstd)
}

impl Accounting for DsAcct {
    fn born(&mut self, bp: &BlkPtr) {
        let pool = self.pool.clone();
        self.features.extend(block_features(bp));
        self.born.add(&pool, bp, 1);
    }
    fn killed(&mut self, pool: &Pool, alloc: &mut Allocator, bp: &BlkPtr, txg: u64) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        // An embedded block has no space to free, but its sizes count
        // (OpenZFS's `dsl_dataset_block_kill`): it leaves the dataset's
        // sums, or goes on the dead list like any other.
        if bp.birth() > self.prev_snap_txg {
            self.freed.add(pool, bp, 1);
            if bp.is_embedded() {
                return Ok(());
            }
            pool.free_block(alloc, bp, txg)
        } else {
            self.dead.add(pool, bp, 1);
            self.dead_bps.push(*bp);
            Ok(())
        }
    }
    fn rewritten(&mut self, pool: &Pool, old: &BlkPtr, new: &BlkPtr) {
        self.features.extend(block_features(new));
        self.born.add(pool, new, 1);
        self.born.add(pool, old, -1);
    }
}

/// MOS births and deaths (charged to `$MOS` in the next sync pass).
struct MosAcct {
    sums: Sums,
    pool: Arc<Pool>,
}

impl Accounting for MosAcct {
    fn born(&mut self, bp: &BlkPtr) {
        let pool = self.pool.clone();
        self.sums.add(&pool, bp, 1);
    }
    fn killed(&mut self, pool: &Pool, alloc: &mut Allocator, bp: &BlkPtr, txg: u64) -> Result<()> {
        self.sums.add(pool, bp, -1);
        pool.free_block(alloc, bp, txg)
    }
    fn rewritten(&mut self, pool: &Pool, old: &BlkPtr, new: &BlkPtr) {
        self.sums.add(pool, new, 1);
        self.sums.add(pool, old, -1);
    }
}

/// A pool open for writing.
pub struct PoolWriter {
    /// The committed MOS the dedup tables look entries up in (`crate::ddt`).
    pub(crate) ddt_snapshot: std::sync::Mutex<Option<Arc<crate::ddt::MosSnapshot>>>,
    pub pool: Arc<Pool>,
    pub alloc: Allocator,
    pub mos: ObjsetTx,
    /// Head dataset object → changes to its objset.
    pub fs: BTreeMap<u64, ObjsetTx>,
    /// The open txg.
    pub txg: u64,
    pub version: u64,
    pub root_dir_obj: u64,
    /// Label state to write when the config is rewritten.
    pub state: u64,
    pub config_dirty: bool,
    /// A file system was made, destroyed or promoted: the DSL directories'
    /// `dd_clones` (pool version 26 on) are brought up to date at sync.
    pub(crate) clones_dirty: bool,
    /// The spares list changed: rewrite the MOS `spares` object.
    pub spares_dirty: bool,
    /// Metaslab array object per top-level vdev.
    pub ms_arrays: Vec<u64>,
    /// Raw bytes reserved by writes in the open txg (worst cases: also
    /// what the DSL may charge for them, deflated, checked against the slop
    /// by `crate::slop`).
    pub(crate) reserved: u64,
    /// The pool's space as last synced (`crate::slop`).
    pub(crate) space_cache: Option<crate::slop::SpaceCache>,
    /// Directories whose refreservation charge is kept
    /// (`crate::reservation`); None until the first sync looks.
    pub(crate) refrsrv_dirs: Option<std::collections::BTreeSet<u64>>,
    /// Space accounting is checked at every sync (`crate::space`): the
    /// `$MOS` charge missing when this writer opened the pool (what older
    /// writers, which charged the MOS one txg late, never charged).
    space_lag: Option<Sums>,
    /// A sync failed the space check: nothing more is committed.
    space_failed: Option<String>,
    /// Quota charges of the open txg (`crate::quota`).
    pub(crate) quota: crate::quota::Charges,
    /// Log space maps still to fold into the metaslabs' space maps.
    log_flush: Option<LogFlush>,
    /// The intent logs this writer keeps, by head dataset (`crate::zil`).
    pub(crate) zil: BTreeMap<u64, crate::zil::ZilState>,
    /// File systems whose claimed logs are being replayed: written
    /// although their header still asks for a replay.
    pub(crate) replaying: std::collections::BTreeSet<u64>,
    /// The first txg this writer opened (intent-log claims).
    pub(crate) first_txg: u64,
}

/// `x + v` for an accounting total; below zero is an error when space is
/// checked (a drift the check must report, not hide), else clamped.
fn charge(strict: bool, what: &dyn Fn() -> String, x: u64, v: i64) -> Result<u64> {
    let r = x as i128 + v as i128;
    if r < 0 {
        if strict {
            return Err(Error::Invalid(format!(
                "space accounting: {} would go below zero ({x} {v:+})",
                what()
            )));
        }
        return Ok(0);
    }
    Ok(u64::try_from(r).unwrap_or(u64::MAX))
}

/// The longest space map read (32 Mi entries): its words are decoded in
/// memory, so a longer length in a (hostile) header is refused rather than
/// allocated. ozfs and ZFS condense maps long before that.
pub const MAX_SPACE_MAP_BYTES: u64 = 256 << 20;

/// The allocation state of every top-level vdev as its space maps record
/// it (read only; what a writer starts from and what a leak check compares
/// with), and each vdev's metaslab array object.
pub fn load_metaslabs(pool: &Arc<Pool>, mos_os: &Objset) -> Result<(Vec<MetaslabGroup>, Vec<u64>)> {
    load_metaslabs_and_logs(pool, mos_os).map(|(g, a, _)| (g, a))
}

/// The log space maps of a pool (`log_spacemap`) that a writer folds into
/// its metaslabs' own space maps at its first sync ([`PoolWriter::sync`]).
#[derive(Debug, Default)]
pub(crate) struct LogFlush {
    /// The MOS ZAP naming each log by its txg (`com.delphix:log_spacemap_zap`).
    zap: u64,
    /// (txg, space map object) of every log.
    logs: Vec<(u64, u64)>,
    /// Metaslabs (top-level vdev, id) with changes only a log holds.
    metaslabs: Vec<(u64, u64)>,
    /// Each top-level vdev's `ms_unflushed_phys_txgs` array object.
    arrays: Vec<u64>,
}

/// [`load_metaslabs`], and the log space maps whose changes were replayed.
pub(crate) fn load_metaslabs_and_logs(
    pool: &Arc<Pool>,
    mos_os: &Objset,
) -> Result<(Vec<MetaslabGroup>, Vec<u64>, Option<LogFlush>)> {
    let mut groups = Vec::new();
    let mut ms_arrays = Vec::new();
    let (mut unflushed, mut logs) =
        unflushed_log_entries(pool, mos_os).map_err(|e| e.context("log space maps"))?;
    let view = DslPool::from_mos(pool.clone(), mos_os.clone(), 0);
    if let Some(l) = logs.as_mut() {
        l.metaslabs = unflushed.keys().copied().collect();
    }
    for top in &pool.root.children {
        let cfg = &top.config;
        // A removed (indirect) vdev has no metaslabs: nothing is allocated
        // on it; its group only keeps the ids aligned.
        if matches!(top.kind, VdevKind::Indirect { .. }) {
            let mut g = MetaslabGroup::new(top.id, top.ashift as u32, 0, 17, Geometry::Plain);
            g.allocatable = false;
            groups.push(g);
            ms_arrays.push(0);
            continue;
        }
        let ms_shift = cfg
            .get_u64("metaslab_shift")
            .ok_or_else(|| Error::corrupt("vdev config", "no metaslab_shift"))?;
        let ms_array = cfg
            .get_u64("metaslab_array")
            .ok_or_else(|| Error::corrupt("vdev config", "no metaslab_array"))?;
        if !(17..=40).contains(&ms_shift) {
            return Err(Error::corrupt(
                "vdev config",
                format!("metaslab_shift {ms_shift}"),
            ));
        }
        let raidz = Geometry::of(top);
        let mut g =
            MetaslabGroup::new(top.id, top.ashift as u32, top.asize, ms_shift as u32, raidz);
        // Allocation classes: a log device (`is_log`), or a special or
        // dedup vdev (its top ZAP's `org.zfsonlinux:allocation_bias`),
        // gets no new blocks but intent-log ones on a log device; ozfs
        // writes everything else to the normal class (where OpenZFS too
        // puts what its other classes cannot hold).
        let bias = match view.top_zap(top.id) {
            Some(z) => ozfs_dmu::zap::lookup_obj(mos_os, z, "org.zfsonlinux:allocation_bias")?
                .and_then(|e| e.as_string()),
            None => None,
        };
        if cfg.get_u64("is_log").unwrap_or(0) != 0 {
            // Intent-log blocks go there first (`Allocator::alloc_log`).
            g.mark_log();
        } else if bias.is_some_and(|b| !b.is_empty()) {
            g.allocatable = false;
        }
        let count = g.metaslabs.len();
        let arr_dn = mos_os.dnode(ms_array)?;
        let arr = mos_os.read(&arr_dn, 0, count * 8)?;
        for id in 0..count {
            let sm = ozfs_format::bytes::u64_at(&arr, id * 8, arr_dn.swap, "metaslab array")?;
            let log = unflushed.remove(&(top.id, id as u64)).unwrap_or_default();
            if sm == 0 && log.is_empty() {
                continue;
            }
            let mut entries = if sm == 0 {
                Vec::new()
            } else {
                let dn = mos_os.dnode(sm)?;
                let hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
                let data = mos_os.read_sized(
                    &dn,
                    hdr.length,
                    MAX_SPACE_MAP_BYTES,
                    &format!("space map object {sm}"),
                )?;
                spacemap::decode(&data, dn.swap, top.ashift as u32)?
            };
            entries.extend(log);
            g.load_metaslab_deferring(id as u64, sm, &entries, pool.uberblock.txg)
                .map_err(|e| e.context(&format!("vdev {} metaslab {id}", top.id)))?;
        }
        groups.push(g);
        ms_arrays.push(ms_array);
    }
    if let Some(((vdev, ms), _)) = unflushed.iter().next() {
        return Err(Error::corrupt(
            "log space maps",
            format!("entries for metaslab {ms} of vdev {vdev}, which has no such metaslab"),
        ));
    }
    Ok((groups, ms_arrays, logs))
}

/// The changes the log space maps hold that their metaslabs' own space
/// maps do not have yet (`log_spacemap`: OpenZFS writes each txg's
/// allocations and frees to one pool-wide log and flushes metaslabs into
/// their space maps later). A log of txg T applies to a metaslab whose
/// unflushed txg (its top-level vdev's `ms_unflushed_phys_txgs` array) is
/// at most T. Returned per (top-level vdev, metaslab), in txg order, as
/// metaslab-relative entries each run headed by a debug entry naming its
/// txg (so frees of the last txgs are deferred as any others). Empty for a
/// pool without the feature. With them, the logs themselves (None: the
/// pool has no log ZAP, or it names no log).
#[allow(clippy::type_complexity)]
fn unflushed_log_entries(
    pool: &Arc<Pool>,
    mos_os: &Objset,
) -> Result<(BTreeMap<(u64, u64), Vec<SmEntry>>, Option<LogFlush>)> {
    let mut out: BTreeMap<(u64, u64), Vec<SmEntry>> = BTreeMap::new();
    let Some(logs) =
        ozfs_dmu::zap::lookup_obj(mos_os, 1, LOG_SPACEMAP_ZAP)?.and_then(|e| e.as_u64())
    else {
        return Ok((out, None));
    };
    let mut found = LogFlush {
        zap: logs,
        ..Default::default()
    };
    let mut by_txg: Vec<(u64, u64)> = Vec::new();
    let dn = mos_os.dnode(logs)?;
    for e in ozfs_dmu::zap::list(mos_os, &dn)? {
        // Keyed by txg in hex (`zap_add_int_key`).
        let txg = u64::from_str_radix(&e.name_str(), 16).map_err(|_| {
            Error::corrupt("log space map ZAP", format!("entry '{}'", e.name_str()))
        })?;
        let obj = e.as_u64().ok_or_else(|| {
            Error::corrupt("log space map ZAP", format!("entry {txg} is not an object"))
        })?;
        by_txg.push((txg, obj));
    }
    by_txg.sort_unstable();
    found.logs = by_txg.clone();
    // Each log is read once: a repeated object is damage, and the logs
    // together are bounded like one space map.
    let mut objs: Vec<u64> = by_txg.iter().map(|&(_, o)| o).collect();
    objs.sort_unstable();
    if objs.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::corrupt(
            "log space map ZAP",
            "one space map object named by two txgs",
        ));
    }
    let mut total: u64 = 0;
    let mut last_txg: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    // Each top-level vdev's metaslabs' unflushed txgs.
    let mut flushed: BTreeMap<u64, (u64, Vec<u8>, bool)> = BTreeMap::new();
    let dsl = DslPool::from_mos(pool.clone(), mos_os.clone(), 0);
    for top in &pool.root.children {
        let Some(zap_obj) = dsl.top_zap(top.id) else {
            continue;
        };
        let Some(arr) =
            ozfs_dmu::zap::lookup_obj(mos_os, zap_obj, "com.delphix:ms_unflushed_phys_txgs")?
                .and_then(|e| e.as_u64())
        else {
            continue;
        };
        found.arrays.push(arr);
        let adn = mos_os.dnode(arr)?;
        let ms_shift = top.config.get_u64("metaslab_shift").unwrap_or(0);
        let count = if (17..=40).contains(&ms_shift) {
            top.asize >> ms_shift
        } else {
            0
        };
        // Metaslabs past the array's end (a vdev grown since) read as
        // unflushed txg 0, as OpenZFS reads past an object's end.
        let room = adn
            .phys
            .maxblkid
            .saturating_add(1)
            .saturating_mul(adn.phys.datablksz());
        let data = mos_os.read_sized(
            &adn,
            count.saturating_mul(8).min(room),
            MAX_SPACE_MAP_BYTES,
            "unflushed txgs of metaslabs",
        )?;
        flushed.insert(top.id, (ms_shift, data, adn.swap));
    }
    for (txg, obj) in by_txg {
        let dn = mos_os.dnode(obj)?;
        let hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
        let data = mos_os.read_sized(
            &dn,
            hdr.length,
            MAX_SPACE_MAP_BYTES,
            &format!("log space map of txg {txg}"),
        )?;
        total = total.saturating_add(hdr.length);
        if total > MAX_SPACE_MAP_BYTES {
            return Err(Error::corrupt(
                "log space maps",
                format!("more than {MAX_SPACE_MAP_BYTES} bytes in all"),
            ));
        }
        for (vdev, e) in spacemap::decode_log(&data, dn.swap)
            .map_err(|e| e.context(&format!("log space map of txg {txg}")))?
        {
            let Some(top) = pool.root.children.get(vdev as usize) else {
                return Err(Error::corrupt(
                    format!("log space map of txg {txg}"),
                    format!("entry for vdev {vdev}, which does not exist"),
                ));
            };
            let ms_shift = match flushed.get(&top.id) {
                Some((s, _, _)) => *s,
                None => top.config.get_u64("metaslab_shift").unwrap_or(0),
            };
            if !(17..=40).contains(&ms_shift) {
                continue;
            }
            let (offset, len, alloc) = match e {
                SmEntry::Alloc { offset, len } => (offset, len, true),
                SmEntry::Free { offset, len } => (offset, len, false),
                SmEntry::Debug { .. } => continue,
            };
            let ms = offset >> ms_shift;
            let unflushed_txg = flushed
                .get(&top.id)
                .and_then(|(_, a, swap)| {
                    ozfs_format::bytes::u64_at(a, ms as usize * 8, *swap, "unflushed txgs").ok()
                })
                .unwrap_or(0);
            if txg < unflushed_txg {
                continue;
            }
            let (start, _) =
                Geometry::of(top).metaslab_range(top.ashift as u32, ms_shift as u32, ms);
            let Some(rel) = offset.checked_sub(start) else {
                return Err(Error::corrupt(
                    format!("log space map of txg {txg}"),
                    format!("entry at {offset:#x} before metaslab {ms} of vdev {vdev}"),
                ));
            };
            let list = out.entry((top.id, ms)).or_default();
            // Logs come in txg order: a run's debug entry is pushed when
            // this metaslab's last one names an older txg.
            let last = last_txg.entry((top.id, ms)).or_insert(0);
            if *last != txg {
                *last = txg;
                list.push(SmEntry::Debug {
                    action: 0,
                    pass: 1,
                    txg,
                });
            }
            list.push(if alloc {
                SmEntry::Alloc { offset: rel, len }
            } else {
                SmEntry::Free { offset: rel, len }
            });
        }
    }
    let found = if found.logs.is_empty() {
        None
    } else {
        Some(found)
    };
    Ok((out, found))
}

/// Keys of the MOS config that name vdev ZAPs (OpenZFS's per-vdev ZAPs
/// and, with `vdev_zaps_v2`, the root vdev's), and the flag that says the
/// pool has them.
const VDEV_ZAP_KEYS: [&str; 4] = [
    "com.delphix:has_per_vdev_zaps",
    "com.klarasystems:vdev_zap_root",
    "com.delphix:vdev_zap_top",
    "com.delphix:vdev_zap_leaf",
];

/// Carry the vdev ZAP keys of the committed MOS config `old` into the new
/// one `new` (ozfs builds it from the labels, which lack them): at the top
/// level, on the root vdev, and on each vdev matched by its guid, so a vdev
/// replaced or removed since does not inherit another's ZAPs. Only those
/// keys are carried: anything else ozfs left out, it left out on purpose.
fn keep_vdev_zaps(new: &mut NvList, old: &NvList) {
    fn carry(new: &mut NvList, old: &NvList) {
        for k in VDEV_ZAP_KEYS {
            if new.get(k).is_none() {
                if let Some(v) = old.get(k) {
                    new.set(k, v.clone());
                }
            }
        }
    }
    fn walk(new: &mut NvList, old: &NvList) {
        if new.get_u64("guid").is_none() || new.get_u64("guid") != old.get_u64("guid") {
            return;
        }
        carry(new, old);
        let Some(old_children) = old.get_nvlist_array("children") else {
            return;
        };
        if let Some(NvValue::NvListArray(kids)) = new.get_mut("children") {
            for kid in kids.iter_mut() {
                if let Some(o) = old_children.iter().find(|o| {
                    o.get_u64("guid").is_some() && o.get_u64("guid") == kid.get_u64("guid")
                }) {
                    walk(kid, o);
                }
            }
        }
    }
    carry(new, old);
    if let (Some(NvValue::NvList(nt)), Some(ot)) =
        (new.get_mut("vdev_tree"), old.get_nvlist("vdev_tree"))
    {
        walk(nt, ot);
    }
}

/// The MOS directory entry naming the log space maps by txg.
const LOG_SPACEMAP_ZAP: &str = "com.delphix:log_spacemap_zap";

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
        .unwrap_or(0)
}

impl PoolWriter {
    /// Load the allocation state of an opened pool (its devices must be writable).
    pub fn open(pool: Arc<Pool>) -> Result<PoolWriter> {
        let dsl = DslPool::open(pool.clone())?;
        crate::features::check_write(&pool, &dsl.mos)?;
        // The writer's process is the only one writing the pool: its reads
        // may repair the copies they find wrong (self-healing).
        if !pool.readonly {
            pool.heal.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mos_os = Objset::mos(pool.clone());
        let (groups, ms_arrays, log_flush) = load_metaslabs_and_logs(&pool, &mos_os)?;
        let mut alloc = Allocator::new(groups);
        alloc.set_synced_txg(pool.uberblock.txg);
        let txg = pool.uberblock.txg + 1;
        let version = pool.uberblock.version;
        Ok(PoolWriter {
            mos: ObjsetTx::new(mos_os),
            fs: BTreeMap::new(),
            txg,
            version,
            root_dir_obj: dsl.root_dir_obj,
            state: POOL_STATE_ACTIVE,
            config_dirty: false,
            spares_dirty: false,
            clones_dirty: false,
            ms_arrays,
            reserved: 0,
            space_cache: None,
            refrsrv_dirs: None,
            space_lag: None,
            space_failed: None,
            quota: Default::default(),
            log_flush,
            ddt_snapshot: Default::default(),
            alloc,
            pool,
            zil: BTreeMap::new(),
            replaying: Default::default(),
            first_txg: txg,
        })
        .and_then(|mut w| {
            if crate::space::enabled() {
                w.space_lag = Some(crate::space::mos_lag(&w)?);
            }
            // Frees consult the block reference tables from the first;
            // no obsolete range of an earlier writer is left over.
            crate::brt::load(&w)?;
            crate::ddt::load(&w)?;
            w.pool
                .obsolete
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            crate::obsolete::check_write(&w)?;
            // Intent logs left by a writer that stopped: their blocks
            // born after the last synced txg are taken before anything
            // else is allocated.
            w.claim_logs()?;
            Ok(w)
        })
    }

    /// A writer over a pool being created (nothing on disk yet).
    pub fn new_raw(
        pool: Arc<Pool>,
        alloc: Allocator,
        mos: ObjsetTx,
        txg: u64,
        version: u64,
    ) -> PoolWriter {
        let ms_arrays = pool
            .root
            .children
            .iter()
            .map(|t| t.config.get_u64("metaslab_array").unwrap_or(0))
            .collect();
        PoolWriter {
            pool,
            alloc,
            mos,
            fs: BTreeMap::new(),
            txg,
            version,
            root_dir_obj: 0,
            state: POOL_STATE_ACTIVE,
            config_dirty: true,
            spares_dirty: false,
            clones_dirty: false,
            ms_arrays,
            reserved: 0,
            space_cache: None,
            refrsrv_dirs: None,
            space_lag: crate::space::enabled().then(Sums::default),
            space_failed: None,
            quota: Default::default(),
            log_flush: None,
            ddt_snapshot: Default::default(),
            zil: BTreeMap::new(),
            replaying: Default::default(),
            first_txg: txg,
        }
    }

    /// A read-only DSL view of the last synced state.
    pub fn dsl(&self) -> DslPool {
        DslPool::from_mos(
            self.pool.clone(),
            Objset::from_parts(self.pool.clone(), self.mos.os.bp, self.mos.os.phys.clone()),
            self.root_dir_obj,
        )
    }

    /// DSL dataset bonus as currently changed.
    pub fn dataset(&self, obj: u64) -> Result<DslDatasetPhys> {
        let dn = self.mos.dnode(obj)?;
        DslDatasetPhys::parse(&dn.phys.bonus, dn.swap)
    }

    pub fn set_dataset(&mut self, obj: u64, ds: &DslDatasetPhys) -> Result<()> {
        self.mos.set_bonus(obj, ds.encode())
    }

    pub fn dir(&self, obj: u64) -> Result<DslDirPhys> {
        let dn = self.mos.dnode(obj)?;
        DslDirPhys::parse(&dn.phys.bonus, dn.swap)
    }

    pub fn set_dir(&mut self, obj: u64, d: &DslDirPhys) -> Result<()> {
        self.mos.set_bonus(obj, d.encode())
    }

    /// The changes to a file system's objset (opened on first use).
    pub fn fs_tx(&mut self, ds_obj: u64) -> Result<&mut ObjsetTx> {
        if !self.fs.contains_key(&ds_obj) {
            let ds = self.dataset(ds_obj)?;
            if ds.bp.is_hole() {
                return Err(Error::Invalid(format!(
                    "dataset object {ds_obj} has no objset"
                )));
            }
            // An encrypted dataset's objset is written with its master key
            // (its encryption root's key loaded in this process): every
            // block sealed as OpenZFS seals it. The objset's own MACs are
            // checked as it is opened.
            // Encrypted as the DSL directory says, not only as the
            // (unauthenticated) crypt bit of the objset pointer says.
            let key = if ds.bp.uses_crypt() || self.dir_key_obj(ds.dir_obj)?.is_some() {
                let dsl = self.dsl();
                let name = dsl
                    .dir_name(ds.dir_obj)
                    .unwrap_or_else(|_| format!("dataset object {ds_obj}"));
                let key = dsl.dir_master_key(ds.dir_obj, &name)?;
                // As OpenZFS (`dsl_dir_incompatible_encryption_version`):
                // a version-0 key's datasets are read, never written.
                if key.version() == 0 {
                    return Err(Error::unsupported(
                        format!("dataset '{name}'"),
                        "its encryption key is of version 0 (OpenZFS's errata #4): it is read, \
                         not written; send it raw and receive it to upgrade",
                    ));
                }
                Some(key)
            } else {
                None
            };
            let os = Objset::open_keyed(self.pool.clone(), &ds.bp, key)?;
            // An intent log not yet replayed holds changes the objset does
            // not have; written over, OpenZFS would later replay them onto
            // newer data. ozfs does not replay logs: such a file system is
            // not written until OpenZFS has imported the pool once.
            if !self.zil.contains_key(&ds_obj)
                && !self.replaying.contains(&ds_obj)
                && crate::space::zil_has_records(&self.pool, &os.phys.zil_header, os.swap)?
            {
                return Err(Error::unsupported(
                    format!("dataset object {ds_obj}"),
                    "its intent log holds records not replayed (a pool not exported cleanly): \
                     mount it read-write to replay them, or read it with -o readonly=on",
                ));
            }
            let t = self.objset_tx(os)?;
            self.fs.insert(ds_obj, t);
        }
        self.fs
            .get_mut(&ds_obj)
            .ok_or_else(|| Error::Invalid("fs tx".into()))
    }

    /// Close the objsets of encrypted datasets whose key is no longer
    /// loaded (after `zfs unload-key`), so the next write to one is refused
    /// naming the key. Staged changes are synced first: nothing is lost.
    pub fn release_unloaded_keys(&mut self) -> Result<()> {
        self.sync()?;
        let mut gone = Vec::new();
        for (&ds_obj, t) in &self.fs {
            if t.os.key.is_some() {
                let dir = self.dataset(ds_obj)?.dir_obj;
                if self.pool.keys.master(dir).is_none() {
                    gone.push(ds_obj);
                }
            }
        }
        for ds_obj in gone {
            self.fs.remove(&ds_obj);
        }
        Ok(())
    }

    /// A writer of dataset objset `os`, keeping the accounting its pool
    /// asks for ([`Self::fs_accounting`]).
    pub(crate) fn objset_tx(&self, os: Objset) -> Result<ObjsetTx> {
        let a = self.fs_accounting(os.phys.os_type)?;
        let mut t = ObjsetTx::new(os);
        if let Some(a) = a {
            t.enable_accounting(a);
        }
        t.micro_max_cap = self.micro_max_cap()?;
        Ok(t)
    }

    /// The largest micro ZAP block this pool takes: 1 MiB where it has
    /// `large_microzap` enabled (the blocks then make their dataset list
    /// it), else 128 KiB.
    pub(crate) fn micro_max_cap(&self) -> Result<usize> {
        let large = self.version >= ozfs_spa::pool::SPA_VERSION_FEATURES
            && crate::features::refcount(self, crate::features::LARGE_MICROZAP)?.is_some();
        Ok(if large {
            ozfs_dmu::zap_tx::LARGE_MICRO_MAX
        } else {
            128 * 1024
        })
    }

    /// The user, group and project accounting OpenZFS keeps in an objset
    /// of type `os_type` of this pool: file systems only, from pool
    /// version 15 (user and group space), object counts where
    /// `userobj_accounting` is enabled, projects where `project_quota` is.
    pub(crate) fn fs_accounting(
        &self,
        os_type: u64,
    ) -> Result<Option<ozfs_dmu::tx::UserAccounting>> {
        if self.version < 15 || os_type != ozfs_format::objset::OBJSET_TYPE_ZFS {
            return Ok(None);
        }
        let features = self.version >= ozfs_spa::pool::SPA_VERSION_FEATURES;
        let enabled = |g: &str| -> Result<bool> {
            Ok(features && crate::features::refcount(self, g)?.is_some())
        };
        Ok(Some(ozfs_dmu::tx::UserAccounting {
            objects: enabled(crate::features::USEROBJ_ACCOUNTING)?,
            projects: enabled(crate::features::PROJECT_QUOTA)?,
        }))
    }

    /// The write policy of a dataset (properties resolved through its directory chain).
    pub fn fs_policy(&self, ds_obj: u64) -> Result<FsPolicy> {
        let ds = self.dataset(ds_obj)?;
        let get = |name: &str| -> Result<Option<u64>> {
            let mut dir_obj = ds.dir_obj;
            for _ in 0..64 {
                let dir = self.dir(dir_obj)?;
                if dir.props_zapobj != 0 {
                    if let Some(e) = zap_tx::lookup(&self.mos, dir.props_zapobj, name.as_bytes())? {
                        if let Some(v) = e.as_u64() {
                            return Ok(Some(v));
                        }
                    }
                }
                if dir.parent_obj == 0 {
                    break;
                }
                dir_obj = dir.parent_obj;
            }
            Ok(None)
        };
        let mut checksum = get("checksum")?.unwrap_or(cksum::ON as u64) as u8;
        if checksum == cksum::ON || checksum == cksum::INHERIT {
            checksum = cksum::FLETCHER4;
        }
        // `dedup`: a checksum function (`on`: sha256), `| 1 << 8` for verify.
        let dedup_prop = get("dedup")?.unwrap_or(cksum::OFF as u64);
        let dedup_fn = (dedup_prop & 0xff) as u8;
        let dedup_verify = dedup_prop & (1 << 8) != 0;
        let dedup = dedup_fn != cksum::OFF && dedup_fn != 0;
        if dedup {
            checksum = if dedup_fn == cksum::ON {
                cksum::SHA256
            } else {
                dedup_fn
            };
            if !ozfs_spa::ddt::DEDUP_CHECKSUMS.contains(&checksum) {
                return Err(Error::corrupt(
                    format!("dataset {ds_obj} property dedup"),
                    format!("value {dedup_prop:#x} names no dedup checksum"),
                ));
            }
        }
        // The algorithm is the low 7 bits (zstd keeps its level above).
        let mut compress = (get("compression")?.unwrap_or(comp::OFF as u64) & 0x7f) as u8;
        if compress == comp::ON {
            // What "on" means: lz4 once the pool has the feature.
            compress = if self.pool.feature_active(crate::features::LZ4) {
                comp::LZ4
            } else {
                comp::LZJB
            };
        }
        if compress == comp::INHERIT {
            compress = comp::OFF;
        }
        let copies = get("copies")?.unwrap_or(1).clamp(1, 3) as usize;
        Ok(FsPolicy {
            meta_compress: meta_compress(&self.pool),
            checksum,
            compress,
            copies,
            salt: self.pool.checksum_salt.get().copied(),
            seal: None,
            dedup,
            // edonr is not strong enough to trust alone (OpenZFS forces
            // verify with it).
            dedup_verify: dedup && (dedup_verify || checksum == cksum::EDONR),
        })
    }

    /// Charge `d` to directory `dir`: its totals, `head` and `snap` to its
    /// HEAD and SNAP breakdown; its ancestors get `d` as child space.
    pub(crate) fn apply_dir_delta(
        &mut self,
        dir_obj: u64,
        d: &Sums,
        head: i64,
        snap: i64,
    ) -> Result<()> {
        let strict = self.space_lag.is_some();
        let mut dir = self.dir(dir_obj)?;
        let w = |f: &'static str| move || format!("DSL directory {dir_obj} {f}");
        dir.used_bytes = charge(strict, &w("used_bytes"), dir.used_bytes, d.dsize)?;
        dir.compressed_bytes = charge(
            strict,
            &w("compressed_bytes"),
            dir.compressed_bytes,
            d.psize,
        )?;
        dir.uncompressed_bytes = charge(
            strict,
            &w("uncompressed_bytes"),
            dir.uncompressed_bytes,
            d.ucsize,
        )?;
        dir.used_breakdown[0] = charge(strict, &w("HEAD"), dir.used_breakdown[0], head)?;
        dir.used_breakdown[1] = charge(strict, &w("SNAP"), dir.used_breakdown[1], snap)?;
        let parent = dir.parent_obj;
        self.set_dir(dir_obj, &dir)?;
        if parent == 0 {
            return Ok(());
        }
        self.apply_child_delta(parent, d)
    }

    /// Add `d` to directory `dir` and its ancestors as child space.
    pub(crate) fn apply_child_delta(&mut self, dir: u64, d: &Sums) -> Result<()> {
        let strict = self.space_lag.is_some();
        let mut obj = dir;
        for _ in 0..64 {
            let mut x = self.dir(obj)?;
            let o = obj;
            let w = |f: &'static str| move || format!("DSL directory {o} {f}");
            x.used_bytes = charge(strict, &w("used_bytes"), x.used_bytes, d.dsize)?;
            x.compressed_bytes =
                charge(strict, &w("compressed_bytes"), x.compressed_bytes, d.psize)?;
            x.uncompressed_bytes = charge(
                strict,
                &w("uncompressed_bytes"),
                x.uncompressed_bytes,
                d.ucsize,
            )?;
            x.used_breakdown[2] = charge(strict, &w("CHILD"), x.used_breakdown[2], d.dsize)?;
            let p = x.parent_obj;
            self.set_dir(obj, &x)?;
            if p == 0 {
                return Ok(());
            }
            obj = p;
        }
        Err(Error::corrupt(
            "DSL directory tree",
            "parent chain too long",
        ))
    }

    /// Append BPs to a pool-v23 dead list (a bplist object).
    pub(crate) fn bplist_append(&mut self, obj: u64, bps: &[BlkPtr], sums: &Sums) -> Result<()> {
        if bps.is_empty() {
            return Ok(());
        }
        let dn = self.mos.dnode(obj)?;
        if dn.phys.object_type != ot::BPOBJ {
            return Err(Error::unsupported(
                format!("dead list object {obj}"),
                format!(
                    "type {} (only pool-v23 bplists are written)",
                    dn.phys.object_type
                ),
            ));
        }
        let b = dn.phys.bonus.clone();
        let entries = u64_at(&b, 0);
        let mut buf = Vec::with_capacity(bps.len() * 128);
        for bp in bps {
            buf.extend_from_slice(&bp.to_bytes());
        }
        self.mos.write(obj, entries * 128, &buf)?;
        let mut nb = b.clone();
        let put = |nb: &mut Vec<u8>, off: usize, v: u64| {
            if nb.len() >= off + 8 {
                nb[off..off + 8].copy_from_slice(&v.to_ne_bytes());
            }
        };
        put(&mut nb, 0, entries + bps.len() as u64);
        put(&mut nb, 8, (u64_at(&b, 8) as i64 + sums.dsize) as u64);
        put(&mut nb, 16, (u64_at(&b, 16) as i64 + sums.psize) as u64);
        put(&mut nb, 24, (u64_at(&b, 24) as i64 + sums.ucsize) as u64);
        self.mos.set_bonus(obj, nb)
    }

    /// The creation txg of a directory's origin snapshot (0 without one):
    /// blocks born at or before it were charged to the origin's directory.
    pub(crate) fn origin_txg(&self, dir_obj: u64) -> Result<u64> {
        let origin = self.dir(dir_obj)?.origin_obj;
        if origin == 0 {
            return Ok(0);
        }
        Ok(self.dataset(origin)?.creation_txg)
    }

    /// Sync one file system's changes and charge them.
    fn sync_fs(&mut self, ds_obj: u64, mut otx: ObjsetTx) -> Result<()> {
        let mut policy = self.fs_policy(ds_obj)?;
        // An encrypted objset (opened with its key, or new with one) is
        // sealed with it; one without its key is never written.
        policy.seal = if otx.raw_recv {
            Some(Arc::new(ozfs_codec::crypt::Sealer::Raw))
        } else {
            otx.os
                .key
                .clone()
                .map(|k| Arc::new(ozfs_codec::crypt::Sealer::Key(k)))
        };
        // Never plain blocks into an encrypted dataset, however its
        // objset was opened.
        let encrypted_dir = {
            let dir = self.dataset(ds_obj)?.dir_obj;
            self.dir_key_obj(dir)?.is_some()
        };
        if policy.seal.is_none() && (otx.os.bp.uses_crypt() || encrypted_dir) {
            return Err(Error::Permission(format!(
                "dataset object {ds_obj} is encrypted and its key is not loaded"
            )));
        }
        let mut ds = self.dataset(ds_obj)?;
        let mut acct = DsAcct {
            prev_snap_txg: ds.prev_snap_txg,
            born: Sums::default(),
            freed: Sums::default(),
            dead: Sums::default(),
            dead_bps: Vec::new(),
            pool: self.pool.clone(),
            features: Default::default(),
        };
        let bp = otx.sync(&mut self.alloc, self.txg, &policy, &mut acct)?;
        let mut features = std::mem::take(&mut acct.features);
        if self.version < ozfs_spa::pool::SPA_VERSION_FEATURES {
            features.clear();
        }
        for f in features {
            if !crate::features::listed_on_dataset(&self.mos.os, ds_obj, f)? {
                crate::features::activate_on_dataset(self, ds_obj, f)?;
            }
        }
        let strict = self.space_lag.is_some();
        let w = |f: &'static str| move || format!("dataset object {ds_obj} {f}");
        ds.bp = bp;
        ds.referenced_bytes = charge(
            strict,
            &w("referenced_bytes"),
            ds.referenced_bytes,
            acct.born.dsize - acct.freed.dsize - acct.dead.dsize,
        )?;
        ds.compressed_bytes = charge(
            strict,
            &w("compressed_bytes"),
            ds.compressed_bytes,
            acct.born.psize - acct.freed.psize - acct.dead.psize,
        )?;
        ds.uncompressed_bytes = charge(
            strict,
            &w("uncompressed_bytes"),
            ds.uncompressed_bytes,
            acct.born.ucsize - acct.freed.ucsize - acct.dead.ucsize,
        )?;
        ds.unique_bytes = charge(
            strict,
            &w("unique_bytes"),
            ds.unique_bytes,
            acct.born.dsize - acct.freed.dsize,
        )?;
        self.set_dataset(ds_obj, &ds)?;
        let net = Sums {
            dsize: acct.born.dsize - acct.freed.dsize,
            psize: acct.born.psize - acct.freed.psize,
            ucsize: acct.born.ucsize - acct.freed.ucsize,
        };
        // Dead blocks move from the head's space to the snapshots' — those
        // charged to this directory: born after its origin (a clone's
        // older blocks belong to its origin's directory).
        let origin_txg = if acct.dead_bps.is_empty() {
            0
        } else {
            self.origin_txg(ds.dir_obj)?
        };
        let moved: i64 = acct
            .dead_bps
            .iter()
            .filter(|b| b.birth() > origin_txg)
            .map(|b| self.pool.dsize(b, true) as i64)
            .sum();
        self.apply_dir_delta(ds.dir_obj, &net, net.dsize - moved, moved)?;
        if !acct.dead_bps.is_empty() {
            self.deadlist_append(ds.deadlist_obj, &acct.dead_bps, &acct.dead)?;
            // Blocks born after the previous snapshot's own predecessor were
            // unique to it (not for a clone: its origin has a next of its own).
            if ds.prev_snap_obj != 0 && self.dataset(ds.prev_snap_obj)?.next_snap_obj == ds_obj {
                let mut prev = self.dataset(ds.prev_snap_obj)?;
                let mut uniq = 0i64;
                for bp in &acct.dead_bps {
                    if bp.birth() > prev.prev_snap_txg {
                        uniq += self.pool.dsize(bp, true) as i64;
                    }
                }
                let p = ds.prev_snap_obj;
                prev.unique_bytes = charge(
                    strict,
                    &move || format!("dataset object {p} unique_bytes"),
                    prev.unique_bytes,
                    uniq,
                )?;
                self.set_dataset(ds.prev_snap_obj, &prev)?;
            }
        }
        self.fs.insert(ds_obj, otx);
        Ok(())
    }

    fn mos_dir_obj(&self) -> Result<u64> {
        let root = self.dir(self.root_dir_obj)?;
        zap_tx::lookup_u64(&self.mos, root.child_dir_zapobj, "$MOS")
    }

    /// Rewrite, in pass 1, the space maps of changed metaslabs that have grown
    /// to more than twice their condensed size (and beyond one block) as a
    /// minimal list, as OpenZFS's condensing does.
    fn condense_space_maps(&mut self) -> Result<()> {
        let mut todo = Vec::new();
        for g in &self.alloc.groups {
            for ms in &g.metaslabs {
                if ms.sm_object != 0 && ms.is_dirty() {
                    todo.push((g.vdev, ms.id, ms.sm_object, g.ashift));
                }
            }
        }
        for (vdev, ms_id, sm_obj, ashift) in todo {
            let dn = self.mos.dnode(sm_obj)?;
            let hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
            let worth = self
                .alloc
                .group(vdev)
                .and_then(|g| g.metaslabs.get(ms_id as usize))
                .map(|ms| ms.condense_worthwhile(hdr.length, ashift, condense_min_bytes()))
                .unwrap_or(false);
            if worth {
                self.rewrite_space_map(vdev, ms_id, sm_obj, ashift)?;
            }
        }
        Ok(())
    }

    /// Replace the space map `sm_obj` of metaslab `ms_id` of `vdev` by the
    /// condensed form of the metaslab's state (its unsynced changes
    /// included), with its header and histogram.
    fn rewrite_space_map(&mut self, vdev: u64, ms_id: u64, sm_obj: u64, ashift: u32) -> Result<()> {
        let dn = self.mos.dnode(sm_obj)?;
        let entries = self.alloc.condense(vdev, ms_id, self.txg, 1)?;
        let bytes = spacemap::encode(&entries, ashift)?;
        let mut padded = bytes.clone();
        padded.resize(
            bytes.len().div_ceil(SPACE_MAP_BLOCKSIZE as usize).max(1)
                * SPACE_MAP_BLOCKSIZE as usize,
            0,
        );
        self.mos.write(sm_obj, 0, &padded)?;
        let new_blocks = (padded.len() as u64) / SPACE_MAP_BLOCKSIZE;
        self.mos.punch_from(sm_obj, new_blocks)?;
        let alloc_bytes = self
            .alloc
            .group(vdev)
            .and_then(|g| g.metaslabs.get(ms_id as usize))
            .map(|ms| ms.alloc_bytes())
            .unwrap_or(0);
        let nh = SpaceMapHeader {
            object: sm_obj,
            length: bytes.len() as u64,
            alloc: alloc_bytes as i64,
        };
        let mut bonus = dn.phys.bonus.clone();
        nh.store(&mut bonus);
        self.store_histogram(vdev, ms_id, &mut bonus);
        self.mos.set_bonus(sm_obj, bonus)
    }

    /// Fold the log space maps into the metaslabs' own space maps
    /// (`log_spacemap`), as OpenZFS flushes every metaslab: each metaslab a
    /// log still has changes for gets its space map rewritten whole from the
    /// state loaded (its own map with the logs replayed over it), every
    /// metaslab's unflushed txg becomes 0 (its space map alone is its state;
    /// OpenZFS gives it a txg again the first time it logs a change to it),
    /// and the logs are destroyed, each giving back its `spacemap_histogram`
    /// count. The log ZAP stays, empty, and `log_spacemap` stays active.
    /// From then on ozfs appends every change to the metaslabs' own maps,
    /// which OpenZFS reads as the state of metaslabs that have no log.
    fn flush_log_space_maps(&mut self, f: LogFlush) -> Result<()> {
        for (vdev, ms_id) in f.metaslabs {
            let (sm_obj, ashift) = self.space_map_of(vdev, ms_id)?;
            self.rewrite_space_map(vdev, ms_id, sm_obj, ashift)?;
        }
        for arr in f.arrays {
            self.mos.punch_from(arr, 0)?;
        }
        for (txg, obj) in f.logs {
            let dn = self.mos.dnode(obj)?;
            if dn.phys.bonus.len() >= spacemap::SPACE_MAP_PHYS_SIZE {
                crate::features::incr(self, crate::features::SPACEMAP_HISTOGRAM, -1)?;
            }
            self.mos.free_object(obj)?;
            zap_tx::remove(&mut self.mos, f.zap, format!("{txg:x}").as_bytes())?;
        }
        Ok(())
    }

    /// Write the space-map entries of this pass into the MOS.
    fn write_space_maps(&mut self, pass: u64) -> Result<()> {
        if pass == 1 {
            self.condense_space_maps()?;
        }
        let batches = self.alloc.sync_entries(self.txg, pass)?;
        for (vdev, ms_id, entries) in batches {
            if entries.is_empty() {
                continue;
            }
            let (sm_obj, ashift) = self.space_map_of(vdev, ms_id)?;
            let dn = self.mos.dnode(sm_obj)?;
            let mut hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
            let bytes = spacemap::encode(&entries, ashift)?;
            self.mos.write(sm_obj, hdr.length, &bytes)?;
            hdr.append(&entries, bytes.len() as u64);
            let mut bonus = dn.phys.bonus.clone();
            hdr.store(&mut bonus);
            self.store_histogram(vdev, ms_id, &mut bonus);
            self.mos.set_bonus(sm_obj, bonus)?;
        }
        Ok(())
    }

    /// The space map object of metaslab `ms_id` of `vdev` (made if it has
    /// none yet) and the vdev's ashift.
    fn space_map_of(&mut self, vdev: u64, ms_id: u64) -> Result<(u64, u32)> {
        let (sm_obj, ashift) = {
            let g = self
                .alloc
                .group(vdev)
                .ok_or_else(|| Error::Invalid(format!("no vdev {vdev}")))?;
            let ms = g
                .metaslabs
                .get(ms_id as usize)
                .ok_or_else(|| Error::Invalid(format!("no metaslab {ms_id}")))?;
            (ms.sm_object, g.ashift)
        };
        if sm_obj != 0 {
            return Ok((sm_obj, ashift));
        }
        Ok((self.new_metaslab_space_map(vdev, ms_id)?, ashift))
    }

    /// Make the space map of metaslab `ms_id` of `vdev` (which has none) and
    /// name it in the vdev's metaslab array. As OpenZFS's `space_map_alloc`:
    /// where `spacemap_histogram` is enabled the bonus is the whole
    /// 320-byte `space_map_phys_t` and the feature counts the map.
    fn new_metaslab_space_map(&mut self, vdev: u64, ms_id: u64) -> Result<u64> {
        let obj = self.new_space_map()?;
        if let Some(g) = self.alloc.group_mut(vdev) {
            if let Some(ms) = g.metaslabs.get_mut(ms_id as usize) {
                ms.sm_object = obj;
            }
        }
        let arr = *self
            .ms_arrays
            .get(vdev as usize)
            .ok_or_else(|| Error::Invalid("metaslab array".into()))?;
        self.mos.write(arr, ms_id * 8, &obj.to_ne_bytes())?;
        Ok(obj)
    }

    /// A new empty space map object in the MOS, as OpenZFS's
    /// `space_map_alloc` makes one: the 320-byte `space_map_phys_t` bonus
    /// counted in `spacemap_histogram` where that is enabled.
    pub(crate) fn new_space_map(&mut self) -> Result<u64> {
        let histogram = self.version >= ozfs_spa::pool::SPA_VERSION_FEATURES
            && crate::features::refcount(self, crate::features::SPACEMAP_HISTOGRAM)?.is_some();
        let len = if histogram {
            spacemap::SPACE_MAP_PHYS_SIZE
        } else {
            spacemap::SPACE_MAP_HEADER_SIZE
        };
        let obj = self.mos.create_object(
            ot::SPACE_MAP,
            SPACE_MAP_BLOCKSIZE,
            ot::SPACE_MAP_HEADER,
            vec![0u8; len],
            1,
        )?;
        let hdr = SpaceMapHeader {
            object: obj,
            length: 0,
            alloc: 0,
        };
        let mut bonus = vec![0u8; len];
        hdr.store(&mut bonus);
        self.mos.set_bonus(obj, bonus)?;
        if histogram {
            crate::features::incr(self, crate::features::SPACEMAP_HISTOGRAM, 1)?;
        }
        Ok(obj)
    }

    /// Bring the free-segment histogram of a metaslab's space map bonus up
    /// to date (a 24-byte bonus has none and is left alone).
    fn store_histogram(&self, vdev: u64, ms_id: u64, bonus: &mut [u8]) {
        if let Some(g) = self.alloc.group(vdev) {
            if let Some(ms) = g.metaslabs.get(ms_id as usize) {
                ms.histogram(g.ashift).store(bonus);
            }
        }
    }

    /// Store the spares list in the MOS `spares` object (created on first
    /// use, as ZFS does when the first spare is added).
    fn write_spares_object(&mut self) -> Result<()> {
        let obj = match zap_tx::lookup_u64(&self.mos, 1, "spares") {
            Ok(o) => o,
            Err(Error::NotFound(_)) => {
                let o = self.mos.create_object(
                    ozfs_format::types::ot::PACKED_NVLIST,
                    16384,
                    ozfs_format::types::ot::PACKED_NVLIST_SIZE,
                    vec![0u8; 8],
                    1,
                )?;
                zap_tx::add(&mut self.mos, 1, b"spares", 8, &[o])?;
                o
            }
            Err(e) => return Err(e),
        };
        let packed = self.pool.spares_nvlist().pack_xdr();
        self.write_packed_nvlist(obj, &packed)
    }

    /// Rewrite packed nvlist object `obj` of the MOS with `packed`.
    fn write_packed_nvlist(&mut self, obj: u64, packed: &[u8]) -> Result<()> {
        let dn = self.mos.dnode(obj)?;
        let bs = dn.phys.datablksz().max(512);
        let nblocks = (packed.len() as u64).div_ceil(bs);
        let mut padded = packed.to_vec();
        padded.resize((nblocks * bs) as usize, 0);
        self.mos.write(obj, 0, &padded)?;
        self.mos.punch_from(obj, nblocks)?;
        self.mos
            .set_bonus(obj, (packed.len() as u64).to_ne_bytes().to_vec())?;
        Ok(())
    }

    /// Store the pool config in the MOS `config` object.
    fn write_config_object(&mut self) -> Result<()> {
        let cfg_obj = zap_tx::lookup_u64(&self.mos, 1, "config")?;
        let mut cfg = self.pool.full_config(self.txg, self.state, self.version);
        // Keep keys zfs-fuse wrote that we do not generate (hostid, hostname...).
        for (k, v) in &self.pool.config.pairs {
            if cfg.get(k).is_none() && !matches!(k.as_str(), "top_guid" | "guid" | "vdev_tree") {
                cfg.set(k, v.clone());
            }
        }
        // The vdev ZAPs (per-vdev ZAPs, `vdev_zaps_v2`) live only in the
        // MOS copy: labels do not carry them.
        // The config as the open txg has it (a new pool's first sync has
        // no committed one to read).
        let old = (|| -> Result<NvList> {
            let dn = self.mos.dnode(cfg_obj)?;
            let size = ozfs_format::bytes::u64_at(&dn.phys.bonus, 0, dn.swap, "config size")?;
            if size > 64 << 20 {
                return Err(Error::corrupt("MOS config", format!("{size} bytes")));
            }
            NvList::unpack(&self.mos.read(cfg_obj, 0, size as usize)?)
        })();
        if let Ok(old) = old {
            keep_vdev_zaps(&mut cfg, &old);
        }
        cfg.set("txg", NvValue::Uint64(self.txg));
        let packed = cfg.pack_xdr();
        self.write_packed_nvlist(cfg_obj, &packed)
    }

    /// Commit the open txg.
    pub fn sync(&mut self) -> Result<()> {
        let open = self.txg;
        self.sync_behind()?;
        self.pool.writeback.drain()?;
        // Debug builds (and OZFS_CHECK_LEAKS=1): what was just committed
        // has no leaked and no doubly referenced space.
        if self.txg > open && crate::verify::after_sync_enabled() {
            crate::verify::check_committed(&self.pool, open)?;
        }
        Ok(())
    }

    /// [`sync`](Self::sync) without waiting for the devices: the txg is
    /// committed in memory (the next one is open, reads see it) and its
    /// writes — blocks, flushes, labels, uberblock — are queued in order
    /// on the pool's I/O thread ([`ozfs_spa::writeback`]). It is durable
    /// once [`wait_synced`](Self::wait_synced) returns. A failure of a
    /// queued write stops the writer (every later sync reports it), and
    /// nothing after it reaches the devices.
    pub fn sync_behind(&mut self) -> Result<()> {
        self.refuse_after_space_failure()?;
        if let Some(e) = self.pool.writeback.failed() {
            return Err(e);
        }
        if self.clones_dirty && self.version >= 26 {
            crate::create::refresh_dir_clones(self)?;
        }
        self.clones_dirty = false;
        let txg = self.txg;
        self.zil_sync(txg)?;
        let fs: Vec<(u64, ObjsetTx)> = std::mem::take(&mut self.fs).into_iter().collect();
        for (ds_obj, otx) in fs {
            if otx.is_dirty() {
                if let Err(e) = self.sync_fs(ds_obj, otx) {
                    // Dedup writes already took references for blocks no
                    // txg will commit: the table in memory is ahead.
                    if self.ddt_dirty() {
                        self.space_failed = Some(format!("a sync failed after dedup writes: {e}"));
                    }
                    return Err(e);
                }
            } else {
                self.fs.insert(ds_obj, otx);
            }
        }
        // Reservations follow what the datasets now hold.
        self.reconcile_refreservations()?;
        // What this txg's frees took from the block reference tables
        // (frees of the MOS's own blocks, which are never cloned, follow).
        // The tables in memory already hold the change: a failure stops
        // the writer, so no later txg commits half of it.
        if let Err(e) = self.flush_brt() {
            self.space_failed = Some(format!("writing the block reference tables failed: {e}"));
            return Err(e);
        }
        // The same for the dedup tables: what this txg's writes and frees
        // did to them. The touched entries leave memory here, so until
        // this txg commits a failure stops the writer (lookups would see
        // the last committed table without them).
        if self.ddt_dirty() {
            self.space_failed = Some(DDT_UNCOMMITTED.into());
        }
        if let Err(e) = self.flush_ddt() {
            self.space_failed = Some(format!("writing the dedup tables failed: {e}"));
            return Err(e);
        }
        if self.config_dirty {
            self.write_config_object()?;
        }
        if self.spares_dirty {
            self.write_spares_object()?;
        }
        if !self.mos.is_dirty() && !self.alloc.is_dirty() && !self.config_dirty {
            return Ok(());
        }
        if let Some(f) = self.log_flush.take() {
            // Until this txg commits, its staged MOS holds a half-done fold
            // (logs freed, unflushed txgs zeroed): a failure from here on
            // stops the writer, so no later txg commits that state.
            self.space_failed =
                Some("a sync that folded the log space maps failed before it committed".into());
            self.flush_log_space_maps(f)
                .map_err(|e| e.context("flushing the log space maps"))?;
        }
        let mut acct = MosAcct {
            sums: Sums::default(),
            pool: self.pool.clone(),
        };
        let mut rootbp = self.mos.os.bp;
        let mut pass = 1;
        // Writing a metaslab's space map frees its old block, possibly in
        // another metaslab whose space map then changes too: such a chain
        // visits each metaslab at most once (a block born in this txg is
        // rewritten in place), so allow a pass per metaslab on top.
        let metaslabs: u64 = self
            .alloc
            .groups
            .iter()
            .map(|g| g.metaslabs.len() as u64)
            .sum();
        let max_passes = (MAX_SYNC_PASSES + metaslabs).min(spacemap::SM_DEBUG_PASS_MAX);
        let mos_dir = self.mos_dir_obj().ok();
        loop {
            // What the MOS itself allocated and freed in the last pass is
            // charged to `$MOS` (its ancestors as CHILD) in this one, as
            // ZFS does: the txg ends only once a pass changes nothing, so
            // the MOS is accounted exactly when the uberblock names it.
            let d = std::mem::take(&mut acct.sums);
            if d.dsize != 0 || d.psize != 0 || d.ucsize != 0 {
                if let Some(m) = mos_dir {
                    self.apply_dir_delta(m, &d, d.dsize, 0)?;
                }
            }
            // Ranges freed on removed vdevs (by datasets, then by the MOS's
            // own passes) go to their obsolete space maps in this txg (a
            // failure, with the ranges taken, stops the writer).
            if let Err(e) = self.flush_obsolete() {
                self.space_failed = Some(format!("recording obsolete ranges failed: {e}"));
                return Err(e);
            }
            self.write_space_maps(pass)?;
            if self.mos.is_dirty() {
                let policy = MosPolicy {
                    compress: pass < SYNC_PASS_DONT_COMPRESS,
                    algorithm: meta_compress(&self.pool),
                };
                // A MOS pass takes its staged blocks out as it writes
                // them: one that fails leaves a txg no later sync may
                // commit.
                rootbp = self
                    .mos
                    .sync(&mut self.alloc, txg, &policy, &mut acct)
                    .inspect_err(|e| {
                        self.space_failed = Some(format!("a sync of the MOS failed: {e}"));
                    })?;
            }
            let charged = acct.sums.dsize == 0 && acct.sums.psize == 0 && acct.sums.ucsize == 0;
            if !self.alloc.is_dirty() && !self.mos.is_dirty() && (charged || mos_dir.is_none()) {
                break;
            }
            pass += 1;
            if pass > max_passes {
                return Err(Error::Invalid(format!(
                    "txg {txg}: sync did not converge after {max_passes} passes"
                )));
            }
        }
        // Accounting against the blocks, before anything is committed.
        if let Some(lag) = self.space_lag {
            if let Err(e) = self.check_space(&lag) {
                self.space_failed = Some(e.to_string());
                return Err(e);
            }
        }
        // Commit: data first, then (config labels,) uberblock, flushes between.
        self.pool.flush_all()?;
        if self.config_dirty {
            self.pool
                .write_labels(txg, self.state, self.version, &[0, 2])?;
            self.pool.flush_all()?;
        }
        let ub = Uberblock {
            byteswapped: false,
            version: self.version,
            txg,
            guid_sum: self.pool.root.guid_sum(),
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            rootbp,
            ..Default::default()
        };
        self.pool.write_uberblock(&ub)?;
        self.pool.flush_all()?;
        crate::ddt::committed(self);
        if self.space_failed.as_deref() == Some(DDT_UNCOMMITTED) {
            self.space_failed = None;
        }
        // Committed: a fold of the log space maps done in this txg is on
        // disk (the space check's own failures stopped the sync earlier).
        if self
            .space_failed
            .as_deref()
            .is_some_and(|m| m.starts_with("a sync that folded"))
        {
            self.space_failed = None;
        }
        if self.config_dirty {
            self.pool
                .write_labels(txg, self.state, self.version, &[1, 3])?;
            self.pool.flush_all()?;
            self.config_dirty = false;
        }
        self.spares_dirty = false;
        self.alloc.sync_done_keeping(txg, self.pool.oldest_hold())?;
        self.txg += 1;
        self.reserved = 0;
        self.quota.reset();
        Ok(())
    }

    /// Raw bytes a write of `bytes` logical bytes may need (parity, ditto metadata, indirect blocks).
    fn worst_case_raw(&self, bytes: u64) -> u64 {
        let inflate = self
            .pool
            .root
            .children
            .iter()
            .map(|t| match t.kind {
                VdevKind::Raidz { nparity } => {
                    let n = t.children.len() as u64;
                    (n * 1000) / (n - nparity as u64).max(1)
                }
                // Whole stripes: parity per data column, at least; small
                // blocks take a whole stripe each (reserved as the metadata
                // allowance below covers them).
                VdevKind::Draid { ref layout } => {
                    (layout.width() as u64 * 1000) / layout.ndata.max(1) as u64
                }
                _ => 1000,
            })
            .max()
            .unwrap_or(1000);
        let with_meta = bytes + bytes / 16 + (1 << 20);
        with_meta.saturating_mul(inflate) / 1000
    }

    /// Raw space left for new data: free space minus a physical reserve
    /// (1/64 of the allocatable space, at least 32 MiB but at most half of
    /// it — room for syncs and deletes on any vdev layout) and what the
    /// open txg has already reserved. The slop (`crate::slop`) is checked
    /// besides, on the DSL's figures.
    fn raw_writable(&self) -> u64 {
        let total = self.alloc.total_space();
        let keep = (total >> 6).max(32 << 20).min(total / 2);
        self.alloc
            .free_space()
            .saturating_sub(keep)
            .saturating_sub(self.reserved)
    }

    /// Space left for new file data: the smaller of the raw space left and
    /// the room the slop leaves ([`pool_room`](Self::pool_room) for user
    /// writes) — what `df` reports as available.
    pub fn writable_space(&mut self) -> Result<u64> {
        let room = self.pool_room(crate::slop::SpaceCheck::Normal)?;
        Ok(self.raw_writable().min(room))
    }

    /// Whether a reservation of `need` raw bytes fits: the raw space left,
    /// and the room the slop leaves (the worst case in raw bytes is one in
    /// deflated bytes too).
    fn fits(&mut self, need: u64) -> Result<bool> {
        Ok(need <= self.raw_writable()
            && need <= self.pool_room(crate::slop::SpaceCheck::Normal)?)
    }

    /// Reserve room for `bytes` of new file data in the open txg, or fail with
    /// ENOSPC ("out of space") before anything is written: the write must
    /// fit the raw space left and leave the slop free (`crate::slop`).
    /// Space freed in the last txgs is released first by committing empty
    /// txgs if that helps. The open txg's own reservations (worst cases)
    /// are not given back here: a caller that gets ENOSPC with writes
    /// pending syncs and tries again.
    pub fn reserve(&mut self, bytes: u64) -> Result<()> {
        let need = self.worst_case_raw(bytes);
        if !self.fits(need)? && self.alloc.deferred_space() > 0 {
            for _ in 0..3 {
                self.sync()?;
                self.force_empty_txg()?;
                if self.fits(need)? {
                    break;
                }
            }
        }
        if !self.fits(need)? {
            let free = self.writable_space()?;
            return Err(ozfs_spa::metaslab::enospc(format!(
                "out of space: pool '{}' has {free} bytes free for data, {need} needed (No space left on device)",
                self.pool.name,
            )));
        }
        self.reserved += need;
        Ok(())
    }

    /// Whether the open txg holds reservations (a sync would give them back).
    pub fn has_reservations(&self) -> bool {
        self.reserved > 0
    }

    /// Commit a txg that changes nothing but the uberblock (advances deferred frees).
    pub fn force_empty_txg(&mut self) -> Result<()> {
        self.refuse_after_space_failure()?;
        if self.mos.is_dirty() || self.alloc.is_dirty() {
            return self.sync();
        }
        let txg = self.txg;
        let ub = Uberblock {
            byteswapped: false,
            version: self.version,
            txg,
            guid_sum: self.pool.root.guid_sum(),
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            rootbp: self.mos.os.bp,
            ..Default::default()
        };
        self.pool.flush_all()?;
        self.pool.write_uberblock(&ub)?;
        self.pool.flush_all()?;
        self.pool.writeback.drain()?;
        self.alloc.sync_done_keeping(txg, self.pool.oldest_hold())?;
        self.txg += 1;
        self.reserved = 0;
        Ok(())
    }

    /// Wait until every txg synced so far is on the devices (see
    /// [`sync_behind`](Self::sync_behind)); the failure of a queued write
    /// if one failed.
    pub fn wait_synced(&self) -> Result<()> {
        self.pool.writeback.drain()
    }

    /// After a failed space check the writer's state is not what the
    /// pool should hold: no later txg may commit it.
    fn refuse_after_space_failure(&self) -> Result<()> {
        match &self.space_failed {
            Some(m) => Err(Error::Invalid(format!("the pool writer stopped: {m}"))),
            None => Ok(()),
        }
    }

    /// Sync, then mark the pool exported in its labels.
    pub fn export(&mut self) -> Result<()> {
        self.sync()?;
        self.state = ozfs_spa::label_write::POOL_STATE_EXPORTED;
        self.config_dirty = true;
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vdev(guid: u64, zaps: &[(&str, u64)], children: Vec<NvList>) -> NvList {
        let mut v = NvList::new();
        v.set("guid", NvValue::Uint64(guid));
        for (k, z) in zaps {
            v.set(k, NvValue::Uint64(*z));
        }
        if !children.is_empty() {
            v.set("children", NvValue::NvListArray(children));
        }
        v
    }

    fn config(root: NvList, flag: bool) -> NvList {
        let mut c = NvList::new();
        if flag {
            c.set("com.delphix:has_per_vdev_zaps", NvValue::Boolean);
        }
        c.set("vdev_tree", NvValue::NvList(root));
        c
    }

    /// The vdev ZAP names of the committed MOS config survive a config
    /// rebuilt from the labels, each on the vdev of the same guid; a vdev
    /// new since gets none, and other keys are not carried.
    #[test]
    fn vdev_zaps_are_carried_by_guid() {
        let leaf = vdev(11, &[("com.delphix:vdev_zap_leaf", 135)], vec![]);
        let gone = vdev(12, &[("com.delphix:vdev_zap_leaf", 140)], vec![]);
        let mut top = vdev(10, &[("com.delphix:vdev_zap_top", 136)], vec![leaf, gone]);
        top.set("offline", NvValue::Uint64(1));
        let old = config(
            vdev(7, &[("com.klarasystems:vdev_zap_root", 134)], vec![top]),
            true,
        );

        let new_top = vdev(10, &[], vec![vdev(11, &[], vec![]), vdev(13, &[], vec![])]);
        let mut new = config(vdev(7, &[], vec![new_top]), false);
        keep_vdev_zaps(&mut new, &old);

        assert!(new.get("com.delphix:has_per_vdev_zaps").is_some());
        let root = new.get_nvlist("vdev_tree").unwrap();
        assert_eq!(root.get_u64("com.klarasystems:vdev_zap_root"), Some(134));
        let top = &root.get_nvlist_array("children").unwrap()[0];
        assert_eq!(top.get_u64("com.delphix:vdev_zap_top"), Some(136));
        assert!(top.get("offline").is_none(), "only ZAP names are carried");
        let kids = top.get_nvlist_array("children").unwrap();
        assert_eq!(kids[0].get_u64("com.delphix:vdev_zap_leaf"), Some(135));
        assert_eq!(kids[1].get_u64("com.delphix:vdev_zap_leaf"), None);
    }
}
