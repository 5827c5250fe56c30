//! `ozfs mount` of file systems ozfs cannot write: pools the real OpenZFS
//! 2.3.2 made (../shared/corpus/openzfs-2.3), imported read-only and
//! served read-only through FUSE straight from the read path.
//!
//! Every file system and snapshot of a pool is mounted (`-o ro`; snapshots
//! mount read-only anyway), the MOUNT is scanned like any program would
//! (stat, readdir, readlink, read, listxattr/getxattr) and compared with
//! what OpenZFS's own mount showed (`manifest.txt`): kinds, modes, owners,
//! sizes, mtimes, sha256 of every file, symlink targets and `user.*`
//! xattrs. Covered: `c1-single` (xattrs, a 3000-entry fat-ZAP directory,
//! a fifo, a device node, a sparse file, hard links), `c2-mirror` (SA
//! xattrs and spill blocks), `c7-crypt` (encrypted file systems with their
//! keys given by `-L`, refused without naming the encryption root) and
//! `c13-names-props` (a 600-byte file name: OpenZFS's `longname` feature;
//! Unicode names in a `casesensitivity=mixed` directory; a device node's
//! major and minor).
//!
//! Also: every change through a read-only mount fails with EROFS, and a
//! read-write mount of an OpenZFS pool is refused, naming `-o ro`.

mod ccommon;
mod common;
mod mcommon;
mod wcommon;
use ccommon::*;
use common::*;
use mcommon::Mounted;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A corpus pool unpacked and imported read-only under `work`.
struct Imported {
    text: String,
    src: PathBuf,
}

fn import(oz: &Ozfs, work: &Path, pool: &str) -> Imported {
    let src = corpus_dir().join(pool);
    let text = fs::read_to_string(src.join("manifest.txt")).expect("manifest.txt");
    let devs = work.join(pool);
    unpack_corpus(&src, &devs);
    import_readonly(oz, &devs, pool);
    Imported { text, src }
}

/// A fresh empty directory under `work` to mount `ds` on.
fn mount_dir(work: &Path, ds: &str) -> PathBuf {
    let d = work.join(format!("mnt-{}", ds.replace(['/', '@'], "_")));
    fs::create_dir_all(&d).unwrap();
    d
}

/// Mounts `ds` read-only (with `extra` arguments), scans the mount,
/// compares it with OpenZFS's manifest, runs `check` on the mount, then
/// unmounts (the server must exit 0 having printed nothing). The
/// differences, if any.
fn mount_and_compare(
    oz: &Ozfs,
    work: &Path,
    text: &str,
    ds: &str,
    extra: &[&str],
    check: &dyn Fn(&Path),
) -> Option<String> {
    let dir = mount_dir(work, ds);
    let log = work.join(format!("mount-{}.log", ds.replace(['/', '@'], "_")));
    let mut args = vec!["-o", "ro"];
    args.extend_from_slice(extra);
    let m = Mounted::start(oz, ds, &dir, &log, &args);
    let got = ours(&Manifest::scan(&m.mnt).expect("scan the mount"));
    check(&m.mnt);
    m.unmount();
    differences(&theirs(text, ds), &got).map(|d| format!("{ds}:\n{d}"))
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Every kind of change through the mount on `m` fails with EROFS.
fn assert_read_only(m: &Path, file: &Path, dir: &Path) {
    use std::fs::OpenOptions;
    let erofs = libc::EROFS;
    assert_eq!(
        errno_of(fs::write(m.join("new-file"), b"x")),
        erofs,
        "create"
    );
    assert_eq!(
        errno_of(OpenOptions::new().write(true).open(file)),
        erofs,
        "open for writing"
    );
    assert_eq!(
        errno_of(OpenOptions::new().append(true).open(file)),
        erofs,
        "open for appending"
    );
    assert_eq!(errno_of(fs::create_dir(m.join("new-dir"))), erofs, "mkdir");
    assert_eq!(errno_of(fs::remove_file(file)), erofs, "unlink");
    assert_eq!(errno_of(fs::remove_dir(dir)), erofs, "rmdir");
    assert_eq!(
        errno_of(fs::rename(file, m.join("renamed"))),
        erofs,
        "rename"
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("t", m.join("new-link"))),
        erofs,
        "symlink"
    );
    assert_eq!(
        errno_of(fs::hard_link(file, m.join("new-hard"))),
        erofs,
        "link"
    );
    let mut perm = fs::metadata(file).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
    assert_eq!(errno_of(fs::set_permissions(file, perm)), erofs, "chmod");
    let c = std::ffi::CString::new(file.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C strings and buffer.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"user.new".as_ptr(), c"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, -1, "setxattr");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(erofs));
    // SAFETY: as above.
    let r = unsafe { libc::truncate(c.as_ptr(), 0) };
    assert_eq!(r, -1, "truncate");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(erofs));
}

