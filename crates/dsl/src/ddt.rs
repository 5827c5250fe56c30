//! Dedup tables in the MOS: loading them for a writer, and writing what a
//! txg changed (OpenZFS's `ddt_load` and `ddt_sync`, in the legacy and
//! fast-dedup forms; `ozfs_spa::ddt` has the theory and the entry format).
//!
//! At open, each checksum function's table is found — a fast-dedup
//! directory `DDT-<checksum>` in the MOS object directory (its `version`
//! must be 1, its `flags` known), else legacy class objects
//! `DDT-<checksum>-zap-<class>` named there directly — with each class
//! object's histogram from `DDT-statistics`. Entries stay on disk: a dedup
//! write or free looks its key up in the last committed MOS (through the
//! block cache), and only the entries a txg touched are held.
//!
//! At every sync, after the file systems' blocks are written
//! ([`PoolWriter::flush_ddt`]): records left with no reference are freed;
//! each touched entry leaves its old class object (and histogram) and, if
//! it still has references, goes into the class its count names (`unique`
//! for one, `duplicate` for more), the object made if needed; histograms
//! are rewritten in `DDT-statistics`. A table whose objects are all empty
//! is destroyed (a fast-dedup one with its directory and journals, the
//! feature's count dropping), as OpenZFS destroys it.
//!
//! New tables are fast-dedup ones where `com.klarasystems:fast_dedup` is
//! enabled (flat entries; a directory with `version` 1, `flags` FLAT|LOG
//! and two empty journals, which ozfs never appends to: it writes entries
//! straight into the class objects each txg, which OpenZFS reads as a
//! flushed table), legacy ones otherwise (zfs-fuse's pool-v23 form).
//!
//! Invariants: every object number, `version`, `flags` and histogram read
//! is checked before use; a fast-dedup table whose journal holds entries
//! (OpenZFS flushes them within a few txgs) is refused for writing, naming
//! it, rather than written around; a failure while flushing stops the
//! writer (the table in memory has already changed).

use crate::sync::PoolWriter;
use ozfs_dmu::objset::Objset;
use ozfs_dmu::zap_tx;
use ozfs_format::blkptr::Dva;
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::{BlkPtr, Error, Result};
use ozfs_spa::ddt::{
    checksum_name, object_name, Ddt, DdtBackend, DdtKey, DdtStat, DdtTable, Histogram,
    DDT_FLAG_FLAT, DDT_FLAG_LOG, DEDUP_CHECKSUMS, FAST_DEDUP,
};
use ozfs_spa::Pool;
use std::sync::{Arc, Mutex, Weak};

/// `DMU_POOL_DDT_STATS`.
pub const DDT_STATS: &str = "DDT-statistics";
/// `DMU_OT_DDT_ZAP`, `DMU_OT_DDT_STATS`.
pub const OT_DDT_ZAP: u8 = 42;
pub const OT_DDT_STATS: u8 = 43;
/// `DMU_OTN_UINT64_METADATA` (the journals).
pub const OT_UINT64_METADATA: u8 = 0xc3;
/// Table objects' block shift (`ddt_zap_default_bs`, 32 KiB).
const DDT_ZAP_SHIFT: u32 = 15;
/// Fast-dedup journal block size and header length.
const LOG_BLOCK: u64 = 128 * 1024;
const LOG_HEADER_LEN: usize = 64;
/// Pool version from which dedup tables are kept (`SPA_VERSION_DEDUP`).
pub const SPA_VERSION_DEDUP: u64 = 21;

/// The MOS as last committed, for lookups of entries a txg has not
/// touched yet. Holds the pool weakly (the pool holds the table).
pub struct MosSnapshot {
    pool: Weak<Pool>,
    state: Mutex<(BlkPtr, ObjsetPhys)>,
    /// The table objects' dnodes in that MOS (read once per commit).
    dnodes: Mutex<std::collections::HashMap<u64, ozfs_dmu::Dnode>>,
}

