//! Objsets and dnodes: finding and reading the blocks of an object.
//!
//! Bounds (hostile pools). Everything here is sized by what the
//! containing structure really holds, never by a count read from disk alone:
//!
//! * A dnode's `maxblkid` fits its tree and the 2^64-byte object size
//!   (checked when the dnode is decoded, [`DnodePhys::parse`]), so
//!   `(maxblkid + 1) × datablksz` never overflows.
//! * Slices into a block use the block's real length: a dnode block must
//!   be exactly the meta-dnode's block size and an indirect block exactly
//!   `2^indblkshift` bytes (both are what ZFS writes), or the read fails
//!   with [`Error::Corrupt`] naming the block.
//! * Loops over objects or blocks follow the block pointers that exist
//!   ([`Objset::object_ranges`], [`Objset::next_data_block`],
//!   [`Objset::walk_tree`]): subtrees under holes are skipped whole, so a
//!   huge `maxblkid` costs nothing until blocks exist to back it.
//! * A tree walk descends into each indirect block once (by its first DVA):
//!   a hostile tree whose BPs all name the same indirect block would
//!   otherwise make a walk exponential in its depth; and it enters no
//!   subtree that starts past `maxblkid` (ZFS never leaves blocks there).
//! * Byte counts read from a header (packed nvlists, space maps, bplists)
//!   go through [`Objset::read_sized`]: within the object and a limit the
//!   caller names, before anything is allocated.

use ozfs_codec::crypt::MasterKey;
use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::dnode::{slot_head_bytes, slot_owner, DnodePhys, DNODE_SIZE};
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::{BlkPtr, Error, Result};
use ozfs_spa::Pool;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

/// An open objset (cheap to clone: the pool is shared).
#[derive(Clone)]
pub struct Objset {
    pub pool: Arc<Pool>,
    /// The BP of the objset block (hole for a dataset without one).
    pub bp: BlkPtr,
    pub phys: ObjsetPhys,
    /// Byte order of the objset block (applies to its embedded dnodes).
    pub swap: bool,
    /// The master key of an encrypted dataset's objset, when loaded: every
    /// block read through this objset is decrypted with it. Without it an
    /// encrypted objset can still be walked (dnode cores and block
    /// pointers are plain) but no encrypted contents are read.
    pub key: Option<Arc<MasterKey>>,
}

/// One object's dnode, with the byte order of the block it came from.
#[derive(Debug, Clone)]
pub struct Dnode {
    pub object: u64,
    pub phys: DnodePhys,
    pub swap: bool,
}

fn swap_of(bp: &BlkPtr) -> bool {
    bp.little_endian() != HOST_LITTLE_ENDIAN
}

/// A committed dnode block and where a slot lies in it.
pub struct SlotBlock {
    pub bytes: Arc<Vec<u8>>,
    /// Written in the other byte order.
    pub swap: bool,
    /// The slot's byte offset in the block.
    pub at: usize,
}

/// A volume's (`volsize`, `volblocksize`) as read from its objects,
/// checked: object 1 a `zvol` object with a power-of-two block size from
/// 512 bytes to 16 MiB, a size from 1 to `i64::MAX` bytes (the rules every
/// reader of a volume applies: `Objset::read_zvol_info`,
/// `ozfs_zpl::zvol::info`).
pub fn check_zvol(object_type: u8, blocksize: u64, size: u64) -> Result<(u64, u64)> {
    if object_type != ozfs_format::types::ot::ZVOL
        || !blocksize.is_power_of_two()
        || !(512..=16 << 20).contains(&blocksize)
    {
        return Err(Error::corrupt(
            "volume",
            format!("object 1: type {object_type}, block size {blocksize}"),
        ));
    }
    if size == 0 || size > i64::MAX as u64 {
        return Err(Error::corrupt("volume", format!("size {size}")));
    }
    Ok((size, blocksize))
}

impl Objset {
    /// Open the objset that `bp` points to.
    pub fn open(pool: Arc<Pool>, bp: &BlkPtr) -> Result<Objset> {
        Self::open_keyed(pool, bp, None)
    }

