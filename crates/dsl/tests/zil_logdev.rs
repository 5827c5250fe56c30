//! Separate intent-log devices, in process on simulated devices
//! (`ozfs_vdev::sim`): a pool made with a log device (`TopSpec::Log`), a
//! mirrored one added (`add_top`); file data goes to the normal vdev only,
//! intent-log blocks to the log devices (in turn); after a crash the log is
//! claimed and replayed from them, and the pool passes the leak check with
//! the space check on at every sync.

use ozfs_dsl::create::{add_top, create_filesystem, create_pool, TopSpec};
use ozfs_dsl::sync::PoolWriter;
use ozfs_dsl::verify::leak_check;
use ozfs_dsl::DslPool;
use ozfs_format::label::SPA_MINDEVSIZE;
use ozfs_format::zil::ZilHeader;
use ozfs_vdev::sim::{self, SimDevice};
use ozfs_zpl::fs::Zpl;
use ozfs_zpl::write::ZplTx;
use ozfs_zpl::zil::{self as zz, Itx, ItxEntry};
use std::path::PathBuf;
use std::sync::Arc;

mod zilcommon;
use zilcommon::*;

/// Write `data` at `off` of `path` (created if missing) and log it.
fn write(
    w: &mut PoolWriter,
    ds: u64,
    itxs: &mut Vec<ItxEntry>,
    path: &[u8],
    off: u64,
    data: &[u8],
) {
    let txg = w.txg;
    let mut z = ZplTx::open(w.fs_tx(ds).unwrap(), txg, RS).unwrap();
    let root = z.root;
    let name = format!("/{}", String::from_utf8_lossy(path));
    let obj = match z.resolve(&name) {
        Ok(o) => o,
        Err(_) => {
            let obj = z.create(root, path, 0o100644, 0, 0, 0).unwrap();
            let itx = zz::create_itx(&z, root, path, obj).unwrap();
            itxs.push(ItxEntry { txg, itx });
            obj
        }
    };
    z.write(obj, off, data).unwrap();
    itxs.push(ItxEntry {
        txg,
        itx: Itx::Write {
            obj,
            off,
            len: data.len() as u64,
        },
    });
}

/// fsync: commit the log, returning once it is durable.
fn commit(w: &mut PoolWriter, ds: u64, itxs: &mut Vec<ItxEntry>) {
    commit_itxs(w, ds, std::mem::take(itxs));
}

fn read_file(paths: &[PathBuf], file: &str) -> Vec<u8> {
    let pool = open_pool(paths, false).unwrap();
    let dsl = DslPool::open(pool).unwrap();
    let info = dsl.lookup(FS).unwrap();
    let z = Zpl::open(dsl.objset(&info).unwrap(), FS).unwrap();
    let obj = z.resolve(file).unwrap();
    let (dn, a) = z.attrs(obj).unwrap();
    z.read(&dn, &a, 0, a.size as usize).unwrap()
}

/// The log chain of the file system as last committed: every block's vdev.
fn chain_vdevs(paths: &[PathBuf]) -> (Vec<u64>, usize) {
    let pool = open_pool(paths, false).unwrap();
    let dsl = DslPool::open(pool.clone()).unwrap();
    let info = dsl.lookup(FS).unwrap();
    let os = ozfs_dmu::objset::Objset::open(pool.clone(), &info.ds.bp).unwrap();
    let h = ZilHeader::decode(&os.phys.zil_header, os.swap).unwrap();
    let c = ozfs_dsl::zil::read_chain(&pool, &h, info.ds_obj, None);
    assert!(c.error.is_none(), "{:?}", c.error);
    let vdevs = c.blocks.iter().map(|b| b.dvas()[0].vdev).collect();
    (vdevs, c.records.len())
}

