//! `ozfs zfs`: list and get.

use crate::args::Args;
use crate::output::{print_table, Align};
use crate::{CmdResult, Fail};
use ozfs_dsl::{DatasetInfo, DslPool, PropSource, PropValue};
use ozfs_ops::dataset::DestroyOpts;
use ozfs_ops::host::{open_imported, Record};
use ozfs_ops::proto::{Progress, Request, Response};

const USAGE: &str = "usage: zfs <command>
	create [-p] [-o property=value] ... <filesystem>
	destroy [-r] <filesystem>
	set <property=value> ... <filesystem> ...
	inherit [-r] <property> <filesystem> ...
	snapshot [-r] <filesystem@snapname> ...
	rollback <snapshot>
	clone [-p] <snapshot> <filesystem>
	rename [-r] <dataset> <new-name>
	promote <clone-filesystem>
	hold [-r] <tag> <snapshot> ...
	release [-r] <tag> <snapshot> ...
	holds [-H] <snapshot> ...
	send [-v] [-i snapshot | -I snapshot] <snapshot>
	receive [-vnFu] <filesystem|snapshot>
	mount
	mount [-a | <filesystem> [mountpoint]]
	unmount [-a | <filesystem|mountpoint>]
	list [-rH] [-p] [-d max] [-o property[,...]] [-t type[,...]] [filesystem|snapshot] ...
	get [-rHp] [-d max] [-o \"all\" | field[,...]] [-t type[,...]] [-s source[,...]]
	    <\"all\" | property[,...]> [filesystem|snapshot] ...";

pub fn main(argv: &[String]) -> CmdResult {
    let Some(cmd) = argv.first() else {
        return Err(Fail::Usage(USAGE.into()));
    };
    let rest = &argv[1..];
    match cmd.as_str() {
        "list" => list(rest),
        "get" => get(rest),
        "create" => create(rest),
        "destroy" => destroy(rest),
        "set" => set(rest),
        "inherit" => inherit(rest),
        "snapshot" | "snap" => snapshot(rest),
        "mount" => mount(rest),
        "unmount" | "umount" => unmount(rest),
        other => Err(Fail::Usage(format!(
            "unrecognized command '{other}'\n{USAGE}"
        ))),
    }
}

struct Types {
    fs: bool,
    snap: bool,
}

fn parse_types(t: Option<&str>, default_snap: bool) -> Result<Types, Fail> {
    let Some(t) = t else {
        return Ok(Types {
            fs: true,
            snap: default_snap,
        });
    };
    let mut r = Types {
        fs: false,
        snap: false,
    };
    for x in t.split(',') {
        match x {
            "all" => {
                r.fs = true;
                r.snap = true;
            }
            "filesystem" | "fs" => r.fs = true,
            "snapshot" | "snap" => r.snap = true,
            "volume" | "vol" | "bookmark" => {}
            other => return Err(Fail::Usage(format!("invalid type '{other}'"))),
        }
    }
    Ok(r)
}

/// Datasets selected by the operands (all pools when none), honouring -r/-d.
fn select(
    a: &Args,
    types: &Types,
    default_recursive: bool,
) -> Result<Vec<(DslPool, Vec<DatasetInfo>)>, Fail> {
    let recursive = a.flag('r') || a.opt('d').is_some();
    let depth: Option<usize> = match a.opt('d') {
        Some(d) => Some(
            d.parse()
                .map_err(|_| Fail::Usage(format!("invalid depth '{d}'")))?,
        ),
        None => None,
    };
    let mut out = Vec::new();
    let operands: Vec<String> = if a.pos.is_empty() {
        Record::all()
    } else {
        a.pos.clone()
    };
    let all_recursive = a.pos.is_empty() && default_recursive;
    for op in operands {
        let pool_name = op.split(['/', '@']).next().unwrap_or("").to_string();
        let (_, pool) = open_imported(&pool_name)
            .map_err(|_| Fail::Err(format!("cannot open '{op}': dataset does not exist")))?;
        let dsl = DslPool::open(pool).map_err(|e| Fail::Err(format!("cannot open '{op}': {e}")))?;
        let start = dsl
            .lookup(&op)
            .map_err(|_| Fail::Err(format!("cannot open '{op}': dataset does not exist")))?;
        let list = if all_recursive || recursive {
            dsl.list(&start, types.snap, depth)
                .map_err(|e| Fail::Err(e.to_string()))?
        } else if start.is_snapshot {
            vec![start]
        } else if types.snap && !types.fs {
            dsl.snapshots(&start)
                .map_err(|e| Fail::Err(e.to_string()))?
        } else {
            vec![start]
        };
        let list = list
            .into_iter()
            .filter(|d| {
                (d.is_snapshot && (types.snap || !a.pos.is_empty() && d.name == a.pos[0]))
                    || (!d.is_snapshot && types.fs)
            })
            .collect();
        out.push((dsl, list));
    }
    Ok(out)
}

fn list(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rHp", "odtsS")?;
    let types = parse_types(a.opt('t'), false)?;
    // `-o space` is ZFS's shorthand for the space columns.
    let cols: Vec<String> = a
        .opt('o')
        .unwrap_or("name,used,avail,refer,mountpoint")
        .split(',')
        .flat_map(|s| match s.trim().to_lowercase().as_str() {
            "space" => "name,avail,used,usedsnap,usedds,usedrefreserv,usedchild"
                .split(',')
                .map(String::from)
                .collect::<Vec<_>>(),
            other => vec![other.to_string()],
        })
        .collect();
    let scripted = a.flag('H');
    let parsable = a.flag('p');
    let sel = select(&a, &types, true)?;
    let mut rows = Vec::new();
    for (dsl, list) in &sel {
        let space = dsl.space().map_err(|e| Fail::Err(e.to_string()))?;
        let avail = dsl
            .available(&space)
            .map_err(|e| Fail::Err(e.to_string()))?;
        for ds in list {
            let mut props = dsl
                .properties(ds, avail)
                .map_err(|e| Fail::Err(format!("{}: {e}", ds.name)))?;
            set_mounted(&mut props, &ds.name);
            let mut row = Vec::new();
            for c in &cols {
                let key = canonical(c);
                let v = match key {
                    "name" => ds.name.clone(),
                    "avail" | "available" if ds.is_snapshot => "-".into(),
                    "mountpoint" if ds.is_snapshot => "-".into(),
                    _ => match props.iter().find(|(n, _, _)| n == key) {
                        Some((_, v, _)) => v.render(parsable),
                        None => {
                            if !known(key) {
                                return Err(Fail::Usage(format!("invalid property '{c}'")));
                            }
                            "-".into()
                        }
                    },
                };
                row.push(v);
            }
            rows.push(row);
        }
    }
    if rows.is_empty() && !scripted {
        println!("no datasets available");
        return Ok(());
    }
    let headers: Vec<(String, Align)> = cols
        .iter()
        .map(|c| {
            let k = canonical(c);
            let h = match k {
                "available" => "AVAIL".to_string(),
                "referenced" => "REFER".to_string(),
                _ => c.to_uppercase(),
            };
            let al = if matches!(
                k,
                "used"
                    | "available"
                    | "referenced"
                    | "quota"
                    | "reservation"
                    | "recordsize"
                    | "refquota"
                    | "refreservation"
                    | "usedbysnapshots"
                    | "usedbydataset"
                    | "usedbychildren"
                    | "usedbyrefreservation"
                    | "compressratio"
                    | "written"
                    | "logicalused"
                    | "logicalreferenced"
            ) {
                Align::Right
            } else {
                Align::Left
            };
            (h, al)
        })
        .collect();
    let h: Vec<(&str, Align)> = headers.iter().map(|(s, al)| (s.as_str(), *al)).collect();
    print_table(&h, &rows, scripted);
    Ok(())
}

fn canonical(c: &str) -> &str {
    match c {
        "avail" => "available",
        "refer" => "referenced",
        "ratio" => "compressratio",
        "compress" => "compression",
        "reserv" => "reservation",
        "refreserv" => "refreservation",
        "recsize" => "recordsize",
        "usedsnap" => "usedbysnapshots",
        "usedds" => "usedbydataset",
        "usedchild" => "usedbychildren",
        "usedrefreserv" => "usedbyrefreservation",
        other => other,
    }
}

fn known(p: &str) -> bool {
    p.contains(':')
        || matches!(
            p,
            "name"
                | "type"
                | "creation"
                | "used"
                | "available"
                | "referenced"
                | "compressratio"
                | "mounted"
                | "origin"
                | "written"
                | "logicalused"
                | "logicalreferenced"
                | "version"
                | "utf8only"
                | "normalization"
                | "casesensitivity"
                | "defer_destroy"
                | "userrefs"
        )
        || GET_ORDER.contains(&p)
}

fn get(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rHp", "odtsS")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(format!("missing property argument\n{USAGE}")));
    }
    let props_arg = a.pos[0].clone();
    let mut rest = a.pos[1..].to_vec();
    let types = parse_types(a.opt('t'), true)?;
    let wanted: Option<Vec<String>> = if props_arg == "all" {
        None
    } else {
        Some(
            props_arg
                .split(',')
                .map(|s| canonical(s.trim()).to_string())
                .collect(),
        )
    };
    if let Some(w) = &wanted {
        for p in w {
            if !known(p) {
                return Err(Fail::Usage(format!(
                    "bad property list: invalid property '{p}'\n{USAGE}"
                )));
            }
        }
    }
    let fields: Vec<String> = a
        .opt('o')
        .unwrap_or("name,property,value,source")
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .collect();
    let sources: Option<Vec<String>> = a.opt('s').map(|s| s.split(',').map(String::from).collect());
    let scripted = a.flag('H');
    let parsable = a.flag('p');
    let mut a2 = Args {
        flags: a.flags.clone(),
        opts: a.opts.clone(),
        pos: Vec::new(),
    };
    a2.pos.append(&mut rest);
    let sel = select(&a2, &types, false)?;
    let mut rows = Vec::new();
    for (dsl, list) in &sel {
        let space = dsl.space().map_err(|e| Fail::Err(e.to_string()))?;
        let avail = dsl
            .available(&space)
            .map_err(|e| Fail::Err(e.to_string()))?;
        for ds in list {
            let mut props = dsl
                .properties(ds, avail)
                .map_err(|e| Fail::Err(format!("{}: {e}", ds.name)))?;
            add_zpl_props(dsl, ds, &mut props);
            set_mounted(&mut props, &ds.name);
            if ds.is_snapshot {
                props.push((
                    "defer_destroy".into(),
                    PropValue::Text(if ds.ds.flags & 0x8 != 0 { "on" } else { "off" }.into()),
                    PropSource::None,
                ));
                let refs = if ds.ds.userrefs_obj != 0 {
                    ozfs_dmu::zap::list_obj(&dsl.mos, ds.ds.userrefs_obj)
                        .map(|v| v.len() as u64)
                        .unwrap_or(0)
                } else {
                    0
                };
                props.push(("userrefs".into(), PropValue::Num(refs), PropSource::None));
            }
            sort_props(&mut props);
            let chosen: Vec<(String, PropValue, PropSource)> = match &wanted {
                None => props,
                Some(w) => w
                    .iter()
                    .map(|name| {
                        props
                            .iter()
                            .find(|(n, _, _)| n == name)
                            .cloned()
                            .unwrap_or((
                                name.clone(),
                                PropValue::Text("-".into()),
                                PropSource::None,
                            ))
                    })
                    .collect(),
            };
            for (name, v, src) in chosen {
                if let Some(s) = &sources {
                    let tag = match src {
                        PropSource::Local => "local",
                        PropSource::Default => "default",
                        PropSource::Inherited(_) => "inherited",
                        PropSource::Received => "received",
                        PropSource::None => "none",
                    };
                    if !s.iter().any(|x| x == tag) {
                        continue;
                    }
                }
                let row: Vec<String> = fields
                    .iter()
                    .map(|f| match f.as_str() {
                        "name" => ds.name.clone(),
                        "property" => name.clone(),
                        "value" => v.render(parsable),
                        "source" => src.as_string(),
                        "received" => "-".into(),
                        _ => "-".into(),
                    })
                    .collect();
                rows.push(row);
            }
        }
    }
    let headers: Vec<(String, Align)> = fields
        .iter()
        .map(|f| (f.to_uppercase(), Align::Left))
        .collect();
    let h: Vec<(&str, Align)> = headers.iter().map(|(s, al)| (s.as_str(), *al)).collect();
    print_table(&h, &rows, scripted);
    Ok(())
}