impl MosSnapshot {
    fn set(&self, bp: BlkPtr, phys: ObjsetPhys) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (bp, phys);
        self.dnodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

struct Backend(Arc<MosSnapshot>);

impl DdtBackend for Backend {
    fn lookup(&self, obj: u64, key: &DdtKey) -> Result<Option<Vec<u8>>> {
        let pool = self
            .0
            .pool
            .upgrade()
            .ok_or_else(|| Error::Invalid("dedup table lookup after the pool closed".into()))?;
        let (bp, phys) = self
            .0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let os = Objset::from_parts(pool, bp, phys);
        let cached = self
            .0
            .dnodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&obj)
            .cloned();
        let dn = match cached {
            Some(d) => d,
            None => {
                let d = os.dnode(obj)?;
                self.0
                    .dnodes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(obj, d.clone());
                d
            }
        };
        let Some(e) = ozfs_dmu::zap::lookup_bytes(&os, &dn, &key.zap_name())? else {
            return Ok(None);
        };
        if e.int_len != 1 {
            return Err(Error::corrupt(
                format!("dedup table object {obj}"),
                format!("entry value of {}-byte integers", e.int_len),
            ));
        }
        Ok(Some(e.value.iter().map(|&b| b as u8).collect()))
    }
}

fn lookup_obj(w: &PoolWriter, zap: u64, name: &str) -> Result<u64> {
    match zap_tx::lookup(&w.mos, zap, name.as_bytes())? {
        None => Ok(0),
        Some(e) => match e.as_u64() {
            Some(v) if v != 0 => Ok(v),
            _ => Err(Error::corrupt(
                format!("MOS ZAP {zap} entry '{name}'"),
                "not an object number",
            )),
        },
    }
}

/// Load the pool's dedup tables into `w.pool` (replacing what was there),
/// so that dedup writes and frees go through them.
pub fn load(w: &PoolWriter) -> Result<()> {
    let mut tables = std::collections::BTreeMap::new();
    if w.version >= SPA_VERSION_DEDUP {
        let stats = lookup_obj(w, 1, DDT_STATS)?;
        for c in DEDUP_CHECKSUMS {
            let cname = checksum_name(c);
            let what = format!("dedup table DDT-{cname}");
            let dir = lookup_obj(w, 1, &format!("DDT-{cname}"))?;
            let mut t = DdtTable {
                checksum: c,
                ..Default::default()
            };
            let holder = if dir != 0 {
                let version =
                    zap_tx::lookup_u64(&w.mos, dir, "version").map_err(|e| e.context(&what))?;
                let flags =
                    zap_tx::lookup_u64(&w.mos, dir, "flags").map_err(|e| e.context(&what))?;
                if version != 1 || flags & !(DDT_FLAG_FLAT | DDT_FLAG_LOG) != 0 {
                    return Err(Error::unsupported(
                        &what,
                        format!("version {version}, flags {flags:#x} (ozfs knows version 1)"),
                    ));
                }
                for n in 0..2 {
                    let log = lookup_obj(w, dir, &format!("DDT-log-{cname}-{n}"))?;
                    if log == 0 {
                        continue;
                    }
                    let dn = w.mos.dnode(log)?;
                    let len = ozfs_format::bytes::u64_at(&dn.phys.bonus, 8, dn.swap, &what)?;
                    if len != 0 {
                        return Err(Error::unsupported(
                            &what,
                            format!(
                                "writing while its journal DDT-log-{cname}-{n} holds {len} \
                                 bytes of entries (OpenZFS flushes it within a few txgs of \
                                 activity); import the pool read-only"
                            ),
                        ));
                    }
                }
                t.flat = flags & DDT_FLAG_FLAT != 0;
                t.dir = dir;
                t.flags = flags;
                dir
            } else {
                1
            };
            for (class, slot) in t.objects.iter_mut().enumerate() {
                *slot = lookup_obj(w, holder, &object_name(c, class))?;
            }
            if dir == 0 && t.objects.iter().all(|&o| o == 0) {
                continue;
            }
            for class in 0..3 {
                if t.objects[class] == 0 || stats == 0 {
                    continue;
                }
                let name = object_name(c, class);
                if let Some(e) = zap_tx::lookup(&w.mos, stats, name.as_bytes())? {
                    t.histograms[class] = Histogram::from_words(&e.value)
                        .map_err(|e| e.context(&format!("{DDT_STATS} '{name}'")))?;
                }
            }
            tables.insert(c, t);
        }
    }
    let snap = Arc::new(MosSnapshot {
        pool: Arc::downgrade(&w.pool),
        state: Mutex::new((w.mos.os.bp, w.mos.os.phys.clone())),
        dnodes: Default::default(),
    });
    let new_flat = w.version >= ozfs_spa::pool::SPA_VERSION_FEATURES
        && crate::features::refcount(w, FAST_DEDUP)?.is_some();
    let ddt = Ddt {
        tables,
        new_flat,
        deflate: zap_tx::lookup(&w.mos, 1, b"deflate")?
            .and_then(|e| e.as_u64())
            .is_some_and(|v| v != 0),
        backend: Box::new(Backend(snap.clone())),
    };
    *w.pool.ddt.lock().unwrap_or_else(|e| e.into_inner()) = Some(ddt);
    *w.ddt_snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some(snap);
    Ok(())
}

