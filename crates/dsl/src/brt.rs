//! Block reference tables on disk: loading them for a writer and writing
//! the changes its frees made (the theory is in [`ozfs_spa::brt`]).
//!
//! On disk (OpenZFS's `brt.c`): a MOS directory entry
//! `com.fudosecurity:brt:vdev:<id>` per top-level vdev with cloned blocks
//! names an object whose data is the array of 16-bit per-range entry
//! counters (in the byte order `bvp_byteorder` names: 0 little, 1 big)
//! and whose bonus is `brt_vdev_phys_t` — entries ZAP, counter count,
//! byte order, entry count, range size, used space, saved space. The
//! entries ZAP has 64-bit keys (the offset of the block's first DVA) and
//! as value the references beyond the first, a 64-bit count stored as its
//! 8 bytes in the writer's memory order (`zap_update_uint64` with 1-byte
//! integers). `block_cloning` counts the vdevs with a table.
//!
//! Invariants: a table is loaded whole before the writer's first free and
//! written back in the txg of the frees that changed it; a table whose
//! entries are all gone is destroyed (both objects, the directory entry,
//! one count of the feature), as `brt_vdev_destroy` does.

use crate::sync::PoolWriter;
use ozfs_dmu::zap_tx;
use ozfs_format::bytes::{u64_at, HOST_LITTLE_ENDIAN};
use ozfs_format::{Error, Result};
use ozfs_spa::brt::{Brt, BrtVdev, BRT_RANGESIZE};

/// The MOS directory entry prefix naming a vdev's table.
pub const VDEV_PREFIX: &str = "com.fudosecurity:brt:vdev:";
/// The feature the tables are counted by.
pub const BLOCK_CLONING: &str = "com.fudosecurity:block_cloning";
/// Largest counter array ozfs loads (a 16 EiB vdev in 16 MiB ranges
/// would need 2^40 counters; a real one of 1 PiB needs 2^26).
const MAX_RANGES: u64 = 1 << 28;
/// Largest entry count ozfs loads into memory.
const MAX_ENTRIES: u64 = 64 << 20;

/// Load every table of the writer's pool into the pool (replacing what
/// was there), so that frees consult them.
pub fn load(w: &PoolWriter) -> Result<()> {
    let mut brt = Brt {
        rangesize: BRT_RANGESIZE,
        deflate: w.dsl().deflate,
        vdevs: Default::default(),
    };
    for e in zap_tx::list(&w.mos, 1)? {
        let name = e.name_str();
        let Some(id) = name.strip_prefix(VDEV_PREFIX) else {
            continue;
        };
        let what = format!("block reference table '{name}'");
        let id: u64 = id
            .parse()
            .map_err(|_| Error::corrupt(&what, "the vdev id is not a number"))?;
        let obj = e
            .as_u64()
            .ok_or_else(|| Error::corrupt(&what, "not one object number"))?;
        let dn = w.mos.dnode(obj)?;
        let word = |i: usize| u64_at(&dn.phys.bonus, i * 8, dn.swap, &what);
        let (entries_obj, size, order, total) = (word(0)?, word(1)?, word(2)?, word(3)?);
        let (rangesize, used, saved) = (word(4)?, word(5)?, word(6)?);
        if rangesize == 0 || order > 1 || size > MAX_RANGES || total > MAX_ENTRIES {
            return Err(Error::corrupt(
                &what,
                format!(
                    "range size {rangesize}, byte order {order}, {size} ranges, {total} entries"
                ),
            ));
        }
        // As many counters as the vdev has ranges (OpenZFS's
        // `brt_vdev_realloc`), never more.
        let vdev_ranges = w
            .pool
            .root
            .children
            .get(id as usize)
            .map(|t| t.asize.saturating_sub(1) / rangesize + 1)
            .ok_or_else(|| Error::corrupt(&what, format!("no top-level vdev {id}")))?;
        let stored = dn
            .phys
            .maxblkid
            .saturating_add(1)
            .saturating_mul(dn.phys.datablksz());
        if size > vdev_ranges || size * 2 > stored {
            return Err(Error::corrupt(
                &what,
                format!("{size} range counters for a vdev of {vdev_ranges} ranges"),
            ));
        }
        brt.rangesize = rangesize;
        let swapped = (order == 0) != HOST_LITTLE_ENDIAN;
        let bytes = w.mos.read(obj, 0, (size * 2) as usize)?;
        let entcount: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| {
                let v = u16::from_ne_bytes([c[0], c[1]]);
                if swapped {
                    v.swap_bytes()
                } else {
                    v
                }
            })
            .collect();
        let mut entries = std::collections::HashMap::new();
        for en in zap_tx::list(&w.mos, entries_obj)? {
            let key: [u8; 8] = en.name.as_slice().try_into().map_err(|_| {
                Error::corrupt(&what, format!("an entry key of {} bytes", en.name.len()))
            })?;
            // The count is stored as its 8 bytes in the writer's memory
            // order (`zap_update_uint64` with 1-byte integers).
            let count = match (en.int_len, en.value.len()) {
                (1, 8) => {
                    let mut b = [0u8; 8];
                    for (d, &x) in b.iter_mut().zip(&en.value) {
                        *d = x as u8;
                    }
                    u64::from_ne_bytes(b)
                }
                (8, 1) => en.value[0],
                (l, n) => {
                    return Err(Error::corrupt(
                        &what,
                        format!("an entry of {n} integers of {l} bytes, not one count"),
                    ))
                }
            };
            entries.insert(u64::from_be_bytes(key), count);
        }
        if entries.len() as u64 != total {
            return Err(Error::corrupt(
                &what,
                format!("{} entries, its header says {total}", entries.len()),
            ));
        }
        brt.vdevs.insert(
            id,
            BrtVdev {
                obj,
                entries_obj,
                entcount,
                entcount_swapped: swapped,
                totalcount: total,
                usedspace: used,
                savedspace: saved,
                entries,
                dirty: Default::default(),
            },
        );
    }
    *w.pool.brt.lock().unwrap_or_else(|e| e.into_inner()) = Some(brt);
    Ok(())
}

