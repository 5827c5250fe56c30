//! Deduplication written by ozfs, judged by the implementations that made
//! the formats: OpenZFS 2.3's `zdb` (fast-dedup tables in feature-flag
//! pools, its corpus pool `c5-dedup`) and zfs-fuse (legacy tables of pool
//! version 23). What each asserts: the dedup ratio and the space the seed
//! study measured (../shared/seeds/002: 2.00x, half the allocation), the
//! tables' entries and classes as the other implementation's `zdb -D`
//! lists them, every reference and byte given back when files and
//! snapshots go (leak checks clean, tables destroyed), and the data read
//! back.

mod common;
mod wcommon;
use common::*;
use std::path::Path;
use wcommon::{new_devs, oz_create};

const MIB: usize = 1 << 20;

/// `n` files of `size` bytes of seeded noise (no two blocks alike).
fn unique_files(dir: &Path, n: usize, size: usize, seed: u64) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut rng = ozfs_testkit::XorShift::new(seed);
    let mut buf = vec![0u8; size];
    for i in 0..n {
        rng.fill(&mut buf);
        std::fs::write(dir.join(format!("f{i:03}")), &buf).expect("write");
    }
}

use common::zpool_get as get;

/// OpenZFS's `zdb -DD` of an exported pool: the table lines
/// (`DDT-sha256-zap-duplicate: dspace=…; entries=N`) as (name, entries).
fn openzfs_tables(zdb: &Path, devs: &Path, pool: &str) -> Vec<(String, u64)> {
    let out = std::process::Command::new(zdb)
        .args(["-e", "-p"])
        .arg(devs)
        .args(["-DD", pool])
        .output()
        .expect("zdb -DD");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .filter(|l| l.starts_with("DDT-") && l.contains("-zap-"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let n = rest.split("entries=").nth(1)?.trim().parse().ok()?;
            Some((name.to_string(), n))
        })
        .collect()
}

