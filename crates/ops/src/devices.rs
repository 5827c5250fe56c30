//! Devices of a pool: replace, attach, detach, online, offline, add,
//! remove, clear — each a typed call that changes the pool (under its
//! writer), keeps the host's record of its devices true, and starts the
//! resilver a new or returning device needs.
//!
//! Where the writer is decides where the resilver runs: inside the daemon
//! (a [`Holder`](crate::host::Holder) holds the pool) it runs in the
//! daemon's background and the call returns at once; elsewhere this
//! process is the pool's writer and resilvers in the foreground,
//! reporting progress, before it returns.
//!
//! Invariants: the labels are synced with the new configuration before the
//! record names the new device; a record is updated only after the
//! writer's lease is given back (the holder's table is never waited for
//! while holding a writer).

use crate::error::{invalid, Error, Result};
use crate::host::{holder, writer_for, Record};
use crate::scan::{ProgressFn, ScanState};
use ozfs_dsl::scrub::ScanMode;
use ozfs_dsl::sync::PoolWriter;

/// Run `change` on the pool's writer, then update the record with `record`
/// and, when `resilver`, resilver (in the daemon's background, or here).
fn with_writer<T>(
    pool: &str,
    change: impl FnOnce(&mut PoolWriter) -> Result<T>,
    mut record: impl FnMut(&T, &mut Record),
    resilver: bool,
    progress: &ProgressFn<'_>,
) -> Result<T> {
    if ScanState::load(pool).is_some_and(|s| s.state == "scanning") && resilver {
        crate::scan::cancel_and_wait(pool);
    }
    if let Some(h) = holder() {
        let t = {
            let mut w = writer_for(pool)?;
            change(&mut w)?
        };
        h.update_record(pool, &mut |r| record(&t, r))?;
        if resilver {
            h.start_scan(pool, ScanMode::Resilver)?;
        }
        return Ok(t);
    }
    let mut rec = Record::load(pool)
        .map_err(|_| Error::NotFound(format!("cannot open '{pool}': no such pool")))?;
    let w = writer_for(pool)?;
    let cell = std::cell::RefCell::new(w);
    let t = change(&mut cell.borrow_mut())?;
    record(&t, &mut rec);
    rec.save_counters(&cell.borrow().pool)
        .map_err(|e| e.context("cannot record the change"))?;
    if resilver {
        let st = crate::scan::run_here(pool, ScanMode::Resilver, &cell, progress)?;
        cell.borrow_mut()
            .sync()
            .map_err(|e| e.context(&format!("cannot sync '{pool}'")))?;
        rec.save_counters(&cell.borrow().pool)
            .map_err(|e| e.context("cannot save counters"))?;
        // Finished only now: the labels and the record agree first.
        st.save(pool);
    }
    Ok(t)
}

/// A device path as the record keeps it: absolute, symlinks resolved.
pub fn canonical_device(path: &str) -> Result<String> {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| Error::io(format!("cannot open '{path}'"), e))
}

/// `zpool replace POOL OLD [NEW]`: NEW (absolute) takes OLD's place and
/// resilvers; a hot spare named as NEW is put beside OLD instead.
pub fn replace(pool: &str, old: &str, new: &str, progress: &ProgressFn<'_>) -> Result<()> {
    let new_s = new.to_string();
    with_writer(
        pool,
        |w| replace_in(w, old, new),
        |old_path, r| {
            if let Some(p) = old_path {
                r.devices.retain(|x| x != p);
            }
            if !r.devices.contains(&new_s) {
                r.devices.push(new_s.clone());
            }
        },
        true,
        progress,
    )
    .map(|_| ())
}

/// `zpool offline` / `zpool online` of each of `devs`; a device coming
/// back resilvers what it missed.
pub fn set_offline(
    pool: &str,
    devs: &[String],
    offline: bool,
    progress: &ProgressFn<'_>,
) -> Result<()> {
    with_writer(
        pool,
        |w| devs.iter().try_for_each(|d| set_offline_in(w, d, offline)),
        |_, _| {},
        !offline,
        progress,
    )
}

