//! Every checksum OpenZFS has, read through: the corpus pool
//! `c6-checksums` (../shared/corpus/openzfs-2.3, made by the real OpenZFS
//! 2.3.2 kernel module) has one file system per checksum — fletcher2,
//! fletcher4, sha256, sha512, skein, edonr, blake3 — each with the same
//! 400,000-byte file and a small one. Imported read-only by ozfs, every
//! file system (and the pool's root file system, which holds their mount
//! points) is copied out with `ozfs cp -r` and compared with what
//! OpenZFS's own mount showed (`manifest.txt`): kinds, modes, owners,
//! sizes, mtimes, sha256 of every file, symlink targets and `user.*`
//! xattrs. Link counts and directory sizes are what ZFS reports, which a
//! copy does not keep, so they are not compared.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const POOL: &str = "c6-checksums";

/// The file systems, by the checksum each one uses for its blocks.
const DATASETS: &[&str] = &[
    "c6-checksums",
    "c6-checksums/fletcher2",
    "c6-checksums/fletcher4",
    "c6-checksums/sha256",
    "c6-checksums/sha512",
    "c6-checksums/skein",
    "c6-checksums/edonr",
    "c6-checksums/blake3",
];

/// The corpus: `OZFS_CORPUS` when set (a checkout elsewhere, e.g. a git
/// worktree), else `../shared/corpus/openzfs-2.3` beside the checkout.
fn corpus() -> PathBuf {
    let c = std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| ozfs_testkit::daemon::repo_root().join("../shared/corpus/openzfs-2.3"));
    assert!(
        c.is_dir(),
        "{}: the OpenZFS corpus is missing (../shared beside the checkout)",
        c.display()
    );
    c
}

/// One line of a `== tree` section, with what the other sections add.
#[derive(Debug, Default, Clone, PartialEq)]
struct Want {
    kind: Option<Kind>,
    mode: u32,
    uid: u32,
    gid: u32,
    /// Regular files and symlinks (ZFS's directory sizes are not kept by a copy).
    size: Option<u64>,
    mtime: (i64, i64),
    sha256: Option<String>,
    target: Option<OsString>,
    xattrs: BTreeMap<OsString, Vec<u8>>,
}

fn kind_of(c: &str) -> Kind {
    match c {
        "f" => Kind::File,
        "d" => Kind::Dir,
        "l" => Kind::Symlink,
        "p" => Kind::Fifo,
        "c" => Kind::CharDev,
        "b" => Kind::BlockDev,
        "s" => Kind::Socket,
        _ => panic!("manifest: unknown type {c}"),
    }
}

