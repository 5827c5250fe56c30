//! `ozfs cp` and `ozfs rm`: files between the host and a dataset
//! (`ozfs_ops::copy` does the work).
//!
//! * `ozfs cp [-r] [-l] [-L keylocation] POOL/DATASET[@SNAP]:PATH DEST`
//!   copies a file or tree out (`-l`: load the key of an encrypted dataset
//!   from its `keylocation`, `-L`: from this location instead);
//! * `ozfs cp [-l] [-L keylocation] POOL/VOLUME[@SNAP] DEST` copies a
//!   volume's contents into a file;
//! * `ozfs cp [-r] [-l] [-L keylocation] SRC POOL/DATASET:PATH` copies a
//!   local file or tree in (into an encrypted file system: `-l`/`-L` load
//!   its key, unless the process holding the pool has it);
//! * `ozfs rm [-r] [-l] [-L keylocation] POOL/DATASET:PATH` removes a file
//!   or tree.

use crate::args::{split_source, Args};
use crate::{CmdResult, Fail};
use ozfs_ops::proto::{execute, Progress, Request};
use std::path::Path;

const USAGE: &str = "usage: ozfs cp [-r] [-l] [-L keylocation] POOL/DATASET[@SNAP]:PATH DEST\n       ozfs cp [-r] [-l] [-L keylocation] SRC POOL/DATASET:PATH\n       ozfs cp [-l] [-L keylocation] POOL/VOLUME[@SNAP] DEST";

pub fn main(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRapvl", "L")?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let keys = ozfs_ops::crypt::KeyLoad {
        load: a.flag('l'),
        location: a.opt('L').map(str::to_string),
    };
    let recursive = a.flag('r') || a.flag('R') || a.flag('a');
    if !a.pos[0].contains(':') && a.pos[1].contains(':') {
        let (dataset, path) = split_source(&a.pos[1])?;
        let src = a.pos[0].clone().into();
        execute(
            Request::CopyIn {
                src,
                dataset,
                path,
                recursive,
                keys,
            },
            &Progress::none(),
        )?;
        return Ok(());
    }
    if !a.pos[0].contains(':') {
        // A volume as a whole.
        let n = ozfs_ops::copy::copy_volume_out_with(&a.pos[0], Path::new(&a.pos[1]), &keys)?;
        if a.flag('v') {
            eprintln!("copied {n} bytes");
        }
        return Ok(());
    }
    let (ds_name, path) = split_source(&a.pos[0])?;
    let stats =
        ozfs_ops::copy::copy_out_with(&ds_name, &path, Path::new(&a.pos[1]), recursive, &keys)?;
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
            "ozfs cp: {} entries could not be copied",
            stats.errors.len()
        )));
    }
    Ok(())
}

/// `ozfs rm [-r] [-l] [-L keylocation] POOL/DATASET:PATH`.
pub fn rm(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRfl", "L")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(
            "usage: ozfs rm [-r] [-l] [-L keylocation] POOL/DATASET:PATH".into(),
        ));
    }
    let (dataset, path) = split_source(&a.pos[0])?;
    execute(
        Request::Rm {
            dataset,
            path,
            recursive: a.flag('r') || a.flag('R'),
            keys: ozfs_ops::crypt::KeyLoad {
                load: a.flag('l'),
                location: a.opt('L').map(str::to_string),
            },
        },
        &Progress::none(),
    )?;
    Ok(())
}