/// `zfs get all` order (pool-version-23 zfs), OpenZFS-only properties after it.
const GET_ORDER: &[&str] = &[
    "type",
    "creation",
    "used",
    "available",
    "referenced",
    "compressratio",
    "mounted",
    "origin",
    "quota",
    "reservation",
    "recordsize",
    "mountpoint",
    "sharenfs",
    "checksum",
    "compression",
    "atime",
    "devices",
    "exec",
    "setuid",
    "readonly",
    "zoned",
    "snapdir",
    "aclmode",
    "aclinherit",
    "canmount",
    "xattr",
    "copies",
    "version",
    "utf8only",
    "normalization",
    "casesensitivity",
    "vscan",
    "nbmand",
    "sharesmb",
    "refquota",
    "refreservation",
    "primarycache",
    "secondarycache",
    "usedbysnapshots",
    "usedbydataset",
    "usedbychildren",
    "usedbyrefreservation",
    "logbias",
    "dedup",
    "mlslabel",
    "sync",
    "defer_destroy",
    "userrefs",
    "guid",
    "createtxg",
];

fn sort_props(props: &mut [(String, PropValue, PropSource)]) {
    props.sort_by_key(|(n, _, _)| {
        GET_ORDER
            .iter()
            .position(|o| o == n)
            .unwrap_or(GET_ORDER.len())
    });
}

