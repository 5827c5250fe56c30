//! Space accounting checked against the blocks.
//!
//! The DSL keeps running totals: every sync adds what was born and removes
//! what died (`sync.rs`), and destroy, rollback, receive and rename move
//! whole amounts between directories. A mistake in any of them is never
//! noticed by the writer itself — the totals just drift, and a clamp to
//! zero would hide a negative drift. This module recomputes, from the
//! blocks, what every DSL dataset and directory must account, and compares.
//! [`PoolWriter::sync`] runs it after the MOS has converged and *before*
//! the uberblock is written: a mismatch fails the sync (nothing of the txg
//! is committed) with a message naming the dataset, the field, the
//! expected and the found value, and the writer refuses every later sync.
//!
//! It walks every block of the pool, so it is on only in debug builds and
//! when `OZFS_CHECK_SPACE=1` (`OZFS_CHECK_SPACE=0` turns it off in debug
//! builds); the test kit sets it for every command and daemon it starts.
//!
//! # What ZFS defines (pool-v23 dead lists)
//!
//! Sizes of a block: `used` = dsize (the DVAs' asize, deflated for RAID-Z),
//! `compressed` = PSIZE, `uncompressed` = LSIZE (PSIZE for metadata).
//!
//! * `born(D)`: the blocks of dataset D's tree born after
//!   `D.prev_snap_txg` (the objset block included): what D added to the
//!   tree of its previous snapshot. Over all datasets (plus the MOS) the
//!   `born` sets partition the pool's blocks, each block exactly once.
//! * `dl(D)`: D's dead list — blocks of the previous snapshot's tree that
//!   D no longer references, each on exactly one dead list (that of the
//!   dataset after the last snapshot holding it).
//! * `referenced(D)` = the whole tree of D = `referenced(prev) − dl(D) +
//!   born(D)`. For a head it is also walked whole, and both must agree
//!   (which checks that its dead list and chain are complete).
//! * `unique(head)` = `born(head)`; `unique(S)` for a snapshot S whose next
//!   is N = the entries of `dl(N)` born after `S.prev_snap_txg` (held by S
//!   alone).
//! * A directory with origin txg `o` (the creation txg of its origin
//!   snapshot; blocks born at or before it are charged to the origin's
//!   directory): HEAD = the head's tree born after `o`; SNAP = Σ over the
//!   dead lists of the directory's datasets of the entries born after `o`;
//!   CHILD = Σ of the children's `used`; `used` = HEAD + SNAP + CHILD +
//!   CHILD_RSRV + REFRSRV (the two reservation terms are not maintained by
//!   ozfs and are taken as stored); compressed and uncompressed likewise
//!   (without the reservations).
//! * `$MOS` = the MOS tree: the MOS's own births and deaths are charged
//!   in the sync pass after the one that made them, and a txg ends only
//!   when a pass changes nothing. Older writers charged them one
//!   txg late and lost the last txg's charge at every close, as zfs-fuse
//!   may lose its last pass's: what `$MOS` lacks when this writer opens
//!   the pool is measured then and carried as the "lag" (not repaired).
//! * The pool: Σ over every block once = the root directory's totals plus
//!   the lag; and the DVAs of every block (plus the pool-v23
//!   `sync_bplist` and the intent-log chains ZFS left, allocated but
//!   charged to nobody) are exactly the metaslabs' allocated ranges (frees
//!   leave `allocated` in the txg that frees them; deferred frees are not
//!   allocated), whose totals are the space maps'
//!   `smp_alloc`. Dead-list headers must equal the sums of their entries.
//!
//! Invariants: read only (reads through the writer's MOS, after the MOS
//! passes, so it sees exactly what the uberblock about to be written
//! names); every chain walk is bounded by the number of datasets.

use crate::destroy::{bplist_len, parse_bplist};
use crate::sync::{PoolWriter, Sums};
use ozfs_dmu::{zap_tx, Dnode, Objset};
use ozfs_format::bytes::{u64_at, HOST_LITTLE_ENDIAN};
use ozfs_format::dnode::{block_dnode_starts, DnodePhys, DNODE_SIZE};
use ozfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use ozfs_format::types::ot;
use ozfs_format::{BlkPtr, Error, Result};
use ozfs_spa::range::RangeSet;
use ozfs_spa::spacemap::SpaceMapHeader;
use ozfs_spa::Pool;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Whether accounting is checked at every sync: `OZFS_CHECK_SPACE=1` on,
/// `OZFS_CHECK_SPACE=0` off, unset: on in debug builds.
pub fn enabled() -> bool {
    match std::env::var("OZFS_CHECK_SPACE") {
        Ok(v) => v.trim() != "0" && !v.trim().is_empty(),
        Err(_) => cfg!(debug_assertions),
    }
}

/// Used, compressed and uncompressed bytes of a set of blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tot {
    pub used: u64,
    pub comp: u64,
    pub uncomp: u64,
}

