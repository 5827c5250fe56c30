//! Objsets and dnodes: finding and reading the blocks of an object.

use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::bytes::HOST_LITTLE_ENDIAN;
use ozfs_format::dnode::{DnodePhys, DNODE_SIZE};
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::{BlkPtr, Error, Result};
use ozfs_spa::Pool;
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

impl Objset {
    /// Open the objset that `bp` points to.
    pub fn open(pool: Arc<Pool>, bp: &BlkPtr) -> Result<Objset> {
        let data = pool.read_bp(bp)?;
        let swap = swap_of(bp);
        let phys = ObjsetPhys::parse(&data, swap)?;
        Ok(Objset {
            pool,
            bp: *bp,
            phys,
            swap,
        })
    }

    /// An objset from an already decoded header (after a sync).
    pub fn from_parts(pool: Arc<Pool>, bp: BlkPtr, phys: ObjsetPhys) -> Objset {
        Objset {
            pool,
            bp,
            phys,
            swap: false,
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
        }
    }

    /// The meta-dnode (object 0).
    pub fn meta_dnode(&self) -> Dnode {
        Dnode {
            object: 0,
            phys: self.phys.meta_dnode.clone(),
            swap: self.swap,
        }
    }

    /// Number of object slots the meta-dnode can address.
    pub fn max_object(&self) -> u64 {
        let dn = &self.phys.meta_dnode;
        (dn.maxblkid + 1).saturating_mul(dn.datablksz()) / DNODE_SIZE as u64
    }

    /// Read a metadata block (indirect or dnode block) through the pool's cache.
    fn read_cached(&self, bp: &BlkPtr) -> Result<Arc<Vec<u8>>> {
        self.pool.read_bp_cached(bp, false)
    }

    /// Read a level-0 data block through the pool's cache (kept there only
    /// when the pool caches data).
    fn read_data(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        let b = self.pool.read_bp_cached(bp, true)?;
        Ok(Arc::try_unwrap(b).unwrap_or_else(|a| (*a).clone()))
    }

    /// The dnode of object `obj`.
    pub fn dnode(&self, obj: u64) -> Result<Dnode> {
        let what = || format!("object {obj}");
        let meta = self.meta_dnode();
        let blksz = meta.phys.datablksz();
        if blksz < DNODE_SIZE as u64 {
            return Err(Error::corrupt(
                "meta-dnode",
                format!("data block size {blksz}"),
            ));
        }
        let off = obj
            .checked_mul(DNODE_SIZE as u64)
            .ok_or_else(|| Error::NotFound(what()))?;
        let blkid = off / blksz;
        if blkid > meta.phys.maxblkid {
            return Err(Error::NotFound(what()));
        }
        let Some(bp) = self.block_bp(&meta, 0, blkid)? else {
            return Err(Error::NotFound(what()));
        };
        if bp.is_hole() {
            return Err(Error::NotFound(what()));
        }
        let block = self
            .read_cached(&bp)
            .map_err(|e| e.context(&format!("dnode block of object {obj}")))?;
        let inner = (off % blksz) as usize;
        let dn = DnodePhys::parse(&block[inner..], swap_of(&bp)).map_err(|e| e.context(&what()))?;
        Ok(Dnode {
            object: obj,
            phys: dn,
            swap: swap_of(&bp),
        })
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
            let block = self.read_cached(&bp).map_err(|e| e.context(&what()))?;
            let shift = epbs as u64 * (lvl - 1 - level) as u64;
            let idx = ((blkid >> shift) & ((1u64 << epbs) - 1)) as usize;
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

    /// [`read_block`](Self::read_block) without a copy: the block as the
    /// pool's cache holds it (readers copy only the bytes they want).
    pub fn data_block(&self, dn: &Dnode, blkid: u64) -> Result<Option<Arc<Vec<u8>>>> {
        if blkid > dn.phys.maxblkid {
            return Ok(None);
        }
        match self.block_bp(dn, 0, blkid)? {
            Some(bp) if !bp.is_hole() => self
                .pool
                .read_bp_cached(&bp, true)
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
        let bs = dn.phys.datablksz();
        if bs == 0 {
            return Err(Error::corrupt(
                format!("object {}", dn.object),
                "data block size 0",
            ));
        }
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let blkid = pos / bs;
            let inner = (pos % bs) as usize;
            let n = ((bs as usize) - inner).min(out.len() - done);
            match self.data_block(dn, blkid)? {
                Some(b) => {
                    let avail = b.len().saturating_sub(inner).min(n);
                    out[done..done + avail].copy_from_slice(&b[inner..inner + avail]);
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
    /// tree, every object's tree and spill block, the user/group used
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
        let meta = self.meta_dnode();
        self.walk_tree_since(&meta, since, &mut take)?;
        for special in [&self.phys.userused_dnode, &self.phys.groupused_dnode] {
            if special.object_type != 0 {
                let dn = Dnode {
                    object: u64::MAX,
                    phys: special.clone(),
                    swap: meta.swap,
                };
                self.walk_tree_since(&dn, since, &mut take)?;
            }
        }
        for obj in 1..self.max_object() {
            let dn = match self.dnode(obj) {
                Ok(d) if d.phys.object_type != 0 => d,
                Ok(_) | Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            self.walk_tree_since(&dn, since, &mut take)?;
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
        let p = &dn.phys;
        if p.nlevels == 0 {
            return Ok(());
        }
        let epbs = p.indblkshift.saturating_sub(7) as u32;
        let mut g = |level: u8, blkid: u64, bp: &BlkPtr| -> Result<()> { f(level, blkid, bp) };
        for (i, bp) in p.blkptr.iter().enumerate() {
            self.walk_bp_since(bp, p.nlevels - 1, i as u64, epbs, since, &mut g)?;
        }
        Ok(())
    }

    fn walk_bp_since(
        &self,
        bp: &BlkPtr,
        level: u8,
        blkid: u64,
        epbs: u32,
        since: u64,
        f: &mut dyn FnMut(u8, u64, &BlkPtr) -> Result<()>,
    ) -> Result<()> {
        if bp.is_hole() || bp.birth() <= since {
            return Ok(());
        }
        f(level, blkid, bp)?;
        if level == 0 || bp.is_embedded() {
            return Ok(());
        }
        let block = self.read_cached(bp)?;
        let swap = swap_of(bp);
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let child = BlkPtr::from_bytes(raw, swap)?;
            self.walk_bp_since(
                &child,
                level - 1,
                (blkid << epbs).wrapping_add(i as u64),
                epbs,
                since,
                f,
            )?;
        }
        Ok(())
    }
}
