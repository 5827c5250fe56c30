//! `zpool events`: the daemon's queue of recent events (zpool-events(8)).
//!
//! With no daemon the queue is empty (just the header). A mirror the daemon
//! holds (created, exported, imported so the daemon mounts it) posts
//! `pool_import`; `-H` drops the header and separates with a tab; `-c`
//! clears and says how many; a scrub posts `scrub_start` then
//! `scrub_finish` with increasing eids; one side of a data block damaged
//! makes the scrub post an `ereport.fs.zfs.checksum` naming that side's
//! path and guid (between the two); a pool filter hides other pools'
//! events; the export posts `pool_export`.

mod common;
mod wcommon;
use std::fs;
use wcommon::*;

/// Where a vdev's allocatable space starts on a leaf (past labels and boot
/// block).
const DATA_START: u64 = 4 << 20;

/// One event of `zpool events -v`: the class and the fields.
struct Ev {
    class: String,
    fields: Vec<(String, String)>,
}

impl Ev {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
    fn num(&self, k: &str) -> u64 {
        let v = self
            .get(k)
            .unwrap_or_else(|| panic!("{}: no {k}", self.class));
        u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    }
}

/// Parse `zpool events -v`: a `TIME CLASS` line, then `        name = value`
/// lines, then a blank line, per event.
fn parse_verbose(out: &str) -> Vec<Ev> {
    let mut v: Vec<Ev> = Vec::new();
    for line in out.lines().skip(1) {
        if let Some(f) = line.strip_prefix("        ") {
            let (n, val) = f.split_once(" = ").unwrap_or_else(|| panic!("{line}"));
            v.last_mut()
                .unwrap()
                .fields
                .push((n.to_string(), val.to_string()));
        } else if !line.is_empty() {
            let class = line.rsplit(' ').next().unwrap().to_string();
            v.push(Ev {
                class,
                fields: Vec::new(),
            });
        }
    }
    v
}

/// The classes listed by `zpool events [args]` (after the header).
fn classes(oz: &Ozfs, args: &[&str]) -> Vec<String> {
    let mut a = vec!["zpool", "events"];
    a.extend_from_slice(args);
    let out = oz.ok(&a);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(format!("{:<30} CLASS", "TIME").as_str()),
        "{out}"
    );
    lines
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect()
}

/// A level-0 block of 128 KiB with one DVA (file data), from zdb.
fn data_block(oz: &Ozfs, pool: &str) -> u64 {
    let out = oz.ok(&["zdb", "-ddddd", pool]);
    for line in out.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        if let Some(pos) = t.iter().position(|w| *w == "L0") {
            let dvas = t[pos + 1..].iter().filter(|w| w.matches(':').count() == 2);
            if dvas.count() == 1 && t.contains(&"20000L/20000P") {
                let dva: Vec<&str> = t[pos + 1].split(':').collect();
                return u64::from_str_radix(dva[1], 16).unwrap();
            }
        }
    }
    panic!("no single-copy 128K data block in:\n{out}");
}

/// The guid of the leaf at `path`, from `zdb -C`.
fn leaf_guid(oz: &Ozfs, pool: &str, path: &str) -> u64 {
    let out = oz.ok(&["zdb", "-C", pool]);
    let mut guid = None;
    for line in out.lines() {
        let l = line.trim();
        if let Some(g) = l.strip_prefix("guid: ") {
            guid = g.parse::<u64>().ok();
        }
        if l == format!("path: '{path}'") {
            return guid.unwrap();
        }
    }
    panic!("no leaf {path} in:\n{out}");
}

fn random_file(p: &std::path::Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    fs::write(p, v).unwrap();
}