impl PoolWriter {
    /// Write the tables the open txg's frees changed into its MOS: entries
    /// updated or removed, counters and header rewritten, a table left
    /// empty destroyed (`brt_sync_table`).
    pub fn flush_brt(&mut self) -> Result<()> {
        let (rangesize, changed): (u64, Vec<(u64, BrtVdev)>) = {
            let mut g = self.pool.brt.lock().unwrap_or_else(|e| e.into_inner());
            let Some(b) = g.as_mut() else {
                return Ok(());
            };
            if !b.dirty() {
                return Ok(());
            }
            let ids: Vec<u64> = b
                .vdevs
                .iter()
                .filter(|(_, v)| !v.dirty.is_empty())
                .map(|(id, _)| *id)
                .collect();
            let mut out = Vec::new();
            for id in ids {
                let Some(v) = b.vdevs.get_mut(&id) else {
                    continue;
                };
                let snapshot = v.clone();
                for (off, count) in std::mem::take(&mut v.dirty) {
                    if count == 0 {
                        v.entries.remove(&off);
                    } else {
                        v.entries.insert(off, count);
                    }
                }
                if v.totalcount == 0 {
                    b.vdevs.remove(&id);
                }
                out.push((id, snapshot));
            }
            (b.rangesize, out)
        };
        for (id, v) in changed {
            for (off, count) in &v.dirty {
                let key = off.to_be_bytes();
                zap_tx::remove(&mut self.mos, v.entries_obj, &key)?;
                if *count > 0 {
                    let bytes: Vec<u64> = count.to_ne_bytes().iter().map(|&b| b as u64).collect();
                    zap_tx::add(&mut self.mos, v.entries_obj, &key, 1, &bytes)?;
                }
            }
            if v.totalcount == 0 {
                self.mos.free_object(v.entries_obj)?;
                self.mos.free_object(v.obj)?;
                zap_tx::remove(&mut self.mos, 1, format!("{VDEV_PREFIX}{id}").as_bytes())?;
                crate::features::incr(self, BLOCK_CLONING, -1)?;
                continue;
            }
            let mut bytes = Vec::with_capacity(v.entcount.len() * 2);
            for c in &v.entcount {
                let c = if v.entcount_swapped {
                    c.swap_bytes()
                } else {
                    *c
                };
                bytes.extend_from_slice(&c.to_ne_bytes());
            }
            self.mos.write(v.obj, 0, &bytes)?;
            let order = if HOST_LITTLE_ENDIAN != v.entcount_swapped {
                0
            } else {
                1
            };
            let phys: Vec<u8> = [
                v.entries_obj,
                v.entcount.len() as u64,
                order,
                v.totalcount,
                rangesize,
                v.usedspace,
                v.savedspace,
            ]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
            self.mos.set_bonus(v.obj, phys)?;
        }
        Ok(())
    }
}
