//! Device removal on a pool OpenZFS 2.3.2 made (`c10-removal` of
//! ../shared/corpus/openzfs-2.3): its second vdev was removed, so blocks
//! written before the removal name an indirect vdev and are read through
//! the removal mapping. A scrub of the read-only pool reads every copy of
//! every block (ditto copies of metadata included, which the file
//! contents alone never reach) and must verify all of them, some through
//! the mapping.

use ozfs_dsl::scrub::{scrub, ScanMode};
use ozfs_dsl::DslPool;
use std::sync::atomic::{AtomicBool, Ordering};

mod corpus;
use corpus::open_pool;

#[test]
fn every_copy_on_a_removed_vdev_reads_through_the_mapping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = open_pool("c10-removal", &["d0.img", "d1.img"], dir.path());
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
