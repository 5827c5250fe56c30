//! A pool's health as data: what `zpool status`, `zpool import` (listing)
//! and `zpool list` show.
//!
//! A pool the daemon holds is read from its devices like any other, with
//! the daemon's live device states and error counters laid over it (they
//! live in the daemon's memory until it saves them).

use crate::error::{Error, Result};
use crate::host::open_imported;
use ozfs_spa::import::FoundPool;
use ozfs_spa::{Pool, PoolOptions};
use ozfs_vdev::{Vdev, VdevKind, VdevState};
use std::path::PathBuf;
use std::sync::Arc;

/// One vdev of the tree, as `zpool status` lists it.
#[derive(Debug, Clone)]
pub struct VdevNode {
    pub name: String,
    /// ONLINE, DEGRADED, FAULTED, OFFLINE, UNAVAIL, REMOVED.
    pub state: String,
    pub read: u64,
    pub write: u64,
    pub cksum: u64,
    /// A leaf whose resilver has not completed.
    pub resilvering: bool,
    /// OpenZFS's vdev type: root, mirror, raidz, file, disk, spare, hole.
    pub vdev_type: String,
    pub guid: u64,
    /// The device path of a leaf.
    pub path: Option<String>,
    /// A top-level vdev's allocation class ("special", "dedup", "logs");
    /// None for the normal class.
    pub class: Option<String>,
    pub children: Vec<VdevNode>,
}

impl VdevNode {
    fn of(v: &Vdev, name: &str) -> VdevNode {
        let (read, write, cksum) = v.stats.get();
        VdevNode {
            name: name.to_string(),
            state: v.state().as_str().to_string(),
            read,
            write,
            cksum,
            resilvering: matches!(v.kind, VdevKind::Leaf(_))
                && v.stats
                    .resilvering
                    .load(std::sync::atomic::Ordering::Relaxed),
            vdev_type: match v.kind {
                VdevKind::Root => "root".to_string(),
                VdevKind::Raidz { .. } => "raidz".to_string(),
                _ => v.type_name.clone(),
            },
            guid: v.guid,
            path: v.path.clone(),
            class: None,
            children: v
                .children
                .iter()
                .map(|c| VdevNode::of(c, &c.display_name()))
                .collect(),
        }
    }

    /// Errors of this vdev and everything below it.
    pub fn errors(&self) -> u64 {
        self.read
            + self.write
            + self.cksum
            + self.children.iter().map(VdevNode::errors).sum::<u64>()
    }
}

/// A pool's configuration and health.
#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub state: String,
    /// The root of the tree, named after the pool.
    pub tree: VdevNode,
    /// Hot spares: (path, state and note as `zpool status` prints them).
    pub spares: Vec<(String, String)>,
}

/// The spares of a pool as `zpool status` lists them.
fn spare_lines(pool: &Arc<Pool>) -> Vec<(String, String)> {
    if pool.spares_unloaded() {
        // Opening the DSL reads the MOS list.
        let _ = ozfs_dsl::DslPool::open(pool.clone());
    }
    pool.spares()
        .iter()
        .map(|s| {
            let st = pool.spare_state(s);
            let note = match st {
                ozfs_spa::spares::SpareState::InUse => "     currently in use",
                ozfs_spa::spares::SpareState::Unavail => "   cannot open",
                ozfs_spa::spares::SpareState::Avail => "",
            };
            (s.path.clone(), format!("{}{note}", st.as_str()))
        })
        .collect()
}

fn status_of(pool: &Arc<Pool>, name: &str) -> PoolStatus {
    // Opening the DSL first also resolves a removed device's vdev from the
    // MOS config. Allocation classes need the MOS too (the bias is in each
    // top-level vdev's ZAP); a pool whose MOS cannot be read shows none.
    let dsl = ozfs_dsl::DslPool::open(pool.clone());
    let mut tree = VdevNode::of(&pool.root, name);
    if let Ok(dsl) = dsl {
        for (node, top) in tree.children.iter_mut().zip(pool.root.children.iter()) {
            node.class = dsl.vdev_class(top).map(str::to_string);
        }
    }
    PoolStatus {
        name: name.to_string(),
        guid: pool.guid,
        state: pool.state().as_str().to_string(),
        tree,
        spares: spare_lines(pool),
    }
}

/// `zpool status POOL`: an imported pool's health.
pub fn status(name: &str) -> Result<PoolStatus> {
    let (_, pool) = open_imported(name)?;
    // The daemon's live view of the devices, when it holds the pool.
    crate::client::apply_vdev_state(name, &pool.root);
    Ok(status_of(&pool, name))
}

