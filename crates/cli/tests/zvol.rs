//! Volumes end to end, through the real binary and the kernel: `zfs create
//! -V` (its properties and refreservation as OpenZFS computes them), the
//! daemon's block device (`/dev/zvol/POOL/VOL`, a loop device over the
//! volume's FUSE file), ext4 made and used on it (a tree copied, fsx),
//! a snapshot's ext4 read back, rollback, clone, rename and destroy
//! following the device, the daemon killed with SIGKILL under a writing
//! ext4. Independent verdicts: `e2fsck -f` on every ext4, sha256 of what
//! was written, OpenZFS 2.3's `zdb -bcc` and `-d` on the pool.

mod common;
mod dcommon;
mod mcommon;
mod wcommon;
use dcommon::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The device a `/dev/zvol` link names, once it is there.
fn wait_dev(link: &Path) -> PathBuf {
    let t0 = Instant::now();
    loop {
        if let Ok(t) = fs::read_link(link) {
            if t.exists() {
                return t;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} never appeared",
            link.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn e2fsck_clean(dev: &Path) {
    let out = Command::new("e2fsck").arg("-fn").arg(dev).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "e2fsck -fn {}:\n{text}",
        dev.display()
    );
}

/// A sha256 listing of every file under `dir` (relative names, sorted).
fn tree_sums(dir: &Path) -> String {
    sh(&format!(
        "cd '{}' && find . -type f ! -path './lost+found/*' -print0 | sort -z | xargs -0 sha256sum",
        dir.display()
    ))
}

struct Mnt(PathBuf);
impl Drop for Mnt {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount(dev: &Path, at: &Path, opts: &str) -> Mnt {
    fs::create_dir_all(at).unwrap();
    sh(&format!(
        "mount -o {opts} '{}' '{}'",
        dev.display(),
        at.display()
    ));
    Mnt(at.to_path_buf())
}

/// Volumes become block devices through loop devices: a machine without
/// them (a container without /dev/loop-control) cannot run these tests.
fn loop_devices() -> bool {
    let ok = Path::new("/dev/loop-control").exists();
    if !ok {
        eprintln!("skipped: no /dev/loop-control (loop devices) on this machine");
    }
    ok
}

fn env(tag: &str) -> Env {
    let work = tempfile::Builder::new()
        .prefix(&format!("ozfs-dh-{}-{tag}-", std::process::id()))
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let e = Env {
        oz: ozfs_testkit::Ozfs::new(BIN).with_timeout(Duration::from_secs(120)),
        work,
        pool: format!("{tag}{}", std::process::id() % 100000),
    };
    let dev = e.dir("dev0");
    fs::File::create(&dev)
        .and_then(|f| f.set_len(768 << 20))
        .expect("device file");
    e.ok(&[
        "zpool",
        "create",
        "-f",
        "-m",
        "none",
        &e.pool,
        &dev.to_string_lossy(),
    ]);
    // The daemon holds an imported pool (and serves its volumes).
    e.ok(&["zpool", "export", &e.pool]);
    e.ok(&[
        "zpool",
        "import",
        "-d",
        &e.work.path().to_string_lossy(),
        &e.pool,
    ]);
    e
}

#[test]
fn volumes_made_served_as_block_devices_and_followed() {
    if !loop_devices() {
        return;
    }
    let e = env("zv");
    let pool = e.pool.clone();
    let vol = format!("{pool}/vol");
    // Refused as OpenZFS refuses them.
    for (args, needle) in [
        (vec!["-V", "0", &vol], "cannot be zero"),
        (vec!["-V", "64M", "-b", "3K", &vol], "power of 2"),
        (vec!["-s", &vol], "can only be used when creating a volume"),
    ] {
        let mut a = vec!["zfs", "create"];
        a.extend(args);
        let out = e.run(&a);
        assert!(
            !out.success() && out.stderr.contains(needle),
            "{a:?}: {}",
            out.describe()
        );
    }
    // A size that is not a multiple of the block size is rounded up, as
    // `zfs create` rounds it; "mb" is taken as libzfs takes it.
    e.ok(&["zfs", "create", "-s", "-V", "100000", &format!("{pool}/r")]);
    assert_eq!(
        e.ok(&[
            "zfs",
            "get",
            "-Hp",
            "-o",
            "value",
            "volsize",
            &format!("{pool}/r")
        ])
        .trim(),
        "114688"
    );
    e.ok(&["zfs", "destroy", &format!("{pool}/r")]);
    let out = e.run(&[
        "zfs",
        "create",
        "-o",
        "volblocksize=8k",
        "-o",
        "volblocksize=16k",
        "-V",
        "8M",
        &vol,
    ]);
    assert!(!out.success() && out.stderr.contains("specified multiple times"));
    e.ok(&["zfs", "create", "-V", "96mb", &vol]);
    e.ok(&[
        "zfs",
        "create",
        "-s",
        "-b",
        "8K",
        "-V",
        "1G",
        &format!("{pool}/sparse"),
    ]);
    let get = |p: &str, d: &str| e.ok(&["zfs", "get", "-Hp", "-o", "value", p, d]);
    assert_eq!(get("type", &vol).trim(), "volume");
    assert_eq!(get("volsize", &vol).trim(), (96u64 << 20).to_string());
    assert_eq!(get("volblocksize", &vol).trim(), "16384");
    // libzfs: 96 MiB of data plus (7 + 6 + 1) indirect blocks of 128 KiB,
    // twice (metadata copies).
    let resv = (96u64 << 20) + 28 * (128 << 10);
    assert_eq!(get("refreservation", &vol).trim(), resv.to_string());
    assert_eq!(
        get("usedbyrefreservation", &vol)
            .trim()
            .parse::<u64>()
            .unwrap()
            + 16 * 1024,
        resv + 16 * 1024 - get("usedbydataset", &vol).trim().parse::<u64>().unwrap()
    );
    assert_eq!(get("refreservation", &format!("{pool}/sparse")).trim(), "0");
    assert_eq!(
        get("volblocksize", &format!("{pool}/sparse")).trim(),
        "8192"
    );
    let all = e.ok(&["zfs", "get", "-H", "-o", "property", "all", &vol]);
    for p in [
        "volsize",
        "volblocksize",
        "volmode",
        "snapdev",
        "refreservation",
    ] {
        assert!(all.lines().any(|l| l == p), "{p} missing:\n{all}");
    }
    for p in ["mountpoint", "recordsize", "atime", "canmount", "mounted"] {
        assert!(
            !all.lines().any(|l| l == p),
            "{p} listed for a volume:\n{all}"
        );
    }
    let listed = e.ok(&["zfs", "list", "-H", "-t", "volume", "-o", "name"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");

    // ext4 on the device; a tree and fsx on it.
    let zvol_dir = Path::new("/dev/zvol");
    let link = zvol_dir.join(&vol);
    let dev = wait_dev(&link);
    sh(&format!("mkfs.ext4 -q -F '{}'", dev.display()));
    let mnt = e.dir("ext4");
    let src = Path::new("/usr/share/doc");
    {
        let _m = mount(&dev, &mnt, "rw");
        sh(&format!(
            "cp -a '{}/apt' '{}/bash' '{}/'",
            src.display(),
            src.display(),
            mnt.display()
        ));
        if let Some(fsx) = mcommon::find_fsx() {
            mcommon::fsx_run(&fsx, &mnt.join("fsx.dat"), &e.dir("fsxart"), None, 3000, 7);
        }
        sh("sync");
    }
    e2fsck_clean(&dev);
    let before = {
        let _m = mount(&dev, &mnt, "ro");
        tree_sums(&mnt)
    };
    assert!(before.contains("./bash/"), "{before}");

    // A snapshot, then changes; the snapshot's ext4 is the one before.
    e.ok(&["zfs", "snapshot", &format!("{vol}@one")]);
    {
        let _m = mount(&dev, &mnt, "rw");
        sh(&format!(
            "rm -rf '{}/apt' && echo after > '{}/after'",
            mnt.display(),
            mnt.display()
        ));
    }
    let img = e.dir("snap.img");
    e.ok(&["cp", &format!("{vol}@one"), &img.to_string_lossy()]);
    e2fsck_clean(&img);
    {
        let _m = mount(&img, &e.dir("snapmnt"), "ro,loop");
        assert_eq!(tree_sums(&e.dir("snapmnt")), before, "the snapshot's ext4");
    }
    // snapdev=visible: the snapshot is a read-only device with the same
    // bytes; new snapshots get one; hidden takes them away.
    e.ok(&["zfs", "set", "snapdev=visible", &vol]);
    let sdev = wait_dev(&zvol_dir.join(format!("{vol}@one")));
    sh(&format!("cmp '{}' '{}'", img.display(), sdev.display()));
    e2fsck_clean(&sdev);
    let wr = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k", "count=1", "oflag=direct"])
        .arg(format!("of={}", sdev.display()))
        .output()
        .unwrap();
    assert!(!wr.status.success(), "a snapshot's device took a write");
    e.ok(&["zfs", "snapshot", &format!("{vol}@two")]);
    wait_dev(&zvol_dir.join(format!("{vol}@two")));
    e.ok(&["zfs", "destroy", &format!("{vol}@two")]);
    assert!(fs::symlink_metadata(zvol_dir.join(format!("{vol}@two"))).is_err());
    e.ok(&["zfs", "set", "snapdev=hidden", &vol]);
    assert!(fs::symlink_metadata(zvol_dir.join(format!("{vol}@one"))).is_err());
    // A clone of it is a device of its own with the same ext4.
    let clone = format!("{pool}/clone");
    e.ok(&["zfs", "clone", &format!("{vol}@one"), &clone]);
    let cdev = wait_dev(&zvol_dir.join(&clone));
    assert_ne!(cdev, dev);
    {
        let _m = mount(&cdev, &e.dir("clonemnt"), "ro");
        assert_eq!(tree_sums(&e.dir("clonemnt")), before, "the clone's ext4");
    }
    // Rollback: the device comes back with the snapshot's ext4.
    e.ok(&["zfs", "rollback", &format!("{vol}@one")]);
    let dev = wait_dev(&link);
    {
        let _m = mount(&dev, &mnt, "ro");
        assert_eq!(tree_sums(&mnt), before, "after rollback");
    }
    // volsize grows in place (the device with it; a non-sparse volume's
    // refreservation follows); ext4 then grows into it.
    e.ok(&["zfs", "set", "volsize=192M", &vol]);
    assert_eq!(
        sh(&format!("blockdev --getsize64 '{}'", dev.display())).trim(),
        (192u64 << 20).to_string()
    );
    assert_eq!(
        get("refreservation", &vol).trim(),
        ((192u64 << 20) + 2 * (7 + 12 + 1) * (128 << 10)).to_string()
    );
    let out = e.run(&["zfs", "set", "volsize=1000", &vol]);
    assert!(!out.success() && out.stderr.contains("multiple of volume block size"));
    let out = e.run(&["zfs", "set", "recordsize=8K", &vol]);
    assert!(!out.success() && out.stderr.contains("does not apply"));
    sh(&format!(
        "e2fsck -fy '{0}' >/dev/null 2>&1; resize2fs '{0}' 2>&1",
        dev.display()
    ));
    e2fsck_clean(&dev);
    {
        let _m = mount(&dev, &mnt, "ro");
        assert_eq!(tree_sums(&mnt), before, "after growing");
        let df = sh(&format!(
            "df -B1M --output=size '{}' | tail -1",
            mnt.display()
        ));
        assert!(
            df.trim().parse::<u64>().unwrap_or(0) > 150,
            "ext4 did not grow: {df}"
        );
    }
    // Rename and destroy move and remove the links.
    e.ok(&["zfs", "rename", &clone, &format!("{pool}/clone2")]);
    wait_dev(&zvol_dir.join(format!("{pool}/clone2")));
    assert!(fs::symlink_metadata(zvol_dir.join(&clone)).is_err());
    e.ok(&["zfs", "destroy", &format!("{pool}/clone2")]);
    assert!(fs::symlink_metadata(zvol_dir.join(format!("{pool}/clone2"))).is_err());

    // Over NBD: qemu-img writes an image into a volume and compares it
    // back; the loop device shows the same bytes; qemu-io's write-zeroes
    // and discard read back as zeros.
    let q = format!("{pool}/q");
    e.ok(&["zfs", "create", "-s", "-V", "32M", &q]);
    let sock = e.dir("nbd.sock");
    e.ok(&["nbd", "start", &format!("unix:{}", sock.display())]);
    let listed = e.ok(&["nbd", "list"]);
    assert!(listed.contains(&sock.display().to_string()), "{listed}");
    let img = e.dir("img.raw");
    sh(&format!(
        "head -c 20M /dev/urandom > '{0}' && truncate -s 32M '{0}'",
        img.display()
    ));
    let url = format!("nbd+unix:///{q}?socket={}", sock.display());
    sh(&format!(
        "qemu-img convert -n -f raw -O raw '{}' '{url}'",
        img.display()
    ));
    sh(&format!(
        "qemu-img compare -f raw -F raw '{}' '{url}'",
        img.display()
    ));
    let qdev = wait_dev(&zvol_dir.join(&q));
    sh(&format!("cmp '{}' '{}'", img.display(), qdev.display()));
    let out = sh(&format!(
        "qemu-io -f raw -c 'write -z 0 1M' -c 'discard 1M 1M' -c 'read -P 0 0 2M' -c flush '{url}'"
    ));
    assert!(
        out.contains("read 2097152/2097152 bytes at offset 0"),
        "{out}"
    );
    // An unknown export is refused.
    let bad = Command::new("qemu-img")
        .args([
            "info",
            &format!("nbd+unix:///{pool}/nope?socket={}", sock.display()),
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());

    // Export, OpenZFS's verdict, import: the same ext4.
    e.ok(&["zpool", "export", &pool]);
    assert!(
        fs::symlink_metadata(&link).is_err(),
        "link left after export"
    );
    if let Some(zdb) = common::oracle_zdb() {
        common::openzfs_verdict(&zdb, e.work.path(), &pool);
    }
    e.ok(&[
        "zpool",
        "import",
        "-d",
        &e.work.path().to_string_lossy(),
        &pool,
    ]);
    let dev = wait_dev(&link);
    e2fsck_clean(&dev);
    {
        let _m = mount(&dev, &mnt, "ro");
        assert_eq!(tree_sums(&mnt), before, "after export and import");
    }
    e.ok(&["zpool", "export", &pool]);
}

/// SIGKILL of the daemon under an ext4 writing and fsyncing files on a
/// volume: after a new daemon takes the pool, `e2fsck -f` finds the ext4
/// clean and every file fsynced before the kill is there, whole.
#[test]
fn daemon_killed_under_a_writing_ext4_loses_no_fsynced_file() {
    if !loop_devices() {
        return;
    }
    let e = env("zk");
    let pool = e.pool.clone();
    let vol = format!("{pool}/vol");
    e.ok(&["zfs", "create", "-V", "128M", &vol]);
    let link = Path::new("/dev/zvol").join(&vol);
    let dev = wait_dev(&link);
    sh(&format!("mkfs.ext4 -q -F '{}'", dev.display()));
    let mnt = e.dir("ext4");
    let m = mount(&dev, &mnt, "rw");
    // A writer: files of 64 KiB, each fsynced, then its name logged (the
    // log fsynced too): every name in the log is an acknowledged file.
    let script = format!(
        r#"
import os, sys
d = "{d}"
log = os.open(d + "/acked", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
i = 0
while True:
    data = (b"file %08d " % i) * 5958
    data = data[:65536]
    fd = os.open(d + "/f%08d" % i, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.write(log, b"%d\n" % i)
    os.fsync(log)
    i += 1
"#,
        d = mnt.display()
    );
    let mut writer = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while fs::read_to_string(mnt.join("acked"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
        < 40
    {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the writer made no progress"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = e.daemon_pid().expect("daemon pid");
    // SAFETY: SIGKILL to the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let acked_now = fs::read_to_string(mnt.join("acked")).unwrap_or_default();
    let _ = writer.kill();
    let _ = writer.wait();
    drop(m);
    // A new daemon takes the pool (as after a reboot, `zfs mount -a`) and
    // makes the device again.
    std::thread::sleep(Duration::from_millis(500));
    e.ok(&["zfs", "mount", "-a"]);
    let dev = wait_dev(&link);
    // The volume's intent log held the fsyncs the txgs had not committed:
    // the new daemon replayed it before serving the device.
    let log = e.log();
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("volume {vol}: intent log replayed"))),
        "no replay of the volume's log:\n{log}"
    );
    let out = Command::new("e2fsck")
        .arg("-fy")
        .arg(&dev)
        .output()
        .unwrap();
    // 0: clean; 1: the journal replayed and fixed (a crash): both fine,
    // and a second pass must then find nothing.
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "e2fsck -fy after the kill:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    e2fsck_clean(&dev);
    let _m = mount(&dev, &mnt, "ro");
    let acked: Vec<usize> = fs::read_to_string(mnt.join("acked"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    let before: Vec<usize> = acked_now.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(
        acked.len() + 1 >= before.len(),
        "acknowledged files lost: {} listed before the kill, {} after",
        before.len(),
        acked.len()
    );
    for i in acked.iter().take(before.len().saturating_sub(1)) {
        let data = fs::read(mnt.join(format!("f{i:08}"))).unwrap();
        let want: Vec<u8> = format!("file {i:08} ")
            .bytes()
            .cycle()
            .take(65536)
            .collect();
        assert!(data == want, "file {i} is not what was fsynced");
    }
    drop(_m);
    e.ok(&["zpool", "export", &pool]);
    if let Some(zdb) = common::oracle_zdb() {
        common::openzfs_verdict(&zdb, e.work.path(), &pool);
    }
}

/// OpenZFS's own volume (`c11-zvol-special/vol`, made by OpenZFS 2.3.2 in
/// a pool with a special mirror and a log device): served as a block
/// device its bytes are OpenZFS's (the corpus's sha256); written through
/// the device, then sent and received as a volume, it stays a pool
/// OpenZFS's zdb finds clean, and the received copy has the same bytes.
#[test]
fn openzfs_volume_served_written_sent_and_received() {
    if !loop_devices() {
        return;
    }
    let corpus = common::corpus_dir().join("c11-zvol-special");
    let e = {
        let work = tempfile::Builder::new()
            .prefix(&format!("ozfs-dh-{}-c11v-", std::process::id()))
            .tempdir_in("/var/tmp")
            .expect("work dir");
        Env {
            oz: ozfs_testkit::Ozfs::new(BIN).with_timeout(Duration::from_secs(120)),
            work,
            pool: format!("zc11v{}", std::process::id() % 100000),
        }
    };
    let devs = e.dir("devs");
    common::unpack_corpus(&corpus, &devs);
    let d = devs.to_string_lossy().into_owned();
    let pool = e.pool.clone();
    // Under a name of its own, its file system unmounted: then held by
    // the daemon, which serves the volume.
    e.ok(&["zpool", "import", "-N", "-d", &d, "c11-zvol-special", &pool]);
    e.ok(&["zfs", "set", "mountpoint=none", &pool]);
    e.ok(&["zpool", "export", &pool]);
    e.ok(&["zpool", "import", "-d", &d, &pool]);
    let vol = format!("{pool}/vol");
    let get = |p: &str| e.ok(&["zfs", "get", "-Hp", "-o", "value", p, &vol]);
    assert_eq!(get("volsize").trim(), (24u64 << 20).to_string());
    // OpenZFS's own figure for this volume (props.txt: 26.5M).
    assert_eq!(
        get("refreservation").trim(),
        ((24u64 << 20) + 20 * (128 << 10)).to_string()
    );
    let dev = wait_dev(&Path::new("/dev/zvol").join(&vol));
    let want = fs::read_to_string(corpus.join("zvols.txt")).unwrap();
    let sum = sh(&format!("sha256sum < '{}'", dev.display()));
    let sum = sum.split_whitespace().next().unwrap_or("").to_string();
    assert!(
        want.contains(&format!("{sum}  c11-zvol-special/vol")),
        "the device's sha256 {sum} is not OpenZFS's:\n{want}"
    );
    // Written through the device (direct, flushed).
    sh(&format!(
        "head -c 3M /dev/urandom > '{0}' && dd if='{0}' of='{1}' bs=1M seek=5 oflag=direct conv=fsync status=none",
        e.dir("patch").display(),
        dev.display()
    ));
    let after = sh(&format!("sha256sum < '{}'", dev.display()));
    // Sent and received: a volume again, with the same bytes.
    e.ok(&["zfs", "snapshot", &format!("{vol}@s")]);
    let stream = e.dir("vol.zstream");
    let out = Command::new(BIN)
        .env("OZFS_STATE_DIR", e.oz.state_dir())
        .args(["zfs", "send", &format!("{vol}@s")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(&stream, &out.stdout).unwrap();
    let dump = Command::new("/opt/openzfs-2.3/bin/zstream")
        .args(["dump"])
        .stdin(fs::File::open(&stream).unwrap())
        .output();
    if let Ok(d) = dump {
        let t = String::from_utf8_lossy(&d.stdout);
        assert!(
            t.contains("type = 3") || t.contains("drr_type = 3") || !d.status.success(),
            "{t}"
        );
    }
    let copy = format!("{pool}/copy");
    let st = Command::new(BIN)
        .env("OZFS_STATE_DIR", e.oz.state_dir())
        .args(["zfs", "receive", &copy])
        .stdin(fs::File::open(&stream).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        e.ok(&["zfs", "get", "-H", "-o", "value", "type", &copy])
            .trim(),
        "volume"
    );
    let cdev = wait_dev(&Path::new("/dev/zvol").join(&copy));
    assert_eq!(sh(&format!("sha256sum < '{}'", cdev.display())), after);
    e.ok(&["zpool", "export", &pool]);
    if let Some(zdb) = common::oracle_zdb() {
        common::openzfs_verdict(&zdb, &devs, &pool);
    }
}
