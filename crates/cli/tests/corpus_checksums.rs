//! Every checksum OpenZFS has, read through, on pools the real OpenZFS
//! 2.3.2 kernel module made (../shared/corpus/openzfs-2.3):
//! * `c6-checksums` has one file system per checksum — fletcher2,
//!   fletcher4, sha256, sha512, skein, edonr, blake3 — each with the same
//!   400,000-byte file and a small one;
//! * `c5-dedup` has `dedup=blake3` (salted blake3 on every deduplicated
//!   block) and `dedup=on` (sha256).
//!
//! Imported read-only by ozfs, every file system of the pool (the root
//! one included: it holds the others' mount points) is copied out with
//! `ozfs cp -r` and compared with what OpenZFS's own mount showed
//! (`manifest.txt`): kinds, modes, owners, sizes, mtimes, sha256 of every
//! file, symlink targets and `user.*` xattrs. Link counts and directory
//! sizes are what ZFS reports, which a copy does not keep, so they are not
//! compared.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pools, and the checksum property ozfs must show for some of their
/// file systems.
const POOLS: &[(&str, &[(&str, &str)])] = &[
    (
        "c6-checksums",
        &[
            ("c6-checksums/fletcher2", "fletcher2"),
            ("c6-checksums/fletcher4", "fletcher4"),
            ("c6-checksums/sha256", "sha256"),
            ("c6-checksums/sha512", "sha512"),
            ("c6-checksums/skein", "skein"),
            ("c6-checksums/edonr", "edonr"),
            ("c6-checksums/blake3", "blake3"),
        ],
    ),
    ("c5-dedup", &[]),
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

/// The file systems `manifest.txt` lists (`== tree NAME` sections).
fn datasets(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("== tree "))
        .map(str::to_string)
        .collect()
}

/// Import `pool` read-only, copy every file system out, compare; the
/// differences found, one string per file system.
fn check_pool(oz: &Ozfs, work: &Path, pool: &str, checksums: &[(&str, &str)]) -> Vec<String> {
    let src = corpus().join(pool);
    let text = std::fs::read_to_string(src.join("manifest.txt")).expect("manifest.txt");
    let devs = work.join(pool);
    unpack(&src, &devs);
    oz.ok(&[
        "zpool",
        "import",
        "-o",
        "readonly=on",
        "-d",
        &devs.to_string_lossy(),
        pool,
    ]);
    let props = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,value",
        "-r",
        "checksum",
        pool,
    ]);
    for (ds, algo) in checksums {
        assert!(
            props.lines().any(|l| l == format!("{ds}\t{algo}")),
            "{ds}: checksum property: {props}"
        );
    }
    let mut failed = Vec::new();
    let names = datasets(&text);
    assert!(!names.is_empty(), "{pool}: no trees in manifest.txt");
    for ds in &names {
        let want = theirs(&text, ds);
        let dest = work.join(format!("copy-{}", ds.replace('/', "_")));
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
    oz.ok(&["zpool", "export", pool]);
    let _ = std::fs::remove_dir_all(&devs);
    failed
}

#[test]
fn every_checksum_reads_as_openzfs_wrote_it() {
    let oz = ozfs();
    let work = tempfile::Builder::new()
        .prefix("ozfs-test-corpus-checksums-")
        .tempdir_in(ozfs_testkit::pool::test_tmp_root())
        .expect("temp dir");
    let mut failed = Vec::new();
    for (pool, checksums) in POOLS {
        failed.extend(check_pool(&oz, work.path(), pool, checksums));
    }
    assert!(failed.is_empty(), "copies differ:\n{}", failed.join("\n"));
}
