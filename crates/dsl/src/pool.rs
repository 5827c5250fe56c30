//! Opening the DSL of a pool and naming its datasets.

use ozfs_codec::checksum;
use ozfs_codec::raidz::raidz_asize;
use ozfs_dmu::{zap, Objset};
use ozfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use ozfs_format::indirect::{IndirectMapping, MappingPhys, MAPPING_ENTRY_SIZE};
use ozfs_format::names::check_component;
use ozfs_format::types::ot;
use ozfs_format::{Error, NvList, Result};
use ozfs_spa::metaslab::Geometry;
use ozfs_spa::Pool;
use ozfs_vdev::VdevKind;
use std::sync::Arc;

const MAX_DEPTH: usize = 64;
const MAX_DATASETS: usize = 1_000_000;

/// One dataset (file system, volume or snapshot).
#[derive(Debug, Clone)]
pub struct DatasetInfo {
    /// Full name: `pool/a/b` or `pool/a@snap`.
    pub name: String,
    pub ds_obj: u64,
    pub ds: DslDatasetPhys,
    pub dir_obj: u64,
    pub dir: DslDirPhys,
    pub is_snapshot: bool,
}

/// Pool-wide space figures.
#[derive(Debug, Clone, Default)]
pub struct SpaceInfo {
    /// Raw allocatable bytes of the top-level vdevs but log devices (what
    /// `zpool list` calls SIZE).
    pub size: u64,
    /// Allocated bytes according to the space maps (log devices not counted).
    pub alloc: u64,
    /// Deflated space (what datasets can use, before the slop reservation;
    /// log devices not counted).
    pub dspace: u64,
    /// (size, allocated) of each top-level vdev, log devices too, in the
    /// root's order (zeros for a hole or a vdev without metaslabs).
    pub tops: Vec<(u64, u64)>,
    /// Deflated space of the normal allocation class (what OpenZFS's slop
    /// rule is computed from): `dspace` without special, dedup and log
    /// vdevs and without the embedded-log metaslabs.
    pub normal_dspace: u64,
    /// Deflated space of the embedded-log metaslabs (one per normal
    /// top-level vdev of more than 64 metaslabs, as OpenZFS 2.2+ sets aside).
    pub embedded_log_dspace: u64,
}

/// OpenZFS's `zfs_embedded_slog_min_ms`.
const EMBEDDED_SLOG_MIN_MS: u64 = 64;

/// The DSL view of an open pool.
pub struct DslPool {
    pub pool: Arc<Pool>,
    pub mos: Objset,
    pub root_dir_obj: u64,
    pub deflate: bool,
}

fn bonus_swap(os: &Objset, obj: u64) -> Result<(Vec<u8>, bool, u8)> {
    let dn = os.dnode(obj)?;
    Ok((dn.phys.bonus.clone(), dn.swap, dn.phys.bonustype))
}

/// Give the pool its checksum salt from the MOS object directory
/// (`org.illumos:checksum_salt`: 32 one-byte integers), once per open
/// pool. A pool without the entry has no salted blocks (OpenZFS writes it
/// before the first one); an entry of another shape is corrupt.
pub fn load_checksum_salt(pool: &Pool, mos: &Objset) -> Result<()> {
    if pool.checksum_salt.get().is_some() {
        return Ok(());
    }
    let Some(e) = zap::lookup_obj(mos, 1, checksum::SALT_ENTRY)
        .map_err(|e| e.context("MOS object directory"))?
    else {
        return Ok(());
    };
    let mut salt: checksum::Salt = [0; 32];
    if e.int_len != 1 || e.value.len() != salt.len() {
        return Err(Error::corrupt(
            "MOS object directory",
            format!(
                "{} is {} integers of {} bytes, not 32 bytes",
                checksum::SALT_ENTRY,
                e.value.len(),
                e.int_len
            ),
        ));
    }
    for (b, v) in salt.iter_mut().zip(&e.value) {
        *b = *v as u8;
    }
    // Another opener may have set it first: the same bytes.
    let _ = pool.checksum_salt.set(salt);
    Ok(())
}

