//! Write throughput through the library API (no CLI, no FUSE): creates a
//! pool on one file, then either writes one file sequentially in 128 KiB
//! records (`seq`) or does 1 MiB random writes over 64 files (`rand`, the
//! DMU-study load of the seeds), syncing a txg every 64 MiB and at the end.
//! Prints MiB/s. Compared against `dd` by benches/write.sh.
//!
//! usage: writebench seq|rand DEVICE_FILE SIZE_MIB

use ozfs_dsl::create::{create_pool, TopSpec};
use ozfs_zpl::write::ZplTx;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: writebench seq|rand DEVICE_FILE SIZE_MIB");
        std::process::exit(2);
    }
    let mode = args[1].as_str();
    let dev = std::path::PathBuf::from(&args[2]);
    let size_mib: u64 = args[3].parse().unwrap_or(1024);
    let mut w = match create_pool("bench", &[TopSpec::Disk(dev)], 12, 23, &[]) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("create: {e}");
            std::process::exit(1);
        }
    };
    let root_ds = w.dsl().root().map(|d| d.ds_obj).unwrap_or(0);
    // Incompressible-looking data, generated once.
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut buf = vec![0u8; 1 << 20];
    for c in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let total = size_mib << 20;
    let start = Instant::now();
    let res = (|| -> ozfs_format::Result<()> {
        let nfiles = if mode == "seq" { 1 } else { 64 };
        let file_size = total / nfiles;
        let mut objs = Vec::new();
        {
            let txg = w.txg;
            let tx = w.fs_tx(root_ds)?;
            let mut z = ZplTx::open(tx, txg, 131072)?;
            let root = z.root;
            for i in 0..nfiles {
                objs.push(z.create(root, format!("f{i}").as_bytes(), 0o100644, 0, 0, 0)?);
            }
        }
        let mut written = 0u64;
        let mut since_sync = 0u64;
        let mut rng: u64 = 12345;
        while written < total {
            let (obj, off) = if mode == "seq" {
                (objs[0], written)
            } else {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let f = (rng % nfiles) as usize;
                let chunk = (rng >> 8) % (file_size >> 20).max(1);
                (objs[f], chunk << 20)
            };
            {
                let txg = w.txg;
                let tx = w.fs_tx(root_ds)?;
                let mut z = ZplTx::open(tx, txg, 131072)?;
                z.write(obj, off, &buf)?;
            }
            written += buf.len() as u64;
            since_sync += buf.len() as u64;
            if since_sync >= 64 << 20 {
                w.sync()?;
                since_sync = 0;
            }
        }
        w.sync()
    })();
    if let Err(e) = res {
        eprintln!("write: {e}");
        std::process::exit(1);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{mode} {size_mib} MiB in {secs:.2} s = {:.1} MiB/s",
        size_mib as f64 / secs
    );
}
