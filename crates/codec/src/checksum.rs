//! Block checksums. FORMAT.md §3.

use ozfs_format::{Cksum, Result};

/// fletcher2 over `data` (len multiple of 16; any tail is ignored). `byteswap`: words are in the non-host order.
pub fn fletcher2(_data: &[u8], _byteswap: bool) -> Cksum {
    unimplemented!()
}

/// fletcher4 over `data` (len multiple of 4; any tail is ignored).
pub fn fletcher4(_data: &[u8], _byteswap: bool) -> Cksum {
    unimplemented!()
}

/// Incremental fletcher4 (send streams): continue from `state`.
pub fn fletcher4_incremental(_state: &mut Cksum, _data: &[u8], _byteswap: bool) {
    unimplemented!()
}

/// SHA-256 with ZFS's word convention (word i = big-endian integer of digest bytes 8i..8i+8).
pub fn sha256(_data: &[u8]) -> Cksum {
    unimplemented!()
}

/// Compute checksum function `kind` (enum zio_checksum) over `data`.
/// off/noparity (2, 10) yield zeros; label/gang_header (3, 4) = sha256; zilog (5) = fletcher2; zilog2 (9) = fletcher4;
/// unknown or unimplemented (sha512/skein/edonr/blake3) => Error::Unsupported.
pub fn compute(_kind: u8, _data: &[u8], _byteswap: bool) -> Result<Cksum> {
    unimplemented!()
}