/// After a commit: lookups read the MOS just written.
pub(crate) fn committed(w: &PoolWriter) {
    if let Some(s) = w
        .ddt_snapshot
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        s.set(w.mos.os.bp, w.mos.os.phys.clone());
    }
}

/// The charged size of a DVA (`dva_get_dsize_sync`).
fn dva_dsize(pool: &Pool, deflate: bool, d: &Dva) -> u64 {
    if deflate {
        (d.asize >> 9).saturating_mul(pool.deflate_ratio(d.vdev))
    } else {
        d.asize
    }
}

impl PoolWriter {
    /// Whether the dedup tables hold changes not yet written.
    pub(crate) fn ddt_dirty(&self) -> bool {
        self.pool
            .ddt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(Ddt::dirty)
    }

    /// Write what this txg changed in the dedup tables into its MOS (see
    /// the module comment). Records left without references are freed here.
    pub fn flush_ddt(&mut self) -> Result<()> {
        let pool = self.pool.clone();
        // Records left without references go first, through the pool's
        // own free (gang blocks, removed vdevs), outside the table's lock.
        let unreferenced = {
            let mut g = pool.ddt.lock().unwrap_or_else(|e| e.into_inner());
            match g.as_mut() {
                Some(ddt) if ddt.dirty() => ddt.take_unreferenced(),
                _ => return Ok(()),
            }
        };
        for bp in &unreferenced {
            pool.free_block(&mut self.alloc, bp, self.txg)?;
        }
        let mut g = pool.ddt.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ddt) = g.as_mut() else {
            return Ok(());
        };
        let deflate = ddt.deflate;
        let dsize = |d: &Dva| dva_dsize(&pool, deflate, d);
        let mut stats = lookup_obj(self, 1, DDT_STATS)?;
        for t in ddt.tables.values_mut() {
            if t.live.is_empty() {
                continue;
            }
            let live = std::mem::take(&mut t.live);
            // Each entry's class before and after, and the histograms.
            let nclass = |l: &ozfs_spa::ddt::Live| (l.entry.refcnt() > 0).then(|| l.entry.class());
            let mut leaving = [false; 3];
            let mut coming = [false; 3];
            for (key, l) in &live {
                if let (Some(oc), Some(orig)) = (l.orig_class, &l.orig) {
                    t.histograms[oc].add_entry(&DdtStat::of_entry(key, orig, &dsize), true);
                }
                let nc = nclass(l);
                if let Some(oc) = l.orig_class.filter(|&oc| Some(oc) != nc) {
                    leaving[oc] = true;
                }
                let Some(nc) = nc else {
                    continue;
                };
                if l.entry.flat != t.flat {
                    return Err(Error::Invalid(format!(
                        "dedup entry {:016x} of the wrong form for DDT-{}",
                        key.0[0],
                        checksum_name(t.checksum)
                    )));
                }
                t.histograms[nc].add_entry(&DdtStat::of_entry(key, &l.entry, &dsize), false);
                coming[nc] = true;
            }
            // Each class object edited once — only the leaves the touched
            // keys fall in are read — entries leaving it, then entries
            // (re)written in it (values encoded one at a time).
            for class in (0..3).filter(|&c| leaving[c]) {
                zap_tx::edit_sparse(&mut self.mos, t.objects[class], |z| {
                    for (key, l) in &live {
                        if l.orig_class == Some(class) && nclass(l) != Some(class) {
                            z.remove(&key.zap_name())?;
                        }
                    }
                    Ok(())
                })?;
            }
            for class in (0..3).filter(|&c| coming[c]) {
                if t.objects[class] == 0 {
                    if stats == 0 {
                        stats = self.mos.create_zap(OT_DDT_STATS, 0, Vec::new(), 0, 1)?;
                        zap_tx::add(&mut self.mos, 1, DDT_STATS.as_bytes(), 8, &[stats])?;
                    }
                    self.create_ddt_object(t, class)?;
                }
                zap_tx::edit_sparse(&mut self.mos, t.objects[class], |z| {
                    let mut value = Vec::with_capacity(ozfs_spa::ddt::TRAD_PHYS_SIZE + 1);
                    for (key, l) in &live {
                        if nclass(l) == Some(class) {
                            value.clear();
                            value.extend(l.entry.encode().into_iter().map(u64::from));
                            z.update(&key.zap_name(), 1, &value)?;
                        }
                    }
                    Ok(())
                })?;
            }
            drop(live);
            // Objects of a table with no entry left go, then the table.
            let mut count = 0usize;
            for &o in t.objects.iter().filter(|&&o| o != 0) {
                count += zap_tx::count(&self.mos, o)?;
            }
            let holder = if t.dir != 0 { t.dir } else { 1 };
            for class in 0..3 {
                let o = t.objects[class];
                if o == 0 {
                    continue;
                }
                let name = object_name(t.checksum, class);
                if count == 0 {
                    zap_tx::remove(&mut self.mos, holder, name.as_bytes())?;
                    if stats != 0 {
                        zap_tx::remove(&mut self.mos, stats, name.as_bytes())?;
                    }
                    self.mos.free_object(o)?;
                    t.objects[class] = 0;
                    t.histograms[class] = Histogram::default();
                } else if stats != 0 {
                    zap_tx::update(
                        &mut self.mos,
                        stats,
                        &name,
                        8,
                        &t.histograms[class].to_words(),
                    )?;
                }
            }
            if count == 0 && t.dir != 0 {
                self.destroy_ddt_dir(t)?;
            }
        }
        Ok(())
    }

    /// Make class object `class` of table `t` (and, for a new fast-dedup
    /// table, its directory and journals), named where OpenZFS names it,
    /// with an empty histogram in `DDT-statistics`.
    fn create_ddt_object(&mut self, t: &mut DdtTable, class: usize) -> Result<()> {
        let cname = checksum_name(t.checksum);
        if t.flat && t.dir == 0 {
            let dir = self.mos.create_zap(
                ozfs_format::types::ot::ZAP_METADATA_NEW,
                0,
                Vec::new(),
                0,
                1,
            )?;
            zap_tx::add(&mut self.mos, dir, b"version", 8, &[1])?;
            let flags = DDT_FLAG_FLAT | DDT_FLAG_LOG;
            zap_tx::add(&mut self.mos, dir, b"flags", 8, &[flags])?;
            // Two empty journals: 0 active, 1 flushing (`ddt_log_alloc`).
            for (n, info) in [(0u64, 1u64), (1, 1 | 1 << 8)] {
                let mut hdr = vec![0u8; LOG_HEADER_LEN];
                hdr[0..8].copy_from_slice(&info.to_le_bytes());
                hdr[16..24].copy_from_slice(&self.txg.to_le_bytes());
                let log = self.mos.create_object(
                    OT_UINT64_METADATA,
                    LOG_BLOCK,
                    OT_UINT64_METADATA,
                    hdr,
                    1,
                )?;
                let name = format!("DDT-log-{cname}-{n}");
                zap_tx::add(&mut self.mos, dir, name.as_bytes(), 8, &[log])?;
            }
            zap_tx::add(
                &mut self.mos,
                1,
                format!("DDT-{cname}").as_bytes(),
                8,
                &[dir],
            )?;
            crate::features::incr(self, FAST_DEDUP, 1)?;
            t.dir = dir;
            t.flags = flags;
        }
        let flags = ozfs_format::zap::ZAP_FLAG_HASH64
            | ozfs_format::zap::ZAP_FLAG_UINT64_KEY
            | if t.checksum == ozfs_format::types::cksum::EDONR {
                0
            } else {
                ozfs_format::zap::ZAP_FLAG_PRE_HASHED_KEY
            };
        let mut z = ozfs_format::zap_write::ZapObject::new_fat_with_shift(
            ozfs_dmu::tx::random_u64() | 1,
            0,
            flags,
            DDT_ZAP_SHIFT,
        );
        let obj = self
            .mos
            .create_object(OT_DDT_ZAP, 1 << DDT_ZAP_SHIFT, 0, Vec::new(), 1)?;
        zap_tx::store(&mut self.mos, obj, &mut z)?;
        let holder = if t.dir != 0 { t.dir } else { 1 };
        let name = object_name(t.checksum, class);
        zap_tx::add(&mut self.mos, holder, name.as_bytes(), 8, &[obj])?;
        t.objects[class] = obj;
        Ok(())
    }

    /// Destroy an emptied fast-dedup table's directory and journals.
    fn destroy_ddt_dir(&mut self, t: &mut DdtTable) -> Result<()> {
        let cname = checksum_name(t.checksum);
        for n in 0..2 {
            let log = lookup_obj(self, t.dir, &format!("DDT-log-{cname}-{n}"))?;
            if log != 0 {
                self.mos.free_object(log)?;
            }
        }
        zap_tx::remove(&mut self.mos, 1, format!("DDT-{cname}").as_bytes())?;
        self.mos.free_object(t.dir)?;
        crate::features::incr(self, FAST_DEDUP, -1)?;
        t.dir = 0;
        t.flags = 0;
        Ok(())
    }
}

