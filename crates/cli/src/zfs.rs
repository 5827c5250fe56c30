//! `ozfs zfs`: the dataset commands (list, get, create, destroy, set,
//! snapshots, send/receive, userspace...), parsed here and rendered from
//! what the operations layer returns.

use crate::args::Args;
use crate::output::{print_table, Align};
use crate::{CmdResult, Fail};
use ozfs_ops::dataset::DestroyOpts;
use ozfs_ops::proto::{Progress, Request, Response};
use ozfs_ops::query::{self, PropSource, PropValue, Selection, Types};

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
	diff [-FHth] <snapshot> [snapshot|filesystem]
	send [-vRLec] [-i snapshot | -I snapshot] <snapshot>
	receive [-vnFu] <filesystem|snapshot>
	userspace [-Hinp] [-o field[,...]] [-s field] ... [-S field] ... [-t type[,...]] <filesystem|snapshot>
	groupspace [-Hinp] [-o field[,...]] [-s field] ... [-S field] ... [-t type[,...]] <filesystem|snapshot>
	projectspace [-Hp] [-o field[,...]] [-s field] ... [-S field] ... <filesystem|snapshot>
	mount
	mount [-a | <filesystem> [mountpoint]]
	unmount [-a | <filesystem|mountpoint>]
	list [-rH] [-p] [-d max] [-o property[,...]] [-t type[,...]] [filesystem|snapshot] ...
	get [-rHp] [-d max] [-o \"all\" | field[,...]] [-t type[,...]] [-s source[,...]]
	    <\"all\" | property[,...]> [filesystem|snapshot] ...
	load-key [-rn] [-L <keylocation>] <-a | filesystem|volume>
	unload-key [-r] <-a | filesystem|volume>
	change-key [-l] [-o keyformat=<value>]
	    [-o keylocation=<value>] [-o pbkdf2iters=<value>]
	    <filesystem|volume>
	change-key -i [-l] <filesystem|volume>";

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
        "diff" => diff(rest),
        "version" => {
            println!("ozfs-{}", env!("CARGO_PKG_VERSION"));
            println!("zfs-kmod-none (ozfs runs in user space)");
            Ok(())
        }
        "share" | "unshare" => Err(Fail::Err(format!(
            "zfs {cmd}: not supported yet (ozfs does not drive the host's NFS or SMB server)"
        ))),
        "jail" | "unjail" | "zone" | "unzone" => Err(Fail::Err(format!(
            "zfs {cmd}: has no meaning for ozfs (a user-space file system is not attached to a jail or namespace by ZFS)"
        ))),
        "upgrade" => upgrade(rest),
        "load-key" => load_key(rest),
        "unload-key" => unload_key(rest),
        "change-key" => change_key(rest),
        "userspace" | "groupspace" | "projectspace" => userspace(cmd, rest),
        "project" | "bookmark" | "allow" | "unallow" | "redact" | "wait" => Err(Fail::Err(format!("zfs {cmd}: not supported yet"))),
        other => Err(Fail::Usage(format!(
            "unrecognized command '{other}'\n{USAGE}"
        ))),
    }
}

const LOAD_KEY_USAGE: &str = "usage:\n\tload-key [-rn] [-L <keylocation>] <-a | filesystem|volume>";

