//! The ZFS intent log of each file system: its chain of log blocks, written
//! at `fsync` and retired as transaction groups commit; claimed at import
//! and read back for replay.
//!
//! # Theory
//!
//! A txg commits every change of a few seconds at once; an `fsync` cannot
//! wait for that, and committing a whole txg per `fsync` (new MOS, labels,
//! uberblock, three flushes) is what made ozfs slow under databases. ZFS's
//! answer, kept here in its on-disk form (OpenZFS's `zil.h`): each file
//! system's objset carries a `zil_header_t` naming the first block of a
//! chain of *log blocks*. Each block starts with a `zil_chain_t` — the
//! pointer to the next block, the bytes used, an embedded fletcher4
//! checksum (`ZILOG2`) — followed by *records* (`lr_t` and a body per
//! type: create, remove, write with its data, …). A commit appends the
//! records not yet logged to the chain: the first goes into the block the
//! chain already names (allocated ahead, never written), more blocks are
//! allocated as needed, and the last names a new block allocated ahead
//! for the next commit. The blocks are written and the devices flushed
//! (`ozfs_spa::zilio`, where committers share the flush); then the fsync
//! is answered. No txg is committed.
//!
//! Each block's pointer carries, instead of a checksum, a *verifier*: two
//! random words fixed when the chain was made, the objset id and the
//! block's sequence number. A block verifies only if it was written for
//! exactly that place in exactly this chain, so the first block that does
//! not verify — the one allocated ahead, or one a crash cut short — ends
//! the chain, and stale bytes of an older chain never pass for records.
//!
//! When txg `T` commits, every change logged with a txg `<= T` is in the
//! objset: the blocks holding only such records are freed in `T` and the
//! header advanced past them, in the same txg (`zil_sync`). Frees of log
//! blocks are always deferred (`Allocator::free_deferred`): a block freed
//! by `T`'s sync may still be reached from the last durable header until
//! `T` is on disk. The first commit of a mounted file system has no chain
//! to append to: it allocates the first block and asks the caller to
//! commit the txg that writes the header naming it (`Commit::NeedsSync`),
//! as OpenZFS's `zil_create` waits for a txg. Closing the log (unmount,
//! snapshot) frees the chain and zeroes the header in the next sync.
//!
//! At import a writer *claims* every log (`claim_logs`): blocks born after
//! the last synced txg are in no space map, so they are allocated before
//! anything else can be, and the header records the claim (`zh_claim_txg`,
//! the last block and record sequence numbers, `ZIL_REPLAY_NEEDED`) as
//! OpenZFS's `zil_claim` does. The replay itself — applying records to the
//! file system — is the ZPL's (`ozfs_zpl::zil`); once applied, the log is
//! destroyed in the same txg ([`PoolWriter::zil_destroy_replayed`]).
//!
//! # Invariants
//!
//! * A commit's completion runs only after its blocks and a flush.
//! * Every block a header names, and every block reachable from it by the
//!   chain, stays allocated until a txg that no longer reaches it is durable.
//! * Records carry strictly increasing sequence numbers within a chain;
//!   every record of a txg `<= T` may be dropped once `T`'s sync was
//!   decided, because [`PoolWriter::zil_commit`] waits for queued syncs
//!   before it answers anyone.
//! * Chains read from disk are bounded ([`MAX_CHAIN_BLOCKS`]), a block
//!   seen twice ends the walk, and every record is parsed with its length
//!   checked (`ozfs_format::zil`).

use crate::sync::PoolWriter;
use ozfs_format::blkptr::{BlkPtr, Dva};
use ozfs_format::types::{cksum, comp, ot};
use ozfs_format::zil::{self as fz, LogRecord, ZilHeader};
use ozfs_format::{Cksum, Error, Result};
use ozfs_spa::pool::Pool;
use ozfs_spa::zilio::{Completion, LogJob, LogWrite};
use std::collections::VecDeque;

/// Largest log block (OpenZFS's `ZIL_MAX_BLKSZ`, 128 KiB).
pub const MAX_BLOCK: u64 = 128 << 10;
/// Smallest log block and the unit of their sizes (`ZIL_MIN_BLKSZ`).
pub const MIN_BLOCK: u64 = fz::ZIL_MIN_BLKSZ;
/// Longest chain followed.
pub const MAX_CHAIN_BLOCKS: usize = 1 << 16;
/// Largest data a write record carries (so that every record fits one
/// block: the rest of a larger write goes into more records).
pub const MAX_WRITE_CHUNK: usize = 64 << 10;

