//! Compression: hand-built streams with known output, round trips, error handling.
mod common;

use common::{corpus, Rng};
use ozfs_codec::compress::{
    self, compress, decompress, lzjb_compress, lzjb_decompress, zle_compress, zle_decompress,
};

fn lzjb(src: &[u8], n: usize) -> ozfs_codec::Result<Vec<u8>> {
    let mut out = vec![0xAAu8; n];
    lzjb_decompress(src, &mut out).map(|_| out)
}
fn zle(src: &[u8], n: usize) -> ozfs_codec::Result<Vec<u8>> {
    let mut out = vec![0xAAu8; n];
    zle_decompress(src, &mut out).map(|_| out)
}

#[test]
fn lzjb_literal_runs() {
    let s = [
        0x00, b'A', b'B', b'C', b'D', b'E', b'F', b'G', b'H', 0x00, b'I', b'J',
    ];
    assert_eq!(lzjb(&s, 10).unwrap(), b"ABCDEFGHIJ");
    // Decoding stops when the output is full; trailing bytes/padding are ignored.
    assert_eq!(lzjb(&s, 3).unwrap(), b"ABC");
    let mut padded = s.to_vec();
    padded.extend_from_slice(&[0; 100]);
    assert_eq!(lzjb(&padded, 10).unwrap(), b"ABCDEFGHIJ");
    assert_eq!(lzjb(&[], 0).unwrap(), b"");
}

#[test]
fn lzjb_overlapping_backref() {
    // 'a' 'b' then copy 6 bytes from distance 2: b0 = (6-3)<<2, b1 = 2.
    let s = [0b100, b'a', b'b', 0x0C, 0x02];
    assert_eq!(lzjb(&s, 8).unwrap(), b"abababab");
    // A match running past the end of the output is clamped.
    assert_eq!(lzjb(&s, 5).unwrap(), b"ababa");
    // Distance 1, maximum length 66.
    let s = [0b10, b'x', 0xFC, 0x01];
    assert_eq!(lzjb(&s, 67).unwrap(), vec![b'x'; 67]);
    // Continue after a match with literals in the same group.
    let s = [0b010, b'q', 0x00, 0x01, b'r'];
    assert_eq!(lzjb(&s, 5).unwrap(), b"qqqqr");
}

#[test]
fn lzjb_long_distance_uses_high_bits() {
    // 300 literals, then a 4-byte match at distance 300 = 0x12C: b0 = (4-3)<<2 | 1, b1 = 0x2C.
    let lits: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut s = Vec::new();
    for chunk in lits.chunks(8) {
        // 300 = 37*8 + 4: the last group holds 4 literals, then the match as its 5th item.
        s.push(if chunk.len() == 4 { 0b1_0000 } else { 0 });
        s.extend_from_slice(chunk);
    }
    s.extend_from_slice(&[0x05, 0x2C]);
    let out = lzjb(&s, 304).unwrap();
    assert_eq!(&out[..300], &lits[..]);
    assert_eq!(&out[300..], &lits[..4]);
}

