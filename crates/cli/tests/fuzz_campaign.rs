//! The structured fuzzing campaign: hostile pool images and send
//! streams, built from a real pool in the test itself, thrown at the real
//! binary with fixed seeds and bounded time.
//!
//! **Pool images.** A small pool is made with `ozfs zpool create` (a file
//! system with files of every shape — inline, one block, indirect, sparse —
//! a fat-ZAP directory, a symlink to a canary directory outside every copy
//! destination, a hard link, a child file system, two snapshots). Each case
//! takes a fresh sparse copy of it and damages *one* piece of metadata
//! with [`ozfs_testkit::mutate::Image`], which recomputes every checksum up
//! to the uberblock so the damage gets past verification: a word of an
//! objset, a dnode field, a block-pointer word of an indirect block, a
//! micro-ZAP name or value (duplicate names, `..`, `/`, other objects), a DSL
//! bonus word, a space-map or config word; or a field of the uberblock or of
//! the label's config nvlist. Then it runs what a user would: `zpool import`
//! (listing and read-only), `zpool status`, `zfs list`, `zfs get all`,
//! `zdb -dddd`, `zdb -b`, `cp -r` of the file system and a snapshot, and,
//! for a third of the cases, a read-write import with a write and an export
//! (the sync path). History records and their offsets and space maps are
//! among the MOS blocks damaged, and `zpool history -il` among the readers.
//!
//! **Streams.** A full and an incremental `ozfs zfs send` stream; each case
//! damages one record header field, a payload byte, a BEGIN name, or drops,
//! duplicates or truncates records, fixes the END checksum (so the damage
//! is not simply refused at the end), and receives it into a fresh copy of
//! the pool. A refused receive must leave the pool as it was (same datasets,
//! `zdb -b` leak check clean); an accepted one must read back (`cp -r`) and
//! stay clean.
//!
//! **Encrypted datasets** (`fuzz_encrypted_images`). A pool with an
//! encrypted file system (aes-256-gcm, a hex key) of the same shapes and a
//! snapshot; each case edits one block of its objset as an attacker
//! without the key can (checksums recomputed, MACs kept: pointer words,
//! pointers swapped or copied over each other, crypt/embedded/byte-order
//! bits flipped, dnode fields, objset words, ciphertext bytes) and reads it
//! *with* the key: `cp -L -r` of the file system and of its snapshot must
//! fail or give exactly what was written — a successful read of anything
//! else is a finding ("silent wrong data"). On the code before indirect
//! MACs were checked it found swapped and copied pointers within 150 cases.
//! A third of the cases import read-write and write, snapshot, remove and
//! destroy with the key.
//!
//! **Raw streams** (`fuzz_raw_streams`). That file system's raw stream
//! (`send -w`), damaged as the other streams are, received into a fresh
//! copy of the pool: the same requirements as for streams, and an
//! accepted one, read with the key, is exact or refused.
//!
//! **Dedup tables** (`fuzz_dedup_tables`). A `dedup=on` file system with
//! four copies of a file, a snapshot, one copy removed; each case damages
//! one block of the pool's dedup table objects (micro- and fat-ZAP fields,
//! entries' DVAs, births and reference counts, their indirect blocks), then
//! writes the same data again, removes copies, destroys the snapshot and
//! runs `zpool status -D`, `zdb -D`, `zdb -b` and `cp -r`.
//!
//! **What fails the test.** A panic (exit 101 or "panicked"), death by a
//! signal (including an allocation abort: every command runs with an
//! address-space limit), a hang (per-command timeout), a file appearing
//! anywhere outside the copy destination or the canary directory changing,
//! a pool left unclean by a refused receive. Every finding names the case,
//! the damage and the command; `OZFS_FUZZ_CASE=N` reruns one case and keeps
//! its files. `OZFS_FUZZ_IMAGE_CASES` / `OZFS_FUZZ_STREAM_CASES` /
//! `OZFS_FUZZ_SEED` scale the campaign (scripts/fuzz-soak.sh runs it long).

mod common;

use ozfs_testkit::mutate::{BlockKind, Image};
use ozfs_testkit::proc::CmdOutput;
use ozfs_testkit::XorShift;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ozfs");
const POOL: &str = "fz";
/// Per-command timeout: every command here takes milliseconds on a 64 MiB pool.
const CMD_TIMEOUT: Duration = Duration::from_secs(30);
/// Address-space limit of every command (an allocation sized from hostile
/// data aborts instead of being served).
const AS_LIMIT: u64 = 4 << 30;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A campaign's size from the environment: `var` cases (else `default`),
/// the seed (`OZFS_FUZZ_SEED`, 13), and the one case `OZFS_FUZZ_CASE`
/// replays (the count then reaches it).
fn campaign(var: &str, default: u64) -> (u64, u64, Option<u64>) {
    let cases = env_num(var, default);
    let seed = env_num("OZFS_FUZZ_SEED", 13);
    let only = std::env::var("OZFS_FUZZ_CASE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    (only.map_or(cases, |o| cases.max(o + 1)), seed, only)
}

fn verbose() -> bool {
    std::env::var_os("OZFS_FUZZ_VERBOSE").is_some()
}

/// One command's outcome and whether it is a finding.
struct Run {
    out: CmdOutput,
}

impl Run {
    fn finding(&self) -> Option<String> {
        let o = &self.out;
        if o.timed_out {
            return Some(format!("hang (> {CMD_TIMEOUT:?})"));
        }
        if o.stderr.contains("panicked") || o.code == Some(101) {
            return Some("panic".into());
        }
        if o.stderr.contains("memory allocation of") {
            return Some("allocation beyond the bound".into());
        }
        if o.code.is_none() {
            return Some("killed by a signal".into());
        }
        None
    }
    fn ok(&self) -> bool {
        self.out.success()
    }
}

/// The sandbox of one campaign: state dir, work dir, canary.
struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        let base = ozfs_testkit::test_tmp_root();
        let root = tempfile::Builder::new()
            .prefix(&format!("ozfs-fuzz-{tag}-"))
            .tempdir_in(base)
            .expect("sandbox");
        let s = Sandbox { root };
        for d in ["state", "dev", "out", "canary", "mnt"] {
            std::fs::create_dir_all(s.p(d)).expect("mkdir");
        }
        std::fs::write(s.p("canary/keep"), b"canary\n").expect("canary");
        std::fs::set_permissions(s.p("canary"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod canary");
        s
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn dev(&self) -> PathBuf {
        self.p("dev/d0")
    }

    /// Runs `ozfs args` with the sandbox's state dir, a timeout and the
    /// address-space limit; `stdin` from a file when given.
    fn ozfs(&self, args: &[&str], stdin: Option<&Path>) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("OZFS_STATE_DIR", self.p("state"))
            .env("RUST_BACKTRACE", "0")
            .env("LC_ALL", "C");
        ozfs_testkit::proc::limit_address_space(&mut cmd, AS_LIMIT);
        let out = match stdin {
            None => ozfs_testkit::proc::run_with_timeout(&mut cmd, CMD_TIMEOUT).expect("run ozfs"),
            Some(f) => run_stdin(cmd, f),
        };
        Run { out }
    }

    /// Clears state, output and (optionally) the device directory.
    fn reset(&self) {
        for d in ["state", "out"] {
            let _ = std::fs::remove_dir_all(self.p(d));
            std::fs::create_dir_all(self.p(d)).expect("mkdir");
        }
    }

    /// What must never change: the sandbox holds only its own directories,
    /// the canary holds only `keep` with its mode.
    fn escapes(&self) -> Option<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.path())
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let expected = ["base", "canary", "dev", "mnt", "out", "state", "streams"];
        if let Some(n) = names.iter().find(|n| !expected.contains(&n.as_str())) {
            return Some(format!("a file appeared outside the destination: {n}"));
        }
        let canary: Vec<String> = std::fs::read_dir(self.p("canary"))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if canary != ["keep"] {
            return Some(format!("the canary directory changed: {canary:?}"));
        }
        match std::fs::symlink_metadata(self.p("canary")) {
            Ok(m) if m.mode() & 0o7777 == 0o755 && m.is_dir() => None,
            Ok(m) => Some(format!(
                "the canary directory's mode changed: {:o}",
                m.mode()
            )),
            Err(e) => Some(format!("the canary directory is gone: {e}")),
        }
    }
}