/// `c1-single` (fat ZAP, fifo, device node, sparse file, xattrs, hard
/// links, two snapshots, a child) and `c2-mirror` (SA xattrs, spill
/// blocks): every file system and snapshot mounted read-only shows
/// exactly what OpenZFS's mount showed. A write through a mount fails with
/// EROFS; a read-write mount is refused, naming `-o ro`.
#[test]
fn openzfs_file_systems_mount_read_only_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-mount-");
    let work = work.path();
    let mut failed = Vec::new();
    for pool in ["c1-single", "c2-mirror"] {
        let imp = import(&oz, work, pool);
        let names = datasets(&imp.text);
        assert!(names.len() >= 2, "{pool}: trees in manifest.txt: {names:?}");
        for ds in &names {
            let want = theirs(&imp.text, ds);
            let check = |m: &Path| {
                if ds != "c1-single" {
                    return;
                }
                // What the comparison must have covered.
                for k in [Kind::Fifo, Kind::CharDev, Kind::Symlink] {
                    assert!(
                        want.values().any(|w| w.kind == Some(k)),
                        "{ds}: no {k:?} in the manifest"
                    );
                }
                assert!(
                    want.values().any(|w| !w.xattrs.is_empty()),
                    "{ds}: no xattrs in the manifest"
                );
                let (file, _) = want
                    .iter()
                    .find(|(_, w)| w.kind == Some(Kind::File) && w.size > Some(0))
                    .expect("a file");
                let (dir, _) = want
                    .iter()
                    .find(|(_, w)| w.kind == Some(Kind::Dir))
                    .expect("a directory");
                assert_read_only(m, &m.join(file), &m.join(dir));
                // A fat-ZAP directory: thousands of entries.
                let big = want
                    .keys()
                    .filter_map(|p| p.parent())
                    .fold(std::collections::BTreeMap::new(), |mut n, p| {
                        *n.entry(p.to_path_buf()).or_insert(0usize) += 1;
                        n
                    })
                    .into_iter()
                    .max_by_key(|x| x.1)
                    .expect("a directory with entries");
                assert!(big.1 >= 2000, "{ds}: largest directory {big:?}");
                assert_eq!(
                    fs::read_dir(m.join(&big.0)).unwrap().count(),
                    big.1,
                    "{ds}: entries of {}",
                    big.0.display()
                );
            };
            failed.extend(mount_and_compare(&oz, work, &imp.text, ds, &[], &check));
        }
        // A read-write mount of a pool ozfs cannot write: refused.
        let dir = mount_dir(work, &format!("{pool}-rw"));
        let r = oz.run(&["mount", pool, &dir.to_string_lossy()]);
        assert_eq!(r.code, Some(1), "{}", r.describe());
        assert!(
            r.stderr.contains("read-write") && r.stderr.contains("-o ro"),
            "{}",
            r.describe()
        );
        assert!(!wcommon::is_mounted(&dir));
        oz.ok(&["zpool", "export", pool]);
    }
    assert!(failed.is_empty(), "mounts differ:\n{}", failed.join("\n"));
}

