//! (d) Directories growing from micro to fat ZAP and shrinking again.
//!
//! With `OZFS_ZAP_MICRO_MAX_SIZE=4096` a micro ZAP holds at most 63
//! entries: files are copied into one directory in batches (several
//! `ozfs cp` runs, the batch sizes straddling 62/63/64 entries) up to 3,000
//! entries, checking after each batch that the copy-out has exactly the
//! expected entries; then they are removed in batches (`ozfs rm`, one
//! entry per run) down to 0 with the same check, and a few are added back.
//! On the way down the fat ZAP becomes a micro ZAP again once its entries
//! need at most half of the limit (31 here): OpenZFS's zdb says which form
//! the directory has at each step (OpenZFS itself never converts back).
//! A second directory gets 2,040 entries (a micro ZAP just below the default
//! 128 KiB limit of 2,047) and then 60 more with the default tunable.
//! After export: zdb -bcc clean; zfs-fuse imports and lists both
//! directories identically.

mod common;
mod wcommon;
use std::fs;
use std::path::Path;
use std::time::Instant;
use wcommon::*;

/// Name of entry `i`: varying lengths (all under the 50 bytes a micro ZAP
/// entry allows).
fn entry_name(i: usize) -> String {
    format!("e{i:05}_{}", "x".repeat((i * 7) % 40))
}

/// Creates `<stage>/<dir>` holding entries `range` (every 10th with some
/// data, every 50th a sub-directory), settles times, returns the manifest
/// of the stage dir (paths relative to it, "." excluded).
fn stage_batch(stage: &Path, dir: &str, range: std::ops::Range<usize>, seed: u64) -> Manifest {
    let d = stage.join(dir);
    fs::create_dir_all(&d).unwrap();
    for i in range {
        let p = d.join(entry_name(i));
        if i % 50 == 49 {
            fs::create_dir(&p).unwrap();
        } else if i % 10 == 0 {
            populate::write_random(&p, (i % 3000) as u64 + 1, seed + i as u64).unwrap();
        } else {
            fs::File::create(&p).unwrap();
        }
    }
    settle_times(&d).unwrap();
    let mut m = Manifest::scan(&d).unwrap();
    m.entries.remove(Path::new("."));
    m
}

/// Copy-out of `src` (a directory) must hold exactly the entries of
/// `model` (the directory's own metadata is not compared: the merges
/// change it).
fn check_dir(oz: &Ozfs, pool: &TestPool, src: &str, model: &Manifest, context: &str) {
    let mut got = oz_copyout(oz, pool, src, "zapcheck", false);
    got.entries.remove(Path::new("."));
    model.assert_same(&got, context);
}

/// The form of directory `name` (an entry of the root) of dataset `ds`
/// as OpenZFS's zdb reports it: "micro" or "fat" (None without the oracle,
/// outside CI).
fn zap_form(pool: &TestPool, ds: &str, name: &str) -> Option<&'static str> {
    let zdb = oracle_zdb()?;
    let out = std::process::Command::new(zdb)
        .arg("-e")
        .arg("-p")
        .arg(pool.dev_dir())
        .arg("-dddd")
        .arg(ds)
        .output()
        .expect("run OpenZFS zdb -dddd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "zdb -dddd {ds}:\n{text}");
    // The root directory's entry names the object ("big = 4 (type: ...").
    let entry = format!("\t\t{name} = ");
    let obj: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&entry))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("zdb -dddd {ds}: no entry {name}:\n{text}"));
    let mut lines = text.lines().skip_while(|l| {
        l.split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            != Some(obj)
            || !l.ends_with("ZFS directory")
    });
    assert!(lines.next().is_some(), "zdb -dddd {ds}: no object {obj}");
    for l in lines {
        if l.contains("microzap:") {
            return Some("micro");
        }
        if l.contains("Fat ZAP stats") {
            return Some("fat");
        }
        if l.trim_start().starts_with("Object ") {
            break;
        }
    }
    panic!("zdb -dddd {ds}: no ZAP summary for object {obj}:\n{text}");
}

