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
    PoolStatus {
        name: name.to_string(),
        guid: pool.guid,
        state: pool.state().as_str().to_string(),
        tree: VdevNode::of(&pool.root, name),
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
}

/// `zpool list POOL`.
pub fn space(name: &str) -> Result<PoolSpace> {
    let (_, pool) = open_imported(name)?;
    let ctx = |e: Error| e.context(&format!("cannot open '{name}'"));
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).map_err(ctx)?;
    let sp = dsl.space().map_err(ctx)?;
    Ok(PoolSpace {
        name: name.to_string(),
        size: sp.size,
        alloc: sp.alloc,
        free: sp.size.saturating_sub(sp.alloc),
        health: pool.state().as_str().to_string(),
        guid: pool.guid,
        version: pool.config.get_u64("version"),
    })
}

/// Is this pool state one a pool can be written in (ONLINE, DEGRADED)?
pub fn writable_state(state: VdevState) -> bool {
    matches!(state, VdevState::Online | VdevState::Degraded)
}