/// `zpool attach POOL DEV NEW`: NEW (absolute) becomes a mirror side of DEV
/// and resilvers.
pub fn attach(pool: &str, dev: &str, new: &str, progress: &ProgressFn<'_>) -> Result<()> {
    let new_s = new.to_string();
    with_writer(
        pool,
        |w| attach_in(w, dev, new),
        |_, r| {
            if !r.devices.contains(&new_s) {
                r.devices.push(new_s.clone());
            }
        },
        true,
        progress,
    )
}

/// `zpool detach POOL DEV`.
pub fn detach(pool: &str, dev: &str) -> Result<()> {
    with_writer(
        pool,
        |w| detach_in(w, dev),
        |path, r| {
            if let Some(p) = path {
                r.devices.retain(|x| x != p);
            }
        },
        false,
        &|_| {},
    )
    .map(|_| ())
}

/// `zpool remove POOL DEV...`: available hot spares leave the pool.
pub fn remove(pool: &str, devs: &[String]) -> Result<()> {
    with_writer(
        pool,
        |w| {
            devs.iter()
                .map(|d| remove_spare_in(w, d))
                .collect::<Result<Vec<String>>>()
        },
        |paths, r| r.devices.retain(|x| !paths.contains(x)),
        false,
        &|_| {},
    )
    .map(|_| ())
}

/// `zpool add POOL VDEV...`: new top-level vdevs and hot spares.
pub fn add(
    pool: &str,
    tops: &[ozfs_dsl::create::TopSpec],
    spares: &[std::path::PathBuf],
) -> Result<()> {
    let fail = |e: Error| e.context(&format!("cannot add to '{pool}'"));
    with_writer(
        pool,
        |w| {
            for t in tops {
                ozfs_dsl::create::add_top(w, t).map_err(fail)?;
            }
            ozfs_dsl::create::add_spares(w, spares).map_err(fail)
        },
        |_, r| r.devices.extend(spec_devices(tops, spares)),
        false,
        &|_| {},
    )
}

/// Zero the error counters of every vdev, or of the one whose path or
/// guid is `dev` (and, for an interior vdev, everything below it).
pub fn zero_counters(pool: &ozfs_spa::Pool, dev: Option<&str>) -> Result<()> {
    let mut found = dev.is_none();
    // As zpool clear: counters zeroed, faulted devices given another try.
    let zero = |v: &ozfs_vdev::Vdev| {
        v.walk(0, &mut |c, _| {
            c.stats.set(0, 0, 0);
            c.stats
                .recent_errors
                .store(0, std::sync::atomic::Ordering::Relaxed);
            c.stats
                .faulted
                .store(false, std::sync::atomic::Ordering::Relaxed);
            c.stats
                .removed
                .store(false, std::sync::atomic::Ordering::Relaxed);
        })
    };
    match dev {
        None => zero(&pool.root),
        Some(d) => pool.root.walk(0, &mut |v, _| {
            let by_path = v.path.as_deref().is_some_and(|p| {
                p == d || std::path::Path::new(p).file_name().and_then(|f| f.to_str()) == Some(d)
            });
            if by_path || v.guid.to_string() == d || v.display_name() == d {
                found = true;
                zero(v);
            }
        }),
    }
    if found {
        Ok(())
    } else {
        Err(Error::NotFound(format!(
            "cannot clear errors for {}: no such device in pool",
            dev.unwrap_or("")
        )))
    }
}

/// `zpool clear POOL [DEV]`: forget the error counters (and give
/// faulted devices another try).
pub fn clear(pool: &str, dev: Option<&str>) -> Result<()> {
    if let Some(h) = holder() {
        return h.clear(pool, dev);
    }
    let (mut rec, p) = crate::host::open_imported(pool)?;
    zero_counters(&p, dev)?;
    rec.save_counters(&p)
        .map_err(|e| e.context(&format!("cannot clear errors for {pool}")))
}

