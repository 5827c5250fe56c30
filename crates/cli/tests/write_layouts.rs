//! (a) Writing pools of every vdev layout with every compression setting.
//!
//! For each layout ozfs creates the pool (`ozfs zpool create`, pool version
//! 23, ashift 9 or 12), creates datasets with compression off / lzjb /
//! gzip-1 / gzip-9 / zle / on (spread across the layouts), copies=2,
//! recordsize 512 and 4K, checksum=sha256, and copies a generated local
//! tree into each (`ozfs cp -r`): file size edge cases, a few MiB of
//! compressible and random data, sparse files, short and long symlinks,
//! hard links, xattrs, non-ASCII names, modes, owners, fifos, explicit
//! mtimes.  ozfs reads its own writes back; after `ozfs zpool export`,
//! zfs-fuse's `zdb -bcc` must find no leaks and no checksum errors, zfs-fuse
//! must import the pool, show the properties, scrub it clean, and every
//! tree seen through its mounts must equal the source tree.

mod common;
mod wcommon;
use std::time::Instant;
use wcommon::*;

/// Which source tree a dataset gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tree {
    /// Everything but dups/dir20k/big: ~15 MiB, sparse files, xattrs.
    Full,
    /// Small files only (for the small recordsizes).
    Small,
}

struct DsCase {
    rel: &'static str,
    props: &'static [(&'static str, &'static str)],
    tree: Tree,
}

const fn ds(
    rel: &'static str,
    props: &'static [(&'static str, &'static str)],
    tree: Tree,
) -> DsCase {
    DsCase { rel, props, tree }
}

#[allow(clippy::too_many_arguments)]
fn layout_case(
    tag: &str,
    layout: Layout,
    keyword: Option<&str>,
    ndev: usize,
    dev_mib: u64,
    pool_opts: &[&str],
    datasets: &[DsCase],
    seed: u64,
) {
    let t0 = Instant::now();
    let mut pool = new_devs(&format!("ozw{tag}"), layout, ndev, dev_mib);
    let oz = ozfs();
    let mut opts = vec!["-O", "atime=off"];
    opts.extend_from_slice(pool_opts);
    oz_create(&oz, &pool, keyword, &opts);

    // Local source trees.
    let src = local_dir(tag);
    let full = datasets.iter().any(|d| d.tree == Tree::Full).then(|| {
        source_tree(
            src.path(),
            "tree",
            &Profile {
                dups: false,
                ..Profile::moderate(seed)
            },
        )
    });
    let small = datasets
        .iter()
        .any(|d| d.tree == Tree::Small)
        .then(|| source_tree(&src.path().join("small"), "tree", &Profile::small(seed + 1)));
    let tree_of = |t: Tree| match t {
        Tree::Full => full.as_ref().expect("full tree"),
        Tree::Small => small.as_ref().expect("small tree"),
    };
    phase(&format!("{tag}: create + source trees"), t0);

    // Datasets and copy-in.
    let t1 = Instant::now();
    for d in datasets {
        if !d.rel.is_empty() {
            oz_create_ds(&oz, &pool, d.rel, d.props);
        }
        let (path, _) = tree_of(d.tree);
        oz_cp_in(&oz, path, &format!("{}:/tree", pool.ds(d.rel)));
    }
    phase(&format!("{tag}: ozfs copy-in"), t1);

    // ozfs reads back what it wrote (same process state, before export).
    let t2 = Instant::now();
    for d in datasets {
        let (_, m) = tree_of(d.tree);
        let got = oz_copyout(&oz, &pool, &format!("{}:/tree", pool.ds(d.rel)), tag, true);
        m.assert_same(
            &got,
            &format!(
                "[{tag}] ozfs copy-out of what ozfs wrote to {}",
                pool.ds(d.rel)
            ),
        );
    }
    // ozfs's `zfs get` of the properties set, compared with zfs-fuse's
    // output at the end (after the data checks).
    let mut oz_props = Vec::new();
    for d in datasets {
        for (k, _) in d.props {
            let got = oz
                .ok(&["zfs", "get", "-H", "-o", "value", k, &pool.ds(d.rel)])
                .trim()
                .to_string();
            oz_props.push((pool.ds(d.rel), k.to_string(), got));
        }
    }
    oz_export(&oz, pool.name());
    phase(&format!("{tag}: ozfs read-back + export"), t2);

    // zfs-fuse: zdb, import, properties, trees, scrub.
    let t3 = Instant::now();
    assert_zdb_clean(&pool, &pool.dev_dir(), tag);
    pool.import()
        .unwrap_or_else(|e| panic!("[{tag}] zfs-fuse cannot import the ozfs pool: {e}"));
    assert_status_online(&pool, tag);
    let version = pool
        .zpool(&["get", "version", pool.name()])
        .unwrap_or_default();
    assert!(
        version
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("23")),
        "[{tag}] zpool get version:\n{version}"
    );
    for d in datasets {
        for (k, v) in d.props {
            let got = pool.get(d.rel, k).unwrap();
            // zfs-fuse prints recordsize 4K as "4K", 512 as "512".
            assert_eq!(&got, v, "[{tag}] zfs-fuse: {k} of {}", pool.ds(d.rel));
        }
        let mp = pool.get(d.rel, "mountpoint").unwrap();
        assert_eq!(
            mp,
            pool.mountpoint(d.rel).to_string_lossy(),
            "[{tag}] mountpoint of {}",
            pool.ds(d.rel)
        );
        let (_, m) = tree_of(d.tree);
        let got = scan_zf(&pool.root(d.rel).join("tree"), true);
        m.assert_same(
            &got,
            &format!(
                "[{tag}] zfs-fuse view of {}:/tree written by ozfs",
                pool.ds(d.rel)
            ),
        );
        assert_nlinks(
            &pool.root(d.rel).join("tree"),
            &got,
            &format!("{tag}: {}", pool.ds(d.rel)),
        );
        eprintln!("[{tag}] {} OK ({} entries)", pool.ds(d.rel), got.len());
    }
    assert_scrub_clean(&pool, tag);
    let mut zf_props = Vec::new();
    for (ds, k, _) in &oz_props {
        let v = pool
            .zfs(&["get", "-H", "-o", "value", k, ds])
            .unwrap()
            .trim()
            .to_string();
        zf_props.push((ds.clone(), k.clone(), v));
    }
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse checks"), t3);
    assert_eq!(
        oz_props, zf_props,
        "[{tag}] `zfs get -H -o value` output: ozfs (left) vs zfs-fuse (right)"
    );
}

