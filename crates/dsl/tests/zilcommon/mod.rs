//! Helpers of the in-process intent-log tests (`zil_crash.rs`,
//! `zil_logdev.rs`): opening a pool on simulated devices, deterministic
//! contents, and committing records the way a mount's fsync does.

#![allow(dead_code)]

use ozfs_dsl::sync::PoolWriter;
use ozfs_dsl::zil::Commit;
use ozfs_format::zil::LogRecord;
use ozfs_format::Result;
use ozfs_spa::import::discover_paths_mode;
use ozfs_spa::pool::{Pool, PoolOptions};
use ozfs_vdev::sim;
use ozfs_zpl::zil::{self as zz, ItxEntry};
use std::path::PathBuf;
use std::sync::Arc;

pub const FS: &str = "p/fs";
pub const RS: u64 = 131072;

/// Open the pool on `paths` as it is on the devices.
pub fn open_pool(paths: &[PathBuf], writable: bool) -> Result<Arc<Pool>> {
    let found = discover_paths_mode(paths, writable)
        .into_iter()
        .next()
        .ok_or_else(|| ozfs_format::Error::not_found("no pool on the devices"))?;
    Ok(Arc::new(Pool::open(
        found,
        &PoolOptions {
            readonly: !writable,
            max_txg: None,
        },
    )?))
}

/// Deterministic file contents.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = sim::SplitMix64::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Commit `recs` to the log of `ds` and return once they are durable (a
/// txg commit when the log has no chain yet), as a mount's fsync does.
pub fn commit_records(w: &mut PoolWriter, ds: u64, recs: Vec<(u64, LogRecord)>) {
    match w.zil_commit(ds, recs).unwrap() {
        c @ Commit::Write { .. } => {
            let (tx, rx) = std::sync::mpsc::channel();
            let pool = w.pool.clone();
            let done = Box::new(move |r| {
                let _ = tx.send(r);
            });
            assert!(c.submit(&pool, done).is_none());
            rx.recv().unwrap().unwrap();
        }
        Commit::NeedsSync => w.sync().unwrap(),
    }
}

/// The records of `itxs` committed (see [`commit_records`]).
pub fn commit_itxs(w: &mut PoolWriter, ds: u64, itxs: Vec<ItxEntry>) {
    let masks = zz::AttrMasks::of_version(w.version);
    let recs = zz::records(w.fs_tx(ds).unwrap(), itxs, masks).unwrap();
    commit_records(w, ds, recs);
}
