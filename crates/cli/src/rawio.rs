//! `ozfs rawio`: the command-line face of pre-compressed records
//! (`ozfs_ops::rawio` does the work, `ozfs_dmu::rawio` has the theory).
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
use ozfs_ops::proto::{execute, Input, Progress, Request, Response};
use ozfs_ops::rawio::{self, tag_from_name, tag_name, RawRecord};
use serde_json::json;
use std::io::Write;

const USAGE: &str = "usage:
\tozfs rawio write POOL/DATASET:PATH --record N --algo NAME [--lsize BYTES]
\t    [--cksum FUNC:W0:W1:W2:W3] [--upgrade]     (payload on standard input)
\tozfs rawio read POOL/DATASET[@SNAP]:PATH [--record N [--count C]] [--json] [-H] [-o FILE]
\tozfs rawio info POOL
algorithms: lz4, gzip, zstd, zle, lzjb, opaque-128 .. opaque-255";

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

fn write(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "U", "ralc")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let (dataset, path) = crate::args::split_source(&a.pos[0])?;
    let record =
        num(&a, 'r', "record")?.ok_or_else(|| Fail::Usage(format!("missing --record\n{USAGE}")))?;
    let algo = a
        .opt('a')
        .ok_or_else(|| Fail::Usage(format!("missing --algo\n{USAGE}")))?;
    let tag = tag_from_name(algo).map_err(|e| Fail::Usage(format!("{e}\n{USAGE}")))?;
    let cksum = match a.opt('c') {
        Some(c) => Some(rawio::parse_cksum(c).map_err(|e| Fail::Usage(e.to_string()))?),
        None => None,
    };
    let r = execute(
        Request::RawioWrite {
            dataset,
            path,
            record,
            tag,
            lsize: num(&a, 'l', "lsize")?.unwrap_or(0),
            cksum: cksum.map(|(f, c)| (f, c.0)),
            upgrade: a.flag('U'),
            payload: Input::Stdin,
        },
        &Progress::none(),
    )?;
    if let Response::Stored {
        bytes,
        psize,
        lsize,
    } = r
    {
        eprintln!(
            "record {record}: {bytes} bytes {} stored in {psize} of {lsize}",
            tag_name(tag).unwrap_or_default()
        );
    }
    Ok(())
}

fn read(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "jH", "rno")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let target = &a.pos[0];
    let (ds_name, path) = crate::args::split_source(target)?;
    let fail = |e: &dyn std::fmt::Display| Fail::Err(format!("cannot read '{target}': {e}"));
    let first = num(&a, 'r', "record")?;
    let count = match (first, num(&a, 'n', "count")?) {
        (_, Some(n)) => n,
        (Some(_), None) => 1,
        (None, None) => u64::MAX,
    };
    let first = first.unwrap_or(0);
    let mut payload_out: Option<Box<dyn Write>> = match a.opt('o') {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout().lock())),
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| fail(&format!("{p}: {e}")))?,
        ))),
    };
    let json_out = a.flag('j');
    let listing_to_stderr = a.opt('o') == Some("-");
    let mut listing: Vec<String> = Vec::new();
    if !a.flag('H') && !json_out {
        listing.push(format!(
            "{:>8}  {:<8}  {:<10}  {:>8}  {:>8}  {:>8}",
            "RECORD", "KIND", "ALGO", "CSIZE", "PSIZE", "LSIZE"
        ));
    }
    let mut records = Vec::new();
    let file = rawio::read_file(&ds_name, &path, first, count, &mut |_, r| {
        if let Some(out) = payload_out.as_mut() {
            out.write_all(r.payload())
                .map_err(|e| ozfs_ops::Error::io("writing the payload", e))?;
        }
        Ok(())
    })?;
    for (k, r) in &file.records {
        let k = *k;
        if json_out {
            records.push(rawio::record_json(k, r, payload_out.is_none()));
            continue;
        }
        let (algo, csize, psize, lsize) = match r {
            RawRecord::Hole { lsize } => ("-".to_string(), 0, 0, *lsize),
            RawRecord::Plain { data } => ("-".to_string(), data.len() as u64, 0, data.len() as u64),
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
    if let Some(mut out) = payload_out {
        out.flush()
            .map_err(|e| fail(&format!("writing the payload: {e}")))?;
    }
    let text = if json_out {
        let doc = json!({
            "object": file.object,
            "size": file.size,
            "recordsize": file.recordsize,
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
    let pool_name = ozfs_ops::names::pool_of(pool_name);
    let i = rawio::info(pool_name)?;
    let feature = if i.active { "active" } else { "disabled" };
    let v = json!({
        "pool": i.pool,
        "version": i.version,
        "sector": i.sector,
        "feature": i.feature,
        "state": feature,
    });
    if a.flag('j') {
        println!("{v}");
    } else {
        println!(
            "pool {}: version {}, sector {} bytes, {} {feature}",
            i.pool, i.version, i.sector, i.feature
        );
    }
    Ok(())
}
