//! Feature sets of OpenZFS's `zpool create -o compatibility=` files (the
//! names of its compatibility.d/*, each with the features it lists,
//! separated by spaces), as data.

pub(crate) const COMPAT_SETS: &[(&str, &str)] = &[
    (
        "compat-2018",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress spacemap_histogram",
    ),
    (
        "compat-2019",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump sha512 skein spacemap_histogram",
    ),
    (
        "compat-2020",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump sha512 skein spacemap_histogram",
    ),
    (
        "compat-2021",
        "async_destroy bookmarks device_removal embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump obsolete_counts sha512 skein spacemap_histogram spacemap_v2 zpool_checkpoint",
    ),
    (
        "freebsd-11.0",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump sha512 skein spacemap_histogram",
    ),
    (
        "freebsd-11.2",
        "async_destroy bookmarks device_removal embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump obsolete_counts sha512 skein spacemap_histogram zpool_checkpoint",
    ),
    (
        "freebsd-11.3",
        "async_destroy bookmarks device_removal embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump obsolete_counts sha512 skein spacemap_histogram spacemap_v2 zpool_checkpoint",
    ),
    (
        "freenas-9.10.2",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump spacemap_histogram",
    ),
    (
        "grub2-2.06",
        "allocation_classes async_destroy block_cloning device_rebuild embedded_data empty_bpobj enabled_txg hole_birth log_spacemap lz4_compress resilver_defer spacemap_histogram spacemap_v2 zpool_checkpoint",
    ),
    (
        "grub2-2.12",
        "allocation_classes async_destroy block_cloning bookmarks device_rebuild embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks livelist log_spacemap lz4_compress project_quota resilver_defer spacemap_histogram spacemap_v2 userobj_accounting zilsaxattr zpool_checkpoint",
    ),
    (
        "openzfs-2.0-freebsd",
        "allocation_classes async_destroy bookmark_v2 bookmark_written bookmarks device_rebuild device_removal embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode livelist log_spacemap lz4_compress multi_vdev_crash_dump obsolete_counts project_quota redacted_datasets redaction_bookmarks resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint zstd_compress",
    ),
    (
        "openzfs-2.0-linux",
        "allocation_classes async_destroy bookmark_v2 bookmark_written bookmarks device_rebuild device_removal edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode livelist log_spacemap lz4_compress multi_vdev_crash_dump obsolete_counts project_quota redacted_datasets redaction_bookmarks resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint zstd_compress",
    ),
    (
        "openzfs-2.1-freebsd",
        "allocation_classes async_destroy bookmark_v2 bookmark_written bookmarks device_rebuild device_removal draid embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode livelist log_spacemap lz4_compress multi_vdev_crash_dump obsolete_counts project_quota redacted_datasets redaction_bookmarks resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint zstd_compress",
    ),
    (
        "openzfs-2.1-linux",
        "allocation_classes async_destroy bookmark_v2 bookmark_written bookmarks device_rebuild device_removal draid edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode livelist log_spacemap lz4_compress multi_vdev_crash_dump obsolete_counts project_quota redacted_datasets redaction_bookmarks resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint zstd_compress",
    ),
    (
        "openzfs-2.2",
        "allocation_classes async_destroy blake3 block_cloning bookmark_v2 bookmark_written bookmarks device_rebuild device_removal draid edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits head_errlog hole_birth large_blocks large_dnode livelist log_spacemap lz4_compress multi_vdev_crash_dump obsolete_counts project_quota redacted_datasets redaction_bookmarks resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting vdev_zaps_v2 zilsaxattr zpool_checkpoint zstd_compress",
    ),
    (
        "openzfs-2.3",
        "allocation_classes async_destroy blake3 block_cloning bookmark_v2 bookmark_written bookmarks device_rebuild device_removal draid edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset fast_dedup filesystem_limits head_errlog hole_birth large_blocks large_dnode large_microzap livelist log_spacemap longname lz4_compress multi_vdev_crash_dump obsolete_counts project_quota raidz_expansion redacted_datasets redaction_bookmarks redaction_list_spill resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting vdev_zaps_v2 zilsaxattr zpool_checkpoint zstd_compress",
    ),
    (
        "openzfsonosx-1.7.0",
        "async_destroy bookmarks edonr embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump sha512 skein spacemap_histogram",
    ),
    (
        "openzfsonosx-1.8.1",
        "async_destroy bookmarks device_removal edonr embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress multi_vdev_crash_dump obsolete_counts sha512 skein spacemap_histogram spacemap_v2 zpool_checkpoint",
    ),
    (
        "openzfsonosx-1.9.3",
        "allocation_classes async_destroy bookmark_v2 bookmarks device_removal edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode lz4_compress multi_vdev_crash_dump obsolete_counts project_quota resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint",
    ),
    (
        "zol-0.6.1",
        "async_destroy empty_bpobj lz4_compress",
    ),
    (
        "zol-0.6.4",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset hole_birth lz4_compress spacemap_histogram",
    ),
    (
        "zol-0.6.5",
        "async_destroy bookmarks embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks lz4_compress spacemap_histogram",
    ),
    (
        "zol-0.7",
        "async_destroy bookmarks edonr embedded_data empty_bpobj enabled_txg extensible_dataset filesystem_limits hole_birth large_blocks large_dnode lz4_compress multi_vdev_crash_dump sha512 skein spacemap_histogram userobj_accounting",
    ),
    (
        "zol-0.8",
        "allocation_classes async_destroy bookmark_v2 bookmarks device_removal edonr embedded_data empty_bpobj enabled_txg encryption extensible_dataset filesystem_limits hole_birth large_blocks large_dnode lz4_compress multi_vdev_crash_dump obsolete_counts project_quota resilver_defer sha512 skein spacemap_histogram spacemap_v2 userobj_accounting zpool_checkpoint",
    ),
];
