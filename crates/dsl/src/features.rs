//! Pool features (version 5000): what a pool needs from its reader and
//! writer, enabling OpenZFS's features in pools ozfs creates or upgrades,
//! and ozfs's own feature `org.ozfs:external_compression` (pre-compressed
//! blocks).
//!
//! Theory. From pool version 5000 on, what a pool needs is listed in three
//! MOS objects named in the object directory: `features_for_read` and
//! `features_for_write` map a feature's full name to a reference count
//! (non-zero: active, the pool's contents depend on it; zero: enabled, the
//! pool may start using it at any time), and `feature_descriptions` maps it
//! to a sentence shown to users of implementations that lack it. Read-only
//! compatible features live in `features_for_write`. A reader refuses a
//! pool with an active read feature it does not know; a writer also
//! refuses one with an active write feature it does not honour. Labels
//! repeat the active features flagged MOS (needed to read the MOS itself)
//! in their `features_for_read`. Once `enabled_txg` is enabled, every
//! feature enabled after it gets its txg in `feature_enabled_txg` and
//! raises `enabled_txg`'s count. Features OpenZFS flags "activate on
//! enable" start with a count of 1.
//!
//! ozfs creates feature-flag pools by default with every feature OpenZFS
//! 2.3 knows enabled ([`FEATURES`], enabled in OpenZFS's order, so the
//! objects equal what OpenZFS writes for the same choice), and `zpool
//! upgrade` turns a version-23 pool into one. It activates only what it
//! honours ([`WRITTEN_ACTIVE`]); everything else stays enabled for an
//! implementation that imports the pool to start using.
//!
//! Pre-compressed blocks cannot live in a version-23 pool (zfs-fuse would
//! import it and then fail every read of them), so the first pre-compressed
//! record written, with the user's consent, upgrades such a pool in that
//! same txg: version 5000 and `org.ozfs:external_compression` active in
//! `features_for_read`. From then on zfs-fuse refuses the pool by its
//! version and OpenZFS by the unknown active feature, instead of misreading
//! it. Its count is sticky at 1 (never decremented).
//!
//! Invariants:
//! * ozfs writes a version-5000 pool only when every active feature is in
//!   [`WRITTEN_ACTIVE`] ([`check_write`]); each of those is kept as its
//!   specification asks by the layers that write what it governs.
//! * [`Pool::external`], [`Pool::hole_birth`], [`Pool::label_features`]
//!   and [`Pool::active_features`] follow the feature objects of the MOS
//!   being read, or of the txg being built once a count changes
//!   ([`incr`], [`enable`]).
//! * A reference count never goes below zero; enabling an enabled feature
//!   changes nothing.

use crate::sync::PoolWriter;
use ozfs_dmu::{zap, zap_tx, Objset};
use ozfs_format::types::ot;
use ozfs_format::{Error, Result};
use ozfs_spa::pool::SPA_VERSION_FEATURES;
use ozfs_spa::Pool;

/// Per-dataset encryption (`com.datto:encryption`).
pub const ENCRYPTION: &str = "com.datto:encryption";
/// ozfs's feature for pre-compressed blocks.
pub const EXTERNAL_COMPRESSION: &str = "org.ozfs:external_compression";
/// What other implementations show when they refuse a pool using it.
pub const EXTERNAL_DESCRIPTION: &str =
    "Blocks compressed by a client (ozfs pre-compressed records).";

/// A feature's flags (OpenZFS's `zfeature_flags_t`): listed in
/// `features_for_write` (a reader that lacks it may still import read-only)
/// rather than `features_for_read`.
pub const RO_COMPAT: u8 = 1;
/// Needed to read the MOS itself: an active one is named in the labels'
/// `features_for_read`.
pub const MOS: u8 = 2;
/// Active from the txg it is enabled (reference count 1).
pub const ON_ENABLE: u8 = 4;
/// Counted per dataset: each dataset using it names it in its own ZAP.
pub const PER_DATASET: u8 = 8;

/// One pool feature as OpenZFS 2.3 registers it.
#[derive(Debug)]
pub struct Feature {
    /// Short name (`zpool get feature@NAME`).
    pub name: &'static str,
    /// Full name, `<vendor>:<name>`: the key in the MOS feature objects.
    pub guid: &'static str,
    /// What `feature_descriptions` stores for it.
    pub desc: &'static str,
    pub flags: u8,
    /// Features enabled with it (before it).
    pub deps: &'static [&'static str],
}

