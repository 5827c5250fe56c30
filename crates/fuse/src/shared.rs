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
//!
//! Once the pool's writer is retired (export) a guard holds no writer
//! ([`Guard::writer_held`] is false): requests answer EIO, syncs fail with
//! an error; nothing touches the writer then.
//!
//! [`Mounted::unmount`] never blocks for ever: it refuses a mount hidden
//! under another mount (its path leads elsewhere: unmounting by path would
//! fail or hit the wrong file system), and after the kernel let go of the
//! mount it waits a bounded time for the serving thread, aborts the FUSE
//! connection (fusectl) if the thread is still blocked (a copy of the mount
//! in another mount namespace keeps it alive), and finally leaves the
//! thread to end on its own. A mount gone from this namespace while its
//! connection stays open (a copy in another namespace) has its connection
//! aborted by a watcher ([`watch_mount`]), for `ozfs mount` as for the
//! daemon.

use crate::{log_err, State};
pub use ozfs_dsl::shared::{Lease, SharedWriter, Writer};
use ozfs_format::Error;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

impl Guard<'_> {
    /// Whether the pool's writer may be used through this guard: always
    /// for a state with its own writer, and for a shared one unless the
    /// pool was retired (exported) under the mount.
    pub fn writer_held(&self) -> bool {
        match &self.0.writer {
            Writer::Own(_) => true,
            Writer::Shared(l) => l.held(),
        }
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

/// The final sync of a mount's state ([`State::close`]); without the
/// pool's writer (retired) the state is only marked closed.
pub fn close(st: &Mutex<State>) -> Result<(), Error> {
    let mut g = lock(st);
    if !g.writer_held() {
        g.closed = true;
        return Err(Error::Invalid(
            "the pool is no longer imported: nothing synced".into(),
        ));
    }
    g.close()
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
    let known = {
        let mut g = lock(state);
        if !g.writer_held() {
            return;
        }
        g.kernel_known()
    };
    let Some((n, entries, inos)) = known else {
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
    /// The kernel's id of the mount and its device (`/proc/self/mountinfo`
    /// just after mounting): which mount is ours among those on a path.
    mount: Option<MountId>,
}

/// A mount as `/proc/self/mountinfo` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountId {
    pub id: u64,
    pub parent: u64,
    /// The anonymous device's minor: the FUSE connection's number in fusectl.
    pub dev_minor: u64,
}

/// Every mount of this process's namespace: (id, parent id, device minor,
/// mount point as raw bytes, unescaped).
fn mount_table() -> Vec<(MountId, Vec<u8>)> {
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    parse_mount_table(&info)
}

/// [`mount_table`] from mountinfo's bytes.
fn parse_mount_table(info: &[u8]) -> Vec<(MountId, Vec<u8>)> {
    let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    info.split(|&b| b == b'\n')
        .filter_map(|l| {
            let f: Vec<&[u8]> = l.split(|&b| b == b' ').collect();
            let id = num(f.first()?)?;
            let parent = num(f.get(1)?)?;
            let dev = f.get(2)?;
            let colon = dev.iter().position(|&b| b == b':')?;
            let dev_minor = num(&dev[colon + 1..])?;
            Some((
                MountId {
                    id,
                    parent,
                    dev_minor,
                },
                unescape(f.get(4)?),
            ))
        })
        .collect()
}

/// A mountinfo path with its `\ooo` escapes decoded.
fn unescape(p: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        if p[i] == b'\\'
            && i + 3 < p.len()
            && p[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (p[i + 1] - b'0') as u32 * 64
                + (p[i + 2] - b'0') as u32 * 8
                + (p[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(p[i]);
            i += 1;
        }
    }
    out
}

/// Whether path `a` is `b` or one of its ancestors (as text, by component).
fn covers(a: &[u8], b: &[u8]) -> bool {
    a == b || a == b"/" || (b.starts_with(a) && b.get(a.len()) == Some(&b'/'))
}

/// The newest mount on `mountpoint` (the one just made).
pub(crate) fn newest_on(mountpoint: &Path) -> Option<MountId> {
    let want = mountpoint.as_os_str().as_bytes();
    mount_table()
        .into_iter()
        .rev()
        .find(|(_, p)| p.as_slice() == want)
        .map(|(m, _)| m)
}

/// Where mount `m` on `mountpoint` stands now: `Ok(true)` reachable by
/// its path, `Ok(false)` gone from the table, `Err` hidden under (or
/// moved by) another mount made later on its path or an ancestor of it.
fn reachable(m: &MountId, mountpoint: &Path) -> Result<bool, String> {
    let table = mount_table();
    let want = mountpoint.as_os_str().as_bytes();
    let Some((_, at)) = table
        .iter()
        .find(|(x, _)| x.id == m.id && x.dev_minor == m.dev_minor)
    else {
        return Ok(false);
    };
    if at.as_slice() != want {
        return Err(format!(
            "the mount moved to {}",
            String::from_utf8_lossy(at)
        ));
    }
    // The mounts ours stands on: its parent chain.
    let mut chain = vec![m.id];
    let mut cur = m.parent;
    while !chain.contains(&cur) {
        chain.push(cur);
        match table.iter().find(|(x, _)| x.id == cur) {
            Some((x, _)) => cur = x.parent,
            None => break,
        }
    }
    // A mount on our path or above it, made on top of our chain, or one
    // stacked on our own root: it hides us.
    for (x, p) in &table {
        let over_us = x.parent == m.id && p.as_slice() == want;
        if over_us || (!chain.contains(&x.id) && chain[1..].contains(&x.parent) && covers(p, want))
        {
            return Err(format!(
                "hidden under another mount on {}",
                String::from_utf8_lossy(p)
            ));
        }
    }
    Ok(true)
}

/// Abort FUSE connection `minor` through fusectl (mounted at its usual
/// place first if nobody did): the serving thread's read then fails.
pub(crate) fn abort_connection(minor: u64) {
    let dir = Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) {
        // SAFETY: mounting the FUSE control file system with constant
        // arguments (root only; an error leaves things as they were).
        unsafe {
            libc::mount(
                c"fusectl".as_ptr(),
                c"/sys/fs/fuse/connections".as_ptr(),
                c"fusectl".as_ptr(),
                0,
                std::ptr::null(),
            );
        }
    }
    let _ = std::fs::write(dir.join(minor.to_string()).join("abort"), b"1");
}

/// Watch mount `m` until `stop`: once it is gone from this process's
/// mount namespace while the request loop still runs — a copy of it lives
/// on in another namespace (made while it was mounted), which keeps the
/// connection open and the loop blocked in its read — abort the
/// connection (after a second of grace), so that the loop ends, the last
/// txg is synced and the server exits.
pub(crate) fn watch_mount(m: MountId, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("ozfs-mount-watch".into())
        .spawn(move || {
            use std::io::{Read, Seek};
            use std::os::fd::AsRawFd;
            // The kernel wakes a poll(POLLPRI) of mountinfo when the mount
            // table changes; reading it through the same descriptor
            // re-arms the wake-up. So a watcher costs nothing while no
            // mount changes (no polling of the table by every mount).
            let Ok(mut info) = std::fs::File::open("/proc/self/mountinfo") else {
                return;
            };
            let mut buf = Vec::new();
            let mut gone_since: Option<Instant> = None;
            while !stop.load(Ordering::Relaxed) {
                let mut pfd = libc::pollfd {
                    fd: info.as_raw_fd(),
                    events: libc::POLLPRI,
                    revents: 0,
                };
                let wait = if gone_since.is_some() { 250 } else { 2000 };
                // SAFETY: one pollfd of a descriptor we own.
                unsafe { libc::poll(&mut pfd, 1, wait) };
                buf.clear();
                if info.rewind().is_err() || info.read_to_end(&mut buf).is_err() {
                    // Unknown is not gone: never abort a live connection
                    // because the table could not be read.
                    continue;
                }
                let present = parse_mount_table(&buf)
                    .iter()
                    .any(|(x, _)| x.id == m.id && x.dev_minor == m.dev_minor);
                match (present, gone_since) {
                    (true, _) => gone_since = None,
                    (false, None) => gone_since = Some(Instant::now()),
                    (false, Some(t)) if t.elapsed() >= Duration::from_secs(1) => {
                        if !stop.load(Ordering::Relaxed) {
                            abort_connection(m.dev_minor);
                        }
                        return;
                    }
                    (false, Some(_)) => {}
                }
            }
        });
}

/// Mount `st`'s file system on `mountpoint` and serve it from a new thread
/// (plus a timer thread for the periodic txg sync). Signals are left to the
/// caller.
pub fn spawn(st: Arc<Mutex<State>>, mountpoint: &Path) -> std::io::Result<Mounted> {
    let canon = mountpoint.canonicalize()?;
    spawn_on(st, &canon, &canon, None)
}

/// [`spawn`] mounting on `target` — `/proc/self/fd/N` of a mountpoint
/// directory the caller opened and checked, so that no path is resolved
/// again — whose path (as the mount table shows it) is `mountpoint`.
/// With `keep` (the descriptor `target` names) ozfs mounts on `target`
/// itself, so the mount lands on the checked directory and no path is
/// resolved again (`open_session_at`); `keep` stays open as long as the
/// session.
pub fn spawn_on(
    st: Arc<Mutex<State>>,
    target: &Path,
    mountpoint: &Path,
    keep: Option<std::os::fd::OwnedFd>,
) -> std::io::Result<Mounted> {
    let (mut session, mountpoint, interval) =
        crate::open_session_at(&st, target, mountpoint.to_path_buf(), keep.is_some())?;
    let mount = newest_on(&mountpoint);
    let stop = Arc::new(AtomicBool::new(false));
    crate::spawn_txg_timer(st.clone(), stop.clone(), interval);
    if let Some(m) = mount {
        watch_mount(m, stop.clone());
    }
    let thread = {
        let st = st.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let res = session.run();
            stop.store(true, Ordering::Relaxed);
            drop(session); // destroy() → final sync
            drop(keep);
            if let Err(e) = close(&st) {
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
        mount,
    })
}

/// How long [`Mounted::unmount`] waits for the serving thread after the
/// kernel let go of the mount, before aborting the connection, and again
/// after: `OZFS_UNMOUNT_WAIT_MS`, 5000 by default.
fn unmount_wait() -> Duration {
    let ms = std::env::var("OZFS_UNMOUNT_WAIT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(5000);
    Duration::from_millis(ms)
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
        let mut g = lock(&self.state);
        if !g.writer_held() {
            return Err(Error::Invalid("the pool is no longer imported".into()));
        }
        g.sync()
    }

    /// Whether the pool's queued writes failed (no sync can succeed
    /// until the pool is imported again).
    pub fn writes_failed(&self) -> bool {
        let g = lock(&self.state);
        !g.writer_held() || g.writer.pool.writeback.failed().is_some()
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

    /// Unmount (EBUSY when in use: then it stays mounted) and wait, a
    /// bounded time, for the final sync. A mount hidden under another one
    /// (or moved) is refused with ENOENT and stays mounted. Must not be
    /// called while holding the pool's writer (nor a lock a request
    /// waits for).
    pub fn unmount(&mut self) -> std::io::Result<()> {
        if !self.finished() {
            let still = match &self.mount {
                Some(m) => reachable(m, &self.mountpoint).map_err(|why| {
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("{}: {why}", self.mountpoint.display()),
                    )
                })?,
                None => true,
            };
            if still {
                let c = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())
                    .map_err(std::io::Error::other)?;
                // SAFETY: unmounting our own mount point by path, never
                // through a symbolic link as its last component.
                if unsafe { libc::umount2(c.as_ptr(), libc::UMOUNT_NOFOLLOW) } != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EPERM) {
                        return Err(e);
                    }
                    // Not root: the setuid helper unmounts for us.
                    let st = std::process::Command::new("fusermount")
                        .arg("-u")
                        .arg(&self.mountpoint)
                        .status()?;
                    if !st.success() {
                        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
                    }
                }
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Let go of the mount without waiting (shutdown, after a failed
    /// unmount): detached lazily when its path still leads to it, and its
    /// FUSE connection aborted when hidden (a lazy unmount by path would
    /// detach whatever hides it).
    pub fn detach(&mut self) {
        if self.finished() {
            return;
        }
        let Some(m) = self.mount else {
            return;
        };
        match reachable(&m, &self.mountpoint) {
            Ok(true) => {
                if let Ok(c) = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes()) {
                    // SAFETY: lazy unmount of our own mount point, by a
                    // path that leads to it now.
                    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
                }
            }
            Ok(false) => {}
            Err(_) => abort_connection(m.dev_minor),
        }
    }

    /// Wait for the serving thread: a bounded time, then abort its FUSE
    /// connection and wait again, then leave it (it ends on its own).
    fn join(&mut self) -> std::io::Result<()> {
        let wait = |t: &JoinHandle<_>| {
            let t0 = Instant::now();
            while !t.is_finished() && t0.elapsed() < unmount_wait() {
                std::thread::sleep(Duration::from_millis(10));
            }
            t.is_finished()
        };
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        let mut done = wait(&t);
        if !done {
            if let Some(m) = &self.mount {
                crate::log_err(
                    "unmount",
                    &Error::Invalid(format!(
                        "{}: the FUSE connection outlives the mount: aborting it",
                        self.mountpoint.display()
                    )),
                );
                abort_connection(m.dev_minor);
                done = wait(&t);
            }
        }
        if !done {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "{}: unmounted, but its server thread did not end",
                    self.mountpoint.display()
                ),
            ));
        }
        t.join()
            .unwrap_or_else(|_| Err(std::io::Error::other("mount thread panicked")))
    }
}
