//! Intent logs OpenZFS wrote, replayed by ozfs. The fixture
//! (`tests/fixtures/zil-openzfs-2.3.img.gz`, made by
//! `scripts/oracle/make-zil.sh` with the OpenZFS 2.3.2 kernel module: see
//! `scripts/oracle/ZIL-FIXTURES.md`) is a pool exported while frozen, so
//! each file system's log holds every record type OpenZFS 2.3 writes on
//! Linux — creates (large dnodes too), xattr directories, symlinks,
//! removes, links, renames with exchange and whiteout, copied and indirect
//! writes, truncates, setattrs, SA xattrs and POSIX ACLs, clones — never
//! claimed nor replayed. `zil-openzfs-2.3.manifest` is what OpenZFS showed
//! after it imported the image and replayed them itself.
//!
//! ozfs imports the image read-only first (it must name, per file system,
//! the records it does not apply), then read-write: the daemon claims and
//! replays the logs as it mounts, and every file system's listing (types,
//! modes, owners, sizes, link counts, contents, symlink targets, device
//! numbers, xattrs) must equal OpenZFS's. OpenZFS's `zdb -bcc` and `-d`
//! then find the pool clean.

mod common;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const DATASETS: [&str; 5] = ["zl", "zl/a", "zl/big", "zl/d", "zl/tp"];

fn unpack(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zil-openzfs-2.3.img.gz");
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -dc '{}' > '{}'",
            fixture.display(),
            dir.join("d0.img").display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
}

fn manifest(mp: &Path, prefix: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/oracle/zil-manifest.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg(mp)
        .arg(prefix)
        .output()
        .expect("zil-manifest.sh");
    assert!(
        out.status.success(),
        "zil-manifest.sh {}: {}",
        mp.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn logs_openzfs_left_replay_as_openzfs_replays_them() {
    let work = scratch("ozfs-test-zil-openzfs-");
    // Read-only: nothing applied, and it says so for every file system.
    let ro_devs = work.path().join("ro");
    unpack(&ro_devs);
    let ro = ozfs();
    let out = ro.run(&[
        "zpool",
        "import",
        "-d",
        &ro_devs.to_string_lossy(),
        "-o",
        "readonly=on",
        "zl",
    ]);
    assert!(out.success(), "{}", out.describe());
    for (ds, n) in [
        ("zl", 6),
        ("zl/a", 87),
        ("zl/big", 73),
        ("zl/d", 113),
        ("zl/tp", 73),
    ] {
        let want = format!("{ds}: its intent log holds {n} records not applied");
        assert!(
            out.stderr.contains(&want),
            "no '{want}' in:\n{}",
            out.stderr
        );
    }
    assert!(
        out.stderr
            .contains("zl/enc: its encrypted intent log holds"),
        "{}",
        out.stderr
    );
    ro.ok(&["zpool", "export", "zl"]);

    // Read-write: claimed, replayed at mount.
    let devs = work.path().join("dev");
    unpack(&devs);
    let oz = ozfs();
    let d = devs.to_string_lossy().into_owned();
    oz.ok(&["zpool", "import", "-N", "-d", &d, "zl"]);
    let mnt = work.path().join("m");
    for ds in DATASETS {
        let mp = mnt.join(ds.replace('/', "_"));
        oz.ok(&["zfs", "set", &format!("mountpoint={}", mp.display()), ds]);
    }
    // No key here: the encrypted file system stays unmounted, its log kept.
    oz.ok(&["zfs", "set", "canmount=noauto", "zl/enc"]);
    oz.ok(&["zfs", "mount", "-a"]);
    let want = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zil-openzfs-2.3.manifest"),
    )
    .unwrap();
    for ds in DATASETS {
        let mp = mnt.join(ds.replace('/', "_"));
        let t0 = Instant::now();
        let mounted = || {
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap_or_default()
                .contains(&format!(" {} ", mp.display()))
        };
        while !mounted() {
            assert!(t0.elapsed() < Duration::from_secs(30), "{ds} not mounted");
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = manifest(&mp, ds);
        // The lines of this dataset (a path belongs to the longest
        // dataset name it starts with).
        let all = ["zl", "zl/a", "zl/big", "zl/d", "zl/tp", "zl/enc"];
        let owner = |path: &str| {
            all.iter()
                .filter(|c| path == **c || path.starts_with(&format!("{c}/")))
                .max_by_key(|c| c.len())
                .copied()
        };
        let expected: String = want
            .lines()
            .filter(|l| owner(l.split(' ').next().unwrap_or("")) == Some(ds))
            .map(|l| format!("{l}\n"))
            .collect();
        let exp_lines: Vec<&str> = expected.lines().collect();
        let got_lines: Vec<&str> = got.lines().collect();
        let missing: Vec<_> = exp_lines
            .iter()
            .filter(|l| !got_lines.contains(l))
            .collect();
        let extra: Vec<_> = got_lines
            .iter()
            .filter(|l| !exp_lines.contains(l))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{ds} after ozfs's replay differs from OpenZFS's:\nOpenZFS only: {missing:#?}\nozfs only: {extra:#?}"
        );
    }
    let log = std::fs::read_to_string(oz.state_dir().join("ozfsd.log")).unwrap_or_default();
    assert!(
        log.contains("zl/a: intent log replayed (87 records applied"),
        "{log}"
    );
    oz.ok(&["zpool", "export", "zl"]);
    if let Some(zdb) = oracle_zdb() {
        openzfs_verdict(&zdb, &devs, "zl");
    }
}
