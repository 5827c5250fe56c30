//! Every checksum OpenZFS has, read through, on pools the real OpenZFS
//! 2.3.2 kernel module made (../shared/corpus/openzfs-2.3):
//! * `c6-checksums` has one file system per checksum — fletcher2,
//!   fletcher4, sha256, sha512, skein, edonr, blake3 — each with the same
//!   400,000-byte file and a small one;
//! * `c5-dedup` has `dedup=blake3` (salted blake3 on every deduplicated
//!   block) and `dedup=on` (sha256).
//!
//! Imported read-only by ozfs, every file system of the pool (the root
//! one included: it holds the others' mount points) is copied out with
//! `ozfs cp -r` and compared with what OpenZFS's own mount showed
//! (`manifest.txt`): kinds, modes, owners, sizes, mtimes, sha256 of every
//! file, symlink targets and `user.*` xattrs. Link counts and directory
//! sizes are what ZFS reports, which a copy does not keep, so they are not
//! compared.

mod ccommon;
mod common;
use ccommon::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pools, and the checksum property ozfs must show for some of their
/// file systems.
const POOLS: &[(&str, &[(&str, &str)])] = &[
    (
        "c6-checksums",
        &[
            ("c6-checksums/fletcher2", "fletcher2"),
            ("c6-checksums/fletcher4", "fletcher4"),
            ("c6-checksums/sha256", "sha256"),
            ("c6-checksums/sha512", "sha512"),
            ("c6-checksums/skein", "skein"),
            ("c6-checksums/edonr", "edonr"),
            ("c6-checksums/blake3", "blake3"),
        ],
    ),
    ("c5-dedup", &[]),
];

fn corpus() -> PathBuf {
    corpus_dir()
}

fn unpack(src: &Path, devs: &Path) {
    unpack_corpus(src, devs)
}

/// Import `pool` read-only, copy every file system out, compare; the
/// differences found, one string per file system.
fn check_pool(oz: &Ozfs, work: &Path, pool: &str, checksums: &[(&str, &str)]) -> Vec<String> {
    check_pool_damaged(oz, work, pool, checksums, &|_| {})
}

/// [`check_pool`] with `damage` applied to the unpacked devices' directory
/// before the import.
fn check_pool_damaged(
    oz: &Ozfs,
    work: &Path,
    pool: &str,
    checksums: &[(&str, &str)],
    damage: &dyn Fn(&Path),
) -> Vec<String> {
    check_pool_with(oz, work, pool, checksums, damage, &|_| Vec::new())
}

/// [`check_pool_damaged`] with `cp_args(dataset)` given to each `ozfs cp`
/// (an encrypted dataset's key location).
fn check_pool_with(
    oz: &Ozfs,
    work: &Path,
    pool: &str,
    checksums: &[(&str, &str)],
    damage: &dyn Fn(&Path),
    cp_args: &dyn Fn(&str) -> Vec<String>,
) -> Vec<String> {
    let src = corpus().join(pool);
    let text = std::fs::read_to_string(src.join("manifest.txt")).expect("manifest.txt");
    let devs = work.join(pool);
    unpack(&src, &devs);
    damage(&devs);
    import_readonly(oz, &devs, pool);
    let props = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,value",
        "-r",
        "checksum",
        pool,
    ]);
    for (ds, algo) in checksums {
        assert!(
            props.lines().any(|l| l == format!("{ds}\t{algo}")),
            "{ds}: checksum property: {props}"
        );
    }
    let mut failed = Vec::new();
    let names = datasets(&text);
    assert!(!names.is_empty(), "{pool}: no trees in manifest.txt");
    for ds in &names {
        let want = theirs(&text, ds);
        let dest = work.join(format!("copy-{}", ds.replace('/', "_")));
        let extra = cp_args(ds);
        let mut args: Vec<&std::ffi::OsStr> = vec!["cp".as_ref(), "-r".as_ref()];
        args.extend(extra.iter().map(|a| -> &std::ffi::OsStr { a.as_ref() }));
        let src = format!("{ds}:/");
        args.push(src.as_ref());
        args.push(dest.as_os_str());
        let r = oz.run(&args);
        if !r.success() {
            failed.push(format!("{ds}: ozfs cp failed: {}", r.stderr));
            continue;
        }
        let got = ours(&Manifest::scan(&dest).expect("scan the copy"));
        if let Some(d) = differences(&want, &got) {
            failed.push(format!("{ds}:\n{d}"));
        }
        let _ = std::fs::remove_dir_all(&dest);
    }
    oz.ok(&["zpool", "export", pool]);
    let _ = std::fs::remove_dir_all(&devs);
    failed
}