#[test]
fn events_of_a_held_pool() {
    let pool = new_devs("ozevt", Layout::Mirror, 2, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir("events");
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };

    // No daemon: an empty queue, just the header; -c clears nothing.
    assert!(classes(&oz, &[]).is_empty());
    assert_eq!(oz.ok(&["zpool", "events", "-c"]).trim(), "cleared 0 events");
    // Usage errors as OpenZFS's.
    for bad in [
        vec!["zpool", "events", "-c", "-v"],
        vec!["zpool", "events", "a", "b"],
        vec!["zpool", "events", "bad/name"],
    ] {
        let r = oz.run(&bad);
        assert_eq!(r.code, Some(2), "{bad:?}: {}", r.describe());
    }

    oz_create_at(&oz, &pool, &mnt, None, &[]);
    let src = work.path().join("f");
    random_file(&src, 2_000_000, 11);
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let off = data_block(&oz, &name);
    let dev0 = pool.devs()[0].to_string_lossy().into_owned();
    let guid0 = leaf_guid(&oz, &name, &dev0);
    oz_export(&oz, &name);
    // The daemon takes the pool: pool_import.
    oz.ok(&[
        "zpool",
        "import",
        "-d",
        &pool.dev_dir().to_string_lossy(),
        &name,
    ]);
    assert!(is_mounted(&mnt), "the daemon did not mount the pool");
    let c = classes(&oz, &[]);
    assert_eq!(c, ["sysevent.fs.zfs.pool_import"], "after import");

    // -H: no header, TIME<tab>CLASS.
    let h = oz.ok(&["zpool", "events", "-H"]);
    let lines: Vec<&str> = h.lines().collect();
    assert_eq!(lines.len(), 1, "{h}");
    let (time, class) = lines[0].split_once('\t').unwrap();
    assert_eq!(class, "sysevent.fs.zfs.pool_import");
    // `Nov 25 2026 15:40:01.123456789`
    assert_eq!(time.len(), 30, "{time:?}");
    assert_eq!(&time[20..21], ".", "{time:?}");
    assert!(time[21..].bytes().all(|b| b.is_ascii_digit()), "{time:?}");

    // -c: cleared, then empty.
    assert_eq!(oz.ok(&["zpool", "events", "-c"]).trim(), "cleared 1 events");
    assert!(classes(&oz, &[]).is_empty());

    // One side of a data block damaged; the scrub finds it.
    let junk: Vec<u8> = (0..512).map(|j| (j as u8) ^ 0x5a).collect();
    damage::write_at(&pool.devs()[0], DATA_START + off, &junk).unwrap();
    oz.ok(&["zpool", "scrub", "-w", &name]);
    let out = oz.ok(&["zpool", "events", "-v", &name]);
    let evs = parse_verbose(&out);
    let got: Vec<&str> = evs.iter().map(|e| e.class.as_str()).collect();
    assert_eq!(
        got,
        [
            "sysevent.fs.zfs.scrub_start",
            "ereport.fs.zfs.checksum",
            "sysevent.fs.zfs.scrub_finish"
        ],
        "{out}"
    );
    let eids: Vec<u64> = evs.iter().map(|e| e.num("eid")).collect();
    assert!(eids.windows(2).all(|w| w[0] < w[1]), "eids {eids:?}");
    assert_eq!(eids[0], 2, "eids go on after a clear: {eids:?}");
    for e in &evs {
        assert_eq!(e.get("class"), Some(format!("\"{}\"", e.class).as_str()));
        assert_eq!(e.get("pool"), Some(format!("\"{name}\"").as_str()));
        assert!(e.get("time").is_some() && e.get("pool_guid").is_some());
    }
    let ck = &evs[1];
    assert_eq!(ck.get("vdev_path"), Some(format!("\"{dev0}\"").as_str()));
    assert_eq!(ck.num("vdev_guid"), guid0, "{out}");
    assert_eq!(ck.get("vdev_type"), Some("\"file\""));
    assert_eq!(ck.get("parent_type"), Some("\"mirror\""));
    assert_eq!(ck.num("vdev_cksum_errors"), 1);
    assert_eq!(ck.num("zio_offset"), DATA_START + off);
    assert_eq!(ck.num("zio_size"), 0x20000);

    // A pool filter: another pool's name hides them.
    assert!(classes(&oz, &["ozevtother"]).is_empty());
    assert_eq!(classes(&oz, &[&name]).len(), 3);

    // Export: pool_export (the daemon lives on briefly).
    oz_export(&oz, &name);
    let c = classes(&oz, &[]);
    if !c.is_empty() {
        assert_eq!(c.last().unwrap(), "sysevent.fs.zfs.pool_export", "{c:?}");
    }
}

