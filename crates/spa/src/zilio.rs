//! Intent-log I/O: the writes of log blocks and the flush that makes them
//! durable, shared by every committer waiting at the same time.
//!
//! # Theory
//!
//! An `fsync` is answered once the log blocks holding its records are on
//! stable storage: written, then the devices flushed. The flush is what
//! costs (a journal commit of the host file system, a disk cache flush), so
//! committers arriving while one flush is under way must share the next:
//! each commit is queued as a [`LogJob`] (its blocks, ready to write, and a
//! completion); one thread takes *every* job queued, writes their blocks
//! in queue order, flushes every top-level vdev once and completes them all
//! with that one result. While it works, new jobs queue up behind it and
//! form the next batch — ZFS's group commit (`zil_commit` waiters sharing
//! an lwb's write and its flush).
//!
//! Log blocks are written directly to the devices, beside the pool's
//! write-behind queue ([`crate::writeback`]): they are allocated fresh in
//! the open txg, so nothing committed names them and no queued write
//! touches their bytes; a txg sync drains this queue first
//! ([`LogIo::drain`]), so a sync never looks at a chain whose blocks are
//! still being written.
//!
//! # Invariants
//!
//! * Jobs are written in the order they were queued; a job's completion
//!   runs only after its blocks and the flush that follows them returned.
//! * A failed write or flush fails every job of its batch and every later
//!   job (the log cannot be trusted to continue a chain with a hole): the
//!   committers get the error, and the caller falls back to a txg sync.

use ozfs_format::{Error, Result};
use ozfs_vdev::Vdev;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// One log block write: `data` at `offset` of top-level vdev `vdev`.
pub struct LogWrite {
    pub vdev: u64,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// What a committer is told when its blocks are durable (or not).
pub type Completion = Box<dyn FnOnce(Result<()>) + Send>;

/// One commit: its blocks in chain order, and its completion.
pub struct LogJob {
    pub root: Arc<Vdev>,
    pub writes: Vec<LogWrite>,
    pub done: Completion,
}

#[derive(Default)]
struct State {
    queue: Vec<LogJob>,
    running: bool,
    busy: bool,
    failed: Option<String>,
    batches: u64,
    jobs: u64,
}

/// The pool's intent-log writer (see the module documentation).
#[derive(Default)]
pub struct LogIo {
    st: Mutex<State>,
    cv: Condvar,
}

impl LogIo {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a commit; its completion runs on the log thread once its
    /// blocks and a flush after them are done.
    pub fn submit(self: &Arc<Self>, job: LogJob) {
        let mut g = self.lock();
        if let Some(f) = &g.failed {
            let e = Error::Invalid(format!("the intent log stopped after a failed write: {f}"));
            drop(g);
            (job.done)(Err(e));
            return;
        }
        g.queue.push(job);
        self.cv.notify_all();
        if !g.running {
            g.running = true;
            drop(g);
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("ozfs-zil".into())
                .spawn(move || me.run());
            if spawned.is_err() {
                self.run();
            }
        }
    }

    fn run(&self) {
        let mut g = self.lock();
        loop {
            if g.queue.is_empty() {
                // Idle: wait a while for the next commit (a thread started
                // per commit would cost more than the write), then go.
                self.cv.notify_all();
                let (ng, t) = self
                    .cv
                    .wait_timeout_while(g, std::time::Duration::from_secs(2), |s| {
                        s.queue.is_empty()
                    })
                    .unwrap_or_else(|e| e.into_inner());
                g = ng;
                if t.timed_out() && g.queue.is_empty() {
                    g.running = false;
                    self.cv.notify_all();
                    return;
                }
                continue;
            }
            let batch = std::mem::take(&mut g.queue);
            let failed = g.failed.clone();
            g.busy = true;
            drop(g);
            let r = match failed {
                Some(f) => Err(f),
                None => Self::write_batch(&batch).map_err(|e| e.to_string()),
            };
            g = self.lock();
            g.batches += 1;
            g.jobs += batch.len() as u64;
            if let Err(e) = &r {
                g.failed = Some(e.clone());
            }
            drop(g);
            for job in batch {
                (job.done)(r.clone().map_err(|e| Error::Io {
                    what: "intent log write".into(),
                    source: std::io::Error::other(e),
                }));
            }
            g = self.lock();
            g.busy = false;
            self.cv.notify_all();
        }
    }

    fn write_batch(batch: &[LogJob]) -> Result<()> {
        let mut roots: Vec<&Arc<Vdev>> = Vec::new();
        for job in batch {
            for w in &job.writes {
                let top = job.root.children.get(w.vdev as usize).ok_or_else(|| {
                    Error::corrupt("intent log", format!("vdev {} does not exist", w.vdev))
                })?;
                top.write_padded(w.offset, &w.data)?;
            }
            if !roots.iter().any(|r| Arc::ptr_eq(r, &job.root)) {
                roots.push(&job.root);
            }
        }
        for r in roots {
            r.flush_all_tops()?;
        }
        Ok(())
    }

    /// Wait until every queued commit was written and completed.
    pub fn drain(&self) {
        let mut g = self.lock();
        while g.busy || !g.queue.is_empty() {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Why the log stopped, if a write or flush failed.
    pub fn failed(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// (batches written, commits completed): how many commits shared a flush.
    pub fn counters(&self) -> (u64, u64) {
        let g = self.lock();
        (g.batches, g.jobs)
    }
}
