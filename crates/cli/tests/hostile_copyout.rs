//! Copy-out of hostile file systems: `ozfs cp -r` must never
//! write outside DEST, whatever the pool's directories say.
//!
//! The hostile trees cannot be made through the ZPL (it refuses duplicate
//! names and hard-linked directories), so each test builds an honest tree
//! with ozfs, sends a snapshot of it, edits the micro-ZAP blocks of its
//! directories inside the stream's WRITE records, fixes the END record's
//! checksum (Fletcher-4 of every byte before END) and receives the result:
//!
//! (a) Duplicate names. A directory holds a symlink `evil` to an absolute
//!     canary directory outside DEST and a real directory (with a file and a
//!     subdirectory) renamed to `evil` too, after the symlink in the
//!     listing. The copy must refuse the second `evil` with an error naming
//!     it, exit 1, leave the canary exactly as it was (no new file, mode
//!     and times unchanged) and leave the copied `evil` a symlink.
//! (b) A directory DAG. At every level of a chain of directories, the
//!     entry `y` is made to point at the same directory as `x`: the tree
//!     has 2^N paths but N+2 directories. The copy must refuse every second
//!     name of a directory ("linked more than once") and create no more
//!     directories than there are. The last level's `y` points back at
//!     the top of the chain instead (a cycle), refused the same way.

mod common;
mod wcommon;
use ozfs_format::types::ot;
use ozfs_format::zap::{MZAP_ENT_LEN, MZAP_NAME_LEN, ZBT_MICRO};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;
use wcommon::*;

/// Offsets of the records of a stream (each 312 bytes plus payload):
/// (offset, type). Stops after END.
fn records(stream: &[u8]) -> Vec<(usize, u32)> {
    let mut v = Vec::new();
    let mut o = 0usize;
    while o + 312 <= stream.len() {
        let u32_at = |x: usize| u32::from_le_bytes(stream[o + x..o + x + 4].try_into().unwrap());
        let u64_at = |x: usize| u64::from_le_bytes(stream[o + x..o + x + 8].try_into().unwrap());
        let t = u32_at(0);
        v.push((o, t));
        let payload = match t {
            0 => u32_at(4) as usize,
            1 => (u32_at(28) as usize).div_ceil(8) * 8,
            3 => u64_at(32) as usize,
            7 => u64_at(16) as usize,
            _ => 0,
        };
        o += 312 + payload;
        if t == 5 {
            break;
        }
    }
    v
}

/// One micro-ZAP entry of a directory block: (byte offset in the stream of
/// the 64-byte entry, name, value).
#[derive(Debug, Clone)]
struct MzEntry {
    at: usize,
    name: Vec<u8>,
    value: u64,
}

/// The micro-ZAP directory blocks carried by the stream's WRITE records:
/// per block, its object number and its entries in slot order.
fn micro_dirs(stream: &[u8]) -> Vec<(u64, Vec<MzEntry>)> {
    let mut out = Vec::new();
    for (o, t) in records(stream) {
        if t != 3 {
            continue;
        }
        let object = u64::from_le_bytes(stream[o + 8..o + 16].try_into().unwrap());
        let otype = u32::from_le_bytes(stream[o + 16..o + 20].try_into().unwrap());
        let offset = u64::from_le_bytes(stream[o + 24..o + 32].try_into().unwrap());
        let len = u64::from_le_bytes(stream[o + 32..o + 40].try_into().unwrap()) as usize;
        if otype != ot::DIRECTORY_CONTENTS as u32 || offset != 0 || len < 2 * MZAP_ENT_LEN {
            continue;
        }
        let p = o + 312;
        if u64::from_le_bytes(stream[p..p + 8].try_into().unwrap()) != ZBT_MICRO {
            continue;
        }
        let mut ents = Vec::new();
        for e in (p + MZAP_ENT_LEN..p + len).step_by(MZAP_ENT_LEN) {
            let raw = &stream[e + 14..e + 14 + MZAP_NAME_LEN];
            if raw[0] == 0 {
                continue;
            }
            let n = raw.iter().position(|&b| b == 0).unwrap_or(MZAP_NAME_LEN);
            ents.push(MzEntry {
                at: e,
                name: raw[..n].to_vec(),
                value: u64::from_le_bytes(stream[e..e + 8].try_into().unwrap()),
            });
        }
        out.push((object, ents));
    }
    out
}

