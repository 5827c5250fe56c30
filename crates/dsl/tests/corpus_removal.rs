//! Device removal on a pool OpenZFS 2.3.2 made (`c10-removal` of
//! ../shared/corpus/openzfs-2.3): its second vdev was removed, so blocks
//! written before the removal name an indirect vdev and are read through
//! the removal mapping. A scrub of the read-only pool reads every copy of
//! every block (ditto copies of metadata included, which the file
//! contents alone never reach) and must verify all of them, some through
//! the mapping.

use ozfs_dsl::scrub::{scrub, ScanMode};
use ozfs_dsl::DslPool;
use ozfs_spa::import::discover_paths;
use ozfs_spa::{Pool, PoolOptions};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn corpus() -> PathBuf {
    let c = std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/openzfs-2.3")
        });
    assert!(c.is_dir(), "{}: the OpenZFS corpus is missing", c.display());
    c
}

#[test]
fn every_copy_on_a_removed_vdev_reads_through_the_mapping() {
    let src = corpus().join("c10-removal");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut paths = Vec::new();
    for d in ["d0.img", "d1.img"] {
        let out = dir.path().join(d);
        let ok = Command::new("sh")
            .arg("-c")
            .arg(r#"gzip -dc "$1" | cp --sparse=always /dev/stdin "$2""#)
            .args([
                "sh",
                &format!("{}/{d}.gz", src.display()),
                &out.to_string_lossy(),
            ])
            .status()
            .expect("sh")
            .success();
        assert!(ok, "unpacking {d}");
        paths.push(out);
    }
    let found = discover_paths(&paths).into_iter().next().expect("the pool");
    let pool = Arc::new(
        Pool::open(
            found,
            &PoolOptions {
                readonly: true,
                max_txg: None,
            },
        )
        .expect("open read-only"),
    );
    assert_eq!(pool.indirect_vdevs().len(), 1, "one indirect vdev");
    let _dsl = DslPool::open(pool.clone()).expect("DSL");
    let state = pool.indirect.get().expect("mappings installed");
    let map = state.maps.get(&1).expect("vdev 1's mapping");
    // zdb: "indirect vdev id 1 has 5 segments".
    assert_eq!(map.entries().len(), 5);
    let stop = AtomicBool::new(false);
    let r = scrub(
        &pool,
        &pool.uberblock.rootbp,
        ScanMode::Scrub,
        0,
        false,
        &stop,
        &|_| {},
    )
    .expect("scrub");
    assert!(r.bad.is_empty(), "{:?}", r.bad);
    assert_eq!(r.progress.errors, 0);
    assert!(
        state.reads.load(Ordering::Relaxed) > 0,
        "no block was read through the mapping"
    );
}
