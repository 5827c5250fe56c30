//! Regression tests for the daemon's defects found by review, each
//! failing on the code before its fix: nested mountpoints (a parent
//! mounted after its child hid it, export then lost the child), a refused
//! destroy that mounted children before their parents, mountpoints through
//! symbolic links or directories other users can write, a state directory
//! owned by someone else and a log opened through a link.
//!
//! Each test runs its own daemon (`dcommon::Env`) with every command under
//! a watchdog timeout: a hang fails the test.

mod dcommon;
use dcommon::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// A at D/inner, then B at D: B must not hide A (A is taken down and
/// mounted again on top of B); export unmounts both and leaves nothing
/// mounted; after import, `zfs unmount` of the parent never hangs.
#[test]
fn nested_mountpoints_never_hide() {
    let e = Env::new("dhnest");
    let d = e.dir("x");
    let inner = d.join("inner");
    e.ok(&[
        "zfs",
        "create",
        "-o",
        &format!("mountpoint={}", inner.display()),
        "dhnest/a",
    ]);
    fs::write(inner.join("in-a"), b"a").unwrap();
    e.ok(&[
        "zfs",
        "create",
        "-o",
        &format!("mountpoint={}", d.display()),
        "dhnest/b",
    ]);
    e.assert_alive("after creating the parent");
    assert!(reachable("dhnest/b", &d), "b on {}", d.display());
    assert!(
        reachable("dhnest/a", &inner),
        "a hidden under b: {:#?}",
        e.pool_mounts()
    );
    assert_eq!(fs::read(inner.join("in-a")).unwrap(), b"a");
    e.assert_mounted_reachable("nested");
    // Someone else's mount stacked on a: unmounting a by its path would
    // take theirs down. Refused, and a stays in the table.
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "dhnest-over"])
        .arg(&inner)
        .status()
        .unwrap();
    assert!(st.success());
    let out = e.run(&["zfs", "unmount", "dhnest/a"]);
    let over = mount_lines()
        .iter()
        .any(|m| m.source == "dhnest-over" && m.path == inner.to_string_lossy());
    let listed = e.mount_listing().iter().any(|(n, _)| n == "dhnest/a");
    let _ = std::process::Command::new("umount").arg(&inner).status();
    assert!(
        !out.success() && over && listed,
        "unmount under a stacked mount: {} (theirs still mounted: {over}, a listed: {listed})",
        out.describe()
    );
    assert!(reachable("dhnest/a", &inner));

    e.ok(&["zpool", "export", "dhnest"]);
    assert!(
        e.pool_mounts().is_empty(),
        "left mounted after export: {:#?}",
        e.pool_mounts()
    );
    e.ok(&[
        "zpool",
        "import",
        "-d",
        &e.work.path().to_string_lossy(),
        "dhnest",
    ]);
    e.ok(&["zfs", "mount"]);
    e.assert_mounted_reachable("after import");
    // The parent has a child mounted on it: refused (busy), not a hang,
    // and both stay mounted and listed.
    let out = e.run(&["zfs", "unmount", "dhnest/b"]);
    if !out.success() {
        e.assert_mounted_reachable("after a refused unmount");
    }
    e.assert_alive("after unmount");
    e.ok(&["zpool", "export", "dhnest"]);
    assert!(e.pool_mounts().is_empty(), "{:#?}", e.pool_mounts());
    e.assert_alive("after export");
}

