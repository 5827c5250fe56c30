//! The newer checksums against blocks OpenZFS 2.3.2 wrote.
//!
//! `testdata/c6-ALG-*.bin` are physical blocks (PSIZE bytes, as on disk)
//! taken from the corpus pool `c6-checksums` (../shared/corpus/openzfs-2.3),
//! one file system per checksum: `file` is the only block of `name.txt`
//! (512 bytes, compression off), `dnodes` the first block of the
//! meta-dnode (4 KiB, lz4). The expected words are the checksums in their
//! block pointers, as written by a little-endian host; `SALT` is the
//! pool's `org.illumos:checksum_salt`.

use ozfs_codec::checksum::{self, compute_salted, Salt};
use ozfs_codec::edonr::{edonr512, EdonR512};
use ozfs_codec::skein::skein512_256_mac;
use ozfs_format::Cksum;

const SALT: Salt = [
    0xf3, 0xa5, 0x81, 0x39, 0xc4, 0x45, 0x85, 0xa3, 0x21, 0x84, 0xd6, 0xf4, 0xb0, 0xc4, 0x2a, 0x2e,
    0x86, 0x9b, 0xad, 0xee, 0x2d, 0x87, 0x31, 0xd8, 0x85, 0xbf, 0x2d, 0xe1, 0x0d, 0x8d, 0xf0, 0x40,
];

/// (checksum function, block file, the BP's checksum words).
const GOLDEN: &[(u8, &str, [u64; 4])] = &[
    (
        11,
        "c6-sha512-file.bin",
        [
            0x359a95bc6b36f7d1,
            0x85bb34752aec5f46,
            0x24ff57c501fbecde,
            0x245b48e63efd95b6,
        ],
    ),
    (
        11,
        "c6-sha512-dnodes.bin",
        [
            0x485c76448926c8b1,
            0xe62e5e52eadca37c,
            0x1bc3bfd5155b3285,
            0x3aa7ce4916efef94,
        ],
    ),
    (
        12,
        "c6-skein-file.bin",
        [
            0x0bc6a2738d117a51,
            0xc074c90db43d505d,
            0x5bb0264b1c624f19,
            0xe3c10e0e9faf5cf3,
        ],
    ),
    (
        12,
        "c6-skein-dnodes.bin",
        [
            0x9f1d15d7dccfe2ca,
            0x12a8dea9cbafe585,
            0xb3077bd44f49b88d,
            0xe31fc70c5624c390,
        ],
    ),
    (
        13,
        "c6-edonr-file.bin",
        [
            0x7695915c50881440,
            0x5f3594410ba46ffe,
            0xea3c8541bf643512,
            0xcd89861dc6a7e13a,
        ],
    ),
    (
        13,
        "c6-edonr-dnodes.bin",
        [
            0xe5540cbd0b6265b6,
            0xdec9c46464c64ecf,
            0xf62bd6ed4ebb660e,
            0x78d02a59a10986e5,
        ],
    ),
    (
        14,
        "c6-blake3-file.bin",
        [
            0x5e022a8b67da0f76,
            0x228c109c8b5b25ec,
            0x5bab1f4ae6155a9a,
            0xe8f625648319ccc0,
        ],
    ),
    (
        14,
        "c6-blake3-dnodes.bin",
        [
            0x834ebb71534d705d,
            0x5c7900c8f6de6497,
            0xd0898eff201b065e,
            0x076a7ef0d3ee4e1f,
        ],
    ),
];

