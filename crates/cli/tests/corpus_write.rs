//! Pools the real OpenZFS 2.3.2 kernel module made
//! (../shared/corpus/openzfs-2.3), imported read-write by ozfs, changed
//! and exported:
//! * `c1-single` (`zpool create` defaults: log space maps with unflushed
//!   changes, space-map histograms, new-format dead lists and the shared
//!   empty bpobj, user/group/project accounting, vdev ZAPs, ZPL 5): a tree
//!   copied in, a tree removed, a file overwritten, a snapshot made and
//!   the oldest one destroyed, a clone, a new file system, a property set.
//!
//! OpenZFS's own `zdb -bcc` and `zdb -d` judge the result (no leak, every
//! MOS object referenced once, the feature counts it checks); the
//! snapshot ozfs did not touch still equals OpenZFS's manifest of it, and
//! what ozfs wrote reads back.

mod ccommon;
mod common;
use ccommon::*;
use common::*;

#[test]
fn an_openzfs_pool_is_changed_and_stays_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-");
    let devs = work.path().join("devs");
    let corpus = corpus_dir();
    unpack_corpus(&corpus.join("c1-single"), &devs);
    let d = devs.to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c1-single"]);

    // Content to write: a small tree of varied files.
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for (i, len) in [0usize, 1, 4095, 70_000, 300_000].iter().enumerate() {
        let data: Vec<u8> = (0..*len).map(|j| ((j * 31 + i) % 251) as u8).collect();
        std::fs::write(src.join(format!("f{i}")), &data).unwrap();
        std::fs::write(src.join("sub").join(format!("g{i}")), &data[..len / 2]).unwrap();
    }
    let s = src.to_string_lossy().into_owned();
    oz.ok(&["cp", "-r", &s, "c1-single:/ozfs-new"]);
    // Blocks born before the snapshots die: onto the head's dead list
    // (`many` is the 3,000-entry directory, a fat ZAP).
    oz.ok(&["rm", "-r", "c1-single:/many"]);
    oz.ok(&["rm", "c1-single:/small-random.bin"]);
    oz.ok(&["zfs", "snapshot", "c1-single@ozfs1"]);
    oz.ok(&["rm", "-r", "c1-single:/ozfs-new/sub"]);
    // The oldest snapshot goes: its dead list merges into the next one's.
    oz.ok(&["zfs", "destroy", "c1-single@s1"]);
    oz.ok(&["zfs", "clone", "c1-single@ozfs1", "c1-single/clone"]);
    oz.ok(&["cp", "-r", &s, "c1-single/clone:/more"]);
    oz.ok(&["zfs", "create", "c1-single/fresh"]);
    oz.ok(&["cp", "-r", &s, "c1-single/fresh:/x"]);
    oz.ok(&["zfs", "set", "compression=gzip", "c1-single/child"]);
    oz.ok(&["cp", "-r", &s, "c1-single/child:/gz"]);
    oz.ok(&["zfs", "destroy", "c1-single/child@s2"]);
    oz.ok(&["zpool", "export", "c1-single"]);

    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "c1-single");
    }

    // What OpenZFS wrote and ozfs left alone, and what ozfs wrote.
    import_readonly(&oz, &devs, "c1-single");
    let manifest = std::fs::read_to_string(corpus.join("c1-single").join("manifest.txt")).unwrap();
    let mut failed = Vec::new();
    failed.extend(compare(
        &oz,
        work.path(),
        "c1-single@s2",
        &manifest,
        "c1-single@s2",
    ));
    for (ds, path) in [
        ("c1-single", "/ozfs-new/f4"),
        ("c1-single/clone", "/more/f3"),
        ("c1-single/fresh", "/x/sub/g4"),
        ("c1-single/child", "/gz/f2"),
    ] {
        let out = work.path().join("one");
        let _ = std::fs::remove_file(&out);
        oz.ok(&["cp", &format!("{ds}:{path}"), &out.to_string_lossy()]);
        let rel = path.rsplitn(2, '/').collect::<Vec<_>>();
        let name = rel[0];
        let local = if path.contains("/sub/") {
            src.join("sub").join(name)
        } else {
            src.join(name)
        };
        if std::fs::read(&out).unwrap() != std::fs::read(&local).unwrap() {
            failed.push(format!("{ds}:{path} differs from what was written"));
        }
    }
    // Accounting: the new file system's 13 objects (its root, `x`, `sub`
    // and ten files) are root's, in project 0; every file system's user,
    // group and project totals agree.
    let us = oz.ok(&[
        "zfs",
        "userspace",
        "-Hpn",
        "-o",
        "name,used,objused",
        "c1-single/fresh",
    ]);
    let rows: Vec<Vec<&str>> = us.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 1, "{us}");
    assert_eq!((rows[0][0], rows[0][2]), ("0", "13"), "{us}");
    for fs in [
        "c1-single",
        "c1-single/child",
        "c1-single/clone",
        "c1-single/fresh",
    ] {
        let total = |cmd: &str| -> (u64, u64) {
            oz.ok(&["zfs", cmd, "-Hp", "-o", "used,objused", fs])
                .lines()
                .map(|l| {
                    let mut it = l.split('\t').map(|x| x.parse::<u64>().unwrap_or(0));
                    (it.next().unwrap_or(0), it.next().unwrap_or(0))
                })
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        };
        let u = total("userspace");
        assert!(u.1 > 0, "{fs}: objects counted");
        assert_eq!(u, total("groupspace"), "{fs}: users and groups agree");
        assert_eq!(u, total("projectspace"), "{fs}: users and projects agree");
    }
    let all = oz.ok(&[
        "zfs",
        "list",
        "-H",
        "-o",
        "name",
        "-t",
        "all",
        "-r",
        "c1-single",
    ]);
    assert!(!all.contains("c1-single@s1"), "{all}");
    assert!(!all.contains("c1-single/child@s2"), "{all}");
    assert!(all.contains("c1-single@ozfs1"), "{all}");
    oz.ok(&["zpool", "export", "c1-single"]);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// RAID-Z pools OpenZFS made (`c3-raidz2`: five-wide raidz2 at ashift 9,
