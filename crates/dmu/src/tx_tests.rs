//! The open txg's view of objects ([`crate::tx::ObjsetTx`]) on an
//! in-memory pool ([`crate::testpool`]).

use crate::testpool::{dnode, dnode_block, TestPool, FILE};
use crate::tx::ObjsetTx;
use ozfs_format::types::ot;

/// A file's data counts as unchanged while only its bonus (an access
/// time, a mode) changed: readers may follow its committed tree. A
/// staged block, a punched one or a changed tree makes it changed.
#[test]
fn data_is_clean_follows_the_block_tree_not_the_bonus() {
    let tp = TestPool::new();
    let data = tp.put(&[7u8; 4096], FILE, 0);
    let mut file = dnode(FILE, 4096, 1, 0, vec![data]);
    file.bonuslen = 8;
    file.bonus = vec![0; 8];
    let blk = tp.put(&dnode_block(&[(5, file)]), ot::DNODE, 0);
    let os = tp.objset(dnode(ot::DNODE, 16384, 1, 0, vec![blk]));

    let mut tx = ObjsetTx::new(os.clone());
    assert!(tx.data_is_clean(5));
    tx.set_bonus(5, vec![1; 8]).expect("bonus");
    assert!(tx.data_is_clean(5), "a bonus change leaves the data");

    tx.write_block(5, 0, vec![9u8; 4096]);
    assert!(!tx.data_is_clean(5), "a staged block");

    let mut tx = ObjsetTx::new(os.clone());
    tx.punch_block(5, 0);
    assert!(!tx.data_is_clean(5), "a punched block");

    let mut tx = ObjsetTx::new(os);
    let mut dn = tx.dnode(5).expect("dnode").phys;
    dn.maxblkid = 3;
    tx.set_dnode(5, dn);
    assert!(!tx.data_is_clean(5), "a changed tree");
}
