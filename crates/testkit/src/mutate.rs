//! Hostile pool images: damage one field of one block *and make the damage
//! verify*.
//!
//! Random overwrites ([`crate::damage`]) only test the checksum path: every
//! flipped byte is caught by the block's checksum and the reader never sees
//! it. An attacker who hands over a pool image controls the checksums too,
//! so the interesting damage is the one that *passes* verification and
//! reaches the decoders. [`Image`] makes exactly that on a single-device pool
//! file:
//!
//! 1. [`Image::open`] finds the active uberblock (highest txg whose embedded
//!    checksum verifies, all four labels) and walks every block reachable
//!    from it: the MOS objset, the meta-dnode's indirect tree, every dnode's
//!    tree (spill blocks included), and through each DSL dataset's bonus
//!    (`ds_bp`) every dataset's and snapshot's objset in turn. Each block is
//!    read, checked against its BP checksum and decompressed; it is recorded
//!    once (by its first DVA) with its parent (the block and byte offset
//!    holding its BP, or the uberblock).
//! 2. [`Image::mutate`] hands a block's logical bytes to a closure, then
//!    re-encodes the block with its own compression (it must still fit in the
//!    block's PSIZE; otherwise [`Error`] "does not fit" and nothing is
//!    written), computes its checksum, writes every DVA, and carries the new
//!    checksum up: the parent's BP is patched and the parent re-encoded, up
//!    to the uberblock, whose copies in all four labels are resealed.
//! 3. [`Image::mutate_uberblock`] and [`Image::mutate_label`] do the same for
//!    the self-checksumming regions (the closure sees the raw bytes; the
//!    embedded SHA-256 is recomputed with the region's offset as verifier).
//!
//! The walk uses only the format and codec crates (decoders and checksums),
//! never the spa/dmu readers under test. It stays inside the image: every
//! offset is checked against the file, gang blocks and embedded BPs are not
//! followed, and a block that fails its checksum is simply not listed.
//!
//! Limits: one top-level vdev made of one plain file (no mirror or RAID-Z:
//! DVAs are plain offsets), native byte order.

use crate::{Error, Result};
use ozfs_codec::checksum;
use ozfs_codec::compress;
use ozfs_format::blkptr::{BlkPtr, BLKPTR_SIZE};
use ozfs_format::dnode::{DnodePhys, DNODE_CORE_SIZE, DNODE_FLAG_SPILL_BLKPTR, DNODE_SIZE};
use ozfs_format::label::{
    aligned_psize, label_offset, parse_eck, set_eck, with_verifier, Uberblock,
    UBERBLOCK_RING_OFFSET, UBERBLOCK_RING_SIZE, VDEV_LABEL_START_SIZE, VDEV_PHYS_OFFSET,
    VDEV_PHYS_SIZE,
};
use ozfs_format::types::ot;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// What a block is, by its place in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// An `objset_phys_t` (the MOS, or a dataset's / snapshot's objset).
    Objset,
    /// An indirect block (level > 0) of some object.
    Indirect,
    /// A level-0 block of a meta-dnode: dnodes.
    Dnodes,
    /// A level-0 block of any other object (ZAP, space map, file data…).
    Data,
    /// A spill block.
    Spill,
}

/// Where a block's BP lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    /// The active uberblock's `ub_rootbp`.
    Uberblock,
    /// In the logical bytes of block `idx` (index into [`Image::blocks`]), at byte `off`.
    Block {
        /// Index of the parent block.
        idx: usize,
        /// Byte offset of the 128-byte BP in the parent's logical contents.
        off: usize,
    },
}

