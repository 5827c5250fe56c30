//! Fuzz the objset header and the DSL bonus decoders (`objset_phys_t`,
//! `dsl_dir_phys_t`, `dsl_dataset_phys_t`): a decoded value re-encodes to
//! one that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::dsl::{DslDatasetPhys, DslDirPhys};
use ozfs_format::objset::ObjsetPhys;

fuzz_target!(|data: &[u8]| {
    let swap = data.first().is_some_and(|b| b & 1 != 0);
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(os) = ObjsetPhys::parse(body, swap) {
        let enc = os.encode(body.len().clamp(1024, 4096));
        let _ = ObjsetPhys::parse(&enc, false);
    }
    if let Ok(d) = DslDirPhys::parse(body, swap) {
        let back = DslDirPhys::parse(&d.encode(), false).expect("encoded dsl_dir must decode");
        assert_eq!(back, d);
    }
    if let Ok(d) = DslDatasetPhys::parse(body, swap) {
        let back =
            DslDatasetPhys::parse(&d.encode(), false).expect("encoded dsl_dataset must decode");
        assert_eq!(back, d);
    }
});
