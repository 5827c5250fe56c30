//! (d) Bad input: broken devices, missing devices beyond redundancy, stale
//! uberblocks, bad command lines.  ozfs must fail with a nonzero exit code
//! (1 for operational errors, 2 for usage errors) and a clear message on
//! stderr, never panic — or, for the uberblock case, fall back to the
//! newest *valid* uberblock.

mod common;
use common::*;
use std::ffi::OsStr;
use std::path::Path;
use std::time::Instant;

fn small_pool(layout: Layout, ndev: usize) -> TestPool {
    let pool = TestPool::create(layout, ndev, 64 * MIB).unwrap();
    populate::add_file(&pool.root(""), "file", 3 * MIB, 5).unwrap();
    populate::add_file(&pool.root(""), "dir/small", 1000, 6).unwrap();
    pool
}

/// `ozfs zpool import -d DIR` of a directory that holds no importable pool
/// `name`: must not panic; if it lists `name`, then not as ONLINE.
fn listing_without(oz: &Ozfs, dir: &Path, name: &str) {
    let out = oz.run(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-d"),
        dir.as_os_str(),
    ]);
    if let Some(block) = pool_block(&out.stdout, name) {
        assert!(
            !block.contains("state: ONLINE"),
            "broken pool listed as ONLINE:\n{}",
            out.describe()
        );
    }
}

fn import_fails(oz: &Ozfs, dir: &Path, name: &str) -> proc::CmdOutput {
    let out = oz.fails(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-d"),
        dir.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("readonly=on"),
        OsStr::new(name),
    ]);
    assert_error(&out, Some(1), &["cannot import", name]);
    out
}

#[test]
fn bad_input_truncated_device() {
    let mut pool = small_pool(Layout::Stripe, 1);
    pool.export().unwrap();
    damage::truncate_dev(&pool.devs()[0], 10 * MIB).unwrap();
    if setup_only() {
        return;
    }
    let oz = ozfs();
    listing_without(&oz, &pool.dev_dir(), pool.name());
    import_fails(&oz, &pool.dev_dir(), pool.name());
}

#[test]
fn bad_input_zeroed_labels() {
    let mut pool = small_pool(Layout::Stripe, 1);
    pool.export().unwrap();
    damage::zero_labels(&pool.devs()[0]).unwrap();
    if setup_only() {
        return;
    }
    let oz = ozfs();
    let out = oz.run(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-d"),
        pool.dev_dir().as_os_str(),
    ]);
    assert!(
        !out.success() && !out.stdout.contains(pool.name()),
        "nothing to import:\n{}",
        out.describe()
    );
    import_fails(&oz, &pool.dev_dir(), pool.name());
}

#[test]
fn bad_input_random_bytes_device() {
    if setup_only() {
        return;
    }
    let dir = tempfile::tempdir_in(test_tmp_root()).unwrap();
    damage::random_device(&dir.path().join("garbage"), 64 * MIB, 99).unwrap();
    let oz = ozfs();
    let out = oz.run(&[
        OsStr::new("zpool"),
        OsStr::new("import"),
        OsStr::new("-d"),
        dir.path().as_os_str(),
    ]);
    assert!(!out.success(), "nothing to import:\n{}", out.describe());
    import_fails(&oz, dir.path(), "garbage");
}

#[test]
fn bad_input_raidz1_two_missing() {
    let mut pool = small_pool(Layout::Raidz1, 3);
    pool.export().unwrap();
    pool.move_aside(0).unwrap();
    pool.move_aside(2).unwrap();
    if setup_only() {
        return;
    }
    let oz = ozfs();
    listing_without(&oz, &pool.dev_dir(), pool.name());
    import_fails(&oz, &pool.dev_dir(), pool.name());
}