#[test]
fn every_checksum_reads_as_openzfs_wrote_it() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-checksums-");
    let mut failed = Vec::new();
    for (pool, checksums) in POOLS {
        failed.extend(check_pool(&oz, work.path(), pool, checksums));
    }
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}

/// Pools OpenZFS made with its defaults (`xattr=sa`: xattrs in the system
/// attributes, large ones in spill blocks; hard links; 3000-entry fat-ZAP
/// directories), on every layout ozfs imports — single, mirror, RAID-Z1/2/3,
/// with a zvol and special vdev beside, and a version-28 pool — read exactly
/// as OpenZFS's mount showed them, every file system and snapshot.
#[test]
fn default_openzfs_pools_read_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-defaults-");
    let mut failed = Vec::new();
    for pool in [
        "c1-single",
        "c2-mirror",
        "c3-raidz2",
        "c4-raidz13",
        "c11-zvol-special",
        "c12-v28",
    ] {
        failed.extend(check_pool(&oz, work.path(), pool, &[]));
    }
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}

/// A volume (`c11-zvol-special/vol`, 24 MiB) copied out whole with `ozfs
/// cp POOL/VOLUME DEST` has the sha256 OpenZFS gave its device
/// (`zvols.txt`); a file system named without a path is refused.
#[test]
fn a_volume_reads_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-zvol-");
    let pool = "c11-zvol-special";
    let src = corpus().join(pool);
    let devs = work.path().join(pool);
    unpack(&src, &devs);
    import_readonly(&oz, &devs, pool);
    let img = work.path().join("vol.img");
    oz.ok(&["cp", &format!("{pool}/vol"), &img.to_string_lossy()]);
    let r = oz.run(&["cp", pool, &work.path().join("x").to_string_lossy()]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("is not a volume"), "{}", r.describe());
    // `zfs list -t` tells volumes from file systems; a volume has no
    // mountpoint.
    let vols = oz.ok(&[
        "zfs",
        "list",
        "-H",
        "-t",
        "volume",
        "-o",
        "name,type,mountpoint",
    ]);
    assert_eq!(vols, format!("{pool}/vol\tvolume\t-\n"));
    let fss = oz.ok(&["zfs", "list", "-H", "-t", "filesystem", "-o", "name"]);
    assert_eq!(fss, format!("{pool}\n"));
    oz.ok(&["zpool", "export", pool]);
    let want = std::fs::read_to_string(src.join("zvols.txt")).expect("zvols.txt");
    let want = want
        .lines()
        .find_map(|l| l.strip_suffix(&format!("  {pool}/vol")))
        .expect("the volume in zvols.txt");
    let out = Command::new("sha256sum").arg(&img).output().unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        got.split_whitespace().next(),
        Some(want),
        "sha256 of the volume"
    );
}

