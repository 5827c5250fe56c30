//! `zfs userspace`, `groupspace`, `projectspace`: the space and objects a
//! file system or snapshot charges to each user, group or project, read
//! from the objset's accounting ZAPs (objects -1, -2, -3, kept exact at
//! every sync by the DMU, `ozfs_dmu::tx::UserAccounting`).
//!
//! Entries are keyed by the id in hex, object counts by `obj-` and the id
//! (OpenZFS's `DMU_OBJACCT_PREFIX`); an id with space but no object count
//! (a file system whose object accounting is not complete) shows none.
//! Quotas ozfs does not keep per user: they show as none.

use crate::host::open_imported;
use ozfs_dsl::DslPool;
use ozfs_format::objset::{
    OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USERACCOUNTING_COMPLETE, OBJSET_TYPE_ZFS,
};
use ozfs_format::{Error, Result};
use std::collections::BTreeMap;

/// Whose space is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    User,
    Group,
    Project,
}

/// One owner's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerSpace {
    pub id: u64,
    /// Bytes charged (512 per object plus its allocated space).
    pub used: u64,
    /// Objects charged (None: the file system does not count objects).
    pub objused: Option<u64>,
}

/// The usage per owner of file system or snapshot `name`, by id.
pub fn space(name: &str, owner: Owner) -> Result<Vec<OwnerSpace>> {
    let pool_name = crate::names::pool_of(name).to_string();
    // The daemon's open txg first, so the figures are current.
    if !crate::host::in_daemon() && crate::client::daemon_holds(&pool_name) {
        crate::proto::execute(
            crate::proto::Request::Sync {
                pool: pool_name.clone(),
            },
            &crate::proto::Progress::none(),
        )
        .map_err(|e| e.context(&format!("cannot sync '{pool_name}'")))?;
    }
    let missing = || Error::NotFound(format!("cannot open '{name}': dataset does not exist"));
    let (mut rec, pool) = open_imported(&pool_name).map_err(|_| missing())?;
    let result = (|| {
        let dsl = DslPool::open(pool.clone())
            .map_err(|e| e.context(&format!("cannot open '{pool_name}'")))?;
        let info = dsl.lookup(name).map_err(|_| missing())?;
        let os = dsl
            .objset(&info)
            .map_err(|e| e.context(&format!("cannot open '{name}'")))?;
        if os.phys.os_type != OBJSET_TYPE_ZFS {
            return Err(Error::Invalid(format!(
                "cannot get used/quota for {name}: not a file system"
            )));
        }
        let (complete, phys) = match owner {
            Owner::User => (OBJSET_FLAG_USERACCOUNTING_COMPLETE, &os.phys.userused_dnode),
            Owner::Group => (
                OBJSET_FLAG_USERACCOUNTING_COMPLETE,
                &os.phys.groupused_dnode,
            ),
            Owner::Project => (
                OBJSET_FLAG_PROJECTQUOTA_COMPLETE,
                &os.phys.projectused_dnode,
            ),
        };
        if os.phys.flags & complete == 0 {
            return Err(Error::unsupported(
                format!("cannot get used/quota for {name}"),
                "its accounting is not complete (a file system of an older pool version, or \
                 not yet upgraded)",
            ));
        }
        let mut by_id: BTreeMap<u64, OwnerSpace> = BTreeMap::new();
        if phys.object_type != 0 {
            let dn = ozfs_dmu::Dnode {
                object: u64::MAX,
                phys: phys.clone(),
                swap: os.swap,
            };
            for e in ozfs_dmu::zap::list(&os, &dn)
                .map_err(|e| e.context(&format!("accounting of {name}")))?
            {
                let key = e.name_str();
                let (hex, objects) = match key.strip_prefix("obj-") {
                    Some(h) => (h, true),
                    None => (key.as_str(), false),
                };
                let (Ok(id), Some(v)) = (u64::from_str_radix(hex, 16), e.as_u64()) else {
                    return Err(Error::corrupt(
                        format!("accounting of {name}"),
                        format!("entry '{key}'"),
                    ));
                };
                let s = by_id.entry(id).or_insert(OwnerSpace {
                    id,
                    used: 0,
                    objused: None,
                });
                if objects {
                    s.objused = Some(v);
                } else {
                    s.used = v;
                }
            }
        }
        Ok(by_id.into_values().collect())
    })();
    let saved = rec.save_counters(&pool);
    let v = result?;
    saved.map_err(|e| e.context("could not save error counters"))?;
    Ok(v)
}
