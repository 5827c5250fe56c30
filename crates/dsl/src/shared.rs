//! One pool writer passed around like a baton.
//!
//! A pool has exactly one writer ([`PoolWriter`]): its open txg holds the
//! changes of every file system of the pool. When several users in one
//! process need it (the daemon's mounted datasets and the operations it
//! runs for the command line), a [`SharedWriter`] holds it, and whoever
//! holds a [`Lease`] owns it (by value, moved out of the shared slot) while
//! everybody else waits until it is put back.
//!
//! Invariants: at most one `PoolWriter` value exists per pool in a process
//! and at most one lease holds it; a lease that is released remembers the
//! txg it saw, so its next [`Lease::acquire`] tells whether somebody else
//! synced meanwhile; after [`SharedWriter::retire`] (export) no lease can
//! be taken again.

use crate::sync::PoolWriter;
use ozfs_format::Error;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A pool's writer as its user sees it: owned by one process-local user,
/// or leased from a [`SharedWriter`].
pub enum Writer {
    Own(PoolWriter),
    Shared(Lease),
}

impl Deref for Writer {
    type Target = PoolWriter;
    fn deref(&self) -> &PoolWriter {
        match self {
            Writer::Own(w) => w,
            Writer::Shared(l) => l,
        }
    }
}

impl DerefMut for Writer {
    fn deref_mut(&mut self) -> &mut PoolWriter {
        match self {
            Writer::Own(w) => w,
            Writer::Shared(l) => l,
        }
    }
}

struct Slot {
    writer: Option<PoolWriter>,
    /// Set when the pool was exported/released: no more leases.
    gone: bool,
}

/// One pool's writer, shared by its mounted datasets and the daemon's operations.
#[derive(Clone)]
pub struct SharedWriter(Arc<(Mutex<Slot>, Condvar)>);

fn lock_slot(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl SharedWriter {
    pub fn new(w: PoolWriter) -> SharedWriter {
        SharedWriter(Arc::new((
            Mutex::new(Slot {
                writer: Some(w),
                gone: false,
            }),
            Condvar::new(),
        )))
    }

    /// Wait for the writer and take it (it comes back when the lease drops).
    fn take(&self) -> Result<PoolWriter, Error> {
        let (m, cv) = &*self.0;
        let mut g = lock_slot(m);
        loop {
            if g.gone {
                return Err(Error::Invalid("the pool is no longer imported".into()));
            }
            if let Some(w) = g.writer.take() {
                return Ok(w);
            }
            g = match cv.wait(g) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }

    fn put(&self, w: PoolWriter) {
        let (m, cv) = &*self.0;
        lock_slot(m).writer = Some(w);
        cv.notify_all();
    }

    /// A held lease: exclusive use of the writer until it is dropped.
    pub fn lease(&self) -> Result<Lease, Error> {
        let w = self.take()?;
        Ok(Lease {
            seen_txg: w.txg,
            sw: self.clone(),
            w: Some(w),
        })
    }

    /// Take the writer for good (export): later leases fail.
    pub fn retire(&self) -> Result<PoolWriter, Error> {
        let w = self.take()?;
        let (m, cv) = &*self.0;
        lock_slot(m).gone = true;
        cv.notify_all();
        Ok(w)
    }
}

/// A claim on a [`SharedWriter`]; dereferences to the writer while held.
pub struct Lease {
    sw: SharedWriter,
    w: Option<PoolWriter>,
    /// The writer's txg when this lease last released it.
    seen_txg: u64,
}

impl Lease {
    /// Take the writer (blocking); true when somebody else synced since
    /// this lease last held it.
    pub fn acquire(&mut self) -> Result<bool, Error> {
        if self.w.is_some() {
            return Ok(false);
        }
        let w = self.sw.take()?;
        let moved = w.txg != self.seen_txg;
        self.w = Some(w);
        Ok(moved)
    }

    /// Whether this lease holds the writer now (after an [`acquire`]
    /// that failed because the pool was retired, it does not).
    ///
    /// [`acquire`]: Lease::acquire
    pub fn held(&self) -> bool {
        self.w.is_some()
    }

    pub fn release(&mut self) {
        if let Some(w) = self.w.take() {
            self.seen_txg = w.txg;
            self.sw.put(w);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release();
    }
}

impl Deref for Lease {
    type Target = PoolWriter;
    fn deref(&self) -> &PoolWriter {
        self.w
            .as_ref()
            .expect("ozfs: pool writer used without holding it")
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut PoolWriter {
        self.w
            .as_mut()
            .expect("ozfs: pool writer used without holding it")
    }
}