/// One class object of a table, as `zdb -D` shows it.
#[derive(Debug, Clone)]
pub struct ObjectReport {
    pub class: usize,
    pub object: u64,
    pub entries: u64,
    /// Bytes allocated (`doi_physical_blocks_512 << 9`).
    pub dspace: u64,
    /// Blocks × block size (`doi_fill_count · doi_data_block_size`).
    pub mspace: u64,
    pub histogram: Histogram,
}

/// A fast-dedup journal, as `zdb -D` shows it.
#[derive(Debug, Clone)]
pub struct LogReport {
    pub n: u64,
    pub object: u64,
    pub flags: u64,
    pub length: u64,
    pub first_txg: u64,
    /// Distinct keys recorded (0 for an empty journal).
    pub entries: u64,
}

/// One checksum function's table.
#[derive(Debug, Clone)]
pub struct TableReport {
    pub checksum: u8,
    /// 0 legacy, 1 fast dedup.
    pub version: u64,
    pub flags: u64,
    /// The directory object (1, the MOS directory, for legacy tables).
    pub rootobj: u64,
    pub objects: Vec<ObjectReport>,
    pub logs: Vec<LogReport>,
}

/// The pool's dedup tables as OpenZFS's `zdb -D` reads them, from the
/// committed MOS; every value checked before it is used.
pub fn report(dsl: &crate::DslPool) -> Result<Vec<TableReport>> {
    use ozfs_dmu::zap;
    let mos = &dsl.mos;
    let lookup = |zap_obj: u64, name: &str| -> Result<u64> {
        match zap::lookup_obj(mos, zap_obj, name)? {
            None => Ok(0),
            Some(e) => e.as_u64().filter(|&v| v != 0).ok_or_else(|| {
                Error::corrupt(
                    format!("MOS ZAP {zap_obj} entry '{name}'"),
                    "not an object number",
                )
            }),
        }
    };
    let stats = lookup(1, DDT_STATS)?;
    let mut out = Vec::new();
    for c in DEDUP_CHECKSUMS {
        let cname = checksum_name(c);
        let dir = lookup(1, &format!("DDT-{cname}"))?;
        let (version, flags, holder) = if dir != 0 {
            let v = zap::lookup_obj(mos, dir, "version")?
                .and_then(|e| e.as_u64())
                .unwrap_or(u64::MAX);
            let f = zap::lookup_obj(mos, dir, "flags")?
                .and_then(|e| e.as_u64())
                .unwrap_or(0);
            (v, f, dir)
        } else {
            (0, 0, 1)
        };
        let mut t = TableReport {
            checksum: c,
            version,
            flags,
            rootobj: holder,
            objects: Vec::new(),
            logs: Vec::new(),
        };
        for class in 0..3 {
            let name = object_name(c, class);
            let obj = lookup(holder, &name)?;
            if obj == 0 {
                continue;
            }
            let dn = mos.dnode(obj)?;
            let b0 = mos.read_block(&dn, 0)?.ok_or_else(|| {
                Error::corrupt(format!("{name} (object {obj})"), "block 0 is a hole")
            })?;
            let entries = match ozfs_format::zap::parse_header(&b0, dn.swap)? {
                ozfs_format::zap::ZapHeader::Fat(h) => h.num_entries,
                ozfs_format::zap::ZapHeader::Micro { .. } => zap::list(mos, &dn)?.len() as u64,
            };
            let fill: u64 = dn
                .phys
                .blkptr
                .iter()
                .filter(|b| !b.is_hole())
                .map(|b| b.fill())
                .fold(0, u64::saturating_add);
            let histogram = match stats {
                0 => Histogram::default(),
                s => match zap::lookup_obj(mos, s, &name)? {
                    Some(e) => Histogram::from_words(&e.value)
                        .map_err(|e| e.context(&format!("{DDT_STATS} '{name}'")))?,
                    None => Histogram::default(),
                },
            };
            t.objects.push(ObjectReport {
                class,
                object: obj,
                entries,
                dspace: dn.phys.used_bytes(),
                mspace: fill.saturating_mul(dn.phys.datablksz()),
                histogram,
            });
        }
        if dir != 0 && flags & DDT_FLAG_LOG != 0 {
            for n in 0..2 {
                let obj = lookup(dir, &format!("DDT-log-{cname}-{n}"))?;
                if obj == 0 {
                    continue;
                }
                let dn = mos.dnode(obj)?;
                let what = format!("DDT-log-{cname}-{n}");
                let word =
                    |i: usize| ozfs_format::bytes::u64_at(&dn.phys.bonus, i * 8, dn.swap, &what);
                let info = word(0)?;
                let length = word(1)?;
                let entries = if length == 0 {
                    0
                } else {
                    log_keys(mos, &dn, length, flags & DDT_FLAG_FLAT != 0)?
                };
                t.logs.push(LogReport {
                    n,
                    object: obj,
                    flags: (info >> 8) & 0xff,
                    length,
                    first_txg: word(2)?,
                    entries,
                });
            }
        }
        if dir != 0 || !t.objects.is_empty() {
            out.push(t);
        }
    }
    Ok(out)
}

