//! `zpool events`: the typed events the daemon queues, the queue itself,
//! and the query a front end makes.
//!
//! Theory: OpenZFS keeps recent events (ereports, sysevents, resource
//! events) in an in-kernel queue of at most `zfs_zevent_len_max` (512)
//! entries; each gets an id (`eid`, increasing for the life of the module,
//! never reused — a clear empties the queue but does not restart the ids)
//! and a time, and `zpool events` reads the queue through `/dev/zfs`. In
//! ozfs the process that holds pools is the daemon, so the daemon keeps
//! the queue ([`Ring`], in memory only: events are gone when the daemon
//! exits) and serves it over its socket (`{"cmd":"events"}`,
//! `{"cmd":"events_clear"}`); [`list`] and [`clear`] are the client side.
//! Without a daemon there are no events (an empty queue), as with
//! OpenZFS's module freshly loaded.
//!
//! An [`Event`] carries its payload as OpenZFS's nvlist would, in the same
//! order and with the same names (`version`, `class`, `pool`, `pool_guid`,
//! …, `time`, `eid`) and value kinds ([`Value`]), so the front end prints
//! `zpool events -v` as OpenZFS does without knowing any class. Only facts
//! ozfs has are included: no `ena`, `detector`, `zio_stage` and the like.
//!
//! Invariants: the ring never holds more than its capacity (the oldest
//! event is dropped first); eids strictly increase in posting order, also
//! across a clear; an event's `time` and `eid` are the last two fields of
//! its payload.

use crate::error::{Error, Result};
use ozfs_spa::Pool;
use ozfs_vdev::report::{ReportKind, VdevReport};
use ozfs_vdev::{VdevKind, VdevState};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// OpenZFS's default `zfs_zevent_len_max`.
pub const DEFAULT_LEN_MAX: usize = 512;

/// A payload value, by the kind of nvpair OpenZFS would use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    /// An integer (uint8/int32/uint64 in OpenZFS): printed in hex.
    Num(u64),
    /// A string: printed quoted.
    Str(String),
    /// A vdev state number (`vdev_state`, `vdev_laststate`): printed as
    /// its name and number.
    State(u64),
    /// An integer array (`time`: seconds, nanoseconds).
    Array(Vec<u64>),
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub eid: u64,
    /// Seconds and nanoseconds since the epoch.
    pub time: (u64, u32),
    /// e.g. `sysevent.fs.zfs.scrub_start`, `ereport.fs.zfs.checksum`.
    pub class: String,
    /// The `pool` field, when the event names a pool.
    pub pool: Option<String>,
    /// Every field, in OpenZFS's order (`time` and `eid` last).
    pub payload: Vec<(String, Value)>,
}

/// OpenZFS's vdev states (`vdev_state_t`).
pub mod state {
    pub const OFFLINE: u64 = 2;
    pub const REMOVED: u64 = 3;
    pub const CANT_OPEN: u64 = 4;
    pub const FAULTED: u64 = 5;
    pub const DEGRADED: u64 = 6;
    pub const HEALTHY: u64 = 7;

    /// The name `zpool status` gives a state (OpenZFS's
    /// `zpool_state_to_name` without auxiliary state).
    pub fn name(s: u64) -> &'static str {
        match s {
            OFFLINE => "OFFLINE",
            REMOVED => "REMOVED",
            CANT_OPEN => "UNAVAIL",
            FAULTED => "FAULTED",
            DEGRADED => "DEGRADED",
            HEALTHY => "ONLINE",
            _ => "UNKNOWN",
        }
    }
}