/// The most bytes of removal mapping loaded for one indirect vdev (a
/// mapping entry covers at least one sector: 1 GiB of entries maps far
/// more than any vdev ozfs can be given).
const MAX_MAPPING_BYTES: u64 = 1 << 30;

/// Give the pool the removal mappings of its indirect vdevs (device
/// removal; see `ozfs_spa::indirect`), once per open pool: each mapping
/// object's bonus and entries, read block by block in each block's byte
/// order, checked, and installed.
pub fn load_indirect_mappings(pool: &Pool, mos: &Objset) -> Result<()> {
    if pool.indirect.get().is_some() {
        return Ok(());
    }
    let mut maps = ozfs_spa::indirect::IndirectMaps::new();
    for (vdev, obj) in pool.indirect_vdevs() {
        let what = format!("indirect vdev {vdev}: mapping object {obj}");
        let dn = mos.dnode(obj).map_err(|e| e.context(&what))?;
        let phys = MappingPhys::parse(&dn.phys.bonus, dn.swap).map_err(|e| e.context(&what))?;
        let len = phys
            .num_entries
            .checked_mul(MAPPING_ENTRY_SIZE as u64)
            .filter(|&l| l <= MAX_MAPPING_BYTES)
            .ok_or_else(|| Error::corrupt(&what, format!("{} entries", phys.num_entries)))?;
        let bs = dn.phys.datablksz();
        if bs == 0 || bs % 8 != 0 {
            return Err(Error::corrupt(&what, format!("block size {bs}")));
        }
        // Entries straddle blocks (24 does not divide the block size): the
        // words are put in host order block by block, then decoded as one.
        let mut data: Vec<u8> = Vec::with_capacity(len as usize);
        let mut blkid = 0u64;
        while (data.len() as u64) < len {
            let block = mos
                .read_block_swap(&dn, blkid)
                .map_err(|e| e.context(&what))?;
            let Some((b, swap)) = block else {
                return Err(Error::corrupt(
                    &what,
                    format!("block {blkid} is a hole, {len} bytes of entries declared"),
                ));
            };
            if b.len() as u64 != bs {
                return Err(Error::corrupt(
                    &what,
                    format!("block {blkid} has {} bytes, not {bs}", b.len()),
                ));
            }
            for w in b.chunks_exact(8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                let v = u64::from_ne_bytes(a);
                data.extend_from_slice(&if swap { v.swap_bytes() } else { v }.to_ne_bytes());
            }
            blkid += 1;
        }
        let m = IndirectMapping::parse(vdev, phys, &data, false)?;
        maps.insert(vdev, m);
    }
    pool.install_indirect(maps)
}

/// Whether the pool waits for top-level vdevs to be resolved from the MOS.
fn has_unresolved_tops(pool: &Pool) -> bool {
    pool.unresolved_tops
        .lock()
        .map(|g| g.is_some())
        .unwrap_or(true)
}

impl DslPool {
    /// Open the MOS object directory and find the root dataset.
    pub fn open(pool: Arc<Pool>) -> Result<DslPool> {
        let mos = Objset::mos(pool.clone());
        // A removed device's vdev is described only here: resolved before
        // its mapping is loaded (a pool still missing a device is refused).
        if has_unresolved_tops(&pool) {
            let cfg = DslPool::from_mos(pool.clone(), mos.clone(), 0).mos_config()?;
            let tops = cfg
                .get_nvlist("vdev_tree")
                .and_then(|t| t.get_nvlist_array("children"))
                .unwrap_or(&[]);
            pool.resolve_missing_tops(tops)?;
        }
        // First: later MOS reads may follow old blocks on a removed vdev.
        load_indirect_mappings(&pool, &mos)?;
        let root_dir_obj = zap::lookup_obj(&mos, 1, "root_dataset")
            .map_err(|e| e.context("MOS object directory"))?
            .and_then(|e| e.as_u64())
            .ok_or_else(|| Error::corrupt("MOS object directory", "no root_dataset entry"))?;
        let deflate = zap::lookup_obj(&mos, 1, "deflate")
            .ok()
            .flatten()
            .and_then(|e| e.as_u64())
            .unwrap_or(0)
            != 0;
        crate::features::check_read(&pool, &mos)?;
        load_checksum_salt(&pool, &mos)?;
        let dsl = DslPool {
            pool,
            mos,
            root_dir_obj,
            deflate,
        };
        dsl.load_spares();
        Ok(dsl)
    }

