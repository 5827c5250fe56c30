//! `ozfs zfs`: list and get.

use crate::args::Args;
use crate::output::{print_table, Align};
use crate::state::Record;
use crate::zpool::open_imported;
use crate::{CmdResult, Fail};
use ozfs_dsl::{DatasetInfo, DslPool, PropSource, PropValue};

const USAGE: &str = "usage: zfs <command>
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
    let cols: Vec<String> = a
        .opt('o')
        .unwrap_or("name,used,avail,refer,mountpoint")
        .split(',')
        .map(|s| s.trim().to_lowercase())
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
            let props = dsl
                .properties(ds, avail)
                .map_err(|e| Fail::Err(format!("{}: {e}", ds.name)))?;
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
        || NATIVE_NAMES.contains(&p)
}

const NATIVE_NAMES: &[&str] = &[
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
    "sharesmb",
    "refquota",
    "refreservation",
    "primarycache",
    "secondarycache",
    "logbias",
    "dedup",
    "mlslabel",
    "sync",
    "vscan",
    "nbmand",
    "usedbysnapshots",
    "usedbydataset",
    "usedbychildren",
    "usedbyrefreservation",
    "guid",
    "createtxg",
];

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
            if ds.is_snapshot {
                props.push((
                    "defer_destroy".into(),
                    PropValue::Text(if ds.ds.flags & 0x8 != 0 { "on" } else { "off" }.into()),
                    PropSource::None,
                ));
                props.push(("userrefs".into(), PropValue::Num(0), PropSource::None));
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