/// gzip-6 with sha256 and copies=2 with lzjb; `c4-raidz13`: a raidz1 and
/// a raidz3 side by side; `c9-expand`: a raidz1 expanded from 3 to 4
/// disks, whose blocks from before the expansion are freed and new ones
/// written at the new width; `c8-draid`: a dRAID vdev, `draid1:3d:5c:1s`,
/// written in whole stripes with zero skip sectors), changed in one file system — a tree in, files
/// and a directory out, a file overwritten, a snapshot made and destroyed
/// — while another stays as OpenZFS left it: OpenZFS's zdb finds them
/// clean, the untouched file system equals OpenZFS's manifest and the
/// changed one reads as written.
#[test]
fn raidz_pools_openzfs_made_are_changed_and_stay_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-raidz-");
    let corpus = corpus_dir();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (i, len) in [3usize, 5000, 129_000, 600_000].iter().enumerate() {
        let data: Vec<u8> = (0..*len).map(|j| ((j * 7 + i) % 253) as u8).collect();
        std::fs::write(src.join(format!("r{i}")), &data).unwrap();
    }
    let s = src.to_string_lossy().into_owned();
    let mut failed = Vec::new();
    // `c9-expand`: a raidz1 expanded from 3 to 4 disks; its files from
    // before the expansion (3 wide) are removed, new ones written 4 wide.
    for (pool, touched, untouched) in [
        ("c3-raidz2", "c3-raidz2/c2", Some("c3-raidz2/g")),
        ("c4-raidz13", "c4-raidz13/off", Some("c4-raidz13")),
        ("c9-expand", "c9-expand", None),
        ("c8-draid", "c8-draid", None),
    ] {
        let devs = work.path().join(pool);
        unpack_corpus(&corpus.join(pool), &devs);
        let d = devs.to_string_lossy().into_owned();
        oz.ok(&["zpool", "import", "-N", "-d", &d, pool]);
        oz.ok(&["cp", "-r", &s, &format!("{touched}:/in")]);
        oz.ok(&["zfs", "snapshot", &format!("{touched}@t")]);
        oz.ok(&["rm", "-r", &format!("{touched}:/deep")]);
        oz.ok(&["rm", &format!("{touched}:/random.bin")]);
        oz.ok(&["cp", &format!("{s}/r2"), &format!("{touched}:/text.txt")]);
        oz.ok(&["zfs", "destroy", &format!("{touched}@t")]);
        oz.ok(&["zpool", "export", pool]);
        if let Some(zdb) = oracle_zdb() {
            openzfs_verdict(&zdb, &devs, pool);
        }
        import_readonly(&oz, &devs, pool);
        let manifest = std::fs::read_to_string(corpus.join(pool).join("manifest.txt")).unwrap();
        if let Some(u) = untouched {
            failed.extend(compare(&oz, work.path(), u, &manifest, u));
        }
        for (path, local) in [("/in/r3", "r3"), ("/in/r1", "r1"), ("/text.txt", "r2")] {
            let out = work.path().join("one");
            let _ = std::fs::remove_file(&out);
            oz.ok(&["cp", &format!("{touched}:{path}"), &out.to_string_lossy()]);
            if std::fs::read(&out).unwrap() != std::fs::read(src.join(local)).unwrap() {
                failed.push(format!("{touched}:{path} differs from what was written"));
            }
        }
        oz.ok(&["zpool", "export", pool]);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Pools with the per-dataset features OpenZFS activates by what it
/// writes, changed by ozfs in the datasets that have them: `c2-mirror`
/// (zstd, zstd-19 and zle file systems, 1 MiB records: `large_blocks`,
/// `zstd_compress`; files rewritten keep their 1 MiB blocks, now zstd as
/// ozfs compresses it), `c6-checksums` (sha512, skein, edonr and blake3
/// file systems, the salted ones with the pool's salt),
/// `c13-names-props` (`longname`: the 600-byte name removed, files added
/// beside) and `c11-zvol-special` (allocation classes: a log device and a
/// special mirror, which get no new blocks; its volume left as it was).
/// OpenZFS's zdb finds them clean, what ozfs left alone equals the
/// manifest (the volume: OpenZFS's sha256 of it), what it wrote reads back.
#[test]
fn feature_pools_openzfs_made_are_changed_and_stay_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-features-");
    let corpus = corpus_dir();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (i, len) in [10usize, 9000, 200_000, 1_500_000].iter().enumerate() {
        let data: Vec<u8> = (0..*len)
            .map(|j| (((j / 3) * 13 + i) % 241) as u8)
            .collect();
        std::fs::write(src.join(format!("w{i}")), &data).unwrap();
    }
    let s = src.to_string_lossy().into_owned();
    let long = format!("./{}", "n".repeat(600));
    let mut failed = Vec::new();
    type Case<'a> = (&'a str, Vec<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "c2-mirror",
            vec!["c2-mirror/z", "c2-mirror/z19", "c2-mirror/zle"],
            "c2-mirror/z@s1",
        ),
        (
            "c6-checksums",
            vec![
                "c6-checksums/sha512",
                "c6-checksums/skein",
                "c6-checksums/edonr",
                "c6-checksums/blake3",
            ],
            "c6-checksums/fletcher2",
        ),
        (
            "c13-names-props",
            vec!["c13-names-props/p"],
            "c13-names-props",
        ),
        // Allocation classes: new blocks go to the normal class only
        // (not the log device, not the special mirror); the volume is
        // left alone.
        (
            "c11-zvol-special",
            vec!["c11-zvol-special"],
            "c11-zvol-special/vol",
        ),
    ];
    for (pool, touched, untouched) in cases {
        let devs = work.path().join(pool);
        unpack_corpus(&corpus.join(pool), &devs);
        let d = devs.to_string_lossy().into_owned();
        oz.ok(&["zpool", "import", "-N", "-d", &d, pool]);
        for fs in &touched {
            oz.ok(&["cp", "-r", &s, &format!("{fs}:/in")]);
            let text = if pool == "c6-checksums" {
                "/data.bin"
            } else {
                "/text.txt"
            };
            oz.ok(&["cp", &format!("{s}/w3"), &format!("{fs}:{text}")]);
            if pool == "c13-names-props" {
                oz.ok(&["rm", &format!("{fs}:/{}", &long[2..])]);
            }
        }
        oz.ok(&["zpool", "export", pool]);
        if let Some(zdb) = oracle_zdb() {
            openzfs_verdict(&zdb, &devs, pool);
        }
        import_readonly(&oz, &devs, pool);
        let manifest = std::fs::read_to_string(corpus.join(pool).join("manifest.txt")).unwrap();
        if untouched.ends_with("/vol") {
            let img = work.path().join("vol.img");
            let _ = std::fs::remove_file(&img);
            oz.ok(&["cp", untouched, &img.to_string_lossy()]);
            let want = std::fs::read_to_string(corpus.join(pool).join("zvols.txt")).unwrap();
            let out = std::process::Command::new("sha256sum")
                .arg(&img)
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&out.stdout).to_string();
            let got = got.split_whitespace().next().unwrap_or("").to_string();
            if !want.lines().any(|l| l == format!("{got}  {untouched}")) {
                failed.push(format!("{untouched}: sha256 {got} is not OpenZFS's"));
            }
        } else {
            failed.extend(compare(&oz, work.path(), untouched, &manifest, untouched));
        }
        for fs in &touched {
            let text = if pool == "c6-checksums" {
                "/data.bin"
            } else {
                "/text.txt"
            };
            for (path, local) in [("/in/w3", "w3"), ("/in/w2", "w2"), (text, "w3")] {
                let out = work.path().join("one");
                let _ = std::fs::remove_file(&out);
                let r = oz.run(&["cp", &format!("{fs}:{path}"), &out.to_string_lossy()]);
                if !r.success()
                    || std::fs::read(&out).unwrap_or_default()
                        != std::fs::read(src.join(local)).unwrap()
                {
                    failed.push(format!("{fs}:{path} differs from what was written"));
                }
            }
        }
        oz.ok(&["zpool", "export", pool]);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// `c7-crypt` (encryption active), written inside and around its
