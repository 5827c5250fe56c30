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

    // A raw encrypted stream (`zfs send -w`), received with no key: the
    // file system is its own encryption root with the sender's wrapped
    // keys (`keylocation=prompt`), its objset rebuilt exactly — read with
    // the key (every dnode block's and the objset's MACs checked) it is
    // OpenZFS's gcm@s1, and sent raw again it is OpenZFS's stream record
    // for record (FREE records and the BEGIN name aside).
    let raw_stream = corpus.join("c7-crypt/gcm-raw.zstream");
    let r = receive(&oz, &raw_stream, "rp/raw");
    assert!(r.success(), "{}", r.describe());
    let got = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "property,value",
        "encryption,keyformat,keylocation,encryptionroot,keystatus",
        "rp/raw",
    ]);
    assert_eq!(
        got,
        "encryption\taes-256-gcm\nkeyformat\tpassphrase\nkeylocation\tprompt\nencryptionroot\trp/raw\nkeystatus\tunavailable\n"
    );
    let key = crypt_key_location(&corpus.join("c7-crypt/keys"), "c7-crypt/gcm").unwrap();
    let dest = work.path().join("raw-out");
    oz.ok(&[
        "cp",
        "-r",
        "-L",
        &key,
        "rp/raw@s1:/",
        &dest.to_string_lossy(),
    ]);
    let manifest = std::fs::read_to_string(corpus.join("c7-crypt/manifest.txt")).unwrap();
    let want = theirs(&manifest, "c7-crypt/gcm@s1");
    let got = ours(&ozfs_testkit::manifest::Manifest::scan(&dest).unwrap());
    if let Some(d) = differences(&want, &got) {
        panic!("raw stream received:\n{d}");
    }
    let again = work.path().join("raw-again.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -w rp/raw@s1 > '{}'",
        again.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let theirs_recs = records_but_free(&raw_stream);
    let mine = records_but_free(&again);
    assert_eq!(mine.len(), theirs_recs.len(), "records (FREE aside)");
    for (i, (m, t)) in mine.iter().zip(&theirs_recs).enumerate() {
        // BEGIN's name (bytes 56..312) is the receiver's.
        let cut = if i == 0 { 56 } else { m.0.len() };
        assert!(
            m.0[..cut] == t.0[..cut] && m.1 == t.1,
            "record {i} differs: ozfs {:02x?}\nOpenZFS {:02x?}",
            &m.0[..64],
            &t.0[..64]
        );
    }

    oz.ok(&["zpool", "export", "rp"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "rp");
        // OpenZFS opens the received file system with the key.
        let material = std::fs::read_to_string(corpus.join("c7-crypt/keys/secret.pass")).unwrap();
        let (got, text) = openzfs_read_encrypted(&zdb, &devs, &material, "rp/raw", "text.txt");
        assert_eq!(got, std::fs::read(dest.join("text.txt")).ok(), "{text}");
    }
}

/// The records of a stream file, each with its payload, END's checksum
/// and FREE records left out (OpenZFS also frees holes its traversal
/// visits: the same end state).
fn records_but_free(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use ozfs_format::stream::{Record, RECORD_SIZE};
    let b = std::fs::read(p).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at + RECORD_SIZE <= b.len() {
        let rec: [u8; RECORD_SIZE] = b[at..at + RECORD_SIZE].try_into().unwrap();
        let (r, plen) = Record::parse(&rec, false).unwrap();
        // BEGIN's payload length is in its header.
        let plen = match r {
            Record::Begin(_) => u32::from_le_bytes(rec[4..8].try_into().unwrap()) as u64,
            _ => plen,
        } as usize;
        let payload = b[at + RECORD_SIZE..at + RECORD_SIZE + plen].to_vec();
        at += RECORD_SIZE + plen;
        match r {
            Record::Free { .. } => {}
            Record::End { .. } => break,
            // The creation time and the trailing per-record checksum
            // (OpenZFS's running checksum) are left out too.
            Record::Begin(_) => {
                let mut h = rec[..RECORD_SIZE - 32].to_vec();
                h[24..32].fill(0);
                out.push((h, payload));
            }
            _ => out.push((rec[..RECORD_SIZE - 32].to_vec(), payload)),
        }
    }
    out
}

