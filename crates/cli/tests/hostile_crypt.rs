//! Forged blocks in an encrypted dataset: whoever edits a pool image can
//! recompute every checksum up to the uberblock (no key needed: the
//! checksum words 0–1 of a protected block are a plain checksum of its
//! stored bytes) but none of the MACs. Whatever an edit does, reading the
//! dataset with its key must end in an authentication error, never in data
//! that the key's owner did not write.
//!
//! A pool is made with `ozfs zpool create` and two file systems: `ep/enc`
//! (aes-256-gcm, a hex key) and `ep/plain`, each holding `f`, a file of
//! three 128 K records (`A…`, `B…`, `C…` in `enc`, beside a directory `sub`; `P…` in `plain`). It is
//! exported and edited with [`ozfs_testkit::mutate::Image`], which carries
//! the new checksums up to the uberblock and keeps every MAC as it was:
//!
//! * (a) the first two block pointers of `f`'s level-1 indirect block
//!   swapped: read as B, A, C when indirect MACs were not checked;
//! * (b) the first pointer replaced by a plain one (crypt bit clear, no
//!   compression, fletcher4) to 128 K of `Z` written into free space: read
//!   as `f`'s first record when the crypt bit alone decided decryption;
//! * (c) the ZPL master node (stored in the clear, authenticated by an
//!   HMAC) edited so that its `ROOT` names the subdirectory `sub`: the
//!   file system read from `sub` when authenticated blocks were not
//!   checked;
//! * (d) the encrypted dataset's objset pointer (in the unauthenticated MOS)
//!   replaced by the plain file system's: `plain`'s files read as `enc`'s
//!   when the pointer's crypt bit alone decided whether the objset MAC was
//!   checked.
//!
//! Each forged image is imported and `ozfs cp -L file://KEY -r ep/enc:/`
//! must fail with an authentication error naming what failed, and no
//! forged byte may reach the copy. The unedited image reads back exactly
//! (the checks refuse nothing OpenZFS or ozfs wrote).

use ozfs_format::blkptr::{BlkPtr, Dva, BLKPTR_SIZE};
use ozfs_format::types::ot;
use ozfs_testkit::mutate::{BlockKind, Image, Parent};
use ozfs_testkit::proc::CmdOutput;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ozfs");
const POOL: &str = "ep";
const REC: usize = 128 << 10;
const CMD_TIMEOUT: Duration = Duration::from_secs(120);

struct Sandbox {
    root: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let root = tempfile::Builder::new()
            .prefix("ozfs-hostile-crypt-")
            .tempdir_in(ozfs_testkit::test_tmp_root())
            .expect("sandbox");
        let s = Sandbox { root };
        for d in ["state", "dev", "out", "base", "src"] {
            std::fs::create_dir_all(s.p(d)).expect("mkdir");
        }
        s
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn s(&self, rel: &str) -> String {
        self.p(rel).to_str().expect("utf-8 path").to_string()
    }
    fn ozfs(&self, args: &[&str]) -> CmdOutput {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("OZFS_STATE_DIR", self.p("state"))
            .env("RUST_BACKTRACE", "0")
            .env("LC_ALL", "C");
        ozfs_testkit::proc::run_with_timeout(&mut cmd, CMD_TIMEOUT).expect("run ozfs")
    }
    fn must(&self, args: &[&str]) {
        let o = self.ozfs(args);
        assert!(o.success(), "{args:?} failed:\n{}", o.describe());
    }
    fn keyloc(&self) -> String {
        format!("file://{}", self.s("key"))
    }
}

fn records(letters: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(letters.len() * REC);
    for &l in letters {
        v.extend(std::iter::repeat_n(l, REC));
    }
    v
}

