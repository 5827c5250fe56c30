//! OpenZFS's manifests of the corpus pools (`manifest.txt`: `== tree`,
//! `== sha256`, `== xattr` sections per file system) and the same view of
//! a tree scanned here, for `corpus_checksums.rs` (copies) and
//! `corpus_mount.rs` (mounts).
//!
//! Test files use it as `mod ccommon; mod common;`.

#![allow(dead_code)]

use crate::common::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

/// One line of a `== tree` section, with what the other sections add.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Want {
    pub kind: Option<Kind>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Regular files and symlinks (ZFS's directory sizes are not kept by a copy).
    pub size: Option<u64>,
    pub mtime: (i64, i64),
    pub sha256: Option<String>,
    pub target: Option<OsString>,
    pub xattrs: BTreeMap<OsString, Vec<u8>>,
}

pub fn kind_of(c: &str) -> Kind {
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
pub fn time_of(s: &str) -> (i64, i64) {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut ns = String::from(frac);
    ns.truncate(9);
    while ns.len() < 9 {
        ns.push('0');
    }
    (sec.parse().unwrap(), ns.parse().unwrap())
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// A manifest path (`./a/b`) relative to the tree's root.
pub fn rel(p: &str) -> PathBuf {
    PathBuf::from(p.strip_prefix("./").unwrap_or(p))
}

/// The entries of `label` in the corpus `manifest.txt` (the root itself is
/// not listed there).
pub fn theirs(text: &str, label: &str) -> BTreeMap<PathBuf, Want> {
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
pub fn ours(m: &Manifest) -> BTreeMap<PathBuf, Want> {
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

/// The file systems `manifest.txt` lists (`== tree NAME` sections).
pub fn datasets(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("== tree "))
        .map(str::to_string)
        .collect()
}

/// What differs between OpenZFS's view `want` and ours `got` (one line
/// per path), or None when they are equal.
pub fn differences(
    want: &BTreeMap<PathBuf, Want>,
    got: &BTreeMap<PathBuf, Want>,
) -> Option<String> {
    if got == want {
        return None;
    }
    let mut d = Vec::new();
    for (p, w) in want {
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
    Some(d.join("\n"))
}

/// The `keylocation` of an encrypted data set of the corpus pool
/// `c7-crypt` (its key files are in `keys`): the passphrase of the GCM
/// tree, the hex key of the CCM one; None for the others.
pub fn crypt_key_location(keys: &std::path::Path, ds: &str) -> Option<String> {
    let f = if ds.starts_with("c7-crypt/gcm") {
        "secret.pass"
    } else if ds.starts_with("c7-crypt/ccm") {
        "ccm.hex"
    } else {
        return None;
    };
    Some(format!("file://{}", keys.join(f).display()))
}

/// Copy `snap` out with `ozfs cp -r` into `work` and compare it with
/// `label` of `manifest` (OpenZFS's); the differences, if any.
pub fn compare(
    oz: &Ozfs,
    work: &std::path::Path,
    snap: &str,
    manifest: &str,
    label: &str,
) -> Option<String> {
    let dest = work.join(format!("copy-{}", snap.replace(['/', '@'], "_")));
    let r = oz.run(&["cp", "-r", &format!("{snap}:/"), &dest.to_string_lossy()]);
    if !r.success() {
        return Some(format!("{snap}: ozfs cp failed: {}", r.stderr));
    }
    let want = theirs(manifest, label);
    assert!(!want.is_empty(), "{label}: not in the manifest");
    let got = ours(&Manifest::scan(&dest).expect("scan the copy"));
    let _ = std::fs::remove_dir_all(&dest);
    differences(&want, &got).map(|d| format!("{snap} (as {label}):\n{d}"))
}
