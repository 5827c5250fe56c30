//! Opening a file system objset and reading its files, directories and links.

use ozfs_dmu::{zap, Dnode, Objset};
use ozfs_format::types::ot;
use ozfs_format::znode::{SaTables, ZplAttrs, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use ozfs_format::{Error, Result};

/// A mounted-for-reading ZPL file system.
pub struct Zpl {
    pub os: Objset,
    pub version: u64,
    pub root: u64,
    pub delete_queue: u64,
    pub sa: Option<SaTables>,
    pub name: String,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub object: u64,
    /// File type bits from the entry (`mode >> 12`), 0 in ZPL 1.
    pub dtype: u8,
}

/// Maximum path depth followed by [`Zpl::resolve`].
pub const MAX_PATH_DEPTH: usize = 4096;

/// The device number of a system-attribute file system (ZPL 5, made by
/// OpenZFS) in the encoding the rest of ozfs reads (zfs-fuse's 32-bit
/// userspace form, `write::decode_rdev`). OpenZFS on Linux stores the
/// kernel's own `dev_t` (`major << 20 | minor`); a 64-bit
/// `major << 32 | minor` (illumos) is left as it is.
/// The attributes of an SA znode: its bonus buffer, then what its spill
/// block (contents, byte-swapped) adds; the device number in the form the
/// rest of ozfs reads ([`sa_rdev`]).
pub(crate) fn sa_attrs(
    bonus: &[u8],
    swap: bool,
    spill: Option<(Vec<u8>, bool)>,
    tables: &ozfs_format::znode::SaTables,
) -> Result<ZplAttrs> {
    let mut a = ZplAttrs::from_sa(bonus, swap, tables)?;
    if let Some((buf, sswap)) = spill {
        a.apply_sa_buf(&buf, sswap, tables)
            .map_err(|e| e.context("spill block"))?;
    }
    a.rdev = sa_rdev(a.rdev);
    Ok(a)
}

pub(crate) fn sa_rdev(z: u64) -> u64 {
    if z >> 32 != 0 {
        return z;
    }
    let major = (z >> 20) & 0xfff;
    let minor = z & 0xfffff;
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

impl Zpl {
    /// Read the master node of a file system objset.
    pub fn open(os: Objset, name: &str) -> Result<Zpl> {
        let what = format!("file system '{name}'");
        if os.phys.os_type != ozfs_format::objset::OBJSET_TYPE_ZFS {
            return Err(Error::Invalid(format!(
                "{what}: objset type {} is not a file system",
                os.phys.os_type
            )));
        }
        let master =
            zap::list_obj(&os, 1).map_err(|e| e.context(&format!("{what}: master node")))?;
        let get = |k: &str| {
            master
                .iter()
                .find(|e| e.name == k.as_bytes())
                .and_then(|e| e.as_u64())
        };
        let version =
            get("VERSION").ok_or_else(|| Error::corrupt(&what, "master node has no VERSION"))?;
        let root = get("ROOT").ok_or_else(|| Error::corrupt(&what, "master node has no ROOT"))?;
        let delete_queue = get("DELETE_QUEUE").unwrap_or(0);
        let sa = match get("SA_ATTRS") {
            Some(obj) => {
                Some(load_sa(&os, obj).map_err(|e| e.context(&format!("{what}: SA tables")))?)
            }
            None => None,
        };
        Ok(Zpl {
            os,
            version,
            root,
            delete_queue,
            sa,
            name: name.to_string(),
        })
    }

    /// Dnode and attributes of an object.
    pub fn attrs(&self, obj: u64) -> Result<(Dnode, ZplAttrs)> {
        let dn = self.os.dnode(obj)?;
        let what = format!("{}: object {obj}", self.name);
        let a = match dn.phys.bonustype {
            ot::ZNODE => ZplAttrs::from_znode(&dn.phys.bonus, dn.swap),
            ot::SA => {
                let tables = self
                    .sa
                    .as_ref()
                    .ok_or_else(|| Error::corrupt(&what, "SA bonus but no SA tables"))?;
                // What did not fit the bonus is in the spill block.
                let spill = match dn.phys.spill.filter(|bp| !bp.is_hole()) {
                    Some(bp) => Some((
                        self.os.read_bp(&bp).map_err(|e| e.context("spill block"))?,
                        bp.little_endian() != ozfs_format::bytes::HOST_LITTLE_ENDIAN,
                    )),
                    None => None,
                };
                sa_attrs(&dn.phys.bonus, dn.swap, spill, tables)
            }
            t => Err(Error::corrupt(
                &what,
                format!("bonus type {t} is not a znode"),
            )),
        }
        .map_err(|e| e.context(&what))?;
        Ok((dn, a))
    }

    /// Entries of a directory object.
    pub fn readdir(&self, dn: &Dnode) -> Result<Vec<DirEntry>> {
        if dn.phys.object_type != ot::DIRECTORY_CONTENTS {
            return Err(Error::NotDir(format!(
                "{}: object {} is not a directory",
                self.name, dn.object
            )));
        }
        let ents = zap::list(&self.os, dn)?;
        Ok(ents
            .into_iter()
            .filter_map(|e| {
                let v = e.as_u64()?;
                Some(DirEntry {
                    name: e.name,
                    object: v & ((1 << 48) - 1),
                    dtype: (v >> 60) as u8,
                })
            })
            .collect())
    }

    /// Look a name up in a directory.
    pub fn lookup(&self, dir: &Dnode, name: &[u8]) -> Result<Option<u64>> {
        let hashed = match std::str::from_utf8(name) {
            Ok(n) => zap::lookup(&self.os, dir, n)?
                .and_then(|e| e.as_u64())
                .map(|v| v & ((1 << 48) - 1)),
            Err(_) => None,
        };
        if hashed.is_some() || name.is_ascii() {
            return Ok(hashed);
        }
        // A name that is not UTF-8 cannot be hashed, and a case-folding
        // directory (`casesensitivity=mixed`) hashes a name folded as
        // OpenZFS folds Unicode, which the hash here does only for ASCII:
        // such a name may sit under another hash. Its exact bytes decide.
        Ok(self
            .readdir(dir)?
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| e.object))
    }

    /// The path of an object, found through its parent pointers and the
    /// parents' entries (for `zpool status -v`); None if the chain breaks
    /// (an unlinked file, a damaged directory) or runs too deep.
    pub fn path_of(&self, obj: u64) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut cur = obj;
        for _ in 0..MAX_PATH_DEPTH {
            if cur == self.root {
                parts.reverse();
                return Some(format!("/{}", parts.join("/")));
            }
            let (_, a) = self.attrs(cur).ok()?;
            let (pdn, _) = self.attrs(a.parent).ok()?;
            let e = self
                .readdir(&pdn)
                .ok()?
                .into_iter()
                .find(|e| e.object == cur)?;
            parts.push(String::from_utf8_lossy(&e.name).into_owned());
            cur = a.parent;
        }
        None
    }

    /// Resolve an absolute path inside the file system (no symlinks followed).
    pub fn resolve(&self, path: &str) -> Result<u64> {
        let mut obj = self.root;
        for (i, comp) in path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .enumerate()
        {
            if i > MAX_PATH_DEPTH {
                return Err(Error::Invalid(format!("path too deep: {path}")));
            }
            let (dn, a) = self.attrs(obj)?;
            if comp == ".." {
                obj = a.parent;
                continue;
            }
            if a.mode & S_IFMT != S_IFDIR {
                return Err(Error::Invalid(format!(
                    "{}:{path}: '{comp}' is under a non-directory",
                    self.name
                )));
            }
            obj = self
                .lookup(&dn, comp.as_bytes())?
                .ok_or_else(|| Error::not_found(format!("{}:{path}", self.name)))?;
        }
        Ok(obj)
    }

    /// Read `len` bytes at `offset` of a regular file, clipped to its size.
    pub fn read(&self, dn: &Dnode, a: &ZplAttrs, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= a.size {
            return Ok(Vec::new());
        }
        let n = (a.size - offset).min(len as u64) as usize;
        self.os.read(dn, offset, n)
    }

    /// Target of a symlink (bonus or data block).
    pub fn readlink(&self, dn: &Dnode, a: &ZplAttrs) -> Result<Vec<u8>> {
        if a.mode & S_IFMT != S_IFLNK {
            return Err(Error::Invalid(format!(
                "{}: object {} is not a symlink",
                self.name, dn.object
            )));
        }
        if let Some(t) = &a.symlink {
            return Ok(t.clone());
        }
        if a.size > 4096 * 16 {
            return Err(Error::corrupt(
                format!("{}: symlink object {}", self.name, dn.object),
                format!("target length {}", a.size),
            ));
        }
        self.os.read(dn, 0, a.size as usize)
    }

    /// Extended attributes: those kept in the SA (`xattr=sa`, a packed
    /// nvlist of name → byte array), then those in the object's xattr
    /// directory (name, value).
    pub fn xattrs(&self, a: &ZplAttrs) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        if let Some(packed) = &a.dxattr {
            out.extend(
                sa_xattrs(packed).map_err(|e| e.context(&format!("{}: SA xattrs", self.name)))?,
            );
        }
        if a.xattr == 0 {
            return Ok(out);
        }
        let (xdn, _) = self.attrs(a.xattr)?;
        for e in self.readdir(&xdn)? {
            let (dn, xa) = self.attrs(e.object)?;
            if xa.mode & S_IFMT != S_IFREG {
                continue;
            }
            if xa.size > 64 << 20 {
                return Err(Error::corrupt(
                    format!("{}: xattr object {}", self.name, e.object),
                    "larger than 64 MiB",
                ));
            }
            out.push((e.name, self.read(&dn, &xa, 0, xa.size as usize)?));
        }
        Ok(out)
    }
}

