//! The slop reservation: the part of a pool kept free for everything but
//! user writes, so that a full pool can still sync, and its user can still
//! delete files, destroy snapshots and file systems and change properties.
//!
//! One rule computes it ([`slop_space`]) and every user of it goes through
//! it: `zfs list`/`df`'s AVAIL ([`DslPool::available`]), the writer's
//! refusal of file data ([`PoolWriter::reserve`]: FUSE writes, `ozfs cp`)
//! and its check before a dataset operation ([`PoolWriter::check_slop`]:
//! create, snapshot, clone, set, rename, destroy).
//!
//! * Pool version ≤ 23 (zfs-fuse's world): 1/64 of the deflated space, at
//!   least 32 MiB (`dsl_pool_adjustedsize` of that era).
//! * Later versions (OpenZFS 2.3's `spa_get_slop_space`): 1/32
//!   (`spa_slop_shift` 5) of the normal class's deflated space plus what
//!   block cloning saves (not what dedup saves), at most 128 GiB
//!   (`spa_max_slop`), less the embedded-log metaslabs' space (at most half
//!   of it), then at least 128 MiB (`spa_min_slop`) or half that space,
//!   whichever is smaller.
//!
//! How much of the slop an operation may use is OpenZFS's
//! `zfs_space_check_t` ([`SpaceCheck`]): user writes, create, snapshot and
//! clone none; set and rename half; destroys three quarters; frees are
//! never checked. The pool's usable space is `spa_get_dspace`: the normal
//! class (all of it on version ≤ 23) plus what dedup and cloning save. An
//! operation is refused (ENOSPC) when the root directory's used bytes as
//! last synced, plus frees not yet reusable, plus what the open txg has
//! reserved, plus what it asks for would pass that space less the slop it
//! may not use — as OpenZFS compares `dd_used_bytes` with
//! `dsl_pool_unreserved_space`.
//!
//! Invariant: AVAIL as reported is what user writes can add (the open
//! txg's reservations are worst cases, so a write is refused before the
//! pool's used bytes pass `dspace − slop`).

use crate::pool::{DslPool, SpaceInfo};
use crate::sync::PoolWriter;
use ozfs_format::Result;

/// OpenZFS's `spa_min_slop` and `spa_max_slop`.
const MIN_SLOP: u64 = 128 << 20;
const MAX_SLOP: u64 = 128 << 30;
/// zfs-fuse's least reservation (`SPA_MINDEVSIZE >> 1`).
const V23_MIN_SLOP: u64 = 32 << 20;
/// OpenZFS's `DST_AVG_BLKSHIFT`: a dataset operation's MOS blocks are
/// counted 16 KiB each, and three times (the MOS is triple-dittoed).
const DST_AVG_BLKSHIFT: u32 = 14;

/// How much of the slop an operation may use (OpenZFS's `zfs_space_check_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceCheck {
    /// None of it: user writes, and operations that make things (create,
    /// snapshot, clone).
    Normal,
    /// Half: operations used to recover space (set, rename).
    Reserved,
    /// Three quarters: destroys.
    ExtraReserved,
    /// All of it (no check).
    None,
}

impl SpaceCheck {
    /// The part of `slop` this check keeps free.
    pub fn kept(self, slop: u64) -> u64 {
        match self {
            SpaceCheck::Normal => slop,
            SpaceCheck::Reserved => slop >> 1,
            SpaceCheck::ExtraReserved => slop >> 2,
            SpaceCheck::None => 0,
        }
    }
}

/// The pool's usable deflated space (`spa_get_dspace`) and its slop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolDspace {
    pub dspace: u64,
    pub slop: u64,
}

/// The slop reservation of a pool of `version` whose space is `space`,
/// `cloned` bytes saved by block cloning (see the module's rule).
pub fn slop_space(version: u64, space: &SpaceInfo, cloned: u64) -> u64 {
    if version <= 23 {
        return (space.dspace >> 6).max(V23_MIN_SLOP);
    }
    let base = space.normal_dspace.saturating_add(cloned);
    let mut slop = (base >> 5).min(MAX_SLOP);
    slop -= space.embedded_log_dspace.min(slop >> 1);
    slop.max((base >> 1).min(MIN_SLOP))
}

impl DslPool {
    /// The pool's usable deflated space and slop as last synced: the
    /// normal class (all vdevs on version ≤ 23) plus what dedup saves
    /// (`ddt_get_dedup_dspace`) and, after version 23, what cloning saves
    /// (`brt_get_dspace`).
    pub fn pool_dspace(&self, space: &SpaceInfo) -> Result<PoolDspace> {
        let (dd, _) = self.dedup_stats()?;
        let deduped = dd.ref_dsize.saturating_sub(dd.dsize);
        let version = self.pool.uberblock.version;
        if version <= 23 {
            return Ok(PoolDspace {
                dspace: space.dspace.saturating_add(deduped),
                slop: slop_space(version, space, 0),
            });
        }
        let (_, cloned) = self.bclone_space()?;
        Ok(PoolDspace {
            dspace: space
                .normal_dspace
                .saturating_add(cloned)
                .saturating_add(deduped),
            slop: slop_space(version, space, cloned),
        })
    }

