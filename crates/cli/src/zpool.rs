//! `ozfs zpool`: import, export, list, status.

use crate::args::Args;
use crate::output::{print_table, Align};
use crate::{CmdResult, Fail};
use ozfs_dsl::props::nicenum;
use ozfs_dsl::DslPool;
use ozfs_format::Error;
use ozfs_ops::host::Record;
use ozfs_ops::proto::{Request, Response};
use ozfs_ops::scan::ScrubAction;
use ozfs_spa::import::{discover, FoundPool};
use ozfs_spa::{Pool, PoolOptions};
use ozfs_vdev::{Vdev, VdevKind, VdevState};
use std::path::PathBuf;
use std::sync::Arc;

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
	remove <pool> <spare-device> ...";

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

use ozfs_ops::host::open_imported;

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
    let dirs = search_dirs(&a);
    let pools = discover(&dirs).map_err(|e| Fail::Err(e.to_string()))?;
    if a.pos.is_empty() {
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
    let want = &a.pos[0];
    let matches: Vec<FoundPool> = pools
        .into_iter()
        .filter(|p| &p.name == want || p.guid.to_string() == *want)
        .collect();
    if matches.is_empty() {
        return Err(Fail::Err(format!(
            "cannot import '{want}': no such pool available"
        )));
    }
    if matches.len() > 1 {
        return Err(Fail::Err(format!(
            "cannot import '{want}': more than one matching pool; import by numeric ID instead"
        )));
    }
    let Some(found) = matches.into_iter().next() else {
        return Err(Fail::Err("no pool".into()));
    };
    let name = match a.pos.get(1) {
        Some(new) => {
            ozfs_format::names::check_new_pool_name(new)
                .map_err(|why| Fail::Err(format!("cannot import '{want}' as '{new}': {why}")))?;
            new.clone()
        }
        None => {
            // The name in the labels is the pool's author's: checked like a
            // typed one before it names a state file or a mountpoint.
            ozfs_format::names::check_pool_name(&found.name).map_err(|why| {
                Fail::Err(format!(
                    "cannot import pool {}: its labels name it {:?}, which is not a valid pool name ({why}); \
                     import it under a new name: zpool import {} NEWNAME",
                    found.guid,
                    found.name,
                    found.guid
                ))
            })?;
            found.name.clone()
        }
    };
    if Record::load(&name).is_ok() {
        return Err(Fail::Err(format!(
            "cannot import '{want}': a pool with that name is already imported"
        )));
    }
    let guid = found.guid;
    let mut devices: Vec<String> = found
        .paths()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let found = if readonly {
        found
    } else {
        // Reopen the devices (and the spare candidates) for writing.
        let mut paths = found.paths();
        paths.extend(found.aux.iter().map(|d| d.path.clone()));
        ozfs_spa::import::discover_paths_mode(&paths, true)
            .into_iter()
            .find(|p| p.guid == guid)
            .ok_or_else(|| {
                Fail::Err(format!(
                    "cannot import '{want}': devices cannot be opened for writing"
                ))
            })?
    };
    let pool = Pool::open(
        found,
        &PoolOptions {
            readonly,
            max_txg: None,
        },
    )
    .map_err(|e| Fail::Err(format!("cannot import '{want}': {e}")))?;
    let pool = Arc::new(pool);
    if !readonly {
        // A degraded pool is written where its redundancy allows (missing
        // and offline leaves are skipped); an unavailable one is not.
        if !matches!(pool.state(), VdevState::Online | VdevState::Degraded) {
            return Err(Fail::Err(format!(
                "cannot import '{want}' read-write: the pool is {}; use -o readonly=on",
                pool.state().as_str()
            )));
        }
        // Mark it active in its labels, as an import does.
        let mut w = ozfs_dsl::sync::PoolWriter::open(pool.clone())
            .map_err(|e| Fail::Err(format!("cannot import '{want}': {e}")))?;
        w.config_dirty = true;
        w.state = ozfs_spa::label_write::POOL_STATE_ACTIVE;
        w.sync()
            .map_err(|e| Fail::Err(format!("cannot import '{want}': {e}")))?;
    }
    // Make sure the dataset layer opens too before declaring success.
    DslPool::open(pool.clone())
        .and_then(|d| d.root())
        .map_err(|e| Fail::Err(format!("cannot import '{want}': {e}")))?;
    // Available spares found among the devices are the pool's too.
    for s in pool.spares() {
        if s.dev.is_some() && !devices.contains(&s.path) {
            devices.push(s.path);
        }
    }
    let rec = Record {
        name,
        guid,
        devices,
        readonly,
        errors: Vec::new(),
        resilvering: ozfs_ops::host::resilvering_of(guid).0,
        offline: ozfs_ops::host::resilvering_of(guid).1,
    };
    rec.save()
        .map_err(|e| Fail::Err(format!("cannot import '{want}': {e}")))?;
    if !readonly && !a.flag('N') {
        // The daemon takes the pool and mounts its file systems.
        let name = rec.name.clone();
        ozfs_ops::client::call_starting(&serde_json::json!({"cmd": "import", "pool": name}))
            .map_err(|e| Fail::Err(format!("cannot mount the file systems of '{name}': {e}")))?
            .check()?;
        return Ok(());
    }
    Ok(())
}

