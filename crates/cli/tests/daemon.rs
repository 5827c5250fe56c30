//! (g) The daemon: `zpool import` mounts, `zfs mount`/`unmount`,
//! forwarded writing commands, `zpool export`, SIGTERM.
//!
//! ozfs creates a pool with `-m <work>/mnt` and a child `pool/a`, exports
//! it; `zpool import` (no `-N`) starts the daemon, which mounts both at
//! their mountpoints. Files written through both mounts survive `zfs
//! unmount` + `zfs mount`; `zfs mount` lists the mounts; `zfs create`
//! (which mounts the new file system), `zfs set`/`inherit` of mountpoint and
//! canmount (which move or unmount it at once),
//! `zfs mount -a` and `ozfs cp` into a dataset go through the daemon (it
//! holds the pool); `zpool export` unmounts everything and leaves a pool
//! zfs-fuse's `zdb -bcc` finds clean. Then a file written just before the
//! daemon's SIGTERM is there after the next `zfs mount -a`.

mod common;
mod wcommon;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wcommon::*;

fn mounted_dirs() -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(String::from))
        .collect()
}

fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy().into_owned();
    mounted_dirs().contains(&want)
}

/// The most recent daemon's pid, from its log.
fn daemon_pid(oz: &Ozfs) -> Option<i32> {
    let log = fs::read_to_string(oz.state_dir().join("ozfsd.log")).ok()?;
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix("ozfs daemon: pid "))
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn wait_gone(pid: i32, limit: Duration) -> bool {
    let t0 = Instant::now();
    while alive(pid) {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Stops the daemon (shutdown request, else SIGKILL) and unmounts leftovers.
struct Cleanup<'a> {
    oz: &'a Ozfs,
    mnts: Vec<PathBuf>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let sock = self.oz.state_dir().join("ozfsd.sock");
        if let Ok(mut s) = UnixStream::connect(&sock) {
            let _ = s.write_all(b"{\"cmd\":\"shutdown\"}\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
        }
        if let Some(pid) = daemon_pid(self.oz) {
            if !wait_gone(pid, Duration::from_secs(30)) {
                // SAFETY: killing the daemon this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                wait_gone(pid, Duration::from_secs(5));
            }
        }
        for m in self.mnts.iter().rev() {
            if is_mounted(m) {
                let _ = std::process::Command::new("fusermount")
                    .arg("-u")
                    .arg("-z")
                    .arg(m)
                    .status();
            }
        }
    }
}

fn daemon_log(oz: &Ozfs) -> String {
    fs::read_to_string(oz.state_dir().join("ozfsd.log")).unwrap_or_default()
}

#[test]
fn daemon_mounts() {
    let tag = "daemon";
    let t0 = Instant::now();
    let pool = new_devs("ozdmn", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir();
    let oz = ozfs();
    let work = local_dir(tag);
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let mnt_a = mnt.join("a");
    let mnt_b = mnt.join("b");
    let _cleanup = Cleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), mnt_a.clone(), mnt_b.clone()],
    };
    let ds_a = format!("{name}/a");
    let ds_b = format!("{name}/b");

    // Create: -m sets the mountpoint; pool/a inherits below it.
    oz_create_at(&oz, &pool, &mnt, None, &[]);
    let mp = oz.ok(&["zfs", "get", "-H", "-o", "value", "mountpoint", &name]);
    assert_eq!(mp.trim(), mnt.to_string_lossy(), "zpool create -m");
    oz.ok(&["zfs", "create", &ds_a]);
    let mp = oz.ok(&["zfs", "get", "-H", "-o", "value", "mountpoint", &ds_a]);
    assert_eq!(mp.trim(), mnt_a.to_string_lossy());
    oz_export(&oz, &name);

    // Import: the daemon mounts both.
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(
        is_mounted(&mnt) && is_mounted(&mnt_a),
        "after import: {:?}\n{}",
        mounted_dirs(),
        daemon_log(&oz)
    );
    let sock = oz.state_dir().join("ozfsd.sock");
    let mode = fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode");
    let mode = fs::metadata(oz.state_dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "state directory mode");
    phase(&format!("{tag}: import mounts"), t0);

    fs::write(mnt.join("top.txt"), b"in the root dataset").unwrap();
    fs::create_dir(mnt_a.join("dir")).unwrap();
    fs::write(mnt_a.join("dir/inner.txt"), b"in pool/a").unwrap();
    let listing = oz.ok(&["zfs", "mount"]);
    for (ds, m) in [(&name, &mnt), (&ds_a, &mnt_a)] {
        assert!(
            listing
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == [ds.as_str(), &*m.to_string_lossy()]),
            "zfs mount lists {ds} on {}:\n{listing}",
            m.display()
        );
    }
    let mounted = oz.ok(&["zfs", "get", "-H", "-o", "value", "mounted", &ds_a]);
    assert_eq!(mounted.trim(), "yes");

    // Unmount: gone from the mount table, data durable; mount again.
    oz.ok(&["zfs", "unmount", &ds_a]);
    assert!(!is_mounted(&mnt_a), "pool/a still mounted after unmount");
    assert!(is_mounted(&mnt), "the root dataset must stay mounted");
    let mounted = oz.ok(&["zfs", "get", "-H", "-o", "value", "mounted", &ds_a]);
    assert_eq!(mounted.trim(), "no");
    // Read-only commands work on the pool files meanwhile.
    let out = work.path().join("out");
    oz.ok(&["cp", "-r", &format!("{ds_a}:/dir"), &out.to_string_lossy()]);
    assert_eq!(fs::read(out.join("inner.txt")).unwrap(), b"in pool/a");
    oz.ok(&["zfs", "mount", &ds_a]);
    assert!(is_mounted(&mnt_a));
    assert_eq!(fs::read(mnt_a.join("dir/inner.txt")).unwrap(), b"in pool/a");

    // atime=on (the default here): a read or a listing records the access when
    // the access time is older than the last change (relatime rule); a
    // fresh access time is left alone
    let at = mnt_a.join("atime");
    fs::create_dir_all(&at).unwrap();
    fs::write(at.join("f"), b"read me").unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    let newer = std::time::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000);
    for p in [at.join("f"), at.clone()] {
        let f = File::open(&p).unwrap();
        f.set_times(fs::FileTimes::new().set_accessed(old).set_modified(newer))
            .unwrap();
    }
    assert_eq!(fs::metadata(at.join("f")).unwrap().atime(), 1_000_000);
    assert_eq!(fs::read(at.join("f")).unwrap(), b"read me");
    let _ = fs::read_dir(&at).unwrap().count();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for p in [at.join("f"), at.clone()] {
        let a = fs::metadata(&p).unwrap().atime();
        assert!(
            (now - a).abs() < 60,
            "{}: atime {a}, now {now}",
            p.display()
        );
    }
    let md = fs::metadata(at.join("f")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(fs::read(at.join("f")).unwrap(), b"read me");
    let md2 = fs::metadata(at.join("f")).unwrap();
    assert_eq!(
        (md2.atime(), md2.atime_nsec()),
        (md.atime(), md.atime_nsec()),
        "an access time newer than the last change stays (relatime)"
    );

    phase(&format!("{tag}: unmount/mount"), t0);

    // Writing commands go through the daemon, which holds the pool.
    oz.ok(&["zfs", "create", &ds_b]);
    assert!(
        is_mounted(&mnt_b),
        "zfs create mounts: {:?}",
        mounted_dirs()
    );
    oz.ok(&["zfs", "set", "compression=on", &ds_b]);
    let src = work.path().join("src.txt");
    fs::write(&src, b"copied in through the daemon").unwrap();
    oz.ok(&["cp", &src.to_string_lossy(), &format!("{ds_b}:/copied.txt")]);
    oz.ok(&["zfs", "mount", "-a"]);
    assert!(is_mounted(&mnt_b), "zfs mount -a: {:?}", mounted_dirs());
    assert_eq!(
        fs::read(mnt_b.join("copied.txt")).unwrap(),
        b"copied in through the daemon"
    );
    // The kernel now caches that entry, its attributes, its pages and the
    // listing (for an hour): a copy into the mounted file system behind
    // its back must be seen at once, not after the cache expires.
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&mnt_b), ["copied.txt"]);
    let longer = b"copied in again through the daemon, longer".to_vec();
    fs::write(&src, &longer).unwrap();
    oz.ok(&["cp", &src.to_string_lossy(), &format!("{ds_b}:/copied.txt")]);
    oz.ok(&["cp", &src.to_string_lossy(), &format!("{ds_b}:/second.txt")]);
    assert_eq!(
        fs::metadata(mnt_b.join("copied.txt")).unwrap().len(),
        longer.len() as u64
    );
    assert_eq!(fs::read(mnt_b.join("copied.txt")).unwrap(), longer);
    assert_eq!(names(&mnt_b), ["copied.txt", "second.txt"]);
    assert_eq!(fs::read(mnt_b.join("second.txt")).unwrap(), longer);
    // A name looked up and missing is kept by the kernel as missing (a
    // negative entry, for an hour too): a copy must make it appear, a
    // directory too (directories are not among the names invalidated
    // for what they held before).
    let tree = work.path().join("tree");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("inner.txt"), b"inner").unwrap();
    for name in ["third.txt", "newdir"] {
        assert!(!mnt_b.join(name).exists());
    }
    oz.ok(&["cp", &src.to_string_lossy(), &format!("{ds_b}:/third.txt")]);
    oz.ok(&[
        "cp",
        "-r",
        &tree.to_string_lossy(),
        &format!("{ds_b}:/newdir"),
    ]);
    assert_eq!(fs::read(mnt_b.join("third.txt")).unwrap(), longer);
    assert_eq!(fs::read(mnt_b.join("newdir/inner.txt")).unwrap(), b"inner");
    // A directory made through the mount under a name the kernel was told
    // is missing (a child's mountpoint, which the daemon makes through
    // this mount) is not invalidated by the next copy: that would detach
    // the child mounted on it.
    let child = format!("{ds_b}/child");
    oz.ok(&["zfs", "create", &child]);
    assert!(is_mounted(&mnt_b.join("child")), "{:?}", mounted_dirs());
    oz.ok(&["cp", &src.to_string_lossy(), &format!("{ds_b}:/fourth.txt")]);
    assert!(
        is_mounted(&mnt_b.join("child")),
        "a copy into the parent detached its child: {:?}",
        mounted_dirs()
    );
    oz.ok(&["zfs", "destroy", &child]);
    // Mount properties are followed at once: a new mountpoint moves the
    // mount, canmount=off unmounts, inheriting the mountpoint moves it back.
    let elsewhere = work.path().join("elsewhere");
    let mp = format!("mountpoint={}", elsewhere.display());
    oz.ok(&["zfs", "set", &mp, &ds_b]);
    assert!(!is_mounted(&mnt_b), "{:?}", mounted_dirs());
    assert!(is_mounted(&elsewhere), "{:?}", mounted_dirs());
    assert_eq!(fs::read(elsewhere.join("copied.txt")).unwrap(), longer);
    oz.ok(&["zfs", "set", "canmount=off", &ds_b]);
    assert!(
        !is_mounted(&elsewhere),
        "canmount=off: {:?}",
        mounted_dirs()
    );
    oz.ok(&["zfs", "set", "canmount=on", &ds_b]);
    assert!(is_mounted(&elsewhere), "canmount=on: {:?}", mounted_dirs());
    oz.ok(&["zfs", "inherit", "mountpoint", &ds_b]);
    assert!(
        is_mounted(&mnt_b) && !is_mounted(&elsewhere),
        "{:?}",
        mounted_dirs()
    );
    let out = oz.fails(&["rm", &format!("{ds_a}:/dir/inner.txt")]);
    assert!(out.stderr.contains("mounted"), "{}", out.describe());
    let out = oz.fails(&["mount", &ds_a, &work.path().to_string_lossy()]);
    assert!(out.stderr.contains("daemon"), "{}", out.describe());
    phase(&format!("{tag}: forwarded commands"), t0);

    // Export: everything unmounted, pool exported, zdb clean.
    oz.ok(&["zpool", "export", &name]);
    for m in [&mnt, &mnt_a, &mnt_b] {
        assert!(!is_mounted(m), "{} mounted after export", m.display());
    }
    let list = oz.run(&["zpool", "list", "-H", "-o", "name"]);
    assert!(!list.stdout.contains(&name), "{}", list.describe());
    assert_zdb_clean(&pool, &dev_dir, "after daemon export");
    phase(&format!("{tag}: export"), t0);

    // SIGTERM: sync, unmount, exit 0; the pool stays imported.
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(is_mounted(&mnt_a) && is_mounted(&mnt_b));
    assert_eq!(
        fs::read(mnt.join("top.txt")).unwrap(),
        b"in the root dataset"
    );
    fs::write(mnt_a.join("late.txt"), b"written before SIGTERM").unwrap();
    let pid = daemon_pid(&oz).expect("daemon pid in ozfsd.log");
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        wait_gone(pid, Duration::from_secs(60)),
        "daemon did not exit after SIGTERM"
    );
    for m in [&mnt, &mnt_a, &mnt_b] {
        assert!(!is_mounted(m), "{} mounted after SIGTERM", m.display());
    }
    assert!(!sock.exists(), "socket left after SIGTERM");
    let log = daemon_log(&oz);
    assert!(
        log.contains("exiting") && !log.contains("panicked"),
        "{log}"
    );
    let list = oz.ok(&["zpool", "list", "-H", "-o", "name"]);
    assert!(list.contains(&name), "still imported after SIGTERM: {list}");
    oz.ok(&["zfs", "mount", "-a"]);
    assert_eq!(
        fs::read(mnt_a.join("late.txt")).unwrap(),
        b"written before SIGTERM"
    );
    oz.ok(&["zpool", "export", &name]);
    assert!(!is_mounted(&mnt));
    assert_zdb_clean(&pool, &dev_dir, "after SIGTERM and export");
    phase(&format!("{tag}: SIGTERM"), t0);
}
