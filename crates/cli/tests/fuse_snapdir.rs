//! `.zfs/snapshot` in an `ozfs mount`: ozfs creates a pool and a file
//! system, copies a tree in, takes @a, changes files, takes @b, changes
//! more; then a foreground `ozfs mount` shows `.zfs/snapshot/{a,b}` with
//! exactly what `ozfs cp -r POOL/DS@snap:/` copies out, refuses every
//! change under `.zfs` with EROFS, hides `.zfs` from the root listing by
//! default (it can still be looked up) and lists it with `snapdir=visible`.

mod common;
mod mcommon;
mod wcommon;
use mcommon::Mounted;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;
use wcommon::*;

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn scan(p: &Path) -> Manifest {
    Manifest::scan_with(p, &ScanOptions::default())
        .unwrap_or_else(|e| panic!("scan {}: {e}", p.display()))
}

/// Every kind of change under `dir` (a directory under `.zfs`) fails with EROFS.
fn assert_readonly(dir: &Path, file: &Path) {
    let what = dir.display();
    assert_eq!(
        errno_of(fs::write(dir.join("zz-new"), b"x")),
        libc::EROFS,
        "create in {what}"
    );
    assert_eq!(
        errno_of(fs::create_dir(dir.join("zz-newdir"))),
        libc::EROFS,
        "mkdir in {what}"
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("x", dir.join("zz-sl"))),
        libc::EROFS,
        "symlink in {what}"
    );
    assert_eq!(
        errno_of(fs::set_permissions(dir, fs::Permissions::from_mode(0o777))),
        libc::EROFS,
        "chmod {what}"
    );
    assert_eq!(
        errno_of(OpenOptions::new().write(true).open(file)),
        libc::EROFS,
        "open for writing {}",
        file.display()
    );
    assert_eq!(
        errno_of(fs::remove_file(file)),
        libc::EROFS,
        "unlink {}",
        file.display()
    );
    assert_eq!(
        errno_of(fs::rename(file, dir.join("zz-renamed"))),
        libc::EROFS,
        "rename {}",
        file.display()
    );
    assert_eq!(
        errno_of(fs::hard_link(file, dir.join("zz-hl"))),
        libc::EROFS,
        "link {}",
        file.display()
    );
}

