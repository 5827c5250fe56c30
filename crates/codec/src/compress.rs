//! Block compression formats. FORMAT.md §2.9–2.10.
//!
//! A compressed block occupies the first *c* bytes of its PSIZE buffer, the
//! rest is zero padding. Decompression must yield exactly LSIZE bytes, so every
//! decompressor here writes into a caller-supplied `dst` whose length *is* the
//! logical size, and fails unless it is filled exactly.
//!
//! * **lzjb** (ZFS's own LZRW-style coder): groups of one copy-map byte and
//!   eight items; a clear bit is a literal byte, a set bit a 2-byte
//!   back-reference (6-bit length − 3, 10-bit distance). The stream length is not
//!   stored: decoding stops when `dst` is full. The encoder reproduces the
//!   OpenZFS one (1024-entry hash table of 16-bit positions, the last 66 input
//!   bytes always literals, give up at `d_len − 17`), assuming the source buffer
//!   starts 1 KiB-aligned as kernel buffers do.
//! * **zle** (zero-length encoding, n = 64): control byte `c`; `c < 64` means
//!   `c + 1` literal bytes follow, otherwise `c − 63` zero bytes.
//! * **gzip-N**: a zlib (RFC 1950) stream, trailing zeros ignored.
//! * **lz4**: big-endian `u32` payload length, then one raw LZ4 block.
//! * **zstd**: big-endian `u32` frame length, big-endian `u32` level/version,
//!   then a zstd frame *without* its 4-byte magic.
//!
//! Invariants: decompressors never panic on malformed input, never write past
//! `dst`, and return `Err` unless they produce exactly `dst.len()` bytes.
//! Compressors return `None` when the output would not fit in `dst` (the
//! caller then stores the block uncompressed).

use ozfs_format::{Error, Result};
use std::cell::RefCell;

/// `enum zio_compress` values.
pub const ZIO_COMPRESS_INHERIT: u8 = 0;
pub const ZIO_COMPRESS_ON: u8 = 1;
pub const ZIO_COMPRESS_OFF: u8 = 2;
pub const ZIO_COMPRESS_LZJB: u8 = 3;
pub const ZIO_COMPRESS_EMPTY: u8 = 4;
pub const ZIO_COMPRESS_GZIP_1: u8 = 5;
pub const ZIO_COMPRESS_GZIP_9: u8 = 13;
pub const ZIO_COMPRESS_ZLE: u8 = 14;
pub const ZIO_COMPRESS_LZ4: u8 = 15;
pub const ZIO_COMPRESS_ZSTD: u8 = 16;

/// Name of compression function `kind` as ZFS prints it.
pub fn name(kind: u8) -> &'static str {
    match kind {
        0 => "inherit",
        1 => "on",
        2 => "off",
        3 => "lzjb",
        4 => "empty",
        5 => "gzip-1",
        6 => "gzip-2",
        7 => "gzip-3",
        8 => "gzip-4",
        9 => "gzip-5",
        10 => "gzip-6",
        11 => "gzip-7",
        12 => "gzip-8",
        13 => "gzip-9",
        14 => "zle",
        15 => "lz4",
        16 => "zstd",
        ozfs_format::types::comp::EXTERNAL => "external",
        _ => "unknown",
    }
}

/// Decompress `src` (a physical block, possibly zero-padded past the compressed stream) into exactly
/// `dst.len()` bytes using compression function `kind` (enum zio_compress: 3 lzjb, 5..=13 gzip-1..9,
/// 14 zle, 15 lz4 (BE u32 length header), 16 zstd (8-byte header, magicless frame)).
/// `off` (2) / inherit / empty copy src. Errors on malformed input or output size mismatch; never panics.
pub fn decompress(kind: u8, src: &[u8], dst: &mut [u8]) -> Result<()> {
    match kind {
        ZIO_COMPRESS_INHERIT | ZIO_COMPRESS_OFF | ZIO_COMPRESS_EMPTY => {
            if src.len() < dst.len() {
                return Err(Error::corrupt(
                    "uncompressed block",
                    format!("source has {} bytes, need {}", src.len(), dst.len()),
                ));
            }
            dst.copy_from_slice(&src[..dst.len()]);
            Ok(())
        }
        ZIO_COMPRESS_LZJB => lzjb_decompress(src, dst),
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => gzip_decompress(src, dst),
        ZIO_COMPRESS_ZLE => zle_decompress(src, dst),
        ZIO_COMPRESS_LZ4 => lz4_decompress(src, dst),
        ZIO_COMPRESS_ZSTD => zstd_decompress(src, dst),
        _ => Err(Error::unsupported(
            "decompress",
            format!("compression function {kind} ({})", name(kind)),
        )),
    }
}

