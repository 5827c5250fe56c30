//! ZPL per-file attributes: the legacy `znode_phys_t` bonus (ZPL <= 4, zfs-fuse)
//! and System Attributes (ZPL 5). FORMAT.md §8.3–8.4. Both decode into the
//! same [`ZplAttrs`] so upper layers do not care which one a file uses.

use crate::error::Result;
use std::collections::HashMap;

pub const ZNODE_PHYS_SIZE: usize = 264;
pub const SA_MAGIC: u32 = 0x2F505A;
pub const S_IFMT: u64 = 0o170000;
pub const S_IFDIR: u64 = 0o040000;
pub const S_IFREG: u64 = 0o100000;
pub const S_IFLNK: u64 = 0o120000;
pub const S_IFIFO: u64 = 0o010000;
pub const S_IFCHR: u64 = 0o020000;
pub const S_IFBLK: u64 = 0o060000;
pub const S_IFSOCK: u64 = 0o140000;

/// The attributes of one file, whatever their on-disk form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZplAttrs {
    pub atime: (u64, u64),
    pub mtime: (u64, u64),
    pub ctime: (u64, u64),
    pub crtime: (u64, u64),
    pub gen: u64,
    pub mode: u64,
    pub size: u64,
    pub parent: u64,
    pub links: u64,
    pub xattr: u64,
    pub rdev: u64,
    pub flags: u64,
    pub uid: u64,
    pub gid: u64,
    /// Symlink target if stored in the bonus / SA (ZPL<=4: bytes after the 264-byte znode when bonuslen > 264).
    pub symlink: Option<Vec<u8>>,
}

/// SA registry and layouts of a ZPL 5 file system: attribute number -> (name, fixed length or 0),
/// layout number -> attribute numbers.
#[derive(Debug, Clone, Default)]
pub struct SaTables {
    pub registry: HashMap<u16, (String, u16)>,
    pub layouts: HashMap<u16, Vec<u16>>,
}

impl ZplAttrs {
    /// Decode a legacy znode bonus (`bonus.len() >= 264`; extra bytes = inline symlink target candidate).
    pub fn from_znode(_bonus: &[u8], _swap: bool) -> Result<ZplAttrs> {
        unimplemented!()
    }
    /// Decode an SA buffer (bonus of type SA or spill block) using `tables`.
    pub fn from_sa(_buf: &[u8], _swap: bool, _tables: &SaTables) -> Result<ZplAttrs> {
        unimplemented!()
    }
    /// Encode a legacy znode bonus (264 bytes + inline symlink if any), host order, trivial ACL fields zero.
    pub fn to_znode(&self) -> Vec<u8> {
        unimplemented!()
    }
}
