//! Shared scenario helpers for the ozfs integration tests.
//!
//! Every test builds its pools with zfs-fuse *in the same run* (see
//! `ozfs-testkit`), records the manifests of the live trees right before each
//! snapshot and at the end, exports the pool, and then checks that ozfs
//! reproduces every recorded tree with `ozfs cp -r`.
//!
//! `OZFS_TEST_SETUP_ONLY=1` stops each scenario after the zfs-fuse part
//! (pool creation, content, damage, zfs-fuse-side validation); useful to
//! time or debug the harness while the CLI is incomplete.  CI never sets it.

#![allow(dead_code)]

pub use ozfs_testkit::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `ozfs zpool get -Hp -o value PROP POOL`, trimmed.
pub fn zpool_get(oz: &Ozfs, prop: &str, pool: &str) -> String {
    oz.ok(&["zpool", "get", "-Hp", "-o", "value", prop, pool])
        .trim()
        .to_string()
}

/// An `Ozfs` runner for the binary under test, with a private state dir.
pub fn ozfs() -> Ozfs {
    Ozfs::new(env!("CARGO_BIN_EXE_ozfs"))
}

/// True when only the zfs-fuse side should run.
pub fn setup_only() -> bool {
    std::env::var_os("OZFS_TEST_SETUP_ONLY").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Prints how long a phase took (shown with `--nocapture` or on failure).
pub fn phase(name: &str, t0: Instant) {
    eprintln!("[{name}] {:.1?}", t0.elapsed());
}

/// One expected tree: a full dataset or snapshot name and its manifest.
#[derive(Debug, Clone)]
pub struct Expected {
    /// `pool`, `pool/ds`, `pool@snap` or `pool/ds@snap`.
    pub name: String,
    /// What `ozfs cp -r <name>:/ DEST` must produce.
    pub manifest: Manifest,
}

/// Standard history of one dataset: populate with `profile`, then
/// `nsnaps` times { record + snapshot `s<i>`, mutate round i }, then
/// record the live state.  Returns one [`Expected`] per snapshot plus the
/// live dataset.
pub fn standard_history(
    pool: &TestPool,
    rel: &str,
    profile: &Profile,
    nsnaps: u32,
) -> Vec<Expected> {
    let root = pool.root(rel);
    let rep = populate(&root, profile).unwrap_or_else(|e| panic!("populate {}: {e}", pool.ds(rel)));
    if profile.xattrs && !rep.xattrs {
        eprintln!("NOTE: {}: {:?}", pool.ds(rel), rep.notes);
    }
    // Without xattrs in the profile, skip listxattr while recording (slow on
    // zfs-fuse); copy-outs are still scanned with xattrs, so invented xattrs
    // would show up as differences.
    let opts = ScanOptions {
        xattrs: profile.xattrs,
        ..ScanOptions::default()
    };
    let mut out = Vec::new();
    for i in 1..=nsnaps {
        let snap = format!("s{i}");
        let m = pool
            .record_snapshot_with(rel, &snap, &opts)
            .unwrap_or_else(|e| panic!("snapshot {}@{snap}: {e}", pool.ds(rel)));
        out.push(Expected {
            name: format!("{}@{snap}", pool.ds(rel)),
            manifest: m,
        });
        mutate(&root, i, profile.seed).unwrap_or_else(|e| panic!("mutate {}: {e}", pool.ds(rel)));
    }
    let live = pool
        .record_live_with(rel, &opts)
        .unwrap_or_else(|e| panic!("record {}: {e}", pool.ds(rel)));
    out.push(Expected {
        name: pool.ds(rel),
        manifest: live,
    });
    out
}

/// Creates a dataset (`props`), sets atime=off, runs [`standard_history`].
pub fn dataset_history(
    pool: &TestPool,
    rel: &str,
    props: &[(&str, &str)],
    profile: &Profile,
    nsnaps: u32,
) -> Vec<Expected> {
    let mut p: Vec<(&str, &str)> = vec![("atime", "off")];
    p.extend_from_slice(props);
    pool.create_dataset(rel, &p)
        .unwrap_or_else(|e| panic!("zfs create {}: {e}", pool.ds(rel)));
    standard_history(pool, rel, profile, nsnaps)
}

/// `ozfs zpool import -d DIR` (listing): must succeed and show `pool` with
/// `state: <state>`.  Returns the listing.
pub fn assert_listed(oz: &Ozfs, dir: &Path, pool: &str, state: &str) -> String {
    let out = oz.ok(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-d"),
        dir.as_os_str(),
    ]);
    let block = pool_block(&out, pool).unwrap_or_else(|| {
        panic!(
            "`ozfs zpool import -d {}` does not list {pool}:\n{out}",
            dir.display()
        )
    });
    assert!(
        block.lines().any(|l| l.trim() == format!("state: {state}")),
        "pool {pool} should be listed with state {state}:\n{out}"
    );
    out
}