/// The log of one file system being written by this process.
pub struct ZilState {
    guid: [u64; 2],
    next_blk_seq: u64,
    lr_seq: u64,
    /// Written blocks still needed, in chain order, with the highest txg
    /// of their records.
    live: VecDeque<(BlkPtr, u64)>,
    /// The block allocated ahead (named by the header or the last live
    /// block), not written.
    open: Option<BlkPtr>,
    /// What the header on disk (or about to be) names first.
    head: Option<BlkPtr>,
    /// The header must be rewritten at the next sync.
    head_dirty: bool,
    /// Destroy the log at the next sync (unmount, snapshot).
    closing: bool,
    /// Size to allocate ahead: the last commit's.
    guess: u64,
}

/// What [`PoolWriter::zil_commit`] made of a commit.
pub enum Commit {
    /// Log blocks to write (in order) on `root`'s vdevs, then flush: the
    /// caller queues them with its completion on the pool's log writer
    /// (`ozfs_spa::zilio`), before anything else is committed. Empty when
    /// nothing was left to log (the completion then only waits for the
    /// commits queued before it).
    Write {
        root: std::sync::Arc<ozfs_vdev::Vdev>,
        writes: Vec<LogWrite>,
    },
    /// The log had no chain: one was started, and the caller must commit
    /// the txg (which makes everything durable).
    NeedsSync,
}

impl Commit {
    /// Queue the writes with `done` (run once they are durable); a
    /// `NeedsSync` is handed back.
    pub fn submit(self, pool: &Pool, done: Completion) -> Option<Completion> {
        match self {
            Commit::Write { root, writes } => {
                pool.zil_io.submit(LogJob { root, writes, done });
                None
            }
            Commit::NeedsSync => Some(done),
        }
    }
}

fn round_block(n: u64) -> u64 {
    n.div_ceil(MIN_BLOCK)
        .saturating_mul(MIN_BLOCK)
        .clamp(MIN_BLOCK, MAX_BLOCK)
}

impl ZilState {
    fn new() -> Result<ZilState> {
        let r = || ozfs_codec::crypt::random_u64();
        Ok(ZilState {
            guid: [r()?, r()?],
            next_blk_seq: 1,
            lr_seq: 0,
            live: VecDeque::new(),
            open: None,
            head: None,
            head_dirty: false,
            closing: false,
            guess: MIN_BLOCK,
        })
    }

    fn header(&self) -> ZilHeader {
        let mut h = ZilHeader::empty();
        if let Some(bp) = self.live.front().map(|l| l.0).or(self.open) {
            h.log = bp;
        }
        h
    }
}

/// A log block's pointer: one DVA, `ZILOG2`, uncompressed, born in `txg`,
/// the verifier as its checksum.
fn log_bp(ext: &ozfs_spa::metaslab::Extent, size: u64, txg: u64, verifier: [u64; 4]) -> BlkPtr {
    let mut bp = BlkPtr::default();
    bp.set_dva(
        0,
        &Dva {
            vdev: ext.vdev,
            offset: ext.offset,
            asize: ext.asize,
            gang: false,
        },
    );
    bp.words[6] = BlkPtr::make_prop(
        size,
        size,
        comp::OFF,
        cksum::ZILOG2,
        ot::INTENT_LOG,
        0,
        false,
        cfg!(target_endian = "little"),
    );
    bp.words[10] = txg;
    bp.set_cksum(Cksum(verifier));
    bp
}

