//! Pre-compressed records (`ozfs_dmu::rawio` has the theory): storing one
//! record of a file as the client compressed it, and reading records back
//! raw.
//!
//! The first pre-compressed record in a pool needs `upgrade`: it turns the
//! pool into version 5000 with `org.ozfs:external_compression` active,
//! after which zfs-fuse and OpenZFS refuse to import it.
//!
//! Invariants: everything about a record is checked before anything
//! changes (a refused record leaves nothing staged); a payload is never
//! larger than [`MAX_PAYLOAD`].

use crate::error::{Error, Result};
use base64::Engine;
pub use ozfs_dmu::rawio::{ExternalRecord, RawRecord, RAW_WINDOW};
pub use ozfs_format::external::{tag_from_name, tag_name};
use ozfs_format::types::cksum as ck;
use ozfs_format::Cksum;
use serde_json::json;
use std::io::Read;

/// The largest payload accepted (a record is at most 128 KiB; this bounds
/// what a hostile client can make ozfs hold).
pub const MAX_PAYLOAD: usize = crate::proto::MAX_PAYLOAD as usize;

/// `FUNC:W0:W1:W2:W3`, the words in hex as zdb prints a checksum.
pub fn parse_cksum(s: &str) -> Result<(u8, Cksum)> {
    let bad = || {
        Error::Invalid(format!(
            "invalid checksum '{s}': want fletcher2|fletcher4|sha256 and four hex words, \
             FUNC:W0:W1:W2:W3"
        ))
    };
    let mut parts = s.split(':');
    let f = match parts.next() {
        Some("fletcher2") => ck::FLETCHER2,
        Some("fletcher4") => ck::FLETCHER4,
        Some("sha256") => ck::SHA256,
        _ => return Err(bad()),
    };
    let mut w = [0u64; 4];
    for x in w.iter_mut() {
        *x = parts
            .next()
            .and_then(|p| u64::from_str_radix(p, 16).ok())
            .ok_or_else(bad)?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((f, Cksum(w)))
}

/// Store `rec` as record `record` of file `path` in file system `ds_name`
/// (created when missing; `rec.lsize` 0 means the dataset's recordsize)
/// and sync. Activates the feature when `upgrade` allows. Returns (PSIZE,
/// LSIZE). Shared by the command and the daemon's `rawio_write` request.
pub fn store_record(
    w: &mut ozfs_dsl::sync::PoolWriter,
    ds_name: &str,
    path: &str,
    record: u64,
    mut rec: ExternalRecord,
    upgrade: bool,
) -> Result<(u64, u64), String> {
    let ds = w
        .dsl()
        .lookup(ds_name)
        .map_err(|_| "dataset does not exist".to_string())?;
    if ds.is_snapshot {
        return Err("snapshots are read-only".into());
    }
    let props = w.dsl().properties(&ds, 0).map_err(|e| e.to_string())?;
    if crate::copy::is_readonly(&props) {
        return Err("Read-only file system (readonly=on)".into());
    }
    let recordsize = crate::copy::recordsize_of(&props);
    if rec.lsize == 0 {
        rec.lsize = recordsize;
    }
    // Check everything before anything changes: a refused record must not
    // upgrade the pool, create the file or change its block size.
    let built =
        ozfs_dmu::rawio::ExtBlock::build(&rec, w.pool.min_sector()).map_err(|e| e.to_string())?;
    let trimmed = path.trim_end_matches('/');
    let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    let txg = w.txg;
    let existing = {
        let tx = w.fs_tx(ds.ds_obj).map_err(|e| e.to_string())?;
        let z = ozfs_zpl::write::ZplTx::open(tx, txg, recordsize).map_err(|e| e.to_string())?;
        ozfs_zpl::write::ZplTx::valid_name(name.as_bytes()).map_err(|e| e.to_string())?;
        let parent = z
            .resolve(if dir.is_empty() { "/" } else { dir })
            .map_err(|e| e.to_string())?;
        if z.attrs(parent).map_err(|e| e.to_string())?.mode & ozfs_format::znode::S_IFMT
            != ozfs_format::znode::S_IFDIR
        {
            return Err(format!("'{dir}' is not a directory"));
        }
        let obj = match z
            .lookup(parent, name.as_bytes())
            .map_err(|e| e.to_string())?
        {
            Some(obj) => {
                let a = z.attrs(obj).map_err(|e| e.to_string())?;
                z.check_precompressed(obj, &a, rec.lsize)
                    .map_err(|e| e.to_string())?;
                Some(obj)
            }
            None if rec.lsize != recordsize => {
                return Err(format!(
                    "logical size {} is not the record size {recordsize} a new file gets",
                    rec.lsize
                ))
            }
            None => None,
        };
        (parent, obj)
    };
    if record.checked_mul(rec.lsize).is_none_or(|o| o >= 1 << 62) {
        return Err(format!("record {record} is beyond any file"));
    }
    // Never into an encrypted file system: the record would be stored in
    // the clear (refused before anything changes).
    if w.dir_key_obj(ds.dir_obj)
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Err(format!(
            "'{}' is encrypted: pre-compressed records are not stored in encrypted file systems",
            ds.name
        ));
    }
    w.reserve(built.image.len() as u64)
        .map_err(|e| e.to_string())?;
    if !w.pool.external_active() {
        if !upgrade {
            return Err(format!(
                "pool '{}' does not have feature {} active; pass --upgrade to activate it \
                 (the pool becomes version 5000 and no longer imports in zfs-fuse or OpenZFS)",
                w.pool.name,
                ozfs_dsl::features::EXTERNAL_COMPRESSION
            ));
        }
        ozfs_dsl::features::activate_external(w).map_err(|e| e.to_string())?;
    }
    // reserve() may have synced: the open txg is read again.
    let txg = w.txg;
    let psize = {
        let tx = w.fs_tx(ds.ds_obj).map_err(|e| e.to_string())?;
        let mut z = ozfs_zpl::write::ZplTx::open(tx, txg, recordsize).map_err(|e| e.to_string())?;
        let obj = match existing {
            (_, Some(o)) => o,
            (parent, None) => z
                .create(parent, name.as_bytes(), 0o100644, 0, 0, 0)
                .map_err(|e| e.to_string())?,
        };
        z.write_external(obj, record, built)
            .map_err(|e| e.to_string())?
    };
    w.sync().map_err(|e| e.to_string())?;
    Ok((psize, rec.lsize))
}

