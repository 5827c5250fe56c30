//! Simulated block devices for fast, deterministic, in-process tests.
//!
//! Theory. A real disk has a volatile write cache: a completed write is
//! visible to later reads at once but survives power loss only after a
//! flush (a cache flush / FUA, `fdatasync` for files). Writes still in the
//! cache at power loss may each survive or not, in any combination. A
//! correct writer therefore never depends on an unflushed write, and never
//! overwrites a block the last durable uberblock can reach. [`SimDevice`]
//! models exactly that: an in-memory *current* image (what reads see), a
//! *durable* image, and the list of *pending* writes made since the last
//! flush. [`SimDevice::crash`] produces the device as it is after power
//! loss: the durable image plus a seeded-random subset of the pending
//! writes (optionally torn at sector granularity).
//!
//! Faults are seeded too: read errors (with a probability or on chosen
//! byte ranges), silent corruption of what a read returns (a bit flipped in
//! the caller's buffer, never in the image), and write errors. A *crash
//! point* ([`SimDevice::crash_after_writes`]) counts writes from the moment
//! it is armed: the first `n` go through, the `n`-th and every later one
//! fail or are silently dropped, and from then on flushes make nothing
//! durable (the power is off). Devices of one pool can share one crash
//! point ([`share_crash_point`]) so that the power fails for all of them
//! at once, counted over all their writes.
//!
//! Pool code opens devices by path; [`register`] makes a device reachable
//! as the path `sim:NAME` through [`crate::device::open_path`].
//!
//! Invariants:
//! * Reads never change the images; an injected corruption is applied to
//!   the returned buffer only.
//! * `durable` only ever changes at a flush before the crash point trips,
//!   and then becomes exactly `current` (pending writes applied in order).
//! * A run with the same seed and the same sequence of calls behaves the
//!   same: every random choice comes from the device's own PRNG.
//! * Out-of-range I/O is an error, as for a file device; nothing here panics
//!   on caller input.

use crate::device::BlockDevice;
use ozfs_format::{Error, Result};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Path prefix of registered simulated devices.
pub const PREFIX: &str = "sim:";

/// Granularity of the images (and of torn writes: whole pages survive).
pub const PAGE: u64 = 4096;

/// Torn writes lose whole sectors of this size.
pub const SECTOR: u64 = 512;

/// A small, fast, seedable PRNG (splitmix64).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// Injected faults. Ranges are byte ranges of the device; an I/O faults
/// when it overlaps one.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Probability that a read fails (EIO).
    pub read_error_prob: f64,
    /// Reads overlapping these ranges fail.
    pub read_error_ranges: Vec<Range<u64>>,
    /// Probability that a read returns one flipped bit.
    pub corrupt_read_prob: f64,
    /// Reads overlapping these ranges return one flipped bit (inside the range).
    pub corrupt_read_ranges: Vec<Range<u64>>,
    /// Probability that a write fails (nothing is written).
    pub write_error_prob: f64,
    /// Writes overlapping these ranges fail.
    pub write_error_ranges: Vec<Range<u64>>,
}

/// What happens to writes at and after a tripped crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// The write fails with EIO (the writer sees its device die).
    Fail,
    /// The write reports success but is never durable (power loss the
    /// writer does not notice: it goes on as if all were well).
    Drop,
}

/// Which pending (unflushed) writes survive [`SimDevice::crash_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Each kept or dropped at random (seeded).
    Random,
    /// Each kept or dropped at random; a kept write of several sectors may
    /// be torn (only some of its sectors survive).
    RandomTorn,
    /// Every pending write survives.
    All,
    /// No pending write survives.
    None,
}

/// A write counter that stops the power after a number of writes; shared
/// by the devices of one simulated machine.
#[derive(Debug)]
pub struct CrashPoint {
    seen: AtomicU64,
    /// Every write counted, armed or not (the trace clock).
    clock: AtomicU64,
    limit: AtomicU64,
    mode: AtomicU8,
    tripped: AtomicBool,
}

impl Default for CrashPoint {
    fn default() -> Self {
        CrashPoint {
            seen: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            mode: AtomicU8::new(0),
            tripped: AtomicBool::new(false),
        }
    }
}

