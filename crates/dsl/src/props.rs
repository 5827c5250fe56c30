//! Dataset properties: stored values in each DSL directory's props ZAP,
//! inheritance up the hierarchy, defaults, and the read-only statistics that
//! `zfs get all` shows.

use crate::pool::{DatasetInfo, DslPool};
use ozfs_dmu::zap;
use ozfs_dmu::Objset;
use ozfs_format::{Error, Result};
use std::collections::BTreeMap;

/// Where a property's value came from (the SOURCE column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropSource {
    /// Read-only statistic: `-`.
    None,
    Default,
    Local,
    Inherited(String),
    Received,
}

impl PropSource {
    pub fn as_string(&self) -> String {
        match self {
            PropSource::None => "-".into(),
            PropSource::Default => "default".into(),
            PropSource::Local => "local".into(),
            PropSource::Inherited(from) => format!("inherited from {from}"),
            PropSource::Received => "received".into(),
        }
    }
}

/// A property value: a number (bytes, counts, timestamps) or text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropValue {
    /// Sizes in bytes; printed human-readable unless `-p`.
    Bytes(u64),
    /// Plain number.
    Num(u64),
    /// Seconds since the epoch.
    Time(u64),
    /// Compression/dedup ratio ×100.
    Ratio(u64),
    Text(String),
    /// A size limit that is not set (`quota`, `reservation`... of 0):
    /// "none", or "0" with `-p` (as libzfs prints them).
    NoLimit,
}

/// Format a byte count the way zfs does (1024-based, 3 significant digits: 1.50K, 12.3M, 120G).
pub fn nicenum(n: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    if n < 1024 {
        return n.to_string();
    }
    let mut i = 0;
    let mut v = n as f64;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    // Exact multiples print without decimals ("4K", "128K"), as zfs does.
    if n & ((1u64 << (10 * i)) - 1) == 0 {
        return format!("{}{}", n >> (10 * i), UNITS[i]);
    }
    // Otherwise the most decimals that keep it within five characters.
    for prec in (0..=2).rev() {
        let s = format!("{v:.prec$}");
        if s.len() <= 4 {
            return format!("{s}{}", UNITS[i]);
        }
    }
    format!("{v:.0}{}", UNITS[i])
}

impl PropValue {
    /// Render for output; `parsable` = `-p`.
    pub fn render(&self, parsable: bool) -> String {
        match self {
            PropValue::Bytes(n) => {
                if parsable {
                    n.to_string()
                } else {
                    nicenum(*n)
                }
            }
            PropValue::Num(n) => n.to_string(),
            PropValue::Time(t) => {
                if parsable {
                    t.to_string()
                } else {
                    format_time(*t)
                }
            }
            PropValue::Ratio(r) => {
                if parsable {
                    format!("{}.{:02}", r / 100, r % 100)
                } else {
                    format!("{}.{:02}x", r / 100, r % 100)
                }
            }
            PropValue::Text(s) => s.clone(),
            PropValue::NoLimit if parsable => "0".into(),
            PropValue::NoLimit => "none".into(),
        }
    }
}

fn format_time(t: u64) -> String {
    // ctime-like "Sat Nov 21 23:21 2026" in UTC (no tz database needed).
    let days = (t / 86400) as i64;
    let secs = t % 86400;
    let (y, m, d) = civil_from_days(days);
    let wd = ((days + 4).rem_euclid(7)) as usize;
    const WD: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MO: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {} {:2} {:2}:{:02} {}",
        WD[wd],
        MO[(m - 1) as usize],
        d,
        secs / 3600,
        (secs / 60) % 60,
        y
    )
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = (z - era * 146097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Kinds of native, settable properties.
#[derive(Clone, Copy)]
enum Kind {
    /// Stored as a number, shown through a value table.
    Index(&'static [(&'static str, u64)]),
    Bytes,
    Text,
}

