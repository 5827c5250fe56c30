//! Throughput of the hot paths over 128 KiB blocks (the default ZFS recordsize).
//!
//! Run: `cargo bench -p ozfs-codec` (add `-- --quick` for a short run).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ozfs_codec::{checksum, compress, raidz};

const SIZE: usize = 128 * 1024;

/// Deterministic, moderately compressible data (text-like with runs).
fn sample() -> Vec<u8> {
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let words: [&[u8]; 8] = [
        b"zfs ",
        b"block ",
        b"pointer ",
        b"\0\0\0\0",
        b"dnode ",
        b"txg ",
        b"12345 ",
        b"\n",
    ];
    let mut out = Vec::with_capacity(SIZE + 16);
    while out.len() < SIZE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % 8) as usize]);
    }
    out.truncate(SIZE);
    out
}

fn benches(c: &mut Criterion) {
    let data = sample();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Bytes(SIZE as u64));

    g.bench_function("fletcher4", |b| {
        b.iter(|| checksum::fletcher4(black_box(&data), false))
    });
    g.bench_function("fletcher4_byteswap", |b| {
        b.iter(|| checksum::fletcher4(black_box(&data), true))
    });
    g.bench_function("fletcher4_scalar_reference", |b| {
        b.iter(|| {
            let mut st = ozfs_codec::Cksum::default();
            checksum::fletcher4_scalar(&mut st, black_box(&data), false);
            st
        })
    });
    g.bench_function("fletcher4_lanes_generic", |b| {
        b.iter(|| {
            let mut st = ozfs_codec::Cksum::default();
            checksum::fletcher4_lanes(&mut st, black_box(&data), false);
            st
        })
    });
    g.bench_function("fletcher2", |b| {
        b.iter(|| checksum::fletcher2(black_box(&data), false))
    });
    g.bench_function("sha256", |b| b.iter(|| checksum::sha256(black_box(&data))));
    g.bench_function("sha512", |b| {
        b.iter(|| checksum::sha512(black_box(&data), false))
    });
    let salt = [0x5au8; 32];
    g.bench_function("skein", |b| {
        b.iter(|| checksum::skein(&salt, black_box(&data), false))
    });
    g.bench_function("edonr", |b| {
        b.iter(|| checksum::edonr(&salt, black_box(&data), false))
    });
    g.bench_function("blake3", |b| {
        b.iter(|| checksum::blake3(&salt, black_box(&data), false))
    });

    let mut cbuf = vec![0u8; SIZE];
    let clen = compress::lzjb_compress(&data, &mut cbuf).expect("sample compresses");
    g.bench_function("lzjb_compress", |b| {
        let mut out = vec![0u8; SIZE];
        b.iter(|| compress::lzjb_compress(black_box(&data), &mut out))
    });
    g.bench_function("lzjb_decompress", |b| {
        let mut out = vec![0u8; SIZE];
        b.iter(|| compress::lzjb_decompress(black_box(&cbuf[..clen]), &mut out).unwrap())
    });
    let mut zbuf = vec![0u8; SIZE];
    let zlen = compress::zle_compress(&data, &mut zbuf).unwrap_or(0);
    if zlen > 0 {
        g.bench_function("zle_decompress", |b| {
            let mut out = vec![0u8; SIZE];
            b.iter(|| compress::zle_decompress(black_box(&zbuf[..zlen]), &mut out).unwrap())
        });
    }
    let mut lbuf = vec![0u8; SIZE];
    let llen = compress::compress(15, &data, &mut lbuf).unwrap().unwrap();
    g.bench_function("lz4_decompress", |b| {
        let mut out = vec![0u8; SIZE];
        b.iter(|| compress::decompress(15, black_box(&lbuf[..llen]), &mut out).unwrap())
    });
    let mut gbuf = vec![0u8; SIZE];
    let glen = compress::compress(10, &data, &mut gbuf).unwrap().unwrap();
    g.bench_function("gzip6_decompress", |b| {
        let mut out = vec![0u8; SIZE];
        b.iter(|| compress::decompress(10, black_box(&gbuf[..glen]), &mut out).unwrap())
    });

    // raidz2 of 8 children: 6 data columns of ~21.3 KiB (sector 4 KiB -> 32 sectors, q = 5, r = 2).
    let map = raidz::RaidzMap::new(0, SIZE as u64, 12, 8, 2);
    let mut cols: Vec<Vec<u8>> = map
        .cols
        .iter()
        .map(|c| vec![0u8; c.size as usize])
        .collect();
    let mut pos = 0;
    for c in cols[2..].iter_mut() {
        let n = c.len();
        c.copy_from_slice(&data[pos..pos + n]);
        pos += n;
    }
    g.bench_function("raidz2_generate", |b| {
        b.iter(|| raidz::generate_parity(2, black_box(&mut cols)))
    });
    raidz::generate_parity(2, &mut cols);
    g.bench_function("raidz2_reconstruct_2data", |b| {
        b.iter(|| raidz::reconstruct(2, black_box(&mut cols), &[2, 5]).unwrap())
    });
    // Native encryption: sealing a data block (per-block key, AES-256-GCM
    // with a fresh IV) and opening it again.
    let mk = ozfs_codec::crypt::MasterKey::generate(ozfs_codec::crypt::Suite::Aes256Gcm).unwrap();
    let mut sealed = data.clone();
    g.bench_function("aes256gcm_seal", |b| {
        b.iter(|| {
            mk.seal(19, 0, black_box(&data), &mut sealed).unwrap();
        })
    });
    g.finish();
}

criterion_group!(codec, benches);
criterion_main!(codec);
