//! (c) Crash consistency: a device that stops accepting writes mid-sync.
//!
//! ozfs creates a raidz1 pool, copies a base tree in and exports; the device
//! files are kept as a pristine copy.  Then, for a spread of limits N, on a
//! fresh copy of the devices: `ozfs zpool import` (read-write), then
//! `OZFS_FAULT_WRITE_LIMIT=N OZFS_TXG_BYTES=1M ozfs cp -r NEW POOL/ds:/x`
//! (N device writes succeed, every later one fails; one cp spans many
//! txgs).  N is a fixed spread (1..300) in one test; in the other, the
//! number T of writes the whole cp needs is found by bisection and N is
//! T/4, T/2, 3T/4, T-20, T-5, T-2, T-1 (everything but the new uberblock
//! written) and T, T+1, T+4, T+12 (only some uberblock/label copies new).  ozfs must fail cleanly (exit 1, message, no panic) or succeed.
//! Without any further write by the crashed process, the devices must hold
//! a consistent pool:
//! * ozfs (fresh state dir) imports it read-only; the base tree is intact;
//!   everything under /x is part of the new tree (files: a prefix of their
//!   source; the whole tree if the cp succeeded);
//! * zfs-fuse's `zdb -bcc` is clean, and zfs-fuse imports it (`-f`: the
//!   pool was never exported) and sees the base tree;
//! * ozfs can import it read-write again, finish the copy, export, and the
//!   result is zdb-clean and what zfs-fuse sees.
//!
//! A second test does the same for `ozfs rm -r` of a tree.

mod common;
mod wcommon;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use wcommon::*;

/// The pool, the pristine devices and the trees of one crash scenario.
struct Scenario {
    pool: TestPool,
    pristine: PathBuf,
    _local: tempfile::TempDir,
    base: Manifest,
    new_tree: PathBuf,
    new_m: Manifest,
}

const DS: &str = "ds";

fn setup(tag: &str, seed: u64) -> Scenario {
    let t0 = Instant::now();
    let pool = new_devs(&format!("ozc{tag}"), Layout::Raidz1, 3, 96);
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    oz_create_ds(&oz, &pool, DS, &[("compression", "lzjb")]);
    let local = local_dir(tag);
    let (base_src, base) = source_tree(local.path(), "base", &Profile::small(seed));
    oz_cp_in(&oz, &base_src, &format!("{}:/base", pool.ds(DS)));
    oz_export(&oz, pool.name());
    let (new_tree, new_m) = source_tree(
        local.path(),
        "new",
        &Profile {
            sizes: true,
            large: true,
            dirs: true,
            symlinks: true,
            hardlinks: true,
            ..Profile::none(seed + 1)
        },
    );
    let pristine = pool.work_dir("pristine");
    copy_dev_files(&pool, &pool.dev_dir(), &pristine);
    phase(&format!("{tag}: setup"), t0);
    Scenario {
        pool,
        pristine,
        _local: local,
        base,
        new_tree,
        new_m,
    }
}

/// Everything under `got_root` (a copy-out of /x) must come from the new
/// tree at `src_root`: same kind, symlink targets equal, files a prefix of
/// their source.  Returns (entries, complete files).
fn check_partial(got_root: &Path, src_root: &Path, context: &str) -> (usize, usize) {
    let got = Manifest::scan_with(
        got_root,
        &ScanOptions {
            xattrs: false,
            hash: false,
            ..ScanOptions::default()
        },
    )
    .unwrap();
    let mut complete = 0;
    for (k, e) in &got.entries {
        let src = if k == Path::new(".") {
            src_root.to_path_buf()
        } else {
            src_root.join(k)
        };
        let md = fs::symlink_metadata(&src).unwrap_or_else(|_| {
            panic!(
                "[{context}] after the crash, /x/{} exists but is not in the source tree",
                k.display()
            )
        });
        match e.kind {
            Kind::Dir => assert!(md.is_dir(), "[{context}] {}: not a dir", k.display()),
            Kind::Symlink => assert_eq!(
                e.target.as_deref(),
                Some(fs::read_link(&src).unwrap().as_os_str()),
                "[{context}] symlink {}",
                k.display()
            ),
            Kind::File => {
                assert!(
                    is_prefix_file(&got_root.join(k), &src),
                    "[{context}] after the crash, file /x/{} ({} bytes) is not a prefix of its source ({} bytes)",
                    k.display(),
                    e.size.unwrap_or(0),
                    md.len()
                );
                if e.size == Some(md.len()) {
                    complete += 1;
                }
            }
            other => panic!("[{context}] unexpected {other:?} at {}", k.display()),
        }
    }
    (got.len(), complete)
}