/// `ozfs cp` arguments that give encrypted dataset `ds` of corpus pool
/// `pool` its key: the keylocation OpenZFS recorded (`props.txt`, a
/// `file:///share/POOL/keys/…` path of the machine that made it) mapped
/// to the corpus's `keys/`. None for a dataset without one.
fn key_args(pool: &str, ds: &str) -> Vec<String> {
    let Ok(props) = std::fs::read_to_string(corpus().join(pool).join("props.txt")) else {
        return Vec::new();
    };
    let prop = |name: &str, prop: &str| {
        props.lines().find_map(|l| {
            let mut f = l.split('\t');
            (f.next() == Some(name) && f.next() == Some(prop))
                .then(|| f.next().map(str::to_string))?
        })
    };
    let Some(root) = prop(ds, "encryptionroot").filter(|r| r != "-") else {
        return Vec::new();
    };
    let Some(loc) = prop(&root, "keylocation") else {
        return Vec::new();
    };
    let Some(file) = loc
        .rsplit("/keys/")
        .next()
        .filter(|_| loc.contains("/keys/"))
    else {
        return Vec::new();
    };
    let path = corpus().join(pool).join("keys").join(file);
    vec!["-L".into(), format!("file://{}", path.display())]
}

/// Native encryption (`c7-crypt`: aes-256-gcm with a passphrase,
/// aes-128-ccm with a hex key, each with a snapshot): with its key given
/// (`ozfs cp -L file://…`) every encrypted file system and snapshot reads
/// exactly as OpenZFS showed it; without it the copy is refused naming
/// the encryption root, never as corrupt; a wrong key is refused as
/// incorrect. The encryption properties equal OpenZFS's `zfs get`, and
/// `zfs load-key -n` proves a key and refuses a wrong one.
#[test]
fn encrypted_datasets_read_with_their_keys() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-crypt-");
    let keys = corpus().join("c7-crypt/keys");
    let key_of = |ds: &str| crypt_key_location(&keys, ds);
    // The key files as the keylocations recorded by OpenZFS name them.
    for ds in [
        "c7-crypt/gcm",
        "c7-crypt/gcm@s1",
        "c7-crypt/ccm",
        "c7-crypt/ccm@s1",
    ] {
        assert_eq!(
            key_args("c7-crypt", ds),
            vec!["-L".to_string(), key_of(ds).expect("key")],
            "{ds}"
        );
    }
    assert!(key_args("c7-crypt", "c7-crypt").is_empty());
    let failed = check_pool_with(&oz, work.path(), "c7-crypt", &[], &|_| {}, &|ds| {
        key_args("c7-crypt", ds)
    });
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));

    // The pool again, for what goes wrong.
    let devs = work.path().join("again");
    unpack(&corpus().join("c7-crypt"), &devs);
    import_readonly(&oz, &devs, "c7-crypt");
    let dest = work.path().join("locked");
    let r = oz.run(&["cp", "-r", "c7-crypt/gcm@s1:/", &dest.to_string_lossy()]);
    assert!(!r.success());
    assert!(
        r.stderr.contains("encryption root 'c7-crypt/gcm'") && r.stderr.contains("not loaded"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("corrupt") && !r.stderr.contains("checksum"),
        "{}",
        r.stderr
    );
    let wrong = format!("file://{}", keys.join("ccm.hex").display());
    let r = oz.run(&[
        "cp",
        "-r",
        "-L",
        &wrong,
        "c7-crypt/gcm:/",
        &dest.to_string_lossy(),
    ]);
    assert!(
        !r.success() && r.stderr.contains("incorrect key"),
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&dest);

    // Properties, as OpenZFS printed them (keys unavailable here: no
    // process holds them).
    let props = [
        "encryption",
        "keylocation",
        "keyformat",
        "pbkdf2iters",
        "encryptionroot",
        "keystatus",
    ];
    let theirs: Vec<String> = std::fs::read_to_string(corpus().join("c7-crypt/props.txt"))
        .expect("props.txt")
        .lines()
        .filter(|l| l.split('\t').nth(1).is_some_and(|p| props.contains(&p)))
        .map(|l| l.replace("\tavailable\t", "\tunavailable\t"))
        .collect();
    let ours = oz.ok(&["zfs", "get", "-H", "-r", &props.join(","), "c7-crypt"]);
    assert_eq!(ours.lines().collect::<Vec<_>>(), theirs);

    // load-key -n proves a key; a wrong one, or a dataset that is not an
    // encryption root, is refused.
    let right = key_of("c7-crypt/gcm").expect("key");
    oz.ok(&["zfs", "load-key", "-n", "-L", &right, "c7-crypt/gcm"]);
    let r = oz.run(&["zfs", "load-key", "-n", "-L", &wrong, "c7-crypt/gcm"]);
    assert!(
        !r.success() && r.stderr.contains("incorrect key"),
        "{}",
        r.stderr
    );
    let r = oz.run(&["zfs", "load-key", "-n", "c7-crypt"]);
    assert!(
        !r.success() && r.stderr.contains("encryption is not enabled"),
        "{}",
        r.stderr
    );
    let r = oz.run(&["zfs", "unload-key", "c7-crypt/ccm"]);
    assert!(
        !r.success() && r.stderr.contains("already unloaded"),
        "{}",
        r.stderr
    );
    oz.ok(&["zpool", "export", "c7-crypt"]);
}

