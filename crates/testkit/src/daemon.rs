//! The private zfs-fuse daemon.
//!
//! Why private: the zfs-fuse daemon keeps its state in `/run/zfs` (control
//! socket), `/var/lock/zfs`, `/etc/zfs` (zfsrc) and `/var/lib/zfs`
//! (zpool.cache: every daemon imports the pools listed there when it
//! starts).  A system daemon (or another test process) would share those and
//! pools would leak between runs.  We therefore start `zfs-fuse --no-daemon`
//! inside a new mount namespace (`unshare -m --propagation private`) with
//! fresh tmpfs mounts over those four directories, and talk to it with
//! `nsenter -t <pid> -m zpool|zfs|zdb ...`.  Everything it mounts is visible
//! only inside that namespace; from outside, a dataset mounted at `/x/y` is
//! reached (as root) through `/proc/<pid>/root/x/y`, see [`ZfsFuse::path`].
//!
//! Why serialized: zfs-fuse deadlocks when two pool commands (`zpool create`
//! and `zfs snapshot`, say) overlap, so every command goes through one mutex
//! and has a timeout; the child is killed when it expires and the error
//! carries the command line, stdout and stderr.  File I/O through the mounts
//! is not serialized (it is plain FUSE traffic and works concurrently).
//!
//! Lifetime: one daemon per test *process*, started lazily by
//! [`ZfsFuse::get`].  It is spawned from a dedicated keeper thread that never
//! exits, with `PR_SET_PDEATHSIG = SIGKILL` (the death signal is tied to the
//! spawning *thread*, so spawning from a short-lived test thread would kill
//! the daemon when that test ends).  The daemon therefore dies with the test
//! process; an `atexit` hook also kills it.  Its mount namespace, tmpfs state
//! and FUSE mounts vanish with it.
//!
//! Daemon options: `-x` (xattr support; off by default in zfs-fuse, and the
//! `zfsrc` that would enable it is masked by our tmpfs), `--no-kstat-mount`
//! (it would otherwise create `/zfs-kstat`), attribute/entry cache timeouts 0
//! (so `stat` through the mount is always fresh).

use crate::proc::{run_with_timeout, CmdOutput};
use crate::{Error, Result};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Default timeout of one zpool/zfs/zdb command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Timeout of [`ZfsFuse::zdb_check`] (a full traversal with checksums).
pub const ZDB_TIMEOUT: Duration = Duration::from_secs(600);

const NS_SCRIPT: &str = r#"set -e
mount --make-rprivate /
for d in /run/zfs /var/lock/zfs /etc/zfs /var/lib/zfs; do
    mkdir -p "$d"
    mount -t tmpfs -o mode=0755 tmpfs "$d"
done
exec zfs-fuse --no-daemon --no-kstat-mount -x \
    --fuse-attr-timeout 0 --fuse-entry-timeout 0 --max-arc-size 512
"#;

/// Handle on the process-wide private zfs-fuse daemon.
#[derive(Debug)]
pub struct ZfsFuse {
    pid: u32,
    lock: Mutex<()>,
    log: PathBuf,
    dead: Arc<AtomicBool>,
    exit_status: Arc<Mutex<Option<String>>>,
    hung: AtomicBool,
}

static DAEMON: OnceLock<std::result::Result<ZfsFuse, String>> = OnceLock::new();

extern "C" fn kill_daemon_at_exit() {
    if let Some(Ok(z)) = DAEMON.get() {
        // SAFETY: plain kill(2) of the daemon we started.
        unsafe {
            libc::kill(z.pid as libc::pid_t, libc::SIGKILL);
        }
        let _ = fs::remove_file(&z.log);
    }
}

/// Root of the cargo workspace (where `scripts/` lives).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|p| p.join("scripts").join("install-deps.sh").exists())
        .unwrap_or_else(|| here.parent().and_then(Path::parent).unwrap_or(here))
        .to_path_buf()
}

/// Finds a system tool (zfs-fuse, zpool, ...) in the sbin/bin directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let mut dirs: Vec<PathBuf> = ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Makes sure zfs-fuse is installed, running `scripts/install-deps.sh` if not.
pub fn ensure_installed() -> Result<()> {
    if find_tool("zfs-fuse").is_some() && find_tool("zpool").is_some() {
        return Ok(());
    }
    let script = repo_root().join("scripts").join("install-deps.sh");
    eprintln!(
        "ozfs-testkit: zfs-fuse missing, running {}",
        script.display()
    );
    let out = run_with_timeout(
        Command::new("bash")
            .arg(&script)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        Duration::from_secs(900),
    )?;
    if !out.success() {
        return Err(Error(format!(
            "installing zfs-fuse failed:\n{}",
            out.describe()
        )));
    }
    if find_tool("zfs-fuse").is_none() {
        return Err(Error(format!(
            "{} succeeded but zfs-fuse is still not found",
            script.display()
        )));
    }
    Ok(())
}

