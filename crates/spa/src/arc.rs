//! The block cache (the ARC's role): verified, decompressed blocks kept in
//! memory so that re-reads skip the devices.
//!
//! Theory. A block on a copy-on-write pool never changes while it is
//! allocated: the only writes to an allocated location are the in-place
//! rewrites of blocks born in the txg being synced (MOS sync passes) and the
//! repairs of self-healing, which restore the same bytes. So a block can be
//! named by where it lives plus when it was born plus what it hashes to —
//! `(vdev, offset, birth txg, checksum)` of its first DVA — and whatever is
//! cached under that name is right for as long as anybody holds a BP with
//! that name. A rewritten block gets a new checksum and so a new name; a
//! freed location is not reused in the txg that freed it (frees are
//! deferred), so a reused location gets a new birth. Nothing has to be
//! invalidated; stale names simply age out.
//!
//! Eviction is CLOCK (second chance) per shard, by bytes: each entry has a
//! referenced bit set on a hit; the hand evicts unreferenced entries and
//! clears the bit of referenced ones. Shards (by key hash) keep lock
//! contention low when several request threads read at once.
//!
//! Invariants:
//! * Only bytes that passed their checksum (and decompression) are inserted.
//! * The bytes held never exceed the budget by more than one block per shard.
//! * Holes and embedded BPs are never cached (they cost no I/O).

use ozfs_format::BlkPtr;
use std::collections::{HashMap, VecDeque};

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

/// The name of a cached block.
pub type Key = [u64; 7];

/// The cache key of a BP, or None for blocks that are never cached.
pub fn key_of(bp: &BlkPtr) -> Option<Key> {
    if bp.is_hole() || bp.is_embedded() {
        return None;
    }
    let d = bp.dvas()[0];
    let c = &bp.words[12..16];
    Some([d.vdev, d.offset, bp.birth(), c[0], c[1], c[2], c[3]])
}

/// The cache key of a pre-compressed block's physical image (its stored
/// bytes, not the decoded record): the BP's key with the top bit of the
/// birth word set, so both forms of one block may be cached side by side.
pub fn raw_key_of(bp: &BlkPtr) -> Option<Key> {
    key_of(bp).map(|mut k| {
        k[2] |= 1 << 63;
        k
    })
}

/// A cheap hasher for keys that are already well-mixed numbers (offsets and
/// checksums): a multiply-rotate over the key's words, no SipHash.
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

type WordMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<WordHasher>>;

struct Entry {
    data: Arc<Vec<u8>>,
    stamp: u64,
    referenced: bool,
}

#[derive(Default)]
struct Shard {
    map: WordMap<Key, Entry>,
    /// CLOCK order: (key, stamp); a stamp that no longer matches the map's
    /// entry is a leftover of a removed entry and is skipped.
    ring: VecDeque<(Key, u64)>,
    bytes: usize,
    next_stamp: u64,
}

impl Shard {
    fn evict_to(&mut self, budget: usize) {
        let mut spins = self.ring.len() * 2 + 1;
        while self.bytes > budget && spins > 0 {
            spins -= 1;
            let Some((k, stamp)) = self.ring.pop_front() else {
                break;
            };
            let Some(e) = self.map.get_mut(&k) else {
                continue;
            };
            if e.stamp != stamp {
                continue;
            }
            if e.referenced {
                e.referenced = false;
                self.ring.push_back((k, stamp));
                continue;
            }
            if let Some(e) = self.map.remove(&k) {
                self.bytes -= e.data.len();
            }
        }
    }
}

/// A sharded, byte-bounded block cache.
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    /// Budget per shard in bytes (0: cache off).
    shard_budget: AtomicUsize,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("budget", &self.budget())
            .field("bytes", &self.bytes())
            .finish()
    }
}

fn shard_of(k: &Key) -> usize {
    // The offset's sector bits and the checksum mix well enough.
    ((k[1] >> 9) ^ k[3] ^ k[0]) as usize % SHARDS
}

