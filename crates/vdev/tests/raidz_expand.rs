//! Reads of an expanded RAID-Z vdev: a raidz1 of 3 children widened to 4
//! (config `raidz_expand_txgs`), with blocks written 3 wide before the
//! expansion — placed as OpenZFS's reflow leaves them: address-space index
//! `a` of the old layout (child `a mod 3`, sector `a / 3`) moved to child
//! `a mod 4`, sector `a / 4` — and 4 wide after it. Each block is read
//! with the width of its birth txg, through damage within the parity, and
//! an expansion record that cannot be right is refused, naming it.

use ozfs_codec::raidz::{generate_parity, RaidzMap};
use ozfs_format::label::VDEV_LABEL_START_SIZE;
use ozfs_format::nvlist::{NvList, NvValue};
use ozfs_vdev::sim::SimDevice;
use ozfs_vdev::{BlockDevice, ReadCtx, Vdev};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const ASHIFT: u32 = 9;
const U: u64 = 1 << ASHIFT;
/// The txg at which the expansion completed (blocks born here on are 4 wide).
const EXPANDED: u64 = 40;

fn config(nchild: usize, txgs: Option<Vec<u64>>, expanding: bool) -> NvList {
    let mut nv = NvList::new();
    nv.set("type", NvValue::String("raidz".into()));
    nv.set("id", NvValue::Uint64(0));
    nv.set("guid", NvValue::Uint64(100));
    nv.set("nparity", NvValue::Uint64(1));
    nv.set("ashift", NvValue::Uint64(u64::from(ASHIFT)));
    if let Some(t) = txgs {
        nv.set("raidz_expand_txgs", NvValue::Uint64Array(t));
    }
    if expanding {
        nv.set("raidz_expanding", NvValue::Boolean);
    }
    let kids = (0..nchild)
        .map(|i| {
            let mut k = NvList::new();
            k.set("type", NvValue::String("file".into()));
            k.set("id", NvValue::Uint64(i as u64));
            k.set("guid", NvValue::Uint64(i as u64 + 1));
            k.set("path", NvValue::String(format!("d{i}")));
            k
        })
        .collect();
    nv.set("children", NvValue::NvListArray(kids));
    nv
}

fn build(nv: &NvList, devs: &[Arc<SimDevice>], missing: Option<u64>) -> ozfs_format::Result<Vdev> {
    Vdev::from_config(nv, &mut |guid, path| {
        if Some(guid) == missing {
            return None;
        }
        let d: Arc<dyn BlockDevice> = devs.get(guid as usize - 1)?.clone();
        Some((d, path.unwrap_or("?").to_string()))
    })
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect()
}

/// The columns of `data` written `width` wide at `offset`, parity included.
fn columns(offset: u64, data: &[u8], width: usize) -> (RaidzMap, Vec<Vec<u8>>) {
    let map = RaidzMap::new(offset, data.len() as u64, ASHIFT, width, 1);
    let mut cols: Vec<Vec<u8>> = Vec::new();
    let mut at = 0usize;
    for (c, col) in map.cols.iter().enumerate() {
        if c < 1 {
            cols.push(vec![0u8; col.size as usize]);
        } else {
            let mut v = vec![0u8; col.size as usize];
            let n = (col.size as usize).min(data.len().saturating_sub(at));
            v[..n].copy_from_slice(&data[at..at + n]);
            at += col.size as usize;
            cols.push(v);
        }
    }
    generate_parity(1, &mut cols);
    (map, cols)
}

/// Write a block born before the expansion: 3 wide, then reflowed onto 4.
fn write_reflowed(devs: &[Arc<SimDevice>], offset: u64, data: &[u8]) {
    let (map, cols) = columns(offset, data, 3);
    for (col, bytes) in map.cols.iter().zip(&cols) {
        for (i, sector) in bytes.chunks_exact(U as usize).enumerate() {
            let idx = ((col.offset >> ASHIFT) + i as u64) * 3 + col.dev as u64;
            let (dev, off) = ((idx % 4) as usize, (idx / 4) << ASHIFT);
            devs[dev]
                .write_at(sector, off + VDEV_LABEL_START_SIZE)
                .unwrap();
        }
    }
}

/// Write a block born after the expansion: 4 wide, columns contiguous.
fn write_new(devs: &[Arc<SimDevice>], offset: u64, data: &[u8]) {
    let (map, cols) = columns(offset, data, 4);
    for (col, bytes) in map.cols.iter().zip(&cols) {
        devs[col.dev]
            .write_at(bytes, col.offset + VDEV_LABEL_START_SIZE)
            .unwrap();
    }
}

fn devices(tag: &str) -> Vec<Arc<SimDevice>> {
    (0..4)
        .map(|i| SimDevice::new(&format!("expand-{tag}-{i}"), 8 << 20, i))
        .collect()
}

/// (offset, data) of blocks born before the expansion; one in an odd MiB
/// (single-parity column swap), partial rows, a single sector.
fn old_blocks() -> Vec<(u64, Vec<u8>)> {
    vec![
        (7 * U, pattern(20 * 512, 1)),
        ((1 << 20) + 5 * U, pattern(11 * 512, 2)),
        (90 * U, pattern(512, 3)),
        (200 * U, pattern(128 * 1024, 4)),
    ]
}