impl PoolWriter {
    fn zil_alloc(&mut self, ds_obj: u64, size: u64) -> Result<BlkPtr> {
        let txg = self.txg;
        if !self.zil.contains_key(&ds_obj) {
            return Err(Error::Invalid(format!(
                "no intent log for dataset {ds_obj}"
            )));
        }
        // On a separate log device when the pool has one.
        let ext = self.alloc.alloc_log(size, txg)?;
        // Log blocks come back to the same few megabytes; fill that
        // stretch's host holes once, so that a log write's flush is not a
        // host journal commit too. Best effort: a hole left is only slower.
        let warm = self.alloc.log_warm_ranges(&ext);
        if !warm.is_empty() {
            if let Some(root) = self.pool.root.current() {
                if let Some(top) = root.children.get(ext.vdev as usize) {
                    for (off, len) in warm {
                        let _ = top.fill_holes(off, len);
                    }
                }
            }
        }
        let st = self
            .zil
            .get_mut(&ds_obj)
            .ok_or_else(|| Error::Invalid(format!("no intent log for dataset {ds_obj}")))?;
        let seq = st.next_blk_seq;
        st.next_blk_seq += 1;
        Ok(log_bp(
            &ext,
            size,
            txg,
            [st.guid[0], st.guid[1], ds_obj, seq],
        ))
    }

    /// The blocks of this writer's live log of `ds_obj` (written, still
    /// needed, and the one allocated ahead), known without reading them.
    pub(crate) fn zil_known_blocks(&self, ds_obj: u64) -> Option<Vec<BlkPtr>> {
        let st = self.zil.get(&ds_obj)?;
        Some(st.live.iter().map(|l| l.0).chain(st.open).collect())
    }

    /// Whether this writer keeps a live log for `ds_obj`.
    pub fn zil_live(&self, ds_obj: u64) -> bool {
        self.zil.contains_key(&ds_obj)
    }

    /// Commit `records` (each with the txg of its change, in the order the
    /// changes were made) to the log of file system `ds_obj`. Records of
    /// txgs already committed are dropped; what is left is appended to the
    /// chain: the blocks to write come back in [`Commit::Write`].
    pub fn zil_commit(&mut self, ds_obj: u64, records: Vec<(u64, LogRecord)>) -> Result<Commit> {
        if let Some(f) = self.pool.zil_io.failed() {
            return Err(Error::Invalid(format!(
                "the intent log stopped after a failed write: {f}"
            )));
        }
        // Every txg decided before now is on disk once this returns, so
        // its records need no log (and nothing answered later depends on
        // a sync still in flight).
        self.pool.writeback.drain()?;
        let synced = self.alloc.synced_txg();
        let records: Vec<(u64, LogRecord)> =
            records.into_iter().filter(|(t, _)| *t > synced).collect();
        if let std::collections::btree_map::Entry::Vacant(e) = self.zil.entry(ds_obj) {
            e.insert(ZilState::new()?);
        }
        let has_open = self.zil.get(&ds_obj).is_some_and(|s| s.open.is_some());
        if !has_open {
            let bytes: u64 = records
                .iter()
                .map(|r| fz::encode_record(&r.1).len() as u64)
                .sum();
            let bp = self.zil_alloc(ds_obj, round_block(fz::ZIL_CHAIN_SIZE as u64 + bytes))?;
            if let Some(st) = self.zil.get_mut(&ds_obj) {
                st.open = Some(bp);
                st.closing = false;
                st.head_dirty = true;
            }
            return Ok(Commit::NeedsSync);
        }
        let root = self
            .pool
            .root
            .current()
            .ok_or_else(|| Error::Invalid("the pool has no vdev tree".into()))?;
        if records.is_empty() {
            return Ok(Commit::Write {
                root,
                writes: Vec::new(),
            });
        }
        let mut encoded: Vec<(u64, Vec<u8>)> = Vec::with_capacity(records.len());
        {
            let st = self
                .zil
                .get_mut(&ds_obj)
                .ok_or_else(|| Error::Invalid("intent log state".into()))?;
            for (txg, mut rec) in records {
                st.lr_seq += 1;
                rec.common.seq = st.lr_seq;
                rec.common.txg = txg;
                encoded.push((txg, fz::encode_record(&rec)));
            }
        }
        let total: usize = encoded.iter().map(|e| e.1.len()).sum();
        let mut writes = Vec::new();
        let mut cur = self
            .zil
            .get_mut(&ds_obj)
            .and_then(|s| s.open.take())
            .ok_or_else(|| Error::Invalid("intent log without an open block".into()))?;
        let mut i = 0;
        let mut new_live = Vec::new();
        loop {
            let cap = (cur.psize() as usize).saturating_sub(fz::ZIL_CHAIN_SIZE);
            let start = i;
            let mut used = 0usize;
            let mut max_txg = 0;
            while i < encoded.len() && used + encoded[i].1.len() <= cap {
                used += encoded[i].1.len();
                max_txg = max_txg.max(encoded[i].0);
                i += 1;
            }
            let remaining: usize = encoded[i..].iter().map(|e| e.1.len()).sum();
            let next_size = if remaining == 0 {
                self.zil.get(&ds_obj).map_or(MIN_BLOCK, |s| s.guess)
            } else {
                let first = encoded[i].1.len() as u64 + fz::ZIL_CHAIN_SIZE as u64;
                if first > MAX_BLOCK {
                    return Err(Error::Invalid(format!(
                        "an intent-log record of {} bytes does not fit a log block",
                        encoded[i].1.len()
                    )));
                }
                round_block(fz::ZIL_CHAIN_SIZE as u64 + remaining as u64).max(round_block(first))
            };
            let next = self.zil_alloc(ds_obj, next_size)?;
            let mut body = Vec::with_capacity(used);
            for e in &encoded[start..i] {
                body.extend_from_slice(&e.1);
            }
            let d = cur.dvas()[0];
            let top = root.children.get(d.vdev as usize).ok_or_else(|| {
                Error::corrupt("intent log", format!("vdev {} does not exist", d.vdev))
            })?;
            // Only the used part is written (OpenZFS's slim log blocks),
            // except where the block's layout depends on its whole size
            // (RAID-Z: its columns).
            let unit = 1u64 << top.ashift;
            let linear = d.asize == cur.psize().div_ceil(unit) * unit;
            let len = if linear {
                round_block((fz::ZIL_CHAIN_SIZE + used) as u64).min(cur.psize())
            } else {
                cur.psize()
            };
            let mut buf = vec![0u8; len as usize];
            fz::seal_log_block(&mut buf, &next, &body, cur.cksum().0, &|b: &[u8]| {
                ozfs_codec::checksum::fletcher4(b, false).0
            })?;
            writes.push(LogWrite {
                vdev: d.vdev,
                offset: d.offset,
                data: buf,
            });
            new_live.push((cur, max_txg));
            cur = next;
            if remaining == 0 {
                break;
            }
        }
        if let Some(st) = self.zil.get_mut(&ds_obj) {
            st.live.extend(new_live);
            st.open = Some(cur);
            st.guess = round_block((fz::ZIL_CHAIN_SIZE + total) as u64);
        }
        Ok(Commit::Write { root, writes })
    }

