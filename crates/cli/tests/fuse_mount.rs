//! (f) `ozfs mount`: a dataset served read-write through FUSE.
//!
//! ozfs creates a raidz1 pool; `ozfs mount` serves it on a temp dir while
//! the test works through the mount like any program would: the testkit's
//! `populate` (sizes, sparse files, fat ZAPs, deep trees, symlinks, hard
//! links, xattrs, odd names, modes, owners, fifos, explicit mtimes — the
//! result must equal the same profile populated on a local file system),
//! then write/read/append/truncate, mkdir/rmdir, rename (incl. over a file
//! and into itself), symlinks, hard links, chmod/chown/utimes, xattrs incl.
//! removal, a char device, an unlinked-but-open file, a 20 MiB file (sha256),
//! a directory removed under an open file (no inode reuse), fallocate and
//! hole punching, statfs, and `fsx` (if installed: `cargo install fsx`): a
//! short run with fsx's defaults and a 100,000-operation run of every fsx
//! operation the mount serves.
//!
//! Then: `fusermount -u` ends the server (exit 0); a second mount still
//! reads the 20 MiB file (cold cache) and a file written just before
//! SIGTERM survives it; a read-only mount refuses writes. Finally the pool
//! is exported, zfs-fuse's `zdb -bcc` is clean and zfs-fuse's mount shows
//! exactly the tree that was seen through ozfs.

mod common;
mod mcommon;
mod wcommon;
use mcommon::{find_fsx, fsx_run, Mounted, FSX_CONFIG};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;
use wcommon::*;

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Manifest with every mtime zeroed except under `times/` (explicit mtimes).
fn without_mtimes(m: &Manifest) -> Manifest {
    let mut m = m.clone();
    for (p, e) in m.entries.iter_mut() {
        if !p.starts_with("times") || p == Path::new("times") {
            e.mtime = (0, 0);
        }
    }
    m
}

fn statvfs(p: &Path) -> libc::statvfs {
    // SAFETY: valid path, zeroed out-struct.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(cpath(p).as_ptr(), &mut s), 0, "statvfs");
        s
    }
}

/// Everything a program would do with files, checked as it goes.
/// A directory listed in several READDIRPLUS batches while its names are
/// moved away (the files live on elsewhere): whatever the later batches
/// return, no moved name is handed to the kernel as an entry of this
/// directory (it would keep it for an hour: `stat` would find a file
/// that is not there), and a name created meanwhile is found.
fn listing_while_changed(m: &Path) {
    let d = m.join("listing");
    fs::create_dir_all(&d).unwrap();
    let names: Vec<String> = (0..3000).map(|i| format!("entry-{i:05}")).collect();
    for n in &names {
        fs::write(d.join(n), b"x").unwrap();
    }
    let mut it = fs::read_dir(&d).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let e = it.next().expect("an entry").unwrap();
        seen.insert(e.file_name().to_string_lossy().into_owned());
    }
    let removed: Vec<&String> = names.iter().filter(|n| !seen.contains(*n)).collect();
    let away = m.join("listing-away");
    fs::create_dir_all(&away).unwrap();
    for n in &removed {
        fs::rename(d.join(n), away.join(n)).unwrap();
    }
    fs::write(d.join("late"), b"y").unwrap();
    for e in it {
        e.unwrap();
    }
    for n in &removed {
        assert_eq!(
            errno_of(fs::symlink_metadata(d.join(n))),
            libc::ENOENT,
            "{n}: moved during the listing, still found"
        );
    }
    assert_eq!(fs::read_dir(&away).unwrap().count(), removed.len());
    assert_eq!(fs::read(d.join("late")).unwrap(), b"y");
    let left: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "late")
        .collect();
    assert_eq!(left.len(), seen.len(), "a fresh listing shows what is left");
    fs::remove_dir_all(&d).unwrap();
    fs::remove_dir_all(&away).unwrap();
}

