//! Fuzz the intent-log decoders: log-block verification (`zilog2` and the
//! old `zilog` layout, either byte order) and record parsing. A parsed
//! record re-encodes to bytes that parse to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_codec::checksum::compute;
use ozfs_format::types::cksum;
use ozfs_format::zil::{encode_record, parse_records, verify_log_block, ZilHeader};
use ozfs_format::BlkPtr;

fuzz_target!(|data: &[u8]| {
    let swap = data.first().is_some_and(|b| b & 1 != 0);
    let v2 = data.first().is_some_and(|b| b & 2 == 0);
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(recs) = parse_records(body, swap) {
        for r in recs {
            let back = parse_records(&encode_record(&r), false).expect("encoded record must parse");
            assert_eq!(back.len(), 1);
            assert_eq!(back[0].record, r.record);
        }
    }
    if let Ok(h) = ZilHeader::decode(body, swap) {
        assert_eq!(ZilHeader::decode(&h.encode(), false).expect("192 bytes"), h);
    }
    // The block's own BP: any verifier the input's last 32 bytes give.
    let mut bp = BlkPtr::default();
    let kind = if v2 { cksum::ZILOG2 } else { cksum::ZILOG };
    bp.words[6] = BlkPtr::make_prop(4096, 4096, 2, kind, 9, 0, false, true);
    for (i, c) in body.rchunks_exact(8).take(4).enumerate() {
        bp.words[12 + i] = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
    }
    let f = |k: u8, b: &[u8]| compute(k, b, false).map(|c| c.0).unwrap_or_default();
    if let Ok(lb) = verify_log_block(body, &bp, &f) {
        let _ = lb.parse();
    }
});