/// A pool found on devices, as `zpool import` lists it.
#[derive(Debug, Clone)]
pub struct Importable {
    pub name: String,
    pub guid: u64,
    /// Why the name in its labels is not a valid pool name.
    pub bad_name: Option<String>,
    /// Its health, or why it cannot be opened.
    pub status: std::result::Result<PoolStatus, String>,
    /// Active features its labels say are needed to read it
    /// (`features_for_read`) that ozfs does not read.
    pub unsupported: Vec<String>,
}

/// `zpool import` without a name: the pools on the devices in `dirs`.
pub fn importable(dirs: &[PathBuf]) -> Result<Vec<Importable>> {
    let found = ozfs_spa::import::discover(dirs)?;
    Ok(found
        .into_iter()
        .map(|p: FoundPool| {
            let name = p.name.clone();
            let guid = p.guid;
            let bad_name = ozfs_format::names::check_pool_name(&name)
                .err()
                .map(|w| w.to_string());
            let unsupported = ozfs_spa::pool::unsupported_read_features(&p.config);
            let status = Pool::open(
                p,
                &PoolOptions {
                    readonly: true,
                    max_txg: None,
                },
            )
            .map(|pool| status_of(&Arc::new(pool), &name))
            .map_err(|e| e.to_string());
            Importable {
                name,
                guid,
                bad_name,
                status,
                unsupported,
            }
        })
        .collect())
}

/// What `zpool list` shows of a pool.
#[derive(Debug, Clone)]
pub struct PoolSpace {
    pub name: String,
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    pub health: String,
    pub guid: u64,
    pub version: Option<u64>,
    /// `dedupratio` × 100 (`ref_dsize · 100 / dsize`, 100 without dedup).
    pub dedup_percent: u64,
}

/// `zpool list POOL`.
pub fn space(name: &str) -> Result<PoolSpace> {
    let (_, pool) = open_imported(name)?;
    let ctx = |e: Error| e.context(&format!("cannot open '{name}'"));
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).map_err(ctx)?;
    let sp = dsl.space().map_err(ctx)?;
    let (dd, _) = dsl.dedup_stats().map_err(ctx)?;
    Ok(PoolSpace {
        dedup_percent: ozfs_spa::ddt::dedup_ratio_percent(&dd),
        name: name.to_string(),
        size: sp.size,
        alloc: sp.alloc,
        free: sp.size.saturating_sub(sp.alloc),
        health: pool.state().as_str().to_string(),
        guid: pool.guid,
        version: pool.config.get_u64("version"),
    })
}

/// The pool's dedup tables (`zpool status -D`, `zdb -D`), or None for a
/// pool that never had one (no `DDT-statistics`).
pub fn dedup_tables(name: &str) -> Result<Option<Vec<ozfs_dsl::ddt::TableReport>>> {
    let (_, pool) = open_imported(name)?;
    let ctx = |e: Error| e.context(&format!("cannot open '{name}'"));
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).map_err(ctx)?;
    if ozfs_dmu::zap::lookup_obj(&dsl.mos, 1, ozfs_dsl::ddt::DDT_STATS)
        .map_err(ctx)?
        .is_none()
    {
        return Ok(None);
    }
    ozfs_dsl::ddt::report(&dsl).map(Some).map_err(ctx)
}

/// Is this pool state one a pool can be written in (ONLINE, DEGRADED)?
pub fn writable_state(state: VdevState) -> bool {
    matches!(state, VdevState::Online | VdevState::Degraded)
}

/// One pool property: name, value (as `zpool get -p` prints it, bytes in
/// bytes), source (`-`, `default`, `local`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProp {
    pub name: String,
    pub value: String,
    /// For sizes: the value in bytes (rendered short without `-p`).
    pub bytes: Option<u64>,
    pub source: String,
}

/// Settable pool properties: (name, default value) in `zpool get all`
/// order; a value stored in the pool's `pool_props` object overrides it.
const SETTABLE: &[(&str, &str)] = &[
    ("bootfs", "-"),
    ("delegation", "on"),
    ("autoreplace", "off"),
    ("cachefile", "-"),
    ("failmode", "wait"),
    ("listsnapshots", "off"),
    ("autoexpand", "off"),
];

