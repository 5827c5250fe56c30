//! `ozfs rawio`: the command-line face of pre-compressed records (issue 7;
//! `ozfs_dmu::rawio` has the theory).
//!
//! * `ozfs rawio write POOL/DATASET:PATH --record N --algo NAME [--lsize B]
//!   [--cksum FUNC:W0:W1:W2:W3] [--upgrade]` stores the payload read from
//!   standard input as record N of the file (created when missing).
//! * `ozfs rawio read POOL/DATASET[@SNAP]:PATH [--record N [--count C]]
//!   [--json] [-H] [-o FILE]` lists each record's kind, algorithm, exact and
//!   physical sizes; `-o` writes the payloads, concatenated, to FILE (`-`:
//!   standard output, the listing then goes to standard error); `--json`
//!   prints everything as one JSON document, payloads in base64.
//! * `ozfs rawio info POOL` prints the pool's sector size, version and
//!   whether the feature is active.
//!
//! The first pre-compressed record in a pool needs `--upgrade`: it turns
//! the pool into version 5000 with `org.ozfs:external_compression` active,
//! after which zfs-fuse and OpenZFS refuse to import it. Writes of a pool
//! the daemon holds are forwarded to it (the payload is spooled to a file
//! in the state directory); reads see the last synced state.

use crate::args::Args;
use crate::{CmdResult, Fail};
use base64::Engine;
use ozfs_dmu::rawio::{ExternalRecord, RawRecord};
use ozfs_format::external::{tag_from_name, tag_name};
use ozfs_format::types::cksum as ck;
use ozfs_format::Cksum;
use serde_json::json;
use std::io::{Read, Write};

const USAGE: &str = "usage:
\tozfs rawio write POOL/DATASET:PATH --record N --algo NAME [--lsize BYTES]
\t    [--cksum FUNC:W0:W1:W2:W3] [--upgrade]     (payload on standard input)
\tozfs rawio read POOL/DATASET[@SNAP]:PATH [--record N [--count C]] [--json] [-H] [-o FILE]
\tozfs rawio info POOL
algorithms: lz4, gzip, zstd, zle, lzjb, opaque-128 .. opaque-255";

/// The largest payload accepted (a record is at most 128 KiB; this bounds
/// what a hostile client can make ozfs hold).
pub const MAX_PAYLOAD: usize = 16 << 20;

/// Long options as the getopt letters they stand for.
pub fn short_args(argv: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    for a in argv {
        let (name, val) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (a.as_str(), None),
        };
        let s = match name {
            "--record" => "-r",
            "--count" => "-n",
            "--algo" => "-a",
            "--lsize" => "-l",
            "--cksum" => "-c",
            "--upgrade" => "-U",
            "--json" => "-j",
            "--output" => "-o",
            _ => {
                v.push(a.clone());
                continue;
            }
        };
        v.push(s.to_string());
        if let Some(val) = val {
            v.push(val.to_string());
        }
    }
    v
}

pub fn main(argv: &[String]) -> CmdResult {
    let argv = short_args(argv);
    match argv.first().map(String::as_str) {
        Some("write") => write(&argv[1..]),
        Some("read") => read(&argv[1..]),
        Some("info") => info(&argv[1..]),
        _ => Err(Fail::Usage(USAGE.into())),
    }
}

fn num(a: &Args, c: char, what: &str) -> Result<Option<u64>, Fail> {
    match a.opt(c) {
        None => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Fail::Usage(format!("invalid {what} '{s}'\n{USAGE}"))),
    }
}