    /// A DSL view over a given MOS objset (e.g. the state a writer just synced).
    pub fn from_mos(pool: Arc<Pool>, mos: Objset, root_dir_obj: u64) -> DslPool {
        if let Err(e) = load_checksum_salt(&pool, &mos) {
            eprintln!("ozfs: pool '{}': checksum salt not loaded: {e}", pool.name);
        }
        let deflate = zap::lookup_obj(&mos, 1, "deflate")
            .ok()
            .flatten()
            .and_then(|e| e.as_u64())
            .unwrap_or(0)
            != 0;
        DslPool {
            pool,
            mos,
            root_dir_obj,
            deflate,
        }
    }

    /// The pool config stored in the MOS (`config` packed nvlist object).
    pub fn mos_config(&self) -> Result<NvList> {
        let obj = zap::lookup_obj(&self.mos, 1, "config")?
            .and_then(|e| e.as_u64())
            .ok_or_else(|| Error::corrupt("MOS object directory", "no config entry"))?;
        self.packed_nvlist(obj, "MOS config")
    }

    /// The hot spares listed in the MOS (`spares` packed nvlist object;
    /// none when the pool never had any).
    pub fn mos_spares(&self) -> Result<Vec<NvList>> {
        let Some(obj) = zap::lookup_obj(&self.mos, 1, "spares")?.and_then(|e| e.as_u64()) else {
            return Ok(Vec::new());
        };
        let nv = self.packed_nvlist(obj, "MOS spares")?;
        Ok(nv.get_nvlist_array("spares").unwrap_or(&[]).to_vec())
    }

    /// Load the pool's spares list once per open pool.
    fn load_spares(&self) {
        if !self.pool.spares_unloaded() {
            return;
        }
        match self.mos_spares() {
            Ok(list) => self.pool.load_spares(&list),
            Err(e) => {
                eprintln!(
                    "ozfs: pool '{}': hot spares not loaded: {e}",
                    self.pool.name
                );
                self.pool.load_spares(&[]);
            }
        }
    }

    /// A packed nvlist object of the MOS (size in its bonus).
    fn packed_nvlist(&self, obj: u64, what: &str) -> Result<NvList> {
        let dn = self.mos.dnode(obj)?;
        let size = ozfs_format::bytes::u64_at(&dn.phys.bonus, 0, dn.swap, "packed nvlist size")?;
        let data = self.mos.read_sized(&dn, size, 64 << 20, what)?;
        NvList::unpack(&data).map_err(|e| e.context(what))
    }

    /// Bytes used by the MOS (the `$MOS` directory's used bytes).
    pub fn mos_used(&self) -> Result<u64> {
        let root = self.dir(self.root_dir_obj)?;
        let e = zap::lookup_obj(&self.mos, root.child_dir_zapobj, "$MOS")?
            .and_then(|e| e.as_u64())
            .ok_or_else(|| Error::not_found("$MOS directory"))?;
        Ok(self.dir(e)?.used_bytes)
    }

    /// DSL directory bonus.
    pub fn dir(&self, obj: u64) -> Result<DslDirPhys> {
        let (b, swap, bt) = bonus_swap(&self.mos, obj)?;
        if bt != ot::DSL_DIR {
            return Err(Error::corrupt(
                format!("DSL directory object {obj}"),
                format!("bonus type {bt}"),
            ));
        }
        DslDirPhys::parse(&b, swap).map_err(|e| e.context(&format!("DSL directory object {obj}")))
    }

