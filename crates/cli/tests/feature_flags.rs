//! Feature-flag pools (version 5000) as ozfs creates and upgrades them,
//! held against what OpenZFS 2.3 itself made (the corpus pool c1-single,
//! created with OpenZFS's defaults) and against OpenZFS's own option
//! rules: `zpool create -o version=5000`, `-d`, `-o feature@NAME=`,
//! `-o compatibility=`, `zpool set feature@NAME=enabled`, `zpool
//! upgrade`. OpenZFS's zdb judges the pools' blocks in `oracle_zdb.rs`.

mod common;
use common::*;
use std::collections::BTreeMap;

/// `feature@NAME` → state, as `zpool get -H -o property,value all` shows it.
fn feature_states(oz: &Ozfs, pool: &str) -> BTreeMap<String, String> {
    oz.ok(&["zpool", "get", "-H", "-o", "property,value", "all", pool])
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(k, v)| Some((k.strip_prefix("feature@")?.to_string(), v.to_string())))
        .collect()
}

/// Whether trees `a` and `b` are the same (`diff -r`; symlinks compared
/// as links, fifos left to the caller).
fn same_tree(a: &std::path::Path, b: &std::path::Path) -> bool {
    std::process::Command::new("diff")
        .args(["-r", "--no-dereference", "--exclude=fifo"])
        .arg(a)
        .arg(b)
        .status()
        .expect("diff")
        .success()
}

fn image(dir: &std::path::Path, name: &str) -> String {
    let f = dir.join(name);
    std::fs::File::create(&f)
        .and_then(|h| h.set_len(128 << 20))
        .expect("image");
    f.to_string_lossy().into_owned()
}

#[test]
fn a_feature_pool_has_the_features_openzfs_gives_a_new_pool() {
    let oz = ozfs();
    let work = scratch("ozfs-test-features-");
    let d = image(work.path(), "d0.img");
    oz.ok(&["zpool", "create", "-o", "version=5000", "fnew", &d]);
    let ours = feature_states(&oz, "fnew");
    // OpenZFS 2.3's own new pool (its `zpool get all`, in the corpus).
    let props = std::fs::read_to_string(corpus_dir().join("c1-single/props.txt"))
        .expect("corpus props.txt");
    let theirs: BTreeMap<String, String> = props
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(k, v)| Some((k.strip_prefix("feature@")?.to_string(), v.to_string())))
        .collect();
    assert_eq!(theirs.len(), 44, "{theirs:?}");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    for (f, st) in &ours {
        // Every feature is enabled; those ozfs activates at creation are
        // active in OpenZFS's new pool too. (OpenZFS activates more at
        // once: log space maps, per-dataset accounting, ... which ozfs
        // leaves enabled for whoever imports the pool to start using.)
        assert!(st == "enabled" || st == "active", "{f}: {st}");
        if st == "active" {
            assert_eq!(theirs[f], "active", "{f}");
        }
    }
    for f in ["lz4_compress", "hole_birth", "enabled_txg", "embedded_data"] {
        assert_eq!(ours[f], "active", "{f}");
    }
    let v = oz.ok(&[
        "zpool",
        "get",
        "-H",
        "-o",
        "value,source",
        "version",
        "fnew",
    ]);
    assert_eq!(v.trim(), "-\tdefault");
    // compression=on is lz4 on such a pool.
    oz.ok(&["zfs", "create", "-o", "compression=on", "fnew/fs"]);
    let src = work.path().join("text");
    std::fs::write(&src, "lz4 me ".repeat(40_000)).expect("write");
    oz.ok(&["cp", &src.to_string_lossy(), "fnew/fs:/text"]);
    oz.ok(&["zpool", "export", "fnew"]);
    if let Some(zdb) = oracle_zdb() {
        let out = std::process::Command::new(zdb)
            .args(["-e", "-p"])
            .arg(work.path())
            .args(["-bbbbb", "fnew"])
            .output()
            .expect("OpenZFS zdb");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l.contains("[L0 ZFS plain file] fletcher4 lz4 ")),
            "no lz4 file block:\n{text}"
        );
    }
}

