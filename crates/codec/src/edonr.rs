//! Edon-R 512, as ZFS's `edonr` checksum (enum 13) uses it.
//!
//! Edon-R (Gligoroski, Ødegård, Mihova, Knapskog, Kholosha, Drápal,
//! Jensen, El-Hadedy: SHA-3 round-1 candidate, with the tweak of its
//! second version) is a wide-pipe Merkle–Damgård hash built from
//! quasigroup operations over 64-bit words. No maintained Rust crate has
//! it, so it is written here from the specification and checked against
//! blocks OpenZFS wrote (tests/checksum_golden.rs).
//!
//! * State: a double pipe `P` of 16 words (initially `0x8081…87, …,
//!   0xf8f9…ff`: the bytes 0x80..=0xff read big-endian in 8-byte groups).
//!   Message blocks are 128 bytes, read as 16 little-endian words
//!   `M = (M0, M1)` of 8 words each.
//! * The quasigroup `Q(X, Y) = E(L1(X), L2(Y))` on 8-word vectors: `L1` and
//!   `L2` are linear-ish mixes (sums and left rotations, one constant
//!   each: `0xaaaa…` and its complement), `E` combines them with XORs and
//!   one addition per output word ([`ls1`], [`ls2`], [`qef`]).
//! * Compression of one block, with `rev` reversing the word order:
//!   `p = Q(rev M1, M0)`, `q = Q(p, M1)`; `p = Q(P_hi, p)`, `q = Q(p, q)`;
//!   `p = Q(p, P_lo)`, `q = Q(q, p)`; `p = Q(rev M0, p)`, `q = Q(p, q)`;
//!   then `P_lo ^= M1 ^ p` and `P_hi ^= M0 ^ q`.
//! * Padding: a 1 bit (the byte 0x80 for byte-aligned input), zeros, and
//!   the message length in bits as a little-endian u64 in the last 8 bytes
//!   of the block; when fewer than 9 bytes are left, a second block.
//! * Digest: `P_hi` as 64 little-endian bytes.
//!
//! ZFS salts it: the 32-byte pool salt `s` is expanded into one full
//! block `H(s)[0..64) || H(H(s))[0..64)`, hashed first; the block's data
//! follows in the same hash, and the checksum is the digest's first 32
//! bytes (see [`zfs_edonr`]).
//!
//! *Invariants:* no allocation; every input length is accepted.

/// Bytes per Edon-R 512 block.
pub const BLOCK: usize = 128;

const IV: [u64; 16] = {
    let mut iv = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        let b = 0x80 + 8 * i as u64;
        let mut w = 0u64;
        let mut k = 0;
        while k < 8 {
            w = (w << 8) | (b + k);
            k += 1;
        }
        iv[i] = w;
        i += 1;
    }
    iv
};

const C1: u64 = 0xaaaa_aaaa_aaaa_aaaa;

/// The first mix `L1` of the quasigroup operation.
#[inline(always)]
fn ls1(x: &[u64; 8]) -> [u64; 8] {
    let a = x[0].wrapping_add(x[4]);
    let b = x[1].wrapping_add(x[7]);
    let ab = a.wrapping_add(b);
    let c = x[2].wrapping_add(x[3]);
    let d = x[5].wrapping_add(x[6]);
    let cd = c.wrapping_add(d);
    [
        C1.wrapping_add(ab).wrapping_add(x[2]),
        ab.wrapping_add(x[3]).rotate_left(5),
        ab.wrapping_add(x[6]).rotate_left(15),
        cd.wrapping_add(x[7]).rotate_left(22),
        cd.wrapping_add(x[1]).rotate_left(31),
        a.wrapping_add(c).wrapping_add(x[5]).rotate_left(40),
        b.wrapping_add(d).wrapping_add(x[0]).rotate_left(50),
        cd.wrapping_add(x[4]).rotate_left(59),
    ]
}

/// The second mix `L2` of the quasigroup operation.
#[inline(always)]
fn ls2(y: &[u64; 8]) -> [u64; 8] {
    let a = y[0].wrapping_add(y[1]);
    let b = y[2].wrapping_add(y[5]);
    let c = y[3].wrapping_add(y[4]);
    let d = y[6].wrapping_add(y[7]);
    let ab = a.wrapping_add(b);
    let ac = a.wrapping_add(c);
    let cd = c.wrapping_add(d);
    let bd = b.wrapping_add(d);
    [
        (!C1).wrapping_add(ab).wrapping_add(y[7]),
        ac.wrapping_add(y[6]).rotate_left(10),
        ab.wrapping_add(y[3]).rotate_left(19),
        cd.wrapping_add(y[2]).rotate_left(29),
        ac.wrapping_add(y[5]).rotate_left(36),
        bd.wrapping_add(y[4]).rotate_left(44),
        bd.wrapping_add(y[1]).rotate_left(48),
        cd.wrapping_add(y[0]).rotate_left(55),
    ]
}

