//! `ozfs zpool`: parse, call `ozfs_ops`, render — create, destroy, import,
//! export, list, status and the device verbs.

use crate::args::Args;
use crate::output::{print_table, Align};
use crate::{CmdResult, Fail};
use ozfs_ops::host::Record;
use ozfs_ops::proto::{Request, Response};
use ozfs_ops::query::nicenum;
use ozfs_ops::scan::ScrubAction;
use ozfs_ops::status::{self, VdevNode};
use std::path::PathBuf;

const USAGE: &str = "usage: zpool <command>
	create [-f] [-o property=value]... [-O file-system-property=value]... [-m mountpoint] <pool> <vdev> ...
	destroy [-f] <pool>
	import [-d dir]... [-o property=value]... [-N] [-f] [pool | id] [newpool]
	export [-f] <pool>
	list [-H] [-p] [-o field[,...]] [pool] ...
	status [-v] [-x] [pool] ...
	scrub [-s | -p] [-w] <pool> ...
	clear <pool> [device]
	replace [-f] [-w] <pool> <device> [new-device]
	offline [-t] <pool> <device> ...
	online <pool> <device> ...
	attach [-f] [-w] <pool> <device> <new-device>
	detach <pool> <device>
	add [-fn] <pool> <vdev> ...
	remove <pool> <spare-device> ...
	get [-Hp] [-o field[,...]] <all | property[,...]> [pool] ...
	set <property=value> <pool>  (not supported yet)
	labelclear [-f] <vdev>
	sync [pool] ...
	events [-vHf [pool] | -c]
	wait [-t scrub|resilver] <pool>";

pub fn main(argv: &[String]) -> CmdResult {
    let Some(cmd) = argv.first() else {
        return Err(Fail::Usage(USAGE.into()));
    };
    let rest = &argv[1..];
    match cmd.as_str() {
        "import" => import(rest),
        "create" => create(rest),
        "destroy" => destroy(rest),
        "export" => export(rest),
        "list" => list(rest),
        "status" => status(rest),
        "scrub" => scrub(rest),
        "clear" => clear(rest),
        "replace" => replace(rest),
        "add" => add(rest),
        "offline" => offline(rest, true),
        "attach" => attach(rest, true),
        "detach" => attach(rest, false),
        "online" => offline(rest, false),
        "remove" => remove(rest),
        "get" => get(rest),
        "labelclear" => {
            let a = Args::parse(rest, "f", "")?;
            let [dev] = a.pos.as_slice() else {
                return Err(Fail::Usage("usage:\n\tlabelclear [-f] <vdev>".into()));
            };
            ozfs_ops::devices::labelclear(dev, a.flag('f'))?;
            Ok(())
        }
        "sync" => {
            let a = Args::parse(rest, "", "")?;
            let pools = if a.pos.is_empty() {
                Record::all()
            } else {
                a.pos.clone()
            };
            for p in pools {
                if Record::load(&p).is_ok_and(|r| r.readonly) {
                    continue;
                }
                run(Request::Sync { pool: p })?;
            }
            Ok(())
        }
        "wait" => {
            let a = Args::parse(rest, "H", "tT")?;
            a.refuse("HT", "zpool wait").map_err(Fail::Err)?;
            if let Some(t) = a.opt('t') {
                if t.split(',').any(|x| !matches!(x, "scrub" | "resilver")) {
                    return Err(Fail::Err(format!(
                        "zpool wait: -t {t}: only scrub and resilver are supported yet"
                    )));
                }
            }
            let [pool] = a.pos.as_slice() else {
                return Err(Fail::Usage(
                    "usage:\n\twait [-t activity[,...]] <pool>".into(),
                ));
            };
            Record::load(pool)
                .map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
            crate::render::wait_scan(pool);
            Ok(())
        }
        "iostat" => iostat(rest),
        "upgrade" => upgrade(rest),
        "history" => history(rest),
        "events" => events(rest),
        "reguid" | "initialize" | "trim" | "checkpoint" | "split" | "resilver" | "reopen"
        | "prefetch" | "ddtprune" => Err(Fail::Err(format!("zpool {cmd}: not supported yet"))),
        "set" => set(rest),
        other => Err(Fail::Usage(format!(
            "unrecognized command '{other}'\n{USAGE}"
        ))),
    }
}

fn search_dirs(a: &Args) -> Vec<PathBuf> {
    let d = a.opt_all('d');
    if d.is_empty() {
        vec![PathBuf::from("/dev/disk/by-id"), PathBuf::from("/dev")]
    } else {
        d.into_iter().map(PathBuf::from).collect()
    }
}

fn import(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "NfFanDl", "doRc")?;
    let mut readonly = false;
    for o in a.opt_all('o') {
        match o.split_once('=') {
            Some(("readonly", "on")) => readonly = true,
            Some(("readonly", "off")) => readonly = false,
            Some((_, _)) => {}
            None => {
                return Err(Fail::Usage(format!(
                    "bad property '{o}': expected property=value"
                )))
            }
        }
    }
    for (f, what) in [('D', "-D (destroyed pools)"), ('l', "-l (encryption keys)")] {
        if a.flag(f) {
            return Err(Fail::Err(format!(
                "cannot import: {what} is not supported yet"
            )));
        }
    }
    for (o, what) in [('R', "-R (altroot)"), ('c', "-c (cache files)")] {
        if a.opt(o).is_some() {
            return Err(Fail::Err(format!(
                "cannot import: {what} is not supported yet"
            )));
        }
    }
    let dirs = search_dirs(&a);
    let opts = ozfs_ops::pool::ImportOpts {
        readonly,
        dry_run: a.flag('n'),
        history: crate::invocation().cloned(),
    };
    if a.flag('a') {
        // Every pool found that is not imported yet.
        let mut failed = false;
        for p in status::importable(&dirs)? {
            if ozfs_ops::host::Record::load(&p.name).is_ok() {
                continue;
            }
            let id = p.guid.to_string();
            match ozfs_ops::pool::import(&dirs, &id, None, &opts) {
                Ok(rec) if !readonly && !opts.dry_run && !a.flag('N') => {
                    if let Err(e) = ozfs_ops::client::daemon_import(&rec.name) {
                        eprintln!("{e}");
                        failed = true;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("{e}");
                    failed = true;
                }
            }
        }
        return if failed {
            Err(Fail::Err(String::new()))
        } else {
            Ok(())
        };
    }
    if a.pos.is_empty() {
        let pools = status::importable(&dirs)?;
        if pools.is_empty() {
            return Err(Fail::Err("no pools available to import".into()));
        }
        for (i, p) in pools.into_iter().enumerate() {
            if i > 0 {
                println!();
            }
            print_importable(p);
        }
        return Ok(());
    }
    let rec = ozfs_ops::pool::import(&dirs, &a.pos[0], a.pos.get(1).map(String::as_str), &opts)?;
    if readonly && !opts.dry_run {
        // Never a silent stale view: say which file systems have changes
        // waiting in their intent logs.
        for w in ozfs_ops::pool::unreplayed_logs(&rec.name).unwrap_or_default() {
            eprintln!("warning: {w}");
        }
    }
    if !readonly && !opts.dry_run && !a.flag('N') {
        // The daemon takes the pool and mounts its file systems.
        ozfs_ops::client::daemon_import(&rec.name)?;
    }
    Ok(())
}