/// `SECONDS.FRACTION` (any number of fraction digits) as (s, ns).
fn time_of(s: &str) -> (i64, i64) {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut ns = String::from(frac);
    ns.truncate(9);
    while ns.len() < 9 {
        ns.push('0');
    }
    (sec.parse().unwrap(), ns.parse().unwrap())
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// A manifest path (`./a/b`) relative to the tree's root.
fn rel(p: &str) -> PathBuf {
    PathBuf::from(p.strip_prefix("./").unwrap_or(p))
}

/// The entries of `label` in the corpus `manifest.txt` (the root itself is
/// not listed there).
fn theirs(text: &str, label: &str) -> BTreeMap<PathBuf, Want> {
    let section = |kind: &str| -> Vec<&str> {
        let head = format!("== {kind} {label}");
        text.lines()
            .skip_while(|l| *l != head)
            .skip(1)
            .take_while(|l| !l.starts_with("== "))
            .collect()
    };
    let mut out = BTreeMap::new();
    for l in section("tree") {
        let f: Vec<&str> = l.splitn(7, ' ').collect();
        assert_eq!(f.len(), 7, "{label}: tree line {l:?}");
        let kind = kind_of(f[0]);
        let (uid, gid) = f[2].split_once(':').unwrap();
        let (path, target) = match (kind, f[6].split_once(" -> ")) {
            (Kind::Symlink, Some((p, t))) => (p, Some(OsString::from(t))),
            _ => (f[6], None),
        };
        assert!(
            kind == Kind::Dir || f[4] == "1",
            "{label}: {path}: hard links are not compared here"
        );
        out.insert(
            rel(path),
            Want {
                kind: Some(kind),
                mode: u32::from_str_radix(f[1], 8).unwrap(),
                uid: uid.parse().unwrap(),
                gid: gid.parse().unwrap(),
                size: (kind != Kind::Dir).then(|| f[3].parse().unwrap()),
                mtime: time_of(f[5]),
                target,
                ..Default::default()
            },
        );
    }
    for l in section("sha256") {
        let (sum, path) = l.split_once("  ").unwrap();
        out.get_mut(&rel(path))
            .unwrap_or_else(|| panic!("{label}: sha256 of unlisted {path}"))
            .sha256 = Some(sum.to_string());
    }
    for l in section("xattr") {
        let f: Vec<&str> = l.splitn(3, ' ').collect();
        assert_eq!(f.len(), 3, "{label}: xattr line {l:?}");
        out.get_mut(&rel(f[0]))
            .unwrap_or_else(|| panic!("{label}: xattr of unlisted {}", f[0]))
            .xattrs
            .insert(OsString::from(f[1]), unhex(f[2]));
    }
    out
}

/// The same view of a scanned copy.
fn ours(m: &Manifest) -> BTreeMap<PathBuf, Want> {
    m.entries
        .iter()
        .filter(|(p, _)| p.as_os_str() != ".")
        .map(|(p, e)| {
            (
                p.clone(),
                Want {
                    kind: Some(e.kind),
                    mode: e.mode,
                    uid: e.uid,
                    gid: e.gid,
                    size: if e.kind == Kind::Dir { None } else { e.size },
                    mtime: e.mtime,
                    sha256: e.sha256.clone(),
                    target: e.target.clone(),
                    xattrs: e
                        .xattrs
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                },
            )
        })
        .collect()
}

fn unpack(src: &Path, devs: &Path) {
    std::fs::create_dir_all(devs).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(img) = name.strip_suffix(".gz") else {
            continue;
        };
        // Sparse: the images are mostly zeros.
        let ok = Command::new("sh")
            .arg("-c")
            .arg(r#"gzip -dc "$1" | cp --sparse=always /dev/stdin "$2""#)
            .args([
                "sh",
                &e.path().to_string_lossy(),
                &devs.join(img).to_string_lossy(),
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "unpacking {}", e.path().display());
    }
}

#[test]
fn every_checksum_reads_as_openzfs_wrote_it() {
    let src = corpus().join(POOL);
    let text = std::fs::read_to_string(src.join("manifest.txt")).expect("manifest.txt");
    let oz = ozfs();
    let work = tempfile::Builder::new()
        .prefix("ozfs-test-corpus-checksums-")
        .tempdir_in(ozfs_testkit::pool::test_tmp_root())
        .expect("temp dir");
    let devs = work.path().join("devs");
    unpack(&src, &devs);
    oz.ok(&[
        "zpool",
        "import",
        "-o",
        "readonly=on",
        "-d",
        &devs.to_string_lossy(),
        POOL,
    ]);
    // Each file system's checksum, as ozfs reads the property.
    let props = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,value",
        "-r",
        "checksum",
        POOL,
    ]);
    for ds in &DATASETS[1..] {
        let algo = ds.rsplit('/').next().unwrap();
        assert!(
            props.lines().any(|l| l == format!("{ds}\t{algo}")),
            "{ds}: checksum property: {props}"
        );
    }
    let mut failed = Vec::new();
    for ds in DATASETS {
        let want = theirs(&text, ds);
        assert!(!want.is_empty(), "{ds}: not in manifest.txt");
        let dest = work.path().join(ds.replace('/', "_"));
        let r = oz.run(&[
            "cp".as_ref(),
            "-r".as_ref(),
            format!("{ds}:/").as_ref(),
            dest.as_os_str(),
        ]);
        if !r.success() {
            failed.push(format!("{ds}: ozfs cp failed: {}", r.stderr));
            continue;
        }
        let got = ours(&Manifest::scan(&dest).expect("scan the copy"));
        if got != want {
            let mut d = Vec::new();
            for (p, w) in &want {
                match got.get(p) {
                    None => d.push(format!("  missing {}", p.display())),
                    Some(g) if g != w => {
                        d.push(format!("  {}: ozfs {g:?}\n    OpenZFS {w:?}", p.display()))
                    }
                    _ => {}
                }
            }
            for p in got.keys().filter(|p| !want.contains_key(*p)) {
                d.push(format!("  extra {}", p.display()));
            }
            failed.push(format!("{ds}:\n{}", d.join("\n")));
        }
        let _ = std::fs::remove_dir_all(&dest);
    }
    oz.ok(&["zpool", "export", POOL]);
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}
