//! The write side of the ZIO pipeline: compress → checksum → allocate →
//! write every copy, producing the block pointer; and the free side.
//!
//! Policy (FORMAT.md §2.10): compression is attempted into a buffer one
//! eighth smaller than the logical size; the result is rounded up to 512
//! bytes and kept only if still smaller than LSIZE. With compression on, an
//! all-zero block becomes a hole and nothing is written. Each copy (DVA) is
//! allocated on a different top-level vdev when possible.
//!
//! Invariants:
//! * A BP is returned only after every copy was written (or, for a degraded
//!   mirror/RAID-Z, enough of it to read it back).
//! * [`Pool::rewrite_block`] overwrites in place only blocks born in the txg
//!   being synced (no committed uberblock can reference them) and only when
//!   the new physical size needs no more space than each DVA holds; never
//!   a deduplicated block (others may share it).
//! * A deduplicated block is written only through the pool's dedup table
//!   ([`crate::ddt`]), and freed only by it.

use crate::metaslab::Allocator;
use crate::pool::Pool;
use ozfs_codec::crypt::{Sealed, Sealer};
use ozfs_codec::{checksum, compress};
use ozfs_format::blkptr::Dva;
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::types::{cksum as ck, comp};
use ozfs_format::{BlkPtr, Error, Result};
use std::sync::Arc;

/// How to write one block.
#[derive(Debug, Clone)]
pub struct BlockProps {
    pub object_type: u8,
    pub level: u8,
    /// Checksum function (never "on"/"inherit": resolve first).
    pub checksum: u8,
    /// Compression function (never "on"/"inherit": resolve first).
    pub compress: u8,
    /// Number of DVAs, 1..=3.
    pub copies: usize,
    /// The pool's checksum salt, which keys skein, edon-r and blake3
    /// (None: the pool has none, and those checksums cannot be written).
    pub salt: Option<checksum::Salt>,
    /// What seals the blocks of the encrypted objset the block belongs to
    /// (its master key, or a raw receive's MACs): the block is sealed
    /// after compression and before its checksum. None: not an encrypted
    /// objset.
    pub seal: Option<Arc<Sealer>>,
    /// Deduplicate the block through the pool's dedup table (`checksum`
    /// is then the table's function); with `dedup_verify`, a match is
    /// read back and compared before it is shared.
    pub dedup: bool,
    pub dedup_verify: bool,
}

impl BlockProps {
    /// The number of DVAs a block gets: an encrypted block keeps its
    /// salt and IV where the third would be.
    pub fn dva_count(&self, sealed: Option<&Sealed>) -> usize {
        let n = self.copies.clamp(1, 3);
        // As OpenZFS's write policy: every block of an encrypted type in
        // an encrypted objset (indirect ones too) has at most two.
        if sealed.is_some_and(|s| s.params.is_some())
            || (sealed.is_some() && ozfs_format::types::object_type_is_encrypted(self.object_type))
        {
            n.min(2)
        } else {
            n
        }
    }
}

/// The physical form of a block before allocation.
pub struct Encoded {
    /// PSIZE bytes (zero-padded compressed stream, or the data itself).
    pub data: Vec<u8>,
    pub compress: u8,
    pub lsize: u64,
    /// The checksum of `data` under the block's checksum function, computed
    /// where the block was encoded (on the encoder threads for a txg).
    pub cksum: ozfs_format::Cksum,
    /// What sealing put in the pointer (encrypted objsets only).
    pub sealed: Option<Sealed>,
}

/// Compress `data` per `p` (FORMAT.md §2.10). None = all zeros with compression on (a hole).
pub fn encode(data: &[u8], p: &BlockProps) -> Result<Option<Encoded>> {
    encode_cow(std::borrow::Cow::Borrowed(data), p)
}

