//! `ozfs zfs diff`: the changes between a snapshot and a later snapshot or
//! the live file system, as OpenZFS prints them.
//!
//! ozfs creates a pool and a file system; `ozfs mount` serves it while the
//! test makes files and directories, then `@before` is taken and, through a
//! second mount, a file is created, one removed, one appended to, one
//! renamed in place and one moved to another directory, a directory made, a
//! hard link added and a file whose name has a space and a control byte
//! created. `zfs diff` (plain, `-F`, `-H`, `-t`, `-h`) must print exactly
//! the expected lines (compared sorted); then between two snapshots (also
//! with the `@snap` shorthand), from a snapshot to the live file system
//! after more changes, and OpenZFS's errors with their exit codes. With the
//! daemon: its mountpoint, and a file written a moment before is listed.

mod common;
mod mcommon;
mod wcommon;
use mcommon::Mounted;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use wcommon::*;

/// The lines of an output, sorted (OpenZFS prints in object order, which
/// the test does not predict).
fn lines(out: &str) -> BTreeSet<String> {
    out.lines().map(String::from).collect()
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

fn mount(oz: &Ozfs, ds: &str, mnt: &Path, work: &Path, n: u32) -> Mounted {
    Mounted::start(oz, ds, mnt, &work.join(format!("mount{n}.log")), &[])
}

#[test]
fn zfs_diff() {
    let tag = "diff";
    let pool = new_devs("ozdiff", Layout::Stripe, 1, 128);
    let oz = ozfs();
    oz_create(&oz, &pool, None, &[]);
    oz_create_ds(&oz, &pool, "fs", &[]);
    let ds = pool.ds("fs");
    let work = local_dir(tag);
    let mp = oz
        .ok(&["zfs", "get", "-H", "-o", "value", "mountpoint", &ds])
        .trim()
        .to_string();
    fs::create_dir_all(&mp).unwrap();

    // The tree of @before.
    let m = mount(&oz, &ds, Path::new(&mp), work.path(), 1);
    let root = m.mnt.clone();
    for f in [
        "keep.txt",
        "gone.txt",
        "change.txt",
        "old-name.txt",
        "linked.txt",
    ] {
        fs::write(root.join(f), format!("content of {f}\n")).unwrap();
    }
    fs::create_dir(root.join("sub")).unwrap();
    fs::write(root.join("sub/inner.txt"), b"inner\n").unwrap();
    fs::write(root.join("sub/stays.txt"), b"stays\n").unwrap();
    m.unmount();
    oz.ok(&["zfs", "snapshot", &format!("{ds}@before")]);
    // Nothing changed yet: no lines.
    let out = oz.ok(&["zfs", "diff", &format!("{ds}@before")]);
    assert_eq!(out, "", "diff right after the snapshot");

    // The changes.
    let m = mount(&oz, &ds, Path::new(&mp), work.path(), 2);
    let root = m.mnt.clone();
    fs::write(root.join("new.txt"), b"brand new\n").unwrap();
    fs::remove_file(root.join("gone.txt")).unwrap();
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(root.join("change.txt"))
            .unwrap();
        f.write_all(b"more\n").unwrap();
    }
    fs::rename(root.join("old-name.txt"), root.join("new-name.txt")).unwrap();
    fs::rename(root.join("sub/inner.txt"), root.join("moved.txt")).unwrap();
    fs::create_dir(root.join("newdir")).unwrap();
    fs::hard_link(root.join("linked.txt"), root.join("hardlink")).unwrap();
    let odd = "with space\u{1}.txt";
    fs::write(root.join(odd), b"odd name\n").unwrap();
    let new_meta = fs::symlink_metadata(root.join("new.txt")).unwrap();
    let new_ctime = format!("{}.{:09}", new_meta.ctime(), new_meta.ctime_nsec());
    m.unmount();

    let p = |rel: &str| format!("{mp}{rel}");
    // (kind, type, path[, new path | link delta]) as zfs diff -F prints.
    let expected: Vec<(&str, &str, String, Option<String>)> = vec![
        ("M", "/", p("/"), None),
        ("+", "F", p("/new.txt"), None),
        ("-", "F", p("/gone.txt"), None),
        ("M", "F", p("/change.txt"), None),
        ("R", "F", p("/old-name.txt"), Some(p("/new-name.txt"))),
        ("M", "/", p("/sub"), None),
        ("R", "F", p("/sub/inner.txt"), Some(p("/moved.txt"))),
        ("+", "/", p("/newdir"), None),
        ("M", "F", p("/linked.txt"), Some("(+1)".into())),
        ("+", "F", p("/with\\0040space\\0001.txt"), None),
    ];
    let render = |classify: bool, scripted: bool| -> Vec<String> {
        expected
            .iter()
            .map(|(k, t, path, extra)| {
                let mut l = format!("{k}\t");
                if classify {
                    l.push_str(&format!("{t}\t"));
                }
                l.push_str(path);
                match (k, extra) {
                    (&"R", Some(new)) => {
                        l.push_str(if scripted { "\t" } else { " -> " });
                        l.push_str(new);
                    }
                    (_, Some(delta)) => l.push_str(&format!("\t{delta}")),
                    _ => {}
                }
                l
            })
            .collect()
    };
    let before = format!("{ds}@before");
    let out = oz.ok(&["zfs", "diff", "-Ft", &before]);
    eprintln!("zfs diff -Ft {before}:\n{out}");
    let out = oz.ok(&["zfs", "diff", &before]);
    assert_eq!(lines(&out), set(&render(false, false)), "zfs diff:\n{out}");
    assert_eq!(out.lines().count(), expected.len(), "no duplicates:\n{out}");
    let out = oz.ok(&["zfs", "diff", "-F", &before, &ds]);
    assert_eq!(
        lines(&out),
        set(&render(true, false)),
        "zfs diff -F:\n{out}"
    );
    let out = oz.ok(&["zfs", "diff", "-H", &before]);
    assert_eq!(
        lines(&out),
        set(&render(false, true)),
        "zfs diff -H:\n{out}"
    );
    let out = oz.ok(&["zfs", "diff", "-FH", &before]);
    assert_eq!(
        lines(&out),
        set(&render(true, true)),
        "zfs diff -FH:\n{out}"
    );

    // -t: the change time first, "%10d.%09d".
    let out = oz.ok(&["zfs", "diff", "-t", &before]);
    let mut rest = BTreeSet::new();
    for l in out.lines() {
        let (t, r) = l.split_once('\t').expect("a tab after the time");
        let (s, ns) = t.trim_start().split_once('.').expect("seconds.nanoseconds");
        assert!(t.len() >= 20 && ns.len() == 9, "time field {t:?}");
        assert!(
            s.parse::<u64>().is_ok() && ns.parse::<u64>().is_ok(),
            "{t:?}"
        );
        if r == format!("+\t{}", p("/new.txt")) {
            assert_eq!(t.trim_start(), new_ctime, "ctime of new.txt");
        }
        rest.insert(r.to_string());
    }
    assert_eq!(rest, set(&render(false, false)), "zfs diff -t:\n{out}");

    // -h: the name as it is.
    let out = oz.run(&["zfs", "diff", "-h", &before]);
    assert_eq!(out.code, Some(0), "{}", out.describe());
    let raw = format!("+\t{mp}/{odd}");
    assert!(
        out.stdout.lines().any(|l| l == raw),
        "zfs diff -h shows {raw:?}:\n{}",
        out.stdout
    );

    // Two snapshots, and the @snap shorthands.
    oz.ok(&["zfs", "snapshot", &format!("{ds}@after")]);
    let after = format!("{ds}@after");
    for args in [
        vec![before.as_str(), after.as_str()],
        vec![before.as_str(), "@after"],
        vec!["@before", after.as_str()],
    ] {
        let mut a = vec!["zfs", "diff"];
        a.extend(&args);
        let out = oz.ok(&a);
        assert_eq!(lines(&out), set(&render(false, false)), "{args:?}:\n{out}");
    }

    // More changes after @after: the live file system against it.
    oz_rm(&oz, &format!("{ds}:/new.txt"), false);
    let out = oz.ok(&["zfs", "diff", "-F", "@after", &ds]);
    assert_eq!(
        lines(&out),
        set(&[format!("M\t/\t{mp}/"), format!("-\tF\t{mp}/new.txt")]),
        "live against @after:\n{out}"
    );
    let out = oz.ok(&["zfs", "diff", &after, &after.replace("@after", "")]);
    assert_eq!(out.lines().count(), 2, "{out}");

    // Errors, as OpenZFS words them.
    let fails = |code: i32, args: &[&str], needle: &str| {
        let mut a = vec!["zfs", "diff"];
        a.extend(args);
        let out = oz.run(&a);
        assert_error(&out, Some(code), &[needle]);
        assert_eq!(out.stdout, "", "{}", out.describe());
    };
    fails(2, &[], "must provide at least one snapshot name");
    fails(2, &[&before, &after, &ds], "too many arguments");
    fails(2, &["@before"], "usage");
    fails(1, &[&ds], "Badly formed snapshot name");
    fails(
        1,
        &[&after, &before],
        "Not an earlier snapshot from the same fs",
    );
    fails(
        1,
        &[&before, &before],
        "Not an earlier snapshot from the same fs",
    );
    fails(1, &[&format!("{ds}@nope")], "Unable to obtain diffs");
    let nofs = pool.ds("nofs");
    fails(1, &[&format!("{nofs}@x")], "dataset does not exist");
    fails(
        1,
        &["@before", "@after"],
        "Unable to determine which snapshots",
    );
    let pool_snap = format!("{}@top", pool.name());
    oz.ok(&["zfs", "snapshot", &pool_snap]);
    fails(
        1,
        &[&pool_snap, &ds],
        "Not an earlier snapshot from the same fs",
    );
    oz.ok(&["zfs", "set", "mountpoint=none", &ds]);
    fails(1, &[&before], "Cannot diff an unmounted snapshot");
    oz.ok(&["zfs", "inherit", "mountpoint", &ds]);
    let mp2 = oz
        .ok(&["zfs", "get", "-H", "-o", "value", "mountpoint", &ds])
        .trim()
        .to_string();
    // Paths follow the mountpoint property.
    let out = oz.ok(&["zfs", "diff", "@after", &ds]);
    assert!(
        out.lines().any(|l| l == format!("-\t{mp2}/new.txt")),
        "mountpoint {mp2}:\n{out}"
    );
}