impl Tot {
    /// A block's share, as OpenZFS's `dsl_dataset_block_born` counts it:
    /// an embedded block uses no space and no compressed bytes, but one
    /// holding file data counts its uncompressed size.
    fn add(&mut self, pool: &Pool, bp: &BlkPtr) {
        if bp.is_hole() {
            return;
        }
        self.used += pool.dsize(bp, true);
        self.comp += bp.charged_psize();
        self.uncomp += bp.charged_ucsize();
    }
    fn plus(self, o: Tot) -> Tot {
        Tot {
            used: self.used + o.used,
            comp: self.comp + o.comp,
            uncomp: self.uncomp + o.uncomp,
        }
    }
    /// `self − o`, or None below zero.
    fn minus(self, o: Tot) -> Option<Tot> {
        Some(Tot {
            used: self.used.checked_sub(o.used)?,
            comp: self.comp.checked_sub(o.comp)?,
            uncomp: self.uncomp.checked_sub(o.uncomp)?,
        })
    }
    /// `self − s` for a signed amount (None below zero).
    fn minus_signed(self, s: &Sums) -> Option<Tot> {
        let f = |x: u64, d: i64| u64::try_from(x as i128 - d as i128).ok();
        Some(Tot {
            used: f(self.used, s.dsize)?,
            comp: f(self.comp, s.psize)?,
            uncomp: f(self.uncomp, s.ucsize)?,
        })
    }
}

/// Visit every BP of the objset at `bp` born after `since`, the objset
/// block included: the meta-dnode's tree and the user/group used trees;
/// for each dnode block born after `since`, its dnodes' trees and spill
/// blocks (a dnode block born earlier holds only dnodes — hence trees —
/// that have not changed since). Holes are skipped; embedded BPs are
/// visited (they count in the compressed and uncompressed sums).
pub fn walk_objset(
    pool: &Arc<Pool>,
    bp: &BlkPtr,
    since: u64,
    f: &mut dyn FnMut(&BlkPtr) -> Result<()>,
) -> Result<()> {
    if bp.is_hole() || bp.birth() <= since {
        return Ok(());
    }
    bp.validate("objset BP")?;
    let os = Objset::open(pool.clone(), bp)?;
    f(bp)?;
    walk_objset_body(&os, since, f)
}

/// [`walk_objset`] without the objset block.
fn walk_objset_body(
    os: &Objset,
    since: u64,
    f: &mut dyn FnMut(&BlkPtr) -> Result<()>,
) -> Result<()> {
    let mut take = |bp: &BlkPtr| -> Result<()> {
        if bp.is_hole() {
            Ok(())
        } else {
            f(bp)
        }
    };
    let meta = os.meta_dnode();
    let mut dnode_blocks = Vec::new();
    os.walk_tree_since(&meta, since, &mut |level, blkid, bp| {
        if level == 0 && !bp.is_embedded() {
            dnode_blocks.push((blkid, *bp));
        }
        take(bp)
    })?;
    for special in [
        &os.phys.userused_dnode,
        &os.phys.groupused_dnode,
        &os.phys.projectused_dnode,
    ] {
        if special.object_type != 0 {
            let dn = Dnode {
                object: u64::MAX,
                phys: special.clone(),
                swap: meta.swap,
            };
            os.walk_tree_since(&dn, since, &mut |_, _, bp| take(bp))?;
        }
    }
    let per = meta.phys.datablksz() / DNODE_SIZE as u64;
    for (blkid, bp) in dnode_blocks {
        let block = os
            .pool
            .read_bp_cached(&bp, false)
            .map_err(|e| e.context(&format!("dnode block {blkid}")))?;
        let swap = bp.little_endian() != HOST_LITTLE_ENDIAN;
        // Dnodes from the block's start, each stepping over its extra
        // slots (a large dnode's later slots are its own bytes).
        for (i, _) in block_dnode_starts(&block) {
            let obj = blkid.saturating_mul(per).saturating_add(i as u64);
            if obj == 0 {
                continue;
            }
            let slot = &block[i * DNODE_SIZE..];
            let phys =
                DnodePhys::parse(slot, swap).map_err(|e| e.context(&format!("object {obj}")))?;
            let spill = phys.spill;
            let dn = Dnode {
                object: obj,
                phys,
                swap,
            };
            os.walk_tree_since(&dn, since, &mut |_, _, bp| take(bp))
                .map_err(|e| e.context(&format!("object {obj}")))?;
            if let Some(sp) = &spill {
                if sp.birth() > since {
                    take(sp)?;
                }
            }
        }
    }
    Ok(())
}

/// Σ of every block of the MOS tree at `mos` (the objset block included).
pub(crate) fn mos_tree(pool: &Arc<Pool>, mos: &Objset) -> Result<Tot> {
    let mut t = Tot::default();
    if mos.bp.is_hole() {
        return Ok(t);
    }
    t.add(pool, &mos.bp);
    walk_objset_body(mos, 0, &mut |bp| {
        t.add(pool, bp);
        Ok(())
    })?;
    Ok(t)
}

