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
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::time::Instant;

fn nice(n: u64) -> String {
    crate::scan::nice(n)
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
    let (_, pool) = crate::zpool::open_imported(&pool_name)?;
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
                crate::scan::hms(((t - bytes) as f64 / rate) as u64)
            }
            Some(_) => crate::scan::hms(0),
            None => "-".into(),
        };
        eprintln!(
            "{}\t{}\t{}/s\t{} left\t{}",
            crate::scan::hms(secs as u64),
            nice(bytes),
            nice(rate as u64),
            left,
            self.what
        );
    }
}

/// `zfs receive [-vuF] filesystem[@snapshot]` (stream on standard input).
pub fn receive(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vunFdes", "oxS")?;
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
    let file;
    let mut input: Box<dyn BufRead> = match a.opt('S') {
        Some(p) => {
            file = std::fs::File::open(p)
                .map_err(|e| Fail::Err(format!("cannot receive: {p}: {e}")))?;
            Box::new(BufReader::with_capacity(1 << 20, file))
        }
        None => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(Fail::Err(
                    "Error: Backup stream can not be read from a terminal.\nYou must redirect standard input.".into(),
                ));
            }
            Box::new(BufReader::with_capacity(1 << 20, stdin.lock()))
        }
    };
    if a.flag('n') {
        let mut sink = Vec::new();
        input
            .read_to_end(&mut sink)
            .map_err(|e| Fail::Err(format!("cannot receive: {e}")))?;
        return Ok(());
    }
    let mut w = crate::zfs::writer_for(&target)?;
    let opts = ozfs_dsl::recv::RecvOptions { force: a.flag('F') };
    let mut first = true;
    loop {
        // Streams follow each other (zfs send -I); the input may end between them.
        let more = input
            .fill_buf()
            .map(|b| !b.is_empty())
            .map_err(|e| Fail::Err(format!("cannot receive: {e}")))?;
        if !more {
            if first {
                return Err(Fail::Err(
                    "cannot receive: failed to read from stream".into(),
                ));
            }
            break;
        }
        first = false;
        let t0 = Instant::now();
        // The stream's size is known when it comes from a file.
        let total = match a.opt('S') {
            Some(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            None => std::fs::metadata("/proc/self/fd/0")
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()),
        };
        let mut prog = Progress::new(total, &target);
        let verbose = a.flag('v');
        let mut tick = |b: u64| {
            if verbose {
                prog.tick(b);
            }
        };
        let rs = ozfs_dsl::recv::receive(&mut w, &target, &mut input, &opts, &mut tick)
            .map_err(|e| Fail::Err(format!("cannot receive: {e}")))?;
        for r in rs.iter().filter(|_| a.flag('v')) {
            eprintln!(
                "receiving {} stream of {} into {}",
                if r.incremental { "incremental" } else { "full" },
                r.from_name,
                r.snapshot
            );
            let secs = t0.elapsed().as_secs_f64().max(0.001);
            eprintln!(
                "received {} stream in {:.1} seconds ({}/sec)",
                nice(r.bytes),
                secs,
                nice((r.bytes as f64 / secs) as u64)
            );
        }
        if target.contains('@') {
            break;
        }
    }
    w.sync()
        .map_err(|e| Fail::Err(format!("cannot receive: {e}")))?;
    let _ = std::io::stderr().flush();
    Ok(())
}

