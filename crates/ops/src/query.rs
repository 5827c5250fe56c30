//! Reading pools: what `zpool list`, `zfs list` and `zfs get` show, as data.

/// Bytes as ZFS abbreviates them (`1.50M`).
pub use ozfs_dsl::props::nicenum;
