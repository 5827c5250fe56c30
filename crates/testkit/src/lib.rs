//! # ozfs-testkit: the test harness of ozfs
//!
//! ozfs must read pools that the real ZFS (here: zfs-fuse, pool version 23)
//! writes, so tests build pools **with zfs-fuse in the same test run**, fill
//! them with known content, record what the content looked like, and then
//! compare what ozfs reads back.
//!
//! * [`ZfsFuse`] — one private zfs-fuse daemon per test process, in its own
//!   mount namespace (so a system daemon, other test processes and stale
//!   `/etc/zfs/zpool.cache` files never interfere), with every pool command
//!   serialized through a mutex and run with a timeout (zfs-fuse hangs when
//!   pool commands overlap).  Datasets it mounts are reached from outside via
//!   `/proc/<pid>/root/...` ([`ZfsFuse::path`]).
//! * [`TestPool`] — a pool on sparse files in a private temp dir; created,
//!   exported, imported; destroyed and deleted on drop.
//! * [`populate()`], [`mutate()`] and friends — deterministic content: all file
//!   size edge cases, sparse files, micro/fat ZAP directories, deep trees,
//!   symlinks (bonus and block), hard links, xattrs, odd names, modes,
//!   owners, fifos, explicit mtimes, a 210 MiB file.
//! * [`Manifest`] — a comparable description of a tree (kind, mode, owner,
//!   size, mtime, sha256, link target, xattrs, hard-link groups) with a
//!   readable [`Manifest::diff`].
//! * [`damage`] — random overwrites, zeroed labels, corrupted uberblocks.
//! * [`mutate::Image`] — hostile images: one field of one block changed
//!   with every checksum up to the uberblock recomputed, so the damage
//!   reaches the decoders.
//! * [`Ozfs`] — runs the ozfs binary with a private `OZFS_STATE_DIR`, a
//!   timeout and "never panics" checks.
//!
//! The typical flow (see `crates/cli/tests/`):
//! ```no_run
//! use ozfs_testkit::*;
//! let mut pool = TestPool::create(Layout::Raidz1, 3, 128 << 20).unwrap();
//! pool.set("", "atime", "off").unwrap();
//! populate(&pool.root(""), &Profile::moderate(1)).unwrap();
//! let s1 = pool.record_snapshot("", "s1").unwrap(); // settle, scan, snapshot
//! mutate(&pool.root(""), 1, 1).unwrap();
//! let live = pool.record_live("").unwrap();
//! pool.export().unwrap();
//! // ... then `ozfs zpool import -d <pool.dev_dir()> ...`, `ozfs cp -r`,
//! // and `Manifest::scan(copy)` compared with `s1` / `live`.
//! ```
//!
//! zfs-fuse facts the harness works around (details in the modules):
//! timestamps through FUSE have whole seconds only ([`settle_times`]);
//! xattrs need the daemon's `-x` flag and a getxattr with a too-small buffer
//! returns garbage ([`manifest::read_xattrs`]); a failing listxattr on a mount
//! disables listxattr for that whole mount (the kernel caches the ENOSYS
//! zfs-fuse returns), so keep pools from running full; `.zfs` snapshot
//! directories are not available through zfs-fuse mounts.

//!
//! Environment variables: `OZFS_TEST_TMP` (where pool directories go,
//! default /var/tmp), `OZFS_KEEP_TEST_POOLS=1` (keep pool directories after
//! the test, for post-mortems), `OZFS_TEST_SETUP_ONLY=1` (integration tests
//! in crates/cli: stop after the zfs-fuse part). Every ozfs command a test
//! runs gets `OZFS_CHECK_SPACE=1` ([`CHECK_SPACE_ENV`]): each sync checks
//! the space accounting against the blocks and fails on a mismatch.  Running the harness needs
//! root; scripts/install-deps.sh installs zfs-fuse if it is missing.

#![warn(missing_docs)]

pub mod cli;
pub mod daemon;
pub mod damage;
mod error;
pub mod manifest;
pub mod mutate;
pub mod pool;
pub mod populate;
pub mod proc;
pub mod rng;

pub use cli::{parse_status, status_row, Ozfs, StatusRow, CHECK_SPACE_ENV};
pub use daemon::{repo_root, ZfsFuse};
pub use error::{Context, Error, Result};
pub use manifest::{assert_manifest_eq, Entry, Kind, Manifest, ScanOptions};
pub use pool::{test_tmp_root, unique_pool_name, Layout, PoolSpec, TestPool};
pub use populate::{mutate, populate, settle_times, PopulateReport, Profile};
pub use rng::XorShift;

/// Bytes in a MiB.
pub const MIB: u64 = 1024 * 1024;

impl TestPool {
    /// Settles timestamps of dataset `rel` (see [`settle_times`]) and scans
    /// its live tree: the state a copy-out of the live dataset must match.
    pub fn record_live(&self, rel: &str) -> Result<Manifest> {
        self.record_live_with(rel, &ScanOptions::default())
    }

    /// [`TestPool::record_live`] with scan options (e.g. `xattrs: false`
    /// for a dataset without xattrs: listxattr is slow on zfs-fuse).
    pub fn record_live_with(&self, rel: &str, opts: &ScanOptions) -> Result<Manifest> {
        let root = self.root(rel);
        settle_times(&root)?;
        Manifest::scan_with(&root, opts)
    }

    /// [`TestPool::record_live`] then `zfs snapshot <ds>@<snap>`: returns
    /// the manifest the snapshot must match.
    pub fn record_snapshot(&self, rel: &str, snap: &str) -> Result<Manifest> {
        self.record_snapshot_with(rel, snap, &ScanOptions::default())
    }

    /// [`TestPool::record_snapshot`] with scan options.
    pub fn record_snapshot_with(
        &self,
        rel: &str,
        snap: &str,
        opts: &ScanOptions,
    ) -> Result<Manifest> {
        let m = self.record_live_with(rel, opts)?;
        self.snapshot(rel, snap)?;
        Ok(m)
    }
}
