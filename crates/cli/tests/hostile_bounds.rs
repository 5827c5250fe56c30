//! Hostile pools: sizes, counts and indices from disk bound
//! nothing before they are checked against what holds them.
//!
//! A pool is made with `ozfs zpool create` (a file system with a
//! two-level file, small files, a directory), exported, and damaged at one
//! field with [`ozfs_testkit::mutate::Image`], which recomputes every
//! checksum up to the uberblock so the damage reaches the decoders:
//!
//! * (a) the MOS meta-dnode's `datablkszsec` 32 → 64: dnode blocks are
//!   declared 32 K but are 16 K (the slot of object 40 would lie past the
//!   block's end; the writer's fill count indexed past it on import);
//! * (b) a file's dnode `maxblkid` → 2^58 (beyond its two-level tree and
//!   any 2^64-byte object);
//! * (c) the file system's meta-dnode `maxblkid` → 2^40, within its
//!   7-level tree: 2^45 object numbers, a few of which exist (zdb listed
//!   1..2^45 in one allocation, `zdb -b` and `send` looped over them);
//! * (d) the file system's meta-dnode `datablkszsec` 32 → 64 (the read
//!   path: `cp` and `zdb` sliced the dnode block past its end);
//! * (e) a directory entry renamed as its neighbour, a symlink to a canary
//!   directory outside the copy, and moved after it: `cp -r` met the
//!   symlink first, then took it for the directory of the same name and
//!   wrote the directory's contents through it. The canary must not change.
//!
//! For each, what a user would run — `zpool import` (listing, then the
//! import), `zfs list`, `zfs get all`, `zdb -dddd`, `zdb -b`, `cp -r`,
//! `zfs snapshot` + `zfs send`, `rm`, `zpool export` (or `zdb -e` when the
//! import is refused) — must succeed or fail with a message, never panic
//! (exit 101, "panicked"), die by a signal (allocation aborts: every command
//! runs under an address-space limit) or hang (per-command timeout).
//!
//! Also: a command whose reader goes away (`ozfs zdb -dddd POOL | head -1`)
//! exits quietly by SIGPIPE, as OpenZFS's tools do, instead of panicking
//! on the broken pipe.

use ozfs_testkit::mutate::{BlockKind, Image};
use ozfs_testkit::proc::CmdOutput;
use ozfs_testkit::XorShift;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ozfs");
const POOL: &str = "hb";
/// Per command: each takes well under a second on this 64 MiB pool; the
/// margin is for a loaded machine.
const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// Address-space limit of every command: an allocation sized from a
/// hostile count aborts instead of being served.
const AS_LIMIT: u64 = 4 << 30;

struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::Builder::new()
            .prefix("ozfs-hostile-bounds-")
            .tempdir_in(ozfs_testkit::test_tmp_root())
            .expect("sandbox");
        let s = Sandbox { root };
        for d in ["state", "dev", "out", "base", "canary"] {
            std::fs::create_dir_all(s.p(d)).expect("mkdir");
        }
        std::fs::write(s.p("canary/keep"), b"canary\n").expect("canary");
        s
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn dev(&self) -> PathBuf {
        self.p("dev/d0")
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("OZFS_STATE_DIR", self.p("state"))
            .env("RUST_BACKTRACE", "0")
            .env("LC_ALL", "C");
        ozfs_testkit::proc::limit_address_space(&mut cmd, AS_LIMIT);
        cmd
    }
    fn ozfs(&self, args: &[&str]) -> CmdOutput {
        ozfs_testkit::proc::run_with_timeout(&mut self.cmd(args), CMD_TIMEOUT).expect("run ozfs")
    }
    fn must(&self, args: &[&str]) {
        let o = self.ozfs(args);
        assert!(o.success(), "setup failed:\n{}", o.describe());
    }
}

/// What makes a run a finding: a panic, a signal, an allocation abort, a hang.
fn finding(o: &CmdOutput) -> Option<&'static str> {
    if o.timed_out {
        Some("hang")
    } else if o.stderr.contains("panicked") || o.code == Some(101) {
        Some("panic")
    } else if o.stderr.contains("memory allocation of") {
        Some("allocation beyond the bound")
    } else if o.code.is_none() {
        Some("killed by a signal")
    } else {
        None
    }
}

