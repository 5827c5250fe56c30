//! Skein-512 in MAC mode, as ZFS's `skein` checksum (enum 12) uses it.
//!
//! Skein (Ferguson, Lucks, Schneier et al., SHA-3 finalist, version 1.3)
//! is a chain of UBI ("unique block iteration") calls over the Threefish-512
//! tweakable block cipher. The block cipher comes from RustCrypto's
//! `threefish` crate; this module only chains it:
//!
//! * `UBI(G, M, type)`: `M` is cut into 64-byte blocks, the last one padded
//!   with zeros (an empty `M` is one zero block). Each block `B` (eight
//!   little-endian words) turns the chaining value into
//!   `G' = Threefish512(key = G, tweak = T, B) XOR B`, where the tweak is
//!   `T0` = bytes of `M` consumed so far, this block included (padding not
//!   counted), and `T1` = `type << 56`, plus bit 62 on the first block and
//!   bit 63 on the last.
//! * Keyed (MAC) hashing with output length `L` bits, as ZFS computes it
//!   with the pool's 32-byte checksum salt as the key:
//!   `K = UBI(0, key, 0)` (type Key), `G = UBI(K, C, 4)` with the 32-byte
//!   configuration block `C` = "SHA3" (bytes), version 1 (u16 LE), 0 (u16),
//!   `L` (u64 LE), tree parameters 0 (sequential), zeros; then
//!   `G = UBI(G, M, 48)` (type Msg) and the output
//!   `UBI(G, counter 0 as u64 LE, 63)` (type Out), taken as little-endian
//!   bytes and truncated to `L / 8` bytes.
//!
//! ZFS's checksum is the 32 output bytes (`L` = 256) copied into the four
//! checksum words in the writer's byte order (see [`crate::checksum`]).
//!
//! *Invariants:* no allocation: the message is consumed in place, one
//! 64-byte block at a time; the key schedule is the cipher's (per block,
//! as Skein requires).

use threefish::Threefish512;

/// Skein's UBI block types (the tweak's type field).
const TYPE_KEY: u64 = 0;
const TYPE_CFG: u64 = 4;
const TYPE_MSG: u64 = 48;
const TYPE_OUT: u64 = 63;

const FIRST: u64 = 1 << 62;
const FINAL: u64 = 1 << 63;

/// Little-endian words of a 64-byte block (zero-padded when shorter).
#[inline(always)]
fn block_words(b: &[u8]) -> [u64; 8] {
    let mut w = [0u64; 8];
    if b.len() == 64 {
        for (i, x) in w.iter_mut().enumerate() {
            let mut le = [0u8; 8];
            le.copy_from_slice(&b[8 * i..8 * i + 8]);
            *x = u64::from_le_bytes(le);
        }
    } else {
        let mut full = [0u8; 64];
        full[..b.len()].copy_from_slice(b);
        return block_words(&full);
    }
    w
}

/// One UBI call: chain `g` over `msg` with block type `ty`.
fn ubi(g: &mut [u64; 8], msg: &[u8], ty: u64) {
    let nblocks = msg.len().div_ceil(64).max(1);
    for i in 0..nblocks {
        let start = 64 * i;
        let end = (start + 64).min(msg.len());
        let block = block_words(&msg[start..end]);
        let mut t1 = ty << 56;
        if i == 0 {
            t1 |= FIRST;
        }
        if i + 1 == nblocks {
            t1 |= FINAL;
        }
        let cipher = Threefish512::new_with_tweak_u64(g, &[end as u64, t1]);
        let mut x = block;
        cipher.encrypt_block_u64(&mut x);
        for (gw, (xw, bw)) in g.iter_mut().zip(x.iter().zip(block.iter())) {
            *gw = xw ^ bw;
        }
    }
}

/// Skein-512 keyed with `key`, 256-bit output, over `data`.
pub fn skein512_256_mac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut g = [0u64; 8];
    if !key.is_empty() {
        ubi(&mut g, key, TYPE_KEY);
    }
    let mut cfg = [0u8; 32];
    cfg[0..4].copy_from_slice(b"SHA3");
    cfg[4..6].copy_from_slice(&1u16.to_le_bytes());
    cfg[8..16].copy_from_slice(&256u64.to_le_bytes());
    ubi(&mut g, &cfg, TYPE_CFG);
    ubi(&mut g, data, TYPE_MSG);
    ubi(&mut g, &0u64.to_le_bytes(), TYPE_OUT);
    let mut out = [0u8; 32];
    for (i, w) in g.iter().take(4).enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    out
}