/// The start of every event's payload: `version`, `class` and, for an
/// event about a pool, `pool`, `pool_guid`, `pool_state` (active) and
/// `pool_context` (0: not loading), as OpenZFS's `zfs_event_create`.
pub fn pool_payload(class: &str, pool: Option<(&str, u64)>) -> Vec<(String, Value)> {
    let mut p = vec![
        ("version".to_string(), Value::Num(0)),
        ("class".to_string(), Value::Str(class.to_string())),
    ];
    if let Some((name, guid)) = pool {
        p.push(("pool".into(), Value::Str(name.to_string())));
        p.push(("pool_guid".into(), Value::Num(guid)));
        p.push(("pool_state".into(), Value::Num(0)));
        p.push(("pool_context".into(), Value::Num(0)));
    }
    p
}

/// The bounded queue of events (the daemon's; see the module docs).
#[derive(Debug)]
pub struct Ring {
    cap: usize,
    next_eid: u64,
    events: VecDeque<Event>,
}

impl Ring {
    /// An empty ring of at most `cap` (≥ 1) events; the first eid is 1.
    pub fn new(cap: usize) -> Ring {
        Ring {
            cap: cap.max(1),
            next_eid: 1,
            events: VecDeque::new(),
        }
    }

    /// Queue an event whose payload starts with `version` and `class`
    /// ([`pool_payload`]): `time` and `eid` are appended. Returns the eid.
    pub fn post(&mut self, mut payload: Vec<(String, Value)>, now: SystemTime) -> u64 {
        let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let eid = self.next_eid;
        self.next_eid += 1;
        let field = |k: &str| payload.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let class = match field("class") {
            Some(Value::Str(s)) => s,
            _ => String::new(),
        };
        let pool = match field("pool") {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        };
        let time = (d.as_secs(), d.subsec_nanos());
        payload.push(("time".into(), Value::Array(vec![time.0, time.1 as u64])));
        payload.push(("eid".into(), Value::Num(eid)));
        if self.events.len() >= self.cap {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            eid,
            time,
            class,
            pool,
            payload,
        });
        eid
    }

    /// The queued events with an eid above `after`, oldest first; with
    /// `pool`, without those naming another pool (as OpenZFS filters).
    pub fn list(&self, pool: Option<&str>, after: u64) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.eid > after)
            .filter(|e| pool.is_none_or(|p| e.pool.as_deref().is_none_or(|q| q == p)))
            .cloned()
            .collect()
    }

    /// Empty the queue; returns how many events it held. Eids go on.
    pub fn clear(&mut self) -> usize {
        let n = self.events.len();
        self.events.clear();
        n
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// What the queue knows of a vdev of a held pool, by guid.
#[derive(Debug, Clone)]
struct Ident {
    pool: String,
    pool_guid: u64,
    /// The parent vdev's guid and type (none under the root).
    parent: Option<(u64, String)>,
}

/// A leaf of a pool as events name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub guid: u64,
    pub path: Option<String>,
    /// OpenZFS's state number ([`state`]).
    pub state: u64,
}

/// The leaves of `pool`'s vdev tree, with their states.
pub fn leaves(pool: &Pool) -> Vec<Leaf> {
    let mut v = Vec::new();
    pool.root.walk(0, &mut |d, _| {
        if matches!(d.kind, VdevKind::Leaf(_)) {
            v.push(Leaf {
                guid: d.guid,
                path: d.path.clone(),
                state: state_of(d.state()),
            });
        }
    });
    v
}

fn state_of(s: VdevState) -> u64 {
    match s {
        VdevState::Online => state::HEALTHY,
        VdevState::Degraded => state::DEGRADED,
        VdevState::Faulted => state::FAULTED,
        VdevState::Unavail => state::CANT_OPEN,
        VdevState::Offline => state::OFFLINE,
        VdevState::Removed => state::REMOVED,
    }
}