#[test]
fn feature_options_follow_openzfs_rules() {
    let oz = ozfs();
    let work = scratch("ozfs-test-featopts-");
    // -d: version 5000, nothing enabled; one feature asked for by name.
    let d = image(work.path(), "d.img");
    oz.ok(&[
        "zpool",
        "create",
        "-d",
        "-o",
        "feature@lz4_compress=enabled",
        "fd",
        &d,
    ]);
    let st = feature_states(&oz, "fd");
    assert_eq!(st["lz4_compress"], "active");
    assert_eq!(st["hole_birth"], "disabled");
    assert_eq!(
        st.values().filter(|v| *v != "disabled").count(),
        1,
        "{st:?}"
    );
    // zpool set enables one more (with what it depends on).
    oz.ok(&["zpool", "set", "feature@hole_birth=enabled", "fd"]);
    let st = feature_states(&oz, "fd");
    assert_eq!(st["hole_birth"], "active");
    assert_eq!(st["enabled_txg"], "active");
    let r = oz.run(&["zpool", "set", "feature@hole_birth=disabled", "fd"]);
    assert_error(&r, Some(1), &["can only be set to 'enabled'"]);
    oz.ok(&["zpool", "export", "fd"]);
    // -d alone: no feature at all, yet the feature objects OpenZFS needs
    // to open a version-5000 pool are there.
    let devs = work.path().join("none");
    std::fs::create_dir(&devs).expect("mkdir");
    let n = image(&devs, "n.img");
    oz.ok(&["zpool", "create", "-d", "fnone", &n]);
    let st = feature_states(&oz, "fnone");
    assert!(st.values().all(|v| v == "disabled"), "{st:?}");
    oz.ok(&["zpool", "export", "fnone"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "fnone");
    }

    // A compatibility file: exactly its features, and the property kept.
    let c = image(work.path(), "c.img");
    oz.ok(&[
        "zpool",
        "create",
        "-o",
        "compatibility=openzfs-2.0-linux",
        "fc",
        &c,
    ]);
    let st = feature_states(&oz, "fc");
    assert_eq!(st["zstd_compress"], "enabled");
    assert_eq!(st["blake3"], "disabled");
    assert_eq!(st["head_errlog"], "disabled");
    let v = oz.ok(&["zpool", "get", "-H", "-o", "value", "compatibility", "fc"]);
    assert_eq!(v.trim(), "openzfs-2.0-linux");
    oz.ok(&["zpool", "export", "fc"]);

    // Refused, with nothing created: features on a legacy version, an
    // unknown feature or compatibility file, a bad feature value.
    let x = image(work.path(), "x.img");
    for (opts, needle) in [
        (
            vec!["-o", "version=23", "-o", "feature@lz4_compress=enabled"],
            "version 23",
        ),
        (vec!["-o", "feature@no_such=enabled"], "feature@no_such"),
        (vec!["-o", "compatibility=no-such-os"], "no-such-os"),
        (
            vec!["-o", "feature@lz4_compress=on"],
            "'enabled' or 'disabled'",
        ),
    ] {
        let mut args = vec!["zpool", "create"];
        args.extend(opts.iter().copied());
        args.extend(["fx", x.as_str()]);
        let r = oz.run(&args);
        assert!(r.code != Some(0), "{}", r.describe());
        assert!(r.stderr.contains(needle), "{opts:?}: {}", r.describe());
        assert!(oz.run(&["zpool", "list", "fx"]).code != Some(0));
    }
}

#[test]
fn upgrade_makes_a_legacy_pool_a_feature_pool() {
    let oz = ozfs();
    let work = scratch("ozfs-test-upgrade-");
    let d = image(work.path(), "d.img");
    oz.ok(&["zpool", "create", "-o", "version=23", "fu", &d]);
    oz.ok(&["zfs", "create", "fu/fs"]);
    let src = work.path().join("f");
    std::fs::write(&src, b"before the upgrade").expect("write");
    oz.ok(&["cp", &src.to_string_lossy(), "fu/fs:/before"]);
    let listing = oz.ok(&["zpool", "upgrade"]);
    assert!(listing.contains("23   fu"), "{listing}");
    let out = oz.ok(&["zpool", "upgrade", "fu"]);
    assert!(
        out.contains("Successfully upgraded 'fu' from version 23 to feature flags.")
            && out.contains("Enabled the following features on 'fu':\n  async_destroy\n"),
        "{out}"
    );
    let st = feature_states(&oz, "fu");
    assert!(st.values().all(|v| v != "disabled"), "{st:?}");
    // Written to after the upgrade, and read back.
    oz.ok(&["cp", &src.to_string_lossy(), "fu/fs:/after"]);
    let back = work.path().join("back");
    oz.ok(&["cp", "fu/fs:/before", &back.to_string_lossy()]);
    assert_eq!(std::fs::read(&back).expect("read"), b"before the upgrade");
    let again = oz.ok(&["zpool", "upgrade", "fu"]);
    assert!(
        again.contains("Pool 'fu' already has all supported and requested features enabled."),
        "{again}"
    );
    oz.ok(&["zpool", "export", "fu"]);
}

