//! The intent log under power cuts, in process on simulated devices
//! (`ozfs_vdev::sim`): a file system is changed and its log committed the
//! way a mount commits it at `fsync` (`ozfs_zpl::zil` records,
//! `PoolWriter::zil_commit`, the pool's log writer), with a txg sync in
//! the middle that retires log blocks; every device write is traced. Each
//! crash point — after every write, the unflushed writes kept, dropped or
//! torn at random — is then imported (the log claimed), the file system
//! replayed and synced, and read back. It must be one of the states the
//! changes passed through (each change whole: sizes, link counts and
//! directory entries agree), never older than the last acknowledged commit,
//! and the pool must pass the leak check.

use ozfs_dsl::create::{create_filesystem, create_pool, TopSpec};
use ozfs_dsl::sync::PoolWriter;
use ozfs_dsl::verify::leak_check;
use ozfs_dsl::zil::Commit;
use ozfs_dsl::DslPool;
use ozfs_format::label::SPA_MINDEVSIZE;
use ozfs_vdev::sim::{self, Keep, SimDevice, TraceOp};
use ozfs_zpl::fs::Zpl;
use ozfs_zpl::write::ZplTx;
use ozfs_zpl::zil::{self as zz, Itx, ItxEntry};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod zilcommon;
use zilcommon::*;

/// The file system as a map: path → what is there (`d`, `l:TARGET`,
/// `f:LINKS:LEN:HASH`).
type State = BTreeMap<String, String>;

fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Walk the file system of the pool on `paths`, checking each directory's
/// size and link count against its entries.
fn read_state(paths: &[PathBuf]) -> std::result::Result<State, String> {
    let pool = open_pool(paths, false).map_err(|e| format!("open: {e}"))?;
    let dsl = DslPool::open(pool).map_err(|e| e.to_string())?;
    let info = dsl.lookup(FS).map_err(|e| e.to_string())?;
    let z =
        Zpl::open(dsl.objset(&info).map_err(|e| e.to_string())?, FS).map_err(|e| e.to_string())?;
    let mut out = State::new();
    let mut stack = vec![(String::new(), z.resolve("/").map_err(|e| e.to_string())?)];
    while let Some((path, obj)) = stack.pop() {
        let (dn, _a) = z.attrs(obj).map_err(|e| e.to_string())?;
        let ents = z.readdir(&dn).map_err(|e| e.to_string())?;
        let (_, da) = z.attrs(obj).map_err(|e| e.to_string())?;
        let mut subdirs = 0;
        for e in &ents {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let (edn, ea) = z.attrs(e.object).map_err(|x| x.to_string())?;
            match ea.mode & 0o170000 {
                0o040000 => {
                    subdirs += 1;
                    out.insert(p.clone(), "d".into());
                    stack.push((p, e.object));
                }
                0o120000 => {
                    let t = z.readlink(&edn, &ea).map_err(|x| x.to_string())?;
                    out.insert(p, format!("l:{}", String::from_utf8_lossy(&t)));
                }
                _ => {
                    let d = z
                        .read(&edn, &ea, 0, ea.size as usize)
                        .map_err(|x| x.to_string())?;
                    out.insert(p, format!("f:{}:{}:{:x}", ea.links, d.len(), hash(&d)));
                }
            }
        }
        if da.size != 2 + ents.len() as u64 || da.links != 2 + subdirs {
            return Err(format!(
                "directory '{path}/': size {} links {} with {} entries, {subdirs} subdirectories",
                da.size,
                da.links,
                ents.len()
            ));
        }
    }
    Ok(out)
}

/// A file system being changed, its changes logged as a mount logs them,
/// and a model of what it holds.
struct Run {
    w: PoolWriter,
    ds: u64,
    itxs: Vec<ItxEntry>,
    files: BTreeMap<String, (u64, Vec<u8>)>,
    other: BTreeMap<String, String>,
    next_id: u64,
    /// The model after each change.
    states: Vec<State>,
    /// (write clock when a commit was acknowledged, states it covers).
    acks: Vec<(u64, usize)>,
}

