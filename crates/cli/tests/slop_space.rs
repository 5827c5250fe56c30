//! The slop reservation is kept: on a 512 MiB feature-flag pool (slop
//! 128 MiB, OpenZFS 2.3's `spa_get_slop_space`), writes through a mount go
//! on until ENOSPC, and what they wrote is what `zfs list` and `df` said
//! was available before (within a little: the txg in flight); the pool's
//! capacity stays below what the slop allows. On the full pool `ozfs cp`
//! is refused with an out-of-space error, while destroying a snapshot and a
//! file system and removing files still work and free space, after which
//! writes fit again. OpenZFS's zdb finds the pool clean.

mod common;
mod wcommon;
use std::fs;
use std::io::Write;
use wcommon::*;

const MIB_U: usize = 1 << 20;
/// What a write may pass AVAIL by (the txg in flight, the MOS it syncs).
const TOLERANCE: u64 = 4 << 20;
/// OpenZFS's slop for a pool this small (`spa_min_slop`: 128 MiB).
const SLOP: u64 = 128 << 20;

fn get(oz: &Ozfs, prop: &str, ds: &str) -> u64 {
    let v = oz.ok(&["zfs", "get", "-Hp", "-o", "value", prop, ds]);
    v.trim()
        .parse()
        .unwrap_or_else(|_| panic!("zfs get {prop} {ds}: {v:?}"))
}

fn pool_num(oz: &Ozfs, prop: &str, pool: &str) -> u64 {
    let v = zpool_get(oz, prop, pool);
    v.trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("zpool get {prop} {pool}: {v:?}"))
}

/// Incompressible bytes.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    ozfs_testkit::rng::XorShift::new(seed).bytes(n)
}

/// `df`'s available bytes for the file system mounted at `p`.
fn df_avail(p: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs into a zeroed struct with a valid path.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0);
        s.f_bavail * s.f_frsize
    }
}

/// Writes `seed`'s noise into `path` in 1 MiB writes until one fails;
/// returns the file's size then and the error.
fn fill(path: &std::path::Path, seed: u64, limit: u64) -> (u64, std::io::Error) {
    let mut f = fs::File::create(path).unwrap();
    let chunk = noise(MIB_U, seed);
    let mut written = 0u64;
    let err = loop {
        match f.write_all(&chunk) {
            Ok(()) => written += MIB_U as u64,
            Err(e) => break e,
        }
        assert!(
            written <= limit,
            "{}: {written} bytes written, past {limit}",
            path.display()
        );
    };
    // What was accepted is kept (its space was reserved).
    f.sync_all()
        .unwrap_or_else(|e| panic!("fsync after ENOSPC: {e}"));
    drop(f);
    (fs::metadata(path).unwrap().len(), err)
}