/// The seed's workload on a pool as `zpool create` makes it (OpenZFS 2.3's
/// features, so a fast-dedup table): 240 unique 2 MiB files, each written
/// twice with dedup=on, give DEDUP 2.00x and half the allocation; OpenZFS's
/// zdb finds 3840 duplicate entries and the pool clean. Then one copy
/// goes — held by a snapshot until it is destroyed — and every entry is
/// unique (1.00x); then the other, and the table is gone, the space back
/// to what the empty pool used.
#[test]
fn the_seeds_workload_stores_half() {
    let oz = ozfs();
    let work = scratch("ozfs-test-dedup-seed-");
    let devs = work.path().join("devs");
    std::fs::create_dir_all(&devs).expect("mkdir");
    let img = devs.join("d0.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(1600 << 20))
        .expect("image");
    let src = work.path().join("src");
    unique_files(&src, 240, 2 * MIB, 0x5eed_0002);
    let s = src.to_string_lossy().into_owned();
    oz.ok(&[
        "zpool",
        "create",
        "-O",
        "dedup=on",
        "sd",
        &img.to_string_lossy(),
    ]);
    let empty: u64 = get(&oz, "allocated", "sd").parse().expect("allocated");
    oz.ok(&["cp", "-r", &s, "sd:/a"]);
    oz.ok(&["zfs", "snapshot", "sd@one"]);
    oz.ok(&["cp", "-r", &s, "sd:/b"]);
    assert_eq!(get(&oz, "dedupratio", "sd"), "2.00");
    let alloc: u64 = get(&oz, "allocated", "sd").parse().expect("allocated");
    let data = 240 * 2 * MIB as u64;
    // Half of the 960 MiB written, plus metadata (tables included).
    assert!(
        alloc >= data && alloc < data + data / 20,
        "allocated {alloc} for {data} bytes stored once"
    );
    let listed = oz.ok(&["zpool", "list", "-H", "-o", "dedup", "sd"]);
    assert_eq!(listed.trim(), "2.00x");
    oz.ok(&["zpool", "export", "sd"]);
    let zdb = oracle_zdb();
    if let Some(z) = &zdb {
        openzfs_verdict(z, &devs, "sd");
        assert_eq!(
            openzfs_tables(z, &devs, "sd"),
            vec![("DDT-sha256-zap-duplicate".to_string(), 3840)]
        );
        // ozfs's zdb prints what OpenZFS's prints of the same pool.
        for level in ["-D", "-DDD", "-S"] {
            let theirs = std::process::Command::new(z)
                .args(["-e", "-p"])
                .arg(&devs)
                .args([level, "sd"])
                .output()
                .expect("zdb");
            let ours = oz.ok(&["zdb", "-e", "-p", &devs.to_string_lossy(), level, "sd"]);
            assert_eq!(ours, String::from_utf8_lossy(&theirs.stdout), "zdb {level}");
        }
    }
    // ozfs's own leak check counts each shared block once.
    let own = oz.ok(&["zdb", "-e", "-p", &devs.to_string_lossy(), "-b", "sd"]);
    assert!(own.contains("No leaks"), "{own}");
    oz.ok(&["zpool", "import", "-N", "-d", &devs.to_string_lossy(), "sd"]);
    oz.ok(&["rm", "-r", "sd:/a"]);
    // The snapshot still holds the first copy.
    assert_eq!(get(&oz, "dedupratio", "sd"), "2.00");
    oz.ok(&["zfs", "destroy", "sd@one"]);
    assert_eq!(get(&oz, "dedupratio", "sd"), "1.00");
    let out = work.path().join("back");
    oz.ok(&["cp", "sd:/b/f123", &out.to_string_lossy()]);
    assert_eq!(
        std::fs::read(&out).expect("copy"),
        std::fs::read(src.join("f123")).expect("src")
    );
    oz.ok(&["zpool", "export", "sd"]);
    if let Some(z) = &zdb {
        openzfs_verdict(z, &devs, "sd");
        assert_eq!(
            openzfs_tables(z, &devs, "sd"),
            vec![("DDT-sha256-zap-unique".to_string(), 3840)]
        );
    }
    oz.ok(&["zpool", "import", "-N", "-d", &devs.to_string_lossy(), "sd"]);
    oz.ok(&["rm", "-r", "sd:/b"]);
    assert_eq!(get(&oz, "dedupratio", "sd"), "1.00");
    let after: u64 = get(&oz, "allocated", "sd").parse().expect("allocated");
    assert!(
        after < empty + (1 << 20),
        "allocated {after} after everything went (empty pool: {empty})"
    );
    oz.ok(&["zpool", "export", "sd"]);
    if let Some(z) = &zdb {
        openzfs_verdict(z, &devs, "sd");
        assert!(openzfs_tables(z, &devs, "sd").is_empty());
    }
}

/// OpenZFS's own fast-dedup pool (`c5-dedup`: a sha256 table, 16 blocks
/// referenced 4 times and 4 once, and a blake3 one of 8 blocks referenced
/// twice, 3.19x) changed by ozfs: a fifth copy takes a reference on each
/// block (3.87x, as the histograms add up); the blake3 files go and their
/// table with them (4.20x, the feature's count down to one); the unique
/// file goes, its entries with it. OpenZFS's zdb finds the pool clean and
/// the tables as predicted; the new copy reads as OpenZFS's manifest says.
#[test]
fn openzfs_fast_dedup_pool_is_changed_and_stays_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-dedup-c5-");
    let corpus = corpus_dir();
    let devs = work.path().join("c5");
    unpack_corpus(&corpus.join("c5-dedup"), &devs);
    let d = devs.to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c5-dedup"]);
    assert_eq!(get(&oz, "dedupratio", "c5-dedup"), "3.19");
    let one = work.path().join("dup1.bin");
    oz.ok(&["cp", "c5-dedup/d:/dup1.bin", &one.to_string_lossy()]);
    oz.ok(&["cp", &one.to_string_lossy(), "c5-dedup/d:/dup5.bin"]);
    assert_eq!(get(&oz, "dedupratio", "c5-dedup"), "3.87");
    oz.ok(&["rm", "c5-dedup/b:/t1.txt"]);
    oz.ok(&["rm", "c5-dedup/b:/t2.txt"]);
    assert_eq!(get(&oz, "dedupratio", "c5-dedup"), "4.20");
    assert_eq!(get(&oz, "feature@fast_dedup", "c5-dedup"), "active");
    oz.ok(&["rm", "c5-dedup/d:/unique.bin"]);
    assert_eq!(get(&oz, "dedupratio", "c5-dedup"), "5.00");
    oz.ok(&["zpool", "export", "c5-dedup"]);
    if let Some(z) = oracle_zdb() {
        openzfs_verdict(&z, &devs, "c5-dedup");
        assert_eq!(
            openzfs_tables(&z, &devs, "c5-dedup"),
            vec![("DDT-sha256-zap-duplicate".to_string(), 16)]
        );
    }
    import_readonly(&oz, &devs, "c5-dedup");
    let back = work.path().join("dup5.bin");
    oz.ok(&["cp", "c5-dedup/d:/dup5.bin", &back.to_string_lossy()]);
    assert_eq!(
        std::fs::read(&back).expect("copy"),
        std::fs::read(&one).expect("dup1")
    );
    oz.ok(&["zpool", "export", "c5-dedup"]);
}

