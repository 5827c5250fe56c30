//! `zfs promote`: a clone takes over the snapshots it depends on.
//!
//! Theory (pool version 23, as ZFS does it). Clone C was made from snapshot
//! O of file system F. Promotion moves O and every earlier snapshot of F
//! (the "shared" snapshots) into C's directory: their names move from F's
//! snapshot map to C's, their `dir_obj` becomes C's directory, C takes F's
//! origin and F becomes a clone of O. O's next snapshot becomes C's first
//! one after O, and F's first snapshot after O takes C's place among O's
//! clones. No block moves; only who is charged for them:
//! - C's directory gains, and F's loses, the space of the shared snapshots:
//!   O's referenced bytes plus the dead lists of the shared snapshots,
//!   minus what F's own origin references;
//! - each directory's snapshot space becomes the dead-list space of its
//!   snapshots and head born after its new origin;
//! - O's unique bytes become the dead-list space, born after O's
//!   predecessor, of the first dataset after O in C's line.
//!
//! Invariants: names stay unique in C's snapshot map (a clash refuses the
//! promotion before anything changes); every dataset keeps its dead list
//! and BP.

use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::zap_tx;
use ozfs_format::dsl::DslDatasetPhys;
use ozfs_format::{Error, Result};

fn space_since(w: &PoolWriter, dl: u64, min: u64) -> Result<u64> {
    crate::deadlist::deadlist_space_range(w, dl, min, u64::MAX)
}