impl CrashPoint {
    /// Count one write: its clock value, and `None` if it goes through,
    /// else what happens to it.
    fn on_write(&self) -> (u64, Option<CrashMode>) {
        let at = self.clock.fetch_add(1, Ordering::SeqCst);
        let limit = self.limit.load(Ordering::SeqCst);
        if limit == u64::MAX {
            return (at, None);
        }
        let i = self.seen.fetch_add(1, Ordering::SeqCst);
        if i < limit && !self.tripped.load(Ordering::SeqCst) {
            return (at, None);
        }
        self.tripped.store(true, Ordering::SeqCst);
        (at, Some(self.mode()))
    }

    fn mode(&self) -> CrashMode {
        if self.mode.load(Ordering::SeqCst) == 1 {
            CrashMode::Drop
        } else {
            CrashMode::Fail
        }
    }

    fn arm(&self, n: u64, mode: CrashMode) {
        self.seen.store(0, Ordering::SeqCst);
        self.tripped.store(false, Ordering::SeqCst);
        self.mode
            .store(u8::from(mode == CrashMode::Drop), Ordering::SeqCst);
        self.limit.store(n, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.limit.store(u64::MAX, Ordering::SeqCst);
        self.tripped.store(false, Ordering::SeqCst);
    }

    fn tripped(&self) -> bool {
        self.tripped.load(Ordering::SeqCst)
    }
}

/// A sparse byte image in pages shared copy-on-write between images
/// (absent pages read as zeros), so copying an image is cheap.
#[derive(Debug, Clone, Default)]
struct Image {
    pages: HashMap<u64, Arc<Vec<u8>>>,
}

impl Image {
    fn read(&self, buf: &mut [u8], offset: u64) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (pg, within) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - within).min(buf.len() - done);
            match self.pages.get(&pg) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    fn write(&mut self, buf: &[u8], offset: u64) {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (pg, within) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - within).min(buf.len() - done);
            let page = self
                .pages
                .entry(pg)
                .or_insert_with(|| Arc::new(vec![0u8; PAGE as usize]));
            Arc::make_mut(page)[within..within + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
    }
}

/// One step of a recorded trace; `at` is the write clock (see
/// [`SimDevice::write_clock`]) when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOp {
    Write { at: u64, offset: u64, data: Vec<u8> },
    Flush { at: u64 },
}

/// Counters of the I/O a device served (faulted I/O included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SimStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Reads failed or corrupted, writes failed, by injection.
    pub read_errors: u64,
    pub corrupted_reads: u64,
    pub write_errors: u64,
    /// Writes dropped or failed because the crash point had tripped.
    pub crashed_writes: u64,
}

#[derive(Debug)]
struct State {
    current: Image,
    durable: Image,
    /// Writes since the last flush, in order: (offset, bytes).
    pending: Vec<(u64, Vec<u8>)>,
    rng: SplitMix64,
    faults: Faults,
    stats: SimStats,
    crash_point: Arc<CrashPoint>,
    /// The writes and flushes, when recording.
    trace: Option<Vec<TraceOp>>,
}

/// An in-memory block device with a volatile write cache, seeded faults and
/// a crash point (see the module comment).
#[derive(Debug)]
pub struct SimDevice {
    name: String,
    size: u64,
    state: Mutex<State>,
}

fn overlaps(ranges: &[Range<u64>], off: u64, len: u64) -> Option<Range<u64>> {
    let end = off.saturating_add(len);
    ranges
        .iter()
        .find(|r| r.start < end && off < r.end)
        .map(|r| r.start.max(off)..r.end.min(end))
}

/// An EIO whose message says the fault was injected and why.
fn eio(what: String, why: &str) -> Error {
    Error::io(
        format!("{what} (injected fault: {why})"),
        std::io::Error::from_raw_os_error(5),
    )
}

