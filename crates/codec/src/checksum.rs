//! Block checksums. FORMAT.md §3.
//!
//! Every ZFS checksum is a 256-bit value, four `u64` words ([`Cksum`]), computed
//! over the *physical* block (after compression, before RAID-Z parity).
//!
//! * **fletcher2** reads the data as pairs of 64-bit words and keeps two running
//!   sums per lane (`a0 += w[2i]; a1 += w[2i+1]; b0 += a0; b1 += a1`), result
//!   `{a0, a1, b0, b1}`. Length must be a multiple of 16; a tail is ignored.
//! * **fletcher4** reads 32-bit words (zero-extended) and keeps four cascaded
//!   sums (`a += x; b += a; c += b; d += c`), result `{a, b, c, d}`. It is
//!   incremental: the state after one buffer seeds the next (send streams).
//! * **SHA-256** is the standard digest `D[0..32)`, stored as four words where
//!   word *i* is the big-endian integer of `D[8i..8i+8)`.
//!
//! * **sha512** (11) is SHA-512/256 (FIPS 180-4: SHA-512 with its own
//!   initial value, truncated to 32 bytes), unsalted.
//! * **skein** (12) is Skein-512 with 256-bit output in MAC mode keyed with
//!   the pool's checksum salt ([`crate::skein`]).
//! * **edonr** (13) is Edon-R 512 over the salt expanded to one block and
//!   then the data, truncated to 32 bytes ([`crate::edonr`]).
//! * **blake3** (14) is BLAKE3's keyed hash with the salt as the key.
//!
//! For these four OpenZFS copies the 32 digest bytes into the checksum
//! words as they lie in memory: word *i* is the integer of `D[8i..8i+8)`
//! in the *writer's* byte order (unlike SHA-256, which is big-endian
//! always). The block pointer records the writer's order, so with
//! `byteswap` (writer's order opposite to the host's) the words are read in
//! the other order; the values then compare equal to the BP's words.
//!
//! **The salt** ([`Salt`]): 32 bytes chosen at random when a pool is
//! created, kept in the MOS object directory under
//! `org.illumos:checksum_salt` (a ZAP entry of 32 one-byte integers). The
//! salted functions (skein, edonr, blake3) are keyed with it, so a block
//! cannot be verified without it: [`compute_salted`] with no salt refuses
//! them as unsupported, never as a mismatch. [`compute`] is
//! [`compute_salted`] without a salt.
//!
//! *Invariant:* every function that is not computed ([`supported`] false)
//! is an error naming it, so a reader can tell "cannot check" from
//! "checked and wrong" — and must never repair a copy it could not check.
//!
//! All arithmetic wraps modulo 2^64. `byteswap == true` means the data words
//! are stored in the byte order opposite to the host's (the block's `B` bit
//! differs from the host); each word is byteswapped before being summed, so the
//! result is directly comparable with the words stored in the block pointer.
//!
//! ## Throughput
//!
//! The naive fletcher4 loop is a serial dependency chain (`d` depends on `c`
//! which depends on `b`...), so it cannot be vectorised as written. We split the
//! word stream into [`F4_LANES`] interleaved lanes (lane *l* sees words
//! `l, l+L, l+2L, ...`), run an independent fletcher4 in each lane — the lane
//! loop over a fixed-size array vectorises — and then fold the lane states into
//! the exact serial result. The fold is a linear map with integer coefficients:
//! in the serial sum word *i* of *N* contributes with weight `C(v+k-1, k)` to
//! accumulator *k* where `v = N - i`, and in lane terms `v = L·u - l` with *u*
//! the lane-local position, so each serial weight is a cubic in *u* which we
//! express in the lane-local basis `{1, u, C(u+1,2), C(u+2,3)}`. The
//! coefficients are computed at compile time ([`F4_COEF`]). Because every step
//! is a ring operation, the identity holds modulo 2^64 as well, and the result
//! is bit-identical to the serial definition (tested against it).
//!
//! Continuing from a non-zero state (incremental use) composes a state with the
//! zero-seeded sum of the new buffer: after `N` more words,
//! `a' = a + A`, `b' = b + N·a + B`, `c' = c + N·b + C(N+1,2)·a + C`,
//! `d' = d + N·c + C(N+1,2)·b + C(N+2,3)·a + D`.