    /// DSL dataset bonus.
    pub fn dataset(&self, obj: u64) -> Result<DslDatasetPhys> {
        let (b, swap, bt) = bonus_swap(&self.mos, obj)?;
        if bt != ot::DSL_DATASET {
            return Err(Error::corrupt(
                format!("DSL dataset object {obj}"),
                format!("bonus type {bt}"),
            ));
        }
        DslDatasetPhys::parse(&b, swap).map_err(|e| e.context(&format!("DSL dataset object {obj}")))
    }

    fn info(
        &self,
        name: String,
        ds_obj: u64,
        dir_obj: u64,
        is_snapshot: bool,
    ) -> Result<DatasetInfo> {
        Ok(DatasetInfo {
            name,
            ds_obj,
            ds: self.dataset(ds_obj)?,
            dir_obj,
            dir: self.dir(dir_obj)?,
            is_snapshot,
        })
    }

    /// Child directories of a DSL dir (name, object), internal `$` names skipped, sorted by name.
    /// A name that is not a valid dataset name component (`..`, `a/b`, control
    /// characters: only a hostile pool has them) is skipped: it could not be
    /// named on a command line, and it must never become part of a path.
    pub fn child_dirs(&self, dir: &DslDirPhys) -> Result<Vec<(String, u64)>> {
        if dir.child_dir_zapobj == 0 {
            return Ok(Vec::new());
        }
        let mut v: Vec<(String, u64)> = zap::list_obj(&self.mos, dir.child_dir_zapobj)?
            .into_iter()
            .filter(|e| !e.name.starts_with(b"$"))
            .filter_map(|e| {
                let name = std::str::from_utf8(&e.name).ok()?;
                check_component(name).ok()?;
                e.as_u64().map(|v| (name.to_string(), v))
            })
            .collect();
        v.sort();
        Ok(v)
    }

