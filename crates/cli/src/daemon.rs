//! `ozfs daemon [-f]`: the process that owns imported pools and serves
//! their datasets through FUSE.
//!
//! The CLI talks to it over `$OZFS_STATE_DIR/ozfsd.sock` (see
//! `ozfs_ops::client`): one JSON request per connection, one JSON reply.
//! Operations that change a pool it holds arrive as typed requests
//! (`ozfs_ops::proto::Request`) and are run on its writer.
//! Without `-f` the daemon detaches (a new session, output to `ozfsd.log`
//! in the state directory); the CLI starts it that way on demand (`zpool
//! import`, `zfs mount`) with `--auto`, which makes it exit once it holds
//! no pool.
//!
//! Invariants:
//! * one writer per pool: the daemon holds the pool's writer lock (the
//!   same `flock` every writing ozfs command takes) and ONE
//!   pool writer, shared by every mounted
//!   dataset of the pool and by the writing commands the CLI forwards
//!   ([`SharedWriter`]); lock order: mount changes, daemon table, then a
//!   mounted dataset's state, then the writer — nothing waits for the
//!   table or a state while holding the writer;
//! * the table lock is never held across a blocking kernel call (mount,
//!   unmount, a thread join, FUSE I/O such as resolving a mountpoint):
//!   changes of the mount table are serialized by their own lock, and an
//!   entry being unmounted leaves the table while the kernel is asked;
//! * a failed unmount leaves the entry in the table (the file system is
//!   still mounted); an export is refused while any file system of the
//!   pool stays mounted; a mount hidden under another is never unmounted
//!   by path (see `ozfs_fuse::shared::Mounted::unmount`);
//! * parents are mounted before children, always: mounting a file system
//!   takes down the daemon's mounts below its mountpoint first and mounts
//!   them again on top of it; lists to mount are sorted by mountpoint
//!   depth (after imports, refused destroys, renames);
//! * mountpoints are opened component by component without following
//!   links and only through directories no other user can write
//!   (`crate::mountpoint`), and the mount goes onto the opened directory;
//! * the socket is private: the state directory is made mode 0700 (an
//!   existing one owned by another user, or a link, is refused; files in
//!   it are opened without following links), the socket 0600 (created under umask 0177), and every connection's peer
//!   must be root or the daemon's own user (`SO_PEERCRED`);
//! * a single daemon per state directory (`flock` on `.ozfsd.lock`); a
//!   socket nobody answers on is stale and replaced;
//! * SIGTERM, SIGINT, SIGHUP or the socket's removal: every dataset is
//!   unmounted (a busy one is synced, then detached), every pool synced —
//!   they stay imported (state files and ACTIVE labels remain) — the
//!   socket removed, exit 0; past `OZFS_SHUTDOWN_SECS` (60) the process
//!   exits 1 whatever still runs.

use crate::args::Args;
use crate::{CmdResult, Fail};
use ozfs_fuse::shared::{Lease, Mounted, SharedWriter};
use ozfs_ops::client::socket_path;
use ozfs_ops::devices::SpareEvent;
use ozfs_ops::events::{Leaf, Queue};
use ozfs_ops::history::Invocation;
use ozfs_ops::host::{state_dir, Record};
use ozfs_ops::names::pool_of;
use ozfs_ops::proto::{Request, Response};
use ozfs_ops::scan::ScanMode;
use ozfs_ops::{Error, Pool};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: ozfs daemon [-f]";

/// One pool the daemon holds.
struct PoolEntry {
    rec: Record,
    pool: Arc<Pool>,
    /// When the daemon took the pool (its I/O counters start then).
    since: Instant,
    sw: SharedWriter,
    /// The pool's writer lock, released when the entry drops.
    _lock: std::fs::File,
}

/// One mounted dataset.
struct MountEntry {
    pool: String,
    dataset: String,
    m: Mounted,
    /// A volume's block device (its mount is the volume's one file).
    vol: Option<crate::zvoldev::VolDev>,
}

#[derive(Default)]
struct Inner {
    pools: BTreeMap<String, PoolEntry>,
    mounts: Vec<MountEntry>,
    /// Addresses the NBD server listens on (`ozfs nbd start`).
    nbd: Vec<String>,
}

struct Daemon {
    /// The table: held only for short looks and edits, never across a
    /// blocking kernel call (mount, unmount, a thread join, FUSE I/O).
    inner: Mutex<Inner>,
    /// Serializes the changes of the mount table (import, mount, unmount,
    /// export): held across the blocking calls. Lock order: `changes`,
    /// then `inner`.
    changes: Mutex<()>,
    auto: bool,
    last_activity: Mutex<Instant>,
}

static DAEMON: OnceLock<Arc<Daemon>> = OnceLock::new();

/// The daemon's event queue (`zpool events`, see `ozfs_ops::events`):
/// pool imports and exports, scans, device changes and the error reports
/// of the vdev trees of the pools it holds.
fn events() -> &'static Arc<Queue> {
    static QUEUE: OnceLock<Arc<Queue>> = OnceLock::new();
    QUEUE.get_or_init(Queue::new)
}

thread_local! {
    /// The device operation this connection thread is running, with the
    /// pool's leaves before it: its events are posted when it succeeded,
    /// or earlier, when it starts a resilver (whose events follow them).
    static PENDING: std::cell::RefCell<Option<(Request, Vec<Leaf>)>> =
        const { std::cell::RefCell::new(None) };
}