#[test]
fn blocks_read_with_the_width_of_their_birth() {
    let devs = devices("birth");
    for (off, data) in old_blocks() {
        write_reflowed(&devs, off, &data);
    }
    let new_off = 2 << 20;
    let new_data = pattern(33 * 512, 9);
    write_new(&devs, new_off, &new_data);
    let v = build(&config(4, Some(vec![EXPANDED]), false), &devs, None).unwrap();
    assert_eq!(v.raidz_width(EXPANDED - 1), 3);
    assert_eq!(v.raidz_width(EXPANDED), 4);
    assert_eq!(v.raidz_width(u64::MAX), 4);
    let ctx = ReadCtx::default();
    for (off, data) in old_blocks() {
        let ok = |b: &[u8]| b == &data[..];
        let got = v
            .read_block_born(off, data.len() as u64, EXPANDED - 1, &ok, &ctx)
            .unwrap();
        assert_eq!(got, data, "old block at {off:#x}");
        // Read with the wrong (new) width, a block of more than one row
        // does not verify (a one-row block lies the same either way).
        if data.len() > 2 * U as usize {
            assert!(v
                .read_block_born(off, data.len() as u64, EXPANDED, &ok, &ctx)
                .is_err());
        }
    }
    let ok = |b: &[u8]| b == &new_data[..];
    assert_eq!(
        v.read_block_born(new_off, new_data.len() as u64, EXPANDED + 5, &ok, &ctx)
            .unwrap(),
        new_data
    );
}

#[test]
fn damage_within_parity_is_read_through() {
    // Each child in turn silently zeroed over the old blocks, then missing.
    for bad in 0..4u64 {
        let devs = devices(&format!("damage{bad}"));
        for (off, data) in old_blocks() {
            write_reflowed(&devs, off, &data);
        }
        devs[bad as usize]
            .write_at(&vec![0u8; 1 << 20], VDEV_LABEL_START_SIZE)
            .unwrap();
        devs[bad as usize]
            .write_at(&vec![0u8; 1 << 20], VDEV_LABEL_START_SIZE + (1 << 20) / 4)
            .unwrap();
        let v = build(&config(4, Some(vec![EXPANDED]), false), &devs, None).unwrap();
        let ctx = ReadCtx::default();
        for (off, data) in old_blocks() {
            let ok = |b: &[u8]| b == &data[..];
            let got = v.read_block_born(off, data.len() as u64, 1, &ok, &ctx);
            assert_eq!(got.unwrap(), data, "child {bad} zeroed, block {off:#x}");
        }
        assert!(
            v.children[bad as usize]
                .stats
                .cksum_errors
                .load(Ordering::Relaxed)
                > 0
        );
        for (i, c) in v.children.iter().enumerate() {
            if i as u64 != bad {
                assert_eq!(c.stats.cksum_errors.load(Ordering::Relaxed), 0, "child {i}");
            }
        }
        // The same child absent.
        let devs = devices(&format!("missing{bad}"));
        for (off, data) in old_blocks() {
            write_reflowed(&devs, off, &data);
        }
        let v = build(
            &config(4, Some(vec![EXPANDED]), false),
            &devs,
            Some(bad + 1),
        )
        .unwrap();
        for (off, data) in old_blocks() {
            let ok = |b: &[u8]| b == &data[..];
            let got = v.read_block_born(off, data.len() as u64, 1, &ok, &ctx);
            assert_eq!(got.unwrap(), data, "child {bad} missing, block {off:#x}");
        }
    }
}

#[test]
fn two_bad_children_are_beyond_single_parity() {
    let devs = devices("two");
    let (off, data) = (200 * U, pattern(128 * 1024, 4));
    write_reflowed(&devs, off, &data);
    for d in [0, 2] {
        devs[d]
            .write_at(&vec![0u8; 1 << 20], VDEV_LABEL_START_SIZE)
            .unwrap();
    }
    let v = build(&config(4, Some(vec![EXPANDED]), false), &devs, None).unwrap();
    let ok = |b: &[u8]| b == &data[..];
    assert!(v
        .read_block_born(off, data.len() as u64, 1, &ok, &ReadCtx::default())
        .is_err());
}

#[test]
fn impossible_expansion_records_are_refused() {
    let devs = devices("cfg");
    let err = |nv: NvList| match build(&nv, &devs, None) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let e = err(config(4, Some(vec![50, 40]), false));
    assert!(
        e.contains("raidz_expand_txgs") && e.contains("out of order"),
        "{e}"
    );
    let e = err(config(4, Some(vec![40, 40]), false));
    assert!(e.contains("out of order"), "{e}");
    // 4 children, 3 expansions: the original raidz1 would have had 1 child.
    let e = err(config(4, Some(vec![10, 20, 30]), false));
    assert!(
        e.contains("raidz_expand_txgs") && e.contains("3 expansions"),
        "{e}"
    );
    let e = err(config(4, Some(vec![40]), true));
    assert!(e.contains("raidz_expanding"), "{e}");
    let mut nv = config(4, None, false);
    nv.set("raidz_expand_txgs", NvValue::Uint64(40));
    let e = err(nv);
    assert!(e.contains("raidz_expand_txgs"), "{e}");
    // Two expansions (2 → 3 → 4 children): widths 2, 3, 4 by birth.
    let v = build(&config(4, Some(vec![10, 20]), false), &devs, None).unwrap();
    assert_eq!(
        [9, 10, 19, 20, 1000].map(|t| v.raidz_width(t)),
        [2, 3, 3, 4, 4]
    );
}