/// The features OpenZFS 2.3 knows, in the order `zpool get all` lists them
/// (its `spa_feature_t` order, which is also the order `zpool create`
/// enables them in).
pub static FEATURES: [Feature; 44] = [
    Feature {
        name: "async_destroy",
        guid: "com.delphix:async_destroy",
        desc: "Destroy filesystems asynchronously.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "empty_bpobj",
        guid: "com.delphix:empty_bpobj",
        desc: "Snapshots use less space.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "lz4_compress",
        guid: "org.illumos:lz4_compress",
        desc: "LZ4 compression algorithm support.",
        flags: ON_ENABLE,
        deps: &[],
    },
    Feature {
        name: "multi_vdev_crash_dump",
        guid: "com.joyent:multi_vdev_crash_dump",
        desc: "Crash dumps to multiple vdev pools.",
        flags: 0,
        deps: &[],
    },
    Feature {
        name: "spacemap_histogram",
        guid: "com.delphix:spacemap_histogram",
        desc: "Spacemaps maintain space histograms.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "enabled_txg",
        guid: "com.delphix:enabled_txg",
        desc: "Record txg at which a feature is enabled",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "hole_birth",
        guid: "com.delphix:hole_birth",
        desc: "Retain hole birth txg for more precise zfs send",
        flags: MOS | ON_ENABLE,
        deps: &["enabled_txg"],
    },
    Feature {
        name: "extensible_dataset",
        guid: "com.delphix:extensible_dataset",
        desc: "Enhanced dataset functionality, used by other features.",
        flags: 0,
        deps: &[],
    },
    Feature {
        name: "embedded_data",
        guid: "com.delphix:embedded_data",
        desc: "Blocks which compress very well use even less space.",
        flags: MOS | ON_ENABLE,
        deps: &[],
    },
    Feature {
        name: "bookmarks",
        guid: "com.delphix:bookmarks",
        desc: "\"zfs bookmark\" command",
        flags: RO_COMPAT,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "filesystem_limits",
        guid: "com.joyent:filesystem_limits",
        desc: "Filesystem and snapshot limits.",
        flags: RO_COMPAT,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "large_blocks",
        guid: "org.open-zfs:large_blocks",
        desc: "Support for blocks larger than 128KB.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "large_dnode",
        guid: "org.zfsonlinux:large_dnode",
        desc: "Variable on-disk size of dnodes.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "sha512",
        guid: "org.illumos:sha512",
        desc: "SHA-512/256 hash algorithm.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "skein",
        guid: "org.illumos:skein",
        desc: "Skein hash algorithm.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "edonr",
        guid: "org.illumos:edonr",
        desc: "Edon-R hash algorithm.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "userobj_accounting",
        guid: "org.zfsonlinux:userobj_accounting",
        desc: "User/Group object accounting.",
        flags: RO_COMPAT | PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "encryption",
        guid: "com.datto:encryption",
        desc: "Support for dataset level encryption",
        flags: PER_DATASET,
        deps: &["extensible_dataset", "bookmark_v2"],
    },
    Feature {
        name: "project_quota",
        guid: "org.zfsonlinux:project_quota",
        desc: "space/object accounting based on project ID.",
        flags: RO_COMPAT | PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "device_removal",
        guid: "com.delphix:device_removal",
        desc: "Top-level vdevs can be removed, reducing logical pool size.",
        flags: MOS,
        deps: &[],
    },
    Feature {
        name: "obsolete_counts",
        guid: "com.delphix:obsolete_counts",
        desc: "Reduce memory used by removed devices when their blocks are freed or remapped.",
        flags: RO_COMPAT,
        deps: &["extensible_dataset", "device_removal"],
    },
    Feature {
        name: "zpool_checkpoint",
        guid: "com.delphix:zpool_checkpoint",
        desc: "Pool state can be checkpointed, allowing rewind later.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "spacemap_v2",
        guid: "com.delphix:spacemap_v2",
        desc: "Space maps representing large segments are more efficient.",
        flags: RO_COMPAT | ON_ENABLE,
        deps: &[],
    },
    Feature {
        name: "allocation_classes",
        guid: "org.zfsonlinux:allocation_classes",
        desc: "Support for separate allocation classes.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "resilver_defer",
        guid: "com.datto:resilver_defer",
        desc: "Support for deferring new resilvers when one is already running.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "bookmark_v2",
        guid: "com.datto:bookmark_v2",
        desc: "Support for larger bookmarks",
        flags: 0,
        deps: &["extensible_dataset", "bookmarks"],
    },
    Feature {
        name: "redaction_bookmarks",
        guid: "com.delphix:redaction_bookmarks",
        desc: "Support for bookmarks which store redaction lists for zfs redacted send/recv.",
        flags: 0,
        deps: &["bookmark_v2", "extensible_dataset", "bookmarks"],
    },
    Feature {
        name: "redacted_datasets",
        guid: "com.delphix:redacted_datasets",
        desc: "Support for redacted datasets, produced by receiving a redacted zfs send stream.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "bookmark_written",
        guid: "com.delphix:bookmark_written",
        desc: "Additional accounting, enabling the written#<bookmark> property (space written since a bookmark), and estimates of send stream sizes for incrementals from bookmarks.",
        flags: 0,
        deps: &["bookmark_v2", "extensible_dataset", "bookmarks"],
    },
    Feature {
        name: "log_spacemap",
        guid: "com.delphix:log_spacemap",
        desc: "Log metaslab changes on a single spacemap and flush them periodically.",
        flags: RO_COMPAT,
        deps: &["spacemap_v2"],
    },
    Feature {
        name: "livelist",
        guid: "com.delphix:livelist",
        desc: "Improved clone deletion performance.",
        flags: RO_COMPAT,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "device_rebuild",
        guid: "org.openzfs:device_rebuild",
        desc: "Support for sequential mirror/dRAID device rebuilds",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "zstd_compress",
        guid: "org.freebsd:zstd_compress",
        desc: "zstd compression algorithm support.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "draid",
        guid: "org.openzfs:draid",
        desc: "Support for distributed spare RAID",
        flags: MOS,
        deps: &[],
    },
    Feature {
        name: "zilsaxattr",
        guid: "org.openzfs:zilsaxattr",
        desc: "Support for xattr=sa extended attribute logging in ZIL.",
        flags: RO_COMPAT | PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "head_errlog",
        guid: "com.delphix:head_errlog",
        desc: "Support for per-dataset on-disk error logs.",
        flags: ON_ENABLE,
        deps: &[],
    },
    Feature {
        name: "blake3",
        guid: "org.openzfs:blake3",
        desc: "BLAKE3 hash algorithm.",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "block_cloning",
        guid: "com.fudosecurity:block_cloning",
        desc: "Support for block cloning via Block Reference Table.",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "vdev_zaps_v2",
        guid: "com.klarasystems:vdev_zaps_v2",
        desc: "Support for root vdev ZAP.",
        flags: MOS,
        deps: &[],
    },
    Feature {
        name: "redaction_list_spill",
        guid: "com.delphix:redaction_list_spill",
        desc: "Support for increased number of redaction_snapshot arguments in zfs redact.",
        flags: 0,
        deps: &["redaction_bookmarks"],
    },
    Feature {
        name: "raidz_expansion",
        guid: "org.openzfs:raidz_expansion",
        desc: "Support for raidz expansion",
        flags: MOS,
        deps: &[],
    },
    Feature {
        name: "fast_dedup",
        guid: "com.klarasystems:fast_dedup",
        desc: "Support for advanced deduplication",
        flags: RO_COMPAT,
        deps: &[],
    },
    Feature {
        name: "longname",
        guid: "org.zfsonlinux:longname",
        desc: "support filename up to 1024 bytes",
        flags: PER_DATASET,
        deps: &["extensible_dataset"],
    },
    Feature {
        name: "large_microzap",
        guid: "com.klarasystems:large_microzap",
        desc: "Support for microzaps larger than 128KB.",
        flags: RO_COMPAT | PER_DATASET,
        deps: &["extensible_dataset", "large_blocks"],
    },
];

