//! Fuzz pre-compressed blocks as read from disk: any bytes either parse as
//! an external header whose payload lies inside the block, and then decode
//! into a 4 KiB record or fail with an error, or are refused; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::external::{ExtHeader, EXT_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = ExtHeader::parse(data) {
        let p = h.payload(data);
        assert_eq!(p.len(), h.csize as usize);
        assert!(EXT_HEADER_LEN + p.len() <= data.len());
        let mut out = vec![0u8; 4096];
        let _ = ozfs_codec::compress::external_decompress(h.tag, p, &mut out);
    }
});