/// With the daemon: paths follow where it mounted the file system, and the
/// live file system is its current state (the daemon's open txg is
/// committed first), so a file written a moment ago is listed.
#[test]
fn zfs_diff_daemon() {
    let pool = new_devs("ozdiffd", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir("diffd");
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    let mut args: Vec<String> = vec!["zpool".into(), "create".into(), "-f".into()];
    args.extend([
        "-m".into(),
        mnt.to_string_lossy().into_owned(),
        name.clone(),
    ]);
    args.extend(pool.devs().iter().map(|d| d.to_string_lossy().into_owned()));
    let r = oz.run_env(&[("OZFS_CREATE_NOMOUNT", "0")], &args);
    assert!(r.success(), "{}", r.describe());
    assert!(is_mounted(&mnt), "zpool create -m did not mount");
    fs::write(mnt.join("old.txt"), b"before").unwrap();
    oz.ok(&["zfs", "snapshot", &format!("{name}@s")]);
    fs::write(mnt.join("fresh.txt"), b"just now").unwrap();
    let out = oz.ok(&["zfs", "diff", "-F", &format!("{name}@s")]);
    let m = mnt.to_string_lossy();
    assert_eq!(
        lines(&out),
        set(&[format!("M\t/\t{m}/"), format!("+\tF\t{m}/fresh.txt")]),
        "{out}"
    );
    oz_export(&oz, &name);
}
