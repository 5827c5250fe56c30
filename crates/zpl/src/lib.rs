//! # ozfs-zpl: the ZFS POSIX layer, read side
//!
//! A file system objset holds a master node (object 1, a ZAP) naming the
//! ZPL version, the root directory and the delete queue. Directories are
//! ZAPs from name to `object | type << 60`; per-file attributes live in the
//! dnode's bonus buffer, either as the legacy `znode_phys_t` (ZPL ≤ 4, what
//! zfs-fuse writes) or as System Attributes (ZPL 5, decoded with the
//! registry and layout tables named by the master node's `SA_ATTRS`).
//! Symlink targets sit in the bonus (short) or in data block 0 (long);
//! extended attributes are files in a hidden per-file xattr directory.
//!
//! [`copyout`] reproduces a tree outside the pool, keeping modes, owners,
//! times, symlinks, hard links (by object identity), xattrs and holes.
//!
//! Invariants:
//! * An object is only interpreted as a file, directory or symlink after its
//!   dnode type and mode agree; mismatches are errors naming the object.
//! * File reads never go past `size`; directory walks are bounded in depth
//!   and detect cycles through object identity.

pub mod acl;
pub mod copyout;
pub mod fs;
pub mod write;
pub mod zil;
pub mod zvol;

pub use fs::{DirEntry, Zpl};