/// `zfs destroy rr/x` refused (children): its file systems come back
/// parents first, all reachable; `destroy -r` and export then work, and
/// SIGTERM ends the daemon in bounded time.
#[test]
fn refused_destroy_mounts_parents_first() {
    let e = Env::new("dhrr");
    let m = e.dir("m");
    e.ok(&["zfs", "set", &format!("mountpoint={}", m.display()), "dhrr"]);
    e.ok(&["zfs", "create", "-p", "dhrr/x/y/z"]);
    let z = m.join("x/y/z");
    fs::write(z.join("f"), b"deep").unwrap();
    e.assert_mounted_reachable("created");
    let out = e.run(&["zfs", "destroy", "dhrr/x"]);
    assert_eq!(out.code, Some(1), "{}", out.describe());
    e.assert_alive("after the refused destroy");
    e.assert_mounted_reachable("after the refused destroy");
    assert_eq!(fs::read(z.join("f")).unwrap(), b"deep");
    // A rename moves the subtree: parents first again.
    e.ok(&["zfs", "rename", "dhrr/x", "dhrr/w"]);
    e.assert_mounted_reachable("after rename");
    assert_eq!(fs::read(m.join("w/y/z/f")).unwrap(), b"deep");
    e.ok(&["zfs", "destroy", "-r", "dhrr/w"]);
    e.assert_mounted_reachable("after destroy -r");
    e.ok(&["zpool", "export", "dhrr"]);
    assert!(e.pool_mounts().is_empty(), "{:#?}", e.pool_mounts());

    e.ok(&[
        "zpool",
        "import",
        "-d",
        &e.work.path().to_string_lossy(),
        "dhrr",
    ]);
    e.ok(&["zfs", "create", "-p", "dhrr/x/y/z"]);
    e.assert_mounted_reachable("before SIGTERM");
    let pid = e.daemon_pid().expect("pid");
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t0 = Instant::now();
    // SAFETY: signal 0 only checks that the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no exit after SIGTERM:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(e.pool_mounts().is_empty(), "{:#?}", e.pool_mounts());
    assert!(!e.log().contains("panicked"), "{}", e.log());
    let _ = Path::new("/");
}

/// An existing state directory owned by another user is refused (not
/// chmodded and used), and a log planted as a symbolic link to a
/// root-owned file is never followed.
#[test]
fn state_dir_owner_and_log_link() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let work = tempfile::Builder::new()
        .prefix("ozfs-dh-state-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let run_daemon = |state: &Path| {
        std::process::Command::new("timeout")
            .arg("30")
            .arg(BIN)
            .arg("daemon")
            .env("OZFS_STATE_DIR", state)
            .output()
            .unwrap()
    };
    let stop = |state: &Path| {
        use std::io::{Read, Write};
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(state.join("ozfsd.sock")) {
            let _ = s.write_all(b"{\"cmd\":\"shutdown\"}\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
        }
    };

    // Owned by nobody (65534), mode 0755.
    let theirs = work.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let out = run_daemon(&theirs);
    stop(&theirs);
    let md = fs::metadata(&theirs).unwrap();
    assert!(
        !out.status.success() && md.mode() & 0o777 == 0o755 && !theirs.join("ozfsd.sock").exists(),
        "a state directory of another user was used: {out:?}, mode {:o}",
        md.mode() & 0o777
    );

    // Ours but left writable, with ozfsd.log planted as a link to a
    // root-owned file.
    let victim = work.path().join("victim");
    fs::write(&victim, b"root's file\n").unwrap();
    let ours = work.path().join("ours");
    fs::create_dir(&ours).unwrap();
    fs::set_permissions(&ours, fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&victim, ours.join("ozfsd.log")).unwrap();
    let out = run_daemon(&ours);
    stop(&ours);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"root's file\n",
        "the daemon wrote through a planted link: {out:?}"
    );
    assert!(!out.status.success(), "{out:?}");
    let mode = fs::metadata(&ours).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "our own state directory is made private");
}

