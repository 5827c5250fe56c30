//! Test support: a pool over an in-memory device where tests place blocks
//! by hand (uncompressed, checksum off), so trees of any shape — including
//! shapes ZFS never writes (short blocks, aliased indirect blocks, huge
//! `maxblkid`) — can be built directly and read through [`Objset`].

use crate::objset::{Dnode, Objset};
use ozfs_format::blkptr::{BlkPtr, Dva};
use ozfs_format::dnode::{DnodePhys, DNODE_FLAG_USED_BYTES};
use ozfs_format::label::VDEV_LABEL_START_SIZE;
use ozfs_format::objset::ObjsetPhys;
use ozfs_format::types::{cksum, comp, ot};
use ozfs_format::{NvList, NvValue, Result};
use ozfs_spa::Pool;
use ozfs_vdev::device::BlockDevice;
use std::sync::{Arc, Mutex};

/// A device held in memory.
pub struct MemDev {
    bytes: Mutex<Vec<u8>>,
}

impl BlockDevice for MemDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let b = self
            .bytes
            .lock()
            .map_err(|_| ozfs_format::Error::Invalid("lock".into()))?;
        let end = offset as usize + buf.len();
        let src = b
            .get(offset as usize..end)
            .ok_or_else(|| ozfs_format::Error::Invalid("read past the end".into()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.lock().map(|b| b.len() as u64).unwrap_or(0)
    }
    fn name(&self) -> &str {
        "mem"
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut b = self
            .bytes
            .lock()
            .map_err(|_| ozfs_format::Error::Invalid("lock".into()))?;
        let end = offset as usize + buf.len();
        b.get_mut(offset as usize..end)
            .ok_or_else(|| ozfs_format::Error::Invalid("write past the end".into()))?
            .copy_from_slice(buf);
        Ok(())
    }
}

/// A pool over one [`MemDev`] and a bump allocator for hand-made blocks.
pub struct TestPool {
    pub pool: Arc<Pool>,
    dev: Arc<MemDev>,
    next: Mutex<u64>,
}

const DEV_SIZE: usize = 64 << 20;
const ALLOC_SIZE: u64 = 16 << 20;

impl TestPool {
    pub fn new() -> TestPool {
        let dev = Arc::new(MemDev {
            bytes: Mutex::new(vec![0u8; DEV_SIZE]),
        });
        let mut leaf = NvList::new();
        leaf.set("type", NvValue::String("file".into()));
        leaf.set("id", NvValue::Uint64(0));
        leaf.set("guid", NvValue::Uint64(7));
        leaf.set("path", NvValue::String("mem".into()));
        leaf.set("ashift", NvValue::Uint64(9));
        leaf.set("asize", NvValue::Uint64((DEV_SIZE / 2) as u64));
        let mut root_nv = NvList::new();
        root_nv.set("type", NvValue::String("root".into()));
        root_nv.set("guid", NvValue::Uint64(1));
        let d2: Arc<dyn BlockDevice> = dev.clone();
        let mut opener = |_: u64, _: Option<&str>| Some((d2.clone(), "mem".to_string()));
        let mut root = ozfs_vdev::Vdev::from_config(&root_nv, &mut opener).expect("root");
        root.children
            .push(ozfs_vdev::Vdev::from_config(&leaf, &mut opener).expect("leaf"));
        let pool = Pool {
            name: "t".into(),
            guid: 1,
            config: NvList::new(),
            root: ozfs_vdev::VdevCell::new(root),
            uberblock: Default::default(),
            uberblock_found: ozfs_vdev::labels::FoundUberblock {
                ub: Default::default(),
                label: 0,
                slot: 0,
                offset: 0,
            },
            mos_phys: ObjsetPhys::default(),
            readonly: false,
            device_paths: vec!["mem".into()],
            cache: ozfs_spa::arc::BlockCache::new(16 << 20),
            data_cache: ozfs_spa::arc::BlockCache::new(16 << 20),
            cache_data: Default::default(),
            external: Default::default(),
            hole_birth: Default::default(),
            label_features: Default::default(),
            active_features: Default::default(),
            checksum_salt: Default::default(),
            keys: Default::default(),
            unresolved_tops: Default::default(),
            brt: Default::default(),
            ddt: Default::default(),
            obsolete: Default::default(),
            indirect: Default::default(),
            io_hold: Default::default(),
            writeback: Default::default(),
            zil_io: Default::default(),
            heal: Default::default(),
            repaired: Default::default(),
            spares: Default::default(),
            spare_candidates: Default::default(),
        };
        TestPool {
            pool: Arc::new(pool),
            dev,
            // Hand-made blocks above 16 MiB; [`TestPool::allocator`] hands out below.
            next: Mutex::new(ALLOC_SIZE),
        }
    }