fn run_stdin(mut cmd: Command, f: &Path) -> CmdOutput {
    let line = format!("{:?} < {}", cmd, f.display());
    let start = Instant::now();
    let file = std::fs::File::open(f).expect("stream file");
    let mut child = cmd
        .stdin(Stdio::from(file))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ozfs");
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st);
        }
        if start.elapsed() > CMD_TIMEOUT {
            timed_out = true;
            let _ = child.kill();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    CmdOutput {
        cmdline: line,
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&t1.join().unwrap_or_default()).into_owned(),
        stderr: String::from_utf8_lossy(&t2.join().unwrap_or_default()).into_owned(),
        timed_out,
        elapsed: start.elapsed(),
    }
}

/// Copies a sparse file quickly (data extents only).
fn sparse_copy(from: &Path, to: &Path) {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    let src = std::fs::File::open(from).expect("open base image");
    let len = src.metadata().expect("stat").len();
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(to)
        .expect("create image copy");
    dst.set_len(len).expect("size image copy");
    let fd = src.as_raw_fd();
    let mut pos: i64 = 0;
    let mut buf = vec![0u8; 1 << 20];
    while (pos as u64) < len {
        // SAFETY: plain lseek on an fd we own.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let hole = if hole < 0 { len as i64 } else { hole };
        let mut off = data as u64;
        while off < hole as u64 {
            let n = ((hole as u64 - off) as usize).min(buf.len());
            src.read_exact_at(&mut buf[..n], off).expect("read base");
            dst.write_all_at(&buf[..n], off).expect("write copy");
            off += n as u64;
        }
        pos = hole;
    }
}

/// Builds the base pool: returns (dataset list of the pool, streams dir).
fn build_base(sb: &Sandbox) {
    let must = |args: &[&str]| {
        let r = sb.ozfs(args, None);
        assert!(r.ok(), "setup failed:\n{}", r.out.describe());
    };
    let f = std::fs::File::create(sb.dev()).expect("dev");
    f.set_len(64 << 20).expect("size dev");
    drop(f);
    let dev = sb.dev();
    let dev = dev.to_str().expect("utf-8 path");
    must(&["zpool", "create", "-m", "none", POOL, dev]);
    must(&["zfs", "create", &format!("{POOL}/fs")]);
    must(&["zfs", "create", &format!("{POOL}/fs/child")]);
    // The tree: every file shape, a fat ZAP, a link to the canary.
    let src = sb.p("out/src");
    std::fs::create_dir_all(src.join("dir/sub")).expect("mkdir");
    std::fs::write(src.join("tiny"), b"x").expect("w");
    std::fs::write(src.join("dir/one"), vec![7u8; 5000]).expect("w");
    let mut rng = XorShift::new(7);
    std::fs::write(src.join("dir/sub/indirect"), rng.bytes(300 << 10)).expect("w");
    let sparse = std::fs::File::create(src.join("sparse")).expect("w");
    sparse.set_len(3 << 20).expect("w");
    {
        use std::os::unix::fs::FileExt;
        sparse.write_all_at(b"middle", 1 << 20).expect("w");
    }
    drop(sparse);
    std::fs::create_dir(src.join("fat")).expect("mkdir");
    for i in 0..8 {
        // A name over 50 bytes makes the directory a fat ZAP.
        let name = format!("{i}-{}", "n".repeat(60));
        std::fs::write(src.join("fat").join(name), [i as u8]).expect("w");
    }
    std::os::unix::fs::symlink(sb.p("canary"), src.join("aaaa")).expect("symlink");
    std::os::unix::fs::symlink("tiny", src.join("rel")).expect("symlink");
    std::fs::hard_link(src.join("tiny"), src.join("dir/tinylink")).expect("link");
    let srcs = src.to_str().expect("utf-8");
    must(&["cp", "-r", srcs, &format!("{POOL}/fs:/t")]);
    must(&["zfs", "snapshot", &format!("{POOL}/fs@s1")]);
    std::fs::write(src.join("tiny"), b"changed").expect("w");
    must(&[
        "cp",
        &format!("{srcs}/tiny"),
        &format!("{POOL}/fs:/t/tiny2"),
    ]);
    must(&["rm", &format!("{POOL}/fs:/t/dir/one")]);
    must(&["zfs", "snapshot", &format!("{POOL}/fs@s2")]);
    std::fs::create_dir_all(sb.p("streams")).expect("mkdir");
    let sh = |script: &str| {
        let o = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .env("OZFS", BIN)
            .env("OZFS_STATE_DIR", sb.p("state"))
            .output()
            .expect("sh");
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let st = sb.p("streams");
    let st = st.to_str().expect("utf-8");
    sh(&format!("\"$OZFS\" zfs send {POOL}/fs@s1 > {st}/full"));
    sh(&format!(
        "\"$OZFS\" zfs send -i {POOL}/fs@s1 {POOL}/fs@s2 > {st}/incr"
    ));
    // A received copy at @s1 for the incremental stream to land on.
    sh(&format!("\"$OZFS\" zfs receive {POOL}/recv < {st}/full"));
    must(&["zpool", "export", POOL]);
    std::fs::create_dir_all(sb.p("base")).expect("mkdir");
    std::fs::rename(sb.dev(), sb.p("base/d0")).expect("move base");
    let _ = std::fs::remove_dir_all(sb.p("out/src"));
}

const INTERESTING: [u64; 23] = [
    0,
    1,
    2,
    0x7f,
    0xff,
    0x100,
    0x1ff,
    0x1000,
    0xffff,
    0x1_0000,
    1 << 20,
    1 << 26,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    1 << 48,
    1 << 56,
    1 << 58,
    1 << 62,
    1 << 63,
    u64::MAX - 1,
    u64::MAX,
];

fn interesting(rng: &mut XorShift, old: u64) -> u64 {
    match rng.range(0, 6) {
        0 => old.wrapping_add(1),
        1 => old.wrapping_sub(1),
        2 => old ^ (1 << rng.range(0, 64)),
        3 => old.wrapping_mul(2),
        _ => INTERESTING[rng.range(0, INTERESTING.len() as u64) as usize],
    }
}

/// Sets the `width`-byte little-endian field at `off` to an interesting value.
fn poke(d: &mut [u8], off: usize, width: usize, rng: &mut XorShift) -> String {
    if off + width > d.len() {
        return "nothing (out of range)".into();
    }
    let mut b = [0u8; 8];
    b[..width].copy_from_slice(&d[off..off + width]);
    let old = u64::from_le_bytes(b);
    let mask = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    let new = interesting(rng, old) & mask;
    d[off..off + width].copy_from_slice(&new.to_le_bytes()[..width]);
    format!("u{} at {off}: {old:#x} -> {new:#x}", width * 8)
}

const DNODE_FIELDS: [(usize, usize, &str); 12] = [
    (0, 1, "type"),
    (1, 1, "indblkshift"),
    (2, 1, "nlevels"),
    (3, 1, "nblkptr"),
    (4, 1, "bonustype"),
    (7, 1, "flags"),
    (8, 2, "datablkszsec"),
    (10, 2, "bonuslen"),
    (12, 1, "extra_slots"),
    (16, 8, "maxblkid"),
    (24, 8, "used"),
    (5, 1, "checksum"),
];

/// Damages one dnode of a dnode block (or the meta-dnode of an objset).
fn damage_dnode(d: &mut [u8], rng: &mut XorShift, slots: usize) -> String {
    // Prefer slots in use.
    let used: Vec<usize> = (0..slots)
        .filter(|&s| d.get(s * 512).is_some_and(|&t| t != 0))
        .collect();
    let slot = if used.is_empty() {
        rng.range(0, slots.max(1) as u64) as usize
    } else {
        used[rng.range(0, used.len() as u64) as usize]
    };
    let base = slot * 512;
    match rng.range(0, 10) {
        0..=5 => {
            let (off, w, name) = DNODE_FIELDS[rng.range(0, DNODE_FIELDS.len() as u64) as usize];
            format!("dnode slot {slot} {name}: {}", poke(d, base + off, w, rng))
        }
        6..=7 => {
            // A word of a block pointer (birth, fill, prop, DVA).
            let bp = rng.range(0, 3) as usize;
            let word = [0, 1, 6, 9, 10, 11][rng.range(0, 6) as usize];
            format!(
                "dnode slot {slot} blkptr[{bp}] word {word}: {}",
                poke(d, base + 64 + bp * 128 + word * 8, 8, rng)
            )
        }
        _ => {
            // The bonus area (znode, DSL dir/dataset fields).
            let off = 64 + 128 + 8 * rng.range(0, 40) as usize;
            format!(
                "dnode slot {slot} bonus word: {}",
                poke(d, base + off, 8, rng)
            )
        }
    }
}

const MZAP_ENT: usize = 64;

/// Damages a micro ZAP: names and values of its entries.
fn damage_mzap(d: &mut [u8], rng: &mut XorShift) -> String {
    let n = d.len() / MZAP_ENT - 1;
    let used: Vec<usize> = (0..n)
        .filter(|&i| d.get(MZAP_ENT * (i + 1) + 14).is_some_and(|&c| c != 0))
        .collect();
    if used.is_empty() {
        return format!("header: {}", poke(d, 8 * rng.range(0, 8) as usize, 8, rng));
    }
    let pick = |rng: &mut XorShift| used[rng.range(0, used.len() as u64) as usize];
    let e = pick(rng);
    let base = MZAP_ENT * (e + 1);
    let name_at = base + 14;
    let set_name = |d: &mut [u8], name: &[u8]| {
        let len = name.len().min(49);
        d[name_at..name_at + 50].fill(0);
        d[name_at..name_at + len].copy_from_slice(&name[..len]);
    };
    match rng.range(0, 8) {
        0 | 1 => {
            let other = pick(rng);
            let name: Vec<u8> =
                d[MZAP_ENT * (other + 1) + 14..MZAP_ENT * (other + 1) + 64].to_vec();
            set_name(d, &name);
            format!("entry {e} renamed as entry {other} (duplicate name)")
        }
        2 => {
            let bad: [&[u8]; 6] = [b"..", b".", b"a/b", b"", b"\xff\xfe", &[b'n'; 50]];
            let b = bad[rng.range(0, bad.len() as u64) as usize];
            set_name(d, b);
            format!("entry {e} named {:?}", String::from_utf8_lossy(b))
        }
        3 | 4 => {
            // The value: another entry's (a second link to the same object).
            let other = pick(rng);
            let v: Vec<u8> = d[MZAP_ENT * (other + 1)..MZAP_ENT * (other + 1) + 8].to_vec();
            d[base..base + 8].copy_from_slice(&v);
            format!("entry {e} points at entry {other}'s object")
        }
        5 | 6 => format!("entry {e} value: {}", poke(d, base, 8, rng)),
        _ => format!("entry {e} cd: {}", poke(d, base + 8, 4, rng)),
    }
}

/// Damages one block of the image; returns a description, or None when the
/// damaged block no longer fits (the case is redrawn).
fn damage_image(img: &mut Image, rng: &mut XorShift) -> Option<String> {
    let which = rng.range(0, 100);
    if which < 5 {
        // The uberblock.
        let word = [1usize, 2, 3, 4, 5, 6, 7, 11, 16, 17][rng.range(0, 10) as usize];
        let mut desc = String::new();
        img.mutate_uberblock(|s| {
            desc = format!("uberblock word {word}: {}", poke(s, word * 8, 8, rng));
        })
        .ok()?;
        return Some(desc);
    }
    if which < 10 {
        return damage_config(img, rng);
    }
    // Choose a block by kind, weighted towards metadata that decoders parse.
    let blocks = img.blocks();
    let kinds: Vec<usize> = match rng.range(0, 10) {
        0 => img.find(|b| b.kind == BlockKind::Objset),
        1..=3 => img.find(|b| b.kind == BlockKind::Dnodes),
        4 => img.find(|b| b.kind == BlockKind::Indirect),
        5..=7 => img.find(|b| ozfs_format::types::object_type_is_zap(b.dmu_type)),
        8 => img.find(|b| b.objset == 0 && b.kind == BlockKind::Data),
        // The pool's history (records and their offsets) and space maps.
        9 if rng.range(0, 2) == 0 => img.find(|b| {
            b.objset == 0
                && (ozfs_format::types::object_type_name(b.object_type).starts_with("SPA history")
                    || b.object_type == ozfs_format::types::ot::SPACE_MAP)
        }),
        _ => (0..blocks.len()).collect(),
    };
    if kinds.is_empty() {
        return None;
    }
    let idx = kinds[rng.range(0, kinds.len() as u64) as usize];
    let b = img.blocks()[idx].clone();
    let mut desc = String::new();
    let mut local = rng.clone();
    let r = img.mutate(idx, |d| {
        let what = match b.kind {
            BlockKind::Objset => {
                if local.range(0, 2) == 0 {
                    damage_dnode(d, &mut local, 1)
                } else {
                    let off = 8 * local.range(0, (d.len() / 8) as u64) as usize;
                    format!("word {}", poke(d, off, 8, &mut local))
                }
            }
            BlockKind::Dnodes => damage_dnode(d, &mut local, d.len() / 512),
            BlockKind::Indirect => {
                let n = d.len() / 128;
                let bp = local.range(0, (n as u64).clamp(1, 4)) as usize;
                let word = [0, 1, 6, 9, 10, 11][local.range(0, 6) as usize];
                format!(
                    "blkptr {bp} word {word}: {}",
                    poke(d, bp * 128 + word * 8, 8, &mut local)
                )
            }
            _ if d.len() >= 8
                && u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]))
                    == 0x8000_0000_0000_0003 =>
            {
                format!("micro ZAP: {}", damage_mzap(d, &mut local))
            }
            _ => {
                let w = [1usize, 2, 4, 8][local.range(0, 4) as usize];
                let span = d.len().min(4096);
                let off = local.range(0, (span / w).max(1) as u64) as usize * w;
                poke(d, off, w, &mut local)
            }
        };
        desc = format!(
            "{:?} block (objset {} object {} L{} blk {} type {}): {what}",
            b.kind, b.objset, b.object, b.level, b.blkid, b.dmu_type
        );
    });
    *rng = local;
    r.ok()?;
    Some(desc)
}