/// encrypted datasets. With their keys loaded (`-L`), files and a tree go
/// into `gcm` (aes-256-gcm, a passphrase) and `ccm` (aes-128-ccm, a hex
/// key) and a file OpenZFS wrote is removed: OpenZFS's own `zdb -K`
/// decrypts what ozfs sealed (data blocks, dnode blocks' bonus buffers,
/// indirect and objset MACs) into the very bytes written, and `zdb -bcc`
/// finds the pool clean. Without the key the same copy is refused,
/// naming the key. Then a file goes into the unencrypted root, every
/// dataset gets a snapshot (the encrypted ones with an IV set guid, as
/// OpenZFS gives them), an encrypted snapshot is destroyed and so is a
/// whole encrypted file system (its key object with it); a clone of an
/// encrypted snapshot shares its key object and is written with the key;
/// a child of an encrypted file system needs its root's key, refused
/// without it. OpenZFS's `zdb -bcc` and `zdb -d` find the pool
/// clean, and the encrypted file system's new snapshot, read with its
/// key, holds OpenZFS's files and ozfs's.
#[test]
fn an_encrypted_pool_is_written_inside_and_around_its_encrypted_datasets() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-crypt-");
    let corpus = corpus_dir();
    let devs = work.path().join("c7");
    unpack_corpus(&corpus.join("c7-crypt"), &devs);
    let d = devs.to_string_lossy().into_owned();
    let keys = corpus.join("c7-crypt/keys");
    let gcm_key = crypt_key_location(&keys, "c7-crypt/gcm").unwrap();
    let ccm_key = crypt_key_location(&keys, "c7-crypt/ccm").unwrap();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c7-crypt"]);
    let f = work.path().join("f.txt");
    std::fs::write(&f, b"written by ozfs beside encrypted datasets\n").unwrap();
    let fs = f.to_string_lossy().into_owned();
    // A tree: a multi-block file (indirect blocks), a small one, a
    // directory (new dnodes, SA bonus buffers).
    let tree = work.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    let big: Vec<u8> = (0..700_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(tree.join("big.bin"), &big).unwrap();
    std::fs::write(tree.join("sub/small.txt"), b"sealed by ozfs\n").unwrap();
    let t = tree.to_string_lossy().into_owned();
    let r = oz.run(&["cp", &fs, "c7-crypt/gcm:/f.txt"]);
    assert!(
        !r.success() && r.stderr.contains("is not loaded"),
        "{}",
        r.describe()
    );
    oz.ok(&["cp", "-L", &gcm_key, "-r", &t, "c7-crypt/gcm:/"]);
    oz.ok(&["cp", "-L", &gcm_key, &fs, "c7-crypt/gcm:/f.txt"]);
    oz.ok(&["rm", "-L", &gcm_key, "c7-crypt/gcm:/random.bin"]);
    oz.ok(&["cp", "-L", &ccm_key, "-r", &t, "c7-crypt/ccm:/"]);
    oz.ok(&["zpool", "export", "c7-crypt"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "c7-crypt");
        // OpenZFS decrypts what ozfs encrypted.
        for (ds, key, path, want) in [
            ("c7-crypt/gcm", "secret.pass", "tree/big.bin", &big[..]),
            (
                "c7-crypt/gcm",
                "secret.pass",
                "tree/sub/small.txt",
                b"sealed by ozfs\n",
            ),
            (
                "c7-crypt/gcm",
                "secret.pass",
                "f.txt",
                &std::fs::read(&f).unwrap(),
            ),
            ("c7-crypt/ccm", "ccm.hex", "tree/big.bin", &big[..]),
        ] {
            let material = std::fs::read_to_string(keys.join(key)).unwrap();
            let (got, text) = openzfs_read_encrypted(&zdb, &devs, &material, ds, path);
            assert_eq!(
                got.as_deref(),
                Some(want),
                "OpenZFS zdb -K -r {ds} {path}:\n{text}"
            );
        }
    }
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c7-crypt"]);
    oz.ok(&["cp", &fs, "c7-crypt:/f.txt"]);
    oz.ok(&["zfs", "snapshot", "-r", "c7-crypt@s2"]);
    oz.ok(&["zfs", "destroy", "c7-crypt/gcm@s1"]);
    oz.ok(&["zfs", "destroy", "-r", "c7-crypt/ccm"]);
    // A child needs its encryption root's key (not kept by a one-shot
    // command); a clone shares its origin's key object.
    let r = oz.run(&["zfs", "create", "c7-crypt/gcm/child"]);
    assert!(
        !r.success() && r.stderr.contains("is not loaded"),
        "{}",
        r.describe()
    );
    oz.ok(&["zfs", "clone", "c7-crypt/gcm@s2", "c7-crypt/cl"]);
    oz.ok(&["cp", "-L", &gcm_key, &fs, "c7-crypt/cl:/in-clone.txt"]);
    oz.ok(&["zpool", "export", "c7-crypt"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "c7-crypt");
    }
    import_readonly(&oz, &devs, "c7-crypt");
    let list = oz.ok(&[
        "zfs", "list", "-H", "-o", "name", "-t", "all", "-r", "c7-crypt",
    ]);
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(
        names,
        [
            "c7-crypt",
            "c7-crypt@s1",
            "c7-crypt@s2",
            "c7-crypt/cl",
            "c7-crypt/gcm",
            "c7-crypt/gcm@s2"
        ],
        "{list}"
    );
    let back = work.path().join("f.back");
    oz.ok(&["cp", "c7-crypt@s2:/f.txt", &back.to_string_lossy()]);
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&f).unwrap());
    // The snapshot made by ozfs carries an IV set guid (a raw stream of
    // it names one).
    let raw = work.path().join("s2.raw");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -w c7-crypt/gcm@s2 > '{}'",
        raw.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let stream = std::fs::read(&raw).unwrap();
    let plen = u32::from_le_bytes(stream[4..8].try_into().unwrap()) as usize;
    let nv = ozfs_format::nvnative::unpack(&stream[312..312 + plen]).unwrap();
    let keys = nv.get_nvlist("crypt_keydata").expect("crypt_keydata");
    assert_ne!(keys.get_u64("to_ivset_guid"), Some(0), "{keys:?}");
    let dest = work.path().join("gcm");
    oz.ok(&[
        "cp",
        "-r",
        "-L",
        &gcm_key,
        "c7-crypt/gcm@s2:/",
        &dest.to_string_lossy(),
    ]);
    assert_eq!(std::fs::read(dest.join("tree/big.bin")).unwrap(), big);
    assert_eq!(
        std::fs::read(dest.join("f.txt")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    for p in ["tree", "f.txt"] {
        let p = dest.join(p);
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    let manifest = std::fs::read_to_string(corpus.join("c7-crypt/manifest.txt")).unwrap();
    let mut want = theirs(&manifest, "c7-crypt/gcm@s1");
    let before = want.len();
    want.retain(|p, _| !p.ends_with("random.bin"));
    assert_eq!(want.len() + 1, before);
    let got = ours(&ozfs_testkit::manifest::Manifest::scan(&dest).unwrap());
    if let Some(d) = differences(&want, &got) {
        panic!("c7-crypt/gcm@s2 is not OpenZFS's gcm@s1 without random.bin:\n{d}");
    }
}

/// The `bp cloned` line of OpenZFS's `zdb -bcc` verdict: (bytes, count).
fn zdb_cloned(verdict: &str) -> (u64, u64) {
    let l = verdict
        .lines()
        .find(|l| l.trim_start().starts_with("bp cloned:"))
        .unwrap_or_else(|| panic!("no 'bp cloned' line:\n{verdict}"));
    let nums: Vec<u64> = l
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// A pool OpenZFS 2.3.2 made with block cloning active
/// (`tests/fixtures/bclone-openzfs-2.3.img.gz`, made by
/// `scripts/oracle/make-bclone.sh`: `f1` cloned twice, `f2` twice, `f3`
/// once, then a recursive snapshot). ozfs shows OpenZFS's bclone figures,
/// then frees cloned blocks as OpenZFS does: destroying the snapshot frees
/// the blocks of a clone removed before (a reference each, not their
/// space), removing the other clones empties the block reference table,
/// which goes with the feature's count; the files keep OpenZFS's contents
/// and, alone again, are freed for real. OpenZFS's `zdb -bcc` (which counts
/// cloned blocks by the table) and `zdb -d` find the pool clean after each
/// step, and its count of cloned blocks falls to zero.
#[test]
fn cloned_blocks_are_freed_as_openzfs_frees_them() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-bclone-");
    let devs = work.path().join("bc");
    std::fs::create_dir_all(&devs).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bclone-openzfs-2.3.img.gz");
    let img = devs.join("d0.img");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -dc '{}' > '{}'",
            fixture.display(),
            img.display()
        ))
        .status()
        .unwrap();
    assert!(out.success());
    let d = devs.to_string_lossy().into_owned();
    let import = || oz.ok(&["zpool", "import", "-N", "-d", &d, "bc"]);
    let props = || {
        oz.ok(&[
            "zpool",
            "get",
            "-H",
            "-o",
            "value",
            "bcloneused,bclonesaved,bcloneratio,feature@block_cloning",
            "bc",
        ])
        .lines()
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    let zdb = oracle_zdb();
    let verdict = |what: &str| -> Option<(u64, u64)> {
        let z = zdb.as_ref()?;
        let v = openzfs_verdict(z, &devs, "bc");
        let c = zdb_cloned(&v);
        eprintln!("{what}: OpenZFS counts {c:?} cloned");
        Some(c)
    };
    // As OpenZFS printed them when it made the pool.
    import();
    assert_eq!(props(), ["260K", "480K", "2.84x", "active"]);
    oz.ok(&["zpool", "export", "bc"]);
    let before = verdict("as made");

    // A clone removed while the snapshot holds it: nothing freed; the
    // snapshot destroyed: its blocks lose a reference each.
    import();
    oz.ok(&["rm", "bc/a:/f1.clone"]);
    assert_eq!(props(), ["260K", "480K", "2.84x", "active"]);
    oz.ok(&["zfs", "destroy", "-r", "bc@s1"]);
    let p = props();
    assert_eq!(p[0], "260K", "{p:?}");
    assert_ne!(p[1], "480K", "{p:?}");
    oz.ok(&["zpool", "export", "bc"]);
    let mid = verdict("snapshot destroyed");
    if let (Some(b), Some(m)) = (before, mid) {
        assert!(m.1 < b.1 && m.1 > 0, "{b:?} then {m:?}");
    }

    // Every other clone removed: the table goes, the feature is enabled.
    import();
    for f in ["f1.c2", "f2.c1", "f2.c2", "f3.clone"] {
        oz.ok(&["rm", &format!("bc/a:/{f}")]);
    }
    assert_eq!(props(), ["0", "0", "1.00x", "enabled"]);
    // The files as OpenZFS wrote them (its sha256 when it made the pool).
    for (f, sum) in [
        (
            "f1",
            "2a8cd082959116b8243f18c3853b4a2a554da61677e2d0ae263b2262797e717c",
        ),
        (
            "f2",
            "118639c9a7f25d14e5a0f5b65abed6a1ca1aa7fbf96407ce8150b9433532a6b8",
        ),
        (
            "f3",
            "ee05117de166494be74882e25565449f4c191d6bbd07f41becb4894a362bc52a",
        ),
    ] {
        let back = work.path().join(f);
        oz.ok(&["cp", &format!("bc/a:/{f}"), &back.to_string_lossy()]);
        let out = std::process::Command::new("sha256sum")
            .arg(&back)
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        assert!(got.starts_with(sum), "{f}: {got}");
    }
    oz.ok(&["zpool", "export", "bc"]);
    assert_eq!(
        verdict("clones removed").map(|c| c.1),
        zdb.as_ref().map(|_| 0)
    );

    // Alone again, a file's blocks are freed for real.
    import();
    oz.ok(&["rm", "bc/a:/f2"]);
    oz.ok(&["zpool", "export", "bc"]);
    verdict("f2 removed");
}

/// `c10-removal` (a device removed: `device_removal`, `obsolete_counts`;
/// also `block_cloning`), without the removed device's image: imported
/// read-write and written. A property set on the root rewrites
/// MOS blocks one of whose copies OpenZFS left on the removed vdev:
/// freeing them frees their copies through the removal mapping and marks
/// the old ranges obsolete (the vdev's obsolete space map, made then);
/// files from before the removal are removed and new ones written (never
/// on the removed vdev). OpenZFS's `zdb -bcc` checks the obsolete ranges
/// against what the blocks still reference ("obsolete indirect mapping
/// count mismatch" otherwise) and `zdb -d` the MOS; what ozfs wrote reads
/// back.
#[test]
fn a_pool_with_a_removed_device_is_changed_and_stays_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-removal-");
    let corpus = corpus_dir();
    let devs = work.path().join("c10");
    unpack_corpus(&corpus.join("c10-removal"), &devs);
    // The removed device is gone, as it usually is after `zpool remove`:
    // its vdev comes from the MOS copy of the config.
    std::fs::remove_file(devs.join("d1.img")).unwrap();
    let d = devs.to_string_lossy().into_owned();
    let new = work.path().join("new.bin");
    let data: Vec<u8> = (0..700_000u32).map(|j| (j % 251) as u8 ^ 0x5a).collect();
    std::fs::write(&new, &data).unwrap();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c10-removal"]);
    oz.ok(&["zfs", "set", "compression=gzip", "c10-removal"]);
    oz.ok(&["rm", "-r", "c10-removal:/deep"]);
    oz.ok(&["rm", "c10-removal:/random.bin"]);
    oz.ok(&["cp", &new.to_string_lossy(), "c10-removal:/new.bin"]);
    oz.ok(&["zfs", "snapshot", "c10-removal@oz"]);
    oz.ok(&["zpool", "export", "c10-removal"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "c10-removal");
    }
    import_readonly(&oz, &devs, "c10-removal");
    let back = work.path().join("back.bin");
    oz.ok(&["cp", "c10-removal@oz:/new.bin", &back.to_string_lossy()]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let v = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "compression",
        "c10-removal",
    ]);
    assert_eq!(v.trim(), "gzip");
    oz.ok(&["zpool", "export", "c10-removal"]);
}