/// The combining step `E` of the quasigroup operation.
#[inline(always)]
fn qef(s: &[u64; 8], t: &[u64; 8]) -> [u64; 8] {
    [
        (s[0] ^ s[1] ^ s[4]).wrapping_add(t[0] ^ t[1] ^ t[5]),
        (s[0] ^ s[4] ^ s[7]).wrapping_add(t[2] ^ t[6] ^ t[7]),
        (s[1] ^ s[6] ^ s[7]).wrapping_add(t[0] ^ t[1] ^ t[3]),
        (s[2] ^ s[3] ^ s[4]).wrapping_add(t[0] ^ t[3] ^ t[4]),
        (s[0] ^ s[1] ^ s[7]).wrapping_add(t[1] ^ t[2] ^ t[5]),
        (s[3] ^ s[5] ^ s[6]).wrapping_add(t[3] ^ t[4] ^ t[6]),
        (s[2] ^ s[5] ^ s[6]).wrapping_add(t[2] ^ t[5] ^ t[7]),
        (s[2] ^ s[3] ^ s[5]).wrapping_add(t[4] ^ t[6] ^ t[7]),
    ]
}

/// The quasigroup operation `Q(x, y)`.
#[inline(always)]
fn q(x: &[u64; 8], y: &[u64; 8]) -> [u64; 8] {
    qef(&ls1(x), &ls2(y))
}

#[inline(always)]
fn rev(x: &[u64; 8]) -> [u64; 8] {
    let mut r = *x;
    r.reverse();
    r
}

/// Compress one 128-byte block into the double pipe.
fn compress(pipe: &mut [u64; 16], block: &[u8]) {
    let mut m0 = [0u64; 8];
    let mut m1 = [0u64; 8];
    for i in 0..8 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&block[8 * i..8 * i + 8]);
        m0[i] = u64::from_le_bytes(w);
        w.copy_from_slice(&block[64 + 8 * i..64 + 8 * i + 8]);
        m1[i] = u64::from_le_bytes(w);
    }
    let mut lo = [0u64; 8];
    let mut hi = [0u64; 8];
    lo.copy_from_slice(&pipe[..8]);
    hi.copy_from_slice(&pipe[8..]);

    let mut p = q(&rev(&m1), &m0);
    let mut r = q(&p, &m1);
    p = q(&hi, &p);
    r = q(&p, &r);
    p = q(&p, &lo);
    r = q(&r, &p);
    p = q(&rev(&m0), &p);
    r = q(&p, &r);

    for i in 0..8 {
        pipe[i] ^= m1[i] ^ p[i];
        pipe[8 + i] ^= m0[i] ^ r[i];
    }
}

/// An Edon-R 512 computation in progress (byte-oriented input).
#[derive(Clone)]
pub struct EdonR512 {
    pipe: [u64; 16],
    buf: [u8; BLOCK],
    buffered: usize,
    /// Bytes consumed so far.
    len: u64,
}

impl Default for EdonR512 {
    fn default() -> Self {
        Self::new()
    }
}

impl EdonR512 {
    pub fn new() -> Self {
        EdonR512 {
            pipe: IV,
            buf: [0; BLOCK],
            buffered: 0,
            len: 0,
        }
    }

    /// Absorb `data`.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len = self.len.wrapping_add(data.len() as u64);
        if self.buffered > 0 {
            let take = (BLOCK - self.buffered).min(data.len());
            self.buf[self.buffered..self.buffered + take].copy_from_slice(&data[..take]);
            self.buffered += take;
            data = &data[take..];
            if self.buffered < BLOCK {
                return;
            }
            let block = self.buf;
            compress(&mut self.pipe, &block);
            self.buffered = 0;
        }
        let mut blocks = data.chunks_exact(BLOCK);
        for b in &mut blocks {
            compress(&mut self.pipe, b);
        }
        let rest = blocks.remainder();
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// Pad, finish and return the 64-byte digest.
    pub fn finalize(mut self) -> [u8; 64] {
        let bits = self.len.wrapping_mul(8);
        let mut tail = [0u8; 2 * BLOCK];
        tail[..self.buffered].copy_from_slice(&self.buf[..self.buffered]);
        tail[self.buffered] = 0x80;
        let n = if self.buffered < BLOCK - 8 {
            BLOCK
        } else {
            2 * BLOCK
        };
        tail[n - 8..n].copy_from_slice(&bits.to_le_bytes());
        for b in tail[..n].chunks_exact(BLOCK) {
            compress(&mut self.pipe, b);
        }
        let mut out = [0u8; 64];
        for (i, w) in self.pipe[8..].iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Edon-R 512 of `data`.
pub fn edonr512(data: &[u8]) -> [u8; 64] {
    let mut h = EdonR512::new();
    h.update(data);
    h.finalize()
}

/// The state ZFS starts every salted Edon-R checksum from: the salt
/// expanded to one block (`H(salt) || H(H(salt))`) already absorbed.
pub fn zfs_edonr_template(salt: &[u8; 32]) -> EdonR512 {
    let mut block = [0u8; BLOCK];
    let h1 = edonr512(salt);
    block[..64].copy_from_slice(&h1);
    let h2 = edonr512(&h1);
    block[64..].copy_from_slice(&h2);
    let mut h = EdonR512::new();
    h.update(&block);
    h
}

/// ZFS's salted Edon-R over `data`: the first 32 digest bytes.
pub fn zfs_edonr(salt: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut h = zfs_edonr_template(salt);
    h.update(data);
    let d = h.finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&d[..32]);
    out
}