const ONOFF: &[(&str, u64)] = &[("off", 0), ("on", 1)];
const COMPRESS: &[(&str, u64)] = &[
    ("on", 1),
    ("off", 2),
    ("lzjb", 3),
    ("empty", 4),
    ("gzip-1", 5),
    ("gzip-2", 6),
    ("gzip-3", 7),
    ("gzip-4", 8),
    ("gzip-5", 9),
    ("gzip", 10),
    ("gzip-7", 11),
    ("gzip-8", 12),
    ("gzip-9", 13),
    ("zle", 14),
    ("lz4", 15),
    ("zstd", 16),
];
const CHECKSUM: &[(&str, u64)] = &[
    ("on", 1),
    ("off", 2),
    ("fletcher2", 6),
    ("fletcher4", 7),
    ("sha256", 8),
    ("noparity", 10),
    ("sha512", 11),
    ("skein", 12),
    ("edonr", 13),
    ("blake3", 14),
];
const DEDUP: &[(&str, u64)] = &[
    ("off", 2),
    ("on", 1),
    ("verify", 1 | (1 << 8)),
    ("sha256", 8),
    ("sha256,verify", 8 | (1 << 8)),
    ("sha512", 11),
    ("sha512,verify", 11 | (1 << 8)),
    ("skein", 12),
    ("skein,verify", 12 | (1 << 8)),
    // edonr is accepted only with verify (not strong enough alone).
    ("edonr,verify", 13 | (1 << 8)),
    ("blake3", 14),
    ("blake3,verify", 14 | (1 << 8)),
];
const CANMOUNT: &[(&str, u64)] = &[("off", 0), ("on", 1), ("noauto", 2)];
const SNAPDIR: &[(&str, u64)] = &[("hidden", 0), ("visible", 1)];
const CACHE: &[(&str, u64)] = &[("none", 0), ("metadata", 1), ("all", 2)];
const LOGBIAS: &[(&str, u64)] = &[("latency", 0), ("throughput", 1)];
const SYNC: &[(&str, u64)] = &[("standard", 0), ("always", 1), ("disabled", 2)];
const ACLMODE: &[(&str, u64)] = &[
    ("discard", 0),
    ("groupmask", 2),
    ("passthrough", 3),
    ("restricted", 4),
];
const ACLINHERIT: &[(&str, u64)] = &[
    ("discard", 0),
    ("noallow", 1),
    ("restricted", 4),
    ("passthrough", 3),
    ("secure", 4),
    ("passthrough-x", 5),
];
/// `acltype` (OpenZFS's ZFS_ACLTYPE_*): the first spelling of a value is
/// the one shown; `noacl`, `disabled` and `posixacl` are accepted aliases.
const ACLTYPE: &[(&str, u64)] = &[
    ("off", 0),
    ("posix", 1),
    ("nfsv4", 2),
    ("noacl", 0),
    ("disabled", 0),
    ("posixacl", 1),
];
const COPIES: &[(&str, u64)] = &[("1", 1), ("2", 2), ("3", 3)];
/// `xattr` as OpenZFS 2.3 has it (`ZFS_XATTR_OFF/DIR/SA`): `on` is `sa`,
/// the default. zfs-fuse's pools (before system attributes, version 24)
/// know only `off` and `on` = 1, the xattr directory: there stored 1 is
/// shown `on` and `on` or `sa` are stored as 1 ([`XATTR_LEGACY`]).
const XATTR: &[(&str, u64)] = &[("off", 0), ("on", 2), ("sa", 2), ("dir", 1)];
/// `xattr` in pools of version 23 and before (zfs-fuse's table).
const XATTR_LEGACY: &[(&str, u64)] = &[("off", 0), ("on", 1), ("dir", 1), ("sa", 1)];
/// First pool version with system attributes (`SPA_VERSION_SA`).
const SPA_VERSION_SA: u64 = 24;

const VOLMODE: &[(&str, u64)] = &[
    ("default", 0),
    ("full", 1),
    ("geom", 1),
    ("dev", 2),
    ("none", 3),
];
const SNAPDEV: &[(&str, u64)] = &[("hidden", 0), ("visible", 1)];

/// Properties OpenZFS keeps for file systems only (not listed for a
/// volume, refused on one).
pub const FILESYSTEM_ONLY: &[&str] = &[
    "quota",
    "recordsize",
    "mountpoint",
    "sharenfs",
    "atime",
    "devices",
    "exec",
    "setuid",
    "zoned",
    "snapdir",
    "aclmode",
    "aclinherit",
    "canmount",
    "xattr",
    "vscan",
    "nbmand",
    "sharesmb",
    "refquota",
    "acltype",
];

