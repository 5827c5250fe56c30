//! Helpers shared by the write tests (`write_*.rs`): pools that *ozfs*
//! creates and fills, then zfs-fuse checks (`zdb -bcc`, import, scrub,
//! manifests through its mounts).
//!
//! Test files use it as `mod common; mod wcommon; use wcommon::*;`.
//! Device files and mountpoints come from [`TestPool::files_only`], so the
//! directory conventions (`devs/`, `mnt/`, `ds/<name>`, `work/`) and the
//! cleanup on drop are the same as for zfs-fuse-made pools.

#![allow(dead_code)]

pub use crate::common::*;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Device files (not yet a pool) for a pool ozfs will create.
pub fn new_devs(prefix: &str, layout: Layout, ndev: usize, dev_mib: u64) -> TestPool {
    TestPool::files_only(&PoolSpec {
        prefix: prefix.to_string(),
        ..PoolSpec::new(layout, ndev, dev_mib * MIB)
    })
    .unwrap_or_else(|e| panic!("creating device files: {e}"))
}

/// `ozfs zpool create -f <opts> -m <pool mnt> NAME [keyword] DEVS...`;
/// `keyword` overrides the layout's keyword (e.g. `Some("raidz")`).
pub fn oz_create(oz: &Ozfs, pool: &TestPool, keyword: Option<&str>, opts: &[&str]) {
    oz_create_at(oz, pool, &pool.mountpoint(""), keyword, opts);
}

/// [`oz_create`] with the pool's mountpoint `mnt` (`-m`). These pools are
/// for zfs-fuse to judge: version 23 unless `opts` choose a version or
/// features.
pub fn oz_create_at(oz: &Ozfs, pool: &TestPool, mnt: &Path, keyword: Option<&str>, opts: &[&str]) {
    let mut args: Vec<String> = vec!["zpool".into(), "create".into(), "-f".into()];
    let chosen = opts.iter().any(|o| {
        o.starts_with("version=") || o.starts_with("feature@") || o.starts_with("compatibility=")
    }) || opts.contains(&"-d");
    if !chosen {
        args.extend(["-o".to_string(), "version=23".to_string()]);
    }
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push("-m".into());
    args.push(mnt.to_string_lossy().into_owned());
    args.push(pool.name().to_string());
    if let Some(k) = keyword.or(pool.layout().keyword()) {
        args.push(k.into());
    }
    args.extend(pool.devs().iter().map(|d| d.to_string_lossy().into_owned()));
    oz.ok(&args);
}

/// `ozfs zfs create -o k=v... POOL/rel`, then `ozfs zfs set
/// mountpoint=<harness mountpoint> POOL/rel` (outside every other
/// dataset's mount; `write_props` covers `create -o mountpoint=`).
pub fn oz_create_ds(oz: &Ozfs, pool: &TestPool, rel: &str, props: &[(&str, &str)]) {
    let mut args: Vec<String> = vec!["zfs".into(), "create".into()];
    for (k, v) in props {
        args.push("-o".into());
        args.push(format!("{k}={v}"));
    }
    args.push(pool.ds(rel));
    oz.ok(&args);
    oz.ok(&[
        "zfs".to_string(),
        "set".into(),
        format!("mountpoint={}", pool.mountpoint(rel).display()),
        pool.ds(rel),
    ]);
}

/// `ozfs cp -r SRC TARGET` (copy in), must succeed.
pub fn oz_cp_in(oz: &Ozfs, src: &Path, target: &str) {
    oz.ok(&[
        OsStr::new("cp"),
        OsStr::new("-r"),
        src.as_os_str(),
        OsStr::new(target),
    ]);
}

/// `ozfs rm [-r] TARGET`, must succeed.
pub fn oz_rm(oz: &Ozfs, target: &str, recursive: bool) {
    if recursive {
        oz.ok(&["rm", "-r", target]);
    } else {
        oz.ok(&["rm", target]);
    }
}

/// `ozfs zpool import -N -d DIR POOL` (read-write, nothing mounted), must
/// succeed. `-N`: no daemon takes the pool, so the write tests' commands
/// act on the pool files themselves (with their own environment, e.g.
/// `OZFS_FAULT_WRITE_LIMIT`); `daemon.rs` covers imports that mount.
pub fn oz_import_rw(oz: &Ozfs, dir: &Path, pool: &str) {
    oz.ok(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-N"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new(pool),
    ]);
}

/// `ozfs zpool export POOL`, must succeed.
pub fn oz_export(oz: &Ozfs, pool: &str) {
    oz.ok(&["zpool", "export", pool]);
}

