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
            let (got, text) =
                common::openzfs_read_encrypted(&zdb, &devs, &material, "c7-crypt/gcm", path);
            assert_eq!(
                got.as_deref(),
                Some(want),
                "OpenZFS zdb -K -r {path}:\n{text}"
            );
        }
        // The removed file is gone for OpenZFS too.
        let (got, text) =
            common::openzfs_read_encrypted(&zdb, &devs, &material, "c7-crypt/gcm", "tiny.txt");
        assert!(
            got.is_none() && text.contains("path=/tiny.txt: No such file or directory"),
            "{text}"
        );
    }
}

/// New encrypted file systems, made by ozfs and judged by OpenZFS: an
/// encryption root (aes-256-gcm, a passphrase), a child that inherits it
/// (a key of its own wrapped by the root's), a second root under it
/// (aes-128-ccm, a hex key) and a clone of the child's snapshot (sharing
/// the child's key object), each written through its mount, and a plain
/// stream received under the root (encrypted on the way in). `zfs get`
/// shows OpenZFS's encryption properties; an unencrypted child of an
/// encrypted parent and a suite without a key format are refused, as
/// OpenZFS refuses them. OpenZFS's `zdb -K … -r` decrypts every file
/// into the bytes written, `zdb -bcc` and `zdb -d` find the pool clean
/// (the feature counts verified), and again after the clone and the
/// whole tree are destroyed (key objects released, not leaked).
#[test]
fn new_encrypted_file_systems_are_openzfs_own() {
    let oz = common::ozfs();
    let pool = wcommon::new_devs("ozenc", common::Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir().to_string_lossy().into_owned();
    let work = common::scratch("ozfs-test-crypt-new-");
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![
            mnt.clone(),
            mnt.join("enc"),
            mnt.join("enc/child"),
            mnt.join("enc/hex"),
            mnt.join("enc/cl"),
            mnt.join("enc/recv"),
            mnt.join("plainsrc"),
        ],
    };
    let pass = root.join("pass.txt");
    std::fs::write(&pass, "correct horse battery staple\n").unwrap();
    let hex = root.join("key.hex");
    let hex_key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    std::fs::write(&hex, format!("{hex_key}\n")).unwrap();
    wcommon::oz_create_at(&oz, &pool, &mnt, None, &["-o", "version=5000"]);
    // The daemon holds the pool (and the keys) from here on.
    oz.ok(&["zpool", "export", &name]);
    oz.ok(&["zpool", "import", "-d", &dev_dir, &name]);
    let ds = |rel: &str| format!("{name}/{rel}");
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "encryption=on",
        "-o",
        "keyformat=passphrase",
        "-o",
        &format!("keylocation=file://{}", pass.display()),
        &ds("enc"),
    ]);
    oz.ok(&["zfs", "create", &ds("enc/child")]);
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "encryption=aes-128-ccm",
        "-o",
        "keyformat=hex",
        "-o",
        &format!("keylocation=file://{}", hex.display()),
        &ds("enc/hex"),
    ]);
    for (args, why) in [
        (
            vec!["zfs", "create", "-o", "encryption=off"],
            "unencrypted file system cannot be created under an encrypted parent",
        ),
        (
            vec!["zfs", "create", "-o", "encryption=on"],
            "Keyformat required",
        ),
    ] {
        let target = if why.starts_with("Keyformat") {
            ds("plain")
        } else {
            ds("enc/plain")
        };
        let mut a = args.clone();
        a.push(&target);
        let r = oz.run(&a);
        assert!(!r.success() && r.stderr.contains(why), "{}", r.describe());
    }
    let big: Vec<u8> = (0..600_000u32)
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
        .collect();
    let files = [
        ("enc", "big.bin"),
        ("enc/child", "big.bin"),
        ("enc/hex", "big.bin"),
    ];
    for (rel, f) in files {
        let m = mnt.join(rel);
        assert!(is_mounted(&m), "{rel} mounted");
        std::fs::create_dir(m.join("d")).unwrap();
        std::fs::write(m.join("d").join(f), &big).unwrap();
        std::fs::write(m.join("small.txt"), rel.as_bytes()).unwrap();
    }
    // A plain stream received under an encrypted parent is encrypted.
    oz.ok(&["zfs", "create", &ds("plainsrc")]);
    std::fs::write(mnt.join("plainsrc/sent.txt"), b"sent in the clear\n").unwrap();
    oz.ok(&["zfs", "snapshot", "-r", &format!("{name}@s")]);
    let stream = root.join("plain.stream");
    let r = oz.sh(&format!(
        "\"$OZFS\" zfs send {}@s > '{}' && \"$OZFS\" zfs receive {} < '{}'",
        ds("plainsrc"),
        stream.display(),
        ds("enc/recv"),
        stream.display()
    ));
    assert!(r.success(), "{}", r.describe());
    oz.ok(&[
        "zfs",
        "clone",
        &format!("{}@s", ds("enc/child")),
        &ds("enc/cl"),
    ]);
    assert!(is_mounted(&mnt.join("enc/cl")));
    std::fs::write(mnt.join("enc/cl/clone.txt"), b"written in the clone\n").unwrap();
    let got = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "name,property,value",
        "encryption,keyformat,encryptionroot,pbkdf2iters,keystatus",
        &ds("enc"),
        &ds("enc/child"),
        &ds("enc/hex"),
        &ds("enc/cl"),
        &ds("enc/recv"),
    ]);
    let want = [
        ("enc", "encryption", "aes-256-gcm"),
        ("enc", "keyformat", "passphrase"),
        ("enc", "encryptionroot", "enc"),
        ("enc", "pbkdf2iters", "350000"),
        ("enc/child", "encryption", "aes-256-gcm"),
        ("enc/child", "encryptionroot", "enc"),
        ("enc/hex", "encryption", "aes-128-ccm"),
        ("enc/hex", "keyformat", "hex"),
        ("enc/hex", "encryptionroot", "enc/hex"),
        ("enc/hex", "pbkdf2iters", "0"),
        ("enc/cl", "encryption", "aes-256-gcm"),
        ("enc/cl", "encryptionroot", "enc"),
        ("enc/recv", "encryption", "aes-256-gcm"),
        ("enc/recv", "encryptionroot", "enc"),
        // The daemon holds the keys it made.
        ("enc", "keystatus", "available"),
        ("enc/hex", "keystatus", "available"),
        ("enc/cl", "keystatus", "available"),
    ];
    for (rel, p, v) in want {
        let v = if p == "encryptionroot" {
            ds(v)
        } else {
            v.to_string()
        };
        let line = format!("{}\t{p}\t{v}", ds(rel));
        assert!(got.lines().any(|l| l == line), "want {line:?} in:\n{got}");
    }
    oz.ok(&["zpool", "export", &name]);

    if let Some(zdb) = common::oracle_zdb() {
        let devs = pool.dev_dir();
        common::openzfs_verdict(&zdb, &devs, &name);
        let read = |rel: &str, key: &str, path: &str| -> Option<Vec<u8>> {
            common::openzfs_read_encrypted(&zdb, &devs, key, &ds(rel), path).0
        };
        let pw = "correct horse battery staple";
        assert_eq!(read("enc", pw, "d/big.bin").as_deref(), Some(&big[..]));
        assert_eq!(
            read("enc/child", pw, "d/big.bin").as_deref(),
            Some(&big[..])
        );
        assert_eq!(
            read("enc/hex", hex_key, "d/big.bin").as_deref(),
            Some(&big[..])
        );
        assert_eq!(
            read("enc/cl", pw, "clone.txt").as_deref(),
            Some(&b"written in the clone\n"[..])
        );
        assert_eq!(
            read("enc/cl", pw, "small.txt").as_deref(),
            Some(&b"enc/child"[..])
        );
        assert_eq!(
            read("enc/recv", pw, "sent.txt").as_deref(),
            Some(&b"sent in the clear\n"[..])
        );
    }
    oz.ok(&["zpool", "import", "-N", "-d", &dev_dir, &name]);
    oz.ok(&["zfs", "destroy", &ds("enc/cl")]);
    oz.ok(&["zfs", "destroy", "-r", &ds("enc")]);
    oz.ok(&["zpool", "export", &name]);
    if let Some(zdb) = common::oracle_zdb() {
        let text = common::openzfs_verdict(&zdb, &pool.dev_dir(), &name);
        assert!(text.contains("No leaks"), "{text}");
    }
}

