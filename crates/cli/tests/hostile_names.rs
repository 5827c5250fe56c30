//! Names that arrive from disk or from a stream are checked like typed ones:
//! a pool whose labels name it `./../PWNED` must not
//! write outside the state directory; a stream whose BEGIN names `..` must
//! not create anything; `zfs create` refuses `.` and `..` components.
//!
//! The hostile inputs are built here: a real pool made by `ozfs zpool
//! create`, its label configs rewritten (and resealed) with
//! `ozfs_testkit::mutate::Image`; a real `ozfs zfs send` stream with its
//! BEGIN name edited and its END checksum recomputed.

use ozfs_format::NvValue;
use ozfs_testkit::mutate::Image;
use ozfs_testkit::Ozfs;
use std::path::{Path, PathBuf};

const BIN: &str = env!("CARGO_BIN_EXE_ozfs");

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    oz: Ozfs,
}

/// A 64 MiB pool `hn` on `root/dev/d0` with a file system `hn/fs@s`,
/// exported; the runner's state directory is `root/state`.
fn setup() -> Setup {
    let tmp = tempfile::Builder::new()
        .prefix("ozfs-hostile-names-")
        .tempdir_in(ozfs_testkit::test_tmp_root())
        .expect("tempdir");
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("dev")).expect("mkdir");
    std::fs::create_dir_all(root.join("state")).expect("mkdir");
    let f = std::fs::File::create(root.join("dev/d0")).expect("dev");
    f.set_len(64 << 20).expect("size");
    drop(f);
    let oz = Ozfs::new(BIN).with_env("OZFS_STATE_DIR", root.join("state"));
    let dev = root.join("dev/d0");
    oz.ok(&[
        "zpool",
        "create",
        "-m",
        "none",
        "hn",
        dev.to_str().expect("utf-8"),
    ]);
    oz.ok(&["zfs", "create", "hn/fs"]);
    let src = root.join("file");
    std::fs::write(&src, b"hello\n").expect("write");
    oz.ok(&["cp", src.to_str().expect("utf-8"), "hn/fs:/file"]);
    oz.ok(&["zfs", "snapshot", "hn/fs@s"]);
    Setup {
        _tmp: tmp,
        root,
        oz,
    }
}

fn guid_of(oz: &Ozfs, dir: &Path) -> String {
    let out = oz.ok(&["zpool", "import", "-d", dir.to_str().expect("utf-8")]);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("id: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no pool id in:\n{out}"))
}

#[test]
fn pool_named_by_its_labels_cannot_leave_the_state_directory() {
    let s = setup();
    s.oz.ok(&["zpool", "export", "hn"]);
    let mut img = Image::open(&s.root.join("dev/d0")).expect("image");
    img.mutate_config(|nv| nv.set("name", NvValue::String("./../PWNED".into())))
        .expect("rename in the labels");
    // The file a path built from that name would replace.
    let canary = s.root.join("PWNED.json");
    std::fs::write(&canary, b"canary").expect("canary");
    let dev_dir = s.root.join("dev");
    let listing =
        s.oz.ok(&["zpool", "import", "-d", dev_dir.to_str().expect("utf-8")]);
    assert!(
        listing.contains("invalid name"),
        "the listing should flag the name:\n{listing}"
    );
    let guid = guid_of(&s.oz, &dev_dir);
    for extra in [&[][..], &["-o", "readonly=on"][..], &["-N"][..]] {
        let mut args = vec!["zpool", "import", "-d", dev_dir.to_str().expect("utf-8")];
        args.extend_from_slice(extra);
        args.push(&guid);
        let out = s.oz.fails(&args);
        assert!(
            out.stderr.contains("./../PWNED") && out.stderr.contains("not a valid pool name"),
            "the refusal should name the bad name:\n{}",
            out.describe()
        );
    }
    assert_eq!(std::fs::read(&canary).expect("canary"), b"canary");
    let strays: Vec<_> = std::fs::read_dir(&s.root)
        .expect("ls")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !["dev", "state", "file", "PWNED.json"].contains(&n.as_str()))
        .collect();
    assert!(strays.is_empty(), "files outside the state dir: {strays:?}");
    // Under a new name it imports and reads.
    let args = [
        "zpool",
        "import",
        "-N",
        "-d",
        dev_dir.to_str().expect("utf-8"),
        &guid,
        "renamed",
    ];
    s.oz.ok(&args);
    let names = s.oz.dataset_names();
    assert!(names.iter().any(|n| n == "renamed/fs@s"), "{names:?}");
    // A new name must be valid too.
    s.oz.ok(&["zpool", "export", "renamed"]);
    let bad = [
        "zpool",
        "import",
        "-d",
        dev_dir.to_str().expect("utf-8"),
        &guid,
        "../x",
    ];
    s.oz.fails(&bad);
    assert!(!s.root.join("x.json").exists());
}

