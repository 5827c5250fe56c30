//! Scrub and resilver: running them, and the scan state `zpool status` reports.
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

use crate::error::{Error, Result};
use crate::host::{state_dir, Record};
pub use ozfs_dsl::scrub::ScanMode;
use ozfs_dsl::scrub::{BlockRef, Progress};
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
pub type WithWriter<'a> = dyn Fn(&mut dyn FnMut(&mut PoolWriter)) -> Result<()> + 'a;

/// Called with the scan's state about once a second while it runs (a
/// front end draws a progress bar from it).
pub type ProgressFn<'a> = dyn Fn(&ScanState) + Sync + 'a;

/// Run a scrub over the pool `w` writes (taken for as long as `lease`
/// says: the closure is called briefly at the start and at the end).
/// Returns the final state, unsaved: the caller saves it
/// ([`ScanState::save`]) once the end of the scan is committed and the
/// pool's record updated, so that no reader ever sees a finished resilver
/// while a leaf is still recorded as awaiting it.
pub fn run_scrub(
    pool_name: &str,
    mode: ScanMode,
    with_writer: &WithWriter<'_>,
    progress: &ProgressFn<'_>,
) -> Result<ScanState> {
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
        return Err(Error::Invalid("cannot scrub: no writer".into()));
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
        progress(&s);
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
        .map_err(|e| e.context(&format!("scan of '{pool_name}' failed")))?;
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
    Ok(st)
}

/// Run a scan in this process, on the writer in `cell` (borrowed briefly
/// at the scan's start and end). The final state is returned unsaved, as
/// from [`run_scrub`].
pub fn run_here(
    pool: &str,
    mode: ScanMode,
    cell: &std::cell::RefCell<crate::Writer>,
    progress: &ProgressFn<'_>,
) -> Result<ScanState> {
    run_scrub(
        pool,
        mode,
        &|f| {
            let mut g = cell.borrow_mut();
            f(&mut g);
            Ok(())
        },
        progress,
    )
}

/// What `zpool scrub` asks of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScrubAction {
    Start,
    Stop,
    Pause,
}

/// `zpool scrub`: start a scrub of `pool` (in the daemon's background when
/// it holds the pool, else here, in the foreground), or ask a running one
/// to stop or pause. Returns the state a foreground scrub ended in.
pub fn scrub(
    pool: &str,
    action: ScrubAction,
    progress: &ProgressFn<'_>,
) -> Result<Option<ScanState>> {
    match action {
        ScrubAction::Stop => request(pool, "stop").map(|()| None),
        ScrubAction::Pause => request(pool, "pause").map(|()| None),
        ScrubAction::Start => start(pool, progress),
    }
}

fn request(pool: &str, what: &str) -> Result<()> {
    Record::load(pool)
        .map_err(|_| Error::NotFound(format!("cannot open '{pool}': no such pool")))?;
    let running = ScanState::load(pool).is_some_and(|s| s.state == "scanning");
    if !running {
        return Err(Error::Invalid(if what == "pause" {
            format!("cannot pause scrubbing {pool}: there is no active scrub")
        } else {
            format!("cannot cancel scrubbing {pool}: there is no active scrub")
        }));
    }
    std::fs::write(ctl_file(pool), what).map_err(|e| Error::io("cannot signal the scrub", e))?;
    // Wait until it took notice (the scrub polls about twice a second).
    for _ in 0..600 {
        if ScanState::load(pool).is_none_or(|s| s.state != "scanning") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::Invalid(format!(
        "cannot cancel scrubbing {pool}: the scrub did not stop"
    )))
}

/// Ask a running scrub to stop and wait until it has.
pub fn cancel_and_wait(pool: &str) {
    let _ = std::fs::write(ctl_file(pool), "stop");
    wait_done(pool, &|_| {});
}

/// Wait until the pool's scan is no longer running, reporting its progress.
pub fn wait_done(pool: &str, progress: &ProgressFn<'_>) {
    while let Some(s) = ScanState::load(pool).filter(|s| s.state == "scanning") {
        progress(&s);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn start(pool: &str, progress: &ProgressFn<'_>) -> Result<Option<ScanState>> {
    let mut rec = Record::load(pool)
        .map_err(|_| Error::NotFound(format!("cannot open '{pool}': no such pool")))?;
    if rec.readonly {
        return Err(Error::Invalid(format!(
            "cannot scrub {pool}: pool is read-only (imported with readonly=on)"
        )));
    }
    if ScanState::load(pool).is_some_and(|s| s.state == "scanning") {
        return Err(Error::Invalid(format!(
            "cannot scrub {pool}: currently scrubbing; use 'zpool scrub -s' to cancel the current scrub"
        )));
    }
    if let Some(h) = crate::host::holder() {
        return h.start_scan(pool, ScanMode::Scrub).map(|()| None);
    }
    // No daemon holds the pool: this process is its writer.
    let cell = std::cell::RefCell::new(crate::host::writer_for(pool)?);
    let st = run_here(pool, ScanMode::Scrub, &cell, progress)?;
    let w = cell.into_inner();
    // As zpool: a scrub that found unrecoverable errors still succeeded;
    // `zpool status -v` tells what was lost. Counters are kept either way.
    let saved = rec
        .save_counters(&w.pool)
        .map_err(|e| e.context("could not save error counters"));
    st.save(pool);
    saved?;
    Ok(Some(st))
}
