//! # Write-behind: a txg's device writes, in order, on the pool's I/O thread
//!
//! A sync decides everything in memory — which blocks, where, with which
//! checksums, the uberblock that names them — and the devices then only
//! have to be told. [`WriteBack`] is the queue that tells them: every
//! device write of a sync (the blocks, the flushes, the labels, the
//! uberblock) is a job, and one I/O thread per pool runs the jobs strictly
//! in the order they were queued. The thread that synced goes on at once:
//! the FUSE session takes the next txg's requests while the last one is
//! written (OpenZFS's open and syncing txgs, here with the syncing txg's
//! CPU work done before it is handed over).
//!
//! ## Why one FIFO thread keeps every on-disk invariant
//! Crash safety rests on order alone: a txg's blocks, then a flush, then
//! its uberblock, then a flush, and no block of a committed txg
//! overwritten before the uberblock that frees it is on disk. The writer
//! queues exactly the writes it used to do itself, in the same order; the
//! queue runs them in that order. Space freed in txg N is reallocated no
//! earlier than txg N+1 (deferred frees: later still), and every write of
//! txg N+1 is behind txg N's uberblock in the queue.
//!
//! ## Reads of blocks not yet written
//! A block is readable the moment its pointer exists, which is before the
//! queue wrote it (the sync itself reads the MOS blocks of its earlier
//! passes, the next txg reads everything the last one wrote). Every queued
//! block is kept under its DVA (top-level vdev, offset) with its bytes
//! until its write ran: a read of that DVA is served from them
//! ([`WriteBack::queued`], verified by the reader like any copy), or waits
//! for the write ([`WriteBack::wait_written`]; bounded — the thread never
//! waits on a reader). Both cost one atomic load when nothing is queued.
//!
//! ## Failures
//! A job that fails (or panics) stops the queue: the jobs behind it are
//! dropped unexecuted — in particular the uberblock of the txg whose block
//! failed is never written, so the pool on disk stays the last committed
//! one — and every later [`drain`](WriteBack::drain) and
//! [`enqueue`](WriteBack::enqueue) reports the failure (OpenZFS suspends
//! the pool; here the writer stops until the pool is imported again).
//! Blocks never written stay readable from their queued bytes, so readers
//! of what is committed in memory neither fail nor blame healthy devices
//! for checksum errors.
//!
//! ## Memory
//! Queued payload is bounded (`OZFS_WRITEBACK_BYTES`, default 192 MiB,
//! room for a 64 MiB txg being written while the next one is queued):
//! [`enqueue`](WriteBack::enqueue) waits while the queue holds more.

use ozfs_format::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A queued unit of device work.
pub type Job = Box<dyn FnOnce() -> Result<()> + Send>;

struct Queued {
    job: Job,
    /// Payload bytes (counted against the queue's bound).
    bytes: u64,
    /// The DVA a block write is kept under until it ran.
    dva: Option<(u64, u64)>,
}

/// A DVA with queued writes: how many, and the bytes of the last one.
struct Pending {
    n: u32,
    data: Arc<Vec<u8>>,
}

/// A block write to queue: the DVA (top-level vdev, offset) it writes and
/// its bytes (the block as the pointer describes it, before padding).
pub type Block = (u64, u64, Arc<Vec<u8>>);

#[derive(Default)]
struct State {
    jobs: VecDeque<Queued>,
    bytes: u64,
    pending: HashMap<(u64, u64), Pending>,
    /// The first failure (message, OS error kind); the queue is stopped.
    failed: Option<(String, std::io::ErrorKind)>,
    /// An I/O thread exists (it exits when the queue is empty).
    running: bool,
    /// A job is being run (taken off `jobs`).
    busy: bool,
}

/// The pool's write-behind queue (see the module documentation).
pub struct WriteBack {
    st: Mutex<State>,
    /// Signalled whenever a job finished (or was dropped) and when the
    /// thread exits: waiters re-check their condition.
    done: Condvar,
    /// Entries in `pending` (read without the lock on the hot path).
    npending: AtomicUsize,
    limit: u64,
}

impl Default for WriteBack {
    fn default() -> Self {
        let limit = std::env::var("OZFS_WRITEBACK_BYTES")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
            .unwrap_or(192 << 20);
        WriteBack {
            st: Mutex::new(State::default()),
            done: Condvar::new(),
            npending: AtomicUsize::new(0),
            limit,
        }
    }
}