/// `c12-v28` (pool version 28, no feature flags: a mirror, ZPL 5)
/// imported read-write and changed in its own version's forms: a tree in,
/// a snapshot made, a tree out, OpenZFS's snapshot destroyed (new-format
/// dead lists, each entry its own bpobj: no shared empty one), a new file
/// system (ZPL 5, as version 24 and later make), a recursive snapshot and
/// a clone (`dd_clones`). The pool stays version 28; OpenZFS's `zdb -bcc`
/// and `zdb -d` find it clean; what ozfs wrote reads back.
#[test]
fn a_version_28_pool_is_changed_and_stays_clean() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-write-v28-");
    let corpus = corpus_dir();
    let devs = work.path().join("c12");
    unpack_corpus(&corpus.join("c12-v28"), &devs);
    let d = devs.to_string_lossy().into_owned();
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|j| (j % 249) as u8).collect();
    std::fs::write(src.join("sub/f"), &data).unwrap();
    std::fs::write(src.join("small"), b"v28\n").unwrap();
    let s = src.to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c12-v28"]);
    oz.ok(&["cp", "-r", &s, "c12-v28:/in"]);
    oz.ok(&["zfs", "snapshot", "c12-v28@oz1"]);
    oz.ok(&["rm", "-r", "c12-v28:/deep"]);
    oz.ok(&["zfs", "destroy", "c12-v28@s1"]);
    oz.ok(&["zfs", "create", "c12-v28/new"]);
    oz.ok(&["cp", &format!("{s}/sub/f"), "c12-v28/new:/f"]);
    oz.ok(&["zfs", "snapshot", "-r", "c12-v28@oz2"]);
    oz.ok(&["zfs", "clone", "c12-v28@oz2", "c12-v28/cl"]);
    let get = |p: &str, ds: &str| oz.ok(&["zfs", "get", "-H", "-o", "value", p, ds]);
    assert_eq!(get("version", "c12-v28/new").trim(), "5");
    oz.ok(&["zpool", "export", "c12-v28"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "c12-v28");
    }
    import_readonly(&oz, &devs, "c12-v28");
    let v = oz.ok(&["zpool", "get", "-H", "-o", "value", "version", "c12-v28"]);
    assert_eq!(v.trim(), "28");
    for (snap, path) in [("c12-v28/new@oz2", "/f"), ("c12-v28/cl", "/in/sub/f")] {
        let back = work.path().join("back");
        let _ = std::fs::remove_file(&back);
        oz.ok(&["cp", &format!("{snap}:{path}"), &back.to_string_lossy()]);
        assert_eq!(std::fs::read(&back).unwrap(), data, "{snap}:{path}");
    }
    oz.ok(&["zpool", "export", "c12-v28"]);
}
