//! Block pointers (`blkptr_t`, 128 bytes) and DVAs. FORMAT.md §2.
//!
//! A [`BlkPtr`] keeps the 16 raw words in host order (already byteswapped if
//! the containing block was written by the other endianness) and decodes
//! fields on demand. It supports both the old (zfs-fuse, 8-bit COMP) and the
//! new (7-bit COMP + embedded bit) layouts: an embedded BP is recognised by
//! bit 39 of `blk_prop`, which old pools never set.
//!
//! Invariants: `words` are host-order values; every accessor is a pure bit
//! extraction, so any 128 bytes decode without error — [`BlkPtr::validate`]
//! is where structural sanity is checked. Sizes are returned in bytes
//! (already un-biased and shifted).

use crate::error::{Cksum, Error, Result};
use crate::types;
use std::fmt::Write as _;

/// Size of one block pointer on disk.
pub const BLKPTR_SIZE: usize = 128;
/// Largest payload of an embedded BP.
pub const EMBEDDED_PAYLOAD_SIZE: usize = 112;
/// Largest block size any ZFS accepts (16 M, `large_blocks`).
pub const SPA_MAXBLOCKSIZE: u64 = 16 * 1024 * 1024;
/// Largest block size without `large_blocks` (and the zfs-fuse maximum).
pub const SPA_OLD_MAXBLOCKSIZE: u64 = 128 * 1024;
/// Words of an embedded BP that carry payload, in payload order.
const EMBEDDED_WORDS: [usize; 14] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 14, 15];

/// A data virtual address: where one copy of a block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dva {
    /// Top-level vdev id.
    pub vdev: u64,
    /// Byte offset in the top-level vdev's allocatable space (already ×512).
    pub offset: u64,
    /// Allocated bytes (already ×512), including RAID-Z parity and padding.
    pub asize: u64,
    /// Points at a gang header.
    pub gang: bool,
}

impl Dva {
    /// Decode from the two words. (ASIZE bits 0..24 ×512, VDEV bits 32..64 masked to 24 bits for new pools is fine:
    /// take bits 32..56; OFFSET bits 0..63 ×512; G bit 63.)
    pub fn from_words(w0: u64, w1: u64) -> Dva {
        Dva {
            vdev: (w0 >> 32) & 0x00ff_ffff,
            offset: (w1 & !(1u64 << 63)).wrapping_shl(9),
            asize: (w0 & 0x00ff_ffff) << 9,
            gang: w1 >> 63 != 0,
        }
    }
    /// Encode into two words.
    pub fn to_words(&self) -> (u64, u64) {
        let w0 = ((self.asize >> 9) & 0x00ff_ffff) | ((self.vdev & 0x00ff_ffff) << 32);
        let w1 = ((self.offset >> 9) & !(1u64 << 63)) | ((self.gang as u64) << 63);
        (w0, w1)
    }
    /// ASIZE == 0 means the DVA slot is unused.
    pub fn is_empty(&self) -> bool {
        self.asize == 0 && self.offset == 0 && self.vdev == 0
    }
}

/// A decoded block pointer.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct BlkPtr {
    /// The 16 words, host order.
    pub words: [u64; 16],
}

/// What decrypts one encrypted block (see [`BlkPtr::crypt_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CryptParams {
    pub salt: [u8; 8],
    pub iv: [u8; 12],
    pub mac: [u8; 16],
}