fn print_importable(p: FoundPool) {
    let name = p.name.clone();
    let guid = p.guid;
    match ozfs_format::names::check_pool_name(&name) {
        Ok(()) => println!("   pool: {name}"),
        // Printed escaped: a hostile name must not drive the terminal either.
        Err(why) => {
            println!("   pool: {name:?} (invalid name: {why}; import by id under a new name)")
        }
    }
    println!("     id: {guid}");
    match Pool::open(
        p,
        &PoolOptions {
            readonly: true,
            max_txg: None,
        },
    ) {
        Ok(pool) => {
            let pool = Arc::new(pool);
            let st = pool.state();
            println!("  state: {}", st.as_str());
            match st {
                VdevState::Online => println!(
                    " action: The pool can be imported using its name or numeric identifier."
                ),
                _ => {
                    println!(" status: One or more devices are missing from the system.");
                    println!(" action: The pool can be imported despite missing or damaged devices.  The\n\tfault tolerance of the pool may be compromised if imported.");
                }
            }
            println!(" config:\n");
            print_tree(&pool.root, &name, false, &spare_lines(&pool));
        }
        Err(e) => {
            println!("  state: UNAVAIL");
            println!(" status: {e}");
            println!(" action: The pool cannot be imported. Attach the missing\n\tdevices and try again.");
        }
    }
}

fn tree_width(v: &Vdev, depth: usize, w: &mut usize) {
    *w = (*w).max(v.display_name().len() + depth);
    for c in &v.children {
        tree_width(c, depth + 2, w);
    }
}

/// The spares of a pool as `zpool status` lists them: (name, state and note).
fn spare_lines(pool: &Arc<Pool>) -> Vec<(String, String)> {
    if pool.spares_unloaded() {
        // Opening the DSL reads the MOS list.
        let _ = ozfs_dsl::DslPool::open(pool.clone());
    }
    pool.spares()
        .iter()
        .map(|s| {
            let st = pool.spare_state(s);
            let note = match st {
                ozfs_spa::spares::SpareState::InUse => "     currently in use",
                ozfs_spa::spares::SpareState::Unavail => "   cannot open",
                ozfs_spa::spares::SpareState::Avail => "",
            };
            (s.path.clone(), format!("{}{note}", st.as_str()))
        })
        .collect()
}

/// Print the vdev tree as `zpool status`/`import` do, then the spares.
pub fn print_tree(root: &Vdev, pool_name: &str, counters: bool, spares: &[(String, String)]) {
    let mut w = pool_name.len().max(10);
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
    fn line(v: &Vdev, name: &str, depth: usize, w: usize, counters: bool) {
        let st = v.state().as_str();
        if counters {
            let (r, wr, c) = sum_stats(v);
            let note = if matches!(v.kind, VdevKind::Leaf(_))
                && v.stats
                    .resilvering
                    .load(std::sync::atomic::Ordering::Relaxed)
            {
                "  (resilvering)"
            } else {
                ""
            };
            println!(
                "\t{:depth$}{:<width$}  {:<8} {:>5} {:>5} {:>5}{note}",
                "",
                name,
                st,
                r,
                wr,
                c,
                width = w - depth
            );
        } else {
            println!("\t{:depth$}{:<width$}  {}", "", name, st, width = w - depth);
        }
        for c in &v.children {
            line(c, &c.display_name(), depth + 2, w, counters);
        }
    }
    line(root, pool_name, 0, w, counters);
    if !spares.is_empty() {
        println!("\tspares");
        for (n, st) in spares {
            println!("\t  {:<width$}  {st}", n, width = w - 2);
        }
    }
}