#[test]
fn write_zap_micro_fat_micro() {
    let tag = "zap";
    let t0 = Instant::now();
    let mut pool = new_devs("ozwzap", Layout::Stripe, 1, 128);
    let oz = ozfs().with_env("OZFS_ZAP_MICRO_MAX_SIZE", "4096");
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    oz_create_ds(&oz, &pool, "ds", &[]);
    let ds = pool.ds("ds");
    let local = local_dir(tag);

    // Grow: 1, 11, 62, 63, 64, 100, 400, 1000, 2000, 3000 entries.
    let mut model = Manifest::default();
    let mut n = 0usize;
    for (k, to) in [1usize, 11, 62, 63, 64, 100, 400, 1000, 2000, 3000]
        .into_iter()
        .enumerate()
    {
        // The staged dir is named like the target: cp merges it into the
        // existing directory (like cp -r into an existing dir).
        let stage = local.path().join(format!("b{k}"));
        let m = stage_batch(&stage, "big", n..to, 400);
        model.entries.extend(m.entries);
        oz_cp_in(&oz, &stage.join("big"), &format!("{ds}:/"));
        check_dir(
            &oz,
            &pool,
            &format!("{ds}:/big"),
            &model,
            &format!("after growing to {to} entries"),
        );
        n = to;
    }
    phase(&format!("{tag}: grown to 3000 (micro -> fat ZAP)"), t0);

    // Shrink: remove entries (one rm each) in batches, checking each time.
    let t1 = Instant::now();
    let mut names: Vec<usize> = (0..3000).collect();
    // Interleave removals across hash buckets: every 7th first, then the rest.
    names.sort_by_key(|i| (i % 7 != 0, *i));
    let mut left = 3000usize;
    for to in [2999usize, 2900, 2000, 1000, 100, 64, 63, 32, 31, 1, 0] {
        while left > to {
            let i = names[3000 - left];
            let rel = entry_name(i);
            oz_rm(&oz, &format!("{ds}:/big/{rel}"), i % 50 == 49);
            model.entries.remove(Path::new(&rel));
            left -= 1;
        }
        check_dir(
            &oz,
            &pool,
            &format!("{ds}:/big"),
            &model,
            &format!("after shrinking to {to} entries"),
        );
        if matches!(to, 1000 | 32 | 31 | 0) {
            let want = if to <= 31 { "micro" } else { "fat" };
            if let Some(form) = zap_form(&pool, &ds, "big") {
                assert_eq!(form, want, "ZAP form of /big at {to} entries");
            }
        }
    }
    assert!(model.is_empty());
    // And grow a little again (in the now empty fat ZAP).
    let stage = local.path().join("again");
    let m = stage_batch(&stage, "big", 5000..5100, 500);
    model.entries.extend(m.entries);
    oz_cp_in(&oz, &stage.join("big"), &format!("{ds}:/"));
    check_dir(&oz, &pool, &format!("{ds}:/big"), &model, "re-grown to 100");
    // And shrunk to 20 once more: zfs-fuse gets a micro ZAP that was fat.
    for i in 5020..5100 {
        let rel = entry_name(i);
        oz_rm(&oz, &format!("{ds}:/big/{rel}"), i % 50 == 49);
        model.entries.remove(Path::new(&rel));
    }
    check_dir(&oz, &pool, &format!("{ds}:/big"), &model, "shrunk to 20");
    if let Some(form) = zap_form(&pool, &ds, "big") {
        assert_eq!(form, "micro", "ZAP form of /big shrunk to 20 entries");
    }
    phase(
        &format!("{tag}: shrunk to 0, re-grown to 100, shrunk to 20"),
        t1,
    );

    // Default tunable: 2,040 entries (micro), then 2,100 (fat).
    let t2 = Instant::now();
    let oz_default = Ozfs::new(env!("CARGO_BIN_EXE_ozfs"));
    oz_export(&oz, pool.name());
    oz_import_rw(&oz_default, &pool.dev_dir(), pool.name());
    let mut model2 = Manifest::default();
    let stage = local.path().join("d1");
    model2
        .entries
        .extend(stage_batch(&stage, "dir2100", 0..2040, 600).entries);
    oz_cp_in(&oz_default, &stage.join("dir2100"), &format!("{ds}:/"));
    check_dir(
        &oz_default,
        &pool,
        &format!("{ds}:/dir2100"),
        &model2,
        "2040 entries, default tunable",
    );
    let stage = local.path().join("d2");
    model2
        .entries
        .extend(stage_batch(&stage, "dir2100", 2040..2100, 600).entries);
    oz_cp_in(&oz_default, &stage.join("dir2100"), &format!("{ds}:/"));
    check_dir(
        &oz_default,
        &pool,
        &format!("{ds}:/dir2100"),
        &model2,
        "2100 entries, default tunable",
    );
    oz_export(&oz_default, pool.name());
    phase(&format!("{tag}: 2100 entries"), t2);

    // zfs-fuse.
    let t3 = Instant::now();
    assert_zdb_clean(&pool, &pool.dev_dir(), tag);
    pool.import()
        .unwrap_or_else(|e| panic!("zfs-fuse cannot import: {e}"));
    for (dir, m) in [("big", &model), ("dir2100", &model2)] {
        let root = pool.root("ds").join(dir);
        let mut got = scan_zf(&root, false);
        got.entries.remove(Path::new("."));
        m.assert_same(&got, &format!("zfs-fuse view of {dir}"));
        let listed = fs::read_dir(&root).unwrap().count();
        let want = m
            .entries
            .keys()
            .filter(|k| k.components().count() == 1)
            .count();
        assert_eq!(listed, want, "zfs-fuse readdir count of {dir}");
    }
    // zfs-fuse can keep changing the directories ozfs wrote.
    let big = pool.root("ds").join("big");
    fs::write(big.join("zfs_fuse_added"), b"x").unwrap();
    fs::remove_file(big.join(entry_name(5000))).unwrap();
    pool.export().unwrap();
    assert_zdb_clean(&pool, &pool.dev_dir(), "after zfs-fuse changes");
    phase(&format!("{tag}: zfs-fuse checks"), t3);
}

