//! ZAP objects changed inside a transaction group: load the object's blocks
//! through the [`ObjsetTx`] (so earlier changes of the txg are seen), edit
//! them with [`ozfs_format::zap_write::ZapObject`], and store the changed
//! blocks and the new block size / `maxblkid` back.

use crate::tx::ObjsetTx;
use ozfs_format::dnode::DnodePhys;
use ozfs_format::zap::ZapEntry;
use ozfs_format::zap_write::ZapObject;
use ozfs_format::{Error, Result};
use std::collections::BTreeMap;

/// Default `zap_micro_max_size` (a tunable, as in OpenZFS).
pub const ZAP_MICRO_MAX_SIZE: usize = 128 * 1024;
/// Largest micro ZAP block where the pool has `large_microzap` (1 MiB,
/// OpenZFS's limit for the tunable).
pub const LARGE_MICRO_MAX: usize = 1 << 20;

/// Load a ZAP object for editing.
pub fn load(tx: &ObjsetTx, obj: u64) -> Result<ZapObject> {
    let dn = tx.dnode(obj)?;
    let bs = dn.phys.datablksz() as usize;
    let mut blocks = BTreeMap::new();
    for blkid in 0..=tx.max_blkid(obj)? {
        if let Some(b) = tx.read_block(obj, blkid)? {
            blocks.insert(blkid, b);
        }
    }
    if !blocks.contains_key(&0) {
        return Err(Error::corrupt(
            format!("ZAP object {obj}"),
            "block 0 is a hole",
        ));
    }
    let mut z =
        ZapObject::load(bs, blocks, false).map_err(|e| e.context(&format!("ZAP object {obj}")))?;
    // Only directories grow micro ZAPs past 128 KiB (the blocks that make
    // a dataset list `large_microzap`).
    let cap = if dn.phys.object_type == ozfs_format::types::ot::DIRECTORY_CONTENTS {
        tx.micro_max_cap
    } else {
        128 * 1024
    };
    z.micro_max = micro_max().min(cap);
    Ok(z)
}