#[test]
fn fuse_snapdir() {
    let tag = "snapdir";
    let t0 = Instant::now();
    let pool = new_devs("ozsnapd", Layout::Raidz1, 3, 128);
    let oz = ozfs();
    oz_create(&oz, &pool, None, &[]);
    oz_create_ds(&oz, &pool, "fs", &[]);
    let ds = pool.ds("fs");
    let work = local_dir(tag);

    // @a: a populated tree.
    let (src, _) = source_tree(work.path(), "src", &Profile::small(31));
    oz_cp_in(&oz, &src, &format!("{ds}:/tree"));
    fs::write(work.path().join("note"), b"version a").unwrap();
    oz_cp_in(&oz, &work.path().join("note"), &format!("{ds}:/note"));
    oz.ok(&["zfs", "snapshot", &format!("{ds}@a")]);

    // @b: changed content.
    oz_rm(&oz, &format!("{ds}:/note"), false);
    fs::write(work.path().join("note"), b"version b, longer").unwrap();
    oz_cp_in(&oz, &work.path().join("note"), &format!("{ds}:/note"));
    fs::write(work.path().join("extra"), b"only from b on").unwrap();
    oz_cp_in(&oz, &work.path().join("extra"), &format!("{ds}:/extra"));
    oz.ok(&["zfs", "snapshot", &format!("{ds}@b")]);

    // Head: changed again.
    oz_rm(&oz, &format!("{ds}:/note"), false);
    oz_rm(&oz, &format!("{ds}:/tree"), true);

    // What ozfs cp copies out of each snapshot.
    let want_a = {
        let d = work.path().join("out-a");
        oz.cp(&format!("{ds}@a:/"), &d);
        scan(&d)
    };
    let want_b = {
        let d = work.path().join("out-b");
        oz.cp(&format!("{ds}@b:/"), &d);
        scan(&d)
    };
    phase(&format!("{tag}: setup"), t0);

    let mnt = work.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m1 = Mounted::start(&oz, &ds, &mnt, &work.path().join("mount1.log"), &[]);
    let mnt = m1.mnt.clone();
    let zfs = mnt.join(".zfs");
    let snapdir = zfs.join("snapshot");

    // Hidden by default, but there.
    assert!(
        !names(&mnt).contains(&".zfs".to_string()),
        "ls -a shows .zfs with snapdir=hidden: {:?}",
        names(&mnt)
    );
    assert_eq!(names(&mnt), vec!["extra".to_string()]);
    for d in [&zfs, &snapdir] {
        let md = fs::metadata(d).unwrap_or_else(|e| panic!("stat {}: {e}", d.display()));
        assert!(md.is_dir(), "{} is a directory", d.display());
        assert_eq!(md.mode() & 0o7777, 0o555, "{} mode", d.display());
        assert_eq!((md.uid(), md.gid()), (0, 0), "{} owner", d.display());
    }
    assert_eq!(names(&zfs), vec!["snapshot".to_string()]);
    assert_eq!(names(&snapdir), vec!["a".to_string(), "b".to_string()]);
    assert_eq!(
        errno_of(fs::metadata(snapdir.join("nope"))),
        libc::ENOENT,
        "stat of a missing snapshot"
    );

    // Contents equal the copy-outs.
    want_a.assert_same(&scan(&snapdir.join("a")), ".zfs/snapshot/a vs ozfs cp @a");
    want_b.assert_same(&scan(&snapdir.join("b")), ".zfs/snapshot/b vs ozfs cp @b");
    assert_eq!(fs::read(snapdir.join("a/note")).unwrap(), b"version a");
    assert_eq!(
        fs::read(snapdir.join("b/note")).unwrap(),
        b"version b, longer"
    );
    assert_eq!(
        errno_of(fs::metadata(snapdir.join("a/extra"))),
        libc::ENOENT
    );
    // `..` of a snapshot root is .zfs/snapshot.
    let up = fs::metadata(snapdir.join("a/..")).unwrap();
    assert_eq!(up.ino(), fs::metadata(&snapdir).unwrap().ino());
    // The live file system is unaffected.
    assert!(!mnt.join("note").exists());
    fs::write(mnt.join("live"), b"live").unwrap();
    assert_eq!(fs::read(mnt.join("live")).unwrap(), b"live");
    phase(&format!("{tag}: listing and contents"), t0);

    // Read-only everywhere under .zfs.
    assert_readonly(&snapdir.join("a"), &snapdir.join("a/note"));
    assert_readonly(&snapdir.join("b/tree"), &snapdir.join("b/note"));
    assert_eq!(
        errno_of(fs::create_dir(snapdir.join("c"))),
        libc::EROFS,
        "mkdir .zfs/snapshot/c"
    );
    assert_eq!(
        errno_of(fs::remove_dir(snapdir.join("a"))),
        libc::EROFS,
        "rmdir .zfs/snapshot/a"
    );
    assert_eq!(
        errno_of(fs::create_dir(zfs.join("x"))),
        libc::EROFS,
        "mkdir .zfs/x"
    );
    assert_eq!(
        errno_of(fs::set_permissions(
            &snapdir,
            fs::Permissions::from_mode(0o777)
        )),
        libc::EROFS,
        "chmod .zfs/snapshot"
    );
    assert_eq!(errno_of(fs::create_dir(&zfs)), libc::EEXIST, "mkdir .zfs");
    assert_eq!(errno_of(fs::remove_dir(&zfs)), libc::EROFS, "rmdir .zfs");
    assert_eq!(
        fs::read(snapdir.join("a/note")).unwrap(),
        b"version a",
        "snapshot unchanged"
    );
    m1.unmount();
    phase(&format!("{tag}: read-only"), t0);

    // snapdir=visible: listed in the root.
    oz.ok(&["zfs", "set", "snapdir=visible", &ds]);
    let m2 = Mounted::start(&oz, &ds, &mnt, &work.path().join("mount2.log"), &[]);
    assert_eq!(
        names(&mnt),
        vec![".zfs".to_string(), "extra".to_string(), "live".to_string()]
    );
    assert_eq!(names(&snapdir), vec!["a".to_string(), "b".to_string()]);
    want_a.assert_same(&scan(&snapdir.join("a")), "after remount");
    m2.unmount();
    phase(&format!("{tag}: snapdir=visible"), t0);
}
