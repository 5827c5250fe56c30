//! Device management on an open pool: replacing a leaf (`zpool replace`)
//! and taking leaves offline and online.
//!
//! Theory. The vdev tree is rebuilt from the configuration nvlists with the
//! change applied (a leaf's guid and path swapped for the new device's), the
//! existing devices are handed to the new tree by guid, error counters and
//! states carry over, and the new tree is installed in the pool's
//! [`VdevCell`](ozfs_vdev::VdevCell): I/O already under way finishes on the
//! old tree, new I/O sees the new one. The next sync writes the new
//! configuration into every label (and the new device gets its labels and
//! uberblocks then).
//!
//! A replacing leaf starts *resilvering*: it holds none of the blocks born
//! before it arrived, so reads never use it and every read that passes a
//! block heals the leaf's copy (a mirror side, a RAID-Z column); the
//! resilver is a walk of every allocated block doing just that, after which
//! the flag is cleared. Blocks written meanwhile go to it like to any leaf.
//!
//! Invariants: the top-level geometry (ashift, asize, children count) never
//! changes here, so allocations and DVAs stay valid; a leaf is only replaced
//! where the redundancy can rebuild it (mirror, RAID-Z).

use crate::Pool;
use ozfs_format::{Error, NvList, NvValue, Result};
use ozfs_vdev::{BlockDevice, Vdev, VdevKind};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Apply `edit` to the leaf nvlist whose guid is `old` in the config `nv`.
/// True if found.
fn edit_leaf(nv: &mut NvList, old: u64, edit: &dyn Fn(&mut NvList)) -> bool {
    if nv.get_u64("guid") == Some(old) && nv.get_nvlist_array("children").is_none() {
        edit(nv);
        return true;
    }
    let Some(kids) = nv.get_nvlist_array("children") else {
        return false;
    };
    let mut kids = kids.to_vec();
    let mut found = false;
    for k in kids.iter_mut() {
        found |= edit_leaf(k, old, edit);
    }
    if found {
        nv.set("children", NvValue::NvListArray(kids));
    }
    found
}

/// The leaf edit of a replacement: new guid and path.
fn swap_leaf(nv: &mut NvList, old: u64, guid: u64, path: &str) -> bool {
    edit_leaf(nv, old, &|l| {
        l.set("guid", NvValue::Uint64(guid));
        l.set("path", NvValue::String(path.to_string()));
        for k in ["devid", "phys_path", "DTL", "offline", "faulted", "removed"] {
            l.remove(k);
        }
    })
}

/// Keys of a top-level vdev's config (they move when a single device
/// becomes a mirror and back).
const TOP_KEYS: &[&str] = &[
    "id",
    "metaslab_array",
    "metaslab_shift",
    "ashift",
    "asize",
    "is_log",
    "create_txg",
];

fn copy_keys(from: &NvList, to: &mut NvList, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(k) {
            to.set(k, v.clone());
        }
    }
}

/// A fresh vdev guid.
pub fn new_guid() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        b = (t ^ (std::process::id() as u64) << 32).to_le_bytes();
    }
    u64::from_le_bytes(b) | 1
}

fn collect(v: &Vdev, devs: &mut HashMap<u64, (Arc<dyn BlockDevice>, String)>) {
    if let VdevKind::Leaf(Some(d)) = &v.kind {
        devs.insert(v.guid, (d.clone(), v.path.clone().unwrap_or_default()));
    }
    for c in &v.children {
        collect(c, devs);
    }
}

/// Whether `dev` is large enough to stand for a leaf of top-level vdev
/// `top` (a RAID-Z column or a whole mirror side, plus both label areas);
/// an error naming the sizes if not.
pub(crate) fn check_leaf_size(top: &Vdev, dev: &dyn BlockDevice, path: &str) -> Result<()> {
    let per_leaf = match top.kind {
        VdevKind::Raidz { .. } => top.asize / top.children.len().max(1) as u64,
        VdevKind::Draid { ref layout } => layout.child_need(top.asize),
        _ => top.asize,
    };
    let need =
        per_leaf + crate::metaslab::VDEV_LABEL_START_SIZE + crate::metaslab::VDEV_LABEL_END_SIZE;
    if dev.size() < need {
        return Err(Error::Invalid(format!(
            "{path}: device is too small ({} bytes, at least {need} needed)",
            dev.size()
        )));
    }
    Ok(())
}

/// Whether top-level vdev `top` still holds every block without child
/// `guid` (the other children that hold whole copies suffice).
fn can_do_without(top: &Vdev, guid: u64) -> bool {
    let others_whole = top
        .children
        .iter()
        .filter(|c| c.guid != guid && c.present_whole())
        .count();
    match top.kind {
        VdevKind::Mirror => others_whole >= 1,
        VdevKind::Raidz { .. } | VdevKind::Draid { .. } => {
            top.children.len().saturating_sub(others_whole) <= top.parity_count()
        }
        _ => false,
    }
}