fn print_importable(p: status::Importable) {
    match &p.bad_name {
        None => println!("   pool: {}", p.name),
        // Printed escaped: a hostile name must not drive the terminal either.
        Some(why) => println!(
            "   pool: {:?} (invalid name: {why}; import by id under a new name)",
            p.name
        ),
    }
    println!("     id: {}", p.guid);
    match p.status {
        Ok(st) => {
            println!("  state: {}", st.state);
            if st.state == "ONLINE" {
                println!(" action: The pool can be imported using its name or numeric identifier.");
            } else {
                println!(" status: One or more devices are missing from the system.");
                println!(" action: The pool can be imported despite missing or damaged devices.  The\n\tfault tolerance of the pool may be compromised if imported.");
            }
            println!(" config:\n");
            print_tree(&st.tree, false, &st.spares);
        }
        Err(_) if !p.unsupported.is_empty() => {
            // OpenZFS's words for a pool needing features this system lacks.
            println!("  state: UNAVAIL");
            println!(
                "status: The pool uses the following feature(s) not supported on this system:"
            );
            for f in &p.unsupported {
                println!("\t{f}");
            }
            println!("action: The pool cannot be imported. Access the pool on a system that supports\n\tthe required feature(s), or recreate the pool from backup.");
        }
        Err(e) => {
            println!("  state: UNAVAIL");
            println!(" status: {e}");
            println!(" action: The pool cannot be imported. Attach the missing\n\tdevices and try again.");
        }
    }
}

fn tree_width(v: &VdevNode, depth: usize, w: &mut usize) {
    *w = (*w).max(v.name.len() + depth);
    for c in &v.children {
        tree_width(c, depth + 2, w);
    }
}

/// Print the vdev tree as `zpool status`/`import` do, then the spares.
pub fn print_tree(root: &VdevNode, counters: bool, spares: &[(String, String)]) {
    let mut w = root.name.len().max(10);
    for c in &root.children {
        tree_width(c, 2, &mut w);
    }
    for (n, _) in spares {
        w = w.max(n.len() + 2);
    }
    if counters {
        println!(
            "\t{:<w$}  {:<8} {:>5} {:>5} {:>5}",
            "NAME", "STATE", "READ", "WRITE", "CKSUM"
        );
    }
    fn line(v: &VdevNode, depth: usize, w: usize, counters: bool) {
        if counters {
            let note = if v.resilvering { "  (resilvering)" } else { "" };
            println!(
                "\t{:depth$}{:<width$}  {:<8} {:>5} {:>5} {:>5}{note}",
                "",
                v.name,
                v.state,
                v.read,
                v.write,
                v.cksum,
                width = w - depth
            );
        } else {
            println!(
                "\t{:depth$}{:<width$}  {}",
                "",
                v.name,
                v.state,
                width = w - depth
            );
        }
        // Top-level vdevs of the normal class under the pool; the others
        // after it under their class's heading, as OpenZFS prints them.
        for c in v.children.iter().filter(|c| c.class.is_none()) {
            line(c, depth + 2, w, counters);
        }
    }
    line(root, 0, w, counters);
    for class in ["dedup", "special", "logs"] {
        let mut tops = root
            .children
            .iter()
            .filter(|c| c.class.as_deref() == Some(class))
            .peekable();
        if tops.peek().is_some() {
            println!("\t{class}\t");
            for c in tops {
                line(c, 2, w, counters);
            }
        }
    }
    if !spares.is_empty() {
        println!("\tspares");
        for (n, st) in spares {
            println!("\t  {:<width$}  {st}", n, width = w - 2);
        }
    }
}

fn export(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fa", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(format!("missing pool argument\n{USAGE}")));
    }
    for p in &a.pos {
        ozfs_ops::pool::export_as(p, crate::invocation())?;
    }
    Ok(())
}

fn pools_from_args(a: &Args) -> Vec<String> {
    if a.pos.is_empty() {
        Record::all()
    } else {
        a.pos.clone()
    }
}