#[test]
fn stream_names_are_checked_before_use() {
    let s = setup();
    let stream = s.root.join("full");
    let out = s.oz.sh(&format!(
        "\"$OZFS\" zfs send hn/fs@s > {}",
        stream.display()
    ));
    assert!(out.success(), "{}", out.describe());
    let good = std::fs::read(&stream).expect("stream");
    let before = s.oz.dataset_names();
    let hostile: [&[u8]; 6] = [
        b"hn/../x@s",
        b"hn/fs@a@b",
        b"hn/fs@..",
        b"hn/fs/@s",
        b"hn/\x01@s",
        b"hn/fs@",
    ];
    for name in hostile {
        let mut st = good.clone();
        st[56..312].fill(0);
        st[56..56 + name.len()].copy_from_slice(name);
        assert!(ozfs_testkit::mutate::fix_stream_end(&mut st));
        let f = s.root.join("hostile");
        std::fs::write(&f, &st).expect("write");
        let out =
            s.oz.sh(&format!("\"$OZFS\" zfs receive hn/new < {}", f.display()));
        assert!(
            !out.success() && out.code.is_some(),
            "{:?} was received:\n{}",
            String::from_utf8_lossy(name),
            out.describe()
        );
        assert!(
            out.stderr.contains("not a valid snapshot name"),
            "{:?}: the refusal should say why:\n{}",
            String::from_utf8_lossy(name),
            out.describe()
        );
        assert_eq!(
            s.oz.dataset_names(),
            before,
            "a refused stream changed the pool"
        );
    }
    // The undamaged stream, fixed the same way, is received: the edit is
    // what is refused, not the fix-up.
    let mut st = good.clone();
    assert!(ozfs_testkit::mutate::fix_stream_end(&mut st));
    std::fs::write(s.root.join("same"), &st).expect("write");
    let out = s.oz.sh(&format!(
        "\"$OZFS\" zfs receive hn/new < {}",
        s.root.join("same").display()
    ));
    assert!(out.success(), "{}", out.describe());
    // A received snapshot name from the command line is checked too.
    let out = s.oz.sh(&format!(
        "\"$OZFS\" zfs receive 'hn/other@..' < {}",
        s.root.join("same").display()
    ));
    assert!(!out.success(), "{}", out.describe());
}

#[test]
fn dot_components_are_refused() {
    let s = setup();
    for bad in ["hn/..", "hn/.", "hn/fs/../x", "hn/a/", "hn//a"] {
        let out = s.oz.fails(&["zfs", "create", bad]);
        assert!(
            out.code == Some(1) || out.code == Some(2),
            "{}",
            out.describe()
        );
    }
    for bad in ["hn/fs@..", "hn/fs@.", "hn/fs@a/b"] {
        s.oz.fails(&["zfs", "snapshot", bad]);
    }
    let names = s.oz.dataset_names();
    assert_eq!(names, ["hn", "hn/fs", "hn/fs@s"], "{names:?}");
}