/// One block reachable from the active uberblock.
#[derive(Debug, Clone)]
pub struct BlockRef {
    /// Its block pointer, as the parent holds it now.
    pub bp: BlkPtr,
    /// Where that BP lives.
    pub parent: Parent,
    /// What the block is.
    pub kind: BlockKind,
    /// The objset it belongs to: 0 for the MOS, else the MOS object number
    /// of the DSL dataset whose `ds_bp` leads to it.
    pub objset: u64,
    /// Object number inside the objset (0: the meta-dnode; `u64::MAX` and
    /// `u64::MAX - 1`: user/group-used accounting objects). For
    /// [`BlockKind::Objset`], 0.
    pub object: u64,
    /// Indirection level (0: leaf).
    pub level: u8,
    /// Block id at its level.
    pub blkid: u64,
    /// DMU type from the BP.
    pub dmu_type: u8,
    /// Type of the object the block belongs to (the dnode's type; for
    /// [`BlockKind::Objset`], [`ot::OBJSET`]).
    pub object_type: u8,
}

/// A single-file pool image opened for hostile editing.
pub struct Image {
    path: PathBuf,
    file: File,
    psize: u64,
    /// Offset of the active uberblock's slot inside a label.
    ub_slot: u64,
    slot_size: usize,
    ub_txg: u64,
    blocks: Vec<BlockRef>,
}

fn err(what: impl Into<String>) -> Error {
    Error(what.into())
}

