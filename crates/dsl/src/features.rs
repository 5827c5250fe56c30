//! Pool features (version 5000) as far as ozfs uses them: checking what a
//! pool needs before reading or writing it, and activating ozfs's own
//! feature `org.ozfs:external_compression` (pre-compressed blocks, issue 7).
//!
//! Theory. From pool version 5000 on, what a pool needs from its reader is
//! listed in three MOS objects named in the object directory:
//! `features_for_read` and `features_for_write` map a feature's name to a
//! reference count (non-zero: active, the pool's contents depend on it),
//! and `feature_descriptions` maps it to a sentence shown to users of
//! implementations that lack it. A reader refuses a pool with an active
//! read feature it does not know; a writer also refuses one with an active
//! write feature it does not know.
//!
//! ozfs writes pools in the version-23 layout. Pre-compressed blocks cannot
//! live in a v23 pool (zfs-fuse would import it and then fail every read of
//! them), so the first pre-compressed record written, with the user's
//! consent, upgrades the pool in that same txg: version 5000 in the
//! uberblock, labels and config, the three feature objects, and
//! `org.ozfs:external_compression` active in `features_for_read`. From then
//! on zfs-fuse refuses the pool by its version ("newer version") and OpenZFS
//! by the unknown active feature, instead of misreading it. The count is
//! sticky at 1 (never decremented), so snapshots and destroys need no
//! bookkeeping, and a pool that never used the interface is never changed.
//!
//! Invariants:
//! * A v5000 pool is written by ozfs only when the sole active feature,
//!   for read and for write, is `org.ozfs:external_compression` (a pool
//!   whose other features are enabled but inactive would expose ozfs's
//!   v23-style internals to implementations that accept it; ozfs never
//!   writes one: it activates in the txg it upgrades).
//! * [`Pool::external`](ozfs_spa::Pool::external) is set exactly when the
//!   feature is active in the MOS being read, or was activated in the txg
//!   being built.

use crate::sync::PoolWriter;
use ozfs_dmu::{zap, zap_tx, Objset};
use ozfs_format::types::ot;
use ozfs_format::{Error, Result};
use ozfs_spa::pool::SPA_VERSION_FEATURES;
use ozfs_spa::Pool;

/// ozfs's feature for pre-compressed blocks.
pub const EXTERNAL_COMPRESSION: &str = "org.ozfs:external_compression";
/// What other implementations show when they refuse a pool using it.
pub const EXTERNAL_DESCRIPTION: &str =
    "Blocks compressed by a client (ozfs pre-compressed records).";

/// Active features ozfs reads (a read-only import accepts them) but does
/// not write: removed vdevs and their mappings (`device_removal`, and the
/// obsolete counts kept beside them), and blocks shared by clones
/// (`block_cloning`: the BRT's reference counts; reading a cloned block
/// needs nothing special). A read-write import of a pool with one of them
/// active is refused, naming it.
pub const READ_ONLY_FEATURES: &[&str] = &[
    "com.delphix:device_removal",
    "com.delphix:obsolete_counts",
    "com.fudosecurity:block_cloning",
    // Expanded RAID-Z: blocks keep the width of their birth txg
    // (`ozfs_vdev::Vdev::raidz_width`); allocation on it is not written yet.
    "org.openzfs:raidz_expansion",
    // dRAID vdevs: read through `ozfs_codec::draid`; never written.
    "org.openzfs:draid",
];

