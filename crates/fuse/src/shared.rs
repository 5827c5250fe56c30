//! Several mounted datasets of one pool over ONE pool writer (the daemon).
//!
//! A pool has exactly one writer: its open txg holds the changes of every
//! file system of the pool. [`SharedWriter`] passes that writer around like
//! a baton: whoever holds a [`Lease`] owns it (by value, moved out of the
//! shared slot) and everybody else waits until it is put back. A mounted
//! dataset's [`State`] keeps a `Lease` that is held exactly while a request
//! runs ([`Guard`], taken after the state's own mutex: lock order is always
//! *state, then writer*); the daemon's own commands take a `Lease` without
//! any state lock.
//!
//! When another holder synced the pool (the writer's txg moved on) the
//! state forgets its txg bookkeeping (reserved budget, dirty bytes), since
//! that sync committed and released everything of the old txg.

use crate::{log_err, State};
pub use ozfs_dsl::shared::{Lease, SharedWriter, Writer};
use ozfs_format::Error;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A locked [`State`] whose shared writer (if any) is held until the guard drops.
pub struct Guard<'a>(MutexGuard<'a, State>);

impl<'a> Guard<'a> {
    pub(crate) fn new(mut g: MutexGuard<'a, State>) -> Guard<'a> {
        if let Writer::Shared(l) = &mut g.writer {
            match l.acquire() {
                Ok(true) => {
                    // Another holder synced: our txg bookkeeping is void.
                    g.dirty_bytes = 0;
                    g.dirty_since = None;
                    g.budget = 0;
                    g.synced();
                }
                Ok(false) => {}
                // A closed state (unmounted) never touches the writer.
                Err(e) if !g.closed => log_err("pool writer", &e),
                Err(_) => {}
            }
        }
        Guard(g)
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if let Writer::Shared(l) = &mut self.0.writer {
            l.release();
        }
    }
}

impl Deref for Guard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.0
    }
}

impl DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0
    }
}

/// Lock a state (and its shared writer): for users outside the request loop.
pub fn lock(st: &Mutex<State>) -> Guard<'_> {
    Guard::new(match st.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    })
}

/// A mounted file system over dataset `ds_obj` of the pool `sw` writes.
pub fn new_state(
    sw: &SharedWriter,
    ds_obj: u64,
    recordsize: u64,
    opts: crate::Options,
) -> Result<State, Error> {
    let lease = sw.lease()?;
    let mut st = State::with_writer(Writer::Shared(lease), ds_obj, recordsize, opts)?;
    if let Writer::Shared(l) = &mut st.writer {
        l.release();
    }
    Ok(st)
}

/// [`Mounted::drop_kernel_caches`] for a mount's state (callers may hold
/// nothing: not the state, not the pool's writer, not a lock the request
/// loop could wait for).
pub fn drop_kernel_caches(state: &Mutex<State>) {
    let Some((n, entries, inos)) = lock(state).kernel_known() else {
        return;
    };
    for (parent, name) in entries {
        let _ = n.inval_entry(parent, std::ffi::OsStr::from_bytes(&name));
    }
    for ino in inos {
        let _ = n.inval_inode(ino, 0, 0);
    }
}

/// A file system mounted by [`spawn`], served by its own thread.
pub struct Mounted {
    pub mountpoint: PathBuf,
    pub state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    stop: Arc<AtomicBool>,
}

/// Mount `st`'s file system on `mountpoint` and serve it from a new thread
/// (plus a timer thread for the periodic txg sync). Signals are left to the
/// caller.
pub fn spawn(st: Arc<Mutex<State>>, mountpoint: &Path) -> std::io::Result<Mounted> {
    let (mut session, mountpoint, interval) = crate::open_session(&st, mountpoint)?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::spawn_txg_timer(st.clone(), stop.clone(), interval);
    let thread = {
        let st = st.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let res = session.run();
            stop.store(true, Ordering::Relaxed);
            drop(session); // destroy() → final sync
            if let Err(e) = lock(&st).close() {
                log_err("final sync", &e);
                return Err(std::io::Error::other(e.to_string()));
            }
            res
        })
    };
    Ok(Mounted {
        mountpoint,
        state: st,
        thread: Some(thread),
        stop,
    })
}

impl Mounted {
    /// The serving thread ended (unmounted from outside, or failed).
    pub fn finished(&self) -> bool {
        self.thread
            .as_ref()
            .map(|t| t.is_finished())
            .unwrap_or(true)
    }

    /// Sync the dataset's changes (the whole pool's open txg).
    pub fn sync(&self) -> Result<(), Error> {
        lock(&self.state).sync()
    }

    /// Whether the pool's queued writes failed (no sync can succeed
    /// until the pool is imported again).
    pub fn writes_failed(&self) -> bool {
        lock(&self.state).writer.pool.writeback.failed().is_some()
    }

    /// The file system was changed other than through this mount (a copy
    /// into it, a record stored raw): make the kernel forget every entry,
    /// attribute and cached page it holds of it, so that the next access
    /// asks again. Called without the pool's writer or the state held: the
    /// kernel takes directory locks that requests in flight may hold until
    /// the request loop answers them.
    pub fn drop_kernel_caches(&self) {
        drop_kernel_caches(&self.state)
    }

    /// Unmount (EBUSY when in use: then it stays mounted) and wait for the
    /// final sync. Must not be called while holding the pool's writer.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        if !self.finished() {
            let c = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())
                .map_err(std::io::Error::other)?;
            // SAFETY: unmounting our own mount point by path.
            if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EPERM) {
                    return Err(e);
                }
                let st = std::process::Command::new("fusermount")
                    .arg("-u")
                    .arg(&self.mountpoint)
                    .status()?;
                if !st.success() {
                    return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
                }
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("mount thread panicked"))),
            None => Ok(()),
        }
    }
}
