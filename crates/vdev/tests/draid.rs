//! Reads and writes of dRAID vdevs on simulated devices. Blocks are laid out by a
//! test-only writer that follows `DraidLayout::map` — parity over the full
//! group width, each column on the child the permutation names — and are
//! read back through the vdev tree: whole, with one child (or, with more
//! parity, `nparity` children) missing, unreadable or silently wrong, and
//! through a distributed spare in use. With more bad children than the
//! parity covers a read must fail, never return other data.

use ozfs_codec::draid::{DraidLayout, DraidMap};
use ozfs_codec::raidz::generate_parity;
use ozfs_format::label::VDEV_LABEL_START_SIZE;
use ozfs_format::nvlist::{NvList, NvValue};
use ozfs_vdev::sim::{Faults, SimDevice};
use ozfs_vdev::{BlockDevice, ReadCtx, Vdev, VdevKind, VdevState};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const TOP_GUID: u64 = 100;
const SPARE_GUID: u64 = 900;

/// A dRAID shape: (nparity, ndata, children, nspares, ngroups, ashift).
#[derive(Clone, Copy, Debug)]
struct Shape(u64, u64, u64, u64, u64, u32);

/// The corpus pool's shape, one group per slice.
const CORPUS: Shape = Shape(1, 3, 5, 1, 1, 12);
/// Double parity, groups of 6 on 7 disks (they wrap), 2 spares.
const WRAPPING: Shape = Shape(2, 4, 9, 2, 7, 9);
/// Triple parity, 2 data columns, groups of 5 on 6 disks.
const TRIPLE: Shape = Shape(3, 2, 7, 1, 6, 9);

impl Shape {
    fn layout(self) -> DraidLayout {
        DraidLayout::new(self.1, self.0, self.3, self.2, self.4, self.5).unwrap()
    }
}

fn leaf(i: u64) -> NvList {
    let mut k = NvList::new();
    k.set("type", NvValue::String("file".into()));
    k.set("id", NvValue::Uint64(i));
    k.set("guid", NvValue::Uint64(i + 1));
    k.set("path", NvValue::String(format!("d{i}")));
    k
}

/// The `dspare` config of spare `id` in use.
fn dspare(id: u64, nparity: u64) -> NvList {
    let mut s = NvList::new();
    s.set("type", NvValue::String("dspare".into()));
    s.set("id", NvValue::Uint64(1));
    s.set("guid", NvValue::Uint64(SPARE_GUID + id));
    s.set("path", NvValue::String(format!("draid{nparity}-0-{id}")));
    s.set("top_guid", NvValue::Uint64(TOP_GUID));
    s.set("spareid", NvValue::Uint64(id));
    s.set("is_spare", NvValue::Uint64(1));
    s
}

/// The config of a dRAID of `shape`; child `spared` (if any) is a `spare`
/// vdev over its leaf and distributed spare 0.
fn config(shape: Shape, spared: Option<u64>) -> NvList {
    let Shape(p, d, c, s, g, ashift) = shape;
    let mut nv = NvList::new();
    nv.set("type", NvValue::String("draid".into()));
    nv.set("id", NvValue::Uint64(0));
    nv.set("guid", NvValue::Uint64(TOP_GUID));
    nv.set("nparity", NvValue::Uint64(p));
    nv.set("draid_ndata", NvValue::Uint64(d));
    nv.set("draid_nspares", NvValue::Uint64(s));
    nv.set("draid_ngroups", NvValue::Uint64(g));
    nv.set("ashift", NvValue::Uint64(u64::from(ashift)));
    let kids = (0..c)
        .map(|i| {
            if Some(i) != spared {
                return leaf(i);
            }
            let mut sp = NvList::new();
            sp.set("type", NvValue::String("spare".into()));
            sp.set("id", NvValue::Uint64(i));
            sp.set("guid", NvValue::Uint64(800));
            let mut first = leaf(i);
            first.set("id", NvValue::Uint64(0));
            sp.set("children", NvValue::NvListArray(vec![first, dspare(0, p)]));
            sp
        })
        .collect();
    nv.set("children", NvValue::NvListArray(kids));
    nv
}

/// Build the tree; leaves whose guid is in `missing` are not found.
fn build(nv: &NvList, devs: &[Arc<SimDevice>], missing: &[u64]) -> ozfs_format::Result<Vdev> {
    Vdev::from_config(nv, &mut |guid, path| {
        if missing.contains(&(guid - 1)) {
            return None;
        }
        let d: Arc<dyn BlockDevice> = devs.get(guid as usize - 1)?.clone();
        Some((d, path.unwrap_or("?").to_string()))
    })
}