/// Counters of a vdev: its own (interior vdevs are charged when no child could be blamed).
fn sum_stats(v: &Vdev) -> (u64, u64, u64) {
    v.stats.get()
}

fn export(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fa", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(format!("missing pool argument\n{USAGE}")));
    }
    for p in &a.pos {
        if ozfs_ops::client::daemon_holds(p) {
            // The daemon unmounts, syncs and exports it.
            ozfs_ops::client::call_starting(&serde_json::json!({"cmd": "export", "pool": p}))?
                .check()?;
            continue;
        }
        let rec =
            Record::load(p).map_err(|_| Fail::Err(format!("cannot open '{p}': no such pool")))?;
        if !rec.readonly {
            ozfs_ops::host::lock_pool(p)
                .map_err(|e| Fail::Err(format!("cannot export '{p}': {e}")))?;
            let pool = rec
                .open_rw()
                .map_err(|e| Fail::Err(format!("cannot export '{p}': {e}")))?;
            let mut w = ozfs_dsl::sync::PoolWriter::open(pool)
                .map_err(|e| Fail::Err(format!("cannot export '{p}': {e}")))?;
            w.export()
                .map_err(|e| Fail::Err(format!("cannot export '{p}': {e}")))?;
        }
        Record::remove(p).map_err(|_| Fail::Err(format!("cannot open '{p}': no such pool")))?;
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
    let a = Args::parse(argv, "HpPLgv", "oT")?;
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
            && !["capacity", "allocated", "guid", "version"].contains(&c.as_str())
        {
            return Err(Fail::Usage(format!("invalid property '{c}'")));
        }
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for name in pools_from_args(&a) {
        let (_, pool) = match open_imported(&name) {
            Ok(x) => x,
            Err(m) => {
                eprintln!("{m}");
                failed = true;
                continue;
            }
        };
        let dsl = DslPool::open(pool.clone())
            .map_err(|e| Fail::Err(format!("cannot open '{name}': {e}")))?;
        let sp = dsl
            .space()
            .map_err(|e| Fail::Err(format!("cannot open '{name}': {e}")))?;
        let bytes = |n: u64| if parsable { n.to_string() } else { nicenum(n) };
        let free = sp.size.saturating_sub(sp.alloc);
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
                "frag" => "-".into(),
                "cap" | "capacity" => {
                    if parsable {
                        cap.to_string()
                    } else {
                        format!("{cap}%")
                    }
                }
                "dedup" => {
                    if parsable {
                        "1.00".into()
                    } else {
                        "1.00x".into()
                    }
                }
                "health" => pool.state().as_str().into(),
                "guid" => pool.guid.to_string(),
                "version" => pool
                    .config
                    .get_u64("version")
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
                c.to_uppercase(),
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
    let a = Args::parse(argv, "vxDgLPpei", "T")?;
    let names = pools_from_args(&a);
    if names.is_empty() {
        println!("no pools available");
        return Ok(());
    }
    let mut first = true;
    let mut failed = false;
    for name in names {
        let (_, pool) = match open_imported(&name) {
            Ok(x) => x,
            Err(m) => {
                eprintln!("{m}");
                failed = true;
                continue;
            }
        };
        // The daemon's live view of the devices, when it holds the pool.
        ozfs_ops::client::apply_vdev_state(&name, &pool.root);
        let st = pool.state();
        let mut errs = 0;
        pool.root.walk(0, &mut |v, _| {
            let (r, w, c) = v.stats.get();
            errs += r + w + c;
        });
        if a.flag('x') && st == VdevState::Online && errs == 0 {
            continue;
        }
        if !first {
            println!();
        }
        first = false;
        println!("  pool: {name}");
        println!(" state: {}", st.as_str());
        if st == VdevState::Degraded {
            println!("status: One or more devices could not be opened.  Sufficient replicas exist for\n\tthe pool to continue functioning in a degraded state.");
            println!("action: Attach the missing device and online it using 'zpool online'.");
        } else if errs > 0 {
            println!("status: One or more devices has experienced an unrecoverable error.  An\n\tattempt was made to correct the error.  Applications are unaffected.");
            println!("action: Determine if the device needs to be replaced, and clear the errors\n\tusing 'zpool clear' or replace the device with 'zpool replace'.");
        }
        println!("{}", crate::render::status_lines(&name));
        println!("config:\n");
        print_tree(&pool.root, &name, true, &spare_lines(&pool));
        println!();
        println!("{}", crate::render::error_lines(&name, a.flag('v')));
    }
    if first && a.flag('x') && !failed {
        println!("all pools are healthy");
    }
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
    let r = ozfs_ops::proto::execute(req, &hooks);
    crate::render::end_progress();
    Ok(r?)
}

/// `zpool scrub [-s | -p] [-w] pool ...`
fn scrub(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "spwe", "")?;
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
    if a.pos.len() < 2 {
        return Err(Fail::Usage(
            "usage:\n\tremove [-npsw] <pool> <device> ...".into(),
        ));
    }
    run(Request::Remove {
        pool: a.pos[0].clone(),
        devices: a.pos[1..].to_vec(),
    })
    .map(|_| ())
}

