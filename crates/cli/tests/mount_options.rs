//! Mount options follow the dataset's properties: a
//! setuid-root program on a pool mounted with `setuid=off` must not elevate
//! an unprivileged user; `exec=off`, `devices=off`, `readonly=on` and
//! `atime=off` hold too; and each takes effect on a live mount when the
//! property changes (`zfs set` / `zfs inherit`), as on OpenZFS.
//!
//! The program is compiled here (it prints its effective uid) and copied
//! into the pool through the daemon's mount, owned by root, mode 04755;
//! it is run as `nobody` with `setpriv`. With `setuid=on` it prints 0 (so
//! the test can fail), with `setuid=off` 65534.

use ozfs_testkit::Ozfs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ozfs");
const POOL: &str = "mopt";

fn mount_flags(mnt: &Path) -> Option<Vec<String>> {
    let want = mnt.to_string_lossy().into_owned();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&want.as_str())).then(|| f[5].split(',').map(str::to_string).collect())
    })
}

fn wait_mounted(mnt: &Path) {
    for _ in 0..500 {
        if mount_flags(mnt).is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} was not mounted", mnt.display());
}

/// Stops the daemon (and so its mounts) however the test ends.
struct Shutdown<'a>(&'a Ozfs, PathBuf);

impl Drop for Shutdown<'_> {
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let sock = self.0.state_dir().join("ozfsd.sock");
        if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&sock) {
            let _ = s.write_all(b"{\"cmd\":\"shutdown\"}\n");
            let mut r = String::new();
            let _ = s.read_to_string(&mut r);
        }
        std::thread::sleep(Duration::from_millis(200));
        if mount_flags(&self.1).is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.1).status();
        }
    }
}

/// Runs `prog` as nobody; returns (exit success, stdout, stderr).
fn as_nobody(prog: &Path) -> (bool, String, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(prog)
        .output()
        .expect("setpriv");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

fn compile_euid(dir: &Path) -> PathBuf {
    let src = dir.join("euid.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <unistd.h>\nint main(void){printf(\"%d\\n\",(int)geteuid());return 0;}\n",
    )
    .expect("write source");
    let out = dir.join("euid");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc failed");
    out
}

#[test]
fn mount_flags_follow_properties() {
    let tmp = tempfile::Builder::new()
        .prefix("ozfs-mount-options-")
        .tempdir_in(ozfs_testkit::test_tmp_root())
        .expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical");
    // nobody must reach the mount point.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dev = root.join("d0");
    std::fs::File::create(&dev)
        .and_then(|f| f.set_len(128 << 20))
        .expect("dev");
    let mnt = root.join("mnt");
    let oz = Ozfs::new(BIN);
    let _down = Shutdown(&oz, mnt.clone());
    let prog_src = compile_euid(&root);
    oz.ok(&[
        "zpool",
        "create",
        "-m",
        mnt.to_str().expect("utf-8"),
        POOL,
        dev.to_str().expect("utf-8"),
    ]);
    oz.ok(&["zpool", "export", POOL]);
    oz.ok(&["zpool", "import", "-d", root.to_str().expect("utf-8"), POOL]);
    wait_mounted(&mnt);
    std::fs::set_permissions(&mnt, std::fs::Permissions::from_mode(0o755)).expect("chmod mnt");

    // A setuid-root program in the pool.
    let prog = mnt.join("euid");
    std::fs::copy(&prog_src, &prog).expect("copy the program in");
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).expect("setuid");
    let flags = mount_flags(&mnt).expect("mounted");
    assert!(!flags.contains(&"nosuid".to_string()), "{flags:?}");
    let (ok, out, err) = as_nobody(&prog);
    assert!(ok, "{err}");
    assert_eq!(
        out, "0",
        "setuid=on: the program elevates (else the test proves nothing)"
    );

    // Live: setuid=off.
    oz.ok(&["zfs", "set", "setuid=off", POOL]);
    let flags = mount_flags(&mnt).expect("mounted");
    assert!(
        flags.contains(&"nosuid".to_string()),
        "setuid=off: {flags:?}"
    );
    let (ok, out, err) = as_nobody(&prog);
    assert!(ok, "{err}");
    assert_eq!(out, "65534", "setuid=off: nobody stays nobody");
    oz.ok(&["zfs", "inherit", "setuid", POOL]);
    assert_eq!(as_nobody(&prog).1, "0", "setuid inherited (on) again");

    // At mount time: setuid=off set, export, import.
    oz.ok(&["zfs", "set", "setuid=off", POOL]);
    oz.ok(&["zpool", "export", POOL]);
    oz.ok(&["zpool", "import", "-d", root.to_str().expect("utf-8"), POOL]);
    wait_mounted(&mnt);
    let flags = mount_flags(&mnt).expect("mounted");
    assert!(
        flags.contains(&"nosuid".to_string()),
        "mounted with setuid=off: {flags:?}"
    );
    assert_eq!(as_nobody(&prog).1, "65534", "imported with setuid=off");
    oz.ok(&["zfs", "set", "setuid=on", POOL]);

    // exec=off: nothing runs from the mount.
    oz.ok(&["zfs", "set", "exec=off", POOL]);
    assert!(mount_flags(&mnt)
        .expect("mounted")
        .contains(&"noexec".to_string()));
    let e = Command::new(&prog).output();
    assert!(
        e.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EACCES)),
        "exec=off: the program ran: {e:?}"
    );
    oz.ok(&["zfs", "set", "exec=on", POOL]);
    assert!(Command::new(&prog)
        .output()
        .is_ok_and(|o| o.status.success()));

    // devices=off: a device node cannot be opened.
    let null = mnt.join("null");
    let c = std::ffi::CString::new(null.to_str().expect("utf-8")).expect("cstring");
    // SAFETY: mknod of a char device (1:3, like /dev/null) on our mount.
    let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
    assert!(std::fs::OpenOptions::new().write(true).open(&null).is_ok());
    oz.ok(&["zfs", "set", "devices=off", POOL]);
    assert!(mount_flags(&mnt)
        .expect("mounted")
        .contains(&"nodev".to_string()));
    let e = std::fs::OpenOptions::new().write(true).open(&null);
    assert!(e.is_err(), "devices=off: the device node opened");
    oz.ok(&["zfs", "set", "devices=on", POOL]);
    assert!(std::fs::OpenOptions::new().write(true).open(&null).is_ok());

    // readonly=on: writes fail with EROFS; what was written before stays.
    std::fs::write(mnt.join("before"), b"written before readonly=on").expect("write");
    oz.ok(&["zfs", "set", "readonly=on", POOL]);
    assert!(mount_flags(&mnt)
        .expect("mounted")
        .contains(&"ro".to_string()));
    let e = std::fs::write(mnt.join("after"), b"x");
    assert!(
        e.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EROFS)),
        "readonly=on: {e:?}"
    );
    assert_eq!(
        std::fs::read(mnt.join("before")).expect("read"),
        b"written before readonly=on"
    );
    oz.ok(&["zfs", "set", "readonly=off", POOL]);
    std::fs::write(mnt.join("after"), b"x").expect("writable again");

    // atime=off: noatime.
    oz.ok(&["zfs", "set", "atime=off", POOL]);
    assert!(mount_flags(&mnt)
        .expect("mounted")
        .contains(&"noatime".to_string()));
    oz.ok(&["zfs", "set", "atime=on", POOL]);
    assert!(!mount_flags(&mnt)
        .expect("mounted")
        .contains(&"noatime".to_string()));

    oz.ok(&["zpool", "export", POOL]);
    assert!(mount_flags(&mnt).is_none(), "export unmounts");
}