/// version, utf8only, normalization, casesensitivity come from the file system's master node.
fn add_zpl_props(
    dsl: &DslPool,
    ds: &DatasetInfo,
    props: &mut Vec<(String, PropValue, PropSource)>,
) {
    let Ok(os) = dsl.objset(ds) else { return };
    if os.phys.os_type != ozfs_format::objset::OBJSET_TYPE_ZFS {
        return;
    }
    let Ok(master) = ozfs_dmu::zap::list_obj(&os, 1) else {
        return;
    };
    let get = |k: &str| {
        master
            .iter()
            .find(|e| e.name == k.as_bytes())
            .and_then(|e| e.as_u64())
    };
    let pos = props
        .iter()
        .position(|(n, _, _)| n == "copies")
        .map(|p| p + 1)
        .unwrap_or(props.len());
    let mut add = Vec::new();
    if let Some(v) = get("VERSION") {
        add.push(("version".to_string(), PropValue::Num(v), PropSource::None));
    }
    let u = get("utf8only").unwrap_or(0);
    add.push((
        "utf8only".into(),
        PropValue::Text(if u != 0 { "on" } else { "off" }.into()),
        PropSource::None,
    ));
    let n = get("normalization").unwrap_or(0);
    let ns = match n {
        0 => "none",
        0x10 => "formD",
        0x20 => "formKD",
        0x50 => "formC",
        0x60 => "formKC",
        _ => "unknown",
    };
    add.push((
        "normalization".into(),
        PropValue::Text(ns.into()),
        PropSource::None,
    ));
    let c = get("casesensitivity").unwrap_or(0);
    let cs = match c {
        0 => "sensitive",
        1 => "insensitive",
        _ => "mixed",
    };
    add.push((
        "casesensitivity".into(),
        PropValue::Text(cs.into()),
        PropSource::None,
    ));
    for (i, p) in add.into_iter().enumerate() {
        props.insert(pos + i, p);
    }
}

