//! Driving the `ozfs` binary from tests.
//!
//! Every invocation gets `OZFS_STATE_DIR` pointing at a private temp dir
//! (the "imported pools" state of ozfs lives there), a timeout, and the
//! checks every test wants: no Rust panic message, sensible exit codes;
//! and `OZFS_CHECK_SPACE=1`, so that every sync of every test checks the
//! space accounting against the blocks.

use crate::proc::{run_with_timeout, CmdOutput};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Set to `1` for every command (and so for every daemon and mount a
/// command starts): each sync checks the pool's space accounting against
/// its blocks and fails on a mismatch (`ozfs_dsl::space`). A test can
/// override it with [`Ozfs::with_env`].
pub const CHECK_SPACE_ENV: &str = "OZFS_CHECK_SPACE";

/// Default timeout of one ozfs command (generous: debug builds are slow).
pub const OZFS_TIMEOUT: Duration = Duration::from_secs(600);

/// An ozfs binary plus a private state directory.
#[derive(Debug)]
pub struct Ozfs {
    bin: PathBuf,
    state: tempfile::TempDir,
    timeout: Duration,
    envs: Vec<(OsString, OsString)>,
}

impl Ozfs {
    /// `bin` is usually `env!("CARGO_BIN_EXE_ozfs")`.
    pub fn new(bin: impl AsRef<Path>) -> Ozfs {
        let state = tempfile::Builder::new()
            .prefix("ozfs-state-")
            .tempdir()
            .expect("creating OZFS_STATE_DIR temp dir");
        Ozfs {
            bin: bin.as_ref().to_path_buf(),
            state,
            timeout: OZFS_TIMEOUT,
            envs: Vec::new(),
        }
    }

    /// The private `OZFS_STATE_DIR`.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Changes the per-command timeout.
    pub fn with_timeout(mut self, t: Duration) -> Ozfs {
        self.timeout = t;
        self
    }

    /// Sets an environment variable for every later command of this runner
    /// (e.g. `OZFS_ZAP_MICRO_MAX_SIZE`).
    pub fn with_env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Ozfs {
        self.envs
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// Runs `ozfs <args>` and returns whatever happened (panics only if the
    /// binary cannot be started).
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> CmdOutput {
        self.run_env::<&str, &str, S>(&[], args)
    }

    /// [`Ozfs::run`] with extra environment variables for this command only
    /// (e.g. `OZFS_FAULT_WRITE_LIMIT`).
    pub fn run_env<K: AsRef<OsStr>, V: AsRef<OsStr>, S: AsRef<OsStr>>(
        &self,
        env: &[(K, V)],
        args: &[S],
    ) -> CmdOutput {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("OZFS_STATE_DIR", self.state.path())
            .env("RUST_BACKTRACE", "1")
            .env("LC_ALL", "C")
            .env(CHECK_SPACE_ENV, "1")
            // Pools stay with the commands that made them: tests serve
            // them with `ozfs mount` or hand them to the daemon on import.
            .env("OZFS_CREATE_NOMOUNT", "1");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run_with_timeout(&mut cmd, self.timeout)
            .unwrap_or_else(|e| panic!("cannot run ozfs ({}): {e}", self.bin.display()));
        assert_no_panic(&out);
        out
    }

    /// Runs a shell script with `$OZFS` naming the binary and the same
    /// environment as [`Ozfs::run`] (for redirections: `"$OZFS" zfs send
    /// p/a@s > f`, `"$OZFS" zfs receive p/b < f`).
    pub fn sh(&self, script: &str) -> CmdOutput {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .env("OZFS", &self.bin)
            .env("OZFS_STATE_DIR", self.state.path())
            .env("RUST_BACKTRACE", "1")
            .env("LC_ALL", "C")
            .env(CHECK_SPACE_ENV, "1")
            // Pools stay with the commands that made them: tests serve
            // them with `ozfs mount` or hand them to the daemon on import.
            .env("OZFS_CREATE_NOMOUNT", "1");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        let out = run_with_timeout(&mut cmd, self.timeout)
            .unwrap_or_else(|e| panic!("cannot run sh for ozfs: {e}"));
        assert_no_panic(&out);
        out
    }

    /// Runs and requires exit code 0; returns stdout.
    pub fn ok<S: AsRef<OsStr>>(&self, args: &[S]) -> String {
        let out = self.run(args);
        if !out.success() {
            panic!("ozfs failed, expected success:\n{}", out.describe());
        }
        out.stdout
    }

    /// Runs and requires a nonzero exit code (not a timeout, not a signal)
    /// and a non-empty stderr; returns the output.
    pub fn fails<S: AsRef<OsStr>>(&self, args: &[S]) -> CmdOutput {
        let out = self.run(args);
        if out.timed_out || out.code.is_none() {
            panic!("ozfs did not exit normally:\n{}", out.describe());
        }
        if out.success() {
            panic!("ozfs succeeded, expected an error:\n{}", out.describe());
        }
        if out.stderr.trim().is_empty() {
            panic!(
                "ozfs failed without an error message on stderr:\n{}",
                out.describe()
            );
        }
        out
    }

    /// Runs and requires exactly exit code `code` with a message on stderr.
    pub fn fails_with<S: AsRef<OsStr>>(&self, code: i32, args: &[S]) -> CmdOutput {
        let out = self.fails(args);
        if out.code != Some(code) {
            panic!("ozfs: expected exit code {code}:\n{}", out.describe());
        }
        out
    }

    /// `ozfs zpool import -d <dir> -o readonly=on <pool>`, must succeed.
    pub fn import_ro(&self, dir: &Path, pool: &str) -> String {
        self.ok(&[
            OsStr::new("zpool"),
            OsStr::new("import"),
            OsStr::new("-d"),
            dir.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("readonly=on"),
            OsStr::new(pool),
        ])
    }

    /// `ozfs cp -r <source> <dest>` (source like `pool/ds@snap:/path`),
    /// must succeed.
    pub fn cp(&self, source: &str, dest: &Path) -> String {
        self.ok(&[
            OsStr::new("cp"),
            OsStr::new("-r"),
            OsStr::new(source),
            dest.as_os_str(),
        ])
    }

    /// `ozfs zfs list -H -o name -t all` as a list of names (must succeed).
    pub fn dataset_names(&self) -> Vec<String> {
        self.ok(&["zfs", "list", "-H", "-o", "name", "-t", "all"])
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }
}

/// Panics if the output shows a Rust panic (or an abort by signal).
pub fn assert_no_panic(out: &CmdOutput) {
    if out.stderr.contains("panicked") || out.stdout.contains("panicked") {
        panic!("ozfs panicked:\n{}", out.describe());
    }
    if out.code.is_none() && !out.timed_out {
        panic!("ozfs was killed by a signal (crash?):\n{}", out.describe());
    }
    if out.code == Some(101) {
        panic!(
            "ozfs exited with 101 (Rust panic exit code):\n{}",
            out.describe()
        );
    }
}

/// Per-device error counters parsed from `zpool status` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRow {
    /// First column (vdev name or path).
    pub name: String,
    /// STATE column.
    pub state: String,
    /// READ errors.
    pub read: u64,
    /// WRITE errors.
    pub write: u64,
    /// CKSUM errors.
    pub cksum: u64,
}

fn parse_count(s: &str) -> Option<u64> {
    let (num, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1_000f64),
        'M' => (&s[..s.len() - 1], 1_000_000f64),
        'G' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1f64),
    };
    num.parse::<f64>().ok().map(|v| (v * mult) as u64)
}

