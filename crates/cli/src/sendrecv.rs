//! `zfs send`, `zfs receive` and `zfs rollback` on the command line.
//!
//! `send` reads committed snapshots only, so it opens the pool read-only
//! (also while the daemon holds it). `receive` needs the pool's writer: on
//! its own it takes it; when the daemon holds the pool the client spools
//! standard input to a file in the state directory and forwards the
//! command with the hidden option `-S FILE` (see `client.rs`). `-I` sends
//! one incremental stream per snapshot in the range, back to back; receive
//! takes streams until its input ends.

use crate::args::Args;
use crate::{CmdResult, Fail};
use ozfs_ops::dataset::{self, SendFrom};
use ozfs_ops::proto::{Input, Request, Response};
use std::io::{IsTerminal, Write};
use std::time::Instant;

fn nice(n: u64) -> String {
    crate::render::nice(n)
}

/// `zfs send [-vRLecw] [-i snap | -I snap] snapshot`
pub fn send(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vnPpDLecwbhR", "iI")?;
    a.refuse("bhpD", "cannot send").map_err(Fail::Err)?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(
            "usage:\n\tsend [-vRLecw] [-i snapshot | -I snapshot] <snapshot>".into(),
        ));
    }
    let to_name = a.pos[0].clone();
    if !to_name.contains('@') {
        return Err(Fail::Err(format!(
            "cannot send '{to_name}': not a snapshot"
        )));
    }
    let mut out = std::io::stdout().lock();
    if out.is_terminal() && !a.flag('n') {
        return Err(Fail::Err(
            "Error: Stream can not be written to a terminal.\nYou must redirect standard output."
                .into(),
        ));
    }
    let from = match (a.opt('i'), a.opt('I')) {
        (Some(_), Some(_)) => {
            return Err(Fail::Usage("-i and -I are mutually exclusive".into()));
        }
        (Some(f), None) => Some(SendFrom::Snapshot(f.to_string())),
        (None, Some(f)) => Some(SendFrom::Range(f.to_string())),
        (None, None) => None,
    };
    let mut plan = dataset::send_plan(&to_name, from.as_ref(), a.flag('R'))?;
    plan.opts = ozfs_dsl::send::SendOpts {
        compressed: a.flag('c'),
        embedded: a.flag('e'),
        large_blocks: a.flag('L'),
        raw: a.flag('w'),
    };
    let verbose = a.flag('v');
    let estimates = plan.estimates();
    if verbose {
        // As OpenZFS: with -n (no stream) the estimate is the output, on
        // standard output; otherwise it goes beside the stream, to stderr.
        let mut lines = Vec::new();
        let mut total = 0;
        for e in &estimates {
            total += e.bytes;
            lines.push(match &e.from {
                Some(f) => format!(
                    "send from {} to {} estimated size is {}",
                    f.rsplit_once('@')
                        .map(|x| format!("@{}", x.1))
                        .unwrap_or_default(),
                    e.to,
                    nice(e.bytes)
                ),
                None => format!("full send of {} estimated size is {}", e.to, nice(e.bytes)),
            });
        }
        lines.push(format!("total estimated size is {}", nice(total)));
        for l in lines {
            if a.flag('n') {
                println!("{l}");
            } else {
                eprintln!("{l}");
            }
        }
    }
    if a.flag('n') {
        return Ok(());
    }
    let t0 = Instant::now();
    let total: u64 = estimates.iter().map(|e| e.bytes).sum();
    let mut prog = Progress::new(Some(total), &to_name);
    let sent = plan.write(&mut out, &mut |b| {
        if verbose {
            prog.tick(b);
        }
    })?;
    if verbose {
        let secs = t0.elapsed().as_secs_f64().max(0.001);
        eprintln!(
            "sent {} in {:.1} seconds ({}/sec)",
            nice(sent),
            secs,
            nice((sent as f64 / secs) as u64)
        );
    }
    Ok(())
}

/// A progress line on stderr at most once a second: elapsed time, bytes,
/// rate and (when the total is known) time left.
struct Progress {
    t0: Instant,
    last: Instant,
    total: Option<u64>,
    what: String,
}

impl Progress {
    fn new(total: Option<u64>, what: &str) -> Progress {
        Progress {
            t0: Instant::now(),
            last: Instant::now(),
            total,
            what: what.to_string(),
        }
    }

    fn tick(&mut self, bytes: u64) {
        if self.last.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        self.last = Instant::now();
        let secs = self.t0.elapsed().as_secs_f64().max(0.001);
        let rate = bytes as f64 / secs;
        let left = match self.total {
            Some(t) if rate > 0.0 && t > bytes => {
                crate::render::hms(((t - bytes) as f64 / rate) as u64)
            }
            Some(_) => crate::render::hms(0),
            None => "-".into(),
        };
        eprintln!(
            "{}\t{}\t{}/s\t{} left\t{}",
            crate::render::hms(secs as u64),
            nice(bytes),
            nice(rate as u64),
            left,
            self.what
        );
    }
}

