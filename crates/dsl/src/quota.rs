//! Quotas: `quota` (a DSL directory and everything below it) and
//! `refquota` (what one dataset references), enforced on the writes of the
//! open transaction group.
//!
//! Theory. The space a dataset uses is known exactly only at sync, when
//! its blocks are allocated; between syncs a writer charges what it is
//! about to write to every limit that covers it ([`PoolWriter::charge_quota`]):
//! the dataset's own `refquota`, and the `quota` of its directory and of
//! each ancestor. A charge that would take `used` (as last synced) plus
//! what the open txg has charged past a limit fails with
//! [`Error::Quota`] (EDQUOT through FUSE), before anything is written.
//! Charges are what will be written, not what will be freed: overwrites
//! and deletes in the same txg give nothing back until the sync, so a
//! writer near its limit may be refused early (as ZFS may), never late by
//! more than one txg's worth.
//!
//! Invariants: limits and used bytes are read from the open txg's MOS once
//! per txg and dataset, and forgotten at every sync (a `zfs set quota`
//! takes effect at the next txg); a limit of 0 is none.

use crate::sync::PoolWriter;
use ozfs_dmu::zap_tx;
use ozfs_format::{Error, Result};
use std::collections::HashMap;

/// One limit that covers a dataset: what it counts, its value, and what
/// was used when the txg opened.
#[derive(Debug, Clone)]
struct Limit {
    /// `dir:N` (quota of directory N) or `ds:N` (refquota of dataset N).
    key: (bool, u64),
    limit: u64,
    used: u64,
    /// The property, for the message.
    what: &'static str,
}

/// The open txg's quota charges.
#[derive(Debug, Default)]
pub struct Charges {
    /// Limits covering each dataset written this txg.
    limits: HashMap<u64, Vec<Limit>>,
    /// Bytes charged this txg per limit key.
    charged: HashMap<(bool, u64), u64>,
}

impl Charges {
    /// Forget everything (a sync committed what was charged).
    pub fn reset(&mut self) {
        self.limits.clear();
        self.charged.clear();
    }
}

/// The limits covering head dataset `ds_obj` (bonus `ds`): its refquota,
/// then the quota of its directory and of every ancestor. `dir` reads a
/// DSL directory, `num` a numeric property from a properties object (both
/// from the open txg for a writer, from the synced state for a reader).
fn limits_with(
    ds_obj: u64,
    ds: &ozfs_format::dsl::DslDatasetPhys,
    dir: &dyn Fn(u64) -> Result<ozfs_format::dsl::DslDirPhys>,
    num: &dyn Fn(u64, &str) -> Result<u64>,
) -> Result<Vec<Limit>> {
    let mut out = Vec::new();
    let mut dir_obj = ds.dir_obj;
    let refquota = num(dir(dir_obj)?.props_zapobj, "refquota")?;
    if refquota > 0 {
        out.push(Limit {
            key: (false, ds_obj),
            limit: refquota,
            used: ds.referenced_bytes,
            what: "refquota",
        });
    }
    for _ in 0..256 {
        let d = dir(dir_obj)?;
        let quota = num(d.props_zapobj, "quota")?.max(d.quota);
        if quota > 0 {
            out.push(Limit {
                key: (true, dir_obj),
                limit: quota,
                used: d.used_bytes,
                what: "quota",
            });
        }
        if d.parent_obj == 0 {
            break;
        }
        dir_obj = d.parent_obj;
    }
    Ok(out)
}

/// A numeric property found by `look` in properties object `props` (0:
/// none, or no such object).
fn num_or_zero(
    props: u64,
    look: impl FnOnce() -> Result<Option<ozfs_format::zap::ZapEntry>>,
) -> Result<u64> {
    if props == 0 {
        return Ok(0);
    }
    Ok(look()?.and_then(|e| e.as_u64()).unwrap_or(0))
}

/// The limits covering head dataset `ds_obj` as the open txg has them.
fn limits_of(w: &PoolWriter, ds_obj: u64) -> Result<Vec<Limit>> {
    let num = |props: u64, name: &str| {
        num_or_zero(props, || zap_tx::lookup(&w.mos, props, name.as_bytes()))
    };
    limits_with(ds_obj, &w.dataset(ds_obj)?, &|o| w.dir(o), &num)
}

impl PoolWriter {
    /// Charge `bytes` about to be written to head dataset `ds_obj` against
    /// every quota and refquota covering it; refused with
    /// [`Error::Quota`] when one would be exceeded (nothing is charged then).
    pub fn charge_quota(&mut self, ds_obj: u64, bytes: u64) -> Result<()> {
        if !self.quota.limits.contains_key(&ds_obj) {
            let l = limits_of(self, ds_obj)?;
            self.quota.limits.insert(ds_obj, l);
        }
        let limits = &self.quota.limits[&ds_obj];
        for l in limits {
            let charged = self.quota.charged.get(&l.key).copied().unwrap_or(0);
            if l.used.saturating_add(charged).saturating_add(bytes) > l.limit {
                return Err(Error::Quota(format!(
                    "Disk quota exceeded ({} is {} bytes, {} used, {} more needed)",
                    l.what,
                    l.limit,
                    l.used.saturating_add(charged),
                    bytes
                )));
            }
        }
        let keys: Vec<(bool, u64)> = limits.iter().map(|l| l.key).collect();
        for k in keys {
            *self.quota.charged.entry(k).or_default() += bytes;
        }
        Ok(())
    }

    /// What head dataset `ds_obj` may still write under its quotas (None:
    /// no limit covers it), as of the open txg.
    pub fn quota_room(&mut self, ds_obj: u64) -> Result<Option<u64>> {
        if !self.quota.limits.contains_key(&ds_obj) {
            let l = limits_of(self, ds_obj)?;
            self.quota.limits.insert(ds_obj, l);
        }
        Ok(self.quota.limits[&ds_obj]
            .iter()
            .map(|l| {
                let charged = self.quota.charged.get(&l.key).copied().unwrap_or(0);
                l.limit.saturating_sub(l.used.saturating_add(charged))
            })
            .min())
    }
}

impl crate::DslPool {
    /// What dataset `ds` may still write under the quotas covering it, as
    /// last synced (None: no limit covers it) — `zfs list`'s AVAIL is the
    /// smaller of this and the pool's.
    pub fn quota_room(&self, ds: &crate::DatasetInfo) -> Result<Option<u64>> {
        if ds.is_snapshot {
            return Ok(None);
        }
        let num = |props: u64, name: &str| {
            num_or_zero(props, || ozfs_dmu::zap::lookup_obj(&self.mos, props, name))
        };
        let limits = limits_with(ds.ds_obj, &ds.ds, &|o| self.dir(o), &num)?;
        Ok(limits.iter().map(|l| l.limit.saturating_sub(l.used)).min())
    }
}
