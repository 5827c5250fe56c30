//! Fuzz block-pointer decoding, validation and the zdb renderers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::BlkPtr;

fuzz_target!(|data: &[u8]| {
    let swap = data.first().is_some_and(|b| b & 1 != 0);
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(bp) = BlkPtr::from_bytes(body, swap) {
        let _ = bp.validate("fuzz");
        let _ = bp.to_zdb_string();
        let _ = bp.to_zdb_compact(true);
        let _ = bp.embedded_payload();
        let _ = (bp.lsize(), bp.psize(), bp.ndvas(), bp.dvas());
        let back = BlkPtr::from_bytes(&bp.to_bytes(), false).expect("128 bytes");
        assert_eq!(back, bp);
    }
});