/// Run a request (in the daemon when it holds the pool) and return its result.
pub fn exec(req: Request) -> Result<Response, Fail> {
    Ok(ozfs_ops::proto::execute(req, &Progress::none())?)
}

fn create(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "pu", "oV")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(format!(
            "missing or too many dataset names\n{USAGE}"
        )));
    }
    let name = &a.pos[0];
    if a.opt('V').is_some() {
        return Err(Fail::Err(format!(
            "cannot create '{name}': volumes are not supported yet"
        )));
    }
    let mut props = Vec::new();
    for o in a.opt_all('o') {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| Fail::Usage(format!("bad property '{o}': expected property=value")))?;
        props.push((k.to_string(), v.to_string()));
    }
    exec(Request::Create {
        name: name.clone(),
        parents: a.flag('p'),
        props,
        no_mount: a.flag('u'),
    })?;
    Ok(())
}

fn destroy(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRfnpvd", "")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(format!("missing dataset argument\n{USAGE}")));
    }
    let opts = DestroyOpts {
        recursive: a.flag('r') || a.flag('R'),
        dry_run: a.flag('n'),
        defer: a.flag('d'),
    };
    let Response::Destroyed(plan) = exec(Request::Destroy {
        name: a.pos[0].clone(),
        opts,
    })?
    else {
        return Ok(());
    };
    if a.flag('n') || a.flag('v') {
        for v in plan.all() {
            println!(
                "{}destroy {v}",
                if plan.dry_run { "would " } else { "will " }
            );
        }
    }
    Ok(())
}