fn devices(tag: &str, n: u64) -> Vec<Arc<SimDevice>> {
    (0..n)
        .map(|i| SimDevice::new(&format!("draid-{tag}-{i}"), 256 * MIB, i))
        .collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed ^ (i >> 9) as u8)
        .collect()
}

/// Test-only writer: the columns of `data` at `offset`, parity computed
/// over the full group width, each written where the map puts it — or, for
/// a column on child `spared`, where distributed spare 0 keeps it.
fn write(
    l: &DraidLayout,
    devs: &[Arc<SimDevice>],
    offset: u64,
    data: &[u8],
    spared: Option<usize>,
) {
    let map = l.map(offset, data.len() as u64).unwrap();
    for row in &map.rows {
        let np = row.map.nparity;
        let mut at = row.data_start as usize;
        let mut cols: Vec<Vec<u8>> = Vec::new();
        for (c, col) in row.map.cols.iter().enumerate() {
            let mut v = vec![0u8; col.size as usize];
            if c >= np {
                let n = v.len().min(data.len().saturating_sub(at));
                if n > 0 {
                    v[..n].copy_from_slice(&data[at..at + n]);
                }
                at += v.len();
            }
            cols.push(v);
        }
        generate_parity(np, &mut cols);
        for (col, bytes) in row.map.cols.iter().zip(&cols) {
            if col.size == 0 {
                continue;
            }
            let dev = if Some(col.dev) == spared {
                l.spare_child(0, col.offset).unwrap()
            } else {
                col.dev
            };
            devs[dev]
                .write_at(bytes, col.offset + VDEV_LABEL_START_SIZE)
                .unwrap();
        }
    }
}

/// Blocks of every kind for layout `l`: one sector, partial stripes, a
/// 128 KiB record, one split over the end of group 0 and the start of
/// group 1, one in the second slice (the permutation rotated) and one in
/// a later group.
fn blocks(l: &DraidLayout) -> Vec<(u64, Vec<u8>)> {
    let unit = 1u64 << l.ashift;
    let stripe = l.width() as u64 * unit;
    let gs = l.group_size();
    let ss = gs * l.ngroups;
    vec![
        (0, pattern(512, 1)),
        (3 * stripe, pattern(7 * unit as usize + 512, 2)),
        (40 * stripe, pattern(128 * 1024, 3)),
        (gs - 2 * stripe, pattern(5 * l.ndata * unit as usize, 4)),
        (ss + 5 * stripe, pattern(9 * unit as usize, 5)),
        (2 * gs + 11 * stripe, pattern(3 * unit as usize, 6)),
    ]
}

/// Every block of `shape` written (child `spared`'s columns on the spare).
fn populated(tag: &str, shape: Shape, spared: Option<usize>) -> Vec<Arc<SimDevice>> {
    let l = shape.layout();
    let devs = devices(tag, shape.2);
    for (off, data) in blocks(&l) {
        write(&l, &devs, off, &data, spared);
    }
    devs
}

fn read(v: &Vdev, off: u64, data: &[u8]) -> ozfs_format::Result<Vec<u8>> {
    let ok = |b: &[u8]| b == data;
    v.read_block_with(off, data.len() as u64, &ok, &ReadCtx::default())
}

/// Every (stripe, column) of a block's map on child `dev`: (offset, size).
fn ranges_on(map: &DraidMap, dev: usize) -> Vec<(u64, u64)> {
    map.rows
        .iter()
        .flat_map(|r| r.map.cols.iter())
        .filter(|c| c.dev == dev && c.size > 0)
        .map(|c| (c.offset + VDEV_LABEL_START_SIZE, c.size))
        .collect()
}

/// Overwrite every column child `dev` holds, in every block, with noise.
fn scramble(l: &DraidLayout, devs: &[Arc<SimDevice>], dev: usize) {
    for (off, data) in blocks(l) {
        let map = l.map(off, data.len() as u64).unwrap();
        for (at, size) in ranges_on(&map, dev) {
            let noise: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8 | 1).collect();
            devs[dev].write_at(&noise, at).unwrap();
        }
    }
}

/// Whether child `dev` holds a data column of one of the blocks (a wrong
/// parity column goes unnoticed while the data verifies).
fn holds_data(l: &DraidLayout, dev: usize) -> bool {
    blocks(l).iter().any(|(off, data)| {
        let map = l.map(*off, data.len() as u64).unwrap();
        map.rows.iter().any(|r| {
            r.map.cols[l.nparity..]
                .iter()
                .any(|c| c.dev == dev && c.size > 0)
        })
    })
}