/// Damages the config nvlist of every label the same way.
fn damage_config(img: &mut Image, rng: &mut XorShift) -> Option<String> {
    use ozfs_format::NvValue;
    let choice = rng.range(0, 10);
    let val = interesting(rng, 0);
    let names = [
        "./../PWNED",
        "",
        "a/b",
        "fz@x",
        "mirror",
        "fz\u{1}",
        "c0t0",
        "%x",
    ];
    let name = names[rng.range(0, names.len() as u64) as usize];
    let r = img.mutate_config(|nv| match choice {
        0 => nv.set("name", NvValue::String(name.to_string())),
        1 => nv.set("version", NvValue::Uint64(val)),
        2 => nv.set("pool_guid", NvValue::Uint64(val)),
        3 => nv.set("guid", NvValue::Uint64(val)),
        4 => nv.set("txg", NvValue::Uint64(val)),
        5 => nv.set("state", NvValue::Uint64(val)),
        _ => {
            if let Some(t) = nv.get_nvlist("vdev_tree") {
                let mut t = t.clone();
                let field = ["ashift", "asize", "metaslab_array", "metaslab_shift", "id"]
                    [(choice as usize - 6).min(4)];
                t.set(field, NvValue::Uint64(val));
                nv.set("vdev_tree", NvValue::NvList(t));
            }
        }
    });
    let desc = match choice {
        0 => format!("label config name = {name:?}"),
        1..=5 => format!("label config field {choice} = {val:#x}"),
        _ => format!("label vdev_tree field {} = {val:#x}", choice - 6),
    };
    r.ok()?;
    Some(desc)
}

struct Findings {
    list: Vec<String>,
    keep: PathBuf,
}

impl Findings {
    fn new() -> Findings {
        Findings {
            list: Vec::new(),
            keep: keep_dir(),
        }
    }
    fn check(&mut self, case: &str, damage: &str, r: &Run, sb: &Sandbox) {
        if let Some(f) = r.finding() {
            self.record(
                case,
                damage,
                &format!("{f}: {}", describe_short(&r.out)),
                sb,
            );
        }
    }
    fn record(&mut self, case: &str, damage: &str, what: &str, sb: &Sandbox) {
        let mut s = String::new();
        let _ = write!(s, "{case}: {damage}\n    {what}");
        // Keep the damaged image for a post-mortem (first findings only).
        if self.list.len() < 20 {
            let dst = self.keep.join(case.replace([' ', '/'], "_"));
            let _ = std::fs::create_dir_all(&dst);
            let _ = std::fs::copy(sb.dev(), dst.join("d0"));
        }
        eprintln!("FINDING {s}");
        self.list.push(s);
    }
}

fn describe_short(o: &CmdOutput) -> String {
    let tail: Vec<&str> = o.stderr.lines().take(6).collect();
    format!(
        "`{}` -> {:?}\n      {}",
        o.cmdline,
        o.code,
        tail.join("\n      ")
    )
}

fn keep_dir() -> PathBuf {
    let d = ozfs_testkit::test_tmp_root().join("ozfs-fuzz-findings");
    let _ = std::fs::create_dir_all(&d);
    d
}

