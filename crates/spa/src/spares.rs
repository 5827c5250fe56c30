//! Hot spares: devices kept aside that take the place of a failed leaf.
//!
//! Theory. A pool's spares are leaves that belong to no top-level vdev. The
//! MOS pool directory names them in its `spares` entry: an object of type
//! packed-nvlist whose nvlist holds one array `spares` of leaf configs
//! (`type`, `guid`, `path`, `is_spare` = 1). Each available spare carries
//! a label of its own kind — only `version`, `state` = 3 (spare) and its
//! `guid`, no pool guid, no uberblocks — so that `zpool import` knows it
//! for a spare and any pool listing its guid can use it.
//!
//! Activation puts an interior vdev of type `spare` where the failed leaf
//! was, with two children: the failed leaf (child 0, keeping its guid and
//! id) and the spare (child 1, `is_spare` = 1), which starts resilvering.
//! A `spare` vdev reads and writes like a mirror. While active, the spare
//! is a member of the tree: its labels carry the pool config and it counts
//! in the uberblock's guid sum, and `zpool status` shows it INUSE.
//!
//! Deactivation, in the three ways ZFS has:
//! - `zpool detach POOL SPARE`: the spare leaves the tree (the failed leaf
//!   stands alone again) and returns to the available list with a spare
//!   label.
//! - `zpool detach POOL FAILED`: the spare takes the failed leaf's place for
//!   good and leaves the spares list.
//! - `zpool replace POOL FAILED NEW`: the new device takes child 0 with
//!   `unspare` = 1; when its resilver completes the spare is detached (as
//!   in the first way).
//!
//! A dRAID vdev's *distributed spares* (type `dspare`, named
//! `draid<P>-<T>-<S>`, with `top_guid` and `spareid` in their entry) have
//! no device: their space is spread over the dRAID's own children
//! (`ozfs_codec::draid`). One is available while its dRAID vdev is in
//! service; in use, it sits in the tree under a `spare` vdev of that dRAID
//! and is read through it.
//!
//! Invariants: a spare guid is in the tree at most once; a spare is
//! activated only in place of a leaf whose top-level vdev can rebuild it
//! (mirror, RAID-Z) and only with a device at least as large as the leaf
//! it stands for.

use crate::label_write::seal_region;
use crate::pool::lock;
use crate::Pool;
use ozfs_format::label::{aligned_psize, label_offset, VDEV_PHYS_OFFSET, VDEV_PHYS_SIZE};
use ozfs_format::{Error, NvList, NvValue, Result};
use ozfs_vdev::{BlockDevice, Vdev, VdevKind, VdevState};
use std::sync::Arc;

/// Pool state of a spare's own label.
pub const POOL_STATE_SPARE: u64 = 3;

/// One hot spare of a pool.
#[derive(Clone)]
pub struct Spare {
    pub guid: u64,
    pub path: String,
    /// The device, or None when it was not found (always None for a
    /// distributed spare).
    pub dev: Option<Arc<dyn BlockDevice>>,
    /// A distributed spare: the guid of its dRAID vdev and its spare id.
    pub distributed: Option<(u64, u64)>,
}

/// How `zpool status` shows a spare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpareState {
    Avail,
    InUse,
    Unavail,
}

impl SpareState {
    pub fn as_str(self) -> &'static str {
        match self {
            SpareState::Avail => "AVAIL",
            SpareState::InUse => "INUSE",
            SpareState::Unavail => "UNAVAIL",
        }
    }
}

/// The label of an available spare, written on all four labels (and
/// zeroed uberblock rings: a spare belongs to no txg).
pub fn write_spare_label(dev: &dyn BlockDevice, guid: u64, version: u64) -> Result<()> {
    let mut nv = NvList::new();
    nv.set("version", NvValue::Uint64(version));
    nv.set("state", NvValue::Uint64(POOL_STATE_SPARE));
    nv.set("guid", NvValue::Uint64(guid));
    let packed = nv.pack_xdr();
    let psize = aligned_psize(dev.size());
    for l in 0..4 {
        let mut label = vec![0u8; 256 * 1024];
        let mut region = vec![0u8; VDEV_PHYS_SIZE];
        region[..packed.len()].copy_from_slice(&packed);
        seal_region(&mut region, label_offset(psize, l, VDEV_PHYS_OFFSET));
        label[VDEV_PHYS_OFFSET as usize..VDEV_PHYS_OFFSET as usize + VDEV_PHYS_SIZE]
            .copy_from_slice(&region);
        dev.write_at(&label, label_offset(psize, l, 0))?;
    }
    dev.flush()
}