/// The base pool, exported, in `base/d0`.
fn build_base(sb: &Sandbox) {
    std::fs::write(sb.p("key"), format!("{}\n", "5a".repeat(32))).expect("key");
    let f = std::fs::File::create(sb.p("dev/d0")).expect("dev");
    f.set_len(128 << 20).expect("size dev");
    drop(f);
    sb.must(&["zpool", "create", "-m", "none", POOL, &sb.s("dev/d0")]);
    let keyloc = sb.keyloc();
    sb.must(&[
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
    sb.must(&["zfs", "create", &format!("{POOL}/plain")]);
    std::fs::write(sb.p("src/f"), records(b"ABC")).expect("w");
    std::fs::create_dir_all(sb.p("src/sub")).expect("mkdir");
    std::fs::write(sb.p("src/sub/g"), b"in sub\n").expect("w");
    std::fs::write(sb.p("src/p"), records(b"PPP")).expect("w");
    sb.must(&[
        "cp",
        "-L",
        &keyloc,
        &sb.s("src/f"),
        &format!("{POOL}/enc:/f"),
    ]);
    sb.must(&[
        "cp",
        "-L",
        &keyloc,
        "-r",
        &sb.s("src/sub"),
        &format!("{POOL}/enc:/sub"),
    ]);
    sb.must(&["cp", &sb.s("src/p"), &format!("{POOL}/plain:/f")]);
    sb.must(&["zpool", "export", POOL]);
    std::fs::rename(sb.p("dev/d0"), sb.p("base/d0")).expect("move base");
}

/// A fresh copy of the base image in `dev/d0`.
fn fresh(sb: &Sandbox) -> Image {
    std::fs::copy(sb.p("base/d0"), sb.p("dev/d0")).expect("copy base");
    Image::open(&sb.p("dev/d0")).expect("walk the image")
}

/// The level-1 indirect block of the three-record file in the objset
/// whose pointer is (`crypt`) or is not protected.
fn file_l1(img: &Image, crypt: bool) -> usize {
    let os = objset_of(img, crypt);
    *img.find(|b| {
        b.kind == BlockKind::Indirect
            && b.objset == os
            && b.level == 1
            && b.object_type == ot::PLAIN_FILE_CONTENTS
    })
    .first()
    .expect("the file's level-1 block")
}

/// The objset (MOS object of its dataset) holding a three-record file,
/// encrypted or not.
fn objset_of(img: &Image, crypt: bool) -> u64 {
    img.blocks()
        .iter()
        .find(|b| {
            b.kind == BlockKind::Indirect
                && b.objset != 0
                && b.object_type == ot::PLAIN_FILE_CONTENTS
                && b.bp.uses_crypt() == crypt
        })
        .map(|b| b.objset)
        .expect("a file system with the three-record file")
}

/// Import the edited image and copy `ep/enc` out with its key.
fn read_enc(sb: &Sandbox, tag: &str) -> (CmdOutput, PathBuf) {
    sb.must(&["zpool", "import", "-d", &sb.s("dev"), POOL]);
    let out = sb.p(&format!("out/{tag}"));
    let o = sb.ozfs(&[
        "cp",
        "-L",
        &sb.keyloc(),
        "-r",
        &format!("{POOL}/enc:/"),
        out.to_str().expect("utf-8"),
    ]);
    let _ = sb.ozfs(&["zpool", "export", "-f", POOL]);
    (o, out)
}

/// The forged read must fail naming an authentication failure, and the
/// copy must hold no byte of `forged` where `f` was.
fn assert_refused(o: &CmdOutput, out: &Path, tag: &str, forged: &[u8]) {
    eprintln!("({tag}) refused: {}", o.stderr.trim());
    assert!(
        !o.success(),
        "({tag}) a forged encrypted dataset was read without error:\n{}",
        o.describe()
    );
    assert!(
        !o.stderr.contains("panicked") && o.code.is_some() && !o.timed_out,
        "({tag}) {}",
        o.describe()
    );
    let text = o.stderr.to_lowercase();
    assert!(
        ["mac", "not protected", "authentic"]
            .iter()
            .any(|n| text.contains(n)),
        "({tag}) the error does not say what failed authentication:\n{}",
        o.describe()
    );
    if forged.is_empty() {
        return;
    }
    if let Ok(got) = std::fs::read(out.join("f")) {
        assert!(
            got.is_empty() || !got.windows(forged.len()).any(|w| w == forged),
            "({tag}) forged bytes reached the copy ({} bytes)",
            got.len()
        );
    }
}

/// A sandbox with the base image built, after checking that the unedited
/// image reads back exactly.
fn base() -> Sandbox {
    let sb = Sandbox::new();
    build_base(&sb);
    let _ = fresh(&sb);
    let (o, out) = read_enc(&sb, "clean");
    assert!(o.success(), "clean read:\n{}", o.describe());
    assert_eq!(
        std::fs::read(out.join("f")).expect("f"),
        records(b"ABC"),
        "clean copy"
    );
    sb
}

#[test]
fn swapped_pointers_under_an_indirect_block_are_refused() {
    let sb = base();
    let mut img = fresh(&sb);
    let l1 = file_l1(&img, true);
    img.mutate(l1, |d| {
        let (a, b) = d.split_at_mut(BLKPTR_SIZE);
        a.swap_with_slice(&mut b[..BLKPTR_SIZE]);
    })
    .expect("swap two pointers");
    let (o, out) = read_enc(&sb, "swapped");
    // B then A: the forged order.
    let mut ba = records(b"B");
    ba.extend(records(b"A"));
    assert_refused(&o, &out, "swapped pointers", &ba[REC - 4096..REC + 4096]);
}

#[test]
fn a_plain_pointer_under_an_encrypted_file_is_refused() {
    let sb = base();
    // (b) the first child replaced by a plain pointer to bytes written
    // into free space (far past anything this small pool allocated).
    let mut img = fresh(&sb);
    let l1 = file_l1(&img, true);
    let forged = vec![b'Z'; REC];
    let vdev_off: u64 = 96 << 20;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(sb.p("dev/d0"))
            .expect("open image");
        // The vdev's data starts after the two front labels and the boot
        // area.
        f.write_all_at(
            &forged,
            ozfs_format::label::VDEV_LABEL_START_SIZE + vdev_off,
        )
        .expect("write forged bytes");
    }
    let old = BlkPtr::from_bytes(&img.read(l1).expect("l1")[..BLKPTR_SIZE], false).expect("bp");
    let mut plain = BlkPtr::default();
    plain.words[6] = BlkPtr::make_prop(
        REC as u64,
        REC as u64,
        2, // off
        7, // fletcher4
        ot::PLAIN_FILE_CONTENTS,
        0,
        false,
        true,
    );
    plain.set_dva(
        0,
        &Dva {
            vdev: 0,
            offset: vdev_off,
            asize: REC as u64,
            gang: false,
        },
    );
    plain.words[9] = old.phys_birth();
    plain.words[10] = old.birth();
    plain.words[11] = 1;
    plain.set_cksum(ozfs_codec::checksum::compute(7, &forged, false).expect("fletcher4"));
    img.mutate(l1, |d| d[..BLKPTR_SIZE].copy_from_slice(&plain.to_bytes()))
        .expect("plant a plain pointer");
    let (o, out) = read_enc(&sb, "plain-pointer");
    assert_refused(&o, &out, "plain pointer", &forged[..4096]);
}

#[test]
fn an_unprotected_objset_pointer_of_an_encrypted_dataset_is_refused() {
    let sb = base();
    // (d) the encrypted dataset's objset pointer replaced by the plain
    // file system's (its crypt bit clear).
    let mut img = fresh(&sb);
    let enc_os = objset_of(&img, true);
    let plain_os = objset_of(&img, false);
    let block_of = |img: &Image, os: u64| {
        *img.find(|b| b.kind == BlockKind::Objset && b.objset == os)
            .first()
            .expect("objset block")
    };
    let plain_bp = img.blocks()[block_of(&img, plain_os)].bp;
    let Parent::Block { idx, off } = img.blocks()[block_of(&img, enc_os)].parent else {
        panic!("an objset pointer outside the MOS");
    };
    img.mutate(idx, |d| {
        d[off..off + BLKPTR_SIZE].copy_from_slice(&plain_bp.to_bytes())
    })
    .expect("replace the objset pointer");
    let (o, out) = read_enc(&sb, "plain-objset");
    assert_refused(&o, &out, "plain objset", &records(b"P")[..4096]);
}

#[test]
fn a_changed_master_node_is_refused() {
    let sb = base();
    let mut img = fresh(&sb);
    let os = objset_of(&img, true);
    // The two directories of the file system (their ZAPs are encrypted,
    // but which objects they are is not).
    let mut dirs: Vec<u64> = img
        .blocks()
        .iter()
        .filter(|b| b.objset == os && b.object_type == ot::DIRECTORY_CONTENTS)
        .map(|b| b.object)
        .collect();
    dirs.sort();
    dirs.dedup();
    assert_eq!(dirs.len(), 2, "root and sub: {dirs:?}");
    let master = *img
        .find(|b| b.objset == os && b.kind == BlockKind::Data && b.object_type == ot::MASTER_NODE)
        .first()
        .expect("the master node's block");
    // A micro ZAP: 64-byte header, then 64-byte entries (value, cd, pad,
    // name); ROOT moved from the root directory to `sub`.
    let mut moved = false;
    img.mutate(master, |d| {
        for e in d[64..].chunks_exact_mut(64) {
            if &e[14..19] == b"ROOT\0" {
                let root = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
                let other = if root == dirs[0] { dirs[1] } else { dirs[0] };
                e[..8].copy_from_slice(&other.to_le_bytes());
                moved = true;
            }
        }
    })
    .expect("edit the master node");
    assert!(moved, "no ROOT entry in the master node");
    let (o, out) = read_enc(&sb, "master-node");
    assert_refused(&o, &out, "master node", b"");
    assert!(
        !out.join("g").exists(),
        "(master node) sub's file was read as the root's"
    );
}
