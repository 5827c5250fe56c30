//! Fuzz the space-map decoders (entries in both word formats, the header
//! bonus) and their replay into a range set: hostile maps must error, not
//! panic or loop.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_spa::spacemap::{decode, replay, SpaceMapHeader};

fuzz_target!(|data: &[u8]| {
    let swap = data.first().is_some_and(|b| b & 1 != 0);
    let shift = data.get(1).map_or(9, |b| (b % 24) as u32);
    let body = data.get(2..).unwrap_or(&[]);
    if let Ok(entries) = decode(body, swap, shift) {
        let _ = replay(&entries);
    }
    let _ = SpaceMapHeader::parse(body, swap);
});
