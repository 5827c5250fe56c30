//! Send and receive against zfs-fuse (issue 6).
//!
//! A zfs-fuse file system gets a history of three snapshots with rewrites,
//! deletes, renames, truncations and sparse files between them. Its
//! `zfs send` streams (full, `-i`, `-I`) are received by ozfs into a pool of
//! its own, and every received snapshot is copied out and compared with
//! what zfs-fuse held. Then ozfs sends the received file system back (full,
//! `-i`, `-I`) and zfs-fuse receives it: after each stream the tree equals
//! that snapshot. The ozfs pool is clean by zfs-fuse's zdb after export.
//!
//! Hostile streams: every corruption of a good full and a good incremental
//! stream (fields of several records flipped, enlarged, the stream cut at
//! many points, payload bytes flipped, the END checksum changed) is refused
//! with an error, no panic, and leaves the target as it was: no new file
//! system for a full stream, the previous snapshot's tree for an
//! incremental one; a scrub afterwards finds nothing wrong.

mod common;
mod wcommon;
use std::fs;
use std::path::Path;
use std::time::Instant;
use wcommon::*;

/// Offsets of the records of a stream file (each 312 bytes plus payload):
/// (offset, type).
fn records(stream: &[u8]) -> Vec<(usize, u32)> {
    let mut v = Vec::new();
    let mut o = 0usize;
    while o + 312 <= stream.len() {
        let t = u32::from_le_bytes(stream[o..o + 4].try_into().unwrap());
        v.push((o, t));
        let u64_at = |x: usize| u64::from_le_bytes(stream[o + x..o + x + 8].try_into().unwrap());
        let u32_at = |x: usize| u32::from_le_bytes(stream[o + x..o + x + 4].try_into().unwrap());
        let payload = match t {
            1 => (u32_at(28) as usize).div_ceil(8) * 8,
            3 => u64_at(32) as usize,
            _ => 0,
        };
        o += 312 + payload;
        if t == 5 {
            break;
        }
    }
    v
}

/// Corrupted variants of a good stream: (description, bytes).
fn corruptions(good: &[u8]) -> Vec<(String, Vec<u8>)> {
    let recs = records(good);
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut put = |name: String, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.to_vec();
        f(&mut b);
        // A change that changes nothing (a field already all ones) is no test.
        if b != good {
            out.push((name, b));
        }
    };
    // The magic, the version, the record type of the first record.
    put("magic flipped".into(), &|b| b[8] ^= 0xff);
    put("versioninfo features".into(), &|b| b[16] |= 0x04);
    put("begin type".into(), &|b| b[0] = 9);
    // Per kind of record, the first one: each field flipped or enlarged.
    for kind in [1u32, 2, 3, 4] {
        let Some(&(o, _)) = recs.iter().find(|(_, t)| *t == kind) else {
            continue;
        };
        put(format!("record type {kind} -> 77"), &|b| b[o] = 77);
        for field in [8usize, 16, 24, 32] {
            put(format!("type {kind} field {field} flipped"), &|b| {
                b[o + field + 7] ^= 0x80
            });
            put(format!("type {kind} field {field} huge"), &|b| {
                b[o + field..o + field + 8].copy_from_slice(&u64::MAX.to_le_bytes())
            });
        }
        put(format!("type {kind} toguid"), &|b| {
            let g = match kind {
                1 => 40,
                2 => 24,
                3 => 40,
                _ => 32,
            };
            b[o + g] ^= 1
        });
    }
    // A payload byte of a WRITE, and of a bonus buffer.
    if let Some(&(o, _)) = recs.iter().find(|(_, t)| *t == 3) {
        put("write payload flipped".into(), &|b| b[o + 312 + 100] ^= 1);
    }
    if let Some(&(o, _)) = recs.iter().find(|(_, t)| *t == 1) {
        put("bonus flipped".into(), &|b| b[o + 312 + 8] ^= 0x10);
    }
    // The END checksum, and cuts at many points.
    if let Some(&(o, _)) = recs.iter().find(|(_, t)| *t == 5) {
        put("end checksum".into(), &|b| b[o + 8] ^= 1);
        put("end toguid".into(), &|b| b[o + 40] ^= 1);
    }
    for frac in [1usize, 5, 20, 50, 90, 99] {
        let n = good.len() * frac / 100;
        put(format!("cut at {frac}% ({n} bytes)"), &|b| b.truncate(n));
    }
    put("cut in the END record".into(), &|b| {
        b.truncate(good.len() - 20)
    });
    out
}

