//! (b) Round trip: zfs-fuse creates a pool, ozfs modifies it, zfs-fuse
//! continues.
//!
//! zfs-fuse creates a raidz1 pool with content, snapshot @s1, changes, and
//! exports.  ozfs imports it read-write, copies out the live tree and @s1
//! (must equal what zfs-fuse showed), then copies new files in and removes
//! files, a hard link, a symlink, a fifo, a file with xattrs and whole trees
//! that @s1 still references, and rewrites a file by rm + cp.  A local
//! "model" directory receives the same changes.  After `ozfs zpool export`:
//! zfs-fuse's zdb -bcc is clean; zfs-fuse imports the pool, its live tree
//! equals the model, a scrub is clean; after zfs-fuse exports, ozfs still
//! reads @s1 unchanged; finally zfs-fuse snapshots @s2 and changes more,
//! zdb stays clean and ozfs reads @s2 and the live tree.

mod common;
mod wcommon;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use wcommon::*;

/// `cp -a SRC DEST` on the local model (preserves modes, owners, mtimes,
/// xattrs, hard links inside SRC).
fn model_cp(src: &Path, dest: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dest)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {} {}", src.display(), dest.display());
}

fn model_rm(model: &Path, rel: &str) {
    let p = model.join(rel);
    let md = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("model {rel}: {e}"));
    if md.is_dir() {
        fs::remove_dir_all(&p).unwrap();
    } else {
        fs::remove_file(&p).unwrap();
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Directories whose mtime changes because entries were added or removed
/// in them (by ozfs and in the model at different moments).
const TOUCHED_DIRS: &[&str] = &[
    ".", "sizes", "hl/a", "dirs", "large", "links", "fifos", "xattr", "names",
];

#[test]
fn write_roundtrip() {
    let seed = 201;
    let tag = "roundtrip";
    let t0 = Instant::now();
    let mut pool = TestPool::create(Layout::Raidz1, 3, 128 * MIB).unwrap();
    pool.set("", "atime", "off").unwrap();
    let root = pool.root("");
    let profile = Profile {
        dups: false,
        ..Profile::moderate(seed)
    };
    populate(&root, &profile).unwrap();
    let s1 = pool.record_snapshot("", "s1").unwrap();
    mutate(&root, 1, seed).unwrap();
    let live0 = pool.record_live("").unwrap();
    // The link-count convention holds for what zfs-fuse wrote itself.
    assert_nlinks(&root, &live0, "zfs-fuse's own tree");
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse setup"), t0);

    // ozfs: import read-write, read both trees.
    let t1 = Instant::now();
    let name = pool.name().to_string();
    let snap1 = format!("{name}@s1");
    let oz = ozfs();
    oz_import_rw(&oz, &pool.dev_dir(), &name);
    let expected = vec![
        Expected {
            name: snap1.clone(),
            manifest: s1.clone(),
        },
        Expected {
            name: name.clone(),
            manifest: live0.clone(),
        },
    ];
    verify_copyouts(&oz, &pool, &expected, "rw-import");

    // The model: the live tree as ozfs copies it out.
    let model = pool.work_dir("model");
    oz.cp(&format!("{name}:/"), &model);
    live0.assert_same(&Manifest::scan(&model).unwrap(), "model copy");

    // New local content.
    let local = local_dir(tag);
    let (added, _) = source_tree(
        local.path(),
        "added",
        &Profile {
            sizes: true,
            symlinks: true,
            hardlinks: true,
            xattrs: true,
            names: true,
            fifos: true,
            ..Profile::none(seed + 7)
        },
    );
    let single_dir = local.path().join("single");
    fs::create_dir_all(&single_dir).unwrap();
    let single = single_dir.join("single_file.bin");
    populate::write_random(&single, 3 * MIB + 5, seed + 8).unwrap();
    let rewrite_dir = local.path().join("rewrite");
    fs::create_dir_all(&rewrite_dir).unwrap();
    let rewritten = rewrite_dir.join("f_131072");
    populate::write_text(&rewritten, 200_000, seed + 9).unwrap();
    settle_times(&single_dir).unwrap();
    settle_times(&rewrite_dir).unwrap();
    let t_changes = now();

    // Copy in: a tree (new dir), a file into an existing dir.
    oz_cp_in(&oz, &added, &format!("{name}:/added"));
    model_cp(&added, &model.join("added"));
    oz_cp_in(&oz, &single, &format!("{name}:/dirs"));
    model_cp(&single, &model.join("dirs"));

    // Removals of things @s1 references.
    for (rel, recursive) in [
        ("sizes/f_1048577", false),
        ("hl/a/second", false), // hard link (hl/orig keeps the inode)
        ("dirs/micro100", true),
        ("large/random_5m", false),
        ("links/short", false),
        ("fifos/fifo_a", false),
        ("xattr/file_small", false), // has an xattr directory
        ("deep", true),
        ("names/日本語", false),
    ] {
        oz_rm(&oz, &format!("{name}:/{rel}"), recursive);
        model_rm(&model, rel);
    }
    // Rewrite by rm + cp.
    oz_rm(&oz, &format!("{name}:/sizes/f_131072"), false);
    oz_cp_in(&oz, &rewritten, &format!("{name}:/sizes/f_131072"));
    model_rm(&model, "sizes/f_131072");
    model_cp(&rewritten, &model.join("sizes/f_131072"));

    // Errors: no changes.
    let out = oz.fails_with(1, &["rm", &format!("{name}:/dirs")]);
    assert_error(&out, Some(1), &[]);
    oz.fails_with(1, &["rm", &format!("{name}:/no/such/file")]);
    oz.fails_with(1, &["rm", &format!("{snap1}:/sizes/f_1")]);
    phase(&format!("{tag}: ozfs changes"), t1);

    // ozfs reads its writes: live == model, @s1 unchanged.
    let mut want = Manifest::scan(&model).unwrap();
    neutralize_mtimes(&mut want, TOUCHED_DIRS);
    let mut got = oz_copyout(&oz, &pool, &format!("{name}:/"), "live-after", true);
    neutralize_mtimes(&mut got, TOUCHED_DIRS);
    want.assert_same(&got, "[ozfs] live tree after ozfs changes vs model");
    verify_copyouts(&oz, &pool, &expected[..1], "s1-after-changes");
    oz_export(&oz, &name);

    // zfs-fuse: zdb, import, compare, scrub.
    let t2 = Instant::now();
    assert_zdb_clean(&pool, &pool.dev_dir(), "after ozfs changes");
    pool.import()
        .unwrap_or_else(|e| panic!("zfs-fuse cannot import after ozfs changes: {e}"));
    assert_status_online(&pool, tag);
    let zf_live = scan_zf(&root, true);
    // Parent directories of changed entries: ozfs must have updated their
    // mtimes (as a file system does); report, the comparison ignores them.
    for d in TOUCHED_DIRS {
        if let Some(e) = zf_live.get(d) {
            if e.mtime.0 + 1 < t_changes {
                eprintln!(
                    "NOTE: {d}: mtime {} not updated by ozfs changes (at {t_changes})",
                    e.mtime.0
                );
            }
        }
    }
    let mut zf_live = zf_live;
    neutralize_mtimes(&mut zf_live, TOUCHED_DIRS);
    want.assert_same(&zf_live, "[zfs-fuse] live tree after ozfs changes vs model");
    assert_nlinks(&root, &zf_live, "zfs-fuse view after ozfs changes");
    assert_scrub_clean(&pool, tag);
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse checks"), t2);

    // ozfs (fresh state): @s1 still intact after zfs-fuse imported/exported.
    let oz2 = ozfs();
    oz2.import_ro(&pool.dev_dir(), &name);
    verify_copyouts(&oz2, &pool, &expected[..1], "s1-after-zfs-fuse");
    oz_export(&oz2, &name);

    // zfs-fuse continues: @s2, more changes; zdb clean; ozfs reads all.
    let t3 = Instant::now();
    pool.import().unwrap();
    let s2 = pool.record_snapshot("", "s2").unwrap();
    mutate(&root, 2, seed).unwrap();
    mutate(&root, 3, seed).unwrap();
    let live2 = pool.record_live("").unwrap();
    pool.export().unwrap();
    assert_zdb_clean(&pool, &pool.dev_dir(), "after zfs-fuse continued");
    let oz3 = ozfs();
    oz3.import_ro(&pool.dev_dir(), &name);
    verify_copyouts(
        &oz3,
        &pool,
        &[
            expected[0].clone(),
            Expected {
                name: format!("{name}@s2"),
                manifest: s2,
            },
            Expected {
                name: name.clone(),
                manifest: live2,
            },
        ],
        "final",
    );
    oz_export(&oz3, &name);
    phase(&format!("{tag}: zfs-fuse continued"), t3);
}
