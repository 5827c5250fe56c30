//! A running `ozfs mount` for the FUSE tests (`fuse_mount.rs`,
//! `posix_pjdfstest.rs`): started on a directory, waited for until mounted,
//! unmounted with `fusermount -u` (the server must then exit 0 having
//! printed nothing) or ended with SIGTERM; a leftover server is killed on
//! drop. Plus the fsx helpers ([`find_fsx`], [`fsx_run`], [`FSX_CONFIG`]).
//!
//! Test files use it as `mod common; mod mcommon; mod wcommon;`.

#![allow(dead_code)]

use crate::common::Ozfs;
use crate::wcommon::is_mounted;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `ozfs mount`.
pub struct Mounted {
    child: Option<Child>,
    pub mnt: PathBuf,
    log: PathBuf,
}

impl Mounted {
    pub fn start(oz: &Ozfs, dataset: &str, mnt: &Path, log: &Path, extra: &[&str]) -> Mounted {
        let mnt = mnt.canonicalize().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ozfs"));
        cmd.arg("mount")
            .args(extra)
            .arg(dataset)
            .arg(&mnt)
            .env("OZFS_STATE_DIR", oz.state_dir())
            .env(ozfs_testkit::CHECK_SPACE_ENV, "1")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(File::create(log).unwrap())
            .stderr(File::create(log.with_extension("err")).unwrap());
        let child = cmd.spawn().expect("spawn ozfs mount");
        let mut m = Mounted {
            child: Some(child),
            mnt,
            log: log.to_path_buf(),
        };
        let t0 = Instant::now();
        while !is_mounted(&m.mnt) {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ozfs mount exited ({st}) before mounting:\n{}", m.output());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "ozfs mount: not mounted after 30 s:\n{}",
                m.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn output(&self) -> String {
        format!(
            "stdout: {}\nstderr: {}",
            fs::read_to_string(&self.log).unwrap_or_default(),
            fs::read_to_string(self.log.with_extension("err")).unwrap_or_default()
        )
    }

    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let t0 = Instant::now();
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(
                t0.elapsed() < limit,
                "ozfs mount does not exit:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `fusermount -u`, then the server must exit 0 having printed nothing.
    pub fn unmount(mut self) {
        let st = Command::new("fusermount")
            .arg("-u")
            .arg(&self.mnt)
            .status()
            .unwrap();
        assert!(st.success(), "fusermount -u {}", self.mnt.display());
        let st = self.wait(Duration::from_secs(120));
        let out = self.output();
        assert!(st.success(), "ozfs mount after fusermount -u: {st}\n{out}");
        assert!(
            !out.contains("panicked") && !out.contains("ozfs mount:"),
            "ozfs mount printed errors:\n{out}"
        );
        assert!(!is_mounted(&self.mnt));
    }

    /// SIGTERM: sync, unmount, exit 0.
    pub fn terminate(mut self) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let st = self.wait(Duration::from_secs(120));
        assert!(
            st.success(),
            "ozfs mount after SIGTERM: {st}\n{}",
            self.output()
        );
        assert!(!is_mounted(&self.mnt), "still mounted after SIGTERM");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("fusermount")
                .arg("-u")
                .arg("-z")
                .arg(&self.mnt)
                .status();
            std::thread::sleep(Duration::from_millis(200));
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// fsx configuration of the long run: every operation fsx has that the
/// mount serves (mapped I/O, truncate, fsync/fdatasync, close/reopen,
/// msync(MS_INVALIDATE), fallocate, hole punching, copy_file_range,
/// sendfile, fadvise), without the msync after each mapped write (each one
/// commits a txg: that costs ~8 ms, the short run covers it).
pub const FSX_CONFIG: &str = "\
nomsyncafterwrite = true
[weights]
close_open = 2
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 10
fsync = 1
fdatasync = 1
posix_fallocate = 2
punch_hole = 2
sendfile = 1
posix_fadvise = 1
copy_file_range = 2
";

pub fn find_fsx() -> Option<PathBuf> {
    ozfs_testkit::daemon::find_tool("fsx").or_else(|| {
        std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".cargo/bin/fsx"))
            .filter(|p| p.is_file())
    })
}

/// One fsx run of `ops` operations on `file` (seed `seed`, `config` file
/// if any); panics with the tail of fsx's output unless it is A-OK.
pub fn fsx_run(
    fsx: &Path,
    file: &Path,
    artifacts: &Path,
    config: Option<&Path>,
    ops: u64,
    seed: u64,
) {
    let t0 = Instant::now();
    let mut cmd = Command::new(fsx);
    if let Some(c) = config {
        cmd.arg("-f").arg(c);
    }
    let out = cmd
        .arg("-N")
        .arg(ops.to_string())
        .arg("-S")
        .arg(seed.to_string())
        .arg("-P")
        .arg(artifacts)
        .arg(file)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("All operations completed A-OK"),
        "fsx ({ops} ops, seed {seed}) failed on the ozfs mount:\n{}",
        text.lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "[fsx] {}: {ops} operations OK in {:.1?}",
        file.display(),
        t0.elapsed()
    );
}
