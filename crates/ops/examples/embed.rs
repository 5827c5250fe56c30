//! A program that uses ozfs without its command line: it makes a pool in
//! two files (a mirror), a file system, copies a tree in and back out,
//! snapshots it and writes a send stream — the operations crate only.
//!
//! `cargo run --release -p ozfs-ops --example embed -- [WORK_DIR]`
//!
//! The state directory (`OZFS_STATE_DIR`) defaults to WORK_DIR/state, so
//! the example never touches the host's imported pools.

use ozfs_ops::dataset;
use ozfs_ops::devices::TopSpec;
use ozfs_ops::pool::{self, CreateOpts};
use ozfs_ops::proto::{execute, Progress, Request};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| format!("/tmp/ozfs-embed-{}", std::process::id())),
    );
    std::fs::create_dir_all(&work)?;
    if std::env::var_os("OZFS_STATE_DIR").is_none() {
        std::env::set_var("OZFS_STATE_DIR", work.join("state"));
    }
    let name = format!("embed{}", std::process::id());

    // Two 128 MiB files, mirrored.
    let disks: Vec<PathBuf> = (0..2).map(|i| work.join(format!("disk{i}.img"))).collect();
    for d in &disks {
        std::fs::File::create(d)?.set_len(128 << 20)?;
    }
    pool::create(
        &name,
        &[TopSpec::Mirror(disks.clone())],
        &CreateOpts::default(),
    )?;

    // A file system with compression, and a tree to put in it.
    let fs = format!("{name}/data");
    let none = Progress::none();
    execute(
        Request::Create {
            name: fs.clone(),
            parents: false,
            props: vec![("compression".into(), "on".into())],
            no_mount: true,
            volume: None,
        },
        &none,
    )?;
    let src = work.join("src");
    std::fs::create_dir_all(src.join("sub"))?;
    std::fs::write(src.join("hello.txt"), b"hello from a program\n")?;
    std::fs::write(src.join("sub/zeros"), vec![0u8; 1 << 20])?;
    execute(
        Request::CopyIn {
            src: src.clone(),
            dataset: fs.clone(),
            path: "/".into(),
            recursive: true,
            keys: Default::default(),
        },
        &none,
    )?;

    // Back out, compared.
    let out = work.join("out");
    let stats = ozfs_ops::copy::copy_out(&fs, "/src", &out, true)?;
    assert_eq!(
        std::fs::read(out.join("hello.txt"))?,
        b"hello from a program\n"
    );
    println!(
        "copied out {} files, {} directories, {} bytes",
        stats.files, stats.dirs, stats.bytes
    );

    // Snapshot and a send stream.
    let snap = format!("{fs}@first");
    execute(
        Request::Snapshot {
            names: vec![snap.clone()],
            recursive: false,
        },
        &none,
    )?;
    let stream = work.join("first.zstream");
    let bytes = dataset::send(&snap, &mut std::fs::File::create(&stream)?)?;
    println!("sent {snap}: {bytes} bytes to {}", stream.display());
    Ok(())
}