/// The base pool, exported, in `base/d0`.
fn build_base(sb: &Sandbox) {
    let f = std::fs::File::create(sb.dev()).expect("dev");
    f.set_len(64 << 20).expect("size dev");
    drop(f);
    let dev = sb.dev();
    let dev = dev.to_str().expect("utf-8 path");
    sb.must(&["zpool", "create", "-m", "none", POOL, dev]);
    sb.must(&["zfs", "create", &format!("{POOL}/fs")]);
    let src = sb.p("out/src");
    std::fs::create_dir_all(src.join("d")).expect("mkdir");
    // 300 K in 128 K records: a two-level file of three blocks.
    std::fs::write(src.join("big"), XorShift::new(13).bytes(300 << 10)).expect("w");
    std::fs::write(src.join("small"), b"hi\n").expect("w");
    std::fs::write(src.join("d/f"), b"x\n").expect("w");
    // Relative, from where `cp -r POOL/fs:/ out/a` puts it (out/a/t/aaaa):
    // the sandbox's canary directory.
    std::os::unix::fs::symlink("../../../canary", src.join("aaaa")).expect("symlink");
    let srcs = src.to_str().expect("utf-8");
    sb.must(&["cp", "-r", srcs, &format!("{POOL}/fs:/t")]);
    sb.must(&["zpool", "export", POOL]);
    std::fs::rename(sb.dev(), sb.p("base/d0")).expect("move base");
    let _ = std::fs::remove_dir_all(src);
}

/// The DSL dataset (MOS object) of the file system: the objset of its blocks
/// that holds the three-block file.
fn big_file(img: &Image) -> (u64, u64) {
    let b = img
        .blocks()
        .iter()
        .find(|b| {
            b.kind == BlockKind::Data
                && b.objset != 0
                && b.level == 0
                && b.blkid == 2
                && b.object_type == ozfs_format::types::ot::PLAIN_FILE_CONTENTS
        })
        .expect("the three-block file");
    (b.objset, b.object)
}

/// The objset block of objset `os` (0: the MOS).
fn objset_block(img: &Image, os: u64) -> usize {
    img.find(|b| b.kind == BlockKind::Objset && b.objset == os)
        .first()
        .copied()
        .expect("objset block")
}

fn u16_at(d: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([d[off], d[off + 1]])
}

/// Applies damage `case` to the image in `sb.dev()`.
fn damage(img: &mut Image, case: char) -> Result<String, String> {
    // The meta-dnode is the first 512 bytes of the objset block;
    // datablkszsec at 8 (u16), maxblkid at 16 (u64).
    match case {
        'a' | 'd' => {
            let os = if case == 'a' { 0 } else { big_file(img).0 };
            let idx = objset_block(img, os);
            img.mutate(idx, |d| {
                assert_eq!(u16_at(d, 8), 32, "a 16 K dnode block size");
                d[8..10].copy_from_slice(&64u16.to_ne_bytes());
            })
            .map_err(|e| format!("{e:?}"))?;
            Ok(format!("objset {os}: meta-dnode datablkszsec 32 -> 64"))
        }
        'b' => {
            let (os, obj) = big_file(img);
            let blkid = obj * 512 / 16384;
            let idx = img
                .find(|b| {
                    b.kind == BlockKind::Dnodes
                        && b.objset == os
                        && b.level == 0
                        && b.blkid == blkid
                })
                .first()
                .copied()
                .expect("dnode block of the file");
            let off = (obj * 512 % 16384) as usize;
            img.mutate(idx, |d| {
                let old: [u8; 8] = d[off + 16..off + 24].try_into().expect("8 bytes");
                assert_eq!(u64::from_ne_bytes(old), 2, "the file's maxblkid");
                d[off + 16..off + 24].copy_from_slice(&(1u64 << 58).to_ne_bytes());
            })
            .map_err(|e| format!("{e:?}"))?;
            Ok(format!("objset {os} object {obj}: maxblkid 2 -> 2^58"))
        }
        'c' => {
            let os = big_file(img).0;
            let idx = objset_block(img, os);
            img.mutate(idx, |d| {
                assert!(d[2] >= 5, "a deep meta-dnode tree ({} levels)", d[2]);
                d[16..24].copy_from_slice(&(1u64 << 40).to_ne_bytes());
            })
            .map_err(|e| format!("{e:?}"))?;
            Ok(format!("objset {os}: meta-dnode maxblkid -> 2^40"))
        }
        'e' => {
            // /t's micro ZAP: 64-byte chunks after a 64-byte header, each
            // value (8), cd (4), pad (2), name (50).
            let os = big_file(img).0;
            let name_of = |d: &[u8], i: usize| -> Vec<u8> {
                let n = &d[64 * (i + 1) + 14..64 * (i + 2)];
                n[..n.iter().position(|&c| c == 0).unwrap_or(n.len())].to_vec()
            };
            let idx = img
                .find(|b| {
                    b.kind == BlockKind::Data
                        && b.objset == os
                        && b.object_type == ozfs_format::types::ot::DIRECTORY_CONTENTS
                })
                .into_iter()
                .find(|&i| {
                    let d = img.read(i).expect("read");
                    let names: Vec<Vec<u8>> =
                        (0..d.len() / 64 - 1).map(|k| name_of(&d, k)).collect();
                    names.iter().any(|n| n == b"aaaa") && names.iter().any(|n| n == b"d")
                })
                .expect("the directory holding 'aaaa' and 'd'");
            img.mutate(idx, |d| {
                let find = |d: &[u8], name: &[u8]| {
                    (0..d.len() / 64 - 1)
                        .find(|&k| name_of(d, k) == name)
                        .expect("entry")
                };
                let (mut link, mut dir) = (find(d, b"aaaa"), find(d, b"d"));
                if dir < link {
                    // The symlink's chunk first: swap the two entries.
                    let a: Vec<u8> = d[64 * (dir + 1)..64 * (dir + 2)].to_vec();
                    let b: Vec<u8> = d[64 * (link + 1)..64 * (link + 2)].to_vec();
                    d[64 * (dir + 1)..64 * (dir + 2)].copy_from_slice(&b);
                    d[64 * (link + 1)..64 * (link + 2)].copy_from_slice(&a);
                    std::mem::swap(&mut link, &mut dir);
                }
                assert!(link < dir);
                let at = 64 * (dir + 1) + 14;
                d[at..at + 50].fill(0);
                d[at..at + 4].copy_from_slice(b"aaaa");
            })
            .map_err(|e| format!("{e:?}"))?;
            Ok(format!(
                "objset {os}: directory 'd' renamed 'aaaa' after the symlink 'aaaa'"
            ))
        }
        _ => unreachable!(),
    }
}

