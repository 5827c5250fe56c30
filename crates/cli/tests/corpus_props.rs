//! `zpool get all` against OpenZFS's own answer: pools the real OpenZFS
//! 2.3.2 kernel module made (../shared/corpus/openzfs-2.3), each with the
//! `zpool get all` it printed (`props.txt`). Imported read-only by ozfs,
//! every pool must list the same properties in the same order — names as
//! OpenZFS spells them, every `feature@…` included — with the same values,
//! except those that change with time or with the import itself
//! (allocation, fragmentation, the per-import guid, `readonly` since ozfs
//! imports read-only here) and the dedup figures ozfs does not compute
//! yet (from the dedup table).

mod common;
use common::*;
use std::path::Path;

/// The pools compared: version 28 without features, a default 2.3 pool
/// (mirror, ashift 12, its features enabled and active as 2.3 makes
/// them), one with the newer checksums active, one with a removed device
/// (whose space is no longer the pool's) and cloned blocks, and a dRAID
/// pool (its size: metaslabs of whole stripes).
const POOLS: &[&str] = &[
    "c12-v28",
    "c2-mirror",
    "c6-checksums",
    "c10-removal",
    "c8-draid",
];

/// Properties whose values differ for reasons above.
const VARYING: &[&str] = &[
    "allocated",
    "free",
    "capacity",
    "fragmentation",
    "load_guid",
    "readonly",
    "dedupratio",
    "dedup_table_size",
];

/// OpenZFS's `zpool get all` rows (property, value) from `props.txt`.
fn theirs(dir: &Path, pool: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join("props.txt")).expect("props.txt");
    let head = format!("== zpool get all {pool}");
    text.lines()
        .skip_while(|l| *l != head)
        .skip(1)
        .take_while(|l| !l.starts_with("=="))
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn zpool_get_all_as_openzfs_prints_it() {
    let corpus = corpus_dir();
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-props-");
    for pool in POOLS {
        let src = corpus.join(pool);
        let devs = work.path().join(pool);
        unpack_corpus(&src, &devs);
        let want = theirs(&src, pool);
        assert!(want.len() > 70, "{pool}: props.txt rows: {want:?}");
        import_readonly(&oz, &devs, pool);
        let out = oz.ok(&["zpool", "get", "-H", "-o", "property,value", "all", pool]);
        oz.ok(&["zpool", "export", pool]);
        let got: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let names = |rows: &[(String, String)]| -> Vec<String> {
            rows.iter().map(|(k, _)| k.clone()).collect()
        };
        assert_eq!(
            names(&got),
            names(&want),
            "{pool}: property names and order"
        );
        for ((k, v), (_, w)) in got.iter().zip(&want) {
            if !VARYING.contains(&k.as_str()) {
                assert_eq!(v, w, "{pool}: {k}");
            }
        }
        let _ = std::fs::remove_dir_all(&devs);
    }
}

/// A size as `zfs get` prints it ("50.0M", "134M", "4.03M") in bytes.
fn human(s: &str) -> f64 {
    let (num, unit) = s.split_at(s.len() - 1);
    let k = match unit {
        "K" => 1u64 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return s.parse().unwrap_or_else(|_| panic!("size '{s}'")),
    };
    num.parse::<f64>().unwrap_or_else(|_| panic!("size '{s}'")) * k as f64
}

/// AVAIL of every pool's root file system as OpenZFS computes it
/// (`spa_get_slop_space`: 1/32 of the normal class, at least 128 MiB or
/// half of it; special and log vdevs outside the normal class; an expanded
/// RAID-Z deflated with its original width), within what `props.txt`'s
/// rounding and the last txg before export leave — the dedup pool's with
/// what dedup saves, from its tables' statistics. `zpool status` shows special and log vdevs under their class.
#[test]
fn available_space_as_openzfs_computes_it() {
    let corpus = corpus_dir();
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-avail-");
    let pools = corpus_pools("props.txt");
    assert!(pools.len() >= 13, "{pools:?}");
    let mut wrong = Vec::new();
    for pool in &pools {
        let src = corpus.join(pool);
        let devs = work.path().join(pool);
        unpack_corpus(&src, &devs);
        let props = std::fs::read_to_string(src.join("props.txt")).expect("props.txt");
        let want = props
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{pool}\tavailable\t")))
            .and_then(|r| r.split('\t').next())
            .map(human)
            .expect("available in props.txt");
        import_readonly(&oz, &devs, pool);
        let got: f64 = oz
            .ok(&["zfs", "get", "-Hp", "-o", "value", "available", pool])
            .trim()
            .parse()
            .expect("a number");
        if (got - want).abs() > want * 0.01 + 65536.0 {
            wrong.push(format!("{pool}: ozfs {got}, OpenZFS {want}"));
        }
        if pool == "c11-zvol-special" {
            let st = oz.ok(&["zpool", "status", pool]);
            let lines: Vec<&str> = st.lines().map(str::trim_end).collect();
            let at = |h: &str| lines.iter().position(|l| l.trim() == h);
            let (special, logs) = (at("special"), at("logs"));
            assert!(
                special.is_some_and(|s| lines[s + 1].trim_start().starts_with("mirror-1"))
                    && logs.is_some_and(|l| lines[l + 1].contains("l0.img"))
                    && special < logs,
                "{st}"
            );
        }
        oz.ok(&["zpool", "export", pool]);
        let _ = std::fs::remove_dir_all(&devs);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