/// `zfs change-key` as OpenZFS: with `-l` the root's passphrase is
/// replaced by a new one (the old is then "incorrect", the iterations
/// kept); refused without the current key; then re-wrapped with a hex
/// key: the files read with it, `zfs get` shows the new format and
/// location, and OpenZFS's `zdb -K` opens the data with the new key. `change-key -i` of a root whose parent is not encrypted is
/// refused, as OpenZFS refuses it.
#[test]
fn change_key_rewraps_as_openzfs() {
    let oz = common::ozfs();
    let pool = wcommon::new_devs("ozck", common::Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let work = common::scratch("ozfs-test-crypt-ck-");
    let root = work.path().canonicalize().unwrap();
    let pass = root.join("pass.txt");
    std::fs::write(&pass, "an old passphrase\n").unwrap();
    let pass2 = root.join("pass2.txt");
    std::fs::write(&pass2, "the inner root's passphrase\n").unwrap();
    let hex = root.join("new.hex");
    let hex_key = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    std::fs::write(&hex, format!("{hex_key}\n")).unwrap();
    let file = root.join("data.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let f = file.to_string_lossy().into_owned();
    let loc = |p: &std::path::Path| format!("file://{}", p.display());
    oz.ok(&[
        "zpool",
        "create",
        "-f",
        "-m",
        "none",
        &name,
        &pool.devs()[0].to_string_lossy(),
    ]);
    let enc = format!("{name}/enc");
    let inner = format!("{name}/inner");
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "encryption=on",
        "-o",
        "keyformat=passphrase",
        "-o",
        &format!("keylocation={}", loc(&pass)),
        &enc,
    ]);
    oz.ok(&["cp", "-L", &loc(&pass), &f, &format!("{enc}:/data.bin")]);
    // A new passphrase first: the old one is then an incorrect key.
    let newpass = root.join("newpass.txt");
    std::fs::write(&newpass, "a brand new passphrase\n").unwrap();
    oz.ok(&[
        "zfs",
        "change-key",
        "-l",
        "-o",
        &format!("keylocation={}", loc(&newpass)),
        &enc,
    ]);
    let out0 = root.join("out0.bin");
    let r = oz.run(&[
        "cp",
        "-L",
        &loc(&pass),
        &format!("{enc}:/data.bin"),
        &out0.to_string_lossy(),
    ]);
    assert!(
        !r.success() && r.stderr.contains("incorrect key"),
        "the old passphrase: {}",
        r.describe()
    );
    oz.ok(&[
        "cp",
        "-l",
        &format!("{enc}:/data.bin"),
        &out0.to_string_lossy(),
    ]);
    assert_eq!(std::fs::read(&out0).unwrap(), data);
    assert!(oz
        .ok(&["zfs", "get", "-H", "-o", "value", "pbkdf2iters", &enc])
        .starts_with("350000"));
    let change = [
        "zfs",
        "change-key",
        "-o",
        "keyformat=hex",
        "-o",
        &format!("keylocation={}", loc(&hex)),
        &enc,
    ];
    let r = oz.run(&change);
    assert!(
        !r.success() && r.stderr.contains("not loaded"),
        "{}",
        r.describe()
    );
    let mut with_l = change.to_vec();
    with_l.insert(2, "-l");
    oz.ok(&with_l);
    let got = oz.ok(&[
        "zfs",
        "get",
        "-H",
        "-o",
        "property,value",
        "keyformat,keylocation,pbkdf2iters",
        &enc,
    ]);
    assert_eq!(
        got,
        format!(
            "keyformat\thex\nkeylocation\t{}\npbkdf2iters\t0\n",
            loc(&hex)
        )
    );
    let out = root.join("out.bin");
    let r = oz.run(&[
        "cp",
        "-L",
        &loc(&pass),
        &format!("{enc}:/data.bin"),
        &out.to_string_lossy(),
    ]);
    assert!(
        !r.success(),
        "the old key still opens it:\n{}",
        r.describe()
    );
    oz.ok(&[
        "cp",
        "-l",
        &format!("{enc}:/data.bin"),
        &out.to_string_lossy(),
    ]);
    assert_eq!(std::fs::read(&out).unwrap(), data);

    // A second root, at the top: it has no parent root to join.
    oz.ok(&[
        "zfs",
        "create",
        "-o",
        "encryption=aes-128-gcm",
        "-o",
        "keyformat=passphrase",
        "-o",
        &format!("keylocation={}", loc(&pass2)),
        &inner,
    ]);
    oz.ok(&["cp", "-L", &loc(&pass2), &f, &format!("{inner}:/data.bin")]);
    let r = oz.run(&["zfs", "change-key", "-i", "-l", &inner]);
    assert!(
        !r.success() && r.stderr.contains("unencrypted parent"),
        "{}",
        r.describe()
    );
    oz.ok(&["zpool", "export", &name]);
    if let Some(zdb) = common::oracle_zdb() {
        common::openzfs_verdict(&zdb, &pool.dev_dir(), &name);
        let (got, text) =
            common::openzfs_read_encrypted(&zdb, &pool.dev_dir(), hex_key, &enc, "data.bin");
        assert_eq!(got, Some(data.clone()), "{text}");
    }
}