/// Device removal and block cloning (`c10-removal`): the pool's second
/// file vdev was removed with `zpool remove` (an indirect vdev whose blocks
/// are read through the removal mapping in the MOS), and files were
/// cloned with `cp --reflink` (block_cloning active). Imported read-only,
/// every file system and snapshot reads exactly as OpenZFS showed it, and
/// the status shows the removed vdev as `indirect-1`.
#[test]
fn removed_device_and_cloned_blocks_read_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-removal-");
    let failed = check_pool(&oz, work.path(), "c10-removal", &[]);
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}

/// Not a check: a survey of every corpus pool (`cargo test --release -p
/// ozfs --test corpus_checksums -- --ignored --nocapture`), printing which
/// file systems read exactly and why the others do not — how much of
/// OpenZFS's world ozfs reads. A pool that cannot even be imported is listed with why.
#[test]
#[ignore]
fn survey_every_corpus_pool() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-survey-");
    let pools = corpus_pools("manifest.txt");
    let (mut good, mut all) = (0, 0);
    for pool in pools {
        let text =
            std::fs::read_to_string(corpus().join(&pool).join("manifest.txt")).expect("manifest");
        let n = datasets(&text).len();
        all += n;
        let r = std::panic::catch_unwind(|| {
            check_pool_with(&oz, work.path(), &pool, &[], &|_| {}, &|ds| {
                key_args(&pool, ds)
            })
        });
        match r {
            Ok(failed) => {
                good += n - failed.len();
                println!("{pool}: {}/{n} exact", n - failed.len());
                for f in failed {
                    let short: Vec<&str> = f.lines().take(4).collect();
                    println!("    {}", short.join("\n    "));
                }
            }
            Err(_) => {
                println!("{pool}: 0/{n} (import or listing failed, see above)");
                let _ = oz.run(&["zpool", "export", &pool]);
            }
        }
    }
    println!("total: {good}/{all} file systems and snapshots read exactly");
}

/// `c9-expand`: a raidz1 of 3 disks that OpenZFS expanded to 4 (`zpool
/// attach`), with files written before the expansion (3 columns wide,
/// reflowed onto 4 disks) and after it (4 wide). Imported read-only, every
/// file system reads exactly; a read-write import is refused, naming the
/// feature (writing expanded RAID-Z is not implemented).
#[test]
fn expanded_raidz_reads_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-expand-");
    let failed = check_pool(&oz, work.path(), "c9-expand", &[]);
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}

/// Every disk of `c9-expand` in turn has its whole data area (between the
/// front and back labels) overwritten with noise: within single parity for
/// every row of every block — old blocks, 3 wide and reflowed, lose one
/// sector per row on that disk, spread over several columns — so every
/// file system still reads exactly, rebuilt row by row.
#[test]
fn expanded_raidz_reads_through_a_ruined_disk() {
    ruin_each_disk_and_check("c9-expand", 4, 0x9e37_79b9_7f4a_7c15);
}

