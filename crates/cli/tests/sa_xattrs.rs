//! Extended attributes kept as system attributes (`xattr=sa`, OpenZFS
//! 2.3's default `on`): the same xattr calls go to an ozfs file system
//! with `xattr=on` and to one with `xattr=dir` through the daemon's
//! mounts, and to a model (a map per file: the host's own file system
//! takes no 40 000-byte value); both must show the model's names and
//! values, before and after the pool is exported and imported. OpenZFS's own `zdb` then judges the pool clean and shows,
//! for the `xattr=on` file system, the values ozfs put in the SA (small
//! ones in the bonus, larger ones in spill blocks) and for the `xattr=dir`
//! one none; values past OpenZFS's SA limits (32 KiB each, 64 KiB in all)
//! are in xattr directories in both.

mod common;
mod wcommon;
use ozfs_testkit::manifest::read_xattrs;
use ozfs_testkit::populate::{remove_xattr, set_xattr};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use wcommon::*;

/// Bytes `len` long, printable (zdb shows printable values as they are).
fn value(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i + seed as usize) % 26) as u8)
        .collect()
}

/// What each file's xattrs must be.
type Model = BTreeMap<String, BTreeMap<OsString, Vec<u8>>>;

/// The same xattr calls, in `root` and in `model`.
fn apply(root: &Path, model: &mut Model) {
    let p = |n: &str| root.join(n);
    let mut set = |f: &str, n: &str, v: &[u8]| {
        set_xattr(&p(f), n, v).unwrap_or_else(|e| panic!("setxattr {f} {n}: {e}"));
        model
            .entry(f.to_string())
            .or_default()
            .insert(n.into(), v.to_vec());
    };
    for f in ["small", "spill", "big", "many", "gone", "moved"] {
        fs::write(p(f), f.as_bytes()).unwrap();
    }
    fs::create_dir(p("dir")).unwrap();
    set("small", "user.a", b"hello");
    set("small", "user.a", b"replaced value");
    set("small", "user.b", b"");
    set("spill", "user.mid", &value(1, 1500));
    set("spill", "user.n", &value(2, 200));
    set("big", "user.big", &value(3, 40_000));
    set("big", "user.s", b"x");
    for i in 0..40u8 {
        set("many", &format!("user.m{i:02}"), &value(i, 2000));
    }
    set("gone", "user.a", b"1");
    set("gone", "user.b", b"2");
    // A value that moves from the SA to the directory and back.
    set("moved", "user.v", b"short");
    set("moved", "user.v", &value(4, 33_000));
    set("moved", "user.v", b"short again");
    set("dir", "user.d", b"on a directory");
    for n in ["user.a", "user.b"] {
        remove_xattr(&p("gone"), n).unwrap();
        model
            .entry("gone".into())
            .or_default()
            .remove(&OsString::from(n));
    }
}

/// `zdb -dddd`'s SA xattr lines of object `obj` of `ds`: (count line,
/// `name = value` lines).
fn zdb_sa_xattrs(zdb: &Path, devs: &Path, ds: &str, obj: u64) -> (String, Vec<String>) {
    let out = std::process::Command::new(zdb)
        .args(["-e", "-p"])
        .arg(devs)
        .args(["-dddd", ds, &obj.to_string()])
        .output()
        .expect("OpenZFS zdb");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "zdb -dddd {ds} {obj}:\n{text}");
    let mut head = String::new();
    let mut pairs = Vec::new();
    for l in text.lines() {
        if l.starts_with("\tSA xattrs:") {
            head = l.trim().to_string();
        } else if l.starts_with("\t\t") && l.contains(" = ") && !head.is_empty() {
            pairs.push(l.trim().to_string());
        }
    }
    (head, pairs)
}