/// The feature named `name` (short or full name).
pub fn feature(name: &str) -> Option<&'static Feature> {
    FEATURES.iter().find(|f| f.name == name || f.guid == name)
}

/// Every feature a pool names in `features_for_read` and
/// `features_for_write`, with its reference count (0: enabled, not
/// active). Empty for a pool without features.
pub fn enabled(mos: &Objset) -> Result<Vec<(String, u64)>> {
    let mut v = entries(mos, "features_for_read")?;
    v.extend(entries(mos, "features_for_write")?);
    Ok(v)
}

/// The entries of one MOS feature object: (name, reference count).
fn entries(mos: &Objset, which: &str) -> Result<Vec<(String, u64)>> {
    let Some(obj) = zap::lookup_obj(mos, 1, which)?.and_then(|e| e.as_u64()) else {
        return Ok(Vec::new());
    };
    zap::list_obj(mos, obj)
        .map_err(|e| e.context(&format!("MOS {which}")))?
        .into_iter()
        .map(|e| {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let count = e.as_u64().ok_or_else(|| {
                Error::corrupt(
                    format!("MOS {which}"),
                    format!("entry '{name}' is not one integer"),
                )
            })?;
            Ok((name, count))
        })
        .collect()
}

/// `feature@NAME` rows as `zpool get` shows them: OpenZFS's features in
/// its order (`disabled`, `enabled` or `active`), then any other feature
/// the pool names, under its full name.
pub fn states(mos: &Objset) -> Result<Vec<(String, &'static str)>> {
    let en = enabled(mos)?;
    let state = |count: u64| if count > 0 { "active" } else { "enabled" };
    // Matched by full name (GUID): another vendor's feature of the same
    // short name is listed apart, by its own name.
    let mut out: Vec<(String, &'static str)> = FEATURES
        .iter()
        .map(|f| {
            let st = en
                .iter()
                .find(|(n, _)| n == f.guid)
                .map_or("disabled", |(_, c)| state(*c));
            (f.name.to_string(), st)
        })
        .collect();
    for (n, c) in &en {
        if !FEATURES.iter().any(|f| f.guid == n) {
            out.push((n.clone(), state(*c)));
        }
    }
    Ok(out)
}

/// The active features (reference count > 0) of one of the MOS feature
/// objects: (name, count). Empty for a pool without features.
pub fn active(mos: &Objset, which: &str) -> Result<Vec<(String, u64)>> {
    Ok(entries(mos, which)?
        .into_iter()
        .filter(|(_, c)| *c > 0)
        .collect())
}

/// Check a pool's features before reading it; note what the active ones
/// change for readers and writers ([`Pool::external`], [`Pool::hole_birth`],
/// [`Pool::label_features`]).
///
/// The label's `features_for_read` (the features the MOS itself needs) is
/// checked when the pool is opened; the MOS list of an OpenZFS pool names
/// features (per-dataset error logs, for one) that do not change what ozfs
/// reads.
pub fn check_read(pool: &Pool, mos: &Objset) -> Result<()> {
    if pool.uberblock.version < SPA_VERSION_FEATURES {
        return Ok(());
    }
    let mut all = active(mos, "features_for_read")?;
    all.extend(active(mos, "features_for_write")?);
    note_active(pool, all.iter().map(|(n, _)| n.as_str()));
    Ok(())
}

/// Record on the pool what its active features (full names) change.
fn note_active<'a>(pool: &Pool, names: impl Iterator<Item = &'a str>) {
    let names: Vec<&str> = names.collect();
    let has = |g: &str| names.contains(&g);
    pool.external.store(
        has(EXTERNAL_COMPRESSION),
        std::sync::atomic::Ordering::Relaxed,
    );
    pool.hole_birth
        .store(has(HOLE_BIRTH), std::sync::atomic::Ordering::Relaxed);
    let label: Vec<String> = FEATURES
        .iter()
        .filter(|f| f.flags & MOS != 0 && has(f.guid))
        .map(|f| f.guid.to_string())
        .collect();
    if let Ok(mut l) = pool.label_features.lock() {
        *l = label;
    }
    if let Ok(mut a) = pool.active_features.lock() {
        *a = names.iter().map(|s| s.to_string()).collect();
    }
}

