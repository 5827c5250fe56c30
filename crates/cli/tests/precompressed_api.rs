//! Pre-compressed records through the library (issue 7): the object-layer
//! API a Lustre-like server would call, without the CLI.
//!
//! * Before the feature is active a write is refused and nothing changes.
//! * Each error case gives its own error (unknown object, wrong logical
//!   size, payload that does not fit, reserved tag, checksum mismatch).
//! * Raw reads return exactly what was written, staged and after sync;
//!   ordinary reads decode the payloads, made by independent encoders
//!   (lz4_flex, flate2, ruzstd) — not ozfs's.
//! * A client checksum becomes the block's checksum.
//! * A partial write into a pre-compressed record is recompressed with the
//!   same algorithm; the logical result is the model's.
//! * The leak check is clean on the result and finds a leak made on
//!   purpose (space allocated and referenced by nothing).

mod pcommon;
use ozfs_dmu::rawio::{ExternalRecord, RawRecord};
use ozfs_dsl::create::{create_pool, TopSpec};
use ozfs_format::external::ExtHeader;
use ozfs_format::types::cksum as ck;
use ozfs_format::Error;
use ozfs_spa::{Pool, PoolOptions};
use ozfs_zpl::write::ZplTx;
use pcommon::*;
use std::sync::Arc;

const REC: u64 = 131072;

fn reopen(dev: &std::path::Path) -> Arc<Pool> {
    let found = ozfs_spa::import::discover_paths(&[dev.to_path_buf()]);
    assert_eq!(found.len(), 1, "pool on {}", dev.display());
    let f = found.into_iter().next().unwrap();
    Arc::new(
        Pool::open(
            f,
            &PoolOptions {
                readonly: true,
                max_txg: None,
            },
        )
        .unwrap(),
    )
}

