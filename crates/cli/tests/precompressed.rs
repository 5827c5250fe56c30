//! Pre-compressed records through the command line, the daemon and FUSE
//! (issue 7), with zfs-fuse as the judge of what must stay compatible.
//!
//! 1. A file of plain and hole records is copied in; a pre-compressed write
//!    without `--upgrade` is refused and changes nothing: zfs-fuse's
//!    `zdb -bcc` is clean and zfs-fuse imports the pool (never used, still
//!    version 23).
//! 2. `rawio write --upgrade` stores records of every kind (lz4, gzip, zstd
//!    from independent encoders; zle, lzjb; an opaque algorithm) between
//!    plain and hole records, one with the client's checksum; the error
//!    cases exit 1 (2 for usage) and change nothing.
//! 3. `rawio read --json` returns exactly what was written, with the right
//!    kinds, algorithms and sizes; `ozfs cp` returns the decoded bytes, and
//!    refuses the opaque file naming `rawio read`; zdb -ddddd shows the
//!    algorithm and exact size; a snapshot and rollback keep the old record.
//! 4. Under the daemon: FUSE reads decode, the opaque record reads as EIO
//!    with a log line; partial writes through FUSE into each known kind are
//!    recompressed with the same algorithm; `rawio write` is forwarded;
//!    the socket's `rawio_write` / `rawio_read` requests round-trip.
//! 5. The pool verifies clean: ozfs scrub and `ozfs zdb -b` (leak check).
//!    zfs-fuse now refuses the pool (newer version) and keeps running.

mod common;
mod pcommon;
mod wcommon;
use base64::Engine;
use ozfs_format::external::ExtHeader;
use ozfs_testkit::cli::assert_no_panic;
use ozfs_testkit::proc::CmdOutput;
use pcommon::*;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use wcommon::*;

const REC: usize = 131072;

/// Mostly zeros with a few runs of text (what zle is for).
fn sparse_text(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; REC];
    for k in 0..8 {
        let t = text(seed + k, 900);
        let at = k as usize * 16000 + 100;
        v[at..at + 900].copy_from_slice(&t);
    }
    v
}

/// What each record of /mix is: (kind, logical bytes, payload).
struct Rec {
    algo: &'static str,
    logical: Vec<u8>,
    payload: Vec<u8>,
}

fn mix() -> Vec<Rec> {
    let mk = |algo: &'static str, logical: Vec<u8>| {
        let payload = match algo {
            "plain" | "hole" => Vec::new(),
            a => compress(a, &logical),
        };
        Rec {
            algo,
            logical,
            payload,
        }
    };
    vec![
        mk("plain", noise(100, REC)),
        mk("lz4", text(101, REC)),
        mk("hole", vec![0; REC]),
        mk("gzip", text(103, REC)),
        mk("zstd", text(104, REC)),
        mk("zle", sparse_text(105)),
        mk("lzjb", text(106, REC)),
        mk("plain", text(107, REC)),
        mk("hole", vec![0; REC]),
        mk("lz4", text(109, REC)),
    ]
}

fn rawio_write(
    oz: &Ozfs,
    work: &Path,
    target: &str,
    record: usize,
    algo: &str,
    payload: &[u8],
    extra: &str,
) -> CmdOutput {
    let p = work.join(format!("payload-{record}-{algo}"));
    fs::write(&p, payload).unwrap();
    oz.sh(&format!(
        "\"$OZFS\" rawio write '{target}' --record {record} --algo {algo} {extra} < '{}'",
        p.display()
    ))
}

/// `rawio read --json` of a whole file: per record (kind, algo, csize, data).
fn raw_read(oz: &Ozfs, target: &str) -> Vec<(String, String, u64, Vec<u8>, serde_json::Value)> {
    let out = oz.ok(&["rawio", "read", target, "--json"]);
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let data = r["data"]
                .as_str()
                .map(|s| base64::engine::general_purpose::STANDARD.decode(s).unwrap())
                .unwrap_or_default();
            (
                r["kind"].as_str().unwrap().to_string(),
                r["algo"].as_str().unwrap_or("").to_string(),
                r["csize"].as_u64().unwrap_or(0),
                data,
                r.clone(),
            )
        })
        .collect()
}