impl BlockCache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> BlockCache {
        BlockCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: AtomicUsize::new(budget / SHARDS),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The default budget: `OZFS_ARC_MAX` bytes if set, else an eighth of
    /// physical memory, at least 64 MiB and at most 4 GiB.
    pub fn default_budget() -> usize {
        if let Some(n) = std::env::var("OZFS_ARC_MAX")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            return n;
        }
        let mem = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<usize>().ok())
            })
            .map(|kib| kib.saturating_mul(1024))
            .unwrap_or(1 << 30);
        (mem / 8).clamp(64 << 20, 4 << 30)
    }

    /// The budget of the data-block cache: `OZFS_ARC_DATA_MAX` (bytes),
    /// else as much as [`default_budget`](Self::default_budget).
    pub fn data_budget() -> usize {
        if let Some(n) = std::env::var("OZFS_ARC_DATA_MAX")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            return n;
        }
        Self::default_budget()
    }

    /// Change the budget, evicting at once if it shrank.
    pub fn set_budget(&self, budget: usize) {
        let per = budget / SHARDS;
        self.shard_budget.store(per, Ordering::Relaxed);
        for s in &self.shards {
            if let Ok(mut s) = s.lock() {
                s.evict_to(per);
            }
        }
    }

    pub fn budget(&self) -> usize {
        self.shard_budget.load(Ordering::Relaxed) * SHARDS
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map(|s| s.bytes).unwrap_or(0))
            .sum()
    }

    /// The cached block named `k`, marking it referenced.
    pub fn get(&self, k: &Key) -> Option<Arc<Vec<u8>>> {
        let mut s = self.shards[shard_of(k)].lock().ok()?;
        match s.map.get_mut(k) {
            Some(e) => {
                e.referenced = true;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(e.data.clone())
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Keep `data` (verified bytes) under `k`.
    pub fn insert(&self, k: Key, data: Arc<Vec<u8>>) {
        let budget = self.shard_budget.load(Ordering::Relaxed);
        if data.len() > budget {
            return;
        }
        let Ok(mut s) = self.shards[shard_of(&k)].lock() else {
            return;
        };
        let stamp = s.next_stamp;
        s.next_stamp += 1;
        let len = data.len();
        if let Some(old) = s.map.insert(
            k,
            Entry {
                data,
                stamp,
                referenced: false,
            },
        ) {
            s.bytes -= old.data.len();
        }
        s.bytes += len;
        s.ring.push_back((k, stamp));
        s.evict_to(budget);
        // Keep the ring from growing without bound with stale stamps.
        if s.ring.len() > s.map.len() * 2 + 64 {
            let live: VecDeque<(Key, u64)> = {
                let map = &s.map;
                s.ring
                    .iter()
                    .filter(|(k, st)| map.get(k).is_some_and(|e| e.stamp == *st))
                    .copied()
                    .collect()
            };
            s.ring = live;
        }
    }

    /// Drop everything.
    pub fn clear(&self) {
        for s in &self.shards {
            if let Ok(mut s) = s.lock() {
                s.map.clear();
                s.ring.clear();
                s.bytes = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u64) -> Key {
        [0, i << 9, 1, i, 0, 0, 0]
    }

    #[test]
    fn holds_within_budget_and_keeps_hot_blocks() {
        let c = BlockCache::new(SHARDS * 4096);
        // Fill one shard's worth and more; a referenced block survives a scan.
        let hot = k(0);
        c.insert(hot, Arc::new(vec![7u8; 1024]));
        for i in 1..2000 {
            assert!(c.get(&hot).is_some(), "hot block evicted at {i}");
            c.insert(k(i), Arc::new(vec![i as u8; 1024]));
            assert!(c.bytes() <= c.budget() + SHARDS * 1024);
        }
        assert_eq!(c.get(&hot).map(|d| d[0]), Some(7));
        // Cold, old blocks are gone.
        let present = (1..1000).filter(|&i| c.get(&k(i)).is_some()).count();
        assert!(present < 100, "{present} old blocks kept");
    }

    #[test]
    fn replacing_and_shrinking() {
        let c = BlockCache::new(1 << 20);
        c.insert(k(1), Arc::new(vec![1u8; 100]));
        c.insert(k(1), Arc::new(vec![2u8; 50]));
        assert_eq!(c.bytes(), 50);
        assert_eq!(c.get(&k(1)).map(|d| d[0]), Some(2));
        c.set_budget(0);
        assert_eq!(c.bytes(), 0);
        c.insert(k(2), Arc::new(vec![1u8; 10]));
        assert!(c.get(&k(2)).is_none());
    }
}
