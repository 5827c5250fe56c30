//! Self-test of the harness against zfs-fuse alone (no ozfs involved):
//! pools can be created, populated, scanned, snapshotted, exported and
//! re-imported; a `cp -a` copy through `/proc/<pid>/root` has the same
//! manifest; manifests are stable across scans; mutations are detected.

use ozfs_testkit::*;
use std::process::Command;
use std::time::Instant;

fn cp_a(src: &std::path::Path, dst: &std::path::Path) {
    std::fs::create_dir_all(dst).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(dst)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a failed");
}

#[test]
fn zfs_fuse_roundtrip_and_manifests() {
    let t0 = Instant::now();
    let mut pool = TestPool::create(Layout::Stripe, 1, 256 * MIB).unwrap();
    pool.set("", "atime", "off").unwrap();
    let root = pool.root("");
    let rep = populate(&root, &Profile::moderate(42)).unwrap();
    eprintln!("populate: {rep:?} after {:?}", t0.elapsed());
    assert!(
        rep.xattrs,
        "xattrs should work with zfs-fuse -x: {:?}",
        rep.notes
    );

    let m1 = pool.record_snapshot("", "s1").unwrap();
    eprintln!(
        "{} entries, {} file bytes, at {:?}",
        m1.len(),
        m1.file_bytes(),
        t0.elapsed()
    );
    assert!(m1.len() > 200, "{}", m1.len());
    // Scanning again changes nothing (scans create xattr dirs on zfs-fuse).
    let again = Manifest::scan(&root).unwrap();
    m1.assert_same(&again, "second scan of the live dataset");

    // Spot checks of what the manifest captured.
    let e = m1.get("modes/f4755").unwrap();
    assert_eq!(e.mode, 0o4755);
    let e = m1.get("owners/suid1000").unwrap();
    assert_eq!((e.uid, e.gid, e.mode), (1000, 1000, 0o4750));
    assert_eq!(
        m1.get("links/len56")
            .unwrap()
            .target
            .as_ref()
            .unwrap()
            .len(),
        56
    );
    assert_eq!(m1.get("fifos/fifo_a").unwrap().kind, Kind::Fifo);
    assert_eq!(m1.get("times/y2038").unwrap().mtime, (2_147_000_000, 0));
    assert_eq!(
        m1.get("xattr/file_1k").unwrap().xattrs[std::ffi::OsStr::new("user.kib")].len(),
        1024
    );
    assert_eq!(m1.get("xattr/file_small").unwrap().xattrs.len(), 4);
    assert_eq!(
        m1.get("hl/b/third").unwrap().link_group.as_deref(),
        Some(std::path::Path::new("hl/a/second"))
    );
    assert_eq!(m1.get("sparse/far_byte").unwrap().size, Some(64 * MIB + 4));

    // cp -a through /proc/<pid>/root reproduces the tree exactly.
    let copy = pool.work_dir("cp_a");
    cp_a(&root, &copy);
    let mc = Manifest::scan(&copy).unwrap();
    m1.assert_same(&mc, "cp -a copy of the zfs-fuse mount");

    // Mutations show up in the diff.
    mutate(&root, 1, 42).unwrap();
    let m2 = pool.record_snapshot("", "s2").unwrap();
    let d = m1.diff(&m2);
    eprintln!("round 1 diff ({} lines):\n{}", d.len(), d.join("\n"));
    assert!(d.iter().any(|l| l.contains("sizes/f_513")));
    assert!(d.iter().any(|l| l.contains("modes/f0600: mode")));
    mutate(&root, 2, 42).unwrap();
    let m3 = pool.record_live("").unwrap();
    assert!(!m2.diff(&m3).is_empty());

    // Export / import keeps the live state (the settled mtimes are on disk).
    pool.export().unwrap();
    let t_ex = Instant::now();
    pool.import().unwrap();
    eprintln!("export+import: {:?}", t_ex.elapsed());
    let m3b = Manifest::scan(pool.root("")).unwrap();
    m3.assert_same(&m3b, "live state after export/import");
    let list = pool
        .zfs(&["list", "-H", "-o", "name", "-t", "all"])
        .unwrap();
    assert!(list.contains(&format!("{}@s1", pool.name())), "{list}");
    assert!(list.contains(&format!("{}@s2", pool.name())), "{list}");
    eprintln!("total {:?}", t0.elapsed());
}

#[test]
fn nested_datasets_are_not_in_parent_manifest() {
    let pool = TestPool::create(Layout::Mirror, 2, 96 * MIB).unwrap();
    let child = pool.create_dataset("a/b", &[]).unwrap_err();
    // Parent "a" doesn't exist yet: the error must carry the command.
    assert!(child.0.contains("zfs create"), "{child}");
    let a = pool.create_dataset("a", &[("compression", "on")]).unwrap();
    let b = pool.create_dataset("a/b", &[]).unwrap();
    populate::add_file(&a, "in_a", 10, 1).unwrap();
    populate::add_file(&b, "in_b", 10, 2).unwrap();
    let ma = pool.record_live("a").unwrap();
    assert!(ma.get("in_a").is_some() && ma.get("in_b").is_none(), "{ma}");
    let mr = pool.record_live("").unwrap();
    assert_eq!(mr.len(), 1, "root dataset should be empty: {mr}");
    assert_eq!(pool.get("a", "compression").unwrap(), "on");
}

#[test]
fn damage_helpers_on_real_labels() {
    let mut pool = TestPool::create(Layout::Stripe, 1, 128 * MIB).unwrap();
    populate::add_file(&pool.root(""), "f", 100_000, 3).unwrap();
    pool.export().unwrap();
    let dev = &pool.devs()[0];
    // zfs-fuse uses 4K sectors (ashift 12) for file vdevs of 128 MiB and
    // more (96 MiB and less get ashift 9): uberblock slots are 4 KiB here.
    let label = pool
        .zf()
        .run(&["zdb", "-l", &dev.to_string_lossy()])
        .unwrap();
    assert!(label.contains("ashift: 12"), "{label}");
    let ubs = damage::find_uberblocks(dev).unwrap();
    assert!(ubs
        .windows(2)
        .all(|w| w[0].label != w[1].label || w[1].offset - w[0].offset >= 4096));
    let labels: std::collections::BTreeSet<usize> = ubs.iter().map(|u| u.label).collect();
    assert_eq!(labels.len(), 4, "uberblocks in all labels: {ubs:?}");
    let max = ubs.iter().map(|u| u.txg).max().unwrap();
    assert!(max > 1);
    assert!(pool.label_txg().unwrap() > 0);
    let regs = damage::damage_random(dev, 10, 1).unwrap();
    assert_eq!(regs.len(), 10);
    damage::zero_labels(dev).unwrap();
    assert!(damage::find_uberblocks(dev).unwrap().is_empty());
    // zfs-fuse no longer finds the pool.
    let zf = pool.zf();
    let out = zf
        .output(
            &["zpool", "import", "-d", &pool.dev_dir().to_string_lossy()],
            daemon::DEFAULT_TIMEOUT,
        )
        .unwrap();
    assert!(!out.stdout.contains(pool.name()), "{}", out.describe());
}