impl SimDevice {
    /// A zero-filled device of `size` bytes; `seed` drives every random choice.
    pub fn new(name: &str, size: u64, seed: u64) -> Arc<SimDevice> {
        Arc::new(SimDevice {
            name: format!("{PREFIX}{name}"),
            size,
            state: Mutex::new(State {
                current: Image::default(),
                durable: Image::default(),
                pending: Vec::new(),
                rng: SplitMix64::new(seed),
                faults: Faults::default(),
                stats: SimStats::default(),
                crash_point: Arc::new(CrashPoint::default()),
                trace: None,
            }),
        })
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registry name (the path without `sim:`).
    pub fn short_name(&self) -> &str {
        self.name.strip_prefix(PREFIX).unwrap_or(&self.name)
    }

    /// Replace the injected faults.
    pub fn set_faults(&self, f: Faults) {
        self.st().faults = f;
    }

    /// The injected faults in force.
    pub fn faults(&self) -> Faults {
        self.st().faults.clone()
    }

    /// Reseed the PRNG.
    pub fn reseed(&self, seed: u64) {
        self.st().rng = SplitMix64::new(seed);
    }

    /// I/O counters.
    pub fn stats(&self) -> SimStats {
        self.st().stats
    }

    /// Zero the I/O counters.
    pub fn reset_stats(&self) {
        self.st().stats = SimStats::default();
    }

    /// Start (or stop) recording a trace of the writes that reach the
    /// image and the flushes that make them durable.
    pub fn record_trace(&self, on: bool) {
        self.st().trace = on.then(Vec::new);
    }

    /// The trace recorded since the last call (recording goes on).
    pub fn take_trace(&self) -> Vec<TraceOp> {
        self.st()
            .trace
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Writes counted so far by this device's crash point (shared by the
    /// devices that share it): the clock of [`TraceOp`]s.
    pub fn write_clock(&self) -> u64 {
        self.st().crash_point.clock.load(Ordering::SeqCst)
    }

    /// This device (taken as it reads now, all durable, as the state the
    /// trace starts from) after `trace`, with the power lost when the
    /// clock reached `until`: the writes before `until` happened, flushes
    /// at or before it made what preceded them durable, and the writes
    /// still pending survive as `keep` says. The same image a live run
    /// with `crash_after_writes` in [`CrashMode::Drop`] mode produces
    /// (a writer that does not notice the crash runs as it did when the
    /// trace was taken), without running the writer again.
    pub fn replay(&self, trace: &[TraceOp], until: u64, keep: Keep, seed: u64) -> Arc<SimDevice> {
        let image = self.st().current.clone();
        let dev = Self::from_image(&self.name, self.size, image, seed);
        {
            let mut st = dev.st();
            for op in trace {
                match op {
                    TraceOp::Write { at, offset, data } if *at < until => {
                        st.current.write(data, *offset);
                        st.pending.push((*offset, data.clone()));
                    }
                    TraceOp::Flush { at } if *at <= until => {
                        let pending = std::mem::take(&mut st.pending);
                        for (off, data) in &pending {
                            st.durable.write(data, *off);
                        }
                    }
                    _ => {}
                }
            }
        }
        dev.crash_with(keep)
    }

    /// Writes not yet flushed.
    pub fn pending_writes(&self) -> usize {
        self.st().pending.len()
    }

    /// Arm the crash point: the next `n` writes go through, the `n`-th
    /// (counting from 0) and every later one `mode`; once tripped, flushes
    /// make nothing durable. Shared crash points count every sharing
    /// device's writes.
    pub fn crash_after_writes(&self, n: u64, mode: CrashMode) {
        self.st().crash_point.arm(n, mode);
    }

    /// Disarm the crash point (the power is on again for the same image).
    pub fn clear_crash_point(&self) {
        self.st().crash_point.disarm();
    }

    /// Whether the crash point has tripped.
    pub fn crashed(&self) -> bool {
        self.st().crash_point.tripped()
    }

    /// The device after power loss: durable writes kept, each pending write
    /// kept or dropped at random. A new device (same name, size; faults and
    /// crash point cleared, counters zero; its PRNG seeded from this one's).
    pub fn crash(&self) -> Arc<SimDevice> {
        self.crash_with(Keep::Random)
    }

    /// [`crash`](Self::crash) with a choice of which pending writes survive.
    pub fn crash_with(&self, keep: Keep) -> Arc<SimDevice> {
        let mut st = self.st();
        let mut image = st.durable.clone();
        let pending = std::mem::take(&mut st.pending);
        for (off, data) in &pending {
            let kept = match keep {
                Keep::All => true,
                Keep::None => false,
                Keep::Random | Keep::RandomTorn => st.rng.chance(0.5),
            };
            if !kept {
                continue;
            }
            let sectors = (data.len() as u64).div_ceil(SECTOR);
            if keep == Keep::RandomTorn && sectors > 1 && st.rng.chance(0.25) {
                for s in 0..sectors {
                    if st.rng.chance(0.5) {
                        let a = (s * SECTOR) as usize;
                        let b = ((s + 1) * SECTOR).min(data.len() as u64) as usize;
                        image.write(&data[a..b], off + a as u64);
                    }
                }
            } else {
                image.write(data, *off);
            }
        }
        st.pending = pending;
        let seed = st.rng.next_u64();
        drop(st);
        Self::from_image(&self.name, self.size, image, seed)
    }

    /// A copy of the device as reads see it now, all of it durable (a clean
    /// shutdown and a disk copy). Faults and crash point are not copied.
    pub fn fork(&self, seed: u64) -> Arc<SimDevice> {
        let image = self.st().current.clone();
        Self::from_image(&self.name, self.size, image, seed)
    }

    fn from_image(name: &str, size: u64, image: Image, seed: u64) -> Arc<SimDevice> {
        Arc::new(SimDevice {
            name: name.to_string(),
            size,
            state: Mutex::new(State {
                current: image.clone(),
                durable: image,
                pending: Vec::new(),
                rng: SplitMix64::new(seed),
                faults: Faults::default(),
                stats: SimStats::default(),
                crash_point: Arc::new(CrashPoint::default()),
                trace: None,
            }),
        })
    }

    /// Read the durable image (what would survive a crash with [`Keep::None`]).
    pub fn read_durable(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check_range(buf.len(), offset, "read")?;
        self.st().durable.read(buf, offset);
        Ok(())
    }

    /// Change the image directly (current and durable), as damage from
    /// outside the pool would: no counters, no faults.
    pub fn poke(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check_range(buf.len(), offset, "poke")?;
        let mut st = self.st();
        st.current.write(buf, offset);
        st.durable.write(buf, offset);
        Ok(())
    }

    fn check_range(&self, len: usize, offset: u64, what: &str) -> Result<()> {
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| e > self.size) {
            return Err(Error::io(
                format!("{}: {what} of {len} bytes at offset {offset:#x}", self.name),
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "beyond end of device"),
            ));
        }
        Ok(())
    }
}