/// `c8-draid`: a dRAID vdev (`draid1:3d:5c:1s`: single parity, groups of 3
/// data columns, 5 children, one distributed spare) as OpenZFS made it.
/// Imported read-only, every file system reads exactly; the status names
/// the vdev and its available spare as OpenZFS does. (Writing it:
/// `corpus_write.rs`.)
#[test]
fn draid_reads_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-draid-");
    let failed = check_pool(&oz, work.path(), "c8-draid", &[]);
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
    let devs = work.path().join("again");
    unpack(&corpus().join("c8-draid"), &devs);
    import_readonly(&oz, &devs, "c8-draid");
    let status = oz.ok(&["zpool", "status", "c8-draid"]);
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let lines: Vec<Vec<String>> = status.lines().map(words).collect();
    assert!(
        lines
            .iter()
            .any(|w| w[..] == ["draid1:3d:5c:1s-0", "ONLINE", "0", "0", "0"]),
        "{status}"
    );
    assert!(
        lines.iter().any(|w| w[..] == ["draid1-0-0", "AVAIL"]),
        "{status}"
    );
    let size = oz.ok(&["zpool", "list", "-H", "-o", "size", "c8-draid"]);
    assert_eq!(
        size.trim(),
        "192M",
        "zpool list SIZE as layout.txt shows it"
    );
    oz.ok(&["zpool", "export", "c8-draid"]);
}

/// Every disk of `c8-draid` in turn has its whole data area (between the
/// front and back labels) overwritten with noise — within single parity
/// for every stripe: each child holds at most one column of a stripe — so
/// every file system still reads exactly, rebuilt from parity.
#[test]
fn draid_reads_through_a_ruined_disk() {
    ruin_each_disk_and_check("c8-draid", 5, 0x2545_f491_4f6c_dd1d);
}

/// `ozfs zdb -b` on every pool OpenZFS made: no leaks, and the bytes the
/// blocks allocate equal OpenZFS's own `zdb -bcc` figure ("bp allocated"
/// less "bp deduped", which OpenZFS counts once per reference) — dedup,
/// encryption, dRAID, expanded RAID-Z, special vdevs and log space maps
/// included. A pool with a removed device is refused as unsupported, not
/// reported as leaking.
#[test]
fn leak_check_agrees_with_openzfs_zdb() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-leaks-");
    let figure = |text: &str, label: &str| -> u64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{label}' figure in:\n{text}"))
    };
    let pools = corpus_pools("zdb.txt");
    assert!(pools.len() >= 13, "{pools:?}");
    let mut wrong = Vec::new();
    for pool in &pools {
        let devs = work.path().join(pool);
        unpack(&corpus().join(pool), &devs);
        import_readonly(&oz, &devs, pool);
        let r = oz.run(&["zdb", "-b", pool]);
        if pool == "c10-removal" {
            assert!(
                !r.success() && r.stderr.contains("removed device"),
                "{pool}: {}{}",
                r.stdout,
                r.stderr
            );
        } else {
            let theirs =
                std::fs::read_to_string(corpus().join(pool).join("zdb.txt")).expect("zdb.txt");
            let want = figure(&theirs, "bp allocated:") - figure(&theirs, "bp deduped:");
            if !r.success() || !r.stdout.contains("No leaks") {
                wrong.push(format!("{pool}: {}{}", r.stdout, r.stderr));
            } else if figure(&r.stdout, "bp allocated:") != want {
                wrong.push(format!(
                    "{pool}: bp allocated differs from {want}:\n{}",
                    r.stdout
                ));
            }
        }
        oz.ok(&["zpool", "export", pool]);
        let _ = std::fs::remove_dir_all(&devs);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A version-28 pool (`c12-v28`, made by OpenZFS with `-o version=28`)
/// imported read-only is left exactly as it was (its read-write import,
/// which writes it, is `corpus_write.rs`'s).
#[test]
fn a_read_only_import_of_a_version_28_pool_changes_nothing() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-v28-");
    let devs = work.path().join("c12-v28");
    unpack(&corpus().join("c12-v28"), &devs);
    let digest = || {
        let mut files: Vec<_> = std::fs::read_dir(&devs)
            .expect("devs")
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read(f).expect("image"))
            .collect::<Vec<_>>()
    };
    let before = digest();
    import_readonly(&oz, &devs, "c12-v28");
    oz.ok(&["zpool", "export", "c12-v28"]);
    assert!(before == digest(), "a read-only import changed the images");
}