/// Mountpoints are resolved without following links and only through
/// directories no other user can write (or sticky and root-owned): a link
/// planted in a world-writable sticky directory never makes the daemon
/// create directories in, or mount over, a root-owned directory.
#[test]
fn mountpoints_never_follow_links() {
    use std::os::unix::fs::PermissionsExt;
    let e = Env::new("dhlink");
    let public = e.dir("public");
    fs::create_dir(&public).unwrap();
    fs::set_permissions(&public, fs::Permissions::from_mode(0o1777)).unwrap();
    let rootdir = e.dir("rootdir");
    fs::create_dir(&rootdir).unwrap();
    fs::write(rootdir.join("secret"), b"root's").unwrap();
    std::os::unix::fs::symlink(&rootdir, public.join("link")).unwrap();
    let userdir = public.join("userdir");
    fs::create_dir(&userdir).unwrap();
    std::os::unix::fs::chown(&userdir, Some(65534), Some(65534)).unwrap();
    let ww = e.dir("ww");
    fs::create_dir(&ww).unwrap();
    fs::set_permissions(&ww, fs::Permissions::from_mode(0o777)).unwrap();

    let refused = [
        ("through", public.join("link/mnt")),
        ("onto", public.join("link")),
        ("userdir", userdir.join("mnt")),
        ("ww", ww.join("mnt")),
    ];
    for (n, mp) in &refused {
        let ds = format!("dhlink/{n}");
        e.run(&[
            "zfs",
            "create",
            "-o",
            &format!("mountpoint={}", mp.display()),
            &ds,
        ]);
        e.assert_alive(n);
        let out = e.run(&["zfs", "mount", &ds]);
        assert!(
            !out.success(),
            "{n}: mounted on {}: {}",
            mp.display(),
            out.describe()
        );
        assert!(
            !e.pool_mounts().iter().any(|m| m.source == ds),
            "{n}: mounted: {:#?}",
            e.pool_mounts()
        );
    }
    let names: Vec<_> = fs::read_dir(&rootdir)
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        ["secret"],
        "the daemon created entries in a root-owned directory"
    );
    assert!(!ww.join("mnt").exists() && !userdir.join("mnt").exists());
    // A plain directory in the sticky, root-owned one is fine.
    let ok = public.join("okmnt");
    e.ok(&[
        "zfs",
        "create",
        "-o",
        &format!("mountpoint={}", ok.display()),
        "dhlink/ok",
    ]);
    assert!(reachable("dhlink/ok", &ok), "{:#?}", e.pool_mounts());
    e.assert_mounted_reachable("after the refusals");
    e.ok(&["zpool", "export", "dhlink"]);
    assert!(e.pool_mounts().is_empty(), "{:#?}", e.pool_mounts());
}

/// A standalone `ozfs mount` exits within a bounded time of `fusermount
/// -u` even when a copy of its mount lives on in another mount namespace
/// (made while it was mounted, as a test harness's private namespace is):
/// the copy keeps the FUSE connection open, and the server used to wait in
/// its read for ever. What was dirty is synced before it exits.
#[test]
fn standalone_mount_exits_after_unmount() {
    use std::process::{Command, Stdio};
    let oz = ozfs_testkit::Ozfs::new(BIN).with_timeout(Duration::from_secs(90));
    let work = tempfile::Builder::new()
        .prefix("ozfs-dh-sm-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let dev = work.path().join("dev0");
    fs::File::create(&dev)
        .and_then(|f| f.set_len(128 << 20))
        .unwrap();
    let pool = format!("dhsm{}", std::process::id());
    let ok = |args: &[&str]| {
        let out = oz.run(args);
        assert!(out.success(), "{}", out.describe());
    };
    ok(&[
        "zpool",
        "create",
        "-f",
        "-m",
        "none",
        &pool,
        &dev.to_string_lossy(),
    ]);
    let fs_name = format!("{pool}/fs");
    ok(&["zfs", "create", &fs_name]);
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut server = Command::new(BIN)
        .arg("mount")
        .arg(&fs_name)
        .arg(&mnt)
        .env("OZFS_STATE_DIR", oz.state_dir())
        .env("OZFS_CHECK_SPACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mounted = || {
        mount_lines()
            .iter()
            .any(|m| m.path == mnt.to_string_lossy())
    };
    let t0 = Instant::now();
    while !mounted() {
        assert!(t0.elapsed() < Duration::from_secs(30), "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(mnt.join("f"), &data).unwrap();
    let mut copy = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sleep", "120"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let st = Command::new("fusermount")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    let exited = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = copy.kill();
    let _ = copy.wait();
    if exited.is_none() {
        let _ = server.kill();
        let _ = server.wait();
    }
    let st = exited.expect("the server did not exit within 30 s of fusermount -u");
    assert!(st.success(), "ozfs mount: {st}");
    let out = work.path().join("out");
    ok(&["cp", &format!("{fs_name}:/f"), &out.to_string_lossy()]);
    assert!(fs::read(&out).unwrap() == data, "the last txg was lost");
}