/// An injected I/O error for a `kind` access of `len` bytes at `offset`:
/// on one of the chosen `ranges`, or at random with probability `p`.
fn injected_error(
    ranges: &[Range<u64>],
    p: f64,
    rng: &mut SplitMix64,
    offset: u64,
    len: u64,
    kind: &str,
) -> Option<String> {
    if overlaps(ranges, offset, len).is_some() {
        Some(format!("{kind} error on a chosen range"))
    } else if rng.chance(p) {
        Some(format!("random {kind} error"))
    } else {
        None
    }
}

impl BlockDevice for SimDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check_range(buf.len(), offset, "read")?;
        let mut st = self.st();
        st.stats.reads += 1;
        st.stats.bytes_read += buf.len() as u64;
        let len = buf.len() as u64;
        let what = || format!("{}: read of {len} bytes at offset {offset:#x}", self.name);
        let s = &mut *st;
        let (ranges, p) = (&s.faults.read_error_ranges, s.faults.read_error_prob);
        if let Some(why) = injected_error(ranges, p, &mut s.rng, offset, len, "read") {
            st.stats.read_errors += 1;
            return Err(eio(what(), &why));
        }
        st.current.read(buf, offset);
        if buf.is_empty() {
            return Ok(());
        }
        let hit = overlaps(&st.faults.corrupt_read_ranges, offset, len);
        let flip = match hit {
            Some(r) => Some(r.start - offset + st.rng.below(r.end - r.start)),
            None => {
                let p = st.faults.corrupt_read_prob;
                st.rng.chance(p).then(|| st.rng.below(len))
            }
        };
        if let Some(at) = flip {
            let bit = st.rng.below(8);
            if let Some(b) = buf.get_mut(at as usize) {
                *b ^= 1 << bit;
                st.stats.corrupted_reads += 1;
            }
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check_range(buf.len(), offset, "write")?;
        let mut st = self.st();
        st.stats.writes += 1;
        st.stats.bytes_written += buf.len() as u64;
        let len = buf.len() as u64;
        let what = || format!("{}: write of {len} bytes at offset {offset:#x}", self.name);
        let (at, crash) = st.crash_point.on_write();
        match crash {
            None => {}
            Some(CrashMode::Fail) => {
                st.stats.crashed_writes += 1;
                return Err(eio(what(), "crash point reached"));
            }
            Some(CrashMode::Drop) => {
                // Visible to this process, never durable.
                st.stats.crashed_writes += 1;
                st.current.write(buf, offset);
                return Ok(());
            }
        }
        let s = &mut *st;
        let (ranges, p) = (&s.faults.write_error_ranges, s.faults.write_error_prob);
        if let Some(why) = injected_error(ranges, p, &mut s.rng, offset, len, "write") {
            st.stats.write_errors += 1;
            return Err(eio(what(), &why));
        }
        st.current.write(buf, offset);
        st.pending.push((offset, buf.to_vec()));
        if let Some(t) = st.trace.as_mut() {
            t.push(TraceOp::Write {
                at,
                offset,
                data: buf.to_vec(),
            });
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut st = self.st();
        st.stats.flushes += 1;
        if st.crash_point.tripped() {
            if st.crash_point.mode() == CrashMode::Fail {
                return Err(eio(format!("{}: flush", self.name), "crash point reached"));
            }
            return Ok(());
        }
        let pending = std::mem::take(&mut st.pending);
        for (off, data) in &pending {
            st.durable.write(data, *off);
        }
        let at = st.crash_point.clock.load(Ordering::SeqCst);
        if let Some(t) = st.trace.as_mut() {
            t.push(TraceOp::Flush { at });
        }
        Ok(())
    }
}