/// `com.delphix:hole_birth`.
pub const HOLE_BIRTH: &str = "com.delphix:hole_birth";
/// `org.illumos:lz4_compress`: `compression=on` means lz4.
pub const LZ4: &str = "org.illumos:lz4_compress";
/// `com.delphix:enabled_txg`: the txg each feature was enabled in is kept.
pub const ENABLED_TXG: &str = "com.delphix:enabled_txg";
/// `com.delphix:extensible_dataset`: counts the dataset objects that are
/// ZAPs (with their `dsl_dataset_phys` still in the bonus).
pub const EXTENSIBLE_DATASET: &str = "com.delphix:extensible_dataset";
/// `com.delphix:spacemap_histogram`: space maps carry a histogram of free
/// segments; counts every space map made with one.
pub const SPACEMAP_HISTOGRAM: &str = "com.delphix:spacemap_histogram";
/// `com.delphix:log_spacemap`: metaslab changes logged pool-wide first.
pub const LOG_SPACEMAP: &str = "com.delphix:log_spacemap";
/// `com.klarasystems:vdev_zaps_v2`: the root vdev has a ZAP too; the MOS
/// config names every vdev's ZAP, and ozfs carries those names over.
pub const VDEV_ZAPS_V2: &str = "com.klarasystems:vdev_zaps_v2";
/// `com.delphix:empty_bpobj`: dead list entries with nothing in them
/// share one empty bpobj, which it counts (`crate::deadlist`).
pub const EMPTY_BPOBJ: &str = "com.delphix:empty_bpobj";
/// `org.zfsonlinux:userobj_accounting`: per dataset, objects counted per
/// user and group.
pub const USEROBJ_ACCOUNTING: &str = "org.zfsonlinux:userobj_accounting";
/// `org.zfsonlinux:project_quota`: per dataset, space and objects
/// accounted per project.
pub const PROJECT_QUOTA: &str = "org.zfsonlinux:project_quota";
/// `org.open-zfs:large_blocks`: per dataset, blocks over 128 KiB.
pub const LARGE_BLOCKS: &str = "org.open-zfs:large_blocks";
/// `com.klarasystems:large_microzap`: per dataset, micro ZAPs over 128 KiB.
pub const LARGE_MICROZAP: &str = "com.klarasystems:large_microzap";
/// `org.freebsd:zstd_compress`: per dataset, zstd-compressed blocks.
pub const ZSTD: &str = "org.freebsd:zstd_compress";
/// Per-dataset checksum features: blocks with that checksum.
pub const SHA512: &str = "org.illumos:sha512";
pub const SKEIN: &str = "org.illumos:skein";
pub const EDONR: &str = "org.illumos:edonr";
pub const BLAKE3: &str = "org.openzfs:blake3";
/// `org.zfsonlinux:allocation_classes`: special, dedup and log vdevs;
/// ozfs writes only to the normal class (`MetaslabGroup::allocatable`).
pub const ALLOCATION_CLASSES: &str = "org.zfsonlinux:allocation_classes";
/// `org.openzfs:zilsaxattr`: per dataset, its intent log may hold SA xattr
/// records. ozfs writes no intent log and writes no file system whose log
/// holds records (`PoolWriter::fs_tx`), so it is written as any other.
pub const ZILSAXATTR: &str = "org.openzfs:zilsaxattr";
/// `org.zfsonlinux:longname`: per dataset, names over 255 bytes.
pub const LONGNAME: &str = "org.zfsonlinux:longname";
/// `org.zfsonlinux:large_dnode`: per dataset, dnodes of several slots.
pub const LARGE_DNODE: &str = "org.zfsonlinux:large_dnode";

