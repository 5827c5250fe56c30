//! The pool's command history (`zpool history`), read and written as ZFS
//! keeps it in the pool (the ring buffer: `ozfs_format::history`; the MOS
//! object: `ozfs_dsl::history`).
//!
//! Reading returns typed [`Record`]s, oldest first: a command line, a
//! legacy internal event (numbered, pool version 23 and zfs-fuse), a named
//! internal event (OpenZFS), an ioctl record (OpenZFS) or something else,
//! each with when, who and where. Writing: after a request that changed a
//! pool succeeded, [`log`] appends its [`Invocation`] (the command line as
//! the user typed it, without the program name) in a txg of its own,
//! right after the change, as ZFS logs a command once its ioctl returned.
//!
//! Invariants: a damaged history is an error naming the history object,
//! never a panic; a record is written only for a change that succeeded;
//! the writer is held for the append and its sync.

use crate::error::Result;
use crate::host::{open_imported, writer_for};
use ozfs_format::{NvList, NvValue};
use serde::{Deserialize, Serialize};

/// Who ran a command, when, where, and what they typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    /// The command line without the program name (`zpool create tank sdb`).
    pub command: String,
    /// Seconds since the epoch.
    pub time: u64,
    /// Real user id.
    pub who: u64,
    pub host: String,
}

impl Invocation {
    /// `command` run now by this process's user on this host.
    pub fn now(command: String) -> Invocation {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // SAFETY: getuid cannot fail.
        let who = unsafe { libc::getuid() } as u64;
        Invocation {
            command,
            time,
            who,
            host: hostname(),
        }
    }

    /// The record ZFS writes for a command.
    fn to_nvlist(&self) -> NvList {
        let mut nv = NvList::new();
        nv.set("history time", NvValue::Uint64(self.time));
        nv.set("history command", NvValue::String(self.command.clone()));
        nv.set("history who", NvValue::Uint64(self.who));
        nv.set("history hostname", NvValue::String(self.host.clone()));
        nv.set("history zone", NvValue::String("linux".into()));
        nv
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// What one history record says.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A command line (`history command`).
    Command(String),
    /// A legacy internal event (`history internal event` number, its
    /// name when known, `history txg`, `history internal str`).
    Internal {
        event: u64,
        name: Option<&'static str>,
        txg: u64,
        text: String,
    },
    /// A named internal event (`internal_name`), with the dataset it
    /// concerns when given.
    Named {
        name: String,
        txg: u64,
        dataset: Option<(String, u64)>,
        text: String,
    },
    /// An ioctl record (`ioctl`) with its input and output lists.
    Ioctl {
        ioctl: String,
        input: Option<NvList>,
        output: Option<NvList>,
        errno: Option<i64>,
    },
    /// A record of no kind known here: its whole list.
    Unrecognized(NvList),
}

/// One history record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Seconds since the epoch (0 when absent).
    pub time: u64,
    pub who: Option<u64>,
    pub host: Option<String>,
    pub zone: Option<String>,
    pub event: Event,
}

/// The names of the legacy internal events, by number.
const LEGACY_EVENTS: [&str; 41] = [
    "invalid event",
    "pool create",
    "vdev add",
    "pool remove",
    "pool destroy",
    "pool export",
    "pool import",
    "vdev attach",
    "vdev replace",
    "vdev remove",
    "vdev online",
    "vdev offline",
    "vdev upgrade",
    "pool clear",
    "pool scrub",
    "pool property set",
    "create",
    "clone",
    "destroy",
    "destroy_begin_sync",
    "inherit",
    "property set",
    "quota set",
    "permission update",
    "permission remove",
    "permission who remove",
    "promote",
    "receive",
    "rename",
    "reservation set",
    "replay_inc_sync",
    "replay_full_sync",
    "rollback",
    "snapshot",
    "filesystem version upgrade",
    "refquota set",
    "refreservation set",
    "pool scrub done",
    "user hold",
    "user release",
    "pool split",
];

/// The typed form of one record's list. A record of a known kind missing
/// a field its kind requires is [`Event::Unrecognized`] (shown whole).
pub fn record_of(nv: &NvList) -> Record {
    let s = |k: &str| nv.get_str(k).map(str::to_string);
    let u = |k: &str| nv.get(k).and_then(NvValue::as_u64);
    let event = if let Some(c) = s("history command") {
        Event::Command(c)
    } else if let (Some(ev), Some(txg), Some(text)) = (
        u("history internal event"),
        u("history txg"),
        s("history internal str"),
    ) {
        Event::Internal {
            event: ev,
            name: usize::try_from(ev)
                .ok()
                .and_then(|i| LEGACY_EVENTS.get(i).copied()),
            txg,
            text,
        }
    } else if let (Some(name), Some(txg), Some(text)) = (
        s("internal_name"),
        u("history txg"),
        s("history internal str"),
    ) {
        Event::Named {
            name,
            txg,
            dataset: s("dsname").map(|d| (d, u("dsid").unwrap_or(0))),
            text,
        }
    } else if let Some(ioctl) = s("ioctl") {
        Event::Ioctl {
            ioctl,
            input: nv.get_nvlist("in_nvl").cloned(),
            output: nv.get_nvlist("out_nvl").cloned(),
            errno: u("errno").map(|e| e as i64),
        }
    } else {
        Event::Unrecognized(nv.clone())
    };
    Record {
        time: u("history time").unwrap_or(0),
        who: u("history who"),
        host: s("history hostname"),
        zone: s("history zone"),
        event,
    }
}

/// The history of an imported pool, oldest first (empty: it has none).
pub fn history(pool: &str) -> Result<Vec<Record>> {
    let (_, p) = open_imported(pool)?;
    let dsl =
        ozfs_dsl::DslPool::open(p).map_err(|e| e.context(&format!("cannot open '{pool}'")))?;
    records(&dsl).map_err(|e| e.context(&format!("cannot get history for '{pool}'")))
}

/// The history records of an open pool, oldest first (`zdb -h` reads a
/// pool it opened itself).
pub fn records(dsl: &ozfs_dsl::DslPool) -> Result<Vec<Record>> {
    let h = ozfs_dsl::history::read(dsl)?;
    Ok(h.map(|h| h.records.iter().map(record_of).collect())
        .unwrap_or_default())
}

/// Append `inv` to the history of `pool` and commit it.
pub fn log(pool: &str, inv: &Invocation) -> Result<()> {
    let mut w = writer_for(pool)?;
    append(&mut w, inv)?;
    w.sync()
        .map_err(|e| e.context(&format!("cannot log history for '{pool}'")))?;
    Ok(())
}

/// Append `inv` to the history in `w`'s open txg (the caller syncs): for
/// the operations that log in the txg of their change (`zpool create`).
pub fn append(w: &mut crate::PoolWriter, inv: &Invocation) -> Result<()> {
    ozfs_dsl::history::append(w, &inv.to_nvlist()).map_err(|e| e.context("cannot log history"))?;
    Ok(())
}