use ozfs_format::{Cksum, Error, Result};
use sha2::{Digest, Sha256, Sha512_256};

/// `true` when the data's words must be read big-endian (host order XOR byteswap).
#[inline]
fn read_be(byteswap: bool) -> bool {
    cfg!(target_endian = "big") != byteswap
}

// ---------------------------------------------------------------------------
// fletcher2

/// fletcher2 over `data` (len multiple of 16; any tail is ignored). `byteswap`: words are in the non-host order.
pub fn fletcher2(data: &[u8], byteswap: bool) -> Cksum {
    if read_be(byteswap) {
        fletcher2_impl::<true>(data)
    } else {
        fletcher2_impl::<false>(data)
    }
}

#[inline(always)]
fn rd64<const BE: bool>(b: &[u8]) -> u64 {
    let w: [u8; 8] = b.try_into().unwrap();
    if BE {
        u64::from_be_bytes(w)
    } else {
        u64::from_le_bytes(w)
    }
}

#[inline(always)]
fn rd32<const BE: bool>(b: &[u8]) -> u64 {
    let w: [u8; 4] = b.try_into().unwrap();
    if BE {
        u32::from_be_bytes(w) as u64
    } else {
        u32::from_le_bytes(w) as u64
    }
}

fn fletcher2_impl<const BE: bool>(data: &[u8]) -> Cksum {
    // Two sub-lanes per fletcher2 lane: sub-lane s of pair-stream sees pairs s, s+2, ...
    // For a two-accumulator fletcher, folding 2 sub-lanes is: A = a_0 + a_1,
    // B = 2·(b_0 + b_1) - a_1 (pair i contributes weight N - i; sub-lane weight is 2u - s).
    let mut a = [0u64; 4]; // [lane0 sub0, lane1 sub0, lane0 sub1, lane1 sub1]
    let mut b = [0u64; 4];
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        for k in 0..4 {
            a[k] = a[k].wrapping_add(rd64::<BE>(&c[8 * k..8 * k + 8]));
            b[k] = b[k].wrapping_add(a[k]);
        }
    }
    let mut a0 = a[0].wrapping_add(a[2]);
    let mut a1 = a[1].wrapping_add(a[3]);
    let mut b0 = b[0].wrapping_add(b[2]).wrapping_mul(2).wrapping_sub(a[2]);
    let mut b1 = b[1].wrapping_add(b[3]).wrapping_mul(2).wrapping_sub(a[3]);
    for c in chunks.remainder().chunks_exact(16) {
        a0 = a0.wrapping_add(rd64::<BE>(&c[0..8]));
        a1 = a1.wrapping_add(rd64::<BE>(&c[8..16]));
        b0 = b0.wrapping_add(a0);
        b1 = b1.wrapping_add(a1);
    }
    Cksum([a0, a1, b0, b1])
}

// ---------------------------------------------------------------------------
// fletcher4

/// Number of interleaved lanes used by the fletcher4 kernel.
pub const F4_LANES: usize = 8;

/// Value at `v` of the serial weight polynomial of accumulator `k`: C(v+k-1, k) (k=0 → 1).
const fn f4_weight(k: usize, v: i128) -> i128 {
    match k {
        0 => 1,
        1 => v,
        2 => v * (v + 1) / 2,
        _ => v * (v + 1) * (v + 2) / 6,
    }
}

/// `F4_COEF[l][k][j]`: coefficient of lane `l`'s accumulator `j` in the serial accumulator `k`.
const F4_COEF: [[[u64; 4]; 4]; F4_LANES] = f4_coefficients();

const fn f4_coefficients() -> [[[u64; 4]; 4]; F4_LANES] {
    let mut out = [[[0u64; 4]; 4]; F4_LANES];
    let lanes = F4_LANES as i128;
    let mut l = 0;
    while l < F4_LANES {
        let mut k = 0;
        while k < 4 {
            // f(u) = weight at v = L·u - l, sampled at u = 0..3.
            let f0 = f4_weight(k, -(l as i128));
            let f1 = f4_weight(k, lanes - l as i128);
            let f2 = f4_weight(k, 2 * lanes - l as i128);
            let f3 = f4_weight(k, 3 * lanes - l as i128);
            let (d1, d2, d3) = (f1 - f0, f2 - f1, f3 - f2);
            // Basis {1, u, C(u+1,2), C(u+2,3)} has first differences {0, 1, u+1, C(u+2,2)}.
            let c3 = (d3 - d2) - (d2 - d1);
            let c2 = (d2 - d1) - 2 * c3;
            let c1 = d1 - c2 - c3;
            let c0 = f0;
            out[l][k] = [c0 as u64, c1 as u64, c2 as u64, c3 as u64];
            k += 1;
        }
        l += 1;
    }
    out
}