#[test]
fn slop_is_kept_and_a_full_pool_can_be_emptied() {
    let Some(zdb) = oracle_zdb() else { return };
    let pool = new_devs("ozslop", Layout::Stripe, 1, 512);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir();
    let oz = ozfs();
    let work = local_dir("slop");
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), mnt.join("fs"), mnt.join("other")],
    };
    // A feature-flag pool, as `zpool create` makes it by default.
    let mut args: Vec<String> = ["zpool", "create", "-f", "-O", "atime=off", "-m"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(mnt.to_string_lossy().into_owned());
    args.push(name.clone());
    args.extend(pool.devs().iter().map(|d| d.to_string_lossy().into_owned()));
    oz.ok(&args);
    let fs_name = format!("{name}/fs");
    let other = format!("{name}/other");
    oz.ok(&["zfs", "create", &fs_name]);
    oz.ok(&["zfs", "create", &other]);
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(is_mounted(&mnt.join("fs")) && is_mounted(&mnt.join("other")));

    // A snapshot holding 16 MiB no file references any more, and a file
    // system holding 8 MiB: what the full pool gets back later.
    fs::write(mnt.join("fs/old"), noise(16 * MIB_U, 1)).unwrap();
    fs::write(mnt.join("other/data"), noise(8 * MIB_U, 2)).unwrap();
    oz.ok(&["zfs", "snapshot", &format!("{fs_name}@s1")]);
    fs::remove_file(mnt.join("fs/old")).unwrap();
    oz.ok(&["zpool", "sync", &name]);

    // AVAIL as zfs list and df say it, before filling.
    let size = pool_num(&oz, "size", &name);
    let avail = get(&oz, "available", &fs_name);
    let df = df_avail(&mnt.join("fs"));
    eprintln!("[slop] size {size}, AVAIL {avail}, df {df}");
    assert!(
        df <= avail + TOLERANCE && df + 16 * (1 << 20) >= avail,
        "df says {df} bytes available, zfs list {avail}"
    );
    assert!(
        avail + SLOP <= size,
        "AVAIL {avail} leaves less than the {SLOP}-byte slop of a {size}-byte pool"
    );

    // Fill through the mount until ENOSPC.
    let (written, err) = fill(&mnt.join("fs/fill"), 3, size);
    eprintln!("[slop] written {written} of AVAIL {avail} before: {err}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(
        written <= avail + TOLERANCE,
        "{written} bytes written past the {avail} bytes AVAIL said (slop not kept)"
    );
    assert!(
        written + 16 * (1 << 20) >= avail,
        "only {written} of the {avail} bytes AVAIL said could be written"
    );
    oz.ok(&["zpool", "sync", &name]);
    let alloc = pool_num(&oz, "allocated", &name);
    let cap = pool_num(&oz, "capacity", &name);
    let avail_full = get(&oz, "available", &fs_name);
    eprintln!("[slop] full: allocated {alloc} of {size}, CAP {cap}%, AVAIL {avail_full}");
    assert!(
        alloc + SLOP <= size + TOLERANCE,
        "{alloc} bytes allocated of {size}: the slop was eaten"
    );
    assert!(cap <= 80, "CAP {cap}% on a pool that keeps 1/4 free");
    assert!(avail_full <= TOLERANCE, "AVAIL {avail_full} on a full pool");

    // ozfs cp into the full pool is refused, saying why.
    let src = root.join("four.bin");
    fs::write(&src, noise(4 * MIB_U, 4)).unwrap();
    let r = oz.run(&["cp", &src.to_string_lossy(), &format!("{fs_name}:/")]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    let msg = r.stderr.to_lowercase();
    assert!(
        msg.contains("out of space") || msg.contains("no space left"),
        "{}",
        r.describe()
    );

    // The full pool can still be emptied: a snapshot and a file system
    // destroyed, a file removed, each freeing space.
    oz.ok(&["zfs", "destroy", &format!("{fs_name}@s1")]);
    let a1 = get(&oz, "available", &fs_name);
    assert!(
        a1 >= avail_full + 15 * (1 << 20),
        "destroying the snapshot freed {} bytes",
        a1.saturating_sub(avail_full)
    );
    oz.ok(&["zfs", "destroy", "-r", &other]);
    let a2 = get(&oz, "available", &fs_name);
    assert!(
        a2 >= a1 + 7 * (1 << 20),
        "destroying {other} freed {} bytes",
        a2.saturating_sub(a1)
    );
    fs::remove_file(mnt.join("fs/fill")).unwrap();
    oz.ok(&["zpool", "sync", &name]);
    let a3 = get(&oz, "available", &fs_name);
    eprintln!("[slop] after destroys {a1} / {a2}, after rm {a3}");
    assert!(a3 >= a2 + written - TOLERANCE, "rm freed {}", a3 - a2);

    // Writes fit again, the pool is consistent.
    fs::write(mnt.join("fs/again"), noise(8 * MIB_U, 5)).unwrap();
    assert_eq!(fs::read(mnt.join("fs/again")).unwrap(), noise(8 * MIB_U, 5));
    oz_export(&oz, &name);
    openzfs_verdict(&zdb, &dev_dir, &name);
}