#[test]
fn write_layouts_single() {
    layout_case(
        "single",
        Layout::Stripe,
        None,
        1,
        128,
        &["-o", "version=23"],
        &[
            ds("c-off", &[("compression", "off")], Tree::Full),
            ds("rs512", &[("recordsize", "512")], Tree::Small),
            ds("", &[], Tree::Small),
        ],
        101,
    );
}

#[test]
fn write_layouts_stripe3() {
    layout_case(
        "stripe3",
        Layout::Stripe,
        None,
        3,
        96,
        &[],
        &[
            ds("c-lzjb", &[("compression", "lzjb")], Tree::Full),
            ds(
                "copies2",
                &[("copies", "2"), ("compression", "lzjb")],
                Tree::Full,
            ),
        ],
        102,
    );
}

#[test]
fn write_layouts_mirror2() {
    layout_case(
        "mirror2",
        Layout::Mirror,
        None,
        2,
        128,
        &["-o", "ashift=12"],
        &[
            ds("c-gzip-1", &[("compression", "gzip-1")], Tree::Full),
            ds("rs4k", &[("recordsize", "4K")], Tree::Full),
        ],
        103,
    );
}

#[test]
fn write_layouts_raidz1() {
    layout_case(
        "raidz1",
        Layout::Raidz1,
        Some("raidz"),
        3,
        128,
        &["-o", "ashift=12"],
        &[ds("c-gzip-9", &[("compression", "gzip-9")], Tree::Full)],
        104,
    );
}

#[test]
fn write_layouts_raidz2() {
    layout_case(
        "raidz2",
        Layout::Raidz2,
        None,
        5,
        96,
        &[],
        &[
            ds("c-zle", &[("compression", "zle")], Tree::Full),
            ds(
                "ck-sha256",
                &[("checksum", "sha256"), ("compression", "gzip")],
                Tree::Small,
            ),
        ],
        105,
    );
}

#[test]
fn write_layouts_raidz3() {
    layout_case(
        "raidz3",
        Layout::Raidz3,
        None,
        7,
        96,
        &[],
        &[
            ds("c-on", &[("compression", "on")], Tree::Full),
            ds("c-off", &[("compression", "off")], Tree::Small),
        ],
        106,
    );
}
