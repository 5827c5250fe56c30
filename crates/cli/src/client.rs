//! Talking to the daemon (see [`crate::daemon`]): one JSON request line per
//! connection on `$OZFS_STATE_DIR/ozfsd.sock`, one JSON reply line
//! (`{"ok":true,"out":…}` or `{"ok":false,"err":…,"code":N}`).
//!
//! Commands that change a pool the daemon holds are forwarded to it
//! ([`forward_if_held`]); everything else acts on the pool files directly.

use crate::{CmdResult, Fail};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn socket_path() -> PathBuf {
    crate::state::state_dir().join("ozfsd.sock")
}

/// A daemon's answer.
pub struct Reply {
    pub ok: bool,
    pub out: String,
    pub err: String,
    pub code: i32,
    pub v: Value,
}

impl Reply {
    /// Print `out`; failures become the command's failure.
    pub fn into_result(self) -> CmdResult {
        if !self.out.is_empty() {
            print!("{}", self.out);
        }
        if self.ok {
            Ok(())
        } else if self.code == 2 {
            Err(Fail::Usage(self.err))
        } else {
            Err(Fail::Err(self.err))
        }
    }
}

/// Send one request to a running daemon; `None` when no daemon answers.
pub fn call(req: &Value) -> Option<Result<Reply, String>> {
    let mut s = UnixStream::connect(socket_path()).ok()?;
    Some(exchange(&mut s, req))
}

fn exchange(s: &mut UnixStream, req: &Value) -> Result<Reply, String> {
    let mut line = req.to_string();
    line.push('\n');
    send_all(s, line.as_bytes()).map_err(|e| format!("ozfs daemon: {e}"))?;
    let mut r = BufReader::new(s);
    let mut resp = String::new();
    r.read_line(&mut resp)
        .map_err(|e| format!("ozfs daemon: {e}"))?;
    if resp.is_empty() {
        return Err("ozfs daemon: no reply (see ozfsd.log in the state directory)".into());
    }
    let v: Value =
        serde_json::from_str(&resp).map_err(|e| format!("ozfs daemon: bad reply: {e}"))?;
    Ok(Reply {
        ok: v["ok"].as_bool().unwrap_or(false),
        out: v["out"].as_str().unwrap_or("").to_string(),
        err: v["err"].as_str().unwrap_or("").to_string(),
        code: v["code"].as_i64().unwrap_or(1) as i32,
        v,
    })
}

/// Write all of `buf` to the daemon's socket with `MSG_NOSIGNAL`: short-
/// lived commands run with SIGPIPE at its default (see `main`), and a
/// daemon gone away must be an error here, not the end of the process.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice; the fd belongs to `s`.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Is a daemon running and holding `pool`?
/// When the daemon holds `pool`: apply its live device states and error
/// counters (by guid) to `root`, a tree this process opened itself.
pub fn apply_vdev_state(pool: &str, root: &ozfs_vdev::Vdev) {
    if crate::daemon::in_daemon() {
        return;
    }
    let Some(Ok(r)) = call(&json!({"cmd": "vdev_state", "pool": pool})) else {
        return;
    };
    let Some(list) = r.v["vdevs"].as_array() else {
        return;
    };
    let mut by_guid = std::collections::HashMap::new();
    for e in list {
        if let Some(g) = e[0].as_str().and_then(|g| g.parse::<u64>().ok()) {
            by_guid.insert(g, e.clone());
        }
    }
    root.walk(0, &mut |v, _| {
        if let Some(e) = by_guid.get(&v.guid) {
            let n = |i: usize| e[i].as_u64().unwrap_or(0);
            let b = |i: usize| e[i].as_bool().unwrap_or(false);
            v.stats.set(n(1), n(2), n(3));
            let o = std::sync::atomic::Ordering::Relaxed;
            v.stats.faulted.store(b(4), o);
            v.stats.offline.store(b(5), o);
            v.stats.resilvering.store(b(6), o);
            v.stats.removed.store(b(7), o);
        }
    });
}

pub fn daemon_holds(pool: &str) -> bool {
    matches!(
        call(&json!({"cmd": "holds", "pool": pool})),
        Some(Ok(r)) if r.v["held"].as_bool() == Some(true)
    )
}

