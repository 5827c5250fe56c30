//! Dataset administration written by ozfs: `zfs create -o ...` (native and
//! user properties, an explicit mountpoint), nested datasets, `zfs set`,
//! `zfs inherit`, `zfs destroy [-r]`.  ozfs's own `zfs get` must show the
//! values and sources; after export zdb -bcc is clean and zfs-fuse shows the
//! same datasets, values and sources, and mounts the data copied in.

mod common;
mod wcommon;
use std::time::Instant;
use wcommon::*;

/// (dataset rel, property, value, source) as `zfs get -H -o
/// name,property,value,source` prints them; `{P}` is the pool name.
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("", "compression", "lzjb", "local"),
    ("", "com.example:pool", "top", "local"),
    ("a", "copies", "2", "local"),
    ("a", "com.example:note", "hello", "local"),
    ("a", "com.example:pool", "top", "inherited from {P}"),
    ("a", "compression", "lzjb", "inherited from {P}"),
    ("a/b", "compression", "lzjb", "inherited from {P}"),
    ("a/b", "copies", "2", "inherited from {P}/a"),
    ("a/b", "com.example:other", "x y z", "local"),
    ("a/b", "atime", "off", "local"),
    ("ro", "readonly", "on", "local"),
    ("c", "recordsize", "8K", "local"),
    ("c", "checksum", "sha256", "local"),
    ("c", "compression", "gzip-9", "local"),
];

fn get_table(out: &str) -> Vec<(String, String, String, String)> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f.len() >= 4, "zfs get line: {l:?}");
            (
                f[0].to_string(),
                f[1].to_string(),
                f[2].to_string(),
                f[3].to_string(),
            )
        })
        .collect()
}

/// Mismatches between `zfs get` (as `out_of(prop, dataset)` returns it)
/// and [`EXPECTED`], one line each.
fn check_props(pool: &TestPool, out_of: impl Fn(&str, &str) -> String, who: &str) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, prop, value, source) in EXPECTED {
        let ds = pool.ds(rel);
        let out = out_of(prop, &ds);
        let rows = get_table(&out);
        let want = (
            ds.clone(),
            prop.to_string(),
            value.to_string(),
            source.replace("{P}", pool.name()),
        );
        if !rows.contains(&want) {
            bad.push(format!(
                "[{who}] zfs get {prop} {ds}: expected {want:?}, got {:?}",
                out.trim()
            ));
        }
    }
    bad
}