/// The per-dataset features active on dataset object `ds_obj`: the
/// feature guids its ZAP lists (none while it is no ZAP).
pub fn dataset_features(w: &PoolWriter, ds_obj: u64) -> Result<Vec<String>> {
    if w.mos.dnode(ds_obj)?.phys.object_type != ot::ZAP_METADATA_NEW {
        return Ok(Vec::new());
    }
    Ok(zap_tx::list(&w.mos, ds_obj)?
        .into_iter()
        .map(|e| e.name_str())
        .filter(|n| feature(n).is_some_and(|f| f.flags & PER_DATASET != 0))
        .collect())
}

/// Whether committed dataset object `ds_obj` of `mos` lists per-dataset
/// feature `guid` (what a reader such as `zfs send` asks).
pub fn listed_on_dataset(mos: &Objset, ds_obj: u64, guid: &str) -> Result<bool> {
    Ok(mos.dnode(ds_obj)?.phys.object_type == ot::ZAP_METADATA_NEW
        && zap::lookup_obj(mos, ds_obj, guid)?.is_some())
}

/// Activate per-dataset feature `guid` on dataset object `ds_obj`, as
/// OpenZFS's `dsl_dataset_activate_feature`: the object becomes a ZAP
/// (counted by `extensible_dataset`), lists the feature (value 0), and
/// the feature's count rises by one. Already active: nothing changes. The
/// pool must have the feature enabled.
pub fn activate_on_dataset(w: &mut PoolWriter, ds_obj: u64, guid: &str) -> Result<()> {
    if feature(guid).is_none_or(|f| f.flags & PER_DATASET == 0) {
        return Err(Error::Invalid(format!("{guid} is no per-dataset feature")));
    }
    if refcount(w, guid)?.is_none() {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!("it does not have feature {guid} enabled"),
        ));
    }
    zapify_dataset(w, ds_obj)?;
    if zap_tx::lookup(&w.mos, ds_obj, guid.as_bytes())?.is_some() {
        return Ok(());
    }
    zap_tx::add(&mut w.mos, ds_obj, guid.as_bytes(), 8, &[0])?;
    incr(w, guid, 1)
}

/// Make dataset object `ds_obj` a ZAP (OpenZFS's `dmu_object_zapify`):
/// an empty micro ZAP in its block, the new type, `extensible_dataset`
/// counted. The dataset itself stays in the bonus.
pub(crate) fn zapify_dataset(w: &mut PoolWriter, ds_obj: u64) -> Result<()> {
    let mut dn = w.mos.dnode(ds_obj)?.phys;
    if dn.object_type == ot::ZAP_METADATA_NEW {
        return Ok(());
    }
    if refcount(w, EXTENSIBLE_DATASET)?.is_none() {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            format!("it does not have feature {EXTENSIBLE_DATASET} enabled"),
        ));
    }
    let z = ozfs_format::zap_write::ZapObject::new_micro(ozfs_dmu::tx::random_u64() | 1, 0);
    let b0 = z
        .blocks
        .get(&0)
        .cloned()
        .ok_or_else(|| Error::Invalid("an empty micro ZAP without its block".into()))?;
    dn.object_type = ot::ZAP_METADATA_NEW;
    dn.datablkszsec = (z.block_size / 512) as u16;
    w.mos.set_dnode(ds_obj, dn);
    w.mos.write_block(ds_obj, 0, b0);
    incr(w, EXTENSIBLE_DATASET, 1)
}

/// Before dataset object `ds_obj` is freed: its per-dataset features and
/// its `extensible_dataset` count are given back.
pub fn release_dataset(w: &mut PoolWriter, ds_obj: u64) -> Result<()> {
    if w.mos.dnode(ds_obj)?.phys.object_type != ot::ZAP_METADATA_NEW {
        return Ok(());
    }
    for g in dataset_features(w, ds_obj)? {
        incr(w, &g, -1)?;
    }
    incr(w, EXTENSIBLE_DATASET, -1)
}

/// A new dataset (`to`, a snapshot or a clone) gets the per-dataset
/// features active on the one it comes from (`from`), as in OpenZFS.
pub fn inherit_dataset_features(w: &mut PoolWriter, from: u64, to: u64) -> Result<()> {
    for g in dataset_features(w, from)? {
        activate_on_dataset(w, to, &g)?;
    }
    Ok(())
}