fn copy_state(from: &Vdev, to: &Vdev) {
    let (r, w, c) = from.stats.get();
    to.stats.set(r, w, c);
    for (a, b) in [
        (&from.stats.faulted, &to.stats.faulted),
        (&from.stats.removed, &to.stats.removed),
        (&from.stats.offline, &to.stats.offline),
        (&from.stats.resilvering, &to.stats.resilvering),
    ] {
        b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    to.stats.resilver_from.store(
        from.stats.resilver_from.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
}

impl Pool {
    /// Find a leaf by path (full or file name), guid, or display name.
    pub fn find_leaf(&self, name: &str) -> Option<&Vdev> {
        let mut found = None;
        self.root.walk(0, &mut |v, _| {
            if found.is_some() || !matches!(v.kind, VdevKind::Leaf(_)) {
                return;
            }
            let by_path = v.path.as_deref().is_some_and(|p| {
                p == name
                    || std::path::Path::new(p).file_name().and_then(|f| f.to_str()) == Some(name)
            });
            if by_path || v.guid.to_string() == name {
                found = Some(v);
            }
        });
        found
    }

    /// The top-level vdev a leaf belongs to, and whether that top has the
    /// redundancy to rebuild it.
    fn top_of(&self, guid: u64) -> Option<(&Vdev, bool)> {
        self.root.children.iter().find_map(|t| {
            let mut has = false;
            t.walk(0, &mut |v, _| has |= v.guid == guid);
            has.then_some((
                t,
                matches!(t.kind, VdevKind::Mirror | VdevKind::Raidz { .. }),
            ))
        })
    }

    /// Put `dev` (at `path`, new leaf guid `guid`) in the place of leaf
    /// `old`; the new leaf starts resilvering. Returns the new guid.
    pub fn replace_leaf(
        &self,
        old: u64,
        dev: Arc<dyn BlockDevice>,
        path: &str,
        guid: u64,
    ) -> Result<()> {
        self.settle_writes()?;
        let (top, redundant) = self
            .top_of(old)
            .ok_or_else(|| Error::not_found(format!("device {old} in pool '{}'", self.name)))?;
        if !redundant {
            return Err(Error::unsupported(
                "zpool replace",
                "replacing a device that is not part of a mirror or raidz",
            ));
        }
        // The new device is empty until resilvered: the others must hold
        // every block meanwhile.
        if !can_do_without(top, old) {
            return Err(Error::Invalid("no valid replicas".into()));
        }
        check_leaf_size(top, dev.as_ref(), path)?;
        // Replacing the device a hot spare stands for: once the new one
        // is resilvered the spare goes back (`unspare`).
        let unspare = self.is_spared_original(old);
        let tops_nv = self
            .root
            .children
            .iter()
            .map(|t| {
                let mut nv = t.config.clone();
                swap_leaf(&mut nv, old, guid, path);
                if unspare {
                    edit_leaf(&mut nv, guid, &|l| l.set("unspare", NvValue::Uint64(1)));
                }
                nv
            })
            .collect();
        self.install(tops_nv, Some((guid, dev, path.to_string())), Some(guid))
    }

    /// Take a leaf offline (`zpool offline`) or bring it back (`online`);
    /// `txg` is the open txg.
    /// Offline is refused when the leaf's top-level vdev could not do
    /// without it; the config records it (`offline`), so it survives an
    /// export. A leaf coming back resilvers the blocks born while it was
    /// away (all of them if that txg is not known, e.g. after an import).
    pub fn set_offline(&self, guid: u64, offline: bool, txg: u64) -> Result<()> {
        self.settle_writes()?;
        let (top, _) = self
            .top_of(guid)
            .ok_or_else(|| Error::not_found(format!("device {guid} in pool '{}'", self.name)))?;
        let leaf = self
            .find_leaf(&guid.to_string())
            .ok_or_else(|| Error::not_found(format!("device {guid}")))?;
        if offline {
            if !can_do_without(top, guid) {
                return Err(Error::Invalid("no valid replicas".into()));
            }
            leaf.stats.offline.store(true, Ordering::Relaxed);
            // `txg` is the open txg: its blocks already miss the leaf.
            leaf.stats
                .resilver_from
                .store(txg.saturating_sub(1), Ordering::Relaxed);
        } else {
            if !leaf.stats.offline.load(Ordering::Relaxed)
                && !leaf.stats.faulted.load(Ordering::Relaxed)
            {
                // Online already: nothing to bring back.
                return Ok(());
            }
            let from = if leaf.stats.offline.load(Ordering::Relaxed) {
                leaf.stats.resilver_from.load(Ordering::Relaxed)
            } else {
                0
            };
            leaf.stats.offline.store(false, Ordering::Relaxed);
            leaf.stats.faulted.store(false, Ordering::Relaxed);
            leaf.stats.removed.store(false, Ordering::Relaxed);
            leaf.stats.resilver_from.store(from, Ordering::Relaxed);
            leaf.stats.resilvering.store(true, Ordering::Relaxed);
        }
        // Record it in the config the next sync writes.
        let tops_nv = self
            .root
            .children
            .iter()
            .map(|t| {
                let mut nv = t.config.clone();
                edit_leaf(&mut nv, guid, &|l| {
                    if offline {
                        l.set("offline", NvValue::Uint64(1));
                    } else {
                        l.remove("offline");
                    }
                });
                nv
            })
            .collect();
        self.install(tops_nv, None, None)
    }

    /// The lowest txg after which a resilvering leaf misses blocks (the
    /// resilver visits only blocks born after it), or None if no leaf is
    /// resilvering.
    pub fn resilver_min_birth(&self) -> Option<u64> {
        let mut m: Option<u64> = None;
        self.root.walk(0, &mut |v, _| {
            if v.stats.resilvering.load(Ordering::Relaxed) {
                let f = v.stats.resilver_from.load(Ordering::Relaxed);
                m = Some(m.map_or(f, |x: u64| x.min(f)));
            }
        });
        m
    }

    /// Install a tree built from `tops` (top-level configs), devices from
    /// the current tree plus `extra`, states carried over by guid.
    fn install(
        &self,
        tops_nv: Vec<NvList>,
        extra: Option<(u64, Arc<dyn BlockDevice>, String)>,
        resilver: Option<u64>,
    ) -> Result<()> {
        self.install_with(tops_nv, extra.into_iter().collect(), resilver)
    }

    /// Before a device operation checks or changes anything: every queued
    /// write lands first ([`crate::writeback`]). Queued writes go to the
    /// tree they were queued on, and a device one of them faults must be
    /// known before redundancy is judged; a leaf taken offline after
    /// them has missed nothing its resilver would not see.
    pub(crate) fn settle_writes(&self) -> Result<()> {
        // Intent-log writes too: they go to the tree they were queued on.
        self.zil_io.drain();
        self.writeback.drain()
    }

    pub(crate) fn install_with(
        &self,
        tops_nv: Vec<NvList>,
        extra: Vec<(u64, Arc<dyn BlockDevice>, String)>,
        resilver: Option<u64>,
    ) -> Result<()> {
        self.settle_writes()?;
        let mut devs = HashMap::new();
        collect(&self.root, &mut devs);
        for (g, d, p) in extra {
            devs.insert(g, (d, p));
        }
        let mut opener = |g: u64, _p: Option<&str>| devs.get(&g).cloned();
        let mut tops = Vec::new();
        for (i, nv) in tops_nv.iter().enumerate() {
            let mut nt = Vdev::from_config(nv, &mut opener)?;
            nt.aux = self.root.children.get(i).and_then(|o| o.aux.clone());
            tops.push(nt);
        }
        let mut root = Vdev::from_config(&self.root.config, &mut opener)?;
        root.children = tops;
        let mut olds: HashMap<u64, &Vdev> = HashMap::new();
        self.root.walk(0, &mut |v, _| {
            olds.insert(v.guid, v);
        });
        root.walk(0, &mut |v, _| {
            if let Some(o) = olds.get(&v.guid) {
                copy_state(o, v);
            }
            if Some(v.guid) == resilver {
                v.stats.resilvering.store(true, Ordering::Relaxed);
                v.stats.resilver_from.store(0, Ordering::Relaxed);
            }
        });
        self.root.replace(root);
        Ok(())
    }

    /// `zpool attach`: make leaf `existing` a mirror with `dev` (a
    /// top-level leaf becomes a two-way mirror; a mirror side gets a
    /// sibling). The new side starts resilvering.
    pub fn attach_leaf(
        &self,
        existing: u64,
        dev: Arc<dyn BlockDevice>,
        path: &str,
        guid: u64,
        txg: u64,
    ) -> Result<()> {
        self.settle_writes()?;
        let (top, _) = self.top_of(existing).ok_or_else(|| {
            Error::not_found(format!("device {existing} in pool '{}'", self.name))
        })?;
        check_leaf_size(top, dev.as_ref(), path)?;
        let new_leaf = |id: u64| {
            let mut nv = NvList::new();
            nv.set("type", NvValue::String("file".into()));
            nv.set("id", NvValue::Uint64(id));
            nv.set("guid", NvValue::Uint64(guid));
            nv.set("path", NvValue::String(path.to_string()));
            nv.set("create_txg", NvValue::Uint64(txg));
            nv
        };
        let mut tops_nv = Vec::new();
        for t in &self.root.children {
            let mut nv = t.config.clone();
            if t.guid == top.guid {
                match t.kind {
                    VdevKind::Leaf(_) if t.guid == existing => {
                        // The leaf keeps its guid and path; the top-level keys
                        // move to a new mirror above it.
                        let mut leaf = NvList::new();
                        copy_keys(
                            &nv,
                            &mut leaf,
                            &[
                                "type",
                                "guid",
                                "path",
                                "devid",
                                "phys_path",
                                "whole_disk",
                                "create_txg",
                                "DTL",
                            ],
                        );
                        leaf.set("id", NvValue::Uint64(0));
                        let mut m = NvList::new();
                        m.set("type", NvValue::String("mirror".into()));
                        copy_keys(&nv, &mut m, TOP_KEYS);
                        m.set("guid", NvValue::Uint64(crate::devices::new_guid()));
                        m.set("children", NvValue::NvListArray(vec![leaf, new_leaf(1)]));
                        nv = m;
                    }
                    VdevKind::Mirror => {
                        let mut kids = nv.get_nvlist_array("children").unwrap_or(&[]).to_vec();
                        let id = kids.len() as u64;
                        kids.push(new_leaf(id));
                        nv.set("children", NvValue::NvListArray(kids));
                    }
                    _ => {
                        return Err(Error::unsupported(
                            "zpool attach",
                            "attaching to a raidz member (only single devices and mirrors)",
                        ))
                    }
                }
            }
            tops_nv.push(nv);
        }
        self.install(tops_nv, Some((guid, dev, path.to_string())), Some(guid))
    }

    /// `zpool detach`: remove leaf `guid` from its mirror; a mirror left
    /// with one side becomes that device again. Refused when no other side
    /// holds every block (the others are missing, offline or resilvering).
    pub fn detach_leaf(&self, guid: u64) -> Result<()> {
        self.settle_writes()?;
        let (top, _) = self
            .top_of(guid)
            .ok_or_else(|| Error::not_found(format!("device {guid} in pool '{}'", self.name)))?;
        if !matches!(top.kind, VdevKind::Mirror) || top.guid == guid {
            return Err(Error::Invalid(
                "only a device in a mirror can be detached".into(),
            ));
        }
        if !can_do_without(top, guid) {
            return Err(Error::Invalid("no valid replicas".into()));
        }
        let mut tops_nv = Vec::new();
        for t in &self.root.children {
            let mut nv = t.config.clone();
            if t.guid == top.guid {
                let kids: Vec<NvList> = nv
                    .get_nvlist_array("children")
                    .unwrap_or(&[])
                    .iter()
                    .filter(|k| k.get_u64("guid") != Some(guid))
                    .cloned()
                    .collect();
                if kids.len() == 1 {
                    let mut leaf = kids[0].clone();
                    copy_keys(&nv, &mut leaf, TOP_KEYS);
                    nv = leaf;
                } else {
                    let kids: Vec<NvList> = kids
                        .into_iter()
                        .enumerate()
                        .map(|(i, mut k)| {
                            k.set("id", NvValue::Uint64(i as u64));
                            k
                        })
                        .collect();
                    nv.set("children", NvValue::NvListArray(kids));
                }
            }
            tops_nv.push(nv);
        }
        self.install(tops_nv, None, None)
    }

    /// `zpool add`: a new top-level vdev built from `nv` (its leaves'
    /// devices in `devs`), after the existing ones.
    pub fn add_top(
        &self,
        nv: NvList,
        devs: Vec<(u64, Arc<dyn BlockDevice>, String)>,
    ) -> Result<()> {
        self.settle_writes()?;
        let mut tops_nv: Vec<NvList> = self
            .root
            .children
            .iter()
            .map(|t| t.config.clone())
            .collect();
        if nv.get_u64("id") != Some(tops_nv.len() as u64) {
            return Err(Error::Invalid("new top-level vdev id out of order".into()));
        }
        tops_nv.push(nv);
        self.install_with(tops_nv, devs, None)
    }

    /// Leaves being resilvered now (by guid).
    pub fn resilvering_leaves(&self) -> Vec<u64> {
        let mut v = Vec::new();
        self.root.walk(0, &mut |l, _| {
            if l.stats.resilvering.load(Ordering::Relaxed) {
                v.push(l.guid);
            }
        });
        v
    }

    /// End a resilver that walked every block for `leaves` (those that
    /// were resilvering when it started): they hold their copies again.
    pub fn resilver_done(&self, leaves: &[u64]) {
        self.root.walk(0, &mut |v, _| {
            if leaves.contains(&v.guid) {
                v.stats.resilvering.store(false, Ordering::Relaxed);
            }
        });
    }
}
