//! # ozfs-dmu: objsets, dnodes and the block tree under each object
//!
//! An objset is a flat array of dnodes (objects), stored as the data of its
//! meta-dnode (object 0). Each dnode roots a tree of block pointers:
//! `nlevels - 1` levels of indirect blocks (arrays of `2^(indblkshift-7)`
//! BPs) above the level-0 data blocks. Block `blkid` of level `l` is found by
//! taking, at each level, the index bits of `blkid` that belong to it. A hole
//! at any level means zeros below it.
//!
//! This crate also hosts ZAP access on top of objects ([`zap`]), since a ZAP
//! is just a DMU object whose blocks the format crate knows how to decode.
//!
//! Invariants:
//! * Every block comes from [`ozfs_spa::Pool::read_bp`], so it has been checksum-verified.
//! * Indices derived from disk (`blkid`, level counts, shifts) are range-checked
//!   before use; an object whose tree is inconsistent yields an error naming
//!   the object.
//! * Blocks are read through the pool's block cache ([`ozfs_spa::arc`]): indirect
//!   and dnode blocks always, data blocks when the pool caches data (servers).

pub mod objset;
pub mod rawio;
pub mod tx;
pub mod zap;
pub mod zap_tx;

pub use objset::{Dnode, Objset};

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod testpool;
#[cfg(test)]
mod tx_tests;
