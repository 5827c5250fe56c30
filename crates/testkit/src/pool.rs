//! Pools made of sparse files, created by the private zfs-fuse daemon.

use crate::daemon::ZfsFuse;
use crate::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

/// Pool layouts (one top-level vdev holding all devices, or a plain stripe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// All devices as top-level vdevs (1 device = "single file").
    Stripe,
    /// One n-way mirror.
    Mirror,
    /// One raidz1 vdev.
    Raidz1,
    /// One raidz2 vdev.
    Raidz2,
    /// One raidz3 vdev.
    Raidz3,
}

impl Layout {
    /// Number of devices that may be missing/damaged without data loss for
    /// a vdev of `ndev` devices.
    pub fn redundancy(self, ndev: usize) -> usize {
        match self {
            Layout::Stripe => 0,
            Layout::Mirror => ndev.saturating_sub(1),
            Layout::Raidz1 => 1,
            Layout::Raidz2 => 2,
            Layout::Raidz3 => 3,
        }
    }

    /// The vdev keyword for `zpool create` (`None` for a stripe).
    pub fn keyword(self) -> Option<&'static str> {
        match self {
            Layout::Stripe => None,
            Layout::Mirror => Some("mirror"),
            Layout::Raidz1 => Some("raidz1"),
            Layout::Raidz2 => Some("raidz2"),
            Layout::Raidz3 => Some("raidz3"),
        }
    }

    /// Short name for pool names and messages.
    pub fn short(self) -> &'static str {
        match self {
            Layout::Stripe => "stripe",
            Layout::Mirror => "mirror",
            Layout::Raidz1 => "raidz1",
            Layout::Raidz2 => "raidz2",
            Layout::Raidz3 => "raidz3",
        }
    }
}