/// Distinct keys in a journal's records (`ddt_log_record_t`: an info word
/// — type, record length — the key and the entry), read block by block;
/// a record past its block or of an unknown type is damage.
fn log_keys(mos: &Objset, dn: &ozfs_dmu::Dnode, length: u64, flat: bool) -> Result<u64> {
    let reclen = 8 + 40 + if flat { 72 } else { 256 };
    let mut keys = std::collections::BTreeSet::new();
    // Bounded by what the object holds, whatever the header says.
    let nblocks = length
        .div_ceil(LOG_BLOCK)
        .min(dn.phys.maxblkid.saturating_add(1));
    for b in 0..nblocks {
        let Some(block) = mos.read_block(dn, b)? else {
            continue;
        };
        let mut at = 0usize;
        while at + 8 <= block.len() {
            let raw = u64::from_le_bytes(block[at..at + 8].try_into().unwrap_or_default());
            let info = if dn.swap { raw.swap_bytes() } else { raw };
            let ty = info & 0xff;
            if ty == 0 {
                break;
            }
            let len = ((info >> 8) & 0xffff) as usize;
            if ty != 1 || len != reclen || at + len > block.len() {
                return Err(Error::corrupt(
                    format!("dedup journal object {}", dn.object),
                    format!("record at {at} of block {b}: type {ty}, length {len}"),
                ));
            }
            keys.insert(block[at + 8..at + 48].to_vec());
            at += len;
        }
    }
    Ok(keys.len() as u64)
}

