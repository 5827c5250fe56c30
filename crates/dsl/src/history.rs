//! The pool's command history in the MOS: reading its records and
//! appending one in the open txg, as ZFS keeps them (the ring buffer itself
//! is [`ozfs_format::history`]; records are packed nvlists, read in either
//! encoding, written in XDR as zfs-fuse writes them).
//!
//! The object directory's `history` entry names the object; a pool
//! without one (never written by a ZFS that logs, or made before version
//! 4) has no history, and the first record written creates it — object
//! type "SPA history", 128 KiB blocks, a bonus of type "SPA history
//! offsets" — exactly as `spa_history_create_obj` does.
//!
//! Invariants: every byte read is checked (the offsets against each other
//! and the log size, every record length against the log, every nvlist by
//! its decoder); errors name the history object. Appending changes only
//! the history object and its bonus, in the writer's open txg; the caller
//! syncs.

use crate::sync::PoolWriter;
use crate::DslPool;
use ozfs_dmu::zap_tx;
use ozfs_format::history::{self, HistoryPhys, HISTORY_BLOCK};
use ozfs_format::{Error, NvList, Result};

/// `DMU_OT_SPA_HISTORY`.
pub const OT_SPA_HISTORY: u8 = 29;
/// `DMU_OT_SPA_HISTORY_OFFSETS`.
pub const OT_SPA_HISTORY_OFFSETS: u8 = 30;

/// The history as stored: its offsets and its records, oldest first.
#[derive(Debug, Clone)]
pub struct History {
    pub object: u64,
    pub phys: HistoryPhys,
    pub records: Vec<NvList>,
}

/// Decode one packed record (native encoding, as ZFS writes them; an XDR
/// one is accepted too, as libzfs's unpack does).
pub fn unpack_record(b: &[u8]) -> Result<NvList> {
    match b.first() {
        Some(0) => ozfs_format::nvnative::unpack(b),
        _ => NvList::unpack(b),
    }
}

/// The history object must be what ZFS makes: a SPA_HISTORY object with a
/// SPA_HISTORY_OFFSETS bonus.
fn check_kind(dn: &ozfs_dmu::Dnode, what: &str) -> Result<()> {
    if dn.phys.object_type != OT_SPA_HISTORY || dn.phys.bonustype != OT_SPA_HISTORY_OFFSETS {
        return Err(Error::corrupt(
            what,
            format!(
                "object type {} with bonus type {}",
                dn.phys.object_type, dn.phys.bonustype
            ),
        ));
    }
    Ok(())
}

/// The pool's history at its last synced state (None: the pool has none).
pub fn read(dsl: &DslPool) -> Result<Option<History>> {
    let Some(obj) = ozfs_dmu::zap::lookup_obj(&dsl.mos, 1, "history")? else {
        return Ok(None);
    };
    let obj = obj.as_u64().ok_or_else(|| {
        Error::corrupt("MOS object directory", "'history' entry is not one integer")
    })?;
    let what = format!("pool history (MOS object {obj})");
    let ctx = |e: Error| e.context(&what);
    let dn = dsl.mos.dnode(obj).map_err(ctx)?;
    check_kind(&dn, &what)?;
    let phys = HistoryPhys::parse(&dn.phys.bonus, dn.swap).map_err(ctx)?;
    let log = history::read_log(&phys, &mut |off, len| dsl.mos.read(&dn, off, len)).map_err(ctx)?;
    let mut records = Vec::new();
    let mut pos = 0usize;
    for (i, r) in history::split_records(&log)
        .map_err(ctx)?
        .into_iter()
        .enumerate()
    {
        let nv =
            unpack_record(r).map_err(|e| e.context(&format!("{what}: record {i} at {pos}")))?;
        pos += 8 + r.len();
        records.push(nv);
    }
    Ok(Some(History {
        object: obj,
        phys,
        records,
    }))
}

/// Usable bytes of the pool (what sizes a new log): the top-level vdevs'
/// allocatable sizes.
fn pool_bytes(w: &PoolWriter) -> u64 {
    w.pool
        .root
        .children
        .iter()
        .map(|t| t.config.get_u64("asize").unwrap_or(0))
        .sum()
}

/// Append `record` to the pool's history in the open txg, creating the
/// history object when the pool has none.
pub fn append(w: &mut PoolWriter, record: &NvList) -> Result<()> {
    // XDR, as zfs-fuse (pool version 23) packs its records: its reader
    // takes no other encoding, and OpenZFS's takes both.
    let packed = record.pack_xdr();
    let obj = match zap_tx::lookup(&w.mos, 1, b"history")? {
        Some(e) => e.as_u64().ok_or_else(|| {
            Error::corrupt("MOS object directory", "'history' entry is not one integer")
        })?,
        None => {
            let phys = HistoryPhys::new(pool_bytes(w), w.version >= 5000);
            let obj = w.mos.create_object(
                OT_SPA_HISTORY,
                HISTORY_BLOCK,
                OT_SPA_HISTORY_OFFSETS,
                phys.encode(),
                1,
            )?;
            zap_tx::add(&mut w.mos, 1, b"history", 8, &[obj])?;
            obj
        }
    };
    let what = format!("pool history (MOS object {obj})");
    let dn = w.mos.dnode(obj)?;
    check_kind(&dn, &what)?;
    let mut phys = HistoryPhys::parse(&dn.phys.bonus, dn.swap).map_err(|e| e.context(&what))?;
    let mos = std::cell::RefCell::new(&mut w.mos);
    history::append(
        &mut phys,
        &packed,
        &mut |off, len| mos.borrow().read(obj, off, len),
        &mut |off, b| mos.borrow_mut().write(obj, off, b),
    )
    .map_err(|e| e.context(&what))?;
    // Host order: the dnode is rewritten in this host's order.
    w.mos.set_bonus(obj, phys.encode())
}