/// `OZFS_ZAP_MICRO_MAX_SIZE=1 MiB` on a pool with `large_microzap`: a
/// directory of 3,000 entries stays a micro ZAP (a 192 KiB block), the
/// dataset lists the feature (and `large_blocks`), and OpenZFS finds the
/// pool clean and the directory micro. On a version-23 pool the same
/// tunable stops at 128 KiB (2,047 entries): the directory goes fat.
#[test]
fn large_micro_zaps_where_the_pool_allows_them() {
    let tag = "largemzap";
    let Some(zdb) = oracle_zdb() else { return };
    let local = local_dir(tag);
    let stage = local.path().join("s");
    let model = stage_batch(&stage, "big", 0..3000, 700);
    for (version, want) in [(None, "micro"), (Some("version=23"), "fat")] {
        let pool = new_devs("ozlmz", Layout::Stripe, 1, 256);
        let oz = ozfs().with_env("OZFS_ZAP_MICRO_MAX_SIZE", "1048576");
        let opts: Vec<&str> = match version {
            Some(v) => vec!["-o", v],
            None => vec!["-o", "feature@large_microzap=enabled"],
        };
        oz_create(&oz, &pool, None, &opts);
        oz_create_ds(&oz, &pool, "ds", &[]);
        let ds = pool.ds("ds");
        oz_cp_in(&oz, &stage.join("big"), &format!("{ds}:/"));
        check_dir(&oz, &pool, &format!("{ds}:/big"), &model, "3000 entries");
        let feat = zpool_get(&oz, "feature@large_microzap", pool.name());
        oz_export(&oz, pool.name());
        assert_eq!(zap_form(&pool, &ds, "big"), Some(want), "{version:?}");
        match version {
            None => {
                assert_eq!(feat, "active", "feature@large_microzap");
                openzfs_verdict(&zdb, &pool.dev_dir(), pool.name());
            }
            Some(_) => assert_zdb_clean(&pool, &pool.dev_dir(), tag),
        }
    }
}