/// The part of a `zpool import` listing about `pool` (from its `pool:` line
/// to the next one).
pub fn pool_block(listing: &str, pool: &str) -> Option<String> {
    let mut found = false;
    let mut block = String::new();
    for line in listing.lines() {
        if let Some(name) = line.trim().strip_prefix("pool:") {
            if found {
                break;
            }
            found = name.trim() == pool;
        }
        if found {
            block.push_str(line);
            block.push('\n');
        }
    }
    found.then_some(block)
}

/// Imports read-only with ozfs and checks `zfs list -t all` shows every
/// expected dataset and snapshot.
pub fn import_and_check_names(oz: &Ozfs, pool: &TestPool, expected: &[Expected]) {
    oz.import_ro(&pool.dev_dir(), pool.name());
    let names = oz.dataset_names();
    for e in expected {
        assert!(
            names.iter().any(|n| n == &e.name),
            "`ozfs zfs list -t all -H -o name` misses {}:\n{}",
            e.name,
            names.join("\n")
        );
    }
}

/// A fresh, not yet existing destination directory for a copy-out.
pub fn dest_for(pool: &TestPool, tag: &str, name: &str) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let p = pool.work_dir(&format!("{tag}-{safe}"));
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// For every expected tree: `ozfs cp -r <name>:/ DEST` and compare the
/// manifest of DEST with the recorded one.  Copies are deleted afterwards.
pub fn verify_copyouts(oz: &Ozfs, pool: &TestPool, expected: &[Expected], tag: &str) {
    for e in expected {
        let t0 = Instant::now();
        let dest = dest_for(pool, tag, &e.name);
        oz.cp(&format!("{}:/", e.name), &dest);
        let got = Manifest::scan(&dest)
            .unwrap_or_else(|err| panic!("scanning copy of {}: {err}", e.name));
        e.manifest.assert_same(
            &got,
            &format!("[{tag}] ozfs cp -r {}:/ vs zfs-fuse", e.name),
        );
        let _ = std::fs::remove_dir_all(&dest);
        eprintln!(
            "[{tag}] {} OK ({} entries, {:.1?})",
            e.name,
            got.len(),
            t0.elapsed()
        );
    }
}

/// Copies a sub-directory and a single file out of `e` and compares them.
pub fn verify_partial_copyouts(
    oz: &Ozfs,
    pool: &TestPool,
    e: &Expected,
    dir: &str,
    file: &str,
    tag: &str,
) {
    let dest = dest_for(pool, tag, &format!("{}-sub", e.name));
    oz.cp(&format!("{}:/{dir}", e.name), &dest);
    let got = Manifest::scan(&dest).unwrap();
    e.manifest
        .subtree(dir)
        .assert_same(&got, &format!("ozfs cp -r {}:/{dir}", e.name));
    let _ = std::fs::remove_dir_all(&dest);

    let dest = dest_for(pool, tag, &format!("{}-file", e.name));
    oz.cp(&format!("{}:/{file}", e.name), &dest);
    let want = e
        .manifest
        .get(file)
        .unwrap_or_else(|| panic!("{file} not in manifest"));
    let md = std::fs::symlink_metadata(&dest).unwrap();
    assert!(
        md.is_file(),
        "copy of a file should be a file: {}",
        dest.display()
    );
    assert_eq!(
        Some(manifest::sha256_file(&dest).unwrap()),
        want.sha256,
        "content of {file}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(md.mode() & 0o7777, want.mode, "mode of {file}");
    assert_eq!((md.mtime(), md.mtime_nsec()), want.mtime, "mtime of {file}");
    let _ = std::fs::remove_file(&dest);
}

/// Copies the device files (sparse) into `<pool tmp>/work/<name>` and
/// returns that directory (to let zfs-fuse look at damaged devices without
/// touching the originals).
pub fn copy_devices(pool: &TestPool, name: &str) -> PathBuf {
    let dir = pool.work_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    for d in pool.devs() {
        if !d.exists() {
            continue;
        }
        let to = dir.join(d.file_name().unwrap());
        let st = std::process::Command::new("cp")
            .arg("--sparse=always")
            .arg(d)
            .arg(&to)
            .status()
            .unwrap();
        assert!(st.success(), "cp {}", d.display());
    }
    dir
}

/// Imports copies of the devices in zfs-fuse, scrubs, and returns the
/// `zpool status` text; the copy is exported again and removed.  Used to
/// validate that damage done by a test is real and recoverable *for ZFS*.
pub fn zfs_fuse_scrub_copy(pool: &mut TestPool) -> String {
    let dir = copy_devices(pool, "scrubcopy");
    pool.import_from(&dir)
        .unwrap_or_else(|e| panic!("zfs-fuse import of damaged copy: {e}"));
    let name = pool.name().to_string();
    pool.zpool(&["scrub", &name]).unwrap();
    let t0 = Instant::now();
    let status = loop {
        let s = pool.zpool(&["status", "-v", &name]).unwrap();
        if !s.contains("in progress") || t0.elapsed() > Duration::from_secs(300) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    pool.export().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    status
}

/// Standard checks on an ozfs failure: exit code as given (or any nonzero
/// for `None`), stderr mentions every `needle`.
pub fn assert_error(out: &proc::CmdOutput, code: Option<i32>, needles: &[&str]) {
    if let Some(c) = code {
        assert_eq!(out.code, Some(c), "exit code:\n{}", out.describe());
    }
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr should mention {n:?}:\n{}",
            out.describe()
        );
    }
}

