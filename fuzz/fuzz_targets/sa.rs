//! Fuzz the system-attribute decoders: SA registry/layout tables built from
//! arbitrary ZAP entries, and SA-format znode bonus buffers read through
//! them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::zap::ZapEntry;
use ozfs_format::znode::{SaTables, ZplAttrs};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let swap = data[0] & 1 != 0;
    let nreg = (data[1] % 16) as usize;
    let nlay = (data[2] % 8) as usize;
    let mut rest = &data[3..];
    let mut take = |n: usize| -> &[u8] {
        let n = n.min(rest.len());
        let (a, b) = rest.split_at(n);
        rest = b;
        a
    };
    let mut entry = |int_len: u8, count: usize| {
        let name = take(4).to_vec();
        let vals = take(8 * count)
            .chunks(8)
            .map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | b as u64))
            .collect();
        ZapEntry {
            name,
            int_len,
            value: vals,
            cd: 0,
        }
    };
    let registry: Vec<ZapEntry> = (0..nreg).map(|_| entry(8, 1)).collect();
    let layouts: Vec<ZapEntry> = (0..nlay).map(|i| entry(2, 1 + i % 6)).collect();
    if let Ok(t) = SaTables::from_zap_entries(&registry, &layouts) {
        let bonus = take(usize::MAX);
        let _ = ZplAttrs::from_sa(bonus, swap, &t);
    }
});
