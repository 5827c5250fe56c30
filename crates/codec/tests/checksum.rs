//! Checksum golden vectors and cross-checks against obvious reference loops.
mod common;

use common::Rng;
use ozfs_codec::checksum::{self, fletcher2, fletcher4, fletcher4_incremental, sha256};
use ozfs_codec::Cksum;

/// Word reader honoring `byteswap` on whatever host we run on.
fn word32(b: &[u8], byteswap: bool) -> u64 {
    let x = u32::from_ne_bytes(b.try_into().unwrap());
    (if byteswap { x.swap_bytes() } else { x }) as u64
}
fn word64(b: &[u8], byteswap: bool) -> u64 {
    let x = u64::from_ne_bytes(b.try_into().unwrap());
    if byteswap {
        x.swap_bytes()
    } else {
        x
    }
}

fn ref_f4(seed: [u64; 4], data: &[u8], bs: bool) -> Cksum {
    let [mut a, mut b, mut c, mut d] = seed;
    let mut i = 0;
    while i + 4 <= data.len() {
        a = a.wrapping_add(word32(&data[i..i + 4], bs));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
        i += 4;
    }
    Cksum([a, b, c, d])
}

fn ref_f2(data: &[u8], bs: bool) -> Cksum {
    let (mut a0, mut a1, mut b0, mut b1) = (0u64, 0u64, 0u64, 0u64);
    let mut i = 0;
    while i + 16 <= data.len() {
        a0 = a0.wrapping_add(word64(&data[i..i + 8], bs));
        a1 = a1.wrapping_add(word64(&data[i + 8..i + 16], bs));
        b0 = b0.wrapping_add(a0);
        b1 = b1.wrapping_add(a1);
        i += 16;
    }
    Cksum([a0, a1, b0, b1])
}

#[test]
fn fletcher4_literal_0_to_255() {
    let d: Vec<u8> = (0..=255u8).collect();
    let le = Cksum([0x20601fdf80, 0x2c59d754a80, 0x2e430f9bfd40, 0x272f2245444c0]);
    let be = Cksum([0x1f9fe02040, 0x2ad355d82e0, 0x2c2a1d90d580, 0x24fd04e196af0]);
    let (native, swapped) = if cfg!(target_endian = "little") {
        (le, be)
    } else {
        (be, le)
    };
    assert_eq!(fletcher4(&d, false), native);
    assert_eq!(fletcher4(&d, true), swapped);
}

#[test]
fn fletcher2_literal_0_to_255() {
    let d: Vec<u8> = (0..=255u8).collect();
    let le = Cksum([
        0xf7e7d7c7b7a79780,
        0x7868584838281800,
        0x65dd54cc43bb3280,
        0xaa21991087ff76c0,
    ]);
    if cfg!(target_endian = "little") {
        assert_eq!(fletcher2(&d, false), le);
    } else {
        assert_eq!(fletcher2(&d, true), le);
    }
}

#[test]
fn fletcher_empty_and_tails() {
    assert_eq!(fletcher4(&[], false), Cksum::default());
    assert_eq!(fletcher2(&[], false), Cksum::default());
    // Tails shorter than a word are ignored.
    assert_eq!(fletcher4(&[1, 2, 3], false), Cksum::default());
    assert_eq!(fletcher2(&[1; 15], false), Cksum::default());
    let d = [1u8, 0, 0, 0, 9, 9];
    assert_eq!(fletcher4(&d, false), fletcher4(&d[..4], false));
}

#[test]
fn fletcher4_matches_reference_all_lengths() {
    let mut r = Rng::new(4);
    for len in 0..600 {
        let d = r.bytes(len);
        for bs in [false, true] {
            assert_eq!(
                fletcher4(&d, bs),
                ref_f4([0; 4], &d, bs),
                "len {len} bs {bs}"
            );
        }
    }
}

#[test]
fn fletcher4_large_and_saturating() {
    let mut r = Rng::new(44);
    for len in [4096usize, 131072, 131072 + 12, 1 << 20] {
        let d = r.bytes(len);
        assert_eq!(fletcher4(&d, false), ref_f4([0; 4], &d, false));
        assert_eq!(fletcher4(&d, true), ref_f4([0; 4], &d, true));
    }
    // All-ones words make the accumulators wrap quickly.
    let d = vec![0xffu8; 1 << 20];
    assert_eq!(fletcher4(&d, false), ref_f4([0; 4], &d, false));
}

