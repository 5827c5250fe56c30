//! Pre-compressed records on the object layer (issue 7): what a client that
//! compresses its own data (a Lustre-like object server) writes and reads.
//!
//! Theory (docs/design/precompressed.md, after the thesis in
//! `shared/seeds/000_*`, chapters 3, 5 and 6). A client hands over a record
//! it compressed itself: object, record index, logical size (the object's
//! block size) and payload. The record is stored as one level-0 block whose
//! BP says LSIZE = the block size, PSIZE = header + payload rounded up to the
//! pool's smallest sector, compression "external"; the block begins with the
//! 16-byte [`ExtHeader`] (algorithm tag, exact payload bytes) and ends in
//! zeros. ozfs neither compresses nor decompresses on this path, and a record
//! is always replaced whole (no read-modify-write).
//!
//! Reading raw returns, per record, a [`RawRecord`]: a hole, a plain record
//! (its logical bytes, whatever ZFS compression it has on disk), or the
//! stored image of an external one with its algorithm and exact size.
//! Ordinary reads of a record whose algorithm ozfs knows decode it
//! ([`ozfs_spa::Pool::decode_external`]); others are [`Error::Opaque`].
//!
//! Prefetch: a raw read of a range first gathers the BPs of the whole range
//! (from the cached indirect blocks), then reads every block of it at once
//! on several threads, in disk order, neighbouring blocks on a disk or
//! mirror merged into one I/O of up to 1 MiB (gaps under 32 KiB read
//! through) and each block verified against its own BP. Reads move the
//! physical bytes, in large requests, so a range of records costs in
//! proportion to its physical bytes, not to its logical size or its record
//! count (what the thesis's prefetcher had to be taught, §5.5). A block
//! that fails verification in a run is read again alone, through the
//! healing path.
//!
//! Invariants:
//! * An image staged here was built by [`ExtHeader::image`] (header valid,
//!   payload fits, PSIZE < LSIZE) and, when the client sent a checksum,
//!   verified against it before anything was staged.
//! * Nothing read from disk is believed before [`ExtHeader::parse`] checked
//!   it against the block it came from.

use crate::objset::{Dnode, Objset};
use ozfs_codec::checksum;
use ozfs_format::external::ExtHeader;
use ozfs_format::types::{cksum as ck, comp};
use ozfs_format::{BlkPtr, Cksum, Error, Result};
use std::sync::Arc;

/// A record as a client sends it.
#[derive(Debug, Clone)]
pub struct ExternalRecord {
    /// Algorithm tag (`ozfs_format::external`): 1..=5 known, 128..=255 opaque.
    pub tag: u8,
    /// Logical size: must be the object's block size.
    pub lsize: u64,
    /// The client's compressed bytes.
    pub payload: Vec<u8>,
    /// The client's checksum of the stored image (header, payload, zeros
    /// up to PSIZE): function (fletcher2/4, sha256) and value. Verified once,
    /// then used as the block's checksum.
    pub cksum: Option<(u8, Cksum)>,
}

/// A pre-compressed record staged in the open txg.
#[derive(Debug, Clone)]
pub struct ExtBlock {
    /// Header, payload and zeros up to PSIZE.
    pub image: Arc<Vec<u8>>,
    pub lsize: u64,
    /// The client's verified checksum (else the dataset's is computed at sync).
    pub cksum: Option<(u8, Cksum)>,
}

impl ExtBlock {
    /// Build and check the stored form of `rec` for a pool whose smallest
    /// sector is `sector` bytes.
    pub fn build(rec: &ExternalRecord, sector: u64) -> Result<ExtBlock> {
        let image = ExtHeader::image(rec.tag, &rec.payload, rec.lsize, sector)?;
        if let Some((f, want)) = rec.cksum {
            if !matches!(f, ck::FLETCHER2 | ck::FLETCHER4 | ck::SHA256) {
                return Err(Error::Invalid(format!(
                    "checksum function {f}: the client may send fletcher2, fletcher4 or sha256"
                )));
            }
            let got = checksum::compute(f, &image, false)?;
            if got != want {
                return Err(Error::Checksum {
                    what: "pre-compressed record".into(),
                    expected: want,
                    computed: got,
                });
            }
        }
        Ok(ExtBlock {
            image: Arc::new(image),
            lsize: rec.lsize,
            cksum: rec.cksum,
        })
    }

    /// The header of the staged image (built by [`ExtBlock::build`]).
    pub fn header(&self) -> Result<ExtHeader> {
        ExtHeader::parse(&self.image)
    }

    /// The logical record (decoded with the client's algorithm).
    pub fn decode(&self) -> Result<Vec<u8>> {
        let h = self.header()?;
        let mut out = vec![0u8; self.lsize as usize];
        ozfs_codec::compress::external_decompress(h.tag, h.payload(&self.image), &mut out)?;
        Ok(out)
    }
}