/// Make every read of a column child `dev` holds fail.
fn fail_reads(l: &DraidLayout, devs: &[Arc<SimDevice>], dev: usize) {
    let mut ranges = Vec::new();
    for (off, data) in blocks(l) {
        let map = l.map(off, data.len() as u64).unwrap();
        ranges.extend(ranges_on(&map, dev).into_iter().map(|(a, s)| a..a + s));
    }
    devs[dev].set_faults(Faults {
        read_error_ranges: ranges,
        ..Faults::default()
    });
}

/// All `k`-subsets of `0..n`.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for first in 0..n {
        for mut rest in subsets(n, k - 1) {
            if rest.iter().all(|&r| r > first) {
                rest.insert(0, first);
                out.push(rest);
            }
        }
    }
    out
}

#[test]
fn blocks_read_back_exactly() {
    for (tag, shape) in [("c", CORPUS), ("w", WRAPPING), ("t", TRIPLE)] {
        let l = shape.layout();
        let devs = populated(&format!("whole-{tag}"), shape, None);
        let v = build(&config(shape, None), &devs, &[]).unwrap();
        assert_eq!(v.state(), VdevState::Online);
        assert!(matches!(v.kind, VdevKind::Draid { .. }));
        for (off, data) in blocks(&l) {
            assert_eq!(read(&v, off, &data).unwrap(), data, "{shape:?} at {off:#x}");
        }
        // The split block really is two stripes.
        let (off, data) = &blocks(&l)[3];
        assert_eq!(l.map(*off, data.len() as u64).unwrap().rows.len(), 2);
        for c in &v.children {
            assert_eq!(c.stats.get(), (0, 0, 0));
        }
    }
}

#[test]
fn names_and_health() {
    let devs = populated("names", CORPUS, None);
    let v = build(&config(CORPUS, None), &devs, &[]).unwrap();
    assert_eq!(v.display_name(), "draid1:3d:5c:1s-0");
    assert_eq!(v.parity_count(), 1);
    let v = build(&config(CORPUS, None), &devs, &[2]).unwrap();
    assert_eq!(v.state(), VdevState::Degraded);
    let v = build(&config(CORPUS, None), &devs, &[2, 4]).unwrap();
    assert_eq!(v.state(), VdevState::Unavail);
    let v = build(&config(CORPUS, Some(3)), &devs, &[3]).unwrap();
    assert_eq!(v.children[3].children[1].display_name(), "draid1-0-0");
    assert!(matches!(
        v.children[3].children[1].kind,
        VdevKind::DraidSpare { spare: 0 }
    ));
}

/// Within the parity: every set of `nparity` children in turn made bad —
/// silently wrong, unreadable or absent, mixed — and every block still
/// reads exactly; a child proven wrong is charged, no other.
#[test]
fn bad_children_within_parity_are_read_through() {
    for (tag, shape) in [("c", CORPUS), ("w", WRAPPING), ("t", TRIPLE)] {
        let l = shape.layout();
        let n = shape.2 as usize;
        for bad in subsets(n, l.nparity) {
            // The first bad child is scrambled, the second unreadable, the
            // third absent.
            let devs = populated(&format!("par-{tag}-{bad:?}"), shape, None);
            let mut missing = Vec::new();
            for (i, &b) in bad.iter().enumerate() {
                match i {
                    0 => scramble(&l, &devs, b),
                    1 => fail_reads(&l, &devs, b),
                    _ => missing.push(b as u64),
                }
            }
            let v = build(&config(shape, None), &devs, &missing).unwrap();
            for (off, data) in blocks(&l) {
                let got = read(&v, off, &data);
                assert_eq!(
                    got.as_deref().ok(),
                    Some(&data[..]),
                    "{shape:?} bad {bad:?} block {off:#x}: {got:?}"
                );
            }
            for (i, c) in v.children.iter().enumerate() {
                let ck = c.stats.cksum_errors.load(Ordering::Relaxed);
                if i == bad[0] {
                    // Charged when its data was needed; a wrong parity
                    // column is found only when the parity was used.
                    assert!(
                        ck > 0 || !holds_data(&l, i),
                        "{shape:?}: child {i} not charged"
                    );
                } else {
                    assert_eq!(ck, 0, "{shape:?} bad {bad:?}: child {i} charged");
                }
            }
        }
    }
}