#[test]
fn fletcher4_incremental_matches_one_shot() {
    let mut r = Rng::new(7);
    for _ in 0..200 {
        let n = r.below(5000) * 4;
        let d = r.bytes(n);
        let bs = r.next() & 1 == 1;
        let mut st = Cksum::default();
        let mut pos = 0;
        while pos < n {
            let take = (r.below(300) * 4).min(n - pos);
            fletcher4_incremental(&mut st, &d[pos..pos + take], bs);
            pos += take;
        }
        assert_eq!(st, fletcher4(&d, bs));
        // Arbitrary (non-zero) seed state.
        let seed = [r.next(), r.next(), r.next(), r.next()];
        let mut st = Cksum(seed);
        fletcher4_incremental(&mut st, &d, bs);
        assert_eq!(st, ref_f4(seed, &d, bs));
        let mut st2 = Cksum(seed);
        checksum::fletcher4_scalar(&mut st2, &d, bs);
        assert_eq!(st, st2);
        let mut st3 = Cksum(seed);
        checksum::fletcher4_lanes(&mut st3, &d, bs);
        assert_eq!(st, st3);
    }
}

#[test]
fn fletcher2_matches_reference() {
    let mut r = Rng::new(2);
    for len in (0..700).chain([131072, 131072 + 16, 131072 + 48]) {
        let d = r.bytes(len);
        for bs in [false, true] {
            assert_eq!(fletcher2(&d, bs), ref_f2(&d, bs), "len {len} bs {bs}");
        }
    }
}

#[test]
fn byteswap_equals_checksum_of_swapped_data() {
    let mut r = Rng::new(9);
    let d = r.bytes(4096);
    let sw4: Vec<u8> = d
        .chunks_exact(4)
        .flat_map(|w| [w[3], w[2], w[1], w[0]])
        .collect();
    assert_eq!(fletcher4(&d, true), fletcher4(&sw4, false));
    let sw8: Vec<u8> = d
        .chunks_exact(8)
        .flat_map(|w| {
            let mut x: [u8; 8] = w.try_into().unwrap();
            x.reverse();
            x
        })
        .collect();
    assert_eq!(fletcher2(&d, true), fletcher2(&sw8, false));
}

#[test]
fn sha256_golden() {
    // FIPS 180-2 "abc": ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c b410ff61 f20015ad
    assert_eq!(
        sha256(b"abc"),
        Cksum([
            0xba7816bf8f01cfea,
            0x414140de5dae2223,
            0xb00361a396177a9c,
            0xb410ff61f20015ad
        ])
    );
    // Empty input: e3b0c442 98fc1c14 9afbf4c8 996fb924 27ae41e4 649b934c a495991b 7852b855
    assert_eq!(
        sha256(b""),
        Cksum([
            0xe3b0c44298fc1c14,
            0x9afbf4c8996fb924,
            0x27ae41e4649b934c,
            0xa495991b7852b855
        ])
    );
    let d: Vec<u8> = (0..=255u8).collect();
    assert_eq!(
        sha256(&d),
        Cksum([
            0x40aff2e9d2d8922e,
            0x47afd4648e696749,
            0x7158785fbd1da870,
            0xe7110266bf944880
        ])
    );
    assert_eq!(
        format!("{}", sha256(b"abc")),
        "ba7816bf8f01cfea:414140de5dae2223:b00361a396177a9c:b410ff61f20015ad"
    );
}

#[test]
fn compute_dispatch() {
    let mut r = Rng::new(3);
    let d = r.bytes(1024);
    for bs in [false, true] {
        assert_eq!(checksum::compute(2, &d, bs).unwrap(), Cksum::default());
        assert_eq!(checksum::compute(10, &d, bs).unwrap(), Cksum::default());
        for k in [3, 4, 8] {
            assert_eq!(checksum::compute(k, &d, bs).unwrap(), sha256(&d));
        }
        for k in [5, 6] {
            assert_eq!(checksum::compute(k, &d, bs).unwrap(), fletcher2(&d, bs));
        }
        for k in [7, 9] {
            assert_eq!(checksum::compute(k, &d, bs).unwrap(), fletcher4(&d, bs));
        }
    }
    // Without the pool's salt the salted functions cannot be computed; the
    // error names the function and says "unsupported" or why.
    for k in [0u8, 1, 12, 13, 14, 15, 200] {
        match checksum::compute(k, &d, false) {
            Err(e @ ozfs_codec::Error::Unsupported { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(checksum::name(k)) || msg.contains(&k.to_string()),
                    "{k}: {msg}"
                );
            }
            other => panic!("{k}: {other:?}"),
        }
    }
    let salt = [7u8; 32];
    for k in [12u8, 13, 14] {
        assert!(checksum::compute_salted(k, &d, false, Some(&salt)).is_ok());
    }
    assert_eq!(
        checksum::compute(11, &d, false).unwrap(),
        checksum::sha512(&d, false)
    );
}