/// The daemon's queue: the [`Ring`], and what turns the vdev tree's error
/// reports ([`ozfs_vdev::report`]) into events — an index from vdev guid to
/// pool, kept by the daemon as it takes, changes and lets go of pools.
///
/// Lock order: `index` before `ring`; neither is held while calling out,
/// so the report sink (called on the I/O path) never waits for a pool.
pub struct Queue {
    ring: Mutex<Ring>,
    index: Mutex<HashMap<u64, Ident>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    /// An empty queue of OpenZFS's default length.
    pub fn new() -> Arc<Queue> {
        Arc::new(Queue {
            ring: Mutex::new(Ring::new(DEFAULT_LEN_MAX)),
            index: Mutex::new(HashMap::new()),
        })
    }

    /// Make this queue the process's sink of vdev error reports.
    pub fn install(self: &Arc<Self>) {
        let q = self.clone();
        ozfs_vdev::report::set_sink(Some(Arc::new(move |r: &VdevReport| q.on_report(r))));
    }

    /// (Re)learn the vdevs of pool `name` (after it was taken or its
    /// devices changed).
    pub fn index_pool(&self, name: &str, pool: &Pool) {
        fn walk(
            v: &ozfs_vdev::Vdev,
            parent: Option<(u64, String)>,
            f: &mut dyn FnMut(u64, Option<(u64, String)>),
        ) {
            f(v.guid, parent);
            let me = (!matches!(v.kind, VdevKind::Root)).then(|| (v.guid, v.type_name.clone()));
            for c in &v.children {
                walk(c, me.clone(), f);
            }
        }
        let mut index = lock(&self.index);
        index.retain(|_, i| i.pool != name);
        walk(&pool.root, None, &mut |guid, parent| {
            index.insert(
                guid,
                Ident {
                    pool: name.to_string(),
                    pool_guid: pool.guid,
                    parent,
                },
            );
        });
    }

    /// Forget the vdevs of pool `name` (exported or released).
    pub fn forget_pool(&self, name: &str) {
        lock(&self.index).retain(|_, i| i.pool != name);
    }

    /// Queue an event (see [`Ring::post`]); returns its eid.
    pub fn post(&self, payload: Vec<(String, Value)>) -> u64 {
        lock(&self.ring).post(payload, SystemTime::now())
    }

    /// `sysevent.fs.zfs.<what>` about pool `name` (e.g. `scrub_start`).
    pub fn pool_event(&self, what: &str, name: &str, guid: u64) -> u64 {
        let class = format!("sysevent.fs.zfs.{what}");
        self.post(pool_payload(&class, Some((name, guid))))
    }

    /// `sysevent.fs.zfs.<what>` about a vdev of pool `name` (e.g.
    /// `vdev_attach`): with `vdev_guid`, `vdev_state`, `vdev_path`, as
    /// OpenZFS's `spa_event_notify` with a vdev.
    pub fn vdev_event(&self, what: &str, name: &str, guid: u64, leaf: &Leaf) -> u64 {
        let class = format!("sysevent.fs.zfs.{what}");
        let mut p = pool_payload(&class, Some((name, guid)));
        push_vdev(&mut p, leaf);
        self.post(p)
    }

    /// `resource.fs.zfs.statechange`: a vdev of pool `name` went from
    /// `last` to `leaf.state` (offline, faulted, removed).
    pub fn statechange(&self, name: &str, guid: u64, leaf: &Leaf, last: u64) -> u64 {
        let mut p = pool_payload("resource.fs.zfs.statechange", Some((name, guid)));
        push_vdev(&mut p, leaf);
        p.push(("vdev_laststate".into(), Value::State(last)));
        self.post(p)
    }

    /// Events of `pool` (all when `None`) with an eid above `after`.
    pub fn list(&self, pool: Option<&str>, after: u64) -> Vec<Event> {
        lock(&self.ring).list(pool, after)
    }

    /// Empty the queue; how many events it held.
    pub fn clear(&self) -> usize {
        lock(&self.ring).clear()
    }