impl BlkPtr {
    /// Decode 128 bytes; `swap` = the containing block is in the non-host byte order.
    pub fn from_bytes(b: &[u8], swap: bool) -> Result<BlkPtr> {
        if b.len() < BLKPTR_SIZE {
            return Err(Error::truncated("blkptr", BLKPTR_SIZE, b.len()));
        }
        let mut words = [0u64; 16];
        for (i, w) in words.iter_mut().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            let v = u64::from_ne_bytes(a);
            *w = if swap { v.swap_bytes() } else { v };
        }
        Ok(BlkPtr { words })
    }
    /// Encode as 128 bytes in host order.
    pub fn to_bytes(&self) -> [u8; BLKPTR_SIZE] {
        let mut out = [0u8; BLKPTR_SIZE];
        for (i, w) in self.words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }
    /// All-zero, or non-embedded with DVA[0] words both zero (hole_birth holes keep lsize/type/level/birth).
    pub fn is_hole(&self) -> bool {
        !self.is_embedded() && self.words[0] == 0 && self.words[1] == 0
    }
    /// Embedded-data BP (E bit 39 set).
    pub fn is_embedded(&self) -> bool {
        self.prop() & (1u64 << 39) != 0
    }
    /// The up-to-3 DVAs (empty ones included; check `is_empty`). An
    /// encrypted block has at most two: its third DVA's words hold the
    /// salt and IV.
    pub fn dvas(&self) -> [Dva; 3] {
        if self.is_embedded() {
            return [Dva::default(); 3];
        }
        [
            Dva::from_words(self.words[0], self.words[1]),
            Dva::from_words(self.words[2], self.words[3]),
            if self.is_encrypted() {
                Dva::default()
            } else {
                Dva::from_words(self.words[4], self.words[5])
            },
        ]
    }
    /// Number of non-empty DVAs.
    pub fn ndvas(&self) -> usize {
        self.dvas().iter().filter(|d| !d.is_empty()).count()
    }
    /// `BP_GET_NDVAS`: the number of DVAs with a nonzero ASIZE (what zdb iterates over).
    pub fn ndvas_allocated(&self) -> usize {
        self.dvas().iter().filter(|d| d.asize != 0).count()
    }
    /// Whether DVA[0] is a gang DVA.
    pub fn is_gang(&self) -> bool {
        !self.is_embedded() && self.words[1] >> 63 != 0
    }
    /// Embedded-data type (bits 40..48) of an embedded BP.
    pub fn etype(&self) -> u8 {
        self.checksum()
    }
    /// The raw `blk_prop` word.
    pub fn prop(&self) -> u64 {
        self.words[6]
    }
    /// Logical size in bytes (embedded: bits 0..25 + 1).
    pub fn lsize(&self) -> u64 {
        if self.is_embedded() {
            (self.prop() & 0x01ff_ffff) + 1
        } else {
            ((self.prop() & 0xffff) + 1) << 9
        }
    }
    /// Physical size in bytes (embedded: bits 25..32 + 1).
    pub fn psize(&self) -> u64 {
        if self.is_embedded() {
            ((self.prop() >> 25) & 0x7f) + 1
        } else {
            (((self.prop() >> 16) & 0xffff) + 1) << 9
        }
    }
    /// The compressed size OpenZFS's space accounting charges
    /// (`BP_GET_PSIZE`): an embedded block's is 0.
    pub fn charged_psize(&self) -> u64 {
        if self.is_embedded() {
            0
        } else {
            self.psize()
        }
    }

    /// The uncompressed size OpenZFS's space accounting charges
    /// (`BP_GET_UCSIZE`): the compressed size of metadata (indirect blocks
    /// and metadata types), the logical size of data; an embedded block
    /// charges its logical size only when it holds data (embedded type 0)
    /// of a data type.
    pub fn charged_ucsize(&self) -> u64 {
        let meta = self.level() > 0 || crate::types::object_type_is_metadata(self.object_type());
        if meta {
            self.charged_psize()
        } else if self.is_embedded() && self.etype() != 0 {
            0
        } else {
            self.lsize()
        }
    }

    /// Compression enum (7 bits if embedded... use 7 bits when bit 39 is the E bit and 8 bits otherwise is ambiguous;
    /// take bits 32..39 (7 bits) always — old pools never exceed 14).
    pub fn compression(&self) -> u8 {
        ((self.prop() >> 32) & 0x7f) as u8
    }
    /// Checksum enum (bits 40..48); for embedded BPs this is the embedded type (etype).
    pub fn checksum(&self) -> u8 {
        (self.prop() >> 40) as u8
    }
    /// DMU object type (bits 48..56).
    pub fn object_type(&self) -> u8 {
        (self.prop() >> 48) as u8
    }
    /// Indirection level (bits 56..61).
    pub fn level(&self) -> u8 {
        ((self.prop() >> 56) & 0x1f) as u8
    }
    /// Crypt bit 61 (`BP_USES_CRYPT`): the block of an encrypted dataset,
    /// encrypted (data) or authenticated (metadata, objset): its checksum
    /// words carry a MAC and an IV/salt sits where the third DVA would be.
    pub fn uses_crypt(&self) -> bool {
        !self.is_embedded() && self.prop() & (1u64 << 61) != 0
    }
    /// `BP_IS_ENCRYPTED`: a level-0 block of an encrypted type in an
    /// encrypted dataset — its bytes are ciphertext, its third DVA is the
    /// salt and IV, checksum words 2–3 the AEAD tag.
    pub fn is_encrypted(&self) -> bool {
        self.uses_crypt()
            && self.level() == 0
            && types::object_type_is_encrypted(self.object_type())
    }
    /// `BP_IS_AUTHENTICATED`: a level-0 block of an unencrypted type (the
    /// objset, the master node) in an encrypted dataset: plain bytes.
    pub fn is_authenticated(&self) -> bool {
        self.uses_crypt()
            && self.level() == 0
            && !types::object_type_is_encrypted(self.object_type())
    }
    /// The encryption parameters of an encrypted block as the cipher
    /// takes them: the 8-byte salt (third DVA's first word), the 12-byte
    /// IV (third DVA's second word, then the fill word's high half) and
    /// the 16-byte MAC (checksum words 2 and 3), each in the bytes the
    /// writer stored (`swap`: the block pointer came from the other byte
    /// order). None for a block that is not encrypted.
    pub fn crypt_params(&self, swap: bool) -> Option<CryptParams> {
        if !self.is_encrypted() {
            return None;
        }
        let b = |w: u64| {
            if swap {
                w.to_be_bytes()
            } else {
                w.to_le_bytes()
            }
        };
        let mut iv = [0u8; 12];
        iv[..8].copy_from_slice(&b(self.words[5]));
        let iv2 = (self.words[11] >> 32) as u32;
        iv[8..].copy_from_slice(&if swap {
            iv2.to_be_bytes()
        } else {
            iv2.to_le_bytes()
        });
        Some(CryptParams {
            salt: b(self.words[4]),
            iv,
            mac: self.mac(swap),
        })
    }
    /// The MAC a protected block pointer carries in checksum words 2–3,
    /// in the writer's bytes (zeros for an objset, whose MACs live in the
    /// objset itself).
    pub fn mac(&self, swap: bool) -> [u8; 16] {
        let mut mac = [0u8; 16];
        if self.object_type() == types::ot::OBJSET {
            return mac;
        }
        let b = |w: u64| {
            if swap {
                w.to_be_bytes()
            } else {
                w.to_le_bytes()
            }
        };
        mac[..8].copy_from_slice(&b(self.words[14]));
        mac[8..].copy_from_slice(&b(self.words[15]));
        mac
    }
    /// Dedup bit 62.
    pub fn dedup(&self) -> bool {
        self.prop() & (1u64 << 62) != 0
    }
    /// Byte order bit 63: true = little-endian data.
    pub fn little_endian(&self) -> bool {
        self.prop() >> 63 != 0
    }
    /// Logical birth txg (word 10).
    pub fn birth(&self) -> u64 {
        self.words[10]
    }
    /// Physical birth txg (word 9, or logical birth if 0).
    pub fn phys_birth(&self) -> u64 {
        if self.words[9] != 0 {
            self.words[9]
        } else {
            self.words[10]
        }
    }
    /// Fill count (word 11; its low half for an encrypted block, whose
    /// high half is part of the IV).
    pub fn fill(&self) -> u64 {
        if self.is_encrypted() {
            self.words[11] & 0xffff_ffff
        } else {
            self.words[11]
        }
    }
    /// Checksum words 12..16.
    pub fn cksum(&self) -> Cksum {
        Cksum([
            self.words[12],
            self.words[13],
            self.words[14],
            self.words[15],
        ])
    }
    /// Embedded payload bytes (psize bytes), words 0-5,7-9,11-15 little-endian within each word value.
    /// Errors if not embedded or psize > 112.
    pub fn embedded_payload(&self) -> Result<Vec<u8>> {
        if !self.is_embedded() {
            return Err(Error::Invalid(
                "blkptr: not an embedded block pointer".into(),
            ));
        }
        let psize = self.psize() as usize;
        if psize > EMBEDDED_PAYLOAD_SIZE {
            return Err(Error::corrupt(
                "embedded blkptr",
                format!("psize {psize} > {EMBEDDED_PAYLOAD_SIZE}"),
            ));
        }
        let mut out = Vec::with_capacity(EMBEDDED_PAYLOAD_SIZE);
        for &w in EMBEDDED_WORDS.iter() {
            out.extend_from_slice(&self.words[w].to_le_bytes());
        }
        out.truncate(psize);
        Ok(out)
    }

    /// Build an embedded BP carrying `payload` (<= 112 bytes, already compressed with `comp`).
    /// `lsize` is the logical size in bytes (1..=2^25). Fill is left 0 (implicitly 1).
    #[allow(clippy::too_many_arguments)]
    pub fn new_embedded(
        payload: &[u8],
        lsize: u64,
        comp: u8,
        etype: u8,
        object_type: u8,
        level: u8,
        birth: u64,
        little_endian: bool,
    ) -> Result<BlkPtr> {
        if payload.is_empty() || payload.len() > EMBEDDED_PAYLOAD_SIZE {
            return Err(Error::Invalid(format!(
                "embedded payload of {} bytes",
                payload.len()
            )));
        }
        if lsize == 0 || lsize > 1 << 25 {
            return Err(Error::Invalid(format!("embedded lsize {lsize}")));
        }
        let mut bp = BlkPtr::default();
        let mut padded = [0u8; EMBEDDED_PAYLOAD_SIZE];
        padded[..payload.len()].copy_from_slice(payload);
        for (i, &w) in EMBEDDED_WORDS.iter().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&padded[i * 8..i * 8 + 8]);
            bp.words[w] = u64::from_le_bytes(a);
        }
        bp.words[6] = (lsize - 1)
            | ((payload.len() as u64 - 1) << 25)
            | (((comp & 0x7f) as u64) << 32)
            | (1u64 << 39)
            | ((etype as u64) << 40)
            | ((object_type as u64) << 48)
            | (((level & 0x1f) as u64) << 56)
            | ((little_endian as u64) << 63);
        bp.words[10] = birth;
        Ok(bp)
    }

    /// Build a `blk_prop` word for a normal (non-embedded) BP. Sizes in bytes (multiples of 512, 512..=32M).
    #[allow(clippy::too_many_arguments)]
    pub fn make_prop(
        lsize: u64,
        psize: u64,
        comp: u8,
        cksum: u8,
        object_type: u8,
        level: u8,
        dedup: bool,
        little_endian: bool,
    ) -> u64 {
        ((lsize >> 9).saturating_sub(1) & 0xffff)
            | (((psize >> 9).saturating_sub(1) & 0xffff) << 16)
            | (((comp & 0x7f) as u64) << 32)
            | ((cksum as u64) << 40)
            | ((object_type as u64) << 48)
            | (((level & 0x1f) as u64) << 56)
            | ((dedup as u64) << 62)
            | ((little_endian as u64) << 63)
    }

    /// Set DVA `i` (0..3).
    pub fn set_dva(&mut self, i: usize, dva: &Dva) {
        if i < 3 {
            let (w0, w1) = dva.to_words();
            self.words[2 * i] = w0;
            self.words[2 * i + 1] = w1;
        }
    }

    /// Set the checksum words.
    pub fn set_cksum(&mut self, c: Cksum) {
        self.words[12..16].copy_from_slice(&c.0);
    }

    /// The type name as zdb's `snprintf_blkptr` prints it (`"bswap metadata zap"` for new-style types).
    fn zdb_type_name(&self) -> String {
        let t = self.object_type();
        if t & 0x80 != 0 {
            format!(
                "bswap {} {}",
                if t & 0x40 != 0 { "metadata" } else { "data" },
                types::bswap_class_name(t & 0x1f)
            )
        } else {
            types::object_type_name(t).to_string()
        }
    }
    /// Sanity rules of FORMAT.md §2.11 that need no pool knowledge (type, comp, cksum enums, sizes <= 16M,
    /// embedded etype/psize). `what` names the BP in errors.
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt(what, d));
        let t = self.object_type();
        if !types::object_type_is_valid(t) {
            return bad(format!("invalid object type {t}"));
        }
        let comp = self.compression();
        if comp as usize >= types::COMPRESS_FUNCTIONS && comp != types::comp::EXTERNAL {
            return bad(format!("invalid compression {comp}"));
        }
        if self.is_embedded() {
            let et = self.etype();
            if et >= 3 {
                return bad(format!("invalid embedded type {et}"));
            }
            if self.psize() as usize > EMBEDDED_PAYLOAD_SIZE {
                return bad(format!("embedded psize {}", self.psize()));
            }
            if self.lsize() > SPA_MAXBLOCKSIZE {
                return bad(format!("embedded lsize {:#x}", self.lsize()));
            }
            return Ok(());
        }
        let ck = self.checksum();
        if ck as usize >= types::CHECKSUM_FUNCTIONS {
            return bad(format!("invalid checksum {ck}"));
        }
        if self.lsize() > SPA_MAXBLOCKSIZE {
            return bad(format!("lsize {:#x} too large", self.lsize()));
        }
        if self.psize() > SPA_MAXBLOCKSIZE {
            return bad(format!("psize {:#x} too large", self.psize()));
        }
        if self.words.iter().all(|&w| w == 0) || self.is_hole() {
            return Ok(());
        }
        if self.dvas()[0].asize == 0 {
            return bad("DVA[0] has zero asize".into());
        }
        Ok(())
    }
    /// zdb's full notation (`snprintf_blkptr`): e.g.
    /// `DVA[0]=<0:4a00:200> DVA[1]=<0:1204a00:200> [L0 DMU dnode] fletcher4 lzjb LE contiguous unique double size=4000L/200P birth=4L/4P fill=5 cksum=a1b2:...`
    /// Holes: `HOLE [L0 ...] size=...L birth=...L`; embedded: `EMBEDDED [L0 ...] et=0 lzjb size=...L/...P birth=...L`.
    pub fn to_zdb_string(&self) -> String {
        let ty = self.zdb_type_name();
        let comp = types::compression_table_name(self.compression());
        let mut s = String::new();
        if self.is_hole() {
            let _ = write!(
                s,
                "HOLE [L{} {}] size={:x}L birth={}L",
                self.level(),
                ty,
                self.lsize(),
                self.birth()
            );
            return s;
        }
        if self.is_embedded() {
            let _ = write!(
                s,
                "EMBEDDED [L{} {}] et={} {} size={:x}L/{:x}P birth={}L",
                self.level(),
                ty,
                self.etype(),
                comp,
                self.lsize(),
                self.psize(),
                self.birth()
            );
            return s;
        }
        const COPYNAME: [&str; 4] = ["zero", "single", "double", "triple"];
        let dvas = self.dvas();
        let mut copies = 0usize;
        for (d, dva) in dvas.iter().take(self.ndvas_allocated()).enumerate() {
            if dva.asize != 0 {
                copies += 1;
            }
            let _ = write!(
                s,
                "DVA[{d}]=<{}:{:x}:{:x}> ",
                dva.vdev, dva.offset, dva.asize
            );
        }
        if self.is_gang() && dvas[2].asize <= dvas[1].asize / 2 {
            copies = copies.saturating_sub(1);
        }
        let _ = write!(
            s,
            "[L{} {}] {} {} {} {} {} {} size={:x}L/{:x}P birth={}L/{}P fill={} cksum={}",
            self.level(),
            ty,
            types::checksum_name(self.checksum()),
            comp,
            if self.little_endian() { "LE" } else { "BE" },
            if self.is_gang() { "gang" } else { "contiguous" },
            if self.dedup() { "dedup" } else { "unique" },
            COPYNAME[copies.min(3)],
            self.lsize(),
            self.psize(),
            self.birth(),
            self.phys_birth(),
            self.fill(),
            self.cksum()
        );
        s
    }
    /// zdb's compact notation used in `-ddddd` indirect dumps (`snprintf_blkptr_compact`):
    /// `0:4a00:200 0:1204a00:200 4000L/200P F=5 B=4/4` (plus ` cksum=...` when `with_cksum`).
    pub fn to_zdb_compact(&self, with_cksum: bool) -> String {
        let mut s = String::new();
        if self.is_embedded() {
            let _ = write!(
                s,
                "EMBEDDED et={} {:x}L/{:x}P B={}",
                self.etype(),
                self.lsize(),
                self.psize(),
                self.birth()
            );
            return s;
        }
        for dva in self.dvas().iter().take(self.ndvas_allocated()) {
            let _ = write!(
                s,
                "{}:{:x}:{:x}{} ",
                dva.vdev,
                dva.offset,
                dva.asize,
                if dva.gang { "G" } else { "" }
            );
        }
        if self.is_hole() {
            let _ = write!(s, "{:x}L B={}", self.lsize(), self.birth());
        } else {
            let _ = write!(
                s,
                "{:x}L/{:x}P F={} B={}/{}",
                self.lsize(),
                self.psize(),
                self.fill(),
                self.birth(),
                self.phys_birth()
            );
            if with_cksum {
                let _ = write!(s, " cksum={}", self.cksum());
            }
        }
        s
    }
}

