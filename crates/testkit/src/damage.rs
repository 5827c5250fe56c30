//! Damaging device files on purpose: random overwrites, zeroed labels,
//! corrupted uberblocks, truncation, garbage devices.
//!
//! ZFS device layout reminder: four 256 KiB labels, L0 and L1 at the start,
//! L2 and L3 in the last 512 KiB of the device (the device size rounded down
//! to 256 KiB); each label holds the nvlist config at 16K..128K and the
//! uberblock ring at 128K..256K (slots of `max(1K, 2^ashift)` bytes).  The
//! allocatable area starts at 4 MiB (after the 3.5 MiB boot block).

use crate::rng::XorShift;
use crate::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Size of one vdev label.
pub const LABEL_SIZE: u64 = 256 * 1024;
/// Offset of the uberblock ring inside a label.
pub const UB_RING_OFFSET: u64 = 128 * 1024;
/// Size of the uberblock ring.
pub const UB_RING_SIZE: u64 = 128 * 1024;
/// Uberblock magic.
pub const UB_MAGIC: u64 = 0x00ba_b10c;
/// Start of the allocatable area (labels L0, L1 + boot block).
pub const DATA_START: u64 = 4 * 1024 * 1024;
/// Bytes at the end taken by labels L2, L3.
pub const DATA_END_RESERVE: u64 = 512 * 1024;

fn open_rw(p: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .map_err(|e| Error(format!("open {}: {e}", p.display())))
}

fn file_size(p: &Path) -> Result<u64> {
    Ok(fs::metadata(p)
        .map_err(|e| Error(format!("{}: {e}", p.display())))?
        .len())
}

/// Byte offsets of the four labels of a device of `size` bytes.
pub fn label_offsets(size: u64) -> [u64; 4] {
    let psize = size / LABEL_SIZE * LABEL_SIZE;
    [0, LABEL_SIZE, psize - 2 * LABEL_SIZE, psize - LABEL_SIZE]
}

/// Writes `data` at `off`.
pub fn write_at(p: &Path, off: u64, data: &[u8]) -> Result<()> {
    let mut f = open_rw(p)?;
    f.seek(SeekFrom::Start(off))?;
    f.write_all(data)
        .map_err(|e| Error(format!("write {}: {e}", p.display())))?;
    Ok(())
}

/// Reads `len` bytes at `off`.
pub fn read_at(p: &Path, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut f = File::open(p).map_err(|e| Error(format!("open {}: {e}", p.display())))?;
    f.seek(SeekFrom::Start(off))?;
    let mut v = vec![0u8; len];
    f.read_exact(&mut v)
        .map_err(|e| Error(format!("read {}: {e}", p.display())))?;
    Ok(v)
}

/// Data extents of a sparse file (via SEEK_DATA/SEEK_HOLE), as (start, end).
pub fn data_extents(p: &Path) -> Result<Vec<(u64, u64)>> {
    let f = File::open(p).map_err(|e| Error(format!("open {}: {e}", p.display())))?;
    let size = f.metadata()?.len() as i64;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos: i64 = 0;
    while pos < size {
        // SAFETY: lseek on an owned fd.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no more data
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let hole = if hole < 0 { size } else { hole };
        out.push((data as u64, hole as u64));
        pos = hole;
    }
    Ok(out)
}

/// One overwritten region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte offset in the device file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Overwrites `count` random regions of 4-64 KiB (4 KiB aligned) with
/// random bytes, inside the data area (`DATA_START .. size -
/// DATA_END_RESERVE`) and — so that the damage hits written blocks, not
/// free space — inside the data extents of the sparse device file when it
/// has any there.  Returns the regions.
pub fn damage_random(dev: &Path, count: usize, seed: u64) -> Result<Vec<Region>> {
    damage_random_avoiding(dev, count, seed, &[], 0)
}

/// [`damage_random`], but no region comes within `margin` bytes of any
/// region in `avoid` (e.g. the regions damaged on the other side of a
/// mirror: with a margin of at least the largest block size, no block is
/// damaged on both sides).
pub fn damage_random_avoiding(
    dev: &Path,
    count: usize,
    seed: u64,
    avoid: &[Region],
    margin: u64,
) -> Result<Vec<Region>> {
    let size = file_size(dev)?;
    let (lo, hi) = (DATA_START, size.saturating_sub(DATA_END_RESERVE));
    if hi <= lo + 64 * 1024 {
        return Err(Error(format!("{}: too small to damage", dev.display())));
    }
    let mut ext: Vec<(u64, u64)> = data_extents(dev)?
        .into_iter()
        .map(|(a, b)| (a.max(lo), b.min(hi)))
        .filter(|(a, b)| b > a && b - a >= 4096)
        .collect();
    if ext.is_empty() {
        ext.push((lo, hi));
    }
    let total: u64 = ext.iter().map(|(a, b)| b - a).sum();
    let mut r = XorShift::new(seed);
    let mut regions = Vec::new();
    let mut f = open_rw(dev)?;
    let mut attempts = 0;
    while regions.len() < count {
        attempts += 1;
        if attempts > count * 1000 {
            return Err(Error(format!(
                "{}: cannot place {count} damage regions away from {} others",
                dev.display(),
                avoid.len()
            )));
        }
        // Pick a point uniformly over the extents, then a length.
        let mut x = r.range(0, total);
        let (a, b) = *ext
            .iter()
            .find(|(a, b)| {
                if x < b - a {
                    true
                } else {
                    x -= b - a;
                    false
                }
            })
            .expect("point inside extents");
        let off = ((a + x) & !4095).max(a & !4095).max(lo);
        let len = (r.range(1, 17) * 4096)
            .min(hi - off)
            .min(b.max(off + 4096) - off);
        let clash = avoid
            .iter()
            .any(|a| off < a.offset + a.len + margin && a.offset < off + len + margin);
        if clash {
            continue;
        }
        let data = r.bytes(len as usize);
        f.seek(SeekFrom::Start(off))?;
        f.write_all(&data)?;
        regions.push(Region { offset: off, len });
    }
    f.sync_all()?;
    Ok(regions)
}

