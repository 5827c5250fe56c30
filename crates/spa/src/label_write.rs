//! Writing vdev labels and uberblocks (FORMAT.md §1.5–1.8).
//!
//! Order of a txg commit, which makes the uberblock the only commit point:
//! all blocks of the txg are written and flushed first; if the configuration
//! changed, the even labels (L0, L2) are rewritten and flushed; then the new
//! uberblock goes into slot `txg mod count` of all four labels of every
//! leaf, and is flushed; finally the odd labels (L1, L3). A crash at any
//! point leaves either the old or the new uberblock as the newest valid one.
//!
//! The writes of a sync are queued ([`crate::writeback`]) and run in this
//! order on the pool's I/O thread: [`Pool::write_labels`],
//! [`Pool::write_uberblock`] and [`Pool::flush_all`] queue them — also
//! for attach, replace and add, whose labels the next sync writes. (Spare
//! labels, labels cleared on a removed device and the rings of fresh
//! leaves are written directly, on devices no queued write touches.)

use crate::pool::Pool;
use ozfs_codec::checksum::sha256;
use ozfs_format::label::{
    aligned_psize, label_offset, set_eck, uberblock_shift, with_verifier, Uberblock,
    UBERBLOCK_RING_OFFSET, UBERBLOCK_RING_SIZE, VDEV_PHYS_OFFSET, VDEV_PHYS_SIZE, ZIO_ECK_SIZE,
};
use ozfs_format::{Error, NvList, NvValue, Result};
use ozfs_vdev::{BlockDevice, Vdev, VdevKind};
use std::sync::Arc;

/// Pool states stored in labels.
pub const POOL_STATE_ACTIVE: u64 = 0;
pub const POOL_STATE_EXPORTED: u64 = 1;
pub const POOL_STATE_DESTROYED: u64 = 2;

/// Fill the embedded checksum of a self-checksumming region at absolute device `offset`.
pub fn seal_region(region: &mut [u8], offset: u64) {
    let tmp = with_verifier(region, [offset, 0, 0, 0], false);
    let c = sha256(&tmp);
    region.copy_from_slice(&tmp);
    set_eck(region, c.0);
}

/// Present leaves in service (faulted and offline ones get no labels).
fn leaf_devs<'a>(v: &'a Vdev, out: &mut Vec<(&'a Vdev, Arc<dyn BlockDevice>)>) {
    if let VdevKind::Leaf(Some(d)) = &v.kind {
        if v.usable() {
            out.push((v, d.clone()));
        }
    }
    for c in &v.children {
        leaf_devs(c, out);
    }
}

impl Pool {
    /// The label nvlist of leaf `leaf_guid` under top-level vdev `top`.
    pub fn label_nvlist(
        &self,
        top: &Vdev,
        leaf_guid: u64,
        txg: u64,
        state: u64,
        version: u64,
    ) -> NvList {
        let mut nv = NvList::new();
        nv.set("version", NvValue::Uint64(version));
        nv.set("name", NvValue::String(self.name.clone()));
        nv.set("state", NvValue::Uint64(state));
        nv.set("txg", NvValue::Uint64(txg));
        nv.set("pool_guid", NvValue::Uint64(self.guid));
        nv.set("top_guid", NvValue::Uint64(top.guid));
        nv.set("guid", NvValue::Uint64(leaf_guid));
        nv.set(
            "vdev_children",
            NvValue::Uint64(self.root.children.len() as u64),
        );
        nv.set("vdev_tree", NvValue::NvList(top.config.clone()));
        self.set_label_features(&mut nv, version);
        nv
    }

    /// A feature-flag pool's `features_for_read`: the active features the
    /// MOS needs, each a boolean pair (an empty list when there is none).
    fn set_label_features(&self, nv: &mut NvList, version: u64) {
        if version < crate::pool::SPA_VERSION_FEATURES {
            return;
        }
        let mut f = NvList::new();
        if let Ok(names) = self.label_features.lock() {
            for n in names.iter() {
                f.set(n, NvValue::Boolean);
            }
        }
        nv.set("features_for_read", NvValue::NvList(f));
    }

    /// The full config (MOS `config` object): top-level keys and the whole vdev tree.
    pub fn full_config(&self, txg: u64, state: u64, version: u64) -> NvList {
        let mut nv = NvList::new();
        nv.set("version", NvValue::Uint64(version));
        nv.set("name", NvValue::String(self.name.clone()));
        nv.set("state", NvValue::Uint64(state));
        nv.set("txg", NvValue::Uint64(txg));
        nv.set("pool_guid", NvValue::Uint64(self.guid));
        nv.set(
            "vdev_children",
            NvValue::Uint64(self.root.children.len() as u64),
        );
        let mut root = NvList::new();
        root.set("type", NvValue::String("root".into()));
        root.set("id", NvValue::Uint64(0));
        root.set("guid", NvValue::Uint64(self.guid));
        root.set(
            "children",
            NvValue::NvListArray(
                self.root
                    .children
                    .iter()
                    .map(|c| c.config.clone())
                    .collect(),
            ),
        );
        nv.set("vdev_tree", NvValue::NvList(root));
        self.set_label_features(&mut nv, version);
        nv
    }