/// Make every device use the first one's crash point: the power fails for
/// all at once, after writes counted over all of them.
pub fn share_crash_point(devs: &[&Arc<SimDevice>]) {
    let Some(first) = devs.first() else {
        return;
    };
    let cp = first.st().crash_point.clone();
    for d in &devs[1..] {
        d.st().crash_point = cp.clone();
    }
}

fn registry() -> MutexGuard<'static, BTreeMap<String, Arc<SimDevice>>> {
    static REG: OnceLock<Mutex<BTreeMap<String, Arc<SimDevice>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Make `dev` the device opened by path `sim:NAME` (replacing any other).
/// `name` is the device's own short name unless given otherwise.
pub fn register(name: &str, dev: Arc<SimDevice>) {
    registry().insert(name.to_string(), dev);
}

/// Forget `sim:NAME`.
pub fn unregister(name: &str) -> Option<Arc<SimDevice>> {
    registry().remove(name)
}

/// The device registered as `sim:NAME`.
pub fn lookup(name: &str) -> Option<Arc<SimDevice>> {
    registry().get(name).cloned()
}

/// The registered device a path names, if it is `sim:NAME` and registered;
/// read-only unless `writable`.
pub fn open_path(path: &str, writable: bool) -> Option<Arc<dyn BlockDevice>> {
    let dev = lookup(path.strip_prefix(PREFIX)?)?;
    if writable {
        Some(dev)
    } else {
        Some(Arc::new(ReadOnly(dev)))
    }
}

/// A registered device opened read-only: writes are refused.
struct ReadOnly(Arc<SimDevice>);