/// What a crashed command run against a copy of the pristine devices did.
struct CrashRun {
    dir: PathBuf,
    ok: bool,
}

/// Copies the pristine devices to `work/att-<tag>`, imports read-write
/// and runs `ozfs <args>` with `OZFS_FAULT_WRITE_LIMIT=limit`.
fn crash_run(s: &Scenario, tag: &str, limit: u64, args: &[&str]) -> CrashRun {
    let dir = s.pool.work_dir(&format!("att-{tag}"));
    copy_dev_files(&s.pool, &s.pristine, &dir);
    let oz = ozfs();
    oz_import_rw(&oz, &dir, s.pool.name());
    let lim = limit.to_string();
    let out = oz.run_env(
        &[
            ("OZFS_FAULT_WRITE_LIMIT", lim.as_str()),
            ("OZFS_TXG_BYTES", "1048576"),
        ],
        args,
    );
    assert!(
        !out.timed_out && out.code.is_some(),
        "[{tag}] ozfs did not exit normally:\n{}",
        out.describe()
    );
    if !out.success() {
        assert_eq!(
            out.code,
            Some(1),
            "[{tag}] failing write: exit code:\n{}",
            out.describe()
        );
        assert!(
            !out.stderr.trim().is_empty(),
            "[{tag}] failing write without a message:\n{}",
            out.describe()
        );
    }
    eprintln!(
        "[{tag}] limit {limit}: exit {:?}, {:.1?}: {}",
        out.code,
        out.elapsed,
        out.stderr.lines().next().unwrap_or("")
    );
    // The state dir of `oz` (which still says "imported") goes away here.
    CrashRun {
        dir,
        ok: out.success(),
    }
}

/// zfs-fuse imports the crashed state (on a copy: `-f`, it was never
/// exported), sees the base tree as `check` says, exports.
fn zfs_fuse_sees(s: &mut Scenario, dir: &Path, tag: &str, check: impl Fn(&Path)) {
    let copy = s.pool.work_dir(&format!("zf-{tag}"));
    copy_dev_files(&s.pool, dir, &copy);
    s.pool
        .import_from_with(&copy, &["-f"])
        .unwrap_or_else(|e| panic!("[{tag}] zfs-fuse cannot import the crashed pool: {e}"));
    check(&s.pool.root(DS));
    s.pool.export().unwrap();
    let _ = fs::remove_dir_all(&copy);
}

/// Only runs `ozfs <args>` with a write limit on a fresh copy of the
/// pristine devices (no checks): did it succeed?
fn probe(s: &Scenario, limit: u64, args: &[&str]) -> bool {
    let dir = s.pool.work_dir("probe");
    copy_dev_files(&s.pool, &s.pristine, &dir);
    let oz = ozfs();
    oz_import_rw(&oz, &dir, s.pool.name());
    let lim = limit.to_string();
    let out = oz.run_env(
        &[
            ("OZFS_FAULT_WRITE_LIMIT", lim.as_str()),
            ("OZFS_TXG_BYTES", "1048576"),
        ],
        args,
    );
    let _ = fs::remove_dir_all(&dir);
    out.success()
}