/// One record as a raw read returns it.
#[derive(Debug, Clone)]
pub enum RawRecord {
    /// Never written (or punched): no data.
    Hole { lsize: u64 },
    /// An ordinary record: its logical bytes.
    Plain { data: Arc<Vec<u8>> },
    /// A pre-compressed record: the stored image and what its header and BP say.
    External {
        tag: u8,
        csize: u32,
        lsize: u64,
        psize: u64,
        /// The block's checksum (function, value); None while only staged
        /// without a client checksum (it is computed at sync).
        cksum: Option<(u8, Cksum)>,
        image: Arc<Vec<u8>>,
    },
}

impl RawRecord {
    /// The bytes a client gets: the payload of an external record, the data
    /// of a plain one, nothing for a hole.
    pub fn payload(&self) -> &[u8] {
        match self {
            RawRecord::Hole { .. } => &[],
            RawRecord::Plain { data } => data,
            RawRecord::External {
                tag, csize, image, ..
            } => ExtHeader {
                tag: *tag,
                csize: *csize,
            }
            .payload(image),
        }
    }

    /// "hole", "plain" or "external".
    pub fn kind(&self) -> &'static str {
        match self {
            RawRecord::Hole { .. } => "hole",
            RawRecord::Plain { .. } => "plain",
            RawRecord::External { .. } => "external",
        }
    }

    /// A committed external record from its verified stored image.
    pub fn from_image(bp: &BlkPtr, image: Arc<Vec<u8>>) -> Result<RawRecord> {
        let h = ExtHeader::parse(&image)?;
        Ok(RawRecord::External {
            tag: h.tag,
            csize: h.csize,
            lsize: bp.lsize(),
            psize: bp.psize(),
            cksum: Some((bp.checksum(), bp.cksum())),
            image,
        })
    }

    /// A staged external record.
    pub fn from_staged(e: &ExtBlock) -> Result<RawRecord> {
        let h = e.header()?;
        Ok(RawRecord::External {
            tag: h.tag,
            csize: h.csize,
            lsize: e.lsize,
            psize: e.image.len() as u64,
            cksum: e.cksum,
            image: e.image.clone(),
        })
    }
}

/// Physical bytes one raw read fetches at most (its window).
pub const RAW_WINDOW: u64 = 64 << 20;
/// Records one raw read covers at most (holes cost no bytes, so a sparse
/// file is bounded by this instead).
pub const RAW_WINDOW_RECORDS: usize = 16384;
/// Largest gap between neighbouring blocks read as one run.
const MERGE_GAP: u64 = 32 << 10;
/// Largest run read with one I/O.
const MERGE_MAX: u64 = 1 << 20;

