//! Everyday tools through an ozfs mount give what they give on the host's
//! own file system: `cp -a`, `tar -p` and `rsync -aX` copy one tree (modes
//! from 0400 to 04755, a setgid directory, a sticky directory, symlinks,
//! hard links, `user.*` attributes, a sparse file) once into a local
//! directory and once into a file system served by the ozfs daemon, and
//! the two copies must be the same in every respect the manifest records
//! (mode, owners, times, contents, link targets, hard-link groups,
//! attributes).
//!
//! GNU cp and rsync set modes by writing the `system.posix_acl_access`
//! attribute when the file system accepts it; ozfs (as ZFS with
//! `acltype=off`) refuses it with EOPNOTSUPP so they fall back to chmod —
//! the copy used to come out 0700/0600 everywhere.

mod common;
mod wcommon;
use ozfs_testkit::manifest::{assert_manifest_eq, Manifest};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;
use wcommon::*;

fn tree(root: &Path) {
    fs::create_dir_all(root.join("d/sub")).unwrap();
    fs::create_dir_all(root.join("shared")).unwrap();
    fs::create_dir_all(root.join("tmp")).unwrap();
    let files: [(&str, u32, &[u8]); 6] = [
        ("a.txt", 0o644, b"plain file\n"),
        ("secret", 0o600, b"only the owner\n"),
        ("ro", 0o444, b"read only\n"),
        ("run.sh", 0o755, b"#!/bin/sh\necho hi\n"),
        ("d/sub/deep", 0o640, b"deep\n"),
        ("suid", 0o4755, b"setuid bit\n"),
    ];
    for (p, mode, data) in files {
        fs::write(root.join(p), data).unwrap();
        fs::set_permissions(root.join(p), fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::hard_link(root.join("a.txt"), root.join("d/hard")).unwrap();
    symlink("../a.txt", root.join("d/link")).unwrap();
    symlink("nowhere", root.join("dangling")).unwrap();
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.set_len(3 << 20).unwrap();
    let set =
        |p: &str, m: u32| fs::set_permissions(root.join(p), fs::Permissions::from_mode(m)).unwrap();
    set("d", 0o750);
    set("d/sub", 0o700);
    set("shared", 0o2775);
    set("tmp", 0o1777);
    let x = Command::new("setfattr")
        .args(["-n", "user.note", "-v", "kept"])
        .arg(root.join("a.txt"))
        .status()
        .unwrap();
    assert!(x.success());
    // Times in the past (every tool must carry them; rsync leaves a
    // directory whose time is within the current second as it is).
    run(&format!(
        "find {} -depth -exec touch -h -d @1600000000.25 {{}} +",
        root.display()
    ));
}

fn run(cmd: &str) {
    let out = Command::new("/bin/sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cp_tar_rsync_through_a_mount_as_on_the_host() {
    if Command::new("rsync").arg("--version").output().is_err() {
        panic!("rsync is not installed (scripts/install-deps.sh installs it)");
    }
    let pool = new_devs("ozposixt", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir("posixtools");
    let root = work.path().canonicalize().unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    oz_create_at(&oz, &pool, &mnt, None, &[]);
    oz_export(&oz, &name);
    oz.ok(&[
        "zpool",
        "import",
        "-d",
        &pool.dev_dir().to_string_lossy(),
        &name,
    ]);
    assert!(is_mounted(&mnt));

    let src = root.join("src");
    tree(&src);
    let host = root.join("host");
    fs::create_dir_all(&host).unwrap();
    let s = src.display();
    for (tool, cmd) in [
        ("cp", "cp -a {SRC} {DST}/cp"),
        (
            "tar",
            "mkdir {DST}/tar && tar -C {SRC} --xattrs -cpf - . | tar -C {DST}/tar --xattrs -xpf -",
        ),
        ("rsync", "rsync -aHX {SRC}/ {DST}/rsync/"),
    ] {
        for dst in [&host, &mnt] {
            run(&cmd
                .replace("{SRC}", &s.to_string())
                .replace("{DST}", &dst.display().to_string()));
        }
        let want = Manifest::scan(host.join(tool)).unwrap();
        let got = Manifest::scan(mnt.join(tool)).unwrap();
        assert_manifest_eq(
            &want,
            &got,
            &format!("{tool} into the host's fs vs into ozfs"),
        );
        let m = got.get("secret").expect("secret copied");
        assert_eq!(m.mode & 0o7777, 0o600, "{tool}: mode of secret");
        let d = got.get("shared").expect("shared copied");
        assert_eq!(d.mode & 0o7777, 0o2775, "{tool}: mode of shared");
    }
    // The ACL attributes themselves: refused, as ZFS with acltype=off does.
    let out = Command::new("setfacl")
        .args(["-m", "u:nobody:r"])
        .arg(mnt.join("cp/a.txt"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "setfacl succeeded on an ozfs mount");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    oz_export(&oz, &name);
    assert_zdb_clean(
        &pool,
        &pool.dev_dir(),
        "after cp/tar/rsync through the mount",
    );
}
