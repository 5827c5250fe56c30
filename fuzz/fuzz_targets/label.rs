//! Fuzz the label decoders: uberblock slots, the embedded-checksum trailer
//! and the label's nvlist region, as `Pool::open` meets them on a device.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::label::{parse_eck, with_verifier, Uberblock};
use ozfs_format::NvList;

fuzz_target!(|data: &[u8]| {
    if let Ok(ub) = Uberblock::parse(data) {
        // A decoded uberblock re-encodes to one that decodes the same.
        let enc = ub.encode(1024);
        let back = Uberblock::parse(&enc).expect("encoded uberblock must decode");
        assert_eq!(back.txg, ub.txg);
        assert_eq!(back.rootbp, ub.rootbp);
        let _ = back.mmp_seq();
    }
    if let Ok(eck) = parse_eck(data) {
        let v = with_verifier(data, [1, 2, 3, 4], eck.byteswapped);
        assert_eq!(v.len(), data.len());
    }
    if let Ok(nv) = NvList::unpack(data) {
        let mut s = String::new();
        nv.dump(0, &mut s);
        let _ = nv.get_nvlist("vdev_tree").map(|t| t.get_nvlist_array("children"));
    }
});
