//! (i) A device removed under a steady write load, replaced and resilvered
//! (issue 5).
//!
//! ozfs creates a two-way mirror and a raidz1 pool; the daemon imports and
//! mounts each with deterministic fault injection armed
//! (`OZFS_FAULT_GONE=<marker>`: once the marker names a device, every I/O
//! to it fails with ENXIO, as a pulled disk). A thread writes files through
//! the mount (fsync every few files) the whole time. Mid-way one device is
//! pulled: the pool must go DEGRADED with that device REMOVED while writes
//! go on; `zpool replace -w POOL OLD NEW` puts a fresh file in its place
//! and resilvers; the pool is ONLINE again, a scrub afterwards finds
//! nothing to repair (the resilver was complete), every file written
//! before, during and after verifies, and after export (and the pulled
//! device file removed) zfs-fuse's `zdb -bcc` is clean.

mod common;
mod wcommon;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wcommon::*;

/// `zpool import` through the daemon with the fault injection `env`
/// armed; the pool must be mounted at `mnt` after it.
fn import_armed(oz: &Ozfs, env: &[(&str, String)], pool: &TestPool, mnt: &Path) {
    let r = oz.run_env(
        env,
        &[
            "zpool",
            "import",
            "-d",
            &pool.dev_dir().to_string_lossy(),
            pool.name(),
        ],
    );
    assert!(r.success(), "{}", r.describe());
    assert!(is_mounted(mnt), "not mounted after import");
}

