//! Objset headers (`objset_phys_t`, 1 K / 2 K / 4 K). FORMAT.md §5.1.
//!
//! Layout: meta-dnode at 0 (512 bytes), ZIL header at 512 (192 bytes),
//! `os_type` at 704, `os_flags` at 712, MACs (new, encryption) at 720..784,
//! then the user-used dnode at 1024, group-used at 1536 (2 K objsets and
//! larger) and project-used at 2048 (4 K objsets). Shorter blocks decode
//! with the missing tail treated as zero.

use crate::bytes::u64_at;
use crate::dnode::{DnodePhys, DNODE_SIZE};
use crate::error::{Error, Result};

/// `objset_phys_t` sizes.
pub const OBJSET_PHYS_SIZE_V1: usize = 1024;
pub const OBJSET_PHYS_SIZE_V2: usize = 2048;
pub const OBJSET_PHYS_SIZE_V3: usize = 4096;
/// Size of the embedded ZIL header (`zil_header_t`).
pub const ZIL_HEADER_SIZE: usize = 192;
/// `os_flags` bit: user and group space accounting complete.
pub const OBJSET_FLAG_USERACCOUNTING_COMPLETE: u64 = 1;
/// `os_flags` bit: user and group object counts complete.
pub const OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE: u64 = 2;
/// `os_flags` bit: project space and object accounting complete.
pub const OBJSET_FLAG_PROJECTQUOTA_COMPLETE: u64 = 4;

pub const OBJSET_TYPE_NONE: u64 = 0;
pub const OBJSET_TYPE_META: u64 = 1;
pub const OBJSET_TYPE_ZFS: u64 = 2;
pub const OBJSET_TYPE_ZVOL: u64 = 3;

/// A decoded objset header.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjsetPhys {
    pub meta_dnode: DnodePhys,
    /// Raw 192-byte ZIL header.
    pub zil_header: Vec<u8>,
    pub os_type: u64,
    pub flags: u64,
    /// Present when the block is >= 2 K (zero/empty dnode otherwise).
    pub userused_dnode: DnodePhys,
    pub groupused_dnode: DnodePhys,
    /// Present when the block is >= 4 K.
    pub projectused_dnode: DnodePhys,
    /// `os_portable_mac` and `os_local_mac` of an encrypted objset (zeros
    /// elsewhere), kept as read; a writer with the key recomputes them.
    pub portable_mac: [u8; 32],
    pub local_mac: [u8; 32],
}

impl ObjsetPhys {
    /// Decode from a 1 K, 2 K or 4 K block (missing tail = zero). `swap` as elsewhere.
    pub fn parse(buf: &[u8], swap: bool) -> Result<ObjsetPhys> {
        if buf.len() < OBJSET_PHYS_SIZE_V1 {
            return Err(Error::truncated(
                "objset_phys",
                OBJSET_PHYS_SIZE_V1,
                buf.len(),
            ));
        }
        let special = |off: usize, what: &str| -> Result<DnodePhys> {
            match buf.get(off..off + DNODE_SIZE) {
                Some(b) => DnodePhys::parse(b, swap).map_err(|e| e.context(what)),
                None => Ok(DnodePhys::default()),
            }
        };
        // The buffer is at least 1 K (checked above).
        let mac_at = |off: usize| -> [u8; 32] {
            let mut m = [0u8; 32];
            m.copy_from_slice(&buf[off..off + 32]);
            m
        };
        Ok(ObjsetPhys {
            meta_dnode: DnodePhys::parse(&buf[..DNODE_SIZE], swap)
                .map_err(|e| e.context("objset meta-dnode"))?,
            zil_header: buf[512..512 + ZIL_HEADER_SIZE].to_vec(),
            os_type: u64_at(buf, 704, swap, "objset os_type")?,
            flags: u64_at(buf, 712, swap, "objset os_flags")?,
            userused_dnode: special(1024, "objset userused dnode")?,
            groupused_dnode: special(1536, "objset groupused dnode")?,
            projectused_dnode: special(2048, "objset projectused dnode")?,
            portable_mac: mac_at(720),
            local_mac: mac_at(752),
        })
    }
    /// Encode into `size` (1024/2048/4096) bytes, host order.
    pub fn encode(&self, size: usize) -> Vec<u8> {
        let size = size.max(OBJSET_PHYS_SIZE_V1);
        let mut out = vec![0u8; size];
        let put_dnode = |out: &mut Vec<u8>, off: usize, d: &DnodePhys| {
            let e = d.encode();
            let n = e.len().min(DNODE_SIZE);
            if off + n <= out.len() {
                out[off..off + n].copy_from_slice(&e[..n]);
            }
        };
        put_dnode(&mut out, 0, &self.meta_dnode);
        let z = self.zil_header.len().min(ZIL_HEADER_SIZE);
        out[512..512 + z].copy_from_slice(&self.zil_header[..z]);
        out[704..712].copy_from_slice(&self.os_type.to_ne_bytes());
        out[712..720].copy_from_slice(&self.flags.to_ne_bytes());
        out[720..752].copy_from_slice(&self.portable_mac);
        out[752..784].copy_from_slice(&self.local_mac);
        if size >= OBJSET_PHYS_SIZE_V2 {
            put_dnode(&mut out, 1024, &self.userused_dnode);
            put_dnode(&mut out, 1536, &self.groupused_dnode);
        }
        if size >= OBJSET_PHYS_SIZE_V3 {
            put_dnode(&mut out, 2048, &self.projectused_dnode);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::BlkPtr;

    fn meta() -> DnodePhys {
        let mut bp = BlkPtr::default();
        bp.words[0] = 2;
        bp.words[1] = 0x10;
        bp.words[6] = BlkPtr::make_prop(16384, 1024, 3, 7, 10, 0, false, true);
        bp.words[10] = 4;
        bp.words[11] = 7;
        DnodePhys {
            object_type: 10,
            indblkshift: 14,
            nlevels: 7,
            nblkptr: 3,
            datablkszsec: 32,
            flags: 1,
            used: 4096,
            blkptr: vec![bp, BlkPtr::default(), BlkPtr::default()],
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_sizes() {
        for size in [1024, 2048, 4096] {
            let mut os = ObjsetPhys {
                meta_dnode: meta(),
                zil_header: vec![0; ZIL_HEADER_SIZE],
                os_type: OBJSET_TYPE_ZFS,
                flags: 0,
                ..Default::default()
            };
            if size >= 2048 {
                os.userused_dnode = DnodePhys {
                    object_type: 39,
                    indblkshift: 14,
                    nlevels: 1,
                    nblkptr: 3,
                    datablkszsec: 32,
                    blkptr: vec![BlkPtr::default(); 3],
                    ..Default::default()
                };
            }
            let b = os.encode(size);
            assert_eq!(b.len(), size);
            if crate::bytes::HOST_LITTLE_ENDIAN {
                assert_eq!(b[704], 2);
            }
            assert_eq!(b[0], 10);
            let back = ObjsetPhys::parse(&b, false).unwrap();
            assert_eq!(back, os);
        }
        assert!(ObjsetPhys::parse(&[0u8; 512], false).is_err());
    }
}