/// Every record as written: kinds, algorithms, exact sizes and bytes.
fn assert_raw_matches(oz: &Ozfs, target: &str, recs: &[Rec], context: &str) {
    let got = raw_read(oz, target);
    assert_eq!(got.len(), recs.len(), "{context}: record count");
    for (i, (r, g)) in recs.iter().zip(&got).enumerate() {
        let want_kind = match r.algo {
            "plain" | "hole" => r.algo,
            _ => "external",
        };
        assert_eq!(g.0, want_kind, "{context}: record {i} kind ({})", g.4);
        match r.algo {
            "plain" => assert!(g.3 == r.logical, "{context}: record {i} plain bytes"),
            "hole" => assert!(g.3.is_empty()),
            a => {
                assert_eq!(g.1, a, "{context}: record {i} algorithm");
                assert_eq!(g.2 as usize, r.payload.len(), "{context}: record {i} csize");
                assert!(g.3 == r.payload, "{context}: record {i} payload differs");
                let psize = g.4["psize"].as_u64().unwrap();
                assert_eq!(
                    psize,
                    (16 + r.payload.len() as u64).div_ceil(512) * 512,
                    "{context}: record {i} psize"
                );
                assert_eq!(g.4["lsize"].as_u64(), Some(REC as u64));
            }
        }
    }
}

fn logical(recs: &[Rec]) -> Vec<u8> {
    recs.iter().flat_map(|r| r.logical.clone()).collect()
}

