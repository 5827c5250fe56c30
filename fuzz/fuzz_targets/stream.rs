//! Fuzz send-stream record decoding: any 312 bytes either decode (and then
//! re-encode to a record that decodes the same) or give an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::stream::{begin_byteswapped, Record, RECORD_SIZE};

fuzz_target!(|data: &[u8]| {
    let mut b = [0u8; RECORD_SIZE];
    let n = data.len().min(RECORD_SIZE);
    b[..n].copy_from_slice(&data[..n]);
    let _ = begin_byteswapped(&b);
    for swap in [false, true] {
        if let Ok((r, _payload)) = Record::parse(&b, swap) {
            if !swap {
                if let Ok((back, _)) = Record::parse(&r.encode(), false) {
                    assert_eq!(back, r);
                }
            }
        }
    }
});