    /// Space available to datasets (the pool's AVAIL): the usable space
    /// less the slop less what the root directory uses.
    pub fn available(&self, space: &SpaceInfo) -> Result<u64> {
        let root = self.dir(self.root_dir_obj)?;
        let d = self.pool_dspace(space)?;
        Ok(d.dspace
            .saturating_sub(d.slop)
            .saturating_sub(root.used_bytes))
    }
}

/// The last synced figures a writer checks space against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpaceCache {
    /// The open txg they were read in (they change only at a sync).
    txg: u64,
    d: PoolDspace,
    /// The root directory's `dd_used_bytes`.
    root_used: u64,
}

impl PoolWriter {
    /// The pool's space as last synced, read once per txg.
    fn space_cache(&mut self) -> Result<Option<SpaceCache>> {
        // A pool being created has nothing synced to check against.
        if self.root_dir_obj == 0 {
            return Ok(None);
        }
        if let Some(c) = self.space_cache.filter(|c| c.txg == self.txg) {
            return Ok(Some(c));
        }
        let dsl = self.dsl();
        let space = dsl.dspace_only()?;
        let d = dsl.pool_dspace(&space)?;
        let root_used = dsl.dir(self.root_dir_obj)?.used_bytes;
        let c = SpaceCache {
            txg: self.txg,
            d,
            root_used,
        };
        self.space_cache = Some(c);
        Ok(Some(c))
    }

    /// The pool's figures as last synced: its usable space and slop, and
    /// what the root directory uses (None for a pool being created).
    pub fn pool_space(&mut self) -> Result<Option<(PoolDspace, u64)>> {
        Ok(self.space_cache()?.map(|c| (c.d, c.root_used)))
    }

    /// What the open txg may still add under `check`: the usable space less
    /// the slop `check` keeps, what the root used at the last sync, frees
    /// not yet reusable and the open txg's reservations.
    pub fn pool_room(&mut self, check: SpaceCheck) -> Result<u64> {
        let Some(c) = self.space_cache()? else {
            return Ok(u64::MAX);
        };
        if check == SpaceCheck::None {
            return Ok(u64::MAX);
        }
        Ok(c.d
            .dspace
            .saturating_sub(check.kept(c.d.slop))
            .saturating_sub(c.root_used)
            .saturating_sub(self.alloc.deferred_space())
            .saturating_sub(self.reserved))
    }

    /// A dataset operation's space check (OpenZFS's `dsl_sync_task`):
    /// refused with ENOSPC, before anything changes, when the root's used
    /// bytes as last synced, the frees not yet reusable and `blocks` MOS
    /// blocks (16 KiB each, three copies) pass the usable space less the
    /// slop `check` keeps. The open txg's reservations are not counted
    /// (OpenZFS checks against what is on disk).
    pub fn check_slop(&mut self, check: SpaceCheck, blocks: u64, what: &str) -> Result<()> {
        if check == SpaceCheck::None {
            return Ok(());
        }
        let Some(c) = self.space_cache()? else {
            return Ok(());
        };
        let need = (blocks << DST_AVG_BLKSHIFT).saturating_mul(3);
        let limit = c.d.dspace.saturating_sub(check.kept(c.d.slop));
        let used = c.root_used.saturating_add(self.alloc.deferred_space());
        if used.saturating_add(need) > limit {
            return Err(ozfs_spa::metaslab::enospc(format!(
                "{what}: out of space: pool '{}' has {} bytes left for this operation, {need} needed",
                self.pool.name,
                limit.saturating_sub(used)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(normal: u64, log: u64) -> SpaceInfo {
        SpaceInfo {
            dspace: normal + log,
            normal_dspace: normal,
            embedded_log_dspace: log,
            ..Default::default()
        }
    }

    #[test]
    fn openzfs_slop() {
        const M: u64 = 1 << 20;
        const G: u64 = 1 << 30;
        // Small pools: half the pool, up to 128 MiB.
        assert_eq!(slop_space(5000, &info(100 * M, 0), 0), 50 * M);
        assert_eq!(slop_space(5000, &info(480 * M, 0), 0), 128 * M);
        // 1/32 once that passes 128 MiB.
        assert_eq!(slop_space(5000, &info(64 * G, 0), 0), 2 * G);
        // At most 128 GiB.
        assert_eq!(slop_space(5000, &info(8192 * G, 0), 0), 128 * G);
        // The embedded log's space comes off, at most half the slop.
        assert_eq!(slop_space(5000, &info(64 * G, 512 * M), 0), 1536 * M);
        assert_eq!(slop_space(5000, &info(64 * G, 4 * G), 0), G);
        // Cloned blocks count; the floor still applies.
        assert_eq!(slop_space(5000, &info(32 * G, 0), 32 * G), 2 * G);
        assert_eq!(slop_space(5000, &info(G, 64 * M), 0), 128 * M);
    }

    #[test]
    fn zfs_fuse_slop() {
        const M: u64 = 1 << 20;
        assert_eq!(slop_space(23, &info(80 * M, 0), 0), 32 * M);
        assert_eq!(slop_space(23, &info(64 << 30, 0), 0), 1 << 30);
    }

    #[test]
    fn checks_keep_less_and_less() {
        assert_eq!(SpaceCheck::Normal.kept(128), 128);
        assert_eq!(SpaceCheck::Reserved.kept(128), 64);
        assert_eq!(SpaceCheck::ExtraReserved.kept(128), 32);
        assert_eq!(SpaceCheck::None.kept(128), 0);
    }
}