#[test]
fn sa_xattrs_as_openzfs_keeps_them() {
    let pool = new_devs("ozsaxattr", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir("saxattr");
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.join("sa"), mnt.join("dir"), mnt.clone()],
    };
    oz_create_at(&oz, &pool, &mnt, None, &["-o", "version=5000"]);
    oz.ok(&["zfs", "create", &format!("{name}/sa")]);
    oz.ok(&["zfs", "create", "-o", "xattr=dir", &format!("{name}/dir")]);
    let shown = |ds: &str| oz.ok(&["zfs", "get", "-H", "-o", "value,source", "xattr", ds]);
    assert_eq!(shown(&format!("{name}/sa")).trim(), "on\tdefault");
    assert_eq!(shown(&format!("{name}/dir")).trim(), "dir\tlocal");
    let import = || {
        oz.ok(&[
            "zpool",
            "import",
            "-d",
            &pool.dev_dir().to_string_lossy(),
            &name,
        ]);
        assert!(is_mounted(&mnt.join("sa")) && is_mounted(&mnt.join("dir")));
    };
    oz_export(&oz, &name);
    import();
    let mut model = Model::new();
    for fs_name in ["sa", "dir"] {
        model.clear();
        apply(&mnt.join(fs_name), &mut model);
    }
    let check = |when: &str| {
        for fs_name in ["sa", "dir"] {
            for (f, want) in &model {
                let got = read_xattrs(&mnt.join(fs_name).join(f)).unwrap();
                assert!(
                    &got == want,
                    "xattr={fs_name} {when}: {f} has {:?}, not {:?}",
                    got.keys().collect::<Vec<_>>(),
                    want.keys().collect::<Vec<_>>()
                );
            }
        }
    };
    check("through the mount");
    let objs: Vec<(String, u64)> = ["small", "spill", "big", "many", "gone", "moved", "dir"]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                fs::metadata(mnt.join("sa").join(f)).unwrap().ino(),
            )
        })
        .collect();
    let dir_small = fs::metadata(mnt.join("dir/small")).unwrap().ino();
    oz_export(&oz, &name);
    import();
    check("after export and import");
    oz_export(&oz, &name);

    let Some(zdb) = oracle_zdb() else { return };
    let devs = pool.dev_dir();
    openzfs_verdict(&zdb, &devs, &name);
    let sa = format!("{name}/sa");
    let get = |f: &str| {
        let obj = objs.iter().find(|(n, _)| n == f).map(|(_, o)| *o).unwrap();
        zdb_sa_xattrs(&zdb, &devs, &sa, obj)
    };
    let (head, pairs) = get("small");
    assert!(head.ends_with(", 2 entries"), "{head}");
    assert_eq!(pairs, ["user.a = replaced value", "user.b ="]);
    let (head, pairs) = get("spill");
    assert!(head.ends_with(", 2 entries"), "{head}");
    let mid = String::from_utf8(value(1, 1500)).unwrap();
    assert_eq!(pairs[0], format!("user.mid = {mid}"));
    // 40 000 bytes are past the 32 KiB a value may take in the SA.
    let (head, pairs) = get("big");
    assert!(head.ends_with(", 1 entries"), "{head}");
    assert_eq!(pairs, ["user.s = x"]);
    // The SA takes values while its packed list stays within 65535 bytes
    // (one system attribute's longest): 20 + 2028 bytes an entry, 32 of
    // them; the rest are in the xattr directory.
    let (head, _) = get("many");
    assert!(head.ends_with(", 32 entries"), "{head}");
    let (head, pairs) = get("gone");
    assert!(head.ends_with(", 0 entries"), "{head}");
    assert!(pairs.is_empty());
    let (_, pairs) = get("moved");
    assert_eq!(pairs, ["user.v = short again"]);
    let (_, pairs) = get("dir");
    assert_eq!(pairs, ["user.d = on a directory"]);
    let (head, _) = zdb_sa_xattrs(&zdb, &devs, &format!("{name}/dir"), dir_small);
    assert!(head.is_empty(), "xattr=dir kept SA xattrs: {head}");
}