/// fletcher4 over `data` (len multiple of 4; any tail is ignored).
pub fn fletcher4(data: &[u8], byteswap: bool) -> Cksum {
    let mut st = Cksum::default();
    fletcher4_incremental(&mut st, data, byteswap);
    st
}

/// Incremental fletcher4 (send streams): continue from `state`.
pub fn fletcher4_incremental(state: &mut Cksum, data: &[u8], byteswap: bool) {
    if read_be(byteswap) {
        fletcher4_impl::<true>(state, data)
    } else {
        fletcher4_impl::<false>(state, data)
    }
}

/// Lane-parallel fletcher4 without any CPU-specific code generation (for tests and benchmarks).
pub fn fletcher4_lanes(state: &mut Cksum, data: &[u8], byteswap: bool) {
    if read_be(byteswap) {
        f4_lanes::<true>(state, data)
    } else {
        f4_lanes::<false>(state, data)
    }
}

/// Reference (serial, one word at a time) fletcher4; used for tails and by tests.
pub fn fletcher4_scalar(state: &mut Cksum, data: &[u8], byteswap: bool) {
    if read_be(byteswap) {
        f4_serial::<true>(state, data)
    } else {
        f4_serial::<false>(state, data)
    }
}

#[inline(always)]
fn f4_serial<const BE: bool>(state: &mut Cksum, data: &[u8]) {
    let [mut a, mut b, mut c, mut d] = state.0;
    for w in data.chunks_exact(4) {
        a = a.wrapping_add(rd32::<BE>(w));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    state.0 = [a, b, c, d];
}

/// Low 64 bits of C(n+1, 2) and C(n+2, 3).
fn binom23(n: u64) -> (u64, u64) {
    let t = n as u128;
    let x = t * (t + 1) / 2; // exact: fits in u128
    let c2 = x as u64;
    let c3 = match x % 3 {
        0 => ((x / 3) as u64).wrapping_mul((t + 2) as u64),
        // Otherwise t ≡ 1 (mod 3) and 3 divides t + 2: (t + 2) / 3 = t / 3 + 1.
        _ => (x as u64).wrapping_mul((t / 3 + 1) as u64),
    };
    (c2, c3)
}

fn fletcher4_impl<const BE: bool>(state: &mut Cksum, data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if data.len() >= 1024 && std::arch::is_x86_feature_detected!("avx2") {
            let bulk = data.len() / F4_CHUNK * F4_CHUNK;
            // SAFETY: the CPU supports AVX2 (checked just above).
            let sums = unsafe { f4_lane_sums_avx2::<BE>(&data[..bulk]) };
            f4_fold(state, &sums, bulk);
            f4_serial::<BE>(state, &data[bulk..]);
            return;
        }
    }
    // Without wide vectors the plain serial loop (about one word per cycle) is the fastest.
    f4_serial::<BE>(state, data);
}

/// Bytes per iteration of the lane kernel.
const F4_CHUNK: usize = 4 * F4_LANES;

/// The lane kernel compiled with AVX2 enabled (4 u64 lanes per register).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn f4_lane_sums_avx2<const BE: bool>(data: &[u8]) -> [[u64; F4_LANES]; 4] {
    f4_lane_sums::<BE>(data)
}

