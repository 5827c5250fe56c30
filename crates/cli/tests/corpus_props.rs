//! `zpool get all` against OpenZFS's own answer: pools the real OpenZFS
//! 2.3.2 kernel module made (../shared/corpus/openzfs-2.3), each with the
//! `zpool get all` it printed (`props.txt`). Imported read-only by ozfs,
//! every pool must list the same properties in the same order — names as
//! OpenZFS spells them, every `feature@…` included — with the same values,
//! except those that change with time or with the import itself
//! (allocation, fragmentation, the per-import guid, `readonly` since ozfs
//! imports read-only here) and the dedup and block-cloning figures ozfs
//! does not compute yet (the dedup table, the block-reference table).

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
    // The block-cloning table is not read yet.
    "bcloneused",
    "bclonesaved",
    "bcloneratio",
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
    let work = tempfile::Builder::new()
        .prefix("ozfs-test-corpus-props-")
        .tempdir_in(ozfs_testkit::pool::test_tmp_root())
        .expect("temp dir");
    for pool in POOLS {
        let src = corpus.join(pool);
        let devs = work.path().join(pool);
        unpack_corpus(&src, &devs);
        let want = theirs(&src, pool);
        assert!(want.len() > 70, "{pool}: props.txt rows: {want:?}");
        oz.ok(&[
            "zpool",
            "import",
            "-o",
            "readonly=on",
            "-d",
            &devs.to_string_lossy(),
            pool,
        ]);
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