/// What the `$MOS` directory lacks against the MOS tree when a writer
/// opens the pool (the last txg's MOS charge, never applied).
pub(crate) fn mos_lag(w: &PoolWriter) -> Result<Sums> {
    let tree = mos_tree(&w.pool, &w.mos.os)?;
    let root = w.dir(w.root_dir_obj)?;
    let mos_dir = match zap_tx::lookup(&w.mos, root.child_dir_zapobj, b"$MOS")? {
        Some(e) => e.as_u64(),
        None => None,
    };
    let charged = match mos_dir {
        Some(d) => {
            let d = w.dir(d)?;
            (d.used_bytes, d.compressed_bytes, d.uncompressed_bytes)
        }
        None => (0, 0, 0),
    };
    Ok(Sums {
        dsize: tree.used as i64 - charged.0 as i64,
        psize: tree.comp as i64 - charged.1 as i64,
        ucsize: tree.uncomp as i64 - charged.2 as i64,
    })
}

/// `zil_trailer_t` of pool-v23 log blocks (ZILOG checksum): pad, next
/// block's BP, bytes used, embedded checksum — the block's last 184 bytes.
const ZIL_TRAILER_SIZE: usize = 8 + 128 + 8 + 40;

/// Whether the intent log whose `zil_header_t` is `header` may hold
/// records not yet replayed: OpenZFS claimed it (`ZIL_REPLAY_NEEDED` in
/// `zh_flags`), or its first block was written — it verifies against its
/// BP (fletcher2 trailer at the end for `zilog`, fletcher4 over the used
/// bytes with the `zil_chain_t` at the start for `zilog2`). A cleanly
/// closed log names a first block that was allocated but never written.
pub fn zil_has_records(pool: &Pool, header: &[u8], swap: bool) -> Result<bool> {
    const ZIL_REPLAY_NEEDED: u64 = 1;
    if u64_at(header, 152, swap, "intent log header").unwrap_or(0) & ZIL_REPLAY_NEEDED != 0 {
        return Ok(true);
    }
    let Some(raw) = header.get(16..16 + 128) else {
        return Ok(false);
    };
    let bp = BlkPtr::from_bytes(raw, swap)?;
    if bp.is_hole() || bp.is_embedded() || bp.validate("intent log block").is_err() {
        return Ok(false);
    }
    let Some(d) = bp.dvas().into_iter().find(|d| !d.is_empty() && !d.gang) else {
        return Ok(false);
    };
    let Some(top) = pool.root.children.get(d.vdev as usize) else {
        return Ok(false);
    };
    let want = bp.cksum().0;
    let v2 = bp.checksum() == ozfs_format::types::cksum::ZILOG2;
    // The block verifies against its BP (it was written).
    let verifies = |b: &[u8]| -> bool {
        if b.len() < ZIL_TRAILER_SIZE {
            return false;
        }
        if v2 {
            let Ok(eck) = ozfs_format::label::parse_eck(&b[..ZIL_TRAILER_SIZE]) else {
                return false;
            };
            let Ok(n) = u64_at(b, 136, eck.byteswapped, "zil_chain_t") else {
                return false;
            };
            let Some(size) = n
                .div_ceil(4096)
                .checked_mul(4096)
                .and_then(|x| usize::try_from(x).ok())
            else {
                return false;
            };
            let Some(used) = b.get(..size.max(ZIL_TRAILER_SIZE)) else {
                return false;
            };
            let mut v = used.to_vec();
            for (i, w) in want.iter().enumerate() {
                let w = if eck.byteswapped { w.swap_bytes() } else { *w };
                v[152 + 8 * i..160 + 8 * i].copy_from_slice(&w.to_ne_bytes());
            }
            ozfs_codec::checksum::fletcher4(&v, eck.byteswapped).0 == eck.cksum
        } else {
            let Ok(eck) = ozfs_format::label::parse_eck(b) else {
                return false;
            };
            let v = ozfs_format::label::with_verifier(b, want, eck.byteswapped);
            ozfs_codec::checksum::fletcher2(&v, eck.byteswapped).0 == eck.cksum
        }
    };
    // A first block that was written (it verifies) is taken as holding
    // records: an empty one may still name a next block that has some.
    Ok(top
        .read_block_born(
            d.offset,
            bp.psize(),
            bp.phys_birth(),
            &verifies,
            &Default::default(),
        )
        .is_ok())
}

/// Mismatches found so far (the first ones are reported).
struct Findings {
    txg: u64,
    list: Vec<String>,
}

impl Findings {
    fn push(&mut self, s: String) {
        self.list.push(s);
    }
    fn cmp(&mut self, what: &str, field: &str, expected: u64, found: u64) {
        if expected != found {
            self.push(format!(
                "{what}: {field} expected {expected}, found {found} (off by {})",
                found as i128 - expected as i128
            ));
        }
    }
    fn cmp_tot(&mut self, what: &str, fields: [&str; 3], expected: Tot, found: Tot) {
        self.cmp(what, fields[0], expected.used, found.used);
        self.cmp(what, fields[1], expected.comp, found.comp);
        self.cmp(what, fields[2], expected.uncomp, found.uncomp);
    }
    fn into_result(self) -> Result<()> {
        if self.list.is_empty() {
            return Ok(());
        }
        let n = self.list.len();
        let mut msg = format!(
            "space accounting check failed in txg {} (the txg is not committed; OZFS_CHECK_SPACE): {n} mismatch{}",
            self.txg,
            if n == 1 { "" } else { "es" }
        );
        for s in self.list.iter().take(40) {
            msg.push_str("\n  ");
            msg.push_str(s);
        }
        if n > 40 {
            msg.push_str(&format!("\n  ... and {} more", n - 40));
        }
        Err(Error::Invalid(msg))
    }
}