/// The canary directory holds only `keep`.
fn canary_changed(sb: &Sandbox) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(sb.p("canary"))
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    (names != ["keep"]).then(|| format!("the canary directory changed: {names:?}"))
}

/// Runs the commands over the damaged image; returns the findings.
fn run_case(sb: &Sandbox, what: &str) -> Vec<String> {
    let mut out = Vec::new();
    let verbose = std::env::var_os("OZFS_TEST_VERBOSE").is_some();
    let mut check = |o: &CmdOutput| {
        if verbose {
            eprintln!(
                "  {} -> {:?} ({:.1?}) {}",
                o.cmdline,
                o.code,
                o.elapsed,
                o.stderr.lines().next().unwrap_or("")
            );
        }
        if let Some(f) = finding(o) {
            let tail: Vec<&str> = o.stderr.lines().take(4).collect();
            out.push(format!(
                "{what}: {f}: `{}` -> {:?} after {:.1?}\n      {}",
                o.cmdline,
                o.code,
                o.elapsed,
                tail.join("\n      ")
            ));
        }
    };
    let dev_dir = sb.p("dev");
    let dev_dir = dev_dir.to_str().expect("utf-8");
    check(&sb.ozfs(&["zpool", "import", "-d", dev_dir]));
    let imp = sb.ozfs(&["zpool", "import", "-d", dev_dir, POOL]);
    check(&imp);
    let o = |rel: &str| sb.p("out").join(rel).to_string_lossy().into_owned();
    let fs = format!("{POOL}/fs");
    let cmds: Vec<Vec<String>> = if imp.success() {
        vec![
            vec!["zfs".into(), "list".into(), "-t".into(), "all".into()],
            vec!["zfs".into(), "get".into(), "all".into()],
            vec!["zdb".into(), "-dddd".into(), POOL.into()],
            vec!["zdb".into(), "-dddd".into(), fs.clone()],
            vec!["zdb".into(), "-ddddd".into(), fs.clone()],
            vec!["zdb".into(), "-b".into(), POOL.into()],
            vec!["cp".into(), "-r".into(), format!("{fs}:/"), o("a")],
            vec!["zfs".into(), "snapshot".into(), format!("{fs}@s")],
            vec!["zfs".into(), "send".into(), format!("{fs}@s")],
            vec!["rm".into(), format!("{fs}:/t/big")],
            vec!["zpool".into(), "export".into(), POOL.into()],
        ]
    } else {
        // The import refused the pool: zdb reads it all the same.
        let e = |flags: &str, target: &str| -> Vec<String> {
            vec![
                "zdb".into(),
                "-e".into(),
                "-p".into(),
                dev_dir.into(),
                flags.into(),
                target.into(),
            ]
        };
        vec![
            e("-dddd", POOL),
            e("-dddd", &fs),
            e("-b", POOL),
            e("-C", POOL),
        ]
    };
    for c in &cmds {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        check(&sb.ozfs(&args));
    }
    out
}

