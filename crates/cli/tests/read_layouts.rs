//! (a) Reading pools of every vdev layout written by zfs-fuse.
//!
//! For each layout: create the pool with zfs-fuse, atime=off, populate the
//! root dataset (moderate profile) and a child dataset (small profile),
//! snapshot @s1, mutate, @s2, mutate; the manifests of the live trees are
//! recorded right before each snapshot and at the end.  After `zpool
//! export`, ozfs must list the pool, import it read-only, list every dataset
//! and snapshot, and `ozfs cp -r` every snapshot and live dataset back
//! identically (including a sub-directory and a single file for the
//! root dataset's @s1); `ozfs zdb -b` finds no leaks.  Device sizes are 128 MiB (zfs-fuse picks ashift
//! 12) or 96 MiB (ashift 9), so both sector sizes are covered.

mod common;
use common::*;
use std::time::Instant;

fn layout_case(layout: Layout, ndev: usize, dev_mib: u64, seed: u64) {
    let t0 = Instant::now();
    let mut pool = TestPool::create(layout, ndev, dev_mib * MIB).unwrap();
    pool.set("", "atime", "off").unwrap();
    let mut expected = standard_history(&pool, "", &Profile::moderate(seed), 2);
    expected.extend(dataset_history(
        &pool,
        "child",
        &[],
        &Profile::small(seed + 1),
        2,
    ));
    pool.export().unwrap();
    phase(&format!("{} x{ndev}: zfs-fuse setup", layout.short()), t0);
    if setup_only() {
        return;
    }

    let t1 = Instant::now();
    let oz = ozfs();
    assert_listed(&oz, &pool.dev_dir(), pool.name(), "ONLINE");
    import_and_check_names(&oz, &pool, &expected);
    verify_copyouts(&oz, &pool, &expected, layout.short());
    verify_partial_copyouts(
        &oz,
        &pool,
        &expected[0],
        "sizes",
        "sizes/f_4096",
        layout.short(),
    );
    let list = oz.ok(&["zpool", "list", "-H", pool.name()]);
    assert!(
        list.contains(pool.name()) && list.contains("ONLINE"),
        "zpool list:\n{list}"
    );
    // ozfs's leak check agrees with zfs-fuse (which wrote the pool and
    // whose own zdb finds it clean): every block accounted for.
    let z = oz.run(&["zdb", "-b", pool.name()]);
    assert!(
        z.success() && z.stdout.contains("No leaks"),
        "ozfs zdb -b on a zfs-fuse pool: {}",
        z.describe()
    );
    oz.ok(&["zpool", "export", pool.name()]);
    phase(&format!("{} x{ndev}: ozfs checks", layout.short()), t1);
}

#[test]
fn read_layouts_single_file() {
    layout_case(Layout::Stripe, 1, 128, 11);
}

#[test]
fn read_layouts_stripe3() {
    layout_case(Layout::Stripe, 3, 96, 12);
}

#[test]
fn read_layouts_mirror2() {
    layout_case(Layout::Mirror, 2, 128, 13);
}

#[test]
fn read_layouts_raidz1() {
    layout_case(Layout::Raidz1, 3, 128, 14);
}

#[test]
fn read_layouts_raidz2() {
    layout_case(Layout::Raidz2, 5, 96, 15);
}

#[test]
fn read_layouts_raidz3() {
    layout_case(Layout::Raidz3, 7, 96, 16);
}