/// Several txgs exist; every uberblock except those of the txg at the first
/// export is corrupted (checksum mismatch, magic and txg intact).  The pool
/// must import at that older txg with exactly the content it had then.
///
/// Note: the brief said "all but the oldest"; the oldest uberblocks in the
/// ring may point at blocks that later txgs already freed and reused, so we
/// keep the one of a known good state (validated with zfs-fuse on a copy).
#[test]
fn bad_input_only_old_uberblock_valid() {
    let t0 = Instant::now();
    let mut pool = small_pool(Layout::Stripe, 1);
    pool.set("", "atime", "off").unwrap();
    populate(&pool.root(""), &Profile::small(81)).unwrap();
    let old = pool.record_snapshot("", "old").unwrap();
    pool.export().unwrap();
    let dev = pool.devs()[0].clone();
    let t_old = damage::find_uberblocks(&dev)
        .unwrap()
        .iter()
        .map(|u| u.txg)
        .max()
        .unwrap();

    // More txgs: import, change things, export.  (One round makes ~25
    // txgs: few enough that the old uberblock's ring slot survives even
    // with 4K slots, i.e. 32 per ring.)
    for round in 0..1 {
        pool.import().unwrap();
        pool.create_dataset(&format!("after{round}"), &[]).unwrap();
        populate::add_file(&pool.root(""), &format!("new_after_{round}"), 200_000, 7).unwrap();
        pool.snapshot("", &format!("after{round}")).unwrap();
        pool.export().unwrap();
    }
    let ubs = damage::find_uberblocks(&dev).unwrap();
    let t_new = ubs.iter().map(|u| u.txg).max().unwrap();
    assert!(t_new > t_old, "no new txgs? {t_old} {t_new}");
    assert!(
        ubs.iter().any(|u| u.txg == t_old),
        "harness: uberblock of txg {t_old} was overwritten in the ring (txgs now up to {t_new})"
    );
    let n = damage::corrupt_uberblocks_except(&dev, |t| t == t_old).unwrap();
    eprintln!("kept txg {t_old}, corrupted {n} uberblocks (newest was {t_new})");

    // zfs-fuse must see the pool at t_old (validated on a copy).
    let copy = copy_devices(&pool, "ubcopy");
    pool.import_from(&copy).unwrap();
    let names = pool
        .zfs(&["list", "-H", "-o", "name", "-t", "all"])
        .unwrap();
    assert!(
        !names.contains("after0"),
        "harness: zfs-fuse did not roll back to txg {t_old}:\n{names}"
    );
    let live = Manifest::scan(pool.root("")).unwrap();
    old.assert_same(&live, "harness: zfs-fuse view of the rolled-back pool");
    pool.export().unwrap();
    std::fs::remove_dir_all(&copy).unwrap();
    phase("uberblock: zfs-fuse setup", t0);
    if setup_only() {
        return;
    }

    let oz = ozfs();
    oz.import_ro(&pool.dev_dir(), pool.name());
    let st = oz.ok(&["zpool", "status", pool.name()]);
    assert!(st.contains(pool.name()), "{st}");
    oz.ok(&["zpool", "list", "-H", pool.name()]);
    let names = oz.dataset_names();
    assert!(
        names.iter().any(|n| n == &format!("{}@old", pool.name()))
            && !names.iter().any(|n| n.contains("after")),
        "datasets at txg {t_old}:\n{}",
        names.join("\n")
    );
    let ub = oz.ok(&["zdb", "-u", pool.name()]);
    assert!(
        ub.contains(&format!("txg = {t_old}")),
        "zdb -u should show txg {t_old}:\n{ub}"
    );
    let dest = dest_for(&pool, "ub", "live");
    oz.cp(&format!("{}:/", pool.name()), &dest);
    old.assert_same(&Manifest::scan(&dest).unwrap(), "copy-out at the old txg");
}

#[test]
fn bad_input_missing_things() {
    let mut pool = small_pool(Layout::Stripe, 1);
    pool.snapshot("", "snap").unwrap();
    pool.export().unwrap();
    if setup_only() {
        return;
    }
    let oz = ozfs();
    let name = pool.name().to_string();
    let dest = pool.work_dir("never");
    let d = dest.to_string_lossy().into_owned();

    // Not imported yet / never existing.
    let out = oz.fails_with(1, &["zpool", "status", "nosuchpool"]);
    assert_error(&out, Some(1), &["nosuchpool"]);
    oz.fails_with(1, &["zfs", "list", "nosuchpool"]);
    oz.fails_with(1, &["cp", "-r", "nosuchpool:/", &d]);
    oz.fails_with(1, &["zpool", "import", "-d", "/nonexistent/dir", &name]);
    oz.fails_with(
        1,
        &[
            "zpool",
            "import",
            "-d",
            &pool.dev_dir().to_string_lossy(),
            "nosuchpool",
        ],
    );

    oz.import_ro(&pool.dev_dir(), &name);
    let out = oz.fails_with(1, &["cp", "-r", &format!("{name}:/no/such/path"), &d]);
    assert_error(&out, Some(1), &["/no/such/path"]);
    let out = oz.fails_with(1, &["cp", "-r", &format!("{name}@nosnap:/"), &d]);
    assert_error(&out, Some(1), &["nosnap"]);
    let out = oz.fails_with(1, &["cp", "-r", &format!("{name}/nosuchds:/"), &d]);
    assert_error(&out, Some(1), &["nosuchds"]);
    oz.fails_with(1, &["zfs", "get", "all", &format!("{name}/nosuchds")]);
    oz.fails_with(1, &["zdb", "-d", &format!("{name}/nosuchds")]);
    assert!(
        !dest.exists() || std::fs::read_dir(&dest).unwrap().next().is_none(),
        "failed cp left files"
    );
    // A file copied onto a path whose parent does not exist.
    oz.fails_with(
        1,
        &["cp", "-r", &format!("{name}:/file"), "/nonexistent/dir/x"],
    );
    oz.ok(&["zpool", "export", &name]);
    oz.fails_with(1, &["zpool", "export", &name]);
}

#[test]
fn bad_input_usage_errors_exit_2() {
    if setup_only() {
        return;
    }
    let oz = ozfs();
    for args in [
        vec!["frobnicate"],
        vec!["zpool"],
        vec!["zpool", "frobnicate"],
        vec!["zpool", "import", "-d"],
        vec!["zpool", "export"],
        vec!["zpool", "list", "--no-such-flag"],
        vec!["zfs", "get"],
        vec!["zfs", "list", "-o"],
        vec!["cp", "-r"],
        vec!["cp", "-r", "only-one-argument"],
        vec!["zdb", "-R"],
    ] {
        let out = oz.fails(&args);
        assert_eq!(
            out.code,
            Some(2),
            "usage error should exit 2:\n{}",
            out.describe()
        );
    }
    // No arguments at all: usage on stderr, exit 2.
    let out = oz.run::<&str>(&[]);
    assert_eq!(out.code, Some(2), "{}", out.describe());
}