    /// Destroy the log of `ds_obj` at the next sync (its changes are all
    /// in that txg): unmount, and before a snapshot (whose objset must
    /// name no chain, as OpenZFS's `zil_suspend` leaves it).
    pub fn zil_close(&mut self, ds_obj: u64) {
        if let Some(st) = self.zil.get_mut(&ds_obj) {
            st.closing = true;
        }
    }

    /// The sync of `txg` (before the file systems are written): wait for
    /// the log writes in flight, free the blocks whose records are all in
    /// this txg or older, advance each header past them — or destroy
    /// closing logs — and stage the new headers in their objsets.
    pub(crate) fn zil_sync(&mut self, txg: u64) -> Result<()> {
        if self.zil.is_empty() {
            return Ok(());
        }
        self.pool.zil_io.drain();
        let ids: Vec<u64> = self.zil.keys().copied().collect();
        for ds_obj in ids {
            let mut frees = Vec::new();
            let (header, rewrite, closing) = {
                let Some(st) = self.zil.get_mut(&ds_obj) else {
                    continue;
                };
                if st.closing {
                    frees.extend(st.live.drain(..).map(|l| l.0));
                    frees.extend(st.open.take());
                } else {
                    while st.live.front().is_some_and(|l| l.1 <= txg) {
                        if let Some(l) = st.live.pop_front() {
                            frees.push(l.0);
                        }
                    }
                }
                let header = st.header();
                let head = (!header.log.is_hole()).then_some(header.log);
                let rewrite = st.head_dirty || head != st.head || st.closing;
                st.head = head;
                st.head_dirty = false;
                (header, rewrite, st.closing)
            };
            for bp in &frees {
                let d = bp.dvas()[0];
                self.alloc.free_deferred(d.vdev, d.offset, d.asize, txg)?;
            }
            if rewrite {
                let otx = self.fs_tx(ds_obj)?;
                otx.os.phys.zil_header = header.encode().to_vec();
                otx.header_dirty = true;
            }
            if closing {
                self.zil.remove(&ds_obj);
            }
        }
        Ok(())
    }