/// Zeroes all four labels.
pub fn zero_labels(dev: &Path) -> Result<()> {
    let size = file_size(dev)?;
    let zeros = vec![0u8; LABEL_SIZE as usize];
    for off in label_offsets(size) {
        write_at(dev, off, &zeros)?;
    }
    Ok(())
}

/// Truncates (or extends) a device file.
pub fn truncate_dev(dev: &Path, len: u64) -> Result<()> {
    open_rw(dev)?
        .set_len(len)
        .map_err(|e| Error(format!("truncate {}: {e}", dev.display())))
}

/// Creates a file of `size` pseudo-random bytes (a "device" with garbage).
pub fn random_device(path: &Path, size: u64, seed: u64) -> Result<()> {
    crate::populate::write_random(path, size, seed)
}

/// An uberblock found in a label's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UberblockSlot {
    /// Label index 0..4.
    pub label: usize,
    /// Absolute byte offset of the uberblock in the device file.
    pub offset: u64,
    /// Its txg.
    pub txg: u64,
    /// Big-endian magic (written by a big-endian host).
    pub big_endian: bool,
}

/// Finds every uberblock (magic 0x00bab10c, either byte order) in the
/// rings of all four labels, scanning at 1 KiB steps (covers any slot size).
pub fn find_uberblocks(dev: &Path) -> Result<Vec<UberblockSlot>> {
    let size = file_size(dev)?;
    let mut out = Vec::new();
    for (label, loff) in label_offsets(size).into_iter().enumerate() {
        let ring = read_at(dev, loff + UB_RING_OFFSET, UB_RING_SIZE as usize)?;
        for slot in (0..ring.len()).step_by(1024) {
            let m_le = u64::from_le_bytes(ring[slot..slot + 8].try_into().expect("8"));
            let m_be = u64::from_be_bytes(ring[slot..slot + 8].try_into().expect("8"));
            let (txg, be) = if m_le == UB_MAGIC {
                (
                    u64::from_le_bytes(ring[slot + 16..slot + 24].try_into().expect("8")),
                    false,
                )
            } else if m_be == UB_MAGIC {
                (
                    u64::from_be_bytes(ring[slot + 16..slot + 24].try_into().expect("8")),
                    true,
                )
            } else {
                continue;
            };
            out.push(UberblockSlot {
                label,
                offset: loff + UB_RING_OFFSET + slot as u64,
                txg,
                big_endian: be,
            });
        }
    }
    Ok(out)
}

/// Corrupts one uberblock so that its checksum fails while magic and txg
/// stay plausible: flips bytes inside the root block pointer (offset 40..).
pub fn corrupt_uberblock(dev: &Path, offset: u64) -> Result<()> {
    let mut ub = read_at(dev, offset, 168)?;
    for b in &mut ub[48..168] {
        *b ^= 0x5a;
    }
    write_at(dev, offset, &ub)
}

/// Corrupts every uberblock whose txg is not in `keep` on `dev`.  Returns
/// how many were corrupted.
pub fn corrupt_uberblocks_except(dev: &Path, keep: impl Fn(u64) -> bool) -> Result<usize> {
    let mut n = 0;
    for ub in find_uberblocks(dev)? {
        if ub.txg != 0 && !keep(ub.txg) {
            corrupt_uberblock(dev, ub.offset)?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_offsets_of_odd_sizes() {
        let m = 1024 * 1024;
        assert_eq!(
            label_offsets(64 * m),
            [0, 262_144, 64 * m - 524_288, 64 * m - 262_144]
        );
        // Rounded down to 256 KiB.
        assert_eq!(label_offsets(64 * m + 1000)[3], 64 * m - 262_144);
    }

    #[test]
    fn damage_stays_in_data_area() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("dev");
        let f = File::create(&p).expect("create");
        f.set_len(32 << 20).expect("len");
        write_at(&p, 10 << 20, &vec![1u8; 1 << 20]).expect("write");
        let regs = damage_random(&p, 50, 3).expect("damage");
        for r in regs {
            assert!(
                r.offset >= DATA_START && r.offset + r.len <= (32 << 20) - DATA_END_RESERVE,
                "{r:?}"
            );
            assert!(r.len >= 4096 && r.len <= 65536, "{r:?}");
        }
    }
}