/// The tunable `zap_micro_max_size` (env `OZFS_ZAP_MICRO_MAX_SIZE`, default
/// 128 KiB); an objset takes at most its `micro_max_cap` of it.
pub fn micro_max() -> usize {
    std::env::var("OZFS_ZAP_MICRO_MAX_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|v| *v >= 512 && *v % 512 == 0)
        .unwrap_or(ZAP_MICRO_MAX_SIZE)
}

/// Store the changed blocks of `z` into object `obj`.
pub fn store(tx: &mut ObjsetTx, obj: u64, z: &mut ZapObject) -> Result<()> {
    let mut dn: DnodePhys = tx.dnode(obj)?.phys;
    let dirty = z.take_dirty();
    let new_bs = z.block_size;
    if dirty.is_empty() && new_bs as u64 == dn.datablksz() {
        return Ok(());
    }
    if new_bs as u64 != dn.datablksz() {
        if !new_bs.is_multiple_of(512) || new_bs > tx.micro_max_cap.max(128 * 1024) {
            return Err(Error::Invalid(format!("ZAP block size {new_bs}")));
        }
        dn.datablkszsec = (new_bs / 512) as u16;
        // Every block is rewritten at the new size; those gone (a fat ZAP
        // made a microzap again) become holes.
        for (&blkid, b) in &z.blocks {
            tx.write_block(obj, blkid, b.clone());
        }
        for blkid in dirty.iter().filter(|b| !z.blocks.contains_key(b)) {
            tx.punch_block(obj, *blkid);
        }
        if z.is_micro() {
            // A micro ZAP is block 0 alone: OpenZFS grows one only while
            // its maxblkid is 0 (`dnode_set_blksz`), so a fat ZAP made
            // micro again says so at once, whatever holes its tree keeps.
            dn.maxblkid = 0;
        }
    } else {
        for blkid in dirty {
            match z.blocks.get(&blkid) {
                Some(b) => tx.write_block(obj, blkid, b.clone()),
                None => tx.punch_block(obj, blkid),
            }
        }
    }
    tx.set_dnode(obj, dn);
    Ok(())
}

/// Most ZAP objects kept decoded per objset.
const ZAP_CACHE_MAX: usize = 512;

/// Run `f` on the (cached) decoded ZAP, then store what it changed. On error
/// nothing is stored and the cached copy is dropped, so the next use reloads
/// the object's last stored state.
fn with_zap<R>(
    tx: &mut ObjsetTx,
    obj: u64,
    f: impl FnOnce(&mut ZapObject) -> Result<R>,
) -> Result<R> {
    let mut z = match tx.zap_cache.get_mut().remove(&obj) {
        Some(z) => z,
        None => load(tx, obj)?,
    };
    let v = f(&mut z)?;
    store(tx, obj, &mut z)?;
    keep(tx, obj, z);
    Ok(v)
}

/// Put a decoded ZAP into the per-objset cache (emptied when full).
fn keep(tx: &ObjsetTx, obj: u64, z: ZapObject) {
    let mut c = tx.zap_cache.borrow_mut();
    if c.len() >= ZAP_CACHE_MAX {
        c.clear();
    }
    c.insert(obj, z);
}

/// Run `f` on the decoded ZAP, loading (and caching) it if needed.
fn with_loaded<R>(tx: &ObjsetTx, obj: u64, f: impl Fn(&ZapObject) -> Result<R>) -> Result<R> {
    if let Some(z) = tx.zap_cache.borrow().get(&obj) {
        return f(z);
    }
    let z = load(tx, obj)?;
    let r = f(&z);
    keep(tx, obj, z);
    r
}

/// Run `f` on ZAP object `obj` (loaded once, its changed blocks stored
/// once at the end): many edits of one object at the cost of one. On
/// error nothing is stored.
pub fn edit<R>(
    tx: &mut ObjsetTx,
    obj: u64,
    f: impl FnOnce(&mut ZapObject) -> Result<R>,
) -> Result<R> {
    with_zap(tx, obj, f)
}

/// A fat ZAP being edited with only the blocks its edits need (see
/// [`edit_sparse`]).
pub struct SparseZap<'a> {
    tx: &'a ObjsetTx,
    obj: u64,
    z: ZapObject,
}

impl SparseZap<'_> {
    fn bring(&mut self, name: &[u8]) -> Result<()> {
        let blk = self.z.leaf_for(name)?;
        if !self.z.has_block(blk) {
            let b = self.tx.read_block(self.obj, blk)?.ok_or_else(|| {
                Error::corrupt(
                    format!("ZAP object {}", self.obj),
                    format!("leaf {blk} is a hole"),
                )
            })?;
            self.z.insert_block(blk, b)?;
        }
        Ok(())
    }

    /// Add or replace one entry.
    pub fn update(&mut self, name: &[u8], int_len: u8, value: &[u64]) -> Result<()> {
        self.bring(name)?;
        self.z.update(name, int_len, value)
    }

    /// Remove one entry; false if it was absent.
    pub fn remove(&mut self, name: &[u8]) -> Result<bool> {
        self.bring(name)?;
        self.z.remove(name)
    }
}

/// Edit fat ZAP `obj` reading only block 0, its pointer table and the
/// leaves the edits fall in (`OpenZFS` reads a ZAP the same way, leaf by
/// leaf): what a few changes to a very large ZAP (a dedup table) should
/// cost. The changed blocks are stored at the end; the object is never
/// cached decoded (a cached full copy is dropped first). A microzap is
/// edited whole.
pub fn edit_sparse<R>(
    tx: &mut ObjsetTx,
    obj: u64,
    f: impl FnOnce(&mut SparseZap) -> Result<R>,
) -> Result<R> {
    tx.zap_cache.get_mut().remove(&obj);
    let dn = tx.dnode(obj)?;
    let bs = dn.phys.datablksz() as usize;
    let b0 = tx
        .read_block(obj, 0)?
        .ok_or_else(|| Error::corrupt(format!("ZAP object {obj}"), "block 0 is a hole"))?;
    let fat = b0.len() >= 16
        && u64::from_ne_bytes(b0[0..8].try_into().unwrap_or_default())
            == ozfs_format::zap::ZBT_HEADER;
    if !fat {
        return Err(Error::Invalid(format!(
            "ZAP object {obj}: sparse edits need a fat ZAP"
        )));
    }
    let mut blocks = BTreeMap::new();
    for id in ZapObject::table_blocks(&b0) {
        if let Some(b) = tx.read_block(obj, id)? {
            blocks.insert(id, b);
        }
    }
    blocks.insert(0, b0);
    let z =
        ZapObject::load_sparse(bs, blocks).map_err(|e| e.context(&format!("ZAP object {obj}")))?;
    let mut s = SparseZap { tx, obj, z };
    let r = f(&mut s)?;
    let mut z = s.z;
    store(tx, obj, &mut z)?;
    Ok(r)
}

