//! # ozfs: the command line
//!
//! `ozfs zpool …`, `ozfs zfs …`, `ozfs zdb …` with OpenZFS's verbs, flags,
//! output shapes and exit codes (0 success, 1 failure, 2 usage), plus
//! `ozfs cp` to copy trees out of datasets and snapshots.
//!
//! Each command parses its arguments, calls the operations crate
//! (`ozfs_ops`) and renders what comes back. "Imported" pools are
//! remembered in a state directory (`ozfs_ops::host`). The daemon
//! ([`daemon`], started on demand) holds the pools imported with their
//! mounts; an operation on a pool it holds is run by it
//! (`ozfs_ops::proto::execute`) and its typed result printed here, the same
//! way as when this process runs it.
//!
//! Invariant: nothing reachable from `main` panics on bad input; every
//! failure becomes a message on stderr naming what and where, and an exit code.

mod args;
mod cp;
mod daemon;
mod mount;
mod mountpoint;
mod nbd;
mod output;
mod rawio;
mod render;
mod sendrecv;
mod zdb;
mod zfs;
mod zpool;
mod zvoldev;

use args::Usage;
use ozfs_ops::Error;

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
  zfs list|get|mount|unmount ...         dataset commands, as zfs(8)
  zdb [-CudR...] POOL ...                pool debugger, as zdb(8)
  cp [-r] POOL/DATASET[@SNAP]:PATH DEST  copy a file or tree out of a dataset
  cp [-r] SRC POOL/DATASET:PATH          copy a file or tree into a dataset
  rm [-r] POOL/DATASET:PATH              remove a file or tree from a dataset
  mount [-o ro] POOL/DATASET MOUNTPOINT  serve a dataset through FUSE until unmounted
  rawio write|read|info ...              pre-compressed records (ozfs rawio for usage)
  nbd start [tcp:HOST[:PORT]|unix:PATH]  serve the daemon's volumes over NBD (default tcp:127.0.0.1:10809)
  nbd list                               where the daemon serves NBD
  daemon [-f]                            the daemon that holds imported pools and their mounts";

/// `ozfs nbd start [ADDR]` / `ozfs nbd list`: the daemon's NBD server.
fn nbd_cmd(argv: &[String]) -> CmdResult {
    let usage = "usage:\n\tnbd start [tcp:HOST[:PORT]|unix:PATH]\n\tnbd list";
    match argv.first().map(String::as_str) {
        Some("start") if argv.len() <= 2 => {
            let addr = argv.get(1).map_or("tcp:127.0.0.1:10809", String::as_str);
            ozfs_ops::client::call_starting(
                &serde_json::json!({"cmd": "nbd_listen", "addr": addr}),
            )?
            .check()?;
            Ok(())
        }
        Some("list") if argv.len() == 1 => {
            if let Some(r) = ozfs_ops::client::call(&serde_json::json!({"cmd": "nbd_list"})) {
                let r = r?.check()?;
                let text = r.out.trim_end().to_string();
                if !text.is_empty() {
                    println!("{text}");
                }
            }
            Ok(())
        }
        _ => Err(Fail::Usage(usage.into())),
    }
}

/// Keep freed record-sized buffers in the heap for reuse: glibc would
/// otherwise give every 128 KiB block its own mmap (and page faults and
/// zeroing on each txg), and trim the heap after each sync.
fn tune_malloc() {
    // SAFETY: mallopt only sets allocator parameters; called before threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// Short-lived commands die quietly by SIGPIPE when their reader goes
/// away (`ozfs zdb -dddd … | head -1`), as OpenZFS's tools and every Unix
/// filter do: Rust starts programs with SIGPIPE ignored, which turns the
/// next `println!` into a panic on EPIPE. The servers keep it ignored —
/// the daemon (its clients' sockets) and `mount` (FUSE): a peer that goes
/// away is an error there, never the server's end. The one socket a
/// short-lived command writes, the daemon's, is written with
/// `MSG_NOSIGNAL` ([`client`]), so a daemon dying mid-request is still a
/// message, not a silent death.
fn default_sigpipe(argv: &[String]) {
    if matches!(argv.first().map(String::as_str), Some("daemon" | "mount")) {
        return;
    }
    // SAFETY: restores the default disposition of one signal before any
    // thread starts; no handler is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The command line of a `zpool`/`zfs` command, as the pool's history
/// records it (without the program name).
static INVOCATION: std::sync::OnceLock<ozfs_ops::history::Invocation> = std::sync::OnceLock::new();

/// What a pool-changing request run by this command logs in the pool's
/// history (None for the other verbs).
pub fn invocation() -> Option<&'static ozfs_ops::history::Invocation> {
    INVOCATION.get()
}

fn main() {
    tune_malloc();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if matches!(argv.first().map(String::as_str), Some("zpool" | "zfs")) {
        let _ = INVOCATION.set(ozfs_ops::history::Invocation::now(argv.join(" ")));
    }
    default_sigpipe(&argv);
    let code = match run(&argv) {
        Ok(()) => 0,
        Err(Fail::Usage(m)) => {
            eprintln!("{m}");
            2
        }
        Err(Fail::Err(m)) => {
            // Empty: the command printed its errors as it went.
            if !m.is_empty() {
                eprintln!("{m}");
            }
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
        "daemon" => daemon::main(rest),
        "zpool" => zpool::main(rest),
        "zfs" => match rest.first().map(String::as_str) {
            Some("send") => sendrecv::send(&rest[1..]),
            Some("receive" | "recv") => sendrecv::receive(&rest[1..]),
            Some("rollback") => sendrecv::rollback(&rest[1..]),
            Some("clone") => sendrecv::clone(&rest[1..]),
            Some("rename") => sendrecv::rename(&rest[1..]),
            Some("hold") => sendrecv::hold(&rest[1..], true),
            Some("release") => sendrecv::hold(&rest[1..], false),
            Some("holds") => sendrecv::holds(&rest[1..]),
            Some("promote") => sendrecv::promote(&rest[1..]),
            _ => zfs::main(rest),
        },
        "zdb" => zdb::main(rest),
        "cp" => cp::main(rest),
        "rm" => cp::rm(rest),
        "rawio" => rawio::main(rest),
        "mount" => mount::main(rest),
        "nbd" => nbd_cmd(rest),
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
