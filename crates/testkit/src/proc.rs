//! Running child processes with a hard timeout and captured output.

use crate::{Error, Result};
use std::ffi::OsStr;
use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Outcome of a finished (or killed) child process.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// Printable command line (for messages).
    pub cmdline: String,
    /// Exit code; `None` when killed by a signal (or by the timeout).
    pub code: Option<i32>,
    /// Captured standard output (lossy UTF-8).
    pub stdout: String,
    /// Captured standard error (lossy UTF-8).
    pub stderr: String,
    /// True if the timeout expired and the child was killed.
    pub timed_out: bool,
    /// Wall-clock duration.
    pub elapsed: Duration,
}

impl CmdOutput {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// Multi-line description: command, status, stdout and stderr.
    pub fn describe(&self) -> String {
        let status = if self.timed_out {
            format!("TIMED OUT after {:.1?} (killed)", self.elapsed)
        } else {
            match self.code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_string(),
            }
        };
        format!(
            "command: {}\nstatus: {status} ({:.1?})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline,
            self.elapsed,
            truncate_for_report(&self.stdout),
            truncate_for_report(&self.stderr)
        )
    }

    /// `Ok(stdout)` on exit code 0, otherwise an error describing everything.
    pub fn into_result(self) -> Result<String> {
        if self.success() {
            Ok(self.stdout)
        } else {
            Err(Error(self.describe()))
        }
    }
}

fn truncate_for_report(s: &str) -> String {
    const MAX: usize = 8000;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut cut = MAX;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n... ({} more bytes)", &s[..cut], s.len() - cut)
}

/// Printable form of a command line (arguments quoted when needed).
pub fn cmdline<S: AsRef<OsStr>>(program: &OsStr, args: &[S]) -> String {
    let mut out = program.to_string_lossy().into_owned();
    for a in args {
        let a = a.as_ref().to_string_lossy();
        out.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"\\$`".contains(c)) {
            out.push('\'');
            out.push_str(&a.replace('\'', "'\\''"));
            out.push('\'');
        } else {
            out.push_str(&a);
        }
    }
    out
}

/// Runs `cmd` (stdin = /dev/null, stdout/stderr captured) and waits at most
/// `timeout`; on expiry the child is killed (SIGKILL) and the result has
/// `timed_out = true`.  Only fails if the program cannot be started.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<CmdOutput> {
    let args: Vec<_> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let line = cmdline(cmd.get_program(), &args);
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error(format!("cannot start `{line}`: {e}")))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => return Err(Error(format!("waiting for `{line}`: {e}"))),
        }
        if start.elapsed() >= timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().ok();
        }
        let waited = start.elapsed();
        // Poll fast at first (most commands take milliseconds), then slower.
        let nap = if waited < Duration::from_millis(50) {
            Duration::from_millis(1)
        } else if waited < Duration::from_secs(2) {
            Duration::from_millis(10)
        } else {
            Duration::from_millis(50)
        };
        thread::sleep(nap);
    };
    // If the child forked helpers that keep the pipes open, don't hang on them.
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    Ok(CmdOutput {
        cmdline: line,
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        timed_out,
        elapsed: start.elapsed(),
    })
}

/// Limits the address space of the process `cmd` will start to `bytes`
/// (`RLIMIT_AS`): an allocation sized from hostile data then fails (Rust
/// aborts with "memory allocation of N bytes failed") instead of being
/// served or swapping the machine.
pub fn limit_address_space(cmd: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
}