/// (name, kind, inheritable, default as stored value or text)
const NATIVE: &[(&str, Kind, bool, &str)] = &[
    ("quota", Kind::Bytes, false, "0"),
    ("reservation", Kind::Bytes, false, "0"),
    ("recordsize", Kind::Bytes, true, "131072"),
    ("mountpoint", Kind::Text, true, ""),
    ("sharenfs", Kind::Text, true, "off"),
    ("checksum", Kind::Index(CHECKSUM), true, "1"),
    ("compression", Kind::Index(COMPRESS), true, "2"),
    ("atime", Kind::Index(ONOFF), true, "1"),
    ("devices", Kind::Index(ONOFF), true, "1"),
    ("exec", Kind::Index(ONOFF), true, "1"),
    ("setuid", Kind::Index(ONOFF), true, "1"),
    ("readonly", Kind::Index(ONOFF), true, "0"),
    ("zoned", Kind::Index(ONOFF), true, "0"),
    ("snapdir", Kind::Index(SNAPDIR), true, "0"),
    ("aclmode", Kind::Index(ACLMODE), true, "2"),
    ("aclinherit", Kind::Index(ACLINHERIT), true, "4"),
    ("canmount", Kind::Index(CANMOUNT), false, "1"),
    ("xattr", Kind::Index(XATTR), true, "2"),
    ("copies", Kind::Index(COPIES), true, "1"),
    ("sharesmb", Kind::Text, true, "off"),
    ("refquota", Kind::Bytes, false, "0"),
    ("refreservation", Kind::Bytes, false, "0"),
    ("primarycache", Kind::Index(CACHE), true, "2"),
    ("secondarycache", Kind::Index(CACHE), true, "2"),
    ("logbias", Kind::Index(LOGBIAS), true, "0"),
    ("dedup", Kind::Index(DEDUP), true, "2"),
    ("mlslabel", Kind::Text, true, "none"),
    ("sync", Kind::Index(SYNC), true, "0"),
    ("vscan", Kind::Index(ONOFF), true, "0"),
    ("nbmand", Kind::Index(ONOFF), true, "0"),
    ("acltype", Kind::Index(ACLTYPE), true, "0"),
    ("volmode", Kind::Index(VOLMODE), true, "0"),
    ("snapdev", Kind::Index(SNAPDEV), true, "0"),
];

/// Largest `recordsize` (OpenZFS 2.3's `zfs_max_recordsize`); above 128 KiB
/// the pool needs `large_blocks` enabled.
pub const MAX_RECORDSIZE: u64 = 16 << 20;

fn render_stored(kind: Kind, v: &zap_value::Stored) -> PropValue {
    // zstd with a level: the level above the algorithm's 7 bits.
    if let (Kind::Index(tbl), zap_value::Stored::Num(n)) = (kind, v) {
        if tbl.iter().any(|(s, _)| *s == "zstd") && *n & 0x7f == 16 && (1..=19).contains(&(*n >> 7))
        {
            return PropValue::Text(format!("zstd-{}", *n >> 7));
        }
    }
    match (kind, v) {
        (Kind::Index(tbl), zap_value::Stored::Num(n)) => PropValue::Text(
            tbl.iter()
                .find(|(_, x)| x == n)
                .map(|(s, _)| s.to_string())
                .unwrap_or_else(|| n.to_string()),
        ),
        (Kind::Bytes, zap_value::Stored::Num(0)) => PropValue::NoLimit,
        (Kind::Bytes, zap_value::Stored::Num(n)) => PropValue::Bytes(*n),
        (_, zap_value::Stored::Num(n)) => PropValue::Num(*n),
        (_, zap_value::Stored::Text(s)) => PropValue::Text(s.clone()),
    }
}

mod zap_value {
    #[derive(Debug, Clone)]
    pub enum Stored {
        Num(u64),
        Text(String),
    }
}
use zap_value::Stored;

impl DslPool {
    /// The raw props ZAP of a DSL directory: name -> stored value.
    fn dir_props(&self, props_obj: u64) -> Result<BTreeMap<String, Stored>> {
        let mut m = BTreeMap::new();
        if props_obj == 0 {
            return Ok(m);
        }
        for e in zap::list_obj(&self.mos, props_obj)? {
            let v = if let Some(n) = e.as_u64() {
                Stored::Num(n)
            } else if let Some(s) = e.as_string() {
                Stored::Text(s)
            } else {
                continue;
            };
            m.insert(e.name_str(), v);
        }
        Ok(m)
    }

    /// Chain of (dataset name, props) from `ds`'s directory up to the root.
    fn prop_chain(&self, ds: &DatasetInfo) -> Result<Vec<(String, BTreeMap<String, Stored>)>> {
        let fsname = ds.name.split('@').next().unwrap_or(&ds.name).to_string();
        let mut chain = Vec::new();
        let mut dir_obj = ds.dir_obj;
        let mut name = fsname;
        for _ in 0..64 {
            let dir = self.dir(dir_obj)?;
            chain.push((name.clone(), self.dir_props(dir.props_zapobj)?));
            if dir.parent_obj == 0 {
                return Ok(chain);
            }
            dir_obj = dir.parent_obj;
            name = match name.rsplit_once('/') {
                Some((p, _)) => p.to_string(),
                None => return Ok(chain),
            };
        }
        Err(Error::corrupt(
            "DSL directory tree",
            "parent chain too long (loop?)",
        ))
    }

