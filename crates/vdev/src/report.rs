//! Error reports from the vdev tree: the facts behind OpenZFS's
//! `ereport.fs.zfs.checksum`, `ereport.fs.zfs.io` and
//! `resource.fs.zfs.statechange` events, handed to whoever listens.
//!
//! Theory: in OpenZFS the I/O pipeline posts an ereport into the kernel's
//! event queue at the moment it charges a device an error. In ozfs the
//! process that holds pools (the daemon) keeps that queue, but the vdev
//! tree sits far below it and must not know it. So the tree only *reports*
//! — a [`VdevReport`] naming the vdev, the kind of error and the I/O it
//! happened to — through a process-wide [`ReportSink`] that the holder
//! installs with [`set_sink`]; with no sink installed (every short-lived
//! command) a report costs one atomic load and goes nowhere.
//!
//! Invariants:
//! * a report is made exactly where a counter of [`crate::VdevStats`] is
//!   charged (checksum, read or write error) or where a leaf is taken out
//!   of service, never elsewhere, so the events agree with `zpool status`;
//! * the sink is called on the I/O path, possibly with pool locks held: it
//!   must not block on anything that could wait for I/O (the daemon's sink
//!   only takes its own leaf locks).

use std::sync::{Arc, RwLock};

/// What happened to a vdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportKind {
    /// Its bytes were proven wrong (`ereport.fs.zfs.checksum`).
    Checksum,
    /// A read (`write == false`) or write failed (`ereport.fs.zfs.io`);
    /// `errno` is the OS error when there was one (else EIO).
    Io { write: bool, errno: i32 },
    /// A leaf was taken out of service (`resource.fs.zfs.statechange`):
    /// `removed` when the device went away, else too many errors.
    Faulted { removed: bool },
}

/// One report: the vdev (as the tree knows it) and the I/O.
#[derive(Debug, Clone)]
pub struct VdevReport {
    pub kind: ReportKind,
    pub vdev_guid: u64,
    /// Config type: disk, file, mirror, raidz, …
    pub vdev_type: String,
    pub vdev_path: Option<String>,
    /// Offset of the I/O on the vdev (leaves: on the device, past the
    /// front labels, as OpenZFS reports `zio_offset`) and its size.
    pub offset: u64,
    pub size: u64,
    /// The vdev's error counters after this charge: (read, write, cksum).
    pub errors: (u64, u64, u64),
}

/// Where reports go.
pub type ReportSink = Arc<dyn Fn(&VdevReport) + Send + Sync>;

static SINK: RwLock<Option<ReportSink>> = RwLock::new(None);
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Install (or, with `None`, remove) the process's report sink.
pub fn set_sink(sink: Option<ReportSink>) {
    let on = sink.is_some();
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
    INSTALLED.store(on, std::sync::atomic::Ordering::Release);
}

/// Hand a report to the sink, if one is installed. `make` builds it only
/// then.
pub fn report(make: impl FnOnce() -> VdevReport) {
    if !INSTALLED.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let sink = SINK.read().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(s) = sink {
        s(&make());
    }
}
