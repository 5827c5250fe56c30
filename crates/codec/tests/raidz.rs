//! RAID-Z geometry, parity generation and exhaustive reconstruction tests.
mod common;

use common::Rng;
use ozfs_codec::raidz::{
    generate_parity, gf_inv, gf_mul, raidz_asize, reconstruct, ExpandedRaidzMap, RaidzCol, RaidzMap,
};

fn col(dev: usize, offset: u64, size: u64) -> RaidzCol {
    RaidzCol { dev, offset, size }
}

#[test]
fn map_full_rows() {
    let m = RaidzMap::new(0, 4096, 9, 5, 1);
    assert_eq!(m.nparity, 1);
    assert_eq!(m.cols, (0..5).map(|d| col(d, 0, 1024)).collect::<Vec<_>>());
    assert_eq!(m.asize, 5120);
    assert_eq!(raidz_asize(4096, 9, 5, 1), 5120);
    assert_eq!(m.data_size(), 4096);
}

#[test]
fn map_single_parity_swap_at_1mib() {
    let m = RaidzMap::new(1 << 20, 4096, 9, 5, 1);
    let co = (2048 / 5) * 512;
    assert_eq!(
        m.cols,
        vec![
            col(4, co, 1024), // swapped with column 1
            col(3, co, 1024),
            col(0, co + 512, 1024),
            col(1, co + 512, 1024),
            col(2, co + 512, 1024),
        ]
    );
    // No swap for raidz2 at the same offset.
    let m2 = RaidzMap::new(1 << 20, 4096, 9, 5, 2);
    assert_eq!(m2.cols[0].dev, 3);
    assert_eq!(m2.cols[1].dev, 4);
    // No swap without bit 20.
    let m3 = RaidzMap::new(3 << 21, 4096, 9, 5, 1);
    assert!(m3.cols[0].dev < m3.cols[1].dev || m3.cols[1].dev == 0);
}

#[test]
fn map_partial_row_and_skip() {
    // raidz2 of 6, 2 data sectors: q = 0, r = 2, bc = 4 -> 4 columns of one sector, 2 skip sectors.
    let m = RaidzMap::new(512 * 6 * 10 + 512 * 4, 1024, 9, 6, 2);
    // b = 64, f = 4, co = 10 * 512
    assert_eq!(
        m.cols,
        vec![
            col(4, 5120, 512),
            col(5, 5120, 512),
            col(0, 5632, 512),
            col(1, 5632, 512)
        ]
    );
    assert_eq!(m.asize, 3072);
    assert_eq!(raidz_asize(1024, 9, 6, 2), 3072);
    // Mixed big/small columns: raidz1 of 4, 5 sectors: q = 1, r = 2, bc = 3.
    let m = RaidzMap::new(0, 5 * 4096, 12, 4, 1);
    let sizes: Vec<u64> = m.cols.iter().map(|c| c.size).collect();
    assert_eq!(sizes, vec![8192, 8192, 8192, 4096]);
    // tot = 5 + 1*2 = 7 -> roundup(7, 2) = 8 sectors.
    assert_eq!(m.asize, 8 * 4096);
    // psize not a sector multiple is rounded up.
    assert_eq!(
        RaidzMap::new(0, 1000, 9, 4, 1),
        RaidzMap::new(0, 1024, 9, 4, 1)
    );
}

