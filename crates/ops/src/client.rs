//! Talking to the daemon: one JSON request line per connection on
//! `$OZFS_STATE_DIR/ozfsd.sock`, one JSON reply line
//! (`{"ok":true,…}` or `{"ok":false,"err":…,"kind":…}`).
//!
//! Operations on a pool the daemon holds are sent to it
//! ([`crate::proto::execute`]); everything else acts on the pool's devices
//! directly. This module is the transport and the daemon's life cycle
//! (detection, start on demand).

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn socket_path() -> PathBuf {
    crate::host::state_dir().join("ozfsd.sock")
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
    /// A failure reply as the error it reports (kind kept, by name).
    pub fn check(self) -> Result<Reply> {
        if self.ok {
            Ok(self)
        } else {
            Err(crate::proto::error_from_wire(
                self.v["kind"].as_str().unwrap_or("invalid"),
                self.err,
            ))
        }
    }
}

/// Send one request to a running daemon; `None` when no daemon answers.
pub fn call(req: &Value) -> Option<Result<Reply>> {
    let mut s = UnixStream::connect(socket_path()).ok()?;
    Some(exchange(&mut s, req))
}

fn exchange(s: &mut UnixStream, req: &Value) -> Result<Reply> {
    let mut line = req.to_string();
    line.push('\n');
    send_all(s, line.as_bytes()).map_err(|e| Error::io("ozfs daemon", e))?;
    let mut r = BufReader::new(s);
    let mut resp = String::new();
    r.read_line(&mut resp)
        .map_err(|e| Error::io("ozfs daemon", e))?;
    if resp.is_empty() {
        return Err(Error::Invalid(
            "ozfs daemon: no reply (see ozfsd.log in the state directory)".into(),
        ));
    }
    let v: Value = serde_json::from_str(&resp)
        .map_err(|e| Error::Invalid(format!("ozfs daemon: bad reply: {e}")))?;
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
/// When the daemon holds `pool`: apply its live device states, error
/// counters and I/O counters (by guid) to `root`, a tree this process
/// opened itself; returns for how many seconds the daemon has held it (the
/// time its I/O counters cover).
pub fn apply_vdev_state(pool: &str, root: &ozfs_vdev::Vdev) -> Option<f64> {
    if crate::host::in_daemon() {
        return None;
    }
    let Some(Ok(r)) = call(&json!({"cmd": "vdev_state", "pool": pool})) else {
        return None;
    };
    let list = r.v["vdevs"].as_array()?;
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
            let io = &v.stats.io;
            io.read_ops.store(n(8), o);
            io.write_ops.store(n(9), o);
            io.read_bytes.store(n(10), o);
            io.write_bytes.store(n(11), o);
        }
    });
    r.v["secs"].as_f64()
}

pub fn daemon_holds(pool: &str) -> bool {
    matches!(
        call(&json!({"cmd": "holds", "pool": pool})),
        Some(Ok(r)) if r.v["held"].as_bool() == Some(true)
    )
}

/// Start `ozfs daemon -f --auto` in the background (its own session, output
/// to `ozfsd.log` in the state directory) unless one answers; wait for it.
pub fn ensure_daemon() -> Result<()> {
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
    Err(Error::Invalid(format!(
        "ozfs daemon did not start (see {})",
        crate::host::state_dir().join("ozfsd.log").display()
    )))
}

/// Spawn a detached foreground daemon (`auto`: it exits when it holds no pool).
pub fn spawn_daemon(auto: bool) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = crate::host::private_state_dir()?;
    let log_path = dir.join("ozfsd.log");
    let log = crate::host::open_private(&log_path, true)?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::io(format!("open {}", log_path.display()), e))?;
    let exe = std::env::current_exe().map_err(|e| Error::io("ozfs executable", e))?;
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
        .map_err(|e| Error::io("cannot start ozfs daemon", e))?;
    // Reap it in the background if it exits early (it is not our job to wait).
    std::thread::spawn(move || {
        let mut c = child;
        let _ = c.wait();
    });
    Ok(())
}

/// Send a request, starting the daemon first if needed (once more if it was
/// just exiting).
pub fn call_starting(req: &Value) -> Result<Reply> {
    for _ in 0..3 {
        ensure_daemon()?;
        if let Some(Ok(r)) = call(req) {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    match call(req) {
        Some(r) => r,
        None => Err(Error::Invalid("cannot reach the ozfs daemon".into())),
    }
}

/// Datasets the daemon has mounted, with their mountpoints (empty without
/// a daemon). Asked once per process.
pub fn list_mounts() -> Vec<(String, String)> {
    static CACHE: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(|| {
            if crate::host::in_daemon() {
                return Vec::new();
            }
            let Some(Ok(r)) = call(&serde_json::json!({"cmd": "list_mounts"})) else {
                return Vec::new();
            };
            r.v["mounts"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|m| {
                            Some((m[0].as_str()?.to_string(), m[1].as_str()?.to_string()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .clone()
}

/// The encryption roots (pool, root directory object) whose keys the
/// daemon holds; none without a daemon.
pub fn loaded_keys() -> Vec<(String, u64)> {
    if crate::host::in_daemon() {
        return Vec::new();
    }
    let Some(Ok(r)) = call(&serde_json::json!({"cmd": "loaded_keys"})) else {
        return Vec::new();
    };
    r.v["keys"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| Some((k[0].as_str()?.to_string(), k[1].as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Have the daemon (started if needed) take an imported pool and mount its
/// file systems.
pub fn daemon_import(name: &str) -> Result<()> {
    daemon_take(name, false)
}

/// [`daemon_import`] of a pool just created (`created`): the daemon's
/// event says `pool_create`, not `pool_import`.
pub fn daemon_take(name: &str, created: bool) -> Result<()> {
    call_starting(&serde_json::json!({"cmd": "import", "pool": name, "created": created}))
        .map_err(|e| e.context(&format!("cannot mount the file systems of '{name}'")))?
        .check()?;
    Ok(())
}