/// The DVAs of every block visited once, and their total.
#[derive(Default)]
struct BlockSet {
    refs: BTreeMap<u64, RangeSet>,
    /// Allocated, charged to nobody and possibly named twice: intent-log
    /// blocks and the pool-v23 `sync_bplist` (not leaks).
    uncharged: BTreeMap<u64, RangeSet>,
    total: Tot,
    doubly: Vec<String>,
    gang: bool,
    /// The block reference tables (block cloning) as this txg leaves
    /// them: a cloned block is named once more than its entry's count.
    brt: Option<ozfs_spa::brt::Brt>,
    /// References met beyond the first, by (vdev, offset) of the first DVA.
    cloned: BTreeMap<(u64, u64), u64>,
    /// The pool, where it has removed vdevs: a DVA on one is marked where
    /// its removal mapping copied it.
    remapped: Option<Arc<Pool>>,
}

impl BlockSet {
    fn uncharged(&mut self, bp: &BlkPtr) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        for d in bp.dvas().iter().filter(|d| !d.is_empty()) {
            let set = self.uncharged.entry(d.vdev).or_default();
            for (s, l) in set.gaps(d.offset, d.asize) {
                set.add(s, l).map_err(|e| Error::Invalid(e.to_string()))?;
            }
        }
        Ok(())
    }
    fn visit(&mut self, pool: &Pool, bp: &BlkPtr) -> Result<()> {
        self.total.add(pool, bp);
        self.mark(bp)
    }
    /// Record a block's DVAs (once; a DVA met twice is reported).
    fn mark(&mut self, bp: &BlkPtr) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        let first = bp.dvas().first().map(|d| (d.vdev, d.offset));
        let cloned = first.is_some_and(|(v, o)| {
            self.brt
                .as_ref()
                .and_then(|b| b.vdevs.get(&v))
                .is_some_and(|t| t.entries.contains_key(&o))
        });
        for (i, d) in bp.dvas().iter().enumerate().filter(|(_, d)| !d.is_empty()) {
            if d.gang {
                self.gang = true;
            }
            // Where the DVA's bytes are (through a removal mapping).
            let places = match &self.remapped {
                Some(p) if p.is_indirect(d.vdev) => p.resolve_dva(d.vdev, d.offset, d.asize)?,
                _ => vec![(d.vdev, d.offset, d.asize)],
            };
            for (piece, (vdev, offset, asize)) in places.into_iter().enumerate() {
                let set = self.refs.entry(vdev).or_default();
                if bp.dedup() && set.contains(offset, asize) {
                    continue;
                }
                if cloned && set.contains(offset, asize) {
                    // One reference, however many pieces it maps to.
                    if let (0, 0, Some(k)) = (i, piece, first) {
                        *self.cloned.entry(k).or_default() += 1;
                    }
                    continue;
                }
                let inv = |e: Error| Error::Invalid(e.to_string());
                if set.overlaps(offset, asize) {
                    if self.doubly.len() < 10 {
                        self.doubly.push(format!(
                            "block <{}:{:x}:{:x}> (birth {}) is referenced twice",
                            d.vdev,
                            d.offset,
                            d.asize,
                            bp.birth()
                        ));
                    }
                    for (s, l) in set.gaps(offset, asize) {
                        set.add(s, l).map_err(inv)?;
                    }
                } else {
                    set.add(offset, asize).map_err(inv)?;
                }
            }
        }
        Ok(())
    }
}

/// One dataset as the blocks say.
#[derive(Default, Clone)]
struct DsSeen {
    phys: DslDatasetPhys,
    name: String,
    /// Blocks born after `prev_snap_txg`.
    born: Tot,
    /// Heads: the whole tree, and its part born after the directory's origin.
    whole: Option<Tot>,
    head_charged: Tot,
    /// Dead-list entries.
    dead: Vec<BlkPtr>,
}

