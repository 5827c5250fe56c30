//! ZAP objects: micro and fat. FORMAT.md §7.
//!
//! Decoding works on block-sized buffers handed in by the caller; blocks
//! beyond block 0 are fetched through a callback (`read_block(blkid)`), so
//! this module has no I/O and can be fuzzed directly. Every chain walk is
//! bounded (chunk chains by the number of chunks in a leaf, leaf iteration by
//! the pointer-table size), so a corrupt ZAP yields an error, never a loop.
//!
//! Micro ZAP: a single block; 64-byte header then 64-byte entries
//! (`value`, `cd`, 50-byte NUL-terminated name). Fat ZAP: block 0 is the
//! header with the pointer table (embedded in its second half, or in
//! external blocks) mapping the top `zt_shift` hash bits to leaf blocks. A
//! leaf has a 48-byte header, a table of `2^(bs-5)` u16 bucket heads, then
//! 24-byte chunks: entry chunks (252), array chunks (251, 21 payload bytes
//! each, payload always big-endian) and free chunks (253).
//!
//! Invariants enforced while decoding: chunk indexes are < the chunk count,
//! chunk types match their use, chains are at most `numchunks` long and no
//! entry chunk is visited twice, leaf block numbers are nonzero and each leaf
//! is read once, and the pointer-table shift is bounded by the hash width.

use crate::bytes::{u16_at, u32_at, u64_at};
use crate::error::{Error, Result};
use std::collections::BTreeSet;

pub const ZBT_LEAF: u64 = 0x8000_0000_0000_0000;
pub const ZBT_HEADER: u64 = 0x8000_0000_0000_0001;
pub const ZBT_MICRO: u64 = 0x8000_0000_0000_0003;
pub const ZAP_MAGIC: u64 = 0x2F52AB2AB;
pub const ZAP_LEAF_MAGIC: u32 = 0x2AB1EAF;
pub const MZAP_ENT_LEN: usize = 64;
pub const MZAP_NAME_LEN: usize = 50;
/// Normalization flag: case-fold to upper case before hashing (snapshot name ZAPs).
pub const U8_TEXTPREP_TOUPPER: u64 = 0x2;
pub const ZAP_FLAG_HASH64: u64 = 1;
pub const ZAP_FLAG_UINT64_KEY: u64 = 2;
pub const ZAP_FLAG_PRE_HASHED_KEY: u64 = 4;
/// Normalization flag: case-fold to lower case (ASCII handled here).
pub const U8_TEXTPREP_TOLOWER: u64 = 0x4;
/// Entry chunk type.
pub const ZAP_CHUNK_ENTRY: u8 = 252;
/// Array chunk type.
pub const ZAP_CHUNK_ARRAY: u8 = 251;
/// Free chunk type.
pub const ZAP_CHUNK_FREE: u8 = 253;
/// Size of one leaf chunk.
pub const ZAP_LEAF_CHUNKSIZE: usize = 24;
/// Payload bytes of one array chunk.
pub const ZAP_LEAF_ARRAY_BYTES: usize = 21;
/// "No chunk" marker.
pub const CHAIN_END: u16 = 0xffff;
/// Leaf header size (`zap_leaf_phys_t.l_hdr`).
pub const ZAP_LEAF_HDR_SIZE: usize = 48;
/// Largest pointer-table shift [`list`] will walk (2^32 entries = a 32 GiB table; real ZAPs stay far below).
pub const MAX_LIST_PTRTBL_SHIFT: u64 = 32;
/// Leaf flag: entries in each bucket are sorted by cd.
pub const ZLF_ENTRIES_CDSORTED: u8 = 1;

/// One ZAP entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZapEntry {
    /// Key bytes: for string keys the name WITHOUT its trailing NUL; for uint64-key ZAPs the key words
    /// as 8-byte big-endian groups.
    pub name: Vec<u8>,
    /// Integer length of the value (1, 2, 4, 8). Microzap values are always 8.
    pub int_len: u8,
    /// The value's integers, each widened to u64 (microzap: exactly one).
    pub value: Vec<u64>,
    /// Collision differentiator.
    pub cd: u32,
}

