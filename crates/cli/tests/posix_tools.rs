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
//! the copy used to come out 0700/0600 everywhere. With `acltype=posix`
//! the ACLs themselves are kept: the second test compares `getfacl -R`,
//! inheritance, chmod and what user `nobody` may read against the host.

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

/// The tree of ACLs: named users and groups with a mask, a directory with a
/// default ACL (and a file and directory made in it after it was set), a
/// plain file beside them.
fn acl_tree(root: &Path) {
    fs::create_dir_all(root.join("inherit")).unwrap();
    fs::create_dir_all(root.join("plain")).unwrap();
    fs::write(root.join("user"), b"nobody may write\n").unwrap();
    fs::write(root.join("group"), b"daemon may read\n").unwrap();
    fs::write(root.join("plain/f"), b"no ACL\n").unwrap();
    let s = root.display();
    run(&format!(
        "cd {s} && chmod 0640 user group plain/f && \
         setfacl -m u:nobody:rw user && \
         setfacl -m g:daemon:r,m::r group && \
         setfacl -d -m u:nobody:rwx,g::rx,o::- inherit && \
         setfacl -m u:nobody:rx inherit && \
         (umask 022 && echo inherited > inherit/file && mkdir inherit/sub) && \
         find . -depth -exec touch -h -d @1600000000 {{}} +"
    ));
}

/// `getfacl -R` of `dir`, with paths relative to it, one block per file in
/// path order (directory order is the file system's own).
fn getfacl(dir: &Path) -> String {
    let out = Command::new("getfacl")
        .args(["-R", "-p", "."])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "getfacl in {}", dir.display());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut blocks: Vec<&str> = text.split("\n\n").filter(|b| !b.is_empty()).collect();
    blocks.sort();
    blocks.join("\n\n")
}

/// Whether user `nobody` can read `path`.
fn nobody_reads(path: &Path) -> bool {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat"])
        .arg(path)
        .output()
        .unwrap()
        .status
        .success()
}

/// `acltype=posix`: cp -a, rsync -aAX and tar --acls carry POSIX ACLs into
/// an ozfs mount exactly as into the host's ext4 (`getfacl -R` and the
/// manifest, modes included); default ACLs are inherited by new files and
/// directories, chmod moves the mask, `setfacl -b` drops the ACL, and the
/// kernel enforces what the ACL grants and denies — each compared with the
/// host doing the same.
#[test]
fn posix_acls_through_a_mount_as_on_the_host() {
    let pool = new_devs("ozposixacl", Layout::Stripe, 1, 256);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir("posixacl");
    let root = work.path().canonicalize().unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    oz_create_at(&oz, &pool, &mnt, None, &["-O", "acltype=posix"]);
    let dev_dir = pool.dev_dir().to_string_lossy().into_owned();
    // The test kit creates without mounting; an import mounts.
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir, &name]);
    assert!(is_mounted(&mnt));
    let got = oz.ok(&["zfs", "get", "-H", "-o", "value", "acltype", &name]);
    assert_eq!(got.trim(), "posix");

    let src = root.join("src");
    acl_tree(&src);
    let host = root.join("host");
    fs::create_dir_all(&host).unwrap();
    let s = src.display();
    for (tool, cmd) in [
        ("cp", "cp -a {SRC} {DST}/cp"),
        (
            "tar",
            "mkdir {DST}/tar && tar -C {SRC} --acls --xattrs -cpf - . | tar -C {DST}/tar --acls --xattrs -xpf -",
        ),
        ("rsync", "rsync -aAX {SRC}/ {DST}/rsync/"),
    ] {
        for dst in [&host, &mnt] {
            run(&cmd
                .replace("{SRC}", &s.to_string())
                .replace("{DST}", &dst.display().to_string()));
        }
        let want = getfacl(&host.join(tool));
        assert!(want.contains("user:nobody:rw-"), "{tool}: {want}");
        assert!(want.contains("default:user:nobody:rwx"), "{tool}: {want}");
        assert_eq!(
            getfacl(&mnt.join(tool)),
            want,
            "{tool}: ACLs into ozfs vs into the host's fs"
        );
        assert_manifest_eq(
            &Manifest::scan(host.join(tool)).unwrap(),
            &Manifest::scan(mnt.join(tool)).unwrap(),
            &format!("{tool} into the host's fs vs into ozfs"),
        );
    }

    // Inheritance, chmod, removal: the same steps on both sides.
    for dst in [&host, &mnt] {
        run(&format!(
            "cd {}/cp && (umask 077 && echo new > inherit/new && mkdir inherit/newdir && \
             mkdir inherit/newdir/deeper) && chmod 0604 user && chmod 0750 group && \
             setfacl -b plain/f && setfacl -k inherit/sub && \
             setfacl -m u:nobody:- plain && \
             find . -depth -exec touch -h -d @1600000000 {{}} +",
            dst.display()
        ));
    }
    let want = getfacl(&host.join("cp"));
    assert!(want.contains("# file: ./inherit/newdir/deeper"), "{want}");
    assert_eq!(
        getfacl(&mnt.join("cp")),
        want,
        "after inheritance, chmod and removal"
    );
    assert_manifest_eq(
        &Manifest::scan(host.join("cp")).unwrap(),
        &Manifest::scan(mnt.join("cp")).unwrap(),
        "after inheritance, chmod and removal",
    );

    // Enforcement by the kernel, as on the host: nobody reads `user`
    // (other r after chmod 0604) and `inherit/file` (its inherited named
    // entry), not `group` (0750, no entry for nobody) nor `plain/f` (its
    // directory's ACL denies nobody).
    for f in ["user", "inherit/file", "group", "plain/f"] {
        let h = nobody_reads(&host.join("cp").join(f));
        let o = nobody_reads(&mnt.join("cp").join(f));
        assert_eq!(o, h, "nobody reading {f}: ozfs {o}, host {h}");
    }
    assert!(nobody_reads(&mnt.join("cp/inherit/file")));
    assert!(!nobody_reads(&mnt.join("cp/plain/f")));

    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), "after ACLs through the mount");
    // Imported again, the ACLs are read back from the pool.
    oz.ok(&["zpool", "import", "-d", &dev_dir, &name]);
    assert_eq!(getfacl(&mnt.join("cp")), want, "after export and import");
    // acltype changed on a mounted file system: the daemon mounts it anew
    // (the kernel learns ACL support only when mounting).
    oz.ok(&["zfs", "set", "acltype=off", &name]);
    let out = Command::new("setfacl")
        .args(["-m", "u:nobody:r"])
        .arg(mnt.join("cp/plain/f"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
        "setfacl after acltype=off: {out:?}"
    );
    oz.ok(&["zfs", "inherit", "acltype", &name]);
    oz.ok(&["zfs", "set", "acltype=posix", &name]);
    assert_eq!(
        getfacl(&mnt.join("cp")),
        want,
        "after acltype off and on again"
    );
}

