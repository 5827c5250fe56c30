//! Discovering pools among devices: group by pool guid, pick configs.

use ozfs_format::{Error, NvList, Result};
use ozfs_vdev::labels::LabelSet;
use ozfs_vdev::{open_path, read_labels, BlockDevice};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A device that carries a label of some pool.
#[derive(Clone)]
pub struct FoundDevice {
    pub path: PathBuf,
    pub dev: Arc<dyn BlockDevice>,
    pub labels: LabelSet,
    /// Config from its best label.
    pub config: NvList,
    pub guid: u64,
    pub top_guid: u64,
}

/// A pool assembled from devices that share its guid.
pub struct FoundPool {
    pub name: String,
    pub guid: u64,
    pub state: u64,
    pub version: u64,
    pub txg: u64,
    pub devices: Vec<FoundDevice>,
    /// The newest label config (top-level keys; its vdev_tree is one top-level vdev).
    pub config: NvList,
    /// Devices with a hot-spare label found in the same search (any pool
    /// listing their guid may use them).
    pub aux: Vec<FoundDevice>,
}

impl FoundPool {
    /// Paths of all devices found.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.devices.iter().map(|d| d.path.clone()).collect()
    }
}

/// Candidate device files in `dir`: regular files and block devices (not following into subdirectories).
pub fn candidates(dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = &std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("cannot read directory {}", dir.display()), e))?;
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let p = ent.path();
        if let Ok(m) = std::fs::metadata(&p) {
            use std::os::unix::fs::FileTypeExt;
            if m.is_file() || m.file_type().is_block_device() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Open the given device paths (read-only) and group them into pools.
pub fn discover_paths(paths: &[PathBuf]) -> Vec<FoundPool> {
    discover_paths_mode(paths, false)
}

/// Open the given device paths, for writing too if `writable`, and group them into pools.
pub fn discover_paths_mode(paths: &[PathBuf], writable: bool) -> Vec<FoundPool> {
    let mut by_pool: BTreeMap<u64, Vec<FoundDevice>> = BTreeMap::new();
    let mut aux: Vec<FoundDevice> = Vec::new();
    for p in paths {
        let Ok(dev) = open_path(p, writable) else {
            continue;
        };
        let labels = read_labels(dev.as_ref());
        let Some(config) = labels.best_config().cloned() else {
            continue;
        };
        if config.get_u64("state") == Some(crate::spares::POOL_STATE_SPARE) {
            if let Some(guid) = config.get_u64("guid") {
                aux.push(FoundDevice {
                    path: p.clone(),
                    dev: dev.clone(),
                    labels,
                    config,
                    guid,
                    top_guid: 0,
                });
            }
            continue;
        }
        let (Some(pool_guid), Some(guid)) = (config.get_u64("pool_guid"), config.get_u64("guid"))
        else {
            continue;
        };
        let state = config.get_u64("state").unwrap_or(0);
        if state == 2 {
            continue; // destroyed
        }
        let top_guid = config.get_u64("top_guid").unwrap_or(0);
        by_pool.entry(pool_guid).or_default().push(FoundDevice {
            path: p.clone(),
            dev: dev.clone(),
            labels,
            config,
            guid,
            top_guid,
        });
    }
    let mut pools = Vec::new();
    for (guid, devices) in by_pool {
        let Some(best) = devices
            .iter()
            .max_by_key(|d| d.config.get_u64("txg").unwrap_or(0))
        else {
            continue;
        };
        let config = best.config.clone();
        pools.push(FoundPool {
            name: config.get_str("name").unwrap_or("?").to_string(),
            guid,
            state: config.get_u64("state").unwrap_or(0),
            version: config.get_u64("version").unwrap_or(0),
            txg: config.get_u64("txg").unwrap_or(0),
            devices,
            config,
            aux: aux.clone(),
        });
    }
    pools
}

/// Scan directories for pools.
pub fn discover(dirs: &[PathBuf]) -> Result<Vec<FoundPool>> {
    let mut paths = Vec::new();
    for d in dirs {
        paths.extend(candidates(d)?);
    }
    Ok(discover_paths(&paths))
}