fn finish(f: Findings, what: &str, cases: u64, t0: Instant) {
    eprintln!(
        "{what}: {cases} cases in {:.1}s, {} findings (damaged images kept in {})",
        t0.elapsed().as_secs_f64(),
        f.list.len(),
        f.keep.display()
    );
    if !f.list.is_empty() {
        panic!(
            "{} findings in the {what} campaign:\n{}",
            f.list.len(),
            f.list.join("\n")
        );
    }
}

/// Runs the readers over the damaged image in `sb.dev()`.
fn image_case(sb: &Sandbox, f: &mut Findings, case: &str, damage: &str, rw: bool, mount: bool) {
    let dev_dir = sb.p("dev");
    let dev_dir = dev_dir.to_str().expect("utf-8");
    let r = sb.ozfs(&["zpool", "import", "-d", dev_dir], None);
    f.check(case, damage, &r, sb);
    let r = if rw {
        sb.ozfs(&["zpool", "import", "-N", "-d", dev_dir, POOL], None)
    } else {
        sb.ozfs(
            &["zpool", "import", "-d", dev_dir, "-o", "readonly=on", POOL],
            None,
        )
    };
    f.check(case, damage, &r, sb);
    if !r.ok() {
        return;
    }
    let out = sb.p("out");
    let o = |rel: &str| out.join(rel).to_string_lossy().into_owned();
    let fs = format!("{POOL}/fs");
    let cmds: Vec<Vec<String>> = vec![
        vec!["zpool".into(), "status".into(), POOL.into()],
        vec!["zpool".into(), "list".into()],
        vec!["zfs".into(), "list".into(), "-t".into(), "all".into()],
        vec!["zfs".into(), "get".into(), "all".into()],
        vec!["zdb".into(), "-dddd".into(), POOL.into()],
        vec!["zdb".into(), "-b".into(), POOL.into()],
        vec!["zpool".into(), "history".into(), "-il".into(), POOL.into()],
        vec!["cp".into(), "-r".into(), format!("{fs}:/"), o("a")],
        vec!["cp".into(), "-r".into(), format!("{fs}@s1:/"), o("b")],
        vec!["cp".into(), "-r".into(), format!("{POOL}/recv:/"), o("c")],
    ];
    for c in &cmds {
        let args: Vec<&str> = c.iter().map(|s| s.as_str()).collect();
        let r = sb.ozfs(&args, None);
        if verbose() {
            eprintln!("  {:?} {:?} {:?}", args, r.out.code, r.out.elapsed);
        }
        f.check(case, damage, &r, sb);
    }
    if mount {
        mount_case(sb, f, case, damage);
    }
    if rw {
        let src = sb.p("out/in");
        let _ = std::fs::write(&src, b"written after the damage\n");
        let src = src.to_string_lossy().into_owned();
        for c in [
            vec!["cp", &src, "fz/fs:/new"],
            vec!["zfs", "snapshot", "fz/fs@s3"],
            vec!["rm", "fz/fs:/t/tiny"],
            vec!["zfs", "destroy", "fz/fs@s1"],
        ] {
            let r = sb.ozfs(&c, None);
            if verbose() {
                eprintln!(
                    "  {:?} {:?} {:?} {}",
                    c,
                    r.out.code,
                    r.out.elapsed,
                    r.out.stderr.trim()
                );
            }
            f.check(case, damage, &r, sb);
        }
    }
    let r = sb.ozfs(&["zpool", "export", POOL], None);
    f.check(case, damage, &r, sb);
    if let Some(e) = sb.escapes() {
        f.record(case, damage, &e, sb);
    }
}

fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
        })
        .unwrap_or(false)
}

/// Mounts the damaged file system read-only through FUSE (`ozfs mount -o
/// ro`), walks it (`ls -lR`, every file read, every xattr), unmounts it.
/// The server must not panic, die by a signal or hang; errors are allowed.
fn mount_case(sb: &Sandbox, f: &mut Findings, case: &str, damage: &str) {
    let mnt = sb.p("mnt");
    let log = sb.p("out/mount.log");
    let mut cmd = Command::new(BIN);
    cmd.args(["mount", "-o", "ro", &format!("{POOL}/fs")])
        .arg(&mnt)
        .env("OZFS_STATE_DIR", sb.p("state"))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("mount log")));
    ozfs_testkit::proc::limit_address_space(&mut cmd, AS_LIMIT);
    let mut child = cmd.spawn().expect("spawn ozfs mount");
    let t0 = Instant::now();
    let mut exited = None;
    while t0.elapsed() < Duration::from_secs(10) {
        if is_mounted(&mnt) {
            break;
        }
        if let Ok(Some(st)) = child.try_wait() {
            exited = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if exited.is_none() && is_mounted(&mnt) {
        // Walk it; a watchdog kills the server if the walk does not end
        // (a hung FUSE request would otherwise block the walker for ever).
        let pid = child.id() as libc::pid_t;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d2 = done.clone();
        let dog = std::thread::spawn(move || {
            let t = Instant::now();
            while !d2.load(std::sync::atomic::Ordering::SeqCst) {
                if t.elapsed() > CMD_TIMEOUT {
                    // SAFETY: kill(2) on our own child.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            false
        });
        let m = mnt.to_string_lossy();
        let walk = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "ls -lRa '{m}' >/dev/null 2>&1; find '{m}' -type f -exec cat {{}} + >/dev/null 2>&1; \
                 getfattr -R -d '{m}' >/dev/null 2>&1; true"
            ))
            .stdin(Stdio::null())
            .output();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        if dog.join().unwrap_or(false) || walk.is_err() {
            f.record(
                case,
                damage,
                "hang: reading the FUSE mount did not finish",
                sb,
            );
        }
        let _ = Command::new("umount").arg(&mnt).output();
        if is_mounted(&mnt) {
            let _ = Command::new("umount").arg("-l").arg(&mnt).output();
        }
    }
    // The server exits once unmounted.
    let st = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st);
        }
        if t0.elapsed() > CMD_TIMEOUT * 2 {
            let _ = child.kill();
            let _ = child.wait();
            f.record(
                case,
                damage,
                "hang: the FUSE server did not exit after umount",
                sb,
            );
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if verbose() {
        eprintln!(
            "  mount: exited early {exited:?}, then {st:?}: {}",
            text.trim()
        );
    }
    use std::os::unix::process::ExitStatusExt;
    let bad = if text.contains("panicked") || st.and_then(|s| s.code()) == Some(101) {
        Some("panic")
    } else if text.contains("memory allocation of") {
        Some("allocation beyond the bound")
    } else if st.is_some_and(|s| s.signal().is_some()) {
        Some("killed by a signal")
    } else {
        None
    };
    if let Some(b) = bad {
        let tail: Vec<&str> = text.lines().take(6).collect();
        f.record(
            case,
            damage,
            &format!(
                "{b}: `ozfs mount -o ro {POOL}/fs`\n      {}",
                tail.join("\n      ")
            ),
            sb,
        );
    }
}

#[test]
fn fuzz_pool_images() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_IMAGE_CASES", 2000);
    let sb = Sandbox::new("img");
    build_base(&sb);
    let mut f = Findings::new();
    let t0 = Instant::now();
    let mut done = 0;
    let mut skipped = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(1_000_003).wrapping_add(i));
        sb.reset();
        sparse_copy(&sb.p("base/d0"), &sb.dev());
        let mut img = Image::open(&sb.dev()).expect("walk the base image");
        let mut damage = None;
        for _ in 0..8 {
            if let Some(d) = damage_image(&mut img, &mut rng) {
                damage = Some(d);
                break;
            }
        }
        drop(img);
        let Some(damage) = damage else {
            skipped += 1;
            continue;
        };
        let rw = i % 3 == 0;
        let case = format!(
            "image case {i} (seed {seed}{})",
            if rw { ", rw" } else { "" }
        );
        if only.is_some() || verbose() {
            eprintln!("{case}: {damage}");
        }
        let tc = Instant::now();
        image_case(&sb, &mut f, &case, &damage, rw, i % 3 == 1);
        if tc.elapsed() > Duration::from_secs(5) {
            eprintln!("slow: {case} took {:?}: {damage}", tc.elapsed());
        }
        done += 1;
    }
    eprintln!("{skipped} cases drew no damage that fits");
    assert!(
        only.is_some() || done >= cases * 9 / 10,
        "too few cases ran: {done} of {cases}"
    );
    finish(f, "pool image", done, t0);
}