/// Per-lane fletcher4 accumulators `[a, b, c, d]` over whole [`F4_CHUNK`]s of `data`.
#[inline(always)]
fn f4_lane_sums<const BE: bool>(data: &[u8]) -> [[u64; F4_LANES]; 4] {
    let mut a = [0u64; F4_LANES];
    let mut b = [0u64; F4_LANES];
    let mut c = [0u64; F4_LANES];
    let mut d = [0u64; F4_LANES];
    for ch in data.chunks_exact(F4_CHUNK) {
        for l in 0..F4_LANES {
            a[l] = a[l].wrapping_add(rd32::<BE>(&ch[4 * l..4 * l + 4]));
            b[l] = b[l].wrapping_add(a[l]);
            c[l] = c[l].wrapping_add(b[l]);
            d[l] = d[l].wrapping_add(c[l]);
        }
    }
    [a, b, c, d]
}

/// Fold lane accumulators covering `bulk` bytes into `state` (see the module docs).
fn f4_fold(state: &mut Cksum, sums: &[[u64; F4_LANES]; 4], bulk: usize) {
    // Zero-seeded serial sums of the bulk.
    let mut s = [0u64; 4];
    for (l, coef) in F4_COEF.iter().enumerate() {
        for (k, sk) in s.iter_mut().enumerate() {
            for (j, lane) in sums.iter().enumerate() {
                *sk = sk.wrapping_add(coef[k][j].wrapping_mul(lane[l]));
            }
        }
    }
    // Compose with the incoming state.
    let n = (bulk / 4) as u64;
    let (n2, n3) = binom23(n);
    let [a0, b0, c0, d0] = state.0;
    state.0 = [
        a0.wrapping_add(s[0]),
        b0.wrapping_add(n.wrapping_mul(a0)).wrapping_add(s[1]),
        c0.wrapping_add(n.wrapping_mul(b0))
            .wrapping_add(n2.wrapping_mul(a0))
            .wrapping_add(s[2]),
        d0.wrapping_add(n.wrapping_mul(c0))
            .wrapping_add(n2.wrapping_mul(b0))
            .wrapping_add(n3.wrapping_mul(a0))
            .wrapping_add(s[3]),
    ];
}

/// Lane-parallel fletcher4 path (see the module docs), bit-identical to the serial one.
fn f4_lanes<const BE: bool>(state: &mut Cksum, data: &[u8]) {
    let bulk = data.len() / F4_CHUNK * F4_CHUNK;
    let sums = f4_lane_sums::<BE>(&data[..bulk]);
    f4_fold(state, &sums, bulk);
    f4_serial::<BE>(state, &data[bulk..]);
}

// ---------------------------------------------------------------------------
// SHA-256

/// Convert a 32-byte digest to ZFS words (word i = big-endian integer of bytes 8i..8i+8).
pub fn digest_to_words(d: &[u8; 32]) -> Cksum {
    let mut w = [0u64; 4];
    for (i, x) in w.iter_mut().enumerate() {
        *x = u64::from_be_bytes(d[8 * i..8 * i + 8].try_into().unwrap());
    }
    Cksum(w)
}

/// SHA-256 with ZFS's word convention (word i = big-endian integer of digest bytes 8i..8i+8).
pub fn sha256(data: &[u8]) -> Cksum {
    let d: [u8; 32] = Sha256::digest(data).into();
    digest_to_words(&d)
}

/// A pool's checksum salt (MOS `org.illumos:checksum_salt`).
pub type Salt = [u8; 32];

/// The name of the MOS object-directory entry holding the salt.
pub const SALT_ENTRY: &str = "org.illumos:checksum_salt";

/// Convert 32 digest bytes to ZFS words as OpenZFS stores them for the
/// newer checksums: copied in memory, so each word is in the writer's byte
/// order (big-endian when `byteswap` differs from a big-endian host).
pub fn digest_to_words_native(d: &[u8; 32], byteswap: bool) -> Cksum {
    let be = read_be(byteswap);
    let mut w = [0u64; 4];
    for (i, x) in w.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[8 * i..8 * i + 8]);
        *x = if be {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        };
    }
    Cksum(w)
}

/// SHA-512/256 (ZFS "sha512") with ZFS's word convention for it.
pub fn sha512(data: &[u8], byteswap: bool) -> Cksum {
    let d: [u8; 32] = Sha512_256::digest(data).into();
    digest_to_words_native(&d, byteswap)
}

/// Salted Skein-512-256 (ZFS "skein").
pub fn skein(salt: &Salt, data: &[u8], byteswap: bool) -> Cksum {
    digest_to_words_native(&crate::skein::skein512_256_mac(salt, data), byteswap)
}

