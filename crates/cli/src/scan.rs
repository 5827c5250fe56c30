//! `zpool scrub` and the scan state `zpool status` reports.
//!
//! A scrub runs where the pool's writer is: in the daemon (a thread of its
//! own; the command returns at once, `-w` waits) or, when no daemon holds
//! the pool, in the command itself (in the foreground, as with `-w`). It
//! follows the tree synced when it starts (an I/O hold keeps that tree's
//! space from reuse; writes and syncs go on) and repairs what it finds
//! wrong (the writer is the only process writing the pool).
//!
//! Its state is a small JSON file beside the pool's record
//! (`<state dir>/<pool>.scan.json`), rewritten about once a second, so any
//! `zpool status` sees progress, rate and time left. `zpool scrub -s` / `-p`
//! ask a running scrub to stop or pause through `<pool>.scan-ctl`, which the
//! scrub polls. ozfs does not write scan state into the pool (zfs-fuse
//! would try to resume a scan it finds there); a paused scrub starts over
//! when resumed.

use crate::state::{state_dir, Record};
use crate::{CmdResult, Fail};
use ozfs_dsl::scrub::{BlockRef, Progress, ScanMode};
use ozfs_dsl::sync::PoolWriter;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What `zpool status` shows on its `scan:` line.
#[derive(Debug, Clone, Default)]
pub struct ScanState {
    /// "scrub" or "resilver".
    pub func: String,
    /// "scanning", "finished", "canceled" or "paused".
    pub state: String,
    pub start: u64,
    pub end: u64,
    pub examined: u64,
    pub issued: u64,
    pub to_examine: u64,
    pub repaired: u64,
    pub errors: u64,
    /// Files (or metadata objects) with blocks no copy of which verified.
    pub files: Vec<String>,
    /// The process running the scan: a "scanning" state whose process is
    /// gone (killed, crashed) reads as canceled.
    pub pid: u32,
}

/// A pool name fit to name a file in the state directory: callers hold a
/// record (whose name was checked), but a path is never built from anything
/// else — an invalid name maps to a name no pool can have.
fn file_stem(pool: &str) -> &str {
    if ozfs_format::names::check_pool_name(pool).is_ok() {
        pool
    } else {
        ".invalid"
    }
}

fn scan_file(pool: &str) -> PathBuf {
    state_dir().join(format!("{}.scan.json", file_stem(pool)))
}