/// The record of a socket `rawio_write` request (see the daemon).
pub fn socket_record(req: &serde_json::Value) -> Result<ExternalRecord, String> {
    let tag = tag_from_name(req["algo"].as_str().unwrap_or("")).map_err(|e| e.to_string())?;
    let data = req["data"]
        .as_str()
        .ok_or_else(|| "no \"data\" (the payload, base64)".to_string())?;
    if data.len() > MAX_PAYLOAD.div_ceil(3) * 4 {
        return Err(format!("payload larger than {} MiB", MAX_PAYLOAD >> 20));
    }
    let payload = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("data: {e}"))?;
    let cksum = match req["cksum"].as_str() {
        Some(c) => Some(parse_cksum(c).map_err(|e| e.to_string())?),
        None => None,
    };
    let lsize = match &req["lsize"] {
        serde_json::Value::Null => 0,
        v => v
            .as_u64()
            .filter(|&l| l > 0)
            .ok_or_else(|| format!("lsize {v} is not a positive number"))?,
    };
    Ok(ExternalRecord {
        tag,
        lsize,
        payload,
        cksum,
    })
}

/// Records `first ..` (at most `count`, at most one raw-read window) of
/// file `path` in file system `ds_name`, as the open txg has them, as the
/// JSON `rawio read --json` prints (payloads in base64). The daemon's
/// `rawio_read` request.
pub fn read_records(
    w: &mut ozfs_dsl::sync::PoolWriter,
    ds_name: &str,
    path: &str,
    first: u64,
    count: u64,
) -> Result<serde_json::Value, String> {
    let ds = w
        .dsl()
        .lookup(ds_name)
        .map_err(|_| "dataset does not exist".to_string())?;
    let txg = w.txg;
    let tx = w.fs_tx(ds.ds_obj).map_err(|e| e.to_string())?;
    let z = ozfs_zpl::write::ZplTx::open(tx, txg, 131072).map_err(|e| e.to_string())?;
    let obj = z.resolve(path).map_err(|e| e.to_string())?;
    let a = z.attrs(obj).map_err(|e| e.to_string())?;
    if a.mode & ozfs_format::znode::S_IFMT != ozfs_format::znode::S_IFREG {
        return Err("not a regular file".into());
    }
    let bs = z.tx.dnode(obj).map_err(|e| e.to_string())?.phys.datablksz();
    let count = count.min(ozfs_dmu::rawio::RAW_WINDOW / bs.max(512)).max(1);
    let recs =
        z.tx.read_raw(obj, first, count)
            .map_err(|e| e.to_string())?;
    Ok(json!({
        "object": obj,
        "size": a.size,
        "recordsize": bs,
        "records": recs.iter().map(|(b, r)| record_json(*b, r, true)).collect::<Vec<_>>(),
    }))
}

