//! Device removal on the write side: what frees of blocks on a removed
//! (indirect) vdev leave in the MOS, and which removal states ozfs does
//! not write.
//!
//! Theory (OpenZFS's `vdev_indirect.c`). A removed top-level vdev keeps a
//! mapping from its old offsets to where its data was copied. Freeing a
//! block still addressed on it frees the copy (the SPA does that through
//! the mapping, `ozfs_spa::write`) and marks the old range obsolete: an
//! ALLOC entry appended to the vdev's obsolete space map (offsets in
//! bytes, shift 0), named in its top-level ZAP by
//! `com.delphix:indirect_obsolete_sm` and created on first use, which
//! counts once in `obsolete_counts`. OpenZFS later condenses the mapping
//! with those ranges; ozfs never condenses, so the map only grows.
//!
//! Invariants: every range freed on a removed vdev in a txg is appended to
//! its obsolete space map in that txg, each once (frees never repeat a
//! range); a pool in a state ozfs does not continue — a removal still
//! copying, a condense under way, an obsolete bpobj or a dataset's remap
//! dead list waiting to be processed — is not written ([`check_write`]).

use crate::sync::PoolWriter;
use ozfs_dmu::zap_tx;
use ozfs_format::{Error, Result};
use ozfs_spa::spacemap::{self, SmEntry, SpaceMapHeader};

/// The top-level ZAP entry naming a removed vdev's obsolete space map.
pub const OBSOLETE_SM: &str = "com.delphix:indirect_obsolete_sm";
/// The feature counting obsolete space maps and counts objects.
pub const OBSOLETE_COUNTS: &str = "com.delphix:obsolete_counts";

/// Refuse to write a pool with device-removal work ozfs does not do: a
/// removal in progress (`com.delphix:removing_state`), a condense
/// (`com.delphix:condensing_indirect`), the pool's obsolete bpobj
/// (`com.delphix:obsolete_bpobj`), or a dataset's remap dead list.
pub fn check_write(w: &PoolWriter) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!("writing it: {why}; import it read-only, or with OpenZFS until that is done"),
        ))
    };
    for (key, why) in [
        (
            "com.delphix:removing_state",
            "a device removal may still be copying",
        ),
        (
            "com.delphix:condensing_indirect",
            "a removed device's mapping is being condensed",
        ),
        (
            "com.delphix:obsolete_bpobj",
            "frees of removed devices' blocks wait in its obsolete bpobj",
        ),
    ] {
        if let Some(e) = zap_tx::lookup(&w.mos, 1, key.as_bytes())? {
            // A removal state object records finished removals too.
            if key == "com.delphix:removing_state" && removal_finished(&e)? {
                continue;
            }
            return refuse(why.to_string());
        }
    }
    if !w.pool.indirect_vdevs().is_empty() {
        let dsl = w.dsl();
        let root = dsl.root()?;
        for ds in dsl.list(&root, true, None)? {
            let dn = w.mos.dnode(ds.ds_obj)?;
            if ozfs_format::types::object_type_is_zap(dn.phys.object_type)
                && zap_tx::lookup(&w.mos, ds.ds_obj, b"com.delphix:remap_deadlist")?.is_some()
            {
                return refuse(format!(
                    "dataset '{}' has a remap dead list (blocks remapped while snapshots \
                     held them)",
                    ds.name
                ));
            }
        }
    }
    Ok(())
}

/// Whether the removal state (`spa_removing_phys_t`, held in the entry
/// itself as integers, `sr_state` first) says no removal is running
/// (`DSS_FINISHED` 2, `DSS_CANCELED` 3).
fn removal_finished(e: &ozfs_format::zap::ZapEntry) -> Result<bool> {
    let state =
        e.value.first().copied().ok_or_else(|| {
            Error::corrupt("MOS directory", "com.delphix:removing_state is empty")
        })?;
    Ok(matches!(state, 2 | 3))
}

impl PoolWriter {
    /// Append the ranges freed on removed vdevs in the open txg to their
    /// obsolete space maps (creating a map where a vdev has none).
    pub fn flush_obsolete(&mut self) -> Result<()> {
        let mut pending =
            std::mem::take(&mut *self.pool.obsolete.lock().unwrap_or_else(|e| e.into_inner()));
        // Recorded only where the feature is enabled, as OpenZFS's
        // `vdev_indirect_mark_obsolete` does.
        if pending.is_empty() || crate::features::refcount(self, OBSOLETE_COUNTS)?.is_none() {
            return Ok(());
        }
        pending.sort_unstable();
        let mut vdevs: Vec<u64> = pending.iter().map(|p| p.0).collect();
        vdevs.dedup();
        for vdev in vdevs {
            // Adjacent ranges as one entry, as OpenZFS's range tree does.
            let mut entries: Vec<SmEntry> = Vec::new();
            for &(_, off, len) in pending.iter().filter(|p| p.0 == vdev) {
                match entries.last_mut() {
                    Some(SmEntry::Alloc { offset, len: l }) if *offset + *l == off => *l += len,
                    _ => entries.push(SmEntry::Alloc { offset: off, len }),
                }
            }
            let what = format!("removed vdev {vdev}");
            let zap = self
                .dsl()
                .top_zap(vdev)
                .ok_or_else(|| Error::corrupt(&what, "no top-level vdev ZAP"))?;
            let sm = match zap_tx::lookup(&self.mos, zap, OBSOLETE_SM.as_bytes())? {
                Some(e) => e
                    .as_u64()
                    .filter(|&o| o != 0)
                    .ok_or_else(|| Error::corrupt(&what, "its obsolete space map entry"))?,
                None => {
                    let obj = self.new_space_map()?;
                    zap_tx::add(&mut self.mos, zap, OBSOLETE_SM.as_bytes(), 8, &[obj])?;
                    crate::features::incr(self, OBSOLETE_COUNTS, 1)?;
                    obj
                }
            };
            let dn = self.mos.dnode(sm)?;
            let mut hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
            let bytes = spacemap::encode(&entries, 0)?;
            self.mos.write(sm, hdr.length, &bytes)?;
            hdr.append(&entries, bytes.len() as u64);
            let mut bonus = dn.phys.bonus.clone();
            hdr.store(&mut bonus);
            self.mos.set_bonus(sm, bonus)?;
        }
        Ok(())
    }
}