/// The guid of a pool the daemon holds.
fn held_guid(d: &Daemon, pool: &str) -> Option<u64> {
    lock(&d.inner).pools.get(pool).map(|p| p.pool.guid)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// In the daemon: the daemon and the shared writer of a pool it holds
/// (`what` names the refused action in the error).
fn held(pool: &str, what: &str) -> Result<(Arc<Daemon>, SharedWriter), String> {
    let d = DAEMON.get().ok_or("not in the daemon")?.clone();
    let sw = lock(&d.inner)
        .pools
        .get(pool)
        .map(|p| p.sw.clone())
        .ok_or_else(|| format!("{what} '{pool}': the ozfs daemon does not hold it"))?;
    Ok((d, sw))
}

/// In the daemon: start a scrub of `pool` in a thread of its own (see
/// `ozfs_ops::scan`); the error counters are saved when it ends.
fn start_scrub(pool: &str, mode: ScanMode) -> Result<(), String> {
    let (d, sw) = held(pool, "cannot scrub")?;
    let name = pool.to_string();
    // One scan at a time: a new resilver covers what a running scan would.
    if ozfs_ops::scan::ScanState::load(pool).is_some_and(|s| s.state == "scanning") {
        ozfs_ops::scan::cancel_and_wait(pool);
    }
    // Visible at once to `zpool status` and `zpool scrub -w`.
    ozfs_ops::scan::ScanState {
        func: if mode == ScanMode::Resilver {
            "resilver".into()
        } else {
            "scrub".into()
        },
        state: "scanning".into(),
        pid: std::process::id(),
        start: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        ..Default::default()
    }
    .save(pool);
    let guid = held_guid(&d, pool).unwrap_or(0);
    let (start, finish) = if mode == ScanMode::Resilver {
        ("resilver_start", "resilver_finish")
    } else {
        ("scrub_start", "scrub_finish")
    };
    events().pool_event(start, pool, guid);
    std::thread::spawn(move || {
        let r = ozfs_ops::scan::run_scrub(
            &name,
            mode,
            &|f| {
                let mut l = sw.lease()?;
                f(&mut l);
                Ok(())
            },
            &|_| {},
        )
        .and_then(|st| {
            // Commit the end of a resilver (labels without the flag).
            let mut l = sw.lease()?;
            l.sync()?;
            Ok(st)
        });
        let fin = match r {
            Ok(st) => Some(st),
            Err(e) => {
                eprintln!("ozfs daemon: {e}");
                ozfs_ops::scan::ScanState::load(&name).map(|mut s| {
                    s.state = "canceled".into();
                    s
                })
            }
        };
        {
            let mut inner = lock(&d.inner);
            if let Some(p) = inner.pools.get_mut(&name) {
                if let Err(e) = p.rec.save_counters(&p.pool) {
                    eprintln!("ozfs daemon: '{name}': saving error counters: {e}");
                }
            }
        }
        // The scan reads as ended only once the labels and the record say
        // what it did (no "resilvered" beside a leaf still resilvering).
        if let Some(st) = fin {
            // As OpenZFS: a canceled scan is a scrub_abort (also a
            // resilver's), a completed one its *_finish.
            let what = if st.state == "canceled" {
                "scrub_abort"
            } else {
                finish
            };
            st.save(&name);
            events().pool_event(what, &name, guid);
        }
    });
    Ok(())
}

/// In the daemon, every half second: a leaf that failed (faulted, removed)
/// in a pool with an available hot spare gets the spare (as ZFS's event
/// daemon does), and a resilver onto it starts.
fn activate_spares(d: &Daemon) {
    let held: Vec<(String, Arc<Pool>, SharedWriter)> = lock(&d.inner)
        .pools
        .iter()
        .map(|(n, p)| (n.clone(), p.pool.clone(), p.sw.clone()))
        .collect();
    for (name, pool, sw) in held {
        let mut started = false;
        for event in ozfs_ops::devices::activate_spares(&pool, &sw) {
            match event {
                SpareEvent::Activated { spare, device } => {
                    eprintln!(
                        "ozfs daemon: '{name}': hot spare {spare} takes over device {device}"
                    );
                    // As OpenZFS's attach of a spare: vdev_spare, then
                    // vdev_attach, about the spare.
                    events().index_pool(&name, &pool);
                    let leaves = ozfs_ops::events::leaves(&pool);
                    if let Some(l) = leaves
                        .iter()
                        .find(|l| l.path.as_deref() == Some(spare.as_str()))
                    {
                        events().vdev_event("vdev_spare", &name, pool.guid, l);
                        events().vdev_event("vdev_attach", &name, pool.guid, l);
                    }
                    started = true;
                }
                SpareEvent::Refused { spare, why, .. } => {
                    eprintln!("ozfs daemon: '{name}': hot spare {spare} not activated: {why}");
                }
            }
        }
        if started {
            if let Some(p) = lock(&d.inner).pools.get_mut(&name) {
                let _ = p.rec.save_counters(&p.pool);
            }
            if let Err(e) = start_scrub(&name, ScanMode::Resilver) {
                eprintln!("ozfs daemon: '{name}': resilver onto the hot spare: {e}");
            }
        }
    }
}

/// In the daemon: zero the error counters of `pool` (all devices, or the
/// one whose path or guid is `dev`), in memory and in its record.
fn clear_counters(pool: &str, dev: Option<&str>) -> Result<(), String> {
    let d = DAEMON.get().ok_or("not in the daemon")?.clone();
    let mut inner = lock(&d.inner);
    let p = inner
        .pools
        .get_mut(pool)
        .ok_or_else(|| format!("cannot clear errors for {pool}: no such pool"))?;
    ozfs_ops::devices::zero_counters(&p.pool, dev).map_err(|e| e.to_string())?;
    p.rec.save_counters(&p.pool).map_err(|e| e.to_string())
}

/// The FUSE options of a dataset's mount, from its properties.
/// The volumes the daemon serves, as NBD exports (`nbd.rs`).
struct NbdExports;

impl crate::nbd::Exports for NbdExports {
    fn find(&self, name: &str) -> Option<Arc<Mutex<ozfs_fuse::State>>> {
        let d = DAEMON.get()?;
        let inner = lock(&d.inner);
        inner
            .mounts
            .iter()
            .find(|m| m.vol.is_some() && m.dataset == name)
            .map(|m| m.m.state.clone())
    }

    fn names(&self) -> Vec<String> {
        let Some(d) = DAEMON.get() else {
            return Vec::new();
        };
        let inner = lock(&d.inner);
        inner
            .mounts
            .iter()
            .filter(|m| m.vol.is_some())
            .map(|m| m.dataset.clone())
            .collect()
    }
}

/// Wait (a bounded time) until the kernel let go of a loop device's
/// backing file, so that the volume's mount can be taken down.
fn wait_loop_released(v: &crate::zvoldev::VolDev) {
    let name = v
        .loop_dev
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let backing = format!("/sys/block/{name}/loop/backing_file");
    for _ in 0..100 {
        if !Path::new(&backing).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn fuse_options(i: &ozfs_ops::mountinfo::DsMount) -> ozfs_fuse::Options {
    ozfs_fuse::Options {
        xattr_sa: i.xattr_sa,
        sync: ozfs_fuse::SyncMode::from_prop(&i.sync),
        log: !i.encrypted && !i.logbias_throughput && ozfs_fuse::zil_enabled(),
        ..ozfs_fuse::Options::dataset(
            &i.name,
            i.readonly,
            i.atime,
            i.setuid,
            i.devices,
            i.exec,
            i.posix_acl,
        )
    }
}

/// The daemon as the holder of its pools, for the operations it runs.
struct Held(Arc<Daemon>);

impl ozfs_ops::host::Holder for Held {
    fn lease(&self, pool: &str) -> Option<ozfs_ops::Result<Lease>> {
        let sw = lock(&self.0.inner).pools.get(pool).map(|p| p.sw.clone())?;
        Some(sw.lease())
    }

    fn update_record(
        &self,
        pool: &str,
        change: &mut dyn FnMut(&mut Record),
    ) -> ozfs_ops::Result<()> {
        let mut inner = lock(&self.0.inner);
        if let Some(p) = inner.pools.get_mut(pool) {
            change(&mut p.rec);
            p.rec.save_counters(&p.pool)?;
        }
        Ok(())
    }

    fn start_scan(&self, pool: &str, mode: ScanMode) -> ozfs_ops::Result<()> {
        // A device operation that starts a resilver has done its change:
        // its events come first, as in OpenZFS.
        self.0.flush_device_events();
        start_scrub(pool, mode).map_err(Error::Invalid)
    }

    fn clear(&self, pool: &str, dev: Option<&str>) -> ozfs_ops::Result<()> {
        clear_counters(pool, dev).map_err(Error::Invalid)
    }
}

pub fn main(argv: &[String]) -> CmdResult {
    // --auto is internal (set when the CLI starts the daemon on demand).
    let auto = argv.iter().any(|a| a == "--auto");
    let rest: Vec<String> = argv.iter().filter(|a| *a != "--auto").cloned().collect();
    let a = Args::parse(&rest, "f", "")?;
    if !a.pos.is_empty() {
        return Err(Fail::Usage(USAGE.into()));
    }
    if !a.flag('f') {
        if std::os::unix::net::UnixStream::connect(socket_path()).is_ok() {
            return Err(Fail::Err("ozfs daemon: already running".into()));
        }
        ozfs_ops::client::spawn_daemon(auto)?;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if UnixStream::connect(socket_path()).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return Err(Fail::Err(format!(
            "ozfs daemon did not start (see {})",
            state_dir().join("ozfsd.log").display()
        )));
    }
    foreground(auto)
}

fn foreground(auto: bool) -> CmdResult {
    let fail = |m: String| Fail::Err(format!("ozfs daemon: {m}"));
    let dir = ozfs_ops::host::private_state_dir().map_err(|e| fail(e.to_string()))?;
    // One daemon per state directory.
    let lock_path = dir.join(".ozfsd.lock");
    let lf = ozfs_ops::host::open_private(&lock_path, false).map_err(|e| fail(e.to_string()))?;
    // SAFETY: flock on a valid descriptor.
    if unsafe { libc::flock(lf.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(fail("already running".into()));
    }
    let sock = socket_path();
    if sock.exists() {
        if UnixStream::connect(&sock).is_ok() {
            return Err(fail("already running".into()));
        }
        let _ = std::fs::remove_file(&sock);
    }
    // SAFETY: umask only changes this process's file creation mask.
    let old = unsafe { libc::umask(0o177) };
    let listener = UnixListener::bind(&sock);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = listener.map_err(|e| fail(format!("bind {}: {e}", sock.display())))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| fail(format!("chmod {}: {e}", sock.display())))?;
    let sock_ino = std::fs::metadata(&sock).map(|m| m.ino()).unwrap_or(0);

    let sigset = ozfs_fuse::block_signals();
    let d = Arc::new(Daemon {
        inner: Mutex::new(Inner::default()),
        changes: Mutex::new(()),
        auto,
        last_activity: Mutex::new(Instant::now()),
    });
    let _ = DAEMON.set(d.clone());
    ozfs_ops::host::set_holder(Arc::new(Held(d.clone())));
    events().install();
    eprintln!(
        "ozfs daemon: pid {} listening on {}",
        std::process::id(),
        sock.display()
    );

    // Termination signals.
    {
        let d = d.clone();
        std::thread::spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits for one of the blocked signals in `sigset`.
            if unsafe { libc::sigwait(&sigset, &mut sig) } == 0 {
                eprintln!("ozfs daemon: signal {sig}: syncing and exiting");
                d.shutdown();
            }
        });
    }
    // Watchdog: the socket removed (state directory gone), or idle in auto mode.
    {
        let d = d.clone();
        let sock = sock.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            activate_spares(&d);
            let ino = std::fs::metadata(&sock).map(|m| m.ino()).ok();
            if ino != Some(sock_ino) {
                eprintln!("ozfs daemon: socket removed: syncing and exiting");
                d.shutdown();
            }
            if d.auto {
                let idle = lock(&d.last_activity).elapsed() > Duration::from_secs(5);
                let inner = lock(&d.inner);
                if idle && inner.pools.is_empty() {
                    let _ = std::fs::remove_file(&sock);
                    eprintln!("ozfs daemon: no pools left: exiting");
                    std::process::exit(0);
                }
            }
        });
    }
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        *lock(&d.last_activity) = Instant::now();
        // A bounded number of connections, each with its own thread: a
        // client past the bound gets an error line at once, not a thread.
        if CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= MAX_CONNECTIONS {
            CONNECTIONS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = conn.write_all(
                format!(
                    "{}\n",
                    err("ozfs daemon: too many connections, try again".into())
                )
                .as_bytes(),
            );
            continue;
        }
        let d = d.clone();
        std::thread::spawn(move || {
            d.serve_conn(conn);
            CONNECTIONS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        });
    }
    Ok(())
}