/// One bad child more than the parity covers: every block with a column
/// on each of them fails (never another block's or invented data).
#[test]
fn more_bad_children_than_parity_is_an_error() {
    for (tag, shape) in [("c", CORPUS), ("w", WRAPPING), ("t", TRIPLE)] {
        let l = shape.layout();
        for (off, data) in blocks(&l) {
            let map = l.map(off, data.len() as u64).unwrap();
            let bad: Vec<usize> = map.rows[0]
                .map
                .cols
                .iter()
                .filter(|c| c.size > 0)
                .map(|c| c.dev)
                .take(l.nparity + 1)
                .collect();
            assert_eq!(bad.len(), l.nparity + 1);
            // Silently wrong.
            let devs = populated(&format!("over-{tag}-{off:x}"), shape, None);
            for &b in &bad {
                scramble(&l, &devs, b);
            }
            let v = build(&config(shape, None), &devs, &[]).unwrap();
            assert!(
                read(&v, off, &data).is_err(),
                "{shape:?} {off:#x} scrambled"
            );
            assert!(v.stats.cksum_errors.load(Ordering::Relaxed) > 0);
            // Absent.
            let devs = populated(&format!("gone-{tag}-{off:x}"), shape, None);
            let gone: Vec<u64> = bad.iter().map(|&b| b as u64).collect();
            let v = build(&config(shape, None), &devs, &gone).unwrap();
            assert!(read(&v, off, &data).is_err(), "{shape:?} {off:#x} absent");
        }
    }
}

/// A distributed spare in use: child `k` replaced by a `spare` vdev over
/// its (gone) leaf and spare 0, whose columns were rebuilt where the
/// permutation puts the spare. Every block reads exactly, from the
/// spare's space (nothing is found wrong), and the parity still covers one
/// more child scrambled.
#[test]
fn a_distributed_spare_in_use_is_read_through_the_permutation() {
    for (tag, shape) in [("c", CORPUS), ("w", WRAPPING)] {
        let l = shape.layout();
        for k in 0..shape.2 as usize {
            let devs = populated(&format!("spare-{tag}-{k}"), shape, Some(k));
            let v = build(&config(shape, Some(k as u64)), &devs, &[k as u64]).unwrap();
            for (off, data) in blocks(&l) {
                assert_eq!(
                    read(&v, off, &data).ok().as_deref(),
                    Some(&data[..]),
                    "{shape:?} spare for {k}, block {off:#x}"
                );
            }
            // Read from the spare's space, not rebuilt from parity: nothing
            // was found wrong.
            for c in &v.children {
                assert_eq!(c.stats.cksum_errors.load(Ordering::Relaxed), 0);
            }
            // So the parity is still free to rebuild another child.
            let other = (k + 1) % shape.2 as usize;
            scramble(&l, &devs, other);
            for (off, data) in blocks(&l) {
                assert_eq!(
                    read(&v, off, &data).ok().as_deref(),
                    Some(&data[..]),
                    "{shape:?} spare for {k}, {other} scrambled, block {off:#x}"
                );
            }
        }
    }
}

#[test]
fn bad_configs_are_refused_naming_what() {
    let devs = devices("cfg", 5);
    let err = |nv: NvList| match build(&nv, &devs, &[]) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let mut nv = config(CORPUS, None);
    nv.remove("draid_ndata");
    assert!(err(nv).contains("draid_ndata"));
    let mut nv = config(CORPUS, None);
    nv.set("nparity", NvValue::Uint64(0));
    assert!(err(nv).contains("nparity"));
    let mut nv = config(CORPUS, None);
    nv.set("draid_nspares", NvValue::Uint64(2));
    assert!(err(nv).contains("draid_nspares"));
    let mut nv = config(CORPUS, None);
    nv.set("draid_ngroups", NvValue::Uint64(0));
    assert!(err(nv).contains("draid_ngroups"));
    // A distributed spare the vdev does not have, or another vdev's.
    let mut nv = config(CORPUS, Some(2));
    let mut kids = nv.get_nvlist_array("children").unwrap().to_vec();
    let mut sp = kids[2].clone();
    let mut sk = sp.get_nvlist_array("children").unwrap().to_vec();
    sk[1].set("spareid", NvValue::Uint64(1));
    sp.set("children", NvValue::NvListArray(sk.clone()));
    kids[2] = sp.clone();
    nv.set("children", NvValue::NvListArray(kids.clone()));
    assert!(err(nv.clone()).contains("distributed spare"));
    sk[1].set("spareid", NvValue::Uint64(0));
    sk[1].set("top_guid", NvValue::Uint64(TOP_GUID + 1));
    sp.set("children", NvValue::NvListArray(sk));
    kids[2] = sp;
    nv.set("children", NvValue::NvListArray(kids));
    assert!(err(nv).contains("distributed spare"));
}