    /// After the records of `ds_obj`'s log were applied in the open txg:
    /// free its chain (and the blocks of indirect writes it claimed) and
    /// zero its header, in this same txg.
    pub fn zil_destroy_replayed(&mut self, ds_obj: u64, chain: &Chain) -> Result<()> {
        let txg = self.txg;
        for bp in chain.blocks.iter().chain(chain.claimed_data.iter()) {
            let d = bp.dvas()[0];
            if self.alloc.is_allocated(d.vdev, d.offset, d.asize) {
                self.alloc.free_deferred(d.vdev, d.offset, d.asize, txg)?;
            }
        }
        self.replaying.remove(&ds_obj);
        let otx = self.fs_tx(ds_obj)?;
        otx.os.phys.zil_header = ZilHeader::empty().encode().to_vec();
        otx.header_dirty = true;
        Ok(())
    }

    /// Allow writing `ds_obj` although its header says its log needs a
    /// replay: the caller is replaying it now.
    pub fn zil_begin_replay(&mut self, ds_obj: u64) {
        self.replaying.insert(ds_obj);
    }

    /// The replay of `ds_obj` is over (nothing was to be done).
    pub fn zil_end_replay(&mut self, ds_obj: u64) {
        self.replaying.remove(&ds_obj);
    }

    /// The replay of `ds_obj` failed: what it staged is discarded (the
    /// log stays, and the file system is refused for writing again).
    pub fn zil_abort_replay(&mut self, ds_obj: u64) {
        self.fs.remove(&ds_obj);
        self.replaying.remove(&ds_obj);
    }

    /// Claim the log of `ds_obj` now (its header's claim was not written
    /// at import: an encrypted file system whose key was not loaded then)
    /// and return the claimed header, which is staged in its objset.
    pub fn zil_claim(&mut self, ds_obj: u64) -> Result<ZilHeader> {
        let ds = self.dataset(ds_obj)?;
        let h = {
            let otx = self.fs_tx(ds_obj)?;
            ZilHeader::decode(&otx.os.phys.zil_header, otx.os.swap)?
        };
        let nh = self.claim_chain(ds_obj, &ds, &h)?;
        let otx = self.fs_tx(ds_obj)?;
        otx.os.phys.zil_header = nh.encode().to_vec();
        otx.header_dirty = true;
        Ok(nh)
    }

    /// Stage a new intent-log header in the objset of `ds_obj` without
    /// its key: the objset is written raw (its MACs, which do not cover
    /// the header, kept) with nothing else changed.
    fn stage_header_raw(
        &mut self,
        ds_obj: u64,
        ds: &ozfs_format::dsl::DslDatasetPhys,
        header: Vec<u8>,
    ) -> Result<()> {
        if let Some(t) = self.fs.get_mut(&ds_obj) {
            t.os.phys.zil_header = header;
            t.header_dirty = true;
            return Ok(());
        }
        let os = ozfs_dmu::objset::Objset::open(self.pool.clone(), &ds.bp)?;
        let mut t = ozfs_dmu::tx::ObjsetTx::new(os);
        t.raw_recv = true;
        t.os.phys.zil_header = header;
        t.header_dirty = true;
        self.fs.insert(ds_obj, t);
        Ok(())
    }

    /// Claim the blocks of the chain `h` names (born in or after the open
    /// txg's predecessor was synced) and return the claimed header.
    fn claim_chain(
        &mut self,
        ds_obj: u64,
        ds: &ozfs_format::dsl::DslDatasetPhys,
        h: &ZilHeader,
    ) -> Result<ZilHeader> {
        // The first txg of this import: records of earlier txgs are
        // committed, blocks born earlier are in the space maps.
        let first_txg = self.first_txg;
        let _ = ds;
        let chain = read_chain(&self.pool, h, ds_obj, None);
        for bp in chain.blocks.iter().chain(chain.indirect.iter()) {
            if bp.birth() < first_txg {
                continue;
            }
            let d = bp.dvas()[0];
            if self.alloc.is_allocated(d.vdev, d.offset, d.asize) {
                continue;
            }
            self.alloc
                .claim(d.vdev, d.offset, d.asize, self.txg)
                .map_err(|e| e.context(&format!("claiming the intent log of dataset {ds_obj}")))?;
        }
        let mut nh = h.clone();
        nh.claim_txg = first_txg;
        nh.claim_blk_seq = chain.last_blk_seq;
        nh.claim_lr_seq = chain.last_lr_seq;
        if !chain.records.is_empty() || chain.last_lr_seq > 0 || chain.blocks.len() > 1 {
            nh.flags |= fz::ZIL_REPLAY_NEEDED;
        }
        nh.flags |= fz::ZIL_CLAIM_LR_SEQ_VALID;
        Ok(nh)
    }