    /// One native or user property with its source.
    fn resolve(
        &self,
        chain: &[(String, BTreeMap<String, Stored>)],
        name: &str,
        inheritable: bool,
    ) -> Option<(Stored, PropSource)> {
        for (i, (dsname, props)) in chain.iter().enumerate() {
            if i > 0 && !inheritable {
                break;
            }
            if let Some(v) = props.get(name) {
                let src = if i == 0 {
                    PropSource::Local
                } else {
                    PropSource::Inherited(dsname.clone())
                };
                return Some((v.clone(), src));
            }
        }
        None
    }

    /// Every property of a dataset, in `zfs get all` order: (name, value, source).
    pub fn properties(
        &self,
        ds: &DatasetInfo,
        available: u64,
    ) -> Result<Vec<(String, PropValue, PropSource)>> {
        let chain = self.prop_chain(ds)?;
        let mut out: Vec<(String, PropValue, PropSource)> = Vec::new();
        let n = PropSource::None;
        let d = &ds.ds;
        let dir = &ds.dir;
        // The objset block is never encrypted: its type reads without a key.
        let os_type = if ds.ds.bp.is_hole() {
            2
        } else {
            Objset::open(self.pool.clone(), &ds.ds.bp)
                .map(|o| o.phys.os_type)
                .unwrap_or(2)
        };
        let typ = if ds.is_snapshot {
            "snapshot"
        } else if os_type == 3 {
            "volume"
        } else {
            "filesystem"
        };
        out.push(("type".into(), PropValue::Text(typ.into()), n.clone()));
        out.push((
            "creation".into(),
            PropValue::Time(d.creation_time),
            n.clone(),
        ));
        let used = if ds.is_snapshot {
            d.unique_bytes
        } else {
            dir.used_bytes
        };
        out.push(("used".into(), PropValue::Bytes(used), n.clone()));
        if !ds.is_snapshot {
            out.push(("available".into(), PropValue::Bytes(available), n.clone()));
        }
        out.push((
            "referenced".into(),
            PropValue::Bytes(d.referenced_bytes),
            n.clone(),
        ));
        let ratio = |u: u64, c: u64| u.saturating_mul(100).checked_div(c).unwrap_or(100);
        let cr = if ds.is_snapshot {
            ratio(d.uncompressed_bytes, d.compressed_bytes)
        } else {
            ratio(dir.uncompressed_bytes, dir.compressed_bytes)
        };
        out.push(("compressratio".into(), PropValue::Ratio(cr), n.clone()));
        if !ds.is_snapshot {
            if typ != "volume" {
                out.push(("mounted".into(), PropValue::Text("no".into()), n.clone()));
            }
            // A clone's origin ($ORIGIN, the origin of every file system
            // in a version-23 pool, is not shown).
            if dir.origin_obj != 0 {
                if let Ok(o) = self.snapshot_name(dir.origin_obj) {
                    if !o.contains("/$ORIGIN@") {
                        out.push(("origin".into(), PropValue::Text(o), n.clone()));
                    }
                }
            }
        }
        for (name, kind, inh, default) in NATIVE {
            if ds.is_snapshot
                && matches!(
                    *name,
                    "quota"
                        | "reservation"
                        | "recordsize"
                        | "mountpoint"
                        | "sharenfs"
                        | "checksum"
                        | "compression"
                        | "atime"
                        | "readonly"
                        | "zoned"
                        | "snapdir"
                        | "aclmode"
                        | "aclinherit"
                        | "canmount"
                        | "copies"
                        | "sharesmb"
                        | "refquota"
                        | "refreservation"
                        | "logbias"
                        | "dedup"
                        | "sync"
                        | "vscan"
                )
            {
                continue;
            }
            if typ == "volume" && FILESYSTEM_ONLY.contains(name) {
                continue;
            }
            if *name == "volmode" && typ != "volume" {
                continue;
            }
            if *name == "reservation" && typ == "volume" {
                // volsize and volblocksize follow reservation, from the
                // volume's own objects.
                let (stored, src) = self
                    .resolve(&chain, name, false)
                    .unwrap_or((Stored::Num(0), PropSource::Default));
                out.push((name.to_string(), render_stored(*kind, &stored), src));
                if let Ok(os) = Objset::open(self.pool.clone(), &ds.ds.bp) {
                    if let Ok(v) = os.read_zvol_info() {
                        out.push(("volsize".into(), PropValue::Bytes(v.0), PropSource::Local));
                        out.push((
                            "volblocksize".into(),
                            PropValue::Bytes(v.1),
                            PropSource::Default,
                        ));
                    }
                }
                continue;
            }
            if *name == "mountpoint" {
                let (v, src) = match self.resolve(&chain, "mountpoint", true) {
                    Some((Stored::Text(s), src)) => {
                        let v = match &src {
                            PropSource::Inherited(from) if s != "legacy" && s != "none" => {
                                let rel = ds.name.strip_prefix(from.as_str()).unwrap_or("");
                                format!("{}{}", s.trim_end_matches('/'), rel)
                            }
                            _ => s,
                        };
                        (v, src)
                    }
                    _ => (format!("/{}", ds.name), PropSource::Default),
                };
                out.push(("mountpoint".into(), PropValue::Text(v), src));
                continue;
            }
            if *name == "quota" && !ds.is_snapshot && dir.quota > 0 {
                // Kept in the directory (`dd_quota`), as ZFS keeps it.
                out.push((
                    "quota".into(),
                    PropValue::Bytes(dir.quota),
                    PropSource::Local,
                ));
                continue;
            }
            // zfs-fuse's pools show xattr through its own table.
            let legacy_xattr = *name == "xattr" && self.pool.uberblock.version < SPA_VERSION_SA;
            let (kind, default) = if legacy_xattr {
                (&Kind::Index(XATTR_LEGACY), &"1")
            } else {
                (kind, default)
            };
            let (stored, src) = self.resolve(&chain, name, *inh).unwrap_or_else(|| {
                let s = match kind {
                    Kind::Text => Stored::Text(default.to_string()),
                    _ => Stored::Num(default.parse().unwrap_or(0)),
                };
                (s, PropSource::Default)
            });
            out.push((name.to_string(), render_stored(*kind, &stored), src));
            if *name == "copies" && !ds.is_snapshot {
                // zfs shows version/ZPL props after copies; added by the caller (needs the ZPL).
            }
        }
        if !ds.is_snapshot {
            let b = &dir.used_breakdown;
            out.push(("usedbysnapshots".into(), PropValue::Bytes(b[1]), n.clone()));
            out.push(("usedbydataset".into(), PropValue::Bytes(b[0]), n.clone()));
            out.push((
                "usedbychildren".into(),
                PropValue::Bytes(b[2] + b[3]),
                n.clone(),
            ));
            out.push((
                "usedbyrefreservation".into(),
                PropValue::Bytes(b[4]),
                n.clone(),
            ));
        }
        // written: blocks born since the previous snapshot and still
        // referenced = referenced now - the previous snapshot's + what
        // died since (the dead list holds exactly those born before it).
        let prev_ref = if d.prev_snap_obj != 0 {
            self.dataset(d.prev_snap_obj)
                .map(|p| p.referenced_bytes)
                .unwrap_or(0)
        } else {
            0
        };
        // The dead list's used bytes: first in a new-format one's header,
        // second (after the count) in a bplist's.
        let dead = self
            .mos
            .dnode(d.deadlist_obj)
            .ok()
            .and_then(|dn| {
                let at = if dn.phys.object_type == crate::deadlist::DEADLIST {
                    0
                } else {
                    8
                };
                ozfs_format::bytes::u64_at(&dn.phys.bonus, at, dn.swap, "dead list").ok()
            })
            .unwrap_or(0);
        out.push((
            "written".into(),
            PropValue::Bytes((d.referenced_bytes + dead).saturating_sub(prev_ref)),
            n.clone(),
        ));
        out.push(("guid".into(), PropValue::Num(d.guid), n.clone()));
        out.push((
            "createtxg".into(),
            PropValue::Num(d.creation_txg),
            n.clone(),
        ));
        self.crypt_properties(ds, &chain, &mut out);
        // User properties (name contains ':').
        let mut seen = std::collections::BTreeSet::new();
        for (i, (dsname, props)) in chain.iter().enumerate() {
            for (k, v) in props {
                if k.contains(':') && !k.contains('$') && seen.insert(k.clone()) {
                    let src = if i == 0 {
                        PropSource::Local
                    } else {
                        PropSource::Inherited(dsname.clone())
                    };
                    let val = match v {
                        Stored::Text(s) => PropValue::Text(s.clone()),
                        Stored::Num(n) => PropValue::Num(*n),
                    };
                    out.push((k.clone(), val, src));
                }
            }
        }
        Ok(out)
    }
}

