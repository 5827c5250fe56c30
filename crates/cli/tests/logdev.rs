//! Separate intent-log devices end to end, through the real binary and
//! the kernel: `zpool create … log DEV`, `zpool add … log DEV`, `zpool
//! status`/`iostat -v`/`list` showing them as OpenZFS does, fsync'd writes
//! on a daemon's mount committed to the log devices, the daemon killed
//! with SIGKILL, the log replayed at the next mount. Independent
//! verdicts: OpenZFS 2.3's `zdb -ivvvvv` finds the log blocks on the log
//! devices, its `zdb -bcc`/`-d` find the pool clean, its `zdb -l` shows
//! `is_log: 1`.

mod common;
mod dcommon;
use dcommon::*;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

const REC: usize = 8192;

fn record(i: usize) -> Vec<u8> {
    let tag = format!("log device record {i:08}\n");
    tag.as_bytes().iter().copied().cycle().take(REC).collect()
}

fn wait_mounted(mp: &Path) {
    let t0 = Instant::now();
    let want = mp.to_string_lossy().to_string();
    while !mount_lines().iter().any(|m| m.path == want) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{want} not mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn device(e: &Env, name: &str) -> String {
    let p = e.dir(name);
    fs::File::create(&p)
        .and_then(|f| f.set_len(128 << 20))
        .expect("device file");
    p.to_string_lossy().into_owned()
}

/// The lines of a `zpool status` config from the `logs` heading on.
fn logs_section(status: &str) -> Vec<String> {
    status
        .lines()
        .skip_while(|l| l.trim() != "logs")
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with("errors"))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn log_devices_made_added_committed_and_replayed() {
    let work = tempfile::Builder::new()
        .prefix(&format!("ozfs-dh-{}-zld-", std::process::id()))
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let e = Env {
        oz: ozfs_testkit::Ozfs::new(BIN).with_timeout(Duration::from_secs(90)),
        work,
        pool: "zld".into(),
    };
    let (d0, l0, l1) = (device(&e, "dev0"), device(&e, "log0"), device(&e, "log1"));
    // Refused as OpenZFS refuses them.
    let out = e.run(&[
        "zpool", "create", "-f", "zldx", &d0, "log", "raidz", &l0, &l1,
    ]);
    assert!(
        !out.success() && out.stderr.contains("unsupported 'log' device: raidz"),
        "{}",
        out.describe()
    );
    let out = e.run(&["zpool", "create", "-f", "zldx", &d0, "log"]);
    assert!(
        !out.success() && out.stderr.contains("log requires at least 1 device"),
        "{}",
        out.describe()
    );
    let out = e.run(&["zpool", "create", "-n", "zld", &d0, "log", &l0]);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains(&format!("\tlogs\n\t  {l0}\n")),
        "{}",
        out.stdout
    );
    e.ok(&[
        "zpool", "create", "-f", "-m", "none", "zld", &d0, "log", &l0,
    ]);
    let st = e.ok(&["zpool", "status", "zld"]);
    assert_eq!(logs_section(&st).len(), 1, "{st}");
    assert!(logs_section(&st)[0].starts_with(&l0), "{st}");
    e.ok(&["zpool", "add", "zld", "log", &l1]);
    let st = e.ok(&["zpool", "status", "zld"]);
    let logs = logs_section(&st);
    assert!(
        logs.len() == 2 && logs[0].starts_with(&l0) && logs[1].starts_with(&l1),
        "{st}"
    );
    // The pool's SIZE is its data device's; the log devices are their class.
    let size: u64 = e
        .ok(&["zpool", "list", "-Hp", "-o", "size", "zld"])
        .trim()
        .parse()
        .unwrap();
    assert!(size > 0 && size <= 128 << 20, "SIZE {size}");
    let io = e.ok(&["zpool", "iostat", "-v", "zld"]);
    let after: Vec<&str> = io.lines().skip_while(|l| !l.starts_with("logs ")).collect();
    assert!(
        after.len() >= 3
            && after[1].trim_start().starts_with(&l0)
            && after[2].trim_start().starts_with(&l1),
        "{io}"
    );
    let zl = e.ok(&["zdb", "-l", &l0]);
    assert!(zl.contains("is_log: 1"), "{zl}");
    e.ok(&["zpool", "export", "zld"]);
    e.ok(&[
        "zpool",
        "import",
        "-d",
        &e.work.path().to_string_lossy(),
        "zld",
    ]);
    let mp = e.dir("mnt");
    e.ok(&[
        "zfs",
        "create",
        "-o",
        &format!("mountpoint={}", mp.display()),
        "zld/db",
    ]);
    wait_mounted(&mp);
    // fsync'd records: each acknowledged commit lands on a log device.
    let mut f = fs::File::create(mp.join("f")).unwrap();
    let n = 40;
    for i in 0..n {
        f.write_all(&record(i)).unwrap();
        f.sync_data().unwrap();
    }
    let pid = e.daemon_pid().expect("daemon pid");
    // SAFETY: killing the test's own daemon.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    drop(f);
    let _ = std::process::Command::new("fusermount")
        .args(["-u", "-z"])
        .arg(&mp)
        .status();
    let zdb = common::oracle_zdb();
    if let Some(zdb) = &zdb {
        // OpenZFS reads the log ozfs left, from the log devices (vdevs 1
        // and 2): a copy, so that its claim does not touch ours.
        let copy = e.dir("copy");
        fs::create_dir(&copy).unwrap();
        for d in ["dev0", "log0", "log1"] {
            fs::copy(e.dir(d), copy.join(d)).unwrap();
        }
        let out = std::process::Command::new(zdb)
            .args(["-e", "-p"])
            .arg(&copy)
            .args(["-ivvvvv", "zld"])
            .output()
            .expect("zdb -ivvvvv");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let blocks: Vec<&str> = text.lines().filter(|l| l.contains("Block seqno")).collect();
        assert!(!blocks.is_empty(), "no log blocks:\n{text}");
        for b in &blocks {
            assert!(
                b.contains("DVA[0]=<1:") || b.contains("DVA[0]=<2:"),
                "a log block off the log devices: {b}\n{text}"
            );
        }
        assert!(text.contains("TX_WRITE"), "{text}");
        fs::remove_dir_all(&copy).unwrap();
    }
    // Mounted again: the new daemon claims and replays from the log devices.
    e.ok(&["zfs", "mount", "-a"]);
    wait_mounted(&mp);
    let data = fs::read(mp.join("f")).unwrap();
    assert!(data.len() >= n * REC, "{} bytes after replay", data.len());
    for i in 0..n {
        assert!(
            data[i * REC..(i + 1) * REC] == record(i)[..],
            "record {i} differs after replay"
        );
    }
    e.ok(&["zpool", "export", "zld"]);
    if let Some(zdb) = &zdb {
        common::openzfs_verdict(zdb, e.work.path(), "zld");
        for l in [&l0, &l1] {
            let out = std::process::Command::new(zdb)
                .args(["-l", l])
                .output()
                .expect("zdb -l");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("is_log: 1"), "OpenZFS zdb -l {l}:\n{text}");
        }
    }
}