fn list(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "HpPLgvj", "oT")?;
    let scripted = a.flag('H');
    let parsable = a.flag('p');
    let all_cols = [
        "name", "size", "alloc", "free", "ckpoint", "expandsz", "frag", "cap", "dedup", "health",
        "altroot",
    ];
    let cols: Vec<String> = match a.opt('o') {
        Some(s) => s.split(',').map(|c| c.trim().to_lowercase()).collect(),
        None => all_cols.iter().map(|s| s.to_string()).collect(),
    };
    for c in &cols {
        if !all_cols.contains(&c.as_str())
            && ![
                "capacity",
                "allocated",
                "guid",
                "version",
                "dedupratio",
                "fragmentation",
                "health",
            ]
            .contains(&c.as_str())
        {
            return Err(Fail::Usage(format!("invalid property '{c}'")));
        }
    }
    if a.flag('j') {
        let mut pools = Vec::new();
        for name in pools_from_args(&a) {
            let props = status::pool_props(&name)?;
            let keys: Vec<&str> = cols
                .iter()
                .map(|c| match c.as_str() {
                    "alloc" => "allocated",
                    "cap" => "capacity",
                    "frag" => "fragmentation",
                    "dedup" => "dedupratio",
                    "expandsz" => "expandsize",
                    other => other,
                })
                .collect();
            let chosen = props
                .iter()
                .filter(|p| keys.contains(&p.name.as_str()))
                .cloned()
                .collect();
            pools.push((name, props, chosen));
        }
        println!("{}", json_pools("zpool list", &pools, a.flag('p')));
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for name in pools_from_args(&a) {
        let sp = match status::space(&name) {
            Ok(x) => x,
            Err(m) => {
                eprintln!("{m}");
                failed = true;
                continue;
            }
        };
        let bytes = |n: u64| if parsable { n.to_string() } else { nicenum(n) };
        let free = sp.free;
        let cap = sp
            .alloc
            .saturating_mul(100)
            .checked_div(sp.size)
            .unwrap_or(0);
        let row = cols
            .iter()
            .map(|c| match c.as_str() {
                "name" => name.clone(),
                "size" => bytes(sp.size),
                "alloc" | "allocated" => bytes(sp.alloc),
                "free" => bytes(free),
                "ckpoint" | "expandsz" => "-".into(),
                "frag" | "fragmentation" => "-".into(),
                "cap" | "capacity" => {
                    if parsable {
                        cap.to_string()
                    } else {
                        format!("{cap}%")
                    }
                }
                "dedup" | "dedupratio" => {
                    let r = sp.dedup_percent;
                    if parsable {
                        format!("{}.{:02}", r / 100, r % 100)
                    } else {
                        format!("{}.{:02}x", r / 100, r % 100)
                    }
                }
                "health" => sp.health.clone(),
                "guid" => sp.guid.to_string(),
                "version" => sp
                    .version
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
                _ => "-".into(),
            })
            .collect();
        rows.push(row);
    }
    if rows.is_empty() && a.pos.is_empty() && !failed {
        println!("no pools available");
        return Ok(());
    }
    let headers: Vec<(String, Align)> = cols
        .iter()
        .map(|c| {
            (
                match c.as_str() {
                    "dedupratio" => "DEDUP".to_string(),
                    "fragmentation" => "FRAG".to_string(),
                    "allocated" => "ALLOC".to_string(),
                    "capacity" => "CAP".to_string(),
                    _ => c.to_uppercase(),
                },
                if matches!(c.as_str(), "name" | "health" | "altroot") {
                    Align::Left
                } else {
                    Align::Right
                },
            )
        })
        .collect();
    let h: Vec<(&str, Align)> = headers.iter().map(|(s, al)| (s.as_str(), *al)).collect();
    print_table(&h, &rows, scripted);
    if failed {
        return Err(Fail::Err(String::new()));
    }
    Ok(())
}

fn status(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vxDgLPpeij", "T")?;
    a.refuse("geiT", "zpool status").map_err(Fail::Err)?;
    let names = pools_from_args(&a);
    if names.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    if a.flag('j') {
        return status_json(&names);
    }
    let mut first = true;
    let mut failed = false;
    for name in names {
        let ps = match status::status(&name) {
            Ok(x) => x,
            Err(m) => {
                eprintln!("{m}");
                failed = true;
                continue;
            }
        };
        let st = ps.state.as_str();
        let errs = ps.tree.errors();
        if a.flag('x') && st == "ONLINE" && errs == 0 {
            if !a.pos.is_empty() {
                println!("pool '{name}' is healthy");
                first = false;
            }
            continue;
        }
        if !first {
            println!();
        }
        first = false;
        println!("  pool: {name}");
        println!(" state: {st}");
        if st == "DEGRADED" {
            println!("status: One or more devices could not be opened.  Sufficient replicas exist for\n\tthe pool to continue functioning in a degraded state.");
            println!("action: Attach the missing device and online it using 'zpool online'.");
        } else if errs > 0 {
            println!("status: One or more devices has experienced an unrecoverable error.  An\n\tattempt was made to correct the error.  Applications are unaffected.");
            println!("action: Determine if the device needs to be replaced, and clear the errors\n\tusing 'zpool clear' or replace the device with 'zpool replace'.");
        }
        println!("{}", crate::render::status_lines(&name));
        println!("config:\n");
        print_tree(&ps.tree, true, &ps.spares);
        println!();
        println!("{}", crate::render::error_lines(&name, a.flag('v')));
        if a.flag('D') {
            match status::dedup_tables(&name) {
                Ok(Some(t)) => print!("{}", dedup_status(&t, a.flag('p'))),
                Ok(None) => {}
                Err(e) => {
                    eprintln!("{e}");
                    failed = true;
                }
            }
        }
    }
    if first && a.flag('x') && !failed {
        println!("all pools are healthy");
    }
    if failed {
        return Err(Fail::Err(String::new()));
    }
    Ok(())
}

/// `zpool get [-Hp] [-o field[,field]...] all|PROP[,PROP]... [POOL]...`
/// `-j`: pools with the properties chosen, as OpenZFS's JSON has them.
/// Each pool comes with all its properties (for the pool's own fields)
/// and those chosen for `properties`.
type JsonPool = (String, Vec<status::PoolProp>, Vec<status::PoolProp>);

fn json_pools(command: &str, pools: &[JsonPool], parsable: bool) -> String {
    let mut items = serde_json::Map::new();
    for (name, all, chosen) in pools {
        let mut m = serde_json::Map::new();
        for p in chosen {
            m.insert(
                p.name.clone(),
                crate::output::json_prop(&prop_text(p, parsable), &p.source),
            );
        }
        let get = |k: &str| all.iter().find(|p| p.name == k).map(|p| p.value.clone());
        items.insert(
            name.clone(),
            serde_json::json!({
                "name": name,
                "type": "POOL",
                "state": get("health").unwrap_or_default(),
                "pool_guid": get("guid").unwrap_or_default(),
                "spa_version": get("version").unwrap_or_default(),
                "properties": m,
            }),
        );
    }
    crate::output::json_doc(command, "pools", items)
}

/// A pool property's value as printed (`-p`: exact numbers).
fn prop_text(p: &status::PoolProp, parsable: bool) -> String {
    match (p.bytes, parsable) {
        (Some(b), false) => nicenum(b),
        _ => match p.name.as_str() {
            "capacity" if !parsable => format!("{}%", p.value),
            "dedupratio" | "bcloneratio" if !parsable => format!("{}x", p.value),
            _ => p.value.clone(),
        },
    }
}