impl Image {
    /// Opens the pool device file at `path` and walks its blocks.
    pub fn open(path: &Path) -> Result<Image> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| err(format!("open {}: {e}", path.display())))?;
        let size = file
            .metadata()
            .map_err(|e| err(format!("{}: {e}", path.display())))?
            .len();
        let psize = aligned_psize(size);
        let mut img = Image {
            path: path.to_path_buf(),
            file,
            psize,
            ub_slot: 0,
            slot_size: 1024,
            ub_txg: 0,
            blocks: Vec::new(),
        };
        img.find_uberblock()?;
        img.walk()?;
        Ok(img)
    }

    /// The device file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every block reachable from the active uberblock, in walk order
    /// (parents before children).
    pub fn blocks(&self) -> &[BlockRef] {
        &self.blocks
    }

    /// Indices of the blocks matching `f`.
    pub fn find(&self, f: impl Fn(&BlockRef) -> bool) -> Vec<usize> {
        (0..self.blocks.len())
            .filter(|&i| f(&self.blocks[i]))
            .collect()
    }

    /// The txg of the active uberblock.
    pub fn txg(&self) -> u64 {
        self.ub_txg
    }

    fn read_at(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| err(format!("read {} at {off}: {e}", self.path.display())))?;
        Ok(buf)
    }

    fn write_at(&self, off: u64, data: &[u8]) -> Result<()> {
        self.file
            .write_all_at(data, off)
            .map_err(|e| err(format!("write {} at {off}: {e}", self.path.display())))
    }

    fn slot_offsets(&self) -> Vec<u64> {
        (0..4)
            .map(|l| label_offset(self.psize, l, self.ub_slot))
            .collect()
    }

    fn find_uberblock(&mut self) -> Result<()> {
        let mut best: Option<(u64, u64, u64, usize)> = None; // txg, timestamp, slot off, size
        for l in 0..4 {
            let ring_off = label_offset(self.psize, l, UBERBLOCK_RING_OFFSET);
            let ring = self.read_at(ring_off, UBERBLOCK_RING_SIZE as usize)?;
            for shift in 10..=13u32 {
                let size = 1usize << shift;
                for (i, slot) in ring.chunks(size).enumerate() {
                    let Ok(ub) = Uberblock::parse(slot) else {
                        continue;
                    };
                    let off = ring_off + (i * size) as u64;
                    if !seal_ok(slot, off) {
                        continue;
                    }
                    let cand = (ub.txg, ub.timestamp, (i * size) as u64, size);
                    if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                        best = Some(cand);
                    }
                }
            }
        }
        let (txg, _, slot, size) =
            best.ok_or_else(|| err(format!("{}: no valid uberblock", self.path.display())))?;
        self.ub_slot = UBERBLOCK_RING_OFFSET + slot;
        self.slot_size = size;
        self.ub_txg = txg;
        Ok(())
    }

    fn uberblock(&self) -> Result<(Vec<u8>, Uberblock)> {
        let off = label_offset(self.psize, 0, self.ub_slot);
        let slot = self.read_at(off, self.slot_size)?;
        let ub = Uberblock::parse(&slot).map_err(|e| err(e.to_string()))?;
        Ok((slot, ub))
    }

    /// Reads and decodes the block `bp` points at (first DVA), verified.
    fn read_bp(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        let dva = bp.dvas()[0];
        if dva.vdev != 0 || dva.gang {
            return Err(err("not a plain DVA on vdev 0"));
        }
        let psize = bp.psize() as usize;
        let off = VDEV_LABEL_START_SIZE
            .checked_add(dva.offset)
            .filter(|o| o.saturating_add(psize as u64) <= self.psize)
            .ok_or_else(|| err("DVA outside the device"))?;
        let phys = self.read_at(off, psize)?;
        if block_cksum(bp, &phys)? != bp.cksum() {
            return Err(err("checksum mismatch"));
        }
        let comp = bp.compression();
        let lsize = bp.lsize() as usize;
        if comp == compress::ZIO_COMPRESS_OFF || comp == compress::ZIO_COMPRESS_INHERIT {
            return Ok(phys);
        }
        let mut out = vec![0u8; lsize];
        compress::decompress(comp, &phys, &mut out).map_err(|e| err(e.to_string()))?;
        Ok(out)
    }

    fn walk(&mut self) -> Result<()> {
        let (_, ub) = self.uberblock()?;
        let mut seen = HashSet::new();
        self.visit_objset(ub.rootbp, Parent::Uberblock, 0, &mut seen);
        if self.blocks.is_empty() {
            return Err(err(format!(
                "{}: the MOS does not read back",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn push(&mut self, b: BlockRef, seen: &mut HashSet<(u64, u64)>) -> Option<(usize, Vec<u8>)> {
        if b.bp.is_hole() || b.bp.is_embedded() || b.bp.is_gang() {
            return None;
        }
        let d = b.bp.dvas()[0];
        if !seen.insert((d.vdev, d.offset)) {
            return None;
        }
        let data = self.read_bp(&b.bp).ok()?;
        self.blocks.push(b);
        Some((self.blocks.len() - 1, data))
    }

    fn visit_objset(
        &mut self,
        bp: BlkPtr,
        parent: Parent,
        objset: u64,
        seen: &mut HashSet<(u64, u64)>,
    ) {
        let b = BlockRef {
            bp,
            parent,
            kind: BlockKind::Objset,
            objset,
            object: 0,
            level: 0,
            blkid: 0,
            dmu_type: bp.object_type(),
            object_type: ot::OBJSET,
        };
        let Some((idx, data)) = self.push(b, seen) else {
            return;
        };
        // The meta-dnode at 0, the user/group-used dnodes at 1024/1536.
        for (doff, object) in [(0usize, 0u64), (1024, u64::MAX), (1536, u64::MAX - 1)] {
            if let Some(slot) = data.get(doff..doff + DNODE_SIZE) {
                if let Ok(dn) = DnodePhys::parse(slot, false) {
                    if dn.object_type != 0 {
                        self.visit_dnode(&dn, idx, doff, objset, object, seen);
                    }
                }
            }
        }
    }

    /// Visits the trees of a dnode that sits at `doff` in block `pidx`.
    fn visit_dnode(
        &mut self,
        dn: &DnodePhys,
        pidx: usize,
        doff: usize,
        objset: u64,
        object: u64,
        seen: &mut HashSet<(u64, u64)>,
    ) {
        let top = dn.nlevels.saturating_sub(1);
        for (i, bp) in dn.blkptr.iter().enumerate() {
            let off = doff + DNODE_CORE_SIZE + i * BLKPTR_SIZE;
            self.visit_tree(*bp, pidx, off, dn, objset, object, top, i as u64, seen);
        }
        if dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0 {
            if let Some(sbp) = dn.spill {
                let b = BlockRef {
                    bp: sbp,
                    parent: Parent::Block {
                        idx: pidx,
                        off: doff + dn.size() - BLKPTR_SIZE,
                    },
                    kind: BlockKind::Spill,
                    objset,
                    object,
                    level: 0,
                    blkid: 0,
                    dmu_type: sbp.object_type(),
                    object_type: dn.object_type,
                };
                self.push(b, seen);
            }
        }
        // A DSL dataset in the MOS leads to its objset.
        if objset == 0 && dn.bonustype == ot::DSL_DATASET && dn.bonus.len() >= 256 {
            let boff = doff + DNODE_CORE_SIZE + BLKPTR_SIZE * dn.nblkptr as usize;
            if let Ok(bp) = BlkPtr::from_bytes(&dn.bonus[128..256], false) {
                self.visit_objset(
                    bp,
                    Parent::Block {
                        idx: pidx,
                        off: boff + 128,
                    },
                    object,
                    seen,
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn visit_tree(
        &mut self,
        bp: BlkPtr,
        pidx: usize,
        off: usize,
        dn: &DnodePhys,
        objset: u64,
        object: u64,
        level: u8,
        blkid: u64,
        seen: &mut HashSet<(u64, u64)>,
    ) {
        let kind = if level > 0 {
            BlockKind::Indirect
        } else if object == 0 {
            BlockKind::Dnodes
        } else {
            BlockKind::Data
        };
        let b = BlockRef {
            bp,
            parent: Parent::Block { idx: pidx, off },
            kind,
            objset,
            object,
            level,
            blkid,
            dmu_type: bp.object_type(),
            object_type: dn.object_type,
        };
        let Some((idx, data)) = self.push(b, seen) else {
            return;
        };
        if level > 0 {
            for (j, chunk) in data.chunks_exact(BLKPTR_SIZE).enumerate() {
                if let Ok(cbp) = BlkPtr::from_bytes(chunk, false) {
                    let cid = blkid
                        .saturating_mul((data.len() / BLKPTR_SIZE) as u64)
                        .saturating_add(j as u64);
                    self.visit_tree(
                        cbp,
                        idx,
                        j * BLKPTR_SIZE,
                        dn,
                        objset,
                        object,
                        level - 1,
                        cid,
                        seen,
                    );
                }
            }
        } else if object == 0 {
            // A block of dnodes.
            let per = data.len() / DNODE_SIZE;
            let mut slot = 0;
            while slot < per {
                let doff = slot * DNODE_SIZE;
                let Ok(d) = DnodePhys::parse(&data[doff..], false) else {
                    slot += 1;
                    continue;
                };
                if d.object_type != 0 {
                    let obj = blkid.saturating_mul(per as u64) + slot as u64;
                    self.visit_dnode(&d, idx, doff, objset, obj, seen);
                }
                slot += 1 + d.extra_slots as usize;
            }
        }
    }

    /// The logical (decompressed) bytes of block `idx`.
    pub fn read(&self, idx: usize) -> Result<Vec<u8>> {
        let b = self
            .blocks
            .get(idx)
            .ok_or_else(|| err(format!("no block {idx}")))?;
        self.read_bp(&b.bp)
    }

    /// Changes block `idx`'s logical bytes with `f` and makes the change
    /// verify: the block is re-encoded (same compression, same PSIZE),
    /// re-checksummed and written to every DVA; the new checksum is carried
    /// up through every parent to the uberblock. Errors (and writes nothing)
    /// when the changed block no longer compresses into its PSIZE.
    pub fn mutate(&mut self, idx: usize, f: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut data = self.read(idx)?;
        f(&mut data);
        // Encode the whole chain first, write only when every level fits.
        let mut writes: Vec<(BlkPtr, Vec<u8>)> = Vec::new();
        let mut cur = idx;
        let mut bytes = data;
        let root_bp = loop {
            let b = &self.blocks[cur];
            let phys = encode(&b.bp, &bytes).ok_or_else(|| {
                err(format!(
                    "block {cur} ({:?} of object {}) no longer fits its PSIZE",
                    b.kind, b.object
                ))
            })?;
            let mut bp = b.bp;
            bp.set_cksum(block_cksum(&bp, &phys)?);
            writes.push((bp, phys));
            match b.parent {
                Parent::Uberblock => break bp,
                Parent::Block { idx: p, off } => {
                    let mut pbytes = self.read(p)?;
                    let slot = pbytes
                        .get_mut(off..off + BLKPTR_SIZE)
                        .ok_or_else(|| err("BP outside its parent"))?;
                    slot.copy_from_slice(&bp.to_bytes());
                    cur = p;
                    bytes = pbytes;
                }
            }
        };
        for (bp, phys) in &writes {
            for d in bp.dvas().iter().take(bp.ndvas()) {
                if d.asize == 0 {
                    continue;
                }
                self.write_at(VDEV_LABEL_START_SIZE + d.offset, phys)?;
            }
        }
        // Record the new BPs (the chain is in `writes`, child first).
        let mut cur = idx;
        for (bp, _) in &writes {
            self.blocks[cur].bp = *bp;
            match self.blocks[cur].parent {
                Parent::Uberblock => break,
                Parent::Block { idx: p, .. } => cur = p,
            }
        }
        self.mutate_uberblock(|slot| {
            slot[40..40 + BLKPTR_SIZE].copy_from_slice(&root_bp.to_bytes())
        })
    }

    /// Changes the active uberblock (the raw slot bytes, native order) in all
    /// four labels and reseals each copy.
    pub fn mutate_uberblock(&mut self, f: impl FnOnce(&mut [u8])) -> Result<()> {
        let (mut slot, _) = self.uberblock()?;
        f(&mut slot);
        for off in self.slot_offsets() {
            let mut region = slot.clone();
            seal(&mut region, off);
            self.write_at(off, &region)?;
        }
        Ok(())
    }

    /// Changes the nvlist region (112 KiB, checksum trailer included) of
    /// label `l` (0..4) and reseals it.
    pub fn mutate_label(&mut self, l: usize, f: impl FnOnce(&mut [u8])) -> Result<()> {
        let off = label_offset(self.psize, l, VDEV_PHYS_OFFSET);
        let mut region = self.read_at(off, VDEV_PHYS_SIZE)?;
        f(&mut region);
        seal(&mut region, off);
        self.write_at(off, &region)
    }

    /// Rewrites the config nvlist of every label through `f`.
    pub fn mutate_config(&mut self, f: impl Fn(&mut ozfs_format::NvList)) -> Result<()> {
        mutate_device_config(&self.path, f)
    }
}

/// Rewrites the config nvlist of each of the four labels of the device
/// file at `path` through `f`, and reseals each: no block is read, so this
/// works on any device of any pool (a dRAID child, a RAID-Z member) where
/// [`Image`] cannot walk. Errors when the new config no longer fits.
pub fn mutate_device_config(path: &Path, f: impl Fn(&mut ozfs_format::NvList)) -> Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| err(format!("open {}: {e}", path.display())))?;
    let psize = file
        .metadata()
        .map_err(|e| err(format!("stat {}: {e}", path.display())))?
        .len();
    let body_len = VDEV_PHYS_SIZE - ozfs_format::label::ZIO_ECK_SIZE;
    for l in 0..4 {
        let off = label_offset(psize, l, VDEV_PHYS_OFFSET);
        let mut region = vec![0u8; VDEV_PHYS_SIZE];
        file.read_exact_at(&mut region, off)
            .map_err(|e| err(format!("read {} at {off}: {e}", path.display())))?;
        let mut nv =
            ozfs_format::NvList::unpack(&region[..body_len]).map_err(|e| err(e.to_string()))?;
        f(&mut nv);
        let packed = nv.pack_xdr();
        if packed.len() > body_len {
            return Err(err("config no longer fits the label"));
        }
        region[..packed.len()].copy_from_slice(&packed);
        region[packed.len()..body_len].fill(0);
        seal(&mut region, off);
        file.write_all_at(&region, off)
            .map_err(|e| err(format!("write {} at {off}: {e}", path.display())))?;
    }
    Ok(())
}

/// The checksum `bp` must carry for physical bytes `phys`, as an attacker
/// recomputes it: in full, except for a protected block of an encrypted
/// dataset (other than an objset), whose words 2–3 are its MAC — kept as
/// they are (no key is needed to forge words 0–1, the checksum of the
/// stored bytes, folded for a checksum not strong enough for dedup).
fn block_cksum(bp: &BlkPtr, phys: &[u8]) -> Result<ozfs_format::Cksum> {
    let mut c = checksum::compute(bp.checksum(), phys, false).map_err(|e| err(e.to_string()))?;
    if bp.uses_crypt() && bp.object_type() != ot::OBJSET {
        if !checksum::dedup_capable(bp.checksum()) {
            c.0[0] ^= c.0[2];
            c.0[1] ^= c.0[3];
        }
        let old = bp.cksum();
        c.0[2] = old.0[2];
        c.0[3] = old.0[3];
    }
    Ok(c)
}

/// Re-encodes logical `data` the way `bp` says it is stored, padded to its
/// PSIZE; `None` when it no longer fits.
fn encode(bp: &BlkPtr, data: &[u8]) -> Option<Vec<u8>> {
    let psize = bp.psize() as usize;
    let comp = bp.compression();
    if comp == compress::ZIO_COMPRESS_OFF || comp == compress::ZIO_COMPRESS_INHERIT {
        return (data.len() == psize).then(|| data.to_vec());
    }
    let mut out = vec![0u8; psize];
    let n = compress::compress(comp, data, &mut out).ok()??;
    if n > psize {
        return None;
    }
    out[n..].fill(0);
    Some(out)
}

/// Seals a self-checksumming region at absolute `offset` (SHA-256, offset verifier).
fn seal(region: &mut [u8], offset: u64) {
    let tmp = with_verifier(region, [offset, 0, 0, 0], false);
    let c = checksum::sha256(&tmp);
    region.copy_from_slice(&tmp);
    set_eck(region, c.0);
}

fn seal_ok(region: &[u8], offset: u64) -> bool {
    let Ok(eck) = parse_eck(region) else {
        return false;
    };
    let tmp = with_verifier(region, [offset, 0, 0, 0], eck.byteswapped);
    checksum::sha256(&tmp).0 == eck.cksum
}

/// Recomputes the END checksum of a plain (non-compound) send stream whose
/// last record is END: the Fletcher-4 of every byte before it, as a sender
/// writes it. A hostile stream edited this way is refused (or accepted) for
/// what was edited, not for its checksum. Returns false, changing nothing,
/// when the stream does not end with an END record.
pub fn fix_stream_end(stream: &mut [u8]) -> bool {
    use ozfs_format::stream::{DRR_END, RECORD_SIZE};
    if stream.len() < RECORD_SIZE || !stream.len().is_multiple_of(4) {
        return false;
    }
    let end = stream.len() - RECORD_SIZE;
    if stream[end..end + 4] != DRR_END.to_le_bytes() {
        return false;
    }
    let c = checksum::fletcher4(&stream[..end], false);
    for (i, w) in c.0.iter().enumerate() {
        stream[end + 8 + 8 * i..end + 16 + 8 * i].copy_from_slice(&w.to_le_bytes());
    }
    true
}
