//! Reading pools: what `zfs list`, `zfs get` and `zpool list` show, as data.
//!
//! Reads see each pool's last synced state (a pool the daemon holds is read
//! from its devices, like any other); `mounted` comes from the daemon.

use crate::error::{Error, Result};
use crate::host::{open_imported, Record};
pub use ozfs_dsl::props::nicenum;
use ozfs_dsl::DslPool;
pub use ozfs_dsl::{DatasetInfo, PropSource, PropValue};

/// One property: name, value, where it comes from.
pub type Prop = (String, PropValue, PropSource);

/// Which kinds of dataset a listing shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Types {
    pub fs: bool,
    pub snap: bool,
    /// Volumes (zvols).
    pub vol: bool,
}

/// What `zfs list` / `zfs get` select.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Datasets named on the command line; empty: every imported pool.
    pub operands: Vec<String>,
    pub types: Types,
    /// `-r` (or `-d`).
    pub recursive: bool,
    /// `-d N`.
    pub depth: Option<usize>,
    /// Without operands, list every pool recursively (`zfs list`).
    pub all_recursive: bool,
}

/// A dataset and its properties.
#[derive(Debug, Clone)]
pub struct Listed {
    pub info: DatasetInfo,
    pub props: Vec<Prop>,
}

/// The datasets a selection names, each with its properties (`full`:
/// also those of the file system's master node and of snapshots, as `zfs
/// get` shows them).
pub fn datasets(sel: &Selection, full: bool) -> Result<Vec<Listed>> {
    let recursive = sel.recursive || sel.depth.is_some();
    let operands: Vec<String> = if sel.operands.is_empty() {
        Record::all()
    } else {
        sel.operands.clone()
    };
    let all_recursive = sel.operands.is_empty() && sel.all_recursive;
    let types = sel.types;
    let mounts = crate::client::list_mounts();
    let keys: std::cell::OnceCell<Vec<(String, u64)>> = std::cell::OnceCell::new();
    let mut out = Vec::new();
    for op in operands {
        let missing = || Error::NotFound(format!("cannot open '{op}': dataset does not exist"));
        let pool_name = crate::names::pool_of(&op).to_string();
        let (_, pool) = open_imported(&pool_name).map_err(|_| missing())?;
        let dsl = DslPool::open(pool).map_err(|e| e.context(&format!("cannot open '{op}'")))?;
        let start = dsl.lookup(&op).map_err(|_| missing())?;
        let list = if all_recursive || recursive {
            dsl.list(&start, types.snap, sel.depth)?
        } else if start.is_snapshot {
            vec![start]
        } else if types.snap && !types.fs {
            dsl.snapshots(&start)?
        } else {
            vec![start]
        };
        let first = sel.operands.first();
        let list: Vec<DatasetInfo> = list
            .into_iter()
            .filter(|d| {
                (d.is_snapshot && (types.snap || first.is_some_and(|f| *f == d.name)))
                    || (!d.is_snapshot && (types.fs || types.vol))
            })
            .collect();
        let space = dsl.space()?;
        let avail = dsl.available(&space)?;
        for ds in list {
            // AVAIL is also bounded by the quotas covering the dataset.
            let avail = match dsl.quota_room(&ds) {
                Ok(Some(room)) => avail.min(room),
                _ => avail,
            };
            // Its own unused refreservation is its to use (OpenZFS's
            // `dsl_dataset_space`): the directory's REFRSRV charge.
            let avail = if ds.is_snapshot {
                avail
            } else {
                avail.saturating_add(ds.dir.used_breakdown[ozfs_dsl::reservation::DD_USED_REFRSRV])
            };
            let mut props = dsl
                .properties(&ds, avail)
                .map_err(|e| e.context(&ds.name))?;
            // File systems and volumes are told apart by their objset type.
            if !ds.is_snapshot {
                let volume = props.iter().any(|(n, v, _)| {
                    n == "type" && matches!(v, PropValue::Text(t) if t == "volume")
                });
                if (volume && !types.vol) || (!volume && !types.fs) {
                    continue;
                }
            }
            if full {
                add_zpl_props(&dsl, &ds, &mut props);
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
            }
            // `keystatus` is available where the daemon holds the key.
            if let Some(root) = props.iter().find_map(|(n, v, _)| match v {
                PropValue::Text(t) if n == "encryptionroot" => Some(t.clone()),
                _ => None,
            }) {
                let loaded = keys.get_or_init(crate::client::loaded_keys);
                if let Ok(r) = dsl.lookup(&root) {
                    if loaded.contains(&(pool_name.clone(), r.dir_obj)) {
                        if let Some(p) = props.iter_mut().find(|(n, _, _)| n == "keystatus") {
                            p.1 = PropValue::Text("available".into());
                        }
                    }
                }
            }
            // `mounted` is yes for what the daemon serves.
            if let Some(p) = props.iter_mut().find(|(n, _, _)| n == "mounted") {
                if mounts.iter().any(|(d, _)| *d == ds.name) {
                    p.1 = PropValue::Text("yes".into());
                }
            }
            out.push(Listed { info: ds, props });
        }
    }
    Ok(out)
}

/// The user holds of snapshots: (snapshot, tag, time in seconds);
/// `recursive`: of the snapshot of that name in every descendant too.
pub fn holds(snaps: &[String], recursive: bool) -> Result<Vec<(String, String, u64)>> {
    let mut rows = Vec::new();
    let Some(first) = snaps.first() else {
        return Ok(rows);
    };
    let pool_name = crate::names::pool_of(first).to_string();
    let (_, pool) = open_imported(&pool_name)?;
    let dsl = DslPool::open(pool)?;
    let mut all = Vec::new();
    for s in snaps {
        match (recursive, s.split_once('@')) {
            (true, Some((fs, snap))) => {
                let top = dsl.lookup(fs).map_err(|_| {
                    Error::NotFound(format!("cannot open '{fs}': dataset does not exist"))
                })?;
                for d in dsl.list(&top, false, None)? {
                    let name = format!("{}@{snap}", d.name);
                    if d.name == fs || dsl.lookup(&name).is_ok() {
                        all.push(name);
                    }
                }
            }
            _ => all.push(s.clone()),
        }
    }
    for s in &all {
        let ds = dsl
            .lookup(s)
            .map_err(|_| Error::NotFound(format!("cannot open '{s}': dataset does not exist")))?;
        if ds.ds.userrefs_obj == 0 {
            continue;
        }
        for e in ozfs_dmu::zap::list_obj(&dsl.mos, ds.ds.userrefs_obj)? {
            rows.push((s.clone(), e.name_str(), e.as_u64().unwrap_or(0)));
        }
    }
    Ok(rows)
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
