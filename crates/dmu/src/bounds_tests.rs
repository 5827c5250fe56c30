//! Hostile pools: every size, count and index from disk is
//! bounded by what the containing structure holds. Trees are built by hand
//! on an in-memory pool ([`crate::testpool`]) in shapes ZFS never writes.

use crate::objset::Objset;
use crate::testpool::{dnode, dnode_block, wrap, Plain, TestPool, FILE};
use crate::tx::{FreeAll, ObjsetTx};
use ozfs_format::types::ot;
use ozfs_format::{BlkPtr, Error};
use std::time::{Duration, Instant};

/// A meta-dnode of one 16 K dnode block holding `objs`.
fn objset_with(tp: &TestPool, objs: &[(usize, ozfs_format::dnode::DnodePhys)]) -> Objset {
    let blk = tp.put(&dnode_block(objs), ot::DNODE, 0);
    tp.objset(dnode(ot::DNODE, 16384, 1, 0, vec![blk]))
}

fn corrupt<T: std::fmt::Debug>(r: ozfs_format::Result<T>) -> String {
    match r {
        Err(e @ Error::Corrupt { .. }) => e.to_string(),
        other => panic!("expected a corruption error, got {other:?}"),
    }
}

#[test]
fn dnode_block_shorter_than_the_declared_size_is_an_error() {
    // The meta-dnode says 32 K dnode blocks (datablkszsec 64); the block
    // is 16 K. Object 40 would lie at byte 20480 of it.
    let tp = TestPool::new();
    let file = dnode(FILE, 512, 1, 0, vec![BlkPtr::default()]);
    let blk = tp.put(&dnode_block(&[(1, file)]), ot::DNODE, 0);
    let os = tp.objset(dnode(ot::DNODE, 32768, 1, 0, vec![blk]));
    let e = corrupt(os.dnode(40));
    assert!(e.contains("16384 bytes"), "{e}");
    corrupt(os.dnode(1));
}

#[test]
fn a_huge_maxblkid_is_refused_when_the_dnode_is_decoded() {
    let tp = TestPool::new();
    let mut file = dnode(FILE, 131072, 2, 2, vec![BlkPtr::default()]);
    let os = objset_with(&tp, &[(5, file.clone())]);
    assert_eq!(os.dnode(5).expect("sane dnode").phys.maxblkid, 2);
    file.maxblkid = 1 << 58;
    let os = objset_with(&tp, &[(5, file)]);
    let e = os.dnode(5).expect_err("2^58 blocks in a two-level tree");
    assert!(e.to_string().contains("maxblkid"), "{e}");
}

/// A file with one data block at `blkid` under a `nlevels` tree of 16 K
/// indirect blocks (128 BPs each); maxblkid as large as the tree allows.
fn sparse_file(tp: &TestPool, nlevels: u8, blkid: u64) -> ozfs_format::dnode::DnodePhys {
    let mut bp = tp.put(&[7u8; 512], FILE, 0);
    for level in 1..nlevels {
        let idx = ((blkid >> (7 * (level as u64 - 1))) & 127) as usize;
        let mut bps = vec![BlkPtr::default(); idx + 1];
        bps[idx] = bp;
        bp = tp.put_indirect(16384, &bps, FILE, level);
    }
    let top = (blkid >> (7 * (nlevels as u64 - 1))) as usize;
    let mut tops = vec![BlkPtr::default(); 3];
    tops[top] = bp;
    let limit = 3u64 << (7 * (nlevels as u64 - 1));
    dnode(FILE, 512, nlevels, limit - 1, tops)
}