/// `zpool get all POOL`: its properties, from its space, its config and the
/// `pool_props` object of its MOS (where `zpool set` stores them).
pub fn pool_props(name: &str) -> Result<Vec<PoolProp>> {
    let (rec, pool) = open_imported(name)?;
    let ctx = |e: Error| e.context(&format!("cannot open '{name}'"));
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).map_err(ctx)?;
    let sp = dsl.space().map_err(ctx)?;
    // Values `zpool set` (or another ZFS) stored in the pool.
    let mut stored: Vec<(String, String)> = Vec::new();
    if let Some(obj) = ozfs_dmu::zap::lookup_obj(&dsl.mos, 1, "pool_props")
        .map_err(ctx)?
        .and_then(|e| e.as_u64())
    {
        for e in ozfs_dmu::zap::list_obj(&dsl.mos, obj).map_err(ctx)? {
            let k = e.name_str();
            let v = match (k.as_str(), e.as_u64(), e.as_string()) {
                ("failmode", Some(n), _) => match n {
                    0 => "wait",
                    1 => "continue",
                    2 => "panic",
                    _ => "-",
                }
                .to_string(),
                ("bootfs", Some(n), _) => dsl
                    .dataset(n)
                    .and_then(|d| dsl.dir_name(d.dir_obj))
                    .unwrap_or_else(|_| format!("<{n:#x}>")),
                (_, Some(n), _)
                    if SETTABLE
                        .iter()
                        .any(|(s, d)| *s == k && (*d == "on" || *d == "off")) =>
                {
                    if n != 0 { "on" } else { "off" }.to_string()
                }
                (_, Some(n), _) => n.to_string(),
                (_, None, Some(s)) => s,
                _ => continue,
            };
            stored.push((k, v));
        }
    }
    let mut out = Vec::new();
    let mut push = |n: &str, v: String, bytes: Option<u64>, src: &str| {
        out.push(PoolProp {
            name: n.to_string(),
            value: v,
            bytes,
            source: src.to_string(),
        })
    };
    let cap = sp
        .alloc
        .saturating_mul(100)
        .checked_div(sp.size)
        .unwrap_or(0);
    push("size", sp.size.to_string(), Some(sp.size), "-");
    push("capacity", format!("{cap}"), None, "-");
    push("altroot", "-".into(), None, "default");
    push("health", pool.state().as_str().into(), None, "-");
    push("guid", pool.guid.to_string(), None, "-");
    let version = pool.config.get_u64("version").unwrap_or(0);
    push(
        "version",
        if version >= ozfs_spa::pool::SPA_VERSION_FEATURES {
            "-".into()
        } else {
            version.to_string()
        },
        None,
        if version >= ozfs_spa::pool::SPA_VERSION_FEATURES {
            "default"
        } else {
            "local"
        },
    );
    for (k, d) in SETTABLE {
        match stored.iter().find(|(s, _)| s == k) {
            Some((_, v)) => push(k, v.clone(), None, "local"),
            None => push(k, d.to_string(), None, "default"),
        }
    }
    let (dd, table_size) = dsl.dedup_stats().map_err(ctx)?;
    let ratio = ozfs_spa::ddt::dedup_ratio_percent(&dd);
    push(
        "dedupratio",
        format!("{}.{:02}", ratio / 100, ratio % 100),
        None,
        "-",
    );
    push(
        "free",
        sp.size.saturating_sub(sp.alloc).to_string(),
        Some(sp.size.saturating_sub(sp.alloc)),
        "-",
    );
    push("allocated", sp.alloc.to_string(), Some(sp.alloc), "-");
    push(
        "readonly",
        if rec.readonly { "on" } else { "off" }.into(),
        None,
        "-",
    );
    match stored.iter().find(|(s, _)| s == "ashift") {
        Some((_, v)) => push("ashift", v.clone(), None, "local"),
        None => push("ashift", "0".into(), None, "default"),
    }
    match stored.iter().find(|(s, _)| s == "comment") {
        Some((_, v)) => push("comment", v.clone(), None, "local"),
        None => push("comment", "-".into(), None, "default"),
    }
    push("expandsize", "-".into(), None, "-");
    push("freeing", "0".into(), Some(0), "-");
    push("fragmentation", "-".into(), None, "-");
    push("leaked", "0".into(), Some(0), "-");
    // What OpenZFS 2.3 lists after these; ozfs uses none of them yet, so
    // each has the value OpenZFS shows for a pool that does not either.
    push("multihost", "off".into(), None, "default");
    push("checkpoint", "-".into(), None, "-");
    // OpenZFS draws a new one at every import; ozfs opens the pool per
    // command, so it shows one derived from the pool's guid.
    let mut z = pool.guid.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    push("load_guid", (z ^ (z >> 31)).to_string(), None, "-");
    push("autotrim", "off".into(), None, "default");
    match stored.iter().find(|(s, _)| s == "compatibility") {
        Some((_, v)) => push("compatibility", v.clone(), None, "local"),
        None => push("compatibility", "off".into(), None, "default"),
    }
    let (used, saved) = dsl.bclone_space().map_err(ctx)?;
    push("bcloneused", used.to_string(), Some(used), "-");
    push("bclonesaved", saved.to_string(), Some(saved), "-");
    // OpenZFS's brt_get_ratio: (used + saved) / used, two decimals.
    let ratio = (used.saturating_add(saved))
        .saturating_mul(100)
        .checked_div(used)
        .unwrap_or(100);
    push(
        "bcloneratio",
        format!("{}.{:02}", ratio / 100, ratio % 100),
        None,
        "-",
    );
    push(
        "dedup_table_size",
        table_size.to_string(),
        Some(table_size),
        "-",
    );
    push("dedup_table_quota", "auto".into(), None, "default");
    push("last_scrubbed_txg", "0".into(), None, "-");
    for (f, st) in ozfs_dsl::features::states(&dsl.mos).map_err(ctx)? {
        push(&format!("feature@{f}"), st.to_string(), None, "local");
    }
    Ok(out)
}