pub use ozfs_dsl::create::TopSpec;

/// Every device path of a layout (top-level vdevs, then spares).
pub fn spec_devices(
    tops: &[ozfs_dsl::create::TopSpec],
    spares: &[std::path::PathBuf],
) -> Vec<String> {
    let mut out = Vec::new();
    for t in tops {
        out.extend(t.devices().iter().map(|x| x.display().to_string()));
    }
    out.extend(spares.iter().map(|x| x.display().to_string()));
    out
}

/// Put device `new` in the place of leaf `old` of the pool `w` writes (the
/// new leaf starts resilvering) and sync, so every label carries the new
/// configuration. Returns the replaced leaf's path.
/// Returns the path of the device that left the pool (None when a hot spare
/// was put beside it instead).
pub fn replace_in(w: &mut PoolWriter, old: &str, new: &str) -> Result<Option<String>> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| invalid(format!("cannot replace {old} with {new}: {m}"));
    let leaf = pool
        .find_leaf(old)
        .ok_or_else(|| fail(&"no such device in pool"))?;
    let (old_guid, old_path) = (leaf.guid, leaf.path.clone().unwrap_or_default());
    if let Some(spare) = pool.find_spare(new) {
        // A hot spare takes over (the old device stays until detached).
        pool.activate_spare(old_guid, &spare, w.txg)
            .map_err(|e| fail(&e))?;
        w.config_dirty = true;
        w.sync().map_err(|e| fail(&e))?;
        return Ok(None);
    }
    if pool.spares().iter().any(|s| s.guid == old_guid) {
        return Err(fail(&"it is a hot spare in use; detach it instead"));
    }
    let same = std::fs::canonicalize(&old_path).ok() == std::fs::canonicalize(new).ok();
    if same && leaf.state() == ozfs_vdev::VdevState::Online {
        return Err(fail(&format!(
            "{new} is part of active pool '{}'",
            pool.name
        )));
    }
    if pool.find_leaf(new).is_some() && !same {
        return Err(fail(&format!(
            "{new} is part of active pool '{}'",
            pool.name
        )));
    }
    let dev =
        ozfs_vdev::FileDevice::open_mode(std::path::Path::new(new), true).map_err(|e| fail(&e))?;
    pool.replace_leaf(
        old_guid,
        std::sync::Arc::new(dev),
        new,
        ozfs_dmu::tx::random_u64() | 1,
    )
    .map_err(|e| fail(&e))?;
    w.config_dirty = true;
    w.sync().map_err(|e| fail(&e))?;
    Ok(Some(old_path))
}

/// Take leaf `dev` of the pool `w` writes offline, or bring it online (it
/// then resilvers); synced so the labels record it.
pub fn set_offline_in(w: &mut PoolWriter, dev: &str, offline: bool) -> Result<()> {
    let pool = w.pool.clone();
    let verb = if offline { "offline" } else { "online" };
    let fail = |m: &dyn std::fmt::Display| invalid(format!("cannot {verb} {dev}: {m}"));
    let guid = pool
        .find_leaf(dev)
        .ok_or_else(|| fail(&"no such device in pool"))?
        .guid;
    pool.set_offline(guid, offline, w.txg)
        .map_err(|e| fail(&e))?;
    w.config_dirty = true;
    w.sync().map_err(|e| fail(&e))
}

