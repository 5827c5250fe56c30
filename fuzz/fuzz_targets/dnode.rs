//! Fuzz dnode decoding (and re-encoding) plus the legacy znode bonus decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::dnode::DnodePhys;
use ozfs_format::znode::ZplAttrs;

fuzz_target!(|data: &[u8]| {
    let swap = data.first().is_some_and(|b| b & 1 != 0);
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(d) = DnodePhys::parse(body, swap) {
        let enc = d.encode();
        let back = DnodePhys::parse(&enc, false).expect("encoded dnode must decode");
        assert_eq!(back, d);
        let _ = ZplAttrs::from_znode(&d.bonus, swap);
    }
    let _ = ZplAttrs::from_znode(body, swap);
});