/// [`encode`] of bytes that may be owned: a block stored as it is (no
/// compression, or none that pays, and no sealing) keeps its own buffer.
pub fn encode_cow(data: std::borrow::Cow<'_, [u8]>, p: &BlockProps) -> Result<Option<Encoded>> {
    let lsize = data.len() as u64;
    if lsize == 0 || !lsize.is_multiple_of(512) {
        return Err(Error::Invalid(format!(
            "block of {lsize} bytes is not a multiple of 512"
        )));
    }
    let mut c = p.compress;
    if p.seal.is_some()
        && p.level == 0
        && (p.object_type == ozfs_format::types::ot::DNODE
            || p.object_type == ozfs_format::types::ot::OBJSET)
    {
        // Sealed dnode and objset blocks are stored uncompressed, as
        // OpenZFS's write policy keeps them (ZIO_COMPRESS_EMPTY: only an
        // all-zero dnode block is not written, a hole).
        if p.object_type == ozfs_format::types::ot::DNODE && data.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        c = comp::OFF;
    }
    if c == comp::OFF || c == comp::INHERIT || c == comp::EMPTY {
        return stored(data, lsize, p).map(Some);
    }
    if data.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let cap = (lsize - lsize / 8) as usize;
    let mut buf = vec![0u8; cap];
    if let Some(n) = compress::compress(c, &data, &mut buf)? {
        let psize = (n as u64).div_ceil(512) * 512;
        if psize < lsize {
            buf.truncate(n);
            buf.resize(psize as usize, 0);
            return with_cksum(buf, &data, c, lsize, p).map(Some);
        }
    }
    stored(data, lsize, p).map(Some)
}

/// A block stored uncompressed: an unsealed one is its own bytes (an
/// owned buffer is kept, not copied); sealing needs the logical bytes
/// beside the ones it encrypts.
fn stored(data: std::borrow::Cow<'_, [u8]>, lsize: u64, p: &BlockProps) -> Result<Encoded> {
    if p.seal.is_some() {
        return with_cksum(data.to_vec(), &data, comp::OFF, lsize, p);
    }
    let data = data.into_owned();
    let cksum = sealed_cksum(&data, p, None)?;
    Ok(Encoded {
        data,
        compress: comp::OFF,
        lsize,
        cksum,
        sealed: None,
    })
}

/// Seal (in an encrypted objset) and checksum the physical bytes `data`
/// of the block whose logical contents are `logical`. A sealed block's
/// checksum words 2–3 are its MAC and words 0–1 a truncated checksum of
/// the stored bytes, folded (words 2–3 XORed in) for a checksum not
/// strong enough for dedup, as OpenZFS's `zio_checksum_compute`; an
/// objset block keeps its whole checksum.
fn with_cksum(
    mut data: Vec<u8>,
    logical: &[u8],
    compress: u8,
    lsize: u64,
    p: &BlockProps,
) -> Result<Encoded> {
    let sealed = match &p.seal {
        Some(k) => Some(k.seal(p.object_type, p.level, logical, &mut data)?),
        None => None,
    };
    let cksum = sealed_cksum(&data, p, sealed.as_ref())?;
    Ok(Encoded {
        data,
        compress,
        lsize,
        cksum,
        sealed,
    })
}

/// The checksum a block's pointer carries: of its stored bytes under
/// `p.checksum`; a sealed block's words 2–3 are its MAC and words 0–1 a
/// truncated checksum, folded for a checksum not strong enough for dedup.
fn sealed_cksum(
    data: &[u8],
    p: &BlockProps,
    sealed: Option<&Sealed>,
) -> Result<ozfs_format::Cksum> {
    let mut cksum = if p.checksum == ck::OFF {
        Default::default()
    } else {
        checksum::compute_salted(p.checksum, data, false, p.salt.as_ref())?
    };
    if let Some(mac) = sealed.and_then(|s| s.mac) {
        if !checksum::dedup_capable(p.checksum) {
            cksum.0[0] ^= cksum.0[2];
            cksum.0[1] ^= cksum.0[3];
        }
        cksum.0[2] = u64::from_le_bytes(mac[..8].try_into().unwrap_or([0; 8]));
        cksum.0[3] = u64::from_le_bytes(mac[8..].try_into().unwrap_or([0; 8]));
    }
    Ok(cksum)
}

/// The physical form of a block of an encrypted objset received raw:
/// `data` as stored by the sender (compressed with `compress`, sealed as
/// `sealed` says), its checksum computed under `p.checksum`.
pub fn encode_sealed(
    data: Vec<u8>,
    compress: u8,
    lsize: u64,
    p: &BlockProps,
    sealed: Sealed,
) -> Result<Encoded> {
    if data.is_empty() || !data.len().is_multiple_of(512) || lsize == 0 {
        return Err(Error::Invalid(format!(
            "raw block of {} bytes ({lsize} logical)",
            data.len()
        )));
    }
    let cksum = sealed_cksum(&data, p, Some(&sealed))?;
    Ok(Encoded {
        data,
        compress,
        lsize,
        cksum,
        sealed: Some(sealed),
    })
}