/// `zpool iostat [-vHpy] [pool]... [interval [count]]`: the first report
/// covers the time since the daemon took each pool (averages per second,
/// as OpenZFS's first report covers the time since import), each later
/// one the last interval.
fn iostat(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "vHpy", "")?;
    let (verbose, scripted, parsable, skip_first) =
        (a.flag('v'), a.flag('H'), a.flag('p'), a.flag('y'));
    let mut pos = a.pos.clone();
    let num = |s: &String| s.parse::<f64>().ok().filter(|n| n.is_finite() && *n > 0.0);
    let mut interval = None;
    let mut count = None;
    if let Some(n) = pos.last().and_then(num) {
        pos.pop();
        interval = Some(n);
        if let Some(m) = pos.last().and_then(num) {
            pos.pop();
            count = Some(n as u64);
            interval = Some(m);
        }
    }
    if count == Some(0) {
        return Err(Fail::Usage("count must be greater than zero".into()));
    }
    let pools = if pos.is_empty() { Record::all() } else { pos };
    if pools.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    let take = |pools: &[String]| -> Result<Vec<status::IoStat>, Fail> {
        pools
            .iter()
            .map(|p| status::iostat(p).map_err(Fail::from))
            .collect()
    };
    let mut prev = take(&pools)?;
    let first_rates: Vec<(status::IoStat, f64)> =
        prev.iter().map(|s| (s.clone(), s.secs)).collect();
    let mut shown = 0u64;
    if interval.is_none() || !skip_first {
        print_iostat(&first_rates, verbose, scripted, parsable, true);
        shown += 1;
    }
    let Some(iv) = interval else { return Ok(()) };
    let iv = std::time::Duration::try_from_secs_f64(iv)
        .map_err(|_| Fail::Usage(format!("interval of {iv} seconds is out of range")))?;
    let mut last = std::time::Instant::now();
    while count.is_none_or(|c| shown < c) {
        std::thread::sleep(iv);
        let now = take(&pools)?;
        let dt = last.elapsed().as_secs_f64();
        last = std::time::Instant::now();
        let deltas: Vec<(status::IoStat, f64)> = now
            .iter()
            .zip(&prev)
            .map(|(n, p)| (io_delta(n, p), dt))
            .collect();
        print_iostat(&deltas, verbose, scripted, parsable, verbose || shown == 0);
        shown += 1;
        prev = now;
    }
    Ok(())
}

/// `now`'s counters minus `before`'s, row by row (a row new since, or a
/// daemon that restarted, counts from zero).
fn io_delta(now: &status::IoStat, before: &status::IoStat) -> status::IoStat {
    let mut d = now.clone();
    for r in &mut d.rows {
        if let Some(b) = before
            .rows
            .iter()
            .find(|b| b.name == r.name && b.depth == r.depth)
        {
            if r.read_ops >= b.read_ops && r.write_ops >= b.write_ops {
                r.read_ops -= b.read_ops;
                r.write_ops -= b.write_ops;
                r.read_bytes = r.read_bytes.saturating_sub(b.read_bytes);
                r.write_bytes = r.write_bytes.saturating_sub(b.write_bytes);
            }
        }
    }
    d
}