impl PoolWriter {
    /// Compare the DSL's space accounting with the blocks (see the module
    /// comment); `lag` is what `$MOS` lacked when the writer opened the pool.
    pub(crate) fn check_space(&self, lag: &Sums) -> Result<()> {
        let pool = self.pool.clone();
        let mut f = Findings {
            txg: self.txg,
            list: Vec::new(),
        };
        let mut blocks = BlockSet {
            brt: pool.brt.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            remapped: (!pool.indirect_vdevs().is_empty()).then(|| pool.clone()),
            ..Default::default()
        };
        // The MOS.
        let mos_os = &self.mos.os;
        let mut mos_tot = Tot::default();
        if !mos_os.bp.is_hole() {
            mos_tot.add(&pool, &mos_os.bp);
            blocks.mark(&mos_os.bp)?;
            walk_objset_body(mos_os, 0, &mut |bp| {
                mos_tot.add(&pool, bp);
                blocks.mark(bp)
            })
            .map_err(|e| e.context("space check: MOS"))?;
        }
        // Every DSL directory and dataset object of the MOS.
        let mut dirs: BTreeMap<u64, DslDirPhys> = BTreeMap::new();
        let mut datasets: BTreeMap<u64, DsSeen> = BTreeMap::new();
        for obj in 1..mos_os.max_object() {
            let dn = match self.mos.dnode(obj) {
                Ok(d) => d,
                Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            // By bonus type: extensible directories and datasets are ZAPs.
            match dn.phys.bonustype {
                ot::DSL_DIR => {
                    let d = DslDirPhys::parse(&dn.phys.bonus, dn.swap)
                        .map_err(|e| e.context(&format!("MOS object {obj}")))?;
                    dirs.insert(obj, d);
                }
                ot::DSL_DATASET => {
                    let d = DslDatasetPhys::parse(&dn.phys.bonus, dn.swap)
                        .map_err(|e| e.context(&format!("MOS object {obj}")))?;
                    datasets.insert(
                        obj,
                        DsSeen {
                            phys: d,
                            name: format!("dataset object {obj}"),
                            ..Default::default()
                        },
                    );
                }
                _ => {}
            }
        }
        // Names and the hierarchy, from the root through the child maps.
        let mut names: BTreeMap<u64, String> = BTreeMap::new();
        let mut children: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut mos_dir = None;
        // `$FREE` (pool version 26 on): charged for frees not yet done,
        // which ozfs never defers, so it has no dataset and stays empty.
        let mut free_dir = None;
        names.insert(self.root_dir_obj, self.pool.name.clone());
        let mut todo = vec![self.root_dir_obj];
        while let Some(d) = todo.pop() {
            let Some(phys) = dirs.get(&d) else {
                f.push(format!("DSL directory object {d} is not a DSL directory"));
                continue;
            };
            let parent_name = names.get(&d).cloned().unwrap_or_default();
            let mut kids = Vec::new();
            if phys.child_dir_zapobj != 0 {
                for e in zap_tx::list(&self.mos, phys.child_dir_zapobj)? {
                    let Some(c) = e.as_u64() else {
                        f.push(format!("{parent_name}: a child map entry is not a number"));
                        continue;
                    };
                    let leaf = String::from_utf8_lossy(&e.name).to_string();
                    let name = format!("{parent_name}/{leaf}");
                    if names.contains_key(&c) {
                        f.push(format!("{name}: DSL directory {c} is listed twice"));
                        continue;
                    }
                    if d == self.root_dir_obj && leaf == "$MOS" {
                        mos_dir = Some(c);
                    }
                    if d == self.root_dir_obj && leaf == "$FREE" {
                        free_dir = Some(c);
                    }
                    match dirs.get(&c) {
                        Some(cp) if cp.parent_obj == d => {}
                        Some(cp) => f.push(format!(
                            "{name}: parent_obj {} is not its parent {d}",
                            cp.parent_obj
                        )),
                        None => {}
                    }
                    names.insert(c, name);
                    kids.push(c);
                    todo.push(c);
                }
            }
            children.insert(d, kids);
        }
        for d in dirs.keys() {
            if !names.contains_key(d) {
                f.push(format!(
                    "DSL directory object {d} is in no child map (unreachable)"
                ));
            }
        }
        // Each directory's chain: the head, then its snapshots newest first.
        let mut chains: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut in_chain: BTreeSet<u64> = BTreeSet::new();
        for (&d, dp) in &dirs {
            let dname = names
                .get(&d)
                .cloned()
                .unwrap_or_else(|| format!("DSL directory {d}"));
            if dp.head_dataset_obj == 0 {
                if Some(d) != mos_dir && Some(d) != free_dir {
                    f.push(format!("{dname}: no head dataset"));
                }
                continue;
            }
            let mut chain = Vec::new();
            let mut cur = dp.head_dataset_obj;
            let mut snapnames: BTreeMap<u64, String> = BTreeMap::new();
            if let Some(h) = datasets.get(&cur) {
                if h.phys.snapnames_zapobj != 0 {
                    for e in zap_tx::list(&self.mos, h.phys.snapnames_zapobj)? {
                        if let Some(v) = e.as_u64() {
                            snapnames.insert(v, String::from_utf8_lossy(&e.name).to_string());
                        }
                    }
                }
            }
            while cur != 0 && chain.len() <= datasets.len() {
                let Some(ds) = datasets.get_mut(&cur) else {
                    f.push(format!(
                        "{dname}: dataset object {cur} of its chain is not a dataset"
                    ));
                    break;
                };
                if ds.phys.dir_obj != d {
                    break;
                }
                if !in_chain.insert(cur) {
                    f.push(format!("{dname}: dataset object {cur} is in two chains"));
                    break;
                }
                ds.name = if chain.is_empty() {
                    dname.clone()
                } else {
                    match snapnames.get(&cur) {
                        Some(s) => format!("{dname}@{s}"),
                        None => format!("{dname}@<snapshot object {cur}>"),
                    }
                };
                chain.push(cur);
                cur = ds.phys.prev_snap_obj;
            }
            chains.insert(d, chain);
        }
        for (obj, ds) in &datasets {
            if !in_chain.contains(obj) {
                f.push(format!(
                    "dataset object {obj} (directory {}) is in no directory's snapshot chain",
                    ds.phys.dir_obj
                ));
            }
        }
        let origin_txg = |dp: &DslDirPhys| -> u64 {
            if dp.origin_obj == 0 {
                0
            } else {
                datasets
                    .get(&dp.origin_obj)
                    .map(|o| o.phys.creation_txg)
                    .unwrap_or(0)
            }
        };
        let origins: BTreeMap<u64, u64> = dirs.iter().map(|(&d, dp)| (d, origin_txg(dp))).collect();
        // Walk every dataset: born blocks (once in the pool), heads whole.
        let heads: BTreeSet<u64> = dirs.values().map(|d| d.head_dataset_obj).collect();
        let objs: Vec<u64> = datasets.keys().copied().collect();
        let mut empty_refs = 0u64;
        for obj in objs {
            let Some(ds) = datasets.get(&obj).cloned() else {
                continue;
            };
            let p = ds.phys;
            let mut born = Tot::default();
            let mut whole = Tot::default();
            let mut charged = Tot::default();
            let o_txg = origins.get(&p.dir_obj).copied().unwrap_or(0);
            let is_head = heads.contains(&obj);
            let since = if is_head { 0 } else { p.prev_snap_txg };
            walk_objset(&pool, &p.bp, since, &mut |bp| {
                if bp.birth() > p.prev_snap_txg {
                    born.add(&pool, bp);
                    blocks.visit(&pool, bp)?;
                }
                whole.add(&pool, bp);
                if bp.birth() > o_txg {
                    charged.add(&pool, bp);
                }
                Ok(())
            })
            .map_err(|e| e.context(&format!("space check: {}", ds.name)))?;
            let dead = if p.deadlist_obj != 0 {
                let (problems, empties) = crate::deadlist::check_structure(self, p.deadlist_obj)?;
                for pr in problems {
                    f.push(format!("{} dead list: {pr}", ds.name));
                }
                empty_refs += empties;
                let entries = crate::deadlist::deadlist_bps(self, p.deadlist_obj)?;
                // The header's sums (an old bplist header too short to
                // have them is not checked).
                let mut dt = Tot::default();
                for bp in &entries {
                    dt.add(&pool, bp);
                }
                let dn = self.mos.dnode(p.deadlist_obj)?;
                let new_format = crate::deadlist::is_new_format(self, p.deadlist_obj)?;
                if new_format || dn.phys.bonus.len() >= 32 {
                    let (u, c, uc) = crate::deadlist::deadlist_sums(self, p.deadlist_obj)?;
                    f.cmp_tot(
                        &format!("{} dead list (object {})", ds.name, p.deadlist_obj),
                        ["bytes", "comp", "uncomp"],
                        dt,
                        Tot {
                            used: u,
                            comp: c,
                            uncomp: uc,
                        },
                    );
                }
                entries
            } else {
                Vec::new()
            };
            if let Some(e) = datasets.get_mut(&obj) {
                e.born = born;
                e.dead = dead;
                if is_head {
                    e.whole = Some(whole);
                    e.head_charged = charged;
                }
            }
        }
        // referenced(D) = referenced(prev) − dl(D) + born(D), oldest first.
        let mut refd: BTreeMap<u64, Tot> = BTreeMap::new();
        for &start in datasets.keys() {
            let mut path = Vec::new();
            let mut cur = start;
            while cur != 0 && !refd.contains_key(&cur) && path.len() <= datasets.len() {
                path.push(cur);
                cur = datasets
                    .get(&cur)
                    .map(|d| d.phys.prev_snap_obj)
                    .unwrap_or(0);
            }
            if path.len() > datasets.len() {
                f.push(format!(
                    "dataset object {start}: its prev_snap_obj chain loops"
                ));
                continue;
            }
            for &obj in path.iter().rev() {
                let Some(ds) = datasets.get(&obj) else {
                    continue;
                };
                let prev = refd
                    .get(&ds.phys.prev_snap_obj)
                    .copied()
                    .unwrap_or_default();
                let mut dl = Tot::default();
                for bp in &ds.dead {
                    dl.add(&pool, bp);
                }
                let r = match prev.minus(dl) {
                    Some(r) => r.plus(ds.born),
                    None => {
                        f.push(format!(
                            "{}: its dead list ({} bytes) holds more than its previous snapshot references ({})",
                            ds.name, dl.used, prev.used
                        ));
                        ds.born
                    }
                };
                refd.insert(obj, r);
            }
        }
        // The shared empty bpobj: counted once per dead list entry naming
        // it, named in the MOS exactly while counted.
        let (e_obj, e_count) = crate::deadlist::empty_bpobj_state(self)?;
        let count = e_count.unwrap_or(0);
        if count != empty_refs || e_obj.is_some() != (count > 0) {
            f.push(format!(
                "empty bpobj {e_obj:?}: feature count {count}, named by {empty_refs} dead list entries"
            ));
        }
        // Per dataset.
        const REF: [&str; 3] = ["referenced_bytes", "compressed_bytes", "uncompressed_bytes"];
        for (obj, ds) in &datasets {
            let p = &ds.phys;
            let found = Tot {
                used: p.referenced_bytes,
                comp: p.compressed_bytes,
                uncomp: p.uncompressed_bytes,
            };
            if p.prev_snap_obj != 0 {
                match datasets.get(&p.prev_snap_obj) {
                    Some(prev) if prev.phys.creation_txg == p.prev_snap_txg => {}
                    Some(prev) => f.push(format!(
                        "{}: prev_snap_txg {} is not its previous snapshot's creation txg {}",
                        ds.name, p.prev_snap_txg, prev.phys.creation_txg
                    )),
                    None => f.push(format!(
                        "{}: prev_snap_obj {} is not a dataset",
                        ds.name, p.prev_snap_obj
                    )),
                }
            }
            let chained = refd.get(obj).copied().unwrap_or_default();
            if let Some(whole) = ds.whole {
                f.cmp_tot(&ds.name, REF, whole, found);
                if whole != chained {
                    f.push(format!(
                        "{}: its tree ({} bytes) is not its previous snapshot's ({} bytes) minus its dead list plus its new blocks ({} bytes): a dead list is incomplete",
                        ds.name,
                        whole.used,
                        refd.get(&p.prev_snap_obj).map(|t| t.used).unwrap_or(0),
                        chained.used
                    ));
                }
                f.cmp(&ds.name, "unique_bytes", ds.born.used, p.unique_bytes);
            } else {
                f.cmp_tot(&ds.name, REF, chained, found);
                match datasets.get(&p.next_snap_obj) {
                    Some(next) if next.phys.prev_snap_obj == *obj => {
                        let uniq: u64 = next
                            .dead
                            .iter()
                            .filter(|b| b.birth() > p.prev_snap_txg)
                            .map(|b| pool.dsize(b, true))
                            .sum();
                        f.cmp(&ds.name, "unique_bytes", uniq, p.unique_bytes);
                    }
                    _ => f.push(format!(
                        "{}: next_snap_obj {} does not name it as its previous snapshot",
                        ds.name, p.next_snap_obj
                    )),
                }
            }
        }
        // Per directory.
        for (&d, dp) in &dirs {
            let name = names
                .get(&d)
                .cloned()
                .unwrap_or_else(|| format!("DSL directory {d}"));
            let b = &dp.used_breakdown;
            let found = Tot {
                used: dp.used_bytes,
                comp: dp.compressed_bytes,
                uncomp: dp.uncompressed_bytes,
            };
            let (head, snap) = if Some(d) == mos_dir {
                let own = mos_tot.minus_signed(lag).unwrap_or_default();
                (own, Tot::default())
            } else {
                let o_txg = origins.get(&d).copied().unwrap_or(0);
                let head = datasets
                    .get(&dp.head_dataset_obj)
                    .map(|h| h.head_charged)
                    .unwrap_or_default();
                let mut snap = Tot::default();
                for obj in chains.get(&d).into_iter().flatten() {
                    if let Some(ds) = datasets.get(obj) {
                        for bp in ds.dead.iter().filter(|b| b.birth() > o_txg) {
                            snap.add(&pool, bp);
                        }
                    }
                }
                (head, snap)
            };
            let mut child = Tot::default();
            for c in children.get(&d).into_iter().flatten() {
                if let Some(cp) = dirs.get(c) {
                    child = child.plus(Tot {
                        used: cp.used_bytes,
                        comp: cp.compressed_bytes,
                        uncomp: cp.uncompressed_bytes,
                    });
                }
            }
            f.cmp(&name, "usedbydataset (HEAD)", head.used, b[0]);
            f.cmp(&name, "usedbysnapshots (SNAP)", snap.used, b[1]);
            f.cmp(&name, "usedbychildren (CHILD)", child.used, b[2]);
            let expected = head.plus(snap).plus(child);
            f.cmp_tot(
                &name,
                [
                    "used_bytes (without reservations)",
                    "compressed_bytes",
                    "uncompressed_bytes",
                ],
                expected,
                Tot {
                    used: dp.used_bytes.wrapping_sub(b[3]).wrapping_sub(b[4]),
                    ..found
                },
            );
        }
        // The pool.
        let root = dirs.get(&self.root_dir_obj).copied().unwrap_or_default();
        let charged = Tot {
            used: root.used_bytes,
            comp: root.compressed_bytes,
            uncomp: root.uncompressed_bytes,
        };
        let all = mos_tot.plus(blocks.total);
        // Reservations are charged beyond the blocks: the pool's used
        // bytes are compared only where there are none.
        let reserved = dirs
            .values()
            .any(|d| d.used_breakdown[3] != 0 || d.used_breakdown[4] != 0);
        if let Some(exp) = all.minus_signed(lag) {
            let what = format!("{} (every block of the pool)", self.pool.name);
            if !reserved {
                f.cmp(&what, "used", exp.used, charged.used);
            }
            f.cmp(&what, "compressed", exp.comp, charged.comp);
            f.cmp(&what, "uncompressed", exp.uncomp, charged.uncomp);
        }
        for s in blocks.doubly.drain(..) {
            f.push(s);
        }
        // Each cloned block is named as many times as its entry says.
        if let Some(b) = &blocks.brt {
            for (vdev, t) in &b.vdevs {
                for (off, count) in &t.entries {
                    let seen = blocks.cloned.get(&(*vdev, *off)).copied().unwrap_or(0);
                    if seen != *count {
                        f.push(format!(
                            "cloned block <{vdev}:{off:x}>: {} references, its block reference \
                             table entry says {}",
                            seen + 1,
                            count + 1
                        ));
                    }
                }
            }
        }
        // Frees pool version 23 deferred to the next txg: still allocated.
        if let Some(obj) = zap_tx::lookup(&self.mos, 1, b"sync_bplist")?.and_then(|e| e.as_u64()) {
            let dn = self.mos.dnode(obj)?;
            let n = bplist_len(&self.pool, obj, &dn)?;
            for bp in parse_bplist(&self.mos.read(obj, 0, (n * 128) as usize)?, dn.swap)? {
                blocks.uncharged(&bp)?;
            }
        }
        // Intent logs (this writer's, and those ZFS left): the blocks
        // allocated by this txg or before.
        let mut seen_log: std::collections::BTreeSet<(u64, u64)> = Default::default();
        for (ds_obj, ds) in datasets.iter() {
            if ds.phys.bp.is_hole() || ds.phys.next_snap_obj != 0 {
                continue;
            }
            // This writer's own logs from memory: reading a live chain
            // would charge a mirror side that missed a log block (written
            // before it was attached, never resilvered) with checksum
            // errors.
            let bps = match self.zil_known_blocks(*ds_obj) {
                Some(v) => v,
                None => {
                    let os = Objset::open(pool.clone(), &ds.phys.bp)?;
                    crate::zil::allocated_blocks(&pool, &os.phys.zil_header, os.swap, self.txg)?
                }
            };
            for bp in bps {
                let d = bp.dvas()[0];
                if seen_log.insert((d.vdev, d.offset)) {
                    blocks.uncharged(&bp)?;
                }
            }
        }
        if !blocks.gang {
            self.compare_allocated(&blocks, &mut f)?;
        }
        f.into_result()
    }

    /// The blocks' DVAs against the metaslabs' allocated ranges and the
    /// space maps' `smp_alloc`.
    fn compare_allocated(&self, blocks: &BlockSet, f: &mut Findings) -> Result<()> {
        let refs = &blocks.refs;
        let empty = RangeSet::new();
        let mut shown = 0;
        for g in &self.alloc.groups {
            let mine = refs.get(&g.vdev).unwrap_or(&empty);
            let other = blocks.uncharged.get(&g.vdev).unwrap_or(&empty);
            for ms in &g.metaslabs {
                for (s, l) in ms.allocated.iter() {
                    let unreferenced = mine
                        .gaps(s, l)
                        .into_iter()
                        .flat_map(|(gs, gl)| other.gaps(gs, gl));
                    for (gs, gl) in unreferenced {
                        if shown < 10 {
                            f.push(format!(
                                "vdev {} [{gs:#x}, +{gl:#x}) is allocated but no block references it (leaked)",
                                g.vdev
                            ));
                        }
                        shown += 1;
                    }
                }
                if ms.sm_object != 0 {
                    let dn = self.mos.dnode(ms.sm_object)?;
                    let hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)?;
                    if hdr.alloc != ms.allocated.total() as i64 {
                        f.push(format!(
                            "vdev {} metaslab {}: space map object {} smp_alloc {} but {} allocated",
                            g.vdev,
                            ms.id,
                            ms.sm_object,
                            hdr.alloc,
                            ms.allocated.total()
                        ));
                    }
                }
            }
            let mut alloc = RangeSet::new();
            for ms in &g.metaslabs {
                alloc
                    .add_all(&ms.allocated)
                    .map_err(|e| Error::Invalid(e.to_string()))?;
            }
            for (s, l) in mine.iter() {
                for (gs, gl) in alloc.gaps(s, l) {
                    if shown < 10 {
                        f.push(format!(
                            "vdev {} [{gs:#x}, +{gl:#x}) is referenced by a block but not allocated",
                            g.vdev
                        ));
                    }
                    shown += 1;
                }
            }
        }
        for v in refs.keys() {
            if !self.alloc.groups.iter().any(|g| g.vdev == *v) {
                f.push(format!("blocks on vdev {v}, which has no metaslabs"));
            }
        }
        if shown > 10 {
            f.push(format!("... {} allocation mismatches in all", shown));
        }
        Ok(())
    }
}