fn posix_checks(m: &Path) {
    listing_while_changed(m);
    // create / write / read / append / truncate
    let f = m.join("ops/file.txt");
    fs::create_dir_all(m.join("ops")).unwrap();
    fs::write(&f, b"hello").unwrap();
    OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b" world")
        .unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello world");
    let h = OpenOptions::new().write(true).open(&f).unwrap();
    h.set_len(5).unwrap();
    h.set_len(4000).unwrap();
    drop(h);
    let mut want = b"hello".to_vec();
    want.resize(4000, 0);
    assert_eq!(fs::read(&f).unwrap(), want, "truncate down then up");
    populate::pwrite(&f, 300_000, b"tail").unwrap();
    let got = fs::read(&f).unwrap();
    assert_eq!(got.len(), 300_004);
    assert_eq!(&got[..5], b"hello");
    assert!(got[5..300_000].iter().all(|&b| b == 0));
    assert_eq!(&got[300_000..], b"tail");

    // mkdir / rmdir
    fs::create_dir_all(m.join("ops/a/b/c")).unwrap();
    assert_eq!(errno_of(fs::remove_dir(m.join("ops/a/b"))), libc::ENOTEMPTY);
    fs::remove_dir(m.join("ops/a/b/c")).unwrap();
    assert_eq!(errno_of(fs::create_dir(m.join("ops/a"))), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_dir(&f)), libc::ENOTDIR);
    assert_eq!(errno_of(fs::remove_file(m.join("ops/a"))), libc::EISDIR);
    assert_eq!(errno_of(fs::read(m.join("ops/nope"))), libc::ENOENT);
    assert_eq!(fs::metadata(m.join("ops/a")).unwrap().nlink(), 3);

    // rename: across dirs, over a file, a directory, into itself
    fs::write(m.join("ops/r1"), b"one").unwrap();
    fs::write(m.join("ops/r2"), b"two").unwrap();
    fs::rename(m.join("ops/r1"), m.join("ops/a/r1")).unwrap();
    fs::rename(m.join("ops/r2"), m.join("ops/a/r1")).unwrap();
    assert_eq!(fs::read(m.join("ops/a/r1")).unwrap(), b"two");
    assert!(!m.join("ops/r2").exists());
    fs::rename(m.join("ops/a/b"), m.join("ops/b2")).unwrap();
    assert!(m.join("ops/b2").is_dir());
    assert_eq!(
        errno_of(fs::rename(m.join("ops/a"), m.join("ops/a/inside"))),
        libc::EINVAL
    );

    // symlinks (bonus and block targets)
    let long = "t/".repeat(100);
    std::os::unix::fs::symlink("a/r1", m.join("ops/sl")).unwrap();
    std::os::unix::fs::symlink(&long, m.join("ops/sl_long")).unwrap();
    assert_eq!(fs::read_link(m.join("ops/sl")).unwrap(), Path::new("a/r1"));
    assert_eq!(
        fs::read_link(m.join("ops/sl_long")).unwrap(),
        Path::new(&long)
    );
    assert_eq!(fs::read(m.join("ops/sl")).unwrap(), b"two");

    // hard links
    fs::hard_link(m.join("ops/a/r1"), m.join("ops/hl")).unwrap();
    let (a, b) = (
        fs::metadata(m.join("ops/a/r1")).unwrap(),
        fs::metadata(m.join("ops/hl")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));

    // chmod / chown / utimes
    fs::set_permissions(m.join("ops/hl"), fs::Permissions::from_mode(0o4750)).unwrap();
    populate::lchown(&m.join("ops/hl"), 1234, 5678).unwrap();
    populate::set_mtime(&m.join("ops/hl"), 1_000_000_000, 123_456_789).unwrap();
    let md = fs::metadata(m.join("ops/a/r1")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o750, "chown clears setuid");
    assert_eq!((md.uid(), md.gid()), (1234, 5678));
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_000_000_000, 123_456_789));
    fs::set_permissions(m.join("ops/hl"), fs::Permissions::from_mode(0o4750)).unwrap();
    assert_eq!(
        fs::metadata(m.join("ops/hl")).unwrap().mode() & 0o7777,
        0o4750
    );

    // xattrs: set, replace, list, remove
    let x = m.join("ops/a/r1");
    populate::set_xattr(&x, "user.one", b"1").unwrap();
    populate::set_xattr(&x, "user.two", &[7u8; 3000]).unwrap();
    populate::set_xattr(&x, "user.one", b"uno").unwrap();
    let xs = manifest::read_xattrs(&x).unwrap();
    assert_eq!(xs.len(), 2);
    assert_eq!(xs[std::ffi::OsStr::new("user.one")], b"uno");
    assert_eq!(xs[std::ffi::OsStr::new("user.two")], vec![7u8; 3000]);
    populate::remove_xattr(&x, "user.two").unwrap();
    assert_eq!(manifest::read_xattrs(&x).unwrap().len(), 1);

    // fifo and char device
    populate::mkfifo(&m.join("ops/fifo"), 0o640).unwrap();
    let dev = cpath(&m.join("ops/null2"));
    // SAFETY: valid path.
    let r = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
    let md = fs::symlink_metadata(m.join("ops/null2")).unwrap();
    assert_eq!(md.rdev(), libc::makedev(1, 3));
    let dev = cpath(&m.join("ops/bigdev"));
    // SAFETY: valid path.
    let r = unsafe {
        libc::mknod(
            dev.as_ptr(),
            libc::S_IFBLK | 0o600,
            libc::makedev(300, 70000),
        )
    };
    assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
    let md = fs::symlink_metadata(m.join("ops/bigdev")).unwrap();
    assert_eq!(md.rdev(), libc::makedev(300, 70000));

    // a file unlinked while open lives until closed
    let p = m.join("ops/orphan");
    let mut o = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    o.write_all(&[5u8; 200_000]).unwrap();
    fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    o.write_all(b"more").unwrap();
    o.sync_all().unwrap();
    assert_eq!(o.metadata().unwrap().nlink(), 0);
    o.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    o.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 200_004);
    assert_eq!(&back[199_998..], b"\x05\x05more");
    drop(o);

    // a directory removed while a file in it is open: its object number
    // must not be reused while the kernel still knows the old inode
    // (new directories would be "dead" to the kernel: ENOENT)
    fs::create_dir(m.join("ops/gone")).unwrap();
    fs::write(m.join("ops/gone/f"), b"x").unwrap();
    let held = File::open(m.join("ops/gone/f")).unwrap();
    fs::remove_file(m.join("ops/gone/f")).unwrap();
    fs::remove_dir(m.join("ops/gone")).unwrap();
    for i in 0..3 {
        let d = m.join(format!("ops/new{i}"));
        fs::create_dir(&d).unwrap();
        fs::write(d.join("g"), b"y").unwrap();
        assert_eq!(fs::read(d.join("g")).unwrap(), b"y");
    }
    drop(held);

    // fallocate: mode 0 extends, PUNCH_HOLE zeroes without changing the size
    let fa = m.join("ops/falloc");
    fs::write(&fa, vec![7u8; 300_000]).unwrap();
    let h = OpenOptions::new().read(true).write(true).open(&fa).unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate on an open descriptor.
    unsafe {
        assert_eq!(
            libc::fallocate(h.as_raw_fd(), 0, 0, 400_000),
            0,
            "fallocate"
        );
        assert_eq!(
            libc::fallocate(h.as_raw_fd(), punch, 1000, 200_000),
            0,
            "punch"
        );
    }
    drop(h);
    let got = fs::read(&fa).unwrap();
    assert_eq!(got.len(), 400_000);
    assert!(got[..1000].iter().all(|&b| b == 7));
    assert!(got[1000..201_000].iter().all(|&b| b == 0));
    assert!(got[201_000..300_000].iter().all(|&b| b == 7));
    assert!(got[300_000..].iter().all(|&b| b == 0));

    // a name replaced by rename while open keeps the old contents readable
    fs::write(m.join("ops/old"), b"old contents").unwrap();
    let mut keep = File::open(m.join("ops/old")).unwrap();
    fs::write(m.join("ops/new"), b"new").unwrap();
    fs::rename(m.join("ops/new"), m.join("ops/old")).unwrap();
    let mut s = String::new();
    keep.read_to_string(&mut s).unwrap();
    assert_eq!(s, "old contents");
    drop(keep);
    assert_eq!(fs::read(m.join("ops/old")).unwrap(), b"new");

    // renameat2(RENAME_EXCHANGE): a file and a directory in different
    // parents swap names; link counts and ".." follow the directory
    fs::create_dir_all(m.join("ops/ex1")).unwrap();
    fs::create_dir_all(m.join("ops/ex2/y")).unwrap();
    fs::write(m.join("ops/ex1/x"), b"X").unwrap();
    fs::write(m.join("ops/ex2/y/inner"), b"I").unwrap();
    let renameat2 = |a: &Path, b: &Path, flags: u32| -> i32 {
        // SAFETY: two valid C paths relative to the cwd.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                cpath(a).as_ptr(),
                libc::AT_FDCWD,
                cpath(b).as_ptr(),
                flags,
            )
        };
        if r == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
    };
    let (x, y) = (m.join("ops/ex1/x"), m.join("ops/ex2/y"));
    assert_eq!(renameat2(&x, &y, libc::RENAME_EXCHANGE), 0, "exchange");
    assert_eq!(fs::read(&y).unwrap(), b"X");
    assert_eq!(fs::read(x.join("inner")).unwrap(), b"I");
    assert_eq!(fs::metadata(m.join("ops/ex1")).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(m.join("ops/ex2")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(x.join("..")).unwrap().ino(),
        fs::metadata(m.join("ops/ex1")).unwrap().ino()
    );
    let missing = m.join("ops/ex1/missing");
    assert_eq!(renameat2(&x, &missing, libc::RENAME_EXCHANGE), libc::ENOENT);
    let both = libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE;
    assert_eq!(renameat2(&x, &y, both), libc::EINVAL);
    assert_eq!(
        renameat2(&x, &x.join("inner"), libc::RENAME_EXCHANGE),
        libc::EINVAL,
        "a directory exchanged into itself"
    );
    assert_eq!(renameat2(&x, &y, libc::RENAME_EXCHANGE), 0, "exchange back");
    assert_eq!(fs::read(&x).unwrap(), b"X");
    assert_eq!(fs::read(y.join("inner")).unwrap(), b"I");
    assert_eq!(fs::metadata(m.join("ops/ex1")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.join("ops/ex2")).unwrap().nlink(), 3);

    // lseek SEEK_DATA / SEEK_HOLE, before and after the txg is synced:
    // data in record 0, holes in records 1..8, data in record 8
    let sp = m.join("ops/sparse-seek");
    let h = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&sp)
        .unwrap();
    h.write_all_at(&[1u8; 100], 0).unwrap();
    h.write_all_at(&[2u8; 10], 1 << 20).unwrap();
    let size = (1 << 20) + 10;
    let seek = |off: i64, whence: i32| -> std::result::Result<i64, i32> {
        // SAFETY: lseek on an open descriptor.
        let r = unsafe { libc::lseek(h.as_raw_fd(), off, whence) };
        if r < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
        } else {
            Ok(r)
        }
    };
    for round in 0..2 {
        assert_eq!(seek(0, libc::SEEK_DATA), Ok(0), "round {round}");
        assert_eq!(seek(50, libc::SEEK_HOLE), Ok(131072), "round {round}");
        assert_eq!(seek(131072, libc::SEEK_DATA), Ok(1 << 20), "round {round}");
        assert_eq!(seek(200_000, libc::SEEK_HOLE), Ok(200_000), "round {round}");
        assert_eq!(seek(1 << 20, libc::SEEK_HOLE), Ok(size), "round {round}");
        assert_eq!(
            seek(size, libc::SEEK_DATA),
            Err(libc::ENXIO),
            "round {round}"
        );
        h.sync_all().unwrap();
    }
    drop(h);

    // atime=off (this pool's setting): reads leave the access time alone
    let f = m.join("ops/file.txt");
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    File::open(&f)
        .unwrap()
        .set_times(fs::FileTimes::new().set_accessed(old))
        .unwrap();
    let _ = fs::read(&f).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().atime(), 1_000_000, "atime=off");

    // readdir with . and ..
    let names: Vec<String> = fs::read_dir(m.join("ops/a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["r1".to_string()]);
}

/// fsx: a short run with fsx's defaults (msync after every mapped write),
/// then the long run (`OZFS_FSX_OPS`, default 100,000 operations) with
/// [`FSX_CONFIG`].
fn run_fsx(dir: &Path, artifacts: &Path) {
    let Some(fsx) = find_fsx() else {
        eprintln!("NOTE: fsx is not installed (cargo install fsx): fsx part skipped");
        return;
    };
    let env = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    fsx_run(
        &fsx,
        &dir.join("fsx-msync.dat"),
        artifacts,
        None,
        env("OZFS_FSX_MSYNC_OPS", 5_000),
        4242,
    );
    let cfg = artifacts.join("fsx.toml");
    fs::write(&cfg, FSX_CONFIG).unwrap();
    fsx_run(
        &fsx,
        &dir.join("fsx.dat"),
        artifacts,
        Some(&cfg),
        env("OZFS_FSX_OPS", 100_000),
        4243,
    );
}

#[test]
fn fuse_mount() {
    let tag = "fuse";
    let t0 = Instant::now();
    let pool = new_devs("ozfuse", Layout::Raidz1, 3, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    let work = local_dir(tag);
    let mnt = work.path().join("mnt");
    let artifacts = work.path().join("fsx");
    fs::create_dir_all(&mnt).unwrap();
    fs::create_dir_all(&artifacts).unwrap();
    let log = work.path().join("mount1.log");
    let m1 = Mounted::start(&oz, &name, &mnt, &log, &[]);
    let mnt = m1.mnt.clone();

    // statfs of the empty pool.
    let s0 = statvfs(&mnt);
    let total = s0.f_blocks * s0.f_frsize;
    let avail0 = s0.f_bavail * s0.f_frsize;
    assert!(
        (300 * MIB..=400 * MIB).contains(&total),
        "statfs: {total} bytes in a 3 x 128 MiB pool"
    );
    assert!(
        avail0 > 200 * MIB && avail0 < total,
        "statfs: {avail0} available of {total}"
    );

    // The testkit's content, through the mount and locally.
    let profile = Profile::moderate(77);
    fs::create_dir_all(mnt.join("pop")).unwrap();
    let rep = populate(&mnt.join("pop"), &profile).unwrap();
    assert!(rep.xattrs, "xattrs through the mount: {:?}", rep.notes);
    let local = work.path().join("local");
    fs::create_dir_all(&local).unwrap();
    populate(&local, &profile).unwrap();
    let ours = Manifest::scan(mnt.join("pop")).unwrap();
    let theirs = Manifest::scan(&local).unwrap();
    without_mtimes(&theirs).assert_same(&without_mtimes(&ours), "populate through the mount");
    phase(&format!("{tag}: populate"), t0);

    posix_checks(&mnt);
    phase(&format!("{tag}: posix checks"), t0);

    // 20 MiB, read back through the mount.
    let src = work.path().join("big.src");
    populate::write_random(&src, 20 * MIB + 12345, 99).unwrap();
    let want = manifest::sha256_file(&src).unwrap();
    fs::copy(&src, mnt.join("big")).unwrap();
    File::open(mnt.join("big")).unwrap().sync_all().unwrap();
    assert_eq!(manifest::sha256_file(&mnt.join("big")).unwrap(), want);
    let s1 = statvfs(&mnt);
    let avail1 = s1.f_bavail * s1.f_frsize;
    assert!(
        avail1 + 20 * MIB <= avail0,
        "statfs: available {avail0} -> {avail1} after writing 20 MiB + populate"
    );
    phase(&format!("{tag}: 20 MiB"), t0);

    run_fsx(&mnt, &artifacts);
    phase(&format!("{tag}: fsx"), t0);

    settle_times(&mnt).unwrap();
    m1.unmount();

    // Second mount: cold read; a file written right before SIGTERM survives.
    let m2 = Mounted::start(&oz, &name, &mnt, &work.path().join("mount2.log"), &[]);
    assert_eq!(manifest::sha256_file(&mnt.join("big")).unwrap(), want);
    fs::write(mnt.join("late.txt"), b"written before SIGTERM").unwrap();
    populate::set_mtime(&mnt.join("late.txt"), 1_500_000_000, 0).unwrap();
    populate::set_mtime(&mnt, 1_500_000_000, 0).unwrap();
    m2.terminate();

    // Read-only mount: content is there, writes are refused.
    let m3 = Mounted::start(
        &oz,
        &name,
        &mnt,
        &work.path().join("mount3.log"),
        &["-o", "ro"],
    );
    assert_eq!(
        fs::read(mnt.join("late.txt")).unwrap(),
        b"written before SIGTERM"
    );
    assert_eq!(errno_of(fs::write(mnt.join("x"), b"x")), libc::EROFS);
    let seen = Manifest::scan(&mnt).unwrap();
    m3.unmount();
    phase(&format!("{tag}: remounts"), t0);

    // zfs-fuse agrees.
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), "after fuse mount");
    let mut pool = pool;
    pool.import()
        .unwrap_or_else(|e| panic!("zfs-fuse cannot import the pool: {e}"));
    let zf = scan_zf(&pool.root(""), true);
    seen.assert_same(&zf, "zfs-fuse view of what ozfs mount showed");
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse checks"), t0);
}