/// Offsets and types of a stream's records (walked on the undamaged stream).
fn records(s: &[u8]) -> Vec<(usize, u32, usize)> {
    use ozfs_format::stream::{Record, RECORD_SIZE};
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + RECORD_SIZE <= s.len() {
        let mut b = [0u8; RECORD_SIZE];
        b.copy_from_slice(&s[pos..pos + RECORD_SIZE]);
        let Ok((_, plen)) = Record::parse(&b, false) else {
            break;
        };
        let ty = u32::from_le_bytes(b[..4].try_into().unwrap_or([0; 4]));
        out.push((pos, ty, plen as usize));
        pos += RECORD_SIZE + plen as usize;
    }
    out
}

fn damage_stream(s: &[u8], rng: &mut XorShift) -> (Vec<u8>, String) {
    use ozfs_format::stream::RECORD_SIZE;
    let recs = records(s);
    let mut out = s.to_vec();
    let (pos, ty, plen) = recs[rng.range(0, recs.len() as u64) as usize];
    let desc = match rng.range(0, 12) {
        0..=4 => {
            // A header field.
            let (off, w) = match rng.range(0, 4) {
                0 => (4, 4),
                1 => (8 + 8 * rng.range(0, 5) as usize, 8),
                2 => (16 + 4 * rng.range(0, 6) as usize, 4),
                _ => (32 + rng.range(0, 4) as usize, 1),
            };
            format!(
                "record at {pos} (type {ty}) {}",
                poke(&mut out[pos..], off, w, rng)
            )
        }
        5 | 6 if plen > 0 => {
            let off = pos + RECORD_SIZE + rng.range(0, plen as u64) as usize;
            let w = [1usize, 2, 4, 8][rng.range(0, 4) as usize];
            format!(
                "payload of record at {pos} (type {ty}) {}",
                poke(&mut out, off, w, rng)
            )
        }
        7 => {
            // The BEGIN name.
            let names: [&[u8]; 7] = [
                b"fz/../x@s1",
                b"fz/a@b@c",
                b"fz/fs@",
                b"@s1",
                b"fz/fs/",
                b"fz/\x01@s",
                &[b'a'; 255],
            ];
            let n = names[rng.range(0, names.len() as u64) as usize];
            out[56..312].fill(0);
            let len = n.len().min(256);
            out[56..56 + len].copy_from_slice(&n[..len]);
            format!("BEGIN name {:?}", String::from_utf8_lossy(n))
        }
        8 if recs.len() > 2 => {
            // Drop a record (not BEGIN or END).
            let k = rng.range(1, recs.len() as u64 - 1) as usize;
            let (p, t, l) = recs[k];
            out.drain(p..p + RECORD_SIZE + l);
            format!("record at {p} (type {t}) dropped")
        }
        9 if recs.len() > 2 => {
            let k = rng.range(1, recs.len() as u64 - 1) as usize;
            let (p, t, l) = recs[k];
            let copy = out[p..p + RECORD_SIZE + l].to_vec();
            let at = recs[rng.range(1, recs.len() as u64) as usize].0;
            out.splice(at..at, copy);
            format!("record at {p} (type {t}) duplicated at {at}")
        }
        10 => {
            let cut = rng.range(0, s.len() as u64) as usize;
            out.truncate(cut);
            format!("truncated at {cut}")
        }
        _ => {
            let off = rng.range(0, s.len() as u64) as usize;
            format!("byte: {}", poke(&mut out, off, 1, rng))
        }
    };
    ozfs_testkit::mutate::fix_stream_end(&mut out);
    (out, desc)
}

#[test]
fn fuzz_send_streams() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_STREAM_CASES", 1000);
    let sb = Sandbox::new("stream");
    build_base(&sb);
    let full = std::fs::read(sb.p("streams/full")).expect("full stream");
    let incr = std::fs::read(sb.p("streams/incr")).expect("incremental stream");
    assert!(records(&full).len() > 5 && records(&incr).len() > 3);
    let mut f = Findings::new();
    let dev_dir = sb.p("dev");
    let dev_dir = dev_dir.to_str().expect("utf-8").to_string();
    // What the pool holds before any receive.
    sparse_copy(&sb.p("base/d0"), &sb.dev());
    let r = sb.ozfs(
        &["zpool", "import", "-d", &dev_dir, "-o", "readonly=on", POOL],
        None,
    );
    assert!(r.ok(), "{}", r.out.describe());
    let before = sb.ozfs(&["zfs", "list", "-H", "-o", "name", "-t", "all"], None);
    assert!(before.ok());
    let before = before.out.stdout;
    sb.ozfs(&["zpool", "export", POOL], None);
    let t0 = Instant::now();
    let mut done = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(999_983).wrapping_add(i));
        let incremental = i % 2 == 1;
        let (bytes, damage) = damage_stream(if incremental { &incr } else { &full }, &mut rng);
        let damage = format!(
            "{} stream: {damage}",
            if incremental { "incremental" } else { "full" }
        );
        let case = format!("stream case {i} (seed {seed})");
        if only.is_some() {
            eprintln!("{case}: {damage}");
        }
        sb.reset();
        sparse_copy(&sb.p("base/d0"), &sb.dev());
        let sfile = sb.p("streams/case");
        std::fs::write(&sfile, &bytes).expect("write stream");
        let r = sb.ozfs(&["zpool", "import", "-N", "-d", &dev_dir, POOL], None);
        assert!(
            r.ok(),
            "{case}: import of the undamaged pool: {}",
            r.out.describe()
        );
        let target = if incremental {
            format!("{POOL}/recv")
        } else {
            format!("{POOL}/new")
        };
        let r = sb.ozfs(&["zfs", "receive", &target], Some(&sfile));
        f.check(&case, &damage, &r, &sb);
        if r.ok() {
            let out = sb.p("out/r").to_string_lossy().into_owned();
            let r2 = sb.ozfs(&["cp", "-r", &format!("{target}:/"), &out], None);
            f.check(&case, &damage, &r2, &sb);
        } else if r.finding().is_none() {
            let now = sb.ozfs(&["zfs", "list", "-H", "-o", "name", "-t", "all"], None);
            f.check(&case, &damage, &now, &sb);
            if now.out.stdout != before {
                f.record(
                    &case,
                    &damage,
                    &format!(
                        "a refused receive changed the datasets:\n{}\nwas:\n{}",
                        now.out.stdout, before
                    ),
                    &sb,
                );
            }
        }
        let chk = sb.ozfs(&["zdb", "-b", POOL], None);
        f.check(&case, &damage, &chk, &sb);
        if chk.finding().is_none() && !chk.ok() {
            f.record(
                &case,
                &damage,
                &format!(
                    "pool not clean after the receive: {}",
                    describe_short(&chk.out)
                ),
                &sb,
            );
        }
        let r = sb.ozfs(&["zpool", "export", POOL], None);
        f.check(&case, &damage, &r, &sb);
        if let Some(e) = sb.escapes() {
            f.record(&case, &damage, &e, &sb);
        }
        done += 1;
    }
    finish(f, "send stream", done, t0);
}

// ---------------------------------------------------------------------
// Encrypted datasets, raw streams, dedup tables, history.
//
// The encrypted campaign has a stronger oracle than "no panic": whatever
// an attacker edits inside the encrypted objset (every checksum up to the
// uberblock recomputed, every MAC kept — [`Image`] forges as an attacker
// without the key would), a read with the key either fails or returns
// exactly what was written. A successful read of different data is a
// finding ("silent wrong data").

/// Where the encrypted campaign's key lives (inside the sandbox's `base`).
fn key_location(sb: &Sandbox) -> String {
    format!("file://{}", sb.p("base/key").display())
}