impl ZapEntry {
    /// The single uint64 value (int_len 8, one integer), else None.
    pub fn as_u64(&self) -> Option<u64> {
        if self.int_len == 8 && self.value.len() == 1 {
            Some(self.value[0])
        } else {
            None
        }
    }
    /// Value as bytes (int_len 1), without a trailing NUL if present.
    pub fn as_string(&self) -> Option<String> {
        if self.int_len != 1 {
            return None;
        }
        let mut v: Vec<u8> = self.value.iter().map(|&x| x as u8).collect();
        if v.last() == Some(&0) {
            v.pop();
        }
        Some(String::from_utf8_lossy(&v).into_owned())
    }
    /// Name as (lossy) UTF-8.
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Decoded header facts of a ZAP object (from block 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZapHeader {
    Micro { salt: u64, normflags: u64 },
    Fat(FatZapHeader),
}

/// `zap_phys_t` fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FatZapHeader {
    pub ptrtbl_blk: u64,
    pub ptrtbl_numblks: u64,
    pub ptrtbl_shift: u64,
    pub ptrtbl_nextblk: u64,
    pub ptrtbl_blks_copied: u64,
    pub freeblk: u64,
    pub num_leafs: u64,
    pub num_entries: u64,
    pub salt: u64,
    pub normflags: u64,
    pub flags: u64,
}

/// The CRC-64 table (reflected ECMA-182 polynomial), built at compile time.
const ZFS_CRC64_POLY: u64 = 0xC96C_5795_D787_0F42;
const CRC64_TABLE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut k = 0;
        while k < 8 {
            c = (c >> 1) ^ if c & 1 != 0 { ZFS_CRC64_POLY } else { 0 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

fn normalize_byte(b: u8, normflags: u64) -> u8 {
    if normflags & U8_TEXTPREP_TOUPPER != 0 {
        b.to_ascii_uppercase()
    } else if normflags & U8_TEXTPREP_TOLOWER != 0 {
        b.to_ascii_lowercase()
    } else {
        b
    }
}

fn hash_mask(h: u64, hashbits: u32) -> u64 {
    let bits = hashbits.clamp(1, 64);
    if bits == 64 {
        h
    } else {
        h & !((1u64 << (64 - bits)) - 1)
    }
}

/// CRC-64 (ECMA-182 reflected) ZAP hash of `name` (no NUL) with `salt`, folded to upper case first when
/// `normflags & U8_TEXTPREP_TOUPPER` (ASCII only), masked to the top `hashbits` (28, or 48 with HASH64).
pub fn zap_hash(salt: u64, name: &[u8], normflags: u64, hashbits: u32) -> u64 {
    let mut h = salt;
    for &b in name {
        if b == 0 {
            break;
        }
        let b = normalize_byte(b, normflags);
        h = (h >> 8) ^ CRC64_TABLE[((h ^ b as u64) & 0xff) as usize];
    }
    hash_mask(h, hashbits)
}

/// Hash of a binary (uint64-array) key: each word fed least significant byte first.
pub fn zap_hash_u64_key(salt: u64, key: &[u64], flags: u64) -> u64 {
    if flags & ZAP_FLAG_PRE_HASHED_KEY != 0 {
        return hash_mask(key.first().copied().unwrap_or(0), hashbits_for(flags));
    }
    let mut h = salt;
    for w in key {
        for b in w.to_le_bytes() {
            h = (h >> 8) ^ CRC64_TABLE[((h ^ b as u64) & 0xff) as usize];
        }
    }
    hash_mask(h, hashbits_for(flags))
}

/// Number of significant hash bits for a ZAP with these `zap_flags`.
pub fn hashbits_for(flags: u64) -> u32 {
    if flags & ZAP_FLAG_HASH64 != 0 {
        48
    } else {
        28
    }
}

fn block_shift(len: usize, what: &str) -> Result<u32> {
    if len < 512 || !len.is_power_of_two() {
        return Err(Error::corrupt(
            what,
            format!("block size {len} is not a power of two >= 512"),
        ));
    }
    Ok(len.trailing_zeros())
}

/// Identify the kind of ZAP from block 0 (checks block type, magic, nonzero salt, sane shift).
pub fn parse_header(block0: &[u8], swap: bool) -> Result<ZapHeader> {
    let bt = u64_at(block0, 0, swap, "zap block type")?;
    match bt {
        ZBT_MICRO => {
            if block0.len() < 2 * MZAP_ENT_LEN || block0.len() & (MZAP_ENT_LEN - 1) != 0 {
                return Err(Error::corrupt(
                    "microzap",
                    format!("block size {}", block0.len()),
                ));
            }
            let salt = u64_at(block0, 8, swap, "microzap salt")?;
            let normflags = u64_at(block0, 16, swap, "microzap normflags")?;
            if salt == 0 {
                return Err(Error::corrupt("microzap", "zero salt"));
            }
            Ok(ZapHeader::Micro { salt, normflags })
        }
        ZBT_HEADER => {
            let w = |i: usize| u64_at(block0, i * 8, swap, "fat zap header");
            let magic = w(1)?;
            if magic != ZAP_MAGIC {
                return Err(Error::BadMagic {
                    what: "fat zap header".into(),
                    found: magic,
                });
            }
            let h = FatZapHeader {
                ptrtbl_blk: w(2)?,
                ptrtbl_numblks: w(3)?,
                ptrtbl_shift: w(4)?,
                ptrtbl_nextblk: w(5)?,
                ptrtbl_blks_copied: w(6)?,
                freeblk: w(7)?,
                num_leafs: w(8)?,
                num_entries: w(9)?,
                salt: w(10)?,
                normflags: w(11)?,
                flags: w(12)?,
            };
            if h.salt == 0 {
                return Err(Error::corrupt("fat zap header", "zero salt"));
            }
            let bs = block_shift(block0.len(), "fat zap header")? as u64;
            if h.ptrtbl_shift > hashbits_for(h.flags) as u64 {
                return Err(Error::corrupt(
                    "fat zap header",
                    format!("pointer table shift {}", h.ptrtbl_shift),
                ));
            }
            if h.ptrtbl_numblks == 0 {
                if h.ptrtbl_shift > bs - 4 {
                    return Err(Error::corrupt(
                        "fat zap header",
                        format!(
                            "embedded pointer table shift {} > {}",
                            h.ptrtbl_shift,
                            bs - 4
                        ),
                    ));
                }
            } else {
                // 2^shift entries must fit in numblks blocks of 2^(bs-3) entries.
                let per_blk_shift = bs - 3;
                let need_blks = if h.ptrtbl_shift <= per_blk_shift {
                    1
                } else {
                    1u64 << (h.ptrtbl_shift - per_blk_shift)
                };
                if h.ptrtbl_numblks < need_blks || h.ptrtbl_blk == 0 {
                    return Err(Error::corrupt(
                        "fat zap header",
                        format!(
                            "external pointer table of {} blocks at {} for shift {}",
                            h.ptrtbl_numblks, h.ptrtbl_blk, h.ptrtbl_shift
                        ),
                    ));
                }
            }
            Ok(ZapHeader::Fat(h))
        }
        ZBT_LEAF => Err(Error::corrupt("zap", "block 0 is a leaf, not a header")),
        other => Err(Error::BadMagic {
            what: "zap block type".into(),
            found: other,
        }),
    }
}

/// Decode the microzap entries of `block0` (header already validated). Empty names are skipped.
fn micro_entries(block0: &[u8], swap: bool) -> Result<Vec<ZapEntry>> {
    let mut out = Vec::new();
    for off in (MZAP_ENT_LEN..block0.len()).step_by(MZAP_ENT_LEN) {
        let ent = match block0.get(off..off + MZAP_ENT_LEN) {
            Some(e) => e,
            None => break,
        };
        let name_raw = &ent[14..14 + MZAP_NAME_LEN];
        if name_raw[0] == 0 {
            continue;
        }
        let nlen = name_raw
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MZAP_NAME_LEN);
        out.push(ZapEntry {
            name: name_raw[..nlen].to_vec(),
            int_len: 8,
            value: vec![u64_at(ent, 0, swap, "mzap value")?],
            cd: u32_at(ent, 8, swap, "mzap cd")?,
        });
    }
    Ok(out)
}

/// A fat-ZAP leaf block, validated.
struct Leaf<'a> {
    buf: &'a [u8],
    swap: bool,
    bs: u32,
    prefix_len: u16,
    prefix: u64,
    nchunks: usize,
}

impl<'a> Leaf<'a> {
    fn parse(buf: &'a [u8], swap: bool, blkid: u64) -> Result<Leaf<'a>> {
        let what = format!("zap leaf {blkid}");
        let bs = block_shift(buf.len(), &what)?;
        let bt = u64_at(buf, 0, swap, &what)?;
        if bt != ZBT_LEAF {
            return Err(Error::BadMagic {
                what: format!("{what} block type"),
                found: bt,
            });
        }
        let magic = u32_at(buf, 24, swap, &what)?;
        if magic != ZAP_LEAF_MAGIC {
            return Err(Error::BadMagic {
                what: format!("{what} magic"),
                found: magic as u64,
            });
        }
        let prefix = u64_at(buf, 16, swap, &what)?;
        let prefix_len = u16_at(buf, 32, swap, &what)?;
        if prefix_len as u32 + (bs - 5) > 64 {
            return Err(Error::corrupt(what, format!("prefix_len {prefix_len}")));
        }
        let nchunks = (buf.len() - 2 * (1usize << (bs - 5))) / ZAP_LEAF_CHUNKSIZE - 2;
        Ok(Leaf {
            buf,
            swap,
            bs,
            prefix_len,
            prefix,
            nchunks,
        })
    }

    fn hash_entries(&self) -> usize {
        1usize << (self.bs - 5)
    }

    fn bucket_head(&self, i: usize) -> Result<u16> {
        u16_at(
            self.buf,
            ZAP_LEAF_HDR_SIZE + 2 * i,
            self.swap,
            "zap leaf hash table",
        )
    }

    fn chunk(&self, idx: u16) -> Result<&'a [u8]> {
        let i = idx as usize;
        if i >= self.nchunks {
            return Err(Error::corrupt(
                "zap leaf",
                format!("chunk index {i} >= {}", self.nchunks),
            ));
        }
        let off = ZAP_LEAF_HDR_SIZE + 2 * self.hash_entries() + i * ZAP_LEAF_CHUNKSIZE;
        Ok(&self.buf[off..off + ZAP_LEAF_CHUNKSIZE])
    }

