//! # ozfs: the command line
//!
//! `ozfs zpool …`, `ozfs zfs …`, `ozfs zdb …` with OpenZFS's verbs, flags,
//! output shapes and exit codes (0 success, 1 failure, 2 usage), plus
//! `ozfs cp` to copy trees out of datasets and snapshots.
//!
//! Until the daemon exists, "imported" pools are remembered in a state
//! directory (see [`state`]) and every command opens the pool's devices
//! afresh, read-only.
//!
//! Invariant: nothing reachable from `main` panics on bad input; every
//! failure becomes a message on stderr naming what and where, and an exit code.

mod args;
mod cp;
mod mount;
mod output;
mod state;
mod zdb;
mod zfs;
mod zpool;

use args::Usage;
use ozfs_format::Error;

/// A command's failure.
pub enum Fail {
    /// Bad command line: exit 2.
    Usage(String),
    /// Operational error: exit 1.
    Err(String),
}

impl From<Usage> for Fail {
    fn from(u: Usage) -> Self {
        Fail::Usage(u.0)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Err(e.to_string())
    }
}

pub type CmdResult = Result<(), Fail>;

const USAGE: &str = "usage: ozfs <command> [args]

commands:
  zpool import|export|list|status ...   pool commands, as zpool(8)
  zfs list|get ...                       dataset commands, as zfs(8)
  zdb [-CudR...] POOL ...                pool debugger, as zdb(8)
  cp [-r] POOL/DATASET[@SNAP]:PATH DEST  copy a file or tree out of a dataset
  cp [-r] SRC POOL/DATASET:PATH          copy a file or tree into a dataset
  rm [-r] POOL/DATASET:PATH              remove a file or tree from a dataset
  mount [-o ro] POOL/DATASET MOUNTPOINT  serve a dataset through FUSE until unmounted";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&argv) {
        Ok(()) => 0,
        Err(Fail::Usage(m)) => {
            eprintln!("{m}");
            2
        }
        Err(Fail::Err(m)) => {
            eprintln!("{m}");
            1
        }
    };
    std::process::exit(code);
}

fn run(argv: &[String]) -> CmdResult {
    let Some(cmd) = argv.first() else {
        return Err(Fail::Usage(USAGE.into()));
    };
    let rest = &argv[1..];
    match cmd.as_str() {
        "zpool" => zpool::main(rest),
        "zfs" => zfs::main(rest),
        "zdb" => zdb::main(rest),
        "cp" => cp::main(rest),
        "rm" => cp::rm(rest),
        "mount" => mount::main(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        "--version" | "version" => {
            println!("ozfs {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        other => Err(Fail::Usage(format!(
            "unrecognized command '{other}'\n{USAGE}"
        ))),
    }
}
