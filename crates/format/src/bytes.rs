//! Bounds-checked little helpers to read integers at offsets, in either byte order.
//!
//! Values are read in host order and byte-swapped when `swap` says the data
//! was written by a host of the other endianness. Offsets near `usize::MAX`
//! saturate and report truncation instead of overflowing.

use crate::error::{Error, Result};

/// Read a u64 at `off`, byteswapping if `swap`. Errors (never panics) if out of range.
pub fn u64_at(buf: &[u8], off: usize, swap: bool, what: &str) -> Result<u64> {
    let b = buf
        .get(off..off.saturating_add(8))
        .filter(|s| s.len() == 8)
        .ok_or_else(|| Error::truncated(what, off.saturating_add(8), buf.len()))?;
    let v = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
    Ok(if swap { v.swap_bytes() } else { v })
}

/// Read a u32 at `off` (see [`u64_at`]).
pub fn u32_at(buf: &[u8], off: usize, swap: bool, what: &str) -> Result<u32> {
    let b = buf
        .get(off..off.saturating_add(4))
        .filter(|s| s.len() == 4)
        .ok_or_else(|| Error::truncated(what, off.saturating_add(4), buf.len()))?;
    let v = u32::from_ne_bytes(b.try_into().expect("4 bytes"));
    Ok(if swap { v.swap_bytes() } else { v })
}

/// Read a u16 at `off` (see [`u64_at`]).
pub fn u16_at(buf: &[u8], off: usize, swap: bool, what: &str) -> Result<u16> {
    let b = buf
        .get(off..off.saturating_add(2))
        .filter(|s| s.len() == 2)
        .ok_or_else(|| Error::truncated(what, off.saturating_add(2), buf.len()))?;
    let v = u16::from_ne_bytes(b.try_into().expect("2 bytes"));
    Ok(if swap { v.swap_bytes() } else { v })
}

/// Read a byte at `off`.
pub fn u8_at(buf: &[u8], off: usize, what: &str) -> Result<u8> {
    buf.get(off)
        .copied()
        .ok_or_else(|| Error::truncated(what, off.saturating_add(1), buf.len()))
}

/// Borrow `len` bytes at `off`, or a truncation error.
pub fn slice_at<'a>(buf: &'a [u8], off: usize, len: usize, what: &str) -> Result<&'a [u8]> {
    buf.get(off..off.saturating_add(len))
        .filter(|s| s.len() == len)
        .ok_or_else(|| Error::truncated(what, off.saturating_add(len), buf.len()))
}

/// Whether this host is little-endian.
pub const HOST_LITTLE_ENDIAN: bool = cfg!(target_endian = "little");
