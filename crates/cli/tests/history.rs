//! `zpool history`: the pool's command history kept in the pool as ZFS
//! keeps it. ozfs logs its commands and zfs-fuse reads them; zfs-fuse logs
//! its own (and its internal events) and ozfs prints them exactly as
//! zfs-fuse does; a damaged history object is an error, never a panic.
//! (The ring buffer's wrap-around is tested in-process in
//! `ozfs_format::history`.)

mod common;
mod wcommon;
use wcommon::*;

/// The command part of each record line (after the timestamp), for the
/// records of `out` (a `zpool history` listing).
fn commands(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.is_empty() && !l.starts_with("History for"))
        .map(|l| match l.split_once(' ') {
            Some((_, c)) => c.to_string(),
            None => panic!("history line without a timestamp: {l:?}"),
        })
        .collect()
}

#[test]
fn ozfs_logs_its_commands_and_zfs_fuse_reads_them() {
    let oz = ozfs();
    let mut pool = new_devs("ozhist", Layout::Stripe, 1, 96);
    let name = pool.name().to_string();
    oz_create(&oz, &pool, None, &[]);
    let a = pool.ds("a");
    let steps: Vec<Vec<String>> = vec![
        vec!["zfs".into(), "create".into(), a.clone()],
        vec![
            "zfs".into(),
            "set".into(),
            "compression=lzjb".into(),
            a.clone(),
        ],
        vec!["zfs".into(), "snapshot".into(), format!("{a}@s1")],
        vec!["zfs".into(), "rename".into(), a.clone(), pool.ds("b")],
        vec![
            "zfs".into(),
            "inherit".into(),
            "compression".into(),
            pool.ds("b"),
        ],
        vec![
            "zfs".into(),
            "destroy".into(),
            format!("{}@s1", pool.ds("b")),
        ],
    ];
    for s in &steps {
        oz.ok(s);
    }
    // Not a change: not logged.
    oz.ok(&["zfs", "destroy", "-n", &pool.ds("b")]);
    let ours = oz.ok(&["zpool", "history", &name]);
    let got = commands(&ours);
    let mut want = vec![format!(
        "zpool create -f -o version=23 -m {} {name} {}",
        pool.mountpoint("").display(),
        pool.devs()[0].display()
    )];
    want.extend(steps.iter().map(|s| s.join(" ")));
    assert_eq!(got, want, "ozfs zpool history:\n{ours}");
    assert!(
        ours.starts_with(&format!("History for '{name}':\n")),
        "{ours}"
    );
    let long = oz.ok(&["zpool", "history", "-l", &name]);
    assert!(long.contains(" [user root on "), "{long}");
    oz_export(&oz, &name);
    want.push(format!("zpool export {name}"));
    assert_zdb_clean(&pool, &pool.dev_dir(), "history");
    pool.import().expect("zfs-fuse import");
    let zf = pool.zpool(&["history", &name]).expect("zfs-fuse history");
    let zf_cmds = commands(&zf);
    // zfs-fuse adds its own import.
    assert_eq!(
        &zf_cmds[..want.len()],
        &want[..],
        "zfs-fuse zpool history:\n{zf}"
    );
    assert!(zf_cmds[want.len()].starts_with("zpool import"), "{zf}");
    // Timestamps read the same.
    let ours_lines: Vec<&str> = ours.lines().filter(|l| l.starts_with("20")).collect();
    let zf_lines: Vec<&str> = zf.lines().filter(|l| l.starts_with("20")).collect();
    assert_eq!(&zf_lines[..ours_lines.len()], &ours_lines[..]);
}

#[test]
fn ozfs_prints_zfs_fuse_history_as_zfs_fuse_does() {
    let oz = ozfs();
    let mut pool = TestPool::create(Layout::Stripe, 1, 96 * MIB).expect("zfs-fuse pool");
    let name = pool.name().to_string();
    let a = pool.ds("a");
    pool.zfs(&["create", &a]).unwrap();
    pool.zfs(&["snapshot", &format!("{a}@s1")]).unwrap();
    pool.zfs(&["set", "compression=on", &a]).unwrap();
    pool.zfs(&["destroy", &format!("{a}@s1")]).unwrap();
    let zf_plain = pool.zpool(&["history", &name]).unwrap();
    let zf_il = pool.zpool(&["history", "-il", &name]).unwrap();
    pool.export().unwrap();
    let dir = pool.dev_dir().to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-o", "readonly=on", "-d", &dir, &name]);
    let ours_plain = oz.ok(&["zpool", "history", &name]);
    let ours_il = oz.ok(&["zpool", "history", "-il", &name]);
    // `zdb -h`: every record, internal ones included, as `history -i`.
    let ours_i = oz.ok(&["zpool", "history", "-i", &name]);
    let zdb_h = oz.ok(&["zdb", "-h", &name]);
    let body = |s: &str, head: &str| -> Vec<String> {
        s.lines()
            .skip_while(|l| !l.starts_with(head))
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    let zdb_lines = body(&zdb_h, "History:");
    assert!(zdb_lines.len() > 4, "{zdb_h}");
    assert_eq!(zdb_lines, body(&ours_i, "History for"), "zdb -h:\n{zdb_h}");
    oz.ok(&["zpool", "export", &name]);
    // Ours has zfs-fuse's export record more, as the last line.
    let strip_last = |s: &str| -> (String, String) {
        let mut l: Vec<&str> = s.lines().filter(|l| !l.is_empty()).collect();
        let last = l.pop().unwrap_or_default().to_string();
        (l.join("\n"), last)
    };
    for (zf, ours) in [(&zf_plain, &ours_plain), (&zf_il, &ours_il)] {
        let (head, last) = strip_last(ours);
        let zf: Vec<&str> = zf.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(
            head,
            zf.join("\n"),
            "ozfs:\n{ours}\nzfs-fuse:\n{}",
            zf.join("\n")
        );
        assert!(last.contains(&format!(" zpool export {name}")), "{ours}");
    }
    assert!(ours_il.contains("[internal snapshot txg:"), "{ours_il}");
}

#[test]
fn a_damaged_history_is_an_error_not_a_panic() {
    let oz = ozfs();
    let pool = new_devs("ozhistbad", Layout::Stripe, 1, 96);
    let name = pool.name().to_string();
    oz_create(&oz, &pool, None, &[]);
    oz.ok(&["zfs", "create", &pool.ds("a")]);
    oz_export(&oz, &name);
    let dev = &pool.devs()[0];
    let mut img = ozfs_testkit::mutate::Image::open(dev).expect("image");
    // The history object: MOS type 29 ("SPA history"), its first block.
    let idx = img.find(|b| b.objset == 0 && b.object_type == 29 && b.level == 0 && b.blkid == 0);
    assert_eq!(idx.len(), 1, "history block");
    // The second record's length (after the creation record) made huge.
    img.mutate(idx[0], |b| {
        let first = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        let at = 8 + first;
        b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    })
    .expect("mutate");
    let dir = pool.dev_dir().to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-o", "readonly=on", "-d", &dir, &name]);
    let r = oz.run(&["zpool", "history", &name]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("pool history") && r.stderr.contains("length"),
        "{}",
        r.describe()
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.describe());
    oz.ok(&["zpool", "export", &name]);
}