#[test]
fn map_invariants_random() {
    let mut r = Rng::new(11);
    for _ in 0..20000 {
        let p = 1 + r.below(3);
        let n = p + 1 + r.below(10);
        let ashift = 9 + r.below(4) as u32;
        let u = 1u64 << ashift;
        let psize = (1 + r.below(256)) as u64 * 512;
        let offset = (r.next() % (1 << 40)) & !(u - 1);
        let m = RaidzMap::new(offset, psize, ashift, n, p);
        assert_eq!(m.asize, raidz_asize(psize, ashift, n, p));
        assert_eq!(m.asize % ((p as u64 + 1) * u), 0);
        assert_eq!(m.data_size(), psize.div_ceil(u) * u);
        assert!(m.cols.len() > p && m.cols.len() <= n);
        let total: u64 = m.cols.iter().map(|c| c.size).sum();
        assert!(total <= m.asize);
        assert!(m.asize - total < (p as u64 + 1) * u);
        let mut devs: Vec<usize> = m.cols.iter().map(|c| c.dev).collect();
        devs.sort();
        devs.dedup();
        assert_eq!(devs.len(), m.cols.len());
        for c in &m.cols {
            assert!(c.dev < n && c.size % u == 0 && c.size > 0);
        }
        // Parity columns are as long as the longest data column (the first one).
        for c in &m.cols[..p] {
            assert_eq!(c.size, m.cols[p].size);
        }
        assert!(m.cols[p..].windows(2).all(|w| w[0].size >= w[1].size));
        // Children offsets: one row of the raidz address space.
        let b = offset / u;
        for c in &m.cols {
            assert!(c.offset == (b / n as u64) * u || c.offset == (b / n as u64 + 1) * u);
        }
    }
}

/// Independent parity reference: P/Q/R = Σ g^(k-1-j) D_j byte by byte with zero extension.
fn ref_parity(row: usize, data: &[Vec<u8>]) -> Vec<u8> {
    let plen = data[0].len();
    let k = data.len();
    let g = [1u8, 2, 4][row];
    let mut out = vec![0u8; plen];
    for (j, d) in data.iter().enumerate() {
        let mut coef = 1u8;
        for _ in 0..(k - 1 - j) {
            coef = gf_mul(coef, g);
        }
        for (o, &x) in out.iter_mut().zip(d.iter()) {
            *o ^= gf_mul(coef, x);
        }
    }
    out
}

#[test]
fn gf_basics() {
    assert_eq!(gf_mul(0x80, 2), 0x1d);
    assert_eq!(gf_mul(2, 0x8e), 1);
    for a in 1..=255u8 {
        assert_eq!(gf_mul(a, gf_inv(a)), 1);
        assert_eq!(gf_mul(a, 1), a);
        assert_eq!(gf_mul(a, 0), 0);
    }
}

#[test]
fn parity_literal() {
    let mut cols = vec![vec![0; 1], vec![0; 1], vec![0; 1], vec![0x80], vec![0x01]];
    generate_parity(3, &mut cols);
    assert_eq!(cols[0], [0x81]);
    assert_eq!(cols[1], [0x1c]);
    assert_eq!(cols[2], [0x3b]);
    // A single data column: every parity equals the data.
    let mut cols = vec![vec![0; 3], vec![0; 3], vec![0; 3], vec![9, 8, 7]];
    generate_parity(3, &mut cols);
    assert!(cols[..3].iter().all(|c| c == &[9, 8, 7]));
    // Short column: the missing bytes are zero but the multiply still applies.
    let mut cols = vec![vec![0; 2], vec![0; 2], vec![1, 0x80], vec![1]];
    generate_parity(2, &mut cols);
    assert_eq!(cols[0], [0, 0x80]);
    assert_eq!(cols[1], [3, 0x1d]);
}

fn random_cols(r: &mut Rng, p: usize, k: usize, unit: usize) -> Vec<Vec<u8>> {
    let plen = unit * (1 + r.below(4));
    let short = if plen > unit && r.below(2) == 0 {
        plen - unit
    } else {
        plen
    };
    // Like a raidz map: the first `big` data columns are full length, the rest may be shorter.
    let big = 1 + r.below(k);
    let mut cols: Vec<Vec<u8>> = (0..p).map(|_| vec![0u8; plen]).collect();
    for j in 0..k {
        cols.push(r.bytes(if j < big { plen } else { short }));
    }
    cols
}