/// One report: each pool's rows, counters divided by the seconds they cover.
fn print_iostat(
    stats: &[(status::IoStat, f64)],
    verbose: bool,
    scripted: bool,
    parsable: bool,
    header: bool,
) {
    let num = |n: f64| {
        let n = n.round() as u64;
        if parsable {
            n.to_string()
        } else {
            nicenum(n)
        }
    };
    // (name, columns, whether the row starts a pool).
    let rows: Vec<(String, [String; 6], bool)> = stats
        .iter()
        .flat_map(|(st, secs)| {
            let rate = |n: u64| if *secs > 0.0 { n as f64 / secs } else { 0.0 };
            st.rows
                .iter()
                .filter(|r| (verbose && !(r.heading && scripted)) || (r.depth == 0 && !r.heading))
                .map(|r| {
                    if r.heading {
                        return (r.name.clone(), std::array::from_fn(|_| "-".into()), false);
                    }
                    let (alloc, free) = match r.space {
                        Some((a, f)) => (num(a as f64), num(f as f64)),
                        None => ("-".into(), "-".into()),
                    };
                    let name = if scripted {
                        r.name.clone()
                    } else {
                        format!("{}{}", "  ".repeat(r.depth), r.name)
                    };
                    (
                        name,
                        [
                            alloc,
                            free,
                            num(rate(r.read_ops)),
                            num(rate(r.write_ops)),
                            num(rate(r.read_bytes)),
                            num(rate(r.write_bytes)),
                        ],
                        r.depth == 0,
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if scripted {
        for (name, c, _) in &rows {
            println!("{name}\t{}", c.join("\t"));
        }
        return;
    }
    let nw = rows
        .iter()
        .map(|(n, _, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(10);
    let dashes = format!("{}  {}", "-".repeat(nw), ["-----"; 6].join("  "));
    if header {
        println!("{:nw$}    capacity     operations     bandwidth", "");
        println!("{:<nw$}  alloc   free   read  write   read  write", "pool");
        println!("{dashes}");
    }
    for (i, (name, c, _)) in rows.iter().enumerate() {
        println!(
            "{name:<nw$}  {:>5}  {:>5}  {:>5}  {:>5}  {:>5}  {:>5}",
            c[0], c[1], c[2], c[3], c[4], c[5]
        );
        // With -v a rule closes each pool (the next row is another pool).
        let ends_pool = rows.get(i + 1).is_none_or(|r| r.2);
        if verbose && ends_pool {
            println!("{dashes}");
        }
    }
}

/// `zpool upgrade [-v]`: the pool versions ozfs writes (up to 23, as
/// zfs-fuse) and the imported pools below it. Upgrading a pool (`POOL`,
/// `-a`) is refused: not supported yet.
fn upgrade(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "va", "V")?;
    if let Some(v) = a.opt('V') {
        if v != "5000" {
            return Err(Fail::Err(format!(
                "zpool upgrade: upgrading to legacy version {v} is not supported \
                 (ozfs upgrades pools to feature flags only)"
            )));
        }
    }
    if a.flag('v') && (a.flag('a') || !a.pos.is_empty()) {
        return Err(Fail::Usage(
            "-v option is incompatible with other arguments".into(),
        ));
    }
    if a.flag('a') && !a.pos.is_empty() {
        return Err(Fail::Usage(
            "-a option should not be used along with a pool name".into(),
        ));
    }
    println!("This system supports ZFS pool feature flags.\n");
    if a.flag('v') {
        println!("The following features are supported:\n");
        println!("FEAT DESCRIPTION");
        println!("-------------------------------------------------------------");
        for f in ozfs_ops::pool::features() {
            let ro = if f.read_only_compatible {
                " (read-only compatible)"
            } else {
                ""
            };
            println!("{:<37}{ro}", f.name);
            println!("     {}", f.description);
        }
        print!(
            "\nThe following legacy versions are also supported:\n\n{}\n",
            crate::render::version_table(crate::render::POOL_VERSIONS)
        );
        return Ok(());
    }
    let pools: Vec<String> = if a.flag('a') || a.pos.is_empty() {
        Record::all()
    } else {
        a.pos.clone()
    };
    // (version, features not enabled) of each pool.
    let state = |p: &str| -> Result<(u64, Vec<String>), Fail> {
        let props = status::pool_props(p)?;
        let version = status::space(p)?.version.unwrap_or(0);
        let off = props
            .iter()
            .filter(|r| r.name.starts_with("feature@") && r.value == "disabled")
            .map(|r| r.name["feature@".len()..].to_string())
            .collect();
        Ok((version, off))
    };
    if !a.flag('a') && a.pos.is_empty() {
        let mut older = Vec::new();
        let mut lacking = Vec::new();
        for p in &pools {
            let (v, off) = state(p)?;
            if v < 5000 {
                older.push((v, p.clone()));
            } else if !off.is_empty() {
                lacking.push((p.clone(), off));
            }
        }
        if older.is_empty() {
            println!("All pools are formatted using feature flags.\n");
        } else {
            println!(
                "The following pools are formatted with legacy version numbers and can\n\
                 be upgraded to use feature flags.  After being upgraded, these pools\n\
                 will no longer be accessible by software that does not support feature\n\
                 flags.\n\n\
                 Note that setting a pool's 'compatibility' feature to 'legacy' will\n\
                 inhibit upgrades.\n"
            );
            println!("VER  POOL\n---  ------------");
            for (v, p) in &older {
                println!("{v:2}   {p}");
            }
            println!("\nUse 'zpool upgrade -v' for a list of available legacy versions.");
        }
        if lacking.is_empty() {
            println!("Every feature flags pool has all supported and requested features enabled.");
        } else {
            println!(
                "\nSome supported features are not enabled on the following pools. Once a\n\
                 feature is enabled the pool may become incompatible with software\n\
                 that does not support the feature. See zpool-features(7) for details.\n\n\
                 Note that the pool 'compatibility' feature can be used to inhibit\n\
                 feature upgrades.\n\n\
                 Features marked with (*) are not applied automatically on upgrade, and\n\
                 must be applied explicitly with zpool-set(7).\n"
            );
            println!("POOL  FEATURE\n---------------");
            for (p, off) in &lacking {
                println!("{p}");
                for f in off {
                    println!("      {f}");
                }
            }
            println!();
        }
        return Ok(());
    }
    let mut changed_any = false;
    for p in &pools {
        let (v, off) = state(p)?;
        if v >= 5000 && off.is_empty() {
            if !a.flag('a') {
                println!("Pool '{p}' already has all supported and requested features enabled.");
            }
            continue;
        }
        run(Request::Upgrade { pool: p.clone() })?;
        changed_any = true;
        if v < 5000 {
            println!("Successfully upgraded '{p}' from version {v} to feature flags.");
        }
        let (_, still_off) = state(p)?;
        let enabled: Vec<&String> = off.iter().filter(|f| !still_off.contains(f)).collect();
        if !enabled.is_empty() {
            println!("Enabled the following features on '{p}':");
            for f in enabled {
                println!("  {f}");
            }
        }
        println!();
    }
    if a.flag('a') && !changed_any {
        println!(
            "All pools are already formatted using feature flags.\n\n\
             Every feature flags pool already has all supported and requested features enabled."
        );
    }
    Ok(())
}

/// `zpool set PROPERTY=VALUE POOL` (vdev properties are refused).
fn set(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "", "")?;
    let usage = || Fail::Usage("usage:\n\tset <property=value> <pool>".into());
    let (assign, pool) = match a.pos.as_slice() {
        [assign, pool] => (assign, pool),
        [_, _, _] => {
            return Err(Fail::Err(
                "zpool set: vdev properties are not supported yet".into(),
            ))
        }
        _ => return Err(usage()),
    };
    let Some((k, v)) = assign.split_once('=') else {
        return Err(Fail::Usage(
            "missing value in property=value argument\nusage:\n\tset <property=value> <pool>"
                .to_string(),
        ));
    };
    Record::load(pool).map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
    run(Request::PoolSet {
        pool: pool.clone(),
        assigns: vec![(k.to_string(), v.to_string())],
    })?;
    Ok(())
}

fn get(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "Hpj", "o")?;
    let Some(which) = a.pos.first() else {
        return Err(Fail::Usage(format!("missing property argument\n{USAGE}")));
    };
    let fields = a.fields();
    for f in &fields {
        if !["name", "property", "value", "source"].contains(&f.as_str()) {
            return Err(Fail::Usage(format!("invalid field '{f}'")));
        }
    }
    let names = if a.pos.len() > 1 {
        a.pos[1..].to_vec()
    } else {
        Record::all()
    };
    let parsable = a.flag('p');
    let mut rows = Vec::new();
    let mut as_json = Vec::new();
    for name in names {
        let props = status::pool_props(&name)?;
        let wanted: Vec<status::PoolProp> = if which == "all" {
            props.clone()
        } else {
            let mut v = Vec::new();
            for w in which.split(',') {
                let w = match w.trim() {
                    "cap" => "capacity",
                    "alloc" => "allocated",
                    "dedup" => "dedupratio",
                    "frag" => "fragmentation",
                    other => other,
                };
                match props.iter().find(|p| p.name == w) {
                    Some(p) => v.push(p.clone()),
                    None => {
                        return Err(Fail::Usage(format!(
                            "bad property list: invalid property '{w}'"
                        )))
                    }
                }
            }
            v
        };
        if a.flag('j') {
            as_json.push((name.clone(), props, wanted));
            continue;
        }
        for p in wanted {
            let value = prop_text(&p, parsable);
            rows.push(
                fields
                    .iter()
                    .map(|f| match f.as_str() {
                        "name" => name.clone(),
                        "property" => p.name.clone(),
                        "value" => value.clone(),
                        _ => p.source.clone(),
                    })
                    .collect::<Vec<String>>(),
            );
        }
    }
    if a.flag('j') {
        println!("{}", json_pools("zpool get", &as_json, parsable));
        return Ok(());
    }
    let headers: Vec<String> = fields.iter().map(|f| f.to_uppercase()).collect();
    let h: Vec<(&str, Align)> = headers.iter().map(|s| (s.as_str(), Align::Left)).collect();
    print_table(&h, &rows, a.flag('H'));
    Ok(())
}

/// One vdev of `zpool status -j`, with its children keyed by name.
fn vdev_json(v: &VdevNode) -> serde_json::Value {
    let mut e = serde_json::json!({
        "name": v.name,
        "vdev_type": v.vdev_type,
        "guid": v.guid.to_string(),
        "state": v.state,
        "read_errors": v.read.to_string(),
        "write_errors": v.write.to_string(),
        "checksum_errors": v.cksum.to_string(),
    });
    if let Some(p) = &v.path {
        e["path"] = serde_json::json!(p);
    }
    if v.resilvering {
        e["resilvering"] = serde_json::json!(true);
    }
    if !v.children.is_empty() {
        let mut m = serde_json::Map::new();
        for c in &v.children {
            m.insert(c.name.clone(), vdev_json(c));
        }
        e["vdevs"] = serde_json::Value::Object(m);
    }
    e
}

/// `zpool status -D` (OpenZFS's `print_dedup_stats`): the tables' entries,
/// their space on disk and in memory, and the histogram over all of them.
fn dedup_status(tables: &[ozfs_dsl::ddt::TableReport], parsable: bool) -> String {
    let mut all = ozfs_spa::ddt::Histogram::default();
    let (mut count, mut dspace, mut mspace) = (0u64, 0u64, 0u64);
    for t in tables {
        for o in &t.objects {
            all.add(&o.histogram);
            count = count.saturating_add(o.entries);
            dspace = dspace.saturating_add(o.dspace);
            mspace = mspace.saturating_add(o.mspace);
        }
        for l in &t.logs {
            count = count.saturating_add(l.entries);
        }
    }
    let mut out = String::from("\n dedup: ");
    if count == 0 {
        out.push_str("no DDT entries\n");
        return out;
    }
    let n = |v: u64| if parsable { v.to_string() } else { nicenum(v) };
    out.push_str(&format!(
        "DDT entries {count}, size {} on disk, {} in core\n",
        n(dspace),
        n(mspace)
    ));
    let total = all.total();
    out.push_str(&crate::render::ddt_histogram(&all, Some(&total)));
    out
}

/// `zpool status -j`: OpenZFS's JSON (pools keyed by name, each with its
/// vdev tree, spares, scan state and error count).
fn status_json(names: &[String]) -> CmdResult {
    let mut items = serde_json::Map::new();
    let mut failed = false;
    for name in names {
        let ps = match status::status(name) {
            Ok(x) => x,
            Err(m) => {
                eprintln!("{m}");
                failed = true;
                continue;
            }
        };
        let mut root = ps.tree.clone();
        root.vdev_type = "root".into();
        let mut vdevs = serde_json::Map::new();
        vdevs.insert(name.clone(), vdev_json(&root));
        let scan = ozfs_ops::scan::ScanState::load(name);
        let mut e = serde_json::json!({
            "name": name,
            "state": ps.state,
            "pool_guid": ps.guid.to_string(),
            "vdevs": vdevs,
            "error_count": scan.as_ref().map_or(0, |s| s.files.len()).to_string(),
        });
        if !ps.spares.is_empty() {
            let mut m = serde_json::Map::new();
            for (path, st) in &ps.spares {
                let state = st.split_whitespace().next().unwrap_or("").to_string();
                m.insert(
                    path.clone(),
                    serde_json::json!({"name": path, "vdev_type": "file", "state": state, "path": path}),
                );
            }
            e["spares"] = serde_json::Value::Object(m);
        }
        if let Some(s) = scan {
            e["scan_stats"] = serde_json::json!({
                "function": s.func.to_uppercase(),
                "state": match s.state.as_str() {
                    "scanning" => "SCANNING",
                    "finished" => "FINISHED",
                    "canceled" => "CANCELED",
                    _ => "PAUSED",
                },
                "start_time": s.start.to_string(),
                "end_time": s.end.to_string(),
                "to_examine": s.to_examine.to_string(),
                "examined": s.examined.to_string(),
                "issued": s.issued.to_string(),
                "processed": s.repaired.to_string(),
                "errors": s.errors.to_string(),
            });
        }
        items.insert(name.clone(), e);
    }
    println!(
        "{}",
        crate::output::json_doc("zpool status", "pools", items)
    );
    if failed {
        return Err(Fail::Err(String::new()));
    }
    Ok(())
}

/// `zpool clear pool [device]`: forget the error counters.
fn clear(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "nFX", "")?;
    let Some(name) = a.pos.first() else {
        return Err(Fail::Usage(format!("missing pool name\n{USAGE}")));
    };
    run(Request::Clear {
        pool: name.clone(),
        device: a.pos.get(1).cloned(),
    })
    .map(|_| ())
}

/// Run a request (in the daemon when it holds the pool), drawing a scan's
/// progress when this process runs it.
fn run(req: Request) -> Result<Response, Fail> {
    let draw = crate::render::scan_progress();
    let hooks = ozfs_ops::proto::Progress {
        scan: &draw,
        bytes: &|_| {},
    };
    let r = ozfs_ops::proto::execute_as(req, &hooks, crate::invocation());
    crate::render::end_progress();
    Ok(r?)
}

/// `zpool scrub [-s | -p] [-w] pool ...`
fn scrub(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "spwe", "")?;
    a.refuse("e", "cannot scrub").map_err(Fail::Err)?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(
            "missing pool name argument\nusage:\n\tscrub [-s | -p] [-w] <pool> ...".into(),
        ));
    }
    let action = if a.flag('p') {
        ScrubAction::Pause
    } else if a.flag('s') {
        ScrubAction::Stop
    } else {
        ScrubAction::Start
    };
    let mut failed = false;
    for name in &a.pos {
        match run(Request::Scrub {
            pool: name.clone(),
            action,
        }) {
            Ok(_) if a.flag('w') && action == ScrubAction::Start => crate::render::wait_scan(name),
            Ok(_) => {}
            Err(Fail::Err(m) | Fail::Usage(m)) => {
                eprintln!("{m}");
                failed = true;
            }
        }
    }
    if failed {
        Err(Fail::Err(String::new()))
    } else {
        Ok(())
    }
}