/// Every column range of every block of `l` on each child, full length
/// (the parity's: skip sectors included): (child, device offset, length).
fn full_columns(l: &DraidLayout) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    for (off, data) in blocks(l) {
        let map = l.map(off, data.len() as u64).unwrap();
        for row in &map.rows {
            let len = row.map.cols[0].size;
            for c in &row.map.cols {
                out.push((c.dev, c.offset + VDEV_LABEL_START_SIZE, len));
            }
        }
    }
    out
}

fn bytes_at(dev: &SimDevice, at: u64, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    dev.read_at(&mut b, at).unwrap();
    b
}

/// The vdev's own writer (`Vdev::write_block`) puts every column where the
/// test-only writer above does, with the same parity — the parity the
/// reads of blocks OpenZFS wrote rebuild from — and writes the rest of
/// each stripe as zeros: the skip sectors of short columns and the empty
/// columns, over whatever the devices held before (here noise). Through a
/// distributed spare in use too.
#[test]
fn the_vdev_writes_whole_stripes_as_the_layout_places_them() {
    for (tag, shape, spared) in [
        ("c", CORPUS, None),
        ("w", WRAPPING, None),
        ("t", TRIPLE, None),
        ("cs", CORPUS, Some(2usize)),
        ("ws", WRAPPING, Some(4usize)),
    ] {
        let l = shape.layout();
        let want = populated(&format!("ref-{tag}"), shape, spared);
        let devs = devices(&format!("own-{tag}"), shape.2);
        // Noise where the stripes go: skip sectors must be written.
        for (dev, at, len) in full_columns(&l) {
            let noise: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8 | 0x80).collect();
            for d in [dev, l.spare_child(0, at - VDEV_LABEL_START_SIZE).unwrap()] {
                devs[d].write_at(&noise, at).unwrap();
            }
        }
        let missing: Vec<u64> = spared.iter().map(|&k| k as u64).collect();
        let v = build(&config(shape, spared.map(|k| k as u64)), &devs, &missing).unwrap();
        for (off, data) in blocks(&l) {
            v.write_block(off, &data)
                .unwrap_or_else(|e| panic!("{shape:?} write at {off:#x}: {e}"));
        }
        for (off, data) in blocks(&l) {
            let map = l.map(off, data.len() as u64).unwrap();
            for row in &map.rows {
                let len = row.map.cols[0].size;
                for c in &row.map.cols {
                    let dev = if Some(c.dev) == spared {
                        l.spare_child(0, c.offset).unwrap()
                    } else {
                        c.dev
                    };
                    let at = c.offset + VDEV_LABEL_START_SIZE;
                    // The test-only writer leaves skip sectors as the
                    // fresh device had them: zeros.
                    assert_eq!(
                        bytes_at(&devs[dev], at, len),
                        bytes_at(&want[dev], at, len),
                        "{shape:?} block {off:#x}: column on child {dev} at {at:#x}"
                    );
                }
            }
            assert_eq!(read(&v, off, &data).unwrap(), data);
        }
    }
}

/// A write with as many children gone as the parity covers succeeds and
/// reads back (rebuilt); with one more it fails, naming the cause.
#[test]
fn degraded_writes_succeed_within_the_parity_only() {
    for (tag, shape) in [("c", CORPUS), ("t", TRIPLE)] {
        let l = shape.layout();
        let np = shape.0 as usize;
        let devs = devices(&format!("deg-{tag}"), shape.2);
        let gone: Vec<u64> = (0..np as u64).collect();
        let v = build(&config(shape, None), &devs, &gone).unwrap();
        for (off, data) in blocks(&l) {
            v.write_block(off, &data).unwrap();
            assert_eq!(read(&v, off, &data).unwrap(), data, "{shape:?} {off:#x}");
        }
        // One more than the parity, all holding columns of this block.
        let (off, data) = &blocks(&l)[2];
        let map = l.map(*off, data.len() as u64).unwrap();
        let gone: Vec<u64> = map.rows[0].map.cols[..=np]
            .iter()
            .map(|c| c.dev as u64)
            .collect();
        let v = build(&config(shape, None), &devs, &gone).unwrap();
        assert!(v.write_block(*off, data).is_err(), "{shape:?}");
    }
}