/// `zfs receive [-vnuF] filesystem[@snapshot]` (stream on standard input).
pub fn receive(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vunFdes", "ox")?;
    a.refuse("oxs", "cannot receive").map_err(Fail::Err)?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(
            "usage:\n\treceive [-vnFu] <filesystem|snapshot>".into(),
        ));
    }
    if a.flag('d') || a.flag('e') {
        return Err(Fail::Err(
            "cannot receive: -d and -e are not supported yet".into(),
        ));
    }
    let target = a.pos[0].clone();
    if std::io::stdin().is_terminal() {
        return Err(Fail::Err(
            "Error: Backup stream can not be read from a terminal.\nYou must redirect standard input.".into(),
        ));
    }
    let stream = Input::Stdin;
    let prog = std::sync::Mutex::new(Progress::new(stream.size(), &target));
    let verbose = a.flag('v');
    let tick = |b: u64| {
        if verbose {
            if let Ok(mut p) = prog.lock() {
                p.tick(b);
            }
        }
    };
    let hooks = ozfs_ops::proto::Progress {
        scan: &|_| {},
        bytes: &tick,
    };
    let r = ozfs_ops::proto::execute_as(
        Request::Receive {
            target,
            force: a.flag('F'),
            dry_run: a.flag('n'),
            no_mount: a.flag('u'),
            stream,
        },
        &hooks,
        crate::invocation(),
    )?;
    if let (true, Response::Received(rs)) = (verbose, r) {
        for r in rs {
            eprintln!(
                "receiving {} stream of {} into {}",
                if r.incremental { "incremental" } else { "full" },
                r.from_name,
                r.snapshot
            );
            eprintln!(
                "received {} stream in {:.1} seconds ({}/sec)",
                nice(r.bytes),
                r.seconds,
                nice((r.bytes as f64 / r.seconds) as u64)
            );
        }
    }
    let _ = std::io::stderr().flush();
    Ok(())
}

/// `zfs rollback [-r] snapshot`: to the most recent snapshot.
pub fn rollback(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRf", "")?;
    a.refuse("R", "cannot rollback").map_err(Fail::Err)?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage("usage:\n\trollback [-rRf] <snapshot>".into()));
    }
    exec(Request::Rollback {
        snapshot: a.pos[0].clone(),
        recursive: a.flag('r') || a.flag('R'),
    })
}

/// `zfs clone [-p] snapshot filesystem`
pub fn clone(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "pu", "o")?;
    a.refuse("po", "cannot clone").map_err(Fail::Err)?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(
            "usage:\n\tclone [-p] <snapshot> <filesystem|volume>".into(),
        ));
    }
    exec(Request::Clone {
        snapshot: a.pos[0].clone(),
        target: a.pos[1].clone(),
        no_mount: a.flag('u'),
    })
}

/// `zfs rename [-r] old new` (file systems and snapshots).
pub fn rename(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rpfu", "")?;
    a.refuse("p", "cannot rename").map_err(Fail::Err)?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(
            "usage:\n\trename [-f] <filesystem|volume|snapshot> <filesystem|volume|snapshot>\n\trename -r <snapshot> <snapshot>"
                .into(),
        ));
    }
    exec(Request::Rename {
        from: a.pos[0].clone(),
        to: a.pos[1].clone(),
        recursive: a.flag('r'),
    })
}

/// `zfs hold tag snapshot...` / `zfs release tag snapshot...`
pub fn hold(argv: &[String], hold: bool) -> CmdResult {
    let a = Args::parse(argv, "r", "")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!(
            "usage:\n\t{} [-r] <tag> <snapshot> ...",
            if hold { "hold" } else { "release" }
        )));
    }
    exec(Request::Hold {
        tag: a.pos[0].clone(),
        snapshots: a.pos[1..].to_vec(),
        hold,
        recursive: a.flag('r'),
    })
}

fn exec(req: Request) -> CmdResult {
    ozfs_ops::proto::execute_as(req, &ozfs_ops::proto::Progress::none(), crate::invocation())?;
    Ok(())
}

/// `zfs holds [-H] snapshot...`
pub fn holds(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "Hrp", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage("usage:\n\tholds [-H] <snapshot> ...".into()));
    }
    let rows: Vec<Vec<String>> = ozfs_ops::query::holds(&a.pos, a.flag('r'))?
        .into_iter()
        .map(|(s, tag, t)| vec![s, tag, crate::render::date(t)])
        .collect();
    use crate::output::{print_table, Align};
    print_table(
        &[
            ("NAME", Align::Left),
            ("TAG", Align::Left),
            ("TIMESTAMP", Align::Left),
        ],
        &rows,
        a.flag('H'),
    );
    Ok(())
}

/// `zfs promote clone`
pub fn promote(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "", "")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage("usage:\n\tpromote <clone-filesystem>".into()));
    }
    exec(Request::Promote {
        clone: a.pos[0].clone(),
    })
}