#[test]
fn next_data_block_follows_existing_blocks() {
    let tp = TestPool::new();
    // 6 levels: 3 × 2^35 addressable blocks, one of them written.
    let target = (1u64 << 35) + 12345;
    let phys = sparse_file(&tp, 6, target);
    let dn = wrap(5, phys.clone());
    let os = objset_with(&tp, &[(5, phys)]);
    let t0 = Instant::now();
    assert_eq!(os.next_data_block(&dn, 0).expect("search"), Some(target));
    assert_eq!(
        os.next_data_block(&dn, target).expect("search"),
        Some(target)
    );
    assert_eq!(os.next_data_block(&dn, target + 1).expect("search"), None);
    assert_eq!(os.next_data_block(&dn, u64::MAX).expect("search"), None);
    // The transaction view agrees, counts its own blocks and stays
    // within `last`.
    let mut tx = ObjsetTx::new(os.clone());
    let all = u64::MAX >> 9;
    assert_eq!(tx.next_block(5, 0, all, true).expect("next"), Some(target));
    assert_eq!(tx.next_block(5, 0, target - 1, true).expect("next"), None);
    tx.write_block(5, 77, vec![1u8; 512]);
    tx.punch_block(5, target);
    assert_eq!(tx.next_block(5, 0, all, true).expect("next"), Some(77));
    assert_eq!(tx.next_block(5, 78, all, true).expect("next"), None);
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn object_ranges_follow_dnode_blocks() {
    let tp = TestPool::new();
    // A meta-dnode of 4 levels (3 × 2^21 dnode blocks addressable, its
    // maxblkid the largest allowed) with dnode blocks 0 and 100000 only.
    let file = dnode(FILE, 512, 1, 0, vec![BlkPtr::default()]);
    let b0 = tp.put(&dnode_block(&[(1, file.clone())]), ot::DNODE, 0);
    let bn = tp.put(&dnode_block(&[(3, file)]), ot::DNODE, 0);
    let far = 100_000u64;
    let l1a = tp.put_indirect(16384, &[b0], ot::DNODE, 1);
    let l2a = tp.put_indirect(16384, &[l1a], ot::DNODE, 2);
    let at = |shift: u64| ((far >> shift) & 127) as usize;
    let mut v = vec![BlkPtr::default(); at(0) + 1];
    v[at(0)] = bn;
    let l1b = tp.put_indirect(16384, &v, ot::DNODE, 1);
    let mut v = vec![BlkPtr::default(); at(7) + 1];
    v[at(7)] = l1b;
    let l2b = tp.put_indirect(16384, &v, ot::DNODE, 2);
    let mut l3 = vec![BlkPtr::default(); at(14) + 1];
    l3[0] = l2a;
    l3[at(14)] = l2b;
    assert_eq!(far >> 21, 0);
    let l3 = tp.put_indirect(16384, &l3, ot::DNODE, 3);
    let os = tp.objset(dnode(
        ot::DNODE,
        16384,
        4,
        (3 << 21) - 1,
        vec![l3, BlkPtr::default(), BlkPtr::default()],
    ));
    assert_eq!(os.max_object(), 3 << 26);
    let t0 = Instant::now();
    let r = os.object_ranges().expect("ranges");
    assert_eq!(r, vec![0..32, far * 32..far * 32 + 32]);
    let objs: Vec<u64> = r
        .into_iter()
        .flatten()
        .filter(|&o| matches!(os.dnode(o), Ok(d) if d.phys.object_type != 0))
        .collect();
    assert_eq!(objs, vec![1, far * 32 + 3]);
    assert_eq!(os.bps_born_after(0).expect("bps").len(), 7);
    // The transaction side lists the same objects without a scan of
    // 2^48 numbers (a FREEOBJECTS record of a full stream asks for that).
    let tx = ObjsetTx::new(os.clone());
    assert_eq!(tx.allocated_in(1, 1 << 48).expect("allocated"), objs);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn a_walk_enters_each_indirect_block_once() {
    // Every BP of every indirect block names the same child: 128^5 paths
    // through 5 distinct indirect blocks.
    let tp = TestPool::new();
    let mut bp = tp.put(&[1u8; 512], FILE, 0);
    for level in 1..6u8 {
        bp = tp.put_indirect(16384, &vec![bp; 128], FILE, level);
    }
    let dn = wrap(9, dnode(FILE, 512, 6, (1 << 35) - 1, vec![bp]));
    let os = tp.objset(dnode(ot::DNODE, 16384, 1, 0, vec![BlkPtr::default()]));
    let t0 = Instant::now();
    let mut n = 0u64;
    os.walk_tree(&dn, &mut |_, _, _| {
        n += 1;
        Ok(())
    })
    .expect("walk");
    // The top BP, then 128 BPs of each of the 5 distinct indirect blocks.
    assert_eq!(n, 1 + 5 * 128);
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_short_indirect_block_is_an_error_not_a_panic() {
    // indblkshift 14 says 16 K (128 BPs); the L1 block is 4 K (32 BPs).
    let tp = TestPool::new();
    let data = tp.put(&[3u8; 512], FILE, 0);
    let l1 = tp.put_indirect(4096, &[data], FILE, 1);
    let phys = dnode(FILE, 512, 2, 127, vec![l1]);
    let dn = wrap(2, phys.clone());
    let os = objset_with(&tp, &[(2, phys)]);
    corrupt(os.block_bp(&dn, 0, 100));
    corrupt(os.walk_tree(&dn, &mut |_, _, _| Ok(())));
    corrupt(os.next_data_block(&dn, 0));
    // The write path: block 100 would be at byte 12800 of the 4 K block.
    let mut tx = ObjsetTx::new(os);
    tx.write_block(2, 100, vec![9u8; 512]);
    let mut alloc = tp.allocator();
    let mut acct = FreeAll {
        deflate: false,
        born_dsize: 0,
    };
    corrupt(tx.sync(&mut alloc, 10, &Plain, &mut acct));
}

#[test]
fn a_short_dnode_block_is_an_error_on_the_write_path() {
    // The meta-dnode declares 32 K dnode blocks; block 0 is 16 K. Changing
    // object 1 rewrites block 0: its fill count must not index past it.
    let tp = TestPool::new();
    let file = dnode(FILE, 512, 1, 0, vec![BlkPtr::default()]);
    let blk = tp.put(&dnode_block(&[(1, file.clone())]), ot::DNODE, 0);
    let os = tp.objset(dnode(ot::DNODE, 32768, 1, 0, vec![blk]));
    let mut tx = ObjsetTx::new(os);
    tx.set_dnode(1, file);
    let mut alloc = tp.allocator();
    let mut acct = FreeAll {
        deflate: false,
        born_dsize: 0,
    };
    corrupt(tx.sync(&mut alloc, 10, &Plain, &mut acct));
}

#[test]
fn a_block_past_maxblkid_is_refused_by_walks() {
    let tp = TestPool::new();
    let data = tp.put(&[3u8; 512], FILE, 0);
    let mut bps = vec![BlkPtr::default(); 6];
    bps[5] = data;
    let l1 = tp.put_indirect(16384, &bps, FILE, 1);
    let dn = wrap(2, dnode(FILE, 512, 2, 0, vec![l1]));
    let os = tp.objset(dnode(ot::DNODE, 16384, 1, 0, vec![BlkPtr::default()]));
    let e = corrupt(os.walk_tree(&dn, &mut |_, _, _| Ok(())));
    assert!(e.contains("past maxblkid"), "{e}");
    // Readers see only blocks up to maxblkid.
    assert_eq!(os.next_data_block(&dn, 0).expect("search"), None);
}

#[test]
fn read_sized_checks_before_allocating() {
    let tp = TestPool::new();
    let data = tp.put(&[5u8; 512], FILE, 0);
    let dn = wrap(2, dnode(FILE, 512, 1, 0, vec![data]));
    let os = tp.objset(dnode(ot::DNODE, 16384, 1, 0, vec![BlkPtr::default()]));
    assert_eq!(
        os.read_sized(&dn, 512, 1 << 20, "test").expect("fits"),
        vec![5u8; 512]
    );
    corrupt(os.read_sized(&dn, 513, 1 << 20, "test"));
    corrupt(os.read_sized(&dn, 1 << 62, u64::MAX, "test"));
    corrupt(os.read_sized(&dn, 512, 100, "test"));
}

#[test]
fn a_data_block_shorter_than_the_block_size_reads_as_zeros_past_its_end() {
    // datablkszsec says 32 K; the block is 512 bytes. Reading at 1024
    // started the copy past the block's end.
    let tp = TestPool::new();
    let data = tp.put(&[5u8; 512], FILE, 0);
    let phys = dnode(FILE, 32768, 1, 0, vec![data]);
    let dn = wrap(2, phys.clone());
    let os = objset_with(&tp, &[(2, phys)]);
    assert_eq!(os.read(&dn, 1024, 100).expect("read"), vec![0u8; 100]);
    assert_eq!(os.read(&dn, 500, 20).expect("read")[..12], [5u8; 12]);
    let tx = ObjsetTx::new(os);
    assert_eq!(tx.read(2, 1024, 100).expect("read"), vec![0u8; 100]);
}

/// A dnode of two slots (object 2, its bonus all zeros, so that its
/// second slot looks free by its first byte) beside a one-slot object 5:
/// the transaction lists, allocates and claims around the inner slot, and
/// freeing the large dnode frees both slots.
#[test]
fn large_dnodes_keep_their_inner_slots() {
    let tp = TestPool::new();
    let mut large = dnode(FILE, 512, 1, 0, vec![BlkPtr::default()]);
    large.extra_slots = 1;
    large.bonustype = ot::SA;
    large.bonuslen = 700;
    large.bonus = vec![0; 700];
    let small = dnode(FILE, 512, 1, 0, vec![BlkPtr::default()]);
    let os = objset_with(&tp, &[(2, large), (5, small)]);
    assert_eq!(os.slot_owner(3).expect("owner"), Some(2));
    assert_eq!(os.slot_owner(4).expect("owner"), None);
    let mut tx = ObjsetTx::new(os);
    assert_eq!(tx.allocated_in(1, 32).expect("allocated"), vec![2, 5]);
    assert_eq!(tx.owner_of_slot(3).expect("owner"), Some(2));
    assert_eq!(tx.owner_of_slot(4).expect("owner"), None);
    assert_eq!(tx.alloc_object(3).expect("alloc"), 4);
    let e = tx
        .claim_object(3, FILE, 512, 0, Vec::new(), 1)
        .expect_err("inside object 2");
    assert!(e.to_string().contains("inside object 2"), "{e}");
    tx.claim_object(31, FILE, 512, 0, Vec::new(), 2)
        .expect_err("crosses the dnode block");
    tx.claim_object(5, FILE, 512, 0, Vec::new(), 1)
        .expect_err("in use");
    // Three slots at 6..8, then object 9 is the next free one.
    tx.claim_object(6, FILE, 512, ot::SA, vec![0; 1000], 3)
        .expect("claim three slots");
    assert_eq!(tx.alloc_object(7).expect("alloc"), 9);
    assert_eq!(tx.allocated_in(1, 32).expect("allocated"), vec![2, 5, 6]);
    tx.free_object(2).expect("free");
    assert_eq!(tx.owner_of_slot(3).expect("owner"), None);
    assert_eq!(tx.alloc_object(3).expect("alloc"), 3);
    assert_eq!(tx.allocated_in(1, 32).expect("allocated"), vec![5, 6]);
}