#[test]
fn object_layer_api() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("d0");
    std::fs::File::create(&dev)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let mut w = create_pool("apitest", &[TopSpec::Disk(dev.clone())], 12, 23, &[]).unwrap();
    let root_ds = w.dsl().root().unwrap().ds_obj;
    let txg = w.txg;
    let obj = {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let root = z.root;
        let obj = z.create(root, b"obj", 0o100644, 0, 0, 0).unwrap();
        // A plain record first: the file takes the record size.
        z.write(obj, 0, &noise(1, REC as usize)).unwrap();
        obj
    };
    w.sync().unwrap();

    let l1 = text(11, REC as usize);
    let l3 = text(13, REC as usize);
    let l4 = text(14, REC as usize);
    let opaque = noise(5, 3000);
    let rec = |tag: u8, payload: Vec<u8>| ExternalRecord {
        tag,
        lsize: REC,
        payload,
        cksum: None,
    };

    // Not active: refused.
    let txg = w.txg;
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let e = z
            .write_precompressed(obj, 1, &rec(1, compress("lz4", &l1)))
            .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }
    assert!(ozfs_dsl::features::activate_external(&mut w).unwrap());
    assert!(!ozfs_dsl::features::activate_external(&mut w).unwrap());
    let sector = w.pool.min_sector();
    assert_eq!(sector, 4096);

    // The error cases.
    {
        let tx = w.fs_tx(root_ds).unwrap();
        let e = tx
            .write_precompressed(9999, 0, &rec(1, compress("lz4", &l1)))
            .unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "unknown object: {e}");
        let mut r = rec(1, compress("lz4", &l1));
        r.lsize = 65536;
        let e = tx.write_precompressed(obj, 1, &r).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "lsize: {e}");
        let e = tx
            .write_precompressed(obj, 1, &rec(200, vec![1; REC as usize - 15]))
            .unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "too large: {e}");
        let e = tx
            .write_precompressed(obj, 1, &rec(200, Vec::new()))
            .unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "empty: {e}");
        for bad_tag in [0u8, 6, 100, 127] {
            let e = tx
                .write_precompressed(obj, 1, &rec(bad_tag, vec![1; 10]))
                .unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "tag {bad_tag}: {e}");
        }
        let mut r = rec(3, compress("zstd", &l3));
        r.cksum = Some((ck::FLETCHER4, ozfs_format::Cksum([1, 2, 3, 4])));
        let e = tx.write_precompressed(obj, 3, &r).unwrap_err();
        assert!(matches!(e, Error::Checksum { .. }), "checksum: {e}");
        assert!(tx.ext.is_empty(), "a refused record was staged");
    }

    // Records 1 (lz4), 2 (hole), 3 (gzip, with the client's sha256), 4 (zstd), 5 (opaque).
    let p3 = compress("gzip", &l3);
    let img3 = ExtHeader::image(2, &p3, REC, sector).unwrap();
    let c3 = ozfs_codec::checksum::compute(ck::SHA256, &img3, false).unwrap();
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let ps = z
            .write_precompressed(obj, 1, &rec(1, compress("lz4", &l1)))
            .unwrap();
        assert_eq!(
            ps,
            (16 + compress("lz4", &l1).len() as u64).div_ceil(sector) * sector
        );
        let mut r3 = rec(2, p3.clone());
        r3.cksum = Some((ck::SHA256, c3));
        z.write_precompressed(obj, 3, &r3).unwrap();
        z.write_precompressed(obj, 4, &rec(3, compress("zstd", &l4)))
            .unwrap();
        z.write_precompressed(obj, 5, &rec(200, opaque.clone()))
            .unwrap();
        let a = z.attrs(obj).unwrap();
        assert_eq!(a.size, 6 * REC, "file grows to cover the last record");
    }
    let check = |recs: &[(u64, RawRecord)], staged: bool| {
        let kinds: Vec<&str> = recs.iter().map(|(_, r)| r.kind()).collect();
        assert_eq!(
            kinds,
            ["plain", "external", "hole", "external", "external", "external"],
            "staged={staged}"
        );
        assert_eq!(recs[1].1.payload(), compress("lz4", &l1).as_slice());
        assert_eq!(recs[3].1.payload(), p3.as_slice());
        assert_eq!(recs[4].1.payload(), compress("zstd", &l4).as_slice());
        assert_eq!(recs[5].1.payload(), opaque.as_slice());
        match &recs[3].1 {
            RawRecord::External {
                tag, csize, cksum, ..
            } => {
                assert_eq!((*tag, *csize as usize), (2, p3.len()));
                assert_eq!(*cksum, Some((ck::SHA256, c3)), "client checksum kept");
            }
            r => panic!("record 3: {r:?}"),
        }
        if let RawRecord::External { tag, psize, .. } = &recs[5].1 {
            assert_eq!((*tag, *psize), (200, 4096));
        }
    };
    {
        let tx = w.fs_tx(root_ds).unwrap();
        check(&tx.read_raw(obj, 0, 100).unwrap(), true);
        assert_eq!(
            tx.read(obj, REC, REC as usize).unwrap(),
            l1,
            "staged lz4 decodes"
        );
        let e = tx.read(obj, 5 * REC, 10).unwrap_err();
        assert!(matches!(e, Error::Opaque { tag: 200, .. }), "{e}");
    }
    w.sync().unwrap();
    {
        let tx = w.fs_tx(root_ds).unwrap();
        check(&tx.read_raw(obj, 0, 100).unwrap(), false);
        assert_eq!(tx.read(obj, REC, REC as usize).unwrap(), l1);
        assert_eq!(tx.read(obj, 3 * REC, REC as usize).unwrap(), l3);
        assert_eq!(tx.read(obj, 4 * REC, REC as usize).unwrap(), l4);
        assert_eq!(tx.read(obj, 2 * REC, 100).unwrap(), vec![0u8; 100]);
    }

    // Partial writes: recompressed with the same algorithm.
    let txg = w.txg;
    let mut m1 = l1.clone();
    let mut m4 = l4.clone();
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        z.write(obj, REC + 1000, b"PATCHED-ONE").unwrap();
        m1[1000..1011].copy_from_slice(b"PATCHED-ONE");
        z.write(obj, 4 * REC + 70000, b"PATCHED-FOUR").unwrap();
        m4[70000..70012].copy_from_slice(b"PATCHED-FOUR");
        let e = z.write(obj, 5 * REC + 5, b"x").unwrap_err();
        assert!(matches!(e, Error::Opaque { .. }), "{e}");
    }
    w.sync().unwrap();
    {
        let tx = w.fs_tx(root_ds).unwrap();
        let recs = tx.read_raw(obj, 0, 100).unwrap();
        for (i, tag) in [(1usize, 1u8), (4, 3)] {
            match &recs[i].1 {
                RawRecord::External { tag: t, .. } => assert_eq!(*t, tag, "record {i}"),
                r => panic!("record {i} after a partial write: {}", r.kind()),
            }
        }
        assert_eq!(recs[5].1.payload(), opaque.as_slice(), "opaque untouched");
        assert_eq!(tx.read(obj, REC, REC as usize).unwrap(), m1);
        assert_eq!(tx.read(obj, 4 * REC, REC as usize).unwrap(), m4);
    }

    // Changes that would touch the opaque record are refused before
    // anything changes: a write across records 4 and 5, a truncate inside
    // record 5, a hole punched from record 4 into 5.
    let before: Vec<String> = {
        let tx = w.fs_tx(root_ds).unwrap();
        let r = tx.read_raw(obj, 0, 100).unwrap();
        r.iter()
            .map(|(_, r)| format!("{}:{:?}", r.kind(), r.payload().len()))
            .collect()
    };
    let txg = w.txg;
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let e = z.write(obj, 5 * REC - 10, &[7u8; 20]).unwrap_err();
        assert!(matches!(e, Error::Opaque { .. }), "{e}");
        let e = z.truncate(obj, 5 * REC + 100).unwrap_err();
        assert!(matches!(e, Error::Opaque { .. }), "{e}");
        let e = z.punch_hole(obj, 4 * REC + 10, REC).unwrap_err();
        assert!(matches!(e, Error::Opaque { .. }), "{e}");
        assert_eq!(z.attrs(obj).unwrap().size, 6 * REC);
        assert!(
            z.tx.data.is_empty() && z.tx.ext.is_empty(),
            "a refused change was staged"
        );
    }
    // A partial write that no longer compresses: the record is stored plain.
    let mut m1b = m1.clone();
    let rough = noise(77, 130_900);
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        z.write(obj, REC + 50, &rough).unwrap();
        m1b[50..130_950].copy_from_slice(&rough);
    }
    w.sync().unwrap();
    {
        let tx = w.fs_tx(root_ds).unwrap();
        let r = tx.read_raw(obj, 0, 100).unwrap();
        let after: Vec<String> = r
            .iter()
            .map(|(_, r)| format!("{}:{:?}", r.kind(), r.payload().len()))
            .collect();
        assert_eq!(after[0], before[0]);
        assert_eq!(after[1], format!("plain:{REC}"), "record 1 stored plain");
        assert_eq!(after[2..], before[2..], "other records unchanged");
        assert_eq!(tx.read(obj, REC, REC as usize).unwrap(), m1b);
    }

    // Four records written together (for the merged-read test below).
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let root = z.root;
        let runs = z.create(root, b"runs", 0o100644, 0, 0, 0).unwrap();
        for b in 0..4u64 {
            let p = compress("lz4", &text(300 + b, REC as usize));
            z.write_precompressed(runs, b, &rec(1, p)).unwrap();
        }
    }
    // A refused record leaves a one-block file as it was (no block growth).
    let txg = w.txg;
    {
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        let root = z.root;
        let small = z.create(root, b"small", 0o100644, 0, 0, 0).unwrap();
        z.write(small, 0, b"tiny file").unwrap();
        let bs = z.tx.dnode(small).unwrap().phys.datablksz();
        assert!(bs < REC);
        let e = z
            .write_precompressed(small, 0, &rec(1, vec![1; REC as usize]))
            .unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert_eq!(
            z.tx.dnode(small).unwrap().phys.datablksz(),
            bs,
            "block grew"
        );
        // Accepted: the block takes the record size, the old bytes are
        // replaced by the record.
        z.write_precompressed(small, 0, &rec(1, compress("lz4", &l1)))
            .unwrap();
        assert_eq!(z.tx.dnode(small).unwrap().phys.datablksz(), REC);
        assert_eq!(z.tx.read(small, 0, REC as usize).unwrap(), l1);
    }
    w.sync().unwrap();
    drop(w);

    // The committed pool: version 5000, the feature active, no leaks.
    let pool = reopen(&dev);
    assert_eq!(pool.uberblock.version, 5000);
    ozfs_dsl::DslPool::open(pool.clone()).unwrap();
    assert!(pool.external_active());
    let r = ozfs_dsl::verify::leak_check(&pool).unwrap();
    assert!(r.clean(), "{r:?}");
    assert_eq!(r.external, 8, "records 3-5, /small and /runs");
    // A damaged block inside a merged read run: found by its own checksum
    // (not hidden by the run), the records around it still read.
    let dsl = ozfs_dsl::DslPool::open(pool.clone()).unwrap();
    let os = dsl.objset(&dsl.root().unwrap()).unwrap();
    let zpl = ozfs_zpl::Zpl::open(os.clone(), "apitest").unwrap();
    let dn = os.dnode(zpl.resolve("/runs").unwrap()).unwrap();
    // The records of /runs, written together, lie close enough to be read
    // as one run.
    let bps: Vec<_> = (0..4)
        .map(|b| os.block_bp(&dn, 0, b).unwrap().unwrap())
        .collect();
    for p in bps.windows(2) {
        let (a, b) = (p[0].dvas()[0], p[1].dvas()[0]);
        assert!(
            b.offset >= a.offset + a.asize && b.offset - (a.offset + a.asize) <= 32 << 10,
            "not neighbours: {a:?} {b:?}"
        );
    }
    let at = bps[1].dvas()[0].offset + (4 << 20) + 100;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev)
        .unwrap();
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut byte, at).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[byte[0] ^ 0xff], at).unwrap();
    drop(f);
    pool.cache.clear();
    let ok = os.read_raw(&dn, 0, 1).unwrap();
    assert_eq!(
        ok[0].1.payload(),
        compress("lz4", &text(300, REC as usize)).as_slice()
    );
    let ok = os.read_raw(&dn, 2, 2).unwrap();
    assert_eq!(
        ok[1].1.payload(),
        compress("lz4", &text(303, REC as usize)).as_slice()
    );
    let e = os.read_raw(&dn, 0, 4).unwrap_err();
    assert!(
        matches!(e, Error::Checksum { .. } | Error::Corrupt { .. })
            && e.to_string().contains("record 1")
            && e.to_string().contains("checksum"),
        "{e}"
    );
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::OpenOptions::new().write(true).open(&dev).unwrap(),
        &byte,
        at,
    )
    .unwrap();
    drop((os, dsl, pool));

    // A leak made on purpose is found.
    let pool = reopen(&dev);
    let pool = {
        let found = ozfs_spa::import::discover_paths_mode(std::slice::from_ref(&dev), true);
        drop(pool);
        Arc::new(Pool::open(found.into_iter().next().unwrap(), &PoolOptions::default()).unwrap())
    };
    let mut w = ozfs_dsl::sync::PoolWriter::open(pool).unwrap();
    let ext = w.alloc.alloc(4096, w.txg, &[]).unwrap();
    {
        let txg = w.txg;
        let mut z = ZplTx::open(w.fs_tx(root_ds).unwrap(), txg, REC).unwrap();
        z.write(obj, 0, b"something to sync").unwrap();
    }
    w.sync().unwrap();
    drop(w);
    let pool = reopen(&dev);
    ozfs_dsl::DslPool::open(pool.clone()).unwrap();
    let r = ozfs_dsl::verify::leak_check(&pool).unwrap();
    assert!(!r.clean());
    assert_eq!(r.leaked, vec![(ext.vdev, ext.offset, ext.asize)], "{r:?}");
}
