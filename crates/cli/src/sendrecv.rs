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
use ozfs_dsl::{DatasetInfo, DslPool};
use ozfs_ops::proto::{Input, Request, Response};
use std::io::{IsTerminal, Write};
use std::time::Instant;

fn nice(n: u64) -> String {
    crate::render::nice(n)
}

/// The snapshot named by `-i`/`-I` (`@a`, `fs@a` or `a`) for `to` (`fs@b`).
fn from_name(from: &str, to: &str) -> String {
    let fs = to.split('@').next().unwrap_or(to);
    if let Some(s) = from.strip_prefix('@') {
        format!("{fs}@{s}")
    } else if from.contains('@') {
        from.to_string()
    } else {
        format!("{fs}@{from}")
    }
}

/// `zfs send [-v] [-i snap | -I snap] snapshot`
pub fn send(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vnPpDLecwbhR", "iI")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(
            "usage:\n\tsend [-vR] [-i snapshot | -I snapshot] <snapshot>".into(),
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
    let pool_name = to_name.split(['/', '@']).next().unwrap_or("").to_string();
    let (_, pool) = ozfs_ops::host::open_imported(&pool_name)?;
    let dsl =
        DslPool::open(pool).map_err(|e| Fail::Err(format!("cannot open '{pool_name}': {e}")))?;
    let lookup = |n: &str| -> Result<DatasetInfo, Fail> {
        dsl.lookup(n)
            .map_err(|_| Fail::Err(format!("cannot open '{n}': dataset does not exist")))
    };
    let to = lookup(&to_name)?;
    // The (from, to) pairs to send.
    let mut pairs: Vec<(Option<DatasetInfo>, DatasetInfo)> = Vec::new();
    let mut repl_header = None;
    match (a.opt('i'), a.opt('I')) {
        (Some(_), Some(_)) => {
            return Err(Fail::Usage("-i and -I are mutually exclusive".into()));
        }
        (i, ii) if a.flag('R') => {
            // A replication stream: every descendant with this snapshot.
            let (head_name, tosnap) = to_name.split_once('@').unwrap_or((&to_name, ""));
            let head = lookup(head_name)?;
            let from = i
                .or(ii)
                .map(|f| f.rsplit('@').next().unwrap_or(f).to_string());
            let (hdr, p) = ozfs_dsl::send::replication_plan(&dsl, &head, tosnap, from.as_deref())
                .map_err(|e| Fail::Err(format!("cannot send '{to_name}': {e}")))?;
            pairs = p;
            repl_header = Some(hdr);
        }
        (Some(f), None) => pairs.push((Some(lookup(&from_name(f, &to_name))?), to)),
        (None, Some(f)) => {
            let from = lookup(&from_name(f, &to_name))?;
            let head_name = to_name.split('@').next().unwrap_or("");
            let head = lookup(head_name)?;
            let mut snaps: Vec<DatasetInfo> = dsl
                .snapshots(&head)
                .map_err(|e| Fail::Err(e.to_string()))?
                .into_iter()
                .filter(|s| {
                    s.ds.creation_txg > from.ds.creation_txg
                        && s.ds.creation_txg <= to.ds.creation_txg
                })
                .collect();
            snaps.sort_by_key(|s| s.ds.creation_txg);
            let mut prev = from;
            for s in snaps {
                pairs.push((Some(prev), s.clone()));
                prev = s;
            }
        }
        (None, None) => pairs.push((None, to)),
    }
    let verbose = a.flag('v') || a.flag('n');
    if verbose {
        let mut total = 0;
        for (f, t) in &pairs {
            let est = t.ds.referenced_bytes;
            total += est;
            match f {
                Some(f) => eprintln!(
                    "send from {} to {} estimated size is {}",
                    f.name
                        .rsplit_once('@')
                        .map(|x| format!("@{}", x.1))
                        .unwrap_or_default(),
                    t.name,
                    nice(est)
                ),
                None => eprintln!("full send of {} estimated size is {}", t.name, nice(est)),
            }
        }
        eprintln!("total estimated size is {}", nice(total));
    }
    if a.flag('n') {
        return Ok(());
    }
    let t0 = Instant::now();
    let mut sent = 0;
    // -I: one compound stream (header, substreams, final END), as ZFS writes it.
    let compound = a.opt('I').is_some() || repl_header.is_some();
    if compound {
        // -R names the snapshot asked for; -I the last one sent.
        let name = match &repl_header {
            Some(_) => to_name.clone(),
            None => pairs
                .last()
                .map(|p| p.1.name.clone())
                .unwrap_or(to_name.clone()),
        };
        sent += ozfs_dsl::send::compound_header(&mut out, &name, repl_header.as_ref())
            .map_err(|e| Fail::Err(format!("cannot send '{name}': {e}")))?;
    }
    let total: u64 = pairs.iter().map(|(_, t)| t.ds.referenced_bytes).sum();
    let mut prog = Progress::new(Some(total), &to_name);
    for (f, t) in &pairs {
        let base = sent;
        let mut tick = |b: u64| {
            if verbose {
                prog.tick(base + b);
            }
        };
        sent += ozfs_dsl::send::send(&dsl, t, f.as_ref(), &mut out, &mut tick)
            .map_err(|e| Fail::Err(format!("cannot send '{}': {e}", t.name)))?;
    }
    if compound {
        sent += ozfs_dsl::send::compound_end(&mut out)
            .map_err(|e| Fail::Err(format!("cannot send '{to_name}': {e}")))?;
    }
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
    let r = ozfs_ops::proto::execute(
        Request::Receive {
            target,
            force: a.flag('F'),
            dry_run: a.flag('n'),
            no_mount: a.flag('u'),
            stream,
        },
        &hooks,
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
    })
}

fn exec(req: Request) -> CmdResult {
    ozfs_ops::proto::execute(req, &ozfs_ops::proto::Progress::none())?;
    Ok(())
}

/// `zfs holds [-H] snapshot...`
pub fn holds(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "Hrp", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage("usage:\n\tholds [-H] <snapshot> ...".into()));
    }
    let pool_name = a.pos[0].split(['/', '@']).next().unwrap_or("").to_string();
    let (_, pool) = ozfs_ops::host::open_imported(&pool_name)?;
    let dsl = DslPool::open(pool).map_err(|e| Fail::Err(e.to_string()))?;
    let mut rows = Vec::new();
    for s in &a.pos {
        let ds = dsl
            .lookup(s)
            .map_err(|_| Fail::Err(format!("cannot open '{s}': dataset does not exist")))?;
        if ds.ds.userrefs_obj == 0 {
            continue;
        }
        for e in ozfs_dmu::zap::list_obj(&dsl.mos, ds.ds.userrefs_obj)
            .map_err(|e| Fail::Err(e.to_string()))?
        {
            rows.push(vec![
                s.clone(),
                e.name_str(),
                crate::render::date(e.as_u64().unwrap_or(0)),
            ]);
        }
    }
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