    /// Queue the rewrite of the config nvlist of labels `which` (e.g. [0,
    /// 2] then [1, 3]) on every present leaf ([`crate::writeback`]: after
    /// every write queued before). The nvlists are built now; which leaves
    /// are present is decided when the job runs.
    pub fn write_labels(&self, txg: u64, state: u64, version: u64, which: &[usize]) -> Result<()> {
        let root = self.current_root()?;
        let mut packed: std::collections::HashMap<u64, Vec<u8>> = Default::default();
        for top in &root.children {
            let mut leaves = Vec::new();
            top.walk(0, &mut |v, _| {
                if matches!(v.kind, VdevKind::Leaf(_)) {
                    leaves.push(v.guid);
                }
            });
            for guid in leaves {
                let nv = self.label_nvlist(top, guid, txg, state, version);
                let p = nv.pack_xdr();
                if p.len() > VDEV_PHYS_SIZE - ZIO_ECK_SIZE {
                    return Err(Error::Invalid(format!(
                        "label config of {} bytes does not fit",
                        p.len()
                    )));
                }
                packed.insert(guid, p);
            }
        }
        let which = which.to_vec();
        let job: crate::writeback::Job = Box::new(move || {
            for top in &root.children {
                let mut leaves = Vec::new();
                leaf_devs(top, &mut leaves);
                for (leaf, dev) in leaves {
                    let Some(p) = packed.get(&leaf.guid) else {
                        continue;
                    };
                    let psize = aligned_psize(dev.size());
                    for &l in &which {
                        let mut region = vec![0u8; VDEV_PHYS_SIZE];
                        region[..p.len()].copy_from_slice(p);
                        let off = label_offset(psize, l, VDEV_PHYS_OFFSET);
                        seal_region(&mut region, off);
                        // A failing device is faulted; the others carry the pool.
                        if let Err(e) = dev.write_at(&region, off) {
                            leaf.note_write_error(&e);
                            break;
                        }
                    }
                }
            }
            Ok(())
        });
        self.writeback.enqueue(job, None)
    }

    /// The vdev tree in use, held (a queued job keeps the tree it was
    /// queued on).
    pub(crate) fn current_root(&self) -> Result<Arc<Vdev>> {
        self.root
            .current()
            .ok_or_else(|| Error::Invalid("the pool has no vdev tree".into()))
    }

    /// Zero the whole uberblock rings and boot-environment areas of fresh leaves (pool creation).
    pub fn clear_label_rings(&self) -> Result<()> {
        let mut leaves = Vec::new();
        leaf_devs(&self.root, &mut leaves);
        for (_, dev) in leaves {
            let psize = aligned_psize(dev.size());
            for l in 0..4 {
                let zero = vec![0u8; 256 * 1024];
                dev.write_at(&zero, label_offset(psize, l, 0))?;
            }
        }
        Ok(())
    }

    /// Queue the write of `ub` into slot `txg mod count` of all four
    /// labels of every present leaf (after every write queued before).
    pub fn write_uberblock(&self, ub: &Uberblock) -> Result<()> {
        let root = self.current_root()?;
        let ub = *ub;
        let job: crate::writeback::Job = Box::new(move || write_uberblock_to(&root, &ub));
        self.writeback.enqueue(job, None)
    }

    /// Queue a flush of every present leaf (after every write queued before).
    pub fn flush_all(&self) -> Result<()> {
        let root = self.current_root()?;
        let job: crate::writeback::Job = Box::new(move || root.flush_all_tops());
        self.writeback.enqueue(job, None)
    }
}

/// Write `ub` into its ring slot of all four labels of every present leaf;
/// fails only if no copy could be written.
fn write_uberblock_to(root: &Vdev, ub: &Uberblock) -> Result<()> {
    let mut written = 0;
    let mut last_err = None;
    for top in &root.children {
        let shift = uberblock_shift(top.ashift);
        let slot_size = 1usize << shift;
        let count = UBERBLOCK_RING_SIZE as usize / slot_size;
        let slot = (ub.txg % count as u64) as usize;
        let mut leaves = Vec::new();
        leaf_devs(top, &mut leaves);
        for (leaf, dev) in leaves {
            let psize = aligned_psize(dev.size());
            for l in 0..4 {
                let off = label_offset(psize, l, UBERBLOCK_RING_OFFSET + (slot * slot_size) as u64);
                let mut region = ub.encode(slot_size);
                region.resize(slot_size, 0);
                seal_region(&mut region, off);
                match dev.write_at(&region, off) {
                    Ok(()) => written += 1,
                    Err(e) => {
                        leaf.note_write_error(&e);
                        last_err = Some(e);
                    }
                }
            }
        }
    }
    if written == 0 {
        return Err(last_err
            .unwrap_or_else(|| Error::Invalid("no device to write the uberblock to".into())));
    }
    Ok(())
}