/// A spare's entry in the MOS `spares` list.
pub fn spare_config(guid: u64, path: &str) -> NvList {
    let mut nv = NvList::new();
    nv.set("type", NvValue::String("file".into()));
    nv.set("guid", NvValue::Uint64(guid));
    nv.set("path", NvValue::String(path.to_string()));
    nv.set("is_spare", NvValue::Uint64(1));
    nv
}

/// The MOS `spares` entry of `s` (a distributed spare keeps its kind).
fn entry_of(s: &Spare) -> NvList {
    let mut nv = spare_config(s.guid, &s.path);
    if let Some((top, id)) = s.distributed {
        nv.set("type", NvValue::String("dspare".into()));
        nv.set("top_guid", NvValue::Uint64(top));
        nv.set("spareid", NvValue::Uint64(id));
    }
    nv
}

/// The `spare` vdev directly above leaf `guid`, if any.
fn spare_parent_of(v: &Vdev, guid: u64) -> Option<&Vdev> {
    if v.type_name == "spare" && v.children.iter().any(|c| c.guid == guid) {
        return Some(v);
    }
    v.children.iter().find_map(|c| spare_parent_of(c, guid))
}

fn find_by_guid(v: &Vdev, guid: u64) -> Option<&Vdev> {
    if v.guid == guid {
        return Some(v);
    }
    v.children.iter().find_map(|c| find_by_guid(c, guid))
}

/// Replace, in config `nv`, the node whose guid is `target` by `f(node)`.
fn map_node(nv: &NvList, target: u64, f: &dyn Fn(&NvList) -> NvList) -> NvList {
    if nv.get_u64("guid") == Some(target) {
        return f(nv);
    }
    let mut out = nv.clone();
    if let Some(kids) = nv.get_nvlist_array("children") {
        let kids: Vec<NvList> = kids.iter().map(|k| map_node(k, target, f)).collect();
        out.set("children", NvValue::NvListArray(kids));
    }
    out
}

impl Pool {
    /// The pool's spares (available or in use).
    pub fn spares(&self) -> Vec<Spare> {
        lock(&self.spares).clone()
    }

    /// Replace the spares list.
    pub fn set_spares(&self, v: Vec<Spare>) {
        *lock(&self.spares) = v;
    }

    /// The MOS `spares` nvlist of the current list.
    pub fn spares_nvlist(&self) -> NvList {
        let mut nv = NvList::new();
        nv.set(
            "spares",
            NvValue::NvListArray(self.spares().iter().map(entry_of).collect()),
        );
        nv
    }

    /// Whether the spares list is still to be read from the MOS (once per
    /// open pool; later changes are made in memory by the writer).
    pub fn spares_unloaded(&self) -> bool {
        lock(&self.spare_candidates).is_some()
    }