fn run(version: u64) {
    std::env::set_var("OZFS_CHECK_SPACE", "1");
    let tag = format!("zlogdev{version}");
    let devs: Vec<(String, Arc<SimDevice>)> = (0..4)
        .map(|i| {
            let name = format!("{tag}-{i}");
            let d = SimDevice::new(&name, SPA_MINDEVSIZE, 11 + i);
            sim::register(&name, d.clone());
            (name, d)
        })
        .collect();
    let paths: Vec<PathBuf> = devs
        .iter()
        .map(|(n, _)| PathBuf::from(format!("sim:{n}")))
        .collect();
    let features: Vec<&str> = if version == 5000 {
        ozfs_dsl::features::FEATURES
            .iter()
            .map(|f| f.name)
            .collect()
    } else {
        Vec::new()
    };
    let (ds, data1, data2) = {
        // A data disk and a log disk; a mirrored log added later.
        let mut w = create_pool(
            "p",
            &[
                TopSpec::Disk(paths[0].clone()),
                TopSpec::Log(Box::new(TopSpec::Disk(paths[1].clone()))),
            ],
            9,
            version,
            &features,
        )
        .unwrap();
        assert!(w.alloc.groups[1].log && !w.alloc.groups[1].allocatable);
        assert!(!w.alloc.groups[0].log && w.alloc.groups[0].allocatable);
        add_top(
            &mut w,
            &TopSpec::Log(Box::new(TopSpec::Mirror(vec![
                paths[2].clone(),
                paths[3].clone(),
            ]))),
        )
        .unwrap();
        assert!(w.alloc.groups[2].log && !w.alloc.groups[2].allocatable);
        let top = &w.pool.root.children[2];
        assert_eq!(top.config.get_u64("is_log"), Some(1));
        let ds = create_filesystem(&mut w, FS, &[]).unwrap();
        let mut itxs = Vec::new();
        // Data synced the ordinary way: normal class only.
        let data1 = pattern(1, 300_000);
        write(&mut w, ds, &mut itxs, b"synced", 0, &data1);
        itxs.clear();
        w.sync().unwrap();
        for g in &w.alloc.groups[1..] {
            assert_eq!(g.alloc_bytes(), 0, "vdev {} got blocks", g.vdev);
        }
        // The SIZE and deflated space leave the log devices out.
        let sp = w.dsl().space().unwrap();
        assert_eq!(sp.tops.len(), 3);
        assert_eq!(sp.size, sp.tops[0].0);
        assert_eq!(sp.alloc, sp.tops[0].1);
        assert!(sp.tops[1].0 > 0 && sp.tops[2].0 > 0);
        // Logged changes, committed: the first commit makes the chain (a
        // txg), the next ones write log blocks.
        write(&mut w, ds, &mut itxs, b"logged", 0, &pattern(2, 5000));
        commit(&mut w, ds, &mut itxs);
        let mut data2 = pattern(2, 5000);
        for k in 0..6u64 {
            let chunk = pattern(10 + k, 20_000);
            let off = 5000 + k * 20_000;
            write(&mut w, ds, &mut itxs, b"logged", off, &chunk);
            data2.extend_from_slice(&chunk);
            commit(&mut w, ds, &mut itxs);
        }
        // Crash: no sync, no close.
        (ds, data1, data2)
    };
    // The chain is on the log devices, both of them.
    let (vdevs, nrec) = chain_vdevs(&paths);
    assert!(nrec > 0, "no records in the log");
    assert!(vdevs.len() >= 3, "chain {vdevs:?}");
    assert!(vdevs.iter().all(|v| *v == 1 || *v == 2), "chain {vdevs:?}");
    assert!(vdevs.contains(&1) && vdevs.contains(&2), "chain {vdevs:?}");
    let lc = leak_check(&open_pool(&paths, false).unwrap()).unwrap();
    assert!(lc.clean(), "before replay: {lc:?}");
    assert!(lc.log > 0);
    // Import: the log is claimed and replayed.
    {
        let mut w = PoolWriter::open(open_pool(&paths, true).unwrap()).unwrap();
        assert!(w.alloc.groups[1].log && w.alloc.groups[2].log);
        assert!(!w.alloc.groups[1].allocatable && !w.alloc.groups[2].allocatable);
        let st = zz::replay_if_needed(&mut w, ds, RS, true).unwrap();
        assert!(st.is_some_and(|s| s.applied > 0), "nothing replayed");
        w.sync().unwrap();
        // The replayed chain's blocks come free after their deferral:
        // then nothing at all is left on the log devices.
        for _ in 0..4 {
            w.force_empty_txg().unwrap();
        }
        for g in &w.alloc.groups[1..] {
            assert_eq!(g.alloc_bytes(), 0, "vdev {} keeps blocks", g.vdev);
        }
    }
    assert_eq!(read_file(&paths, "/synced"), data1);
    assert_eq!(read_file(&paths, "/logged"), data2);
    let lc = leak_check(&open_pool(&paths, false).unwrap()).unwrap();
    assert!(lc.clean(), "after replay: {lc:?}");
}

#[test]
fn log_devices_take_the_intent_log_v5000() {
    run(5000);
}

#[test]
fn log_devices_take_the_intent_log_v23() {
    run(23);
}