/// A pool whose labels name an active feature ozfs cannot read (here a
/// made-up `com.example:future` added to `features_for_read` of
/// `c1-single`) is listed by `zpool import` as OpenZFS lists it — UNAVAIL,
/// the feature named — and importing it is refused naming the feature,
/// read-only too.
#[test]
fn import_lists_unsupported_features() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-features-");
    let devs = work.path().join("c1-single");
    unpack(&corpus().join("c1-single"), &devs);
    let mut img = ozfs_testkit::mutate::Image::open(&devs.join("d0.img")).expect("image");
    img.mutate_config(|nv| {
        let mut ffr = nv
            .get_nvlist("features_for_read")
            .cloned()
            .unwrap_or_default();
        ffr.set("com.example:future", ozfs_format::NvValue::Boolean);
        nv.set("features_for_read", ozfs_format::NvValue::NvList(ffr));
    })
    .expect("label config");
    let list = oz.run(&["zpool", "import", "-d", &devs.to_string_lossy()]);
    assert!(
        list.stdout.contains("   pool: c1-single")
            && list.stdout.contains("  state: UNAVAIL")
            && list
                .stdout
                .contains("feature(s) not supported on this system:\n\tcom.example:future\n"),
        "{}{}",
        list.stdout,
        list.stderr
    );
    for ro in [true, false] {
        let mut args = vec!["zpool", "import"];
        if ro {
            args.extend(["-o", "readonly=on"]);
        }
        let d = devs.to_string_lossy();
        args.extend(["-d", &d, "c1-single"]);
        let r = oz.run(&args);
        assert!(
            !r.success() && r.stderr.contains("com.example:future"),
            "{}",
            r.stderr
        );
    }
}

/// Names longer than 255 bytes (`c13-names-props/p`, OpenZFS's longname
/// feature: a 600-byte file name). The host's file systems cannot hold
/// such a name, so a tree copy refuses that one entry, naming why, and
/// copies everything else exactly; the file itself, copied under a short
/// name, has OpenZFS's contents, size, mode and mtime.
#[test]
fn long_names_read_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-longname-");
    let pool = "c13-names-props";
    let text = std::fs::read_to_string(corpus().join(pool).join("manifest.txt")).expect("manifest");
    let mut want = theirs(&text, "c13-names-props/p");
    let long: Vec<PathBuf> = want
        .keys()
        .filter(|p| p.as_os_str().len() > 255 + 2)
        .cloned()
        .collect();
    assert_eq!(long.len(), 1, "{long:?}");
    let long = long[0].clone();
    let long_want = want.remove(&long).expect("entry");
    let devs = work.path().join(pool);
    unpack(&corpus().join(pool), &devs);
    import_readonly(&oz, &devs, pool);
    let dest = work.path().join("copy");
    let r = oz.run(&["cp", "-r", "c13-names-props/p:/", &dest.to_string_lossy()]);
    assert!(
        !r.success()
            && r.stderr.contains("1 entries could not be copied")
            && r.stderr.contains("File name too long"),
        "{}",
        r.stderr
    );
    let got = ours(&Manifest::scan(&dest).expect("scan"));
    assert_eq!(got, want, "everything but the long name");
    // The manifest has no device numbers: OpenZFS on Linux stores the
    // kernel's dev_t; `mknod chardev c 1 3` must come out as 1:3.
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::symlink_metadata(dest.join("chardev"))
        .expect("chardev")
        .rdev();
    assert_eq!(
        (libc::major(rdev), libc::minor(rdev)),
        (1, 3),
        "chardev rdev {rdev:#x}"
    );
    let name = long.to_string_lossy();
    let name = name.trim_start_matches("./");
    assert_eq!(name.len(), 600);
    let one_dir = work.path().join("one");
    std::fs::create_dir(&one_dir).expect("mkdir");
    oz.ok(&[
        "cp",
        &format!("c13-names-props/p:/{name}"),
        &one_dir.join("short").to_string_lossy(),
    ]);
    let one = Manifest::scan(&one_dir).expect("scan one file");
    let got_one = ours(&one);
    let (_, g) = got_one.iter().next().expect("the file");
    assert_eq!(
        (g.size, &g.sha256, g.mode, g.mtime),
        (
            long_want.size,
            &long_want.sha256,
            long_want.mode,
            long_want.mtime
        ),
        "the long-named file"
    );
    // A non-ASCII name in this case-folding directory (`casesensitivity=
    // mixed`) is found by name too, not only by listing.
    let uni = "ünïcødé-名前-230.txt";
    let uni_want = want
        .iter()
        .find(|(p, _)| p.to_string_lossy().ends_with(uni))
        .map(|(_, w)| w)
        .expect("in manifest");
    let uni_dir = work.path().join("uni");
    std::fs::create_dir(&uni_dir).expect("mkdir");
    oz.ok(&[
        "cp",
        &format!("c13-names-props/p:/{uni}"),
        &uni_dir.join("u").to_string_lossy(),
    ]);
    let got_uni = ours(&Manifest::scan(&uni_dir).expect("scan"));
    let (_, g) = got_uni.iter().next().expect("the file");
    assert_eq!(g.sha256, uni_want.sha256, "{uni}");
    oz.ok(&["zpool", "export", pool]);
}