fn zf_sh(pool: &TestPool, script: &str) {
    pool.zf()
        .run(&["sh", "-c", script])
        .unwrap_or_else(|e| panic!("zfs-fuse: {script}: {e}"));
}

fn oz_recv(oz: &Ozfs, target: &str, stream: &Path, extra: &str) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs receive {extra} {target} < '{}'",
        stream.display()
    ));
    assert!(
        out.success(),
        "ozfs receive into {target}:\n{}",
        out.describe()
    );
}

fn oz_send(oz: &Ozfs, args: &str, stream: &Path) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs send {args} > '{}'",
        stream.display()
    ));
    assert!(out.success(), "ozfs send {args}:\n{}", out.describe());
}

#[test]
fn send_receive_with_zfs_fuse() {
    let t0 = Instant::now();
    let tag = "sendrecv";
    // zfs-fuse: the source history.
    let mut src = TestPool::create_with(&PoolSpec {
        prefix: "ozsrc".into(),
        ..PoolSpec::new(Layout::Stripe, 1, 256 * MIB)
    })
    .unwrap();
    src.set("", "atime", "off").unwrap();
    let expected = dataset_history(&src, "a", &[], &Profile::moderate(61), 3);
    let snap_manifest = |s: &str| {
        expected
            .iter()
            .find(|e| e.name.ends_with(&format!("@{s}")))
            .map(|e| e.manifest.clone())
            .unwrap()
    };
    let work = local_dir(tag);
    let wd = work.path().canonicalize().unwrap();
    let f = |n: &str| wd.join(n);
    let a = src.ds("a");
    zf_sh(&src, &format!("zfs send {a}@s1 > '{}'", f("z1").display()));
    zf_sh(
        &src,
        &format!("zfs send -i @s1 {a}@s2 > '{}'", f("z12").display()),
    );
    zf_sh(
        &src,
        &format!("zfs send -I @s2 {a}@s3 > '{}'", f("z23").display()),
    );
    phase(&format!("{tag}: zfs-fuse history and streams"), t0);

    // ozfs receives them, snapshot by snapshot.
    let oz = ozfs();
    let dst = new_devs("ozdst", Layout::Mirror, 2, 256);
    oz_create(&oz, &dst, Some("mirror"), &[]);
    let got = format!("{}/got", dst.name());
    for (stream, snap) in [("z1", "s1"), ("z12", "s2"), ("z23", "s3")] {
        oz_recv(&oz, &got, &f(stream), "-v");
        let dest = dst.work_dir(&format!("copy-{snap}"));
        let _ = fs::remove_dir_all(&dest);
        oz.cp(&format!("{got}@{snap}:/"), &dest);
        let m = Manifest::scan(&dest).unwrap();
        snap_manifest(snap).assert_same(&m, &format!("ozfs received {got}@{snap}"));
        let _ = fs::remove_dir_all(&dest);
    }
    let list = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    for s in ["s1", "s2", "s3"] {
        assert!(list.contains(&format!("{got}@{s}")), "{list}");
    }
    // A stream whose source is not the target's latest snapshot is refused.
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs receive {got} < '{}'",
        f("z12").display()
    ));
    assert_eq!(r.code, Some(1), "{}", r.describe());
    phase(&format!("{tag}: ozfs received from zfs-fuse"), t0);

    // ozfs sends it back; zfs-fuse receives.
    oz_send(&oz, &format!("{got}@s1"), &f("o1"));
    oz_send(&oz, &format!("-i @s1 {got}@s2"), &f("o12"));
    oz_send(&oz, &format!("-I @s2 {got}@s3"), &f("o23"));
    let back = src.ds("back");
    for (stream, snap) in [("o1", "s1"), ("o12", "s2"), ("o23", "s3")] {
        zf_sh(
            &src,
            &format!(
                "zfs receive -F {back} < '{}' && zfs umount {back} && zfs mount {back}",
                f(stream).display()
            ),
        );
        let mp = src.get("back", "mountpoint").unwrap();
        let mounted = src
            .zfs(&["get", "-H", "-o", "value", "mounted", &back])
            .unwrap();
        assert_eq!(
            mounted.trim(),
            "yes",
            "{back} is not mounted (mountpoint {mp})"
        );
        let m = scan_zf(&src.zf().path(mp.trim()), true);
        let mut want = snap_manifest(snap);
        if want.get("").is_some() {
            want = want.without("");
        }
        let mut m = m;
        if m.get("").is_some() {
            m = m.without("");
        }
        want.assert_same(&m, &format!("zfs-fuse received {back}@{snap} from ozfs"));
    }
    phase(&format!("{tag}: zfs-fuse received from ozfs"), t0);

    // Hostile streams, full and incremental.
    let good_full = fs::read(f("z1")).unwrap();
    let bad_target = format!("{}/bad", dst.name());
    let variants = corruptions(&good_full);
    for (i, (what, bytes)) in variants.iter().enumerate() {
        let p = f(&format!("bad{i}"));
        fs::write(&p, bytes).unwrap();
        let r = oz.sh(&format!(
            "\"$OZFS\" zfs receive {bad_target} < '{}'",
            p.display()
        ));
        assert_eq!(r.code, Some(1), "full stream, {what}: {}", r.describe());
        assert!(!r.stderr.is_empty(), "full stream, {what}: no message");
        let names = oz.ok(&["zfs", "list", "-H", "-t", "all", "-o", "name"]);
        assert!(
            !names.lines().any(|l| l.starts_with(&bad_target)),
            "full stream, {what}: {bad_target} left behind:\n{names}"
        );
    }
    // Incremental: the target is a fresh copy at s1.
    let inc = format!("{}/inc", dst.name());
    oz_recv(&oz, &inc, &f("z1"), "");
    let good_inc = fs::read(f("z12")).unwrap();
    let inc_variants = corruptions(&good_inc);
    for (i, (what, bytes)) in inc_variants.iter().enumerate() {
        let p = f(&format!("badi{i}"));
        fs::write(&p, bytes).unwrap();
        let r = oz.sh(&format!("\"$OZFS\" zfs receive {inc} < '{}'", p.display()));
        assert_eq!(
            r.code,
            Some(1),
            "incremental stream, {what}: {}",
            r.describe()
        );
    }
    let dest = dst.work_dir("copy-inc");
    let _ = fs::remove_dir_all(&dest);
    oz.cp(&format!("{inc}:/"), &dest);
    snap_manifest("s1").assert_same(
        &Manifest::scan(&dest).unwrap(),
        "target after refused incremental streams",
    );
    let snaps = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert!(!snaps.contains(&format!("{inc}@s2")), "{snaps}");
    // And the good one still applies.
    oz_recv(&oz, &inc, &f("z12"), "");
    phase(
        &format!(
            "{tag}: {} hostile streams refused",
            variants.len() + inc_variants.len()
        ),
        t0,
    );

    oz.ok(&["zpool", "scrub", "-w", dst.name()]);
    let st = oz.ok(&["zpool", "status", dst.name()]);
    assert!(st.contains("with 0 errors"), "{st}");
    oz_export(&oz, dst.name());
    assert_zdb_clean(
        &dst,
        &dst.dev_dir(),
        &format!("{tag}: ozfs pool after receives"),
    );
    src.export().unwrap();
    phase(&format!("{tag}: done"), t0);
}