/// Every entry under `dir`: relative path, kind, and for files a digest
/// of the contents, for symlinks the target. Sorted.
fn manifest(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(d) else {
            out.push(format!("{}: unreadable", d.display()));
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap_or_default();
                out.push(format!("{rel} -> {}", t.display()));
            } else if m.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                let data = std::fs::read(&p).unwrap_or_default();
                let c = ozfs_codec::checksum::sha256(&data);
                out.push(format!("{rel} {} {:x?}", data.len(), &c.0[..2]));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The base pool of the encrypted campaign: `fz/enc` (aes-256-gcm, a hex
/// key) with every file shape and a snapshot; its raw stream in
/// `streams/raw`. Returns the manifest of what `enc` holds.
fn build_crypt_base(sb: &Sandbox) -> Vec<String> {
    let must = |args: &[&str]| {
        let r = sb.ozfs(args, None);
        assert!(r.ok(), "setup failed:\n{}", r.out.describe());
    };
    std::fs::create_dir_all(sb.p("base")).expect("mkdir");
    std::fs::create_dir_all(sb.p("streams")).expect("mkdir");
    std::fs::write(sb.p("base/key"), format!("{}\n", "c3".repeat(32))).expect("key");
    let keyloc = key_location(sb);
    let f = std::fs::File::create(sb.dev()).expect("dev");
    f.set_len(64 << 20).expect("size dev");
    drop(f);
    let dev = sb.dev();
    must(&[
        "zpool",
        "create",
        "-m",
        "none",
        POOL,
        dev.to_str().expect("utf-8"),
    ]);
    must(&[
        "zfs",
        "create",
        "-o",
        "encryption=aes-256-gcm",
        "-o",
        "keyformat=hex",
        "-o",
        &format!("keylocation={keyloc}"),
        &format!("{POOL}/enc"),
    ]);
    let src = sb.p("out/src");
    std::fs::create_dir_all(src.join("dir/sub")).expect("mkdir");
    std::fs::write(src.join("tiny"), b"x").expect("w");
    std::fs::write(src.join("dir/one"), vec![7u8; 5000]).expect("w");
    let mut rng = XorShift::new(11);
    std::fs::write(src.join("dir/sub/indirect"), rng.bytes(300 << 10)).expect("w");
    std::fs::create_dir(src.join("fat")).expect("mkdir");
    for i in 0..8 {
        let name = format!("{i}-{}", "n".repeat(60));
        std::fs::write(src.join("fat").join(name), [i as u8]).expect("w");
    }
    std::os::unix::fs::symlink("tiny", src.join("rel")).expect("symlink");
    let srcs = src.to_str().expect("utf-8");
    must(&["cp", "-L", &keyloc, "-r", srcs, &format!("{POOL}/enc:/t")]);
    must(&["zfs", "snapshot", &format!("{POOL}/enc@s1")]);
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "\"$OZFS\" zfs send -w {POOL}/enc@s1 > '{}'",
            sb.p("streams/raw").display()
        ))
        .env("OZFS", BIN)
        .env("OZFS_STATE_DIR", sb.p("state"))
        .output()
        .expect("sh");
    assert!(
        o.status.success(),
        "raw send: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    must(&["zpool", "export", POOL]);
    std::fs::rename(sb.dev(), sb.p("base/d0")).expect("move base");
    // What `cp -r fz/enc:/` gives: `t` and below.
    let _ = std::fs::remove_dir_all(sb.p("out/want"));
    std::fs::create_dir_all(sb.p("out/want")).expect("mkdir");
    let st = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(sb.p("out/want/t"))
        .status()
        .expect("cp");
    assert!(st.success());
    let want = manifest(&sb.p("out/want"));
    let _ = std::fs::remove_dir_all(sb.p("out/src"));
    want
}

/// Damages one block of objset `os` as an attacker without the key would.
fn damage_crypt_block(img: &mut Image, rng: &mut XorShift, os: u64) -> Option<String> {
    let pick: Vec<usize> = match rng.range(0, 10) {
        0 => img.find(|b| b.objset == os && b.kind == BlockKind::Objset),
        1..=3 => img.find(|b| b.objset == os && b.kind == BlockKind::Dnodes),
        4..=7 => img.find(|b| b.objset == os && b.kind == BlockKind::Indirect),
        _ => img.find(|b| b.objset == os),
    };
    if pick.is_empty() {
        return None;
    }
    let idx = pick[rng.range(0, pick.len() as u64) as usize];
    let b = img.blocks()[idx].clone();
    let mut local = rng.clone();
    let mut desc = String::new();
    let r = img.mutate(idx, |d| {
        let n = d.len() / 128;
        let what = match b.kind {
            BlockKind::Indirect if n >= 2 => {
                let i = local.range(0, (n as u64).min(4)) as usize;
                let j = (i + 1 + local.range(0, 2) as usize) % n.clamp(2, 4);
                match local.range(0, 5) {
                    0 => {
                        // Two children swapped.
                        let (a, c) = (i.min(j), i.max(j));
                        if a != c {
                            let (x, y) = d.split_at_mut(c * 128);
                            x[a * 128..a * 128 + 128].swap_with_slice(&mut y[..128]);
                        }
                        format!("blkptr {a} and {c} swapped")
                    }
                    1 => {
                        // One child copied over another.
                        let c = d[i * 128..i * 128 + 128].to_vec();
                        d[j * 128..j * 128 + 128].copy_from_slice(&c);
                        format!("blkptr {i} copied over {j}")
                    }
                    2 => {
                        // The crypt bit, embedded bit or byte order flipped.
                        let bit = [61u32, 39, 63][local.range(0, 3) as usize];
                        let off = i * 128 + 48;
                        let mut w =
                            u64::from_le_bytes(d[off..off + 8].try_into().unwrap_or([0; 8]));
                        w ^= 1 << bit;
                        d[off..off + 8].copy_from_slice(&w.to_le_bytes());
                        format!("blkptr {i} prop bit {bit} flipped")
                    }
                    _ => {
                        let word =
                            [0, 1, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15][local.range(0, 12) as usize];
                        format!(
                            "blkptr {i} word {word}: {}",
                            poke(d, i * 128 + word * 8, 8, &mut local)
                        )
                    }
                }
            }
            BlockKind::Objset => {
                if local.range(0, 2) == 0 {
                    damage_dnode(d, &mut local, 1)
                } else {
                    let off = 8 * local.range(0, (d.len() / 8) as u64) as usize;
                    format!("word {}", poke(d, off, 8, &mut local))
                }
            }
            BlockKind::Dnodes => damage_dnode(d, &mut local, d.len() / 512),
            _ => {
                let w = [1usize, 2, 4, 8][local.range(0, 4) as usize];
                let span = d.len().min(4096);
                let off = local.range(0, (span / w).max(1) as u64) as usize * w;
                poke(d, off, w, &mut local)
            }
        };
        desc = format!(
            "{:?} block (objset {} object {} L{} blk {} type {}): {what}",
            b.kind, b.objset, b.object, b.level, b.blkid, b.dmu_type
        );
    });
    *rng = local;
    r.ok()?;
    Some(desc)
}

/// A copy with the key: a failure is fine, a success must be exact.
fn keyed_copy(
    sb: &Sandbox,
    f: &mut Findings,
    case: &str,
    damage: &str,
    from: &str,
    to: &str,
    want: &[String],
) {
    let out = sb.p(&format!("out/{to}"));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("mkdir");
    let dst = out.join("t");
    let r = sb.ozfs(
        &[
            "cp",
            "-L",
            &key_location(sb),
            "-r",
            &format!("{from}:/t"),
            dst.to_str().expect("utf-8"),
        ],
        None,
    );
    f.check(case, damage, &r, sb);
    if r.ok() {
        let got = manifest(&out);
        if got != want {
            let diff: Vec<String> = got
                .iter()
                .filter(|l| !want.contains(l))
                .take(4)
                .cloned()
                .collect();
            f.record(
                case,
                damage,
                &format!("silent wrong data: `cp -L -r {from}:/t` succeeded with {diff:?}"),
                sb,
            );
        }
    }
}

#[test]
fn fuzz_encrypted_images() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_CRYPT_CASES", 300);
    let sb = Sandbox::new("crypt");
    let want = build_crypt_base(&sb);
    let base = Image::open(&sb.p("base/d0")).expect("walk the base image");
    let os = base
        .blocks()
        .iter()
        .find(|b| b.kind == BlockKind::Objset && b.bp.uses_crypt())
        .map(|b| b.objset)
        .expect("the encrypted objset");
    drop(base);
    let mut f = Findings::new();
    let dev_dir = sb.p("dev").to_string_lossy().into_owned();
    let t0 = Instant::now();
    let mut done = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(1_000_033).wrapping_add(i));
        sb.reset();
        sparse_copy(&sb.p("base/d0"), &sb.dev());
        let mut img = Image::open(&sb.dev()).expect("walk the base image");
        let damage = (0..8).find_map(|_| damage_crypt_block(&mut img, &mut rng, os));
        drop(img);
        let Some(damage) = damage else {
            continue;
        };
        let rw = i % 3 == 0;
        let case = format!(
            "encrypted case {i} (seed {seed}{})",
            if rw { ", rw" } else { "" }
        );
        if only.is_some() || verbose() {
            eprintln!("{case}: {damage}");
        }
        let r = if rw {
            sb.ozfs(&["zpool", "import", "-N", "-d", &dev_dir, POOL], None)
        } else {
            sb.ozfs(
                &["zpool", "import", "-d", &dev_dir, "-o", "readonly=on", POOL],
                None,
            )
        };
        f.check(&case, &damage, &r, &sb);
        if r.ok() {
            keyed_copy(
                &sb,
                &mut f,
                &case,
                &damage,
                &format!("{POOL}/enc"),
                "a",
                &want,
            );
            keyed_copy(
                &sb,
                &mut f,
                &case,
                &damage,
                &format!("{POOL}/enc@s1"),
                "b",
                &want,
            );
            for c in [
                vec!["zfs", "list", "-t", "all"],
                vec!["zfs", "get", "all", "fz/enc"],
                vec!["zdb", "-dddd", POOL],
                vec!["zdb", "-b", POOL],
            ] {
                let r = sb.ozfs(&c, None);
                f.check(&case, &damage, &r, &sb);
            }
            if rw {
                let src = sb.p("out/in");
                let _ = std::fs::write(&src, b"written after the damage\n");
                let src = src.to_string_lossy().into_owned();
                let keyloc = key_location(&sb);
                for c in [
                    vec!["cp", "-L", &keyloc, &src, "fz/enc:/new"],
                    vec!["zfs", "snapshot", "fz/enc@s2"],
                    vec!["rm", "-L", &keyloc, "fz/enc:/t/tiny"],
                    vec!["zfs", "destroy", "fz/enc@s1"],
                ] {
                    let r = sb.ozfs(&c, None);
                    f.check(&case, &damage, &r, &sb);
                }
            }
            let r = sb.ozfs(&["zpool", "export", POOL], None);
            f.check(&case, &damage, &r, &sb);
        }
        if let Some(e) = sb.escapes() {
            f.record(&case, &damage, &e, &sb);
        }
        done += 1;
    }
    assert!(
        only.is_some() || done >= cases * 9 / 10,
        "too few cases ran: {done} of {cases}"
    );
    finish(f, "encrypted image", done, t0);
}