/// The OpenZFS corpus (pools made by the real OpenZFS 2.3.2):
/// `OZFS_CORPUS` when set (a checkout elsewhere, e.g. a git worktree), else
/// `../shared/corpus/openzfs-2.3` beside the checkout.
pub fn corpus_dir() -> PathBuf {
    let c = std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| ozfs_testkit::daemon::repo_root().join("../shared/corpus/openzfs-2.3"));
    assert!(
        c.is_dir(),
        "{}: the OpenZFS corpus is missing (../shared beside the checkout)",
        c.display()
    );
    c
}

/// Unpacks a corpus pool's `*.img.gz` from `src` into `devs`, sparse (the
/// images are mostly zeros).
pub fn unpack_corpus(src: &Path, devs: &Path) {
    std::fs::create_dir_all(devs).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(img) = name.strip_suffix(".gz") else {
            continue;
        };
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"gzip -dc "$1" | cp --sparse=always /dev/stdin "$2""#)
            .args([
                "sh",
                &e.path().to_string_lossy(),
                &devs.join(img).to_string_lossy(),
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "unpacking {}", e.path().display());
    }
}

/// OpenZFS 2.3's own `zdb` in user space (`../shared/oracle/openzfs-userland.sh`,
/// installed by `scripts/install-deps.sh` into /opt/openzfs-2.3, or
/// `OZFS_ORACLE_ZDB`). Under `CI=true` its absence fails the test; on a
/// developer machine without it the caller is told to skip (None).
pub fn oracle_zdb() -> Option<PathBuf> {
    let p = std::env::var_os("OZFS_ORACLE_ZDB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/openzfs-2.3/bin/zdb"));
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{}: OpenZFS's zdb (the oracle) is missing; scripts/install-deps.sh installs it",
        p.display()
    );
    eprintln!("skipped: no OpenZFS zdb at {}", p.display());
    None
}

/// OpenZFS's verdict on the exported pool in `devs`.
pub fn openzfs_verdict(zdb: &Path, devs: &Path, pool: &str) -> String {
    let out = std::process::Command::new(zdb)
        .arg("-e")
        .arg("-p")
        .arg(devs)
        .arg("-bcc")
        .arg(pool)
        .output()
        .expect("run OpenZFS zdb");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success()
            && text.contains("No leaks (block sum matches space maps exactly)")
            && !text.contains("checksum error")
            && !text.contains("leaked space")
            && !text.contains("mismatch"),
        "OpenZFS zdb -bcc {pool}:\n{text}"
    );
    // `-d` adds what `-bcc` leaves out: every MOS object referenced exactly
    // once (dead lists, bpobjs, ZAPs...) and the feature reference counts
    // it can verify.
    let out = std::process::Command::new(zdb)
        .arg("-e")
        .arg("-p")
        .arg(devs)
        .arg("-d")
        .arg(pool)
        .output()
        .expect("run OpenZFS zdb -d");
    let d = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success()
            && !d.contains("leaked")
            && !d.contains("mismatch")
            && !d.contains("referenced but not allocated"),
        "OpenZFS zdb -d {pool}:\n{d}"
    );
    text
}

/// `ozfs zpool import -o readonly=on -d DEVS POOL`, which must succeed.
pub fn import_readonly(oz: &Ozfs, devs: &Path, pool: &str) {
    oz.ok(&[
        "zpool",
        "import",
        "-o",
        "readonly=on",
        "-d",
        &devs.to_string_lossy(),
        pool,
    ]);
}

/// The corpus pools that have file `marker` (`manifest.txt`, `zdb.txt`,
/// `props.txt`), sorted by name.
pub fn corpus_pools(marker: &str) -> Vec<String> {
    let mut pools: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus")
        .flatten()
        .filter(|e| e.path().join(marker).is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    pools.sort();
    pools
}

/// A scratch directory for one test under the test tree, removed on drop.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(ozfs_testkit::pool::test_tmp_root())
        .expect("temp dir")
}

/// OpenZFS's `zdb -e -p DEVS -K KEY -r DATASET PATH`: the file of an
/// encrypted dataset of the exported pool in `devs`, decrypted by OpenZFS
/// (None when zdb copied nothing), and what zdb printed.
pub fn openzfs_read_encrypted(
    zdb: &Path,
    devs: &Path,
    key: &str,
    dataset: &str,
    path: &str,
) -> (Option<Vec<u8>>, String) {
    let out = devs.join(".zdb-read-out");
    let _ = std::fs::remove_file(&out);
    let r = std::process::Command::new(zdb)
        .arg("-e")
        .arg("-p")
        .arg(devs)
        .args(["-K", key.trim(), "-r", dataset, path])
        .arg(&out)
        .output()
        .expect("run OpenZFS zdb -r");
    let got = std::fs::read(&out).ok();
    let _ = std::fs::remove_file(&out);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    (got, text)
}
