//! (e) Running out of space.
//!
//! ozfs creates an 80 MiB single-device pool and copies 4 MiB random
//! (incompressible) files in, one `ozfs cp` each, until one fails: exit 1
//! with an out-of-space message, no panic.  Then: `ozfs zpool export` works
//! on the full pool; zdb -bcc is clean; a read-only import copies out every
//! file reported copied, intact (a file of the failed cp, if present, is a
//! prefix of its source); after removing some files a read-write import
//! accepts a new smaller copy; zdb is still clean and zfs-fuse imports the
//! pool and sees the same files.

mod common;
mod wcommon;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;
use wcommon::*;

const FILE_MIB: u64 = 4;

#[test]
fn write_enospc() {
    let tag = "enospc";
    let t0 = Instant::now();
    let mut pool = new_devs("ozwfull", Layout::Stripe, 1, 80);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    let local = local_dir(tag);
    let src = local.path().join("src");
    fs::create_dir_all(&src).unwrap();

    // Fill.
    let mut copied: Vec<String> = Vec::new();
    let mut failed: Option<String> = None;
    for i in 0..40u64 {
        let fname = format!("f{i:02}");
        let p = src.join(&fname);
        populate::write_random(&p, FILE_MIB * MIB, 7000 + i).unwrap();
        let out = oz.run(&[
            std::ffi::OsStr::new("cp"),
            p.as_os_str(),
            std::ffi::OsStr::new(&format!("{name}:/")),
        ]);
        if out.success() {
            copied.push(fname);
            continue;
        }
        assert_eq!(
            out.code,
            Some(1),
            "cp into a full pool:\n{}",
            out.describe()
        );
        let msg = out.stderr.to_lowercase();
        assert!(
            msg.contains("out of space") || msg.contains("no space left"),
            "cp into a full pool should say so:\n{}",
            out.describe()
        );
        failed = Some(fname);
        break;
    }
    let failed = failed.unwrap_or_else(|| {
        panic!(
            "{} x {FILE_MIB} MiB copied into an 80 MiB pool without running out of space",
            copied.len()
        )
    });
    eprintln!(
        "[{tag}] {} files ({} MiB) copied, {failed} failed",
        copied.len(),
        copied.len() as u64 * FILE_MIB
    );
    assert!(
        copied.len() as u64 * FILE_MIB >= 40,
        "only {} MiB fit into an 80 MiB pool",
        copied.len() as u64 * FILE_MIB
    );
    // A full pool still exports (the labels and uberblocks have room).
    oz_export(&oz, &name);
    phase(&format!("{tag}: filled"), t0);

    let t1 = Instant::now();
    assert_zdb_clean(&pool, &pool.dev_dir(), "full pool");

    // Everything reported copied is there, intact.
    let check = |oz: &Ozfs, files: &[String], ctx: &str| {
        let out = dest_for(&pool, "full", ctx);
        oz.cp(&format!("{name}:/"), &out);
        for f in files {
            let got = out.join(f);
            let want = src.join(f);
            assert_eq!(
                manifest::sha256_file(&got).ok(),
                manifest::sha256_file(&want).ok(),
                "[{ctx}] content of {f}"
            );
            assert_eq!(
                fs::metadata(&got).unwrap().mtime(),
                fs::metadata(&want).unwrap().mtime(),
                "[{ctx}] mtime of {f}"
            );
        }
        let partial = out.join(&failed);
        if partial.exists() {
            assert!(
                is_prefix_file(&partial, &src.join(&failed)),
                "[{ctx}] the file of the failed cp is not a prefix of its source"
            );
            eprintln!(
                "[{ctx}] partial {failed}: {} bytes",
                fs::metadata(&partial).unwrap().len()
            );
        }
        let n = fs::read_dir(&out).unwrap().count();
        let _ = fs::remove_dir_all(&out);
        n
    };
    let oz_ro = ozfs();
    oz_ro.import_ro(&pool.dev_dir(), &name);
    check(&oz_ro, &copied, "read-only");
    oz_export(&oz_ro, &name);

    // Make room, copy a smaller file.
    let oz2 = ozfs();
    oz_import_rw(&oz2, &pool.dev_dir(), &name);
    let target_partial = format!("{name}:/{failed}");
    if oz2.run(&["rm", &target_partial]).success() {
        eprintln!("[{tag}] removed partial {failed}");
    }
    let removed: Vec<String> = copied.drain(..3).collect();
    for f in &removed {
        oz_rm(&oz2, &format!("{name}:/{f}"), false);
    }
    let small = src.join("after_rm");
    populate::write_random(&small, 2 * MIB + 3, 9999).unwrap();
    oz_cp_in(&oz2, &small, &format!("{name}:/"));
    copied.push("after_rm".to_string());
    let n = check(&oz2, &copied, "after rm");
    assert_eq!(n, copied.len(), "entries in the root after rm + cp");
    oz_export(&oz2, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), "after rm + cp");

    // zfs-fuse sees the same files (no xattr scan: nearly full pool).
    pool.import()
        .unwrap_or_else(|e| panic!("zfs-fuse cannot import the once-full pool: {e}"));
    let got = scan_zf(&pool.root(""), false);
    for f in &copied {
        let e = got
            .get(f)
            .unwrap_or_else(|| panic!("zfs-fuse: {f} missing"));
        assert_eq!(
            e.sha256,
            Some(manifest::sha256_file(&src.join(f)).unwrap()),
            "zfs-fuse: content of {f}"
        );
    }
    assert_eq!(got.len(), copied.len() + 1, "zfs-fuse: entries in the root");
    pool.export().unwrap();
    phase(&format!("{tag}: checks"), t1);
}
