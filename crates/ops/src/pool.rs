//! Pools as a whole: create one on devices and record it as imported.
//!
//! Invariant: a pool's record is written only after its labels and first
//! uberblocks are on its devices (a record never names a pool that is not
//! there).

use crate::devices::{spec_devices, TopSpec};
use crate::error::{Error, Result};
use crate::host::Record;
use std::path::PathBuf;

/// How to make a pool.
#[derive(Debug, Clone)]
pub struct CreateOpts {
    /// Pool version (23: what zfs-fuse reads; 5000: feature flags).
    pub version: u64,
    pub ashift: u64,
    /// Properties of the root file system (`-O`, and `-m` as `mountpoint`).
    pub fs_props: Vec<(String, String)>,
    pub spares: Vec<PathBuf>,
    /// Features to enable (short names) in a feature-flag pool (`version`
    /// 5000); empty for a legacy version.
    pub features: Vec<String>,
    /// `-o compatibility=`: kept as the pool property.
    pub compatibility: Option<String>,
    /// The command line to record as the pool's first history record
    /// (the creation record ZFS keeps for ever).
    pub history: Option<crate::history::Invocation>,
}

impl Default for CreateOpts {
    fn default() -> Self {
        CreateOpts {
            version: ozfs_dsl::create::DEFAULT_POOL_VERSION,
            features: if ozfs_dsl::create::DEFAULT_POOL_VERSION
                == ozfs_spa::pool::SPA_VERSION_FEATURES
            {
                all_features()
            } else {
                Vec::new()
            },
            ashift: 9,
            fs_props: Vec::new(),
            spares: Vec::new(),
            compatibility: None,
            history: None,
        }
    }
}

/// The ZPL version new file systems get in a pool of `pool_version`.
pub fn zpl_version_for(pool_version: u64) -> u64 {
    ozfs_dsl::create::zpl_version_for(pool_version)
}

/// The newest ZPL version ozfs writes (system attributes).
pub const NEWEST_ZPL_VERSION: u64 = ozfs_dsl::create::ZPL_VERSION_SA;

/// A pool feature as `zpool upgrade -v` lists it.
pub struct FeatureDoc {
    pub name: &'static str,
    pub description: &'static str,
    /// A reader without it may still import the pool read-only.
    pub read_only_compatible: bool,
}

/// Every feature ozfs can enable (OpenZFS 2.3's), in OpenZFS's order.
pub fn features() -> Vec<FeatureDoc> {
    ozfs_dsl::features::FEATURES
        .iter()
        .map(|f| FeatureDoc {
            name: f.name,
            description: f.desc,
            read_only_compatible: f.flags & ozfs_dsl::features::RO_COMPAT != 0,
        })
        .collect()
}

/// Version and features of a new pool from `zpool create`'s options, as
/// OpenZFS decides them: `-o version=N` (a legacy version takes no
/// feature option), otherwise version 5000 when any feature option,
/// `-d` or `-o compatibility=` is given, with every feature unless `-d`
/// (none) or a compatibility list (those it names) says otherwise, then
/// each `feature@NAME=enabled|disabled`. With no option at all the pool
/// gets ozfs's default version.
pub fn resolve_features(
    version: Option<u64>,
    no_features: bool,
    compat: Option<&str>,
    opts: &[(String, bool)],
) -> Result<(u64, Vec<String>)> {
    let feature_opts = no_features || compat.is_some() || !opts.is_empty();
    match version {
        Some(v) if v != ozfs_spa::pool::SPA_VERSION_FEATURES => {
            if feature_opts {
                return Err(Error::Invalid(format!(
                    "invalid feature options: pool version {v} has no feature flags \
                     (features need version 5000)"
                )));
            }
            return Ok((v, Vec::new()));
        }
        None if !feature_opts => {
            let v = ozfs_dsl::create::DEFAULT_POOL_VERSION;
            if v != ozfs_spa::pool::SPA_VERSION_FEATURES {
                return Ok((v, Vec::new()));
            }
        }
        _ => {}
    }
    let mut feats: Vec<String> = match (no_features, compat) {
        (true, _) => Vec::new(),
        (false, c) => compatible_features(c)?,
    };
    for (f, on) in opts {
        let name = ozfs_dsl::features::feature(f)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "property 'feature@{f}' is not a valid pool property"
                ))
            })?
            .name
            .to_string();
        feats.retain(|x| *x != name);
        if *on {
            feats.push(name);
        }
    }
    Ok((ozfs_spa::pool::SPA_VERSION_FEATURES, feats))
}

