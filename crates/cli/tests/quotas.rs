//! `quota` and `refquota` are enforced on every write path, as OpenZFS
//! enforces them: `ozfs cp` into a dataset fails with a clear error, writes
//! through a mount fail with EDQUOT, a quota on a parent covers its
//! children, and `zfs list` shows AVAIL within the quota. What was written
//! before the limit stays intact, and the pool stays consistent.

mod common;
mod wcommon;
use std::fs;
use std::io::Write;
use wcommon::*;

const MIB: usize = 1 << 20;

fn avail(oz: &ozfs_testkit::cli::Ozfs, ds: &str) -> u64 {
    oz.ok(&["zfs", "get", "-Hp", "-o", "value", "available", ds])
        .trim()
        .parse()
        .unwrap()
}

/// Incompressible bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    ozfs_testkit::rng::XorShift::new(seed).bytes(n)
}

#[test]
fn quotas_hold_on_every_write_path() {
    let pool = new_devs("ozquota", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir();
    let oz = ozfs();
    let work = local_dir("quotas");
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), mnt.join("q"), mnt.join("p"), mnt.join("p/c")],
    };
    oz_create_at(&oz, &pool, &mnt, None, &[]);
    let q = format!("{name}/q");
    oz.ok(&["zfs", "create", "-o", "quota=10M", &q]);
    assert!(avail(&oz, &q) <= 10 << 20, "AVAIL beyond the quota");

    // ozfs cp: a 30 MiB file does not fit a 10 MiB quota.
    let big = root.join("big.bin");
    fs::write(&big, noise(30 * MIB, 1)).unwrap();
    let small = root.join("small.bin");
    fs::write(&small, noise(2 * MIB, 2)).unwrap();
    oz_cp_in(&oz, &small, &format!("{q}:/"));
    let r = oz.run(&["cp", &big.to_string_lossy(), &format!("{q}:/")]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("quota exceeded"), "{}", r.describe());
    let used: u64 = oz
        .ok(&["zfs", "get", "-Hp", "-o", "value", "used", &q])
        .trim()
        .parse()
        .unwrap();
    assert!(used <= 10 << 20, "used {used} past the quota");
    let back = root.join("back.bin");
    oz.ok(&["cp", &format!("{q}:/small.bin"), &back.to_string_lossy()]);
    assert_eq!(fs::read(&back).unwrap(), fs::read(&small).unwrap());

    // refquota, and a parent's quota over its child, through the mount.
    let p = format!("{name}/p");
    let c = format!("{p}/c");
    oz.ok(&["zfs", "create", "-o", "quota=8M", &p]);
    oz.ok(&["zfs", "create", &c]);
    oz.ok(&["zfs", "set", "refquota=6M", &q]);
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(is_mounted(&mnt.join("q")) && is_mounted(&mnt.join("p/c")));
    for (dir, limit) in [(mnt.join("q"), 6u64 << 20), (mnt.join("p/c"), 8 << 20)] {
        let mut f = fs::File::create(dir.join("fill")).unwrap();
        let chunk = noise(MIB, 3);
        let mut written = 0u64;
        let err = loop {
            match f.write_all(&chunk).and_then(|()| f.sync_data()) {
                Ok(()) => written += MIB as u64,
                Err(e) => break e,
            }
            assert!(
                written <= 64 << 20,
                "{}: 64 MiB written past a {limit} quota",
                dir.display()
            );
        };
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EDQUOT),
            "{}: {err}",
            dir.display()
        );
        assert!(
            written <= limit,
            "{}: {written} bytes past {limit}",
            dir.display()
        );
        drop(f);
        // Room again after the file goes.
        fs::remove_file(dir.join("fill")).unwrap();
    }
    // Statfs (df) says what is left under the limit.
    let st = nix_statvfs(&mnt.join("p/c"));
    assert!(
        st <= 8 << 20,
        "df shows {st} bytes available under an 8M quota"
    );
    assert_eq!(
        fs::read(mnt.join("q/small.bin")).unwrap(),
        fs::read(&small).unwrap()
    );
    // `reservation` is not kept yet: refused, never stored unenforced.
    let r = oz.run(&["zfs", "set", "reservation=4M", &format!("{name}/q")]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("not supported yet"), "{}", r.describe());
    // `refreservation` is: charged to the directory beyond what it holds.
    let q = format!("{name}/q");
    oz.ok(&["zfs", "set", "refreservation=64M", &q]);
    let get = |p: &str| {
        oz.ok(&["zfs", "get", "-Hp", "-o", "value", p, &q])
            .trim()
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    };
    assert_eq!(get("refreservation"), 64 << 20);
    assert_eq!(
        get("usedbyrefreservation"),
        (64u64 << 20).saturating_sub(get("usedbydataset"))
    );
    oz.ok(&["zfs", "set", "refreservation=none", &q]);
    assert_eq!(get("usedbyrefreservation"), 0);
    oz.ok(&["zfs", "set", "reservation=none", &format!("{name}/q")]);
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &dev_dir, "after writes refused by quotas");

    // The quota is where every ZFS keeps it: zfs-fuse reads ozfs's, and
    // ozfs reads one zfs-fuse set.
    let mut pool = pool;
    pool.import().expect("zfs-fuse imports");
    let got = pool
        .zfs(&["get", "-H", "-o", "value", "quota", &p])
        .expect("zfs-fuse zfs get quota");
    assert_eq!(got.trim(), "8M", "zfs-fuse's view of the quota ozfs set");
    pool.zfs(&["set", "quota=5M", &c])
        .expect("zfs-fuse zfs set quota");
    pool.export().expect("zfs-fuse exports");
    oz.ok(&[
        "zpool",
        "import",
        "-N",
        "-d",
        &dev_dir.to_string_lossy(),
        &name,
    ]);
    let got = oz.ok(&["zfs", "get", "-Hp", "-o", "value,source", "quota", &c]);
    assert_eq!(got.trim(), format!("{}\tlocal", 5u64 << 20));
    let room = avail(&oz, &c);
    assert!(
        room <= 5 << 20,
        "AVAIL {room} under a 5M quota set by zfs-fuse"
    );
    oz_export(&oz, &name);
}

fn nix_statvfs(p: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs into a zeroed struct with a valid path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0);
        s.f_bavail * s.f_frsize
    }
}