    /// Open an objset with its dataset's master key (None: not encrypted,
    /// or its key is not loaded).
    pub fn open_keyed(pool: Arc<Pool>, bp: &BlkPtr, key: Option<Arc<MasterKey>>) -> Result<Objset> {
        let data = pool.read_bp(bp)?;
        let swap = swap_of(bp);
        // An encrypted objset is authenticated by its own MACs, always:
        // whether the dataset is encrypted is the caller's to say (the
        // DSL's crypto key), never the pointer's crypt bit, which sits in
        // the unauthenticated MOS.
        if let Some(k) = key.as_deref() {
            if !bp.uses_crypt() || bp.object_type() != ozfs_format::types::ot::OBJSET {
                return Err(Error::corrupt(
                    "encrypted dataset",
                    "its objset block pointer is not protected (crypt bit clear): refused",
                ));
            }
            k.verify_objset(&data, swap)?;
        }
        let phys = ObjsetPhys::parse(&data, swap)?;
        Ok(Objset {
            pool,
            bp: *bp,
            phys,
            swap,
            key,
        })
    }

    /// A volume's (`volsize`, `volblocksize`): the `size` in object 2's
    /// ZAP and object 1's data block size, both checked (a volume's
    /// objects are always these two; see `ozfs_zpl::zvol`).
    pub fn read_zvol_info(&self) -> Result<(u64, u64)> {
        let dn = self.dnode(1)?;
        let zdn = self.dnode(2)?;
        let size = crate::zap::lookup_u64(self, &zdn, "size")
            .map_err(|e| Error::corrupt("volume", format!("no size in its ZAP: {e}")))?;
        check_zvol(dn.phys.object_type, dn.phys.datablksz(), size)
    }

    /// An objset from an already decoded header (after a sync).
    pub fn from_parts(pool: Arc<Pool>, bp: BlkPtr, phys: ObjsetPhys) -> Objset {
        Objset {
            pool,
            bp,
            phys,
            swap: false,
            key: None,
        }
    }

    /// The pool's MOS.
    pub fn mos(pool: Arc<Pool>) -> Objset {
        let bp = pool.uberblock.rootbp;
        let phys = pool.mos_phys.clone();
        Objset {
            pool,
            bp,
            phys,
            swap: swap_of(&bp),
            key: None,
        }
    }

    /// Objects in use, as the meta-dnode's block pointers count them
    /// (their fill, summed without overflow: the counts come from disk).
    pub fn object_count(&self) -> u64 {
        self.phys
            .meta_dnode
            .blkptr
            .iter()
            .filter(|bp| !bp.is_hole())
            .fold(0u64, |n, bp| n.saturating_add(bp.fill()))
    }

    /// The meta-dnode (object 0).
    pub fn meta_dnode(&self) -> Dnode {
        Dnode {
            object: 0,
            phys: self.phys.meta_dnode.clone(),
            swap: self.swap,
        }
    }

    /// Number of object slots the meta-dnode can address (an upper bound
    /// for object numbers, not a loop bound: iterate with
    /// [`object_ranges`](Self::object_ranges)).
    pub fn max_object(&self) -> u64 {
        let dn = &self.phys.meta_dnode;
        dn.maxblkid.saturating_add(1).saturating_mul(dn.datablksz()) / DNODE_SIZE as u64
    }