impl Pool {
    /// Allocation size of `psize` on top-level vdev `vdev`.
    pub fn psize_to_asize(&self, alloc: &Allocator, vdev: u64, psize: u64) -> u64 {
        alloc
            .group(vdev)
            .map(|g| g.psize_to_asize(psize))
            .unwrap_or(psize)
    }

    /// Space charged for a BP (`dsize`): Σ DVA asizes, deflated on RAID-Z when the pool uses deflate.
    pub fn dsize(&self, bp: &BlkPtr, deflate: bool) -> u64 {
        if bp.is_hole() || bp.is_embedded() {
            return 0;
        }
        bp.dvas()
            .iter()
            .filter(|d| !d.is_empty())
            .map(|d| {
                let ratio = if deflate {
                    self.deflate_ratio(d.vdev)
                } else {
                    512
                };
                (d.asize >> 9) * ratio
            })
            .sum()
    }

    /// `vdev_deflate_ratio`: 512 for mirrors/disks, smaller for RAID-Z —
    /// at the vdev's original width for an expanded one, as OpenZFS sets
    /// it (`vdev_psize_to_asize_txg` at txg 0), so charges stay what they
    /// were whatever the width a block was written at.
    pub fn deflate_ratio(&self, vdev: u64) -> u64 {
        match self.root.children.get(vdev as usize) {
            Some(top) => match top.kind {
                ozfs_vdev::VdevKind::Raidz { nparity } => {
                    let original = top.children.len().saturating_sub(top.raidz_widths.len());
                    let a = ozfs_codec::raidz::raidz_asize(
                        131072,
                        top.ashift as u32,
                        original.max(nparity + 1),
                        nparity,
                    );
                    if a == 0 {
                        512
                    } else {
                        131072 / (a >> 9)
                    }
                }
                ozfs_vdev::VdevKind::Draid { ref layout } => {
                    131072 / (layout.asize(131072) >> 9).max(1)
                }
                _ => 512,
            },
            None => 512,
        }
    }

    fn make_bp(e: &Encoded, p: &BlockProps, txg: u64, fill: u64, dvas: &[Dva]) -> Result<BlkPtr> {
        let psize = e.data.len() as u64;
        let mut bp = BlkPtr::default();
        for (i, d) in dvas.iter().enumerate() {
            bp.set_dva(i, d);
        }
        bp.words[6] = BlkPtr::make_prop(
            e.lsize,
            psize,
            e.compress,
            p.checksum,
            p.object_type,
            p.level,
            false,
            HOST_LITTLE_ENDIAN,
        );
        bp.words[10] = txg;
        bp.words[11] = fill;
        bp.set_cksum(e.cksum);
        if let Some(s) = &e.sealed {
            // BP_USES_CRYPT; an encrypted block's salt and IV go where its
            // third DVA would be and into the fill word's high half.
            bp.words[6] |= 1 << 61;
            if let Some((salt, iv)) = s.params {
                if dvas.len() > 2 || fill > u32::MAX as u64 {
                    return Err(Error::Invalid(format!(
                        "encrypted block with {} copies and fill {fill}",
                        dvas.len()
                    )));
                }
                let w = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                bp.words[4] = w(&salt);
                bp.words[5] = w(&iv[..8]);
                let hi = u32::from_le_bytes(iv[8..].try_into().unwrap_or([0; 4]));
                bp.words[11] = fill | (hi as u64) << 32;
            }
        }
        Ok(bp)
    }

    /// Write a new block: encode, allocate `copies` DVAs, write them. Returns a hole BP
    /// (all zero) for an all-zero block with compression on.
    pub fn write_block(
        &self,
        alloc: &mut Allocator,
        txg: u64,
        data: &[u8],
        p: &BlockProps,
        fill: u64,
    ) -> Result<BlkPtr> {
        let Some(e) = encode(data, p)? else {
            return Ok(BlkPtr::default());
        };
        self.write_encoded(alloc, txg, e, p, fill)
    }

    /// Allocate and write an already encoded block (see [`encode_many`]).
    pub fn write_encoded(
        &self,
        alloc: &mut Allocator,
        txg: u64,
        e: Encoded,
        p: &BlockProps,
        fill: u64,
    ) -> Result<BlkPtr> {
        if p.dedup && p.level == 0 && e.sealed.is_none() {
            let mut g = self.ddt.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(ddt) = g.as_mut() {
                return self.write_dedup(ddt, alloc, txg, e, p, fill);
            }
        }
        self.place(alloc, txg, e, p, fill).map(|(bp, _)| bp)
    }

