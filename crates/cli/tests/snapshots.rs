//! Snapshot lifecycle on a pool ozfs writes (issue 6): snapshot, clone,
//! hold/release, rollback, rename, destroy (one, a range, with dependents
//! refused), checked at every step against the trees copied out when each
//! snapshot was taken; `zfs list -o space` figures add up (USED is USEDSNAP
//! plus USEDDS plus USEDCHILD) and USEDSNAP returns to 0 when the last
//! snapshot goes. Then zfs-fuse: its zdb is clean, it imports the pool and reports
//! the same space figures, and destroying a snapshot there (which walks the
//! dead lists ozfs wrote) leaves its zdb clean too.

mod common;
mod wcommon;
use std::collections::BTreeMap;
use std::time::Instant;
use wcommon::*;

/// `zfs list -Hp -o name,used,usedsnap,usedds,usedchild,refer -t all -r`.
fn space(oz: &Ozfs, pool: &str) -> BTreeMap<String, Vec<u64>> {
    oz.ok(&[
        "zfs",
        "list",
        "-Hp",
        "-t",
        "all",
        "-r",
        "-o",
        "name,used,usedsnap,usedds,usedchild,refer",
        pool,
    ])
    .lines()
    .map(|l| {
        let f: Vec<&str> = l.split('\t').collect();
        (
            f[0].to_string(),
            f[1..].iter().map(|x| x.parse().unwrap_or(0)).collect(),
        )
    })
    .collect()
}

fn assert_space_adds_up(sp: &BTreeMap<String, Vec<u64>>, context: &str) {
    for (name, v) in sp {
        if name.contains('@') {
            continue;
        }
        assert_eq!(
            v[0],
            v[1] + v[2] + v[3],
            "{context}: {name}: USED {} != USEDSNAP {} + USEDDS {} + USEDCHILD {}",
            v[0],
            v[1],
            v[2],
            v[3]
        );
    }
}