/// Add or replace one entry.
pub fn update(tx: &mut ObjsetTx, obj: u64, name: &str, int_len: u8, value: &[u64]) -> Result<()> {
    with_zap(tx, obj, |z| z.update(name.as_bytes(), int_len, value))
}

/// Add or replace one entry whose name is raw bytes (directory entries).
pub fn update_bytes(
    tx: &mut ObjsetTx,
    obj: u64,
    name: &[u8],
    int_len: u8,
    value: &[u64],
) -> Result<()> {
    with_zap(tx, obj, |z| z.update(name, int_len, value))
}

/// Add one entry; error if it exists.
pub fn add(tx: &mut ObjsetTx, obj: u64, name: &[u8], int_len: u8, value: &[u64]) -> Result<()> {
    with_zap(tx, obj, |z| z.add(name, int_len, value))
}

/// Remove one entry; false if it was absent.
pub fn remove(tx: &mut ObjsetTx, obj: u64, name: &[u8]) -> Result<bool> {
    with_zap(tx, obj, |z| z.remove(name))
}

/// Remove one entry, then make the ZAP a microzap again if it became small
/// enough ([`ZapObject::shrink`]: directories); false if it was absent.
/// `OZFS_ZAP_SHRINK=0` keeps fat ZAPs fat, as OpenZFS does (to compare).
pub fn remove_and_shrink(tx: &mut ObjsetTx, obj: u64, name: &[u8]) -> Result<bool> {
    static SHRINK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let shrink = *SHRINK.get_or_init(|| std::env::var("OZFS_ZAP_SHRINK").as_deref() != Ok("0"));
    with_zap(tx, obj, |z| {
        let found = z.remove(name)?;
        if found && shrink {
            z.shrink()?;
        }
        Ok(found)
    })
}

pub fn lookup(tx: &ObjsetTx, obj: u64, name: &[u8]) -> Result<Option<ZapEntry>> {
    with_loaded(tx, obj, |z| z.lookup(name))
}

/// The ZAP's name normalization flags (0: names match byte for byte).
pub fn normflags(tx: &ObjsetTx, obj: u64) -> Result<u64> {
    with_loaded(tx, obj, |z| Ok(z.normflags()))
}

pub fn lookup_u64(tx: &ObjsetTx, obj: u64, name: &str) -> Result<u64> {
    lookup(tx, obj, name.as_bytes())?
        .and_then(|e| e.as_u64())
        .ok_or_else(|| Error::not_found(format!("'{name}' in ZAP object {obj}")))
}

/// The number of entries (a fat ZAP's from its header, nothing else read).
pub fn count(tx: &ObjsetTx, obj: u64) -> Result<usize> {
    if let Some(z) = tx.zap_cache.borrow().get(&obj) {
        return Ok(z.len());
    }
    let b0 = tx
        .read_block(obj, 0)?
        .ok_or_else(|| Error::corrupt(format!("ZAP object {obj}"), "block 0 is a hole"))?;
    match ozfs_format::zap::parse_header(&b0, false)? {
        ozfs_format::zap::ZapHeader::Fat(h) => Ok(h.num_entries as usize),
        ozfs_format::zap::ZapHeader::Micro { .. } => with_loaded(tx, obj, |z| Ok(z.len())),
    }
}

pub fn list(tx: &ObjsetTx, obj: u64) -> Result<Vec<ZapEntry>> {
    with_loaded(tx, obj, |z| z.list())
}