    /// A report from the vdev tree: an ereport (checksum, io) or a
    /// statechange (a leaf faulted), about the pool that holds the vdev.
    fn on_report(&self, r: &VdevReport) {
        let ident = lock(&self.index).get(&r.vdev_guid).cloned();
        let pool = ident.as_ref().map(|i| (i.pool.as_str(), i.pool_guid));
        let leaf = Leaf {
            guid: r.vdev_guid,
            path: r.vdev_path.clone(),
            state: state::HEALTHY,
        };
        let p = match &r.kind {
            ReportKind::Faulted { removed } => {
                let mut p = pool_payload("resource.fs.zfs.statechange", pool);
                let new = if *removed {
                    state::REMOVED
                } else {
                    state::FAULTED
                };
                push_vdev(&mut p, &Leaf { state: new, ..leaf });
                p.push(("vdev_laststate".into(), Value::State(state::HEALTHY)));
                p
            }
            ReportKind::Checksum | ReportKind::Io { .. } => {
                let class = if r.kind == ReportKind::Checksum {
                    "ereport.fs.zfs.checksum"
                } else {
                    "ereport.fs.zfs.io"
                };
                let mut p = pool_payload(class, pool);
                p.push(("vdev_guid".into(), Value::Num(r.vdev_guid)));
                p.push(("vdev_type".into(), Value::Str(r.vdev_type.clone())));
                if let Some(path) = &r.vdev_path {
                    p.push(("vdev_path".into(), Value::Str(path.clone())));
                }
                let (re, we, ce) = r.errors;
                p.push(("vdev_read_errors".into(), Value::Num(re)));
                p.push(("vdev_write_errors".into(), Value::Num(we)));
                p.push(("vdev_cksum_errors".into(), Value::Num(ce)));
                if let Some((g, t)) = ident.as_ref().and_then(|i| i.parent.clone()) {
                    p.push(("parent_guid".into(), Value::Num(g)));
                    p.push(("parent_type".into(), Value::Str(t)));
                }
                let err = match r.kind {
                    ReportKind::Io { errno, .. } => errno as u64,
                    // ECKSUM, which OpenZFS defines as EBADE on Linux.
                    _ => libc::EBADE as u64,
                };
                p.push(("zio_err".into(), Value::Num(err)));
                p.push(("zio_offset".into(), Value::Num(r.offset)));
                p.push(("zio_size".into(), Value::Num(r.size)));
                p
            }
        };
        self.post(p);
    }
}

fn push_vdev(p: &mut Vec<(String, Value)>, leaf: &Leaf) {
    p.push(("vdev_guid".into(), Value::Num(leaf.guid)));
    p.push(("vdev_state".into(), Value::State(leaf.state)));
    if let Some(path) = &leaf.path {
        p.push(("vdev_path".into(), Value::Str(path.clone())));
    }
}

/// Whether `name` may name a pool (OpenZFS's rules), for the pool filter.
pub fn check_pool_name(name: &str) -> std::result::Result<(), String> {
    ozfs_format::names::check_pool_name(name)
}

/// The daemon's events (of `pool`, when given) with an eid above `after`,
/// oldest first; none when no daemon runs.
pub fn list(pool: Option<&str>, after: u64) -> Result<Vec<Event>> {
    let Some(r) = crate::client::call(&json!({"cmd": "events", "pool": pool, "after": after}))
    else {
        return Ok(Vec::new());
    };
    let r = r?.check()?;
    serde_json::from_value(r.v["events"].clone())
        .map_err(|e| Error::Invalid(format!("ozfs daemon: bad events reply: {e}")))
}