/// Replication streams (`zfs send -R`): a file system with a child, a
/// user property and a native one, two snapshots. zfs-fuse's stream
/// received by ozfs brings every snapshot of both and the locally set
/// properties; ozfs's stream of the result received by zfs-fuse brings them
/// back (zfs-fuse shows them as received), trees equal throughout.
#[test]
fn replication_streams() {
    let t0 = Instant::now();
    let tag = "repl";
    let mut src = TestPool::create_with(&PoolSpec {
        prefix: "ozrsrc".into(),
        ..PoolSpec::new(Layout::Stripe, 1, 256 * MIB)
    })
    .unwrap();
    src.set("", "atime", "off").unwrap();
    src.create_dataset("r", &[("compression", "lzjb")]).unwrap();
    src.create_dataset("r/c", &[("com.example:tag", "hello")])
        .unwrap();
    let root_r = src.root("r");
    let root_c = src.root("r/c");
    populate(&root_r, &Profile::small(81)).unwrap();
    populate(&root_c, &Profile::small(82)).unwrap();
    let m_r1 = src.record_snapshot("r", "a").unwrap();
    let m_c1 = src.record_live("r/c").unwrap();
    src.snapshot("r/c", "a").unwrap();
    mutate(&root_c, 1, 82).unwrap();
    let m_c2 = src.record_live("r/c").unwrap();
    src.snapshot("r", "b").unwrap();
    src.snapshot("r/c", "b").unwrap();
    let work = local_dir(tag);
    let wd = work.path().canonicalize().unwrap();
    let stream = wd.join("zr");
    zf_sh(
        &src,
        &format!("zfs send -R {}@b > '{}'", src.ds("r"), stream.display()),
    );

    let oz = ozfs();
    let dst = new_devs("ozrdst", Layout::Stripe, 1, 256);
    oz_create(&oz, &dst, None, &[]);
    let got = format!("{}/got", dst.name());
    oz_recv(&oz, &got, &stream, "-v");
    let snaps = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    for s in ["got@a", "got@b", "got/c@a", "got/c@b"] {
        assert!(
            snaps.contains(&format!("{}/{s}", dst.name())),
            "{s}:\n{snaps}"
        );
    }
    for (name, m) in [
        (format!("{got}@a"), &m_r1),
        (format!("{got}/c@a"), &m_c1),
        (format!("{got}/c@b"), &m_c2),
    ] {
        let c = oz_copyout(&oz, &dst, &format!("{name}:/"), tag, true);
        m.assert_same(&c, &format!("{name} from zfs-fuse's -R stream"));
    }
    let props = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,property,value,source",
        "com.example:tag,compression",
        &got,
        &format!("{got}/c"),
    ]);
    assert!(
        props.contains(&format!("{got}/c\tcom.example:tag\thello\tlocal")),
        "{props}"
    );
    assert!(
        props.contains(&format!("{got}\tcompression\tlzjb\tlocal")),
        "{props}"
    );
    phase(&format!("{tag}: ozfs received zfs-fuse's -R stream"), t0);

    let back_stream = wd.join("or");
    oz_send(&oz, &format!("-R {got}@b"), &back_stream);
    zf_sh(
        &src,
        &format!(
            "zfs receive -u {} < '{}'",
            src.ds("back"),
            back_stream.display()
        ),
    );
    let zl = src
        .zfs(&["list", "-H", "-t", "snapshot", "-o", "name"])
        .unwrap();
    for s in ["back@a", "back@b", "back/c@a", "back/c@b"] {
        assert!(zl.contains(&format!("{}/{s}", src.name())), "{s}:\n{zl}");
    }
    let zp = src
        .zfs(&[
            "get",
            "-H",
            "-o",
            "name,property,value",
            "com.example:tag",
            &src.ds("back/c"),
        ])
        .unwrap();
    assert!(zp.contains("hello"), "{zp}");
    // The stream brought the source's mountpoints along: give the copies
    // their own before mounting.
    src.set(
        "back",
        "mountpoint",
        &src.mountpoint("back").to_string_lossy(),
    )
    .unwrap();
    src.set(
        "back/c",
        "mountpoint",
        &src.mountpoint("back/c").to_string_lossy(),
    )
    .unwrap();
    zf_sh(
        &src,
        &format!(
            "zfs mount {} 2>/dev/null; zfs mount {} 2>/dev/null; true",
            src.ds("back"),
            src.ds("back/c")
        ),
    );
    let mp = src.get("back/c", "mountpoint").unwrap();
    m_c2.assert_same(
        &scan_zf(&src.zf().path(mp.trim()), true),
        "zfs-fuse received ozfs's -R stream",
    );
    oz_export(&oz, dst.name());
    assert_zdb_clean(&dst, &dst.dev_dir(), &format!("{tag}: ozfs pool"));
    src.export().unwrap();
    phase(&format!("{tag}: done"), t0);
}