/// A device argument as the pool records it.
fn device_path(p: &str) -> Result<String, Fail> {
    Ok(ozfs_ops::devices::canonical_device(p)?)
}

/// `zpool replace [-f] [-w] pool old [new]`
fn replace(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fsw", "o")?;
    if a.pos.len() < 2 || a.pos.len() > 3 {
        return Err(Fail::Usage(
            "usage:\n\treplace [-f] [-w] <pool> <device> [new-device]".into(),
        ));
    }
    let (pool, old) = (&a.pos[0], &a.pos[1]);
    let new = device_path(a.pos.get(2).unwrap_or(old))?;
    run(Request::Replace {
        pool: pool.clone(),
        old: old.clone(),
        new,
    })?;
    if a.flag('w') {
        crate::render::wait_scan(pool);
    }
    Ok(())
}

/// `zpool offline [-t] pool device ...` and `zpool online pool device ...`
fn offline(argv: &[String], offline: bool) -> CmdResult {
    let a = Args::parse(argv, "tfe", "")?;
    a.refuse(
        "e",
        if offline {
            "cannot offline"
        } else {
            "cannot online"
        },
    )
    .map_err(Fail::Err)?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!(
            "missing pool or device name\nusage:\n\t{} <pool> <device> ...",
            if offline { "offline [-t]" } else { "online" }
        )));
    }
    run(Request::Offline {
        pool: a.pos[0].clone(),
        devices: a.pos[1..].to_vec(),
        offline,
    })
    .map(|_| ())
}