/// The set-ID bits a write or truncate by an unprivileged user clears, as
/// the host's kernel clears them on its own file system: set-user-ID
/// always, set-group-ID where the group may execute; root's writes clear
/// nothing. ozfs does this itself (the kernel leaves it to the server under
/// FUSE_HANDLE_KILLPRIV_V2, which spares a `security.capability` lookup
/// per write), and `stat` must show the new mode at once: the kernel's
/// cached mode is what exec trusts.
#[test]
fn writes_by_others_clear_set_id_bits_as_on_the_host() {
    let pool = new_devs("ozkillsuid", Layout::Stripe, 1, 256);
    let oz = ozfs();
    let work = local_dir("killsuid");
    let root = work.path().canonicalize().unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let mnt = root.join("mnt");
    let _cleanup = DaemonCleanup {
        oz: &oz,
        mnts: vec![mnt.clone()],
    };
    oz_create_at(&oz, &pool, &mnt, None, &[]);
    let name = pool.name().to_string();
    let dev_dir = pool.dev_dir().to_string_lossy().into_owned();
    oz_export(&oz, &name);
    oz.ok(&["zpool", "import", "-d", &dev_dir, &name]);
    assert!(is_mounted(&mnt));
    let host = root.join("host");
    fs::create_dir_all(&host).unwrap();
    let as_nobody = |cmd: &str| {
        let st = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args(["sh", "-c", cmd])
            .status()
            .unwrap();
        assert!(st.success(), "{cmd}");
    };
    let mut seen = Vec::new();
    for dir in [&host, &mnt] {
        let mut modes = Vec::new();
        for (what, start) in [
            ("write", 0o6757),
            ("write", 0o6747),
            ("truncate", 0o6757),
            ("truncate", 0o6747),
            ("root write", 0o6757),
        ] {
            let f = dir.join("f");
            fs::File::create(&f).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(start)).unwrap();
            // Cache the mode in the kernel first, as a running system has.
            let before = fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
            assert_eq!(before, start, "{}: chmod", dir.display());
            let p = f.display();
            match what {
                "write" => as_nobody(&format!("echo more >> {p}")),
                "truncate" => as_nobody(&format!("truncate -s 1 {p}")),
                _ => fs::write(&f, b"root").unwrap(),
            }
            let m = fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
            modes.push(format!("{what} {start:o} -> {m:o}"));
            fs::remove_file(&f).unwrap();
        }
        seen.push(modes);
    }
    assert!(seen[0][0].ends_with("-> 757"), "host: {:?}", seen[0]);
    assert_eq!(seen[1], seen[0], "ozfs (right) vs the host (left)");
}