impl std::fmt::Debug for BlkPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_zdb_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-built: DVA[0]=<0:4a00:200>, DVA[1]=<0:1204a00:200>, L0 DMU dnode,
    /// fletcher4, lzjb, LE, lsize 0x4000, psize 0x200, birth 4, fill 5.
    fn sample() -> BlkPtr {
        let mut w = [0u64; 16];
        w[0] = 1; // asize 1 sector, vdev 0
        w[1] = 0x25; // 0x4a00 >> 9
        w[2] = 1;
        w[3] = 0x9025; // 0x1204a00 >> 9
        w[6] = 0x800a_0703_0000_001f;
        w[10] = 4;
        w[11] = 5;
        w[12] = 0xa1b2;
        w[13] = 0xc3;
        w[14] = 0xd4;
        w[15] = 0xe5;
        BlkPtr { words: w }
    }

    #[test]
    fn fields() {
        let bp = sample();
        assert_eq!(bp.lsize(), 0x4000);
        assert_eq!(bp.psize(), 0x200);
        assert_eq!(bp.compression(), crate::types::comp::LZJB);
        assert_eq!(bp.checksum(), crate::types::cksum::FLETCHER4);
        assert_eq!(bp.object_type(), crate::types::ot::DNODE);
        assert_eq!(bp.level(), 0);
        assert!(bp.little_endian());
        assert!(!bp.dedup());
        assert!(!bp.is_hole());
        assert!(!bp.is_embedded());
        assert_eq!(bp.ndvas(), 2);
        let d = bp.dvas();
        assert_eq!(
            d[1],
            Dva {
                vdev: 0,
                offset: 0x1204a00,
                asize: 0x200,
                gang: false
            }
        );
        assert_eq!(bp.phys_birth(), 4);
        bp.validate("bp").unwrap();
        assert_eq!(
            BlkPtr::make_prop(0x4000, 0x200, 3, 7, 10, 0, false, true),
            bp.words[6]
        );
    }

    #[test]
    fn zdb_strings() {
        let bp = sample();
        assert_eq!(
            bp.to_zdb_string(),
            "DVA[0]=<0:4a00:200> DVA[1]=<0:1204a00:200> [L0 DMU dnode] fletcher4 lzjb LE \
             contiguous unique double size=4000L/200P birth=4L/4P fill=5 cksum=a1b2:c3:d4:e5"
        );
        assert_eq!(
            bp.to_zdb_compact(false),
            "0:4a00:200 0:1204a00:200 4000L/200P F=5 B=4/4"
        );
        assert_eq!(
            bp.to_zdb_compact(true),
            "0:4a00:200 0:1204a00:200 4000L/200P F=5 B=4/4 cksum=a1b2:c3:d4:e5"
        );
        let hole = BlkPtr::default();
        assert!(hole.is_hole());
        assert_eq!(
            hole.to_zdb_string(),
            "HOLE [L0 unallocated] size=200L birth=0L"
        );
        assert_eq!(hole.to_zdb_compact(true), "200L B=0");
        // hole_birth hole: keeps lsize/type/level/birth.
        let mut hb = BlkPtr::default();
        hb.words[6] =
            BlkPtr::make_prop(0x20000, 512, 0, 0, 19, 1, false, false) & 0xffff_0000_0000_ffff;
        hb.words[10] = 77;
        assert!(hb.is_hole());
        assert_eq!(
            hb.to_zdb_string(),
            "HOLE [L1 ZFS plain file] size=20000L birth=77L"
        );
        hb.validate("hole").unwrap();
    }

    #[test]
    fn bytes_round_trip() {
        let bp = sample();
        let b = bp.to_bytes();
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(&b[0..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
            assert_eq!(&b[48..56], &[0x1f, 0, 0, 0, 3, 7, 0x0a, 0x80]);
        }
        assert_eq!(BlkPtr::from_bytes(&b, false).unwrap(), bp);
        let mut sw = b;
        for c in sw.chunks_mut(8) {
            c.reverse();
        }
        assert_eq!(BlkPtr::from_bytes(&sw, true).unwrap(), bp);
        assert!(BlkPtr::from_bytes(&b[..100], false).is_err());
        for d in bp.dvas() {
            let (w0, w1) = d.to_words();
            assert_eq!(Dva::from_words(w0, w1), d);
        }
        let g = Dva {
            vdev: 3,
            offset: 0x1_0000_0000,
            asize: 0x1000,
            gang: true,
        };
        let (w0, w1) = g.to_words();
        assert_eq!(Dva::from_words(w0, w1), g);
    }

    #[test]
    fn embedded() {
        let payload: Vec<u8> = (0..100u8).collect();
        let bp = BlkPtr::new_embedded(&payload, 4096, 15, 0, 19, 0, 9, true).unwrap();
        assert!(bp.is_embedded());
        assert!(!bp.is_hole());
        assert_eq!(bp.lsize(), 4096);
        assert_eq!(bp.psize(), 100);
        assert_eq!(bp.embedded_payload().unwrap(), payload);
        // Payload byte 0 is the low byte of word 0.
        assert_eq!(bp.words[0] & 0xff, 0);
        assert_eq!(bp.words[7] & 0xff, 48);
        bp.validate("e").unwrap();
        assert_eq!(
            bp.to_zdb_string(),
            "EMBEDDED [L0 ZFS plain file] et=0 lz4 size=1000L/64P birth=9L"
        );
        assert_eq!(bp.to_zdb_compact(true), "EMBEDDED et=0 1000L/64P B=9");
        // Survives a round trip through the other byte order.
        let mut sw = bp.to_bytes();
        for c in sw.chunks_mut(8) {
            c.reverse();
        }
        let back = BlkPtr::from_bytes(&sw, true).unwrap();
        assert_eq!(back.embedded_payload().unwrap(), payload);
        assert!(sample().embedded_payload().is_err());
        let mut bad = bp;
        bad.words[6] |= 0x7f << 25; // psize 128
        assert!(bad.embedded_payload().is_err());
        assert!(bad.validate("bad").is_err());
    }

    #[test]
    fn validate_rejects() {
        let mut bp = sample();
        bp.words[6] = BlkPtr::make_prop(0x4000, 0x200, 3, 7, 60, 0, false, true);
        assert!(bp.validate("t").is_err());
        let mut bp = sample();
        bp.words[6] = BlkPtr::make_prop(0x4000, 0x200, 40, 7, 10, 0, false, true);
        assert!(bp.validate("c").is_err());
        let mut bp = sample();
        bp.words[6] = BlkPtr::make_prop(0x4000, 0x200, 3, 99, 10, 0, false, true);
        assert!(bp.validate("k").is_err());
        let mut bp = sample();
        bp.words[6] |= 0xffff; // lsize 32M
        assert!(bp.validate("l").is_err());
        let mut bp = sample();
        bp.words[0] = 0;
        assert!(bp.validate("asize").is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for _ in 0..5000 {
            let mut b = [0u8; 128];
            for c in b.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            let bp = BlkPtr::from_bytes(&b, x & 1 == 0).unwrap();
            let _ = bp.validate("g");
            let _ = bp.to_zdb_string();
            let _ = bp.to_zdb_compact(true);
            let _ = bp.embedded_payload();
            let _ = (bp.lsize(), bp.psize(), bp.ndvas());
        }
    }
}