fn content(i: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let len = 16 * 1024 + (i % 7) * 14_000;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A thread writing files `load/fNNNNN` (content(i), fsync every fifth)
/// through mount `mnt` until `stop` (at least `min`, at most `max` files);
/// `written` counts them. Returns once 20 are written.
fn write_load(
    mnt: &Path,
    stop: &Arc<AtomicBool>,
    written: &Arc<AtomicUsize>,
    min: usize,
    max: usize,
) -> std::thread::JoinHandle<()> {
    let counter = written.clone();
    let (stop, written, dir) = (stop.clone(), written.clone(), mnt.join("load"));
    let h = std::thread::spawn(move || {
        fs::create_dir_all(&dir).unwrap();
        let mut i = 0;
        while (!stop.load(Ordering::Relaxed) || i < min) && i < max {
            let p = dir.join(format!("f{i:05}"));
            let mut f = fs::File::create(&p).unwrap_or_else(|e| panic!("create {i}: {e}"));
            f.write_all(&content(i))
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            if i % 5 == 4 {
                f.sync_all().unwrap_or_else(|e| panic!("fsync {i}: {e}"));
            }
            i += 1;
            written.store(i, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    while counter.load(Ordering::Relaxed) < 20 && !h.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    h
}

/// Bytes the last scan visited (from its state file) and the pool's
/// allocated bytes.
fn last_scan_share(oz: &Ozfs, name: &str) -> (u64, u64) {
    let scan = fs::read_to_string(oz.state_dir().join(format!("{name}.scan.json"))).unwrap();
    let examined: u64 = scan
        .split("\"examined\":")
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let alloc: u64 = oz
        .ok(&["zpool", "list", "-Hp", "-o", "alloc", name])
        .trim()
        .parse()
        .unwrap();
    (examined, alloc)
}

fn state_of(status: &str, dev: &Path) -> Option<String> {
    let rows = parse_status(status);
    status_row(&rows, dev).map(|r| r.state.clone())
}

fn pulled_disk(layout: Layout, ndev: usize, tag: &str) {
    let t0 = Instant::now();
    let pool = new_devs(&format!("ozrsv{tag}"), layout, ndev, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir(tag);
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    let marker = work.path().join("pulled");
    let env = [("OZFS_FAULT_GONE", marker.to_string_lossy().into_owned())];
    let spare = pool.dev_dir().join("new0");
    fs::File::create(&spare)
        .unwrap()
        .set_len(128 * MIB)
        .unwrap();

    oz_create_at(&oz, &pool, &mnt, None, &[]);
    oz_export(&oz, &name);
    // The import starts the daemon (with the fault injection armed) and mounts.
    import_armed(&oz, &env, &pool, &mnt);
    phase(&format!("{tag}: imported and mounted"), t0);

    // A steady write load.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    // At most 500 files (about 29 MiB): the devices are small.
    let writer = write_load(&mnt, &stop, &written, 60, 500);

    // Pull a disk.
    let pulled = pool.devs()[0].clone();
    fs::write(&marker, format!("{}\n", pulled.display())).unwrap();
    let before = written.load(Ordering::Relaxed);
    let t = Instant::now();
    let status = loop {
        let s = oz.ok(&["zpool", "status", &name]);
        // A device that went away (ENXIO) shows REMOVED, as on ZFS.
        if state_of(&s, &pulled).as_deref() == Some("REMOVED") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "device never faulted:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.contains("state: DEGRADED"), "{status}");
    while written.load(Ordering::Relaxed) < before + 20 {
        assert!(!writer.is_finished(), "the writer died");
        std::thread::sleep(Duration::from_millis(20));
    }
    phase(&format!("{tag}: degraded, writes go on"), t0);

    // Replace it with a fresh device and resilver.
    oz.ok(&[
        "zpool",
        "replace",
        "-w",
        &name,
        &pulled.to_string_lossy(),
        &spare.to_string_lossy(),
    ]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(st.contains("state: ONLINE"), "{st}");
    assert!(st.contains("resilvered"), "{st}");
    assert_eq!(state_of(&st, &spare).as_deref(), Some("ONLINE"), "{st}");
    assert!(state_of(&st, &pulled).is_none(), "{st}");
    phase(&format!("{tag}: replaced and resilvered"), t0);
    let during = written.load(Ordering::Relaxed);
    while written.load(Ordering::Relaxed) < during + 10 {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    let n = written.load(Ordering::Relaxed);

    // Nothing left for a scrub to repair; every file verifies.
    let st = oz_scrub_clean(&oz, &name, "scrub after the resilver");
    let rows = parse_status(&st);
    assert!(
        rows.iter().all(|r| r.cksum == 0),
        "checksum errors after the resilver:\n{st}"
    );
    for i in 0..n {
        let got = fs::read(mnt.join(format!("load/f{i:05}"))).unwrap();
        assert!(got == content(i), "load/f{i:05} differs");
    }
    phase(&format!("{tag}: {n} files verified"), t0);

    // Offline for a while, then online: only what was written meanwhile is
    // resilvered (block birth times), and a scrub finds nothing missing.
    let other = pool.devs()[1].clone();
    oz.ok(&["zpool", "offline", &name, &other.to_string_lossy()]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert_eq!(state_of(&st, &other).as_deref(), Some("OFFLINE"), "{st}");
    assert!(st.contains("state: DEGRADED"), "{st}");
    for i in n..n + 10 {
        let mut f = fs::File::create(mnt.join(format!("load/f{i:05}"))).unwrap();
        f.write_all(&content(i)).unwrap();
        f.sync_all().unwrap();
    }
    oz.ok(&["zpool", "online", &name, &other.to_string_lossy()]);
    let t = Instant::now();
    let st = loop {
        let s = oz.ok(&["zpool", "status", &name]);
        if !s.contains("in progress") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "resilver does not end:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        st.contains("resilvered") && st.contains("state: ONLINE"),
        "{st}"
    );
    let (examined, alloc) = last_scan_share(&oz, &name);
    assert!(
        examined * 3 < alloc,
        "resilver after online visited {examined} of {alloc} allocated bytes"
    );
    oz_scrub_clean(&oz, &name, "scrub after online");
    for i in 0..n + 10 {
        assert!(fs::read(mnt.join(format!("load/f{i:05}"))).unwrap() == content(i));
    }
    phase(&format!("{tag}: offline/online"), t0);

    oz.ok(&["zpool", "export", &name]);
    assert!(!is_mounted(&mnt));
    fs::remove_file(&pulled).unwrap();
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: after resilver"));
    phase(&format!("{tag}: done"), t0);
}

#[test]
fn pulled_disk_mirror() {
    pulled_disk(Layout::Mirror, 2, "mirror");
}

#[test]
fn pulled_disk_raidz1() {
    pulled_disk(Layout::Raidz1, 3, "raidz1");
}

/// `zpool attach` turns a single device into a mirror (and widens it),
/// resilvering the new side; `zpool detach` narrows it back to a single
/// device. Every step scrubs clean, and zfs-fuse's zdb is clean at the end.
#[test]
fn attach_detach() {
    let t0 = Instant::now();
    let tag = "attach";
    let pool = new_devs("ozattach", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("f{i}")), content(i)).unwrap();
    }
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let d0 = pool.devs()[0].clone();
    let extra: Vec<PathBuf> = (1..3)
        .map(|i| pool.dev_dir().join(format!("x{i}")))
        .collect();
    for x in &extra {
        fs::File::create(x).unwrap().set_len(128 * MIB).unwrap();
    }
    let scrub_clean = |what: &str| {
        oz.ok(&["zpool", "scrub", &name]);
        let st = oz.ok(&["zpool", "status", &name]);
        assert!(
            st.contains("repaired 0B") && st.contains("with 0 errors"),
            "{what}:\n{st}"
        );
        assert!(
            parse_status(&st).iter().all(|r| r.cksum == 0),
            "{what}:\n{st}"
        );
        st
    };
    oz.ok(&[
        "zpool",
        "attach",
        &name,
        &d0.to_string_lossy(),
        &extra[0].to_string_lossy(),
    ]);
    let st = scrub_clean("after attach");
    assert!(st.contains("mirror-0"), "{st}");
    oz.ok(&[
        "zpool",
        "attach",
        &name,
        &extra[0].to_string_lossy(),
        &extra[1].to_string_lossy(),
    ]);
    scrub_clean("after the second attach");
    oz.ok(&["zpool", "detach", &name, &d0.to_string_lossy()]);
    oz.ok(&["zpool", "detach", &name, &extra[1].to_string_lossy()]);
    let st = scrub_clean("after detaching down to one device");
    assert!(!st.contains("mirror-0"), "{st}");
    let r = oz.run(&["zpool", "detach", &name, &extra[0].to_string_lossy()]);
    assert_eq!(
        r.code,
        Some(1),
        "detaching the last device: {}",
        r.describe()
    );
    let out = work.path().join("out");
    oz.ok(&[
        "cp".to_string(),
        "-r".into(),
        format!("{name}:/src"),
        out.to_string_lossy().into_owned(),
    ]);
    for i in 0..20 {
        assert!(fs::read(out.join(format!("f{i}"))).unwrap() == content(i));
    }
    oz_export(&oz, &name);
    // The detached devices still carry old labels: gone, as disks pulled out.
    fs::remove_file(&d0).unwrap();
    fs::remove_file(&extra[1]).unwrap();
    assert_zdb_clean(&pool, &pool.dev_dir(), "after attach/detach");
    phase(&format!("{tag}: done"), t0);
}

/// `zpool add`: a mirror added to a single-device pool takes new
/// allocations (its space maps are created as it fills); the pool scrubs
/// clean and zfs-fuse's zdb finds no leak after export.
#[test]
fn add_vdev() {
    let t0 = Instant::now();
    let tag = "add";
    let pool = new_devs("ozadd", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..10 {
        fs::write(src.join(format!("f{i}")), content(i)).unwrap();
    }
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let extra: Vec<PathBuf> = (1..3)
        .map(|i| pool.dev_dir().join(format!("m{i}")))
        .collect();
    for x in &extra {
        fs::File::create(x).unwrap().set_len(128 * MIB).unwrap();
    }
    let r = oz.run(&["zpool", "add", &name, "mirror", &extra[0].to_string_lossy()]);
    assert_eq!(r.code, Some(1), "a one-device mirror: {}", r.describe());
    oz.ok(&[
        "zpool",
        "add",
        &name,
        "mirror",
        &extra[0].to_string_lossy(),
        &extra[1].to_string_lossy(),
    ]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(st.contains("mirror-1"), "{st}");
    // Enough new data that the rotor puts some on the new vdev.
    let more = work.path().join("more");
    fs::create_dir_all(&more).unwrap();
    for i in 10..40 {
        fs::write(more.join(format!("f{i}")), content(i)).unwrap();
    }
    oz_cp_in(&oz, &more, &format!("{name}:/"));
    oz.ok(&["zpool", "scrub", &name]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(
        st.contains("repaired 0B") && st.contains("with 0 errors"),
        "{st}"
    );
    let list = oz.ok(&["zpool", "list", "-Hp", "-o", "size", &name]);
    assert!(
        list.trim().parse::<u64>().unwrap() > 200 * MIB,
        "size after add: {list}"
    );
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), "after zpool add");
    phase(&format!("{tag}: done"), t0);
}

/// An offline device stays offline across export and import, and `zpool
/// online` afterwards still resilvers only what was written while it was
/// away (its txg is kept beside the pool's record); a scrub then finds
/// nothing to repair.
#[test]
fn offline_across_export() {
    let t0 = Instant::now();
    let tag = "offexp";
    let pool = new_devs("ozoffexp", Layout::Mirror, 2, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..40 {
        fs::write(src.join(format!("f{i}")), content(i)).unwrap();
    }
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let d0 = pool.devs()[0].clone();
    oz.ok(&["zpool", "offline", &name, &d0.to_string_lossy()]);
    let late = work.path().join("late");
    fs::create_dir_all(&late).unwrap();
    fs::write(late.join("g"), content(99)).unwrap();
    oz_cp_in(&oz, &late, &format!("{name}:/"));
    oz_export(&oz, &name);
    oz.ok(&[
        "zpool",
        "import",
        "-N",
        "-d",
        &pool.dev_dir().to_string_lossy(),
        &name,
    ]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert_eq!(state_of(&st, &d0).as_deref(), Some("OFFLINE"), "{st}");
    oz.ok(&["zpool", "online", &name, &d0.to_string_lossy()]);
    let (examined, alloc) = last_scan_share(&oz, &name);
    assert!(
        examined * 3 < alloc,
        "online visited {examined} of {alloc} bytes"
    );
    oz.ok(&["zpool", "scrub", &name]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(
        st.contains("repaired 0B") && st.contains("with 0 errors"),
        "{st}"
    );
    assert!(parse_status(&st).iter().all(|r| r.cksum == 0), "{st}");
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), "after offline, export, online");
    phase(&format!("{tag}: done"), t0);
}

/// The state `zpool status` gives hot spare `dev` in its `spares` section.
fn spare_state_of(status: &str, dev: &Path) -> Option<String> {
    let full = dev.to_string_lossy();
    let mut in_spares = false;
    for l in status.lines() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.first() == Some(&"spares") {
            in_spares = true;
            continue;
        }
        if in_spares && t.first() == Some(&&*full) {
            return t.get(1).map(|s| s.to_string());
        }
        if in_spares && t.is_empty() {
            break;
        }
    }
    None
}

/// Wait until no scan is in progress; the status then.
fn scans_done(oz: &Ozfs, name: &str, what: &str) -> String {
    let t = Instant::now();
    loop {
        let s = oz.ok(&["zpool", "status", name]);
        if !s.contains("in progress") {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{what}: the scan does not end:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Hot spares (issue 5). A raidz1 pool is created with a spare (`create
/// ... spare`), a second spare is added and removed again. Under the
/// daemon, with a write load running, a disk is pulled: the daemon puts the
/// spare in its place on its own (a `spare` vdev, the spare INUSE) and
/// resilvers onto it; files verify and a scrub finds nothing to repair.
/// `zpool replace` of the pulled disk with a new one then gives the spare
/// back (AVAIL, pool ONLINE). A second pull takes the spare again, and
/// `zpool detach` of that pulled disk makes the spare a permanent member
/// (it leaves the spares list). zfs-fuse's zdb is clean after export.
#[test]
fn hot_spare() {
    let t0 = Instant::now();
    let tag = "spare";
    let pool = new_devs("ozspare", Layout::Raidz1, 3, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir(tag);
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    let marker = work.path().join("pulled");
    let env = [("OZFS_FAULT_GONE", marker.to_string_lossy().into_owned())];
    let dev = |n: &str| {
        let p = pool.dev_dir().join(n);
        fs::File::create(&p).unwrap().set_len(128 * MIB).unwrap();
        p.canonicalize().unwrap()
    };
    let (s1, s2, new0) = (dev("s1"), dev("s2"), dev("new0"));
    // Version 23: zfs-fuse judges the pool.
    let mut args: Vec<String> = ["zpool", "create", "-f", "-o", "version=23", "-m"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(mnt.to_string_lossy().into_owned());
    args.push(name.clone());
    args.push("raidz1".into());
    args.extend(pool.devs().iter().map(|d| d.to_string_lossy().into_owned()));
    args.push("spare".into());
    args.push(s1.to_string_lossy().into_owned());
    oz.ok(&args);
    oz.ok(&["zpool", "add", &name, "spare", &s2.to_string_lossy()]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert_eq!(spare_state_of(&st, &s1).as_deref(), Some("AVAIL"), "{st}");
    assert_eq!(spare_state_of(&st, &s2).as_deref(), Some("AVAIL"), "{st}");
    // A spare cannot be both, nor used twice.
    let r = oz.run(&["zpool", "add", &name, "spare", &s1.to_string_lossy()]);
    assert_eq!(r.code, Some(1), "a spare added twice: {}", r.describe());
    oz.ok(&["zpool", "remove", &name, &s2.to_string_lossy()]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(spare_state_of(&st, &s2).is_none(), "{st}");
    let r = oz.run(&["zpool", "remove", &name, &pool.devs()[1].to_string_lossy()]);
    assert_eq!(r.code, Some(1), "removing a raidz member: {}", r.describe());
    oz_export(&oz, &name);
    import_armed(&oz, &env, &pool, &mnt);
    let st = oz.ok(&["zpool", "status", &name]);
    assert_eq!(spare_state_of(&st, &s1).as_deref(), Some("AVAIL"), "{st}");
    phase(&format!("{tag}: created, imported"), t0);

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = write_load(&mnt, &stop, &written, 40, 300);

    // Pull a disk: the daemon activates the spare by itself.
    let pulled = pool.devs()[0].clone();
    fs::write(&marker, format!("{}\n", pulled.display())).unwrap();
    let t = Instant::now();
    loop {
        let s = oz.ok(&["zpool", "status", &name]);
        if spare_state_of(&s, &s1).as_deref() == Some("INUSE") && !s.contains("in progress") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the spare never took over:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = scans_done(&oz, &name, "spare resilver");
    assert!(st.contains("spare-0"), "{st}");
    // zpool events: the pulled disk's I/O error and state change
    // (REMOVED), then the spare's vdev_spare and vdev_attach, then its
    // resilver, in that order.
    let ev = oz.ok(&["zpool", "events", "-v", &name]);
    let on = |p: &std::path::Path| format!("vdev_path = \"{}\"", p.display());
    let want = [
        ("ereport.fs.zfs.io", on(&pulled)),
        ("resource.fs.zfs.statechange", on(&pulled)),
        ("sysevent.fs.zfs.vdev_spare", on(&s1)),
        ("sysevent.fs.zfs.vdev_attach", on(&s1)),
        ("sysevent.fs.zfs.resilver_start", String::new()),
        ("sysevent.fs.zfs.resilver_finish", String::new()),
    ];
    let mut it = ev.split("\n\n");
    for (class, field) in &want {
        assert!(
            it.any(
                |b| b.lines().any(|l| !l.starts_with(' ') && l.ends_with(class))
                    && b.contains(field)
            ),
            "no {class} with {field} (in order) in:\n{ev}"
        );
    }
    assert!(
        ev.contains("vdev_state = \"REMOVED\" (0x3)"),
        "statechange of the pulled disk:\n{ev}"
    );
    assert!(st.contains("resilvered"), "{st}");
    assert_eq!(state_of(&st, &pulled).as_deref(), Some("REMOVED"), "{st}");
    assert_eq!(state_of(&st, &s1).as_deref(), Some("ONLINE"), "{st}");
    phase(&format!("{tag}: spare took over"), t0);
    let now = written.load(Ordering::Relaxed);
    while written.load(Ordering::Relaxed) < now + 10 {
        assert!(!writer.is_finished(), "the writer died");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    let n = written.load(Ordering::Relaxed);
    oz_scrub_clean(&oz, &name, "scrub with the spare in use");
    for i in 0..n {
        assert!(
            fs::read(mnt.join(format!("load/f{i:05}"))).unwrap() == content(i),
            "load/f{i:05} differs"
        );
    }
    phase(&format!("{tag}: {n} files verified on the spare"), t0);

    // Replace the pulled disk: the spare goes back to the spares.
    oz.ok(&[
        "zpool",
        "replace",
        "-w",
        &name,
        &pulled.to_string_lossy(),
        &new0.to_string_lossy(),
    ]);
    let st = scans_done(&oz, &name, "replacement");
    assert!(st.contains("state: ONLINE"), "{st}");
    assert!(!st.contains("spare-0"), "{st}");
    assert_eq!(spare_state_of(&st, &s1).as_deref(), Some("AVAIL"), "{st}");
    assert_eq!(state_of(&st, &new0).as_deref(), Some("ONLINE"), "{st}");
    assert!(state_of(&st, &s1).is_none(), "{st}");
    oz_scrub_clean(&oz, &name, "scrub");
    phase(&format!("{tag}: replaced, spare released"), t0);

    // A second pull takes the spare again; detaching the pulled disk makes
    // the spare a permanent member.
    let pulled2 = pool.devs()[1].clone();
    fs::write(&marker, format!("{}\n", pulled2.display())).unwrap();
    // Reads and writes find the device gone.
    for i in n..n + 10 {
        let mut f = fs::File::create(mnt.join(format!("load/f{i:05}"))).unwrap();
        f.write_all(&content(i)).unwrap();
        f.sync_all().unwrap();
    }
    let t = Instant::now();
    loop {
        let s = oz.ok(&["zpool", "status", &name]);
        if spare_state_of(&s, &s1).as_deref() == Some("INUSE") && !s.contains("in progress") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the spare never took over the second time:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    scans_done(&oz, &name, "second spare resilver");
    oz.ok(&["zpool", "detach", &name, &pulled2.to_string_lossy()]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(st.contains("state: ONLINE"), "{st}");
    assert!(spare_state_of(&st, &s1).is_none(), "{st}");
    assert!(!st.contains("spares"), "{st}");
    assert_eq!(state_of(&st, &s1).as_deref(), Some("ONLINE"), "{st}");
    oz_scrub_clean(&oz, &name, "scrub");
    for i in 0..n + 10 {
        assert!(fs::read(mnt.join(format!("load/f{i:05}"))).unwrap() == content(i));
    }
    phase(&format!("{tag}: spare made permanent"), t0);

    // zfs-fuse checks a pool with an available spare too.
    oz.ok(&["zpool", "add", &name, "spare", &s2.to_string_lossy()]);
    oz.ok(&["zpool", "export", &name]);
    fs::remove_file(&pulled).unwrap();
    fs::remove_file(&pulled2).unwrap();
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: after spares"));
    // zfs-fuse imports it and knows the available spare (its label and the
    // MOS list) and the permanent one (a plain member now).
    let mut pool = pool;
    pool.import()
        .unwrap_or_else(|e| panic!("[{tag}] zfs-fuse cannot import: {e}"));
    let zst = pool.zpool(&["status", &name]).unwrap();
    assert!(zst.contains("state: ONLINE"), "zfs-fuse status:\n{zst}");
    let s2_line = zst
        .lines()
        .find(|l| l.contains("/s2"))
        .unwrap_or_else(|| panic!("zfs-fuse does not list the spare:\n{zst}"));
    assert!(s2_line.contains("AVAIL"), "zfs-fuse status:\n{zst}");
    assert!(zst.contains("spares"), "zfs-fuse status:\n{zst}");
    pool.export().unwrap();
    phase(&format!("{tag}: done"), t0);
}
