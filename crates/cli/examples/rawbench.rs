//! The thesis's table 6.1 on ozfs (issue 7): files of 128 KiB records
//! filled 25, 50, 75 and 100 %, each stored densely (plain records holding
//! the same bytes back to back) and as pre-compressed records (one record
//! per 128 KiB of logical data, its payload `fill` × 128 KiB), read back
//! cold through the same raw-read engine (`Objset::read_raw`, which
//! gathers a window of BPs — 64 MiB of physical bytes — and fetches them
//! together). Both files hold the
//! same physical bytes; the question is whether reading the sparse records
//! costs in proportion to those bytes (the thesis saw +5 % to +18 %).
//!
//! usage:
//!   rawbench write DEVICE_FILE RECORDS     create the pool and the eight files
//!   rawbench read DEVICE_FILE NAME          read one file raw; prints seconds and bytes
//! The pool ("rawbench", ashift 12, compression off) lives on DEVICE_FILE.
//! benches/precompressed.sh drops the page cache between runs.

use ozfs_dmu::rawio::ExternalRecord;
use ozfs_dsl::create::{create_pool, TopSpec};
use ozfs_spa::{Pool, PoolOptions};
use ozfs_zpl::write::ZplTx;
use std::sync::Arc;
use std::time::Instant;

const REC: u64 = 131072;
const FILLS: [u64; 4] = [25, 50, 75, 100];

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("rawbench: {e}");
    std::process::exit(1);
}

fn noise(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for c in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
}

/// Payload bytes of a record filled `fill` %: with its 16-byte header the
/// stored block is exactly `fill` % of the record, so dense and
/// pre-compressed files hold the same physical bytes.
fn payload_len(fill: u64) -> usize {
    (REC * fill / 100) as usize - 16
}

fn write(dev: &std::path::Path, records: u64) -> ozfs_format::Result<()> {
    let mut w = create_pool("rawbench", &[TopSpec::Disk(dev.to_path_buf())], 12, 23, &[])?;
    ozfs_dsl::features::activate_external(&mut w)?;
    let root_ds = w.dsl().root()?.ds_obj;
    let mut buf = vec![0u8; 1 << 20];
    for fill in FILLS {
        let txg = w.txg;
        let (dense, pre) = {
            let mut z = ZplTx::open(w.fs_tx(root_ds)?, txg, REC)?;
            let root = z.root;
            let d = z.create(root, format!("dense-{fill}").as_bytes(), 0o100644, 0, 0, 0)?;
            let p = z.create(root, format!("pre-{fill}").as_bytes(), 0o100644, 0, 0, 0)?;
            (d, p)
        };
        // Dense: fill % of the logical size, back to back.
        let total = records * REC * fill / 100;
        let mut off = 0u64;
        let mut since = 0u64;
        while off < total {
            let n = (total - off).min(buf.len() as u64) as usize;
            noise(&mut buf[..n], off ^ fill);
            let txg = w.txg;
            ZplTx::open(w.fs_tx(root_ds)?, txg, REC)?.write(dense, off, &buf[..n])?;
            off += n as u64;
            since += n as u64;
            if since >= 64 << 20 {
                w.sync()?;
                since = 0;
            }
        }
        // Pre-compressed: one record per 128 KiB, payload fill % of it.
        let plen = payload_len(fill);
        for r in 0..records {
            let mut payload = vec![0u8; plen.next_multiple_of(8)];
            noise(&mut payload, r * 7 + fill);
            payload.truncate(plen);
            let rec = ExternalRecord {
                tag: 200,
                lsize: REC,
                payload,
                cksum: None,
            };
            let txg = w.txg;
            ZplTx::open(w.fs_tx(root_ds)?, txg, REC)?.write_precompressed(pre, r, &rec)?;
            since += plen as u64;
            if since >= 64 << 20 {
                w.sync()?;
                since = 0;
            }
        }
        w.sync()?;
        eprintln!("fill {fill}%: written");
    }
    Ok(())
}

fn read(dev: &std::path::Path, name: &str) -> ozfs_format::Result<(f64, u64, u64)> {
    let found = ozfs_spa::import::discover_paths(&[dev.to_path_buf()]);
    let f = found
        .into_iter()
        .next()
        .ok_or_else(|| ozfs_format::Error::not_found("pool on the device"))?;
    let pool = Arc::new(Pool::open(
        f,
        &PoolOptions {
            readonly: true,
            max_txg: None,
        },
    )?);
    let dsl = ozfs_dsl::DslPool::open(pool.clone())?;
    let root = dsl.root()?;
    let os = dsl.objset(&root)?;
    let zpl = ozfs_zpl::Zpl::open(os, "rawbench")?;
    let obj = zpl.resolve(&format!("/{name}"))?;
    let (dn, _) = zpl.attrs(obj)?;
    let t = Instant::now();
    let mut bytes = 0u64;
    let mut records = 0u64;
    let mut b = 0;
    while b <= dn.phys.maxblkid {
        let batch = zpl.os.read_raw(&dn, b, u64::MAX)?;
        let Some((last, _)) = batch.last() else { break };
        b = last + 1;
        for (_, r) in &batch {
            bytes += r.payload().len() as u64;
            records += 1;
        }
    }
    Ok((t.elapsed().as_secs_f64(), bytes, records))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1).map(String::as_str), args.len()) {
        (Some("write"), 4) => {
            let records: u64 = args[3].parse().unwrap_or_else(|_| fail("RECORDS"));
            write(std::path::Path::new(&args[2]), records).unwrap_or_else(|e| fail(e));
        }
        (Some("read"), 4) => {
            let (s, bytes, recs) =
                read(std::path::Path::new(&args[2]), &args[3]).unwrap_or_else(|e| fail(e));
            println!("{s:.3} {bytes} {recs}");
        }
        _ => {
            eprintln!("usage: rawbench write DEVICE_FILE RECORDS | rawbench read DEVICE_FILE NAME");
            std::process::exit(2);
        }
    }
}