/// Threads a raw read spreads its block reads over.
fn fetch_threads() -> usize {
    if std::env::var("OZFS_PREFETCH").is_ok_and(|v| v == "0") {
        return 1;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        * 2
}

impl Objset {
    /// The committed records from `first` on, at most `count` and at most
    /// [`RAW_WINDOW`] physical bytes (but at least one record), stopping at
    /// the object's last block: a prefix of the range, which the caller
    /// continues from where it ends. The window is measured in physical
    /// bytes, so a file of small pre-compressed records is read in as few
    /// windows as a dense file of the same bytes. The BPs of the window are
    /// gathered first and their blocks read together in disk order (see
    /// the module comment: the cost follows PSIZE).
    pub fn read_raw(&self, dn: &Dnode, first: u64, count: u64) -> Result<Vec<(u64, RawRecord)>> {
        let bs = dn.phys.datablksz();
        let end = first
            .saturating_add(count)
            .min(dn.phys.maxblkid.saturating_add(1));
        let mut bps: Vec<(u64, BlkPtr)> = Vec::new();
        let mut phys = 0u64;
        let mut b = first;
        while b < end && (phys < RAW_WINDOW || bps.is_empty()) && bps.len() < RAW_WINDOW_RECORDS {
            let bp = self.block_bp(dn, 0, b)?.unwrap_or_default();
            if !bp.is_hole() && !bp.is_embedded() {
                phys += bp.psize();
            }
            bps.push((b, bp));
            b += 1;
        }
        // Disk order for the reads; neighbours on a disk or mirror are
        // merged into runs of up to 1 MiB (one I/O each), so small sparse
        // records cost their bytes rather than an I/O apiece. Results go
        // back by index.
        let mut order: Vec<usize> = (0..bps.len()).filter(|&i| !bps[i].1.is_hole()).collect();
        order.sort_by_key(|&i| {
            let d = bps[i].1.dvas()[0];
            (d.vdev, d.offset)
        });
        // No merging while a device is being rebuilt: a run is read from
        // whichever side answers first, without the healing path's care.
        let may_merge = self.pool.resilvering_leaves().is_empty();
        let mut runs: Vec<Vec<usize>> = Vec::new();
        let mut run_mergeable = false;
        for i in order {
            let bp = &bps[i].1;
            let d = bp.dvas()[0];
            let mergeable = may_merge && self.mergeable(bp);
            if let Some(run) = runs.last_mut() {
                let first = bps[run[0]].1.dvas()[0];
                let l = bps[run[run.len() - 1]].1.dvas()[0];
                // mergeable() checked every DVA end against its vdev's size.
                let end = l.offset + l.asize;
                if mergeable
                    && run_mergeable
                    && d.vdev == l.vdev
                    && d.offset >= end
                    && d.offset - end <= MERGE_GAP
                    && d.offset + d.asize - first.offset <= MERGE_MAX
                {
                    run.push(i);
                    continue;
                }
            }
            runs.push(vec![i]);
            run_mergeable = mergeable;
        }
        let mut out: Vec<Option<Result<RawRecord>>> = (0..bps.len()).map(|_| None).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots = std::sync::Mutex::new(&mut out);
        let threads = fetch_threads().min(runs.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(run) = runs.get(k) else { break };
                    let merged = if run.len() > 1 {
                        self.read_run(run.iter().map(|&i| &bps[i].1))
                    } else {
                        None
                    };
                    for (n, &i) in run.iter().enumerate() {
                        let (b, bp) = bps[i];
                        let r = match merged.as_ref().and_then(|m| m[n].clone()) {
                            Some(r) => Ok(r),
                            None => self.raw_one(&bp),
                        }
                        .map_err(|e| e.context(&format!("object {} record {b}", dn.object)));
                        if let Ok(mut v) = slots.lock() {
                            v[i] = Some(r);
                        }
                    }
                });
            }
        });
        let mut v = Vec::with_capacity(bps.len());
        for (i, (b, _)) in bps.iter().enumerate() {
            let r = match out[i].take() {
                Some(r) => r?,
                None => RawRecord::Hole { lsize: bs },
            };
            v.push((*b, r));
        }
        Ok(v)
    }

    /// Whether a block may be read as part of a merged run: one whose
    /// stored bytes are its raw form (pre-compressed or uncompressed), not
    /// a gang block, on a disk or mirror (RAID-Z and dRAID lay each block
    /// out by itself).
    fn mergeable(&self, bp: &BlkPtr) -> bool {
        let d = bp.dvas()[0];
        let c = bp.compression();
        let raw_form = c == comp::EXTERNAL
            || (matches!(c, comp::OFF | comp::INHERIT | comp::EMPTY) && bp.psize() == bp.lsize());
        raw_form
            && !bp.is_embedded()
            && !d.gang
            && d.asize >= bp.psize()
            && bp.validate("block pointer").is_ok()
            && self
                .pool
                .root
                .children
                .get(d.vdev as usize)
                .is_some_and(|t| {
                    !matches!(
                        t.kind,
                        ozfs_vdev::VdevKind::Raidz { .. } | ozfs_vdev::VdevKind::Draid { .. }
                    ) && d.offset.checked_add(d.asize).is_some_and(|e| e <= t.asize)
                })
    }

    /// Read a run of neighbouring blocks with one I/O and verify each
    /// against its BP. A block that does not verify (or a failed read)
    /// comes back None: the caller reads it alone, through the healing
    /// path, which also reports the error properly.
    fn read_run<'a>(
        &self,
        run: impl Iterator<Item = &'a BlkPtr>,
    ) -> Option<Vec<Option<RawRecord>>> {
        let run: Vec<&BlkPtr> = run.collect();
        let first = run.first()?.dvas()[0];
        let last = run.last()?.dvas()[0];
        let len = last.offset + last.asize - first.offset;
        let buf = self.pool.read_raw(first.vdev, first.offset, len).ok()?;
        Some(
            run.iter()
                .map(|bp| {
                    let d = bp.dvas()[0];
                    let at = (d.offset - first.offset) as usize;
                    let img = buf.get(at..at + bp.psize() as usize)?;
                    let f = bp.checksum();
                    if f != ck::OFF && f != ck::NOPARITY {
                        let swap = bp.little_endian() != ozfs_format::bytes::HOST_LITTLE_ENDIAN;
                        if checksum::compute_salted(f, img, swap, self.pool.checksum_salt.get())
                            .ok()?
                            != bp.cksum()
                        {
                            return None;
                        }
                    }
                    if bp.compression() != comp::EXTERNAL {
                        return Some(RawRecord::Plain {
                            data: Arc::new(img.to_vec()),
                        });
                    }
                    self.pool.check_external(bp).ok()?;
                    RawRecord::from_image(bp, Arc::new(img.to_vec())).ok()
                })
                .collect(),
        )
    }

    /// One committed non-hole block, raw.
    fn raw_one(&self, bp: &BlkPtr) -> Result<RawRecord> {
        if bp.compression() != comp::EXTERNAL || bp.is_embedded() {
            return Ok(RawRecord::Plain {
                data: self.pool.read_bp_cached(bp, true)?,
            });
        }
        RawRecord::from_image(bp, self.pool.read_external_image(bp)?)
    }
}
