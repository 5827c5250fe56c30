//! Pre-compressed ("external") blocks: the header a stored block begins with.
//!
//! Theory (issue 7; docs/design/precompressed.md). A client that compresses
//! its records itself (a Lustre-like server) hands ozfs the compressed bytes;
//! ozfs stores them as one block whose pointer says compression "external"
//! and whose physical size is the header plus the payload rounded up to the
//! sector size. Block pointers count sizes in 512-byte units, so the exact
//! payload length and the algorithm live in a 16-byte header at the start
//! of the block, big-endian as ZFS's own lz4 and zstd headers are:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `0x4F5A5843` ("OZXC") |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | algorithm tag |
//! | 6 | 2 | header length (16) |
//! | 8 | 4 | exact payload bytes (at least 1) |
//! | 12 | 4 | reserved (0) |
//!
//! Tags: 1 lz4, 2 gzip (zlib stream), 3 zstd, 4 zle, 5 lzjb — algorithms
//! ozfs can decode; 6 to 127 are reserved and refused (so that a later
//! version never misreads them); 128 to 255 are opaque, stored and returned
//! raw only. Tag 0 is invalid.
//!
//! Invariants: [`ExtHeader::parse`] checks every field against the block it
//! came from (the payload must fit behind the header); nothing here
//! allocates from a length it read before checking it.

use crate::{Error, Result};

/// The header's magic ("OZXC").
pub const EXT_MAGIC: u32 = 0x4F5A_5843;
/// Header length in bytes.
pub const EXT_HEADER_LEN: usize = 16;
/// Header version written.
pub const EXT_VERSION: u8 = 1;

/// Algorithms by tag: (tag, name).
pub const KNOWN_TAGS: &[(u8, &str)] = &[
    (1, "lz4"),
    (2, "gzip"),
    (3, "zstd"),
    (4, "zle"),
    (5, "lzjb"),
];

/// The name of a tag: a known algorithm, `opaque-N`, or None (invalid or reserved).
pub fn tag_name(tag: u8) -> Option<String> {
    if let Some((_, n)) = KNOWN_TAGS.iter().find(|(t, _)| *t == tag) {
        return Some(n.to_string());
    }
    (tag >= 128).then(|| format!("opaque-{tag}"))
}

/// The tag of an algorithm name (`lz4`, ..., or `opaque-N` with N in 128..=255).
pub fn tag_from_name(name: &str) -> Result<u8> {
    if let Some((t, _)) = KNOWN_TAGS.iter().find(|(_, n)| *n == name) {
        return Ok(*t);
    }
    match name.strip_prefix("opaque-").and_then(|n| n.parse::<u8>().ok()) {
        Some(t) if t >= 128 => Ok(t),
        _ => Err(Error::Invalid(format!(
            "unknown algorithm '{name}' (known: lz4, gzip, zstd, zle, lzjb; or opaque-128 .. opaque-255)"
        ))),
    }
}

/// Whether ozfs can decode payloads of this tag.
pub fn tag_is_known(tag: u8) -> bool {
    KNOWN_TAGS.iter().any(|(t, _)| *t == tag)
}

/// The header of an external block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader {
    pub tag: u8,
    /// Exact payload bytes.
    pub csize: u32,
}

impl ExtHeader {
    /// A header for `csize` payload bytes of algorithm `tag`; refused for
    /// tag 0, reserved tags and empty payloads.
    pub fn new(tag: u8, csize: usize) -> Result<ExtHeader> {
        if tag_name(tag).is_none() {
            return Err(Error::Invalid(format!(
                "algorithm tag {tag} is invalid or reserved"
            )));
        }
        if csize == 0 || csize > u32::MAX as usize {
            return Err(Error::Invalid(format!("payload of {csize} bytes")));
        }
        Ok(ExtHeader {
            tag,
            csize: csize as u32,
        })
    }

    pub fn encode(&self) -> [u8; EXT_HEADER_LEN] {
        let mut b = [0u8; EXT_HEADER_LEN];
        b[0..4].copy_from_slice(&EXT_MAGIC.to_be_bytes());
        b[4] = EXT_VERSION;
        b[5] = self.tag;
        b[6..8].copy_from_slice(&(EXT_HEADER_LEN as u16).to_be_bytes());
        b[8..12].copy_from_slice(&self.csize.to_be_bytes());
        b
    }