/// The features a `compatibility` value allows (every one for none or
/// `off`).
fn compatible_features(compat: Option<&str>) -> Result<Vec<String>> {
    Ok(match compat {
        Some(c) => match ozfs_dsl::features::compatibility_features(c)? {
            Some(list) => list.iter().map(|s| s.to_string()).collect(),
            None => all_features(),
        },
        None => all_features(),
    })
}

fn all_features() -> Vec<String> {
    ozfs_dsl::features::FEATURES
        .iter()
        .map(|f| f.name.to_string())
        .collect()
}

/// A name a new pool may take (no reserved word, a letter first, …).
pub fn check_new_name(name: &str) -> Result<()> {
    ozfs_format::names::check_new_pool_name(name)
        .map_err(|why| Error::Invalid(format!("cannot create '{name}': {why}")))
}

/// `zpool create NAME VDEV...`: write a new pool on `tops` and record it as
/// imported. Returns its record.
pub fn create(name: &str, tops: &[TopSpec], o: &CreateOpts) -> Result<Record> {
    let fail = |e: Error| e.context(&format!("cannot create '{name}'"));
    check_new_name(name)?;
    if Record::load(name).is_ok() {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': pool already exists"
        )));
    }
    if tops.is_empty() {
        return Err(Error::Invalid(format!(
            "cannot create '{name}': at least one top-level vdev must be specified"
        )));
    }
    let mut settings = Vec::new();
    for (k, v) in &o.fs_props {
        settings.push((
            k.clone(),
            ozfs_dsl::props::parse_setting(k, v).map_err(fail)?,
        ));
    }
    let features: Vec<&str> = o.features.iter().map(|s| s.as_str()).collect();
    let mut w =
        ozfs_dsl::create::create_pool(name, tops, o.ashift, o.version, &features).map_err(fail)?;
    ozfs_dsl::create::add_spares(&mut w, &o.spares).map_err(fail)?;
    if !settings.is_empty() || o.history.is_some() || o.compatibility.is_some() {
        let root = w.root_dir_obj;
        if let Some(c) = &o.compatibility {
            ozfs_dsl::create::set_pool_prop(
                &mut w,
                "compatibility",
                &ozfs_dsl::create::PropSetting::Text(c.clone()),
            )
            .map_err(fail)?;
        }
        for (k, v) in &settings {
            ozfs_dsl::create::set_prop_dir(&mut w, root, k, v).map_err(fail)?;
        }
        if let Some(inv) = &o.history {
            crate::history::append(&mut w, inv).map_err(fail)?;
        }
        w.sync().map_err(fail)?;
    }
    let rec = Record {
        name: name.to_string(),
        guid: w.pool.guid,
        devices: spec_devices(tops, &o.spares),
        readonly: false,
        errors: Vec::new(),
        resilvering: Vec::new(),
        offline: Vec::new(),
    };
    rec.save().map_err(fail)?;
    Ok(rec)
}

/// How to import a pool.
#[derive(Debug, Clone, Default)]
pub struct ImportOpts {
    /// `-o readonly=on`: nothing is ever written to it.
    pub readonly: bool,
    /// `-n`: check that it would import, change nothing, record nothing.
    pub dry_run: bool,
    /// The command line to record in the pool's history (read-write
    /// imports only), in the txg that marks the pool active.
    pub history: Option<crate::history::Invocation>,
}