/// `zfs rollback [-r] snapshot`: to the most recent snapshot.
pub fn rollback(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRf", "")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage("usage:\n\trollback [-rRf] <snapshot>".into()));
    }
    let snap = &a.pos[0];
    let Some((fs, _)) = snap.split_once('@') else {
        return Err(Fail::Err(format!(
            "cannot rollback '{snap}': not a snapshot"
        )));
    };
    let mut w = crate::zfs::writer_for(fs)?;
    let dsl = w.dsl();
    let target = dsl
        .lookup(snap)
        .map_err(|_| Fail::Err(format!("cannot open '{snap}': dataset does not exist")))?;
    let head = dsl
        .lookup(fs)
        .map_err(|_| Fail::Err(format!("cannot open '{fs}': dataset does not exist")))?;
    if head.ds.prev_snap_obj != target.ds_obj {
        let mut later: Vec<DatasetInfo> = dsl
            .snapshots(&head)
            .map_err(|e| Fail::Err(e.to_string()))?
            .into_iter()
            .filter(|s| s.ds.creation_txg > target.ds.creation_txg)
            .collect();
        if !(a.flag('r') || a.flag('R')) {
            return Err(Fail::Err(format!(
                "cannot rollback to '{snap}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{}",
                later.iter().map(|s| s.name.clone()).collect::<Vec<_>>().join("\n")
            )));
        }
        // -r: the later snapshots go first, newest first.
        later.sort_by_key(|s| std::cmp::Reverse(s.ds.creation_txg));
        for s in later {
            w.destroy_snapshot(&s.name)
                .and_then(|()| w.sync())
                .map_err(|e| Fail::Err(format!("cannot destroy '{}': {e}", s.name)))?;
        }
    }
    w.rollback_to_latest(fs)
        .and_then(|_| w.sync())
        .map_err(|e| Fail::Err(format!("cannot rollback '{fs}': {e}")))
}

/// `zfs clone [-p] snapshot filesystem`
pub fn clone(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "p", "o")?;
    if a.pos.len() != 2 {
        return Err(Fail::Usage(
            "usage:\n\tclone [-p] <snapshot> <filesystem|volume>".into(),
        ));
    }
    let (snap, name) = (&a.pos[0], &a.pos[1]);
    let mut w = crate::zfs::writer_for(name)?;
    ozfs_dsl::create::clone_filesystem(&mut w, snap, name)
        .and_then(|_| w.sync())
        .map_err(|e| Fail::Err(format!("cannot create '{name}': {e}")))
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
    let (old, new) = (&a.pos[0], &a.pos[1]);
    let mut w = crate::zfs::writer_for(old)?;
    let pairs: Vec<(String, String)> = match (a.flag('r'), old.split_once('@')) {
        (true, Some((fs, osnap))) => {
            let nsnap = new.rsplit('@').next().unwrap_or(new);
            let dsl = w.dsl();
            let top = dsl
                .lookup(fs)
                .map_err(|_| Fail::Err(format!("cannot open '{fs}': dataset does not exist")))?;
            dsl.list(&top, false, None)
                .map_err(|e| Fail::Err(e.to_string()))?
                .into_iter()
                .filter(|d| dsl.lookup(&format!("{}@{osnap}", d.name)).is_ok())
                .map(|d| (format!("{}@{osnap}", d.name), format!("{}@{nsnap}", d.name)))
                .collect()
        }
        (true, None) => {
            return Err(Fail::Err(
                "cannot rename: -r applies to snapshots only".into(),
            ))
        }
        (false, _) => vec![(old.clone(), new.clone())],
    };
    for (o, n) in pairs {
        w.rename_dataset(&o, &n)
            .map_err(|e| Fail::Err(e.to_string()))?;
    }
    w.sync()
        .map_err(|e| Fail::Err(format!("cannot rename '{old}': {e}")))
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
    let tag = &a.pos[0];
    let mut w = crate::zfs::writer_for(&a.pos[1])?;
    for s in &a.pos[1..] {
        let r = if hold {
            w.hold(s, tag)
        } else {
            w.release(s, tag)
        };
        r.map_err(|e| Fail::Err(e.to_string()))?;
    }
    w.sync().map_err(|e| Fail::Err(e.to_string()))
}

/// `zfs holds [-H] snapshot...`
pub fn holds(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "Hrp", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage("usage:\n\tholds [-H] <snapshot> ...".into()));
    }
    let pool_name = a.pos[0].split(['/', '@']).next().unwrap_or("").to_string();
    let (_, pool) = crate::zpool::open_imported(&pool_name)?;
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
                crate::scan::date(e.as_u64().unwrap_or(0)),
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
    let name = &a.pos[0];
    let mut w = crate::zfs::writer_for(name)?;
    w.promote(name)
        .and_then(|()| w.sync())
        .map_err(|e| Fail::Err(e.to_string()))
}