/// `c7-crypt`: with the key given (`-L file://…`), every encrypted file
/// system and snapshot mounts and reads exactly as OpenZFS showed it;
/// without it the mount is refused, naming the encryption root, before
/// anything is mounted.
#[test]
fn encrypted_file_systems_mount_with_their_keys() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-mount-crypt-");
    let work = work.path();
    let imp = import(&oz, work, "c7-crypt");
    let keys = imp.src.join("keys");
    let key_of = |ds: &str| crypt_key_location(&keys, ds);
    let mut failed = Vec::new();
    let names = datasets(&imp.text);
    assert!(names.iter().any(|n| n == "c7-crypt/gcm"), "{names:?}");
    for ds in &names {
        let key = key_of(ds);
        let extra: Vec<&str> = match &key {
            Some(k) => vec!["-L", k],
            None => Vec::new(),
        };
        failed.extend(mount_and_compare(&oz, work, &imp.text, ds, &extra, &|_| {}));
    }
    // No key: refused, naming the encryption root; nothing mounted.
    for ds in ["c7-crypt/gcm", "c7-crypt/gcm@s1"] {
        let dir = mount_dir(work, &format!("{ds}-nokey"));
        let r = oz.run(&["mount", "-o", "ro", ds, &dir.to_string_lossy()]);
        assert_eq!(r.code, Some(1), "{}", r.describe());
        assert!(
            r.stderr.contains("encryption root 'c7-crypt/gcm'"),
            "{}",
            r.describe()
        );
        assert!(!wcommon::is_mounted(&dir));
    }
    oz.ok(&["zpool", "export", "c7-crypt"]);
    assert!(failed.is_empty(), "mounts differ:\n{}", failed.join("\n"));
}

/// `c13-names-props`: a file name of 600 bytes (OpenZFS's `longname`
/// feature; Linux FUSE passes names up to 1024 bytes) is listed, looked
/// up and read through the mount; the Unicode name of a
/// `casesensitivity=mixed` directory is found by lookup; the character
/// device made with `mknod c 1 3` shows major 1, minor 3.
#[test]
fn long_names_mount_and_read() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-mount-names-");
    let work = work.path();
    let imp = import(&oz, work, "c13-names-props");
    let ds = "c13-names-props/p";
    let want = theirs(&imp.text, ds);
    let (long, long_want) = want
        .iter()
        .find(|(p, _)| p.as_os_str().len() > 255)
        .expect("a name longer than 255 bytes in the manifest");
    assert!(long.as_os_str().len() <= 1024, "{}", long.display());
    let check = |m: &Path| {
        // Listed by readdir, looked up, read.
        let listed: Vec<_> = fs::read_dir(m)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            listed.iter().any(|n| n == long.as_os_str()),
            "the long name is not listed"
        );
        assert_eq!(
            ozfs_testkit::manifest::sha256_file(&m.join(long)).ok(),
            long_want.sha256,
            "sha256 of the long-named file"
        );
        let md = fs::symlink_metadata(m.join("chardev")).unwrap();
        assert!(md.file_type().is_char_device());
        assert_eq!(
            (libc::major(md.rdev()), libc::minor(md.rdev())),
            (1, 3),
            "device number"
        );
        let uni = want
            .keys()
            .find(|p| !p.as_os_str().is_ascii())
            .expect("a Unicode name");
        assert!(
            fs::symlink_metadata(m.join(uni)).is_ok(),
            "{}",
            uni.display()
        );
        assert_eq!(
            errno_of(fs::symlink_metadata(m.join("nonexistent-é"))),
            libc::ENOENT
        );
    };
    let mut failed = Vec::new();
    for name in datasets(&imp.text) {
        let c: &dyn Fn(&Path) = if name == ds { &check } else { &|_| {} };
        failed.extend(mount_and_compare(&oz, work, &imp.text, &name, &[], c));
    }
    oz.ok(&["zpool", "export", "c13-names-props"]);
    assert!(failed.is_empty(), "mounts differ:\n{}", failed.join("\n"));
}