    /// The object numbers that dnode blocks exist for: one range per run
    /// of non-hole level-0 blocks of the meta-dnode, ascending. Every
    /// allocated object lies in one of them; the work and the result
    /// follow the blocks that exist, never `maxblkid`.
    pub fn object_ranges(&self) -> Result<Vec<Range<u64>>> {
        let meta = self.meta_dnode();
        let per = meta.phys.datablksz() / DNODE_SIZE as u64;
        if per == 0 {
            return Err(Error::corrupt(
                "meta-dnode",
                format!("data block size {}", meta.phys.datablksz()),
            ));
        }
        let mut out: Vec<Range<u64>> = Vec::new();
        self.walk_tree(&meta, &mut |level, blkid, _| {
            if level != 0 {
                return Ok(());
            }
            let start = blkid.saturating_mul(per);
            let end = start.saturating_add(per);
            match out.last_mut() {
                Some(r) if r.end == start => r.end = end,
                _ => out.push(start..end),
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Read `len` bytes from the start of an object when `len` comes from
    /// disk (a header's size field): refused, before anything is
    /// allocated, when it exceeds what the object's blocks can hold or
    /// `limit`. `what` names the structure in the error.
    pub fn read_sized(&self, dn: &Dnode, len: u64, limit: u64, what: &str) -> Result<Vec<u8>> {
        let room = dn
            .phys
            .maxblkid
            .saturating_add(1)
            .saturating_mul(dn.phys.datablksz());
        if len > room {
            return Err(Error::corrupt(
                what,
                format!("{len} bytes declared, object {} holds {room}", dn.object),
            ));
        }
        if len > limit {
            return Err(Error::corrupt(
                what,
                format!("{len} bytes declared, more than the {limit} accepted"),
            ));
        }
        let len = usize::try_from(len)
            .map_err(|_| Error::corrupt(what, format!("{len} bytes declared")))?;
        self.read(dn, 0, len)
    }

    /// Read a block of this objset that no tree walk reaches (a spill
    /// block), with the objset's key.
    pub fn read_bp(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        self.pool.read_bp_keyed(bp, self.key.as_deref())
    }

    /// Read a metadata block (indirect or dnode block) through the pool's cache.
    fn read_cached(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.pool
            .read_bp_cached_keyed(bp, false, self.key.as_deref())
    }

    /// Read an indirect block of `dn`'s tree: exactly `2^indblkshift`
    /// bytes (what ZFS writes), so indices below `2^(indblkshift − 7)`
    /// are inside it.
    fn read_indirect(&self, bp: &BlkPtr, dn: &DnodePhys) -> Result<Arc<Vec<u8>>> {
        let block = self.read_cached(bp)?;
        if block.len() as u64 != dn.indblksz() {
            return Err(Error::corrupt(
                "indirect block",
                format!(
                    "{} bytes, its dnode's indirect block size is {}",
                    block.len(),
                    dn.indblksz()
                ),
            ));
        }
        Ok(block)
    }

    /// Read a level-0 data block through the pool's cache (kept there only
    /// when the pool caches data).
    fn read_data(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        let b = self
            .pool
            .read_bp_cached_keyed(bp, true, self.key.as_deref())?;
        Ok(Arc::try_unwrap(b).unwrap_or_else(|a| (*a).clone()))
    }

    /// The committed dnode block holding slot `obj`; None where no dnode
    /// block exists (a hole, or past the meta-dnode).
    pub fn dnode_block_of(&self, obj: u64) -> Result<Option<SlotBlock>> {
        let meta = self.meta_dnode();
        let blksz = meta.phys.datablksz();
        if blksz < DNODE_SIZE as u64 {
            return Err(Error::corrupt(
                "meta-dnode",
                format!("data block size {blksz}"),
            ));
        }
        let Some(off) = obj.checked_mul(DNODE_SIZE as u64) else {
            return Ok(None);
        };
        let blkid = off / blksz;
        if blkid > meta.phys.maxblkid {
            return Ok(None);
        }
        let Some(bp) = self.block_bp(&meta, 0, blkid)? else {
            return Ok(None);
        };
        if bp.is_hole() {
            return Ok(None);
        }
        let block = self
            .read_cached(&bp)
            .map_err(|e| e.context(&format!("dnode block of object {obj}")))?;
        // The slot is found by the declared block size; the block read
        // must be that size (ZFS's dnode blocks always are), or the slot
        // would lie past its end or name another object's bytes.
        if block.len() as u64 != blksz {
            return Err(Error::corrupt(
                format!("dnode block {blkid} (object {obj})"),
                format!(
                    "{} bytes, the meta-dnode declares {blksz}-byte blocks",
                    block.len()
                ),
            ));
        }
        Ok(Some(SlotBlock {
            bytes: block,
            swap: swap_of(&bp),
            at: (off % blksz) as usize,
        }))
    }

    /// The dnode of object `obj`.
    pub fn dnode(&self, obj: u64) -> Result<Dnode> {
        let what = || format!("object {obj}");
        let Some(SlotBlock {
            bytes: block,
            swap,
            at: inner,
        }) = self.dnode_block_of(obj)?
        else {
            return Err(Error::not_found(what()));
        };
        let slot = block
            .get(inner..)
            .ok_or_else(|| Error::corrupt(what(), "its dnode block is shorter than its size"))?;
        let dn = DnodePhys::parse(slot, swap).map_err(|e| e.context(&what()))?;
        Ok(Dnode {
            object: obj,
            phys: dn,
            swap,
        })
    }

    /// When slot `obj` lies inside a committed dnode of several slots, the
    /// object that dnode belongs to (its dnode block walked from the start,
    /// [`ozfs_format::dnode::slot_owner`]).
    pub fn slot_owner(&self, obj: u64) -> Result<Option<u64>> {
        let Some(b) = self.dnode_block_of(obj)? else {
            return Ok(None);
        };
        let rel = b.at / DNODE_SIZE;
        Ok(slot_owner(rel, |s| slot_head_bytes(&b.bytes, s)).map(|s| obj - (rel - s) as u64))
    }

    /// The BP of block `blkid` at `level` of `dn`, or None if beyond the tree.
    pub fn block_bp(&self, dn: &Dnode, level: u8, blkid: u64) -> Result<Option<BlkPtr>> {
        let p = &dn.phys;
        let what = || format!("object {} block {blkid} level {level}", dn.object);
        if p.nlevels == 0 || level >= p.nlevels {
            return Ok(None);
        }
        if p.nlevels > 1 && !(7..=24).contains(&p.indblkshift) {
            return Err(Error::corrupt(
                what(),
                format!("indirect block shift {}", p.indblkshift),
            ));
        }
        let epbs = p.indblkshift.saturating_sub(7) as u32;
        let top_shift = epbs as u64 * (p.nlevels - 1 - level) as u64;
        let top_idx = if top_shift >= 64 {
            0
        } else {
            blkid >> top_shift
        };
        if top_idx >= p.blkptr.len() as u64 {
            return Ok(None);
        }
        let mut bp = p.blkptr[top_idx as usize];
        let mut lvl = p.nlevels - 1;
        while lvl > level {
            if bp.is_hole() {
                return Ok(Some(BlkPtr::default()));
            }
            if bp.level() != lvl {
                return Err(Error::corrupt(
                    what(),
                    format!("BP at level {lvl} claims level {}", bp.level()),
                ));
            }
            let block = self.read_indirect(&bp, p).map_err(|e| e.context(&what()))?;
            let shift = epbs as u64 * (lvl - 1 - level) as u64;
            let idx = if shift >= 64 {
                0
            } else {
                ((blkid >> shift) & ((1u64 << epbs) - 1)) as usize
            };
            let start = idx * BLKPTR_SIZE;
            let raw = block.get(start..start + BLKPTR_SIZE).ok_or_else(|| {
                Error::corrupt(what(), "indirect block shorter than its shift says")
            })?;
            bp = BlkPtr::from_bytes(raw, swap_of(&bp))?;
            lvl -= 1;
        }
        Ok(Some(bp))
    }

    /// Level-0 block `blkid` of `dn` (None for a hole or a block past the end).
    pub fn read_block(&self, dn: &Dnode, blkid: u64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .data_block(dn, blkid)?
            .map(|b| Arc::try_unwrap(b).unwrap_or_else(|a| (*a).clone())))
    }

    /// A block of a metadata object, through the pool's block cache (which
    /// keeps metadata whatever it does with file data); no copy.
    pub fn metadata_block(&self, dn: &Dnode, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        self.cached_block(dn, blkid, false, true)
    }

    /// [`read_block`](Self::read_block) without a copy: the block as the
    /// pool's cache holds it (readers copy only the bytes they want).
    pub fn data_block(&self, dn: &Dnode, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        self.cached_block(dn, blkid, true, true)
    }

    /// Level-0 block `blkid` through the pool's cache (`data`: cached only
    /// where the pool caches file data; `keep` false: a client's read of
    /// the whole block, taken from the cache but not kept,
    /// [`Pool::read_bp_passing`]).
    fn cached_block(
        &self,
        dn: &Dnode,
        blkid: u64,
        data: bool,
        keep: bool,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        if blkid > dn.phys.maxblkid {
            return Ok(None);
        }
        let key = self.key.as_deref();
        match self.block_bp(dn, 0, blkid)? {
            Some(bp) if !bp.is_hole() => if keep {
                self.pool.read_bp_cached_keyed(&bp, data, key)
            } else {
                self.pool.read_bp_passing(&bp, key)
            }
            .map(Some)
            .map_err(|e| e.context(&format!("object {} block {blkid}", dn.object))),
            _ => Ok(None),
        }
    }

    /// Like [`read_block`](Self::read_block) but also returns the block's byte order.
    pub fn read_block_swap(&self, dn: &Dnode, blkid: u64) -> Result<Option<(Vec<u8>, bool)>> {
        if blkid > dn.phys.maxblkid {
            return Ok(None);
        }
        match self.block_bp(dn, 0, blkid)? {
            Some(bp) if !bp.is_hole() => Ok(Some((self.read_data(&bp)?, swap_of(&bp)))),
            _ => Ok(None),
        }
    }

    /// Read `len` bytes at `offset` of an object's data (holes read as zeros).
    pub fn read(&self, dn: &Dnode, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read_into(dn, offset, &mut out)?;
        Ok(out)
    }

    /// Fill `out` from `offset` of the object's data.
    pub fn read_into(&self, dn: &Dnode, offset: u64, out: &mut [u8]) -> Result<()> {
        self.read_into_as(dn, offset, out, false)
    }

    /// [`read_into`](Self::read_into) for a client's read of file data
    /// (FUSE, copy-out): blocks it reads whole pass the data cache by
    /// ([`ozfs_spa::pool::Pool::read_bp_passing`]); blocks read in part
    /// are kept, as their neighbours are likely next.
    pub fn read_into_client(&self, dn: &Dnode, offset: u64, out: &mut [u8]) -> Result<()> {
        self.read_into_as(dn, offset, out, true)
    }

    fn read_into_as(&self, dn: &Dnode, offset: u64, out: &mut [u8], client: bool) -> Result<()> {
        let bs = dn.phys.datablksz();
        if bs == 0 {
            return Err(Error::corrupt(
                format!("object {}", dn.object),
                "data block size 0",
            ));
        }
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset.saturating_add(done as u64);
            let blkid = pos / bs;
            let inner = (pos % bs) as usize;
            let n = ((bs as usize) - inner).min(out.len() - done);
            let whole = inner == 0 && n == bs as usize;
            match self.cached_block(dn, blkid, true, !(client && whole))? {
                Some(b) => {
                    // A block shorter than the declared block size (hostile
                    // datablkszsec) reads as zeros past its end.
                    let src = b.get(inner..).unwrap_or_default();
                    let avail = src.len().min(n);
                    out[done..done + avail].copy_from_slice(&src[..avail]);
                    out[done + avail..done + n].fill(0);
                }
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Visit every non-hole BP of an object's tree, top down: `f(level, blkid, bp)`.
    pub fn walk_tree(
        &self,
        dn: &Dnode,
        f: &mut dyn FnMut(u8, u64, &BlkPtr) -> Result<()>,
    ) -> Result<()> {
        // Every BP that is not a hole was born in txg 1 or later.
        self.walk_tree_since(dn, 0, f)
    }

    /// Every BP of the objset born after txg `since`: the meta-dnode's
    /// tree, every object's tree and spill block, the user/group/project used
    /// objects; subtrees born at or before `since` are not entered (all
    /// they hold is older). Embedded BPs are left out (they hold no space).
    pub fn bps_born_after(&self, since: u64) -> Result<Vec<BlkPtr>> {
        let mut out = Vec::new();
        let mut take = |_: u8, _: u64, bp: &BlkPtr| {
            if !bp.is_embedded() {
                out.push(*bp);
            }
            Ok(())
        };
        // One set for the whole objset: no indirect block is entered twice,
        // whichever object's tree names it.
        let mut seen = HashSet::new();
        let meta = self.meta_dnode();
        self.walk_tree_seen(&meta, since, &mut seen, &mut take)?;
        for special in [
            &self.phys.userused_dnode,
            &self.phys.groupused_dnode,
            &self.phys.projectused_dnode,
        ] {
            if special.object_type != 0 {
                let dn = Dnode {
                    object: u64::MAX,
                    phys: special.clone(),
                    swap: meta.swap,
                };
                self.walk_tree_seen(&dn, since, &mut seen, &mut take)?;
            }
        }
        for obj in self.object_ranges()?.into_iter().flatten() {
            if obj == 0 {
                continue;
            }
            let dn = match self.dnode(obj) {
                Ok(d) if d.phys.object_type != 0 => d,
                Ok(_) | Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            self.walk_tree_seen(&dn, since, &mut seen, &mut take)?;
            if let Some(sp) = &dn.phys.spill {
                if !sp.is_hole() && sp.birth() > since {
                    take(0, 0, sp)?;
                }
            }
        }
        Ok(out)
    }

    /// [`walk_tree`](Self::walk_tree) limited to BPs born after `since`.
    pub fn walk_tree_since(
        &self,
        dn: &Dnode,
        since: u64,
        f: &mut dyn FnMut(u8, u64, &BlkPtr) -> Result<()>,
    ) -> Result<()> {
        self.walk_tree_seen(dn, since, &mut HashSet::new(), f)
    }

    /// The walk itself: `seen` holds the indirect blocks (by first DVA)
    /// already entered; a BP naming one again is still reported, but its
    /// subtree is not walked twice.
    fn walk_tree_seen(
        &self,
        dn: &Dnode,
        since: u64,
        seen: &mut HashSet<(u64, u64)>,
        f: &mut dyn FnMut(u8, u64, &BlkPtr) -> Result<()>,
    ) -> Result<()> {
        let p = &dn.phys;
        if p.nlevels == 0 {
            return Ok(());
        }
        if p.nlevels > 1 && !(7..=24).contains(&p.indblkshift) {
            return Err(Error::corrupt(
                format!("object {}", dn.object),
                format!("indirect block shift {}", p.indblkshift),
            ));
        }
        let mut w = Walk {
            dn,
            epbs: p.indblkshift.saturating_sub(7) as u32,
            since,
            seen,
            f,
        };
        for (i, bp) in p.blkptr.iter().enumerate() {
            self.walk_bp(&mut w, bp, p.nlevels - 1, i as u64)?;
        }
        Ok(())
    }

    fn walk_bp(&self, w: &mut Walk<'_>, bp: &BlkPtr, level: u8, blkid: u64) -> Result<()> {
        if bp.is_hole() || bp.birth() <= w.since {
            return Ok(());
        }
        // The first level-0 block under this BP: past maxblkid (or past
        // any block number) there is nothing the object can have.
        let first = first_l0(blkid, level, w.epbs);
        if first.is_none_or(|b| b > w.dn.phys.maxblkid) {
            return Err(Error::corrupt(
                format!("object {}", w.dn.object),
                format!(
                    "block pointer at level {level} block {blkid} lies past maxblkid {}",
                    w.dn.phys.maxblkid
                ),
            ));
        }
        (w.f)(level, blkid, bp)?;
        if level == 0 || bp.is_embedded() {
            return Ok(());
        }
        let d = bp.dvas()[0];
        if !w.seen.insert((d.vdev, d.offset)) {
            return Ok(());
        }
        let block = self.read_indirect(bp, &w.dn.phys).map_err(|e| {
            e.context(&format!(
                "object {} level {level} block {blkid}",
                w.dn.object
            ))
        })?;
        let swap = swap_of(bp);
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let child = BlkPtr::from_bytes(raw, swap)?;
            // No overflow: the parent's first block is at most maxblkid.
            let cid = (blkid << w.epbs) | i as u64;
            self.walk_bp(w, &child, level - 1, cid)?;
        }
        Ok(())
    }

    /// The first level-0 block at or after `from` that is not a hole (at
    /// most `maxblkid`), or None. Subtrees under hole BPs are skipped
    /// whole, so the cost follows the blocks that exist: loops over an
    /// object's data use this instead of `0..=maxblkid`.
    pub fn next_data_block(&self, dn: &Dnode, from: u64) -> Result<Option<u64>> {
        let p = &dn.phys;
        if p.nlevels == 0 || from > p.maxblkid {
            return Ok(None);
        }
        if p.nlevels > 1 && !(7..=24).contains(&p.indblkshift) {
            return Err(Error::corrupt(
                format!("object {}", dn.object),
                format!("indirect block shift {}", p.indblkshift),
            ));
        }
        let epbs = p.indblkshift.saturating_sub(7) as u32;
        self.next_under(dn, Bps::Dnode(&p.blkptr), p.nlevels - 1, 0, epbs, from)
    }

    /// [`next_data_block`](Self::next_data_block) among `bps`, the BPs at
    /// `level` whose first one has block id `base` at that level. Entries
    /// wholly before `from` are skipped by arithmetic, not visited.
    fn next_under(
        &self,
        dn: &Dnode,
        bps: Bps<'_>,
        level: u8,
        base: u64,
        epbs: u32,
        from: u64,
    ) -> Result<Option<u64>> {
        let max = dn.phys.maxblkid;
        let shift = epbs * level as u32;
        // The entry holding `from` (or the first, when `from` lies before).
        let at = if shift >= 64 { 0 } else { from >> shift };
        let skip = at.saturating_sub(base);
        for i in skip..bps.len() as u64 {
            let Some(id) = base.checked_add(i) else {
                return Ok(None);
            };
            // The level-0 span [first, last] under this BP.
            let Some(first) = first_l0(id, level, epbs) else {
                return Ok(None);
            };
            if first > max {
                return Ok(None);
            }
            let last = first_l0(id + 1, level, epbs).map_or(u64::MAX, |n| n - 1);
            let bp = bps.get(i as usize)?;
            if last < from || bp.is_hole() {
                continue;
            }
            if level == 0 {
                return Ok(Some(first));
            }
            if bp.is_embedded() {
                return Err(Error::corrupt(
                    format!("object {}", dn.object),
                    format!("embedded block pointer at level {level}"),
                ));
            }
            let block = self
                .read_indirect(&bp, &dn.phys)
                .map_err(|e| e.context(&format!("object {} level {level}", dn.object)))?;
            let children = Bps::Block(&block, swap_of(&bp));
            if let Some(b) = self.next_under(dn, children, level - 1, id << epbs, epbs, from)? {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }
}

/// The block pointers of one tree level: a dnode's, or an indirect block's
/// (decoded one at a time, as they are looked at).
#[derive(Clone, Copy)]
enum Bps<'a> {
    Dnode(&'a [BlkPtr]),
    Block(&'a [u8], bool),
}

impl Bps<'_> {
    fn len(&self) -> usize {
        match self {
            Bps::Dnode(v) => v.len(),
            Bps::Block(b, _) => b.len() / BLKPTR_SIZE,
        }
    }
    fn get(&self, i: usize) -> Result<BlkPtr> {
        match self {
            Bps::Dnode(v) => Ok(v.get(i).copied().unwrap_or_default()),
            Bps::Block(b, swap) => match b.get(i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE) {
                Some(raw) => BlkPtr::from_bytes(raw, *swap),
                None => Ok(BlkPtr::default()),
            },
        }
    }
}

/// What a tree walk carries down.
struct Walk<'a> {
    dn: &'a Dnode,
    epbs: u32,
    since: u64,
    seen: &'a mut HashSet<(u64, u64)>,
    f: &'a mut dyn FnMut(u8, u64, &BlkPtr) -> Result<()>,
}

/// The first level-0 block id under block `blkid` of `level`
/// (`blkid × 2^(epbs × level)`), or None past 2^64.
fn first_l0(blkid: u64, level: u8, epbs: u32) -> Option<u64> {
    let shift = epbs.checked_mul(level as u32)?;
    if shift == 0 {
        return Some(blkid);
    }
    if shift >= 64 || blkid.leading_zeros() < shift {
        return if blkid == 0 { Some(0) } else { None };
    }
    Some(blkid << shift)
}