/// `zfs load-key [-rn] [-L keylocation] -a | DATASET`: read each
/// encryption root's key from its `keylocation` (or `-L`) and prove it.
/// `-n` only proves it; without `-n` a proven key is reported as not kept
/// when no ozfs process holds the pool. `-r`/`-a` count what was proven.
fn load_key(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rna", "L")?;
    let all = a.flag('a');
    if all == (a.pos.len() == 1) || a.pos.len() > 1 {
        return Err(Fail::Usage(LOAD_KEY_USAGE.into()));
    }
    let many = all || a.flag('r');
    if many && a.opt('L').is_some_and(|l| l == "prompt") {
        return Err(Fail::Usage(
            "cannot use 'prompt' keylocation with -a or -r".into(),
        ));
    }
    let roots = if many {
        ozfs_ops::crypt::encryption_roots(a.pos.first().map(String::as_str), true)?
    } else {
        vec![a.pos[0].clone()]
    };
    let mut ok = 0;
    let mut failed = false;
    for r in &roots {
        let req = ozfs_ops::proto::Request::LoadKey {
            dataset: r.clone(),
            location: a.opt('L').map(str::to_string),
            dry_run: a.flag('n'),
        };
        match ozfs_ops::proto::execute(req, &ozfs_ops::proto::Progress::none()).map(|_| ()) {
            Ok(()) => ok += 1,
            Err(e) => {
                eprintln!("{e}");
                failed = true;
            }
        }
    }
    if many {
        let what = if a.flag('n') { "verified" } else { "loaded" };
        println!("{ok} / {} key(s) successfully {what}", roots.len());
    }
    if failed {
        Err(Fail::Err(String::new()))
    } else {
        Ok(())
    }
}

/// `zfs change-key [-l] [-i] [-o keyformat=|keylocation=|pbkdf2iters=] FS`.
fn change_key(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "li", "o")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(
            "usage:\n\tchange-key [-l] [-o keyformat=<value>]\n\t    [-o keylocation=<value>] [-o pbkdf2iters=<value>]\n\t    <filesystem|volume>\n\tchange-key -i [-l] <filesystem|volume>".into(),
        ));
    }
    let mut props = Vec::new();
    for o in a.opt_all('o') {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| Fail::Usage(format!("bad property '{o}': expected property=value")))?;
        if !matches!(k, "keyformat" | "keylocation" | "pbkdf2iters") {
            return Err(Fail::Err(format!(
                "cannot change key of '{}': invalid property '{k}' (keyformat, keylocation and pbkdf2iters only)",
                a.pos[0]
            )));
        }
        props.push((k.to_string(), v.to_string()));
    }
    if a.flag('i') && !props.is_empty() {
        return Err(Fail::Usage(
            "-i cannot be used with other properties".into(),
        ));
    }
    exec(Request::ChangeKey {
        dataset: a.pos[0].clone(),
        load: a.flag('l'),
        inherit: a.flag('i'),
        props,
    })?;
    Ok(())
}

/// `zfs unload-key [-r] -a | DATASET`.
fn unload_key(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "ra", "")?;
    let all = a.flag('a');
    if all == (a.pos.len() == 1) || a.pos.len() > 1 {
        return Err(Fail::Usage(
            "usage:\n\tunload-key [-r] <-a | filesystem|volume>".into(),
        ));
    }
    let roots = if all || a.flag('r') {
        ozfs_ops::crypt::encryption_roots(a.pos.first().map(String::as_str), true)?
    } else {
        vec![a.pos[0].clone()]
    };
    let mut failed = false;
    for r in &roots {
        let req = ozfs_ops::proto::Request::UnloadKey { dataset: r.clone() };
        if let Err(e) = ozfs_ops::proto::execute(req, &ozfs_ops::proto::Progress::none()) {
            eprintln!("{e}");
            failed = true;
        }
    }
    if failed {
        Err(Fail::Err(String::new()))
    } else {
        Ok(())
    }
}

const DIFF_USAGE: &str = "usage:\n\tdiff [-FHth] <snapshot> [snapshot|filesystem]";