#[test]
fn parity_matches_reference() {
    let mut r = Rng::new(5);
    for _ in 0..300 {
        let p = 1 + r.below(3);
        let k = 1 + r.below(12);
        // Odd units exercise the byte tails of the word loops.
        let unit = [8usize, 13, 64, 512][r.below(4)];
        let mut cols = random_cols(&mut r, p, k, unit);
        generate_parity(p, &mut cols);
        for row in 0..p {
            assert_eq!(
                cols[row],
                ref_parity(row, &cols[p..]),
                "p {p} k {k} row {row}"
            );
        }
    }
}

fn combos(n: usize, m: usize) -> Vec<Vec<usize>> {
    if m == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for first in 0..n {
        for rest in combos(n, m - 1) {
            if rest.iter().all(|&x| x > first) {
                let mut v = vec![first];
                v.extend(rest);
                out.push(v);
            }
        }
    }
    out
}

#[test]
fn reconstruct_exhaustive() {
    let mut r = Rng::new(99);
    let mut cases = 0;
    for p in 1..=3 {
        for k in 1..=7 {
            for _ in 0..3 {
                let unit = [16usize, 24, 37][r.below(3)];
                let mut good = random_cols(&mut r, p, k, unit);
                generate_parity(p, &mut good);
                let n = p + k;
                for m in 0..=p {
                    for missing in combos(n, m) {
                        let mut cols = good.clone();
                        for &c in &missing {
                            for b in cols[c].iter_mut() {
                                *b = r.next() as u8;
                            }
                        }
                        reconstruct(p, &mut cols, &missing).unwrap();
                        assert_eq!(cols, good, "p {p} k {k} missing {missing:?}");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases > 1000);
}

#[test]
fn reconstruct_errors() {
    let mut r = Rng::new(1);
    let mut cols = random_cols(&mut r, 2, 4, 64);
    generate_parity(2, &mut cols);
    assert!(reconstruct(2, &mut cols, &[0, 1, 2]).is_err());
    assert!(reconstruct(2, &mut cols, &[9]).is_err());
    assert!(reconstruct(0, &mut cols, &[0]).is_err());
    // Duplicates are tolerated.
    let good = cols.clone();
    cols[3].fill(0);
    reconstruct(2, &mut cols, &[3, 3]).unwrap();
    assert_eq!(cols, good);
}

#[test]
fn map_parity_roundtrip() {
    // Split a block per the map, generate parity, lose columns, rebuild, reassemble.
    let mut r = Rng::new(21);
    for p in 1..=3 {
        let n = p + 4;
        let psize = 7 * 512;
        let m = RaidzMap::new(r.next() & !511 & ((1 << 36) - 1), psize, 9, n, p);
        let block = r.bytes(psize as usize);
        let mut cols: Vec<Vec<u8>> = m.cols.iter().map(|c| vec![0u8; c.size as usize]).collect();
        let mut pos = 0;
        for c in cols[p..].iter_mut() {
            let len = c.len();
            c.copy_from_slice(&block[pos..pos + len]);
            pos += len;
        }
        generate_parity(p, &mut cols);
        let good = cols.clone();
        let missing: Vec<usize> = (p..p + p).collect();
        for &c in &missing {
            cols[c].fill(0xEE);
        }
        reconstruct(p, &mut cols, &missing).unwrap();
        assert_eq!(cols, good);
        assert_eq!(cols[p..].concat(), block);
    }
}

// ---------------------------------------------------------------------------
// Expanded RAID-Z: blocks written 3 wide, reflowed onto 4 children.

/// Every sector of every column of `m`, as (child, byte offset).
fn sectors(m: &ExpandedRaidzMap) -> Vec<Vec<(usize, u64)>> {
    (0..m.map.cols.len())
        .map(|c| (0..m.rows_of(c)).map(|i| m.sector(c, i)).collect())
        .collect()
}

#[test]
fn expanded_full_rows_by_hand() {
    // 4 data sectors, raidz1 3 wide: columns P, D0, D1 of 2 sectors each.
    // Old address-space indices: P0=0 D0₀=1 D1₀=2 P1=3 D0₁=4 D1₁=5; on 4
    // children index a is child a%4, sector a/4.
    let m = ExpandedRaidzMap::new(0, 2048, 9, 3, 4, 1).unwrap();
    assert_eq!(
        sectors(&m),
        vec![
            vec![(0, 0), (3, 0)],
            vec![(1, 0), (0, 512)],
            vec![(2, 0), (1, 512)],
        ]
    );
    assert_eq!(m.map.cols[1], col(1, 0, 1024));
    assert_eq!(m.map.asize, 3072);
}

#[test]
fn expanded_partial_row_by_hand() {
    // Sector 5, 3 data sectors: P and D0 have 2 sectors, D1 one.
    // Indices P0=5 D0₀=6 D1₀=7 P1=8 D0₁=9.
    let m = ExpandedRaidzMap::new(5 * 512, 1536, 9, 3, 4, 1).unwrap();
    assert_eq!(
        sectors(&m),
        vec![
            vec![(1, 512), (0, 1024)],
            vec![(2, 512), (1, 1024)],
            vec![(3, 512)],
        ]
    );
}

#[test]
fn expanded_single_parity_swap_by_hand() {
    // At 1 MiB (sector 2048) raidz1 swaps columns 0 and 1 in every row.
    let m = ExpandedRaidzMap::new(1 << 20, 1024, 9, 3, 4, 1).unwrap();
    let so = (2048 / 4) * 512;
    assert_eq!(
        sectors(&m),
        vec![vec![(1, so)], vec![(0, so)], vec![(2, so)]]
    );
}

#[test]
fn expanded_refuses_impossible_geometry() {
    assert!(ExpandedRaidzMap::new(0, 4096, 9, 5, 4, 1).is_err());
    assert!(ExpandedRaidzMap::new(0, 4096, 9, 2, 4, 2).is_err());
}

#[test]
fn expanded_equals_plain_map_when_not_widened() {
    let mut rng = Rng::new(7);
    for _ in 0..2000 {
        let n = 2 + (rng.next() % 8) as usize;
        let p = 1 + (rng.next() % 3) as usize;
        if p >= n {
            continue;
        }
        let ashift = 9 + (rng.next() % 4) as u32;
        let off = (rng.next() % (1 << 14)) << ashift;
        let psize = (1 + rng.next() % 64) << ashift;
        let plain = RaidzMap::new(off, psize, ashift, n, p);
        let e = ExpandedRaidzMap::new(off, psize, ashift, n, n, p).unwrap();
        assert_eq!(e.map, plain);
        for (c, pc) in plain.cols.iter().enumerate() {
            for i in 0..e.rows_of(c) {
                assert_eq!(e.sector(c, i), (pc.dev, pc.offset + (i << ashift)));
            }
        }
    }
}

/// Write blocks with the old (narrow) map, reflow the address space onto
/// more children as OpenZFS's expansion does (index a: child a mod n,
/// sector a / n), and find every sector through the expanded map.
#[test]
fn expanded_map_finds_reflowed_sectors() {
    let mut rng = Rng::new(11);
    for _ in 0..500 {
        let l = 2 + (rng.next() % 6) as usize;
        let p = 1 + (rng.next() % 3) as usize;
        if p >= l {
            continue;
        }
        let phys = l + 1 + (rng.next() % 3) as usize;
        let ashift = 9u32;
        let off = (rng.next() % 4096) << ashift;
        let psize = (1 + rng.next() % 40) << ashift;
        let old = RaidzMap::new(off, psize, ashift, l, p);
        let e = ExpandedRaidzMap::new(off, psize, ashift, l, phys, p).unwrap();
        // Old place of sector i of column c → address-space index → new place.
        for (c, oc) in old.cols.iter().enumerate() {
            for i in 0..(oc.size >> ashift) {
                let idx = ((oc.offset >> ashift) + i) * l as u64 + oc.dev as u64;
                let want = ((idx % phys as u64) as usize, (idx / phys as u64) << ashift);
                assert_eq!(
                    e.sector(c, i),
                    want,
                    "l {l} p {p} phys {phys} off {off} psize {psize}"
                );
            }
        }
    }
}