    /// Claim every file system's intent log (OpenZFS's `zil_claim`, at
    /// import): blocks and indirectly written data born after the last
    /// synced txg are allocated in the first txg, before anything else can
    /// take their space, and the header records the claim. Logs already
    /// claimed, and empty ones, are left alone. Returns the datasets whose
    /// logs hold records to replay.
    pub(crate) fn claim_logs(&mut self) -> Result<Vec<u64>> {
        let mos = ozfs_dmu::objset::Objset::from_parts(
            self.pool.clone(),
            self.mos.os.bp,
            self.mos.os.phys.clone(),
        );
        let mut out = Vec::new();
        for (ds_obj, ds) in crate::verify::dsl_datasets(&mos)? {
            if ds.next_snap_obj != 0 || ds.bp.is_hole() {
                continue;
            }
            let Ok(os) = ozfs_dmu::objset::Objset::open(self.pool.clone(), &ds.bp) else {
                continue;
            };
            let Ok(h) = ZilHeader::decode(&os.phys.zil_header, os.swap) else {
                continue;
            };
            if h.log.is_hole() {
                continue;
            }
            if h.claim_txg != 0 {
                if h.flags & fz::ZIL_REPLAY_NEEDED != 0 {
                    out.push(ds_obj);
                }
                continue;
            }
            let nh = match self.claim_chain(ds_obj, &ds, &h) {
                Ok(nh) => nh,
                Err(e) => {
                    eprintln!("ozfs: warning: {e}");
                    continue;
                }
            };
            if nh.flags & fz::ZIL_REPLAY_NEEDED != 0 {
                out.push(ds_obj);
            }
            // The header lies outside the objset's MACs: an encrypted
            // file system whose key is not loaded gets its claim written
            // raw (its MACs kept), as OpenZFS's claim writes it.
            if ds.bp.uses_crypt() && self.pool.keys.master(ds.dir_obj).is_none() {
                if let Err(e) = self.stage_header_raw(ds_obj, &ds, nh.encode().to_vec()) {
                    eprintln!(
                        "ozfs: warning: dataset object {ds_obj}: intent log claim not recorded: {e}"
                    );
                }
                continue;
            }
            self.replaying.insert(ds_obj);
            let r = self.fs_tx(ds_obj).map(|otx| {
                otx.os.phys.zil_header = nh.encode().to_vec();
                otx.header_dirty = true;
            });
            self.replaying.remove(&ds_obj);
            if let Err(e) = r {
                eprintln!(
                    "ozfs: warning: dataset object {ds_obj}: intent log claim not recorded: {e}"
                );
            }
        }
        Ok(out)
    }
}

/// A log chain as read from disk.
#[derive(Debug, Default, Clone)]
pub struct Chain {
    /// Every block the chain names, in order: those that verified, then
    /// the one that ended it (allocated ahead, or never written whole).
    pub blocks: Vec<BlkPtr>,
    /// How many of `blocks` verified.
    pub verified: usize,
    /// Records of the verified blocks, in order, up to the claimed
    /// sequence number when the header records a claim.
    pub records: Vec<LogRecord>,
    /// Block pointers of indirect writes among the records.
    pub indirect: Vec<BlkPtr>,
    /// Of `indirect`, those born at or after the claim txg (what a
    /// destroyed log frees).
    pub claimed_data: Vec<BlkPtr>,
    /// Sequence number of the last block named and of the last record.
    pub last_blk_seq: u64,
    pub last_lr_seq: u64,
    /// Why the walk stopped, when not at an unwritten block.
    pub error: Option<String>,
    /// Verified blocks of an encrypted log (their records not parsed).
    pub encrypted_blocks: usize,
}