/// `zpool attach [-f] [-w] pool device new-device` and `zpool detach pool device`
fn attach(argv: &[String], attach: bool) -> CmdResult {
    let a = Args::parse(argv, "fsw", "o")?;
    let want = if attach { 3 } else { 2 };
    if a.pos.len() != want {
        return Err(Fail::Usage(if attach {
            "usage:\n\tattach [-f] [-w] <pool> <device> <new-device>".into()
        } else {
            "usage:\n\tdetach <pool> <device>".into()
        }));
    }
    let pool = &a.pos[0];
    if attach {
        run(Request::Attach {
            pool: pool.clone(),
            device: a.pos[1].clone(),
            new: device_path(&a.pos[2])?,
        })?;
        if a.flag('w') {
            crate::render::wait_scan(pool);
        }
    } else {
        run(Request::Detach {
            pool: pool.clone(),
            device: a.pos[1].clone(),
        })?;
    }
    Ok(())
}

/// `zpool remove pool device`: hot spares only.
fn remove(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "npsw", "")?;
    a.refuse("psw", "cannot remove").map_err(Fail::Err)?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(
            "usage:\n\tremove [-npsw] <pool> <device> ...".into(),
        ));
    }
    if a.flag('n') {
        // A dry run names what would go and changes nothing.
        ozfs_ops::devices::remove_dry_run(&a.pos[0], &a.pos[1..])?;
        for d in &a.pos[1..] {
            println!("would remove {d}");
        }
        return Ok(());
    }
    run(Request::Remove {
        pool: a.pos[0].clone(),
        devices: a.pos[1..].to_vec(),
    })
    .map(|_| ())
}

fn create(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fnd", "oOmR")?;
    a.refuse("R", "cannot create").map_err(Fail::Err)?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!("missing pool name or vdevs\n{USAGE}")));
    }
    let name = a.pos[0].clone();
    ozfs_ops::pool::check_new_name(&name)?;
    let mut o = ozfs_ops::pool::CreateOpts::default();
    // Feature flags as OpenZFS's `zpool create` takes them: a version-5000
    // pool gets every feature unless -d or a compatibility list says
    // otherwise; `feature@NAME=enabled|disabled` adjusts that.
    let mut version: Option<u64> = None;
    let mut compat: Option<String> = None;
    let mut feature_opts: Vec<(String, bool)> = Vec::new();
    for opt in a.opt_all('o') {
        match opt.split_once('=') {
            Some(("version", v)) => {
                version = Some(
                    v.parse()
                        .map_err(|_| Fail::Usage(format!("invalid version '{v}'")))?,
                )
            }
            Some(("compatibility", v)) => compat = Some(v.to_string()),
            Some((k, v)) if k.starts_with("feature@") => {
                // The name is checked with the rest (resolve_features).
                let f = &k["feature@".len()..];
                let on = match v {
                    "enabled" => true,
                    "disabled" => false,
                    _ => {
                        return Err(Fail::Usage(format!(
                            "property '{k}' can only be set to 'enabled' or 'disabled'"
                        )))
                    }
                };
                feature_opts.push((f.to_string(), on));
            }
            Some(("ashift", v)) => {
                o.ashift = v
                    .parse()
                    .map_err(|_| Fail::Usage(format!("invalid ashift '{v}'")))?
            }
            Some((k, _)) => {
                return Err(Fail::Err(format!(
                    "property '{k}' is not supported at creation"
                )))
            }
            None => {
                return Err(Fail::Usage(format!(
                    "bad property '{opt}': expected property=value"
                )))
            }
        }
    }
    for opt in a.opt_all('O') {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| Fail::Usage(format!("bad property '{opt}': expected property=value")))?;
        o.fs_props.push((k.to_string(), v.to_string()));
    }
    if let Some(m) = a.opt('m') {
        o.fs_props.push(("mountpoint".into(), m.to_string()));
    }
    (o.version, o.features) =
        ozfs_ops::pool::resolve_features(version, a.flag('d'), compat.as_deref(), &feature_opts)
            .map_err(|e| Fail::Err(format!("cannot create '{name}': {e}")))?;
    o.compatibility = compat.filter(|c| c != "off");
    let (tops, spares) =
        ozfs_ops::devices::vdev_spec(&a.pos[1..], a.flag('f'), &format!("cannot create '{name}'"))?;
    o.spares = spares;
    if a.flag('n') {
        // A dry run reports the layout and writes nothing.
        if ozfs_ops::host::Record::load(&name).is_ok() {
            return Err(Fail::Err(format!(
                "cannot create '{name}': pool already exists"
            )));
        }
        print_layout(&name, &tops, &o.spares);
        return Ok(());
    }
    o.history = crate::invocation().cloned();
    ozfs_ops::pool::create(&name, &tops, &o)?;
    // As OpenZFS: the new pool's file system is mounted (by the daemon,
    // which then holds the pool), unless its mountpoint says not to.
    // OZFS_CREATE_NOMOUNT=1 keeps the pool to this process's successors
    // (test harnesses that then serve it with `ozfs mount`).
    let nomount = std::env::var("OZFS_CREATE_NOMOUNT").is_ok_and(|v| v.trim() == "1");
    let mp = a.opt('m').unwrap_or("");
    if !nomount && !matches!(mp, "none" | "legacy") {
        ozfs_ops::client::daemon_take(&name, true)?;
    }
    Ok(())
}