/// Recomputes the END record's checksum (the test kit's fixer, after
/// checking that the stream ends with END).
fn fix_end_checksum(stream: &mut [u8]) {
    let recs = records(stream);
    let &(_, t) = recs.last().expect("records");
    assert_eq!(t, 5, "the stream does not end with END");
    assert!(ozfs_testkit::mutate::fix_stream_end(stream));
}

fn send_to(oz: &Ozfs, snap: &str, file: &Path) -> Vec<u8> {
    let out = oz.sh(&format!("\"$OZFS\" zfs send {snap} > '{}'", file.display()));
    assert!(out.success(), "ozfs send {snap}:\n{}", out.describe());
    fs::read(file).unwrap()
}

fn receive_from(oz: &Ozfs, target: &str, file: &Path) {
    let out = oz.sh(&format!(
        "\"$OZFS\" zfs receive {target} < '{}'",
        file.display()
    ));
    assert!(
        out.success(),
        "ozfs receive {target} of the edited stream:\n{}",
        out.describe()
    );
}

/// (relative path, mode, size, mtime) of everything under `root`, not
/// following symlinks.
fn snapshot_tree(root: &Path) -> Vec<(String, u32, u64, i64, i64)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        let m = fs::symlink_metadata(&d).unwrap();
        let rel = d.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        out.push((rel, m.mode(), m.size(), m.mtime(), m.mtime_nsec()));
        if m.is_dir() {
            for e in fs::read_dir(&d).unwrap() {
                todo.push(e.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

/// Number of directories under `root` (itself included), not following
/// symlinks.
fn count_dirs(root: &Path) -> usize {
    let mut n = 0;
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        if !fs::symlink_metadata(&d)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            continue;
        }
        n += 1;
        for e in fs::read_dir(&d).unwrap() {
            todo.push(e.unwrap().path());
        }
    }
    n
}

#[test]
fn duplicate_name_symlink_then_directory() {
    let t0 = Instant::now();
    let tag = "hcp-dup";
    let oz = ozfs();
    let pool = new_devs("ozhcpa", Layout::Stripe, 1, 128);
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    let src_ds = format!("{}/src", pool.name());
    oz.ok(&["zfs", "create", &src_ds]);
    let work = local_dir(tag);
    let wd = work.path().canonicalize().unwrap();

    // The canary: a directory outside DEST the hostile symlink points at.
    let canary = wd.join("canary");
    fs::create_dir(&canary).unwrap();
    fs::write(canary.join("keep"), b"canary\n").unwrap();
    fs::set_permissions(&canary, fs::Permissions::from_mode(0o755)).unwrap();
    let canary_before = snapshot_tree(&canary);

    // The honest tree: top/evil -> canary, top/evim/{payload, sub/inner}.
    let top = wd.join("stage").join("top");
    fs::create_dir_all(top.join("evim").join("sub")).unwrap();
    std::os::unix::fs::symlink(&canary, top.join("evil")).unwrap();
    fs::write(
        top.join("evim").join("payload"),
        b"written through the link\n",
    )
    .unwrap();
    fs::write(top.join("evim").join("sub").join("inner"), b"deeper\n").unwrap();
    fs::set_permissions(top.join("evim"), fs::Permissions::from_mode(0o750)).unwrap();
    oz_cp_in(&oz, &top, &format!("{src_ds}:/"));
    oz.ok(&["zfs", "snapshot", &format!("{src_ds}@s")]);
    let sfile = wd.join("stream");
    let mut stream = send_to(&oz, &format!("{src_ds}@s"), &sfile);

    // The edit: the directory's entry takes the symlink's name and comes
    // after it in the listing.
    let dirs = micro_dirs(&stream);
    let top_ents = dirs
        .iter()
        .map(|(_, ents)| ents)
        .find(|ents| {
            ents.iter().any(|e| e.name == b"evil") && ents.iter().any(|e| e.name == b"evim")
        })
        .unwrap_or_else(|| panic!("no micro-ZAP block with evil and evim in the stream"))
        .clone();
    let link = top_ents.iter().find(|e| e.name == b"evil").unwrap().clone();
    let dir = top_ents.iter().find(|e| e.name == b"evim").unwrap().clone();
    let (first, second) = if link.at < dir.at {
        (link.at, dir.at)
    } else {
        (dir.at, link.at)
    };
    // Slot order: symlink, then directory.
    let link_bytes = stream[link.at..link.at + MZAP_ENT_LEN].to_vec();
    let mut dir_bytes = stream[dir.at..dir.at + MZAP_ENT_LEN].to_vec();
    dir_bytes[14..18].copy_from_slice(b"evil");
    stream[first..first + MZAP_ENT_LEN].copy_from_slice(&link_bytes);
    stream[second..second + MZAP_ENT_LEN].copy_from_slice(&dir_bytes);
    fix_end_checksum(&mut stream);
    let edited = micro_dirs(&stream);
    assert!(
        edited
            .iter()
            .any(|(_, ents)| ents.iter().filter(|e| e.name == b"evil").count() == 2),
        "the edit did not make a duplicate name"
    );
    let efile = wd.join("stream.edited");
    fs::write(&efile, &stream).unwrap();
    let bad_ds = format!("{}/bad", pool.name());
    receive_from(&oz, &bad_ds, &efile);
    phase(&format!("{tag}: hostile file system received"), t0);

    // The copy-out.
    let out_dir = wd.join("out");
    let r = oz.run(&[
        std::ffi::OsStr::new("cp"),
        std::ffi::OsStr::new("-r"),
        std::ffi::OsStr::new(&format!("{bad_ds}:/")),
        out_dir.as_os_str(),
    ]);
    eprintln!("{}", r.describe());
    assert_eq!(
        canary_before,
        snapshot_tree(&canary),
        "the canary outside DEST changed:\n{}",
        r.describe()
    );
    assert_eq!(r.code, Some(1), "cp must fail:\n{}", r.describe());
    assert!(
        r.stderr.contains("evil") && r.stderr.contains("duplicate"),
        "the error must name the duplicate entry:\n{}",
        r.describe()
    );
    let copied = out_dir.join("top").join("evil");
    let m = fs::symlink_metadata(&copied).unwrap();
    assert!(
        m.file_type().is_symlink(),
        "{} is not a symlink",
        copied.display()
    );
    assert_eq!(fs::read_link(&copied).unwrap(), canary);
    phase(&format!("{tag}: refused"), t0);

    // Copying into an existing tree: a symlink already in DEST where the
    // pool has a directory is not followed either.
    let into = wd.join("into");
    fs::create_dir(&into).unwrap();
    std::os::unix::fs::symlink(&canary, into.join("top")).unwrap();
    let r = oz.run(&[
        std::ffi::OsStr::new("cp"),
        std::ffi::OsStr::new("-r"),
        std::ffi::OsStr::new(&format!("{src_ds}@s:/")),
        into.as_os_str(),
    ]);
    assert_eq!(
        canary_before,
        snapshot_tree(&canary),
        "the canary behind an existing symlink in DEST changed:\n{}",
        r.describe()
    );
    assert_eq!(r.code, Some(1), "cp must fail:\n{}", r.describe());
    assert!(
        r.stderr.contains("symbolic link"),
        "the error must say what is in the way:\n{}",
        r.describe()
    );
    assert!(fs::symlink_metadata(into.join("top"))
        .unwrap()
        .file_type()
        .is_symlink());
    phase(&format!("{tag}: existing symlink in DEST not followed"), t0);
}

#[test]
fn directory_dag_is_copied_once() {
    const LEVELS: usize = 12;
    let t0 = Instant::now();
    let tag = "hcp-dag";
    let oz = ozfs();
    let pool = new_devs("ozhcpb", Layout::Stripe, 1, 128);
    oz_create(&oz, &pool, None, &["-O", "atime=off"]);
    let src_ds = format!("{}/src", pool.name());
    oz.ok(&["zfs", "create", &src_ds]);
    let work = local_dir(tag);
    let wd = work.path().canonicalize().unwrap();

    // dag/x/x/.../x (LEVELS deep), every level also with an empty y.
    let dag = wd.join("stage").join("dag");
    let mut d = dag.clone();
    for _ in 0..LEVELS {
        fs::create_dir_all(d.join("y")).unwrap();
        d = d.join("x");
    }
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("leaf"), b"leaf\n").unwrap();
    oz_cp_in(&oz, &dag, &format!("{src_ds}:/"));
    oz.ok(&["zfs", "snapshot", &format!("{src_ds}@s")]);
    let sfile = wd.join("stream");
    let mut stream = send_to(&oz, &format!("{src_ds}@s"), &sfile);

    // At every level, y takes x's value (the same directory object); at
    // the last level, dag's (a cycle back to the top of the chain).
    let dirs = micro_dirs(&stream);
    let named = |n: &[u8]| {
        dirs.iter()
            .flat_map(|(_, ents)| ents.iter())
            .find(|e| e.name == n)
            .unwrap_or_else(|| panic!("no entry {n:?} in the stream"))
            .clone()
    };
    let dag_value = named(b"dag").value;
    let leaf_dir = dirs
        .iter()
        .find(|(_, ents)| ents.iter().any(|e| e.name == b"leaf"))
        .map(|(obj, _)| *obj)
        .unwrap();
    let mut edits = 0;
    let mut cycles = 0;
    for (_, ents) in &dirs {
        let x = ents.iter().find(|e| e.name == b"x");
        let y = ents.iter().find(|e| e.name == b"y");
        if let (Some(x), Some(y)) = (x, y) {
            let v = if x.value & ((1 << 48) - 1) == leaf_dir {
                cycles += 1;
                dag_value
            } else {
                x.value
            };
            stream[y.at..y.at + 8].copy_from_slice(&v.to_le_bytes());
            edits += 1;
        }
    }
    assert_eq!((edits, cycles), (LEVELS, 1), "levels edited");
    fix_end_checksum(&mut stream);
    let efile = wd.join("stream.edited");
    fs::write(&efile, &stream).unwrap();
    let bad_ds = format!("{}/bad", pool.name());
    receive_from(&oz, &bad_ds, &efile);
    phase(&format!("{tag}: hostile file system received"), t0);

    let out_dir = wd.join("out");
    let r = oz.run(&[
        std::ffi::OsStr::new("cp"),
        std::ffi::OsStr::new("-r"),
        std::ffi::OsStr::new(&format!("{bad_ds}:/")),
        out_dir.as_os_str(),
    ]);
    eprintln!("{}", r.describe());
    let ndirs = count_dirs(&out_dir);
    eprintln!("{} directories copied", ndirs);
    // The dataset's root (OUT), dag and its LEVELS x-levels.
    assert!(
        ndirs <= LEVELS + 2,
        "{ndirs} directories for {} distinct ones:\n{}",
        LEVELS + 2,
        r.describe()
    );
    assert_eq!(r.code, Some(1), "cp must fail:\n{}", r.describe());
    assert_eq!(
        r.stderr.matches("linked more than once").count(),
        LEVELS,
        "one refusal per level:\n{}",
        r.describe()
    );
    // What could be copied was: the leaf at the end of the x chain.
    let mut leaf = out_dir.join("dag");
    for _ in 0..LEVELS {
        leaf = leaf.join("x");
    }
    assert_eq!(fs::read(leaf.join("leaf")).unwrap(), b"leaf\n");
    phase(&format!("{tag}: refused"), t0);
}