/// Compress `src` with function `kind` into `dst` (capacity = the most we accept, e.g. lsize - lsize/8).
/// Returns Some(compressed length) or None if it did not fit. Supports lzjb, gzip-1..9, zle, lz4, zstd.
pub fn compress(kind: u8, src: &[u8], dst: &mut [u8]) -> Result<Option<usize>> {
    Ok(match kind {
        ZIO_COMPRESS_OFF => {
            if src.len() <= dst.len() {
                dst[..src.len()].copy_from_slice(src);
                Some(src.len())
            } else {
                None
            }
        }
        ZIO_COMPRESS_LZJB => lzjb_compress(src, dst),
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => {
            gzip_compress(src, dst, (kind - ZIO_COMPRESS_GZIP_1 + 1) as u32)
        }
        ZIO_COMPRESS_ZLE => zle_compress(src, dst),
        ZIO_COMPRESS_LZ4 => lz4_compress(src, dst),
        ZIO_COMPRESS_ZSTD => zstd_compress(src, dst, ZSTD_DEFAULT_LEVEL),
        _ => {
            return Err(Error::unsupported(
                "compress",
                format!("compression function {kind} ({})", name(kind)),
            ))
        }
    })
}

// ---------------------------------------------------------------------------
// LZJB

const NBBY: usize = 8;
const MATCH_BITS: usize = 6;
const MATCH_MIN: usize = 3;
const MATCH_MAX: usize = (1 << MATCH_BITS) + (MATCH_MIN - 1); // 66
const OFFSET_MASK: usize = (1 << (16 - MATCH_BITS)) - 1; // 0x3ff
const LEMPEL_SIZE: usize = 1024;

fn lzjb_err(detail: &str) -> Error {
    Error::corrupt("lzjb stream", detail)
}

/// LZJB decompression (ZFS's own algorithm).
pub fn lzjb_decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (mut s, mut d) = (0usize, 0usize);
    let dlen = dst.len();
    while d < dlen {
        let map = *src.get(s).ok_or_else(|| lzjb_err("source exhausted"))?;
        s += 1;
        for bit in 0..NBBY {
            if d >= dlen {
                break;
            }
            if map & (1 << bit) == 0 {
                dst[d] = *src.get(s).ok_or_else(|| lzjb_err("source exhausted"))?;
                s += 1;
                d += 1;
            } else {
                let (b0, b1) = match src.get(s..s + 2) {
                    Some(b) => (b[0] as usize, b[1] as usize),
                    None => return Err(lzjb_err("source exhausted in back-reference")),
                };
                s += 2;
                let mut mlen = (b0 >> (NBBY - MATCH_BITS)) + MATCH_MIN;
                let off = ((b0 << NBBY) | b1) & OFFSET_MASK;
                if off == 0 || off > d {
                    return Err(lzjb_err("back-reference before start of output"));
                }
                mlen = mlen.min(dlen - d);
                let from = d - off;
                if off >= mlen {
                    dst.copy_within(from..from + mlen, d);
                } else {
                    for i in 0..mlen {
                        dst[d + i] = dst[from + i];
                    }
                }
                d += mlen;
            }
        }
    }
    Ok(())
}