impl WriteBack {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.done.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    fn failure(f: &(String, std::io::ErrorKind)) -> Error {
        Error::Io {
            what: "a queued pool write failed earlier (export and import the pool)".into(),
            source: std::io::Error::new(f.1, f.0.clone()),
        }
    }

    /// Queue `job` behind everything queued before it. `block` names the
    /// block a write job writes (reads of it are served from its bytes
    /// until it ran). Waits while the queue holds more than its bound;
    /// fails (queuing nothing) once a queued job has failed.
    pub fn enqueue(self: &Arc<Self>, job: Job, block: Option<Block>) -> Result<()> {
        let bytes = block.as_ref().map_or(0, |b| b.2.len() as u64);
        let mut g = self.lock();
        while g.bytes > 0 && g.bytes + bytes > self.limit && g.failed.is_none() {
            g = self.wait(g);
        }
        if let Some(f) = &g.failed {
            return Err(Self::failure(f));
        }
        let dva = block.map(|(vdev, offset, data)| {
            match g.pending.entry((vdev, offset)) {
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    let p = o.get_mut();
                    p.n += 1;
                    p.data = data;
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Pending { n: 1, data });
                    self.npending.fetch_add(1, Ordering::Release);
                }
            }
            (vdev, offset)
        });
        g.bytes += bytes;
        g.jobs.push_back(Queued { job, bytes, dva });
        if !g.running {
            g.running = true;
            drop(g);
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("ozfs-writeback".into())
                .spawn(move || me.run());
            if let Err(e) = spawned {
                // No thread: run the queue here (same order, same result).
                eprintln!("ozfs: no write-behind thread ({e}); writing in the caller");
                self.run();
            }
        }
        Ok(())
    }

    /// The I/O thread: run jobs in order until the queue is empty.
    fn run(&self) {
        let mut g = self.lock();
        loop {
            let Some(q) = g.jobs.pop_front() else {
                g.running = false;
                self.done.notify_all();
                return;
            };
            let failed = g.failed.is_some();
            g.busy = true;
            drop(g);
            let r = if failed {
                Ok(())
            } else {
                // A job that panics fails the queue like one that errs:
                // the thread lives on, and waiters are told.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(q.job))
                    .unwrap_or_else(|_| Err(Error::Invalid("a queued pool write panicked".into())))
            };
            g = self.lock();
            g.busy = false;
            g.bytes -= q.bytes;
            // A block written leaves the queue; one never written (the
            // queue stopped) stays readable from its bytes: the devices do
            // not hold it, and its pointer is in memory.
            let written = !failed && r.is_ok();
            if let Some(k) = q.dva.filter(|_| written) {
                if let Some(p) = g.pending.get_mut(&k) {
                    p.n -= 1;
                    if p.n == 0 {
                        g.pending.remove(&k);
                        self.npending.fetch_sub(1, Ordering::Release);
                    }
                }
            }
            if let Err(e) = r {
                if g.failed.is_none() {
                    let kind = match &e {
                        Error::Io { source, .. } => source.kind(),
                        _ => std::io::ErrorKind::Other,
                    };
                    eprintln!("ozfs: pool write failed, later writes dropped: {e}");
                    g.failed = Some((e.to_string(), kind));
                }
            }
            self.done.notify_all();
        }
    }

    /// The bytes last queued for DVA (`vdev`, `offset`), if a write of it
    /// has not run yet.
    pub fn queued(&self, vdev: u64, offset: u64) -> Option<Arc<Vec<u8>>> {
        if self.npending.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.lock()
            .pending
            .get(&(vdev, offset))
            .map(|p| p.data.clone())
    }

    /// Wait until the block queued under DVA (`vdev`, `offset`) — every
    /// queued write of it — has been run.
    pub fn wait_written(&self, vdev: u64, offset: u64) {
        if self.npending.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut g = self.lock();
        while g.pending.contains_key(&(vdev, offset)) && g.failed.is_none() {
            g = self.wait(g);
        }
    }

    /// Wait until every queued job has run; the queue's failure if one
    /// failed (now or earlier).
    pub fn drain(&self) -> Result<()> {
        let mut g = self.lock();
        while !g.jobs.is_empty() || g.busy {
            g = self.wait(g);
        }
        match &g.failed {
            Some(f) => Err(Self::failure(f)),
            None => Ok(()),
        }
    }

    /// Whether a queued job has failed (the queue is stopped).
    pub fn failed(&self) -> Option<Error> {
        self.lock().failed.as_ref().map(Self::failure)
    }

    /// Bytes of payload queued and not yet written.
    pub fn queued_bytes(&self) -> u64 {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// Jobs run in the order queued, on another thread, and drain waits
    /// for the last one.
    #[test]
    fn jobs_run_in_order_and_drain_waits() {
        let wb = Arc::new(WriteBack::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let me = std::thread::current().id();
        for i in 0..200u64 {
            let log = log.clone();
            let job: Job = Box::new(move || {
                assert_ne!(std::thread::current().id(), me);
                if i % 50 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                log.lock().unwrap().push(i);
                Ok(())
            });
            wb.enqueue(job, Some((0, i * 512, Arc::new(vec![0; 512]))))
                .unwrap();
        }
        wb.drain().unwrap();
        assert_eq!(*log.lock().unwrap(), (0..200).collect::<Vec<_>>());
        assert_eq!(wb.queued_bytes(), 0);
        assert_eq!(wb.npending.load(Ordering::Acquire), 0);
    }

    /// A read of a queued block waits for its write, not longer.
    #[test]
    fn a_read_waits_for_its_block() {
        let wb = Arc::new(WriteBack::default());
        let written = Arc::new(AtomicU64::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (w, g) = (written.clone(), gate.clone());
        let job: Job = Box::new(move || {
            w.store(1, Ordering::SeqCst);
            Ok(())
        });
        wb.enqueue(job, Some((1, 4096, Arc::new(vec![1; 512]))))
            .unwrap();
        // A second job that holds the queue until released.
        let job: Job = Box::new(move || {
            let mut open = g.0.lock().unwrap();
            while !*open {
                open = g.1.wait(open).unwrap();
            }
            Ok(())
        });
        wb.enqueue(job, Some((1, 8192, Arc::new(vec![2; 512]))))
            .unwrap();
        // Its bytes are there while it waits; a block not queued has none.
        assert_eq!(wb.queued(1, 8192).as_deref(), Some(&vec![2u8; 512]));
        assert!(wb.queued(2, 8192).is_none());
        wb.wait_written(1, 4096);
        assert_eq!(written.load(Ordering::SeqCst), 1);
        // Not queued: no wait at all.
        wb.wait_written(2, 4096);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        wb.wait_written(1, 8192);
        wb.drain().unwrap();
    }

    /// A failed job stops the queue: what follows never runs, and drain
    /// and enqueue report it.
    #[test]
    fn a_failure_drops_what_follows() {
        let wb = Arc::new(WriteBack::default());
        let ran = Arc::new(AtomicU64::new(0));
        let job: Job = Box::new(|| {
            Err(Error::Io {
                what: "dev".into(),
                source: std::io::Error::other("boom"),
            })
        });
        wb.enqueue(job, Some((0, 0, Arc::new(vec![0; 512]))))
            .unwrap();
        let r = ran.clone();
        let job: Job = Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        // Queued behind the failure (or refused if it already failed).
        let _ = wb.enqueue(job, Some((0, 512, Arc::new(vec![0; 512]))));
        let e = wb.drain().expect_err("the failure is reported");
        assert!(e.to_string().contains("boom"), "{e}");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a job ran after a failure");
        assert!(wb.enqueue(Box::new(|| Ok(())), None).is_err());
        wb.wait_written(0, 512);
        assert!(wb.failed().is_some());
        // The failed block never reached a device: it stays readable.
        assert!(wb.queued(0, 0).is_some());
    }

    /// A job that panics fails the queue; drain returns.
    #[test]
    fn a_panic_fails_the_queue() {
        let wb = Arc::new(WriteBack::default());
        wb.enqueue(Box::new(|| panic!("job")), None).unwrap();
        let e = wb.drain().expect_err("the panic is a failure");
        assert!(e.to_string().contains("panicked"), "{e}");
    }

    /// The queue's bound holds: enqueue waits while it is full.
    #[test]
    fn the_bound_holds() {
        let wb = Arc::new(WriteBack {
            limit: 4096,
            ..Default::default()
        });
        let peak = Arc::new(AtomicU64::new(0));
        for i in 0..64u64 {
            let (p, w) = (peak.clone(), wb.clone());
            let job: Job = Box::new(move || {
                p.fetch_max(w.lock().bytes, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
                Ok(())
            });
            wb.enqueue(job, Some((0, i, Arc::new(vec![0; 1024]))))
                .unwrap();
        }
        wb.drain().unwrap();
        assert!(peak.load(Ordering::SeqCst) <= 4096);
    }
}
