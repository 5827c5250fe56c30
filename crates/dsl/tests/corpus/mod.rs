//! The OpenZFS corpus (../shared/corpus/openzfs-2.3, or `OZFS_CORPUS`) for
//! the DSL's in-process tests: a pool's images unpacked sparse and opened
//! read-only, without the CLI.

#![allow(dead_code)]

use ozfs_spa::import::discover_paths;
use ozfs_spa::{Pool, PoolOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

pub fn corpus() -> PathBuf {
    let c = std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/openzfs-2.3")
        });
    assert!(c.is_dir(), "{}: the OpenZFS corpus is missing", c.display());
    c
}

/// Unpack `images` of corpus pool `pool` into `dir` and open the pool
/// read-only.
pub fn open_pool(pool: &str, images: &[&str], dir: &Path) -> Arc<Pool> {
    let src = corpus().join(pool);
    let mut paths = Vec::new();
    for d in images {
        let out = dir.join(d);
        let ok = Command::new("sh")
            .arg("-c")
            .arg(r#"gzip -dc "$1" | cp --sparse=always /dev/stdin "$2""#)
            .args([
                "sh",
                &format!("{}/{d}.gz", src.display()),
                &out.to_string_lossy(),
            ])
            .status()
            .expect("sh")
            .success();
        assert!(ok, "unpacking {d}");
        paths.push(out);
    }
    let found = discover_paths(&paths).into_iter().next().expect("the pool");
    Arc::new(
        Pool::open(
            found,
            &PoolOptions {
                readonly: true,
                max_txg: None,
            },
        )
        .expect("open read-only"),
    )
}