impl Run {
    fn state(&self) -> State {
        let mut s: State = self.other.clone();
        for (p, (id, d)) in &self.files {
            let links = self.files.values().filter(|(i, _)| i == id).count();
            s.insert(p.clone(), format!("f:{links}:{}:{:x}", d.len(), hash(d)));
        }
        s
    }

    fn z(&mut self) -> ZplTx<'_> {
        let txg = self.w.txg;
        ZplTx::open(self.w.fs_tx(self.ds).unwrap(), txg, RS).unwrap()
    }

    fn dir(&mut self, path: &str) -> (u64, Vec<u8>) {
        let (parent, name) = path.rsplit_once('/').unwrap();
        let z = self.z();
        let d = z
            .resolve(if parent.is_empty() { "/" } else { parent })
            .unwrap();
        (d, name.as_bytes().to_vec())
    }

    fn log(&mut self, itx: Itx) {
        let txg = self.w.txg;
        self.itxs.push(ItxEntry { txg, itx });
        let s = self.state();
        self.states.push(s);
    }

    fn create(&mut self, path: &str, data: &[u8]) {
        let (d, n) = self.dir(path);
        let mut z = self.z();
        let obj = z.create(d, &n, 0o100644, 0, 0, 0).unwrap();
        let itx = zz::create_itx(&z, d, &n, obj).unwrap();
        self.next_id += 1;
        self.files.insert(path.into(), (self.next_id, Vec::new()));
        self.log(itx);
        self.write(path, 0, data);
    }

    fn write(&mut self, path: &str, off: u64, data: &[u8]) {
        let z = self.z();
        let obj = z.resolve(path).unwrap();
        let mut z = self.z();
        z.write(obj, off, data).unwrap();
        let f = &mut self.files.get_mut(path).unwrap().1;
        let end = off as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[off as usize..end].copy_from_slice(data);
        // Every name of the file sees the data.
        let id = self.files[path].0;
        let now = self.files[path].1.clone();
        for (_, (i, d)) in self.files.iter_mut() {
            if *i == id {
                *d = now.clone();
            }
        }
        self.log(Itx::Write {
            obj,
            off,
            len: data.len() as u64,
        });
    }

    fn truncate(&mut self, path: &str, size: u64) {
        let obj = self.z().resolve(path).unwrap();
        let mut z = self.z();
        z.truncate(obj, size).unwrap();
        let itx = zz::setattr_itx(&z, obj, zz::attr::SIZE).unwrap();
        let id = self.files[path].0;
        for (_, (i, d)) in self.files.iter_mut() {
            if *i == id {
                d.resize(size as usize, 0);
            }
        }
        self.log(itx);
    }

    fn mkdir(&mut self, path: &str) {
        let (d, n) = self.dir(path);
        let mut z = self.z();
        let obj = z.mkdir(d, &n, 0o755, 0, 0).unwrap();
        let itx = zz::create_itx(&z, d, &n, obj).unwrap();
        self.other.insert(path.into(), "d".into());
        self.log(itx);
    }

    fn symlink(&mut self, path: &str, target: &str) {
        let (d, n) = self.dir(path);
        let mut z = self.z();
        let obj = z.symlink(d, &n, target.as_bytes(), 0, 0).unwrap();
        let itx = zz::create_itx(&z, d, &n, obj).unwrap();
        self.other.insert(path.into(), format!("l:{target}"));
        self.log(itx);
    }

    fn link(&mut self, from: &str, to: &str) {
        let obj = self.z().resolve(from).unwrap();
        let (d, n) = self.dir(to);
        self.z().link(d, &n, obj).unwrap();
        let f = self.files[from].clone();
        self.files.insert(to.into(), f);
        self.log(zz::link_itx(d, &n, obj));
    }

    fn unlink(&mut self, path: &str) {
        let (d, n) = self.dir(path);
        self.z().unlink(d, &n).unwrap();
        self.files.remove(path);
        self.log(zz::remove_itx(d, &n, false));
    }

    fn rename(&mut self, from: &str, to: &str) {
        let (sd, sn) = self.dir(from);
        let (td, tn) = self.dir(to);
        self.z().rename(sd, &sn, td, &tn).unwrap();
        self.files.remove(to);
        if let Some(f) = self.files.remove(from) {
            self.files.insert(to.into(), f);
        } else {
            let v = self.other.remove(from).unwrap();
            self.other.insert(to.into(), v);
        }
        self.log(zz::rename_itx(sd, &sn, td, &tn, false));
    }

    /// fsync: commit the log; returns once it is durable.
    fn commit(&mut self, dev: &SimDevice) {
        let itxs = std::mem::take(&mut self.itxs);
        commit_itxs(&mut self.w, self.ds, itxs);
        self.acks.push((dev.write_clock(), self.states.len()));
    }
}