/// `zfs diff [-FHth] snapshot [snapshot|filesystem]`.
fn diff(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "FHth", "")?;
    let usage = |m: &str| Fail::Usage(format!("{m}{DIFF_USAGE}"));
    let (from, to) = match a.pos.as_slice() {
        [] => return Err(usage("must provide at least one snapshot name\n")),
        [f] if f.starts_with('@') => return Err(usage("")),
        [f] => (f.as_str(), None),
        [f, t] => (f.as_str(), Some(t.as_str())),
        _ => return Err(usage("too many arguments\n")),
    };
    let d = ozfs_ops::diff::diff(from, to)?;
    let style = crate::render::DiffStyle {
        file_type: a.flag('F'),
        scripted: a.flag('H'),
        ctime: a.flag('t'),
        raw: a.flag('h'),
    };
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for c in &d.changes {
        out.write_all(&crate::render::diff_line(&d.mountpoint, c, &style))
            .map_err(|e| Fail::Err(format!("zfs diff: {e}")))?;
    }
    out.flush().map_err(|e| Fail::Err(format!("zfs diff: {e}")))
}

fn parse_types(t: Option<&str>, default_snap: bool) -> Result<Types, Fail> {
    let Some(t) = t else {
        return Ok(Types {
            fs: true,
            snap: default_snap,
            vol: true,
        });
    };
    let mut r = Types {
        fs: false,
        snap: false,
        vol: false,
    };
    for x in t.split(',') {
        match x {
            "all" => {
                r.fs = true;
                r.snap = true;
                r.vol = true;
            }
            "filesystem" | "fs" => r.fs = true,
            "snapshot" | "snap" => r.snap = true,
            "volume" | "vol" => r.vol = true,
            "bookmark" => {}
            other => return Err(Fail::Usage(format!("invalid type '{other}'"))),
        }
    }
    Ok(r)
}

/// The selection the operands and -r/-d/-t make.
fn selection(
    a: &Args,
    types: &Types,
    operands: Vec<String>,
    all_recursive: bool,
) -> Result<Selection, Fail> {
    let depth: Option<usize> = match a.opt('d') {
        Some(d) => Some(
            d.parse()
                .map_err(|_| Fail::Usage(format!("invalid depth '{d}'")))?,
        ),
        None => None,
    };
    Ok(Selection {
        operands,
        types: *types,
        recursive: a.flag('r'),
        depth,
        all_recursive,
    })
}