/// Dataset `to` lists exactly the per-dataset features of `from` (a clone
/// takes its origin snapshot's, as `dsl_dataset_create_sync_dd`, not those
/// of the empty objset it was first made with).
pub fn replace_dataset_features(w: &mut PoolWriter, from: u64, to: u64) -> Result<()> {
    let want = dataset_features(w, from)?;
    for g in dataset_features(w, to)? {
        if !want.contains(&g) {
            zap_tx::remove(&mut w.mos, to, g.as_bytes())?;
            incr(w, &g, -1)?;
        }
    }
    inherit_dataset_features(w, from, to)
}

/// Active features ozfs writes as their specification asks, so a pool
/// whose active features are all here is opened read-write:
/// * `lz4_compress`: lz4 blocks are written and read; `compression=on`
///   means lz4;
/// * `hole_birth`: holes keep their birth txg ([`Pool::hole_birth`]);
/// * `embedded_data`, `spacemap_v2`: only allow more forms, which ozfs
///   reads; nothing it writes must change;
/// * `head_errlog`: the format of persistent error logs, which ozfs never
///   writes;
/// * `enabled_txg`: kept by [`enable`];
/// * `extensible_dataset`, `large_dnode`: datasets that received dnodes of
///   several slots list the feature ([`activate_on_dataset`]); snapshots
///   and clones inherit it, destroying gives it back; the DMU keeps such
///   dnodes whole and allocates around them;
/// * ozfs's own `external_compression`;
/// * `spacemap_histogram` (new space maps carry and keep the histogram),
///   `log_spacemap` (logs folded into the metaslabs' maps at the first
///   sync), `vdev_zaps_v2` (the vdev ZAP names carried over);
/// * `empty_bpobj` (new-format dead lists, `crate::deadlist`);
/// * `userobj_accounting`, `project_quota` (the DMU's accounting);
/// * `large_blocks`, `zstd_compress`, `sha512`, `skein`, `edonr`,
///   `blake3`: written as their blocks ask, and listed on the datasets
///   where such blocks are born (`crate::sync::block_features`);
/// * `large_microzap`: directories stay micro ZAPs up to
///   `OZFS_ZAP_MICRO_MAX_SIZE` (at most 1 MiB) where it is enabled, and
///   the datasets holding such a block list it;
/// * `longname` (long names looked up and removed, never made),
///   `zilsaxattr` (ozfs writes no intent log and no file system whose log
///   holds records), `allocation_classes` (new blocks in the normal class
///   only);
/// * `encryption`: an encrypted dataset's objset is written with its key
///   loaded, every block sealed (`PoolWriter::fs_tx` opens it keyed and
///   refuses it without the key, naming the root); new encrypted file
///   systems get key objects and list the feature; snapshots get an IV set
///   guid, clones share their origin's key object, and destroying one
///   releases it as OpenZFS does (`crate::crypt`); promoting an encrypted
///   clone is refused;
/// * `block_cloning`: frees of cloned blocks take a reference in the
///   block reference tables instead of freeing (`ozfs_spa::brt`,
///   `crate::brt`); ozfs makes no clones;
/// * `raidz_expansion`: an expanded RAID-Z vdev is written at its current
///   width and charged at its original one (`Pool::deflate_ratio`), its
///   config's expansion txgs kept; one still being expanded is refused
///   at open;
/// * `device_removal`, `obsolete_counts`: nothing is allocated on a
///   removed vdev; a free of a block still addressed on one frees its copy
///   through the mapping and appends the range to the vdev's obsolete
///   space map (`crate::obsolete`); removals, condenses and remaps
///   OpenZFS left unfinished keep the pool read-only;
/// * `draid`: a dRAID vdev is written in whole stripes with zero skip
///   sectors, its metaslabs trimmed to whole stripes as OpenZFS trims them
///   (`ozfs_spa::metaslab::Geometry`, `Vdev::draid_write`); a distributed
///   spare's space is written through the spare in use;
/// * `fast_dedup`: dedup tables with flat entries in a per-checksum
///   directory, written straight into their class objects every txg, the
///   journals left empty (`crate::ddt`); a journal holding entries keeps
///   the pool from being written.
pub const WRITTEN_ACTIVE: &[&str] = &[
    LZ4,
    EXTENSIBLE_DATASET,
    LARGE_DNODE,
    HOLE_BIRTH,
    "com.delphix:embedded_data",
    "com.delphix:spacemap_v2",
    "com.delphix:head_errlog",
    ENABLED_TXG,
    EXTERNAL_COMPRESSION,
    SPACEMAP_HISTOGRAM,
    LOG_SPACEMAP,
    VDEV_ZAPS_V2,
    USEROBJ_ACCOUNTING,
    PROJECT_QUOTA,
    EMPTY_BPOBJ,
    LARGE_BLOCKS,
    LARGE_MICROZAP,
    ZSTD,
    SHA512,
    SKEIN,
    EDONR,
    BLAKE3,
    LONGNAME,
    ZILSAXATTR,
    ALLOCATION_CLASSES,
    ENCRYPTION,
    crate::brt::BLOCK_CLONING,
    ozfs_spa::pool::RAIDZ_EXPANSION,
    "com.delphix:device_removal",
    crate::obsolete::OBSOLETE_COUNTS,
    ozfs_spa::pool::DRAID,
    ozfs_spa::ddt::FAST_DEDUP,
];