/// What dedup would do for a pool (`zdb -S`): every level-0 data block
/// (not a hole, not embedded, checksummed) of the MOS and each dataset
/// (each block counted in the dataset where it was born), keyed by its
/// checksum, sizes and compression as a dedup table keys it; the
/// histogram of those keys' reference counts.
pub fn simulate(pool: &Arc<Pool>) -> Result<Histogram> {
    use ozfs_format::types::{cksum, object_type_is_metadata};
    let mos = Objset::mos(pool.clone());
    crate::pool::load_checksum_salt(pool, &mos)?;
    let deflate = ozfs_dmu::zap::lookup_obj(&mos, 1, "deflate")?
        .and_then(|e| e.as_u64())
        .is_some_and(|v| v != 0);
    let mut keys: std::collections::HashMap<DdtKey, DdtStat> = std::collections::HashMap::new();
    let mut count = |bp: &BlkPtr| -> Result<()> {
        if bp.is_hole()
            || bp.is_embedded()
            || bp.level() > 0
            || bp.checksum() == cksum::OFF
            || object_type_is_metadata(bp.object_type())
        {
            return Ok(());
        }
        let dsize: u64 = bp
            .dvas()
            .iter()
            .filter(|d| !d.is_empty())
            .map(|d| dva_dsize(pool, deflate, d))
            .sum();
        let s = keys.entry(DdtKey::of_bp(bp)).or_default();
        s.ref_blocks += 1;
        s.ref_lsize += bp.lsize();
        s.ref_psize += bp.psize();
        s.ref_dsize += dsize;
        Ok(())
    };
    for bp in mos.bps_born_after(0)? {
        count(&bp)?;
    }
    for (obj, ds) in crate::verify::dsl_datasets(&mos)? {
        crate::space::walk_objset(pool, &ds.bp, ds.prev_snap_txg, &mut count)
            .map_err(|e| e.context(&format!("dataset object {obj}")))?;
    }
    let mut h = Histogram::default();
    for s in keys.values() {
        let n = s.ref_blocks.max(1);
        let st = DdtStat {
            blocks: 1,
            lsize: s.ref_lsize / n,
            psize: s.ref_psize / n,
            dsize: s.ref_dsize / n,
            ..*s
        };
        h.add_entry(&st, false);
    }
    Ok(h)
}
