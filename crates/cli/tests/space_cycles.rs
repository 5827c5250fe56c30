//! Space accounting through receive / destroy cycles.
//!
//! A file system with a snapshot `@a` and a later `@b` (which adds a file
//! larger than the receiver's 64 MiB sync interval, so receiving it spans
//! several txgs) is sent full and incrementally. Ten rounds then receive
//! both into `parent/copy`, with failed receives in between (a truncated
//! full stream: the new file system is destroyed again; an incremental
//! stream with a bad END checksum, found after the mid-stream syncs: the
//! copy is rolled back), destroy a snapshot in some rounds and finally
//! `destroy -r` the copy. After every round the space must add up: the
//! parent has no children left (`usedbychildren` 0), `used` is the sum of
//! its `usedby*` parts for the parent and the pool, and the pool's `used`
//! (which charges every block once, the MOS included) equals what its
//! space maps hold allocated. Every command also checks the accounting
//! against the blocks at each sync (`OZFS_CHECK_SPACE=1`, set by the test
//! kit). At the end zfs-fuse's zdb finds the pool clean and zfs-fuse, on
//! import, reports the same figures. A second test: rolling back and
//! destroying file systems in which zfs-fuse left an intent log frees it.

mod common;
mod wcommon;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Instant;
use wcommon::*;

const PROPS: [&str; 6] = [
    "used",
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "usedbyrefreservation",
    "referenced",
];

/// `zfs get -Hp` of [`PROPS`] on `ds` (ozfs or zfs-fuse output).
fn parse_props(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() >= 3).then(|| (f[1].to_string(), f[2].parse().unwrap_or(u64::MAX)))
        })
        .collect()
}

fn props(oz: &Ozfs, ds: &str) -> BTreeMap<String, u64> {
    parse_props(&oz.ok(&["zfs", "get", "-Hp", &PROPS.join(","), ds]))
}

/// `used` is the sum of its parts.
fn assert_adds_up(p: &BTreeMap<String, u64>, ds: &str, context: &str) {
    let parts: u64 = PROPS[1..5].iter().map(|k| p[*k]).sum();
    assert_eq!(
        p["used"], parts,
        "{context}: {ds}: used != usedbydataset + usedbysnapshots + usedbychildren + usedbyrefreservation: {p:?}"
    );
}

/// The pool's allocated bytes as its space maps say (`zpool list`).
fn allocated(oz: &Ozfs, pool: &str) -> u64 {
    let out = oz.ok(&["zpool", "list", "-Hp", "-o", "allocated", pool]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("zpool list allocated: {out:?}"))
}

fn oz_recv(oz: &Ozfs, target: &str, stream: &Path) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs receive {target} < '{}'",
        stream.display()
    ));
    assert!(
        out.success(),
        "ozfs receive into {target}:\n{}",
        out.describe()
    );
}

/// A receive that must fail (exit 1) and be undone.
fn oz_recv_fails(oz: &Ozfs, target: &str, stream: &Path) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs receive {target} < '{}'",
        stream.display()
    ));
    assert_eq!(
        out.code,
        Some(1),
        "a bad stream into {target} must fail:\n{}",
        out.describe()
    );
    assert!(
        !out.stderr.contains("space accounting"),
        "the undo broke the accounting:\n{}",
        out.describe()
    );
}

fn oz_send(oz: &Ozfs, args: &str, stream: &Path) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs send {args} > '{}'",
        stream.display()
    ));
    assert!(out.success(), "ozfs send {args}:\n{}", out.describe());
}