    /// Resolve the MOS list `configs` against the devices found at open
    /// (spare labels) and, failing that, the path each entry names (if its
    /// label says it is that spare). Active spares use the tree's device.
    pub fn load_spares(&self, configs: &[NvList]) {
        let Some(cands) = lock(&self.spare_candidates).take() else {
            return;
        };
        let mut out = Vec::new();
        for c in configs {
            let Some(guid) = c.get_u64("guid") else {
                continue;
            };
            let path = c.get_str("path").unwrap_or("").to_string();
            if c.get_str("type") == Some("dspare") {
                let top = c.get_u64("top_guid").unwrap_or(0);
                let id = c.get_u64("spareid").unwrap_or(u64::MAX);
                out.push(Spare {
                    guid,
                    path,
                    dev: None,
                    distributed: Some((top, id)),
                });
                continue;
            }
            let mut dev = cands
                .iter()
                .find(|(g, _, _)| *g == guid)
                .map(|(_, d, p)| (d.clone(), p.clone()));
            if dev.is_none() {
                if let Some(l) = self.leaf_by_guid(guid) {
                    if let VdevKind::Leaf(Some(d)) = &l.kind {
                        dev = Some((d.clone(), l.path.clone().unwrap_or(path.clone())));
                    }
                }
            }
            if dev.is_none() && !path.is_empty() {
                if let Ok(d) = ozfs_vdev::open_path(std::path::Path::new(&path), !self.readonly) {
                    let labels = ozfs_vdev::read_labels(d.as_ref());
                    if labels.best_config().and_then(|c| c.get_u64("guid")) == Some(guid) {
                        dev = Some((d, path.clone()));
                    }
                }
            }
            let (dev, path) = match dev {
                Some((d, p)) => (Some(d), p),
                None => (None, path),
            };
            out.push(Spare {
                guid,
                path,
                dev,
                distributed: None,
            });
        }
        self.set_spares(out);
    }

    /// A leaf of the tree by guid.
    pub fn leaf_by_guid(&self, guid: u64) -> Option<&Vdev> {
        find_by_guid(&self.root, guid).filter(|v| matches!(v.kind, VdevKind::Leaf(_)))
    }

    /// Whether spare `guid` is in use (a member of the tree). A distributed
    /// spare is available while its dRAID vdev is in service and names it.
    pub fn spare_state(&self, s: &Spare) -> SpareState {
        if let Some((top, id)) = s.distributed {
            if find_by_guid(&self.root, s.guid).is_some() {
                return SpareState::InUse;
            }
            let serves = self.root.children.iter().any(|t| {
                t.guid == top
                    && matches!(&t.kind, VdevKind::Draid { layout } if id < layout.nspares as u64)
                    && matches!(t.state(), VdevState::Online | VdevState::Degraded)
            });
            return if serves {
                SpareState::Avail
            } else {
                SpareState::Unavail
            };
        }
        if self.leaf_by_guid(s.guid).is_some() {
            SpareState::InUse
        } else if s.dev.is_some() {
            SpareState::Avail
        } else {
            SpareState::Unavail
        }
    }

    /// A spare by path, file name or guid.
    pub fn find_spare(&self, name: &str) -> Option<Spare> {
        let canon = std::fs::canonicalize(name).ok();
        self.spares().into_iter().find(|s| {
            s.path == name
                || s.guid.to_string() == name
                || std::path::Path::new(&s.path)
                    .file_name()
                    .and_then(|f| f.to_str())
                    == Some(name)
                || (canon.is_some() && std::fs::canonicalize(&s.path).ok() == canon)
        })
    }

    /// Put available spare `spare` in the place of leaf `failed`: a `spare`
    /// vdev over both, the spare resilvering.
    pub fn activate_spare(&self, failed: u64, spare: &Spare, txg: u64) -> Result<()> {
        self.settle_writes()?;
        let what = |m: &str| Error::Invalid(format!("cannot use spare {}: {m}", spare.path));
        if self.spare_state(spare) != SpareState::Avail {
            return Err(what("it is not available"));
        }
        let Some(dev) = spare.dev.clone() else {
            return Err(what("device not found"));
        };
        self.leaf_by_guid(failed)
            .ok_or_else(|| Error::not_found(format!("device {failed}")))?;
        if spare_parent_of(&self.root, failed).is_some() {
            return Err(what("the device is already spared"));
        }
        let top = self
            .root
            .children
            .iter()
            .find(|t| find_by_guid(t, failed).is_some())
            .ok_or_else(|| Error::not_found(format!("device {failed}")))?;
        if top.guid == failed || !matches!(top.kind, VdevKind::Mirror | VdevKind::Raidz { .. }) {
            return Err(what("the device is not part of a mirror or raidz"));
        }
        crate::devices::check_leaf_size(top, dev.as_ref(), &spare.path)
            .map_err(|e| what(&e.to_string()))?;
        let sguid = spare.guid;
        let spath = spare.path.clone();
        let tops_nv: Vec<NvList> = self
            .root
            .children
            .iter()
            .map(|t| {
                map_node(&t.config, failed, &|old| {
                    let mut sp = NvList::new();
                    sp.set("type", NvValue::String("spare".into()));
                    sp.set("id", NvValue::Uint64(old.get_u64("id").unwrap_or(0)));
                    sp.set("guid", NvValue::Uint64(crate::devices::new_guid()));
                    let mut first = old.clone();
                    first.set("id", NvValue::Uint64(0));
                    let mut s = spare_config(sguid, &spath);
                    s.set("id", NvValue::Uint64(1));
                    s.set("create_txg", NvValue::Uint64(txg));
                    sp.set("children", NvValue::NvListArray(vec![first, s]));
                    sp
                })
            })
            .collect();
        self.install_with(tops_nv, vec![(sguid, dev, spare.path.clone())], Some(sguid))
    }