    /// Parse the header at the start of `block` (a whole stored block);
    /// the payload must lie within it.
    pub fn parse(block: &[u8]) -> Result<ExtHeader> {
        let what = "external block header";
        if block.len() < EXT_HEADER_LEN {
            return Err(Error::corrupt(
                what,
                format!("block of {} bytes", block.len()),
            ));
        }
        let be32 =
            |o: usize| u32::from_be_bytes([block[o], block[o + 1], block[o + 2], block[o + 3]]);
        if be32(0) != EXT_MAGIC {
            return Err(Error::corrupt(what, format!("magic {:#010x}", be32(0))));
        }
        if block[4] != EXT_VERSION {
            return Err(Error::unsupported(what, format!("version {}", block[4])));
        }
        let hlen = u16::from_be_bytes([block[6], block[7]]) as usize;
        if hlen != EXT_HEADER_LEN {
            return Err(Error::corrupt(what, format!("header length {hlen}")));
        }
        let tag = block[5];
        if tag_name(tag).is_none() {
            return Err(Error::corrupt(what, format!("algorithm tag {tag}")));
        }
        let csize = be32(8);
        if csize == 0 || EXT_HEADER_LEN + csize as usize > block.len() {
            return Err(Error::corrupt(
                what,
                format!("payload of {csize} bytes in a block of {}", block.len()),
            ));
        }
        Ok(ExtHeader { tag, csize })
    }

    /// The stored image of `payload`: header, payload, zeros up to a
    /// multiple of `sector` bytes (never more than `lsize`: a payload that
    /// fills the record with its header has PSIZE = LSIZE). Refused when
    /// header and payload do not fit the record.
    pub fn image(tag: u8, payload: &[u8], lsize: u64, sector: u64) -> Result<Vec<u8>> {
        let h = ExtHeader::new(tag, payload.len())?;
        let sector = sector.max(512);
        let need = (EXT_HEADER_LEN + payload.len()) as u64;
        let psize = need.div_ceil(sector) * sector;
        if need > lsize {
            return Err(Error::Invalid(format!(
                "payload of {} bytes does not fit a {lsize}-byte record with its header (store it plain)",
                payload.len()
            )));
        }
        let mut v = Vec::with_capacity(psize as usize);
        v.extend_from_slice(&h.encode());
        v.extend_from_slice(payload);
        v.resize(psize.min(lsize) as usize, 0);
        Ok(v)
    }

    /// The payload of a stored image whose header this is.
    pub fn payload<'a>(&self, block: &'a [u8]) -> &'a [u8] {
        let end = (EXT_HEADER_LEN + self.csize as usize).min(block.len());
        &block[EXT_HEADER_LEN.min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_header() {
        let h = ExtHeader::new(1, 40961).unwrap();
        assert_eq!(
            h.encode(),
            [0x4F, 0x5A, 0x58, 0x43, 1, 1, 0, 16, 0, 0, 0xA0, 0x01, 0, 0, 0, 0]
        );
    }

    #[test]
    fn image_roundtrip_and_sizes() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let img = ExtHeader::image(3, &payload, 131072, 4096).unwrap();
        assert_eq!(img.len(), 8192);
        let h = ExtHeader::parse(&img).unwrap();
        assert_eq!(h.tag, 3);
        assert_eq!(h.payload(&img), &payload[..]);
        assert!(img[16 + 5000..].iter().all(|&b| b == 0));
        // Filling the record exactly: PSIZE = LSIZE; one byte more: refused.
        let full = ExtHeader::image(1, &vec![1u8; 131072 - 16], 131072, 4096).unwrap();
        assert_eq!(full.len(), 131072);
        assert!(ExtHeader::image(1, &vec![1u8; 131072 - 15], 131072, 512).is_err());
    }

    #[test]
    fn hostile_headers_refused() {
        let img = ExtHeader::image(1, &[9u8; 100], 4096, 512).unwrap();
        let mut b = img.clone();
        b[0] ^= 1;
        assert!(ExtHeader::parse(&b).is_err());
        let mut b = img.clone();
        b[5] = 7; // reserved tag
        assert!(ExtHeader::parse(&b).is_err());
        let mut b = img.clone();
        b[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(ExtHeader::parse(&b).is_err());
        let mut b = img.clone();
        b[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert!(ExtHeader::parse(&b).is_err());
        assert!(ExtHeader::parse(&img[..10]).is_err());
        assert!(ExtHeader::new(0, 10).is_err());
        assert!(ExtHeader::new(200, 10).is_ok());
    }

    #[test]
    fn tag_names() {
        for (t, n) in KNOWN_TAGS {
            assert_eq!(tag_from_name(n).unwrap(), *t);
            assert_eq!(tag_name(*t).as_deref(), Some(*n));
        }
        assert_eq!(tag_from_name("opaque-200").unwrap(), 200);
        assert!(tag_from_name("opaque-100").is_err());
        assert!(tag_from_name("brotli").is_err());
        assert_eq!(tag_name(50), None);
    }
}