/// Connections being served at once, at most [`MAX_CONNECTIONS`].
static CONNECTIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
const MAX_CONNECTIONS: usize = 64;

/// How long a connection may stay silent (no byte of its request, or not
/// reading its reply) before it is closed: `OZFS_DAEMON_IDLE_SECS`, 60 by
/// default. It bounds the time, not the size: a long request that keeps
/// arriving is served.
fn idle_timeout() -> Duration {
    let secs = std::env::var("OZFS_DAEMON_IDLE_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&v| v > 0)
        .unwrap_or(60);
    Duration::from_secs(secs)
}

use std::os::unix::fs::MetadataExt;

/// Uid of the peer of a Unix socket.
fn peer_uid(s: &UnixStream) -> Option<u32> {
    // SAFETY: getsockopt into a properly sized, zeroed ucred.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        );
        (r == 0).then_some(cred.uid)
    }
}

fn ok(out: String) -> Value {
    json!({"ok": true, "out": out})
}

fn err(m: String) -> Value {
    json!({"ok": false, "err": m, "code": 1})
}

/// An operation's error as a reply: its message and its kind.
fn op_err(e: &Error) -> Value {
    let (kind, m) = ozfs_ops::proto::error_to_wire(e);
    json!({"ok": false, "err": m, "kind": kind, "code": 1})
}

/// Sort key putting parents before children: mountpoint depth, then path.
fn depth_key(p: &Path) -> (usize, PathBuf) {
    (p.components().count(), p.to_path_buf())
}

/// Order (mountpoint, dataset) pairs parents first (reverse it to unmount
/// children first).
fn parents_first(v: &mut [(PathBuf, String)]) {
    v.sort_by(|a, b| depth_key(&a.0).cmp(&depth_key(&b.0)).then(a.1.cmp(&b.1)));
}

fn str_field<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