/// `zpool attach` on the pool `w` writes: `new` becomes a mirror side of
/// leaf `dev` and starts resilvering; synced.
pub fn attach_in(w: &mut PoolWriter, dev: &str, new: &str) -> Result<()> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| invalid(format!("cannot attach {new} to {dev}: {m}"));
    let guid = pool
        .find_leaf(dev)
        .ok_or_else(|| fail(&"no such device in pool"))?
        .guid;
    if pool.find_leaf(new).is_some() {
        return Err(fail(&format!(
            "{new} is part of active pool '{}'",
            pool.name
        )));
    }
    let d =
        ozfs_vdev::FileDevice::open_mode(std::path::Path::new(new), true).map_err(|e| fail(&e))?;
    pool.attach_leaf(
        guid,
        std::sync::Arc::new(d),
        new,
        ozfs_spa::devices::new_guid(),
        w.txg,
    )
    .map_err(|e| fail(&e))?;
    w.config_dirty = true;
    w.sync().map_err(|e| fail(&e))
}

/// `zpool detach` on the pool `w` writes; synced. Returns the path of the
/// device that left the pool (None: a hot spare went back to the spares).
///
/// In a `spare` vdev: detaching the spare returns it to the available
/// spares; detaching the device it stands for makes the spare a permanent
/// member (it leaves the spares list).
pub fn detach_in(w: &mut PoolWriter, dev: &str) -> Result<Option<String>> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| invalid(format!("cannot detach {dev}: {m}"));
    let leaf = pool
        .find_leaf(dev)
        .ok_or_else(|| fail(&"no such device in pool"))?;
    let (guid, path) = (leaf.guid, leaf.path.clone().unwrap_or_default());
    let is_spare = pool.spares().iter().any(|s| s.guid == guid);
    if is_spare && !pool.is_spared_original(guid) {
        pool.unspare(guid).map_err(|e| fail(&e))?;
        w.config_dirty = true;
        w.sync().map_err(|e| fail(&e))?;
        ozfs_dsl::create::relabel_spares(w, &[guid]);
        return Ok(None);
    }
    if pool.is_spared_original(guid) {
        let kept = pool.unspare(guid).map_err(|e| fail(&e))?;
        let mut spares = pool.spares();
        spares.retain(|s| s.guid != kept);
        pool.set_spares(spares);
        w.spares_dirty = true;
    } else {
        pool.detach_leaf(guid).map_err(|e| fail(&e))?;
    }
    w.config_dirty = true;
    w.sync().map_err(|e| fail(&e))?;
    Ok(Some(path))
}

/// The hot spare `dev` names if `zpool remove` may take it out of `pool`
/// (an available spare), else why not.
fn removable_spare(pool: &ozfs_spa::Pool, dev: &str) -> Result<ozfs_spa::spares::Spare> {
    let fail = |m: &str| invalid(format!("cannot remove {dev}: {m}"));
    let Some(spare) = pool.find_spare(dev) else {
        return Err(fail(if pool.find_leaf(dev).is_some() {
            "only inactive hot spares can be removed"
        } else {
            "no such device in pool"
        }));
    };
    if pool.spare_state(&spare) == ozfs_spa::spares::SpareState::InUse {
        return Err(fail("it is a hot spare in use; detach it first"));
    }
    Ok(spare)
}

/// `zpool remove -n POOL DEV...`: check that each could be removed,
/// change nothing.
pub fn remove_dry_run(pool: &str, devs: &[String]) -> Result<()> {
    let (_, p) = crate::host::open_imported(pool)?;
    if p.spares_unloaded() {
        // Opening the DSL reads the MOS list of spares.
        ozfs_dsl::DslPool::open(p.clone())?;
    }
    devs.iter()
        .try_for_each(|d| removable_spare(&p, d).map(|_| ()))
}

/// `zpool remove POOL SPARE` on the pool `w` writes: an available hot spare
/// leaves the spares list and its labels are cleared; synced. Returns its path.
pub fn remove_spare_in(w: &mut PoolWriter, dev: &str) -> Result<String> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| invalid(format!("cannot remove {dev}: {m}"));
    let spare = removable_spare(&pool, dev)?;
    let mut spares = pool.spares();
    spares.retain(|s| s.guid != spare.guid);
    pool.set_spares(spares);
    w.spares_dirty = true;
    w.sync().map_err(|e| fail(&e))?;
    if let Some(d) = &spare.dev {
        // The spare has left the pool whatever happens here; labels left
        // behind only make it look like a spare of a pool that no longer
        // lists it (zpool labelclear clears them).
        let _ = clear_labels(d.as_ref());
    }
    Ok(spare.path)
}