/// After `zpool remove` the removed device is usually gone: `c10-removal`
/// without its second image imports (the removed vdev is described only
/// in the MOS copy of the config and becomes `indirect-1` from there),
/// lists ONLINE, and reads exactly. A pool missing a top-level vdev that
/// holds data (`c4-raidz13` without all three disks of its raidz1) is
/// still refused as unavailable, naming the missing vdev.
#[test]
fn a_removed_device_is_not_needed() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-gone-");
    let failed = check_pool_damaged(&oz, work.path(), "c10-removal", &[], &|devs| {
        std::fs::remove_file(devs.join("d1.img")).expect("remove d1.img");
    });
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
    let devs = work.path().join("again");
    unpack(&corpus().join("c10-removal"), &devs);
    std::fs::remove_file(devs.join("d1.img")).expect("remove d1.img");
    let list = oz.ok(&["zpool", "import", "-d", &devs.to_string_lossy()]);
    assert!(
        list.contains("  state: ONLINE")
            && list.contains("indirect-1")
            && !list.contains("missing"),
        "{list}"
    );
    let devs = work.path().join("c4");
    unpack(&corpus().join("c4-raidz13"), &devs);
    for d in ["a0.img", "a1.img", "a2.img"] {
        std::fs::remove_file(devs.join(d)).expect("remove");
    }
    let r = oz.run(&[
        "zpool",
        "import",
        "-o",
        "readonly=on",
        "-d",
        &devs.to_string_lossy(),
        "c4-raidz13",
    ]);
    assert!(
        !r.success() && r.stderr.contains("unavailable") && r.stderr.contains("missing-0"),
        "{}",
        r.stderr
    );
}