/// LZJB compression; None if output would not fit in `dst`.
pub fn lzjb_compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let slen = src.len();
    let dlen = dst.len();
    let mut lempel = [0u16; LEMPEL_SIZE];
    let (mut s, mut d) = (0usize, 0usize);
    let mut map_pos = 0usize;
    let mut mask: u32 = 1 << (NBBY - 1);
    while s < slen {
        mask <<= 1;
        if mask == 1 << NBBY {
            // Need room for the map byte and up to 16 bytes of items, with one spare.
            if d + 1 + 2 * NBBY >= dlen {
                return None;
            }
            mask = 1;
            map_pos = d;
            dst[d] = 0;
            d += 1;
        }
        if s + MATCH_MAX > slen {
            dst[d] = src[s];
            d += 1;
            s += 1;
            continue;
        }
        let mut h = ((src[s] as usize) << 16) + ((src[s + 1] as usize) << 8) + src[s + 2] as usize;
        h += h >> 9;
        h += h >> 5;
        let slot = &mut lempel[h & (LEMPEL_SIZE - 1)];
        let off = (s.wrapping_sub(*slot as usize)) & OFFSET_MASK;
        *slot = s as u16;
        if off != 0 && off <= s && src[s..s + 3] == src[s - off..s - off + 3] {
            let c = s - off;
            let mut mlen = MATCH_MIN;
            while mlen < MATCH_MAX && src[s + mlen] == src[c + mlen] {
                mlen += 1;
            }
            dst[map_pos] |= mask as u8;
            dst[d] = (((mlen - MATCH_MIN) << (NBBY - MATCH_BITS)) | (off >> NBBY)) as u8;
            dst[d + 1] = off as u8;
            d += 2;
            s += mlen;
        } else {
            dst[d] = src[s];
            d += 1;
            s += 1;
        }
    }
    Some(d)
}

// ---------------------------------------------------------------------------
// ZLE

const ZLE_N: usize = 64;

fn zle_err(detail: &str) -> Error {
    Error::corrupt("zle stream", detail)
}

/// ZLE (n = 64) decompression.
pub fn zle_decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (mut s, mut d) = (0usize, 0usize);
    let dlen = dst.len();
    while d < dlen {
        let c = *src.get(s).ok_or_else(|| zle_err("source exhausted"))? as usize;
        s += 1;
        let len = c + 1;
        if len <= ZLE_N {
            let lit = src
                .get(s..s + len)
                .ok_or_else(|| zle_err("literal run past end of source"))?;
            let out = dst
                .get_mut(d..d + len)
                .ok_or_else(|| zle_err("literal run past end of output"))?;
            out.copy_from_slice(lit);
            s += len;
            d += len;
        } else {
            let z = len - ZLE_N;
            let out = dst
                .get_mut(d..d + z)
                .ok_or_else(|| zle_err("zero run past end of output"))?;
            out.fill(0);
            d += z;
        }
    }
    Ok(())
}

/// ZLE compression; None if output would not fit.
pub fn zle_compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let slen = src.len();
    let dlen = dst.len();
    let (mut s, mut d) = (0usize, 0usize);
    while s < slen {
        // Room for the control byte plus at least one more byte (OpenZFS: dst < d_end - 1).
        if d + 1 >= dlen {
            return None;
        }
        let first = s;
        let ctl = d;
        d += 1;
        if src[s] == 0 {
            let last = (s + (256 - ZLE_N)).min(slen);
            while s < last && src[s] == 0 {
                s += 1;
            }
            dst[ctl] = (s - first - 1 + ZLE_N) as u8;
        } else {
            if dlen - d < ZLE_N {
                return None;
            }
            let last = (s + ZLE_N).min(slen);
            // Literal run ends where two consecutive zero bytes start.
            while s + 1 < last && (src[s] | src[s + 1]) != 0 {
                s += 1;
            }
            if src[s] != 0 {
                s += 1;
            }
            let n = s - first;
            dst[d..d + n].copy_from_slice(&src[first..s]);
            d += n;
            dst[ctl] = (n - 1) as u8;
        }
    }
    Some(d)
}

// ---------------------------------------------------------------------------
// GZIP (zlib stream)