impl PoolWriter {
    /// `zfs promote CLONE`.
    pub fn promote(&mut self, name: &str) -> Result<()> {
        self.sync()?;
        let dsl = self.dsl();
        let c = dsl.lookup(name).map_err(|_| {
            Error::not_found(format!("cannot open '{name}': dataset does not exist"))
        })?;
        if c.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot promote '{name}': not a file system"
            )));
        }
        let o_obj = c.dir.origin_obj;
        let not_clone =
            || Error::Invalid(format!("cannot promote '{name}': not a cloned filesystem"));
        if o_obj == 0 {
            return Err(not_clone());
        }
        let o = self.dataset(o_obj)?;
        let f_dir_obj = o.dir_obj;
        for d in [c.dir_obj, f_dir_obj] {
            self.refuse_encrypted(d, &format!("cannot promote '{name}'"))?;
        }
        let f_dir = self.dir(f_dir_obj)?;
        if f_dir.parent_obj == 0 || f_dir_obj == c.dir_obj {
            return Err(not_clone());
        }
        // $ORIGIN's directory: a file system made by `zfs create`.
        let root = self.dir(self.root_dir_obj)?;
        if zap_tx::lookup_u64(&self.mos, root.child_dir_zapobj, "$ORIGIN").ok() == Some(f_dir_obj) {
            return Err(not_clone());
        }
        let f_head_obj = f_dir.head_dataset_obj;
        let walk = |w: &PoolWriter,
                    from: u64,
                    dir: u64,
                    stop: u64|
         -> Result<Vec<(u64, DslDatasetPhys)>> {
            let mut v = Vec::new();
            let mut obj = from;
            for _ in 0..1_000_000 {
                if obj == 0 || obj == stop {
                    return Ok(v);
                }
                let d = w.dataset(obj)?;
                if d.dir_obj != dir {
                    return Ok(v);
                }
                let prev = d.prev_snap_obj;
                v.push((obj, d));
                obj = prev;
            }
            Err(Error::corrupt("snapshot chain", "too long"))
        };
        let shared = walk(self, o_obj, f_dir_obj, 0)?;
        let clone_snaps = walk(self, c.ds_obj, c.dir_obj, o_obj)?;
        let origin_snaps = walk(self, f_head_obj, f_dir_obj, o_obj)?;
        let Some(&(clone_first, ref cf)) = clone_snaps.last() else {
            return Err(not_clone());
        };
        if cf.prev_snap_obj != o_obj {
            return Err(Error::corrupt(
                format!("'{name}'"),
                "its first snapshot does not follow its origin",
            ));
        }
        let origin_origin = shared.last().map(|(_, d)| d.prev_snap_obj).unwrap_or(0);
        let oo = if origin_origin != 0 {
            Some(self.dataset(origin_origin)?)
        } else {
            None
        };
        // Names of the snapshots that move, checked first.
        let f_head = self.dataset(f_head_obj)?;
        let c_head = self.dataset(c.ds_obj)?;
        let names: Vec<(String, u64)> = zap_tx::list(&self.mos, f_head.snapnames_zapobj)?
            .into_iter()
            .filter_map(|e| {
                let v = e.as_u64()?;
                shared
                    .iter()
                    .any(|(o, _)| *o == v)
                    .then(|| (e.name_str(), v))
            })
            .collect();
        for (n, _) in &names {
            if zap_tx::lookup(&self.mos, c_head.snapnames_zapobj, n.as_bytes())?.is_some() {
                return Err(Error::Invalid(format!(
                    "cannot promote '{name}': snapshot name '{n}' from origin conflicts with name from target"
                )));
            }
        }
        // Space to move.
        let mut used = o.referenced_bytes as i64;
        let mut comp = o.compressed_bytes as i64;
        let mut uncomp = o.uncompressed_bytes as i64;
        for (_, d) in &shared {
            if d.prev_snap_obj == 0 {
                continue;
            }
            let (u, cp, uc) = crate::deadlist::deadlist_sums(self, d.deadlist_obj)?;
            used += u as i64;
            comp += cp as i64;
            uncomp += uc as i64;
        }
        if let Some(x) = &oo {
            used -= x.referenced_bytes as i64;
            comp -= x.compressed_bytes as i64;
            uncomp -= x.uncompressed_bytes as i64;
        }
        let f_origin_txg = oo.map(|x| x.creation_txg).unwrap_or(0);
        let mut clone_usedsnap = 0u64;
        for (_, d) in shared.iter().chain(clone_snaps.iter()) {
            clone_usedsnap += space_since(self, d.deadlist_obj, f_origin_txg)?;
        }
        let mut origin_usedsnap = 0u64;
        for (_, d) in &origin_snaps {
            origin_usedsnap += space_since(self, d.deadlist_obj, o.creation_txg)?;
        }
        let unique = space_since(self, cf.deadlist_obj, o.prev_snap_txg)?;

        // O's next snapshot and clones.
        let mut o = o;
        let oldnext = o.next_snap_obj;
        o.next_snap_obj = clone_first;
        if o.next_clones_obj != 0 {
            zap_tx::remove(
                &mut self.mos,
                o.next_clones_obj,
                format!("{clone_first:x}").as_bytes(),
            )?;
            zap_tx::update(
                &mut self.mos,
                o.next_clones_obj,
                &format!("{oldnext:x}"),
                8,
                &[oldnext],
            )?;
        }
        o.unique_bytes = unique;
        self.set_dataset(o_obj, &o)?;
        // Origins.
        let mut cd = self.dir(c.dir_obj)?;
        cd.origin_obj = f_dir.origin_obj;
        self.set_dir(c.dir_obj, &cd)?;
        let mut fd = self.dir(f_dir_obj)?;
        fd.origin_obj = o_obj;
        self.set_dir(f_dir_obj, &fd)?;
        // Snapshots move.
        for (n, obj) in &names {
            zap_tx::remove(&mut self.mos, f_head.snapnames_zapobj, n.as_bytes())?;
            zap_tx::add(
                &mut self.mos,
                c_head.snapnames_zapobj,
                n.as_bytes(),
                8,
                &[*obj],
            )?;
        }
        for (obj, _) in &shared {
            let mut d = self.dataset(*obj)?;
            d.dir_obj = c.dir_obj;
            self.set_dataset(*obj, &d)?;
        }
        // Space.
        let cdir = self.dir(c.dir_obj)?;
        let delta_c = clone_usedsnap as i64 - cdir.used_breakdown[1] as i64;
        self.apply_dir_delta(
            c.dir_obj,
            &Sums {
                dsize: used,
                psize: comp,
                ucsize: uncomp,
            },
            used - delta_c,
            delta_c,
        )?;
        let fdir = self.dir(f_dir_obj)?;
        let delta_o = origin_usedsnap as i64 - fdir.used_breakdown[1] as i64;
        self.apply_dir_delta(
            f_dir_obj,
            &Sums {
                dsize: -used,
                psize: -comp,
                ucsize: -uncomp,
            },
            -used - delta_o,
            delta_o,
        )?;
        self.clones_dirty = true;
        Ok(())
    }
}