impl BlockDevice for ReadOnly {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.0.read_at(buf, offset)
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn name(&self) -> &str {
        self.0.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn read(d: &SimDevice, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        d.read_at(&mut b, off).unwrap();
        b
    }

    #[test]
    fn reads_back_writes_and_zeros() {
        let d = SimDevice::new("t-rw", MB, 1);
        assert_eq!(read(&d, 100, 10), vec![0; 10]);
        // Across a page boundary.
        let data: Vec<u8> = (0..9000u32).map(|i| i as u8).collect();
        d.write_at(&data, PAGE - 7).unwrap();
        assert_eq!(read(&d, PAGE - 7, 9000), data);
        assert!(d.read_at(&mut [0u8; 2], MB - 1).is_err());
        assert!(d.write_at(&[1u8; 2], MB - 1).is_err());
        let s = d.stats();
        assert_eq!((s.reads, s.writes, s.flushes), (2, 1, 0));
    }

    #[test]
    fn flush_makes_durable_and_crash_keeps_durable() {
        let d = SimDevice::new("t-flush", MB, 2);
        d.write_at(&[1u8; 512], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2u8; 512], 0).unwrap();
        d.write_at(&[3u8; 512], 4096).unwrap();
        assert_eq!(d.pending_writes(), 2);
        let none = d.crash_with(Keep::None);
        assert_eq!(read(&none, 0, 512), vec![1u8; 512]);
        assert_eq!(read(&none, 4096, 512), vec![0u8; 512]);
        let all = d.crash_with(Keep::All);
        assert_eq!(read(&all, 0, 512), vec![2u8; 512]);
        assert_eq!(read(&all, 4096, 512), vec![3u8; 512]);
        // Random: each write whole or not at all, and both outcomes occur.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..64 {
            let c = d.crash();
            let a = read(&c, 0, 512);
            assert!(a == vec![1u8; 512] || a == vec![2u8; 512]);
            seen.insert(a[0]);
        }
        assert_eq!(seen.len(), 2);
        // The crashed device is durable as it stands.
        let c = d.crash();
        assert_eq!(c.pending_writes(), 0);
        assert_eq!(read(&c.crash_with(Keep::None), 0, 512), read(&c, 0, 512));
    }

    #[test]
    fn torn_writes_lose_whole_sectors() {
        let d = SimDevice::new("t-torn", MB, 3);
        d.write_at(&[9u8; 8 * 512], 0).unwrap();
        let mut torn = false;
        for _ in 0..200 {
            let c = d.crash_with(Keep::RandomTorn);
            let b = read(&c, 0, 8 * 512);
            for s in b.chunks(512) {
                assert!(s.iter().all(|&x| x == s[0]), "a sector is torn inside");
            }
            let ones = b.chunks(512).filter(|s| s[0] == 9).count();
            torn |= ones > 0 && ones < 8;
        }
        assert!(torn);
    }

    #[test]
    fn same_seed_same_crash() {
        let image = |seed| {
            let d = SimDevice::new("t-seed", MB, seed);
            for i in 0..32u64 {
                d.write_at(&[i as u8 + 1; 512], i * 512).unwrap();
            }
            read(&d.crash(), 0, 32 * 512)
        };
        assert_eq!(image(7), image(7));
        assert_ne!(image(7), image(8));
    }

    #[test]
    fn crash_point_fail_and_drop() {
        let d = SimDevice::new("t-cp", MB, 4);
        d.crash_after_writes(2, CrashMode::Fail);
        d.write_at(&[1u8; 512], 0).unwrap();
        d.write_at(&[1u8; 512], 512).unwrap();
        assert!(d.write_at(&[1u8; 512], 1024).is_err());
        assert!(d.write_at(&[1u8; 512], 1536).is_err());
        assert!(d.crashed());
        assert!(d.flush().is_err());
        assert_eq!(d.stats().crashed_writes, 2);
        assert_eq!(read(&d.crash_with(Keep::All), 0, 2048)[1024..], [0u8; 1024]);

        let d = SimDevice::new("t-cp2", MB, 5);
        d.crash_after_writes(1, CrashMode::Drop);
        d.write_at(&[1u8; 512], 0).unwrap();
        d.write_at(&[2u8; 512], 512).unwrap();
        // The writer sees its write; a flush after the power failed makes nothing durable.
        assert_eq!(read(&d, 512, 512), vec![2u8; 512]);
        d.flush().unwrap();
        let c = d.crash_with(Keep::All);
        assert_eq!(read(&c, 0, 512), vec![1u8; 512]);
        assert_eq!(read(&c, 512, 512), vec![0u8; 512]);
        let c = d.crash_with(Keep::None);
        assert_eq!(read(&c, 0, 512), vec![0u8; 512]);
        d.clear_crash_point();
        assert!(!d.crashed());
    }

    #[test]
    fn shared_crash_point_counts_all_devices() {
        let a = SimDevice::new("t-sa", MB, 6);
        let b = SimDevice::new("t-sb", MB, 7);
        share_crash_point(&[&a, &b]);
        b.crash_after_writes(3, CrashMode::Fail);
        a.write_at(&[1], 0).unwrap();
        b.write_at(&[1], 0).unwrap();
        a.write_at(&[1], 1).unwrap();
        assert!(b.write_at(&[1], 1).is_err());
        assert!(a.crashed() && b.crashed());
        assert!(a.flush().is_err());
    }

    #[test]
    fn faults_on_ranges_and_at_random() {
        let d = SimDevice::new("t-f", MB, 8);
        d.write_at(&[0xAAu8; 4096], 0).unwrap();
        d.flush().unwrap();
        d.set_faults(Faults {
            read_error_ranges: std::iter::once(1000..1001).collect(),
            write_error_ranges: std::iter::once(8192..8193).collect(),
            corrupt_read_ranges: std::iter::once(2048..2049).collect(),
            ..Default::default()
        });
        assert!(d.read_at(&mut [0u8; 512], 512).is_err());
        assert_eq!(read(&d, 0, 512), vec![0xAA; 512]);
        let b = read(&d, 2048, 4);
        assert_ne!(b[0], 0xAA);
        assert_eq!((b[0] ^ 0xAA).count_ones(), 1);
        assert_eq!(&b[1..], &[0xAA; 3]);
        // The image itself is unchanged.
        let mut raw = [0u8; 1];
        d.read_durable(&mut raw, 2048).unwrap();
        assert_eq!(raw[0], 0xAA);
        assert!(d.write_at(&[1u8; 16], 8180).is_err());
        let s = d.stats();
        assert_eq!(
            (s.read_errors, s.corrupted_reads, s.write_errors),
            (1, 1, 1)
        );

        d.set_faults(Faults {
            read_error_prob: 0.3,
            corrupt_read_prob: 0.3,
            write_error_prob: 0.3,
            ..Default::default()
        });
        d.reset_stats();
        let (mut rerr, mut werr) = (0, 0);
        for i in 0..1000u64 {
            if d.read_at(&mut [0u8; 64], 0).is_err() {
                rerr += 1;
            }
            if d.write_at(&[0xAA; 64], 64 * (i % 60)).is_err() {
                werr += 1;
            }
        }
        assert!((200..400).contains(&rerr), "{rerr}");
        assert!((200..400).contains(&werr), "{werr}");
        let s = d.stats();
        assert!((100..350).contains(&s.corrupted_reads), "{s:?}");
    }

    #[test]
    fn fork_copies_current_image() {
        let d = SimDevice::new("t-fork", MB, 9);
        d.write_at(&[5u8; 100], 10).unwrap();
        let f = d.fork(1);
        d.write_at(&[6u8; 100], 10).unwrap();
        assert_eq!(read(&f.crash_with(Keep::None), 10, 100), vec![5u8; 100]);
        assert_eq!(read(&d, 10, 100), vec![6u8; 100]);
    }

    #[test]
    fn registry_opens_by_path() {
        let d = SimDevice::new("t-reg", MB, 10);
        register("t-reg", d.clone());
        let rw = crate::device::open_path(std::path::Path::new("sim:t-reg"), true).unwrap();
        rw.write_at(&[7u8; 8], 0).unwrap();
        assert_eq!(read(&d, 0, 8), vec![7u8; 8]);
        let ro = crate::device::open_path(std::path::Path::new("sim:t-reg"), false).unwrap();
        assert!(ro.write_at(&[1], 0).is_err());
        assert_eq!(ro.name(), "sim:t-reg");
        unregister("t-reg");
        assert!(crate::device::open_path(std::path::Path::new("sim:t-reg"), true).is_err());
    }

    #[test]
    fn replay_matches_a_live_crash() {
        // Two devices sharing a crash point; a little "sync": data, flush,
        // uberblock-like write, flush.
        let run = |a: &SimDevice, b: &SimDevice| {
            a.write_at(&[1u8; 512], 0).unwrap();
            b.write_at(&[1u8; 512], 0).unwrap();
            a.flush().unwrap();
            b.flush().unwrap();
            a.write_at(&[2u8; 512], 512).unwrap();
            b.write_at(&[2u8; 512], 512).unwrap();
            a.flush().unwrap();
            b.flush().unwrap();
        };
        let (a0, b0) = (SimDevice::new("t-ra", MB, 1), SimDevice::new("t-rb", MB, 2));
        let (a, b) = (a0.fork(3), b0.fork(4));
        share_crash_point(&[&a, &b]);
        a.record_trace(true);
        b.record_trace(true);
        let start = a.write_clock();
        run(&a, &b);
        let (ta, tb) = (a.take_trace(), b.take_trace());
        assert_eq!(ta.len(), 4);
        for n in 0..=4u64 {
            for keep in [Keep::None, Keep::All] {
                let (la, lb) = (a0.fork(5), b0.fork(6));
                share_crash_point(&[&la, &lb]);
                la.crash_after_writes(n, CrashMode::Drop);
                run(&la, &lb);
                let live = (
                    read(&la.crash_with(keep), 0, 1024),
                    read(&lb.crash_with(keep), 0, 1024),
                );
                let replayed = (
                    read(&a0.replay(&ta, start + n, keep, 7), 0, 1024),
                    read(&b0.replay(&tb, start + n, keep, 8), 0, 1024),
                );
                assert_eq!(live, replayed, "n = {n}, {keep:?}");
            }
        }
    }
}