/// `zpool create` handing the pool to the daemon posts `pool_create`;
/// device operations post OpenZFS's classes about the right device; a
/// pool filter separates two held pools; `-f` prints events as they come.
#[test]
fn device_operations_and_follow() {
    use std::io::BufRead;
    let pool = new_devs("ozevd", Layout::Mirror, 2, 128);
    let other = new_devs("ozevo", Layout::Stripe, 1, 96);
    let (name, oname) = (pool.name().to_string(), other.name().to_string());
    let oz = ozfs();
    let work = local_dir("evdev");
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let omnt = work.path().canonicalize().unwrap().join("omnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), omnt.clone()],
    };
    for (p, m, kw) in [(&pool, &mnt, Some("mirror")), (&other, &omnt, None)] {
        let mut args: Vec<String> = vec!["zpool".into(), "create".into(), "-f".into()];
        args.extend(["-m".into(), m.to_string_lossy().into_owned()]);
        args.push(p.name().to_string());
        args.extend(kw.map(String::from));
        args.extend(p.devs().iter().map(|d| d.to_string_lossy().into_owned()));
        let r = oz.run_env(&[("OZFS_CREATE_NOMOUNT", "0")], &args);
        assert!(r.success(), "{}", r.describe());
    }
    assert_eq!(classes(&oz, &[&name]), ["sysevent.fs.zfs.pool_create"]);
    assert_eq!(classes(&oz, &[&oname]), ["sysevent.fs.zfs.pool_create"]);
    assert_eq!(classes(&oz, &[]).len(), 2);
    oz.ok(&["zpool", "events", "-c"]);

    let dev1 = pool.devs()[1].to_string_lossy().into_owned();
    let dev0 = pool.devs()[0].to_string_lossy().into_owned();
    let extra = work.path().join("extra.img");
    fs::File::create(&extra)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let extra = extra.to_string_lossy().into_owned();
    oz.ok(&["zpool", "offline", &name, &dev1]);
    oz.ok(&["zpool", "online", &name, &dev1]);
    oz.ok(&["zpool", "wait", "-t", "resilver", &name]);
    oz.ok(&["zpool", "attach", "-w", &name, &dev0, &extra]);
    oz.ok(&["zpool", "detach", &name, &extra]);
    let out = oz.ok(&["zpool", "events", "-v", &name]);
    let evs = parse_verbose(&out);
    let got: Vec<(&str, Option<&str>)> = evs
        .iter()
        .map(|e| (e.class.as_str(), e.get("vdev_path")))
        .collect();
    let q = |s: &str| format!("\"{s}\"");
    let (d1, ex) = (q(&dev1), q(&extra));
    assert_eq!(
        got,
        [
            ("resource.fs.zfs.statechange", Some(d1.as_str())),
            ("sysevent.fs.zfs.vdev_online", Some(d1.as_str())),
            ("sysevent.fs.zfs.resilver_start", None),
            ("sysevent.fs.zfs.resilver_finish", None),
            ("sysevent.fs.zfs.vdev_attach", Some(ex.as_str())),
            ("sysevent.fs.zfs.resilver_start", None),
            ("sysevent.fs.zfs.resilver_finish", None),
            ("sysevent.fs.zfs.vdev_remove", Some(ex.as_str())),
        ],
        "{out}"
    );
    assert_eq!(evs[0].get("vdev_state"), Some("\"OFFLINE\" (0x2)"), "{out}");
    assert_eq!(
        evs[0].get("vdev_laststate"),
        Some("\"ONLINE\" (0x7)"),
        "{out}"
    );
    assert!(classes(&oz, &[&oname]).is_empty(), "other pool's events");

    // -f: waits, and prints the scrub's events as they come.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ozfs"))
        .args(["zpool", "events", "-f", "-H", &oname])
        .env("OZFS_STATE_DIR", oz.state_dir())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
        {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    oz.ok(&["zpool", "scrub", "-w", &oname]);
    let mut seen = Vec::new();
    let t0 = std::time::Instant::now();
    while !seen.iter().any(|c: &String| c.ends_with("scrub_finish")) {
        let left = std::time::Duration::from_secs(20).saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l.rsplit('\t').next().unwrap().to_string()),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        seen,
        [
            "sysevent.fs.zfs.scrub_start",
            "sysevent.fs.zfs.scrub_finish"
        ],
        "zpool events -f"
    );
    oz_export(&oz, &oname);
    oz_export(&oz, &name);
}