#[test]
fn precompressed_records() {
    let tag = "precomp";
    let t0 = Instant::now();
    let mut pool = new_devs("ozpre", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir();
    let oz = ozfs();
    let work = local_dir(tag);
    let mnt = work.path().canonicalize().unwrap().join("mnt");
    let mnt_fs = mnt.join("fs");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone(), mnt_fs.clone()],
    };
    oz_create_at(&oz, &pool, &mnt, None, &[]);
    let fs_name = format!("{name}/fs");
    oz.ok(&["zfs", "create", "-o", "compression=lzjb", &fs_name]);
    let mut recs = mix();
    // The file as copied in: every record plain (holes as zeros, which
    // compression turns into holes).
    let initial: Vec<u8> = recs
        .iter()
        .enumerate()
        .flat_map(|(i, r)| match r.algo {
            "plain" | "hole" => r.logical.clone(),
            _ => noise(500 + i as u64, REC),
        })
        .collect();
    let src = work.path().join("mix");
    fs::write(&src, &initial).unwrap();
    oz_cp_in(&oz, &src, &format!("{fs_name}:/mix"));
    let opaque_src = work.path().join("opaque");
    fs::write(&opaque_src, noise(900, 3 * REC)).unwrap();
    oz_cp_in(&oz, &opaque_src, &format!("{fs_name}:/opaque"));
    let mix_t = format!("{fs_name}:/mix");
    let copy_out = |what: &str| -> Vec<u8> {
        let out = work.path().join("out");
        let _ = fs::remove_file(&out);
        oz.ok(&["cp", what, &out.to_string_lossy()]);
        fs::read(&out).unwrap()
    };

    // 1. Refused without --upgrade; the pool stays zfs-fuse's.
    let r = rawio_write(&oz, work.path(), &mix_t, 1, "lz4", &recs[1].payload, "");
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.contains("--upgrade"), "{}", r.describe());
    assert!(
        copy_out(&mix_t) == initial,
        "a refused write changed the file"
    );
    let info = oz.ok(&["rawio", "info", &name]);
    assert!(
        info.contains("version 23") && info.contains("disabled"),
        "{info}"
    );
    // Under the daemon, writes that fail even with --upgrade (a payload as
    // large as the record, a wrong lsize, no record number) leave the pool
    // as it was: the daemon commits what it holds at export.
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    let r = rawio_write(
        &oz,
        work.path(),
        &mix_t,
        1,
        "lz4",
        &noise(7, REC),
        "--upgrade",
    );
    assert_eq!(r.code, Some(1), "{}", r.describe());
    let r = rawio_write(
        &oz,
        work.path(),
        &format!("{fs_name}:/new"),
        0,
        "lz4",
        &recs[1].payload,
        "--upgrade --lsize 65536",
    );
    assert_eq!(r.code, Some(1), "{}", r.describe());
    let b64 = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
    for req in [
        serde_json::json!({"cmd": "rawio_write", "target": mix_t, "algo": "lz4",
            "data": b64(&recs[1].payload), "upgrade": true}),
        serde_json::json!({"cmd": "rawio_write", "target": mix_t, "record": 1, "algo": "lz4",
            "lsize": 65536, "data": b64(&recs[1].payload), "upgrade": true}),
        serde_json::json!({"cmd": "rawio_write", "target": mix_t, "record": 1, "algo": "lz4",
            "cksum": "fletcher4:1:2:3:4", "data": b64(&recs[1].payload), "upgrade": true}),
    ] {
        let r = socket(&oz, &req);
        assert_eq!(r["ok"], false, "{req} → {r}");
    }
    let info = oz.ok(&["rawio", "info", &name]);
    assert!(
        info.contains("version 23") && info.contains("disabled"),
        "{info}"
    );
    oz_export(&oz, &name);
    // The labels still say version 23 (an import listing shows no version).
    let label = oz.ok(&["zdb", "-l", &pool.devs()[0].to_string_lossy()]);
    assert!(
        label.contains("    version: 23\n") && !label.contains("version: 5000"),
        "the pool was upgraded by a failed write:\n{label}"
    );
    assert_zdb_clean(&pool, &dev_dir, &format!("{tag}: never used"));
    pool.import().unwrap();
    pool.export().unwrap();
    oz_import_rw(&oz, &dev_dir, &name);
    phase(
        &format!("{tag}: refused without --upgrade, zfs-fuse imports"),
        t0,
    );

    // 2. Records of every kind.
    let info: serde_json::Value =
        serde_json::from_str(&oz.ok(&["rawio", "info", "-j", &name])).unwrap();
    let sector = info["sector"].as_u64().unwrap();
    assert_eq!(sector, 512);
    for (i, r) in recs.iter().enumerate() {
        if matches!(r.algo, "plain" | "hole") {
            continue;
        }
        let extra = if i == 1 {
            "--upgrade".to_string()
        } else if r.algo == "gzip" {
            // The client's own checksum of the stored image.
            let img = ExtHeader::image(2, &r.payload, REC as u64, sector).unwrap();
            let c =
                ozfs_codec::checksum::compute(ozfs_format::types::cksum::FLETCHER4, &img, false)
                    .unwrap();
            // A wrong one first: refused, nothing staged.
            let bad = rawio_write(
                &oz,
                work.path(),
                &mix_t,
                i,
                "gzip",
                &r.payload,
                "--cksum fletcher4:1:2:3:4",
            );
            assert_eq!(bad.code, Some(1), "{}", bad.describe());
            assert!(bad.stderr.contains("checksum"), "{}", bad.describe());
            format!("--cksum fletcher4:{c}")
        } else {
            String::new()
        };
        let w = rawio_write(&oz, work.path(), &mix_t, i, r.algo, &r.payload, &extra);
        assert!(w.success(), "record {i} {}: {}", r.algo, w.describe());
    }
    let opaque_payload = noise(901, 5000);
    let w = rawio_write(
        &oz,
        work.path(),
        &format!("{fs_name}:/opaque"),
        1,
        "opaque-200",
        &opaque_payload,
        "",
    );
    assert!(w.success(), "{}", w.describe());
    // Errors: exit 1 (2 for usage), nothing changes.
    for (args, code) in [
        ("--record 3 --algo lz4 --lsize 65536", 1),
        ("--record 3 --algo foo", 2),
        ("--record 3 --algo opaque-100", 2),
        ("--algo lz4", 2),
    ] {
        let p = work.path().join("small");
        fs::write(&p, b"abc").unwrap();
        let r = oz.sh(&format!(
            "\"$OZFS\" rawio write '{mix_t}' {args} < '{}'",
            p.display()
        ));
        assert_eq!(r.code, Some(code), "{args}: {}", r.describe());
        assert_no_panic(&r);
    }
    let r = rawio_write(&oz, work.path(), &mix_t, 3, "lz4", &noise(7, REC), "");
    assert_eq!(
        r.code,
        Some(1),
        "payload as large as the record: {}",
        r.describe()
    );
    let r = rawio_write(
        &oz,
        work.path(),
        &format!("{fs_name}:/no/such/file"),
        0,
        "lz4",
        b"abc",
        "",
    );
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("not found") || r.stderr.contains("No such"),
        "{}",
        r.describe()
    );
    phase(&format!("{tag}: written"), t0);
    assert_no_leaks(&oz, &name, "after rawio writes");

    // 3. Raw reads, decoded reads, zdb, snapshot and rollback.
    assert_raw_matches(&oz, &mix_t, &recs, "after rawio write");
    let gz = &raw_read(&oz, &mix_t)[3].4;
    assert!(
        gz["cksum"].as_str().unwrap().starts_with("fletcher4:"),
        "{gz}"
    );
    assert!(
        copy_out(&mix_t) == logical(&recs),
        "cp out does not decode the records"
    );
    let r = oz.run(&[
        "cp",
        &format!("{fs_name}:/opaque"),
        &work.path().join("o").to_string_lossy(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(
        r.stderr.contains("rawio read") && r.stderr.contains("200"),
        "{}",
        r.describe()
    );
    let listing = oz.ok(&["rawio", "read", &format!("{fs_name}:/opaque"), "-H"]);
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("1\texternal\topaque-200\t5000\t")),
        "{listing}"
    );
    let obj = raw_read_object(&oz, &mix_t);
    let dump = oz.ok(&["zdb", "-ddddd", &fs_name, &obj.to_string()]);
    for (i, r) in recs
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r.algo, "plain" | "hole"))
    {
        let want = format!("external {} csize={:x}", r.algo, r.payload.len());
        assert!(dump.contains(&want), "record {i}: no '{want}' in\n{dump}");
    }
    oz.ok(&["zfs", "snapshot", &format!("{fs_name}@keep")]);
    let other = compress("lz4", &text(777, REC));
    assert!(rawio_write(&oz, work.path(), &mix_t, 1, "lz4", &other, "").success());
    assert_eq!(raw_read(&oz, &mix_t)[1].3, other);
    assert_raw_matches(
        &oz,
        &format!("{fs_name}@keep:/mix"),
        &recs,
        "in the snapshot",
    );
    assert_no_leaks(&oz, &name, "with a snapshot");
    oz.ok(&["zfs", "rollback", &format!("{fs_name}@keep")]);
    assert_raw_matches(&oz, &mix_t, &recs, "after rollback");
    assert_no_leaks(&oz, &name, "after rollback");
    oz.ok(&["zfs", "destroy", &format!("{fs_name}@keep")]);
    assert_no_leaks(&oz, &name, "after destroying the snapshot");
    phase(&format!("{tag}: raw and decoded reads, zdb, rollback"), t0);

    // 4. The daemon: FUSE reads and partial writes, a forwarded rawio write.
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name]);
    assert!(is_mounted(&mnt_fs), "not mounted after import");
    let fuse = fs::read(mnt_fs.join("mix")).unwrap();
    assert!(
        fuse == logical(&recs),
        "FUSE read does not decode the records"
    );
    let e = fs::read(mnt_fs.join("opaque")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let log = fs::read_to_string(oz.state_dir().join("ozfsd.log")).unwrap_or_default();
    assert!(
        log.contains("algorithm tag 200"),
        "no log line for the EIO:\n{log}"
    );
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(mnt_fs.join("mix"))
            .unwrap();
        for i in [1usize, 3, 4, 5, 6] {
            let at = 1000 + i * 300;
            let patch = format!("<patched record {i}>");
            f.write_all_at(patch.as_bytes(), (i * REC + at) as u64)
                .unwrap();
            recs[i].logical[at..at + patch.len()].copy_from_slice(patch.as_bytes());
        }
        f.sync_all().unwrap();
    }
    let newer = text(999, REC);
    recs[9].payload = compress("lz4", &newer);
    recs[9].logical = newer;
    let w = rawio_write(&oz, work.path(), &mix_t, 9, "lz4", &recs[9].payload, "");
    assert!(w.success(), "forwarded: {}", w.describe());
    assert_no_leaks(&oz, &name, "under the daemon");
    // The socket API for programs: write record 9 again, read it back
    // through the daemon's writer.
    let newest = text(1999, REC);
    recs[9].payload = compress("lz4", &newest);
    recs[9].logical = newest;
    let r = socket(
        &oz,
        &serde_json::json!({"cmd": "rawio_write", "target": mix_t, "record": 9,
            "algo": "lz4", "data": b64(&recs[9].payload)}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        r["psize"].as_u64(),
        Some((16 + recs[9].payload.len() as u64).div_ceil(512) * 512),
        "{r}"
    );
    let r = socket(
        &oz,
        &serde_json::json!({"cmd": "rawio_read", "target": mix_t, "record": 8, "count": 2}),
    );
    let got = r["records"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(got.len(), 2, "{r}");
    assert_eq!(
        (got[0]["kind"].as_str(), got[1]["kind"].as_str()),
        (Some("hole"), Some("external"))
    );
    assert_eq!(
        got[1]["data"].as_str(),
        Some(b64(&recs[9].payload).as_str())
    );
    let r = socket(
        &oz,
        &serde_json::json!({"cmd": "rawio_write", "target": mix_t, "record": 9,
            "algo": "lz4", "data": "not base64!"}),
    );
    assert_eq!(r["ok"], false, "{r}");
    let mut f = fs::File::open(mnt_fs.join("mix")).unwrap();
    let mut first = vec![0u8; 2 * REC];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut first).unwrap();
    assert!(
        first[REC..] == recs[1].logical[..],
        "FUSE read after a partial write"
    );
    drop(f);
    oz_export(&oz, &name);
    phase(&format!("{tag}: daemon, FUSE"), t0);

    // 5. After the partial writes: still pre-compressed, same algorithms.
    oz_import_rw(&oz, &dev_dir, &name);
    let got = raw_read(&oz, &mix_t);
    for i in [1usize, 3, 4, 5, 6] {
        assert_eq!(
            (got[i].0.as_str(), got[i].1.as_str()),
            ("external", recs[i].algo),
            "record {i} after a partial write"
        );
        recs[i].payload = got[i].3.clone();
    }
    assert_raw_matches(&oz, &mix_t, &recs, "after partial writes");
    assert!(
        copy_out(&mix_t) == logical(&recs),
        "decoded after partial writes"
    );
    oz_scrub_clean(&oz, &name, &format!("{tag}: scrub"));
    let z = oz.ok(&["zdb", "-b", &name]);
    assert!(z.contains("No leaks"), "{z}");
    assert!(
        z.contains("pre-compressed:") && !z.contains("pre-compressed:              0"),
        "{z}"
    );
    oz_export(&oz, &name);
    // zfs-fuse refuses the pool cleanly and keeps running.
    let r = pool.zf().output(
        &["zpool", "import", "-d", &dev_dir.to_string_lossy(), &name],
        Duration::from_secs(60),
    );
    let r = r.unwrap();
    assert_ne!(
        r.code,
        Some(0),
        "zfs-fuse imported a v5000 pool: {}",
        r.describe()
    );
    assert!(
        format!("{}{}", r.stdout, r.stderr)
            .to_lowercase()
            .contains("newer"),
        "{}",
        r.describe()
    );
    pool.zf()
        .run(&["zpool", "list"])
        .expect("zfs-fuse alive after refusing");
    phase(&format!("{tag}: verified; zfs-fuse refuses"), t0);
}

/// One request to the daemon's socket, its reply.
fn socket(oz: &Ozfs, req: &serde_json::Value) -> serde_json::Value {
    let mut s = UnixStream::connect(oz.state_dir().join("ozfsd.sock")).unwrap();
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    serde_json::from_str(&r).unwrap_or_else(|e| panic!("{e}: {r}"))
}

/// `ozfs zdb -b`: no leaks.
fn assert_no_leaks(oz: &Ozfs, pool: &str, context: &str) {
    let z = oz.run(&["zdb", "-b", pool]);
    assert!(
        z.success() && z.stdout.contains("No leaks"),
        "{context}: {}",
        z.describe()
    );
}

/// The object number of a file (from `rawio read --json`).
fn raw_read_object(oz: &Ozfs, target: &str) -> u64 {
    let out = oz.ok(&["rawio", "read", target, "--json", "--record", "0"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    doc["object"].as_u64().unwrap()
}
