//! # ozfs-codec: the bytes-in, bytes-out algorithms of ZFS
//!
//! Checksums (fletcher2, fletcher4, SHA-256 in ZFS's word convention;
//! SHA-512/256, salted Skein-512, Edon-R 512 and BLAKE3 as OpenZFS 2.x
//! computes them),
//! compression (lzjb, zle, gzip-N, lz4, zstd), RAID-Z parity math
//! (P/Q/R generation and reconstruction over GF(2^8)), dRAID geometry
//! (the fixed permutation tables and where a block's columns live) and
//! native encryption (key unwrapping, per-block keys, AEAD; RustCrypto's
//! AES, GCM, CCM, HKDF and PBKDF2 crates do the cipher work).
//!
//! These are hot paths: no per-byte allocation, output buffers supplied by
//! the caller, loops over whole words. ZFS's own algorithms (fletcher, lzjb,
//! zle, RAID-Z, Edon-R, Skein's chaining over the Threefish cipher) are
//! implemented here and tested against golden vectors; gzip/lz4/zstd,
//! SHA-2, Threefish and BLAKE3 use well-kept crates wrapped in ZFS's
//! on-disk framing.
//!
//! Invariants: decompressors never write past the destination slice and
//! return an error (never panic) on malformed input; they must fill the
//! destination exactly (ZFS requires decompression to produce LSIZE bytes).

pub mod checksum;
pub mod compress;
pub mod crypt;
pub mod draid;
pub mod edonr;
pub mod raidz;
pub mod skein;

pub use ozfs_format::{Cksum, Error, Result};
