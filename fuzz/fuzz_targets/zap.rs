//! Fuzz ZAP decoding: the input is split into equal blocks (size chosen by the first byte),
//! block 0 is the header/microzap, the rest are served through the read callback.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_format::{zap, Error};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let swap = sel & 0x80 != 0;
    // 512 B .. 16 K blocks.
    let bsize = 512usize << (sel & 0x7).min(5);
    if rest.len() < bsize {
        return;
    }
    let blocks: Vec<&[u8]> = rest.chunks_exact(bsize).collect();
    let block0 = blocks[0];
    let mut reads = 0u32;
    let mut read = |n: u64| -> Result<Vec<u8>, Error> {
        reads += 1;
        blocks
            .get(n as usize)
            .map(|b| b.to_vec())
            .ok_or_else(|| Error::NotFound(format!("block {n}")))
    };
    if let Ok(entries) = zap::list(block0, swap, &mut read) {
        for e in entries.iter().take(8) {
            let _ = zap::lookup(block0, swap, &e.name, &mut read);
        }
    }
    let _ = zap::lookup(block0, swap, b"ROOT", &mut read);
    let _ = zap::parse_header(block0, swap);
});