/// `ozfs zdb -l` prints every device's labels exactly as OpenZFS 2.3's own
/// `zdb -l` prints them (the oracle, run here on the same images): every
/// image of every corpus pool — single, mirror, RAID-Z, dRAID with its
/// spare, special and log vdevs, version 28, a removed device's survivor.
#[test]
fn zdb_labels_as_openzfs_prints_them() {
    let Some(zdb) = oracle_zdb() else { return };
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-labels-");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for pool in corpus_pools("manifest.txt") {
        let src = corpus().join(&pool);
        let devs = work.path().join(&pool);
        unpack(&src, &devs);
        let mut imgs: Vec<PathBuf> = std::fs::read_dir(&devs)
            .expect("devs")
            .flatten()
            .map(|e| e.path())
            .collect();
        imgs.sort();
        for img in imgs {
            let ours = oz.run(&["zdb", "-l", &img.to_string_lossy()]);
            let theirs = std::process::Command::new(&zdb)
                .arg("-l")
                .arg(&img)
                .output()
                .expect("run OpenZFS zdb");
            checked += 1;
            if !ours.success() || ours.stdout.as_bytes() != theirs.stdout.as_slice() {
                wrong.push(format!(
                    "{}:\n--- ozfs\n{}{}\n--- OpenZFS\n{}",
                    img.display(),
                    ours.stdout,
                    ours.stderr,
                    String::from_utf8_lossy(&theirs.stdout)
                ));
            }
        }
        let _ = std::fs::remove_dir_all(&devs);
    }
    assert!(checked >= 30, "{checked} images");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `ozfs zdb -d POOL` prints what OpenZFS 2.3's own `zdb -d` prints for
/// every corpus pool, line for line: the datasets in the order OpenZFS
/// visits them (children, then snapshots, then the head; ZAP hash order)
/// with their ids, creation txgs, sizes and object counts — encrypted ones
/// without their keys too — then OpenZFS's feature reference-count checks
/// (per-dataset features counted over the datasets, device removal's
/// indirect vdevs and obsolete-count objects).
#[test]
fn zdb_datasets_as_openzfs_lists_them() {
    let Some(zdb) = oracle_zdb() else { return };
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-zdbd-");
    let pools = corpus_pools("manifest.txt");
    assert!(pools.len() >= 13, "{pools:?}");
    let mut wrong = Vec::new();
    for pool in &pools {
        let devs = work.path().join(pool);
        unpack(&corpus().join(pool), &devs);
        let theirs = std::process::Command::new(&zdb)
            .arg("-e")
            .arg("-p")
            .arg(&devs)
            .arg("-d")
            .arg(pool)
            .output()
            .expect("run OpenZFS zdb");
        let theirs = String::from_utf8_lossy(&theirs.stdout).into_owned();
        assert!(theirs.contains("Dataset mos [META]"), "{pool}: {theirs}");
        import_readonly(&oz, &devs, pool);
        let ours = oz.run(&["zdb", "-d", pool]);
        oz.ok(&["zpool", "export", pool]);
        if !ours.success() || ours.stdout != theirs {
            wrong.push(format!(
                "{pool}:\n--- ozfs\n{}{}\n--- OpenZFS\n{theirs}",
                ours.stdout, ours.stderr
            ));
        }
        let _ = std::fs::remove_dir_all(&devs);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Ruin each of `pool`'s `ndisk` images in turn (everything between the
/// front and back labels overwritten with seeded noise) and check that
/// every file system still reads exactly.
fn ruin_each_disk_and_check(pool: &str, ndisk: u64, seed: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-ruin-");
    for disk in 0..ndisk {
        let ruin = move |devs: &Path| {
            let path = devs.join(format!("d{disk}.img"));
            let len = std::fs::metadata(&path).expect("image").len();
            let (start, end) = (4u64 << 20, len - (512 << 10));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open image");
            f.seek(SeekFrom::Start(start)).expect("seek");
            let mut x = seed ^ disk;
            let mut chunk = vec![0u8; 1 << 20];
            let mut at = start;
            while at < end {
                for b in chunk.chunks_exact_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b.copy_from_slice(&x.to_le_bytes());
                }
                let n = (end - at).min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n]).expect("write noise");
                at += n as u64;
            }
        };
        let failed = check_pool_damaged(&oz, work.path(), pool, &[], &ruin);
        assert!(
            failed.is_empty(),
            "{pool}: disk {disk} ruined, copies differ:\n{}",
            failed.join("\n")
        );
    }
}