fn run_crashes(version: u64) {
    std::env::set_var("OZFS_CHECK_SPACE", "1");
    let tag = format!("zilc{version}");
    let name = format!("{tag}-0");
    let dev = SimDevice::new(&name, SPA_MINDEVSIZE, 7);
    sim::register(&name, dev.clone());
    let paths = vec![PathBuf::from(format!("sim:{name}"))];
    let features: Vec<&str> = if version == 5000 {
        ozfs_dsl::features::FEATURES
            .iter()
            .map(|f| f.name)
            .collect()
    } else {
        Vec::new()
    };
    {
        let mut w = create_pool(
            "p",
            &[TopSpec::Disk(paths[0].clone())],
            9,
            version,
            &features,
        )
        .unwrap();
        create_filesystem(&mut w, FS, &[]).unwrap();
        w.sync().unwrap();
    }
    let base = dev.fork(1);
    let run_dev = base.fork(2);
    sim::register(&name, run_dev.clone());
    let w = PoolWriter::open(open_pool(&paths, true).unwrap()).unwrap();
    let ds = w.dsl().lookup(FS).unwrap().ds_obj;
    run_dev.record_trace(true);
    let start = run_dev.write_clock();
    let mut r = Run {
        w,
        ds,
        itxs: Vec::new(),
        files: BTreeMap::new(),
        other: BTreeMap::new(),
        next_id: 0,
        states: vec![State::new()],
        acks: Vec::new(),
    };
    r.create("/a", &pattern(1, 10_000));
    r.commit(&run_dev); // starts the chain: a txg commit
    r.mkdir("/d");
    r.create("/d/b", &pattern(2, 3000));
    r.symlink("/d/s", "target-x");
    r.commit(&run_dev);
    r.write("/a", 5000, &pattern(3, 200));
    r.write("/a", 10_000, &pattern(4, 70_000));
    r.commit(&run_dev);
    r.link("/d/b", "/bl");
    r.rename("/a", "/d/a2");
    r.commit(&run_dev);
    r.w.sync().unwrap(); // retires the blocks of everything so far
    r.acks.push((run_dev.write_clock(), r.states.len()));
    r.truncate("/d/a2", 4000);
    r.create("/r1", b"one");
    r.create("/r2", b"two");
    r.commit(&run_dev);
    r.unlink("/bl");
    r.mkdir("/e");
    r.rename("/d/s", "/e/s2");
    r.rename("/r1", "/r2");
    r.commit(&run_dev);
    r.create("/c", &pattern(5, 100)); // never acknowledged
    let written = run_dev.write_clock() - start;
    // What the last writer left: no close, no sync (a crash).
    let trace: Vec<TraceOp> = run_dev.take_trace();
    drop(r.w);
    assert!(written > 20, "{written} writes");
    let states = r.states;
    let acks = r.acks;
    let mut replayed = 0;
    for n in 0..=written {
        for (k, keep) in [Keep::Random, Keep::RandomTorn].into_iter().enumerate() {
            let what = format!("v{version}: crash after {n} of {written} writes ({keep:?})");
            let crashed = base.replay(&trace, start + n, keep, n * 2 + k as u64);
            sim::register(&name, crashed);
            let mut w = PoolWriter::open(open_pool(&paths, true).unwrap())
                .unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let st = zz::replay_if_needed(&mut w, ds, RS, true)
                .unwrap_or_else(|e| panic!("{what}: replay: {e}"));
            if st.is_some_and(|s| s.applied > 0) {
                replayed += 1;
            }
            w.sync().unwrap_or_else(|e| panic!("{what}: sync: {e}"));
            drop(w);
            let got = read_state(&paths).unwrap_or_else(|e| panic!("{what}: {e}"));
            let acked = acks
                .iter()
                .filter(|(c, _)| *c <= start + n)
                .map(|(_, s)| *s)
                .max()
                .unwrap_or(0);
            let at = states.iter().position(|s| *s == got);
            match at {
                Some(i) if i + 1 >= acked => {}
                Some(i) => panic!(
                    "{what}: state after change {i}, but {} changes were acknowledged",
                    acked - 1
                ),
                None => panic!("{what}: a state no sequence of changes passes through: {got:?}"),
            }
            let pool = open_pool(&paths, false).unwrap();
            let lc = leak_check(&pool).unwrap_or_else(|e| panic!("{what}: leak check: {e}"));
            assert!(lc.clean(), "{what}: leak check: {lc:?}");
        }
    }
    assert!(replayed > 0, "no crash point needed a replay");
    eprintln!(
        "zil crash v{version}: {} crash points over {written} writes, {replayed} replayed",
        2 * (written + 1)
    );
}

