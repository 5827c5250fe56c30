//! ZAP access on DMU objects: block 0 and further blocks come from the
//! object's tree; decoding is [`ozfs_format::zap`].

use crate::objset::{Dnode, Objset};
use ozfs_format::zap::{self, ZapEntry};
use ozfs_format::{Error, Result};

fn block0(os: &Objset, dn: &Dnode) -> Result<(Vec<u8>, bool)> {
    os.read_block_swap(dn, 0)?
        .ok_or_else(|| Error::corrupt(format!("ZAP object {}", dn.object), "block 0 is a hole"))
}

/// All entries of a ZAP object.
pub fn list(os: &Objset, dn: &Dnode) -> Result<Vec<ZapEntry>> {
    let (b0, swap) = block0(os, dn)?;
    let bs = b0.len();
    let mut rd =
        |n: u64| -> Result<Vec<u8>> { Ok(os.read_block(dn, n)?.unwrap_or_else(|| vec![0u8; bs])) };
    zap::list(&b0, swap, &mut rd).map_err(|e| e.context(&format!("ZAP object {}", dn.object)))
}

/// Look up one name.
pub fn lookup(os: &Objset, dn: &Dnode, name: &str) -> Result<Option<ZapEntry>> {
    let (b0, swap) = block0(os, dn)?;
    let bs = b0.len();
    let mut rd =
        |n: u64| -> Result<Vec<u8>> { Ok(os.read_block(dn, n)?.unwrap_or_else(|| vec![0u8; bs])) };
    zap::lookup(&b0, swap, name.as_bytes(), &mut rd)
        .map_err(|e| e.context(&format!("ZAP object {}", dn.object)))
}

/// Look up a binary name (a uint64-keyed ZAP's key as big-endian words)
/// in a metadata ZAP, its blocks read through the pool's block cache (a
/// dedup table's lookups touch the same few blocks again and again).
pub fn lookup_bytes(os: &Objset, dn: &Dnode, name: &[u8]) -> Result<Option<ZapEntry>> {
    let what = || format!("ZAP object {}", dn.object);
    let b0 = os
        .metadata_block(dn, 0)?
        .ok_or_else(|| Error::corrupt(what(), "block 0 is a hole"))?;
    let swap = dn.swap;
    let bs = b0.len();
    let mut rd = |n: u64| -> Result<Vec<u8>> {
        Ok(os
            .metadata_block(dn, n)?
            .map(|b| b.to_vec())
            .unwrap_or_else(|| vec![0u8; bs]))
    };
    zap::lookup(&b0, swap, name, &mut rd).map_err(|e| e.context(&what()))
}

/// Look up a name whose value must be a single uint64.
pub fn lookup_u64(os: &Objset, dn: &Dnode, name: &str) -> Result<u64> {
    match lookup(os, dn, name)? {
        Some(e) => e.as_u64().ok_or_else(|| {
            Error::corrupt(
                format!("ZAP object {} entry '{name}'", dn.object),
                "value is not a single uint64",
            )
        }),
        None => Err(Error::not_found(format!(
            "'{name}' in ZAP object {}",
            dn.object
        ))),
    }
}

/// Convenience: list the ZAP stored in object `obj`.
pub fn list_obj(os: &Objset, obj: u64) -> Result<Vec<ZapEntry>> {
    let dn = os.dnode(obj)?;
    list(os, &dn)
}

/// Convenience: look a name up in object `obj`.
pub fn lookup_obj(os: &Objset, obj: u64, name: &str) -> Result<Option<ZapEntry>> {
    let dn = os.dnode(obj)?;
    lookup(os, &dn, name)
}

/// All entries of a ZAP object in the order OpenZFS's cursor walks them:
/// by hash (with the ZAP's salt and normalization, masked as the ZAP's
/// hash width), then collision differentiator. What `zdb` and
/// `dmu_objset_find` order their output by. Binary-keyed ZAPs keep their
/// stored order.
pub fn list_hash_order(os: &Objset, dn: &Dnode) -> Result<Vec<ZapEntry>> {
    let (b0, swap) = block0(os, dn)?;
    let (salt, normflags, bits) = match zap::parse_header(&b0, swap)? {
        zap::ZapHeader::Micro { salt, normflags } => (salt, normflags, zap::hashbits_for(0)),
        zap::ZapHeader::Fat(h) => {
            if h.flags & zap::ZAP_FLAG_UINT64_KEY != 0 {
                return list(os, dn);
            }
            (h.salt, h.normflags, zap::hashbits_for(h.flags))
        }
    };
    let mut v: Vec<(u64, ZapEntry)> = list(os, dn)?
        .into_iter()
        .map(|e| (zap::zap_hash(salt, &e.name, normflags, bits), e))
        .collect();
    v.sort_by_key(|(h, e)| (*h, e.cd));
    Ok(v.into_iter().map(|(_, e)| e).collect())
}