#[test]
fn receive_destroy_cycles_keep_space_exact() {
    let t0 = Instant::now();
    let tag = "space";
    let mut pool = new_devs("ozspace", Layout::Stripe, 1, 512);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &[]);
    oz_create_ds(&oz, &pool, "src", &[]);
    oz_create_ds(&oz, &pool, "parent", &[]);
    let src = pool.ds("src");
    let parent = pool.ds("parent");
    let copy = format!("{parent}/copy");
    let work = local_dir(tag);
    let (t1, _) = source_tree(work.path(), "t1", &Profile::small(131));
    let (t2, _) = source_tree(work.path(), "t2", &Profile::small(132));
    // Larger than the receiver's sync interval (64 MiB).
    let big = work.path().join("big");
    fs::create_dir_all(&big).unwrap();
    let mut rng = XorShift::new(133);
    let mut data = vec![0u8; 72 << 20];
    rng.fill(&mut data);
    fs::write(big.join("blob"), &data).unwrap();
    drop(data);
    oz_cp_in(&oz, &t1, &format!("{src}:/"));
    oz.ok(&["zfs", "snapshot", &format!("{src}@a")]);
    oz_cp_in(&oz, &t2, &format!("{src}:/t1/more"));
    oz_rm(&oz, &format!("{src}:/t1/sizes"), true);
    oz_cp_in(&oz, &big, &format!("{src}:/"));
    oz.ok(&["zfs", "snapshot", &format!("{src}@b")]);
    let full = work.path().join("full.stream");
    let inc = work.path().join("inc.stream");
    oz_send(&oz, &format!("{src}@a"), &full);
    oz_send(&oz, &format!("-i {src}@a {src}@b"), &inc);
    // A full stream cut short, an incremental one with a bad END checksum.
    let cut = work.path().join("cut.stream");
    let good = fs::read(&full).unwrap();
    fs::write(&cut, &good[..good.len() * 2 / 3]).unwrap();
    let badinc = work.path().join("badinc.stream");
    let mut b = fs::read(&inc).unwrap();
    let end = b.len() - 312;
    assert_eq!(
        u32::from_le_bytes(b[end..end + 4].try_into().unwrap()),
        5,
        "the incremental stream does not end with END"
    );
    b[end + 8] ^= 1;
    fs::write(&badinc, &b).unwrap();
    drop(b);
    phase(&format!("{tag}: source and streams"), t0);

    let check = |context: &str| {
        let pp = props(&oz, &parent);
        assert_eq!(
            pp["usedbychildren"], 0,
            "{context}: {parent} has no children left: {pp:?}"
        );
        assert_adds_up(&pp, &parent, context);
        let root = props(&oz, &name);
        assert_adds_up(&root, &name, context);
        let alloc = allocated(&oz, &name);
        assert_eq!(
            root["used"], alloc,
            "{context}: the pool's used bytes ({}) are not what its space maps hold allocated ({alloc}): {root:?}",
            root["used"]
        );
        (pp, root)
    };
    let (p0, _) = check("before the rounds");
    for round in 0..10 {
        let context = format!("round {round}");
        if round % 2 == 0 {
            oz_recv_fails(&oz, &format!("{parent}/cut"), &cut);
        }
        oz_recv(&oz, &copy, &full);
        if round % 3 == 0 {
            oz_recv_fails(&oz, &copy, &badinc);
        }
        oz_recv(&oz, &copy, &inc);
        let pc = props(&oz, &parent);
        assert!(
            pc["usedbychildren"] > 70 << 20,
            "{context}: the copy is not charged to {parent}: {pc:?}"
        );
        assert_adds_up(&pc, &parent, &context);
        if round % 3 == 1 {
            oz.ok(&["zfs", "destroy", &format!("{copy}@a")]);
        }
        oz.ok(&["zfs", "destroy", "-r", &copy]);
        let (pp, _) = check(&context);
        assert_eq!(pp, p0, "{context}: {parent} changed");
    }
    phase(&format!("{tag}: ten rounds"), t0);

    // zfs-fuse: zdb clean; on import the same figures.
    let before = props(&oz, &parent);
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: after the rounds"));
    pool.import().unwrap();
    let theirs = parse_props(
        &pool
            .zfs(&[
                "get",
                "-Hp",
                "-o",
                "name,property,value",
                &PROPS.join(","),
                &parent,
            ])
            .unwrap(),
    );
    assert_eq!(theirs, before, "zfs-fuse and ozfs disagree on {parent}");
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse agrees"), t0);
}

/// Writes `len` bytes to `path` and fsyncs it (zfs-fuse commits its
/// intent log and allocates the next log block).
fn write_synced(path: &Path, len: usize, seed: u64) {
    use std::io::Write;
    let mut f = fs::File::create(path).unwrap();
    let mut rng = XorShift::new(seed);
    f.write_all(&rng.bytes(len)).unwrap();
    f.sync_all().unwrap();
}

/// Intent-log blocks `ozfs zdb -b` finds in the exported pool.
fn log_blocks(oz: &Ozfs, pool: &TestPool) -> u64 {
    let out = oz.ok(&[
        "zdb".to_string(),
        "-e".into(),
        "-p".into(),
        pool.dev_dir().to_string_lossy().into_owned(),
        "-b".into(),
        pool.name().to_string(),
    ]);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("intent log:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no intent log count in ozfs zdb -b:\n{out}"))
}

/// zfs-fuse leaves the intent log of a file system written with fsync
/// (at least the preallocated next log block) in the pool; ozfs must free
/// it when it rolls the file system back or destroys it, as ZFS does, or
/// the block leaks (zfs-fuse's zdb: leaked space; the space check: an
/// allocated range no block references).
#[test]
fn rollback_and_destroy_free_zfs_fuse_intent_logs() {
    let t0 = Instant::now();
    let tag = "zil";
    let mut pool = TestPool::create(Layout::Mirror, 2, 128 * MIB).unwrap();
    let name = pool.name().to_string();
    for (i, rel) in ["back", "gone"].iter().enumerate() {
        let root = pool.create_dataset(rel, &[]).unwrap();
        write_synced(&root.join("before"), 200_000, 10 + i as u64);
        pool.snapshot(rel, "s1").unwrap();
        write_synced(&root.join("after"), 300_000, 20 + i as u64);
    }
    pool.export().unwrap();
    let oz = ozfs();
    let logs = log_blocks(&oz, &pool);
    assert!(
        logs >= 2,
        "zfs-fuse left {logs} intent-log blocks: the scenario needs one per file system"
    );
    phase(&format!("{tag}: zfs-fuse setup"), t0);

    oz_import_rw(&oz, &pool.dev_dir(), &name);
    oz.ok(&["zfs", "rollback", &format!("{}@s1", pool.ds("back"))]);
    oz.ok(&["zfs", "destroy", "-r", &pool.ds("gone")]);
    oz_export(&oz, &name);
    assert_eq!(
        log_blocks(&oz, &pool),
        0,
        "intent logs left after the rollback and the destroy"
    );
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: after ozfs"));
    pool.import().unwrap();
    assert!(
        !pool
            .zfs(&["list", "-H", "-o", "name"])
            .unwrap()
            .contains("gone"),
        "the destroyed file system is back"
    );
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse agrees"), t0);
}