    /// Bucket index for a hash.
    fn bucket_of(&self, h: u64) -> usize {
        let shift = 64 - (self.bs - 5) - self.prefix_len as u32;
        let v = if shift >= 64 { 0 } else { h >> shift };
        (v as usize) & (self.hash_entries() - 1)
    }

    /// Read `len` bytes of an array chain starting at `idx`.
    fn read_array(&self, mut idx: u16, len: usize) -> Result<Vec<u8>> {
        if len > self.nchunks * ZAP_LEAF_ARRAY_BYTES {
            return Err(Error::corrupt(
                "zap leaf",
                format!("array of {len} bytes cannot fit in the leaf"),
            ));
        }
        let mut out = Vec::with_capacity(len);
        let mut visited = vec![0u64; self.nchunks.div_ceil(64)];
        while out.len() < len {
            if idx == CHAIN_END {
                return Err(Error::corrupt("zap leaf", "array chain ends early"));
            }
            let c = self.chunk(idx)?; // checks idx < nchunks
            let (w, bit) = (idx as usize / 64, 1u64 << (idx % 64));
            if visited[w] & bit != 0 {
                return Err(Error::corrupt("zap leaf", "array chain loops"));
            }
            visited[w] |= bit;
            if c[0] != ZAP_CHUNK_ARRAY {
                return Err(Error::corrupt(
                    "zap leaf",
                    format!("chunk {idx} has type {} in an array chain", c[0]),
                ));
            }
            let take = (len - out.len()).min(ZAP_LEAF_ARRAY_BYTES);
            out.extend_from_slice(&c[1..1 + take]);
            idx = u16_at(c, 22, self.swap, "zap array next")?;
        }
        Ok(out)
    }

    /// Decode the entry chunk `idx` into (entry, le_hash, le_next).
    fn entry(&self, idx: u16, uint64_key: bool) -> Result<(ZapEntry, u64, u16)> {
        let c = self.chunk(idx)?;
        if c[0] != ZAP_CHUNK_ENTRY {
            return Err(Error::corrupt(
                "zap leaf",
                format!("chunk {idx} has type {} in a bucket chain", c[0]),
            ));
        }
        let sw = self.swap;
        let int_len = c[1];
        if !matches!(int_len, 1 | 2 | 4 | 8) {
            return Err(Error::corrupt(
                "zap leaf",
                format!("entry {idx} value int length {int_len}"),
            ));
        }
        let next = u16_at(c, 2, sw, "zap entry")?;
        let name_chunk = u16_at(c, 4, sw, "zap entry")?;
        let name_numints = u16_at(c, 6, sw, "zap entry")? as usize;
        let value_chunk = u16_at(c, 8, sw, "zap entry")?;
        let value_numints = u16_at(c, 10, sw, "zap entry")? as usize;
        let cd = u32_at(c, 12, sw, "zap entry")?;
        let hash = u64_at(c, 16, sw, "zap entry")?;
        let name = if uint64_key {
            self.read_array(name_chunk, name_numints * 8)?
        } else {
            let mut n = self.read_array(name_chunk, name_numints)?;
            if n.last() == Some(&0) {
                n.pop();
            }
            n
        };
        let raw = self.read_array(value_chunk, value_numints * int_len as usize)?;
        let value = raw
            .chunks(int_len as usize)
            .map(|ch| ch.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
            .collect();
        Ok((
            ZapEntry {
                name,
                int_len,
                value,
                cd,
            },
            hash,
            next,
        ))
    }

    /// Every entry of this leaf, bucket by bucket.
    fn entries(&self, uint64_key: bool, out: &mut Vec<ZapEntry>) -> Result<()> {
        let mut seen = vec![false; self.nchunks];
        for b in 0..self.hash_entries() {
            let mut idx = self.bucket_head(b)?;
            let mut steps = 0usize;
            while idx != CHAIN_END {
                steps += 1;
                if steps > self.nchunks {
                    return Err(Error::corrupt("zap leaf", "bucket chain loops"));
                }
                let i = idx as usize;
                if i < seen.len() {
                    if seen[i] {
                        return Err(Error::corrupt(
                            "zap leaf",
                            format!("entry chunk {i} reached twice"),
                        ));
                    }
                    seen[i] = true;
                }
                let (e, _, next) = self.entry(idx, uint64_key)?;
                out.push(e);
                idx = next;
            }
        }
        Ok(())
    }
}

/// Reads pointer-table entries of a fat ZAP, caching the current external block.
struct PtrTable<'a, 'b> {
    block0: &'a [u8],
    swap: bool,
    bs: u32,
    hdr: &'a FatZapHeader,
    read_block: &'b mut dyn FnMut(u64) -> Result<Vec<u8>>,
    cached: Option<(u64, Vec<u8>)>,
}

impl PtrTable<'_, '_> {
    fn len(&self) -> u64 {
        1u64 << self.hdr.ptrtbl_shift
    }