    /// Remove child `leave` from the `spare` vdev above it. The other child
    /// takes the spare vdev's place. Returns the guid of the child kept.
    /// Refused when the child kept does not hold every block.
    pub fn unspare(&self, leave: u64) -> Result<u64> {
        self.settle_writes()?;
        let sp = spare_parent_of(&self.root, leave)
            .ok_or_else(|| Error::Invalid("the device is not part of a spare".into()))?;
        let keep = sp
            .children
            .iter()
            .find(|c| c.guid != leave)
            .ok_or_else(|| Error::Invalid("spare vdev with one child".into()))?;
        if !keep.present_whole() {
            return Err(Error::Invalid("no valid replicas".into()));
        }
        let kept = keep.guid;
        let spguid = sp.guid;
        let tops_nv: Vec<NvList> = self
            .root
            .children
            .iter()
            .map(|t| {
                map_node(&t.config, spguid, &|s| {
                    let mut k = s
                        .get_nvlist_array("children")
                        .unwrap_or(&[])
                        .iter()
                        .find(|c| c.get_u64("guid") == Some(kept))
                        .cloned()
                        .unwrap_or_default();
                    k.set("id", NvValue::Uint64(s.get_u64("id").unwrap_or(0)));
                    k.remove("unspare");
                    k.remove("is_spare");
                    k
                })
            })
            .collect();
        self.install_with(tops_nv, Vec::new(), None)?;
        Ok(kept)
    }

    /// After a resilver: spare vdevs whose replaced device (marked
    /// `unspare`) now holds every block let their spare go. Returns the
    /// spares released (their labels are rewritten by the caller).
    pub fn release_spares(&self) -> Vec<u64> {
        let mut todo = Vec::new();
        self.root.walk(0, &mut |v, _| {
            if v.type_name == "spare" {
                for c in &v.children {
                    if c.config.get_u64("unspare") == Some(1) && c.present_whole() {
                        if let Some(other) = v.children.iter().find(|o| o.guid != c.guid) {
                            todo.push(other.guid);
                        }
                    }
                }
            }
        });
        todo.retain(|&g| self.unspare(g).is_ok());
        todo
    }

    /// Whether leaf `guid` sits in a `spare` vdev as the device spared
    /// (child 0) — `zpool detach` of it makes the spare permanent.
    pub fn is_spared_original(&self, guid: u64) -> bool {
        spare_parent_of(&self.root, guid)
            .is_some_and(|sp| sp.children.first().map(|c| c.guid) == Some(guid))
    }

    /// Leaves that failed (faulted or removed) and are not spared yet, in
    /// tops that can rebuild them: what a hot spare should take over.
    pub fn leaves_wanting_spare(&self) -> Vec<u64> {
        let mut v = Vec::new();
        for t in &self.root.children {
            if !matches!(t.kind, VdevKind::Mirror | VdevKind::Raidz { .. }) {
                continue;
            }
            t.walk(0, &mut |l, _| {
                if matches!(l.kind, VdevKind::Leaf(_))
                    && matches!(
                        l.state(),
                        ozfs_vdev::VdevState::Faulted
                            | ozfs_vdev::VdevState::Removed
                            | ozfs_vdev::VdevState::Unavail
                    )
                {
                    v.push(l.guid);
                }
            });
        }
        v.retain(|&g| spare_parent_of(&self.root, g).is_none());
        v
    }
}
