//! (b) Reading every kind of content and dataset property zfs-fuse writes:
//! compression off/lzjb/gzip-1/gzip-9/zle, copies=2, dedup (sha256),
//! checksum variants, recordsize 512/4K/128K, nested datasets, a 20,000
//! entry directory (fat ZAP) and a >200 MiB file (three block levels).
//! Several snapshots with deletes, rewrites, renames, truncations between
//! them; every snapshot and the live state are copied out and compared.

mod common;
use common::*;
use std::time::Instant;

/// One dataset to create: relative name, properties, content, snapshots.
type DatasetCase<'a> = (&'a str, &'a [(&'a str, &'a str)], Profile, u32);

/// One pool (2-way stripe of sparse files), one dataset per property set.
fn content_case(tag: &str, dev_mib: u64, datasets: &[DatasetCase]) {
    let t0 = Instant::now();
    let mut pool = TestPool::create_with(&PoolSpec {
        prefix: format!("ozt{tag}"),
        ..PoolSpec::new(Layout::Stripe, 2, dev_mib * MIB)
    })
    .unwrap();
    pool.set("", "atime", "off").unwrap();
    let mut expected = Vec::new();
    for (rel, props, profile, nsnaps) in datasets {
        let t = Instant::now();
        expected.extend(dataset_history(&pool, rel, props, profile, *nsnaps));
        phase(&format!("{tag}: dataset {rel}"), t);
    }
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse setup"), t0);
    if setup_only() {
        return;
    }

    let t1 = Instant::now();
    let oz = ozfs();
    assert_listed(&oz, &pool.dev_dir(), pool.name(), "ONLINE");
    import_and_check_names(&oz, &pool, &expected);
    verify_copyouts(&oz, &pool, &expected, tag);
    phase(&format!("{tag}: ozfs checks"), t1);
}

#[test]
fn read_content_compression() {
    let p = |s| Profile::moderate(s);
    content_case(
        "comp",
        768,
        &[
            ("c_off", &[("compression", "off")], p(21), 3),
            ("c_lzjb", &[("compression", "lzjb")], p(22), 3),
            ("c_gzip1", &[("compression", "gzip-1")], p(23), 3),
            ("c_gzip9", &[("compression", "gzip-9")], p(24), 3),
            ("c_zle", &[("compression", "zle")], p(25), 3),
        ],
    );
}

#[test]
fn read_content_copies_dedup_checksums() {
    let p = |s| Profile::moderate(s);
    content_case(
        "redund",
        768,
        &[
            ("copies2", &[("copies", "2")], p(31), 3),
            (
                "dedup",
                &[("dedup", "on"), ("checksum", "sha256")],
                p(32),
                3,
            ),
            (
                "ck_fletcher2",
                &[("checksum", "fletcher2")],
                Profile::small(33),
                2,
            ),
            (
                "ck_sha256",
                &[("checksum", "sha256"), ("compression", "lzjb")],
                Profile::small(34),
                2,
            ),
            ("nest", &[], Profile::small(35), 1),
            (
                "nest/inner",
                &[("compression", "gzip")],
                Profile::small(36),
                2,
            ),
            ("nest/inner/deeper", &[], Profile::small(37), 1),
        ],
    );
}

#[test]
fn read_content_recordsize() {
    let p = |s| Profile::moderate(s);
    content_case(
        "recsz",
        768,
        &[
            ("rs512", &[("recordsize", "512")], p(41), 3),
            ("rs4k", &[("recordsize", "4K")], p(42), 3),
            ("rs128k", &[("recordsize", "128K")], p(43), 3),
        ],
    );
}

#[test]
fn read_content_fat_zap() {
    content_case(
        "fatzap",
        512,
        &[(
            "fatzap",
            &[],
            Profile {
                dirs: true,
                dir20k: true,
                ..Profile::none(51)
            },
            2,
        )],
    );
}

#[test]
fn read_content_big_file() {
    content_case(
        "big",
        512,
        &[(
            "big",
            &[],
            Profile {
                big: true,
                sizes: true,
                ..Profile::none(61)
            },
            2,
        )],
    );
}