    /// Allocate the block's copies, make its pointer and queue its writes
    /// (the encoded bytes go to the queue as they are: no copy).
    fn place(
        &self,
        alloc: &mut Allocator,
        txg: u64,
        e: Encoded,
        p: &BlockProps,
        fill: u64,
    ) -> Result<(BlkPtr, Vec<Dva>)> {
        let count = p.dva_count(e.sealed.as_ref());
        let dvas = self.alloc_dvas(alloc, txg, e.data.len() as u64, count)?;
        let bp = Self::make_bp(&e, p, txg, fill, &dvas)?;
        self.write_dvas(&dvas, Arc::new(e.data))?;
        Ok((bp, dvas))
    }

    /// A dedup write (`zio_ddt_write`): a block the table holds with as
    /// many copies is shared — no allocation, no I/O, one more reference,
    /// the pointer's physical birth the stored block's — and any other is
    /// written and recorded. With `dedup_verify` a match is read back
    /// first; if the bytes differ (a checksum collision) the block is
    /// written as an ordinary one.
    fn write_dedup(
        &self,
        ddt: &mut crate::ddt::Ddt,
        alloc: &mut Allocator,
        txg: u64,
        e: Encoded,
        p: &BlockProps,
        fill: u64,
    ) -> Result<BlkPtr> {
        use crate::ddt::{DdtKey, DedupHit};
        let psize = e.data.len() as u64;
        let key = DdtKey::new(&e.cksum, e.lsize, psize, e.compress, false);
        let copies = p.copies.clamp(1, 3);
        let mark = |mut bp: BlkPtr, birth: u64| {
            bp.words[6] |= 1 << 62;
            bp.words[9] = if birth == txg { 0 } else { birth };
            bp
        };
        match ddt.write(p.checksum, &key, copies)? {
            DedupHit::Stored { dvas, birth } => {
                let bp = mark(Self::make_bp(&e, p, txg, fill, &dvas)?, birth);
                if !p.dedup_verify || self.holds(&dvas, birth, &e.data) {
                    return Ok(bp);
                }
                // A collision (or a copy that cannot be read back): give
                // the reference back and write the block apart.
                ddt.free(&bp)?;
                self.place(alloc, txg, e, p, fill).map(|(bp, _)| bp)
            }
            DedupHit::Plain => self.place(alloc, txg, e, p, fill).map(|(bp, _)| bp),
            DedupHit::Write => {
                let (bp, dvas) = self.place(alloc, txg, e, p, fill)?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                ddt.record(p.checksum, &key, copies, &dvas, txg, now)?;
                Ok(mark(bp, txg))
            }
        }
    }

    /// Whether the block stored at `dvas` (born in `birth`) is `data`.
    fn holds(&self, dvas: &[Dva], birth: u64, data: &[u8]) -> bool {
        dvas.iter().any(|d| {
            self.writeback.wait_written(d.vdev, d.offset);
            self.root.children.get(d.vdev as usize).is_some_and(|top| {
                top.read_block_born(
                    d.offset,
                    data.len() as u64,
                    birth,
                    &|b| b == data,
                    &Default::default(),
                )
                .is_ok_and(|b| b == data)
            })
        })
    }

    /// Allocate `count` copies of `psize` bytes, each on another vdev
    /// where there is one (all or none: a failure gives back what was
    /// taken).
    fn alloc_dvas(
        &self,
        alloc: &mut Allocator,
        txg: u64,
        psize: u64,
        count: usize,
    ) -> Result<Vec<Dva>> {
        let mut dvas: Vec<Dva> = Vec::with_capacity(count);
        let mut used: Vec<u64> = Vec::new();
        for _ in 0..count {
            let ext = match alloc.alloc(psize, txg, &used) {
                Ok(x) => x,
                Err(err) => {
                    for d in &dvas {
                        let _ = alloc.free(d.vdev, d.offset, d.asize, txg);
                    }
                    return Err(err);
                }
            };
            used.push(ext.vdev);
            dvas.push(Dva {
                vdev: ext.vdev,
                offset: ext.offset,
                asize: ext.asize,
                gang: false,
            });
        }
        Ok(dvas)
    }