    /// The full name of a DSL directory (`pool/a/b`), found by walking up
    /// the parents' child maps.
    pub fn dir_name(&self, dir_obj: u64) -> Result<String> {
        let mut parts = Vec::new();
        let mut obj = dir_obj;
        for _ in 0..64 {
            let d = self.dir(obj)?;
            if d.parent_obj == 0 {
                parts.push(self.pool.name.clone());
                parts.reverse();
                return Ok(parts.join("/"));
            }
            let p = self.dir(d.parent_obj)?;
            let name = zap::list_obj(&self.mos, p.child_dir_zapobj)?
                .into_iter()
                .find(|e| e.as_u64() == Some(obj))
                .map(|e| e.name_str())
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("DSL directory {obj}"),
                        "not in its parent's child map",
                    )
                })?;
            check_component(&name).map_err(|why| {
                Error::corrupt(
                    format!("DSL directory {obj}"),
                    format!("invalid name {name:?} in its parent's child map: {why}"),
                )
            })?;
            parts.push(name);
            obj = d.parent_obj;
        }
        Err(Error::corrupt(
            "DSL directory tree",
            "parent chain too long",
        ))
    }

    /// The full name of snapshot dataset `ds_obj` (`pool/fs@snap`).
    pub fn snapshot_name(&self, ds_obj: u64) -> Result<String> {
        let ds = self.dataset(ds_obj)?;
        let dir = self.dir(ds.dir_obj)?;
        let head = self.dataset(dir.head_dataset_obj)?;
        let snap = zap::list_obj(&self.mos, head.snapnames_zapobj)?
            .into_iter()
            .find(|e| e.as_u64() == Some(ds_obj))
            .map(|e| e.name_str())
            .ok_or_else(|| {
                Error::corrupt(format!("snapshot {ds_obj}"), "not in its snapshot map")
            })?;
        check_component(&snap).map_err(|why| {
            Error::corrupt(
                format!("snapshot {ds_obj}"),
                format!("invalid name {snap:?} in its snapshot map: {why}"),
            )
        })?;
        Ok(format!("{}@{snap}", self.dir_name(ds.dir_obj)?))
    }

    /// Snapshots of a head dataset, oldest first (by creation txg).
    pub fn snapshots(&self, head: &DatasetInfo) -> Result<Vec<DatasetInfo>> {
        if head.is_snapshot || head.ds.snapnames_zapobj == 0 {
            return Ok(Vec::new());
        }
        let mut v = Vec::new();
        for e in zap::list_obj(&self.mos, head.ds.snapnames_zapobj)? {
            let Some(obj) = e.as_u64() else { continue };
            // As in `child_dirs`: a name no command could type is skipped.
            let Some(snap) = std::str::from_utf8(&e.name)
                .ok()
                .filter(|n| check_component(n).is_ok())
            else {
                continue;
            };
            v.push(self.info(format!("{}@{snap}", head.name), obj, head.dir_obj, true)?);
        }
        v.sort_by_key(|s| s.ds.creation_txg);
        Ok(v)
    }

    /// The root dataset.
    pub fn root(&self) -> Result<DatasetInfo> {
        let dir = self.dir(self.root_dir_obj)?;
        self.info(
            self.pool.name.clone(),
            dir.head_dataset_obj,
            self.root_dir_obj,
            false,
        )
    }

    /// Every file system (and, if `snapshots`, every snapshot) in `zfs list -t all` order:
    /// a dataset, its snapshots, then its children by name.
    pub fn list(
        &self,
        start: &DatasetInfo,
        snapshots: bool,
        max_depth: Option<usize>,
    ) -> Result<Vec<DatasetInfo>> {
        let mut out = Vec::new();
        self.list_rec(start, snapshots, 0, max_depth, &mut out)?;
        Ok(out)
    }

    fn list_rec(
        &self,
        ds: &DatasetInfo,
        snapshots: bool,
        depth: usize,
        max_depth: Option<usize>,
        out: &mut Vec<DatasetInfo>,
    ) -> Result<()> {
        if depth > MAX_DEPTH || out.len() > MAX_DATASETS {
            return Err(Error::corrupt(
                "DSL directory tree",
                "too deep or too many datasets (loop?)",
            ));
        }
        out.push(ds.clone());
        if ds.is_snapshot {
            return Ok(());
        }
        if snapshots && max_depth.is_none_or(|m| depth < m) {
            out.extend(self.snapshots(ds)?);
        }
        if max_depth.is_some_and(|m| depth >= m) {
            return Ok(());
        }
        for (name, dir_obj) in self.child_dirs(&ds.dir)? {
            if let Some(child) = self.child_head(ds, &name, dir_obj)? {
                self.list_rec(&child, snapshots, depth + 1, max_depth, out)?;
            }
        }
        Ok(())
    }

    /// The head dataset of child directory `name` (object `dir_obj`) of
    /// `ds`, None for a directory without one.
    fn child_head(
        &self,
        ds: &DatasetInfo,
        name: &str,
        dir_obj: u64,
    ) -> Result<Option<DatasetInfo>> {
        let dir = self.dir(dir_obj)?;
        if dir.head_dataset_obj == 0 {
            return Ok(None);
        }
        self.info(
            format!("{}/{}", ds.name, name),
            dir.head_dataset_obj,
            dir_obj,
            false,
        )
        .map(Some)
    }

    /// Every dataset and snapshot in the order OpenZFS's
    /// `dmu_objset_find(…, DS_FIND_SNAPSHOTS | DS_FIND_CHILDREN)` visits
    /// them (and so `zdb -d` prints them): depth first, a directory's
    /// children before its snapshots and the snapshots before the head
    /// itself, children and snapshots in their ZAPs' hash order; names
    /// beginning with `$` are hidden.
    pub fn objset_find_order(&self) -> Result<Vec<DatasetInfo>> {
        let mut out = Vec::new();
        let root = self.root()?;
        self.find_rec(&root, 0, &mut out)?;
        Ok(out)
    }

    fn find_rec(&self, ds: &DatasetInfo, depth: usize, out: &mut Vec<DatasetInfo>) -> Result<()> {
        if depth > MAX_DEPTH || out.len() > MAX_DATASETS {
            return Err(Error::corrupt(
                "DSL directory tree",
                "too deep or too many datasets (loop?)",
            ));
        }
        if ds.dir.child_dir_zapobj != 0 {
            let dn = self.mos.dnode(ds.dir.child_dir_zapobj)?;
            for e in zap::list_hash_order(&self.mos, &dn)? {
                let name = e.name_str();
                let Some(dir_obj) = e.as_u64() else { continue };
                if name.starts_with('$') || check_component(&name).is_err() {
                    continue;
                }
                if let Some(child) = self.child_head(ds, &name, dir_obj)? {
                    self.find_rec(&child, depth + 1, out)?;
                }
            }
        }
        if ds.ds.snapnames_zapobj != 0 {
            let dn = self.mos.dnode(ds.ds.snapnames_zapobj)?;
            for e in zap::list_hash_order(&self.mos, &dn)? {
                let name = e.name_str();
                let Some(obj) = e.as_u64() else { continue };
                if check_component(&name).is_err() {
                    continue;
                }
                out.push(self.info(format!("{}@{}", ds.name, name), obj, ds.dir_obj, true)?);
            }
        }
        out.push(ds.clone());
        Ok(())
    }

    /// Find a dataset or snapshot by full name.
    pub fn lookup(&self, name: &str) -> Result<DatasetInfo> {
        let (fs, snap) = match name.split_once('@') {
            Some((f, s)) => (f, Some(s)),
            None => (name, None),
        };
        let mut parts = fs.split('/');
        let first = parts.next().unwrap_or("");
        if first != self.pool.name {
            return Err(Error::not_found(format!("dataset '{name}'")));
        }
        let mut cur = self.root()?;
        for p in parts {
            if p.is_empty() {
                return Err(Error::Invalid(format!("invalid dataset name '{name}'")));
            }
            let kids = self.child_dirs(&cur.dir)?;
            let Some((_, dir_obj)) = kids.into_iter().find(|(n, _)| n == p) else {
                return Err(Error::not_found(format!("dataset '{name}'")));
            };
            let dir = self.dir(dir_obj)?;
            cur = self.info(
                format!("{}/{}", cur.name, p),
                dir.head_dataset_obj,
                dir_obj,
                false,
            )?;
        }
        match snap {
            None => Ok(cur),
            Some(s) => self
                .snapshots(&cur)?
                .into_iter()
                .find(|d| d.name.rsplit_once('@').map(|x| x.1) == Some(s))
                .ok_or_else(|| Error::not_found(format!("snapshot '{name}'"))),
        }
    }

    /// Whether dataset `ds` is encrypted: its DSL directory has a crypto
    /// key object, or its objset pointer the crypt bit.
    pub fn is_encrypted(&self, ds: &DatasetInfo) -> Result<bool> {
        Ok(ds.ds.bp.uses_crypt() || self.crypto_key_obj(ds.dir_obj)?.is_some())
    }

    /// Open a dataset's objset.
    pub fn objset(&self, ds: &DatasetInfo) -> Result<Objset> {
        if ds.ds.bp.is_hole() {
            return Err(Error::corrupt(
                format!("dataset '{}'", ds.name),
                "has no objset",
            ));
        }
        // An encrypted dataset is read with its master key, which needs
        // its encryption root's key loaded (refused, naming it, if not).
        // Encrypted is what its DSL directory says (a crypto key object),
        // or the pointer's crypt bit: never the bit alone, which whoever
        // edits the MOS may clear to have the objset read unauthenticated.
        let key = if self.is_encrypted(ds)? {
            Some(self.dataset_key(ds)?)
        } else {
            None
        };
        Objset::open_keyed(self.pool.clone(), &ds.ds.bp, key)
            .map_err(|e| e.context(&format!("dataset '{}'", ds.name)))
    }

    /// The allocation class of a top-level vdev, None for the normal
    /// class: "logs" for a log device (`is_log`), else the bias OpenZFS
    /// keeps in the vdev's top-level ZAP
    /// (`org.zfsonlinux:allocation_bias`: "special" or "dedup").
    pub fn vdev_class(&self, top: &ozfs_vdev::Vdev) -> Option<&'static str> {
        if top.config.get_u64("is_log").unwrap_or(0) != 0 {
            return Some("logs");
        }
        let zap_obj = self.top_zap(top.id)?;
        let bias = zap::lookup_obj(&self.mos, zap_obj, "org.zfsonlinux:allocation_bias")
            .ok()
            .flatten()?
            .as_string()?;
        match bias.as_str() {
            "special" => Some("special"),
            "dedup" => Some("dedup"),
            _ => None,
        }
    }

    /// Block cloning's figures (`bcloneused`, `bclonesaved`): the sums of
    /// `bvp_usedspace` and `bvp_savedspace` over the per-vdev block
    /// reference tables (MOS directory entries `com.fudosecurity:brt:vdev:N`,
    /// each an object whose bonus is a `brt_vdev_phys_t`). Zeros for a
    /// pool that never cloned a block.
    pub fn bclone_space(&self) -> Result<(u64, u64)> {
        const PREFIX: &str = "com.fudosecurity:brt:vdev:";
        let (mut used, mut saved) = (0u64, 0u64);
        for e in zap::list_obj(&self.mos, 1)? {
            if !e.name_str().starts_with(PREFIX) {
                continue;
            }
            let Some(obj) = e.as_u64() else {
                continue;
            };
            let dn = self.mos.dnode(obj)?;
            let what = format!("block reference table {}", e.name_str());
            let word = |i: usize| ozfs_format::bytes::u64_at(&dn.phys.bonus, i * 8, dn.swap, &what);
            used = used.saturating_add(word(5)?);
            saved = saved.saturating_add(word(6)?);
        }
        Ok((used, saved))
    }

    /// The pool's dedup statistics (`ddt_get_dedup_stats`): the sums of the
    /// histograms `DDT-statistics` holds for every table object, and the
    /// space those objects take (`dedup_table_size`: their allocated
    /// blocks). Zeros for a pool without dedup tables. (Entries a
    /// fast-dedup journal still holds, which OpenZFS adds, are not read.)
    pub fn dedup_stats(&self) -> Result<(ozfs_spa::ddt::DdtStat, u64)> {
        let mut h = ozfs_spa::ddt::Histogram::default();
        let mut table_size = 0u64;
        for t in crate::ddt::report(self)? {
            for o in &t.objects {
                h.add(&o.histogram);
                table_size = table_size.saturating_add(o.dspace);
            }
        }
        Ok((h.total(), table_size))
    }

    /// The top-level ZAP of top-level vdev `id` (`com.delphix:vdev_zap_top`
    /// in the MOS copy of the config; labels do not carry it).
    pub fn top_zap(&self, id: u64) -> Option<u64> {
        self.mos_config()
            .ok()?
            .get_nvlist("vdev_tree")?
            .get_nvlist_array("children")?
            .iter()
            .find(|c| c.get_u64("id") == Some(id))?
            .get_u64("com.delphix:vdev_zap_top")
    }

    /// Pool space: SIZE from the metaslab geometry, ALLOC from the space maps, deflated space.
    pub fn space(&self) -> Result<SpaceInfo> {
        self.space_of(true)
    }

    /// [`space`](Self::space) without ALLOC (no space map is read): the
    /// sizes, which change only when vdevs do.
    pub fn dspace_only(&self) -> Result<SpaceInfo> {
        self.space_of(false)
    }

    fn space_of(&self, alloc: bool) -> Result<SpaceInfo> {
        let mut s = SpaceInfo::default();
        for top in &self.pool.root.children {
            s.tops.push((0, 0));
            // A removed device's space is gone from the pool (its blocks
            // live elsewhere, found through its mapping).
            if matches!(top.kind, VdevKind::Indirect { .. }) {
                continue;
            }
            let cfg = &top.config;
            let ms_shift = cfg.get_u64("metaslab_shift").unwrap_or(0);
            let ms_array = cfg.get_u64("metaslab_array").unwrap_or(0);
            if ms_shift == 0 || ms_shift > 40 {
                continue;
            }
            let ms_count = top.asize >> ms_shift;
            let vsize = match &top.kind {
                // Each metaslab of a dRAID vdev starts on a stripe boundary
                // and holds whole stripes only (OpenZFS trims it so).
                VdevKind::Draid { .. } => {
                    let g = Geometry::of(top);
                    (0..ms_count.min(1 << 24))
                        .map(|i| g.metaslab_range(top.ashift as u32, ms_shift as u32, i).1)
                        .sum()
                }
                _ => ms_count << ms_shift,
            };
            // A log device's space is its own class, outside the pool's
            // SIZE, ALLOC and deflated space (OpenZFS's
            // `spa_prop_get_config` and `spa_update_dspace` leave the log
            // class out); its own figures stay in `tops`.
            let log = top.config.get_u64("is_log").unwrap_or(0) != 0;
            if !log {
                s.size += vsize;
            }
            if let Some(t) = s.tops.last_mut() {
                t.0 = vsize;
            }
            let ratio = match top.kind {
                VdevKind::Raidz { nparity } if self.deflate => {
                    // The original width: an expansion does not change the
                    // ratio (OpenZFS sizes with `vd_original_width`).
                    let a = raidz_asize(131072, top.ashift as u32, top.raidz_width(0), nparity);
                    if a == 0 {
                        512
                    } else {
                        131072 / (a >> 9)
                    }
                }
                VdevKind::Draid { ref layout } if self.deflate => {
                    131072 / (layout.asize(131072) >> 9).max(1)
                }
                _ => 512,
            };
            let deflated = (vsize >> 9).saturating_mul(ratio);
            if !log {
                s.dspace = s.dspace.saturating_add(deflated);
            }
            // Allocation classes: log devices and special or dedup vdevs
            // are outside the normal class.
            let normal = self.vdev_class(top).is_none();
            if normal {
                s.normal_dspace = s.normal_dspace.saturating_add(deflated);
                if ms_count > EMBEDDED_SLOG_MIN_MS {
                    let one = ((1u64 << ms_shift) >> 9).saturating_mul(ratio);
                    s.normal_dspace -= one.min(s.normal_dspace);
                    s.embedded_log_dspace = s.embedded_log_dspace.saturating_add(one);
                }
            }
            if alloc && ms_array != 0 {
                if let Ok(dn) = self.mos.dnode(ms_array) {
                    let n = ms_count.min(1 << 20) as usize;
                    if let Ok(arr) = self.mos.read(&dn, 0, n * 8) {
                        for i in 0..n {
                            let sm =
                                ozfs_format::bytes::u64_at(&arr, i * 8, dn.swap, "metaslab array")?;
                            if sm == 0 {
                                continue;
                            }
                            let smdn = self.mos.dnode(sm)?;
                            let alloc = ozfs_format::bytes::u64_at(
                                &smdn.phys.bonus,
                                16,
                                smdn.swap,
                                "space map header",
                            )?;
                            if !log {
                                s.alloc = s.alloc.wrapping_add(alloc);
                            }
                            if let Some(t) = s.tops.last_mut() {
                                t.1 = t.1.wrapping_add(alloc);
                            }
                        }
                    }
                }
            }
        }
        Ok(s)
    }
}