static POOL_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique pool name: `<prefix><pid>x<counter>` (valid ZFS pool name; the
/// pid keeps concurrent test processes apart, the counter tests in one).
pub fn unique_pool_name(prefix: &str) -> String {
    let n = POOL_COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{prefix}{}x{n}", std::process::id())
}

/// Where test pools put their device files: `$OZFS_TEST_TMP` if set, else
/// /var/tmp (disk-backed, sparse files), else the system temp dir.
pub fn test_tmp_root() -> PathBuf {
    if let Some(p) = std::env::var_os("OZFS_TEST_TMP") {
        return PathBuf::from(p);
    }
    let vt = Path::new("/var/tmp");
    if vt.is_dir() {
        vt.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Removes pool directories (`ozfs-test-<pid>-*` in [`test_tmp_root`]) left
/// behind by test processes that no longer exist (killed runs cannot clean
/// up after themselves).  Called once when the daemon starts.
pub fn remove_stale_pool_dirs() {
    let Ok(rd) = fs::read_dir(test_tmp_root()) else {
        return;
    };
    for de in rd.flatten() {
        let name = de.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("ozfs-test-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(de.path());
        }
    }
    // Daemon logs of dead test processes.
    let Ok(rd) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for de in rd.flatten() {
        let name = de.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("ozfs-zfs-fuse-")
            .and_then(|r| r.strip_suffix(".log"))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = fs::remove_file(de.path());
            }
        }
    }
}

/// Everything needed to create a pool; see [`TestPool::create_with`].
#[derive(Debug, Clone)]
pub struct PoolSpec {
    /// Layout of the single top-level vdev.
    pub layout: Layout,
    /// Number of device files.
    pub ndev: usize,
    /// Size of each (sparse) device file in bytes.  Note: zfs-fuse picks
    /// ashift 12 for file vdevs of 128 MiB and more, ashift 9 for 96 MiB
    /// and less (observed; there is no `-o ashift` in pool version 23).
    pub dev_size: u64,
    /// `zpool create -o` pool properties.
    pub pool_props: Vec<(String, String)>,
    /// `zpool create -O` root dataset properties.
    pub fs_props: Vec<(String, String)>,
    /// Pool name prefix (a unique suffix is appended).
    pub prefix: String,
}

impl PoolSpec {
    /// A spec with no extra properties.
    pub fn new(layout: Layout, ndev: usize, dev_size: u64) -> Self {
        PoolSpec {
            layout,
            ndev,
            dev_size,
            pool_props: Vec::new(),
            fs_props: Vec::new(),
            prefix: format!("ozt{}", layout.short()),
        }
    }

    /// Adds a root dataset property (`-O name=value`).
    pub fn fs_prop(mut self, name: &str, value: &str) -> Self {
        self.fs_props.push((name.into(), value.into()));
        self
    }
}

/// A zfs-fuse pool on sparse files in a private temp dir.
///
/// Directory layout: `<tmp>/devs/d0..dN` (devices), `<tmp>/mnt` (root
/// dataset mountpoint, inside the daemon's namespace), `<tmp>/ds/<name>`
/// (mountpoints of datasets made by [`TestPool::create_dataset`]),
/// `<tmp>/aside` (for devices moved away), `<tmp>/work` (scratch space for
/// copy-outs etc.).  Drop destroys the pool if it is imported and removes
/// the whole directory, always.
#[derive(Debug)]
pub struct TestPool {
    zf: &'static ZfsFuse,
    name: String,
    dir: Option<tempfile::TempDir>,
    devs: Vec<PathBuf>,
    layout: Layout,
    imported: bool,
}

fn props_args(flag: &str, props: &[(String, String)]) -> Vec<String> {
    props
        .iter()
        .flat_map(|(k, v)| [flag.to_string(), format!("{k}={v}")])
        .collect()
}

impl TestPool {
    /// Creates a pool of `ndev` sparse files of `dev_size` bytes.
    pub fn create(layout: Layout, ndev: usize, dev_size: u64) -> Result<TestPool> {
        Self::create_with(&PoolSpec::new(layout, ndev, dev_size))
    }

    /// Creates a pool from a full [`PoolSpec`].
    pub fn create_with(spec: &PoolSpec) -> Result<TestPool> {
        let pool = Self::files_only(spec)?;
        let mut args: Vec<String> = vec!["zpool".into(), "create".into(), "-f".into()];
        args.extend(props_args("-o", &spec.pool_props));
        args.extend(props_args("-O", &spec.fs_props));
        args.push("-m".into());
        args.push(pool.dir().join("mnt").to_string_lossy().into_owned());
        args.push(pool.name.clone());
        if let Some(k) = spec.layout.keyword() {
            args.push(k.into());
        }
        args.extend(pool.devs.iter().map(|d| d.to_string_lossy().into_owned()));
        let mut pool = pool;
        pool.zf.run(&args)?;
        pool.imported = true;
        Ok(pool)
    }

    /// The directory layout and sparse device files of a pool described by
    /// `spec`, *without* creating the pool: for pools another tool (ozfs)
    /// creates on [`TestPool::devs`] with [`TestPool::name`], mounting the
    /// root dataset at `<tmp>/mnt` ([`TestPool::mountpoint`]).  zfs-fuse can
    /// later import it with [`TestPool::import`]; Drop destroys it in
    /// zfs-fuse only if it is imported there, and removes the directory.
    pub fn files_only(spec: &PoolSpec) -> Result<TestPool> {
        let zf = ZfsFuse::try_get()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("ozfs-test-{}-", std::process::id()))
            .tempdir_in(test_tmp_root())
            .map_err(|e| Error(format!("creating temp dir: {e}")))?;
        let mut pool = TestPool {
            zf,
            name: unique_pool_name(&spec.prefix),
            dir: Some(dir),
            devs: Vec::new(),
            layout: spec.layout,
            imported: false,
        };
        for sub in ["devs", "mnt", "ds", "aside", "work"] {
            fs::create_dir_all(pool.dir().join(sub))?;
        }
        for i in 0..spec.ndev {
            let p = pool.dir().join("devs").join(format!("d{i}"));
            let f = fs::File::create(&p)?;
            f.set_len(spec.dev_size)?;
            pool.devs.push(p);
        }
        Ok(pool)
    }

    /// The daemon this pool lives in.
    pub fn zf(&self) -> &'static ZfsFuse {
        self.zf
    }

    /// Pool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Layout given at creation.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The pool's private temp directory.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("temp dir").path()
    }

    /// Directory holding the device files (`zpool import -d` argument).
    pub fn dev_dir(&self) -> PathBuf {
        self.dir().join("devs")
    }

    /// Device file paths (d0, d1, ...), in vdev order.
    pub fn devs(&self) -> &[PathBuf] {
        &self.devs
    }

    /// Scratch directory inside the pool's temp dir (created on demand):
    /// `work/<name>`, for copy-outs and the like.  Removed with the pool.
    pub fn work_dir(&self, name: &str) -> PathBuf {
        let p = self.dir().join("work").join(name);
        let _ = fs::create_dir_all(p.parent().expect("parent"));
        p
    }

    /// True while zfs-fuse has the pool imported.
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// Full dataset name: `""` is the root dataset, `"a/b"` is `<pool>/a/b`.
    pub fn ds(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.name, rel.trim_start_matches('/'))
        }
    }

    /// Mountpoint (namespace path) of dataset `rel` as created by this
    /// harness: `<tmp>/mnt` for the root, `<tmp>/ds/<rel with / -> ~>` else.
    pub fn mountpoint(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.dir().join("mnt")
        } else {
            self.dir().join("ds").join(rel.replace('/', "~"))
        }
    }

    /// Host path (through /proc/<pid>/root) of mounted dataset `rel`.
    pub fn root(&self, rel: &str) -> PathBuf {
        self.zf.path(self.mountpoint(rel))
    }

    /// Runs `zpool <args>` in the daemon.
    pub fn zpool(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["zpool"];
        v.extend_from_slice(args);
        self.zf.run(&v)
    }

    /// Runs `zfs <args>` in the daemon.
    pub fn zfs(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["zfs"];
        v.extend_from_slice(args);
        self.zf.run(&v)
    }

    /// `zfs create` of `<pool>/<rel>` with `props` and a mountpoint outside
    /// every other dataset (so a parent's tree never contains a child's
    /// mountpoint directory).  Returns the host path of its mount.
    pub fn create_dataset(&self, rel: &str, props: &[(&str, &str)]) -> Result<PathBuf> {
        let mp = self.mountpoint(rel);
        let mut args: Vec<String> = vec!["zfs".into(), "create".into()];
        for (k, v) in props {
            args.push("-o".into());
            args.push(format!("{k}={v}"));
        }
        args.push("-o".into());
        args.push(format!("mountpoint={}", mp.display()));
        args.push(self.ds(rel));
        self.zf.run(&args)?;
        Ok(self.zf.path(mp))
    }

    /// `zfs set prop=value <pool>/<rel>`.
    pub fn set(&self, rel: &str, prop: &str, value: &str) -> Result<()> {
        self.zfs(&["set", &format!("{prop}={value}"), &self.ds(rel)])
            .map(|_| ())
    }

    /// `zfs get -H -o value prop <pool>/<rel>`.
    pub fn get(&self, rel: &str, prop: &str) -> Result<String> {
        Ok(self
            .zfs(&["get", "-H", "-o", "value", prop, &self.ds(rel)])?
            .trim()
            .to_string())
    }

    /// `zfs snapshot <pool>/<rel>@<snap>`; returns the full snapshot name.
    pub fn snapshot(&self, rel: &str, snap: &str) -> Result<String> {
        let full = format!("{}@{snap}", self.ds(rel));
        self.zfs(&["snapshot", &full])?;
        Ok(full)
    }

    /// `zpool export` (retried a few times while the pool is busy).
    pub fn export(&mut self) -> Result<()> {
        if !self.imported {
            return Err(Error(format!("pool {} is not imported", self.name)));
        }
        let mut last = None;
        for attempt in 0..5 {
            match self.zf.run(&["zpool", "export", &self.name]) {
                Ok(_) => {
                    self.imported = false;
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    thread::sleep(Duration::from_millis(300 * (attempt + 1)));
                }
            }
        }
        Err(last.expect("error"))
    }

    /// `zpool import -d <devs dir> <pool>`.
    pub fn import(&mut self) -> Result<()> {
        self.import_from(&self.dev_dir())
    }

    /// `zpool import -d <dir> <pool>` (e.g. a copy of the devices).
    pub fn import_from(&mut self, dir: &Path) -> Result<()> {
        self.import_from_with(dir, &[])
    }

    /// `zpool import <extra...> -d <dir> <pool>`, e.g. `extra = ["-f"]` for
    /// a pool that was not exported (crashed writer).
    pub fn import_from_with(&mut self, dir: &Path, extra: &[&str]) -> Result<()> {
        if self.imported {
            return Err(Error(format!("pool {} is already imported", self.name)));
        }
        let d = dir.to_string_lossy();
        let mut args = vec!["zpool", "import"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-d", &d, &self.name]);
        self.zf.run(&args)?;
        self.imported = true;
        Ok(())
    }

    /// zfs-fuse's `zdb -e -p <devs dir> -bcc <pool>` on the exported pool,
    /// see [`ZfsFuse::zdb_check`].
    pub fn zdb_check(&self) -> Result<String> {
        self.zdb_check_in(&self.dev_dir())
    }

    /// [`TestPool::zdb_check`] on the devices in `dir` (e.g. a copy).
    pub fn zdb_check_in(&self, dir: &Path) -> Result<String> {
        if self.imported {
            return Err(Error(format!(
                "zdb -e on pool {}: it is imported in zfs-fuse",
                self.name
            )));
        }
        self.zf.zdb_check(dir, &self.name)
    }

    /// Current max txg written in the device labels (via `zdb -l`), 0 if
    /// unknown.  Handy to name "the state at this point".
    pub fn label_txg(&self) -> Result<u64> {
        let out = self
            .zf
            .run(&["zdb", "-l", &self.devs[0].to_string_lossy()])?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("txg:"))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0))
    }

    /// Moves device `i` into `<tmp>/aside/` (simulates a missing device).
    /// Returns the new path.
    pub fn move_aside(&self, i: usize) -> Result<PathBuf> {
        let to = self.dir().join("aside").join(format!("d{i}"));
        fs::rename(&self.devs[i], &to)?;
        Ok(to)
    }

    /// Moves device `i` back from `<tmp>/aside/`.
    pub fn move_back(&self, i: usize) -> Result<()> {
        let from = self.dir().join("aside").join(format!("d{i}"));
        fs::rename(&from, &self.devs[i])?;
        Ok(())
    }

    /// Destroys the pool in zfs-fuse if it is imported (called by Drop).
    pub fn destroy(&mut self) -> Result<()> {
        if !self.imported {
            return Ok(());
        }
        let mut last = None;
        for attempt in 0..5 {
            match self.zf.run(&["zpool", "destroy", "-f", &self.name]) {
                Ok(_) => {
                    self.imported = false;
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    thread::sleep(Duration::from_millis(300 * (attempt + 1)));
                }
            }
        }
        Err(last.expect("error"))
    }
}

impl Drop for TestPool {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            eprintln!("ozfs-testkit: could not destroy pool {}: {e}", self.name);
        }
        if let Some(dir) = self.dir.take() {
            if std::env::var_os("OZFS_KEEP_TEST_POOLS").is_some() {
                let p = dir.keep();
                eprintln!(
                    "ozfs-testkit: keeping {} (OZFS_KEEP_TEST_POOLS)",
                    p.display()
                );
            } else if let Err(e) = dir.close() {
                eprintln!("ozfs-testkit: could not remove pool dir: {e}");
            }
        }
    }
}