impl DslPool {
    /// The encryption properties as OpenZFS shows them: for an encrypted
    /// dataset `encryption`, `keylocation` (its root's; "none" elsewhere),
    /// `keyformat`, `pbkdf2iters`, `encryptionroot` and `keystatus` (a
    /// snapshot shows only `encryption`, `encryptionroot`, `keystatus`);
    /// on a feature-flag pool an unencrypted file system shows the first
    /// four at their defaults. Version-23 pools know none of them.
    fn crypt_properties(
        &self,
        ds: &DatasetInfo,
        chain: &[(String, BTreeMap<String, Stored>)],
        out: &mut Vec<(String, PropValue, PropSource)>,
    ) {
        let n = PropSource::None;
        let text = |s: &str| PropValue::Text(s.to_string());
        match self.crypt_props(ds) {
            Ok(Some(c)) => {
                out.push(("encryption".into(), text(c.suite.name()), n.clone()));
                if !ds.is_snapshot {
                    let loc = if c.root == ds.name {
                        self.resolve(chain, "keylocation", false)
                    } else {
                        None
                    };
                    out.push(match loc {
                        Some((Stored::Text(l), src)) => {
                            ("keylocation".into(), PropValue::Text(l), src)
                        }
                        _ => ("keylocation".into(), text("none"), PropSource::Default),
                    });
                    out.push(("keyformat".into(), text(c.params.format.name()), n.clone()));
                    let src = if c.params.iters == 0 {
                        PropSource::Default
                    } else {
                        n.clone()
                    };
                    out.push(("pbkdf2iters".into(), PropValue::Num(c.params.iters), src));
                }
                out.push(("encryptionroot".into(), text(&c.root), n.clone()));
                let status = if c.available {
                    "available"
                } else {
                    "unavailable"
                };
                out.push(("keystatus".into(), text(status), n));
            }
            Ok(None) if self.pool.uberblock.version >= 5000 => {
                let d = PropSource::Default;
                out.push(("encryption".into(), text("off"), d.clone()));
                if !ds.is_snapshot {
                    out.push(("keylocation".into(), text("none"), d.clone()));
                    out.push(("keyformat".into(), text("none"), d.clone()));
                    out.push(("pbkdf2iters".into(), PropValue::Num(0), d));
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("ozfs: '{}': encryption properties not read: {e}", ds.name),
        }
    }
}

/// Value `s` of `name` as a pool of `version` stores it: `xattr=on` or
/// `sa` (2) is the xattr directory (1) in pools before system attributes,
/// where zfs-fuse reads `on` as 1.
pub fn for_pool_version(
    version: u64,
    name: &str,
    s: &crate::create::PropSetting,
) -> crate::create::PropSetting {
    match s {
        crate::create::PropSetting::Num(2) if name == "xattr" && version < SPA_VERSION_SA => {
            crate::create::PropSetting::Num(1)
        }
        _ => s.clone(),
    }
}

/// Whether pool `w` can hold property value `s` of `name`: compression
/// and checksum algorithms newer than pool version 23 need their feature
/// (lz4 active; sha512, skein, edonr and blake3 are activated per dataset,
/// which ozfs does not do yet). Without this a version-23 pool would get
/// blocks zfs-fuse cannot read.
pub fn check_for_pool(
    w: &crate::sync::PoolWriter,
    name: &str,
    s: &crate::create::PropSetting,
) -> Result<()> {
    let crate::create::PropSetting::Num(n) = s else {
        return Ok(());
    };
    use ozfs_format::types::{cksum, comp};
    if name == "recordsize" && *n > ozfs_format::blkptr::SPA_OLD_MAXBLOCKSIZE {
        return match crate::features::refcount(w, crate::features::LARGE_BLOCKS)? {
            Some(_) => Ok(()),
            None => Err(Error::Invalid(format!(
                "cannot set recordsize={}: pool '{}' does not have feature large_blocks enabled",
                nicenum(*n),
                w.pool.name
            ))),
        };
    }
    // A compression value carries a level above its 7 algorithm bits, a
    // dedup value the verify flag above its checksum.
    let raw = *n;
    let n = match name {
        "compression" => *n & 0x7f,
        "dedup" => *n & 0xff,
        _ => *n,
    };
    if name == "dedup" && n != cksum::OFF as u64 && w.version < crate::ddt::SPA_VERSION_DEDUP {
        return Err(Error::Invalid(format!(
            "cannot set dedup: pool '{}' is version {} (dedup needs version {})",
            w.pool.name,
            w.version,
            crate::ddt::SPA_VERSION_DEDUP
        )));
    }
    let Ok(v) = u8::try_from(n) else {
        return Ok(());
    };
    let feature = match (name, v) {
        ("compression", comp::LZ4) => crate::features::LZ4,
        ("compression", comp::ZSTD) => crate::features::ZSTD,
        ("checksum", cksum::SHA512) => "org.illumos:sha512",
        ("checksum", cksum::SKEIN) => "org.illumos:skein",
        ("checksum", cksum::EDONR) => "org.illumos:edonr",
        ("checksum" | "dedup", cksum::BLAKE3) => "org.openzfs:blake3",
        ("dedup", cksum::SHA512) => "org.illumos:sha512",
        ("dedup", cksum::SKEIN) => "org.illumos:skein",
        ("dedup", cksum::EDONR) => "org.illumos:edonr",
        _ => return Ok(()),
    };
    let value = index_name(name, if name == "dedup" { raw } else { n }).unwrap_or("?");
    let short = crate::features::feature(feature).map_or(feature, |f| f.name);
    match crate::features::refcount(w, feature)? {
        None => Err(Error::Invalid(format!(
            "cannot set {name}={value}: pool '{}' does not have feature {short} enabled \
             (pool version {}; 'zpool upgrade' enables it, and zfs-fuse no longer imports the pool then)",
            w.pool.name, w.version
        ))),
        Some(c) if c > 0 && short == "lz4_compress" => Ok(()),
        Some(_) if short == "lz4_compress" => Err(Error::Invalid(format!(
            "cannot set {name}={value}: feature lz4_compress is enabled but not active in pool '{}'",
            w.pool.name
        ))),
        // The dataset lists the feature once a block using it is born there.
        Some(_) => Ok(()),
    }
}

/// Give the pool a checksum salt if it has none (OpenZFS makes one with
/// every pool; pools ozfs made before did not): 32 random bytes in the
/// MOS object directory (`org.illumos:checksum_salt`), keying skein,
/// edon-r and blake3 from this txg on.
pub fn ensure_checksum_salt(w: &mut crate::sync::PoolWriter) -> Result<()> {
    use ozfs_codec::checksum::SALT_ENTRY;
    // The MOS of the open txg decides: a salt known in memory from a txg
    // that was never committed is written again (the same bytes).
    if ozfs_dmu::zap_tx::lookup(&w.mos, 1, SALT_ENTRY.as_bytes())?.is_some() {
        return Ok(());
    }
    let salt = match w.pool.checksum_salt.get() {
        Some(s) => *s,
        None => {
            let mut salt = [0u8; 32];
            for c in salt.chunks_exact_mut(8) {
                c.copy_from_slice(&ozfs_dmu::tx::random_u64().to_ne_bytes());
            }
            salt
        }
    };
    let vals: Vec<u64> = salt.iter().map(|&b| b as u64).collect();
    ozfs_dmu::zap_tx::add(&mut w.mos, 1, SALT_ENTRY.as_bytes(), 1, &vals)?;
    let _ = w.pool.checksum_salt.set(salt);
    Ok(())
}

/// The name `zfs get` shows for stored index value `n` of `name`.
fn index_name(name: &str, n: u64) -> Option<&'static str> {
    let (_, kind, _, _) = NATIVE.iter().find(|(p, _, _, _)| *p == name)?;
    match kind {
        Kind::Index(tbl) => tbl.iter().find(|(_, v)| *v == n).map(|(s, _)| *s),
        _ => None,
    }
}

/// Parse `zfs set`/`-o` input into the value stored in the props ZAP.
pub fn parse_setting(name: &str, value: &str) -> Result<crate::create::PropSetting> {
    use crate::create::PropSetting;
    let bad = || {
        Error::Invalid(format!(
            "'{name}' must be one of the allowed values, not '{value}'"
        ))
    };
    if name.contains(':') {
        if value.len() > 8191 {
            return Err(Error::Invalid(format!("property '{name}' value too long")));
        }
        return Ok(PropSetting::Text(value.to_string()));
    }
    let Some((_, kind, _, _)) = NATIVE.iter().find(|(n, _, _, _)| *n == name) else {
        return Err(Error::Invalid(format!("invalid property '{name}'")));
    };
    match kind {
        Kind::Index(tbl) => {
            // zstd-N: the level above the algorithm's 7 bits
            // (`ZIO_COMPLEVEL_ZSTD`), levels 1 to 19.
            if name == "compression" {
                if let Some(n) = value
                    .strip_prefix("zstd-")
                    .and_then(|l| l.parse::<u64>().ok())
                {
                    if (1..=19).contains(&n) {
                        return Ok(PropSetting::Num(
                            ozfs_format::types::comp::ZSTD as u64 | (n << 7),
                        ));
                    }
                }
            }
            // NFSv4 ACLs have no Linux interface to serve them through.
            if name == "acltype" && value == "nfsv4" {
                return Err(Error::Unsupported {
                    what: "acltype=nfsv4".into(),
                    detail: "NFSv4 ACLs are not supported on Linux; use 'posix' or 'off'".into(),
                });
            }
            let v = if name == "compression" && value == "gzip-6" {
                "gzip"
            } else {
                value
            };
            tbl.iter()
                .find(|(s, _)| *s == v)
                .map(|(_, n)| PropSetting::Num(*n))
                .ok_or_else(bad)
        }
        Kind::Bytes => {
            if value == "none" {
                return Ok(PropSetting::Num(0));
            }
            let n = parse_size(value).ok_or_else(|| {
                Error::Invalid(format!("bad numeric value '{value}' for '{name}'"))
            })?;
            // A reservation is charged to the parent directories on disk
            // (ZFS's CHILD_RSRV space); ozfs does not keep that charge yet,
            // and a stored value nothing enforces would be a promise broken
            // silently. (`refreservation` is kept: `crate::reservation`.)
            if name == "reservation" && n != 0 {
                return Err(Error::Unsupported {
                    what: format!("{name}={value}"),
                    detail: "reservations are not supported yet".into(),
                });
            }
            if name == "recordsize"
                && (!n.is_power_of_two() || !(512..=MAX_RECORDSIZE).contains(&n))
            {
                return Err(Error::Invalid(format!(
                    "'recordsize' must be a power of 2 from 512B to 16M, not '{value}'"
                )));
            }
            Ok(PropSetting::Num(n))
        }
        Kind::Text => {
            if name == "mountpoint"
                && !(value.starts_with('/') || value == "none" || value == "legacy")
            {
                return Err(Error::Invalid(format!(
                    "'mountpoint' must be an absolute path, 'none', or 'legacy', not '{value}'"
                )));
            }
            Ok(PropSetting::Text(value.to_string()))
        }
    }
}

/// Parse `128K`, `1M`, `512`, `1.5G`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    // "1gb", "8KB": a unit letter may be followed by B, as libzfs takes it.
    let s = match s.as_bytes() {
        [.., u, b'b' | b'B'] if b"KkMmGgTt".contains(u) => &s[..s.len() - 1],
        _ => s,
    };
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        'T' | 't' => (&s[..s.len() - 1], 1 << 40),
        'B' | 'b' => (&s[..s.len() - 1], 1),
        _ => (s, 1),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    let f: f64 = num.parse().ok()?;
    if f < 0.0 || !f.is_finite() {
        return None;
    }
    Some((f * mult as f64) as u64)
}