/// One row of `zpool iostat`: the pool, a top-level vdev or a device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IoRow {
    pub name: String,
    /// 0 for the pool, 1 for a top-level vdev, 2 for a device under one.
    pub depth: usize,
    /// Allocated and free bytes (the pool and top-level vdevs only).
    pub space: Option<(u64, u64)>,
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// A class's heading (`logs`, `special`, `dedup`) before its top-level
    /// vdevs, all its columns `-`; no figures of its own.
    pub heading: bool,
}

/// I/O counters of an imported pool: every vdev's operations and bytes
/// since the daemon took the pool, and how long ago that was. A pool no
/// daemon holds has no I/O going on between commands: its counters are
/// zero (what this process read to open it is not the pool's traffic).
#[derive(Debug, Clone)]
pub struct IoStat {
    pub pool: String,
    /// Seconds the counters cover (0 when no daemon holds the pool).
    pub secs: f64,
    pub rows: Vec<IoRow>,
}

/// `zpool iostat POOL`: the counters as they are now (see [`IoStat`]).
pub fn iostat(name: &str) -> Result<IoStat> {
    let (_, pool) = open_imported(name)?;
    let held = crate::client::apply_vdev_state(name, &pool.root);
    let ctx = |e: Error| e.context(&format!("cannot open '{name}'"));
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).map_err(ctx)?;
    let sp = dsl.space().map_err(ctx)?;
    let counts = |v: &Vdev| -> (u64, u64, u64, u64) {
        if held.is_some() {
            v.stats.io.get()
        } else {
            (0, 0, 0, 0)
        }
    };
    let row = |v: &Vdev, name: String, depth: usize, space: Option<(u64, u64)>| {
        let (read_ops, write_ops, read_bytes, write_bytes) = counts(v);
        IoRow {
            name,
            depth,
            space,
            read_ops,
            write_ops,
            read_bytes,
            write_bytes,
            heading: false,
        }
    };
    let mut rows = vec![IoRow {
        name: name.to_string(),
        depth: 0,
        space: Some((sp.alloc, sp.size.saturating_sub(sp.alloc))),
        ..IoRow::default()
    }];
    // Top-level vdevs of the normal class first, then each other class
    // under its heading, as OpenZFS's `zpool iostat -v` lists them.
    let classes: Vec<Option<&str>> = pool
        .root
        .children
        .iter()
        .map(|t| dsl.vdev_class(t))
        .collect();
    for class in [None, Some("dedup"), Some("special"), Some("logs")] {
        let mut first = true;
        for (i, top) in pool.root.children.iter().enumerate() {
            if matches!(top.kind, VdevKind::Hole) || classes.get(i).copied().flatten() != class {
                continue;
            }
            if let (Some(c), true) = (class, first) {
                rows.push(IoRow {
                    name: c.to_string(),
                    heading: true,
                    ..IoRow::default()
                });
            }
            first = false;
            let (size, alloc) = sp.tops.get(i).copied().unwrap_or((0, 0));
            let r = row(
                top,
                top.display_name(),
                1,
                Some((alloc, size.saturating_sub(alloc))),
            );
            // The pool's I/O is the sum of its top-level vdevs'.
            rows[0].read_ops += r.read_ops;
            rows[0].write_ops += r.write_ops;
            rows[0].read_bytes += r.read_bytes;
            rows[0].write_bytes += r.write_bytes;
            rows.push(r);
            for c in &top.children {
                rows.push(row(c, c.display_name(), 2, None));
            }
        }
    }
    Ok(IoStat {
        pool: name.to_string(),
        secs: held.unwrap_or(0.0),
        rows,
    })
}