/// What [`activate_spares`] did.
#[derive(Debug, Clone)]
pub enum SpareEvent {
    /// Hot spare `spare` (its path) stands in for leaf `device` (a guid).
    Activated { spare: String, device: u64 },
    /// The spare could not stand in for that device (too small, …).
    Refused {
        spare: String,
        device: u64,
        why: String,
    },
}

/// A leaf that failed (faulted, removed) in a pool with an available hot
/// spare gets the spare, as ZFS's event daemon does; the caller starts the
/// resilver when one was activated. A (device, spare) pair refused once is
/// not tried again in this process; the next spare is.
pub fn activate_spares(
    pool: &ozfs_spa::Pool,
    sw: &ozfs_dsl::shared::SharedWriter,
) -> Vec<SpareEvent> {
    use ozfs_spa::spares::SpareState;
    static REFUSED: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());
    let refused = || REFUSED.lock().unwrap_or_else(|p| p.into_inner());
    let mut events = Vec::new();
    let wanting = pool.leaves_wanting_spare();
    if wanting.is_empty() {
        return events;
    }
    let avail: Vec<ozfs_spa::spares::Spare> = pool
        .spares()
        .into_iter()
        .filter(|s| pool.spare_state(s) == SpareState::Avail)
        .collect();
    let mut used: Vec<u64> = Vec::new();
    for failed in wanting {
        for spare in avail.iter().filter(|s| !used.contains(&s.guid)) {
            if refused().contains(&(failed, spare.guid)) {
                continue;
            }
            let Ok(mut l) = sw.lease() else { break };
            let r = pool.activate_spare(failed, spare, l.txg).and_then(|()| {
                l.config_dirty = true;
                l.sync()
            });
            match r {
                Ok(()) => {
                    events.push(SpareEvent::Activated {
                        spare: spare.path.clone(),
                        device: failed,
                    });
                    used.push(spare.guid);
                    break;
                }
                Err(e) => {
                    events.push(SpareEvent::Refused {
                        spare: spare.path.clone(),
                        device: failed,
                        why: e.to_string(),
                    });
                    refused().push((failed, spare.guid));
                }
            }
        }
    }
    events
}

