//! Destroying a file system (no snapshots, no children): every block of its
//! objset is freed, its DSL objects are removed from the MOS, its directory
//! leaves its parent's child map, and the space it used leaves the ancestors.

use crate::sync::PoolWriter;
use ozfs_dmu::{zap_tx, Objset};
use ozfs_format::{BlkPtr, Error, Result};

impl PoolWriter {
    /// `zfs destroy` of a file system without snapshots or children.
    pub fn destroy_filesystem(&mut self, name: &str) -> Result<()> {
        let dsl = self.dsl();
        let ds = dsl.lookup(name)?;
        if ds.is_snapshot {
            return Err(Error::unsupported(
                format!("cannot destroy '{name}'"),
                "destroying snapshots is not implemented yet",
            ));
        }
        if ds.dir.parent_obj == 0 {
            return Err(Error::Invalid(format!(
                "cannot destroy '{name}': operation does not apply to pools; use 'zpool destroy'"
            )));
        }
        if !dsl.child_dirs(&ds.dir)?.is_empty() {
            return Err(Error::Invalid(format!("cannot destroy '{name}': filesystem has children\nuse '-r' to destroy the following datasets")));
        }
        if !dsl.snapshots(&ds)?.is_empty() {
            return Err(Error::Invalid(format!(
                "cannot destroy '{name}': filesystem has snapshots"
            )));
        }
        // Pending changes to it are moot.
        self.fs.remove(&ds.ds_obj);
        let txg = self.txg;
        // Free every block of the objset.
        if !ds.ds.bp.is_hole() {
            let os = Objset::open(self.pool.clone(), &ds.ds.bp)?;
            let mut bps: Vec<BlkPtr> = Vec::new();
            let meta = os.meta_dnode();
            os.walk_tree(&meta, &mut |_, _, bp| {
                bps.push(*bp);
                Ok(())
            })?;
            for obj in 1..os.max_object() {
                match os.dnode(obj) {
                    Ok(dn) if dn.phys.object_type != 0 => {
                        os.walk_tree(&dn, &mut |_, _, bp| {
                            bps.push(*bp);
                            Ok(())
                        })?;
                    }
                    _ => {}
                }
            }
            bps.push(ds.ds.bp);
            for bp in bps {
                self.pool.free_block(&mut self.alloc, &bp, txg)?;
            }
        }
        // Ancestors no longer carry its space.
        let dir = self.dir(ds.dir_obj)?;
        let parent = dir.parent_obj;
        let mut obj = parent;
        for _ in 0..64 {
            let mut d = self.dir(obj)?;
            d.used_bytes = d.used_bytes.saturating_sub(dir.used_bytes);
            d.compressed_bytes = d.compressed_bytes.saturating_sub(dir.compressed_bytes);
            d.uncompressed_bytes = d.uncompressed_bytes.saturating_sub(dir.uncompressed_bytes);
            d.used_breakdown[2] = d.used_breakdown[2].saturating_sub(dir.used_bytes);
            let p = d.parent_obj;
            self.set_dir(obj, &d)?;
            if p == 0 {
                break;
            }
            obj = p;
        }
        // Unlink from the origin snapshot.
        let origin = ds.ds.prev_snap_obj;
        if origin != 0 {
            let mut o = self.dataset(origin)?;
            o.num_children = o.num_children.saturating_sub(1);
            let clones = o.next_clones_obj;
            self.set_dataset(origin, &o)?;
            if clones != 0 {
                zap_tx::remove(&mut self.mos, clones, format!("{:x}", ds.ds_obj).as_bytes())?;
            }
        }
        let pdir = self.dir(parent)?;
        let leaf = name.rsplit('/').next().unwrap_or(name);
        zap_tx::remove(&mut self.mos, pdir.child_dir_zapobj, leaf.as_bytes())?;
        for o in [
            ds.ds.snapnames_zapobj,
            ds.ds.deadlist_obj,
            ds.ds_obj,
            dir.props_zapobj,
            dir.child_dir_zapobj,
            ds.dir_obj,
        ] {
            if o != 0 {
                self.mos.free_object(o)?;
            }
        }
        Ok(())
    }
}
