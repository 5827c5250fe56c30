//! A private daemon for one test: a state directory, a pool on a file
//! device in a work directory, every command under a watchdog timeout (a
//! hang fails the test), and checks of the daemon's health (alive, no
//! panic in its log) and of what is mounted where.
//!
//! Used by `daemon_hardening.rs` and `daemon_scenarios.rs` as
//! `mod dcommon;`. On drop: the daemon is asked to shut down (SIGKILL after
//! 30 s) and whatever is still mounted under the work directory is
//! detached.

#![allow(dead_code)]

use ozfs_testkit::Ozfs;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ozfs");

/// One mount as `/proc/self/mountinfo` shows it.
#[derive(Clone, Debug)]
pub struct MountLine {
    pub id: u64,
    pub parent: u64,
    pub dev: u64,
    pub path: String,
    pub source: String,
}

pub fn mount_lines() -> Vec<MountLine> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            let (maj, min) = f.get(2)?.split_once(':')?;
            Some(MountLine {
                id: f.first()?.parse().ok()?,
                parent: f.get(1)?.parse().ok()?,
                dev: libc::makedev(maj.parse().ok()?, min.parse().ok()?),
                path: f.get(4)?.to_string(),
                source: f.get(dash + 2)?.to_string(),
            })
        })
        .collect()
}

/// `st_dev` of `p` through a child process with a timeout (a hung mount
/// must not hang the test); `None` when it fails or hangs.
pub fn dev_of(p: &Path) -> Option<u64> {
    let out = Command::new("timeout")
        .args(["10", "stat", "-c", "%d"])
        .arg(p)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Whether the file system of `dataset` is what `mp` shows now.
pub fn reachable(dataset: &str, mp: &Path) -> bool {
    let Some(dev) = dev_of(mp) else { return false };
    mount_lines()
        .iter()
        .any(|m| m.source == dataset && m.dev == dev && m.path == mp.to_string_lossy())
}

pub struct Env {
    pub oz: Ozfs,
    pub work: tempfile::TempDir,
    pub pool: String,
}

impl Env {
    /// A pool `name` (one 128 MiB file device) with mountpoint `none`,
    /// exported, then imported: the daemon holds it.
    pub fn new(name: &str) -> Env {
        let work = tempfile::Builder::new()
            .prefix(&format!("ozfs-dh-{}-{name}-", std::process::id()))
            .tempdir_in("/var/tmp")
            .expect("work dir");
        let oz = Ozfs::new(BIN).with_timeout(Duration::from_secs(90));
        let dev = work.path().join("dev0");
        fs::File::create(&dev)
            .and_then(|f| f.set_len(128 << 20))
            .expect("device file");
        let env = Env {
            oz,
            work,
            pool: name.to_string(),
        };
        env.ok(&[
            "zpool",
            "create",
            "-f",
            "-m",
            "none",
            name,
            &dev.to_string_lossy(),
        ]);
        env.ok(&["zpool", "export", name]);
        env.ok(&[
            "zpool",
            "import",
            "-d",
            &env.work.path().to_string_lossy(),
            name,
        ]);
        env
    }

    /// A directory under the work directory (as text).
    pub fn dir(&self, rel: &str) -> PathBuf {
        self.work.path().join(rel)
    }

    /// Runs a command; a timeout or a panic fails the test.
    pub fn run(&self, args: &[&str]) -> ozfs_testkit::proc::CmdOutput {
        let out = self.oz.run(args);
        assert!(
            !out.timed_out,
            "ozfs {args:?} hung:\n{}\n{}",
            out.describe(),
            self.log()
        );
        out
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.success(),
            "ozfs {args:?} failed:\n{}\n{}",
            out.describe(),
            self.log()
        );
        out.stdout
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.oz.state_dir().join("ozfsd.log")).unwrap_or_default()
    }

    /// The newest daemon's pid, from its log.
    pub fn daemon_pid(&self) -> Option<i32> {
        self.log()
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("ozfs daemon: pid "))
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok())
    }

    /// The daemon runs and never panicked or aborted.
    pub fn assert_alive(&self, context: &str) {
        let log = self.log();
        assert!(
            !log.contains("panicked") && !log.contains("aborted"),
            "{context}: the daemon panicked:\n{log}"
        );
        let pid = self.daemon_pid().expect("daemon pid");
        // SAFETY: signal 0 only checks that the process exists.
        assert!(
            unsafe { libc::kill(pid, 0) } == 0,
            "{context}: the daemon died:\n{log}"
        );
    }

    /// `zfs list` of the pool: (name, mounted, mountpoint).
    pub fn listed(&self) -> Vec<(String, bool, String)> {
        self.ok(&[
            "zfs",
            "list",
            "-H",
            "-o",
            "name,mounted,mountpoint",
            "-r",
            &self.pool,
        ])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some((
                f.first()?.to_string(),
                *f.get(1)? == "yes",
                f.get(2)?.to_string(),
            ))
        })
        .collect()
    }

    /// What `zfs mount` lists of the pool: (dataset, where it is mounted).
    pub fn mount_listing(&self) -> Vec<(String, String)> {
        self.ok(&["zfs", "mount"])
            .lines()
            .filter_map(|l| {
                let (n, p) = l.trim().split_once(char::is_whitespace)?;
                Some((n.to_string(), p.trim().to_string()))
            })
            .filter(|(n, _)| n == &self.pool || n.starts_with(&format!("{}/", self.pool)))
            .collect()
    }

    /// Every dataset `zfs list` says is mounted is mounted (`zfs mount`
    /// lists it) and reachable where it is mounted — its mountpoint, or
    /// where it stayed when a new mountpoint could not take it (busy).
    pub fn assert_mounted_reachable(&self, context: &str) {
        let listing = self.mount_listing();
        let dump = || {
            format!(
                "{:#?}\n{}",
                mount_lines()
                    .iter()
                    .filter(|m| m.path.starts_with(&*self.work.path().to_string_lossy()))
                    .collect::<Vec<_>>(),
                self.log()
            )
        };
        for (name, mounted, _) in self.listed() {
            if mounted {
                assert!(
                    listing.iter().any(|(n, _)| *n == name),
                    "{context}: {name} is listed mounted but 'zfs mount' does not show it\n{}",
                    dump()
                );
            }
        }
        for (name, mp) in &listing {
            assert!(
                reachable(name, Path::new(mp)),
                "{context}: {name} is mounted on {mp} but is not reachable there\n{}",
                dump()
            );
        }
    }

    /// Mounts of this pool (by source) still in the mount table.
    pub fn pool_mounts(&self) -> Vec<MountLine> {
        mount_lines()
            .into_iter()
            .filter(|m| m.source == self.pool || m.source.starts_with(&format!("{}/", self.pool)))
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let sock = self.oz.state_dir().join("ozfsd.sock");
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
            let _ = s.write_all(b"{\"cmd\":\"shutdown\"}\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
        }
        if let Some(pid) = self.daemon_pid() {
            let t0 = Instant::now();
            // SAFETY: signal 0 / SIGKILL to the daemon this test started.
            while unsafe { libc::kill(pid, 0) } == 0 {
                if t0.elapsed() > Duration::from_secs(30) {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let base = self.work.path().to_string_lossy().into_owned();
        let mut left: Vec<String> = mount_lines()
            .into_iter()
            .map(|m| m.path)
            .filter(|p| p.starts_with(&base))
            .collect();
        left.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in left {
            let _ = Command::new("umount").arg("-l").arg(&p).status();
        }
    }
}