/// Parses the config tree of `zpool status`: every line with at least
/// NAME STATE READ WRITE CKSUM (numeric counters) after the header line.
pub fn parse_status(text: &str) -> Vec<StatusRow> {
    let mut rows = Vec::new();
    let mut in_cfg = false;
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() >= 5 && t[0] == "NAME" && t[1] == "STATE" && t[4] == "CKSUM" {
            in_cfg = true;
            continue;
        }
        if !in_cfg || t.len() < 5 {
            continue;
        }
        if let (Some(r), Some(w), Some(c)) =
            (parse_count(t[2]), parse_count(t[3]), parse_count(t[4]))
        {
            rows.push(StatusRow {
                name: t[0].to_string(),
                state: t[1].to_string(),
                read: r,
                write: w,
                cksum: c,
            });
        }
    }
    rows
}

/// The status row of device file `dev` (matched by full path or by file
/// name).
pub fn status_row<'a>(rows: &'a [StatusRow], dev: &Path) -> Option<&'a StatusRow> {
    let full = dev.to_string_lossy();
    let base = dev
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    rows.iter().find(|r| r.name == full).or_else(|| {
        rows.iter()
            .find(|r| r.name == base || r.name.ends_with(&format!("/{base}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_zpool_status() {
        let s = "  pool: tank\n state: ONLINE\nconfig:\n\n\tNAME          STATE     READ WRITE CKSUM\n\ttank          ONLINE       0     0     0\n\t  raidz1-0    ONLINE       0     0     0\n\t    /x/d0     ONLINE       0     0    12\n\t    /x/d1     ONLINE       0     0  1.5K\n\nerrors: No known data errors\n";
        let rows = parse_status(s);
        assert_eq!(rows.len(), 4);
        assert_eq!(status_row(&rows, Path::new("/x/d0")).unwrap().cksum, 12);
        assert_eq!(status_row(&rows, Path::new("/y/d1")).unwrap().cksum, 1500);
    }
}
