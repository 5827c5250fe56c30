//! Data and payload makers shared by the pre-compressed record tests.

#![allow(dead_code)]

use std::io::Write;

/// Compressible but not trivial: words from a small vocabulary.
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "lustre ", "object ", "record ", "stripe ", "server ", "client ", "zfs ", "block ",
    ];
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(words[(x % 8) as usize].as_bytes());
        if x.is_multiple_of(5) {
            v.extend_from_slice(format!("{} ", x % 10000).as_bytes());
        }
    }
    v.truncate(len);
    v
}

/// Incompressible bytes (xorshift).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The client's payload for algorithm `algo`: independent encoders for
/// lz4 (raw block), gzip (zlib stream) and zstd (frame) — not ozfs's;
/// ZFS's zle and lzjb formats from ozfs's codec (tested against golden
/// vectors of their own).
pub fn compress(algo: &str, d: &[u8]) -> Vec<u8> {
    match algo {
        "lz4" => lz4_flex::block::compress(d),
        "gzip" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(d).unwrap();
            e.finish().unwrap()
        }
        "zstd" => ruzstd::encoding::compress_to_vec(d, ruzstd::encoding::CompressionLevel::Fastest),
        "zle" => {
            let mut b = vec![0u8; d.len()];
            let n = ozfs_codec::compress::zle_compress(d, &mut b).unwrap();
            b.truncate(n);
            b
        }
        "lzjb" => {
            let mut b = vec![0u8; d.len()];
            let n = ozfs_codec::compress::lzjb_compress(d, &mut b).unwrap();
            b.truncate(n);
            b
        }
        a => panic!("{a}"),
    }
}