/// `zfs send -w` of an encrypted snapshot, with no key loaded, is the
/// stream OpenZFS's own `zfs send -w` wrote of it (`c7-crypt/gcm-raw`):
/// the same BEGIN (RAW, the wrapped keys, the meta-dnode's shape and the
/// portable MAC in its native-packed payload, byte for byte), the same
/// OBJECT_RANGE records with each dnode block's salt, IV and MAC, the same
/// OBJECT records with their encrypted bonus areas, and the same WRITE and
/// SPILL records carrying the blocks as stored — all but the FREE records
/// of holes. `-w` of a snapshot that is not encrypted is `-L -e -c`.
#[test]
fn raw_send_is_openzfs_own_stream() {
    let oz = ozfs();
    let corpus = corpus_dir();
    let work = scratch("ozfs-test-rawsend-");
    let c7 = work.path().join("c7");
    unpack_corpus(&corpus.join("c7-crypt"), &c7);
    import_readonly(&oz, &c7, "c7-crypt");
    let ours = work.path().join("gcm.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -w c7-crypt/gcm@s1 > '{}'",
        ours.display()
    ));
    assert!(r.success(), "{}", r.describe());
    // The snapshot that is not encrypted: -w is -L -e -c.
    let plain_w = work.path().join("plain-w.zstream");
    let plain_lec = work.path().join("plain-lec.zstream");
    for (flags, out) in [("-w", &plain_w), ("-L -e -c", &plain_lec)] {
        let r = oz.sh(&format!(
            "\"$OZFS\" zfs send {flags} c7-crypt@s1 > '{}'",
            out.display()
        ));
        assert!(r.success(), "{}", r.describe());
    }
    // Its history, native-packed by OpenZFS, reads as OpenZFS logged it.
    let h = oz.ok(&["zpool", "history", "c7-crypt"]);
    for cmd in [
        " zfs create -o encryption=aes-256-gcm -o keyformat=passphrase ",
        " zfs snapshot -r c7-crypt@s1",
    ] {
        assert!(h.contains(cmd), "zpool history lacks {cmd:?}:\n{h}");
    }
    oz.ok(&["zpool", "export", "c7-crypt"]);
    let theirs = records_but_free(&corpus.join("c7-crypt/gcm-raw.zstream"));
    let mine = records_but_free(&ours);
    assert_eq!(mine.len(), theirs.len(), "records (FREE aside)");
    for (i, (m, t)) in mine.iter().zip(&theirs).enumerate() {
        assert!(
            m == t,
            "record {i} differs: ozfs {:02x?}\nOpenZFS {:02x?}",
            &m.0[..64],
            &t.0[..64]
        );
    }
    assert_eq!(
        records_but_free(&plain_w),
        records_but_free(&plain_lec),
        "-w of a snapshot that is not encrypted is -L -e -c"
    );
    // OpenZFS's own reader takes the stream whole (its checksums too).
    if let Some(zdb) = oracle_zdb() {
        let zstream = zdb.with_file_name("zstream");
        let out = std::process::Command::new(&zstream)
            .arg("dump")
            .arg(&ours)
            .output()
            .expect("OpenZFS zstream");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("Total DRR_OBJECT records = 27"),
            "zstream dump:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An incremental raw stream, received without a key onto the raw copy
/// of its source: `c7-crypt/gcm` changed by ozfs with its key (a file in,
/// a file OpenZFS wrote out) and sent `-w -i @s1`; OpenZFS's full raw
/// stream and then that one received into a new pool. The result, read
/// with the key (MACs checked), is the source's `@s2` file for file; sent
/// raw again it is the same stream record for record (the BEGIN name
/// aside); OpenZFS's `zdb -bcc` finds the pool clean and its `zdb -K`
/// reads the new file. A full raw stream onto an existing file system is
/// refused. OpenZFS's own incremental raw stream of the same source is
/// received onto another copy and holds exactly the files OpenZFS listed.
#[test]
fn raw_incremental_streams_are_received_exactly() {
    let oz = ozfs();
    let corpus = corpus_dir();
    let work = scratch("ozfs-test-rawinc-");
    let c7 = work.path().join("c7");
    unpack_corpus(&corpus.join("c7-crypt"), &c7);
    let key = crypt_key_location(&corpus.join("c7-crypt/keys"), "c7-crypt/gcm").unwrap();
    oz.ok(&[
        "zpool",
        "import",
        "-N",
        "-d",
        &c7.to_string_lossy(),
        "c7-crypt",
    ]);
    let new_file = work.path().join("new.bin");
    let data: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    std::fs::write(&new_file, &data).unwrap();
    oz.ok(&[
        "cp",
        "-L",
        &key,
        &new_file.to_string_lossy(),
        "c7-crypt/gcm:/new.bin",
    ]);
    oz.ok(&["rm", "-L", &key, "c7-crypt/gcm:/text.txt"]);
    oz.ok(&["zfs", "snapshot", "c7-crypt/gcm@s2"]);
    let inc = work.path().join("inc.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -w -i @s1 c7-crypt/gcm@s2 > '{}'",
        inc.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let want_dir = work.path().join("want");
    oz.ok(&[
        "cp",
        "-r",
        "-L",
        &key,
        "c7-crypt/gcm@s2:/",
        &want_dir.to_string_lossy(),
    ]);
    oz.ok(&["zpool", "export", "c7-crypt"]);

    let devs = new_pool(&oz, work.path(), "ri");
    let full = corpus.join("c7-crypt/gcm-raw.zstream");
    let r = receive(&oz, &full, "ri/raw");
    assert!(r.success(), "{}", r.describe());
    let r = receive(&oz, &full, "ri/raw");
    assert!(
        !r.success() && r.stderr.contains("exists"),
        "{}",
        r.describe()
    );
    let r = receive(&oz, &inc, "ri/raw");
    assert!(r.success(), "{}", r.describe());
    let got_dir = work.path().join("got");
    oz.ok(&[
        "cp",
        "-r",
        "-L",
        &key,
        "ri/raw@s2:/",
        &got_dir.to_string_lossy(),
    ]);
    let want = ozfs_testkit::manifest::Manifest::scan(&want_dir).unwrap();
    let got = ozfs_testkit::manifest::Manifest::scan(&got_dir).unwrap();
    if let Some(d) = differences(&ours(&want), &ours(&got)) {
        panic!("incremental raw stream received:\n{d}");
    }
    assert_eq!(std::fs::read(got_dir.join("new.bin")).unwrap(), data);
    let again = work.path().join("again.zstream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send -w -i @s1 ri/raw@s2 > '{}'",
        again.display()
    ));
    assert!(r.success(), "{}", r.describe());
    let (a, b) = (records_but_free(&inc), records_but_free(&again));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let cut = if i == 0 { 56 } else { x.0.len() };
        assert!(x.0[..cut] == y.0[..cut] && x.1 == y.1, "record {i} differs");
    }
    // OpenZFS's own incremental raw stream (made by the kernel module in
    // the VM, `scripts/oracle/make-raw-incremental.sh`: files in, a file
    // out, one appended, an xattr) onto a second raw copy: every file of
    // the new snapshot has the sha256 OpenZFS listed.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let oz_inc = work.path().join("oz-inc.zstream");
    let gz = std::fs::read(fixture.join("gcm-inc-openzfs-2.3.zstream.gz")).unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
    std::fs::write(&oz_inc, bytes).unwrap();
    assert!(receive(&oz, &full, "ri/oz").success());
    let r = receive(&oz, &oz_inc, "ri/oz");
    assert!(r.success(), "{}", r.describe());
    let oz_dir = work.path().join("oz-s3");
    oz.ok(&[
        "cp",
        "-r",
        "-L",
        &key,
        "ri/oz@s3:/",
        &oz_dir.to_string_lossy(),
    ]);
    let want_sums = std::fs::read_to_string(fixture.join("gcm-inc-openzfs-2.3.sha256")).unwrap();
    let mut n = 0;
    for line in want_sums.lines() {
        let (sum, path) = line.split_once("  ").unwrap();
        let got = ozfs_testkit::manifest::sha256_file(&oz_dir.join(path)).unwrap();
        assert_eq!(got, sum, "{path}");
        n += 1;
    }
    assert_eq!(n, 49, "files in OpenZFS's @s3");
    oz.ok(&["zpool", "export", "ri"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "ri");
        let material = std::fs::read_to_string(corpus.join("c7-crypt/keys/secret.pass")).unwrap();
        let (got, text) = openzfs_read_encrypted(&zdb, &devs, &material, "ri/raw", "new.bin");
        assert_eq!(got, Some(data), "{text}");
    }
}