    fn get(&mut self, idx: u64) -> Result<u64> {
        if self.hdr.ptrtbl_numblks == 0 {
            let off = (1usize << (self.bs - 1)) + idx as usize * 8;
            return u64_at(self.block0, off, self.swap, "zap embedded pointer table");
        }
        let per_blk_shift = self.bs - 3;
        let blk = self
            .hdr
            .ptrtbl_blk
            .checked_add(idx >> per_blk_shift)
            .ok_or_else(|| Error::corrupt("zap pointer table", "block number overflow"))?;
        let slot = (idx & ((1u64 << per_blk_shift) - 1)) as usize;
        let need_read = !matches!(&self.cached, Some((b, _)) if *b == blk);
        if need_read {
            let data = (self.read_block)(blk).map_err(|e| e.context("zap pointer table"))?;
            if data.len() != self.block0.len() {
                return Err(Error::corrupt(
                    "zap pointer table",
                    format!("block {blk} has {} bytes", data.len()),
                ));
            }
            self.cached = Some((blk, data));
        }
        match &self.cached {
            Some((_, data)) => u64_at(data, slot * 8, self.swap, "zap pointer table"),
            None => Err(Error::corrupt("zap pointer table", "no block")),
        }
    }
}

fn read_leaf_block(
    read_block: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
    blk: u64,
    bsize: usize,
) -> Result<Vec<u8>> {
    if blk == 0 {
        return Err(Error::corrupt(
            "zap pointer table",
            "points at block 0 (the header)",
        ));
    }
    let data = read_block(blk).map_err(|e| e.context(&format!("zap leaf {blk}")))?;
    if data.len() != bsize {
        return Err(Error::corrupt(
            format!("zap leaf {blk}"),
            format!("block has {} bytes, expected {bsize}", data.len()),
        ));
    }
    Ok(data)
}

/// Every entry of the ZAP. `block0` is block 0 (its length is the object's block size);
/// `read_block(n)` returns block n of the object (same size).
pub fn list(
    block0: &[u8],
    swap: bool,
    read_block: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
) -> Result<Vec<ZapEntry>> {
    let hdr = match parse_header(block0, swap)? {
        ZapHeader::Micro { .. } => return micro_entries(block0, swap),
        ZapHeader::Fat(h) => h,
    };
    let bs = block_shift(block0.len(), "fat zap")?;
    if hdr.ptrtbl_shift > MAX_LIST_PTRTBL_SHIFT {
        return Err(Error::unsupported(
            "fat zap",
            format!(
                "pointer table of 2^{} entries is too large to walk",
                hdr.ptrtbl_shift
            ),
        ));
    }
    let uint64_key = hdr.flags & ZAP_FLAG_UINT64_KEY != 0;
    let mut seen_leaves = BTreeSet::new();
    let mut order = Vec::new();
    {
        let mut pt = PtrTable {
            block0,
            swap,
            bs,
            hdr: &hdr,
            read_block: &mut *read_block,
            cached: None,
        };
        let mut last = None;
        for idx in 0..pt.len() {
            let blk = pt.get(idx)?;
            if last == Some(blk) {
                continue;
            }
            last = Some(blk);
            if seen_leaves.insert(blk) {
                order.push(blk);
            }
        }
    }
    let mut out = Vec::new();
    for blk in order {
        let data = read_leaf_block(read_block, blk, block0.len())?;
        let leaf = Leaf::parse(&data, swap, blk)?;
        leaf.entries(uint64_key, &mut out)
            .map_err(|e| e.context(&format!("zap leaf {blk}")))?;
    }
    Ok(out)
}

/// Look one string key up (exact byte match on the stored name; hashing uses the ZAP's normflags).
pub fn lookup(
    block0: &[u8],
    swap: bool,
    name: &[u8],
    read_block: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
) -> Result<Option<ZapEntry>> {
    let hdr = match parse_header(block0, swap)? {
        ZapHeader::Micro { .. } => {
            return Ok(micro_entries(block0, swap)?
                .into_iter()
                .find(|e| e.name == name))
        }
        ZapHeader::Fat(h) => h,
    };
    let uint64_key = hdr.flags & ZAP_FLAG_UINT64_KEY != 0;
    let bs = block_shift(block0.len(), "fat zap")?;
    let hash = if uint64_key {
        // Binary keys (`name`: big-endian words, as leaves store them).
        if name.is_empty() || !name.len().is_multiple_of(8) {
            return Ok(None);
        }
        let words: Vec<u64> = name
            .chunks_exact(8)
            .map(|w| u64::from_be_bytes(w.try_into().unwrap_or_default()))
            .collect();
        zap_hash_u64_key(hdr.salt, &words, hdr.flags)
    } else {
        zap_hash(hdr.salt, name, hdr.normflags, hashbits_for(hdr.flags))
    };
    let idx = if hdr.ptrtbl_shift == 0 {
        0
    } else {
        hash >> (64 - hdr.ptrtbl_shift)
    };
    let blk = {
        let mut pt = PtrTable {
            block0,
            swap,
            bs,
            hdr: &hdr,
            read_block: &mut *read_block,
            cached: None,
        };
        pt.get(idx)?
    };
    let data = read_leaf_block(read_block, blk, block0.len())?;
    let leaf = Leaf::parse(&data, swap, blk)?;
    if leaf.prefix_len as u64 > hdr.ptrtbl_shift {
        return Err(Error::corrupt(
            format!("zap leaf {blk}"),
            format!(
                "prefix_len {} > pointer table shift {}",
                leaf.prefix_len, hdr.ptrtbl_shift
            ),
        ));
    }
    if leaf.prefix_len > 0 {
        let want = idx >> (hdr.ptrtbl_shift - leaf.prefix_len as u64);
        if leaf.prefix != want {
            return Err(Error::corrupt(
                format!("zap leaf {blk}"),
                format!("prefix {:#x} != expected {want:#x}", leaf.prefix),
            ));
        }
    }
    let mut cur = leaf.bucket_head(leaf.bucket_of(hash))?;
    let mut steps = 0usize;
    while cur != CHAIN_END {
        steps += 1;
        if steps > leaf.nchunks {
            return Err(Error::corrupt(
                format!("zap leaf {blk}"),
                "bucket chain loops",
            ));
        }
        let c = leaf.chunk(cur)?;
        if c[0] != ZAP_CHUNK_ENTRY {
            return Err(Error::corrupt(
                format!("zap leaf {blk}"),
                format!("chunk {cur} has type {} in a bucket chain", c[0]),
            ));
        }
        let le_hash = u64_at(c, 16, swap, "zap entry")?;
        let next = u16_at(c, 2, swap, "zap entry")?;
        if le_hash == hash {
            let name_numints = u16_at(c, 6, swap, "zap entry")? as usize;
            let want = if uint64_key {
                name.len() / 8
            } else {
                name.len() + 1
            };
            if name_numints == want {
                let (e, _, _) = leaf.entry(cur, uint64_key)?;
                if e.name == name {
                    return Ok(Some(e));
                }
            }
        }
        cur = next;
    }
    Ok(None)
}

/// Build a microzap block of `block_size` bytes (a multiple of 64, >= 128) holding `entries`
/// (name, value). Collision differentiators are assigned as OpenZFS does (lowest free per hash).
pub fn encode_microzap(
    entries: &[(&[u8], u64)],
    salt: u64,
    normflags: u64,
    block_size: usize,
) -> Result<Vec<u8>> {
    if block_size < 2 * MZAP_ENT_LEN || block_size & (MZAP_ENT_LEN - 1) != 0 {
        return Err(Error::Invalid(format!("microzap block size {block_size}")));
    }
    if entries.len() > block_size / MZAP_ENT_LEN - 1 {
        return Err(Error::Invalid(format!(
            "{} entries do not fit a {block_size}-byte microzap",
            entries.len()
        )));
    }
    let mut out = vec![0u8; block_size];
    out[0..8].copy_from_slice(&ZBT_MICRO.to_ne_bytes());
    out[8..16].copy_from_slice(&salt.to_ne_bytes());
    out[16..24].copy_from_slice(&normflags.to_ne_bytes());
    let mut used: Vec<(u64, u32)> = Vec::new();
    for (i, (name, value)) in entries.iter().enumerate() {
        if name.is_empty() || name.len() >= MZAP_NAME_LEN || name.contains(&0) {
            return Err(Error::Invalid(format!(
                "microzap name of {} bytes",
                name.len()
            )));
        }
        let h = zap_hash(salt, name, normflags, 28);
        let mut cd = 0u32;
        while used.contains(&(h, cd)) {
            cd += 1;
        }
        used.push((h, cd));
        let off = MZAP_ENT_LEN * (i + 1);
        out[off..off + 8].copy_from_slice(&value.to_ne_bytes());
        out[off + 8..off + 12].copy_from_slice(&cd.to_ne_bytes());
        out[off + 14..off + 14 + name.len()].copy_from_slice(name);
    }
    Ok(out)
}

/// Build a single-leaf fat ZAP (header block 0 with an embedded pointer table, leaf block 1),
/// as OpenZFS lays out a freshly created fat ZAP. `entries` are (string name without NUL,
/// int_len, values). Returns `[block0, block1]`, each `block_size` bytes (a power of two >= 1 K).
pub fn encode_fat_zap_single_leaf(
    entries: &[(&[u8], u8, &[u64])],
    salt: u64,
    normflags: u64,
    block_size: usize,
) -> Result<Vec<Vec<u8>>> {
    if block_size < 1024 || !block_size.is_power_of_two() {
        return Err(Error::Invalid(format!("fat zap block size {block_size}")));
    }
    let bs = block_size.trailing_zeros();
    let mut hdr = vec![0u8; block_size];
    let shift = (bs - 4) as u64;
    let words = [
        ZBT_HEADER,
        ZAP_MAGIC,
        0,
        0,
        shift,
        0,
        0,
        2,
        1,
        entries.len() as u64,
        salt,
        normflags,
        0,
    ];
    for (i, w) in words.iter().enumerate() {
        hdr[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    let half = block_size / 2;
    for i in 0..(1usize << shift) {
        hdr[half + i * 8..half + i * 8 + 8].copy_from_slice(&1u64.to_ne_bytes());
    }

    let mut leaf = vec![0u8; block_size];
    let nhash = 1usize << (bs - 5);
    let nchunks = (block_size - 2 * nhash) / ZAP_LEAF_CHUNKSIZE - 2;
    let chunk_off = |i: usize| ZAP_LEAF_HDR_SIZE + 2 * nhash + i * ZAP_LEAF_CHUNKSIZE;
    let mut heads = vec![CHAIN_END; nhash];
    let mut next_free = 0usize;
    let mut alloc = |n: usize| -> Result<usize> {
        if next_free + n > nchunks {
            return Err(Error::Invalid("entries do not fit in one leaf".into()));
        }
        let s = next_free;
        next_free += n;
        Ok(s)
    };
    // Write a byte stream as an array chain; returns the first chunk.
    let write_array = |leaf: &mut Vec<u8>,
                       bytes: &[u8],
                       alloc: &mut dyn FnMut(usize) -> Result<usize>|
     -> Result<u16> {
        let n = bytes.len().div_ceil(ZAP_LEAF_ARRAY_BYTES).max(1);
        let first = alloc(n)?;
        for k in 0..n {
            let off = chunk_off(first + k);
            leaf[off] = ZAP_CHUNK_ARRAY;
            let lo = k * ZAP_LEAF_ARRAY_BYTES;
            let hi = (lo + ZAP_LEAF_ARRAY_BYTES).min(bytes.len());
            if lo < hi {
                leaf[off + 1..off + 1 + hi - lo].copy_from_slice(&bytes[lo..hi]);
            }
            let nx = if k + 1 == n {
                CHAIN_END
            } else {
                (first + k + 1) as u16
            };
            leaf[off + 22..off + 24].copy_from_slice(&nx.to_ne_bytes());
        }
        Ok(first as u16)
    };
    let mut placed: Vec<(usize, u64, u32)> = Vec::new(); // (chunk, hash, cd)
    for (name, int_len, values) in entries {
        if !matches!(int_len, 1 | 2 | 4 | 8) || name.contains(&0) {
            return Err(Error::Invalid("bad fat zap entry".into()));
        }
        let h = zap_hash(salt, name, normflags, 28);
        let mut cd = 0u32;
        while placed.iter().any(|&(_, ph, pcd)| ph == h && pcd == cd) {
            cd += 1;
        }
        let e = alloc(1)?;
        let mut nb = name.to_vec();
        nb.push(0);
        let name_chunk = write_array(&mut leaf, &nb, &mut alloc)?;
        let mut vb = Vec::with_capacity(values.len() * *int_len as usize);
        for v in values.iter() {
            let be = v.to_be_bytes();
            vb.extend_from_slice(&be[8 - *int_len as usize..]);
        }
        let value_chunk = write_array(&mut leaf, &vb, &mut alloc)?;
        let off = chunk_off(e);
        leaf[off] = ZAP_CHUNK_ENTRY;
        leaf[off + 1] = *int_len;
        leaf[off + 4..off + 6].copy_from_slice(&name_chunk.to_ne_bytes());
        leaf[off + 6..off + 8].copy_from_slice(&(nb.len() as u16).to_ne_bytes());
        leaf[off + 8..off + 10].copy_from_slice(&value_chunk.to_ne_bytes());
        leaf[off + 10..off + 12].copy_from_slice(&(values.len() as u16).to_ne_bytes());
        leaf[off + 12..off + 16].copy_from_slice(&cd.to_ne_bytes());
        leaf[off + 16..off + 24].copy_from_slice(&h.to_ne_bytes());
        placed.push((e, h, cd));
    }
    // Link bucket chains sorted by cd (stable for equal cds).
    let bucket = |h: u64| ((h >> (64 - (bs - 5))) as usize) & (nhash - 1);
    let mut order: Vec<&(usize, u64, u32)> = placed.iter().collect();
    order.sort_by_key(|&&(_, h, cd)| (bucket(h), std::cmp::Reverse(cd)));
    for &&(e, h, _) in &order {
        let b = bucket(h);
        let off = chunk_off(e);
        leaf[off + 2..off + 4].copy_from_slice(&heads[b].to_ne_bytes());
        heads[b] = e as u16;
    }
    for (b, head) in heads.iter().enumerate() {
        let off = ZAP_LEAF_HDR_SIZE + 2 * b;
        leaf[off..off + 2].copy_from_slice(&head.to_ne_bytes());
    }
    // Chain the remaining chunks as free.
    for i in next_free..nchunks {
        let off = chunk_off(i);
        leaf[off] = ZAP_CHUNK_FREE;
        let nx = if i + 1 == nchunks {
            CHAIN_END
        } else {
            (i + 1) as u16
        };
        leaf[off + 22..off + 24].copy_from_slice(&nx.to_ne_bytes());
    }
    leaf[0..8].copy_from_slice(&ZBT_LEAF.to_ne_bytes());
    leaf[16..24].copy_from_slice(&0u64.to_ne_bytes());
    leaf[24..28].copy_from_slice(&ZAP_LEAF_MAGIC.to_ne_bytes());
    leaf[28..30].copy_from_slice(&((nchunks - next_free) as u16).to_ne_bytes());
    leaf[30..32].copy_from_slice(&(entries.len() as u16).to_ne_bytes());
    leaf[32..34].copy_from_slice(&0u16.to_ne_bytes());
    let fl = if next_free < nchunks {
        next_free as u16
    } else {
        CHAIN_END
    };
    leaf[34..36].copy_from_slice(&fl.to_ne_bytes());
    leaf[36] = if normflags != 0 {
        ZLF_ENTRIES_CDSORTED
    } else {
        0
    };
    Ok(vec![hdr, leaf])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_blocks(_: u64) -> Result<Vec<u8>> {
        Err(Error::not_found("block"))
    }

    #[test]
    fn hash_golden() {
        // Values computed independently from the FORMAT.md §7.1 definition.
        assert_eq!(zap_hash(0x1234, b"ROOT", 0, 28), 0xb4b7_0a20_0000_0000);
        assert_eq!(
            zap_hash(0x1234, b"root", U8_TEXTPREP_TOUPPER, 28),
            0xb4b7_0a20_0000_0000
        );
        assert_eq!(zap_hash(0xdead_beef, b"abc", 0, 28), 0x3e79_96f0_0000_0000);
        assert_eq!(zap_hash(0x1234, b"", 0, 28), 0);
        assert_eq!(zap_hash(0x1234, b"ROOT", 0, 64) >> 36, 0xb4b_70a2);
    }

    /// A microzap built byte by byte: ROOT -> 3, DELETE_QUEUE -> 2, VERSION -> 4 (slot 3 empty).
    fn hand_microzap() -> Vec<u8> {
        let mut b = vec![0u8; 512];
        let put =
            |b: &mut Vec<u8>, off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, 0, ZBT_MICRO);
        put(&mut b, 8, 0x1234);
        for (slot, name, val) in [
            (1, &b"ROOT"[..], 3u64),
            (2, b"DELETE_QUEUE", 2),
            (4, b"VERSION", 4),
        ] {
            let off = slot * 64;
            put(&mut b, off, val);
            b[off + 14..off + 14 + name.len()].copy_from_slice(name);
        }
        b
    }

    #[test]
    fn microzap_list_lookup() {
        let b = hand_microzap();
        assert_eq!(
            parse_header(&b, false).unwrap(),
            ZapHeader::Micro {
                salt: 0x1234,
                normflags: 0
            }
        );
        let l = list(&b, false, &mut no_blocks).unwrap();
        let names: Vec<String> = l.iter().map(|e| e.name_str()).collect();
        assert_eq!(names, ["ROOT", "DELETE_QUEUE", "VERSION"]);
        let e = lookup(&b, false, b"VERSION", &mut no_blocks)
            .unwrap()
            .unwrap();
        assert_eq!(e.as_u64(), Some(4));
        assert_eq!(e.int_len, 8);
        assert!(lookup(&b, false, b"version", &mut no_blocks)
            .unwrap()
            .is_none());
        // Encoder produces the same entries.
        let enc = encode_microzap(
            &[(b"ROOT", 3), (b"DELETE_QUEUE", 2), (b"VERSION", 4)],
            0x1234,
            0,
            512,
        )
        .unwrap();
        let l2 = list(&enc, false, &mut no_blocks).unwrap();
        assert_eq!(l2, l);
        // Byteswapped microzap.
        let mut sw = b.clone();
        for off in (0..512).step_by(64) {
            sw[off..off + 8].reverse();
            if off > 0 {
                sw[off + 8..off + 12].reverse();
            } else {
                sw[8..16].reverse();
                sw[16..24].reverse();
            }
        }
        assert_eq!(list(&sw, true, &mut no_blocks).unwrap(), l);
    }

    /// A 1 K fat ZAP built by hand: header (embedded table, shift 6, all -> leaf 1)
    /// and one leaf holding "abc" -> 42 (entry chunk 0, name chunk 1, value chunk 2).
    fn hand_fat() -> (Vec<u8>, Vec<u8>) {
        let salt = 0xdead_beefu64;
        let mut h = vec![0u8; 1024];
        let words = [ZBT_HEADER, ZAP_MAGIC, 0, 0, 6, 0, 0, 2, 1, 1, salt, 0, 0];
        for (i, w) in words.iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        for i in 0..64 {
            h[512 + i * 8..520 + i * 8].copy_from_slice(&1u64.to_ne_bytes());
        }
        let mut l = vec![0u8; 1024];
        l[0..8].copy_from_slice(&ZBT_LEAF.to_ne_bytes());
        l[24..28].copy_from_slice(&ZAP_LEAF_MAGIC.to_ne_bytes());
        // 32 buckets of u16 at 48..112, all empty except bucket 7.
        for b in 0..32 {
            l[48 + 2 * b..50 + 2 * b].copy_from_slice(&0xffffu16.to_ne_bytes());
        }
        l[48 + 14..48 + 16].copy_from_slice(&0u16.to_ne_bytes());
        let c = |i: usize| 112 + 24 * i;
        // entry chunk 0
        let e = c(0);
        l[e] = 252;
        l[e + 1] = 8;
        l[e + 2..e + 4].copy_from_slice(&0xffffu16.to_ne_bytes());
        l[e + 4..e + 6].copy_from_slice(&1u16.to_ne_bytes());
        l[e + 6..e + 8].copy_from_slice(&4u16.to_ne_bytes());
        l[e + 8..e + 10].copy_from_slice(&2u16.to_ne_bytes());
        l[e + 10..e + 12].copy_from_slice(&1u16.to_ne_bytes());
        l[e + 16..e + 24].copy_from_slice(&0x3e79_96f0_0000_0000u64.to_ne_bytes());
        // name array chunk 1: "abc\0"
        let a = c(1);
        l[a] = 251;
        l[a + 1..a + 5].copy_from_slice(b"abc\0");
        l[a + 22..a + 24].copy_from_slice(&0xffffu16.to_ne_bytes());
        // value array chunk 2: 42 as big-endian u64
        let v = c(2);
        l[v] = 251;
        l[v + 1..v + 9].copy_from_slice(&42u64.to_be_bytes());
        l[v + 22..v + 24].copy_from_slice(&0xffffu16.to_ne_bytes());
        (h, l)
    }

    #[test]
    fn fat_hand_built() {
        let (h, l) = hand_fat();
        let mut rb = |n: u64| -> Result<Vec<u8>> {
            if n == 1 {
                Ok(l.clone())
            } else {
                Err(Error::not_found(format!("block {n}")))
            }
        };
        match parse_header(&h, false).unwrap() {
            ZapHeader::Fat(f) => {
                assert_eq!(f.ptrtbl_shift, 6);
                assert_eq!(f.salt, 0xdead_beef);
            }
            _ => panic!("not fat"),
        }
        let all = list(&h, false, &mut rb).unwrap();
        assert_eq!(
            all,
            vec![ZapEntry {
                name: b"abc".to_vec(),
                int_len: 8,
                value: vec![42],
                cd: 0
            }]
        );
        let e = lookup(&h, false, b"abc", &mut rb).unwrap().unwrap();
        assert_eq!(e.as_u64(), Some(42));
        assert!(lookup(&h, false, b"abd", &mut rb).unwrap().is_none());
    }

    #[test]
    fn fat_encoder_round_trip() {
        let long = vec![b'x'; 200];
        let s = b"a string value\0".map(|b| b as u64);
        let names: Vec<String> = (0..150).map(|i| format!("entry-{i:04}")).collect();
        let vals: Vec<[u64; 1]> = (0..150).map(|i| [i as u64 * 1000]).collect();
        let mut entries: Vec<(&[u8], u8, &[u64])> = names
            .iter()
            .zip(vals.iter())
            .map(|(n, v)| (n.as_bytes(), 8u8, &v[..]))
            .collect();
        entries.push((&long, 8, &[1, 2, 3]));
        entries.push((b"comment", 1, &s));
        entries.push((b"layout", 2, &[5, 6, 0xffff]));
        let blocks = encode_fat_zap_single_leaf(&entries, 0x5eed, 0, 16384).unwrap();
        let mut rb = |n: u64| -> Result<Vec<u8>> {
            blocks
                .get(n as usize)
                .cloned()
                .ok_or_else(|| Error::not_found(format!("block {n}")))
        };
        let all = list(&blocks[0], false, &mut rb).unwrap();
        assert_eq!(all.len(), entries.len());
        for (n, il, v) in &entries {
            let e = lookup(&blocks[0], false, n, &mut rb).unwrap().unwrap();
            assert_eq!(&e.name[..], *n);
            assert_eq!(e.int_len, *il);
            assert_eq!(&e.value[..], *v);
            assert!(all.contains(&e));
        }
        let c = lookup(&blocks[0], false, b"comment", &mut rb)
            .unwrap()
            .unwrap();
        assert_eq!(c.as_string().as_deref(), Some("a string value"));
        assert!(lookup(&blocks[0], false, b"missing", &mut rb)
            .unwrap()
            .is_none());
    }

    #[test]
    fn fat_toupper_and_external_table() {
        let entries: Vec<(&[u8], u8, &[u64])> = vec![
            (b"Snap1", 8, &[11]),
            (b"snap2", 8, &[12]),
            (b"SNAP3", 8, &[13]),
        ];
        let mut blocks =
            encode_fat_zap_single_leaf(&entries, 0x77, U8_TEXTPREP_TOUPPER, 16384).unwrap();
        {
            let mut rb = |n: u64| -> Result<Vec<u8>> {
                blocks
                    .get(n as usize)
                    .cloned()
                    .ok_or_else(|| Error::not_found("b"))
            };
            let e = lookup(&blocks[0], false, b"snap2", &mut rb)
                .unwrap()
                .unwrap();
            assert_eq!(e.as_u64(), Some(12));
            // Exact match only: the case-folded hash leads to the right bucket, the name differs.
            assert!(lookup(&blocks[0], false, b"SNAP2", &mut rb)
                .unwrap()
                .is_none());
        }
        // Move the pointer table to an external block 2 with shift 11 (2048 entries, all -> 1).
        let mut ext = vec![0u8; 16384];
        for i in 0..2048 {
            ext[i * 8..i * 8 + 8].copy_from_slice(&1u64.to_ne_bytes());
        }
        blocks.push(ext);
        blocks[0][16..24].copy_from_slice(&2u64.to_ne_bytes());
        blocks[0][24..32].copy_from_slice(&1u64.to_ne_bytes());
        blocks[0][32..40].copy_from_slice(&11u64.to_ne_bytes());
        for b in blocks[0][8192..].iter_mut() {
            *b = 0;
        }
        let mut rb = |n: u64| -> Result<Vec<u8>> {
            blocks
                .get(n as usize)
                .cloned()
                .ok_or_else(|| Error::not_found("b"))
        };
        let b0 = rb(0).unwrap();
        assert_eq!(list(&b0, false, &mut rb).unwrap().len(), 3);
        let e = lookup(&b0, false, b"SNAP3", &mut rb).unwrap().unwrap();
        assert_eq!(e.as_u64(), Some(13));
    }

    #[test]
    fn corrupt_chains_error() {
        let (h, mut l) = hand_fat();
        // Make the entry chain point to itself.
        let e = 112;
        l[e + 2..e + 4].copy_from_slice(&0u16.to_ne_bytes());
        let mut rb = |_n: u64| -> Result<Vec<u8>> { Ok(l.clone()) };
        assert!(list(&h, false, &mut rb).is_err());
        // Pointer table pointing at block 0.
        let (mut h2, l2) = hand_fat();
        h2[512..520].copy_from_slice(&0u64.to_ne_bytes());
        let mut rb2 = |_n: u64| -> Result<Vec<u8>> { Ok(l2.clone()) };
        assert!(list(&h2, false, &mut rb2).is_err());
        // Array chain loop.
        let (h3, mut l3) = hand_fat();
        let a = 112 + 24;
        l3[a + 22..a + 24].copy_from_slice(&1u16.to_ne_bytes());
        l3[e + 6..e + 8].copy_from_slice(&100u16.to_ne_bytes());
        let mut rb3 = |_n: u64| -> Result<Vec<u8>> { Ok(l3.clone()) };
        assert!(list(&h3, false, &mut rb3).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let (h, l) = hand_fat();
        let mz = hand_microzap();
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..4000 {
            let mut hh = h.clone();
            let mut ll = l.clone();
            let mut m = mz.clone();
            for _ in 0..(1 + i % 6) {
                let r = next();
                let target = (r >> 60) % 3;
                let pos = (r as usize >> 8) % 1024;
                match target {
                    0 if pos < 112 || i % 2 == 0 => hh[pos] = (r >> 32) as u8,
                    1 => ll[pos] = (r >> 32) as u8,
                    _ => m[pos % 512] = (r >> 32) as u8,
                }
            }
            let mut rb = |n: u64| -> Result<Vec<u8>> {
                if n == 1 {
                    Ok(ll.clone())
                } else if n < 4 {
                    Ok(hh.clone())
                } else {
                    Err(Error::not_found("b"))
                }
            };
            let _ = list(&hh, false, &mut rb);
            let _ = lookup(&hh, false, b"abc", &mut rb);
            let _ = list(&hh, true, &mut rb);
            let _ = list(&m, false, &mut rb);
            let _ = lookup(&m, true, b"ROOT", &mut rb);
        }
    }
}
