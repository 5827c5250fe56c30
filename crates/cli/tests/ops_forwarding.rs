//! Operations on a pool the daemon holds behave as when no daemon runs:
//! the request is typed, the daemon runs it, and the command prints the
//! result it gets back.
//!
//! Each check is one that the old argv forwarding got wrong:
//! * `zfs destroy -d` was not forwarded (its flag missing from a list) and
//!   failed with "pool is busy" while the daemon held the pool;
//! * `zfs create -o mountpoint=/x` was not mounted by the daemon (it read
//!   any option containing a `u` as `-u`);
//! * forwarded commands printed into the daemon's log, not to the user:
//!   `zfs destroy -nv`, `zfs receive -v`, `zpool add -n`.
//!
//! Each is compared with the same command run without the daemon, on a
//! second pool.

mod common;
mod wcommon;
use std::fs;
use wcommon::*;

#[test]
fn forwarded_operations_print_and_act_as_direct_ones() {
    let tag = "opsfwd";
    let pool = new_devs("ozfwd", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir();
    let oz = ozfs();
    let work = local_dir(tag);
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let elsewhere = root.join("elsewhere");
    let spare = root.join("spare.img");
    fs::File::create(&spare)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), mnt.join("a"), elsewhere.clone()],
    };
    let ds_a = format!("{name}/a");

    oz_create_at(&oz, &pool, &mnt, None, &[]);
    oz.ok(&["zfs", "create", &ds_a]);
    oz.ok(&["zfs", "snapshot", &format!("{ds_a}@s1")]);
    oz.ok(&["zfs", "snapshot", &format!("{ds_a}@s2")]);
    // Without the daemon: what the user sees.
    let direct = oz.run(&["zfs", "destroy", "-nv", &format!("{ds_a}@s1")]);
    assert!(direct.success(), "{}", direct.describe());
    assert_eq!(direct.stdout, format!("would destroy {ds_a}@s1\n"));
    let add_direct = oz.ok(&[
        "zpool",
        "add",
        "-n",
        &name,
        "spare",
        &spare.to_string_lossy(),
    ]);
    assert!(
        add_direct.contains("would update"),
        "zpool add -n: {add_direct}"
    );
    let stream = root.join("a.stream");
    let sent = oz.sh(&format!(
        "\"$OZFS\" zfs send {ds_a}@s1 > '{}'",
        stream.display()
    ));
    assert!(sent.success(), "{}", sent.describe());
    oz_export(&oz, &name);

    // The daemon holds the pool from here on.
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(is_mounted(&mnt) && is_mounted(&mnt.join("a")));

    // destroy -nv: the plan printed here, nothing destroyed.
    let fwd = oz.run(&["zfs", "destroy", "-nv", &format!("{ds_a}@s1")]);
    assert!(fwd.success(), "{}", fwd.describe());
    assert_eq!(
        fwd.stdout, direct.stdout,
        "forwarded destroy -nv prints the plan"
    );
    let snaps = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert!(snaps.contains(&format!("{ds_a}@s1")), "{snaps}");

    // destroy -d: run by the daemon (was: "pool is busy").
    let d = oz.run(&["zfs", "destroy", "-d", &format!("{ds_a}@s2")]);
    assert!(d.success(), "zfs destroy -d: {}", d.describe());
    let snaps = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert!(!snaps.contains(&format!("{ds_a}@s2")), "{snaps}");

    // create -o mountpoint=…: mounted there at once.
    let ds_x = format!("{name}/x");
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        &format!("mountpoint={}", elsewhere.display()),
        &ds_x,
    ]);
    assert!(
        is_mounted(&elsewhere),
        "zfs create -o mountpoint= must mount {}",
        elsewhere.display()
    );
    fs::write(elsewhere.join("f"), b"through the new mount").unwrap();

    // receive -v: the summary printed here.
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs receive -v {name}/copy < '{}'",
        stream.display()
    ));
    assert!(r.success(), "{}", r.describe());
    assert!(
        r.stderr.contains(&format!("into {name}/copy@s1")) && r.stderr.contains("received "),
        "forwarded receive -v prints its summary:\n{}",
        r.describe()
    );

    // zpool add -n: the same line as without the daemon.
    let add_fwd = oz.ok(&[
        "zpool",
        "add",
        "-n",
        &name,
        "spare",
        &spare.to_string_lossy(),
    ]);
    assert_eq!(add_fwd, add_direct);

    // A failure keeps its message and exit code.
    let bad = oz.run(&["zfs", "destroy", &format!("{name}/nosuch")]);
    assert_eq!(bad.code, Some(1), "{}", bad.describe());
    assert!(
        bad.stderr.contains("dataset does not exist"),
        "{}",
        bad.describe()
    );

    oz_export(&oz, &name);
    assert!(!is_mounted(&elsewhere));
    assert_zdb_clean(&pool, &dev_dir, "after forwarded operations");
}