/// A damaged raw stream is refused cleanly: OpenZFS's `gcm-raw` with one
/// byte of one record header changed (its END checksum fixed up, so the
/// damage is met by the record checks, not the checksum), many times
/// over. Every receive either succeeds or fails with an error — never a
/// panic, never a leftover file system — and the pool stays clean for
/// ozfs's own space check (every sync) and OpenZFS's `zdb -bcc`.
#[test]
fn damaged_raw_streams_are_refused_cleanly() {
    let oz = ozfs();
    let corpus = corpus_dir();
    let work = scratch("ozfs-test-rawfuzz-");
    let devs = new_pool(&oz, work.path(), "rf");
    let clean = std::fs::read(corpus.join("c7-crypt/gcm-raw.zstream")).unwrap();
    // Where the record headers are (BEGIN's payload skipped).
    let mut heads = Vec::new();
    let mut at = 0;
    while at + 312 <= clean.len() {
        let rec: [u8; 312] = clean[at..at + 312].try_into().unwrap();
        let (r, plen) = ozfs_format::stream::Record::parse(&rec, false).unwrap();
        let plen = match r {
            ozfs_format::stream::Record::Begin(_) => {
                u32::from_le_bytes(rec[4..8].try_into().unwrap()) as usize
            }
            _ => plen as usize,
        };
        if at > 0 {
            heads.push(at);
        }
        at += 312 + plen;
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cases = 60;
    let mut refused = 0;
    for case in 0..cases {
        let mut bytes = clean.clone();
        let head = heads[(next() % heads.len() as u64) as usize];
        // A byte of the record's fields (type and checksum trailer kept).
        let off = head + 8 + (next() % (312 - 40)) as usize;
        let v = next() as u8;
        bytes[off] = if bytes[off] == v { v ^ 0xff } else { v };
        ozfs_testkit::mutate::fix_stream_end(&mut bytes);
        let s = work.path().join("case.zstream");
        std::fs::write(&s, &bytes).unwrap();
        let target = format!("rf/c{case}");
        let r = receive(&oz, &s, &target);
        let listed = oz.ok(&["zfs", "list", "-H", "-o", "name", "-t", "all", "-r", "rf"]);
        if r.success() {
            assert!(
                listed.contains(&format!("{target}@")),
                "case {case}: {listed}"
            );
            oz.ok(&["zfs", "destroy", "-r", &target]);
        } else {
            refused += 1;
            assert!(
                !listed.contains(&target),
                "case {case} (byte {off}): failed but left {target}:\n{}\n{listed}",
                r.describe()
            );
        }
    }
    assert!(refused > 0, "no damage was noticed in {cases} cases");
    oz.ok(&["zpool", "export", "rf"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "rf");
    }
}

/// A new unmounted pool `name` on a 512 MiB image in `<work>/devs`, which
/// is returned.
fn new_pool(oz: &Ozfs, work: &Path, name: &str) -> std::path::PathBuf {
    let devs = work.join("devs");
    std::fs::create_dir_all(&devs).unwrap();
    let img = devs.join("d0.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(512 << 20))
        .unwrap();
    oz.ok(&[
        "zpool",
        "create",
        "-m",
        "none",
        name,
        &img.to_string_lossy(),
    ]);
    devs
}