#[test]
fn snapshot_lifecycle() {
    let t0 = Instant::now();
    let tag = "snaps";
    let mut pool = new_devs("ozsnap", Layout::Mirror, 2, 256);
    let name = pool.name().to_string();
    let oz = ozfs();
    oz_create(&oz, &pool, Some("mirror"), &[]);
    oz_create_ds(&oz, &pool, "fs", &[]);
    let fs = pool.ds("fs");
    let work = local_dir(tag);
    let (t1, _) = source_tree(work.path(), "t1", &Profile::moderate(71));
    let (t2, _) = source_tree(work.path(), "t2", &Profile::small(72));
    let (t3, _) = source_tree(work.path(), "t3", &Profile::small(73));
    fn copy_of(oz: &Ozfs, pool: &TestPool, src: &str) -> Manifest {
        oz_copyout(oz, pool, src, "snaps", true)
    }

    oz_cp_in(&oz, &t1, &format!("{fs}:/"));
    oz.ok(&["zfs", "snapshot", &format!("{fs}@s1")]);
    let m1 = copy_of(&oz, &pool, &format!("{fs}@s1:/"));
    oz_cp_in(&oz, &t2, &format!("{fs}:/more"));
    oz_rm(&oz, &format!("{fs}:/t1/sizes"), true);
    oz.ok(&["zfs", "snapshot", &format!("{fs}@s2")]);
    let m2 = copy_of(&oz, &pool, &format!("{fs}@s2:/"));
    oz_rm(&oz, &format!("{fs}:/more"), true);
    oz_cp_in(&oz, &t3, &format!("{fs}:/third"));
    oz.ok(&["zfs", "snapshot", &format!("{fs}@s3")]);
    let m3 = copy_of(&oz, &pool, &format!("{fs}@s3:/"));
    assert_ne!(m1.len(), m2.len());
    // Live changes after the last snapshot.
    oz_rm(&oz, &format!("{fs}:/third"), true);
    oz_cp_in(&oz, &t2, &format!("{fs}:/later"));
    let sp = space(&oz, &name);
    assert_space_adds_up(&sp, "after three snapshots");
    assert!(
        sp[&fs][1] > 0,
        "USEDSNAP of {fs} is 0 with data only in snapshots"
    );
    phase(&format!("{tag}: three snapshots"), t0);

    // A clone of s2, written to.
    let cl = pool.ds("cl");
    oz.ok(&["zfs", "clone", &format!("{fs}@s2"), &cl]);
    copy_of(&oz, &pool, &format!("{cl}:/")).assert_same(&m2, "clone of s2");
    oz_cp_in(&oz, &t3, &format!("{cl}:/mine"));
    let r = oz.run(&["zfs", "destroy", &format!("{fs}@s2")]);
    assert_eq!(
        r.code,
        Some(1),
        "destroying a cloned snapshot: {}",
        r.describe()
    );
    // Holds.
    oz.ok(&["zfs", "hold", "keep", &format!("{fs}@s1")]);
    let holds = oz.ok(&["zfs", "holds", "-H", &format!("{fs}@s1")]);
    assert!(holds.contains("keep"), "{holds}");
    let r = oz.run(&["zfs", "destroy", &format!("{fs}@s1")]);
    assert_eq!(
        r.code,
        Some(1),
        "destroying a held snapshot: {}",
        r.describe()
    );
    oz.ok(&["zfs", "release", "keep", &format!("{fs}@s1")]);
    // Rollback drops the live changes.
    let r = oz.run(&["zfs", "rollback", &format!("{fs}@s2")]);
    assert_eq!(r.code, Some(1), "rollback past s3: {}", r.describe());
    oz.ok(&["zfs", "rollback", &format!("{fs}@s3")]);
    copy_of(&oz, &pool, &format!("{fs}:/")).assert_same(&m3, "head after rollback to s3");
    assert_space_adds_up(&space(&oz, &name), "after clone and rollback");
    phase(&format!("{tag}: clone, holds, rollback"), t0);

    // Renames.
    oz.ok(&["zfs", "rename", &format!("{fs}@s3"), &format!("{fs}@third")]);
    let cl2 = pool.ds("clone2");
    oz.ok(&["zfs", "rename", &cl, &cl2]);
    let names = oz.ok(&["zfs", "list", "-H", "-t", "all", "-o", "name"]);
    assert!(
        names.contains(&format!("{fs}@third")) && names.contains(&cl2),
        "{names}"
    );
    assert!(!names.contains(&format!("{fs}@s3")), "{names}");
    copy_of(&oz, &pool, &format!("{fs}@third:/")).assert_same(&m3, "renamed snapshot");

    // Promote the clone: s1 and s2 move to it, fs keeps its later snapshot.
    oz.ok(&["zfs", "promote", &cl2]);
    let names = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    for s in [
        format!("{cl2}@s1"),
        format!("{cl2}@s2"),
        format!("{fs}@third"),
    ] {
        assert!(names.lines().any(|l| l == s), "{s} after promote:\n{names}");
    }
    assert!(!names.contains(&format!("{fs}@s1")), "{names}");
    copy_of(&oz, &pool, &format!("{cl2}@s1:/")).assert_same(&m1, "s1 after promote");
    copy_of(&oz, &pool, &format!("{cl2}@s2:/")).assert_same(&m2, "s2 after promote");
    copy_of(&oz, &pool, &format!("{fs}:/")).assert_same(&m3, "fs after promote");
    assert_space_adds_up(&space(&oz, &name), "after promote");
    let r = oz.run(&["zfs", "destroy", &cl2]);
    assert_eq!(
        r.code,
        Some(1),
        "destroying the promoted clone's parent: {}",
        r.describe()
    );

    // zfs-fuse reads the pool as it is now (promoted clone and all) and
    // finds it clean.
    let before = space(&oz, &name);
    oz_scrub_clean(&oz, &name, "scrub");
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: with a clone"));
    pool.import().unwrap();
    let props = [
        "used",
        "usedbysnapshots",
        "usedbydataset",
        "usedbychildren",
        "referenced",
    ];
    let zf = pool
        .zfs(&[
            "get",
            "-rHp",
            "-o",
            "name,property,value",
            &props.join(","),
            &name,
        ])
        .unwrap();
    let mut theirs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for l in zf.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 3 {
            continue;
        }
        let Some(i) = props.iter().position(|p| *p == f[1]) else {
            continue;
        };
        theirs.entry(f[0].to_string()).or_insert_with(|| vec![0; 5])[i] = f[2].parse().unwrap_or(0);
    }
    assert!(
        theirs.len() >= before.len() - 1,
        "zfs-fuse lists {theirs:?}"
    );
    for (n, want) in &theirs {
        if *n == name {
            continue; // the import itself writes to the MOS
        }
        assert_eq!(
            before.get(n),
            Some(want),
            "zfs-fuse and ozfs disagree on {n}: zfs-fuse says {want:?}, ozfs {:?}",
            before.get(n)
        );
    }
    // zfs-fuse promotes fs back (walking what ozfs's promote wrote).
    pool.zfs(&["promote", &fs]).unwrap();
    pool.export().unwrap();
    assert_zdb_clean(
        &pool,
        &pool.dev_dir(),
        &format!("{tag}: promoted back by zfs-fuse"),
    );
    oz_import_rw(&oz, &pool.dev_dir(), &name);
    let names = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert!(names.lines().any(|l| l == format!("{fs}@s1")), "{names}");
    phase(&format!("{tag}: zfs-fuse agrees"), t0);

    // Destroy the clone, then the middle snapshot, then the rest as a range.
    oz.ok(&["zfs", "destroy", &cl2]);
    oz.ok(&["zfs", "destroy", &format!("{fs}@s2")]);
    copy_of(&oz, &pool, &format!("{fs}@s1:/")).assert_same(&m1, "s1 after s2 went");
    copy_of(&oz, &pool, &format!("{fs}@third:/")).assert_same(&m3, "s3 after s2 went");
    assert_space_adds_up(&space(&oz, &name), "after destroying s2");
    oz.ok(&["zfs", "snapshot", &format!("{fs}@s4")]);
    oz.ok(&["zfs", "destroy", &format!("{fs}@s1%third")]);
    let names = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert_eq!(names.trim(), format!("{fs}@s4"), "after the range destroy");
    copy_of(&oz, &pool, &format!("{fs}@s4:/")).assert_same(&m3, "s4");
    oz.ok(&["zfs", "destroy", &format!("{fs}@s4")]);
    let sp = space(&oz, &name);
    assert_space_adds_up(&sp, "without snapshots");
    assert_eq!(
        sp[&fs][1], 0,
        "USEDSNAP after the last snapshot went: {sp:?}"
    );
    assert_eq!(
        sp[&fs][0], sp[&fs][4],
        "USED != REFER without snapshots: {sp:?}"
    );
    copy_of(&oz, &pool, &format!("{fs}:/")).assert_same(&m3, "head at the end");
    // rollback -r past a later snapshot destroys it.
    oz.ok(&["zfs", "snapshot", &format!("{fs}@r1")]);
    oz_rm(&oz, &format!("{fs}:/third"), true);
    oz.ok(&["zfs", "snapshot", &format!("{fs}@r2")]);
    oz_cp_in(&oz, &t2, &format!("{fs}:/again"));
    oz.ok(&["zfs", "rollback", "-r", &format!("{fs}@r1")]);
    copy_of(&oz, &pool, &format!("{fs}:/")).assert_same(&m3, "head after rollback -r");
    let names = oz.ok(&["zfs", "list", "-H", "-t", "snapshot", "-o", "name"]);
    assert_eq!(names.trim(), format!("{fs}@r1"), "after rollback -r");
    oz.ok(&["zfs", "destroy", &format!("{fs}@r1")]);
    assert_eq!(
        space(&oz, &name)[&fs][1],
        0,
        "USEDSNAP after rollback -r and destroy"
    );
    phase(&format!("{tag}: destroys"), t0);

    // zfs-fuse: clean, and it can destroy what ozfs made.
    oz.ok(&["zfs", "snapshot", &format!("{fs}@z1")]);
    oz_rm(&oz, &format!("{fs}:/third"), true);
    oz.ok(&["zfs", "snapshot", &format!("{fs}@z2")]);
    oz.ok(&["zpool", "scrub", "-w", &name]);
    oz_export(&oz, &name);
    assert_zdb_clean(&pool, &pool.dev_dir(), &format!("{tag}: at the end"));
    pool.import().unwrap();
    pool.zfs(&["destroy", &format!("{fs}@z1")]).unwrap();
    pool.export().unwrap();
    assert_zdb_clean(
        &pool,
        &pool.dev_dir(),
        &format!("{tag}: after zfs-fuse destroyed a snapshot ozfs made"),
    );
    phase(&format!("{tag}: done"), t0);
}