fn block(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The writer was little-endian: on this host the words compare directly
/// when the host is little-endian, after "byteswap" when it is not.
fn writer_swap() -> bool {
    cfg!(target_endian = "big")
}

#[test]
fn blocks_written_by_openzfs_verify() {
    for (kind, file, want) in GOLDEN {
        let data = block(file);
        let got = compute_salted(*kind, &data, writer_swap(), Some(&SALT)).unwrap();
        assert_eq!(got, Cksum(*want), "{} over {file}", checksum::name(*kind));
    }
}

#[test]
fn byteswap_reads_each_word_in_the_other_order() {
    // A big-endian writer would have stored the same digest bytes, so a
    // reader sees each word byte-reversed.
    for (kind, file, want) in GOLDEN {
        let data = block(file);
        let got = compute_salted(*kind, &data, !writer_swap(), Some(&SALT)).unwrap();
        let swapped = Cksum(want.map(u64::swap_bytes));
        assert_eq!(got, swapped, "{} over {file}", checksum::name(*kind));
    }
}

#[test]
fn any_change_is_caught() {
    for (kind, file, want) in GOLDEN {
        let mut data = block(file);
        data[100] ^= 1;
        let got = compute_salted(*kind, &data, writer_swap(), Some(&SALT)).unwrap();
        assert_ne!(got, Cksum(*want), "{} over {file}", checksum::name(*kind));
        if checksum::salted(*kind) {
            data[100] ^= 1;
            let mut salt = SALT;
            salt[31] ^= 0x80;
            let got = compute_salted(*kind, &data, writer_swap(), Some(&salt)).unwrap();
            assert_ne!(
                got,
                Cksum(*want),
                "{} keyed by another salt",
                checksum::name(*kind)
            );
        }
    }
}

#[test]
fn salted_functions_need_the_salt() {
    let data = block("c6-skein-file.bin");
    for kind in [12u8, 13, 14] {
        let e = compute_salted(kind, &data, false, None).unwrap_err();
        assert!(matches!(e, ozfs_codec::Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains(checksum::name(kind)), "{e}");
    }
    // sha512 is not salted.
    assert!(compute_salted(11, &data, false, None).is_ok());
}

#[test]
fn sha512_is_sha512_256() {
    // FIPS 180-4 example: SHA-512/256("abc").
    let want: [u8; 32] = [
        0x53, 0x04, 0x8e, 0x26, 0x81, 0x94, 0x1e, 0xf9, 0x9b, 0x2e, 0x29, 0xb7, 0x6b, 0x4c, 0x7d,
        0xab, 0xe4, 0xc2, 0xd0, 0xc6, 0x34, 0xfc, 0x6d, 0x46, 0xe0, 0xe2, 0xf1, 0x31, 0x07, 0xe7,
        0xaf, 0x23,
    ];
    assert_eq!(
        checksum::sha512(b"abc", false),
        checksum::digest_to_words_native(&want, false)
    );
}

#[test]
fn unkeyed_skein_matches_rustcrypto() {
    use skein::digest::{consts::U32, Digest};
    for len in [0usize, 1, 63, 64, 65, 127, 128, 129, 1000, 4096] {
        let data: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        let theirs: [u8; 32] = skein::Skein512::<U32>::digest(&data).into();
        assert_eq!(skein512_256_mac(&[], &data), theirs, "length {len}");
    }
}

#[test]
fn edonr_incremental_equals_one_shot() {
    // Every tail length (one and two padding blocks), fed in uneven pieces.
    let data: Vec<u8> = (0..700u32).map(|i| (i * 37 + 11) as u8).collect();
    for len in 0..=data.len() {
        let one = edonr512(&data[..len]);
        for piece in [1usize, 7, 64, 127, 128, 129] {
            let mut h = EdonR512::new();
            for c in data[..len].chunks(piece) {
                h.update(c);
            }
            assert_eq!(h.finalize(), one, "length {len}, pieces of {piece}");
        }
    }
    // Tails of 119 and 120 bytes pad into one and two blocks: different.
    assert_ne!(edonr512(&data[..119]), edonr512(&data[..120]));
}

#[test]
fn edonr512_known_answers() {
    // Edon-R 512 digests of two of NIST's SHA example messages (as the
    // Edon-R reference implementation computes them).
    let abc: [u8; 64] = [
        0x1b, 0x14, 0xdb, 0x15, 0x5f, 0x1d, 0x40, 0x65, 0x94, 0xb8, 0xce, 0xf7, 0x0a, 0x43, 0x62,
        0xec, 0x6b, 0x5d, 0xe6, 0xa5, 0xda, 0xf5, 0x0e, 0xc9, 0x99, 0xe9, 0x87, 0xc1, 0x9d, 0x30,
        0x49, 0xe2, 0xde, 0x59, 0x77, 0xbb, 0x05, 0xb1, 0xbb, 0x22, 0x00, 0x50, 0xa1, 0xea, 0x5b,
        0x46, 0xa9, 0xf1, 0x74, 0x0a, 0xca, 0xfb, 0xf6, 0xb4, 0x50, 0x32, 0xad, 0xc9, 0x0c, 0x62,
        0x83, 0x72, 0xc2, 0x2b,
    ];
    assert_eq!(edonr512(b"abc"), abc);
    let msg = b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno\
ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    assert_eq!(msg.len(), 112);
    let long: [u8; 64] = [
        0x53, 0x51, 0x07, 0x0d, 0xc5, 0x1c, 0x3b, 0x2b, 0xac, 0xa5, 0xa6, 0x0d, 0x02, 0x52, 0xcc,
        0xb4, 0xe4, 0x92, 0x1a, 0x96, 0xfe, 0x5a, 0x69, 0xe7, 0x6d, 0xad, 0x48, 0xfd, 0x21, 0xa0,
        0x84, 0x5a, 0xd5, 0x7f, 0x88, 0x0b, 0x3e, 0x4a, 0x90, 0x7b, 0xc5, 0x03, 0x15, 0x18, 0x42,
        0xbb, 0x94, 0x9e, 0x1c, 0xba, 0x74, 0x39, 0xa6, 0x40, 0x9a, 0x34, 0xb8, 0x43, 0x6c, 0xb4,
        0x69, 0x21, 0x58, 0x3c,
    ];
    assert_eq!(edonr512(msg), long);
}