    /// Store `data` (a multiple of 512 bytes) as a block; its BP.
    pub fn put(&self, data: &[u8], object_type: u8, level: u8) -> BlkPtr {
        assert!(data.len().is_multiple_of(512) && !data.is_empty());
        let off = {
            let mut n = self.next.lock().expect("lock");
            let o = *n;
            *n += data.len() as u64;
            o
        };
        {
            let mut b = self.dev.bytes.lock().expect("lock");
            let at = (VDEV_LABEL_START_SIZE + off) as usize;
            b[at..at + data.len()].copy_from_slice(data);
        }
        let mut bp = BlkPtr::default();
        bp.set_dva(
            0,
            &Dva {
                vdev: 0,
                offset: off,
                asize: data.len() as u64,
                gang: false,
            },
        );
        let len = data.len() as u64;
        bp.words[6] = BlkPtr::make_prop(
            len,
            len,
            comp::OFF,
            cksum::OFF,
            object_type,
            level,
            false,
            ozfs_format::bytes::HOST_LITTLE_ENDIAN,
        );
        bp.words[9] = 1; // fill
        bp.words[10] = 5; // birth
        bp
    }

    /// An indirect block of `ibs` bytes holding `bps` from slot 0.
    pub fn put_indirect(&self, ibs: usize, bps: &[BlkPtr], object_type: u8, level: u8) -> BlkPtr {
        let mut b = vec![0u8; ibs];
        for (i, bp) in bps.iter().enumerate() {
            b[i * 128..(i + 1) * 128].copy_from_slice(&bp.to_bytes());
        }
        self.put(&b, object_type, level)
    }

    /// An allocator over the first 16 MiB (below the hand-made blocks).
    pub fn allocator(&self) -> ozfs_spa::metaslab::Allocator {
        ozfs_spa::metaslab::Allocator::new(vec![ozfs_spa::metaslab::MetaslabGroup::new(
            0,
            9,
            ALLOC_SIZE,
            22,
            ozfs_spa::metaslab::Geometry::Plain,
        )])
    }

    /// An objset whose meta-dnode is `meta`.
    pub fn objset(&self, meta: DnodePhys) -> Objset {
        let phys = ObjsetPhys {
            meta_dnode: meta,
            zil_header: vec![0u8; 192],
            os_type: 2,
            ..Default::default()
        };
        Objset::from_parts(self.pool.clone(), BlkPtr::default(), phys)
    }
}

/// A dnode with the given tree shape (16 K indirect blocks).
pub fn dnode(
    object_type: u8,
    blksz: u64,
    nlevels: u8,
    maxblkid: u64,
    bps: Vec<BlkPtr>,
) -> DnodePhys {
    DnodePhys {
        object_type,
        indblkshift: 14,
        nlevels,
        nblkptr: bps.len() as u8,
        bonustype: 0,
        checksum: 0,
        compress: 0,
        flags: DNODE_FLAG_USED_BYTES,
        datablkszsec: (blksz / 512) as u16,
        bonuslen: 0,
        extra_slots: 0,
        maxblkid,
        used: 0,
        blkptr: bps,
        bonus: Vec::new(),
        spill: None,
    }
}

/// Wrap a [`DnodePhys`] as object `object`.
pub fn wrap(object: u64, phys: DnodePhys) -> Dnode {
    Dnode {
        object,
        phys,
        swap: false,
    }
}

/// A 16 K block of dnodes with `objs` placed in their slots.
pub fn dnode_block(objs: &[(usize, DnodePhys)]) -> Vec<u8> {
    let mut b = vec![0u8; 16384];
    for (slot, d) in objs {
        let e = d.encode();
        b[slot * 512..slot * 512 + e.len()].copy_from_slice(&e);
    }
    b
}

/// The plain-file type.
pub const FILE: u8 = ot::PLAIN_FILE_CONTENTS;

/// Plain blocks, fletcher4, no compression (writes in tests).
pub struct Plain;

impl crate::tx::WritePolicy for Plain {
    fn props(&self, object_type: u8, level: u8) -> ozfs_spa::write::BlockProps {
        ozfs_spa::write::BlockProps {
            object_type,
            level,
            checksum: cksum::FLETCHER4,
            compress: comp::OFF,
            copies: 1,
            salt: None,
            seal: None,
            dedup: false,
            dedup_verify: false,
        }
    }
}