/// The smallest write limit with which `ozfs <args>` succeeds (bisection
/// over probe runs; assumes the device write sequence is deterministic).
fn write_threshold(s: &Scenario, args: &[&str]) -> u64 {
    let t0 = Instant::now();
    let mut lo = 1u64; // fails
    let mut hi = 256u64;
    while !probe(s, hi, args) {
        lo = hi;
        hi *= 2;
        assert!(
            hi < 1 << 24,
            "ozfs {args:?} never succeeds with a write limit"
        );
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if probe(s, mid, args) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    eprintln!(
        "ozfs {} needs {hi} device writes (found in {:.1?})",
        args[0],
        t0.elapsed()
    );
    hi
}

/// Limits derived from the threshold `t`: spread over the whole run, the
/// last writes before the final sync's first uberblock write (the state
/// must be the previous txg), and the uberblock and label writes after it
/// (the command succeeds, ZFS-style: a label sync needs one good write).
fn derived_limits(t: u64) -> Vec<u64> {
    let mut v = vec![
        t / 4,
        t / 2,
        3 * t / 4,
        t.saturating_sub(20),
        t.saturating_sub(5),
        t.saturating_sub(2),
        t.saturating_sub(1),
        // The command succeeds, but the writes of the final sync after the
        // first uberblock copy fail: some uberblocks and labels are new,
        // others old.
        t,
        t + 1,
        t + 4,
        t + 12,
        1_000_000_000,
    ];
    v.retain(|&n| n > 0);
    v.dedup();
    v
}

fn cp_crash_case(s: &mut Scenario, limit: u64) {
    let tag = format!("cp-{limit}");
    let name = s.pool.name().to_string();
    let target = format!("{}:/x", s.pool.ds(DS));
    let new_tree = s.new_tree.to_string_lossy().into_owned();
    let run = crash_run(s, &tag, limit, &["cp", "-r", &new_tree, &target]);
    if limit <= 3 {
        assert!(
            !run.ok,
            "[{tag}] cp succeeded with only {limit} device writes"
        );
    }

    // 1. ozfs reads the crashed state (read-only, fresh state dir).
    let oz = ozfs();
    oz.import_ro(&run.dir, &name);
    let out = dest_for(&s.pool, &tag, "copy");
    oz.cp(&format!("{}:/", s.pool.ds(DS)), &out);
    let got_base = Manifest::scan(out.join("base")).unwrap();
    s.base
        .assert_same(&got_base, &format!("[{tag}] base tree after the crash"));
    let x = out.join("x");
    let x_exists = x.exists();
    if run.ok {
        let got = Manifest::scan(&x).unwrap();
        s.new_m
            .assert_same(&got, &format!("[{tag}] /x after a successful cp"));
    } else if x_exists {
        let (n, complete) = check_partial(&x, &s.new_tree, &tag);
        eprintln!("[{tag}] /x after the crash: {n} entries, {complete} complete files");
    } else {
        eprintln!("[{tag}] /x after the crash: absent");
    }
    let _ = fs::remove_dir_all(&out);
    oz_export(&oz, &name);

    // 2. zfs-fuse: zdb and import of the crashed state.
    assert_zdb_clean(&s.pool, &run.dir, &format!("{tag} crashed state"));
    let base = s.base.clone();
    let t = tag.clone();
    zfs_fuse_sees(s, &run.dir, &tag, move |root| {
        let got = scan_zf(&root.join("base"), true);
        base.assert_same(&got, &format!("[{t}] zfs-fuse: base tree after the crash"));
    });

    // 3. ozfs resumes: finish the copy, export; zdb and zfs-fuse agree.
    let oz = ozfs();
    oz_import_rw(&oz, &run.dir, &name);
    if !run.ok {
        if x_exists {
            oz_rm(&oz, &target, true);
        }
        oz_cp_in(&oz, &s.new_tree, &target);
    }
    let got = oz_copyout(&oz, &s.pool, &target, &tag, true);
    s.new_m
        .assert_same(&got, &format!("[{tag}] /x after resuming"));
    oz_export(&oz, &name);
    assert_zdb_clean(&s.pool, &run.dir, &format!("{tag} resumed"));
    s.pool.import_from(&run.dir).unwrap();
    let got = scan_zf(&s.pool.root(DS).join("x"), true);
    s.new_m
        .assert_same(&got, &format!("[{tag}] zfs-fuse: /x after resuming"));
    s.pool.export().unwrap();
    let _ = fs::remove_dir_all(&run.dir);
}

fn cp_crash(tag: &str, seed: u64, limits: Option<&[u64]>) {
    let mut s = setup(tag, seed);
    let limits = match limits {
        Some(l) => l.to_vec(),
        None => {
            let target = format!("{}:/x", s.pool.ds(DS));
            let new_tree = s.new_tree.to_string_lossy().into_owned();
            derived_limits(write_threshold(&s, &["cp", "-r", &new_tree, &target]))
        }
    };
    for n in limits {
        let t = Instant::now();
        cp_crash_case(&mut s, n);
        phase(&format!("{tag}: limit {n}"), t);
    }
}

#[test]
fn write_crash_cp_early() {
    cp_crash("early", 301, Some(&[1, 3, 10, 30, 100, 300]));
}

#[test]
fn write_crash_cp_late() {
    cp_crash("late", 302, None);
}

#[test]
fn write_crash_rm() {
    let tag = "rm";
    let mut s = setup(tag, 303);
    let name = s.pool.name().to_string();
    let target = format!("{}:/base", s.pool.ds(DS));
    let t = write_threshold(&s, &["rm", "-r", &target]);
    // rm -r is a single txg: fewer limits than for cp reach every state.
    let limits = [2u64, t / 2, t - 5, t - 1, t, t + 4, 1_000_000_000];
    for limit in limits {
        let t = Instant::now();
        let ctag = format!("rm-{limit}");
        let run = crash_run(&s, &ctag, limit, &["rm", "-r", &target]);
        if limit <= 2 {
            assert!(
                !run.ok,
                "[{ctag}] rm succeeded with only {limit} device writes"
            );
        }
        // Whatever is left of /base is unchanged (complete files).
        let oz = ozfs();
        oz.import_ro(&run.dir, &name);
        let out = dest_for(&s.pool, &ctag, "copy");
        oz.cp(&format!("{}:/", s.pool.ds(DS)), &out);
        let left = out.join("base");
        let left_exists = left.exists();
        if run.ok {
            assert!(!left.exists(), "[{ctag}] /base still exists after rm -r");
        } else if left_exists {
            let got = Manifest::scan(&left).unwrap();
            for (k, e) in &got.entries {
                let want = s.base.get(k).unwrap_or_else(|| {
                    panic!("[{ctag}] /base/{} was not in the base tree", k.display())
                });
                assert_eq!(e.kind, want.kind, "[{ctag}] kind of {}", k.display());
                assert_eq!(e.sha256, want.sha256, "[{ctag}] content of {}", k.display());
                assert_eq!(e.target, want.target, "[{ctag}] target of {}", k.display());
            }
            eprintln!("[{ctag}] {} of {} entries left", got.len(), s.base.len());
        }
        let _ = fs::remove_dir_all(&out);
        oz_export(&oz, &name);
        assert_zdb_clean(&s.pool, &run.dir, &format!("{ctag} crashed state"));
        zfs_fuse_sees(&mut s, &run.dir, &ctag, |_| {});
        // Resume: finish the removal.
        let oz = ozfs();
        oz_import_rw(&oz, &run.dir, &name);
        if left_exists {
            oz_rm(&oz, &target, true);
        }
        oz_export(&oz, &name);
        assert_zdb_clean(&s.pool, &run.dir, &format!("{ctag} resumed"));
        let _ = fs::remove_dir_all(&run.dir);
        phase(&format!("{tag}: limit {limit}"), t);
    }
}