/// A vdev specification (`mirror A B raidz2 C D E F G spare H log I`...)
/// as top-level vdevs and hot spares; devices that belong to a pool are
/// refused unless `force`. The vdevs after `log` (up to the next `spare`
/// or `cache`) are separate intent-log devices ([`TopSpec::Log`]), each a
/// disk or a mirror, as OpenZFS's zpool takes them.
pub fn vdev_spec(
    words: &[String],
    force: bool,
    what: &str,
) -> Result<(Vec<TopSpec>, Vec<std::path::PathBuf>)> {
    let mut tops = Vec::new();
    let mut spares = Vec::new();
    let mut i = 0;
    // Whether the vdevs being read are log devices, and whether `log` was seen.
    let (mut in_log, mut seen_log) = (false, false);
    let mut nlogs = 0usize;
    // Whether a word starts a new group (a vdev keyword), not a device.
    let keyword = |w: &str| {
        [
            "mirror", "raidz", "raidz1", "raidz2", "raidz3", "spare", "log", "cache",
        ]
        .contains(&w)
            || ozfs_dsl::create::DraidSpec::parse(w).is_some()
    };
    let unsupported_log = |w: &str| {
        Error::Invalid(format!(
            "invalid vdev specification: unsupported 'log' device: {}",
            w.trim_end_matches(|c: char| c.is_ascii_digit())
        ))
    };
    while i < words.len() {
        let w = words[i].as_str();
        if let Some(spec) = ozfs_dsl::create::DraidSpec::parse(w) {
            if in_log {
                return Err(unsupported_log("draid"));
            }
            let spec = spec?;
            let mut devs = Vec::new();
            i += 1;
            while i < words.len() && !keyword(&words[i]) {
                devs.push(std::path::PathBuf::from(&words[i]));
                i += 1;
            }
            // The whole shape is checked here, before any device is opened.
            spec.layout(devs.len() as u64, 12)?;
            tops.push(TopSpec::Draid(spec, devs));
            continue;
        }
        let group = match w {
            "mirror" => Some(0usize),
            "raidz" | "raidz1" => Some(1),
            "raidz2" => Some(2),
            "raidz3" => Some(3),
            "spare" => {
                in_log = false;
                i += 1;
                let start = i;
                while i < words.len() && !keyword(&words[i]) {
                    spares.push(std::path::PathBuf::from(&words[i]));
                    i += 1;
                }
                if i == start {
                    return Err(Error::Invalid(
                        "invalid vdev specification: spare requires at least 1 device".into(),
                    ));
                }
                continue;
            }
            "log" => {
                if seen_log {
                    return Err(Error::Invalid(
                        "invalid vdev specification: 'log' can be specified only once".into(),
                    ));
                }
                (seen_log, in_log) = (true, true);
                i += 1;
                continue;
            }
            "cache" => {
                return Err(Error::Invalid(format!(
                    "{what}: '{w}' vdevs are not supported yet"
                )))
            }
            _ => None,
        };
        if in_log && group.is_some_and(|p| p > 0) {
            return Err(unsupported_log(w));
        }
        let top = match group {
            Some(p) => {
                let mut devs = Vec::new();
                i += 1;
                while i < words.len() && !keyword(&words[i]) {
                    devs.push(std::path::PathBuf::from(&words[i]));
                    i += 1;
                }
                if devs.len() < 2 || (p > 0 && devs.len() <= p) {
                    return Err(Error::Invalid(format!(
                        "invalid vdev specification: {w} requires at least {} devices",
                        if p == 0 { 2 } else { p + 1 }
                    )));
                }
                if p == 0 {
                    TopSpec::Mirror(devs)
                } else {
                    TopSpec::Raidz(p, devs)
                }
            }
            None => {
                i += 1;
                TopSpec::Disk(std::path::PathBuf::from(w))
            }
        };
        if in_log {
            nlogs += 1;
            tops.push(TopSpec::Log(Box::new(top)));
        } else {
            tops.push(top);
        }
    }
    if seen_log && nlogs == 0 {
        return Err(Error::Invalid(
            "invalid vdev specification: log requires at least 1 device".into(),
        ));
    }
    let mut all: Vec<std::path::PathBuf> = spares.clone();
    for t in &tops {
        all.extend(t.devices().iter().cloned());
    }
    // Devices of imported pools: refused even with -f (overwriting one
    // would take it from under its pool), as OpenZFS refuses active ones.
    let active: Vec<(String, std::path::PathBuf)> = crate::host::Record::all()
        .into_iter()
        .filter_map(|n| crate::host::Record::load(&n).ok())
        .flat_map(|r| {
            let name = r.name.clone();
            r.devices
                .into_iter()
                .filter_map(move |d| std::fs::canonicalize(&d).ok().map(|c| (name.clone(), c)))
        })
        .collect();
    for p in &all {
        let abs = std::fs::canonicalize(p)
            .map_err(|e| Error::io(format!("cannot open '{}'", p.display()), e))?;
        if let Some((pool, _)) = active.iter().find(|(_, d)| *d == abs) {
            return Err(Error::Busy(format!(
                "invalid vdev specification\nthe following errors must be manually repaired:\n{} is part of active pool '{pool}'",
                abs.display()
            )));
        }
        if !force {
            // Refuse devices that belong to a pool unless forced.
            if let Some(fp) = ozfs_spa::import::discover_paths(std::slice::from_ref(&abs))
                .into_iter()
                .next()
            {
                if fp.state != ozfs_spa::label_write::POOL_STATE_DESTROYED {
                    return Err(Error::Invalid(format!("invalid vdev specification\nuse '-f' to override the following errors:\n{} is part of exported or potentially active pool '{}'", abs.display(), fp.name)));
                }
            }
        }
    }
    let canon = |p: &std::path::PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
    let tops: Vec<TopSpec> = tops
        .into_iter()
        .map(|t| t.with_devices(t.devices().iter().map(canon).collect()))
        .collect();
    let spares: Vec<std::path::PathBuf> = spares.iter().map(canon).collect();
    let mut seen = std::collections::HashSet::new();
    for p in spec_devices(&tops, &spares) {
        if !seen.insert(p.clone()) {
            return Err(Error::Invalid(format!(
                "{what}: {p} is used more than once in the specification"
            )));
        }
    }
    Ok((tops, spares))
}