/// zlib-format (gzip-N) decompression; trailing bytes after the stream end are ignored.
pub fn gzip_decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    use flate2::{Decompress, FlushDecompress, Status};
    let mut z = Decompress::new(true);
    loop {
        let in_pos = z.total_in() as usize;
        let out_pos = z.total_out() as usize;
        let st = z
            .decompress(&src[in_pos..], &mut dst[out_pos..], FlushDecompress::Finish)
            .map_err(|e| Error::corrupt("gzip stream", e.to_string()))?;
        let progressed = z.total_in() as usize != in_pos || z.total_out() as usize != out_pos;
        match st {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError if progressed => continue,
            _ => {
                return Err(Error::corrupt(
                    "gzip stream",
                    if z.total_out() as usize >= dst.len() {
                        "output larger than logical size"
                    } else {
                        "truncated stream"
                    },
                ))
            }
        }
    }
    if z.total_out() as usize != dst.len() {
        return Err(Error::corrupt(
            "gzip stream",
            format!(
                "decompressed to {} bytes, expected {}",
                z.total_out(),
                dst.len()
            ),
        ));
    }
    Ok(())
}

/// zlib-format compression at `level` (1..=9); None if it does not fit in `dst`.
pub fn gzip_compress(src: &[u8], dst: &mut [u8], level: u32) -> Option<usize> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    let mut z = Compress::new(Compression::new(level.clamp(1, 9)), true);
    loop {
        let in_pos = z.total_in() as usize;
        let out_pos = z.total_out() as usize;
        let st = z
            .compress(&src[in_pos..], &mut dst[out_pos..], FlushCompress::Finish)
            .ok()?;
        let progressed = z.total_in() as usize != in_pos || z.total_out() as usize != out_pos;
        match st {
            Status::StreamEnd => return Some(z.total_out() as usize),
            _ if progressed && (z.total_out() as usize) < dst.len() => continue,
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------------------
// LZ4

fn be32(b: &[u8]) -> Option<usize> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?) as usize)
}

/// ZFS lz4 decompression: BE u32 payload length, raw LZ4 block; must yield exactly `dst.len()` bytes.
pub fn lz4_decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let n = be32(src).ok_or_else(|| Error::truncated("lz4 header", 4, src.len()))?;
    let payload = src
        .get(4..4usize.saturating_add(n))
        .ok_or_else(|| Error::corrupt("lz4 block", format!("payload length {n} exceeds block")))?;
    let got = lz4_flex::block::decompress_into(payload, dst)
        .map_err(|e| Error::corrupt("lz4 block", e.to_string()))?;
    if got != dst.len() {
        return Err(Error::corrupt(
            "lz4 block",
            format!("decompressed to {got} bytes, expected {}", dst.len()),
        ));
    }
    Ok(())
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// ZFS lz4 compression (writes the BE u32 header); None if it does not fit in `dst`.
pub fn lz4_compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    if dst.len() < 4 {
        return None;
    }
    let need = lz4_flex::block::get_maximum_output_size(src.len());
    let n = if dst.len() - 4 >= need {
        lz4_flex::block::compress_into(src, &mut dst[4..]).ok()?
    } else {
        // lz4_flex wants a worst-case sized output; compress into a reused scratch buffer.
        SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            if buf.len() < need {
                buf.resize(need, 0);
            }
            let n = lz4_flex::block::compress_into(src, &mut buf[..need]).ok()?;
            if n > dst.len() - 4 {
                return None;
            }
            dst[4..4 + n].copy_from_slice(&buf[..n]);
            Some(n)
        })?
    };
    dst[..4].copy_from_slice(&u32::try_from(n).ok()?.to_be_bytes());
    Some(4 + n)
}

// ---------------------------------------------------------------------------
// ZSTD

/// Magic number that ZFS omits from its zstd frames (little-endian 0xFD2FB528).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The 8-byte ZFS zstd header: (compressed frame length, raw level/version word).
pub fn zstd_header(src: &[u8]) -> Option<(usize, u32)> {
    let c_len = be32(src)?;
    let word = be32(src.get(4..)?)? as u32;
    Some((c_len, word))
}

/// The zstd version OpenZFS 2.3 writes in its block headers (1.5.6).
pub const ZSTD_VERSION: u32 = 10506;
/// zstd's default level, which `compression=zstd` means.
pub const ZSTD_DEFAULT_LEVEL: u8 = 3;