/// The xattrs of a `ZPL_DXATTR` value: an nvlist (XDR, or native as some
/// writers pack it) whose pairs are byte arrays; anything else in it is
/// damage, named.
pub fn sa_xattrs(packed: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use ozfs_format::nvlist::{NvList, NvValue};
    let nv = match packed.first() {
        Some(0) => ozfs_format::nvnative::unpack(packed)?,
        _ => NvList::unpack(packed)?,
    };
    nv.pairs
        .into_iter()
        .map(|(name, v)| match v {
            NvValue::ByteArray(b) | NvValue::Uint8Array(b) => Ok((name.into_bytes(), b)),
            other => Err(Error::corrupt(
                "ZPL_DXATTR",
                format!("xattr '{name}' holds type {}, not bytes", other.type_code()),
            )),
        })
        .collect()
}

fn load_sa(os: &Objset, obj: u64) -> Result<SaTables> {
    let master = zap::list_obj(os, obj)?;
    let get = |k: &str| {
        master
            .iter()
            .find(|e| e.name == k.as_bytes())
            .and_then(|e| e.as_u64())
    };
    let mut t = SaTables::default();
    if let Some(reg) = get("REGISTRY") {
        for e in zap::list_obj(os, reg)? {
            let Some(v) = e.as_u64() else { continue };
            let num = (v & 0xffff) as u16;
            let len = ((v >> 24) & 0xffff) as u16;
            t.registry.insert(num, (e.name_str(), len));
        }
    }
    if let Some(lay) = get("LAYOUTS") {
        for e in zap::list_obj(os, lay)? {
            let Ok(num) = e.name_str().parse::<u16>() else {
                continue;
            };
            t.layouts
                .insert(num, e.value.iter().map(|&x| x as u16).collect());
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::sa_xattrs;
    use ozfs_format::nvlist::{NvList, NvValue};

    #[test]
    fn sa_xattrs_are_byte_arrays_and_nothing_else() {
        let mut nv = NvList::new();
        nv.set("user.a", NvValue::ByteArray(b"one".to_vec()));
        nv.set("user.big", NvValue::ByteArray(vec![7u8; 5000]));
        let got = sa_xattrs(&nv.pack_xdr()).unwrap();
        assert_eq!(
            got,
            vec![
                (b"user.a".to_vec(), b"one".to_vec()),
                (b"user.big".to_vec(), vec![7u8; 5000])
            ]
        );
        nv.set("user.n", NvValue::Uint64(3));
        let e = sa_xattrs(&nv.pack_xdr()).unwrap_err().to_string();
        assert!(e.contains("user.n"), "{e}");
        let packed = NvList::new().pack_xdr();
        assert!(sa_xattrs(&packed[..2]).is_err());
        assert!(sa_xattrs(&[]).is_err());
    }
}
