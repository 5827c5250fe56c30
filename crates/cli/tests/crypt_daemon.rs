//! Encrypted file systems through the daemon, on OpenZFS's `c7-crypt`
//! (../shared/corpus/openzfs-2.3): as with OpenZFS, an import mounts no
//! encrypted file system; `zfs load-key` hands the key to the daemon that
//! holds the pool, which then mounts the file system (`zfs mount`) and
//! writes into it — through the FUSE mount and through `ozfs cp` without
//! any key option. `zfs unload-key` forgets it: the next write is refused
//! naming the key (and it is refused while the file system is mounted,
//! as OpenZFS refuses it). After export, OpenZFS's own `zdb -K … -r` decrypts
//! what was written into the very bytes, and `zdb -bcc` finds the pool
//! clean.

mod ccommon;
mod common;
mod wcommon;
use wcommon::{is_mounted, DaemonCleanup};

#[test]
fn the_daemon_keeps_a_loaded_key_and_writes_encrypted_files() {
    let oz = common::ozfs();
    let work = common::scratch("ozfs-test-crypt-daemon-");
    let corpus = common::corpus_dir();
    let devs = work.path().join("c7");
    common::unpack_corpus(&corpus.join("c7-crypt"), &devs);
    let d = devs.to_string_lossy().into_owned();
    let keys = corpus.join("c7-crypt/keys");
    let gcm_key = ccommon::crypt_key_location(&keys, "c7-crypt/gcm").unwrap();
    let root = work.path().canonicalize().unwrap().join("mnt");
    let gcm_mnt = root.join("gcm");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![root.clone(), gcm_mnt.clone()],
    };
    // Mount under the test's directory, not at OpenZFS's /c7.
    oz.ok(&["zpool", "import", "-N", "-d", &d, "c7-crypt"]);
    oz.ok(&[
        "zfs",
        "set",
        &format!("mountpoint={}", root.display()),
        "c7-crypt",
    ]);
    oz.ok(&["zpool", "export", "c7-crypt"]);
    oz.ok(&["zpool", "import", "-d", &d, "c7-crypt"]);
    assert!(is_mounted(&root), "the unencrypted root is mounted");
    assert!(!is_mounted(&gcm_mnt), "no key, no mount");
    let r = oz.run(&["zfs", "mount", "c7-crypt/gcm"]);
    assert!(!r.success(), "{}", r.describe());

    oz.ok(&["zfs", "load-key", "-L", &gcm_key, "c7-crypt/gcm"]);
    let r = oz.run(&["zfs", "load-key", "-L", &gcm_key, "c7-crypt/gcm"]);
    assert!(
        !r.success() && r.stderr.contains("already loaded"),
        "{}",
        r.describe()
    );
    oz.ok(&["zfs", "mount", "c7-crypt/gcm"]);
    assert!(is_mounted(&gcm_mnt));
    // OpenZFS's files read through the mount; new ones written.
    let manifest = std::fs::read_to_string(corpus.join("c7-crypt/manifest.txt")).unwrap();
    assert!(manifest.contains("./tiny.txt"));
    assert!(std::fs::metadata(gcm_mnt.join("tiny.txt")).is_ok());
    let fuse_bytes: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir(gcm_mnt.join("newdir")).unwrap();
    std::fs::write(gcm_mnt.join("newdir/fuse.bin"), &fuse_bytes).unwrap();
    std::fs::remove_file(gcm_mnt.join("tiny.txt")).unwrap();
    assert_eq!(
        std::fs::read(gcm_mnt.join("newdir/fuse.bin")).unwrap(),
        fuse_bytes
    );
    let src = work.path().join("viacp.txt");
    std::fs::write(&src, b"copied in through the daemon\n").unwrap();
    oz.ok(&["cp", &src.to_string_lossy(), "c7-crypt/gcm:/viacp.txt"]);
    let r = oz.run(&["zfs", "unload-key", "c7-crypt/gcm"]);
    assert!(
        !r.success() && r.stderr.contains("busy"),
        "unload-key under a mount: {}",
        r.describe()
    );
    oz.ok(&["zfs", "unmount", "c7-crypt/gcm"]);
    oz.ok(&["zfs", "unload-key", "c7-crypt/gcm"]);
    let r = oz.run(&["cp", &src.to_string_lossy(), "c7-crypt/gcm:/again.txt"]);
    assert!(
        !r.success() && r.stderr.contains("is not loaded"),
        "{}",
        r.describe()
    );
    oz.ok(&["zpool", "export", "c7-crypt"]);

    if let Some(zdb) = common::oracle_zdb() {
        common::openzfs_verdict(&zdb, &devs, "c7-crypt");
        let material = std::fs::read_to_string(keys.join("secret.pass")).unwrap();
        for (path, want) in [
            ("newdir/fuse.bin", &fuse_bytes[..]),
            ("viacp.txt", b"copied in through the daemon\n"),
        ] {
            let out = work.path().join("zdb-out");
            let _ = std::fs::remove_file(&out);
            let r = std::process::Command::new(&zdb)
                .args([
                    "-e",
                    "-p",
                    &d,
                    "-K",
                    material.trim(),
                    "-r",
                    "c7-crypt/gcm",
                    path,
                ])
                .arg(&out)
                .output()
                .expect("run OpenZFS zdb -r");
            assert_eq!(
                std::fs::read(&out).ok().as_deref(),
                Some(want),
                "OpenZFS zdb -K -r {path}:\n{}{}",
                String::from_utf8_lossy(&r.stdout),
                String::from_utf8_lossy(&r.stderr)
            );
        }
        // The removed file is gone for OpenZFS too.
        let out = work.path().join("zdb-gone");
        let r = std::process::Command::new(&zdb)
            .args([
                "-e",
                "-p",
                &d,
                "-K",
                material.trim(),
                "-r",
                "c7-crypt/gcm",
                "tiny.txt",
            ])
            .arg(&out)
            .output()
            .expect("run OpenZFS zdb -r");
        assert!(!out.exists(), "{}", String::from_utf8_lossy(&r.stderr));
    }
}