/// `zpool import [-n] [-o readonly=on] POOL|ID [NEWNAME]` from the devices
/// in `dirs`: the pool is opened (read-write: marked active in its labels)
/// and recorded as imported. Mounting its file systems is the daemon's
/// ([`crate::client::daemon_import`]). A dry run opens it read-only and
/// returns the record it would have, unsaved.
pub fn import(
    dirs: &[PathBuf],
    want: &str,
    new_name: Option<&str>,
    o: &ImportOpts,
) -> Result<Record> {
    let readonly = o.readonly || o.dry_run;
    use ozfs_spa::{Pool, PoolOptions};
    let pools = ozfs_spa::import::discover(dirs)?;
    let mut matches: Vec<_> = pools
        .into_iter()
        .filter(|p| p.name == want || p.guid.to_string() == want)
        .collect();
    if matches.is_empty() {
        return Err(Error::NotFound(format!(
            "cannot import '{want}': no such pool available"
        )));
    }
    if matches.len() > 1 {
        return Err(Error::Invalid(format!(
            "cannot import '{want}': more than one matching pool; import by numeric ID instead"
        )));
    }
    let found = matches.remove(0);
    let name = match new_name {
        Some(new) => {
            ozfs_format::names::check_new_pool_name(new).map_err(|why| {
                Error::Invalid(format!("cannot import '{want}' as '{new}': {why}"))
            })?;
            new.to_string()
        }
        None => {
            // The name in the labels is the pool's author's: checked like a
            // typed one before it names a state file or a mountpoint.
            ozfs_format::names::check_pool_name(&found.name).map_err(|why| {
                Error::Invalid(format!(
                    "cannot import pool {}: its labels name it {:?}, which is not a valid pool name ({why}); \
                     import it under a new name: zpool import {} NEWNAME",
                    found.guid, found.name, found.guid
                ))
            })?;
            found.name.clone()
        }
    };
    if Record::load(&name).is_ok() {
        return Err(Error::Invalid(format!(
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
                Error::Invalid(format!(
                    "cannot import '{want}': devices cannot be opened for writing"
                ))
            })?
    };
    let fail = |e: Error| e.context(&format!("cannot import '{want}'"));
    let pool = Pool::open(
        found,
        &PoolOptions {
            readonly,
            max_txg: None,
        },
    )
    .map_err(fail)?;
    let pool = std::sync::Arc::new(pool);
    if !readonly {
        // A removed device's vdev needs no device: its config comes from
        // the MOS (opening the DSL resolves it) before the state counts.
        if !crate::status::writable_state(pool.state()) {
            let _ = ozfs_dsl::DslPool::open(pool.clone());
        }
        // A degraded pool is written where its redundancy allows (missing
        // and offline leaves are skipped); an unavailable one is not.
        if !crate::status::writable_state(pool.state()) {
            return Err(Error::Invalid(format!(
                "cannot import '{want}' read-write: the pool is {}; use -o readonly=on",
                pool.state().as_str()
            )));
        }
        // Mark it active in its labels, as an import does.
        let mut w = ozfs_dsl::sync::PoolWriter::open(pool.clone()).map_err(fail)?;
        w.config_dirty = true;
        w.state = ozfs_spa::label_write::POOL_STATE_ACTIVE;
        if let Some(inv) = &o.history {
            // As ZFS, a history that cannot be written does not fail the import.
            let _ = crate::history::append(&mut w, inv);
        }
        w.sync().map_err(fail)?;
    }
    // Make sure the dataset layer opens too before declaring success.
    ozfs_dsl::DslPool::open(pool.clone())
        .and_then(|d| d.root())
        .map_err(fail)?;
    // Available spares found among the devices are the pool's too.
    for s in pool.spares() {
        if s.dev.is_some() && !devices.contains(&s.path) {
            devices.push(s.path);
        }
    }
    let (resilvering, offline) = crate::host::resilvering_of(guid);
    let rec = Record {
        name,
        guid,
        devices,
        readonly: o.readonly,
        errors: Vec::new(),
        resilvering,
        offline,
    };
    if !o.dry_run {
        rec.save().map_err(fail)?;
    }
    Ok(rec)
}

/// What a read-only import of `name` leaves out: one line per file
/// system whose intent log holds records not applied (they are shown as
/// of the last committed txg; a read-write import replays them).
pub fn unreplayed_logs(name: &str) -> Result<Vec<String>> {
    let rec = Record::load(name)
        .map_err(|_| Error::NotFound(format!("cannot open '{name}': no such pool")))?;
    let pool = rec.open()?;
    Ok(ozfs_dsl::zil::unreplayed(&pool)?
        .into_iter()
        .map(|(fs, n, encrypted)| {
            let what = if encrypted {
                format!("its encrypted intent log holds {n} log block{}", plural(n))
            } else {
                format!("its intent log holds {n} record{}", plural(n))
            };
            format!(
                "{fs}: {what} not applied (read-only import): its files are shown as of the \
                 last committed transaction group; import the pool read-write to replay them"
            )
        })
        .collect())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The writer of a recorded pool no daemon holds, under its lock.
fn own_writer(rec: &Record) -> Result<ozfs_dsl::sync::PoolWriter> {
    crate::host::lock_pool(&rec.name)?;
    ozfs_dsl::sync::PoolWriter::open(rec.open_rw()?)
}

/// `zpool export POOL`: the daemon unmounts, syncs and lets go of it when
/// it holds it; the pool is marked exported in its labels and forgotten.
pub fn export(name: &str) -> Result<()> {
    export_as(name, None)
}

/// [`export`], recording `inv` in the pool's history in the txg that
/// marks it exported (as ZFS logs `zpool export`).
pub fn export_as(name: &str, inv: Option<&crate::history::Invocation>) -> Result<()> {
    if crate::client::daemon_holds(name) {
        crate::client::call_starting(
            &serde_json::json!({"cmd": "export", "pool": name, "history": inv}),
        )?
        .check()?;
        return Ok(());
    }
    let rec = Record::load(name)
        .map_err(|_| Error::NotFound(format!("cannot open '{name}': no such pool")))?;
    if !rec.readonly {
        let fail = |e: Error| e.context(&format!("cannot export '{name}'"));
        own_writer(&rec)
            .and_then(|mut w| {
                if let Some(inv) = inv {
                    // A history that cannot be written does not stop the export.
                    let _ = crate::history::append(&mut w, inv);
                }
                w.export()
            })
            .map_err(fail)?;
    }
    Record::remove(name).map_err(|_| Error::NotFound(format!("cannot open '{name}': no such pool")))
}

/// `zpool destroy POOL`: marked destroyed in its labels (its devices can
/// be reused) and forgotten.
pub fn destroy(name: &str) -> Result<()> {
    let rec = Record::load(name)
        .map_err(|_| Error::NotFound(format!("cannot open '{name}': no such pool")))?;
    if crate::client::daemon_holds(name) {
        // The daemon unmounts and syncs it, then lets go of it.
        crate::client::call_starting(
            &serde_json::json!({"cmd": "export", "pool": name, "release": true}),
        )
        .and_then(|r| r.check())
        .map_err(|e| Error::Invalid(e.to_string().replace("cannot export", "cannot destroy")))?;
    }
    if !rec.readonly {
        let fail = |e: Error| e.context(&format!("cannot destroy '{name}'"));
        let mut w = own_writer(&rec).map_err(fail)?;
        w.sync().map_err(fail)?;
        w.state = ozfs_spa::label_write::POOL_STATE_DESTROYED;
        w.config_dirty = true;
        w.sync().map_err(fail)?;
    }
    Record::remove(name)?;
    crate::scan::ScanState::remove(name);
    Ok(())
}

/// Pool properties `zpool set` changes, kept in the MOS `pool_props` ZAP as
/// ZFS keeps them (name → stored value): the on/off ones, `failmode`, and
/// `bootfs` (the dataset's object number).
const ONOFF_PROPS: &[&str] = &["autoreplace", "autoexpand", "listsnapshots", "delegation"];
/// Pool properties that are only ever read.
const READONLY_PROPS: &[&str] = &[
    "size",
    "capacity",
    "altroot",
    "health",
    "guid",
    "load_guid",
    "free",
    "allocated",
    "dedupratio",
    "fragmentation",
    "expandsize",
    "freeing",
    "leaked",
    "checkpoint",
    "name",
    "ashift",
];

/// What `zpool set NAME=VALUE` stores for the pool, or why it cannot.
fn pool_setting(
    pool: &str,
    w: &ozfs_dsl::sync::PoolWriter,
    k: &str,
    v: &str,
) -> Result<ozfs_dsl::create::PropSetting> {
    use ozfs_dsl::create::PropSetting;
    let cannot = |why: String| Error::Invalid(format!("cannot set property for '{pool}': {why}"));
    let onoff = |v: &str| match v {
        "on" => Ok(PropSetting::Num(1)),
        "off" => Ok(PropSetting::Num(0)),
        _ => Err(cannot(format!("'{k}' must be 'on' or 'off', not '{v}'"))),
    };
    match k {
        _ if ONOFF_PROPS.contains(&k) => onoff(v),
        "failmode" => match v {
            "wait" => Ok(PropSetting::Num(0)),
            "continue" => Ok(PropSetting::Num(1)),
            "panic" => Ok(PropSetting::Num(2)),
            _ => Err(cannot(format!(
                "'failmode' must be one of 'wait | continue | panic', not '{v}'"
            ))),
        },
        "bootfs" => {
            if crate::names::pool_of(v) != pool {
                return Err(cannot(format!("'{v}' is an invalid name")));
            }
            let ds = w
                .dsl()
                .lookup(v)
                .map_err(|_| cannot(format!("dataset '{v}' does not exist")))?;
            if ds.is_snapshot {
                return Err(cannot(format!("'{v}' is not a file system")));
            }
            Ok(PropSetting::Num(ds.ds_obj))
        }
        "cachefile" => Err(Error::Unsupported {
            what: format!("cannot set property for '{pool}'"),
            detail: "ozfs records imported pools in its state directory, not in a cache file"
                .into(),
        }),
        "version" | "comment" | "compatibility" | "multihost" | "autotrim" => {
            Err(Error::Unsupported {
                what: format!("cannot set property for '{pool}'"),
                detail: format!("'{k}' is not supported yet"),
            })
        }
        _ if READONLY_PROPS.contains(&k) => Err(cannot(format!("'{k}' is readonly"))),
        _ => Err(cannot(format!("invalid property '{k}'"))),
    }
}

/// `zpool set feature@NAME=enabled`: the feature's full name, or why it
/// cannot be enabled (features are only ever enabled, never disabled).
fn feature_setting(
    pool: &str,
    w: &ozfs_dsl::sync::PoolWriter,
    f: &str,
    v: &str,
) -> Result<&'static str> {
    let cannot = |why: String| Error::Invalid(format!("cannot set property for '{pool}': {why}"));
    let feat = ozfs_dsl::features::feature(f)
        .ok_or_else(|| cannot(format!("invalid feature 'feature@{f}'")))?;
    if v != "enabled" {
        return Err(cannot(format!(
            "property 'feature@{f}' can only be set to 'enabled'"
        )));
    }
    if w.version < ozfs_spa::pool::SPA_VERSION_FEATURES {
        return Err(cannot(
            "pool must be upgraded to use feature flags (zpool upgrade)".into(),
        ));
    }
    Ok(feat.guid)
}

/// `zpool upgrade POOL`: a legacy pool becomes a feature-flag pool with
/// every feature OpenZFS 2.3 has enabled; a feature-flag pool gets the
/// features it lacks. Returns the pool's version before.
pub fn upgrade(pool: &str) -> Result<u64> {
    let mut w = crate::host::writer_for(pool)?;
    let before = w.version;
    // As OpenZFS: `compatibility` limits what an upgrade enables, and
    // `legacy` refuses it.
    let all = match ozfs_dsl::create::pool_prop_text(&w, "compatibility")? {
        Some(c) if c == "legacy" => {
            return Err(Error::Invalid(format!(
                "cannot upgrade '{pool}': Upgrade not performed because 'compatibility' property set to 'legacy'"
            )))
        }
        c => compatible_features(c.as_deref())?,
    };
    let names: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    ozfs_dsl::create::upgrade(&mut w, &names)
        .and_then(|_| w.sync())
        .map_err(|e| e.context(&format!("cannot upgrade '{pool}'")))?;
    Ok(before)
}

/// `zpool set NAME=VALUE... POOL`: every assignment checked first, then all
/// stored in one txg.
pub fn set_props(pool: &str, assigns: &[(String, String)]) -> Result<()> {
    let mut w = crate::host::writer_for(pool)?;
    let mut settings = Vec::with_capacity(assigns.len());
    let mut features = Vec::new();
    for (k, v) in assigns {
        if let Some(f) = k.strip_prefix("feature@") {
            features.push(feature_setting(pool, &w, f, v)?);
            continue;
        }
        settings.push((k, pool_setting(pool, &w, k, v)?));
    }
    for (k, s) in &settings {
        ozfs_dsl::create::set_pool_prop(&mut w, k, s)?;
    }
    if !features.is_empty() {
        ozfs_dsl::features::enable(&mut w, &features)?;
    }
    w.sync()
        .map_err(|e| e.context(&format!("cannot set property for '{pool}'")))
}