/// ZFS zstd compression: the 8-byte header (big-endian frame length, then
/// the level in the top byte and the zstd version below it, as OpenZFS
/// packs `zfs_zstdhdr_t`) and a standard zstd frame without its 4-byte
/// magic. ruzstd's encoder compresses at its fastest level whatever the
/// level asked; `level` is what the header records (decompression ignores
/// it; callers pass [`ZSTD_DEFAULT_LEVEL`]). Each
/// frame is decoded again before it is used: one that does not give back
/// `src` exactly is not written (None: the block is stored as it is), so
/// an encoder fault can cost space but never data.
pub fn zstd_compress(src: &[u8], dst: &mut [u8], level: u8) -> Option<usize> {
    let frame = std::panic::catch_unwind(|| {
        ruzstd::encoding::compress_to_vec(src, ruzstd::encoding::CompressionLevel::Fastest)
    })
    .ok()?;
    let body = frame.strip_prefix(&ZSTD_MAGIC[..])?;
    let n = 8usize.checked_add(body.len())?;
    if n > dst.len() || body.len() > u32::MAX as usize {
        return None;
    }
    let mut back = vec![0u8; src.len()];
    zstd_frame_decode("zstd frame written", &frame, &mut back).ok()?;
    if back != src {
        return None;
    }
    dst[0..4].copy_from_slice(&(body.len() as u32).to_be_bytes());
    dst[4..8].copy_from_slice(&(((level as u32) << 24) | ZSTD_VERSION).to_be_bytes());
    dst[8..n].copy_from_slice(body);
    Some(n)
}

/// ZFS zstd decompression (8-byte header, magicless frame); must yield exactly `dst.len()` bytes.
pub fn zstd_decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let (c_len, _) =
        zstd_header(src).ok_or_else(|| Error::truncated("zstd header", 8, src.len()))?;
    let frame = src.get(8..8usize.saturating_add(c_len)).ok_or_else(|| {
        Error::corrupt("zstd block", format!("frame length {c_len} exceeds block"))
    })?;
    let mut buf = Vec::with_capacity(frame.len() + 4);
    buf.extend_from_slice(&ZSTD_MAGIC);
    buf.extend_from_slice(frame);
    zstd_frame_decode("zstd frame", &buf, dst)
}

/// Decode one standard zstd frame (with its magic) into exactly `dst`.
/// ruzstd is not hardened against every malformed frame: a panic is
/// contained and reported as corruption of `what`.
fn zstd_frame_decode(what: &str, frame: &[u8], dst: &mut [u8]) -> Result<()> {
    let dlen = dst.len();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut dec = ruzstd::decoding::FrameDecoder::new();
        dec.decode_all(frame, dst).map_err(|e| e.to_string())
    }));
    match res {
        Ok(Ok(n)) if n == dlen => Ok(()),
        Ok(Ok(n)) => Err(Error::corrupt(
            what,
            format!("zstd decoded to {n} bytes, expected {dlen}"),
        )),
        Ok(Err(e)) => Err(Error::corrupt(what, format!("zstd: {e}"))),
        Err(_) => Err(Error::corrupt(what, "zstd decoder failure")),
    }
}

// ---------------------------------------------------------------------------
// External (pre-compressed) payloads, issue 7

/// Decompress a client's payload of algorithm `tag` (see
/// `ozfs_format::external`) into `dst` (the record): lz4 as a raw block,
/// gzip as a zlib stream, zstd as a standard frame (with its magic), zle and
/// lzjb as ZFS writes them. The payload must decode to exactly the record
/// size. Opaque and unknown tags are an error naming the tag.
pub fn external_decompress(tag: u8, payload: &[u8], dst: &mut [u8]) -> Result<()> {
    let what = "pre-compressed payload";
    match tag {
        1 => {
            let got = lz4_flex::block::decompress_into(payload, dst)
                .map_err(|e| Error::corrupt(what, format!("lz4: {e}")))?;
            if got != dst.len() {
                return Err(Error::corrupt(
                    what,
                    format!("lz4 decoded to {got} bytes, the record has {}", dst.len()),
                ));
            }
            Ok(())
        }
        2 => gzip_decompress(payload, dst),
        3 => zstd_frame_decode(what, payload, dst),
        4 => zle_decompress(payload, dst),
        5 => lzjb_decompress(payload, dst),
        t => Err(Error::Opaque {
            what: what.into(),
            tag: t,
        }),
    }
}