fn list(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rHpj", "odtsS")?;
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
    let sel = selection(&a, &types, a.pos.clone(), true)?;
    let mut listed = query::datasets(&sel, false)?;
    sort_listed(&a, &mut listed)?;
    if a.flag('j') {
        for c in &cols {
            let k = canonical(c);
            if k != "name" && !known(k) {
                return Err(Fail::Usage(format!("invalid property '{c}'")));
            }
        }
        let wanted: Vec<&str> = cols
            .iter()
            .map(|c| canonical(c))
            .filter(|k| *k != "name")
            .collect();
        println!("{}", json_datasets("zfs list", &listed, &wanted, parsable));
        return Ok(());
    }
    let mut rows = Vec::new();
    for l in listed {
        {
            let (ds, props) = (&l.info, &l.props);
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

/// `-s PROP` (ascending) and `-S PROP` (descending), in the order given:
/// numbers compare as numbers, everything else as text; ties keep the
/// hierarchy's order.
fn sort_listed(a: &Args, listed: &mut [query::Listed]) -> Result<(), Fail> {
    let mut keys: Vec<(String, bool)> = Vec::new();
    for (c, desc) in [('s', false), ('S', true)] {
        for p in a.opt_all(c) {
            let k = canonical(&p.to_lowercase()).to_string();
            if !known(&k) {
                return Err(Fail::Usage(format!("invalid property '{p}'")));
            }
            keys.push((k, desc));
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    // -s/-S given on one command line: OpenZFS applies them in order of
    // appearance; ozfs applies every -s, then every -S.
    let key = |l: &query::Listed, k: &str| -> (Option<u64>, String) {
        if k == "name" {
            return (None, l.info.name.clone());
        }
        match l.props.iter().find(|(n, _, _)| n == k) {
            Some((
                _,
                PropValue::Bytes(b) | PropValue::Num(b) | PropValue::Time(b) | PropValue::Ratio(b),
                _,
            )) => (Some(*b), String::new()),
            Some((_, v, _)) => (None, v.render(true)),
            None => (None, String::new()),
        }
    };
    listed.sort_by(|x, y| {
        for (k, desc) in &keys {
            let o = key(x, k).cmp(&key(y, k));
            let o = if *desc { o.reverse() } else { o };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
    Ok(())
}

/// `-j`: datasets with the properties `wanted` (all when empty), as
/// OpenZFS's JSON has them.
fn json_datasets(
    command: &str,
    listed: &[query::Listed],
    wanted: &[&str],
    parsable: bool,
) -> String {
    let mut items = serde_json::Map::new();
    for l in listed {
        let ds = &l.info;
        let mut props = serde_json::Map::new();
        for (n, v, src) in &l.props {
            if !wanted.is_empty() && !wanted.contains(&n.as_str()) {
                continue;
            }
            let value = if ds.is_snapshot && matches!(n.as_str(), "available" | "mountpoint") {
                "-".to_string()
            } else {
                v.render(parsable)
            };
            props.insert(
                n.clone(),
                crate::output::json_prop(&value, &src.as_string()),
            );
        }
        let pool = ozfs_ops::names::pool_of(&ds.name).to_string();
        let mut e = serde_json::json!({
            "name": ds.name,
            "type": if ds.is_snapshot { "SNAPSHOT" } else { "FILESYSTEM" },
            "pool": pool,
            "createtxg": ds.ds.creation_txg.to_string(),
            "properties": props,
        });
        if let Some((fs, snap)) = ds.name.split_once('@') {
            e["dataset"] = serde_json::json!(fs);
            e["snapshot_name"] = serde_json::json!(format!("@{snap}"));
        }
        items.insert(ds.name.clone(), e);
    }
    crate::output::json_doc(command, "datasets", items)
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

/// The encryption properties.
const CRYPT_PROPS: [&str; 6] = [
    "encryption",
    "keylocation",
    "keyformat",
    "pbkdf2iters",
    "encryptionroot",
    "keystatus",
];

fn known(p: &str) -> bool {
    p.contains(':')
        || CRYPT_PROPS.contains(&p)
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
    let a = Args::parse(argv, "rHpj", "odtsS")?;
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
    let fields = a.fields();
    let sources: Option<Vec<String>> = a.opt('s').map(|s| s.split(',').map(String::from).collect());
    let scripted = a.flag('H');
    let parsable = a.flag('p');
    let sel = selection(&a, &types, std::mem::take(&mut rest), false)?;
    let mut rows = Vec::new();
    let mut as_json: Vec<query::Listed> = Vec::new();
    for l in query::datasets(&sel, true)? {
        {
            let ds = &l.info;
            let mut props = l.props;
            let mut shown = Vec::new();
            sort_props(&mut props);
            let chosen: Vec<(String, PropValue, PropSource)> = match &wanted {
                None => props,
                // A property that does not apply to this dataset is
                // shown as "-", except the encryption ones, which OpenZFS
                // leaves out where they do not apply.
                Some(w) => w
                    .iter()
                    .filter_map(|name| {
                        props
                            .iter()
                            .find(|(n, _, _)| n == name)
                            .cloned()
                            .or_else(|| {
                                (!CRYPT_PROPS.contains(&name.as_str())).then(|| {
                                    (name.clone(), PropValue::Text("-".into()), PropSource::None)
                                })
                            })
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
                if a.flag('j') {
                    shown.push((name.clone(), v.clone(), src.clone()));
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
            if a.flag('j') {
                as_json.push(query::Listed {
                    info: ds.clone(),
                    props: shown,
                });
            }
        }
    }
    if a.flag('j') {
        println!("{}", json_datasets("zfs get", &as_json, &[], parsable));
        return Ok(());
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
    "volsize",
    "volblocksize",
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
    "acltype",
    "encryption",
    "keylocation",
    "keyformat",
    "pbkdf2iters",
    "encryptionroot",
    "keystatus",
    "volmode",
    "snapdev",
];

fn sort_props(props: &mut [(String, PropValue, PropSource)]) {
    props.sort_by_key(|(n, _, _)| {
        GET_ORDER
            .iter()
            .position(|o| o == n)
            .unwrap_or(GET_ORDER.len())
    });
}

/// The newest file-system version ozfs writes (pools of version 23 and
/// below get ZPL 4).
const ZPL_VERSION: u64 = ozfs_ops::pool::NEWEST_ZPL_VERSION;

/// `zfs upgrade [-v]`: the file-system versions ozfs writes and the file
/// systems below the current one. Upgrading (`-a`, a name) is refused.
fn upgrade(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "varV", "")?;
    if a.flag('a') || a.flag('r') || a.flag('V') || !a.pos.is_empty() {
        return Err(Fail::Err(
            "zfs upgrade: upgrading a file system is not supported yet".into(),
        ));
    }
    println!("This system is currently running ZFS filesystem version {ZPL_VERSION}.\n");
    if a.flag('v') {
        print!(
            "The following filesystem versions are supported:\n\n{}",
            crate::render::version_table(&crate::render::ZPL_VERSIONS[..ZPL_VERSION as usize])
        );
        return Ok(());
    }
    let sel = query::Selection {
        types: query::Types {
            fs: true,
            snap: false,
            vol: false,
        },
        all_recursive: true,
        ..Default::default()
    };
    let mut old = Vec::new();
    // A file system is out of date against what its pool's version allows.
    let mut pool_max: std::collections::BTreeMap<String, u64> = Default::default();
    for l in query::datasets(&sel, true)? {
        let v = l
            .props
            .iter()
            .find(|(n, _, _)| n == "version")
            .and_then(|(_, v, _)| v.render(true).parse::<u64>().ok());
        let pool = ozfs_ops::names::pool_of(&l.info.name).to_string();
        let max = *pool_max.entry(pool.clone()).or_insert_with(|| {
            ozfs_ops::status::space(&pool)
                .ok()
                .and_then(|s| s.version)
                .map_or(ZPL_VERSION, ozfs_ops::pool::zpl_version_for)
        });
        if let Some(v) = v.filter(|v| *v < max) {
            old.push((v, l.info.name.clone()));
        }
    }
    if old.is_empty() {
        println!("All filesystems are formatted with the current version.");
        return Ok(());
    }
    println!(
        "The following filesystems are out of date, and can be upgraded.  After being\n\
         upgraded, these filesystems (and any 'zfs send' streams generated from\n\
         subsequent snapshots) will no longer be accessible by older software versions.\n\n"
    );
    println!("VER  FILESYSTEM\n---  ------------");
    for (v, n) in old {
        println!("{v:>2}   {n}");
    }
    Ok(())
}

/// Run a request (in the daemon when it holds the pool) and return its result.
pub fn exec(req: Request) -> Result<Response, Fail> {
    Ok(ozfs_ops::proto::execute_as(
        req,
        &Progress::none(),
        crate::invocation(),
    )?)
}

fn create(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "pus", "oVb")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(format!(
            "missing or too many dataset names\n{USAGE}"
        )));
    }
    let name = &a.pos[0];
    let size_of = |what: &str, v: &str| {
        ozfs_dsl::props::parse_size(v).ok_or_else(|| Fail::Err(format!("bad {what} '{v}'")))
    };
    let volume = match a.opt('V') {
        Some(v) => Some(ozfs_ops::dataset::VolumeSpec {
            size: size_of("volume size", v)?,
            blocksize: a
                .opt('b')
                .map(|b| size_of("volume block size", b))
                .transpose()?,
            sparse: a.flag('s'),
        }),
        None if a.flag('s') || a.opt('b').is_some() => {
            return Err(Fail::Usage(format!(
                "'-s' and '-b' can only be used when creating a volume\n{USAGE}"
            )))
        }
        None => None,
    };
    let mut props: Vec<(String, String)> = Vec::new();
    for o in a.opt_all('o') {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| Fail::Usage(format!("bad property '{o}': expected property=value")))?;
        if props.iter().any(|(p, _)| p == k) {
            return Err(Fail::Err(format!(
                "property '{k}' specified multiple times"
            )));
        }
        props.push((k.to_string(), v.to_string()));
    }
    exec(Request::Create {
        name: name.clone(),
        parents: a.flag('p'),
        props,
        no_mount: a.flag('u'),
        volume,
    })?;
    Ok(())
}

fn destroy(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "rRfnpvd", "")?;
    a.refuse("Rp", "cannot destroy").map_err(Fail::Err)?;
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
    a.refuse("o", "cannot snapshot").map_err(Fail::Err)?;
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
    a.refuse("olf", "cannot mount").map_err(Fail::Err)?;
    if a.flag('a') {
        if !a.pos.is_empty() {
            return Err(Fail::Usage(format!("too many arguments\n{USAGE}")));
        }
        ozfs_ops::client::call_starting(&serde_json::json!({"cmd": "mount_all"}))?.check()?;
        return Ok(());
    }
    match a.pos.len() {
        0 => {
            for (ds, mp) in ozfs_ops::client::list_mounts() {
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

const USERSPACE_USAGE: &str = "usage:
	userspace [-Hinp] [-o field[,...]] [-s field] ...
	    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>
	groupspace [-Hinp] [-o field[,...]] [-s field] ...
	    [-S field] ... [-t type[,...]] <filesystem|snapshot|path>
	projectspace [-Hp] [-o field[,...]] [-s field] ...
	    [-S field] ... <filesystem|snapshot|path>";

/// A user's or group's name (`getpwuid_r`/`getgrgid_r`), if the host knows it.
fn owner_name(id: u64, group: bool) -> Option<String> {
    let id = u32::try_from(id).ok()?;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: the result structs and buffer outlive the calls; the name is
    // copied out before they go.
    unsafe {
        let p = if group {
            let mut g: libc::group = std::mem::zeroed();
            let mut out: *mut libc::group = std::ptr::null_mut();
            if libc::getgrgid_r(id, &mut g, buf.as_mut_ptr(), buf.len(), &mut out) != 0
                || out.is_null()
            {
                return None;
            }
            g.gr_name
        } else {
            let mut pw: libc::passwd = std::mem::zeroed();
            let mut out: *mut libc::passwd = std::ptr::null_mut();
            if libc::getpwuid_r(id, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) != 0
                || out.is_null()
            {
                return None;
            }
            pw.pw_name
        };
        if p.is_null() {
            return None;
        }
        Some(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// `zfs userspace` / `groupspace` / `projectspace`: space and objects per
/// owner, with OpenZFS's columns (TYPE NAME USED QUOTA OBJUSED OBJQUOTA),
/// sorting (`-s`/`-S`, default type then name) and types (`-t`).
fn userspace(cmd: &str, argv: &[String]) -> CmdResult {
    use ozfs_ops::userspace::{space, Owner};
    let project = cmd == "projectspace";
    let a = Args::parse(argv, if project { "Hp" } else { "Hinp" }, "osSt")?;
    if a.pos.len() != 1 {
        return Err(Fail::Usage(format!(
            "{}\n{USERSPACE_USAGE}",
            if a.pos.is_empty() {
                "missing dataset name"
            } else {
                "too many arguments"
            }
        )));
    }
    const FIELDS: [&str; 6] = ["type", "name", "used", "quota", "objused", "objquota"];
    let fields: Vec<usize> = match a.opt('o') {
        None => (0..FIELDS.len()).collect(),
        Some(o) => o
            .split(',')
            .map(|f| {
                FIELDS
                    .iter()
                    .position(|x| *x == f)
                    .ok_or_else(|| Fail::Err(format!("invalid type '{f}' for -o option")))
            })
            .collect::<Result<_, _>>()?,
    };
    // Which owners: -t, or the command's own.
    let mut owners: Vec<Owner> = Vec::new();
    if project {
        owners.push(Owner::Project);
    } else {
        let t = a.opt('t').map(str::to_string).unwrap_or_else(|| {
            if cmd == "groupspace" {
                "posixgroup,smbgroup".into()
            } else {
                "posixuser,smbuser".into()
            }
        });
        for ty in t.split(',') {
            match ty {
                "posixuser" | "smbuser" => owners.push(Owner::User),
                "posixgroup" | "smbgroup" => owners.push(Owner::Group),
                "all" => owners.extend([Owner::User, Owner::Group]),
                other => return Err(Fail::Err(format!("invalid type '{other}' for -t option"))),
            }
        }
        owners.sort_by_key(|o| *o == Owner::User);
        owners.dedup();
    }
    let parsable = a.flag('p');
    let numeric = a.flag('n');
    let mut rows: Vec<(Vec<String>, u64, u64, u64)> = Vec::new();
    for owner in owners {
        let (ty, group) = match owner {
            Owner::User => ("POSIX User", false),
            Owner::Group => ("POSIX Group", true),
            Owner::Project => ("Project", false),
        };
        for s in space(&a.pos[0], owner)? {
            let name = if numeric || owner == Owner::Project {
                s.id.to_string()
            } else {
                owner_name(s.id, group).unwrap_or_else(|| s.id.to_string())
            };
            let used = if parsable {
                s.used.to_string()
            } else {
                crate::render::nice(s.used)
            };
            let objused = match s.objused {
                Some(n) if parsable => n.to_string(),
                Some(n) => ozfs_ops::query::nicenum(n),
                None => "-".into(),
            };
            let cells = vec![
                ty.to_string(),
                name,
                used,
                "none".into(),
                objused,
                "none".into(),
            ];
            rows.push((cells, s.id, s.used, s.objused.unwrap_or(0)));
        }
    }
    // -s/-S: by field, in order; default type then name.
    let mut keys: Vec<(usize, bool)> = Vec::new();
    for (c, rev) in [('s', false), ('S', true)] {
        for f in a.opt_all(c) {
            let i = FIELDS
                .iter()
                .position(|x| *x == f)
                .ok_or_else(|| Fail::Err(format!("invalid field '{f}' for -{c} option")))?;
            keys.push((i, rev));
        }
    }
    if keys.is_empty() {
        keys = vec![(0, false), (1, false)];
    }
    rows.sort_by(|x, y| {
        for &(i, rev) in &keys {
            let o = match i {
                2 => x.2.cmp(&y.2),
                4 => x.3.cmp(&y.3),
                1 if numeric => x.1.cmp(&y.1),
                _ => x.0[i].cmp(&y.0[i]),
            };
            let o = if rev { o.reverse() } else { o };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
    let hdr = ["TYPE", "NAME", "USED", "QUOTA", "OBJUSED", "OBJQUOTA"];
    let scripted = a.flag('H');
    let mut width: Vec<usize> = hdr.iter().map(|h| h.len()).collect();
    for (cells, ..) in &rows {
        for (i, c) in cells.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut out = String::new();
        for (k, &i) in fields.iter().enumerate() {
            if k > 0 {
                out.push_str(if scripted { "\t" } else { "  " });
            }
            if scripted {
                out.push_str(&cells[i]);
            } else if i < 2 {
                out.push_str(&format!("{:<w$}", cells[i], w = width[i]));
            } else {
                out.push_str(&format!("{:>w$}", cells[i], w = width[i]));
            }
        }
        out.trim_end().to_string()
    };
    if !scripted {
        let h: Vec<String> = hdr.iter().map(|s| s.to_string()).collect();
        println!("{}", line(&h));
    }
    for (cells, ..) in &rows {
        println!("{}", line(cells));
    }
    Ok(())
}