impl ZfsFuse {
    /// The shared daemon, started on first use.  Panics (failing the test)
    /// with a full explanation if it cannot be started.
    pub fn get() -> &'static ZfsFuse {
        match Self::try_get() {
            Ok(z) => z,
            Err(e) => panic!("cannot start the private zfs-fuse daemon: {e}"),
        }
    }

    /// Like [`ZfsFuse::get`] but returns the error.
    pub fn try_get() -> Result<&'static ZfsFuse> {
        match DAEMON.get_or_init(|| Self::start().map_err(|e| e.0)) {
            Ok(z) => Ok(z),
            Err(e) => Err(Error(e.clone())),
        }
    }

    fn start() -> Result<ZfsFuse> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(Error(
                "the zfs-fuse harness needs root (mount namespaces, FUSE, /proc/<pid>/root)".into(),
            ));
        }
        ensure_installed()?;
        crate::pool::remove_stale_pool_dirs();
        if !Path::new("/dev/fuse").exists() {
            let _ = Command::new("modprobe").arg("fuse").status();
        }
        let log = std::env::temp_dir().join(format!("ozfs-zfs-fuse-{}.log", std::process::id()));
        let logf = fs::File::create(&log).map_err(|e| Error(format!("{}: {e}", log.display())))?;
        let logf2 = logf.try_clone()?;
        let dead = Arc::new(AtomicBool::new(false));
        let exit_status = Arc::new(Mutex::new(None));
        let (tx, rx) = mpsc::channel::<std::result::Result<u32, String>>();
        let (dead2, status2) = (dead.clone(), exit_status.clone());
        let unshare = find_tool("unshare").unwrap_or_else(|| PathBuf::from("unshare"));
        thread::Builder::new()
            .name("zfs-fuse-keeper".into())
            .spawn(move || {
                let parent = std::process::id() as libc::pid_t;
                let mut cmd = Command::new(unshare);
                cmd.args(["-m", "--propagation", "private", "/bin/sh", "-c", NS_SCRIPT])
                    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                    .stdin(Stdio::null())
                    .stdout(logf)
                    .stderr(logf2);
                // SAFETY: only async-signal-safe calls (prctl, getppid, _exit).
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        if libc::getppid() != parent {
                            libc::_exit(1);
                        }
                        Ok(())
                    });
                }
                match cmd.spawn() {
                    Ok(mut child) => {
                        let _ = tx.send(Ok(child.id()));
                        let st = child.wait();
                        *status2.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(format!("{st:?}"));
                        dead2.store(true, Ordering::SeqCst);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("cannot run unshare: {e}")));
                    }
                }
            })
            .map_err(|e| Error(format!("cannot spawn keeper thread: {e}")))?;
        let pid = rx
            .recv()
            .map_err(|_| Error("keeper thread vanished".into()))?
            .map_err(Error)?;
        let z = ZfsFuse {
            pid,
            lock: Mutex::new(()),
            log,
            dead,
            exit_status,
            hung: AtomicBool::new(false),
        };
        // SAFETY: registering a plain extern "C" fn.
        unsafe {
            libc::atexit(kill_daemon_at_exit);
        }
        // Wait for the control socket, then for a working `zpool list`.
        let sock = z.path("/run/zfs/zfs_socket");
        let t0 = Instant::now();
        while !sock.exists() {
            if z.dead.load(Ordering::SeqCst) {
                return Err(Error(format!(
                    "zfs-fuse exited during startup\n{}",
                    z.diagnostics()
                )));
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(Error(format!(
                    "zfs-fuse did not create its socket within 30 s\n{}",
                    z.diagnostics()
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
        loop {
            let out = z.output(&["zpool", "list"], Duration::from_secs(20))?;
            if out.success() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(40) {
                return Err(Error(format!(
                    "zfs-fuse not answering:\n{}\n{}",
                    out.describe(),
                    z.diagnostics()
                )));
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(z)
    }

    /// PID of the daemon (and of its mount namespace).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Host path of `p` as seen inside the daemon's mount namespace
    /// (`/proc/<pid>/root/<p>`).  Use it to read and write mounted datasets.
    pub fn path(&self, p: impl AsRef<Path>) -> PathBuf {
        let p = p.as_ref();
        let rel = p.strip_prefix("/").unwrap_or(p);
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(rel)
    }

    /// Daemon state and the tail of its log, for error messages.
    pub fn diagnostics(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let status = self
            .exit_status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        format!(
            "zfs-fuse pid {} ({}), log {}:\n{}",
            self.pid,
            match status {
                Some(s) => format!("exited: {s}"),
                None => "running".to_string(),
            },
            self.log.display(),
            tail.join("\n")
        )
    }

    /// Runs `args` (`["zpool", "create", ...]`; the tool is looked up in
    /// /usr/sbin etc.) inside the daemon's namespace, serialized with every
    /// other command, with a timeout.  Returns the raw output whatever the
    /// exit code; errors only if it could not run at all.
    pub fn output<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Result<CmdOutput> {
        let Some((prog, rest)) = args.split_first() else {
            return Err(Error("ZfsFuse::run: empty command".into()));
        };
        let prog_s = prog.as_ref().to_string_lossy().into_owned();
        let prog_path = find_tool(&prog_s).ok_or_else(|| Error(format!("{prog_s}: not found")))?;
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.dead.load(Ordering::SeqCst) {
            return Err(Error(format!(
                "zfs-fuse daemon is dead, cannot run {prog_s}\n{}",
                self.diagnostics()
            )));
        }
        if self.hung.load(Ordering::SeqCst) {
            return Err(Error(format!(
                "zfs-fuse daemon hung on an earlier command; not running {prog_s}\n{}",
                self.diagnostics()
            )));
        }
        let mut cmd = Command::new(find_tool("nsenter").unwrap_or_else(|| "nsenter".into()));
        cmd.arg("-t")
            .arg(self.pid.to_string())
            .arg("-m")
            .arg("--")
            .arg(prog_path)
            .args(rest)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LC_ALL", "C");
        let out = run_with_timeout(&mut cmd, timeout)?;
        if out.timed_out {
            self.hung.store(true, Ordering::SeqCst);
        }
        Ok(out)
    }

    /// Runs a command with [`DEFAULT_TIMEOUT`]; `Ok(stdout)` on exit 0,
    /// otherwise an error with command line, exit status, stdout and stderr.
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<String> {
        self.run_timeout(args, DEFAULT_TIMEOUT)
    }

    /// Runs zfs-fuse's `zdb -e -p <dir> -bcc <pool>` on an exported (or
    /// never imported) pool whose devices are in `dir`: traverses every
    /// block, verifies every checksum and compares the block sum with the
    /// space maps.  `Ok(output)` only if zdb exits 0, reports "No leaks"
    /// and prints nothing that looks like an error or a leak; otherwise an
    /// error with the full output.
    pub fn zdb_check(&self, dir: &Path, pool: &str) -> Result<String> {
        let d = dir.to_string_lossy();
        // `-U` with a cache file that does not exist: zdb must not load the
        // daemon's zpool.cache, or a pool still listed there makes `-e` fail
        // with "File exists" instead of checking the devices.
        let out = self.output(
            &[
                "zdb",
                "-U",
                "/nonexistent/zpool.cache",
                "-e",
                "-p",
                &d,
                "-bcc",
                pool,
            ],
            ZDB_TIMEOUT,
        )?;
        let text = format!("{}\n{}", out.stdout, out.stderr);
        let lower = text.to_lowercase();
        let suspicious: Vec<&str> = text
            .lines()
            .filter(|l| {
                let l = l.to_lowercase();
                (l.contains("error")
                    || l.contains("leak")
                    || l.contains("!= alloc")
                    || l.contains("assert")
                    || l.contains("checksum")
                    || l.contains("fail"))
                    && !l.contains("no leaks (block sum matches space maps exactly)")
                    && !l.starts_with("traversing all blocks")
            })
            .collect();
        if out.success() && lower.contains("no leaks") && suspicious.is_empty() {
            return Ok(out.stdout);
        }
        Err(Error(format!(
            "zdb -bcc of {pool} is not clean{}:\n{}",
            if suspicious.is_empty() {
                String::new()
            } else {
                format!(" ({})", suspicious.join(" | "))
            },
            out.describe()
        )))
    }

    /// [`ZfsFuse::run`] with an explicit timeout.
    pub fn run_timeout<S: AsRef<OsStr>>(&self, args: &[S], timeout: Duration) -> Result<String> {
        let out = self.output(args, timeout)?;
        if out.timed_out {
            return Err(Error(format!("{}\n{}", out.describe(), self.diagnostics())));
        }
        out.into_result()
    }
}