/// Pool version 23, zfs-fuse's world: ozfs writes legacy tables
/// (`DDT-sha256-zap-*` in the MOS directory). 24 unique 2 MiB files
/// written twice: 2.00x in ozfs and in zfs-fuse's own `zpool list`;
/// zfs-fuse's zdb finds the pool clean; removing one copy, then the other,
/// stays clean for it, ending with no table.
#[test]
fn zfs_fuse_checks_what_ozfs_deduplicated() {
    let oz = ozfs();
    let mut pool = new_devs("ozdedup23", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    oz_create(&oz, &pool, None, &["-O", "dedup=on"]);
    let work = scratch("ozfs-test-dedup-v23-");
    let src = work.path().join("src");
    unique_files(&src, 24, 2 * MIB, 23);
    let s = src.to_string_lossy().into_owned();
    oz.ok(&["cp", "-r", &s, &format!("{name}:/a")]);
    oz.ok(&["cp", "-r", &s, &format!("{name}:/b")]);
    assert_eq!(get(&oz, "dedupratio", &name), "2.00");
    oz.ok(&["zpool", "export", &name]);
    wcommon::assert_zdb_clean(&pool, &pool.dev_dir(), "two copies");
    pool.import().expect("zfs-fuse import");
    let listed = pool
        .zpool(&["list", "-H", "-o", "dedupratio", &name])
        .expect("zfs-fuse zpool list");
    assert_eq!(listed.trim(), "2.00x", "zfs-fuse's dedup ratio");
    let got = std::fs::read(pool.root("").join("b/f007")).expect("read through zfs-fuse");
    assert_eq!(got, std::fs::read(src.join("f007")).expect("src"));
    pool.export().expect("zfs-fuse export");
    let dir = pool.dev_dir();
    wcommon::oz_import_rw(&oz, &dir, &name);
    oz.ok(&["rm", "-r", &format!("{name}:/a")]);
    assert_eq!(get(&oz, "dedupratio", &name), "1.00");
    oz.ok(&["zpool", "export", &name]);
    wcommon::assert_zdb_clean(&pool, &dir, "one copy");
    wcommon::oz_import_rw(&oz, &dir, &name);
    oz.ok(&["rm", "-r", &format!("{name}:/b")]);
    oz.ok(&["zpool", "export", &name]);
    wcommon::assert_zdb_clean(&pool, &dir, "none");
}

/// A pool zfs-fuse made and filled with dedup=on (a file and its copies)
/// is changed by ozfs — a copy removed, another added that matches, a new
/// unique file — and zfs-fuse's zdb finds it clean, its ratio what the
/// references say, and the files read back through zfs-fuse.
#[test]
fn a_zfs_fuse_dedup_pool_is_changed_by_ozfs() {
    let mut pool = TestPool::create_with(&PoolSpec {
        prefix: "ozdedupzf".into(),
        ..PoolSpec::new(Layout::Stripe, 1, 256 << 20)
    })
    .expect("zfs-fuse pool");
    pool.create_dataset("d", &[("dedup", "on")])
        .expect("zfs create");
    let work = scratch("ozfs-test-dedup-zf-");
    unique_files(&work.path().join("src"), 1, 4 * MIB, 77);
    let data = std::fs::read(work.path().join("src/f000")).expect("src");
    for i in 0..3 {
        std::fs::write(pool.root("d").join(format!("c{i}")), &data)
            .expect("write through zfs-fuse");
    }
    pool.export().expect("export");
    let oz = ozfs();
    let name = pool.name().to_string();
    let dir = pool.dev_dir();
    wcommon::oz_import_rw(&oz, &dir, &name);
    assert_eq!(get(&oz, "dedupratio", &name), "3.00");
    oz.ok(&["rm", &format!("{name}/d:/c0")]);
    let f = work.path().join("src/f000");
    oz.ok(&["cp", &f.to_string_lossy(), &format!("{name}/d:/c3")]);
    oz.ok(&["cp", &f.to_string_lossy(), &format!("{name}/d:/c4")]);
    unique_files(&work.path().join("u"), 1, MIB, 78);
    let u = work.path().join("u/f000");
    oz.ok(&["cp", &u.to_string_lossy(), &format!("{name}/d:/u")]);
    // 32 blocks referenced 4 times, 8 once: (128 + 8) / 40.
    assert_eq!(get(&oz, "dedupratio", &name), "3.40");
    oz.ok(&["zpool", "export", &name]);
    wcommon::assert_zdb_clean(&pool, &dir, "changed by ozfs");
    pool.import().expect("zfs-fuse import");
    for c in ["c1", "c2", "c3", "c4"] {
        let got = std::fs::read(pool.root("d").join(c)).expect("read");
        assert!(got == data, "{c} reads back through zfs-fuse");
    }
    assert!(!pool.root("d").join("c0").exists());
    assert_eq!(
        std::fs::read(pool.root("d").join("u")).expect("read u"),
        std::fs::read(&u).expect("u")
    );
    pool.destroy().expect("destroy");
}

/// Every dedup value OpenZFS 2.3 accepts writes a table of its own
/// checksum (sha256 for `verify`, skein and edonr keyed with the pool's
/// salt, edonr only with verify), and OpenZFS's zdb finds all four, each
/// block referenced twice, and the pool (per-dataset features included)
/// clean. Values a pool cannot hold are refused.
#[test]
fn every_dedup_checksum_writes_its_own_table() {
    let oz = ozfs();
    let work = scratch("ozfs-test-dedup-sums-");
    let devs = work.path().join("devs");
    std::fs::create_dir_all(&devs).expect("mkdir");
    let img = devs.join("d0.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(256 << 20))
        .expect("image");
    unique_files(&work.path().join("src"), 1, MIB, 99);
    let f = work.path().join("src/f000").to_string_lossy().into_owned();
    oz.ok(&["zpool", "create", "ds", &img.to_string_lossy()]);
    for (ds, v) in [
        ("ds/b", "blake3"),
        ("ds/v", "verify"),
        ("ds/s", "skein,verify"),
        ("ds/e", "edonr,verify"),
    ] {
        oz.ok(&["zfs", "create", "-o", &format!("dedup={v}"), ds]);
        oz.ok(&["cp", &f, &format!("{ds}:/x")]);
        oz.ok(&["cp", &f, &format!("{ds}:/y")]);
    }
    oz.fails(&["zfs", "set", "dedup=edonr", "ds/e"]);
    assert_eq!(get(&oz, "dedupratio", "ds"), "2.00");
    oz.ok(&["zpool", "export", "ds"]);
    if let Some(z) = oracle_zdb() {
        openzfs_verdict(&z, &devs, "ds");
        let mut t = openzfs_tables(&z, &devs, "ds");
        t.sort();
        let want: Vec<(String, u64)> = ["blake3", "edonr", "sha256", "skein"]
            .iter()
            .map(|c| (format!("DDT-{c}-zap-duplicate"), 8))
            .collect();
        assert_eq!(t, want);
    }
}

/// `ozfs zdb -D`, `-DD`, `-DDD` and `-S` of OpenZFS's `c5-dedup` print
/// byte for byte what OpenZFS 2.3's zdb printed of it (fixtures), and
/// `zpool status -D` its tables' entries, space and histogram.
#[test]
fn dedup_tables_print_as_openzfs_prints_them() {
    let oz = ozfs();
    let work = scratch("ozfs-test-dedup-zdb-");
    let devs = work.path().join("c5");
    unpack_corpus(&corpus_dir().join("c5-dedup"), &devs);
    let d = devs.to_string_lossy().into_owned();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for level in ["D", "DD", "DDD", "S"] {
        let want =
            std::fs::read_to_string(fixtures.join(format!("c5-dedup.openzfs-zdb-{level}.txt")))
                .expect("fixture");
        let got = oz.ok(&["zdb", "-e", "-p", &d, &format!("-{level}"), "c5-dedup"]);
        assert_eq!(got, want, "zdb -{level}");
    }
    import_readonly(&oz, &devs, "c5-dedup");
    let st = oz.ok(&["zpool", "status", "-D", "c5-dedup"]);
    assert!(
        st.contains("\n dedup: DDT entries 28, size 108K on disk, 192K in core\n"),
        "{st}"
    );
    assert!(
        st.contains(" Total       28   3.50M   2.94M   2.94M       84   10.5M   9.38M   9.38M\n"),
        "{st}"
    );
    oz.ok(&["zpool", "export", "c5-dedup"]);
}

/// A block written again with more copies than its stored record has is
/// not shared with it: a fast-dedup (flat) record keeps its one copy and
/// the new block is written apart (as an ordinary block); a legacy
/// (traditional) entry gets a second record. Both files read back, and
/// when both go the pools are clean for OpenZFS and zfs-fuse and the
/// tables empty.
#[test]
fn more_copies_never_rewrite_a_stored_record() {
    let oz = ozfs();
    let work = scratch("ozfs-test-dedup-copies-");
    unique_files(&work.path().join("src"), 1, MIB, 5);
    let f = work.path().join("src/f000").to_string_lossy().into_owned();
    for (pool, opts) in [("dcf", &[][..]), ("dct", &["-o", "version=23"][..])] {
        let devs = work.path().join(pool);
        std::fs::create_dir_all(&devs).expect("mkdir");
        let img = devs.join("d0.img");
        std::fs::File::create(&img)
            .and_then(|h| h.set_len(256 << 20))
            .expect("image");
        let mut args = vec!["zpool", "create"];
        args.extend(opts);
        let img_s = img.to_string_lossy().into_owned();
        args.extend(["-O", "dedup=on", pool, &img_s]);
        oz.ok(&args);
        oz.ok(&["cp", &f, &format!("{pool}:/one")]);
        oz.ok(&["zfs", "set", "copies=2", pool]);
        oz.ok(&["cp", &f, &format!("{pool}:/two")]);
        let ratio = get(&oz, "dedupratio", pool);
        assert_eq!(ratio, "1.00", "{pool}: nothing shared");
        for name in ["one", "two"] {
            let out = work.path().join(format!("{pool}-{name}"));
            oz.ok(&["cp", &format!("{pool}:/{name}"), &out.to_string_lossy()]);
            assert_eq!(
                std::fs::read(&out).expect("out"),
                std::fs::read(&f).expect("in")
            );
        }
        oz.ok(&["rm", &format!("{pool}:/one")]);
        oz.ok(&["rm", &format!("{pool}:/two")]);
        oz.ok(&["zpool", "export", pool]);
        if let Some(z) = oracle_zdb() {
            openzfs_verdict(&z, &devs, pool);
            assert!(openzfs_tables(&z, &devs, pool).is_empty(), "{pool}");
        }
    }
}