/// Check a pool's features before writing it (see the module invariants).
pub fn check_write(pool: &Pool, mos: &Objset) -> Result<()> {
    let v = pool.uberblock.version;
    // A RAID-Z vdev whose expansion is still reflowing (any of them) is
    // not written: its blocks are moving.
    if let Some(t) = pool
        .root
        .children
        .iter()
        .find(|t| t.config.contains("raidz_expanding"))
    {
        return Err(Error::unsupported(
            format!("pool '{}'", pool.name),
            format!(
                "writing it while RAID-Z vdev {} is being expanded (its reflow has not \
                 finished); import it read-only, or with OpenZFS until it finishes",
                t.id
            ),
        ));
    }
    // Versions 24 to 28 are written in their own forms, as feature-flag
    // pools are without the features: system attributes (ZPL 5) from 24,
    // new-format dead lists (each entry its own bpobj: no shared empty
    // one), `dd_clones` and `$FREE` from 26.
    if v < SPA_VERSION_FEATURES {
        return Ok(());
    }
    let mut other: Vec<String> = active(mos, "features_for_write")?
        .into_iter()
        .chain(active(mos, "features_for_read")?)
        .map(|(n, _)| n)
        .filter(|n| !WRITTEN_ACTIVE.contains(&n.as_str()))
        .collect();
    other.sort();
    if !other.is_empty() {
        return Err(Error::unsupported(
            format!("pool '{}'", pool.name),
            format!(
                "writing a pool with {} active (ozfs reads such pools but does not write them \
                 yet; import it with -o readonly=on)",
                other.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The MOS feature objects of a feature-flag pool: (`features_for_read`,
/// `features_for_write`, `feature_descriptions`), made (empty) and named
/// in the object directory if the pool has none yet.
fn feature_objects(w: &mut PoolWriter) -> Result<(u64, u64, u64)> {
    Ok((
        linked_zap(w, "features_for_read")?,
        linked_zap(w, "features_for_write")?,
        linked_zap(w, "feature_descriptions")?,
    ))
}

/// The ZAP the MOS object directory names `name`, made (empty) and named
/// there if it has none.
fn linked_zap(w: &mut PoolWriter, name: &str) -> Result<u64> {
    if let Some(o) = zap_tx::lookup(&w.mos, 1, name.as_bytes())?.and_then(|e| e.as_u64()) {
        return Ok(o);
    }
    let o = w
        .mos
        .create_zap(ot::ZAP_METADATA_NEW, 0, Vec::new(), 0, 1)?;
    zap_tx::update(&mut w.mos, 1, name, 8, &[o])?;
    Ok(o)
}

/// A description as `feature_descriptions` stores it: the NUL-terminated
/// string as one-byte integers.
fn description_value(desc: &str) -> Vec<u64> {
    desc.bytes()
        .chain(std::iter::once(0))
        .map(u64::from)
        .collect()
}

/// The reference count of feature `guid` in the open txg (None: not
/// enabled).
pub fn refcount(w: &PoolWriter, guid: &str) -> Result<Option<u64>> {
    for which in ["features_for_read", "features_for_write"] {
        if let Some(o) = zap_tx::lookup(&w.mos, 1, which.as_bytes())?.and_then(|e| e.as_u64()) {
            if let Some(e) = zap_tx::lookup(&w.mos, o, guid.as_bytes())? {
                return Ok(e.as_u64());
            }
        }
    }
    Ok(None)
}

/// Change the reference count of enabled feature `guid` by `delta`
/// (OpenZFS's `spa_feature_incr`/`decr`); a count never goes below zero.
pub fn incr(w: &mut PoolWriter, guid: &str, delta: i64) -> Result<()> {
    let f = feature(guid);
    let (rd, wr, _) = feature_objects(w)?;
    let obj = match f {
        Some(f) if f.flags & RO_COMPAT != 0 => wr,
        _ => rd,
    };
    let Some(cur) = zap_tx::lookup(&w.mos, obj, guid.as_bytes())?.and_then(|e| e.as_u64()) else {
        return Err(Error::Invalid(format!(
            "feature {guid} is not enabled in pool '{}'",
            w.pool.name
        )));
    };
    let new = cur.saturating_add_signed(delta);
    zap_tx::update(&mut w.mos, obj, guid, 8, &[new])?;
    if (cur == 0) != (new == 0) {
        refresh(w)?;
    }
    Ok(())
}

/// Recompute what the active features change ([`note_active`]) from the
/// open txg's feature objects; the labels are rewritten at the next sync.
fn refresh(w: &mut PoolWriter) -> Result<()> {
    let mut act = Vec::new();
    for which in ["features_for_read", "features_for_write"] {
        if let Some(o) = zap_tx::lookup(&w.mos, 1, which.as_bytes())?.and_then(|e| e.as_u64()) {
            for e in zap_tx::list(&w.mos, o)? {
                if e.as_u64().unwrap_or(0) > 0 {
                    act.push(String::from_utf8_lossy(&e.name).into_owned());
                }
            }
        }
    }
    note_active(&w.pool, act.iter().map(|s| s.as_str()));
    w.config_dirty = true;
    Ok(())
}

/// Enable features (short or full names; their dependencies first) in a
/// feature-flag pool in the open txg, as `zpool create` and `zpool
/// upgrade` do: each gets its description and a reference count (1 for
/// those active from enabling, 0 for the others), and, once `enabled_txg`
/// is enabled, the txg it was enabled in. Already enabled ones are left
/// alone. Unknown names are an error and nothing changes.
pub fn enable(w: &mut PoolWriter, names: &[&str]) -> Result<()> {
    if w.version < SPA_VERSION_FEATURES {
        return Err(Error::Invalid(format!(
            "pool '{}' has version {}: features need version 5000",
            w.pool.name, w.version
        )));
    }
    // A feature-flag pool has the three objects even with nothing enabled
    // (OpenZFS refuses to open one without them).
    feature_objects(w)?;
    let mut want = Vec::new();
    for n in names {
        let f = feature(n).ok_or_else(|| Error::Invalid(format!("unknown feature '{n}'")))?;
        want.push(f);
    }
    // In OpenZFS's order (what `enabled_txg` counts depends on it).
    for f in FEATURES.iter() {
        if want.iter().any(|x| std::ptr::eq(*x, f)) {
            enable_one(w, f, 0)?;
        }
    }
    refresh(w)
}

fn enable_one(w: &mut PoolWriter, f: &'static Feature, depth: usize) -> Result<()> {
    let (rd, wr, desc) = feature_objects(w)?;
    let obj = if f.flags & RO_COMPAT != 0 { wr } else { rd };
    if zap_tx::lookup(&w.mos, obj, f.guid.as_bytes())?.is_some() {
        return Ok(());
    }
    if depth > FEATURES.len() {
        return Err(Error::Invalid(format!(
            "feature {} depends on itself",
            f.name
        )));
    }
    for d in f.deps {
        let dep = feature(d)
            .ok_or_else(|| Error::Invalid(format!("feature {} needs unknown {d}", f.name)))?;
        enable_one(w, dep, depth + 1)?;
    }
    zap_tx::update(&mut w.mos, desc, f.guid, 1, &description_value(f.desc))?;
    let initial = u64::from(f.flags & ON_ENABLE != 0);
    zap_tx::update(&mut w.mos, obj, f.guid, 8, &[initial])?;
    if zap_tx::lookup(&w.mos, wr, ENABLED_TXG.as_bytes())?.is_some() {
        let txgs = linked_zap(w, "feature_enabled_txg")?;
        let n = zap_tx::lookup(&w.mos, wr, ENABLED_TXG.as_bytes())?
            .and_then(|e| e.as_u64())
            .unwrap_or(0);
        zap_tx::update(&mut w.mos, wr, ENABLED_TXG, 8, &[n.saturating_add(1)])?;
        let txg = w.txg;
        zap_tx::update(&mut w.mos, txgs, f.guid, 8, &[txg])?;
    }
    Ok(())
}

/// Make `org.ozfs:external_compression` active in the open txg, upgrading
/// a version-23 pool to 5000 (see the module comment). Returns whether
/// this call changed the pool. The caller must have the user's consent:
/// the pool stops being importable by zfs-fuse and OpenZFS.
pub fn activate_external(w: &mut PoolWriter) -> Result<bool> {
    if w.pool.external_active() {
        return Ok(false);
    }
    let (for_read, _, descriptions) = feature_objects(w)?;
    zap_tx::update(&mut w.mos, for_read, EXTERNAL_COMPRESSION, 8, &[1])?;
    zap_tx::update(
        &mut w.mos,
        descriptions,
        EXTERNAL_COMPRESSION,
        1,
        &description_value(EXTERNAL_DESCRIPTION),
    )?;
    if w.version < SPA_VERSION_FEATURES {
        w.version = SPA_VERSION_FEATURES;
    }
    refresh(w)?;
    Ok(true)
}

/// The features `zpool create -o compatibility=SPEC` enables: `off` (or
/// empty) every feature (None), `legacy` none, otherwise the features every
/// named OpenZFS compatibility file (comma-separated) lists.
pub fn compatibility_features(spec: &str) -> Result<Option<Vec<&'static str>>> {
    match spec {
        "" | "off" => return Ok(None),
        "legacy" => return Ok(Some(Vec::new())),
        _ => {}
    }
    let mut out: Option<Vec<&'static str>> = None;
    for name in spec.split(',') {
        let (_, set) = crate::compat_table::COMPAT_SETS
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "compatibility file '{name}' is not one ozfs knows (known: off, legacy, {})",
                    crate::compat_table::COMPAT_SETS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        let set: Vec<&'static str> = set.split_whitespace().collect();
        out = Some(match out {
            None => set,
            Some(prev) => prev.into_iter().filter(|f| set.contains(f)).collect(),
        });
    }
    Ok(out)
}