#[test]
fn lzjb_malformed() {
    // Back-reference before the start of output.
    assert!(lzjb(&[0b1, 0x00, 0x01], 4).is_err());
    assert!(lzjb(&[0b10, b'a', 0x00, 0x02], 4).is_err());
    // Distance zero.
    assert!(lzjb(&[0b10, b'a', 0x00, 0x00], 4).is_err());
    // Source ends early (literal, map byte, half a reference).
    assert!(lzjb(&[0x00, b'a'], 2).is_err());
    assert!(lzjb(&[0x00, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h'], 9).is_err());
    assert!(lzjb(&[0b10, b'a', 0x00], 4).is_err());
    assert!(lzjb(&[], 1).is_err());
}

#[test]
fn lzjb_compress_golden() {
    // 200 zeros: literal, then three distance-1/66 matches... exactly as OpenZFS emits:
    // s=0 literal (empty table slot gives offset 0), s=1 match d=1 len 66,
    // s=67 and s=133 match d=66 len 66 (table holds the previous position), last byte literal.
    let src = [0u8; 200];
    let mut dst = [0u8; 64];
    let n = lzjb_compress(&src, &mut dst).unwrap();
    assert_eq!(
        &dst[..n],
        &[0x0E, 0x00, 0xFC, 0x01, 0xFC, 0x42, 0xFC, 0x42, 0x00]
    );
    assert_eq!(lzjb(&dst[..n], 200).unwrap(), src);
    // Inputs of at most 66 bytes are all literals.
    let src: Vec<u8> = (0..10u8).collect();
    let mut dst = [0u8; 64];
    let n = lzjb_compress(&src, &mut dst).unwrap();
    assert_eq!(&dst[..n], &[0, 0, 1, 2, 3, 4, 5, 6, 7, 0, 8, 9]);
    // Too small an output buffer: give up.
    assert_eq!(lzjb_compress(&[0u8; 200], &mut [0u8; 17]), None);
}

#[test]
fn zle_hand_streams() {
    let s = [0x02, b'a', b'b', b'c', 0x41, 0x00, b'z'];
    assert_eq!(zle(&s, 6).unwrap(), b"abc\0\0z");
    assert_eq!(zle(&[0xFF], 192).unwrap(), vec![0u8; 192]);
    assert_eq!(zle(&[0x40], 1).unwrap(), vec![0u8; 1]);
    let mut lit = vec![63u8];
    lit.extend(1..=64u8);
    assert_eq!(zle(&lit, 64).unwrap(), (1..=64u8).collect::<Vec<_>>());
    // Trailing padding after the output is full is ignored.
    assert_eq!(zle(&[0x00, 7, 0, 0, 0], 1).unwrap(), [7]);
    // Errors: literal past end of source, run past end of output, source too short.
    assert!(zle(&[0x03, 1, 2], 4).is_err());
    assert!(zle(&[0x03, 1, 2, 3, 4], 3).is_err());
    assert!(zle(&[0x45], 5).is_err());
    assert!(zle(&[0x41], 3).is_err());
    assert!(zle(&[], 1).is_err());
}

#[test]
fn zle_compress_golden() {
    let src = b"ab\0\0\0c";
    let mut dst = [0u8; 128];
    let n = zle_compress(src, &mut dst).unwrap();
    assert_eq!(&dst[..n], &[1, b'a', b'b', 66, 0, b'c']);
    // Single zeros stay inside literal runs; zero runs cap at 192.
    let mut src = vec![5u8, 0, 6];
    src.extend(vec![0u8; 200]);
    let n = zle_compress(&src, &mut dst).unwrap();
    assert_eq!(&dst[..n], &[2, 5, 0, 6, 0xFF, 64 + 7]);
    assert_eq!(zle(&dst[..n], src.len()).unwrap(), src);
    // Random data does not fit.
    let r = Rng::new(1).bytes(512);
    assert_eq!(zle_compress(&r, &mut [0u8; 448]), None);
}

fn roundtrip(kind: u8, data: &[u8], cap: usize) -> Option<usize> {
    let mut buf = vec![0u8; cap];
    let c = compress(kind, data, &mut buf).unwrap()?;
    assert!(c <= cap);
    // Physical block: stream then zero padding up to a 512 multiple.
    let psize = c.div_ceil(512).max(1) * 512;
    let mut phys = vec![0u8; psize];
    phys[..c].copy_from_slice(&buf[..c]);
    let mut out = vec![0x5Au8; data.len()];
    decompress(kind, &phys, &mut out)
        .unwrap_or_else(|e| panic!("kind {kind} len {}: {e}", data.len()));
    assert_eq!(out, data, "kind {kind} len {}", data.len());
    Some(c)
}

#[test]
fn roundtrips_all_compressors() {
    let kinds = [2u8, 3, 5, 6, 10, 13, 14, 15];
    for len in [1usize, 7, 100, 512, 4096, 65536, 131072] {
        for (name, data) in corpus(len, len as u64) {
            for &k in &kinds {
                // Generous buffer: must always succeed except for lzjb/zle on incompressible data.
                let big = roundtrip(k, &data, len * 2 + 128);
                if !matches!(k, 3 | 14) {
                    assert!(big.is_some(), "{} {name} len {len}", compress::name(k));
                }
                // ZFS policy buffer (12.5% saving).
                let c = roundtrip(k, &data, len - len / 8);
                let shrinks = match k {
                    2 => false,
                    14 => matches!(name, "zeros" | "sparse"),
                    _ => matches!(name, "zeros" | "text" | "repetitive" | "sparse"),
                };
                if shrinks && len >= 4096 {
                    assert!(c.is_some(), "{} {name} len {len}", compress::name(k));
                }
                if name == "random" && len >= 512 && k != 2 {
                    assert!(c.is_none(), "{} {name} len {len}", compress::name(k));
                }
            }
        }
    }
}

#[test]
fn gzip_details() {
    let data: Vec<u8> = corpus(8192, 5).remove(2).1;
    let mut buf = vec![0u8; 8192];
    for level in 1..=9u8 {
        let c = compress(4 + level, &data, &mut buf).unwrap().unwrap();
        assert_eq!(buf[0], 0x78, "zlib header");
        let mut out = vec![0u8; 8192];
        decompress(4 + level, &buf[..c], &mut out).unwrap();
        assert_eq!(out, data);
        // Wrong logical size, truncated stream, corrupted adler32.
        assert!(decompress(4 + level, &buf[..c], &mut [0u8; 8191]).is_err());
        assert!(decompress(4 + level, &buf[..c], &mut vec![0u8; 8193]).is_err());
        assert!(decompress(4 + level, &buf[..c - 1], &mut out).is_err());
        let mut bad = buf[..c].to_vec();
        bad[c - 1] ^= 1;
        assert!(decompress(4 + level, &bad, &mut out).is_err());
    }
}

#[test]
fn lz4_details() {
    // Hand-built: token 0x50 = 5 literals, no match.
    let s = [0, 0, 0, 6, 0x50, b'h', b'e', b'l', b'l', b'o', 0, 0, 0];
    let mut out = [0u8; 5];
    decompress(15, &s, &mut out).unwrap();
    assert_eq!(&out, b"hello");
    // Literal 'a' then a match of 4+3 at offset 1 then last literals "bcdef" (7 bytes... ) - keep it simple:
    // token 0x13: 1 literal, match length 3+4 = 7; offset 1 (LE); then token 0x50 + 5 literals.
    let s = [
        0, 0, 0, 10, 0x13, b'a', 1, 0, 0x50, b'b', b'c', b'd', b'e', b'f',
    ];
    let mut out = [0u8; 13];
    decompress(15, &s, &mut out).unwrap();
    assert_eq!(&out, b"aaaaaaaabcdef");
    // Wrong sizes and lengths.
    assert!(decompress(15, &s, &mut [0u8; 12]).is_err());
    assert!(decompress(15, &s, &mut [0u8; 14]).is_err());
    assert!(decompress(15, &[0, 0, 0, 99, 0x50, 1, 2, 3, 4, 5], &mut [0u8; 5]).is_err());
    assert!(decompress(15, &[0, 0], &mut [0u8; 5]).is_err());
    // Compress writes the big-endian header.
    let data = vec![7u8; 4096];
    let mut buf = vec![0u8; 3584];
    let c = compress(15, &data, &mut buf).unwrap().unwrap();
    assert_eq!(
        u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize,
        c - 4
    );
    // A tiny destination that needs the scratch path.
    let mut tiny = vec![0u8; 64];
    let c2 = compress(15, &data, &mut tiny).unwrap().unwrap();
    assert_eq!(&tiny[..c2], &buf[..c]);
}

/// zstd CLI v1.5.4 `-3 --no-check --no-content-size` output for the text below, with the magic stripped
/// and the ZFS header (c_len, level 3 << 24 | 10504) prepended.
fn zstd_vector() -> (Vec<u8>, Vec<u8>) {
    let mut data = Vec::new();
    for i in 0..40 {
        data.extend_from_slice(format!("ozfs zstd block {i}; ").as_bytes());
    }
    data.extend_from_slice(&[0u8; 100]);
    let hex = "28b52ffd0000550400d4036f7a6673207a73746420626c6f636b20303b203132333435363738393131313131313131313232323232323232323233333333333333333333393b20002820708382d20300a9266c22c94998449293b0442697b089243761894c2e611349ee842d4b445972c912862c9163c9194b58b1448825372c0961fa3cc613ef7acc93de79ac27c1bb0d8961";
    let frame: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let body = &frame[4..];
    let mut blk = Vec::new();
    blk.extend_from_slice(&(body.len() as u32).to_be_bytes());
    blk.extend_from_slice(&((3u32 << 24) | 10504).to_be_bytes());
    blk.extend_from_slice(body);
    (data, blk)
}

#[test]
fn zstd_decompress_vector() {
    let (data, mut blk) = zstd_vector();
    assert_eq!(data.len(), 890);
    let mut out = vec![0u8; data.len()];
    decompress(16, &blk, &mut out).unwrap();
    assert_eq!(out, data);
    assert_eq!(compress::zstd_header(&blk).unwrap().1 >> 24, 3);
    // Zero padding after the frame is ignored.
    blk.resize(1024, 0);
    let mut out = vec![0u8; data.len()];
    decompress(16, &blk, &mut out).unwrap();
    assert_eq!(out, data);
    // Size mismatch, truncated frame, bad length header.
    assert!(decompress(16, &blk, &mut vec![0u8; 889]).is_err());
    assert!(decompress(16, &blk, &mut vec![0u8; 891]).is_err());
    assert!(decompress(16, &blk[..100], &mut vec![0u8; 890]).is_err());
    let mut bad = blk.clone();
    bad[0..4].copy_from_slice(&5000u32.to_be_bytes());
    assert!(decompress(16, &bad, &mut vec![0u8; 890]).is_err());
    // Compressed by ozfs, it decodes to the same data.
    let mut dst = vec![0u8; data.len()];
    let n = compress(16, &data, &mut dst)
        .expect("zstd compresses")
        .expect("the vector's data shrinks");
    let mut back = vec![0u8; data.len()];
    decompress(16, &dst[..n], &mut back).expect("decodes");
    assert_eq!(back, data);
}

#[test]
fn uncompressed_and_unknown_kinds() {
    let src = [1u8, 2, 3, 4, 0, 0];
    let mut out = [0u8; 4];
    decompress(2, &src, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4]);
    assert!(decompress(2, &src[..3], &mut out).is_err());
    assert!(decompress(1, &src, &mut out).is_err());
    assert!(decompress(17, &src, &mut out).is_err());
    assert!(compress(99, &src, &mut [0u8; 16]).is_err());
    assert_eq!(compress(2, &src, &mut [0u8; 4]).unwrap(), None);
}

#[test]
fn lzjb_zle_roundtrip_random_structures() {
    // Random mixtures of runs and literals of random lengths.
    let mut r = Rng::new(77);
    for _ in 0..300 {
        let len = 1 + r.below(20000);
        let mut d = Vec::with_capacity(len);
        while d.len() < len {
            match r.below(4) {
                0 => {
                    let n = r.below(300);
                    d.resize(d.len() + n, 0)
                }
                1 => {
                    let n = r.below(100);
                    d.extend(r.bytes(n))
                }
                2 if d.len() > 10 => {
                    let back = 1 + r.below(d.len().min(1100));
                    let n = r.below(80);
                    for _ in 0..n {
                        d.push(d[d.len() - back]);
                    }
                }
                _ => {
                    let (b, n) = (r.next() as u8, r.below(200));
                    d.resize(d.len() + n, b)
                }
            }
        }
        d.truncate(len);
        for k in [3u8, 14, 15, 6] {
            roundtrip(k, &d, len + len / 2 + 64);
            roundtrip(k, &d, len - len / 8);
        }
    }
}

/// zstd blocks as ozfs writes them: OpenZFS's header (frame length, level
/// 3 and zstd 1.5.6 in the version word) over a magicless frame, which
/// ozfs's reader and the reference zstd decoder (`zstd -d`, libzstd, when
/// installed) both turn back into the input; incompressible input does
/// not fit and is refused.
#[test]
fn zstd_blocks_as_openzfs_writes_them() {
    use ozfs_codec::compress::ZIO_COMPRESS_ZSTD;
    let rec: Vec<u8> = (0..131072u32)
        .map(|i| ((i / 64) % 251) as u8 ^ ((i % 7) as u8))
        .collect();
    let mut dst = vec![0u8; rec.len() - rec.len() / 8];
    let n = compress(ZIO_COMPRESS_ZSTD, &rec, &mut dst)
        .expect("zstd")
        .expect("compressible data fits");
    let c = &dst[..n];
    assert_eq!(
        u32::from_be_bytes(c[0..4].try_into().unwrap()) as usize,
        n - 8
    );
    assert_eq!(
        u32::from_be_bytes(c[4..8].try_into().unwrap()),
        (3 << 24) | 10506
    );
    let mut back = vec![0u8; rec.len()];
    decompress(ZIO_COMPRESS_ZSTD, c, &mut back).expect("ozfs decodes it");
    assert_eq!(back, rec);
    // The reference decoder, on the frame with its magic restored
    // (scripts/install-deps.sh installs it; under CI it must be there).
    assert!(
        which_zstd().is_ok() || std::env::var_os("CI").is_none(),
        "zstd (libzstd's command) is missing; scripts/install-deps.sh installs it"
    );
    if let Ok(zstd) = which_zstd() {
        let f = std::env::temp_dir().join(format!("ozfs-zstd-{}.zst", std::process::id()));
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD];
        frame.extend_from_slice(&c[8..]);
        std::fs::write(&f, &frame).unwrap();
        let out = std::process::Command::new(zstd)
            .args(["-d", "-c", "-q"])
            .arg(&f)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&f);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, rec, "libzstd decodes what ozfs wrote");
    }
    // Random bytes do not shrink: not compressed.
    let mut x = 0x9e3779b97f4a7c15u64;
    let noise: Vec<u8> = (0..65536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut dst = vec![0u8; noise.len() - noise.len() / 8];
    assert_eq!(compress(ZIO_COMPRESS_ZSTD, &noise, &mut dst).unwrap(), None);
}

fn which_zstd() -> Result<std::path::PathBuf, ()> {
    ["/usr/bin/zstd", "/bin/zstd", "/usr/local/bin/zstd"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .ok_or(())
}
