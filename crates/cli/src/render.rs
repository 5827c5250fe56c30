//! Rendering shared by the commands: sizes, dates and durations as zpool
//! prints them, the `scan:` and `errors:` lines of `zpool status`, and the
//! progress line of a running scan, and `zfs diff`'s lines.

use ozfs_ops::scan::ScanState;
use std::time::{SystemTime, UNIX_EPOCH};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Human bytes as zpool prints them (1.50M, 0B).
pub fn nice(n: u64) -> String {
    if n < 1024 {
        format!("{n}B")
    } else {
        ozfs_ops::query::nicenum(n)
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

/// A history record's time as `zpool history` prints it
/// (`YYYY-MM-DD.HH:MM:SS`, local time).
pub fn history_date(t: u64) -> String {
    let t = t as libc::time_t;
    // SAFETY: localtime_r/strftime on a local buffer.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        let mut buf = [0u8; 64];
        let fmt = c"%F.%T";
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// An event's time as `zpool events` prints it: `Nov 25 2026
/// 15:40:01.123456789` (local time; the day padded as ctime pads it).
pub fn event_date(sec: u64, nsec: u32) -> String {
    let t = sec as libc::time_t;
    // SAFETY: localtime_r/strftime on a local buffer.
    let s = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        let mut buf = [0u8; 64];
        let fmt = c"%b %e %Y %H:%M:%S";
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    format!("{s}.{nsec:09}")
}

/// The name of user `uid` (None: not in the password database).
pub fn user_name(uid: u64) -> Option<String> {
    let uid = libc::uid_t::try_from(uid).ok()?;
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: getpwuid_r with a local passwd and buffer of the given size;
    // pw_name points into buf when the result is non-null.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut res: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut res);
        if r != 0 || res.is_null() || pw.pw_name.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr(pw.pw_name)
                .to_string_lossy()
                .into_owned(),
        )
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

/// A progress line on stderr (when it is a terminal): percent, bytes, rate
/// and time left. Returns whether it drew.
pub fn draw_progress(s: &ScanState) -> bool {
    // SAFETY: isatty on a file descriptor number has no preconditions.
    if unsafe { libc::isatty(2) } != 1 {
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

/// Progress of a scan, drawn (the line is ended by [`end_progress`]).
pub fn scan_progress() -> impl Fn(&ScanState) + Sync {
    |s: &ScanState| {
        if draw_progress(s) {
            DREW.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

static DREW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// End a progress line, if one was drawn.
pub fn end_progress() {
    if DREW.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
}

/// Wait for the scan of `pool` (run by the daemon) to end, drawing its progress.
pub fn wait_scan(pool: &str) {
    ozfs_ops::scan::wait_done(pool, &scan_progress());
    end_progress();
}

/// How `zfs diff` prints its lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiffStyle {
    /// `-F`: a file-type column.
    pub file_type: bool,
    /// `-H`: a tab instead of ` -> ` in renames.
    pub scripted: bool,
    /// `-t`: the change time first.
    pub ctime: bool,
    /// `-h`: paths as they are, not `\0ooo`-escaped.
    pub raw: bool,
}

/// One line of `zfs diff` (with its newline), as OpenZFS prints it:
/// `[ctime\t]KIND\t[TYPE\t]PATH[ -> NEW | \t(+N)]`, every path after
/// the file system's mountpoint.
pub fn diff_line(mountpoint: &str, c: &ozfs_ops::diff::Change, style: &DiffStyle) -> Vec<u8> {
    let mut out = Vec::new();
    let path = |out: &mut Vec<u8>, p: &[u8]| {
        if style.raw {
            out.extend_from_slice(mountpoint.as_bytes());
            out.extend_from_slice(p);
        } else {
            out.extend_from_slice(ozfs_ops::diff::escape(mountpoint.as_bytes()).as_bytes());
            out.extend_from_slice(ozfs_ops::diff::escape(p).as_bytes());
        }
    };
    if style.ctime {
        out.extend_from_slice(format!("{:>10}.{:09}\t", c.ctime.0, c.ctime.1).as_bytes());
    }
    out.extend_from_slice(format!("{}\t", c.kind.symbol()).as_bytes());
    if style.file_type {
        out.extend_from_slice(format!("{}\t", c.file_type.symbol()).as_bytes());
    }
    path(&mut out, &c.path);
    if let Some(new) = &c.new_path {
        out.extend_from_slice(if style.scripted { b"\t" } else { b" -> " });
        path(&mut out, new);
    }
    if let Some(d) = c.link_delta {
        out.extend_from_slice(format!("\t({d:+})").as_bytes());
    }
    out.push(b'\n');
    out
}

/// Legacy pool versions and what each brought (ZFS's own list, as `zpool
/// upgrade -v` prints it after the features).
pub const POOL_VERSIONS: &[&str] = &[
    "Initial ZFS version",
    "Ditto blocks (replicated metadata)",
    "Hot spares and double parity RAID-Z",
    "zpool history",
    "Compression using the gzip algorithm",
    "bootfs pool property",
    "Separate intent log devices",
    "Delegated administration",
    "refquota and refreservation properties",
    "Cache devices",
    "Improved scrub performance",
    "Snapshot properties",
    "snapused property",
    "passthrough-x aclinherit",
    "user/group space accounting",
    "stmf property support",
    "Triple-parity RAID-Z",
    "Snapshot user holds",
    "Log device removal",
    "Compression using zle (zero-length encoding)",
    "Deduplication",
    "Received properties",
    "Slim ZIL",
    "System attributes",
    "Improved scrub stats",
    "Improved snapshot deletion performance",
    "Improved snapshot creation performance",
    "Multiple vdev replacements",
];

/// File-system (ZPL) versions, as `zfs upgrade -v` prints them.
pub const ZPL_VERSIONS: &[&str] = &[
    "Initial ZFS filesystem version",
    "Enhanced directory entries",
    "Case insensitive and filesystem user identifier (FUID)",
    "userquota, groupquota properties",
    "System attributes",
];

/// A `VER  DESCRIPTION` table of `versions` (numbered from 1).
pub fn version_table(versions: &[&str]) -> String {
    let mut out = String::from(
        "VER  DESCRIPTION\n---  --------------------------------------------------------\n",
    );
    for (i, d) in versions.iter().enumerate() {
        out.push_str(&format!("{:>2}   {d}\n", i + 1));
    }
    out.push_str(
        "\nFor more information on a particular version, including supported releases,\nsee the ZFS Administration Guide.\n",
    );
    out
}

/// One `zpool history` record as printed (with its newline; empty when
/// `internal` is off and the record is not a command). `long` adds who,
/// where and in which zone.
pub fn history_record(r: &ozfs_ops::history::Record, internal: bool, long: bool) -> String {
    use ozfs_ops::history::Event;
    let mut out = String::new();
    let t = crate::render::history_date(r.time);
    let line = match &r.event {
        Event::Command(c) => format!("{t} {c}"),
        _ if !internal => return String::new(),
        Event::Internal {
            event,
            name: Some(n),
            txg,
            text,
        } => {
            let _ = event;
            format!("{t} [internal {n} txg:{txg}] {text}")
        }
        Event::Named {
            name,
            txg,
            dataset,
            text,
        } => match dataset {
            Some((ds, id)) => format!("{t} [txg:{txg}] {name} {ds} ({id}) {text}"),
            None => format!("{t} [txg:{txg}] {name} {text}"),
        },
        Event::Ioctl {
            ioctl,
            input,
            output,
            errno,
        } => {
            let mut l = format!("{t} ioctl {ioctl}\n");
            if let Some(i) = input {
                l.push_str("    input:\n");
                i.dump(8, &mut l);
            }
            if let Some(o) = output {
                l.push_str("    output:\n");
                o.dump(8, &mut l);
            }
            if let Some(e) = errno {
                l.push_str(&format!("    errno: {e}\n"));
            }
            return l;
        }
        Event::Internal { .. } | Event::Unrecognized(_) => {
            let mut l = format!("{t} unrecognized record:\n");
            let nv = match &r.event {
                Event::Unrecognized(nv) => nv.clone(),
                _ => Default::default(),
            };
            nv.dump(4, &mut l);
            return l;
        }
    };
    out.push_str(&line);
    if long {
        let mut who = String::from(" [");
        if let Some(u) = r.who {
            who.push_str(&match crate::render::user_name(u) {
                Some(n) => format!("user {n} on"),
                None => format!("user {u} on"),
            });
        }
        if let Some(h) = &r.host {
            who.push_str(&format!(" {h}"));
        }
        if let Some(z) = &r.zone {
            who.push_str(&format!(":{z}"));
        }
        who.push(']');
        out.push_str(&who);
    }
    out.push('\n');

    out
}

/// A dedup histogram as OpenZFS's `zpool_dump_ddt` prints it (`zdb -DD`,
/// `zdb -S`, `zpool status -D`): a blank line, four header lines, a row
/// per non-empty bucket (labelled by its lowest reference count), the
/// `Total` row when `total` is given, a blank line.
pub fn ddt_histogram(
    h: &ozfs_spa::ddt::Histogram,
    total: Option<&ozfs_spa::ddt::DdtStat>,
) -> String {
    use ozfs_ops::query::nicenum;
    let mut out = String::from("\n");
    out.push_str("bucket              allocated                       referenced          \n");
    out.push_str("______   ______________________________   ______________________________\n");
    let row = |c: [&str; 9]| {
        format!(
            "{:>6}   {:>6}   {:>5}   {:>5}   {:>5}   {:>6}   {:>5}   {:>5}   {:>5}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
        )
    };
    out.push_str(&row([
        "refcnt", "blocks", "LSIZE", "PSIZE", "DSIZE", "blocks", "LSIZE", "PSIZE", "DSIZE",
    ]));
    out.push_str(&row([
        "------", "------", "-----", "-----", "-----", "------", "-----", "-----", "-----",
    ]));
    let stat = |label: String, s: &ozfs_spa::ddt::DdtStat| {
        let v = [
            label,
            nicenum(s.blocks),
            nice(s.lsize),
            nice(s.psize),
            nice(s.dsize),
            nicenum(s.ref_blocks),
            nice(s.ref_lsize),
            nice(s.ref_psize),
            nice(s.ref_dsize),
        ];
        row([
            &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
        ])
    };
    for (b, s) in h.0.iter().enumerate() {
        if s.blocks == 0 {
            continue;
        }
        out.push_str(&stat(nicenum(1u64 << b), s));
    }
    if let Some(t) = total {
        out.push_str(&stat("Total".into(), t));
    }
    out.push('\n');
    out
}

/// `zdb`'s dedup ratio line (`dump_dedup_ratio`), with the blank line
/// after it; nothing for no blocks.
pub fn dedup_ratio_line(t: &ozfs_spa::ddt::DdtStat) -> String {
    if t.blocks == 0 {
        return String::new();
    }
    let d = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let dedup = d(t.ref_dsize, t.dsize);
    let compress = d(t.ref_lsize, t.ref_psize);
    let copies = d(t.ref_dsize, t.ref_psize);
    format!(
        "dedup = {dedup:.2}, compress = {compress:.2}, copies = {copies:.2}, \
         dedup * compress / copies = {:.2}\n\n",
        if copies == 0.0 {
            0.0
        } else {
            dedup * compress / copies
        }
    )
}
