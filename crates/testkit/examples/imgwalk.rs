//! Lists the blocks of a pool image as `ozfs_testkit::mutate::Image` sees them;
//! with a block number, dumps that block's first bytes.
fn main() {
    let p = std::env::args().nth(1).expect("usage: imgwalk DEV [BLOCK]");
    let img = ozfs_testkit::mutate::Image::open(std::path::Path::new(&p)).expect("open");
    if let Some(i) = std::env::args().nth(2) {
        let d = img.read(i.parse().expect("block")).expect("read");
        println!(
            "{}",
            d.iter()
                .take(64)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        println!("{}", img.blocks()[0].bp.to_zdb_string());
        return;
    }
    for (i, b) in img.blocks().iter().enumerate() {
        println!(
            "{i:4} {:?} os={} obj={} L{} blk={} type={} otype={} lsize={} psize={} comp={} parent={:?}",
            b.kind, b.objset, b.object, b.level, b.blkid, b.dmu_type, b.object_type,
            b.bp.lsize(), b.bp.psize(), b.bp.compression(), b.parent
        );
    }
}