/// A property from a replication stream's header (`props` of a file
/// system), as it is to be stored: user properties (a `:` in the name) as
/// text, settable native ones in their kind (index values must be in the
/// property's table, sizes plausible). Anything else is ignored (None).
pub fn received_setting(
    name: &str,
    value: &ozfs_format::NvValue,
) -> Option<crate::create::PropSetting> {
    use crate::create::PropSetting;
    use ozfs_format::NvValue;
    if name.contains(':') {
        return match value {
            NvValue::String(s) if name.len() <= 256 && s.len() <= 8192 => {
                Some(PropSetting::Text(s.clone()))
            }
            _ => None,
        };
    }
    let (_, kind, _, _) = NATIVE.iter().find(|(n, ..)| *n == name)?;
    match (kind, value) {
        (Kind::Text, NvValue::String(s)) if s.len() <= 4096 && !s.contains('\0') => {
            Some(PropSetting::Text(s.clone()))
        }
        (Kind::Index(table), NvValue::Uint64(v)) if table.iter().any(|(_, x)| x == v) => {
            Some(PropSetting::Num(*v))
        }
        (Kind::Bytes, NvValue::Uint64(v))
            if name != "recordsize"
                || (512..=MAX_RECORDSIZE).contains(v) && v.is_power_of_two() =>
        {
            Some(PropSetting::Num(*v))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nicenum_matches_zfs() {
        // Values and renderings as zfs list / zfs get print them.
        assert_eq!(nicenum(512), "512");
        assert_eq!(nicenum(4096), "4K");
        assert_eq!(nicenum(131072), "128K");
        assert_eq!(nicenum(1536), "1.50K");
        assert_eq!(nicenum(352 * 1024 + 100), "352K");
        assert_eq!(nicenum(95_102_976), "90.7M");
        assert_eq!(nicenum(4_304_896), "4.11M");
    }

    #[test]
    fn parse_setting_accepts_zfs_spellings() {
        use crate::create::PropSetting;
        assert!(matches!(
            parse_setting("compression", "gzip-6"),
            Ok(PropSetting::Num(10))
        ));
        assert!(matches!(
            parse_setting("compression", "zle"),
            Ok(PropSetting::Num(14))
        ));
        assert!(matches!(
            parse_setting("recordsize", "4K"),
            Ok(PropSetting::Num(4096))
        ));
        assert!(parse_setting("recordsize", "3K").is_err());
        assert!(parse_setting("compression", "bogus").is_err());
        assert!(parse_setting("mountpoint", "relative").is_err());
        assert!(matches!(
            parse_setting("user:prop", "x"),
            Ok(PropSetting::Text(_))
        ));
    }
}