/// A local temp directory (removed on drop), on the same file system as the
/// test pools (so xattrs work and space is plentiful).
pub fn local_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ozfs-test-{}-{tag}-", std::process::id()))
        .tempdir_in(test_tmp_root())
        .expect("local temp dir")
}

/// Populates `<base>/<name>` with `profile`, settles its mtimes to whole
/// seconds (zfs-fuse shows whole seconds only) and returns (path,
/// manifest).
pub fn source_tree(base: &Path, name: &str, profile: &Profile) -> (PathBuf, Manifest) {
    let root = base.join(name);
    fs::create_dir_all(&root).unwrap();
    let rep = populate(&root, profile).unwrap_or_else(|e| panic!("populate {name}: {e}"));
    assert!(
        !profile.xattrs || rep.xattrs,
        "local file system without user xattrs? {:?}",
        rep.notes
    );
    settle_times(&root).unwrap();
    let m = Manifest::scan(&root).unwrap();
    (root, m)
}

/// Copies out `src` (`pool/ds[@snap]:/path`) with ozfs into a fresh
/// directory under `pool`'s work dir and scans it (`xattrs` as given).
pub fn oz_copyout(oz: &Ozfs, pool: &TestPool, src: &str, tag: &str, xattrs: bool) -> Manifest {
    let dest = dest_for(pool, tag, src);
    oz.cp(src, &dest);
    let m = Manifest::scan_with(
        &dest,
        &ScanOptions {
            xattrs,
            ..ScanOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("scanning copy of {src}: {e}"));
    let _ = fs::remove_dir_all(&dest);
    m
}

/// Sets the mtime of the listed entries (that exist) to (0, 0): for
/// directories whose mtime legitimately differs between two trees (the
/// parents of entries added or removed at different times).
pub fn neutralize_mtimes(m: &mut Manifest, paths: &[&str]) {
    for p in paths {
        if let Some(e) = m.entries.get_mut(Path::new(p)) {
            e.mtime = (0, 0);
        }
    }
}

/// [`Manifest::scan_with`] of a zfs-fuse mount, with a readable panic.
pub fn scan_zf(path: &Path, xattrs: bool) -> Manifest {
    Manifest::scan_with(
        path,
        &ScanOptions {
            xattrs,
            ..ScanOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("scanning zfs-fuse mount {}: {e}", path.display()))
}

/// zfs-fuse `zdb -e -p <dir> -bcc` must be clean (panics with its output).
pub fn assert_zdb_clean(pool: &TestPool, dir: &Path, context: &str) {
    let t0 = Instant::now();
    match pool.zdb_check_in(dir) {
        Ok(out) => eprintln!(
            "[{context}] zdb -bcc clean ({:.1?}): {}",
            t0.elapsed(),
            out.lines()
                .find(|l| l.contains("bp count"))
                .unwrap_or("")
                .trim()
        ),
        Err(e) => panic!(
            "[{context}] zfs-fuse zdb found problems in pool {}:\n{e}",
            pool.name()
        ),
    }
}

/// Scrubs the pool (imported in zfs-fuse) and requires a clean result: no
/// READ/WRITE/CKSUM errors on any vdev, "0 errors", "No known data errors".
/// Unlike `zdb -bcc` (which reads one copy of each block), a scrub checks
/// every mirror side and the raidz parity.
pub fn assert_scrub_clean(pool: &TestPool, context: &str) {
    let name = pool.name().to_string();
    pool.zpool(&["scrub", &name])
        .unwrap_or_else(|e| panic!("[{context}] zpool scrub: {e}"));
    let t0 = Instant::now();
    let status = loop {
        let s = pool.zpool(&["status", "-v", &name]).unwrap();
        if !s.contains("in progress") {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "[{context}] scrub does not finish:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let rows = parse_status(&status);
    assert!(
        !rows.is_empty(),
        "[{context}] cannot parse zpool status:\n{status}"
    );
    let bad: Vec<_> = rows
        .iter()
        .filter(|r| r.read + r.write + r.cksum > 0 || r.state != "ONLINE")
        .collect();
    assert!(
        bad.is_empty()
            && status.contains("with 0 errors")
            && status.contains("No known data errors"),
        "[{context}] zfs-fuse scrub of an ozfs-written pool is not clean:\n{status}"
    );
}

/// Copies the device files of `pool` (sparse) from `from` into `to`
/// (created; emptied first).
pub fn copy_dev_files(pool: &TestPool, from: &Path, to: &Path) {
    let _ = fs::remove_dir_all(to);
    fs::create_dir_all(to).unwrap();
    for d in pool.devs() {
        let name = d.file_name().unwrap();
        let st = Command::new("cp")
            .arg("--sparse=always")
            .arg(from.join(name))
            .arg(to.join(name))
            .status()
            .unwrap();
        assert!(st.success(), "cp {}", from.join(name).display());
    }
}

/// True if the first `len` bytes of `a` equal those of `b` and `a` has
/// exactly `len` bytes, i.e. `a` is a prefix of `b`.
pub fn is_prefix_file(a: &Path, b: &Path) -> bool {
    let (Ok(mut fa), Ok(mut fb)) = (fs::File::open(a), fs::File::open(b)) else {
        return false;
    };
    let mut ba = vec![0u8; 1 << 20];
    let mut bb = vec![0u8; 1 << 20];
    loop {
        let n = match read_full(&mut fa, &mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if n == 0 {
            return true;
        }
        let m = match read_full(&mut fb, &mut bb[..n]) {
            Ok(m) => m,
            Err(_) => return false,
        };
        if m != n || ba[..n] != bb[..n] {
            return false;
        }
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let k = f.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(n)
}

/// The zfs-fuse `zpool status` of an imported pool must show every vdev
/// ONLINE without errors.
pub fn assert_status_online(pool: &TestPool, context: &str) {
    let s = pool.zpool(&["status", pool.name()]).unwrap();
    let rows = parse_status(&s);
    assert!(
        !rows.is_empty()
            && rows
                .iter()
                .all(|r| r.state == "ONLINE" && r.read + r.write + r.cksum == 0),
        "[{context}] zfs-fuse zpool status:\n{s}"
    );
}

/// Link counts seen through `root` (a zfs-fuse mount) must be consistent
/// with the tree in `m` (a manifest of that same tree): a non-directory has
/// as many links as names in its hard-link group (1 if none), a directory
/// `2 + number of sub-directories` (the ZFS convention).  Catches link
/// counts a writer forgot to update, which neither manifests nor zdb see.
pub fn assert_nlinks(root: &Path, m: &Manifest, context: &str) {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let mut group_size: HashMap<&Path, u64> = HashMap::new();
    let mut subdirs: HashMap<&Path, u64> = HashMap::new();
    for (k, e) in &m.entries {
        if let Some(g) = &e.link_group {
            *group_size.entry(g.as_path()).or_default() += 1;
        }
        if e.kind == Kind::Dir && k != Path::new(".") {
            let parent = match k.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            *subdirs.entry(parent).or_default() += 1;
        }
    }
    let mut bad = Vec::new();
    for (k, e) in &m.entries {
        let want = if e.kind == Kind::Dir {
            2 + subdirs.get(k.as_path()).copied().unwrap_or(0)
        } else {
            e.link_group
                .as_ref()
                .map(|g| group_size[g.as_path()])
                .unwrap_or(1)
        };
        let p = if k == Path::new(".") {
            root.to_path_buf()
        } else {
            root.join(k)
        };
        let got = fs::symlink_metadata(&p)
            .unwrap_or_else(|e| panic!("[{context}] lstat {}: {e}", p.display()))
            .nlink();
        if got != want {
            bad.push(format!("{}: nlink {got}, expected {want}", k.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "[{context}] link counts through zfs-fuse:\n  {}",
        bad.iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

/// `ozfs zpool scrub -w POOL`, then `zpool status` must say it repaired
/// nothing and found no errors (panics with the status and `context`);
/// returns the status.
pub fn oz_scrub_clean(oz: &Ozfs, pool: &str, context: &str) -> String {
    oz.ok(&["zpool", "scrub", "-w", pool]);
    let st = oz.ok(&["zpool", "status", pool]);
    assert!(
        st.contains("repaired 0B") && st.contains("with 0 errors"),
        "{context}:\n{st}"
    );
    st
}

/// Whether `p` is a mount point now (`/proc/self/mountinfo`).
pub fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy().into_owned();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Stops the daemon a test started (a shutdown request) and unmounts
/// leftovers, when dropped.
pub struct DaemonCleanup<'a> {
    pub oz: &'a Ozfs,
    pub mnts: Vec<PathBuf>,
}

impl Drop for DaemonCleanup<'_> {
    fn drop(&mut self) {
        use std::io::Write;
        let sock = self.oz.state_dir().join("ozfsd.sock");
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) {
            let _ = s.write_all(b"{\"cmd\":\"shutdown\"}\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
        }
        std::thread::sleep(Duration::from_millis(200));
        for m in self.mnts.iter().rev() {
            if is_mounted(m) {
                let _ = Command::new("fusermount")
                    .args(["-u", "-z"])
                    .arg(m)
                    .status();
            }
        }
    }
}
