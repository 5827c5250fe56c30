//! (h) Scrub and self-healing (issue 5).
//!
//! Bit rot: ozfs creates a mirror, a raidz1 and a raidz2 pool and copies in
//! files of random bytes. The test reads the block pointers of the files
//! from `ozfs zdb -ddddd` and damages one copy of every third data block —
//! a mirror side, or one RAID-Z column (data or parity) found with the
//! RAID-Z geometry — so it knows exactly how many blocks it damaged on each
//! device. `ozfs zpool scrub` must then report exactly those counts in the
//! CKSUM column, repair everything (files equal their sources), and a
//! second scrub must find nothing; zfs-fuse's `zdb -bcc` is clean after
//! export.
//!
//! Damage beyond the redundancy: both sides of one block of a file in a
//! mirror. The scrub reports one error, `zpool status -v` names the file,
//! copy-out and reads through a mount fail with EIO for that file only,
//! every other file reads correctly.

mod common;
mod mcommon;
mod wcommon;
use ozfs_codec::raidz::RaidzMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use wcommon::*;

const DATA_START: u64 = 4 << 20;

/// One level-0 block: DVA offset and physical size.
#[derive(Debug, Clone, Copy)]
struct L0 {
    offset: u64,
    psize: u64,
}

/// The level-0 blocks of every plain file of the pool's root dataset,
/// by path, from `ozfs zdb -ddddd POOL`.
fn file_blocks(oz: &Ozfs, pool: &str) -> Vec<(String, Vec<L0>)> {
    let out = oz.ok(&["zdb", "-ddddd", pool]);
    let mut files: Vec<(String, Vec<L0>)> = Vec::new();
    let mut in_ds = false;
    let mut cur: Option<usize> = None;
    let mut is_file = false;
    for line in out.lines() {
        if line.starts_with("Dataset ") {
            in_ds = line.starts_with(&format!("Dataset {pool} [ZPL]"));
            cur = None;
            continue;
        }
        if !in_ds {
            continue;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        // An object's header line: "OBJ LVL IBLK DBLK ... TYPE".
        if t.len() >= 8 && t[0].parse::<u64>().is_ok() && !line.contains(" L0 ") {
            is_file = line.trim_end().ends_with("ZFS plain file");
            cur = None;
            continue;
        }
        if is_file && t.first() == Some(&"path") && t.len() == 2 {
            files.push((t[1].to_string(), Vec::new()));
            cur = Some(files.len() - 1);
            continue;
        }
        if let (Some(i), Some(pos)) = (cur, t.iter().position(|w| *w == "L0")) {
            let dva: Vec<&str> = t[pos + 1].split(':').collect();
            let sizes = t
                .iter()
                .find(|w| w.contains("L/") && w.ends_with('P'))
                .unwrap();
            let psize =
                u64::from_str_radix(sizes.split('/').nth(1).unwrap().trim_end_matches('P'), 16)
                    .unwrap();
            files[i].1.push(L0 {
                offset: u64::from_str_radix(dva[1], 16).unwrap(),
                psize,
            });
        }
    }
    files.retain(|(_, b)| !b.is_empty());
    files
}

fn random_file(p: &Path, len: usize, seed: u64) {
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

fn cksums(oz: &Ozfs, pool: &str, devs: &[PathBuf]) -> (Vec<u64>, String) {
    let st = oz.ok(&["zpool", "status", "-v", pool]);
    let rows = parse_status(&st);
    let v = devs
        .iter()
        .map(|d| {
            status_row(&rows, d)
                .unwrap_or_else(|| panic!("no status row for {}:\n{st}", d.display()))
                .cksum
        })
        .collect();
    (v, st)
}

fn bitrot(layout: Layout, ndev: usize, nparity: usize, tag: &str) {
    let t0 = Instant::now();
    let pool = new_devs(&format!("ozscr{tag}"), layout, ndev, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for (i, len) in [3_000_000usize, 5_000_000, 1_000_000].iter().enumerate() {
        random_file(&src.join(format!("f{i}")), *len, 7 + i as u64);
    }
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let src = src.join("."); // copied in as /src
    let files = file_blocks(&oz, &name);
    assert_eq!(files.len(), 3, "files found by zdb: {files:?}");
    phase(&format!("{tag}: pool written"), t0);

    // One copy of every third data block.
    let devs = pool.devs().to_vec();
    let mut expect = vec![0u64; ndev];
    let mut k = 0usize;
    for (_, blocks) in &files {
        for b in blocks {
            k += 1;
            if !k.is_multiple_of(3) {
                continue;
            }
            let junk: Vec<u8> = (0..512).map(|j| (j as u8) ^ (k as u8) ^ 0x5a).collect();
            if nparity == 0 {
                let side = (k / 3) % ndev;
                damage::write_at(&devs[side], DATA_START + b.offset, &junk).unwrap();
                expect[side] += 1;
            } else {
                let map = RaidzMap::new(b.offset, b.psize, 12, ndev, nparity);
                let cols: Vec<_> = map.cols.iter().filter(|c| c.size > 0).collect();
                let c = cols[(k / 3) % cols.len()];
                damage::write_at(&devs[c.dev], DATA_START + c.offset, &junk).unwrap();
                expect[c.dev] += 1;
            }
        }
    }
    assert!(expect.iter().sum::<u64>() >= 10, "too few blocks damaged");
    phase(&format!("{tag}: damaged {expect:?}"), t0);

    oz.ok(&["zpool", "scrub", &name]);
    let (got, st) = cksums(&oz, &name, &devs);
    assert_eq!(got, expect, "CKSUM per device after the scrub:\n{st}");
    assert!(st.contains("with 0 errors"), "{st}");
    assert!(!st.contains("repaired 0B"), "nothing repaired:\n{st}");
    assert!(st.contains("No known data errors"), "{st}");
    phase(&format!("{tag}: scrub repaired"), t0);

    // Files unchanged; a second scrub finds nothing new.
    let out = work.path().join("out");
    oz.ok(&[
        "cp".to_string(),
        "-r".into(),
        format!("{name}:/src"),
        out.to_string_lossy().into_owned(),
    ]);
    for i in 0..3 {
        let f = format!("f{i}");
        assert!(
            fs::read(out.join(&f)).unwrap() == fs::read(src.join(&f)).unwrap(),
            "{f} differs after the scrub"
        );
    }
    oz.ok(&["zpool", "scrub", &name]);
    let (again, st) = cksums(&oz, &name, &devs);
    assert_eq!(again, expect, "the second scrub found more:\n{st}");
    assert!(
        st.contains("repaired 0B") && st.contains("with 0 errors"),
        "{st}"
    );
    oz.ok(&["zpool", "clear", &name]);
    let (cleared, st) = cksums(&oz, &name, &devs);
    assert!(cleared.iter().all(|&c| c == 0), "zpool clear:\n{st}");
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: after repairs"));
    phase(&format!("{tag}: done"), t0);
}

#[test]
fn scrub_repairs_mirror() {
    bitrot(Layout::Mirror, 2, 0, "mirror");
}

#[test]
fn scrub_repairs_raidz1() {
    bitrot(Layout::Raidz1, 3, 1, "raidz1");
}

#[test]
fn scrub_repairs_raidz2() {
    bitrot(Layout::Raidz2, 4, 2, "raidz2");
}

#[test]
fn damage_beyond_redundancy() {
    let t0 = Instant::now();
    let tag = "lost";
    let pool = new_devs("ozscrlost", Layout::Mirror, 2, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..3 {
        random_file(&src.join(format!("f{i}")), 2_000_000, 40 + i);
    }
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let src = src.join("."); // copied in as /src
    let files = file_blocks(&oz, &name);
    let (_, blocks) = files
        .iter()
        .find(|(p, _)| p == "/src/f1")
        .expect("/f1 in zdb");
    let b = blocks[3];
    for d in pool.devs() {
        damage::write_at(d, DATA_START + b.offset, &[0xee; 4096]).unwrap();
    }
    oz.ok(&["zpool", "scrub", &name]);
    let st = oz.ok(&["zpool", "status", "-v", &name]);
    assert!(st.contains("with 1 errors"), "{st}");
    assert!(
        st.contains(&format!("{name}:/src/f1")),
        "status -v names the file:\n{st}"
    );
    assert!(!st.contains(":/f0") && !st.contains(":/f2"), "{st}");
    phase(&format!("{tag}: status -v"), t0);

    // Copy-out: f1 fails, the others are right.
    let out = work.path().join("out");
    let r = oz.run(&[
        "cp".to_string(),
        "-r".into(),
        format!("{name}:/src"),
        out.to_string_lossy().into_owned(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("f1"), "{}", r.describe());
    for f in ["f0", "f2"] {
        assert!(fs::read(out.join(f)).unwrap() == fs::read(src.join(f)).unwrap());
    }

    // Through a mount: EIO for f1 only.
    let mnt = work.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mcommon::Mounted::start(
        &oz,
        &name,
        &mnt,
        &work.path().join("mount.log"),
        &["-o", "ro"],
    );
    let e = fs::read(m.mnt.join("src/f1")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    for f in ["f0", "f2"] {
        assert!(fs::read(m.mnt.join("src").join(f)).unwrap() == fs::read(src.join(f)).unwrap());
    }
    m.terminate();
    phase(&format!("{tag}: reads"), t0);
}

/// Self-healing read: a read through a (read-write) mount that meets a bad
/// copy on the side it reads first is served from the other side and
/// rewrites the bad copy (logged), so a scrub afterwards repairs nothing;
/// the CKSUM counter of that side says what the reads found.
#[test]
fn self_healing_read() {
    let t0 = Instant::now();
    let tag = "heal";
    let pool = new_devs("ozscrheal", Layout::Mirror, 2, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, None, &["-o", "ashift=12"]);
    let work = local_dir(tag);
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    random_file(&src.join("f0"), 1_500_000, 99);
    oz_cp_in(&oz, &src, &format!("{name}:/"));
    let files = file_blocks(&oz, &name);
    let (_, blocks) = files.iter().find(|(p, _)| p == "/src/f0").expect("/src/f0");
    // The first side, which reads try first.
    let dev0 = pool.devs()[0].clone();
    for b in blocks.iter().take(4) {
        damage::write_at(&dev0, DATA_START + b.offset, &[0x22; 4096]).unwrap();
    }
    let mnt = work.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = mcommon::Mounted::start(&oz, &name, &mnt, &work.path().join("mount.log"), &[]);
    assert!(fs::read(m.mnt.join("src/f0")).unwrap() == fs::read(src.join("f0")).unwrap());
    m.unmount();
    let log = fs::read_to_string(work.path().join("mount.err")).unwrap_or_default();
    assert_eq!(
        log.matches("ozfs: repaired").count(),
        4,
        "repairs logged:\n{log}"
    );
    oz.ok(&["zpool", "scrub", &name]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(
        st.contains("repaired 0B") && st.contains("with 0 errors"),
        "{st}"
    );
    let rows = parse_status(&st);
    assert_eq!(status_row(&rows, &dev0).unwrap().cksum, 4, "{st}");
    assert_eq!(status_row(&rows, &pool.devs()[1]).unwrap().cksum, 0, "{st}");
    phase(&format!("{tag}: done"), t0);
}