/// The features OpenZFS 2.3 knows, in the order `zpool get all` lists them
/// (its `spa_feature_t` order); each one's name in the feature objects is
/// `<vendor>:<name>`.
pub const OPENZFS_FEATURES: [&str; 44] = [
    "async_destroy",
    "empty_bpobj",
    "lz4_compress",
    "multi_vdev_crash_dump",
    "spacemap_histogram",
    "enabled_txg",
    "hole_birth",
    "extensible_dataset",
    "embedded_data",
    "bookmarks",
    "filesystem_limits",
    "large_blocks",
    "large_dnode",
    "sha512",
    "skein",
    "edonr",
    "userobj_accounting",
    "encryption",
    "project_quota",
    "device_removal",
    "obsolete_counts",
    "zpool_checkpoint",
    "spacemap_v2",
    "allocation_classes",
    "resilver_defer",
    "bookmark_v2",
    "redaction_bookmarks",
    "redacted_datasets",
    "bookmark_written",
    "log_spacemap",
    "livelist",
    "device_rebuild",
    "zstd_compress",
    "draid",
    "zilsaxattr",
    "head_errlog",
    "blake3",
    "block_cloning",
    "vdev_zaps_v2",
    "redaction_list_spill",
    "raidz_expansion",
    "fast_dedup",
    "longname",
    "large_microzap",
];

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
    let short = |full: &str| full.split_once(':').map_or(full, |(_, n)| n).to_string();
    let mut out: Vec<(String, &'static str)> = OPENZFS_FEATURES
        .iter()
        .map(|f| {
            let st = en
                .iter()
                .find(|(n, _)| short(n) == *f)
                .map_or("disabled", |(_, c)| state(*c));
            (f.to_string(), st)
        })
        .collect();
    for (n, c) in &en {
        if !OPENZFS_FEATURES.contains(&short(n).as_str()) {
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

/// Check a pool's features before reading it; note whether pre-compressed
/// blocks are valid in it.
///
/// Only ozfs's own feature is acted on here: the label's
/// `features_for_read` (the features the MOS itself needs) is checked when
/// the pool is opened, and the MOS list of an OpenZFS pool names features
/// (per-dataset error logs, for one) that do not change what ozfs reads.
pub fn check_read(pool: &Pool, mos: &Objset) -> Result<()> {
    let external = pool.uberblock.version >= SPA_VERSION_FEATURES
        && active(mos, "features_for_read")?
            .iter()
            .any(|(n, _)| n == EXTERNAL_COMPRESSION);
    pool.external
        .store(external, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Check a pool's features before writing it (see the module invariants).
pub fn check_write(pool: &Pool, mos: &Objset) -> Result<()> {
    let v = pool.uberblock.version;
    // Versions 24..=28 changed on-disk structures ozfs writes in their
    // version-23 form (system attributes, dead lists as ZAPs of bpobjs):
    // writing one would leave a pool its owner cannot read.
    if v > 23 && v < SPA_VERSION_FEATURES {
        return Err(Error::unsupported(
            format!("pool '{}'", pool.name),
            format!(
                "writing a version-{v} pool (ozfs reads pool versions up to 28 and writes version 23; import it with -o readonly=on)"
            ),
        ));
    }
    if v < SPA_VERSION_FEATURES {
        return Ok(());
    }
    let mut other: Vec<String> = active(mos, "features_for_write")?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    other.extend(
        active(mos, "features_for_read")?
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n != EXTERNAL_COMPRESSION),
    );
    // Features ozfs reads but does not write yet: say so, so the user
    // knows a read-only import works.
    let read_only: Vec<&String> = other
        .iter()
        .filter(|n| READ_ONLY_FEATURES.contains(&n.as_str()))
        .collect();
    if !read_only.is_empty() {
        return Err(Error::unsupported(
            format!("pool '{}'", pool.name),
            format!(
                "writing a pool with {} active (ozfs reads such pools but does not write them \
                 yet; import it with -o readonly=on)",
                read_only
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if !other.is_empty() || !pool.external_active() {
        return Err(Error::unsupported(
            format!("pool '{}'", pool.name),
            format!(
                "writing a version-5000 pool with features {} (ozfs writes version-23 pools, \
                 and version 5000 only with {EXTERNAL_COMPRESSION} alone)",
                if other.is_empty() {
                    "none active".to_string()
                } else {
                    other.join(", ")
                }
            ),
        ));
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
    if w.version >= SPA_VERSION_FEATURES {
        return Err(Error::unsupported(
            format!("pool '{}'", w.pool.name),
            "activating features in a pool that already has version 5000",
        ));
    }
    let mk = |w: &mut PoolWriter| w.mos.create_zap(ot::ZAP_METADATA_NEW, 0, Vec::new(), 0, 1);
    let for_read = mk(w)?;
    let for_write = mk(w)?;
    let descriptions = mk(w)?;
    zap_tx::update(&mut w.mos, for_read, EXTERNAL_COMPRESSION, 8, &[1])?;
    let text: Vec<u64> = EXTERNAL_DESCRIPTION
        .bytes()
        .chain(std::iter::once(0))
        .map(u64::from)
        .collect();
    zap_tx::update(&mut w.mos, descriptions, EXTERNAL_COMPRESSION, 1, &text)?;
    zap_tx::update(&mut w.mos, 1, "features_for_read", 8, &[for_read])?;
    zap_tx::update(&mut w.mos, 1, "features_for_write", 8, &[for_write])?;
    zap_tx::update(&mut w.mos, 1, "feature_descriptions", 8, &[descriptions])?;
    w.version = SPA_VERSION_FEATURES;
    w.config_dirty = true;
    w.pool
        .external
        .store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(true)
}