/// `FUNC:W0:W1:W2:W3`, the words in hex as zdb prints a checksum.
fn parse_cksum(s: &str) -> Result<(u8, Cksum), Fail> {
    let bad = || {
        Fail::Usage(format!(
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

fn write(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "U", "ralcS")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let target = &a.pos[0];
    let (ds_name, path) = crate::cp::split_source(target)?;
    let fail = |e: &dyn std::fmt::Display| {
        Fail::Err(format!(
            "cannot write pre-compressed record to '{target}': {e}"
        ))
    };
    if ds_name.contains('@') {
        return Err(fail(&"snapshots are read-only"));
    }
    let record =
        num(&a, 'r', "record")?.ok_or_else(|| Fail::Usage(format!("missing --record\n{USAGE}")))?;
    let algo = a
        .opt('a')
        .ok_or_else(|| Fail::Usage(format!("missing --algo\n{USAGE}")))?;
    let tag = tag_from_name(algo).map_err(|e| Fail::Usage(format!("{e}\n{USAGE}")))?;
    let cksum = a.opt('c').map(parse_cksum).transpose()?;
    // The payload: standard input, or the daemon's spool file.
    let mut payload = Vec::new();
    let limit = MAX_PAYLOAD as u64;
    let got = match a.opt('S') {
        Some(p) => std::fs::File::open(p).and_then(|f| f.take(limit + 1).read_to_end(&mut payload)),
        None => std::io::stdin()
            .lock()
            .take(limit + 1)
            .read_to_end(&mut payload),
    };
    got.map_err(|e| fail(&format!("reading the payload: {e}")))?;
    if payload.len() as u64 > limit {
        return Err(fail(&"payload larger than 16 MiB"));
    }
    let mut w = crate::zfs::writer_for(&ds_name)?;
    let rec = ExternalRecord {
        tag,
        lsize: num(&a, 'l', "lsize")?.unwrap_or(0),
        payload,
        cksum,
    };
    let (psize, lsize) = store_record(&mut w, &ds_name, &path, record, rec.clone(), a.flag('U'))
        .map_err(|e| fail(&e))?;
    eprintln!(
        "record {record}: {} bytes {} stored in {psize} of {lsize}",
        rec.payload.len(),
        tag_name(tag).unwrap_or_default()
    );
    Ok(())
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
    if crate::cp::is_readonly(&props) {
        return Err("Read-only file system (readonly=on)".into());
    }
    let recordsize = crate::cp::recordsize_of(&props);
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
        Some(c) => Some(parse_cksum(c).map_err(|e| match e {
            Fail::Usage(m) | Fail::Err(m) => m,
        })?),
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

fn record_json(b: u64, r: &RawRecord, with_data: bool) -> serde_json::Value {
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

fn read(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "jH", "rno")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let target = &a.pos[0];
    let (ds_name, path) = crate::cp::split_source(target)?;
    let fail = |e: &dyn std::fmt::Display| Fail::Err(format!("cannot read '{target}': {e}"));
    let first = num(&a, 'r', "record")?;
    let count = match (first, num(&a, 'n', "count")?) {
        (_, Some(n)) => n,
        (Some(_), None) => 1,
        (None, None) => u64::MAX,
    };
    let first = first.unwrap_or(0);
    let (_rec, _pool, zpl) = crate::cp::open_fs(&ds_name)?;
    let obj = zpl.resolve(&path).map_err(|e| fail(&e))?;
    let (dn, attrs) = zpl.attrs(obj).map_err(|e| fail(&e))?;
    if attrs.mode & ozfs_format::znode::S_IFMT != ozfs_format::znode::S_IFREG {
        return Err(fail(&"not a regular file"));
    }
    let json_out = a.flag('j');
    let mut payload_out: Option<Box<dyn Write>> = match a.opt('o') {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout().lock())),
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| fail(&format!("{p}: {e}")))?,
        ))),
    };
    let listing_to_stderr = a.opt('o') == Some("-");
    let mut listing: Vec<String> = Vec::new();
    if !a.flag('H') && !json_out {
        listing.push(format!(
            "{:>8}  {:<8}  {:<10}  {:>8}  {:>8}  {:>8}",
            "RECORD", "KIND", "ALGO", "CSIZE", "PSIZE", "LSIZE"
        ));
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
        for (k, r) in &batch {
            if let Some(out) = payload_out.as_mut() {
                out.write_all(r.payload())
                    .map_err(|e| fail(&format!("writing the payload: {e}")))?;
            }
            if json_out {
                records.push(record_json(*k, r, payload_out.is_none()));
                continue;
            }
            let (algo, csize, psize, lsize) = match r {
                RawRecord::Hole { lsize } => ("-".to_string(), 0, 0, *lsize),
                RawRecord::Plain { data } => {
                    ("-".to_string(), data.len() as u64, 0, data.len() as u64)
                }
                RawRecord::External {
                    tag,
                    csize,
                    lsize,
                    psize,
                    ..
                } => (
                    tag_name(*tag).unwrap_or_default(),
                    *csize as u64,
                    *psize,
                    *lsize,
                ),
            };
            listing.push(if a.flag('H') {
                format!("{k}\t{}\t{algo}\t{csize}\t{psize}\t{lsize}", r.kind())
            } else {
                format!(
                    "{k:>8}  {:<8}  {algo:<10}  {csize:>8}  {psize:>8}  {lsize:>8}",
                    r.kind()
                )
            });
        }
        b += n;
    }
    if let Some(mut out) = payload_out {
        out.flush()
            .map_err(|e| fail(&format!("writing the payload: {e}")))?;
    }
    let text = if json_out {
        let doc = json!({
            "object": obj,
            "size": attrs.size,
            "recordsize": dn.phys.datablksz(),
            "records": records,
        });
        format!("{doc}\n")
    } else if listing.is_empty() {
        String::new()
    } else {
        listing.join("\n") + "\n"
    };
    if listing_to_stderr {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    Ok(())
}

fn info(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "j", "")?;
    let [pool_name] = a.pos.as_slice() else {
        return Err(Fail::Usage(USAGE.into()));
    };
    let pool_name = pool_name.split(['/', '@', ':']).next().unwrap_or("");
    let (_rec, pool) = crate::zpool::open_imported(pool_name)?;
    ozfs_dsl::DslPool::open(pool.clone())
        .map_err(|e| Fail::Err(format!("cannot open '{pool_name}': {e}")))?;
    let feature = if pool.external_active() {
        "active"
    } else {
        "disabled"
    };
    let v = json!({
        "pool": pool.name,
        "version": pool.uberblock.version,
        "sector": pool.min_sector(),
        "feature": ozfs_dsl::features::EXTERNAL_COMPRESSION,
        "state": feature,
    });
    if a.flag('j') {
        println!("{v}");
    } else {
        println!(
            "pool {}: version {}, sector {} bytes, {} {feature}",
            pool.name,
            pool.uberblock.version,
            pool.min_sector(),
            ozfs_dsl::features::EXTERNAL_COMPRESSION
        );
    }
    Ok(())
}