/// Empty the daemon's queue; returns how many events it held (0 when no
/// daemon runs).
pub fn clear() -> Result<usize> {
    let Some(r) = crate::client::call(&json!({"cmd": "events_clear"})) else {
        return Ok(0);
    };
    let r = r?.check()?;
    r.v["cleared"]
        .as_u64()
        .map(|n| n as usize)
        .ok_or_else(|| Error::Invalid("ozfs daemon: bad events_clear reply".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ev(pool: &str) -> Vec<(String, Value)> {
        pool_payload("sysevent.fs.zfs.scrub_start", Some((pool, 7)))
    }

    #[test]
    fn ring_is_bounded_and_eids_increase() {
        let mut r = Ring::new(3);
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        for i in 0..5u64 {
            assert_eq!(r.post(ev(if i % 2 == 0 { "a" } else { "b" }), t), i + 1);
        }
        let all = r.list(None, 0);
        assert_eq!(all.iter().map(|e| e.eid).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(r.len(), 3);
        // Pool filter and `after`.
        let a: Vec<u64> = r.list(Some("a"), 0).iter().map(|e| e.eid).collect();
        assert_eq!(a, [3, 5]);
        assert_eq!(r.list(None, 4).len(), 1);
        // Clear: the count; ids go on.
        assert_eq!(r.clear(), 3);
        assert!(r.is_empty());
        assert_eq!(r.post(ev("a"), t), 6);
        let e = &r.list(None, 0)[0];
        assert_eq!(e.class, "sysevent.fs.zfs.scrub_start");
        assert_eq!(e.pool.as_deref(), Some("a"));
        assert_eq!(e.time, (1_700_000_000, 5));
        let n = e.payload.len();
        assert_eq!(e.payload[n - 1], ("eid".into(), Value::Num(6)));
        assert_eq!(
            e.payload[n - 2],
            ("time".into(), Value::Array(vec![1_700_000_000, 5]))
        );
        assert_eq!(e.payload[0], ("version".into(), Value::Num(0)));
    }

    #[test]
    fn vdev_reports_become_ereports_and_statechanges() {
        let q = Queue::new();
        let r = VdevReport {
            kind: ReportKind::Checksum,
            vdev_guid: 0xabc,
            vdev_type: "file".into(),
            vdev_path: Some("/d/a".into()),
            offset: 0x41b400,
            size: 0x20000,
            errors: (0, 0, 3),
        };
        q.on_report(&r);
        q.on_report(&VdevReport {
            kind: ReportKind::Faulted { removed: true },
            ..r.clone()
        });
        q.on_report(&VdevReport {
            kind: ReportKind::Io {
                write: false,
                errno: 5,
            },
            ..r
        });
        let evs = q.list(None, 0);
        let classes: Vec<&str> = evs.iter().map(|e| e.class.as_str()).collect();
        assert_eq!(
            classes,
            [
                "ereport.fs.zfs.checksum",
                "resource.fs.zfs.statechange",
                "ereport.fs.zfs.io"
            ]
        );
        let get = |e: &Event, k: &str| {
            e.payload
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get(&evs[0], "vdev_guid"), Some(Value::Num(0xabc)));
        assert_eq!(get(&evs[0], "vdev_path"), Some(Value::Str("/d/a".into())));
        assert_eq!(get(&evs[0], "vdev_cksum_errors"), Some(Value::Num(3)));
        assert_eq!(get(&evs[0], "zio_offset"), Some(Value::Num(0x41b400)));
        // Not in the index: no pool fields (and no pool to filter on).
        assert_eq!(get(&evs[0], "pool"), None);
        assert_eq!(
            get(&evs[1], "vdev_state"),
            Some(Value::State(state::REMOVED))
        );
        assert_eq!(
            get(&evs[1], "vdev_laststate"),
            Some(Value::State(state::HEALTHY))
        );
        assert_eq!(get(&evs[2], "zio_err"), Some(Value::Num(5)));
        assert_eq!(q.clear(), 3);
    }

    #[test]
    fn default_capacity_is_openzfs_s() {
        let mut r = Ring::new(DEFAULT_LEN_MAX);
        for _ in 0..DEFAULT_LEN_MAX + 10 {
            r.post(ev("p"), UNIX_EPOCH);
        }
        assert_eq!(r.len(), DEFAULT_LEN_MAX);
        assert_eq!(r.list(None, 0)[0].eid, 11);
    }
}