/// The parts of an encrypted log block's records in the clear: each
/// record's sequence number and, for an indirect write, its block pointer
/// (when it is a valid, non-embedded one). Stops at the first record whose
/// length does not fit.
fn clear_parts(records: &[u8], swap: bool) -> Vec<(u64, Option<BlkPtr>)> {
    let word = |b: &[u8], at: usize| -> Option<u64> {
        let w: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
        let v = u64::from_ne_bytes(w);
        Some(if swap { v.swap_bytes() } else { v })
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < records.len() {
        let rec = &records[at..];
        let (Some(txtype), Some(reclen), Some(seq)) = (word(rec, 0), word(rec, 8), word(rec, 24))
        else {
            break;
        };
        let Ok(len) = usize::try_from(reclen) else {
            break;
        };
        if len < fz::LR_SIZE || len % 8 != 0 || len > rec.len() {
            break;
        }
        let wbp = if txtype & !fz::tx::CI == fz::tx::WRITE && len >= fz::LR_WRITE_SIZE {
            BlkPtr::from_bytes(&rec[64..192], swap).ok().filter(|b| {
                !b.is_hole() && !b.is_embedded() && b.validate("indirect write").is_ok()
            })
        } else {
            None
        };
        out.push((seq, wbp));
        at += len;
    }
    out
}

/// Read one log block named by `bp` and verify it against its verifier.
pub fn read_log_block(pool: &Pool, bp: &BlkPtr) -> Result<Vec<u8>> {
    let d = bp
        .dvas()
        .into_iter()
        .find(|d| !d.is_empty() && !d.gang)
        .ok_or_else(|| Error::corrupt("intent log block", "no usable DVA"))?;
    let top = pool.root.children.get(d.vdev as usize).ok_or_else(|| {
        Error::corrupt(
            "intent log block",
            format!("vdev {} does not exist", d.vdev),
        )
    })?;
    let fl = |t: u8, b: &[u8]| -> [u64; 4] {
        if t == cksum::ZILOG {
            ozfs_codec::checksum::fletcher2(b, false).0
        } else {
            ozfs_codec::checksum::fletcher4(b, false).0
        }
    };
    let ok = |b: &[u8]| fz::verify_log_block(b, bp, &fl).is_ok();
    top.read_block_born(
        d.offset,
        bp.psize(),
        bp.phys_birth(),
        &ok,
        &Default::default(),
    )
}

/// Walk the chain `h` names (objset `ds_obj`), reading each block, as far
/// as blocks verify. Never fails: a chain that cannot be read further ends
/// there (`Chain::error` says why when it was not simply the end).
pub fn read_chain(pool: &Pool, h: &ZilHeader, ds_obj: u64, max_blocks: Option<usize>) -> Chain {
    let _ = ds_obj;
    let mut c = Chain::default();
    let claimed = h.claim_txg != 0;
    let lr_limit = if claimed && h.flags & fz::ZIL_CLAIM_LR_SEQ_VALID != 0 {
        h.claim_lr_seq
    } else {
        u64::MAX
    };
    let blk_limit = if claimed { h.claim_blk_seq } else { u64::MAX };
    let mut bp = h.log;
    let limit = max_blocks.unwrap_or(MAX_CHAIN_BLOCKS);
    let fl = |t: u8, b: &[u8]| -> [u64; 4] {
        if t == cksum::ZILOG {
            ozfs_codec::checksum::fletcher2(b, false).0
        } else {
            ozfs_codec::checksum::fletcher4(b, false).0
        }
    };
    while !bp.is_hole() && !bp.is_embedded() && c.blocks.len() < limit {
        if bp.validate("intent log block").is_err()
            || c.blocks.iter().any(|o| o.dvas()[0] == bp.dvas()[0])
        {
            break;
        }
        let seq = bp.cksum().0[fz::ZC_SEQ];
        if seq > blk_limit {
            break;
        }
        c.blocks.push(bp);
        c.last_blk_seq = seq;
        let Ok(data) = read_log_block(pool, &bp) else {
            break;
        };
        let blk = match fz::verify_log_block(&data, &bp, &fl) {
            Ok(b) => b,
            Err(e) => {
                c.error = Some(e.to_string());
                break;
            }
        };
        c.verified += 1;
        if bp.uses_crypt() {
            // Records of an encrypted dataset are ciphertext but for their
            // `lr_t` and an indirect write's block pointer, which OpenZFS
            // leaves in the clear so that a claim needs no key.
            c.encrypted_blocks += 1;
            for (seq, wbp) in clear_parts(blk.records, blk.byteswapped) {
                if seq > lr_limit {
                    break;
                }
                c.last_lr_seq = c.last_lr_seq.max(seq);
                if let Some(w) = wbp {
                    c.indirect.push(w);
                    if claimed && w.birth() >= h.claim_txg {
                        c.claimed_data.push(w);
                    }
                }
            }
            bp = blk.next;
            continue;
        }
        match fz::parse_records(blk.records, blk.byteswapped) {
            Ok(recs) => {
                let mut stop = false;
                for r in recs {
                    if r.common.seq > lr_limit {
                        stop = true;
                        break;
                    }
                    c.last_lr_seq = c.last_lr_seq.max(r.common.seq);
                    match &r.record {
                        fz::Record::Write(w) if !w.blkptr.is_hole() && !w.blkptr.is_embedded() => {
                            c.indirect.push(w.blkptr);
                            if claimed && w.blkptr.birth() >= h.claim_txg {
                                c.claimed_data.push(w.blkptr);
                            }
                        }
                        // A clone's blocks are older than the log (OpenZFS
                        // refuses to log others) and stay their source's:
                        // nothing to claim.
                        _ => {}
                    }
                    c.records.push(r);
                }
                if stop {
                    break;
                }
            }
            Err(e) => {
                c.error = Some(format!("log block {seq}: {e}"));
                break;
            }
        }
        bp = blk.next;
    }
    // Indirect writes the claim did not take (born before it) belong to
    // the objset; only the claimed ones are the log's to free.
    if !claimed {
        c.claimed_data.clear();
    }
    c
}

/// The blocks of the intent log a `zil_header_t` names that the space
/// maps hold: the chain's blocks born at or before `max_birth` (or all of
/// them once the log was claimed), and, for a claimed log, the data of
/// its indirect writes born since the claim.
pub fn allocated_blocks(
    pool: &Pool,
    raw_header: &[u8],
    swap: bool,
    max_birth: u64,
) -> Result<Vec<BlkPtr>> {
    let Ok(h) = ZilHeader::decode(raw_header, swap) else {
        return Ok(Vec::new());
    };
    if h.log.is_hole() {
        return Ok(Vec::new());
    }
    let c = read_chain(pool, &h, 0, None);
    let claimed = h.claim_txg != 0;
    let mut out: Vec<BlkPtr> = c
        .blocks
        .into_iter()
        .filter(|b| claimed || b.birth() <= max_birth)
        .collect();
    out.extend(c.claimed_data);
    Ok(out)
}

/// The file systems of `pool` whose intent logs hold records not applied
/// to them (a pool a writer left without exporting, imported read-only):
/// (name, records, encrypted) for each — for an encrypted log, whose
/// records cannot be read without its key, the count is of log blocks. A
/// reader shows those file systems as of the last committed txg, and must
/// say so.
pub fn unreplayed(pool: &std::sync::Arc<Pool>) -> Result<Vec<(String, usize, bool)>> {
    let dsl = crate::DslPool::open(pool.clone())?;
    let root = dsl.root()?;
    let last = pool.uberblock.txg;
    let mut out = Vec::new();
    for ds in dsl.list(&root, false, None)? {
        if ds.ds.bp.is_hole() {
            continue;
        }
        let Ok(os) = ozfs_dmu::objset::Objset::open(pool.clone(), &ds.ds.bp) else {
            continue;
        };
        let Ok(h) = ZilHeader::decode(&os.phys.zil_header, os.swap) else {
            continue;
        };
        if h.log.is_hole() {
            continue;
        }
        let c = read_chain(pool, &h, ds.ds_obj, None);
        let n = c
            .records
            .iter()
            .filter(|r| {
                r.common.seq > h.replay_seq
                    && if h.claim_txg != 0 {
                        r.common.txg >= h.claim_txg
                    } else {
                        r.common.txg > last
                    }
            })
            .count();
        if c.encrypted_blocks > 0 {
            out.push((ds.name.clone(), c.encrypted_blocks, true));
        } else if n > 0 {
            out.push((ds.name.clone(), n, false));
        }
    }
    Ok(out)
}