#[allow(dead_code)]
fn leaf_paths(v: &Vdev) -> Vec<String> {
    v.leaves()
        .into_iter()
        .filter(|l| matches!(l.kind, VdevKind::Leaf(Some(_))))
        .filter_map(|l| l.path.clone())
        .collect()
}

#[allow(dead_code)]
fn _e(e: Error) -> Fail {
    Fail::Err(e.to_string())
}

fn create(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "fnd", "oOmR")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!("missing pool name or vdevs\n{USAGE}")));
    }
    let name = a.pos[0].clone();
    if let Err(why) = ozfs_format::names::check_new_pool_name(&name) {
        return Err(Fail::Err(format!("cannot create '{name}': {why}")));
    }
    let mut o = ozfs_ops::pool::CreateOpts::default();
    for opt in a.opt_all('o') {
        match opt.split_once('=') {
            Some(("version", v)) => {
                o.version = v
                    .parse()
                    .map_err(|_| Fail::Usage(format!("invalid version '{v}'")))?
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
    let (tops, spares) =
        parse_vdev_spec(&a.pos[1..], a.flag('f'), &format!("cannot create '{name}'"))?;
    o.spares = spares;
    ozfs_ops::pool::create(&name, &tops, &o)?;
    Ok(())
}

/// The device paths of a (canonicalized) specification.
fn spec_devices(tops: &[ozfs_dsl::create::TopSpec]) -> Vec<String> {
    use ozfs_dsl::create::TopSpec;
    let mut v = Vec::new();
    for t in tops {
        match t {
            TopSpec::Disk(p) => v.push(p.display().to_string()),
            TopSpec::Mirror(d) | TopSpec::Raidz(_, d) => {
                v.extend(d.iter().map(|p| p.display().to_string()))
            }
        }
    }
    v
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
    let (tops, spares) = parse_vdev_spec(&a.pos[1..], a.flag('f'), &what)?;
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

/// A vdev specification (`mirror A B raidz2 C D E F G spare H`...) as
/// top-level vdevs and hot spares; devices that belong to a pool are
/// refused unless `force`.
fn parse_vdev_spec(
    words: &[String],
    force: bool,
    what: &str,
) -> Result<(Vec<ozfs_dsl::create::TopSpec>, Vec<std::path::PathBuf>), Fail> {
    use ozfs_dsl::create::TopSpec;
    let mut tops = Vec::new();
    let mut spares = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let group = match w {
            "mirror" => Some(0usize),
            "raidz" | "raidz1" => Some(1),
            "raidz2" => Some(2),
            "raidz3" => Some(3),
            "spare" => {
                i += 1;
                let start = i;
                while i < words.len()
                    && ![
                        "mirror", "raidz", "raidz1", "raidz2", "raidz3", "spare", "log", "cache",
                    ]
                    .contains(&words[i].as_str())
                {
                    spares.push(std::path::PathBuf::from(&words[i]));
                    i += 1;
                }
                if i == start {
                    return Err(Fail::Err(
                        "invalid vdev specification: spare requires at least 1 device".into(),
                    ));
                }
                continue;
            }
            "log" | "cache" => {
                return Err(Fail::Err(format!(
                    "{what}: '{w}' vdevs are not supported yet"
                )))
            }
            _ => None,
        };
        match group {
            Some(p) => {
                let mut devs = Vec::new();
                i += 1;
                while i < words.len()
                    && ![
                        "mirror", "raidz", "raidz1", "raidz2", "raidz3", "spare", "log", "cache",
                    ]
                    .contains(&words[i].as_str())
                {
                    devs.push(std::path::PathBuf::from(&words[i]));
                    i += 1;
                }
                if devs.len() < 2 || (p > 0 && devs.len() <= p) {
                    return Err(Fail::Err(format!(
                        "invalid vdev specification: {w} requires at least {} devices",
                        if p == 0 { 2 } else { p + 1 }
                    )));
                }
                tops.push(if p == 0 {
                    TopSpec::Mirror(devs)
                } else {
                    TopSpec::Raidz(p, devs)
                });
            }
            None => {
                tops.push(TopSpec::Disk(std::path::PathBuf::from(w)));
                i += 1;
            }
        }
    }
    let mut all: Vec<std::path::PathBuf> = spares.clone();
    for t in &tops {
        match t {
            TopSpec::Disk(p) => all.push(p.clone()),
            TopSpec::Mirror(v) | TopSpec::Raidz(_, v) => all.extend(v.iter().cloned()),
        }
    }
    for p in &all {
        let abs = std::fs::canonicalize(p)
            .map_err(|e| Fail::Err(format!("cannot open '{}': {e}", p.display())))?;
        if !force {
            // Refuse devices that belong to a pool unless forced.
            if let Some(fp) = ozfs_spa::import::discover_paths(std::slice::from_ref(&abs))
                .into_iter()
                .next()
            {
                if fp.state != ozfs_spa::label_write::POOL_STATE_DESTROYED {
                    return Err(Fail::Err(format!("invalid vdev specification\nuse '-f' to override the following errors:\n{} is part of exported or potentially active pool '{}'", abs.display(), fp.name)));
                }
            }
        }
    }
    let canon = |p: &std::path::PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    let tops: Vec<TopSpec> = tops
        .into_iter()
        .map(|t| match t {
            TopSpec::Disk(p) => TopSpec::Disk(canon(&p)),
            TopSpec::Mirror(v) => TopSpec::Mirror(v.iter().map(canon).collect()),
            TopSpec::Raidz(n, v) => TopSpec::Raidz(n, v.iter().map(canon).collect()),
        })
        .collect();
    let spares: Vec<std::path::PathBuf> = spares.iter().map(canon).collect();
    let mut seen = std::collections::HashSet::new();
    for p in spec_devices(&tops)
        .into_iter()
        .chain(spares.iter().map(|p| p.display().to_string()))
    {
        if !seen.insert(p.clone()) {
            return Err(Fail::Err(format!(
                "{what}: {p} is used more than once in the specification"
            )));
        }
    }
    Ok((tops, spares))
}

fn destroy(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "f", "")?;
    let Some(name) = a.pos.first() else {
        return Err(Fail::Usage(format!("missing pool argument\n{USAGE}")));
    };
    let rec =
        Record::load(name).map_err(|_| Fail::Err(format!("cannot open '{name}': no such pool")))?;
    if ozfs_ops::client::daemon_holds(name) {
        // The daemon unmounts and syncs it, then lets go of it.
        ozfs_ops::client::call_starting(
            &serde_json::json!({"cmd": "export", "pool": name, "release": true}),
        )
        .and_then(|r| r.check())
        .map(|_| ())
        .map_err(|e| match Fail::from(e) {
            Fail::Err(m) => Fail::Err(m.replace("cannot export", "cannot destroy")),
            other => other,
        })?;
    }
    if !rec.readonly {
        ozfs_ops::host::lock_pool(name)
            .map_err(|e| Fail::Err(format!("cannot destroy '{name}': {e}")))?;
        let pool = rec
            .open_rw()
            .map_err(|e| Fail::Err(format!("cannot destroy '{name}': {e}")))?;
        let mut w = ozfs_dsl::sync::PoolWriter::open(pool)
            .map_err(|e| Fail::Err(format!("cannot destroy '{name}': {e}")))?;
        w.sync()
            .map_err(|e| Fail::Err(format!("cannot destroy '{name}': {e}")))?;
        w.state = ozfs_spa::label_write::POOL_STATE_DESTROYED;
        w.config_dirty = true;
        w.sync()
            .map_err(|e| Fail::Err(format!("cannot destroy '{name}': {e}")))?;
    }
    Record::remove(name).map_err(|e| Fail::Err(e.to_string()))?;
    ozfs_ops::scan::ScanState::remove(name);
    Ok(())
}