    /// Queue the writes of one block's copies ([`crate::writeback`]):
    /// each is padded to its vdev's allocation unit (so RAID-Z columns and
    /// 4K sectors are whole) and written, in queue order, on the pool's
    /// I/O thread. Reads of these DVAs wait until they are written.
    fn write_dvas(&self, dvas: &[Dva], data: Arc<Vec<u8>>) -> Result<()> {
        let root = self.current_root()?;
        for d in dvas {
            if root.children.get(d.vdev as usize).is_none() {
                return Err(Error::corrupt(
                    "DVA",
                    format!("vdev {} does not exist", d.vdev),
                ));
            }
            let (root, data, vdev, offset) = (root.clone(), data.clone(), d.vdev, d.offset);
            let block = data.clone();
            let job: crate::writeback::Job = Box::new(move || {
                let top = root
                    .children
                    .get(vdev as usize)
                    .ok_or_else(|| Error::corrupt("DVA", format!("vdev {vdev} does not exist")))?;
                top.write_padded(offset, &data)
            });
            self.writeback.enqueue(job, Some((vdev, offset, block)))?;
        }
        Ok(())
    }

    /// Rewrite a block born in `txg` at the same DVAs if the new contents fit.
    /// Returns None when it does not fit (the caller frees and writes anew).
    pub fn rewrite_block(
        &self,
        alloc: &Allocator,
        old: &BlkPtr,
        txg: u64,
        data: &[u8],
        p: &BlockProps,
        fill: u64,
    ) -> Result<Option<BlkPtr>> {
        if old.is_hole()
            || old.is_embedded()
            || old.dedup()
            || p.dedup
            || old.birth() != txg
            || old.dvas().iter().any(|d| d.gang)
        {
            return Ok(None);
        }
        let Some(e) = encode(data, p)? else {
            return Ok(None);
        };
        let psize = e.data.len() as u64;
        let dvas: Vec<Dva> = old.dvas().into_iter().filter(|d| !d.is_empty()).collect();
        if dvas.len() != p.dva_count(e.sealed.as_ref()) {
            return Ok(None);
        }
        for d in &dvas {
            if self.psize_to_asize(alloc, d.vdev, psize) != d.asize {
                return Ok(None);
            }
        }
        let bp = Self::make_bp(&e, p, txg, fill, &dvas)?;
        self.write_dvas(&dvas, Arc::new(e.data))?;
        Ok(Some(bp))
    }

    /// Every place `size` bytes at `offset` of top-level vdev `vdev` pass
    /// through: `f(vdev, offset, size, removed)` for the range itself and,
    /// where its vdev is a removed one, for each piece its mapping copied
    /// it to (followed again where that is a removed vdev, up to 8 deep).
    fn walk_dva(
        &self,
        vdev: u64,
        offset: u64,
        size: u64,
        f: &mut dyn FnMut(u64, u64, u64, bool) -> Result<()>,
    ) -> Result<()> {
        let mut todo = vec![(vdev, offset, size, 0u32)];
        while let Some((v, off, len, depth)) = todo.pop() {
            let removed = self.is_indirect(v);
            f(v, off, len, removed)?;
            if !removed {
                continue;
            }
            if depth >= 8 {
                return Err(Error::corrupt(
                    format!("removed vdev {v}"),
                    "removal mappings chained more than 8 deep",
                ));
            }
            let map = self
                .indirect
                .get()
                .and_then(|s| s.maps.get(&v))
                .ok_or_else(|| Error::Invalid(format!("removed vdev {v}: mapping not loaded")))?;
            for p in map.lookup(off, len)? {
                todo.push((p.vdev, p.offset, p.len, depth + 1));
            }
        }
        Ok(())
    }