/// Salted Edon-R 512 truncated to 256 bits (ZFS "edonr").
pub fn edonr(salt: &Salt, data: &[u8], byteswap: bool) -> Cksum {
    digest_to_words_native(&crate::edonr::zfs_edonr(salt, data), byteswap)
}

/// Keyed BLAKE3 (ZFS "blake3").
pub fn blake3(salt: &Salt, data: &[u8], byteswap: bool) -> Cksum {
    let h = ::blake3::Hasher::new_keyed(salt).update(data).finalize();
    digest_to_words_native(h.as_bytes(), byteswap)
}

/// Whether checksum function `kind` is keyed with the pool's salt.
pub fn salted(kind: u8) -> bool {
    matches!(kind, 12..=14)
}

/// Whether ozfs computes checksum function `kind` (given the salt when
/// [`salted`]).
pub fn supported(kind: u8) -> bool {
    (2..=14).contains(&kind)
}

/// Whether checksum `kind` is strong enough for dedup (`ZCHECKSUM_FLAG_DEDUP`:
/// sha256, sha512, skein, blake3). A weaker one (fletcher, edon-r) that
/// is truncated to two words in an encrypted block is folded first.
pub fn dedup_capable(kind: u8) -> bool {
    matches!(
        kind,
        ozfs_format::types::cksum::SHA256
            | ozfs_format::types::cksum::SHA512
            | ozfs_format::types::cksum::SKEIN
            | ozfs_format::types::cksum::BLAKE3
    )
}

/// Why a block with checksum function `kind` cannot be verified, or
/// `None` when it can (`have_salt`: the pool's salt is known).
pub fn unsupported_reason(kind: u8, have_salt: bool) -> Option<Error> {
    let what = || match name(kind) {
        "unknown" => format!("block checksum function {kind}"),
        n => format!("block checksum {n}"),
    };
    if !supported(kind) {
        return Some(Error::unsupported(what(), "ozfs does not compute it"));
    }
    if salted(kind) && !have_salt {
        return Some(Error::unsupported(
            what(),
            format!("it is keyed with the pool's checksum salt ({SALT_ENTRY}), which is not known"),
        ));
    }
    None
}

/// Compute checksum function `kind` (enum zio_checksum) over `data`, without
/// a salt: the salted functions (skein, edonr, blake3) are refused.
pub fn compute(kind: u8, data: &[u8], byteswap: bool) -> Result<Cksum> {
    compute_salted(kind, data, byteswap, None)
}

/// Compute checksum function `kind` (enum zio_checksum) over `data`.
/// off/noparity (2, 10) yield zeros; label/gang_header (3, 4) = sha256;
/// zilog (5) = fletcher2; zilog2 (9) = fletcher4; skein, edonr and blake3
/// need `salt`. Unknown functions, and salted ones without a salt, are
/// [`Error::Unsupported`] naming the function.
pub fn compute_salted(kind: u8, data: &[u8], byteswap: bool, salt: Option<&Salt>) -> Result<Cksum> {
    Ok(match (kind, salt) {
        (2 | 10, _) => Cksum::default(),
        (3 | 4 | 8, _) => sha256(data),
        (5 | 6, _) => fletcher2(data, byteswap),
        (7 | 9, _) => fletcher4(data, byteswap),
        (11, _) => sha512(data, byteswap),
        (12, Some(s)) => skein(s, data, byteswap),
        (13, Some(s)) => edonr(s, data, byteswap),
        (14, Some(s)) => blake3(s, data, byteswap),
        _ => {
            return Err(unsupported_reason(kind, salt.is_some()).unwrap_or_else(|| {
                Error::unsupported(format!("block checksum function {kind}"), "not computed")
            }))
        }
    })
}

/// Name of checksum function `kind` as ZFS prints it.
pub fn name(kind: u8) -> &'static str {
    match kind {
        0 => "inherit",
        1 => "on",
        2 => "off",
        3 => "label",
        4 => "gang_header",
        5 => "zilog",
        6 => "fletcher2",
        7 => "fletcher4",
        8 => "sha256",
        9 => "zilog2",
        10 => "noparity",
        11 => "sha512",
        12 => "skein",
        13 => "edonr",
        14 => "blake3",
        _ => "unknown",
    }
}
