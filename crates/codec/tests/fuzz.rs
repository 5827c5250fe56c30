//! Fuzz-style robustness: garbage and mutated streams into every decompressor must
//! return (Ok or Err), never panic, and never touch bytes outside `dst`.
mod common;

use common::{corpus, Rng};
use ozfs_codec::compress::{compress, decompress};

const KINDS: [u8; 8] = [2, 3, 5, 9, 13, 14, 15, 16];

/// Run one decompression with guard bytes around `dst` to catch out-of-bounds writes.
fn run(kind: u8, src: &[u8], dlen: usize) {
    let mut buf = vec![0xC3u8; dlen + 32];
    let _ = decompress(kind, src, &mut buf[16..16 + dlen]);
    assert!(buf[..16].iter().all(|&b| b == 0xC3));
    assert!(buf[16 + dlen..].iter().all(|&b| b == 0xC3));
}

#[test]
fn garbage_never_panics() {
    let mut r = Rng::new(0xF00D);
    for i in 0..4000 {
        let slen = r.below(if i % 10 == 0 { 8192 } else { 300 });
        let mut src = r.bytes(slen);
        let dlen = r.below(if i % 10 == 0 { 16384 } else { 600 });
        for kind in 0..=20u8 {
            run(kind, &src, dlen);
        }
        // Plausible headers let the payload reach the inner decoders.
        if slen >= 8 {
            let l = (slen - 8) as u32;
            src[..4].copy_from_slice(&l.to_be_bytes());
            run(15, &src, dlen);
            run(16, &src, dlen);
            src[..4].copy_from_slice(&(l + 4).to_be_bytes());
            run(15, &src, dlen);
        }
        if slen >= 2 {
            src[0] = 0x78;
            src[1] = 0x9c;
            run(6, &src, dlen);
        }
    }
}

#[test]
fn mutated_streams_never_panic() {
    let mut r = Rng::new(0xBEEF);
    let data = corpus(4096, 3);
    for (_, d) in &data {
        for &kind in &KINDS[1..7] {
            let mut c = vec![0u8; 8192];
            let Some(n) = compress(kind, d, &mut c).unwrap() else {
                continue;
            };
            c.truncate(n);
            for _ in 0..150 {
                let mut m = c.clone();
                match r.below(4) {
                    0 => {
                        let i = r.below(m.len());
                        m[i] ^= 1 << r.below(8);
                    }
                    1 => {
                        let keep = r.below(m.len());
                        m.truncate(keep);
                    }
                    2 => {
                        for _ in 0..1 + r.below(8) {
                            let i = r.below(m.len());
                            m[i] = r.next() as u8;
                        }
                    }
                    _ => {
                        let i = r.below(m.len());
                        let nb = r.below(20);
                        let extra = r.bytes(nb);
                        m.splice(i..i, extra);
                    }
                }
                let dlen = if r.below(3) == 0 {
                    r.below(8192)
                } else {
                    d.len()
                };
                run(kind, &m, dlen);
            }
        }
    }
}

#[test]
fn mutated_zstd_never_panics() {
    // Minimal valid magicless frame: raw block of 5 bytes "hello".
    // Frame header descriptor 0x20 (single segment, 1-byte content size), FCS = 5;
    // block header: last=1, type=raw(0), size=5 -> (5 << 3) | 1 = 0x29 0x00 0x00.
    let frame = [0x20u8, 0x05, 0x29, 0x00, 0x00, b'h', b'e', b'l', b'l', b'o'];
    let mut blk = Vec::new();
    blk.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    blk.extend_from_slice(&((3u32 << 24) | 10504).to_be_bytes());
    blk.extend_from_slice(&frame);
    let mut out = [0u8; 5];
    decompress(16, &blk, &mut out).unwrap();
    assert_eq!(&out, b"hello");
    let mut r = Rng::new(0x25);
    for _ in 0..3000 {
        let mut m = blk.clone();
        for _ in 0..1 + r.below(4) {
            let i = 8 + r.below(m.len() - 8);
            m[i] = r.next() as u8;
        }
        let nb = r.below(64);
        let extra = r.bytes(nb);
        m.extend_from_slice(&extra);
        if r.below(2) == 0 {
            let l = (m.len() - 8) as u32;
            m[..4].copy_from_slice(&l.to_be_bytes());
        }
        run(16, &m, r.below(300));
    }
}