fn ctl_file(pool: &str) -> PathBuf {
    state_dir().join(format!("{}.scan-ctl", file_stem(pool)))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl ScanState {
    pub fn load(pool: &str) -> Option<ScanState> {
        let mut st = Self::load_raw(pool)?;
        // SAFETY: signal 0 only asks whether the process exists.
        if st.state == "scanning" && st.pid != 0 && unsafe { libc::kill(st.pid as i32, 0) } != 0 {
            st.state = "canceled".into();
            st.end = st.start;
        }
        Some(st)
    }

    fn load_raw(pool: &str) -> Option<ScanState> {
        let s = std::fs::read_to_string(scan_file(pool)).ok()?;
        let v: Value = serde_json::from_str(&s).ok()?;
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        Some(ScanState {
            func: v["func"].as_str().unwrap_or("scrub").to_string(),
            state: v["state"].as_str()?.to_string(),
            start: n("start"),
            end: n("end"),
            examined: n("examined"),
            issued: n("issued"),
            to_examine: n("to_examine"),
            repaired: n("repaired"),
            errors: n("errors"),
            pid: v["pid"].as_u64().unwrap_or(0) as u32,
            files: v["files"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    pub fn save(&self, pool: &str) {
        let v = json!({
            "pid": self.pid, "func": self.func, "state": self.state, "start": self.start, "end": self.end,
            "examined": self.examined, "issued": self.issued,
            "to_examine": self.to_examine, "repaired": self.repaired,
            "errors": self.errors, "files": self.files,
        });
        let dir = state_dir();
        let tmp = dir.join(format!(".{}.scan.tmp", file_stem(pool)));
        if std::fs::write(&tmp, v.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, scan_file(pool));
        }
    }

    pub fn remove(pool: &str) {
        let _ = std::fs::remove_file(scan_file(pool));
        let _ = std::fs::remove_file(ctl_file(pool));
    }
}

/// Human bytes as zpool prints them (1.50M, 0B).
pub fn nice(n: u64) -> String {
    if n < 1024 {
        format!("{n}B")
    } else {
        ozfs_dsl::props::nicenum(n)
    }
}

pub fn date(t: u64) -> String {
    let t = t as libc::time_t;
    // SAFETY: localtime_r/strftime on a local buffer.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        let mut buf = [0u8; 64];
        let fmt = c"%a %b %e %H:%M:%S %Y";
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// Seconds as HH:MM:SS.
pub fn hms(secs: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// The `scan:` lines of `zpool status`.
pub fn status_lines(pool: &str) -> String {
    let Some(s) = ScanState::load(pool) else {
        return "  scan: none requested".into();
    };
    match s.state.as_str() {
        "scanning" => {
            let el = now().saturating_sub(s.start).max(1);
            let rate = s.issued / el;
            let left = match s.to_examine.saturating_sub(s.issued).checked_div(rate) {
                Some(t) => hms(t),
                None => "no estimated completion time".into(),
            };
            let pct = if s.to_examine > 0 {
                100.0 * s.issued as f64 / s.to_examine as f64
            } else {
                0.0
            };
            format!(
                "  scan: {} in progress since {}\n\t{} scanned at {}/s, {} issued at {}/s, {} total\n\t{} {}, {:.2}% done, {} to go",
                s.func,
                date(s.start),
                nice(s.examined),
                nice(s.examined / el),
                nice(s.issued),
                nice(rate),
                nice(s.to_examine),
                nice(s.repaired),
                if s.func == "resilver" {
                    "resilvered"
                } else {
                    "repaired"
                },
                pct.min(100.0),
                left
            )
        }
        "canceled" => format!("  scan: {} canceled on {}", s.func, date(s.end)),
        "paused" => format!(
            "  scan: scrub paused since {}\n\tscrub started on {}\n\t{} scanned, {} issued, {} total",
            date(s.end),
            date(s.start),
            nice(s.examined),
            nice(s.issued),
            nice(s.to_examine)
        ),
        _ => format!(
            "  scan: {} {} in {} with {} errors on {}",
            if s.func == "resilver" {
                "resilvered"
            } else {
                "scrub repaired"
            },
            nice(s.repaired),
            hms(s.end.saturating_sub(s.start)),
            s.errors,
            date(s.end)
        ),
    }
}

/// The `errors:` lines of `zpool status` (`-v` lists the files).
pub fn error_lines(pool: &str, verbose: bool) -> String {
    let files = ScanState::load(pool).map(|s| s.files).unwrap_or_default();
    if files.is_empty() {
        return "errors: No known data errors".into();
    }
    if !verbose {
        return format!("errors: {} data errors, use '-v' for a list", files.len());
    }
    let mut out =
        String::from("errors: Permanent errors have been detected in the following files:\n");
    for f in files {
        out.push_str(&format!("\n        {f}"));
    }
    out
}

/// Name the damaged blocks as `zpool status -v` does: `pool/ds:/path` for
/// files, `pool/ds:<0xobj>` when the path cannot be found, and
/// `<metadata>:<0xobj>` for the MOS.
fn name_errors(w: &PoolWriter, bad: &[BlockRef]) -> Vec<String> {
    let dsl = w.dsl();
    let all = dsl
        .root()
        .and_then(|r| dsl.list(&r, true, None))
        .unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for b in bad {
        if !seen.insert((b.objset, b.object)) {
            continue;
        }
        if b.objset == 0 {
            out.push(format!("<metadata>:<{:#x}>", b.object));
            continue;
        }
        let Some(ds) = all.iter().find(|d| d.ds_obj == b.objset) else {
            out.push(format!("<{:#x}>:<{:#x}>", b.objset, b.object));
            continue;
        };
        let path = dsl
            .objset(ds)
            .ok()
            .and_then(|os| ozfs_zpl::Zpl::open(os, &ds.name).ok())
            .and_then(|z| z.path_of(b.object));
        out.push(match path {
            Some(p) if b.object < u64::MAX - 3 => format!("{}:{p}", ds.name),
            _ => format!("{}:<{:#x}>", ds.name, b.object),
        });
    }
    out
}

/// Runs a closure on the pool's writer (owned, or leased in the daemon).
pub type WithWriter<'a> = dyn Fn(&mut dyn FnMut(&mut PoolWriter)) -> Result<(), String> + 'a;

/// Run a scrub over the pool `w` writes (taken for as long as `lease`
/// says: the closure is called briefly at the start and at the end).
/// Returns the final state.
pub fn run_scrub(
    pool_name: &str,
    mode: ScanMode,
    with_writer: &WithWriter<'_>,
) -> Result<ScanState, String> {
    let _ = std::fs::remove_file(ctl_file(pool_name));
    let mut start: Option<(
        std::sync::Arc<ozfs_spa::Pool>,
        ozfs_format::BlkPtr,
        u64,
        u64,
    )> = None;
    let mut hold = None;
    with_writer(&mut |w| {
        let synced = w.txg.saturating_sub(1);
        let to_examine = w.dsl().space().map(|s| s.alloc).unwrap_or(0);
        // Held before the writer is let go: no sync may reuse its space.
        hold = Some(w.pool.hold_io(synced));
        start = Some((w.pool.clone(), w.mos.os.bp, synced, to_examine));
    })?;
    let Some((pool, rootbp, _synced, to_examine)) = start else {
        return Err("cannot scrub: no writer".into());
    };
    let leaves = pool.resilvering_leaves();
    let mut st = ScanState {
        func: if mode == ScanMode::Resilver {
            "resilver".into()
        } else {
            "scrub".into()
        },
        state: "scanning".into(),
        start: now(),
        to_examine,
        pid: std::process::id(),
        ..Default::default()
    };
    st.save(pool_name);
    let stop = AtomicBool::new(false);
    let base = st.clone();
    let report = |p: &Progress| {
        let mut s = base.clone();
        s.examined = p.examined;
        s.issued = p.issued;
        s.repaired = p.repaired;
        s.errors = p.errors;
        s.save(pool_name);
        draw_progress(&s);
        if std::fs::metadata(ctl_file(pool_name)).is_ok() {
            stop.store(true, Ordering::Relaxed);
        }
    };
    let heal = !pool.readonly;
    let min_birth = match mode {
        ScanMode::Resilver => pool.resilver_min_birth().unwrap_or(0),
        ScanMode::Scrub => 0,
    };
    let res = ozfs_dsl::scrub::scrub(&pool, &rootbp, mode, min_birth, heal, &stop, &report)
        .map_err(|e| format!("scan of '{pool_name}' failed: {e}"))?;
    // A complete scan without errors rebuilt every leaf that was
    // resilvering when it started (a scrub heals onto them too).
    if !leaves.is_empty() && !res.stopped && res.progress.errors == 0 {
        pool.resilver_done(&leaves);
        // The next sync records the device as whole again; a device that
        // replaced a spared one is whole: the spare goes back (under the
        // writer, so nothing activates it in between).
        with_writer(&mut |w| {
            let released = w.pool.release_spares();
            w.config_dirty = true;
            if !released.is_empty() {
                match w.sync() {
                    Ok(()) => ozfs_dsl::create::relabel_spares(w, &released),
                    Err(e) => eprintln!("ozfs: '{pool_name}': releasing hot spares: {e}"),
                }
            }
        })?;
    }
    drop(hold);
    // SAFETY: isatty has no preconditions.
    if unsafe { libc::isatty(2) } == 1 && !crate::daemon::in_daemon() {
        eprintln!();
    }
    let ctl = std::fs::read_to_string(ctl_file(pool_name)).unwrap_or_default();
    let _ = std::fs::remove_file(ctl_file(pool_name));
    st.examined = res.progress.examined;
    st.issued = res.progress.issued;
    st.repaired = res.progress.repaired;
    st.errors = res.progress.errors;
    st.end = now();
    st.state = if !res.stopped {
        "finished".into()
    } else if ctl.trim() == "pause" {
        "paused".into()
    } else {
        "canceled".into()
    };
    let mut files = Vec::new();
    with_writer(&mut |w| files = name_errors(w, &res.bad))?;
    st.files = files;
    st.save(pool_name);
    Ok(st)
}

/// `zpool scrub [-s | -p] [-w] pool ...`
pub fn scrub_cmd(argv: &[String]) -> CmdResult {
    let a = crate::args::Args::parse(argv, "spwe", "")?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(
            "missing pool name argument\nusage:\n\tscrub [-s | -p] [-w] <pool> ...".into(),
        ));
    }
    let mut failed = false;
    for name in &a.pos {
        let r = if a.flag('s') || a.flag('p') {
            request(name, if a.flag('p') { "pause" } else { "stop" })
        } else {
            start(name, a.flag('w'))
        };
        if let Err(m) = r {
            eprintln!("{m}");
            failed = true;
        }
    }
    if failed {
        Err(Fail::Err(String::new()))
    } else {
        Ok(())
    }
}

fn request(pool: &str, what: &str) -> Result<(), String> {
    Record::load(pool).map_err(|_| format!("cannot open '{pool}': no such pool"))?;
    let running = ScanState::load(pool).is_some_and(|s| s.state == "scanning");
    if !running {
        return Err(if what == "pause" {
            format!("cannot pause scrubbing {pool}: there is no active scrub")
        } else {
            format!("cannot cancel scrubbing {pool}: there is no active scrub")
        });
    }
    std::fs::write(ctl_file(pool), what).map_err(|e| format!("cannot signal the scrub: {e}"))?;
    // Wait until it took notice (the scrub polls about twice a second).
    for _ in 0..600 {
        if ScanState::load(pool).is_none_or(|s| s.state != "scanning") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "cannot cancel scrubbing {pool}: the scrub did not stop"
    ))
}

/// Ask a running scrub to stop and wait until it has.
pub fn cancel_and_wait(pool: &str) {
    let _ = std::fs::write(ctl_file(pool), "stop");
    wait_done(pool);
}

/// Wait until the pool's scrub is no longer running.
pub fn wait_done(pool: &str) {
    let mut drew = false;
    while let Some(s) = ScanState::load(pool).filter(|s| s.state == "scanning") {
        drew |= draw_progress(&s);
        std::thread::sleep(Duration::from_millis(200));
    }
    if drew {
        eprintln!();
    }
}

/// A progress line on stderr (when it is a terminal): percent, bytes, rate
/// and time left. Returns whether it drew.
fn draw_progress(s: &ScanState) -> bool {
    // SAFETY: isatty on a file descriptor number has no preconditions.
    if unsafe { libc::isatty(2) } != 1 || crate::daemon::in_daemon() {
        return false;
    }
    let el = now().saturating_sub(s.start).max(1);
    let rate = s.issued / el;
    let pct = if s.to_examine > 0 {
        (100.0 * s.issued as f64 / s.to_examine as f64).min(100.0)
    } else {
        0.0
    };
    let left = s
        .to_examine
        .saturating_sub(s.issued)
        .checked_div(rate)
        .map(hms)
        .unwrap_or_else(|| "--:--:--".into());
    let width = 30usize;
    let fill = ((pct / 100.0) * width as f64) as usize;
    eprint!(
        "\r{} [{}{}] {:5.1}% {}/{} at {}/s, {} to go   ",
        s.func,
        "#".repeat(fill),
        "-".repeat(width - fill),
        pct,
        nice(s.issued),
        nice(s.to_examine),
        nice(rate),
        left
    );
    true
}

fn start(pool: &str, _wait: bool) -> Result<(), String> {
    let mut rec = Record::load(pool).map_err(|_| format!("cannot open '{pool}': no such pool"))?;
    if rec.readonly {
        return Err(format!(
            "cannot scrub {pool}: pool is read-only (imported with readonly=on)"
        ));
    }
    if ScanState::load(pool).is_some_and(|s| s.state == "scanning") {
        return Err(format!(
            "cannot scrub {pool}: currently scrubbing; use 'zpool scrub -s' to cancel the current scrub"
        ));
    }
    if crate::daemon::in_daemon() {
        return crate::daemon::start_scrub(pool, ScanMode::Scrub);
    }
    // No daemon holds the pool: this command is its writer.
    let w = crate::zfs::writer_for(pool).map_err(|e| match e {
        Fail::Err(m) | Fail::Usage(m) => m,
    })?;
    let cell = std::cell::RefCell::new(w);
    let st = run_scrub(pool, ScanMode::Scrub, &|f| {
        let mut g = cell.borrow_mut();
        f(&mut g);
        Ok(())
    })?;
    let w = cell.into_inner();
    if let Err(e) = rec.save_counters(&w.pool) {
        eprintln!("warning: could not save error counters: {e}");
    }
    // As zpool: a scrub that found unrecoverable errors still succeeded;
    // `zpool status -v` tells what was lost.
    let _ = st;
    Ok(())
}

/// Put device `new` in the place of leaf `old` of the pool `w` writes (the
/// new leaf starts resilvering) and sync, so every label carries the new
/// configuration. Returns the replaced leaf's path.
/// Returns the path of the device that left the pool (None when a hot spare
/// was put beside it instead).
pub fn replace_in(w: &mut PoolWriter, old: &str, new: &str) -> Result<Option<String>, String> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| format!("cannot replace {old} with {new}: {m}");
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

/// Without a daemon: resilver in this command (its writer in `cell`),
/// then commit the end of it.
fn resilver_here(
    pool: &str,
    cell: &std::cell::RefCell<ozfs_fuse::shared::Writer>,
) -> Result<(), Fail> {
    run_scrub(pool, ScanMode::Resilver, &|f| {
        let mut g = cell.borrow_mut();
        f(&mut g);
        Ok(())
    })
    .map_err(Fail::Err)?;
    cell.borrow_mut()
        .sync()
        .map_err(|e| Fail::Err(format!("cannot sync '{pool}': {e}")))
}

/// `zpool replace [-f] [-w] pool old [new]`
pub fn replace_cmd(argv: &[String]) -> CmdResult {
    let a = crate::args::Args::parse(argv, "fsw", "o")?;
    if a.pos.len() < 2 || a.pos.len() > 3 {
        return Err(Fail::Usage(
            "usage:\n\treplace [-f] [-w] <pool> <device> [new-device]".into(),
        ));
    }
    let (pool, old) = (&a.pos[0], &a.pos[1]);
    let new = a.pos.get(2).unwrap_or(old);
    let new = std::fs::canonicalize(new)
        .map_err(|e| Fail::Err(format!("cannot open '{new}': {e}")))?
        .to_string_lossy()
        .into_owned();
    if ScanState::load(pool).is_some_and(|s| s.state == "scanning") {
        cancel_and_wait(pool);
    }
    if crate::daemon::in_daemon() {
        return crate::daemon::replace_device(pool, old, &new).map_err(Fail::Err);
    }
    let mut rec =
        Record::load(pool).map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
    let w = crate::zfs::writer_for(pool)?;
    let cell = std::cell::RefCell::new(w);
    let old_path = replace_in(&mut cell.borrow_mut(), old, &new).map_err(Fail::Err)?;
    if let Some(old_path) = old_path {
        rec.devices.retain(|d| *d != old_path);
    }
    if !rec.devices.contains(&new) {
        rec.devices.push(new.clone());
    }
    rec.save_counters(&cell.borrow().pool)
        .map_err(|e| Fail::Err(format!("cannot record the new device: {e}")))?;
    // No daemon: this command resilvers in the foreground.
    resilver_here(pool, &cell)?;
    let w = cell.into_inner();
    rec.save_counters(&w.pool)
        .map_err(|e| Fail::Err(format!("cannot save counters: {e}")))?;
    Ok(())
}

/// Take leaf `dev` of the pool `w` writes offline, or bring it online (it
/// then resilvers); synced so the labels record it.
pub fn set_offline_in(w: &mut PoolWriter, dev: &str, offline: bool) -> Result<(), String> {
    let pool = w.pool.clone();
    let verb = if offline { "offline" } else { "online" };
    let fail = |m: &dyn std::fmt::Display| format!("cannot {verb} {dev}: {m}");
    let guid = pool
        .find_leaf(dev)
        .ok_or_else(|| fail(&"no such device in pool"))?
        .guid;
    pool.set_offline(guid, offline, w.txg)
        .map_err(|e| fail(&e))?;
    w.config_dirty = true;
    w.sync().map_err(|e| fail(&e))
}

/// `zpool offline [-t] pool device ...` and `zpool online pool device ...`
pub fn offline_cmd(argv: &[String], offline: bool) -> CmdResult {
    let a = crate::args::Args::parse(argv, "tfe", "")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(format!(
            "missing pool or device name\nusage:\n\t{} <pool> <device> ...",
            if offline { "offline [-t]" } else { "online" }
        )));
    }
    let pool = &a.pos[0];
    if crate::daemon::in_daemon() {
        for d in &a.pos[1..] {
            crate::daemon::set_offline_device(pool, d, offline).map_err(Fail::Err)?;
        }
        return Ok(());
    }
    let mut rec =
        Record::load(pool).map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
    let w = crate::zfs::writer_for(pool)?;
    let cell = std::cell::RefCell::new(w);
    for d in &a.pos[1..] {
        set_offline_in(&mut cell.borrow_mut(), d, offline).map_err(Fail::Err)?;
    }
    rec.save_counters(&cell.borrow().pool)
        .map_err(|e| Fail::Err(format!("cannot record the change: {e}")))?;
    if !offline {
        resilver_here(pool, &cell)?;
    }
    let w = cell.into_inner();
    rec.save_counters(&w.pool)
        .map_err(|e| Fail::Err(format!("cannot save counters: {e}")))
}

/// `zpool attach` on the pool `w` writes: `new` becomes a mirror side of
/// leaf `dev` and starts resilvering; synced.
pub fn attach_in(w: &mut PoolWriter, dev: &str, new: &str) -> Result<(), String> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| format!("cannot attach {new} to {dev}: {m}");
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
pub fn detach_in(w: &mut PoolWriter, dev: &str) -> Result<Option<String>, String> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| format!("cannot detach {dev}: {m}");
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

/// `zpool remove POOL SPARE` on the pool `w` writes: an available hot spare
/// leaves the spares list and its labels are cleared; synced. Returns its path.
pub fn remove_spare_in(w: &mut PoolWriter, dev: &str) -> Result<String, String> {
    let pool = w.pool.clone();
    let fail = |m: &dyn std::fmt::Display| format!("cannot remove {dev}: {m}");
    let Some(spare) = pool.find_spare(dev) else {
        return Err(fail(&if pool.find_leaf(dev).is_some() {
            "only inactive hot spares can be removed"
        } else {
            "no such device in pool"
        }));
    };
    if pool.spare_state(&spare) == ozfs_spa::spares::SpareState::InUse {
        return Err(fail(&"it is a hot spare in use; detach it first"));
    }
    let mut spares = pool.spares();
    spares.retain(|s| s.guid != spare.guid);
    pool.set_spares(spares);
    w.spares_dirty = true;
    w.sync().map_err(|e| fail(&e))?;
    if let Some(d) = &spare.dev {
        let psize = ozfs_format::label::aligned_psize(d.size());
        for l in 0..4 {
            let zero = vec![0u8; 256 * 1024];
            if let Err(e) = d.write_at(&zero, ozfs_format::label::label_offset(psize, l, 0)) {
                eprintln!("ozfs: {}: labels not cleared: {e}", spare.path);
                break;
            }
        }
    }
    Ok(spare.path)
}

/// `zpool remove pool device`: hot spares only.
pub fn remove_cmd(argv: &[String]) -> CmdResult {
    let a = crate::args::Args::parse(argv, "npsw", "")?;
    if a.pos.len() < 2 {
        return Err(Fail::Usage(
            "usage:\n\tremove [-npsw] <pool> <device> ...".into(),
        ));
    }
    let pool = &a.pos[0];
    if crate::daemon::in_daemon() {
        for d in &a.pos[1..] {
            crate::daemon::remove_spare(pool, d).map_err(Fail::Err)?;
        }
        return Ok(());
    }
    let mut rec =
        Record::load(pool).map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
    let mut w = crate::zfs::writer_for(pool)?;
    for d in &a.pos[1..] {
        let path = remove_spare_in(&mut w, d).map_err(Fail::Err)?;
        rec.devices.retain(|x| *x != path);
    }
    rec.save_counters(&w.pool)
        .map_err(|e| Fail::Err(format!("cannot record the change: {e}")))
}

/// `zpool attach [-f] [-w] pool device new-device` and `zpool detach pool device`
pub fn attach_cmd(argv: &[String], attach: bool) -> CmdResult {
    let a = crate::args::Args::parse(argv, "fsw", "o")?;
    let want = if attach { 3 } else { 2 };
    if a.pos.len() != want {
        return Err(Fail::Usage(if attach {
            "usage:\n\tattach [-f] [-w] <pool> <device> <new-device>".into()
        } else {
            "usage:\n\tdetach <pool> <device>".into()
        }));
    }
    let pool = &a.pos[0];
    let new = if attach {
        std::fs::canonicalize(&a.pos[2])
            .map_err(|e| Fail::Err(format!("cannot open '{}': {e}", a.pos[2])))?
            .to_string_lossy()
            .into_owned()
    } else {
        String::new()
    };
    if crate::daemon::in_daemon() {
        return crate::daemon::attach_device(pool, &a.pos[1], attach.then_some(new.as_str()))
            .map_err(Fail::Err);
    }
    let mut rec =
        Record::load(pool).map_err(|_| Fail::Err(format!("cannot open '{pool}': no such pool")))?;
    let w = crate::zfs::writer_for(pool)?;
    let cell = std::cell::RefCell::new(w);
    if attach {
        attach_in(&mut cell.borrow_mut(), &a.pos[1], &new).map_err(Fail::Err)?;
        rec.devices.push(new.clone());
        rec.save_counters(&cell.borrow().pool)
            .map_err(|e| Fail::Err(format!("cannot record the new device: {e}")))?;
        resilver_here(pool, &cell)?;
    } else {
        if let Some(path) = detach_in(&mut cell.borrow_mut(), &a.pos[1]).map_err(Fail::Err)? {
            rec.devices.retain(|d| *d != path);
        }
        rec.save_counters(&cell.borrow().pool)
            .map_err(|e| Fail::Err(format!("cannot record the change: {e}")))?;
    }
    let w = cell.into_inner();
    rec.save_counters(&w.pool)
        .map_err(|e| Fail::Err(format!("cannot save counters: {e}")))
}