#[test]
fn hostile_sizes_counts_and_indices() {
    let sb = Sandbox::new();
    build_base(&sb);
    let t0 = Instant::now();
    let mut findings = Vec::new();
    for case in ['a', 'b', 'c', 'd', 'e'] {
        let _ = std::fs::remove_dir_all(sb.p("out"));
        let _ = std::fs::remove_dir_all(sb.p("state"));
        std::fs::create_dir_all(sb.p("out")).expect("mkdir");
        std::fs::create_dir_all(sb.p("state")).expect("mkdir");
        // A changed block's new checksum lands in its (compressed) parent,
        // which may then no longer fit its PSIZE: such an image cannot be
        // damaged in place, so a fresh base (new GUIDs, new checksums) is
        // made and the case tried again.
        let mut tries = 0;
        let what = loop {
            std::fs::copy(sb.p("base/d0"), sb.dev()).expect("copy base");
            let mut img = Image::open(&sb.dev()).expect("walk the image");
            match damage(&mut img, case) {
                Ok(w) => break format!("({case}) {w}"),
                Err(e) if tries < 5 && e.contains("no longer fits") => {
                    eprintln!("({case}) {e}: a fresh base image");
                    tries += 1;
                    drop(img);
                    let _ = std::fs::remove_dir_all(sb.p("state"));
                    std::fs::create_dir_all(sb.p("state")).expect("mkdir");
                    let _ = std::fs::remove_file(sb.p("base/d0"));
                    build_base(&sb);
                }
                Err(e) => panic!("({case}) damage: {e}"),
            }
        };
        let tc = Instant::now();
        let mut f = run_case(&sb, &what);
        if let Some(e) = canary_changed(&sb) {
            f.push(format!("{what}: {e}"));
            for n in std::fs::read_dir(sb.p("canary"))
                .into_iter()
                .flatten()
                .flatten()
            {
                if n.file_name() != "keep" {
                    let _ = std::fs::remove_dir_all(n.path());
                    let _ = std::fs::remove_file(n.path());
                }
            }
        }
        eprintln!("{what}: {} findings in {:.1?}", f.len(), tc.elapsed());
        findings.extend(f);
    }
    eprintln!("all cases in {:.1?}", t0.elapsed());
    assert!(
        findings.is_empty(),
        "{} findings:\n{}",
        findings.len(),
        findings.join("\n")
    );
}

/// `ozfs zdb -dddd POOL | head -1`, `zpool status | head -1`: the reader
/// is gone before the command writes; it must end by SIGPIPE (or
/// succeed), quietly, never panic on EPIPE.
#[test]
fn a_closed_pipe_ends_commands_quietly() {
    let sb = Sandbox::new();
    build_base(&sb);
    std::fs::copy(sb.p("base/d0"), sb.dev()).expect("copy base");
    let dev_dir = sb.p("dev");
    sb.must(&[
        "zpool",
        "import",
        "-d",
        dev_dir.to_str().expect("utf-8"),
        POOL,
    ]);
    let fs = format!("{POOL}/fs");
    for args in [
        vec!["zdb", "-dddd", POOL],
        vec!["zdb", "-ddddd", fs.as_str()],
        vec!["zpool", "status", POOL],
        vec!["zfs", "list"],
        vec!["zfs", "get", "all"],
    ] {
        let err = sb.p("out/err");
        let mut cmd = sb.cmd(&args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&err).expect("err file")));
        let mut child = cmd.spawn().expect("spawn");
        // The reader goes away at once, as `head` does after its line.
        drop(child.stdout.take());
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            assert!(t0.elapsed() < CMD_TIMEOUT, "{args:?} hangs");
            std::thread::sleep(Duration::from_millis(5));
        };
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        let quiet = status.success() || status.signal() == Some(libc::SIGPIPE);
        assert!(
            quiet && text.trim().is_empty(),
            "{args:?} with its reader gone: {status:?}, stderr: {text}"
        );
    }
    sb.must(&["zpool", "export", POOL]);
}