/// The daemon closes a connection that sends nothing: with
/// `OZFS_DAEMON_IDLE_SECS=1` a silent client gets an error line within a
/// few seconds instead of holding a daemon thread for ever; a real request
/// is still answered.
#[test]
fn daemon_closes_idle_connections() {
    use std::io::{Read, Write};
    let tmp = tempfile::Builder::new()
        .prefix("ozfs-daemon-idle-")
        .tempdir_in(ozfs_testkit::test_tmp_root())
        .expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical");
    let dev = root.join("d0");
    std::fs::File::create(&dev)
        .and_then(|f| f.set_len(64 << 20))
        .expect("dev");
    let mnt = root.join("mnt");
    let oz = Ozfs::new(BIN).with_env("OZFS_DAEMON_IDLE_SECS", "1");
    let _down = Shutdown(&oz, mnt.clone());
    oz.ok(&[
        "zpool",
        "create",
        "-m",
        mnt.to_str().expect("utf-8"),
        "idle",
        dev.to_str().expect("utf-8"),
    ]);
    oz.ok(&["zpool", "export", "idle"]);
    oz.ok(&[
        "zpool",
        "import",
        "-d",
        root.to_str().expect("utf-8"),
        "idle",
    ]);
    let sock = oz.state_dir().join("ozfsd.sock");
    let mut silent = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let t0 = std::time::Instant::now();
    let mut reply = String::new();
    let _ = silent.read_to_string(&mut reply);
    assert!(
        reply.contains("no request within") && t0.elapsed() < Duration::from_secs(8),
        "a silent client was not closed: {reply:?} after {:?}",
        t0.elapsed()
    );
    let mut s = std::os::unix::net::UnixStream::connect(&sock).expect("connect");
    s.write_all(b"{\"cmd\":\"ping\"}\n").expect("ping");
    let mut r = String::new();
    s.read_to_string(&mut r).expect("reply");
    assert!(r.contains("\"ok\":true"), "{r}");
    oz.ok(&["zpool", "export", "idle"]);
}
