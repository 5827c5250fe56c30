//! (c) Redundancy: reading with devices missing and with silent damage.
//!
//! Per layout, one pool (content, @s1, mutation, live) is exported, then:
//! 1. as many devices as the redundancy allows are moved away: ozfs must
//!    list the pool DEGRADED, import it and copy everything out identically;
//! 2. the devices are put back and as many devices as the redundancy
//!    allows get random 4-64 KiB regions overwritten with random bytes
//!    (inside the allocated part of the data area; for the mirror both
//!    sides, in regions far apart, since a reader that prefers the clean
//!    side would never notice damage on one side only).  zfs-fuse itself first
//!    scrubs a *copy* to prove the damage hit data and is recoverable; then
//!    ozfs must copy everything out identically and `ozfs zpool status`
//!    must show CKSUM errors on a damaged device and none on the others.

mod common;
use common::*;
use std::time::Instant;

/// Regions overwritten per damaged device.
const REGIONS_PER_DEVICE: usize = 24;

fn degraded_case(
    layout: Layout,
    ndev: usize,
    dev_mib: u64,
    missing: &[usize],
    damaged: &[usize],
    seed: u64,
) {
    // Damage may exceed the device redundancy only for mirrors, where the
    // regions are disjoint between sides (see below).
    assert!(missing.len() <= layout.redundancy(ndev));
    assert!(layout == Layout::Mirror || damaged.len() <= layout.redundancy(ndev));
    let tag = layout.short();
    let t0 = Instant::now();
    let mut pool = TestPool::create(layout, ndev, dev_mib * MIB).unwrap();
    pool.set("", "atime", "off").unwrap();
    let expected = standard_history(&pool, "", &Profile::moderate(seed), 1);
    pool.export().unwrap();
    phase(&format!("{tag}: zfs-fuse setup"), t0);

    // 1. Missing devices.
    for &i in missing {
        pool.move_aside(i).unwrap();
    }
    if !setup_only() {
        let t = Instant::now();
        let oz = ozfs();
        assert_listed(&oz, &pool.dev_dir(), pool.name(), "DEGRADED");
        import_and_check_names(&oz, &pool, &expected);
        verify_copyouts(&oz, &pool, &expected, &format!("{tag}-missing"));
        let st = oz.ok(&["zpool", "status", pool.name()]);
        assert!(
            st.contains("DEGRADED"),
            "status with missing devices:\n{st}"
        );
        oz.ok(&["zpool", "export", pool.name()]);
        phase(&format!("{tag}: ozfs with {} missing", missing.len()), t);
    }
    for &i in missing {
        pool.move_back(i).unwrap();
    }

    // 2. Random damage.
    let t = Instant::now();
    let mut all_regions = Vec::new();
    for (k, &i) in damaged.iter().enumerate() {
        // Mirror children have identical layouts: keep the sides' damage
        // apart (by more than a 128K block) so every block stays readable
        // on one side; whichever side a reader prefers, it meets damage.
        let (avoid, margin) = if layout == Layout::Mirror {
            (&all_regions[..], 256 * 1024)
        } else {
            (&[][..], 0)
        };
        let regs = damage::damage_random_avoiding(
            &pool.devs()[i],
            REGIONS_PER_DEVICE,
            seed * 100 + k as u64,
            avoid,
            margin,
        )
        .unwrap();
        eprintln!(
            "damaged d{i}: {} regions, e.g. {:?}",
            regs.len(),
            &regs[..3]
        );
        all_regions.extend(regs);
    }
    // Prove with zfs-fuse (on a copy) that the damage is real and repairable.
    let zstatus = zfs_fuse_scrub_copy(&mut pool);
    let zrows = parse_status(&zstatus);
    let zf_hits: u64 = damaged
        .iter()
        .filter_map(|&i| {
            status_row(
                &zrows,
                &pool.dir().join("work/scrubcopy").join(format!("d{i}")),
            )
        })
        .map(|r| r.cksum)
        .sum();
    assert!(
        zf_hits > 0 && !zstatus.contains("Permanent errors") && !zstatus.contains("UNAVAIL"),
        "harness: zfs-fuse's scrub of the damaged copy should find and repair checksum errors:\n{zstatus}"
    );
    phase(&format!("{tag}: damage + zfs-fuse scrub of a copy"), t);
    if setup_only() {
        return;
    }

    let t = Instant::now();
    let oz = ozfs();
    import_and_check_names(&oz, &pool, &expected);
    verify_copyouts(&oz, &pool, &expected, &format!("{tag}-damaged"));
    let st = oz.ok(&["zpool", "status", pool.name()]);
    let rows = parse_status(&st);
    assert!(
        st.lines()
            .any(|l| l.trim() == "state: ONLINE" || l.trim() == "state: DEGRADED"),
        "pool state after repairs should be ONLINE or DEGRADED:\n{st}"
    );
    let mut hits = 0;
    for (i, dev) in pool.devs().iter().enumerate() {
        let row = status_row(&rows, dev)
            .unwrap_or_else(|| panic!("status has no row for {}:\n{st}", dev.display()));
        if damaged.contains(&i) {
            hits += row.cksum;
        } else {
            assert_eq!(
                row.cksum, 0,
                "undamaged d{i} must have no CKSUM errors:\n{st}"
            );
        }
    }
    assert!(
        hits > 0,
        "a damaged device must show CKSUM errors after the copy-out:\n{st}"
    );
    phase(&format!("{tag}: ozfs with damage"), t);
}

#[test]
fn degraded_mirror() {
    // Both sides damaged, in disjoint regions.
    degraded_case(Layout::Mirror, 2, 128, &[0], &[0, 1], 71);
}

#[test]
fn degraded_raidz1() {
    degraded_case(Layout::Raidz1, 3, 128, &[1], &[2], 72);
}

#[test]
fn degraded_raidz2() {
    degraded_case(Layout::Raidz2, 5, 96, &[0, 3], &[1, 4], 73);
}

#[test]
fn degraded_raidz3() {
    degraded_case(Layout::Raidz3, 7, 96, &[1, 2, 5], &[0, 3, 6], 74);
}