pub fn record_json(b: u64, r: &RawRecord, with_data: bool) -> serde_json::Value {
    let mut v = json!({"record": b, "kind": r.kind()});
    match r {
        RawRecord::Hole { lsize } => v["lsize"] = json!(lsize),
        RawRecord::Plain { data } => v["lsize"] = json!(data.len()),
        RawRecord::External {
            tag,
            csize,
            lsize,
            psize,
            cksum,
            ..
        } => {
            v["algo"] = json!(tag_name(*tag).unwrap_or_default());
            v["tag"] = json!(tag);
            v["csize"] = json!(csize);
            v["psize"] = json!(psize);
            v["lsize"] = json!(lsize);
            if let Some((f, c)) = cksum {
                v["cksum"] = json!(format!("{}:{c}", ozfs_codec::checksum::name(*f)));
            }
        }
    }
    if with_data && !matches!(r, RawRecord::Hole { .. }) {
        v["data"] = json!(base64::engine::general_purpose::STANDARD.encode(r.payload()));
    }
    v
}

/// Store the payload of `input` as record `record` of `ds_name:path`.
/// Returns (payload bytes, PSIZE, LSIZE).
#[allow(clippy::too_many_arguments)]
pub fn write_file(
    ds_name: &str,
    path: &str,
    record: u64,
    tag: u8,
    lsize: u64,
    cksum: Option<(u8, [u64; 4])>,
    upgrade: bool,
    input: &crate::proto::Input,
) -> Result<(u64, u64, u64)> {
    let target = format!("{ds_name}:{path}");
    let fail = |e: &dyn std::fmt::Display| {
        Error::Invalid(format!(
            "cannot write pre-compressed record to '{target}': {e}"
        ))
    };
    if ds_name.contains('@') {
        return Err(fail(&"snapshots are read-only"));
    }
    let mut payload = Vec::new();
    let limit = MAX_PAYLOAD as u64;
    input
        .open("reading the payload")
        .and_then(|f| {
            f.take(limit + 1)
                .read_to_end(&mut payload)
                .map_err(|e| Error::io("reading the payload", e))
        })
        .map_err(|e| fail(&e))?;
    if payload.len() as u64 > limit {
        return Err(fail(&"payload larger than 16 MiB"));
    }
    let mut w = crate::host::writer_for(ds_name)?;
    let bytes = payload.len() as u64;
    let rec = ExternalRecord {
        tag,
        lsize,
        payload,
        cksum: cksum.map(|(f, c)| (f, Cksum(c))),
    };
    store_record(&mut w, ds_name, path, record, rec, upgrade)
        .map(|(p, l)| (bytes, p, l))
        .map_err(|e| fail(&e))
}

/// What `rawio read` lists: a file's records, raw.
pub struct RawFile {
    pub object: u64,
    pub size: u64,
    pub recordsize: u64,
    pub records: Vec<(u64, RawRecord)>,
}

/// Records `first ..` (at most `count`) of `ds_name:path` at the pool's
/// last synced state; `each` sees every record as it is read (to write
/// payloads out without keeping them).
pub fn read_file(
    ds_name: &str,
    path: &str,
    first: u64,
    count: u64,
    each: &mut dyn FnMut(u64, &RawRecord) -> Result<()>,
) -> Result<RawFile> {
    let fail =
        |e: &dyn std::fmt::Display| Error::Invalid(format!("cannot read '{ds_name}:{path}': {e}"));
    let (_rec, _pool, zpl) = crate::copy::open_fs(ds_name)?;
    let obj = zpl.resolve(path).map_err(|e| fail(&e))?;
    let (dn, attrs) = zpl.attrs(obj).map_err(|e| fail(&e))?;
    if attrs.mode & ozfs_format::znode::S_IFMT != ozfs_format::znode::S_IFREG {
        return Err(fail(&"not a regular file"));
    }
    let mut records = Vec::new();
    let last = dn.phys.maxblkid;
    let end = first.saturating_add(count).min(last.saturating_add(1));
    let mut b = first;
    while b < end {
        let batch = zpl.os.read_raw(&dn, b, end - b).map_err(|e| fail(&e))?;
        let Some(n) = batch.last().map(|(k, _)| k + 1 - b) else {
            break;
        };
        for (k, r) in batch {
            each(k, &r)?;
            records.push((k, r));
        }
        b += n;
    }
    Ok(RawFile {
        object: obj,
        size: attrs.size,
        recordsize: dn.phys.datablksz(),
        records,
    })
}

/// `rawio info`: what a pool offers pre-compressed records.
pub struct PoolInfo {
    pub pool: String,
    pub version: u64,
    pub sector: u64,
    pub feature: &'static str,
    pub active: bool,
}

/// `rawio info POOL`.
pub fn info(pool_name: &str) -> Result<PoolInfo> {
    let (_rec, pool) = crate::host::open_imported(pool_name)?;
    ozfs_dsl::DslPool::open(pool.clone())
        .map_err(|e| Error::context(e, &format!("cannot open '{pool_name}'")))?;
    Ok(PoolInfo {
        pool: pool.name.clone(),
        version: pool.uberblock.version,
        sector: pool.min_sector(),
        feature: ozfs_dsl::features::EXTERNAL_COMPRESSION,
        active: pool.external_active(),
    })
}
