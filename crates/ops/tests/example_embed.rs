//! The embedding example (`examples/embed.rs`) runs: a program makes a
//! pool, a file system, copies a tree in and out, snapshots it and writes
//! a send stream with the operations crate alone.

use std::path::PathBuf;
use std::process::Command;

fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory");
    let bin = dir.join("examples").join("embed");
    if !bin.exists() {
        let profile = if dir.ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "ozfs-ops", "--example", "embed"])
            .args(profile)
            .status()
            .expect("cargo build --example embed");
        assert!(st.success());
    }
    bin
}

#[test]
fn embed_example_round_trips() {
    let work = tempfile::Builder::new()
        .prefix("ozfs-embed-")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let out = Command::new(example_binary())
        .arg(work.path())
        .env("OZFS_STATE_DIR", work.path().join("state"))
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("copied out 2 files, 2 directories"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(work.path().join("out/hello.txt")).expect("copied file"),
        b"hello from a program\n"
    );
    assert_eq!(
        std::fs::read(work.path().join("out/sub/zeros")).expect("copied file"),
        vec![0u8; 1 << 20]
    );
    // A send stream starts with a BEGIN record: type 0, then DMU_BACKUP_MAGIC.
    let stream = std::fs::read(work.path().join("first.zstream")).expect("stream");
    assert!(stream.len() > 312, "stream of {} bytes", stream.len());
    assert_eq!(&stream[0..4], &[0, 0, 0, 0]);
    assert_eq!(
        u64::from_le_bytes(stream[8..16].try_into().expect("8 bytes")),
        0x2_F5BA_CBAC
    );
}
