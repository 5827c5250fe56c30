//! Block compression formats. FORMAT.md §2.9–2.10.

use ozfs_format::Result;

/// Decompress `src` (a physical block, possibly zero-padded past the compressed stream) into exactly
/// `dst.len()` bytes using compression function `kind` (enum zio_compress: 3 lzjb, 5..=13 gzip-1..9,
/// 14 zle, 15 lz4 (BE u32 length header), 16 zstd (8-byte header, magicless frame)).
/// `off` (2) / inherit / empty copy src. Errors on malformed input or output size mismatch; never panics.
pub fn decompress(_kind: u8, _src: &[u8], _dst: &mut [u8]) -> Result<()> {
    unimplemented!()
}

/// Compress `src` with function `kind` into `dst` (capacity = the most we accept, e.g. lsize - lsize/8).
/// Returns Some(compressed length) or None if it did not fit. Supports lzjb, gzip-1..9, zle, lz4.
pub fn compress(_kind: u8, _src: &[u8], _dst: &mut [u8]) -> Result<Option<usize>> {
    unimplemented!()
}

/// LZJB decompression (ZFS's own algorithm).
pub fn lzjb_decompress(_src: &[u8], _dst: &mut [u8]) -> Result<()> {
    unimplemented!()
}
/// LZJB compression; None if output would not fit in `dst`.
pub fn lzjb_compress(_src: &[u8], _dst: &mut [u8]) -> Option<usize> {
    unimplemented!()
}
/// ZLE (n = 64) decompression.
pub fn zle_decompress(_src: &[u8], _dst: &mut [u8]) -> Result<()> {
    unimplemented!()
}
/// ZLE compression; None if output would not fit.
pub fn zle_compress(_src: &[u8], _dst: &mut [u8]) -> Option<usize> {
    unimplemented!()
}