    /// Where `size` bytes at `offset` of top-level vdev `vdev` are stored
    /// ([`Self::walk_dva`]'s ranges on vdevs that are not removed), as
    /// (vdev, offset, size).
    pub fn resolve_dva(&self, vdev: u64, offset: u64, size: u64) -> Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        self.walk_dva(vdev, offset, size, &mut |v, off, len, removed| {
            if !removed {
                out.push((v, off, len));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Whether top-level vdev `vdev` is a removed (indirect) one.
    pub fn is_indirect(&self, vdev: u64) -> bool {
        self.root
            .children
            .get(vdev as usize)
            .is_some_and(|t| matches!(t.kind, ozfs_vdev::VdevKind::Indirect { .. }))
    }

    /// Free `size` bytes at `offset` of removed vdev `vdev`, as OpenZFS's
    /// `metaslab_free_impl` does: each removed range on the way is marked
    /// obsolete (for the DSL to append to that vdev's obsolete space map)
    /// and the space it was copied to is freed.
    fn free_indirect(
        &self,
        alloc: &mut Allocator,
        vdev: u64,
        offset: u64,
        size: u64,
        txg: u64,
    ) -> Result<()> {
        let mut obsolete = Vec::new();
        let mut frees = Vec::new();
        self.walk_dva(vdev, offset, size, &mut |v, off, len, removed| {
            if removed {
                obsolete.push((v, off, len));
            } else {
                frees.push((v, off, len));
            }
            Ok(())
        })?;
        for (v, off, len) in frees {
            alloc.free(v, off, len, txg)?;
        }
        self.obsolete
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(obsolete);
        Ok(())
    }

    /// Free every DVA of a BP (gang blocks: header and children too).
    pub fn free_block(&self, alloc: &mut Allocator, bp: &BlkPtr, txg: u64) -> Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        if bp.dedup() {
            // One reference less; the space comes back when the table is
            // flushed with none left. A block the table has no record of
            // is freed as it is, as OpenZFS frees a pruned entry's.
            let mut g = self.ddt.lock().unwrap_or_else(|e| e.into_inner());
            let Some(ddt) = g.as_mut() else {
                return Err(Error::unsupported(
                    "free of a deduplicated block",
                    "the pool's dedup tables are not loaded for writing",
                ));
            };
            if ddt.free(bp)? {
                return Ok(());
            }
        }
        // A cloned block (an entry in its vdev's block reference table)
        // loses a reference instead of its space.
        if let Some(first) = bp.dvas().first().filter(|d| !d.is_empty()) {
            let mut brt = self.brt.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = brt.as_mut() {
                let deflate = b.deflate;
                if b.decref(first.vdev, first.offset, || self.dsize(bp, deflate)) {
                    return Ok(());
                }
            }
        }
        for d in bp.dvas().iter().filter(|d| !d.is_empty()) {
            if self.is_indirect(d.vdev) {
                if d.gang {
                    return Err(Error::unsupported(
                        "free of a gang block on a removed vdev",
                        "not implemented; the pool is left at its last synced state",
                    ));
                }
                self.free_indirect(alloc, d.vdev, d.offset, d.asize, txg)?;
                continue;
            }
            if d.gang {
                // Children of a gang header are freed through the header's BPs.
                let top = self
                    .root
                    .children
                    .get(d.vdev as usize)
                    .ok_or_else(|| Error::corrupt("DVA", "no such vdev"))?;
                self.writeback.wait_written(d.vdev, d.offset);
                let hdr = top.read_block_born(
                    d.offset,
                    512,
                    bp.phys_birth(),
                    &|_| true,
                    &Default::default(),
                )?;
                let eck = ozfs_format::label::parse_eck(&hdr)?;
                for i in 0..3 {
                    let child = BlkPtr::from_bytes(&hdr[i * 128..(i + 1) * 128], eck.byteswapped)?;
                    self.free_block(alloc, &child, txg)?;
                }
                let hdr_asize = self.psize_to_asize(alloc, d.vdev, 512);
                alloc.free(d.vdev, d.offset, hdr_asize, txg)?;
            } else {
                alloc.free(d.vdev, d.offset, d.asize, txg)?;
            }
        }
        Ok(())
    }
}

/// Encode (compress) many blocks on several threads; the order of results
/// follows the input. Compression is the CPU-heavy part of a sync, and
/// blocks are independent, so this is where a txg's work is spread out.
pub fn encode_many(
    blocks: Vec<(std::borrow::Cow<'_, [u8]>, BlockProps)>,
) -> Result<Vec<Option<Encoded>>> {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let threads = *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
    });
    if blocks.len() < 8 || threads == 1 {
        return blocks.into_iter().map(|(d, p)| encode_cow(d, &p)).collect();
    }
    let total = blocks.len();
    let chunk = total.div_ceil(threads);
    let mut parts = Vec::with_capacity(threads);
    let mut it = blocks.into_iter();
    loop {
        let part: Vec<_> = it.by_ref().take(chunk).collect();
        if part.is_empty() {
            break;
        }
        parts.push(part);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                s.spawn(move || {
                    part.into_iter()
                        .map(|(d, p)| encode_cow(d, &p))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(total);
        for h in handles {
            out.extend(
                h.join()
                    .map_err(|_| Error::Invalid("encoder thread panicked".into()))??,
            );
        }
        Ok(out)
    })
}
