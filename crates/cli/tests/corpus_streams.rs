//! Send streams the real OpenZFS 2.3.2 wrote (../shared/corpus/openzfs-2.3,
//! `streams.txt` in each pool says how), received by `ozfs zfs receive`
//! into a pool ozfs created with its defaults, and compared file by file
//! with what OpenZFS's own mount showed of the snapshot sent
//! (`manifest.txt`: kinds, modes, owners, sizes, mtimes, sha256, symlink
//! targets, xattrs):
//! * `c1-single`: a plain full stream, an incremental one on top, a `-c
//!   -L -e` stream (lz4 blocks sent compressed, small blocks embedded,
//!   among them a spill block that OpenZFS sends as an embedded write at
//!   block id -2), and a `-R` replication stream (the file system, its
//!   child and their snapshots);
//! * `c2-mirror`: a file system with `dnodesize=auto` and 1 MiB records,
//!   sent plain and with `-L -c` (zstd blocks, large blocks).
//!
//! What ozfs received with dnodes of several slots it sends again (with
//! LARGE_DNODE) and receives exactly. Then OpenZFS's own `zdb -bcc`
//! judges the pool. A raw stream (`-w`) is
//! refused with a message naming it, and leaves nothing behind.

mod ccommon;
mod common;
use ccommon::*;
use common::*;
use std::path::Path;

/// A received snapshot and the manifest label it must equal.
type Check = (&'static str, &'static str);

/// Stream file, receive target, what it must give.
const STREAMS: &[(&str, &str, &[Check])] = &[
    (
        "c1-single/full-s1.zstream",
        "rp/plain",
        &[("rp/plain@s1", "c1-single@s1")],
    ),
    (
        "c1-single/incr-s1-s2.zstream",
        "rp/plain",
        &[("rp/plain@s2", "c1-single@s2")],
    ),
    (
        "c1-single/full-s1-compressed.zstream",
        "rp/cle",
        &[("rp/cle@s1", "c1-single@s1")],
    ),
    (
        "c1-single/replicate-s2.zstream",
        "rp/rep",
        &[
            ("rp/rep@s1", "c1-single@s1"),
            ("rp/rep@s2", "c1-single@s2"),
            ("rp/rep/child@s2", "c1-single/child@s2"),
        ],
    ),
    (
        "c2-mirror/z-full.zstream",
        "rp/z",
        &[("rp/z@s1", "c2-mirror/z@s1")],
    ),
    (
        "c2-mirror/z-full-Lc.zstream",
        "rp/zlc",
        &[("rp/zlc@s1", "c2-mirror/z@s1")],
    ),
];

fn receive(oz: &Ozfs, stream: &Path, target: &str) -> proc::CmdOutput {
    assert!(stream.is_file(), "{}: missing", stream.display());
    oz.sh(&format!(
        "\"$OZFS\" zfs receive {target} < '{}'",
        stream.display()
    ))
}

#[test]
fn every_corpus_stream_is_received_exactly() {
    let oz = ozfs();
    let work = scratch("ozfs-test-corpus-streams-");
    let devs = work.path().join("devs");
    std::fs::create_dir_all(&devs).unwrap();
    let img = devs.join("d0.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(1 << 30))
        .unwrap();
    oz.ok(&["zpool", "create", "rp", &img.to_string_lossy()]);
    let corpus = corpus_dir();
    let mut failed = Vec::new();
    for (stream, target, snaps) in STREAMS {
        let r = receive(&oz, &corpus.join(stream), target);
        if !r.success() {
            failed.push(format!("{stream}: receive failed: {}", r.describe()));
            continue;
        }
        let pool = stream.split('/').next().unwrap();
        let manifest = std::fs::read_to_string(corpus.join(pool).join("manifest.txt")).unwrap();
        for (snap, label) in *snaps {
            failed.extend(compare(&oz, work.path(), snap, &manifest, label));
        }
    }
    assert!(
        failed.is_empty(),
        "received streams differ:\n{}",
        failed.join("\n")
    );

    // ozfs sends what it received with dnodes of several slots: the
    // stream says so (LARGE_DNODE, bit 23 of BEGIN's feature flags) and
    // is received again exactly.
    let z = work.path().join("z.zstream");
    let r = oz.sh(&format!("\"$OZFS\" zfs send rp/z@s1 > '{}'", z.display()));
    assert!(r.success(), "{}", r.describe());
    let bytes = std::fs::read(&z).unwrap();
    let versioninfo = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    assert_ne!((versioninfo >> 2) & (1 << 23), 0, "{versioninfo:#x}");
    let r = receive(&oz, &z, "rp/zback");
    assert!(r.success(), "{}", r.describe());
    let manifest = std::fs::read_to_string(corpus.join("c2-mirror/manifest.txt")).unwrap();
    if let Some(d) = compare(&oz, work.path(), "rp/zback@s1", &manifest, "c2-mirror/z@s1") {
        panic!("sent back and received:\n{d}");
    }

    // ozfs sends OpenZFS's own pool with `-c -e -L`: the BEGIN record
    // names the features OpenZFS's `zfs send -c -L -e` of the same
    // snapshot names (SA_SPILL, EMBED_DATA, LZ4, COMPRESSED); blocks go
    // out as stored (lz4 WRITEs, WRITE_EMBEDDED) and arrive exactly.
    let c1 = work.path().join("c1");
    unpack_corpus(&corpus.join("c1-single"), &c1);
    import_readonly(&oz, &c1, "c1-single");
    let cel = work.path().join("cel.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -c -e -L c1-single@s1 > '{}'",
        cel.display()
    ));
    assert!(r.success(), "{}", r.describe());
    oz.ok(&["zpool", "export", "c1-single"]);
    let flags = |p: &Path| -> u64 {
        let b = std::fs::read(p).unwrap();
        u64::from_le_bytes(b[16..24].try_into().unwrap()) >> 2
    };
    let theirs_stream = corpus.join("c1-single/full-s1-compressed.zstream");
    assert_eq!(
        flags(&cel),
        flags(&theirs_stream),
        "BEGIN features as OpenZFS's"
    );
    let plain_len = std::fs::metadata(corpus.join("c1-single/full-s1.zstream"))
        .unwrap()
        .len();
    let cel_len = std::fs::metadata(&cel).unwrap().len();
    assert!(
        cel_len < plain_len * 3 / 4,
        "compressed: {cel_len} of {plain_len}"
    );
    let r = receive(&oz, &cel, "rp/ozcel");
    assert!(r.success(), "{}", r.describe());
    let manifest = std::fs::read_to_string(corpus.join("c1-single/manifest.txt")).unwrap();
    if let Some(d) = compare(&oz, work.path(), "rp/ozcel@s1", &manifest, "c1-single@s1") {
        panic!("ozfs's -c -e -L stream received:\n{d}");
    }

    // A raw encrypted stream: refused by name, nothing left behind.
    let r = receive(&oz, &corpus.join("c7-crypt/gcm-raw.zstream"), "rp/raw");
    assert_error(&r, Some(1), &["raw encrypted records"]);
    let all = oz.ok(&["zfs", "list", "-H", "-o", "name", "-t", "all", "-r", "rp"]);
    assert!(!all.contains("rp/raw"), "{all}");

    oz.ok(&["zpool", "export", "rp"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "rp");
    }
}