#[test]
fn every_crash_point_of_log_commits_keeps_acknowledged_changes_v5000() {
    run_crashes(5000);
}

#[test]
fn every_crash_point_of_log_commits_keeps_acknowledged_changes_v23() {
    run_crashes(23);
}

/// Hostile intent logs (well sealed, so they pass the checksum): records
/// naming objects that do not exist, impossible offsets and sizes,
/// directories moved into themselves, a type ozfs does not know. Each is
/// claimed and replayed after a crash: the replay applies it or fails with
/// an error naming the record — never a panic — and a failed replay leaves
/// the pool clean and the file system refused for writing (its log kept),
/// while the next import still opens.
#[test]
fn hostile_log_records_fail_cleanly() {
    use ozfs_format::zil::{self as fz, tx, LogRecord, LrCommon, Record};
    std::env::set_var("OZFS_CHECK_SPACE", "1");
    let name = "zilh-0";
    let dev = SimDevice::new(name, SPA_MINDEVSIZE, 9);
    sim::register(name, dev.clone());
    let paths = vec![PathBuf::from(format!("sim:{name}"))];
    let (root, dir) = {
        let mut w = create_pool("p", &[TopSpec::Disk(paths[0].clone())], 9, 5000, &[]).unwrap();
        let ds = create_filesystem(&mut w, FS, &[]).unwrap();
        let txg = w.txg;
        let mut z = ZplTx::open(w.fs_tx(ds).unwrap(), txg, RS).unwrap();
        let root = z.root;
        let dir = z.mkdir(root, b"d", 0o755, 0, 0).unwrap();
        z.create(root, b"f", 0o644, 0, 0, 0).unwrap();
        w.sync().unwrap();
        (root, dir)
    };
    let base = dev.fork(1);
    let rec = |txtype: u64, record: Record| LogRecord {
        common: LrCommon {
            txtype,
            ci: false,
            reclen: 0,
            txg: 0,
            seq: 0,
        },
        record,
    };
    let create = |doid: u64, foid: u64, name: &[u8], mode: u64| {
        Record::Create(fz::LrCreate {
            doid,
            foid,
            mode,
            name: name.to_vec(),
            ..Default::default()
        })
    };
    let cases: Vec<(&str, LogRecord)> = vec![
        (
            "create in a missing directory",
            rec(tx::CREATE, create(999_999, 5000, b"x", 0o100644)),
        ),
        (
            "create over an existing object",
            rec(tx::CREATE, create(root, dir, b"y", 0o100644)),
        ),
        (
            "create with a slash in its name",
            rec(tx::CREATE, create(root, 6000, b"a/b", 0o100644)),
        ),
        (
            "create of object 2^47",
            rec(tx::CREATE, create(root, 1 << 47, b"z", 0o100644)),
        ),
        (
            "remove of a missing name",
            rec(
                tx::REMOVE,
                Record::Remove(fz::LrRemove {
                    doid: root,
                    name: b"nope".to_vec(),
                }),
            ),
        ),
        (
            "link to a directory",
            rec(
                tx::LINK,
                Record::Link(fz::LrLink {
                    doid: root,
                    link_obj: dir,
                    name: b"dl".to_vec(),
                }),
            ),
        ),
        (
            "rename of a directory into itself",
            rec(
                tx::RENAME,
                Record::Rename(fz::LrRename {
                    sdoid: root,
                    tdoid: dir,
                    sname: b"d".to_vec(),
                    tname: b"inner".to_vec(),
                    whiteout: None,
                }),
            ),
        ),
        (
            "write at 2^63",
            rec(
                tx::WRITE,
                Record::Write(fz::LrWrite {
                    foid: dir + 1,
                    offset: 1 << 63,
                    length: 8,
                    data: vec![1; 8],
                    ..Default::default()
                }),
            ),
        ),
        (
            "truncate to 2^62",
            rec(
                tx::TRUNCATE,
                Record::Truncate(fz::LrTruncate {
                    foid: dir + 1,
                    offset: 1 << 62,
                    length: 0,
                }),
            ),
        ),
        (
            "a type ozfs does not know",
            rec(
                77,
                Record::Unknown {
                    common: LrCommon {
                        txtype: 77,
                        ci: false,
                        reclen: 48,
                        txg: 0,
                        seq: 0,
                    },
                    body: vec![0xee; 16],
                },
            ),
        ),
    ];
    for (i, (what, r)) in cases.into_iter().enumerate() {
        let run = base.fork(100 + i as u64);
        sim::register(name, run.clone());
        {
            let mut w = PoolWriter::open(open_pool(&paths, true).unwrap()).unwrap();
            let ds = w.dsl().lookup(FS).unwrap().ds_obj;
            // The chain first (a txg commit), then the hostile record.
            assert!(matches!(
                w.zil_commit(ds, Vec::new()).unwrap(),
                Commit::NeedsSync
            ));
            w.sync().unwrap();
            let txg = w.txg;
            commit_records(&mut w, ds, vec![(txg, r)]);
            // Crash: no sync, no close.
        }
        let mut w = PoolWriter::open(open_pool(&paths, true).unwrap())
            .unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let ds = w.dsl().lookup(FS).unwrap().ds_obj;
        match zz::replay_if_needed(&mut w, ds, RS, true) {
            Ok(_) => {}
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("intent-log record"), "{what}: {msg}");
                // The log stays, the file system is not written.
                let refused = w.fs_tx(ds).err().map(|e| e.to_string()).unwrap_or_default();
                assert!(
                    refused.contains("intent log"),
                    "{what}: fs_tx after a failed replay: {refused:?}"
                );
            }
        }
        w.sync().unwrap_or_else(|e| panic!("{what}: sync: {e}"));
        drop(w);
        let pool = open_pool(&paths, false).unwrap();
        let lc = leak_check(&pool).unwrap_or_else(|e| panic!("{what}: leak check: {e}"));
        assert!(lc.clean(), "{what}: leak check: {lc:?}");
        PoolWriter::open(open_pool(&paths, true).unwrap())
            .unwrap_or_else(|e| panic!("{what}: open again: {e}"));
    }
}
