//! `ozfs cp [-r] POOL/DATASET[@SNAP]:PATH DEST`: copy a file or tree out.

use crate::args::Args;
use crate::zpool::open_imported;
use crate::{CmdResult, Fail};
use ozfs_dsl::DslPool;
use ozfs_format::znode::{S_IFDIR, S_IFMT};
use ozfs_zpl::copyout::{copy_out, CopyOptions};
use ozfs_zpl::Zpl;
use std::path::Path;

const USAGE: &str = "usage: ozfs cp [-r] POOL/DATASET[@SNAP]:PATH DEST";

/// Split `POOL/DS[@SNAP]:PATH` into dataset and path.
pub fn split_source(s: &str) -> Result<(String, String), Fail> {
    let Some((ds, path)) = s.split_once(':') else {
        return Err(Fail::Usage(format!(
            "source '{s}' must be POOL/DATASET[@SNAP]:PATH\n{USAGE}"
        )));
    };
    if ds.is_empty() {
        return Err(Fail::Usage(format!("source '{s}' has no dataset\n{USAGE}")));
    }
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path.to_string()
    };
    Ok((ds.to_string(), path))
}

/// Open the file system of a dataset or snapshot of an imported pool.
pub fn open_fs(
    ds_name: &str,
) -> Result<(crate::state::Record, std::sync::Arc<ozfs_spa::Pool>, Zpl), Fail> {
    let pool_name = ds_name.split(['/', '@']).next().unwrap_or("");
    let (rec, pool) = open_imported(pool_name)?;
    let dsl = DslPool::open(pool.clone())
        .map_err(|e| Fail::Err(format!("cannot open '{ds_name}': {e}")))?;
    let ds = dsl
        .lookup(ds_name)
        .map_err(|_| Fail::Err(format!("cannot open '{ds_name}': dataset does not exist")))?;
    let os = dsl
        .objset(&ds)
        .map_err(|e| Fail::Err(format!("cannot open '{ds_name}': {e}")))?;
    let zpl =
        Zpl::open(os, ds_name).map_err(|e| Fail::Err(format!("cannot open '{ds_name}': {e}")))?;
    Ok((rec, pool, zpl))
}

pub fn main(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRapv", "")?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let recursive = a.flag('r') || a.flag('R') || a.flag('a');
    let (ds_name, path) = split_source(&a.pos[0])?;
    let dest = Path::new(&a.pos[1]);
    let (mut rec, pool, zpl) = open_fs(&ds_name)?;
    let result = (|| -> Result<ozfs_zpl::copyout::CopyStats, Fail> {
        let obj = zpl
            .resolve(&path)
            .map_err(|e| Fail::Err(format!("cannot copy '{}': {e}", a.pos[0])))?;
        let (_, attrs) = zpl
            .attrs(obj)
            .map_err(|e| Fail::Err(format!("cannot copy '{}': {e}", a.pos[0])))?;
        if attrs.mode & S_IFMT == S_IFDIR && !recursive {
            return Err(Fail::Err(format!(
                "ozfs cp: -r not specified; omitting directory '{}'",
                a.pos[0]
            )));
        }
        let owners = unsafe_is_root();
        copy_out(
            &zpl,
            &path,
            dest,
            CopyOptions {
                owners,
                xattrs: true,
            },
        )
        .map_err(|e| {
            Fail::Err(format!(
                "cannot copy '{}' to '{}': {e}",
                a.pos[0],
                dest.display()
            ))
        })
    })();
    // Persist error counters whatever happened.
    if let Err(e) = rec.save_counters(&pool) {
        eprintln!("ozfs: warning: could not save error counters: {e}");
    }
    let stats = result?;
    if a.flag('v') {
        eprintln!(
            "copied {} files, {} directories, {} symlinks, {} hard links, {} other, {} bytes",
            stats.files, stats.dirs, stats.symlinks, stats.hardlinks, stats.others, stats.bytes
        );
    }
    if !stats.errors.is_empty() {
        for (p, e) in &stats.errors {
            eprintln!("ozfs cp: {}: {e}", p.display());
        }
        return Err(Fail::Err(format!(
            "ozfs cp: {} objects could not be copied",
            stats.errors.len()
        )));
    }
    Ok(())
}

fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
