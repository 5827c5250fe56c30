//! Fuzz every decompressor ZFS blocks can name (lzjb, gzip, zle, lz4, zstd)
//! and the clients' pre-compressed payload decoders: each fills exactly its
//! destination or fails, never panics, never writes outside it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ozfs_codec::compress::{decompress, external_decompress};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let kind = data[0];
    let dlen = (u16::from_le_bytes([data[1], data[2]]) as usize) % (64 << 10);
    let src = &data[3..];
    let mut buf = vec![0xA5u8; dlen + 32];
    let _ = decompress(kind, src, &mut buf[16..16 + dlen]);
    assert!(buf[..16].iter().all(|&b| b == 0xA5));
    assert!(buf[16 + dlen..].iter().all(|&b| b == 0xA5));
    let mut buf = vec![0x5Au8; dlen + 32];
    let _ = external_decompress(kind, src, &mut buf[16..16 + dlen]);
    assert!(buf[..16].iter().all(|&b| b == 0x5A));
    assert!(buf[16 + dlen..].iter().all(|&b| b == 0x5A));
});