/// Compress a record with algorithm `tag` into the payload form
/// [`external_decompress`] reads (what a client would have sent): used when
/// an ordinary partial write lands in a pre-compressed record and ozfs
/// recompresses it with the client's algorithm. Returns None when the
/// payload would need more than `max` bytes (the record is then stored
/// plain), and an error for tags ozfs cannot encode.
pub fn external_compress(tag: u8, src: &[u8], max: usize) -> Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; max];
    let n = match tag {
        1 => {
            // ZFS's lz4 form is a 4-byte length and the raw block: drop the length.
            let mut tmp = vec![0u8; max.saturating_add(4)];
            lz4_compress(src, &mut tmp).map(|n| {
                buf[..n - 4].copy_from_slice(&tmp[4..n]);
                n - 4
            })
        }
        2 => gzip_compress(src, &mut buf, 6),
        3 => {
            // ruzstd's encoder is pure Rust; contain any panic all the same.
            let v = std::panic::catch_unwind(|| {
                ruzstd::encoding::compress_to_vec(src, ruzstd::encoding::CompressionLevel::Fastest)
            })
            .map_err(|_| Error::corrupt("zstd encoder", "encoder failure"))?;
            return Ok((v.len() <= max).then_some(v));
        }
        4 => zle_compress(src, &mut buf),
        5 => lzjb_compress(src, &mut buf),
        t => {
            return Err(Error::unsupported(
                "pre-compressed record",
                format!("ozfs cannot compress with algorithm tag {t}"),
            ))
        }
    };
    Ok(n.map(|n| {
        buf.truncate(n);
        buf
    }))
}

#[cfg(test)]
mod external_tests {
    use super::*;

    #[test]
    fn known_algorithms_roundtrip() {
        let rec: Vec<u8> = (0..131072u32).map(|i| ((i / 64) % 251) as u8).collect();
        // lz4: raw block.
        let lz = lz4_flex::block::compress(&rec);
        let mut out = vec![0u8; rec.len()];
        external_decompress(1, &lz, &mut out).unwrap();
        assert_eq!(out, rec);
        // gzip: zlib stream.
        let mut z = vec![0u8; rec.len()];
        let n = gzip_compress(&rec, &mut z, 6).unwrap();
        let mut out = vec![0u8; rec.len()];
        external_decompress(2, &z[..n], &mut out).unwrap();
        assert_eq!(out, rec);
        // zle and lzjb, as ZFS writes them.
        let mut c = vec![0u8; rec.len()];
        let n = lzjb_compress(&rec, &mut c).unwrap();
        let mut out = vec![0u8; rec.len()];
        external_decompress(5, &c[..n], &mut out).unwrap();
        assert_eq!(out, rec);
        let zeros = vec![0u8; 4096];
        let mut c = vec![0u8; 4096];
        let n = zle_compress(&zeros, &mut c).unwrap();
        let mut out = vec![1u8; 4096];
        external_decompress(4, &c[..n], &mut out).unwrap();
        assert_eq!(out, zeros);
        // ozfs's own encoders produce what the decoders read, for every known tag.
        for tag in 1..=5u8 {
            let src = if tag == 4 { &zeros[..] } else { &rec[..] };
            let c = external_compress(tag, src, src.len() - 16)
                .unwrap()
                .unwrap_or_else(|| panic!("tag {tag} did not fit"));
            let mut out = vec![7u8; src.len()];
            external_decompress(tag, &c, &mut out).unwrap();
            assert_eq!(out, src, "tag {tag}");
        }
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert!(external_compress(1, &noise, 1000).unwrap().is_none());
        assert!(external_compress(200, &rec, 1000).is_err());
        // Wrong sizes and opaque tags are errors, never panics.
        let mut short = vec![0u8; 1000];
        assert!(external_decompress(1, &lz, &mut short).is_err());
        assert!(external_decompress(200, &lz, &mut out).is_err());
        assert!(external_decompress(3, &[1, 2, 3], &mut out).is_err());
    }
}