impl Daemon {
    fn serve_conn(&self, mut conn: UnixStream) {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let allowed = matches!(peer_uid(&conn), Some(u) if u == 0 || u == me);
        let _ = conn.set_read_timeout(Some(idle_timeout()));
        let _ = conn.set_write_timeout(Some(idle_timeout()));
        let reply = if !allowed {
            err("ozfs daemon: permission denied".into())
        } else {
            let mut line = String::new();
            // One request line, bounded (the largest is a rawio_write
            // with its payload in base64).
            let mut r = BufReader::new(&conn).take(32 << 20);
            match r.read_line(&mut line) {
                Ok(_) => match serde_json::from_str::<Value>(&line) {
                    Ok(req) => self.dispatch(&req),
                    Err(e) => err(format!("ozfs daemon: bad request: {e}")),
                },
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    err(format!(
                        "ozfs daemon: no request within {} s: closing the connection",
                        idle_timeout().as_secs()
                    ))
                }
                Err(e) => err(format!("ozfs daemon: {e}")),
            }
        };
        let mut s = reply.to_string();
        s.push('\n');
        let _ = conn.write_all(s.as_bytes());
        *lock(&self.last_activity) = Instant::now();
        if str_field(&reply, "then") == "shutdown" {
            self.shutdown();
        }
    }

    fn dispatch(&self, req: &Value) -> Value {
        match str_field(req, "cmd") {
            "ping" => ok(String::new()),
            "holds" => {
                let held = lock(&self.inner).pools.contains_key(str_field(req, "pool"));
                json!({"ok": true, "out": "", "held": held})
            }
            "import" => {
                let pool = str_field(req, "pool");
                let _c = lock(&self.changes);
                let created = req["created"].as_bool().unwrap_or(false);
                match self.adopt(pool, created) {
                    Ok(()) => match self.mount_pool(pool) {
                        Ok(()) => ok(String::new()),
                        Err(e) => err(e),
                    },
                    Err(e) => err(format!("cannot import '{pool}': {e}")),
                }
            }
            "mount" => {
                let ds = str_field(req, "dataset");
                let dir = req["dir"].as_str().map(PathBuf::from);
                let _c = lock(&self.changes);
                match self.mount_one(ds, dir, true) {
                    Ok(()) => ok(String::new()),
                    Err(e) => err(e),
                }
            }
            "nbd_listen" => {
                let addr = str_field(req, "addr").to_string();
                if lock(&self.inner).nbd.contains(&addr) {
                    return ok(String::new());
                }
                match crate::nbd::Listener::bind(&addr) {
                    Ok(l) => {
                        lock(&self.inner).nbd.push(addr.clone());
                        eprintln!("ozfs daemon: serving volumes over NBD on {addr}");
                        std::thread::spawn(move || l.run(Arc::new(NbdExports)));
                        ok(String::new())
                    }
                    Err(e) => err(format!("cannot serve NBD on {addr}: {e}")),
                }
            }
            "nbd_list" => ok(lock(&self.inner).nbd.join("\n")),
            "mount_all" => {
                let _c = lock(&self.changes);
                let mut errs = Vec::new();
                for name in Record::all() {
                    if lock(&self.inner).pools.contains_key(&name) {
                        continue;
                    }
                    match Record::load(&name) {
                        Ok(r) if !r.readonly => {
                            if let Err(e) = self.adopt(&name, false) {
                                errs.push(format!("cannot mount '{name}': {e}"));
                            }
                        }
                        _ => {}
                    }
                }
                let pools: Vec<String> = lock(&self.inner).pools.keys().cloned().collect();
                for p in pools {
                    if let Err(e) = self.mount_pool(&p) {
                        errs.push(e);
                    }
                }
                if errs.is_empty() {
                    ok(String::new())
                } else {
                    err(errs.join("\n"))
                }
            }
            "unmount" => {
                let target = str_field(req, "target");
                let _c = lock(&self.changes);
                match self.unmount(target) {
                    Ok(()) => ok(String::new()),
                    Err(e) => err(e),
                }
            }
            "unmount_all" => {
                let _c = lock(&self.changes);
                let mut errs = Vec::new();
                let mut names: Vec<(PathBuf, String)> = lock(&self.inner)
                    .mounts
                    .iter()
                    .map(|m| (m.m.mountpoint.clone(), m.dataset.clone()))
                    .collect();
                parents_first(&mut names);
                for (_, ds) in names.into_iter().rev() {
                    if let Err(e) = self.unmount(&ds) {
                        errs.push(e);
                    }
                }
                if errs.is_empty() {
                    ok(String::new())
                } else {
                    err(errs.join("\n"))
                }
            }
            "rawio_write" | "rawio_read" => self.rawio(req),
            "vdev_state" => {
                // Live device states and counters of a held pool (for
                // `zpool status` run outside the daemon).
                let pool = str_field(req, "pool");
                let inner = lock(&self.inner);
                let Some(p) = inner.pools.get(pool) else {
                    return err(format!("pool '{pool}' is not held"));
                };
                let mut list = Vec::new();
                p.pool.root.walk(0, &mut |v, _| {
                    let (r, w, c) = v.stats.get();
                    let (rops, wops, rbytes, wbytes) = v.stats.io.get();
                    let f = |b: &std::sync::atomic::AtomicBool| {
                        b.load(std::sync::atomic::Ordering::Relaxed)
                    };
                    list.push(json!([
                        v.guid.to_string(),
                        r,
                        w,
                        c,
                        f(&v.stats.faulted),
                        f(&v.stats.offline),
                        f(&v.stats.resilvering),
                        f(&v.stats.removed),
                        rops,
                        wops,
                        rbytes,
                        wbytes
                    ]));
                });
                let secs = p.since.elapsed().as_secs_f64();
                json!({"ok": true, "out": "", "vdevs": list, "secs": secs})
            }
            "loaded_keys" => {
                // The encryption roots whose keys this daemon holds, per
                // pool (`keystatus` as `zfs get` shows it).
                let inner = lock(&self.inner);
                let list: Vec<Value> = inner
                    .pools
                    .iter()
                    .flat_map(|(name, p)| {
                        p.pool
                            .keys
                            .loaded_roots()
                            .into_iter()
                            .map(move |d| json!([name, d]))
                    })
                    .collect();
                json!({"ok": true, "out": "", "keys": list})
            }
            "list_mounts" => {
                let mut inner = lock(&self.inner);
                Self::prune(&mut inner);
                let list: Vec<Value> = inner
                    .mounts
                    .iter()
                    .map(|m| json!([m.dataset, m.m.mountpoint.to_string_lossy()]))
                    .collect();
                json!({"ok": true, "out": "", "mounts": list})
            }
            "export" => {
                let pool = str_field(req, "pool");
                let release = req["release"].as_bool().unwrap_or(false);
                let inv = serde_json::from_value::<Option<Invocation>>(req["history"].clone())
                    .ok()
                    .flatten();
                let _c = lock(&self.changes);
                match self.export_as(pool, release, inv.as_ref()) {
                    Ok(()) => ok(String::new()),
                    Err(e) => err(e),
                }
            }
            "op" => match serde_json::from_value::<Request>(req["op"].clone()) {
                Ok(op) => {
                    // The command line to log; a request without one (a
                    // program's) is not logged.
                    let inv = serde_json::from_value::<Option<Invocation>>(req["history"].clone())
                        .ok()
                        .flatten();
                    self.op(&op, inv.as_ref())
                }
                Err(e) => err(format!("ozfs daemon: bad request: {e}")),
            },
            "events" => {
                let pool = req["pool"].as_str();
                let after = req["after"].as_u64().unwrap_or(0);
                json!({"ok": true, "out": "", "events": events().list(pool, after)})
            }
            "events_clear" => json!({"ok": true, "out": "", "cleared": events().clear()}),
            "shutdown" => json!({"ok": true, "out": "", "then": "shutdown"}),
            other => err(format!("ozfs daemon: unknown request '{other}'")),
        }
    }

    /// Take a pool imported read-write: its writer lock and writer
    /// (`created`: just made by `zpool create`, for its event).
    /// The pool is opened (labels, the MOS: device I/O that a failing
    /// device may hold up) without the daemon's table locked; callers hold
    /// the mount changes, so no other import or export runs meanwhile.
    fn adopt(&self, name: &str, created: bool) -> Result<(), String> {
        if lock(&self.inner).pools.contains_key(name) {
            return Ok(());
        }
        let rec = Record::load(name).map_err(|_| format!("no such pool '{name}'"))?;
        if rec.readonly {
            return Err(format!(
                "pool '{name}' is imported read-only (use 'ozfs mount -o ro')"
            ));
        }
        let lf = ozfs_ops::host::lock_pool_file(name).map_err(|e| e.to_string())?;
        let pool = rec.open_rw().map_err(|e| e.to_string())?;
        pool.cache_data
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let w = ozfs_ops::PoolWriter::open(pool.clone()).map_err(|e| e.to_string())?;
        let mut inner = lock(&self.inner);
        if inner.pools.contains_key(name) {
            return Ok(());
        }
        inner.pools.insert(
            name.to_string(),
            PoolEntry {
                rec,
                pool,
                since: Instant::now(),
                sw: SharedWriter::new(w),
                _lock: lf,
            },
        );
        eprintln!("ozfs daemon: holding pool '{name}'");
        if let Some(p) = inner.pools.get(name) {
            events().index_pool(name, &p.pool);
            let what = if created {
                "pool_create"
            } else {
                "pool_import"
            };
            events().pool_event(what, name, p.pool.guid);
        }
        if inner
            .pools
            .get(name)
            .is_some_and(|p| !p.pool.resilvering_leaves().is_empty())
        {
            // A resilver that did not complete (crash, export): resume it
            // once the caller lets go of the daemon table.
            let n = name.to_string();
            std::thread::spawn(move || {
                if let Err(e) = start_scrub(&n, ScanMode::Resilver) {
                    eprintln!("ozfs daemon: resuming the resilver of '{n}': {e}");
                }
            });
        }
        Ok(())
    }

    /// The writer of held pool `pool` and its mounts (dataset, mountpoint,
    /// state), taken from the table: the caller locks their states with
    /// no table lock held (that would wait for the writer). None when the
    /// pool is not held.
    #[allow(clippy::type_complexity)]
    fn pool_mounts(
        &self,
        pool: &str,
    ) -> Option<(
        SharedWriter,
        Vec<(String, PathBuf, Arc<Mutex<ozfs_fuse::State>>)>,
    )> {
        let mut inner = lock(&self.inner);
        let sw = inner.pools.get(pool).map(|p| p.sw.clone())?;
        Self::prune(&mut inner);
        // File systems only: a volume's mount follows no mount property.
        let mine = inner
            .mounts
            .iter()
            .filter(|m| pool_of(&m.dataset) == pool && m.vol.is_none())
            .map(|m| (m.dataset.clone(), m.m.mountpoint.clone(), m.m.state.clone()))
            .collect();
        Some((sw, mine))
    }

    /// Forget mounts whose file system went away (unmounted from outside):
    /// their threads have ended, so the join does not block.
    fn prune(inner: &mut Inner) {
        let mut i = 0;
        while i < inner.mounts.len() {
            if inner.mounts[i].m.finished() {
                let mut e = inner.mounts.remove(i);
                if let Some(v) = e.vol.take() {
                    crate::zvoldev::detach(&v);
                }
                if let Err(err) = e.m.unmount() {
                    eprintln!("ozfs daemon: {}: {err}", e.dataset);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Mount every file system of `pool` that canmount=on with a
    /// mountpoint, parents before children.
    fn mount_pool(&self, pool: &str) -> Result<(), String> {
        let sw = lock(&self.inner)
            .pools
            .get(pool)
            .ok_or_else(|| format!("no such pool '{pool}'"))?
            .sw
            .clone();
        let list: Vec<ozfs_ops::mountinfo::DsMount> = {
            let w = sw.lease().map_err(|e| e.to_string())?;
            let dsl = w.dsl();
            let root = dsl.root().map_err(|e| e.to_string())?;
            let all = dsl.list(&root, false, None).map_err(|e| e.to_string())?;
            all.iter()
                .filter_map(|d| ozfs_ops::mountinfo::ds_mount_info(&w, &d.name).ok())
                .collect()
        };
        let names: Vec<String> = list
            .iter()
            // As OpenZFS mounts a pool's file systems at import: those
            // whose key is not loaded (the daemon holds none) stay
            // unmounted, without an error.
            .filter(|d| !d.encrypted)
            .map(|d| d.name.clone())
            .collect();
        self.mount_if_on(&names)
    }

    fn mount_one(&self, dataset: &str, dir: Option<PathBuf>, explicit: bool) -> Result<(), String> {
        let fail = |m: &dyn std::fmt::Display| format!("cannot mount '{dataset}': {m}");
        let pool = pool_of(dataset).to_string();
        self.adopt(&pool, false).map_err(|e| fail(&e))?;
        let sw = {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            if inner.mounts.iter().any(|m| m.dataset == dataset) {
                return Err(fail(&"filesystem already mounted"));
            }
            inner
                .pools
                .get(&pool)
                .map(|p| p.sw.clone())
                .ok_or_else(|| fail(&"the pool is not held"))?
        };
        let info = {
            let w = sw.lease().map_err(|e| fail(&e))?;
            ozfs_ops::mountinfo::ds_mount_info(&w, dataset).map_err(|e| e.to_string())?
        };
        if info.is_snapshot {
            return Err(fail(&"snapshots are mounted with 'ozfs mount'"));
        }
        if info.volume {
            return Err(fail(&"operation not applicable to datasets of this type"));
        }
        if explicit && info.canmount == "off" {
            return Err(fail(&"'canmount' property is set to 'off'"));
        }
        let dir = match dir {
            Some(d) => d,
            None if info.mountpoint == "legacy" => {
                return Err(fail(
                    &"legacy mountpoint\nuse mount(8) to mount this filesystem",
                ))
            }
            None if info.mountpoint == "none" || !info.mountpoint.starts_with('/') => {
                return Err(fail(&"no mountpoint set"))
            }
            None => PathBuf::from(&info.mountpoint),
        };
        // Parents before children, always: our mounts below this one are
        // taken down first and mounted again on top of it after (else
        // they would be hidden, unreachable and impossible to unmount).
        let canon = crate::mountpoint::normalize(&dir).map_err(|e| fail(&e))?;
        let below: Vec<(PathBuf, String)> = {
            let inner = lock(&self.inner);
            if inner.mounts.iter().any(|m| m.m.mountpoint == canon) {
                return Err(fail(&format!(
                    "{} is already a mountpoint of the ozfs daemon",
                    canon.display()
                )));
            }
            let mut v: Vec<(PathBuf, String)> = inner
                .mounts
                .iter()
                .filter(|m| m.m.mountpoint.starts_with(&canon))
                .map(|m| (m.m.mountpoint.clone(), m.dataset.clone()))
                .collect();
            parents_first(&mut v);
            v
        };
        let mut down = Vec::new();
        for (mp, ds) in below.iter().rev() {
            if let Err(e) = self.unmount(ds) {
                let _ = self.remount_at(&down);
                return Err(fail(&format!(
                    "it would hide {ds} mounted on {}: {e}",
                    mp.display()
                )));
            }
            down.push((mp.clone(), ds.clone()));
        }
        let r = self.mount_at(&pool, dataset, &sw, &info, &dir);
        let again = self.remount_at(&down);
        r.map_err(|e| fail(&e))?;
        // A file system taken down for this one and not mounted again is
        // reported, never left unmounted in silence.
        if again.is_empty() {
            Ok(())
        } else {
            Err(again.join("\n"))
        }
    }

    /// After `zfs set volsize`: the served volumes of `datasets` take their
    /// new size (the state, the kernel's attributes, the loop device's
    /// capacity), in place: a file system on the device stays mounted.
    fn resize_volumes(&self, datasets: &[String]) {
        let served: Vec<(String, Arc<Mutex<ozfs_fuse::State>>, crate::zvoldev::VolDev)> = {
            let inner = lock(&self.inner);
            inner
                .mounts
                .iter()
                .filter(|m| datasets.contains(&m.dataset))
                .filter_map(|m| {
                    m.vol
                        .clone()
                        .map(|v| (m.dataset.clone(), m.m.state.clone(), v))
                })
                .collect()
        };
        for (ds, st, v) in served {
            let r = ozfs_fuse::shared::lock(&st).vol_refresh();
            match r {
                Ok(size) => match crate::zvoldev::set_capacity(&v) {
                    Ok(()) => eprintln!("ozfs daemon: volume {ds} resized to {size} bytes"),
                    Err(e) => eprintln!("ozfs daemon: volume {ds}: {e}"),
                },
                Err(e) => eprintln!("ozfs daemon: volume {ds}: {e}"),
            }
        }
    }

    /// Read-only devices for the snapshots of volume `vol` not served yet
    /// (`snapdev=visible`); the errors of those that could not be made.
    fn attach_snapshot_devices(&self, pool: &str, sw: &SharedWriter, vol: &str) -> Vec<String> {
        let infos: Vec<ozfs_ops::mountinfo::DsMount> = {
            let Ok(w) = sw.lease() else {
                return Vec::new();
            };
            let dsl = w.dsl();
            let Ok(ds) = dsl.lookup(vol) else {
                return Vec::new();
            };
            let snaps = dsl.snapshots(&ds).unwrap_or_default();
            snaps
                .iter()
                .filter_map(|s| ozfs_ops::mountinfo::ds_mount_info(&w, &s.name).ok())
                .collect()
        };
        let mut errs = Vec::new();
        for i in infos {
            if lock(&self.inner).mounts.iter().any(|m| m.dataset == i.name) {
                continue;
            }
            if let Err(e) = self.attach_volume(pool, sw, &i) {
                errs.push(e);
            }
        }
        errs
    }

    /// Bring the snapshot devices of the served volumes of `pool` in line
    /// with their `snapdev`: made where visible, taken down where hidden.
    fn sync_snapshot_devices(&self, pool: &str) {
        let Some(sw) = lock(&self.inner).pools.get(pool).map(|p| p.sw.clone()) else {
            return;
        };
        let served: Vec<(String, bool)> = lock(&self.inner)
            .mounts
            .iter()
            .filter(|m| m.vol.is_some() && pool_of(&m.dataset) == pool)
            .map(|m| (m.dataset.clone(), m.dataset.contains('@')))
            .collect();
        let visible = |name: &str| -> bool {
            sw.lease()
                .ok()
                .and_then(|w| ozfs_ops::mountinfo::ds_mount_info(&w, name).ok())
                .is_some_and(|i| i.snapdev == "visible" && i.volmode != "none")
        };
        for (name, is_snap) in &served {
            if *is_snap {
                let vol = name.split('@').next().unwrap_or(name);
                if !visible(vol) {
                    let _ = self.unmount(name);
                }
            } else if visible(name) {
                for e in self.attach_snapshot_devices(pool, &sw, name) {
                    eprintln!("ozfs daemon: {e}");
                }
            }
        }
    }

    /// Serve volume `info` as one file under the state directory and bind
    /// a loop device to it, linked as `/dev/zvol/NAME` (`zvoldev`).
    fn attach_volume(
        &self,
        pool: &str,
        sw: &SharedWriter,
        info: &ozfs_ops::mountinfo::DsMount,
    ) -> Result<(), String> {
        use std::os::unix::fs::OpenOptionsExt;
        let dataset = &info.name;
        let fail = |m: &dyn std::fmt::Display| format!("cannot create device for '{dataset}': {m}");
        let file = state_dir().join("zvol").join(dataset);
        if let Some(p) = file.parent() {
            std::fs::create_dir_all(p).map_err(|e| fail(&e))?;
        }
        // What a daemon that died left: loop devices bound to the file,
        // its dead mount, the file.
        crate::zvoldev::clear_stale(&file);
        let _ = std::fs::remove_file(&file);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .map_err(|e| fail(&format!("{}: {e}", file.display())))?;
        let mut opts = fuse_options(info);
        opts.readonly |= info.is_snapshot;
        let readonly = opts.readonly;
        let st = ozfs_fuse::shared::new_state(sw, info.ds_obj, info.recordsize, opts)
            .map_err(|e| fail(&e))?;
        let mut m = ozfs_fuse::shared::spawn_on(Arc::new(Mutex::new(st)), &file, &file, None)
            .map_err(|e| fail(&e))?;
        let vol = match crate::zvoldev::attach(&file, dataset, readonly) {
            Ok(v) => v,
            Err(e) => {
                let _ = m.unmount();
                let _ = std::fs::remove_file(&file);
                return Err(fail(&e));
            }
        };
        eprintln!(
            "ozfs daemon: volume {dataset} on {} ({})",
            vol.loop_dev.display(),
            vol.link.display()
        );
        lock(&self.inner).mounts.push(MountEntry {
            pool: pool.to_string(),
            dataset: dataset.to_string(),
            m,
            vol: Some(vol),
        });
        Ok(())
    }

    /// Resolve `dir` safely, then mount `dataset` there (no table lock held).
    fn mount_at(
        &self,
        pool: &str,
        dataset: &str,
        sw: &SharedWriter,
        info: &ozfs_ops::mountinfo::DsMount,
        dir: &Path,
    ) -> Result<(), String> {
        let target = crate::mountpoint::prepare(dir)?;
        let canon = target.path.clone();
        let opts = fuse_options(info);
        let st = ozfs_fuse::shared::new_state(sw, info.ds_obj, info.recordsize, opts)
            .map_err(|e| e.to_string())?;
        let proc_path = target.proc_path();
        let m = ozfs_fuse::shared::spawn_on(
            Arc::new(Mutex::new(st)),
            &proc_path,
            &canon,
            Some(target.fd),
        )
        .map_err(|e| e.to_string())?;
        eprintln!("ozfs daemon: mounted {dataset} on {}", canon.display());
        lock(&self.inner).mounts.push(MountEntry {
            pool: pool.to_string(),
            dataset: dataset.to_string(),
            m,
            vol: None,
        });
        Ok(())
    }

    /// Mount again what [`Daemon::mount_one`] took down, parents first, at
    /// the places they had; the errors of those that could not be.
    fn remount_at(&self, down: &[(PathBuf, String)]) -> Vec<String> {
        let mut v = down.to_vec();
        parents_first(&mut v);
        let mut errs = Vec::new();
        for (mp, ds) in v {
            if let Err(e) = self.mount_one(&ds, Some(mp), false) {
                eprintln!("ozfs daemon: mounting again: {e}");
                errs.push(e);
            }
        }
        errs
    }

    /// Unmount a dataset (by name or mountpoint): sync, then unmount. The
    /// entry leaves the table while the kernel is asked (no lock held) and
    /// comes back if the unmount failed: a failed unmount leaves the file
    /// system mounted and in the table.
    fn unmount(&self, target: &str) -> Result<(), String> {
        let canon = Path::new(target)
            .is_absolute()
            .then(|| crate::mountpoint::normalize(Path::new(target)).ok())
            .flatten();
        let mut e = {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            let Some(i) = inner
                .mounts
                .iter()
                .position(|m| m.dataset == target || Some(&m.m.mountpoint) == canon.as_ref())
            else {
                return Err(format!("cannot unmount '{target}': not currently mounted"));
            };
            inner.mounts.remove(i)
        };
        let put_back = |e: MountEntry| lock(&self.inner).mounts.push(e);
        if let Some(v) = e.vol.take() {
            crate::zvoldev::detach(&v);
            wait_loop_released(&v);
            eprintln!(
                "ozfs daemon: {} detached from {}",
                e.dataset,
                v.loop_dev.display()
            );
        }
        if let Err(err) = e.m.sync() {
            // A pool whose queued writes failed can sync nothing more:
            // unmounting must still be possible (the pool is then
            // exported and imported again from its last committed txg).
            if !e.m.writes_failed() {
                put_back(e);
                return Err(format!("cannot unmount '{target}': {err}"));
            }
            eprintln!("ozfs daemon: unmounting {target} without a final sync: {err}");
        }
        match e.m.unmount() {
            Ok(()) => {
                eprintln!("ozfs daemon: unmounted {}", e.dataset);
                Ok(())
            }
            Err(err) if err.kind() == std::io::ErrorKind::TimedOut => {
                // The kernel let go of it; only its thread lingers.
                eprintln!("ozfs daemon: unmounted {}: {err}", e.dataset);
                Ok(())
            }
            Err(err) if e.m.finished() && err.raw_os_error() != Some(libc::EBUSY) => {
                // The kernel let go of it and its thread ended; what failed
                // came after (the final sync): it is unmounted, and its
                // entry never goes back to the table.
                eprintln!("ozfs daemon: unmounted {}: {err}", e.dataset);
                Ok(())
            }
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
                let m = format!(
                    "cannot unmount '{}': pool or dataset is busy",
                    e.m.mountpoint.display()
                );
                put_back(e);
                Err(m)
            }
            Err(err) => {
                put_back(e);
                Err(format!("cannot unmount '{target}': {err}"))
            }
        }
    }

    /// Unmount a pool's datasets, then export it (or, with `release`, just
    /// sync it and let go of it, still imported). Refused while any file
    /// system of the pool stays mounted.
    /// `inv`: the command line logged in the pool's history in the
    /// export's txg.
    fn export_as(&self, pool: &str, release: bool, inv: Option<&Invocation>) -> Result<(), String> {
        if !lock(&self.inner).pools.contains_key(pool) {
            return Err(format!(
                "cannot export '{pool}': not held by the ozfs daemon"
            ));
        }
        // A running scrub stops first (it needs only the writer to finish).
        if ozfs_ops::scan::ScanState::load(pool).is_some_and(|s| s.state == "scanning") {
            ozfs_ops::scan::cancel_and_wait(pool);
        }
        let mut mine: Vec<(PathBuf, String)> = {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            inner
                .mounts
                .iter()
                .filter(|m| m.pool == pool)
                .map(|m| (m.m.mountpoint.clone(), m.dataset.clone()))
                .collect()
        };
        parents_first(&mut mine);
        for (_, ds) in mine.into_iter().rev() {
            self.unmount(&ds)
                .map_err(|e| format!("cannot export '{pool}': {e}"))?;
        }
        let mut inner = lock(&self.inner);
        Self::prune(&mut inner);
        if let Some(m) = inner.mounts.iter().find(|m| m.pool == pool) {
            return Err(format!(
                "cannot export '{pool}': '{}' is still mounted on {}",
                m.dataset,
                m.m.mountpoint.display()
            ));
        }
        let Some(mut entry) = inner.pools.remove(pool) else {
            return Err(format!("cannot export '{pool}': not held"));
        };
        drop(inner);
        let mut w = entry
            .sw
            .retire()
            .map_err(|e| format!("cannot export '{pool}': {e}"))?;
        if let Some(inv) = inv {
            if let Err(e) = ozfs_ops::history::append(&mut w, inv) {
                eprintln!("ozfs daemon: {pool}: {e}");
            }
        }
        let r = if release { w.sync() } else { w.export() };
        if let Err(e) = entry.rec.save_counters(&entry.pool) {
            eprintln!("ozfs daemon: {pool}: could not save error counters: {e}");
        }
        r.map_err(|e| format!("cannot export '{pool}': {e}"))?;
        events().forget_pool(pool);
        if !release {
            Record::remove(pool).map_err(|e| format!("cannot export '{pool}': {e}"))?;
            events().pool_event("pool_export", pool, entry.pool.guid);
        }
        eprintln!(
            "ozfs daemon: {} pool '{pool}'",
            if release { "released" } else { "exported" }
        );
        Ok(())
    }

    /// Pre-compressed records over the socket (issue 7), for programs:
    /// `{"cmd":"rawio_write","target":"POOL/FS:PATH","record":N,"algo":"lz4",
    /// "data":BASE64[,"lsize":B][,"cksum":"fletcher4:W0:W1:W2:W3"][,"upgrade":true]}`
    /// → `{"ok":true,"psize":P,"lsize":L}`; `{"cmd":"rawio_read","target":…,
    /// "record":N[,"count":C]}` → the records as `ozfs rawio read --json`
    /// prints them, read through the pool's writer (this txg's changes
    /// included).
    fn rawio(&self, req: &Value) -> Value {
        let target = str_field(req, "target");
        let Some((ds, path)) = target.split_once(':') else {
            return err(format!(
                "rawio: target '{target}' must be POOL/DATASET:PATH"
            ));
        };
        let pool = ds.split('/').next().unwrap_or("");
        let sw = lock(&self.inner).pools.get(pool).map(|p| p.sw.clone());
        let Some(sw) = sw else {
            return err(format!("rawio: pool '{pool}' is not held by the daemon"));
        };
        let Some(record) = req["record"].as_u64() else {
            return err(format!(
                "rawio: '{target}': \"record\" must be a record number, not {}",
                req["record"]
            ));
        };
        let mut lease = match sw.lease() {
            Ok(l) => l,
            Err(e) => return err(format!("rawio: {e}")),
        };
        let r = if str_field(req, "cmd") == "rawio_read" {
            let count = req["count"].as_u64().unwrap_or(1);
            ozfs_ops::rawio::read_records(&mut lease, ds, path, record, count).map(|mut v| {
                v["ok"] = json!(true);
                v
            })
        } else {
            ozfs_ops::rawio::socket_record(req).and_then(|rec| {
                let up = req["upgrade"].as_bool().unwrap_or(false);
                ozfs_ops::rawio::store_record(&mut lease, ds, path, record, rec, up)
                    .map(|(p, l)| json!({"ok": true, "psize": p, "lsize": l}))
            })
        };
        drop(lease);
        if str_field(req, "cmd") != "rawio_read" {
            self.drop_kernel_caches(ds, false);
        }
        r.unwrap_or_else(|e| err(format!("rawio: '{target}': {e}")))
    }

    /// Make the kernel forget what it cached of `dataset`'s mount (and,
    /// with `below`, of its descendants' mounts): it was changed other than
    /// through the mount. The notifications go out with no lock held.
    fn drop_kernel_caches(&self, dataset: &str, below: bool) {
        let states: Vec<_> = {
            let inner = lock(&self.inner);
            inner
                .mounts
                .iter()
                .filter(|e| {
                    e.dataset == dataset || (below && e.dataset.starts_with(&format!("{dataset}/")))
                })
                .map(|e| e.m.state.clone())
                .collect()
        };
        for st in states {
            ozfs_fuse::shared::drop_kernel_caches(&st);
        }
    }

    /// An operation the CLI sent because the daemon holds its pool: run
    /// it on the daemon's writer, then follow it with the mounts it calls for.
    fn op(&self, req: &Request, inv: Option<&Invocation>) -> Value {
        // Whether a file system is mounted is asked with the mount changes
        // held, through the operation: an unmount in progress (its entry
        // out of the table while the kernel is asked, and put back if it
        // refuses) is never taken for "not mounted", and nothing is
        // mounted under the operation's feet.
        let busy_guard = matches!(req, Request::Rm { .. } | Request::UnloadKey { .. })
            .then(|| lock(&self.changes));
        if let Err(e) = self.refuse_busy(req) {
            return err(e);
        }
        // As OpenZFS: a file system renamed, received into, rolled back or
        // destroyed is unmounted first and (unless destroyed) mounted again
        // after, under its new name.
        let moved = match self.unmount_for(req) {
            Ok(m) => m,
            Err(e) => return err(e),
        };
        if let Some((_, p)) = self.device_op(req) {
            let before = ozfs_ops::events::leaves(&p);
            PENDING.with(|c| *c.borrow_mut() = Some((req.clone(), before)));
        }
        let ran = req
            .run_logged(&ozfs_ops::proto::Progress::none(), inv)
            .map(|(r, logged)| {
                if let Some(e) = logged {
                    eprintln!("ozfs daemon: {e}");
                }
                r
            });
        drop(busy_guard);
        let again: Vec<String> = match (&ran, req) {
            (Ok(_), Request::Destroy { .. }) => Vec::new(),
            (Ok(_), Request::Rename { from, to, .. }) => moved
                .iter()
                .map(|d| match d.strip_prefix(from.as_str()) {
                    Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{to}{rest}"),
                    _ => d.clone(),
                })
                .collect(),
            _ => moved,
        };
        if !again.is_empty() {
            let _c = lock(&self.changes);
            if let Err(e) = self.mount_if_on(&again) {
                eprintln!("ozfs daemon: mounting again: {e}");
            }
        }
        // A copy or a raw record into a mounted file system changed it
        // behind the kernel; `snapdir` changes what the root lists, in the
        // named datasets and those inheriting from them.
        match req {
            Request::CopyIn { dataset, .. } | Request::RawioWrite { dataset, .. } => {
                self.drop_kernel_caches(dataset, false)
            }
            Request::Set { assigns, datasets } if assigns.iter().any(|(k, _)| k == "snapdir") => {
                datasets
                    .iter()
                    .for_each(|d| self.drop_kernel_caches(d, true))
            }
            Request::Inherit { prop, datasets, .. } if prop == "snapdir" => datasets
                .iter()
                .for_each(|d| self.drop_kernel_caches(d, true)),
            _ => {}
        }
        let res = match ran {
            Ok(r) => r,
            Err(e) => {
                PENDING.with(|c| c.borrow_mut().take());
                return op_err(&e);
            }
        };
        self.flush_device_events();
        if let Err(e) = self.after(req, &res) {
            return err(e);
        }
        json!({"ok": true, "result": res})
    }

    /// A device operation on a pool the daemon holds: the pool's name and
    /// handle (its events are posted after it succeeds).
    fn device_op(&self, req: &Request) -> Option<(String, Arc<Pool>)> {
        let pool = match req {
            Request::Attach { pool, .. }
            | Request::Replace { pool, .. }
            | Request::Detach { pool, .. }
            | Request::Add { pool, .. }
            | Request::Offline { pool, .. }
            | Request::Clear { pool, .. } => pool,
            _ => return None,
        };
        let p = lock(&self.inner).pools.get(pool).map(|e| e.pool.clone())?;
        Some((pool.clone(), p))
    }

    /// Post the events of the device operation this thread is running
    /// (see [`PENDING`]), once.
    fn flush_device_events(&self) {
        if let Some((req, before)) = PENDING.with(|c| c.borrow_mut().take()) {
            self.device_events(&req, &before);
        }
    }

    /// The events of a device operation that succeeded, from the leaves
    /// before and after it, as OpenZFS posts them: `vdev_add` (once), a
    /// new leaf's `vdev_attach` (attach, replace), a detached leaf's
    /// `vdev_remove`, a leaf taken offline's `statechange`, one brought
    /// back's `vdev_online`, a failed leaf cleared's `vdev_clear`.
    fn device_events(&self, req: &Request, before: &[Leaf]) {
        let Some((name, pool)) = self.device_op(req) else {
            return;
        };
        let q = events();
        q.index_pool(&name, &pool);
        let after = ozfs_ops::events::leaves(&pool);
        let was = |g: u64| before.iter().find(|l| l.guid == g);
        use ozfs_ops::events::state;
        if matches!(req, Request::Add { .. }) {
            q.pool_event("vdev_add", &name, pool.guid);
            return;
        }
        for l in &after {
            match was(l.guid) {
                None => {
                    q.vdev_event("vdev_attach", &name, pool.guid, l);
                }
                Some(b) if b.state != l.state => match (req, l.state) {
                    (Request::Offline { offline: true, .. }, state::OFFLINE) => {
                        q.statechange(&name, pool.guid, l, b.state);
                    }
                    (Request::Offline { offline: false, .. }, _) if b.state == state::OFFLINE => {
                        q.vdev_event("vdev_online", &name, pool.guid, l);
                    }
                    (Request::Clear { .. }, _) => {
                        q.vdev_event("vdev_clear", &name, pool.guid, l);
                    }
                    _ => {}
                },
                Some(_) => {}
            }
        }
        for b in before {
            if !after.iter().any(|l| l.guid == b.guid) {
                q.vdev_event("vdev_remove", &name, pool.guid, b);
            }
        }
    }

    /// Unmount the file systems an operation replaces or renames (the
    /// target and its descendants), children first; returns their names.
    fn unmount_for(&self, req: &Request) -> Result<Vec<String>, String> {
        let fs = match req {
            Request::Rename { from, .. } if !from.contains('@') => from.clone(),
            Request::Receive { target, .. } => {
                target.split('@').next().unwrap_or(target).to_string()
            }
            Request::Rollback { snapshot, .. } => {
                snapshot.split('@').next().unwrap_or(snapshot).to_string()
            }
            Request::Destroy { name, .. } => name.clone(),
            _ => return Ok(Vec::new()),
        };
        let _c = lock(&self.changes);
        let mut hit: Vec<(PathBuf, String)> = {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            inner
                .mounts
                .iter()
                .filter(|m| {
                    m.dataset == fs
                        || m.dataset.starts_with(&format!("{fs}/"))
                        // A volume's snapshot devices (`snapdev=visible`).
                        || (m.vol.is_some() && m.dataset.starts_with(&format!("{fs}@")))
                })
                .map(|m| (m.m.mountpoint.clone(), m.dataset.clone()))
                .collect()
        };
        parents_first(&mut hit);
        let mut done = Vec::new();
        for (_, ds) in hit.into_iter().rev() {
            if let Err(e) = self.unmount(&ds) {
                // Put back what was taken down before failing.
                let _ = self.mount_if_on(&done);
                return Err(e);
            }
            done.push(ds);
        }
        Ok(done)
    }

    /// Removing files under a live mount would pull objects from under the
    /// kernel's feet: `ozfs rm` is refused while the file system is mounted
    /// (remove through the mount).
    fn refuse_busy(&self, req: &Request) -> Result<(), String> {
        let mounted = |name: &str, children: bool| -> Option<String> {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            inner
                .mounts
                .iter()
                .find(|m| {
                    m.dataset == name || (children && m.dataset.starts_with(&format!("{name}/")))
                })
                .map(|m| m.m.mountpoint.display().to_string())
        };
        match req {
            Request::Rm { dataset, path, .. } => match mounted(dataset, false) {
                Some(mp) => Err(format!(
                    "cannot remove '{dataset}:{path}': the dataset is mounted at {mp}; remove it through the mount"
                )),
                None => Ok(()),
            },
            // As OpenZFS: a key is not unloaded under a mounted file system.
            Request::UnloadKey { dataset } => match mounted(dataset, true) {
                Some(_) => Err(format!("Key unload error: '{dataset}' is busy.")),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// After an operation: mount what a `zfs create`, `clone` or `receive`
    /// made (unless `-u`), and follow a `zfs set`/`inherit` of a mount
    /// property — as ZFS does.
    fn after(&self, req: &Request, res: &Response) -> Result<(), String> {
        let created: Vec<String> = match (req, res) {
            (
                Request::Create {
                    no_mount: false, ..
                },
                Response::Created(list),
            ) => list.clone(),
            (
                Request::Clone {
                    no_mount: false,
                    target,
                    ..
                },
                _,
            ) => vec![target.clone()],
            (
                Request::Receive {
                    no_mount: false,
                    target,
                    ..
                },
                _,
            ) => vec![target.split('@').next().unwrap_or(target).to_string()],
            (Request::Snapshot { names, .. }, _) => {
                if let Some(n) = names.first() {
                    let _c = lock(&self.changes);
                    self.sync_snapshot_devices(pool_of(n));
                }
                return Ok(());
            }
            (Request::Set { assigns, datasets }, _) => {
                let keys: Vec<&str> = assigns.iter().map(|(k, _)| k.as_str()).collect();
                if keys.contains(&"volsize") {
                    self.resize_volumes(datasets);
                }
                if keys.contains(&"snapdev") {
                    if let Some(d) = datasets.first() {
                        let _c = lock(&self.changes);
                        self.sync_snapshot_devices(pool_of(d));
                    }
                }
                return self.after_props(&keys, datasets);
            }
            (Request::Inherit { prop, datasets, .. }, _) => {
                if prop == "snapdev" {
                    if let Some(d) = datasets.first() {
                        let _c = lock(&self.changes);
                        self.sync_snapshot_devices(pool_of(d));
                    }
                }
                return self.after_props(&[prop.as_str()], datasets);
            }
            _ => return Ok(()),
        };
        let Some(first) = created.first() else {
            return Ok(());
        };
        let _c = lock(&self.changes);
        if !lock(&self.inner).pools.contains_key(pool_of(first)) {
            return Ok(());
        }
        self.mount_if_on(&created)
    }

    /// `keys` of `datasets` changed: live mount flags follow, and mounts
    /// whose place or permission changed are unmounted, then the pool's
    /// file systems are mounted where they now say.
    fn after_props(&self, keys: &[&str], datasets: &[String]) -> Result<(), String> {
        // acltype is told to the kernel at FUSE init: a change needs a new
        // mount (OpenZFS changes it live).
        let touches = keys
            .iter()
            .any(|k| matches!(*k, "mountpoint" | "canmount" | "acltype"));
        let flags = keys
            .iter()
            .any(|k| matches!(*k, "setuid" | "devices" | "exec" | "readonly" | "atime"));
        let Some(ds) = datasets.last() else {
            return Ok(());
        };
        if flags {
            self.apply_mount_flags(pool_of(ds))?;
        }
        if !touches {
            return Ok(());
        }
        let pool = pool_of(ds).to_string();
        let _c = lock(&self.changes);
        // The pool's mounts, taken from the table (no table lock held
        // while their states are locked: that waits for the writer).
        let Some((sw, mine)) = self.pool_mounts(&pool) else {
            return Ok(());
        };
        // What each mount keeps now (its state lock comes before the lease).
        let acl_now: Vec<bool> = mine
            .iter()
            .map(|(_, _, st)| ozfs_fuse::shared::lock(st).posix_acl())
            .collect();
        // Read under the lease; compare paths as text (a mountpoint may be
        // a path inside another of our own mounts: resolving it would ask
        // that mount, whose requests wait for this very lease).
        let mut stale: Vec<(PathBuf, String)> = {
            let w = sw.lease().map_err(|e| e.to_string())?;
            mine.iter()
                .zip(&acl_now)
                .filter(
                    |((ds, mp, _), acl)| match ozfs_ops::mountinfo::ds_mount_info(&w, ds) {
                        Ok(i) => {
                            i.canmount == "off"
                                || !i.mountpoint.starts_with('/')
                                || Path::new(&i.mountpoint) != mp
                                || i.posix_acl != **acl
                        }
                        Err(_) => true,
                    },
                )
                .map(|((ds, mp, _), _)| (mp.clone(), ds.clone()))
                .collect()
        };
        // Children first.
        parents_first(&mut stale);
        let mut errs = Vec::new();
        for (_, d) in stale.iter().rev() {
            if let Err(e) = self.unmount(d) {
                errs.push(e);
            }
        }
        let stale: Vec<String> = stale.into_iter().map(|(_, d)| d).collect();
        let mut again = stale;
        again.extend(datasets.iter().cloned());
        if let Err(e) = self.mount_if_on(&again) {
            errs.push(e);
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }

    /// A property behind a mount flag changed: every mount of `pool` takes
    /// its dataset's new options, in the FUSE server (readonly, atime) and
    /// in the kernel's per-mount flags (nosuid, nodev, noexec, ro,
    /// noatime), live, as OpenZFS changes them.
    fn apply_mount_flags(&self, pool: &str) -> Result<(), String> {
        let _c = lock(&self.changes);
        // The pool's mounts, taken from the table: the remounts below are
        // kernel calls, made with no table lock held.
        let Some((sw, mine)) = self.pool_mounts(pool) else {
            return Ok(());
        };
        // Read every dataset's options under the lease, apply them after.
        let wanted: Vec<Result<ozfs_fuse::Options, String>> = {
            let w = sw.lease().map_err(|e| e.to_string())?;
            mine.iter()
                .map(|(ds, _, _)| {
                    ozfs_ops::mountinfo::ds_mount_info(&w, ds)
                        .map(|i| fuse_options(&i))
                        .map_err(|e| e.to_string())
                })
                .collect()
        };
        let mut errs = Vec::new();
        for ((ds, mp, st), o) in mine.iter().zip(wanted) {
            let o = match o {
                Ok(o) => o,
                Err(e) => {
                    errs.push(e);
                    continue;
                }
            };
            if let Err(e) = ozfs_fuse::shared::lock(st).set_flags(&o) {
                errs.push(format!("cannot change the options of '{ds}': {e}"));
                continue;
            }
            if let Err(e) = ozfs_fuse::remount_flags(mp, &o) {
                errs.push(format!(
                    "cannot change the mount options of '{ds}' on {}: {e}",
                    mp.display()
                ));
            } else {
                eprintln!("ozfs daemon: {ds} remounted with flags {:#x}", o.ms_flags());
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }

    /// Mount those of `names` that are not mounted and whose properties
    /// say so (canmount=on, an absolute mountpoint), parents before
    /// children (by mountpoint depth, then path), whatever order `names`
    /// come in.
    fn mount_if_on(&self, names: &[String]) -> Result<(), String> {
        let mut errs = Vec::new();
        let mut todo: Vec<(PathBuf, String)> = Vec::new();
        for name in names {
            let pool = pool_of(name).to_string();
            let sw = {
                let inner = lock(&self.inner);
                if inner.mounts.iter().any(|m| &m.dataset == name) {
                    continue;
                }
                match inner.pools.get(&pool) {
                    Some(p) => p.sw.clone(),
                    None => continue,
                }
            };
            let info = {
                let w = sw.lease().map_err(|e| e.to_string())?;
                ozfs_ops::mountinfo::ds_mount_info(&w, name)
            };
            match info {
                // volmode=none: no device; an encrypted volume waits for
                // its key (the daemon holds none); a volume's snapshot gets
                // one where snapdev=visible.
                Ok(i)
                    if i.volume
                        && i.volmode != "none"
                        && !i.encrypted
                        && (!i.is_snapshot || i.snapdev == "visible") =>
                {
                    if let Err(e) = self.attach_volume(&pool, &sw, &i) {
                        errs.push(e);
                    } else if !i.is_snapshot && i.snapdev == "visible" {
                        errs.extend(self.attach_snapshot_devices(&pool, &sw, name));
                    }
                }
                Ok(i) if i.volume => {}
                Ok(i)
                    if i.canmount == "on"
                        && i.mountpoint.starts_with('/')
                        && !i.is_snapshot
                        && !todo.iter().any(|(_, n)| n == name) =>
                {
                    todo.push((PathBuf::from(&i.mountpoint), name.clone()));
                }
                _ => {}
            }
        }
        parents_first(&mut todo);
        for (_, name) in todo {
            if let Err(e) = self.mount_one(&name, None, false) {
                errs.push(e);
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("\n"))
        }
    }

    /// Unmount everything (busy mounts: sync, detach), sync every pool,
    /// exit 0 — within a bounded time: past `OZFS_SHUTDOWN_SECS` (60) the
    /// process exits 1 whatever still runs.
    fn shutdown(&self) -> ! {
        // Once: a signal, the socket's removal (which the first shutdown
        // causes) and a shutdown request may all call it; a second caller
        // must not exit while the first is still unmounting.
        static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            loop {
                std::thread::park();
            }
        }
        let _ = std::fs::remove_file(socket_path());
        let limit = std::env::var("OZFS_SHUTDOWN_SECS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(60);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(limit));
            eprintln!("ozfs daemon: shutdown took over {limit} s: exiting now");
            std::process::exit(1);
        });
        // No mount, unmount, import or export may start or finish behind
        // the table's snapshot below: the changes lock is taken (and kept
        // until exit), waiting for one in progress at most half the limit.
        let t0 = Instant::now();
        let _changes = loop {
            match self.changes.try_lock() {
                Ok(g) => break Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock)
                    if t0.elapsed() < Duration::from_secs(limit / 2) =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    eprintln!(
                        "ozfs daemon: a mount change in progress did not end: shutting down \
                         without it"
                    );
                    break None;
                }
            }
        };
        // The mounts leave the table, then are unmounted with no lock held.
        let mut mounts = {
            let mut inner = lock(&self.inner);
            Self::prune(&mut inner);
            std::mem::take(&mut inner.mounts)
        };
        mounts.sort_by_key(|a| depth_key(&a.m.mountpoint));
        while let Some(mut e) = mounts.pop() {
            // A volume's loop device lets go of its file first.
            if let Some(v) = e.vol.take() {
                crate::zvoldev::detach(&v);
                wait_loop_released(&v);
            }
            if let Err(err) = e.m.sync() {
                eprintln!("ozfs daemon: sync {}: {err}", e.dataset);
            }
            match e.m.unmount() {
                Ok(()) => eprintln!("ozfs daemon: unmounted {}", e.dataset),
                Err(err) => {
                    eprintln!("ozfs daemon: unmount {}: {err}: detaching", e.dataset);
                    e.m.detach();
                    // Its state stays alive (and synced) until exit.
                    std::mem::forget(e);
                }
            }
        }
        let mut inner = lock(&self.inner);
        let mut code = 0;
        for (name, p) in inner.pools.iter_mut() {
            match p.sw.lease() {
                Ok(mut w) => {
                    if let Err(e) = w.sync() {
                        eprintln!("ozfs daemon: sync '{name}': {e}");
                        code = 1;
                    }
                }
                Err(e) => eprintln!("ozfs daemon: '{name}': {e}"),
            }
            let _ = p.rec.save_counters(&p.pool);
        }
        eprintln!("ozfs daemon: exiting");
        std::process::exit(code);
    }
}