/// Start `ozfs daemon -f --auto` in the background (its own session, output
/// to `ozfsd.log` in the state directory) unless one answers; wait for it.
pub fn ensure_daemon() -> Result<(), String> {
    if UnixStream::connect(socket_path()).is_ok() {
        return Ok(());
    }
    spawn_daemon(true)?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if UnixStream::connect(socket_path()).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "ozfs daemon did not start (see {})",
        crate::state::state_dir().join("ozfsd.log").display()
    ))
}

/// Spawn a detached foreground daemon (`auto`: it exits when it holds no pool).
pub fn spawn_daemon(auto: bool) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let dir = crate::state::state_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let log_path = dir.join("ozfsd.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let log2 = log
        .try_clone()
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("ozfs executable: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("daemon").arg("-f");
    if auto {
        cmd.arg("--auto");
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .current_dir("/");
    // SAFETY: setsid is async-signal-safe; detaches from the terminal's
    // session so that its SIGINT/SIGHUP do not reach the daemon.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start ozfs daemon: {e}"))?;
    // Reap it in the background if it exits early (it is not our job to wait).
    std::thread::spawn(move || {
        let mut c = child;
        let _ = c.wait();
    });
    Ok(())
}

/// Send a request, starting the daemon first if needed (once more if it was
/// just exiting).
pub fn call_starting(req: &Value) -> Result<Reply, String> {
    for _ in 0..3 {
        ensure_daemon()?;
        if let Some(Ok(r)) = call(req) {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    match call(req) {
        Some(r) => r,
        None => Err("cannot reach the ozfs daemon".into()),
    }
}

/// The pool a writing command changes (for forwarding), if any.
fn write_target(argv: &[String]) -> Option<String> {
    let pool_of = |s: &str| s.split(['/', '@', ':']).next().unwrap_or("").to_string();
    let pos = |flags: &str, vals: &str, skip: usize| -> Vec<String> {
        crate::args::Args::parse(&argv[skip..], flags, vals)
            .map(|a| a.pos)
            .unwrap_or_default()
    };
    match (
        argv.first().map(String::as_str),
        argv.get(1).map(String::as_str),
    ) {
        (Some("zfs"), Some("create")) => pos("pu", "oV", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("destroy")) => pos("rRfnpv", "", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("set")) => pos("u", "", 2)
            .iter()
            .find(|s| !s.contains('='))
            .map(|d| pool_of(d)),
        (Some("zfs"), Some("inherit")) => pos("rS", "", 2).get(1).map(|d| pool_of(d)),
        (Some("zfs"), Some("snapshot" | "snap")) => pos("r", "o", 2).first().map(|d| pool_of(d)),
        (Some("rm"), _) => pos("rRf", "", 1).first().map(|d| pool_of(d)),
        (Some("zpool"), Some("scrub")) => pos("spwe", "", 2).first().map(|d| pool_of(d)),
        (Some("zpool"), Some("clear")) => pos("nFX", "", 2).first().map(|d| pool_of(d)),
        (Some("zpool"), Some("replace")) => pos("fsw", "o", 2).first().map(|d| pool_of(d)),
        (Some("zpool"), Some("add")) => pos("fn", "o", 2).first().map(|d| pool_of(d)),
        (Some("zpool"), Some("remove")) => pos("npsw", "", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("rollback")) => pos("rRf", "", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("promote")) => pos("", "", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("clone")) => pos("p", "o", 2).get(1).map(|d| pool_of(d)),
        (Some("zfs"), Some("rename")) => pos("rpfu", "", 2).first().map(|d| pool_of(d)),
        (Some("zfs"), Some("hold" | "release")) => pos("r", "", 2).get(1).map(|d| pool_of(d)),
        (Some("zfs"), Some("receive" | "recv")) => {
            pos("vunFdes", "oxS", 2).first().map(|d| pool_of(d))
        }
        (Some("zpool"), Some("attach" | "detach")) => {
            pos("fsw", "o", 2).first().map(|d| pool_of(d))
        }
        (Some("zpool"), Some("offline" | "online")) => {
            pos("tfe", "", 2).first().map(|d| pool_of(d))
        }

        (Some("rawio"), Some("write")) => {
            let v = crate::rawio::short_args(&argv[2..]);
            crate::args::Args::parse(&v, "U", "ralcS")
                .ok()
                .and_then(|a| a.pos.first().map(|d| pool_of(d)))
        }
        (Some("cp"), _) => {
            // Copy in: SRC POOL/DATASET:PATH.
            let p = pos("rRapv", "", 1);
            (p.len() == 2 && !p[0].contains(':') && p[1].contains(':')).then(|| pool_of(&p[1]))
        }
        _ => None,
    }
}

/// Forward a writing command to the daemon when it holds the pool.
/// `None`: act directly.
pub fn forward_if_held(argv: &[String]) -> Option<CmdResult> {
    if crate::daemon::in_daemon() {
        return None;
    }
    let pool = write_target(argv)?;
    if pool.is_empty() || !daemon_holds(&pool) {
        return None;
    }
    // Local paths are the client's: make them absolute for the daemon.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let argv: Vec<String> = if argv[0] == "cp" {
        let p = crate::args::Args::parse(&argv[1..], "rRapv", "")
            .map(|a| a.pos)
            .unwrap_or_default();
        let mut v = vec!["cp".to_string()];
        v.extend(argv[1..].iter().filter(|a| a.starts_with('-')).cloned());
        v.push(cwd.join(&p[0]).to_string_lossy().into_owned());
        v.push(p[1].clone());
        v
    } else {
        argv.to_vec()
    };
    // zfs receive: the stream is the client's standard input; the daemon
    // reads it from a spool file in the state directory.
    // rawio write: the same for the payload.
    let mut spool = None;
    let stdin_cmd = (argv[0] == "zfs" && matches!(argv[1].as_str(), "receive" | "recv"))
        || (argv[0] == "rawio" && argv[1] == "write");
    let argv = if stdin_cmd {
        let p = crate::state::state_dir().join(format!(".recv-{}.stream", std::process::id()));
        // A rawio payload is bounded; a stream is as long as it is.
        let cap = if argv[0] == "rawio" {
            crate::rawio::MAX_PAYLOAD as u64 + 1
        } else {
            u64::MAX
        };
        let copied = std::fs::File::create(&p)
            .and_then(|mut f| std::io::copy(&mut std::io::stdin().lock().take(cap), &mut f));
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&p);
            return Some(Err(Fail::Err(format!(
                "cannot {}: spooling standard input: {e}",
                argv[1]
            ))));
        }
        let mut v = argv[..2].to_vec();
        v.push("-S".into());
        v.push(p.to_string_lossy().into_owned());
        v.extend(argv[2..].iter().cloned());
        spool = Some(p);
        v
    } else {
        argv
    };
    let r = match call(&json!({"cmd": "run", "argv": argv})) {
        Some(Ok(r)) => r.into_result(),
        Some(Err(e)) => Err(Fail::Err(e)),
        None => Err(Fail::Err("the ozfs daemon went away".into())),
    };
    if let Some(p) = spool {
        let _ = std::fs::remove_file(p);
    }
    // `zpool scrub -w`: the daemon scrubs in the background; wait here.
    if r.is_ok()
        && argv.len() > 2
        && argv[0] == "zpool"
        && matches!(argv[1].as_str(), "replace" | "attach")
    {
        let a = crate::args::Args::parse(&argv[2..], "fsw", "o").ok();
        if let Some(a) = a.filter(|a| a.flag('w')) {
            if let Some(p) = a.pos.first() {
                crate::scan::wait_done(p);
            }
        }
    }
    if r.is_ok() && argv.len() > 2 && argv[0] == "zpool" && argv[1] == "scrub" {
        let a = crate::args::Args::parse(&argv[2..], "spwe", "").ok();
        if let Some(a) = a.filter(|a| a.flag('w') && !a.flag('s') && !a.flag('p')) {
            for p in &a.pos {
                crate::scan::wait_done(p);
            }
        }
    }
    Some(r)
}