fn set(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "u", "")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!(
            "missing property=value or dataset\n{USAGE}"
        )));
    }
    let (assigns, datasets): (Vec<&String>, Vec<&String>) =
        a.pos.iter().partition(|s| s.contains('='));
    if assigns.is_empty() || datasets.is_empty() {
        return Err(Fail::Usage(format!(
            "missing property=value or dataset\n{USAGE}"
        )));
    }
    let assigns: Vec<(String, String)> = assigns
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    // One request per pool (each pool has its own writer).
    for ds in datasets {
        exec(Request::Set {
            assigns: assigns.clone(),
            datasets: vec![ds.clone()],
        })?;
    }
    Ok(())
}

fn inherit(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rS", "")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!("missing property or dataset\n{USAGE}")));
    }
    let prop = &a.pos[0];
    if !known(prop) {
        return Err(Fail::Usage(format!("invalid property '{prop}'")));
    }
    for ds in &a.pos[1..] {
        exec(Request::Inherit {
            prop: prop.clone(),
            recursive: a.flag('r'),
            datasets: vec![ds.clone()],
        })?;
    }
    Ok(())
}

fn snapshot(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "r", "o")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(format!("missing snapshot argument\n{USAGE}")));
    }
    for full in &a.pos {
        if !full.contains('@') {
            return Err(Fail::Usage(format!(
                "'{full}' is not a snapshot name (expected filesystem@snapname)"
            )));
        }
        exec(Request::Snapshot {
            names: vec![full.clone()],
            recursive: a.flag('r'),
        })?;
    }
    Ok(())
}

/// Datasets the daemon has mounted, with their mountpoints (empty without a daemon).
fn daemon_mounts() -> Vec<(String, String)> {
    static CACHE: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(|| {
            let Some(Ok(r)) = ozfs_ops::client::call(&serde_json::json!({"cmd": "list_mounts"}))
            else {
                return Vec::new();
            };
            r.v["mounts"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|m| {
                            Some((m[0].as_str()?.to_string(), m[1].as_str()?.to_string()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .clone()
}

/// `mounted` is `yes` for what the daemon serves.
fn set_mounted(props: &mut [(String, PropValue, PropSource)], name: &str) {
    if let Some(p) = props.iter_mut().find(|(n, _, _)| n == "mounted") {
        if daemon_mounts().iter().any(|(d, _)| d == name) {
            p.1 = PropValue::Text("yes".into());
        }
    }
}

/// A directory argument made absolute (the daemon has its own cwd).
fn absolute(p: &str) -> String {
    std::path::absolute(p)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| p.to_string())
}

/// `zfs mount`: list the daemon's mounts; `zfs mount -a`: mount every
/// file system with canmount=on and a mountpoint; `zfs mount FS [DIR]`:
/// mount one (at its `mountpoint`, or DIR). The daemon is started if needed.
fn mount(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "avOlf", "o")?;
    if a.flag('a') {
        if !a.pos.is_empty() {
            return Err(Fail::Usage(format!("too many arguments\n{USAGE}")));
        }
        ozfs_ops::client::call_starting(&serde_json::json!({"cmd": "mount_all"}))?.check()?;
        return Ok(());
    }
    match a.pos.len() {
        0 => {
            for (ds, mp) in daemon_mounts() {
                println!("{ds:<30}  {mp}");
            }
            Ok(())
        }
        1 | 2 => {
            let ds = &a.pos[0];
            let mut req = serde_json::json!({"cmd": "mount", "dataset": ds});
            if let Some(d) = a.pos.get(1) {
                req["dir"] = serde_json::Value::String(absolute(d));
            }
            ozfs_ops::client::call_starting(&req)?.check()?;
            Ok(())
        }
        _ => Err(Fail::Usage(format!("too many arguments\n{USAGE}"))),
    }
}

/// `zfs unmount [-a] FS|DIR`: sync, then unmount (through the daemon).
fn unmount(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "afu", "")?;
    let req = if a.flag('a') {
        serde_json::json!({"cmd": "unmount_all"})
    } else {
        let [t] = a.pos.as_slice() else {
            return Err(Fail::Usage(format!(
                "missing or too many arguments\n{USAGE}"
            )));
        };
        let t = if t.starts_with('/') || t.starts_with('.') || std::path::Path::new(t).is_dir() {
            absolute(t)
        } else {
            t.clone()
        };
        serde_json::json!({"cmd": "unmount", "target": t})
    };
    match ozfs_ops::client::call(&req) {
        Some(r) => {
            r?.check()?;
            Ok(())
        }
        None if a.flag('a') => Ok(()),
        None => Err(Fail::Err(format!(
            "cannot unmount '{}': not currently mounted",
            a.pos[0]
        ))),
    }
}