#[test]
fn fuzz_raw_streams() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_RAW_CASES", 200);
    let sb = Sandbox::new("raw");
    let want = build_crypt_base(&sb);
    let raw = std::fs::read(sb.p("streams/raw")).expect("raw stream");
    assert!(records(&raw).len() > 5);
    let mut f = Findings::new();
    let dev_dir = sb.p("dev").to_string_lossy().into_owned();
    let t0 = Instant::now();
    let mut done = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(999_979).wrapping_add(i));
        let (bytes, damage) = damage_stream(&raw, &mut rng);
        let damage = format!("raw stream: {damage}");
        let case = format!("raw stream case {i} (seed {seed})");
        if only.is_some() {
            eprintln!("{case}: {damage}");
        }
        sb.reset();
        sparse_copy(&sb.p("base/d0"), &sb.dev());
        let sfile = sb.p("streams/case");
        std::fs::write(&sfile, &bytes).expect("write stream");
        let r = sb.ozfs(&["zpool", "import", "-N", "-d", &dev_dir, POOL], None);
        assert!(r.ok(), "{case}: import: {}", r.out.describe());
        let r = sb.ozfs(&["zfs", "receive", "fz/new"], Some(&sfile));
        f.check(&case, &damage, &r, &sb);
        if r.ok() {
            // Received raw: still sealed with the same key, so a read with
            // it either fails or gives exactly what was sent.
            keyed_copy(&sb, &mut f, &case, &damage, "fz/new", "r", &want);
        }
        let chk = sb.ozfs(&["zdb", "-b", POOL], None);
        f.check(&case, &damage, &chk, &sb);
        if chk.finding().is_none() && !chk.ok() {
            f.record(
                &case,
                &damage,
                &format!(
                    "pool not clean after the receive: {}",
                    describe_short(&chk.out)
                ),
                &sb,
            );
        }
        let r = sb.ozfs(&["zpool", "export", POOL], None);
        f.check(&case, &damage, &r, &sb);
        if let Some(e) = sb.escapes() {
            f.record(&case, &damage, &e, &sb);
        }
        done += 1;
    }
    finish(f, "raw stream", done, t0);
}

/// The base pool of the dedup campaign: `fz/dd` with `dedup=on`, four
/// copies of one file and a snapshot, one copy removed since (references
/// counted 4 and 3 in the table).
fn build_dedup_base(sb: &Sandbox) {
    let must = |args: &[&str]| {
        let r = sb.ozfs(args, None);
        assert!(r.ok(), "setup failed:\n{}", r.out.describe());
    };
    std::fs::create_dir_all(sb.p("base")).expect("mkdir");
    let f = std::fs::File::create(sb.dev()).expect("dev");
    f.set_len(64 << 20).expect("size dev");
    drop(f);
    let dev = sb.dev();
    must(&[
        "zpool",
        "create",
        "-m",
        "none",
        POOL,
        dev.to_str().expect("utf-8"),
    ]);
    must(&["zfs", "create", "-o", "dedup=on", &format!("{POOL}/dd")]);
    let src = sb.p("out/src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let data = XorShift::new(5).bytes(512 << 10);
    for i in 0..4 {
        std::fs::write(src.join(format!("copy{i}")), &data).expect("w");
    }
    std::fs::write(src.join("half"), &data[..256 << 10]).expect("w");
    must(&[
        "cp",
        "-r",
        src.to_str().expect("utf-8"),
        &format!("{POOL}/dd:/t"),
    ]);
    must(&["zfs", "snapshot", &format!("{POOL}/dd@s1")]);
    must(&["rm", &format!("{POOL}/dd:/t/copy3")]);
    must(&["zpool", "export", POOL]);
    std::fs::rename(sb.dev(), sb.p("base/d0")).expect("move base");
    let _ = std::fs::remove_dir_all(src);
}

#[test]
fn fuzz_dedup_tables() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_DEDUP_CASES", 200);
    let sb = Sandbox::new("dedup");
    build_dedup_base(&sb);
    let is_ddt = |t: u8| ozfs_format::types::object_type_name(t).starts_with("DDT");
    {
        let base = Image::open(&sb.p("base/d0")).expect("walk the base image");
        assert!(
            !base
                .find(|b| b.objset == 0 && is_ddt(b.object_type))
                .is_empty(),
            "the base pool has no dedup table"
        );
    }
    let mut f = Findings::new();
    let dev_dir = sb.p("dev").to_string_lossy().into_owned();
    let t0 = Instant::now();
    let mut done = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(1_000_037).wrapping_add(i));
        sb.reset();
        sparse_copy(&sb.p("base/d0"), &sb.dev());
        let mut img = Image::open(&sb.dev()).expect("walk the base image");
        let damage = (0..8).find_map(|_| {
            let pick = img.find(|b| b.objset == 0 && is_ddt(b.object_type));
            let idx = pick[rng.range(0, pick.len() as u64) as usize];
            let b = img.blocks()[idx].clone();
            let mut local = rng.clone();
            let mut desc = String::new();
            let r = img.mutate(idx, |d| {
                let what = if b.kind == BlockKind::Indirect {
                    let n = (d.len() / 128).clamp(1, 4) as u64;
                    let bp = local.range(0, n) as usize;
                    let word = [0, 1, 6, 9, 10, 11][local.range(0, 6) as usize];
                    format!(
                        "blkptr {bp} word {word}: {}",
                        poke(d, bp * 128 + word * 8, 8, &mut local)
                    )
                } else if d.len() >= 8
                    && u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]))
                        == 0x8000_0000_0000_0003
                {
                    format!("micro ZAP: {}", damage_mzap(d, &mut local))
                } else {
                    // Fat ZAP leaves and headers: entries, chunk links,
                    // hashes, and the entries' values (DDT keys and
                    // physical entries: DVAs, births, refcounts).
                    let w = [1usize, 2, 4, 8, 8, 8][local.range(0, 6) as usize];
                    let off = local.range(0, (d.len() / w).max(1) as u64) as usize * w;
                    poke(d, off, w, &mut local)
                };
                desc = format!(
                    "{} {:?} block (object {} L{} blk {}): {what}",
                    ozfs_format::types::object_type_name(b.object_type),
                    b.kind,
                    b.object,
                    b.level,
                    b.blkid
                );
            });
            rng = local;
            r.ok().map(|()| desc)
        });
        drop(img);
        let Some(damage) = damage else {
            continue;
        };
        let case = format!("dedup case {i} (seed {seed})");
        if only.is_some() || verbose() {
            eprintln!("{case}: {damage}");
        }
        let r = sb.ozfs(&["zpool", "import", "-N", "-d", &dev_dir, POOL], None);
        f.check(&case, &damage, &r, &sb);
        if r.ok() {
            // Writes that look the table up (the same blocks again), frees
            // that drop references, a snapshot destroyed, then the readers.
            let src = sb.p("out/in");
            let data = XorShift::new(5).bytes(512 << 10);
            let _ = std::fs::write(&src, &data);
            let src = src.to_string_lossy().into_owned();
            let out = sb.p("out/a").to_string_lossy().into_owned();
            for c in [
                vec!["cp", &src, "fz/dd:/again"],
                vec!["rm", "fz/dd:/t/copy0"],
                vec!["zfs", "destroy", "fz/dd@s1"],
                vec!["rm", "fz/dd:/t/half"],
                vec!["zpool", "status", "-D", POOL],
                vec!["zpool", "list", POOL],
                vec!["zdb", "-D", POOL],
                vec!["zdb", "-b", POOL],
                vec!["cp", "-r", "fz/dd:/", &out],
            ] {
                let r = sb.ozfs(&c, None);
                if verbose() {
                    eprintln!("  {:?} {:?} {}", c, r.out.code, r.out.stderr.trim());
                }
                f.check(&case, &damage, &r, &sb);
            }
            let r = sb.ozfs(&["zpool", "export", POOL], None);
            f.check(&case, &damage, &r, &sb);
        }
        if let Some(e) = sb.escapes() {
            f.record(&case, &damage, &e, &sb);
        }
        done += 1;
    }
    finish(f, "dedup table", done, t0);
}