/// Algorithms newer than pool version 23 are refused where the pool lacks
/// their feature (zfs-fuse could not read the blocks), and taken where it
/// has it active.
#[test]
fn new_algorithms_need_their_feature() {
    let oz = ozfs();
    let work = scratch("ozfs-test-featalgo-");
    let old = image(work.path(), "old.img");
    oz.ok(&["zpool", "create", "-o", "version=23", "fa23", &old]);
    for prop in ["compression=lz4", "checksum=sha512", "checksum=blake3"] {
        let r = oz.run(&["zfs", "set", prop, "fa23"]);
        assert_error(&r, Some(1), &["does not have feature", "version 23"]);
        let r = oz.run(&["zfs", "create", "-o", prop, "fa23/x"]);
        assert!(r.code != Some(0), "{}", r.describe());
    }
    let v = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "compression,checksum",
        "fa23",
    ]);
    assert_eq!(v, "off\non\n");
    let r = oz.run(&["zfs", "set", "recordsize=1M", "fa23"]);
    assert_error(&r, Some(1), &["large_blocks"]);
    oz.ok(&["zpool", "export", "fa23"]);
    let new = image(work.path(), "new.img");
    oz.ok(&["zpool", "create", "-o", "version=5000", "fa5", &new]);
    oz.ok(&["zfs", "set", "compression=lz4", "fa5"]);
    // A salted checksum (the pool gets its salt), zstd and 1 MiB records,
    // written and read back; the blocks born make their dataset list the
    // features; a stream carries the 1 MiB blocks in 128 KiB pieces.
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "checksum=skein",
        "-o",
        "compression=zstd-7",
        "-o",
        "recordsize=1M",
        "fa5/n",
    ]);
    let v = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "value",
        "compression,recordsize",
        "fa5/n",
    ]);
    assert_eq!(v, "zstd-7\n1M\n");
    let data: Vec<u8> = (0..3_500_000u32)
        .map(|i| ((i / 5) % 199) as u8 ^ (i % 3) as u8)
        .collect();
    let src = work.path().join("data.bin");
    std::fs::write(&src, &data).unwrap();
    oz.ok(&["cp", &src.to_string_lossy(), "fa5/n:/data.bin"]);
    let back = work.path().join("back.bin");
    oz.ok(&["cp", "fa5/n:/data.bin", &back.to_string_lossy()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "read back as written"
    );
    let states = feature_states(&oz, "fa5");
    for f in ["large_blocks", "skein", "zstd_compress"] {
        assert_eq!(states.get(f).map(String::as_str), Some("active"), "{f}");
    }
    oz.ok(&["zfs", "snapshot", "fa5/n@s"]);
    let stream = work.path().join("n.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send fa5/n@s > '{}'",
        stream.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs receive fa5/r < '{}'",
        stream.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let _ = std::fs::remove_file(&back);
    oz.ok(&["cp", "fa5/r:/data.bin", &back.to_string_lossy()]);
    assert!(std::fs::read(&back).unwrap() == data, "received as sent");
    oz.ok(&["zpool", "export", "fa5"]);
    if let Some(zdb) = oracle_zdb() {
        // OpenZFS verifies the skein checksums with the salt ozfs made.
        openzfs_verdict(&zdb, work.path(), "fa5");
    }
}

/// A default pool's file systems are ZPL 5 with system attributes, as
/// OpenZFS makes them: every kind of file goes in and comes back out the
/// same, long symlink targets spill out of the dnode, and OpenZFS's zdb
/// reads the attributes (a symlink's target from its spill block) and
/// finds the pool clean.
#[test]
fn zpl5_file_systems_hold_every_kind_of_file() {
    let oz = ozfs();
    let work = scratch("ozfs-test-zpl5-");
    let devs = work.path().join("devs");
    std::fs::create_dir(&devs).expect("mkdir");
    let d = image(&devs, "d.img");
    oz.ok(&["zpool", "create", "-m", "none", "fz5", &d]);
    oz.ok(&["zfs", "create", "fz5/fs"]);
    let v = oz.ok(&["zfs", "get", "-H", "-o", "value", "version", "fz5/fs"]);
    assert_eq!(v.trim(), "5");
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("a/b/c")).expect("mkdir");
    for (i, len) in [0usize, 1, 511, 4096, 131_072, 300_001].iter().enumerate() {
        let data: Vec<u8> = (0..*len).map(|k| (k * 7 + i) as u8).collect();
        std::fs::write(src.join(format!("a/f{i}")), data).expect("write");
    }
    let long = "t".repeat(900);
    std::os::unix::fs::symlink(&long, src.join("a/long")).expect("symlink");
    std::os::unix::fs::symlink("f1", src.join("a/short")).expect("symlink");
    let fifo = src.join("a/b/fifo");
    let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(src.join("a/f2"), std::fs::Permissions::from_mode(0o604))
        .expect("chmod");
    oz.ok(&["cp", "-r", &src.to_string_lossy(), "fz5/fs:/src"]);
    let back = work.path().join("back");
    oz.ok(&["cp", "-r", "fz5/fs:/src", &back.to_string_lossy()]);
    assert!(same_tree(&src, &back), "the tree came back different");
    use std::os::unix::fs::FileTypeExt;
    let ft = std::fs::symlink_metadata(back.join("a/b/fifo")).expect("fifo");
    assert!(ft.file_type().is_fifo());
    assert_eq!(
        std::fs::read_link(back.join("a/long")).expect("readlink"),
        std::path::PathBuf::from(&long)
    );
    let mode = std::fs::metadata(back.join("a/f2"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o604);
    // Sent (full and incremental, SPILL records for the long symlink) and
    // received into another feature-flag pool: the same tree; a
    // version-23 pool refuses the stream (zfs-fuse cannot read ZPL 5).
    oz.ok(&["zfs", "snapshot", "fz5/fs@a"]);
    std::fs::write(src.join("a/later"), b"after @a").expect("write");
    oz.ok(&[
        "cp",
        &src.join("a/later").to_string_lossy(),
        "fz5/fs:/src/a/later",
    ]);
    oz.ok(&["zfs", "snapshot", "fz5/fs@b"]);
    let full = work.path().join("full.zs");
    let incr = work.path().join("incr.zs");
    let sh = |script: String| {
        let r = oz.sh(&script);
        assert!(r.success(), "{script}:\n{}", r.describe());
    };
    sh(format!(
        "\"$OZFS\" zfs send fz5/fs@a > '{}'",
        full.display()
    ));
    sh(format!(
        "\"$OZFS\" zfs send -i @a fz5/fs@b > '{}'",
        incr.display()
    ));
    let d2 = image(&devs, "d2.img");
    oz.ok(&["zpool", "create", "-m", "none", "fz5b", &d2]);
    for st in [&full, &incr] {
        sh(format!(
            "\"$OZFS\" zfs receive fz5b/got < '{}'",
            st.display()
        ));
    }
    let got = work.path().join("got");
    oz.ok(&["cp", "-r", "fz5b/got@b:/src", &got.to_string_lossy()]);
    assert!(same_tree(&src, &got), "the received tree differs");
    let d3 = image(&devs, "d3.img");
    oz.ok(&[
        "zpool",
        "create",
        "-o",
        "version=23",
        "-m",
        "none",
        "fz5c",
        &d3,
    ]);
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs receive fz5c/got < '{}'",
        full.display()
    ));
    assert!(
        !r.success() && r.stderr.contains("version-23 pool"),
        "{}",
        r.describe()
    );
    for p in ["fz5b", "fz5c"] {
        oz.ok(&["zpool", "export", p]);
    }
    oz.ok(&["zpool", "export", "fz5"]);
    let Some(zdb) = oracle_zdb() else { return };
    openzfs_verdict(&zdb, &devs, "fz5");
    let out = std::process::Command::new(&zdb)
        .args(["-e", "-p"])
        .arg(&devs)
        .args(["-dddd", "fz5/fs"])
        .output()
        .expect("OpenZFS zdb");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("\ttarget\t{long}\n")),
        "OpenZFS's zdb does not show the long symlink's target"
    );
    assert!(text.contains("SPILL_BLKPTR"), "no spill block");
    assert!(
        text.contains("\tmode\t100604\n"),
        "OpenZFS's zdb shows no mode 0604 file"
    );
}
