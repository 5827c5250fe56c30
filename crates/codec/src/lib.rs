//! # ozfs-codec: the bytes-in, bytes-out algorithms of ZFS
//!
//! Checksums (fletcher2, fletcher4, SHA-256 in ZFS's word convention),
//! compression (lzjb, zle, gzip-N, lz4, zstd) and RAID-Z parity math
//! (P/Q/R generation and reconstruction over GF(2^8)).
//!
//! These are hot paths: no per-byte allocation, output buffers supplied by
//! the caller, loops over whole words. ZFS's own algorithms (fletcher, lzjb,
//! zle, RAID-Z) are implemented here and tested against golden vectors;
//! gzip/lz4/zstd use well-kept crates wrapped in ZFS's on-disk framing.
//!
//! Invariants: decompressors never write past the destination slice and
//! return an error (never panic) on malformed input; they must fill the
//! destination exactly (ZFS requires decompression to produce LSIZE bytes).

pub mod checksum;
pub mod compress;
pub mod raidz;

pub use ozfs_format::{Cksum, Error, Result};