/// The OpenZFS corpus (`OZFS_CORPUS`, else `../shared/corpus/openzfs-2.3`
/// beside the checkout).
fn corpus() -> PathBuf {
    std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| ozfs_testkit::daemon::repo_root().join("../shared/corpus/openzfs-2.3"))
}

/// Damages the top-level vdev of a label config: geometry fields, the
/// expansion record, the children.
fn damage_vdev_tree(nv: &mut ozfs_format::NvList, choice: u64, val: u64, val2: u64) {
    use ozfs_format::NvValue;
    let Some(mut t) = nv.get_nvlist("vdev_tree").cloned() else {
        return;
    };
    const FIELDS: [&str; 11] = [
        "nparity",
        "draid_ndata",
        "draid_nspares",
        "draid_ngroups",
        "ashift",
        "asize",
        "id",
        "raidz_expanding",
        "metaslab_array",
        "metaslab_shift",
        "guid",
    ];
    match choice {
        0..=10 => t.set(FIELDS[choice as usize], NvValue::Uint64(val)),
        11 => {
            let n = (val2 % 5) as usize;
            let txgs: Vec<u64> = (0..n).map(|i| val.wrapping_add(i as u64 * val2)).collect();
            t.set("raidz_expand_txgs", NvValue::Uint64Array(txgs));
        }
        _ => {
            if let Some(ch) = t.get_nvlist_array("children") {
                let mut ch = ch.to_vec();
                let n = ch.len().max(1);
                let i = (val2 as usize) % n;
                match choice {
                    12 if !ch.is_empty() => {
                        ch.remove(i);
                    }
                    13 if !ch.is_empty() => {
                        let c = ch[i].clone();
                        ch.push(c);
                    }
                    14 if ch.len() > 1 => {
                        let j = (i + 1) % ch.len();
                        ch.swap(i, j)
                    }
                    _ if !ch.is_empty() => {
                        let f = ["guid", "id", "ashift", "asize"][(val2 % 4) as usize];
                        ch[i].set(f, NvValue::Uint64(val));
                    }
                    _ => {}
                }
                t.set("children", NvValue::NvListArray(ch));
            }
        }
    }
    nv.set("vdev_tree", NvValue::NvList(t));
}

/// OpenZFS's dRAID, expanded RAID-Z and device-removal pools (the corpus),
/// each case with one piece of damage made to verify: the top-level vdev
/// of every label of every device (dRAID geometry, the expansion record,
/// the children), or, on the removal pool, whose remaining device the
/// block walker reads, a block of the MOS config, of the removed device's
/// mapping and births objects, or of a space map. Then the readers: import
/// (listing and read-only), status, `zfs list`, `zdb -b`, `cp -r`.
#[test]
fn fuzz_vdev_geometry() {
    let (cases, seed, only) = campaign("OZFS_FUZZ_GEOMETRY_CASES", 150);
    let corpus = corpus();
    if !corpus.is_dir() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{}: the OpenZFS corpus is missing",
            corpus.display()
        );
        eprintln!("skipped: no corpus at {}", corpus.display());
        return;
    }
    let sb = Sandbox::new("geometry");
    let pools = ["c8-draid", "c9-expand", "c10-removal"];
    let mut devs: Vec<Vec<String>> = Vec::new();
    for p in pools {
        let dir = sb.p(&format!("base/{p}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        common::unpack_corpus(&corpus.join(p), &dir);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("unpacked pool")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        devs.push(names);
    }
    let mut f = Findings::new();
    let dev_dir = sb.p("dev").to_string_lossy().into_owned();
    let t0 = Instant::now();
    let mut done = 0;
    for i in 0..cases {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let mut rng = XorShift::new(seed.wrapping_mul(1_000_039).wrapping_add(i));
        let which = (i % pools.len() as u64) as usize;
        let pool = pools[which];
        sb.reset();
        let _ = std::fs::remove_dir_all(sb.p("dev"));
        std::fs::create_dir_all(sb.p("dev")).expect("mkdir");
        for d in &devs[which] {
            sparse_copy(
                &sb.p(&format!("base/{pool}/{d}")),
                &sb.p(&format!("dev/{d}")),
            );
        }
        let damage = if pool == "c10-removal" && rng.range(0, 2) == 0 {
            let mut img = Image::open(&sb.p("dev/d0.img")).expect("walk the removal pool");
            let pick = img.find(|b| {
                b.objset == 0
                    && b.kind != BlockKind::Objset
                    && (b.object_type >= 0x80
                        || ozfs_format::types::object_type_name(b.object_type).contains("nvlist")
                        || b.object_type == ozfs_format::types::ot::SPACE_MAP)
            });
            if pick.is_empty() {
                continue;
            }
            let idx = pick[rng.range(0, pick.len() as u64) as usize];
            let b = img.blocks()[idx].clone();
            let mut local = rng.clone();
            let mut desc = String::new();
            let r = img.mutate(idx, |d| {
                let w = [4usize, 8, 8][local.range(0, 3) as usize];
                let span = d.len().min(4096);
                let off = local.range(0, (span / w).max(1) as u64) as usize * w;
                desc = format!(
                    "MOS object {} (type {:#x}) L{} blk {}: {}",
                    b.object,
                    b.object_type,
                    b.level,
                    b.blkid,
                    poke(d, off, w, &mut local)
                );
            });
            if r.is_err() {
                continue;
            }
            desc
        } else {
            let choice = rng.range(0, 16);
            let val = interesting(&mut rng, 0);
            let val2 = rng.range(0, 1 << 20);
            for d in &devs[which] {
                ozfs_testkit::mutate::mutate_device_config(&sb.p(&format!("dev/{d}")), |nv| {
                    damage_vdev_tree(nv, choice, val, val2)
                })
                .expect("edit a label config");
            }
            format!("vdev_tree edit {choice} ({val:#x}, {val2})")
        };
        let case = format!("geometry case {i} ({pool}, seed {seed})");
        if only.is_some() || verbose() {
            eprintln!("{case}: {damage}");
        }
        let r = sb.ozfs(&["zpool", "import", "-d", &dev_dir], None);
        f.check(&case, &damage, &r, &sb);
        let r = sb.ozfs(
            &["zpool", "import", "-d", &dev_dir, "-o", "readonly=on", pool],
            None,
        );
        f.check(&case, &damage, &r, &sb);
        if r.ok() {
            let out = sb.p("out/a").to_string_lossy().into_owned();
            for c in [
                vec!["zpool", "status", pool],
                vec!["zfs", "list", "-t", "all"],
                vec!["zdb", "-b", pool],
                vec!["cp", "-r", &format!("{pool}:/"), &out],
            ] {
                let r = sb.ozfs(&c, None);
                if verbose() {
                    eprintln!("  {:?} {:?} {}", c, r.out.code, r.out.stderr.trim());
                }
                f.check(&case, &damage, &r, &sb);
            }
            let r = sb.ozfs(&["zpool", "export", pool], None);
            f.check(&case, &damage, &r, &sb);
        }
        if let Some(e) = sb.escapes() {
            f.record(&case, &damage, &e, &sb);
        }
        done += 1;
    }
    finish(f, "vdev geometry", done, t0);
}
