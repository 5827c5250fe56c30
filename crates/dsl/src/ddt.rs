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
}

impl MosSnapshot {
    fn set(&self, bp: BlkPtr, phys: ObjsetPhys) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (bp, phys);
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
        let dn = os.dnode(obj)?;
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
    /// Write what this txg changed in the dedup tables into its MOS (see
    /// the module comment). Records left without references are freed here.
    pub fn flush_ddt(&mut self) -> Result<()> {
        let pool = self.pool.clone();
        let mut g = pool.ddt.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ddt) = g.as_mut() else {
            return Ok(());
        };
        if !ddt.dirty() {
            return Ok(());
        }
        let txg = self.txg;
        ddt.free_unreferenced(&mut self.alloc, txg)?;
        let deflate = ddt.deflate;
        let new_flat = ddt.new_flat;
        let dsize = |d: &Dva| dva_dsize(&pool, deflate, d);
        let mut stats = lookup_obj(self, 1, DDT_STATS)?;
        for t in ddt.tables.values_mut() {
            if t.live.is_empty() {
                continue;
            }
            if t.objects.iter().all(|&o| o == 0) && t.dir == 0 {
                // A new table: its form follows the pool's features.
                t.flat = new_flat;
            }
            let live = std::mem::take(&mut t.live);
            for (key, l) in &live {
                if let (Some(oc), Some(orig)) = (l.orig_class, &l.orig) {
                    t.histograms[oc].add_entry(&DdtStat::of_entry(key, orig, &dsize), true);
                }
                let refs = l.entry.refcnt();
                let nclass = (refs > 0).then(|| l.entry.class());
                if let Some(oc) = l.orig_class {
                    if Some(oc) != nclass {
                        zap_tx::remove(&mut self.mos, t.objects[oc], &key.zap_name())?;
                    }
                }
                let Some(nc) = nclass else {
                    continue;
                };
                t.histograms[nc].add_entry(&DdtStat::of_entry(key, &l.entry, &dsize), false);
                if t.objects[nc] == 0 {
                    if stats == 0 {
                        stats = self.mos.create_zap(OT_DDT_STATS, 0, Vec::new(), 0, 1)?;
                        zap_tx::add(&mut self.mos, 1, DDT_STATS.as_bytes(), 8, &[stats])?;
                    }
                    self.create_ddt_object(t, nc)?;
                }
                let value: Vec<u64> = l.entry.encode().into_iter().map(u64::from).collect();
                zap_tx::update_bytes(&mut self.mos, t.objects[nc], &key.zap_name(), 1, &value)?;
            }
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

/// The pool's dedup statistics as the writer holds them (every table).
pub fn totals(pool: &Pool) -> Option<DdtStat> {
    pool.ddt
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(Ddt::total)
}