/// `zpool create -n`: the layout a pool would have (log devices under
/// `logs`, as OpenZFS prints them).
fn print_layout(name: &str, tops: &[ozfs_ops::devices::TopSpec], spares: &[PathBuf]) {
    use ozfs_ops::devices::TopSpec;
    println!("would create '{name}' with the following layout:\n");
    println!("\t{name}");
    let print = |t: &TopSpec| match t.shape() {
        TopSpec::Disk(p) => println!("\t  {}", p.display()),
        s @ (TopSpec::Mirror(v) | TopSpec::Raidz(_, v) | TopSpec::Draid(_, v)) => {
            match s {
                TopSpec::Raidz(n, _) => println!("\t  raidz{n}"),
                TopSpec::Draid(d, _) => match d.layout(v.len() as u64, 12) {
                    Ok(l) => println!("\t  {}", l.type_name()),
                    Err(_) => println!("\t  draid{}", d.nparity),
                },
                _ => println!("\t  mirror"),
            }
            for p in v {
                println!("\t    {}", p.display());
            }
        }
        TopSpec::Log(_) => {}
    };
    tops.iter().filter(|t| !t.is_log()).for_each(print);
    if tops.iter().any(TopSpec::is_log) {
        println!("\tlogs");
        tops.iter().filter(|t| t.is_log()).for_each(print);
    }
    if !spares.is_empty() {
        println!("\tspares");
        for p in spares {
            println!("\t  {}", p.display());
        }
    }
}

/// `zpool add [-f] pool vdev ...`: new top-level vdevs.
fn add(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fn", "o")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!(
            "missing pool name or vdev specification\n{USAGE}"
        )));
    }
    let name = &a.pos[0];
    let what = format!("cannot add to '{name}'");
    let (tops, spares) = ozfs_ops::devices::vdev_spec(&a.pos[1..], a.flag('f'), &what)?;
    if a.flag('n') {
        println!(
            "would update '{name}' to add {} vdev(s) and {} spare(s)",
            tops.len(),
            spares.len()
        );
        return Ok(());
    }
    run(Request::Add {
        pool: name.clone(),
        tops,
        spares,
    })
    .map(|_| ())
}

fn destroy(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "f", "")?;
    let Some(name) = a.pos.first() else {
        return Err(Fail::Usage(format!("missing pool argument\n{USAGE}")));
    };
    ozfs_ops::pool::destroy(name)?;
    Ok(())
}

/// `zpool events [-vHf [pool] | -c]`: the daemon's queue of recent events
/// (see `ozfs_ops::events`), one `TIME CLASS` line each, with `-v` every
/// field of the payload as OpenZFS prints an nvlist; `-f` waits for more;
/// `-c` empties the queue. No daemon: no events.
fn events(argv: &[String]) -> CmdResult {
    use ozfs_ops::events::{state, Value};
    use std::io::Write;
    const EUSAGE: &str = "usage:\n\tevents [-vHf [pool] | -c]";
    let a = Args::parse(argv, "vHfc", "")?;
    if a.pos.len() > 1 {
        return Err(Fail::Usage(format!("too many arguments\n{EUSAGE}")));
    }
    let pool = a.pos.first().map(String::as_str);
    if let Some(p) = pool {
        if ozfs_ops::events::check_pool_name(p).is_err() {
            return Err(Fail::Usage(format!("invalid pool name '{p}'\n{EUSAGE}")));
        }
    }
    let (verbose, scripted, follow) = (a.flag('v'), a.flag('H'), a.flag('f'));
    if a.flag('c') {
        if pool.is_some() || verbose || scripted || follow {
            return Err(Fail::Usage(format!(
                "invalid options combined with -c\n{EUSAGE}"
            )));
        }
        println!("cleared {} events", ozfs_ops::events::clear()?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let w = |out: &mut std::io::StdoutLock, s: String| -> CmdResult {
        out.write_all(s.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| Fail::Err(format!("zpool events: {e}")))
    };
    if !scripted {
        w(&mut out, format!("{:<30} CLASS\n", "TIME"))?;
    }
    let mut last = 0;
    loop {
        // Following, a daemon that went away (or is not there yet) is
        // waited for, not an error.
        let batch = match ozfs_ops::events::list(pool, last) {
            Ok(b) => b,
            Err(_) if follow => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for e in batch {
            last = last.max(e.eid);
            let mut s = crate::render::event_date(e.time.0, e.time.1);
            s.push(if scripted { '\t' } else { ' ' });
            s.push_str(&e.class);
            s.push('\n');
            if verbose {
                for (name, v) in &e.payload {
                    let v = match v {
                        Value::Num(n) => format!("0x{n:x}"),
                        Value::Str(t) => format!("\"{t}\""),
                        Value::State(n) => format!("\"{}\" (0x{n:x})", state::name(*n)),
                        Value::Array(a) => a.iter().map(|n| format!("0x{n:x} ")).collect(),
                    };
                    s.push_str(&format!("        {name} = {v}\n"));
                }
                s.push('\n');
            }
            w(&mut out, s)?;
        }
        if !follow {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// `zpool history [-il] [pool]...`: the commands (and with `-i` the
/// internal events) each pool keeps in its history, oldest first, as
/// OpenZFS prints them; `-l` adds who ran each and where.
fn history(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "il", "")?;
    let (internal, long) = (a.flag('i'), a.flag('l'));
    let pools = if a.pos.is_empty() {
        ozfs_ops::host::Record::all()
    } else {
        a.pos.clone()
    };
    if pools.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    let mut failed = false;
    for pool in &pools {
        let recs = match ozfs_ops::history::history(pool) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                failed = true;
                continue;
            }
        };
        let mut out = format!("History for '{pool}':\n");
        for r in &recs {
            out.push_str(&crate::render::history_record(r, internal, long));
        }
        println!("{out}");
    }
    if failed {
        return Err(Fail::Err(String::new()));
    }
    Ok(())
}
