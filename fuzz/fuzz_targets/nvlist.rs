//! Fuzz the XDR nvlist decoder; anything that decodes must re-encode and decode to the same list.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::NvList;

fuzz_target!(|data: &[u8]| {
    if let Ok(nvl) = NvList::unpack(data) {
        let mut s = String::new();
        nvl.dump(4, &mut s);
        let packed = nvl.pack_xdr();
        let again = NvList::unpack(&packed).expect("re-encoded nvlist must decode");
        // NaN doubles compare unequal; compare the encodings instead.
        assert_eq!(again.pack_xdr(), packed);
    }
});