#[test]
fn write_props() {
    let tag = "props";
    let t0 = Instant::now();
    let mut pool = new_devs("ozwprops", Layout::Stripe, 1, 96);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(
        &oz,
        &pool,
        None,
        &["-O", "compression=lzjb", "-O", "com.example:pool=top"],
    );
    let mp_a = pool.mountpoint("a");
    oz.ok(&[
        "zfs".to_string(),
        "create".into(),
        "-o".into(),
        format!("mountpoint={}", mp_a.display()),
        "-o".into(),
        "com.example:note=hello".into(),
        "-o".into(),
        "copies=2".into(),
        pool.ds("a"),
    ]);
    oz.ok(&["zfs", "create", &pool.ds("a/b")]);
    oz.ok(&["zfs", "set", "com.example:other=x y z", &pool.ds("a/b")]);
    oz.ok(&["zfs", "set", "atime=off", &pool.ds("a/b")]);
    oz.ok(&["zfs", "set", "compression=gzip-9", &pool.ds("a/b")]);
    oz.ok(&["zfs", "inherit", "compression", &pool.ds("a/b")]);
    oz.ok(&["zfs", "create", "-o", "readonly=on", &pool.ds("ro")]);
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "recordsize=8K",
        "-o",
        "checksum=sha256",
        &pool.ds("c"),
    ]);
    oz.ok(&["zfs", "set", "compression=gzip-9", &pool.ds("c")]);
    // Created and destroyed again: must leave nothing behind (zdb).
    oz.ok(&["zfs", "create", &pool.ds("tmp")]);
    oz.ok(&["zfs", "destroy", &pool.ds("tmp")]);
    oz.ok(&["zfs", "create", &pool.ds("tree")]);
    oz.ok(&["zfs", "create", &pool.ds("tree/x")]);
    oz.ok(&["zfs", "create", &pool.ds("tree/x/y")]);
    let out = oz.fails(&["zfs", "destroy", &pool.ds("tree")]);
    assert_eq!(
        out.code,
        Some(1),
        "destroy with children:\n{}",
        out.describe()
    );
    oz.ok(&["zfs", "destroy", "-r", &pool.ds("tree")]);
    // Bad values are refused.
    oz.fails(&["zfs", "set", "compression=bogus", &pool.ds("c")]);
    oz.fails(&["zfs", "set", "recordsize=3000", &pool.ds("c")]);

    // Content in the inheriting, the copies=2 and the sha256/8K datasets.
    let local = local_dir(tag);
    let (src, m) = source_tree(local.path(), "tree", &Profile::small(401));
    for rel in ["a/b", "a", "c"] {
        oz_cp_in(&oz, &src, &format!("{}:/tree", pool.ds(rel)));
    }
    // The read-only dataset should refuse writes (asserted at the end).
    let ro_out = oz.run(&[
        std::ffi::OsStr::new("cp"),
        std::ffi::OsStr::new("-r"),
        src.as_os_str(),
        std::ffi::OsStr::new(&format!("{}:/tree", pool.ds("ro"))),
    ]);

    let mut bad = check_props(
        &pool,
        |prop, ds| {
            oz.ok(&[
                "zfs",
                "get",
                "-H",
                "-o",
                "name,property,value,source",
                prop,
                ds,
            ])
        },
        "ozfs",
    );
    let names = oz.dataset_names();
    let want: Vec<String> = ["", "a", "a/b", "c", "ro"]
        .iter()
        .map(|r| pool.ds(r))
        .collect();
    let mut got = names.clone();
    got.sort();
    assert_eq!(got, want, "ozfs zfs list");
    oz_export(&oz, &name);
    phase(&format!("{tag}: ozfs"), t0);

    let t1 = Instant::now();
    assert_zdb_clean(&pool, &pool.dev_dir(), tag);
    pool.import()
        .unwrap_or_else(|e| panic!("zfs-fuse cannot import: {e}"));
    // zfs-fuse shows "readonly off temporary" for a mounted readonly=on
    // dataset (also for its own); unmounted it shows the stored value.
    pool.zfs(&["unmount", &pool.ds("ro")]).unwrap();
    bad.extend(check_props(
        &pool,
        |prop, ds| {
            pool.zfs(&["get", "-H", "-o", "name,property,value,source", prop, ds])
                .unwrap()
        },
        "zfs-fuse",
    ));
    let listed = pool.zfs(&["list", "-H", "-o", "name"]).unwrap();
    let mut got: Vec<String> = listed.lines().map(|l| l.trim().to_string()).collect();
    got.sort();
    assert_eq!(got, want, "zfs-fuse zfs list");
    let mp = pool.get("a/b", "mountpoint").unwrap();
    assert_eq!(mp, format!("{}/b", mp_a.display()), "inherited mountpoint");
    for root in [
        pool.root("a").join("tree"),
        pool.zf().path(mp_a.join("b")).join("tree"),
        pool.zf().path(pool.mountpoint("").join("c")).join("tree"),
    ] {
        let got = scan_zf(&root, true);
        m.assert_same(&got, &format!("zfs-fuse view of {}", root.display()));
    }
    assert_scrub_clean(&pool, tag);
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse"), t1);
    assert!(
        bad.is_empty(),
        "property mismatches:\n  {}",
        bad.join("\n  ")
    );
    assert!(
        ro_out.code == Some(1) && !ro_out.stderr.trim().is_empty(),
        "cp into a readonly=on dataset should fail with exit 1 and a message:\n{}",
        ro_out.describe()
    );
}