/// Zero the four labels of a device.
fn clear_labels(d: &dyn ozfs_vdev::BlockDevice) -> Result<()> {
    let psize = ozfs_format::label::aligned_psize(d.size());
    let zero = vec![0u8; 256 * 1024];
    for l in 0..4 {
        d.write_at(&zero, ozfs_format::label::label_offset(psize, l, 0))?;
    }
    d.flush()
}

/// The labels of a device (`zdb -l`), read-only.
pub fn labels(path: &str) -> Result<ozfs_vdev::labels::LabelSet> {
    let dev = ozfs_vdev::device::open_path(std::path::Path::new(path), false)
        .map_err(|e| e.context(&format!("cannot open '{path}'")))?;
    Ok(ozfs_vdev::labels::read_labels(dev.as_ref()))
}

/// `zpool labelclear [-f] DEVICE`: forget that a device was part of a pool.
/// A device of an imported pool is refused; one whose labels say its pool
/// is active (not exported or destroyed) only with `force`.
pub fn labelclear(path: &str, force: bool) -> Result<()> {
    let abs =
        std::fs::canonicalize(path).map_err(|e| Error::io(format!("failed to open {path}"), e))?;
    for name in crate::host::Record::all() {
        let Ok(r) = crate::host::Record::load(&name) else {
            continue;
        };
        if r.devices
            .iter()
            .any(|d| std::fs::canonicalize(d).ok().as_ref() == Some(&abs))
        {
            return Err(Error::Busy(format!(
                "failed to clear label for {path}: it is part of imported pool '{name}'"
            )));
        }
    }
    let p = abs.to_string_lossy().into_owned();
    let set = labels(&p)?;
    if !set.has_label() {
        return Err(Error::NotFound(format!(
            "failed to clear label for {path}: no ZFS labels found"
        )));
    }
    let state = set
        .best_config()
        .and_then(|c| c.get_u64("state"))
        .unwrap_or(ozfs_spa::label_write::POOL_STATE_ACTIVE);
    let idle = [
        ozfs_spa::label_write::POOL_STATE_EXPORTED,
        ozfs_spa::label_write::POOL_STATE_DESTROYED,
    ];
    if !force && !idle.contains(&state) {
        let pool = set
            .best_config()
            .and_then(|c| c.get_str("name").map(String::from))
            .unwrap_or_default();
        return Err(Error::Busy(format!(
            "use '-f' to override the following error:\n{path} is a member of potentially active pool \"{pool}\""
        )));
    }
    let dev = ozfs_vdev::device::open_path(&abs, true)
        .map_err(|e| e.context(&format!("failed to open {path}")))?;
    clear_labels(dev.as_ref()).map_err(|e| e.context(&format!("failed to clear label for {path}")))
}
