//! In-process pool tests on simulated devices (`ozfs_vdev::sim`): pool
//! creation, file writes, syncs, snapshots, crashes and reopening all run
//! in memory, with no external tool, in milliseconds per pool.
//!
//! Every test turns on the DSL's space check at every sync
//! (`OZFS_CHECK_SPACE=1`, which release builds leave off) and runs the leak
//! check (`verify::leak_check`) on every pool it reopens.

use ozfs_dsl::create::{create_filesystem, create_pool, TopSpec};
use ozfs_dsl::sync::PoolWriter;
use ozfs_dsl::verify::leak_check;
use ozfs_dsl::DslPool;
use ozfs_format::label::{SPA_MINDEVSIZE, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};
use ozfs_format::Result;
use ozfs_spa::import::discover_paths_mode;
use ozfs_spa::pool::{Pool, PoolOptions};
use ozfs_vdev::sim::{self, CrashMode, Faults, Keep, SimDevice, TraceOp};
use ozfs_zpl::fs::Zpl;
use ozfs_zpl::write::ZplTx;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const DEV_SIZE: u64 = SPA_MINDEVSIZE;
const FS: &str = "p/fs";

fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // Before any pool is opened (the check is read when a writer starts).
    ONCE.call_once(|| std::env::set_var("OZFS_CHECK_SPACE", "1"));
}

/// Register fresh devices `{tag}-0..n` and return them with their paths.
fn devices(tag: &str, n: usize, seed: u64) -> (Vec<Arc<SimDevice>>, Vec<PathBuf>) {
    let mut devs = Vec::new();
    let mut paths = Vec::new();
    for i in 0..n {
        let name = format!("{tag}-{i}");
        let d = SimDevice::new(
            &name,
            DEV_SIZE,
            seed.wrapping_mul(31).wrapping_add(i as u64),
        );
        sim::register(&name, d.clone());
        paths.push(PathBuf::from(format!("sim:{name}")));
        devs.push(d);
    }
    (devs, paths)
}

/// Register `devs` under their own names (replacing what was there).
fn register_all(devs: &[Arc<SimDevice>]) {
    for d in devs {
        sim::register(d.short_name(), d.clone());
    }
}

/// A new pool `p` with file system `p/fs` on the devices (one disk, or a mirror).
fn new_pool(paths: &[PathBuf]) -> (PoolWriter, u64) {
    new_pool_v(paths, 23)
}

/// [`new_pool`] of pool `version`: 23, or 5000 with every feature
/// `zpool create` enables.
fn new_pool_v(paths: &[PathBuf], version: u64) -> (PoolWriter, u64) {
    let top = if paths.len() == 1 {
        TopSpec::Disk(paths[0].clone())
    } else {
        TopSpec::Mirror(paths.to_vec())
    };
    let features: Vec<&str> = if version == 5000 {
        ozfs_dsl::features::FEATURES
            .iter()
            .map(|f| f.name)
            .collect()
    } else {
        Vec::new()
    };
    let mut w = create_pool("p", &[top], 9, version, &features).expect("create pool");
    let ds = create_filesystem(&mut w, FS, &[]).expect("create fs");
    w.sync().expect("sync");
    (w, ds)
}

/// Open the pool on `paths` as it is on the devices.
fn open_pool(paths: &[PathBuf], writable: bool) -> Result<Arc<Pool>> {
    let found = discover_paths_mode(paths, writable)
        .into_iter()
        .next()
        .ok_or_else(|| ozfs_format::Error::not_found("no pool on the devices"))?;
    Ok(Arc::new(Pool::open(
        found,
        &PoolOptions {
            readonly: !writable,
            max_txg: None,
        },
    )?))
}

fn open_writer(paths: &[PathBuf]) -> Result<(PoolWriter, u64)> {
    let w = PoolWriter::open(open_pool(paths, true)?)?;
    let ds = w.dsl().lookup(FS)?.ds_obj;
    Ok((w, ds))
}

/// Create or replace file `name` in the root of `ds` with `data`.
fn write_file(w: &mut PoolWriter, ds: u64, name: &str, data: &[u8]) -> Result<()> {
    write_file_rs(w, ds, name, data, 131072)
}

/// [`write_file`] with a record size for new files.
fn write_file_rs(w: &mut PoolWriter, ds: u64, name: &str, data: &[u8], rs: u64) -> Result<()> {
    let txg = w.txg;
    let tx = w.fs_tx(ds)?;
    let mut z = ZplTx::open(tx, txg, rs)?;
    let root = z.root;
    let obj = match z.lookup(root, name.as_bytes())? {
        Some(o) => {
            z.truncate(o, 0)?;
            o
        }
        None => z.create(root, name.as_bytes(), 0o644, 0, 0, 0)?,
    };
    z.write(obj, 0, data)
}

fn zpl(pool: &Arc<Pool>) -> Result<Zpl> {
    let dsl = DslPool::open(pool.clone())?;
    let info = dsl.lookup(FS)?;
    Zpl::open(dsl.objset(&info)?, FS)
}

fn read_file(z: &Zpl, name: &str) -> Result<Vec<u8>> {
    let obj = z.resolve(&format!("/{name}"))?;
    let (dn, a) = z.attrs(obj)?;
    z.read(&dn, &a, 0, a.size as usize)
}

/// The leak check of the pool's last synced state is clean. (`leak_check`
/// follows `pool.uberblock`, which is the one found at open: a live
/// writer's pool is checked by opening the devices again, [`assert_clean_on_disk`].)
fn assert_clean(pool: &Arc<Pool>, what: &str) {
    let r = leak_check(pool).unwrap_or_else(|e| panic!("{what}: leak check failed: {e}"));
    assert!(r.clean(), "{what}: leak check not clean: {r:?}");
}

/// Deterministic file contents.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = sim::SplitMix64::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The pool as the devices hold it now is clean.
fn assert_clean_on_disk(paths: &[PathBuf], what: &str) {
    let pool = open_pool(paths, false).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert_clean(&pool, what);
}

fn in_label_area(off: u64) -> bool {
    !(VDEV_LABEL_START_SIZE..DEV_SIZE - VDEV_LABEL_END_SIZE).contains(&off)
}

/// a. Copy-on-write: a rewrite never touches the blocks the last
/// uberblock reaches. Power fails just before the rewrite's first
/// uberblock/label write, with every earlier write durable: the pool
/// reopens with the old content, clean. After a complete sync the new
/// content reads back.
#[test]
fn cow_sync_keeps_old_tree_until_uberblock() {
    init();
    let (devs, paths) = devices("cow", 1, 1);
    let (mut w, ds) = new_pool(&paths);
    let old = pattern(1, 300_000);
    let new = pattern(2, 300_000);
    write_file(&mut w, ds, "f", &old).unwrap();
    w.sync().unwrap();
    drop(w);
    let base = devs[0].fork(11);

    // Dry run: where the rewrite's writes go.
    let dry = base.fork(12);
    sim::register("cow-0", dry.clone());
    let (mut w, ds) = open_writer(&paths).unwrap();
    dry.record_trace(true);
    write_file(&mut w, ds, "f", &new).unwrap();
    w.sync().unwrap();
    let log: Vec<(u64, usize)> = dry
        .take_trace()
        .into_iter()
        .filter_map(|op| match op {
            TraceOp::Write { offset, data, .. } => Some((offset, data.len())),
            TraceOp::Flush { .. } => None,
        })
        .collect();
    drop(w);
    let first_label = log
        .iter()
        .rposition(|&(off, _)| !in_label_area(off))
        .map(|i| i + 1)
        .expect("the sync wrote data");
    assert!(first_label < log.len(), "the sync wrote no uberblock");
    assert!(log[first_label..].iter().all(|&(o, _)| in_label_area(o)));
    assert!(
        log[..first_label].iter().all(|&(o, _)| !in_label_area(o)),
        "a label was written before the txg's data: {log:?}"
    );

    // The same sync, power lost at the first label write, all else durable.
    let dev = base.fork(13);
    sim::register("cow-0", dev.clone());
    let (mut w, ds) = open_writer(&paths).unwrap();
    dev.crash_after_writes(first_label as u64, CrashMode::Drop);
    write_file(&mut w, ds, "f", &new).unwrap();
    w.sync().unwrap();
    drop(w);
    assert!(dev.crashed());
    let crashed = dev.crash_with(Keep::All);
    sim::register("cow-0", crashed);
    let pool = open_pool(&paths, false).unwrap();
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), old);
    assert_clean(&pool, "crashed before the uberblock");

    // The complete sync (the dry run's device, crashed with nothing unflushed lost).
    sim::register("cow-0", dry.crash_with(Keep::None));
    let pool = open_pool(&paths, false).unwrap();
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), new);
    assert_clean(&pool, "after the rewrite");
    // And a writer opened on it goes on (space check included).
    let (mut w, ds) = open_writer(&paths).unwrap();
    write_file(&mut w, ds, "g", b"more").unwrap();
    w.sync().unwrap();
}

/// b. Destroying a snapshot returns the space only it held; the head's
/// data is intact after reopening and the pool is clean.
#[test]
fn snapshot_destroy_returns_space() {
    init();
    let (_devs, paths) = devices("snap", 1, 2);
    let (mut w, ds) = new_pool(&paths);
    let size = 1 << 20;
    let v1 = pattern(3, size);
    let v2 = pattern(4, size);
    write_file(&mut w, ds, "f", &v1).unwrap();
    w.sync().unwrap();
    let alloc = |w: &PoolWriter| w.dsl().space().unwrap().alloc;
    let a0 = alloc(&w);
    w.snapshot("p/fs@s").unwrap();
    let ds = w.dsl().lookup(FS).unwrap().ds_obj;
    write_file(&mut w, ds, "f", &v2).unwrap();
    w.sync().unwrap();
    let a1 = alloc(&w);
    assert!(
        a1 >= a0 + size as u64,
        "the snapshot holds the old data: {a0} -> {a1}"
    );
    assert_clean_on_disk(&paths, "with the snapshot");
    w.destroy_snapshot("p/fs@s").unwrap();
    w.sync().unwrap();
    // Frees are deferred a few txgs.
    for _ in 0..4 {
        w.force_empty_txg().unwrap();
    }
    let a2 = alloc(&w);
    assert!(
        a2 + size as u64 <= a1 + (64 << 10),
        "destroying the snapshot returned its space: {a1} -> {a2}"
    );
    assert_clean_on_disk(&paths, "after destroy");
    drop(w);
    let pool = open_pool(&paths, false).unwrap();
    assert_clean(&pool, "reopened");
    let dsl = DslPool::open(pool.clone()).unwrap();
    assert!(dsl.lookup("p/fs@s").is_err());
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), v2);
    // A writer on it (its space check runs at the sync) goes on.
    let (mut w, ds) = open_writer(&paths).unwrap();
    write_file(&mut w, ds, "g", &v1).unwrap();
    w.sync().unwrap();
}

/// A pool filled into its slop (by a writer that did not keep it, as
/// ozfs before `dsl::slop` did): user writes, create and snapshot are
/// refused with ENOSPC (they may use none of the slop), a property may
/// still be set (half of it), a snapshot destroyed (three quarters), and
/// after the destroy's frees writes fit again.
#[test]
fn a_pool_in_its_slop_refuses_writes_but_not_destroys() {
    init();
    let (_devs, paths) = devices("slop", 1, 9);
    let (mut w, ds) = new_pool_v(&paths, 5000);
    let (d, used) = w.pool_space().unwrap().expect("pool space");
    // Half the pool is the slop of one this small (under 256 MiB).
    assert!(
        d.slop >= d.dspace / 2 - (1 << 20) && d.slop <= d.dspace / 2,
        "{d:?}"
    );
    // Between the limit of user writes and that of `zfs set`.
    let target = d.dspace - d.slop + d.slop * 3 / 8;
    let data = (target - used) as usize;
    let old = pattern(21, data / 2);
    write_file(&mut w, ds, "a", &old).unwrap();
    w.sync().unwrap();
    w.snapshot("p/fs@s").unwrap();
    let ds = w.dsl().lookup(FS).unwrap().ds_obj;
    write_file(&mut w, ds, "a", &pattern(22, data / 2)).unwrap();
    w.sync().unwrap();
    for _ in 0..4 {
        w.force_empty_txg().unwrap();
    }
    let (_, used) = w.pool_space().unwrap().expect("pool space");
    assert!(
        used > d.dspace - d.slop && used < d.dspace - d.slop / 2,
        "used {used} of {d:?}"
    );
    let enospc = |r: Result<()>, what: &str| match r {
        Err(e) => assert!(ozfs_spa::metaslab::is_enospc(&e), "{what}: {e}"),
        Ok(()) => panic!("{what} allowed into the slop"),
    };
    enospc(w.reserve(4096), "a user write");
    assert_eq!(w.writable_space().unwrap(), 0);
    enospc(
        create_filesystem(&mut w, "p/new", &[]).map(|_| ()),
        "zfs create",
    );
    enospc(w.snapshot("p/fs@t").map(|_| ()), "zfs snapshot");
    let fs_dir = w.dsl().lookup(FS).unwrap().dir_obj;
    ozfs_dsl::create::set_prop_dir(
        &mut w,
        fs_dir,
        "compression",
        &ozfs_dsl::props::parse_setting("compression", "off").unwrap(),
    )
    .expect("zfs set may use half the slop");
    w.sync().unwrap();
    w.destroy_snapshot("p/fs@s")
        .expect("zfs destroy may use three quarters of the slop");
    w.sync().unwrap();
    for _ in 0..4 {
        w.force_empty_txg().unwrap();
    }
    w.reserve(1 << 20).expect("room again after the destroy");
    write_file(&mut w, ds, "b", &pattern(23, 1 << 20)).unwrap();
    w.sync().unwrap();
    drop(w);
    assert_clean_on_disk(&paths, "after the destroy");
}

/// Record size of the crash tests' files.
const RS: u64 = 4096;

/// The content a crash test changes: `FILES` files, all from one generation.
const FILES: usize = 48;

fn generation(g: u64, i: usize) -> Vec<u8> {
    // Sizes vary: one block, several blocks, an indirect block (4 KiB
    // records: many blocks for few bytes).
    let len = [700, 5_000, 20_000, 60_000][i % 4];
    pattern(g * 1000 + i as u64, len)
}

/// The sync under test: rewrite every file to generation 2, remove one
/// and add one, so it allocates, frees and rewrites metadata.
fn change(w: &mut PoolWriter, ds: u64) -> Result<()> {
    for i in 0..FILES {
        write_file_rs(w, ds, &format!("f{i}"), &generation(2, i), RS)?;
    }
    let txg = w.txg;
    let mut z = ZplTx::open(w.fs_tx(ds)?, txg, 131072)?;
    let root = z.root;
    z.unlink(root, b"old")?;
    let o = z.create(root, b"new", 0o644, 0, 0, 0)?;
    z.write(o, 0, b"new file")?;
    Ok(())
}

/// Contents of generation 1 and 2 of every file.
struct Gens(Vec<[Vec<u8>; 2]>);

impl Gens {
    fn new() -> Gens {
        Gens(
            (0..FILES)
                .map(|i| [generation(1, i), generation(2, i)])
                .collect(),
        )
    }

    /// Which generation (1 or 2) every file of the pool shows, if all agree.
    fn of(&self, pool: &Arc<Pool>) -> std::result::Result<usize, String> {
        let z = zpl(pool).map_err(|e| e.to_string())?;
        let mut seen = Vec::new();
        for (i, g) in self.0.iter().enumerate() {
            let data = read_file(&z, &format!("f{i}")).map_err(|e| format!("f{i}: {e}"))?;
            let n = g
                .iter()
                .position(|c| *c == data)
                .ok_or_else(|| format!("f{i}: content of no generation"))?;
            seen.push(n + 1);
        }
        let old = z.resolve("/old").is_ok();
        let new = z.resolve("/new").is_ok();
        seen.dedup();
        match (&seen[..], old, new) {
            ([1], true, false) => Ok(1),
            ([2], false, true) => Ok(2),
            _ => Err(format!(
                "a mix: generations {seen:?}, old file {old}, new file {new}"
            )),
        }
    }
}

/// A two-way mirror with generation 1 written and synced; its devices.
/// Forks of `base` (seeded `seed`) sharing one crash point, registered
/// under `paths`, recording their writes from now on; the writer opened
/// on them, its dataset, and the write clock where the trace starts.
fn traced_run(
    base: &[Arc<SimDevice>],
    paths: &[PathBuf],
    seed: u64,
) -> (Vec<Arc<SimDevice>>, PoolWriter, u64, u64) {
    let run: Vec<Arc<SimDevice>> = base.iter().map(|d| d.fork(seed)).collect();
    sim::share_crash_point(&run.iter().collect::<Vec<_>>());
    register_all(&run);
    let (w, ds) = open_writer(paths).unwrap();
    run.iter().for_each(|d| d.record_trace(true));
    let start = run[0].write_clock();
    (run, w, ds, start)
}

fn crash_base(tag: &str, version: u64) -> (Vec<Arc<SimDevice>>, Vec<PathBuf>) {
    let (devs, paths) = devices(tag, 2, 3);
    let (mut w, ds) = new_pool_v(&paths, version);
    for i in 0..FILES {
        write_file_rs(&mut w, ds, &format!("f{i}"), &generation(1, i), RS).unwrap();
    }
    write_file(&mut w, ds, "old", b"old file").unwrap();
    w.sync().unwrap();
    drop(w);
    (devs.iter().map(|d| d.fork(100)).collect(), paths)
}

/// Register `crashed`, reopen, check: clean, one generation. Every
/// image with `writable` also gets a writer and a checked sync.
fn check_crashed(
    crashed: &[Arc<SimDevice>],
    paths: &[PathBuf],
    gens: &Gens,
    what: &str,
    writable: bool,
) -> usize {
    register_all(crashed);
    let pool = open_pool(paths, false).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert_clean(&pool, what);
    let g = gens.of(&pool).unwrap_or_else(|e| panic!("{what}: {e}"));
    if writable {
        // The survivor is writable again: a writer opens (measuring the
        // space accounting) and commits a txg, space-checked.
        let (mut w, ds) = open_writer(paths).unwrap_or_else(|e| panic!("{what}: {e}"));
        write_file(&mut w, ds, "after", b"x").unwrap();
        w.sync()
            .unwrap_or_else(|e| panic!("{what}: sync after: {e}"));
    }
    g
}

/// c. Power fails after every possible number of writes of one sync: the
/// crashed image always opens, is clean, and shows the old or the new
/// content, never a mix. A two-way mirror with one crash point for both
/// sides. The sync runs once with a trace; each crash point's image is
/// the trace replayed up to it (what a live run in `CrashMode::Drop`
/// produces, see `crash_live_at_sampled_writes`), tried with whole
/// writes and with torn ones.
#[test]
fn crash_at_every_write_of_a_sync() {
    crash_at_every_write(23);
}

/// c, on a feature-flag pool (version 5000, every feature `zpool create`
/// enables: hole births, lz4, the feature objects).
#[test]
fn crash_at_every_write_of_a_sync_v5000() {
    crash_at_every_write(5000);
}

fn crash_at_every_write(version: u64) {
    init();
    let t0 = Instant::now();
    let gens = Gens::new();
    let (base, paths) = crash_base(&format!("crash{version}"), version);
    let (run, mut w, ds, start) = traced_run(&base, &paths, 101);
    change(&mut w, ds).unwrap();
    w.sync().unwrap();
    drop(w);
    let writes = run[0].write_clock() - start;
    let traces: Vec<Vec<TraceOp>> = run.iter().map(|d| d.take_trace()).collect();
    assert!(
        writes > 100,
        "the sync touches many blocks ({writes} writes)"
    );
    let t_prep = t0.elapsed();

    let mut points = 0u64;
    let mut outcomes = [0u64; 3];
    for n in 0..=writes {
        for (k, keep) in [Keep::Random, Keep::RandomTorn].into_iter().enumerate() {
            let seed = n * 2 + k as u64;
            let crashed: Vec<Arc<SimDevice>> = base
                .iter()
                .zip(&traces)
                .map(|(b, t)| b.replay(t, start + n, keep, seed))
                .collect();
            let what = format!("crash after {n} of {writes} writes ({keep:?})");
            let g = check_crashed(&crashed, &paths, &gens, &what, n % 32 == 0);
            outcomes[g] += 1;
            points += 1;
        }
    }
    assert!(outcomes[1] > 0 && outcomes[2] > 0, "{outcomes:?}");
    eprintln!(
        "crash_at_every_write_of_a_sync (v{version}): {points} crash points ({writes} writes in the sync, \
         2-way mirror, whole and torn writes): old {} / new {}; prepare {:.2?}, total {:.2?}",
        outcomes[1],
        outcomes[2],
        t_prep,
        t0.elapsed()
    );
}

/// c'. The same sync really run, the power failing at sampled write
/// counts: in `Drop` mode (the writer does not notice) and in `Fail` mode
/// (its writes and flushes fail from there on; the sync must fail).
#[test]
fn crash_live_at_sampled_writes() {
    init();
    let gens = Gens::new();
    let (base, paths) = crash_base("live", 23);
    let mut writes = None;
    let mut n = 0;
    let mut points = 0;
    loop {
        for mode in [CrashMode::Drop, CrashMode::Fail] {
            let run: Vec<Arc<SimDevice>> = base.iter().map(|d| d.fork(n * 2 + 7)).collect();
            sim::share_crash_point(&run.iter().collect::<Vec<_>>());
            register_all(&run);
            let (mut w, ds) = open_writer(&paths).unwrap();
            let start = run[0].write_clock();
            run[0].crash_after_writes(n, mode);
            change(&mut w, ds).unwrap();
            let r = w.sync();
            drop(w);
            let total = *writes.get_or_insert(run[0].write_clock() - start);
            let what = format!("live crash after {n} of {total} writes ({mode:?})");
            assert_eq!(run[0].crashed(), n < total, "{what}");
            if mode == CrashMode::Fail && n < total {
                assert!(r.is_err(), "{what}: the sync reported success");
            } else {
                r.unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            let crashed: Vec<Arc<SimDevice>> = run.iter().map(|d| d.crash()).collect();
            check_crashed(&crashed, &paths, &gens, &what, true);
            points += 1;
        }
        let total = writes.unwrap_or(0);
        if n >= total {
            break;
        }
        n = (n + total / 16 + 1).min(total);
    }
    assert!(points >= 16);
}

/// Hold `pool`'s write queue shut for half a second: a job that waits is
/// queued now, and the returned thread lets it go.
fn hold_queue(pool: &Pool) -> std::thread::JoinHandle<()> {
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let g = gate.clone();
    let shut: ozfs_spa::writeback::Job = Box::new(move || {
        let mut open = g.0.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = g.1.wait(open).unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    });
    pool.writeback.enqueue(shut, None).unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        *gate.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        gate.1.notify_all();
    })
}

/// c''. Write-behind (`sync_behind`): the next txg reads every block the
/// last one queued (files, directory, dnodes) and gets the new content —
/// reads of queued blocks wait for their writes — and changes them. Power
/// failing at sampled writes of both txgs' queue leaves the old content,
/// txg A, or A and B: the queue keeps the order a synchronous sync has.
#[test]
fn write_behind_reads_queued_blocks_and_keeps_order() {
    init();
    let gens = Gens::new();
    let (base, paths) = crash_base("behind", 5000);
    let (run, mut w, ds, start) = traced_run(&base, &paths, 103);
    // The queue is held shut for a while: txg A's writes wait behind the
    // gate, so the reads below come before them and must wait.
    let opener = hold_queue(&w.pool);
    change(&mut w, ds).unwrap();
    w.sync_behind().unwrap();
    assert!(
        w.pool.writeback.queued_bytes() > 0,
        "txg A's blocks are queued"
    );
    {
        let txg = w.txg;
        let mut z = ZplTx::open(w.fs_tx(ds).unwrap(), txg, 131072).unwrap();
        let root = z.root;
        for i in 0..FILES {
            let want = generation(2, i);
            let o = z.lookup(root, format!("f{i}").as_bytes()).unwrap();
            let o = o.unwrap_or_else(|| panic!("f{i} missing in the next txg"));
            let got = z.tx.read(o, 0, want.len()).unwrap();
            assert!(got == want, "f{i}: the next txg reads other content");
        }
        let o = z.create(root, b"b", 0o644, 0, 0, 0).unwrap();
        z.write(o, 0, b"txg b").unwrap();
    }
    w.sync_behind().unwrap();
    w.wait_synced().unwrap();
    opener.join().unwrap();
    drop(w);
    let writes = run[0].write_clock() - start;
    let traces: Vec<Vec<TraceOp>> = run.iter().map(|d| d.take_trace()).collect();
    let step = (writes / 40).max(1);
    let mut outcomes = [0u64; 4];
    let mut n = 0;
    loop {
        let crashed: Vec<Arc<SimDevice>> = base
            .iter()
            .zip(&traces)
            .map(|(b, t)| b.replay(t, start + n, Keep::Random, n))
            .collect();
        let what = format!("write-behind crash after {n} of {writes} writes");
        register_all(&crashed);
        let pool = open_pool(&paths, false).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        assert_clean(&pool, &what);
        let g = gens.of(&pool).unwrap_or_else(|e| panic!("{what}: {e}"));
        let z = zpl(&pool).unwrap();
        let b = read_file(&z, "b").ok();
        match (g, &b) {
            (1, None) => outcomes[1] += 1,
            (2, None) => outcomes[2] += 1,
            (2, Some(b)) if b == b"txg b" => outcomes[3] += 1,
            _ => panic!("{what}: generation {g} with file b {b:?}"),
        }
        if n == writes {
            assert!(
                b.is_some(),
                "{what}: txg B is not on disk after wait_synced"
            );
            break;
        }
        n = (n + step).min(writes);
    }
    assert!(outcomes[1] > 0 && outcomes[3] > 0, "{outcomes:?}");
}

/// A mirror side taken offline while a txg's writes are still queued: the
/// offline waits for them (device operations drain the queue first), so
/// that side holds the txg — its resilver after an online starts past it.
/// Read with the other side unreadable, the file comes from it.
#[test]
fn offline_waits_for_queued_writes() {
    init();
    let (devs, paths) = devices("offq", 2, 21);
    let (mut w, ds) = new_pool(&paths);
    let opener = hold_queue(&w.pool);
    let data = pattern(3, 300_000);
    write_file(&mut w, ds, "f", &data).unwrap();
    w.sync_behind().unwrap();
    assert!(w.pool.writeback.queued_bytes() > 0, "the txg is queued");
    let side1 = w.pool.root.leaves()[1].guid;
    let txg = w.txg;
    w.pool.set_offline(side1, true, txg).unwrap();
    opener.join().unwrap();
    assert_eq!(w.pool.writeback.queued_bytes(), 0);
    drop(w);
    let data_area = VDEV_LABEL_START_SIZE..DEV_SIZE - VDEV_LABEL_END_SIZE;
    devs[0].set_faults(Faults {
        read_error_ranges: vec![data_area],
        ..Default::default()
    });
    let pool = open_pool(&paths, false).unwrap();
    assert!(
        read_file(&zpl(&pool).unwrap(), "f").unwrap() == data,
        "side 1 lacks the txg"
    );
    devs[0].set_faults(Faults::default());
}

/// d. A mirror whose one side returns corrupted data: reads are correct
/// (the other side verifies), the bad side is charged checksum errors,
/// and a writer's reads heal the damaged copies on disk.
#[test]
fn mirror_reads_through_corruption_and_heals() {
    init();
    let (devs, paths) = devices("mirror", 2, 4);
    let (mut w, ds) = new_pool(&paths);
    let data = pattern(5, 500_000);
    write_file(&mut w, ds, "f", &data).unwrap();
    w.sync().unwrap();
    drop(w);
    let data_area = VDEV_LABEL_START_SIZE..DEV_SIZE - VDEV_LABEL_END_SIZE;

    // Injected corruption of every read of side 0 (the image is intact).
    devs[0].set_faults(Faults {
        corrupt_read_ranges: vec![data_area.clone()],
        ..Default::default()
    });
    let pool = open_pool(&paths, false).unwrap();
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), data);
    assert!(devs[0].stats().corrupted_reads > 0);
    let mut cksum = [0u64; 2];
    pool.root.walk(0, &mut |v, _| {
        if let Some(p) = &v.path {
            let i = usize::from(p.ends_with("-1"));
            cksum[i] += v
                .stats
                .cksum_errors
                .load(std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(cksum[0] > 0 && cksum[1] == 0, "checksum errors {cksum:?}");
    drop(pool);
    devs[0].set_faults(Faults::default());

    // Real damage on side 0: garbage over the file's blocks. A writer's
    // reads (self-healing) rewrite them from side 1.
    let z = zpl(&open_pool(&paths, false).unwrap()).unwrap();
    let obj = z.resolve("/f").unwrap();
    let (dn, _) = z.attrs(obj).unwrap();
    let mut blocks = Vec::new();
    let top = dn.phys.blkptr[0];
    assert!(!top.is_hole());
    blocks.push(top);
    if dn.phys.nlevels > 1 {
        // The level-1 block's pointers.
        let raw = z.os.pool.read_bp(&top).unwrap();
        for c in raw.chunks(128) {
            let bp = ozfs_format::BlkPtr::from_bytes(c, false).unwrap();
            if !bp.is_hole() {
                blocks.push(bp);
            }
        }
    }
    for bp in &blocks {
        let dva = bp.dvas()[0];
        let off = VDEV_LABEL_START_SIZE + dva.offset;
        devs[0]
            .poke(&pattern(dva.offset, bp.psize() as usize), off)
            .unwrap();
    }
    drop(z);
    let (w, _) = open_writer(&paths).unwrap();
    assert_eq!(read_file(&zpl(&w.pool).unwrap(), "f").unwrap(), data);
    let repaired = w.pool.repaired.load(std::sync::atomic::Ordering::Relaxed);
    assert!(repaired > 0, "nothing was repaired");
    drop(w);
    // Side 1 unreadable now: side 0 alone must hold the right blocks.
    devs[1].set_faults(Faults {
        read_error_ranges: vec![data_area],
        ..Default::default()
    });
    let pool = open_pool(&paths, false).unwrap();
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), data);
    assert_clean(&pool, "healed");
    devs[1].set_faults(Faults::default());
}

/// A block whose checksum ozfs cannot compute (here: edonr, salted, in a
/// pool without a checksum salt) is reported as unsupported, naming the
/// function, never as "no copy passed its checksum"; and a writer's
/// self-healing read never rewrites a copy it could not verify, even one
/// that is in fact damaged.
#[test]
fn unverifiable_checksum_is_unsupported_and_never_healed() {
    use ozfs_vdev::BlockDevice;
    init();
    let (devs, paths) = devices("unverif", 2, 6);
    let (mut w, ds) = new_pool(&paths);
    let data = pattern(9, 300_000);
    write_file(&mut w, ds, "f", &data).unwrap();
    w.sync().unwrap();
    drop(w);

    let z = zpl(&open_pool(&paths, false).unwrap()).unwrap();
    let obj = z.resolve("/f").unwrap();
    let (dn, _) = z.attrs(obj).unwrap();
    let bp = dn.phys.blkptr[0];
    assert!(!bp.is_hole() && !bp.is_embedded());
    drop(z);
    // The same block, its BP claiming edonr (13).
    let mut raw = bp.to_bytes();
    let mut prop = [0u8; 8];
    prop.copy_from_slice(&raw[48..56]);
    let prop = (u64::from_ne_bytes(prop) & !(0xff << 40)) | (13 << 40);
    raw[48..56].copy_from_slice(&prop.to_ne_bytes());
    let edonr_bp = ozfs_format::BlkPtr::from_bytes(&raw, false).unwrap();
    assert_eq!(edonr_bp.checksum(), 13);

    // Side 0's copy damaged: a healing read could only "repair" it by
    // trusting side 1 without a checksum.
    let dva = bp.dvas()[0];
    let off = VDEV_LABEL_START_SIZE + dva.offset;
    let garbage = pattern(77, bp.psize() as usize);
    devs[0].poke(&garbage, off).unwrap();
    let writes = [devs[0].stats().writes, devs[1].stats().writes];

    let (w, _) = open_writer(&paths).unwrap();
    let ctx = ozfs_vdev::ReadCtx {
        heal: true,
        ..Default::default()
    };
    for r in [
        w.pool.read_physical_with(&edonr_bp, &ctx),
        w.pool.read_physical(&edonr_bp),
        w.pool.read_bp(&edonr_bp),
    ] {
        let e = r.expect_err("edonr without a salt cannot verify");
        let msg = e.to_string();
        assert!(
            matches!(e, ozfs_format::Error::Unsupported { .. }),
            "not unsupported: {msg}"
        );
        assert!(
            msg.contains("block checksum edonr: unsupported"),
            "does not name the function: {msg}"
        );
        assert!(!msg.contains("passed its checksum"), "{msg}");
    }
    assert_eq!(ctx.repaired.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(
        w.pool.repaired.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    drop(w);
    assert_eq!(
        [devs[0].stats().writes, devs[1].stats().writes],
        writes,
        "a device was written"
    );
    let mut now = vec![0u8; garbage.len()];
    devs[0].read_at(&mut now, off).unwrap();
    assert_eq!(now, garbage, "the unverifiable copy was rewritten");
    // With its real checksum the block still reads (from side 1).
    let pool = open_pool(&paths, false).unwrap();
    assert!(pool.read_physical(&bp).is_ok());
}

/// A sync that fails on a device write error reports it; the pool on disk
/// is the last committed one.
#[test]
fn write_error_fails_sync_and_pool_reopens() {
    init();
    let (devs, paths) = devices("werr", 1, 5);
    let (mut w, ds) = new_pool(&paths);
    write_file(&mut w, ds, "f", b"committed").unwrap();
    w.sync().unwrap();
    devs[0].set_faults(Faults {
        write_error_prob: 1.0,
        ..Default::default()
    });
    write_file(&mut w, ds, "f", b"not committed").unwrap();
    assert!(w.sync().is_err());
    drop(w);
    devs[0].set_faults(Faults::default());
    sim::register("werr-0", devs[0].crash());
    let pool = open_pool(&paths, false).unwrap();
    assert_eq!(read_file(&zpl(&pool).unwrap(), "f").unwrap(), b"committed");
    assert_clean(&pool, "after a failed sync");
}

/// A block made a hole keeps its birth txg, logical size, type and level
/// on a pool with `hole_birth` active (so an incremental send sees the
/// hole), and is all zeros on a version-23 pool, as zfs-fuse writes it.
#[test]
fn punched_holes_keep_their_birth_where_the_feature_is_active() {
    init();
    for version in [23u64, 5000] {
        let (_devs, paths) = devices(&format!("holes{version}"), 1, 11);
        let (mut w, ds) = new_pool_v(&paths, version);
        write_file_rs(&mut w, ds, "f", &pattern(5, 3 * 4096), 4096).unwrap();
        w.sync().unwrap();
        let punched_in = w.txg;
        {
            let mut z = ZplTx::open(w.fs_tx(ds).unwrap(), punched_in, 4096).unwrap();
            let root = z.root;
            let o = z.lookup(root, b"f").unwrap().expect("f");
            z.truncate(o, 4096).unwrap();
        }
        w.sync().unwrap();
        let dsl = w.dsl();
        let os = dsl.objset(&dsl.lookup(FS).unwrap()).unwrap();
        let z = Zpl::open(os.clone(), FS).unwrap();
        let dn = os.dnode(z.resolve("/f").unwrap()).unwrap();
        for blkid in 1..3 {
            let bp = os.block_bp(&dn, 0, blkid).unwrap().unwrap_or_default();
            assert!(bp.is_hole(), "v{version} block {blkid}: {bp:?}");
            if version == 5000 {
                assert_eq!(bp.birth(), punched_in, "v{version} block {blkid}");
                assert_eq!(bp.lsize(), 4096);
                assert_eq!(bp.level(), 0);
                assert_eq!(
                    bp.object_type(),
                    ozfs_format::types::ot::PLAIN_FILE_CONTENTS
                );
            } else {
                assert!(
                    bp.words.iter().all(|&x| x == 0),
                    "v23 block {blkid}: {bp:?}"
                );
            }
        }
        assert_eq!(read_file(&z, "f").unwrap(), pattern(5, 3 * 4096)[..4096]);
        drop(w);
        assert_clean_on_disk(&paths, &format!("v{version} after the punch"));
    }
}

/// From pool version 26 every DSL directory lists in `dd_clones` the head
/// datasets cloned from its snapshots (OpenZFS's destroy and promote
/// insist on the entries): kept through create, clone, destroy and
/// promote on a feature-flag pool; absent on a version-23 pool.
#[test]
fn dir_clones_follow_origins() {
    init();
    for version in [23u64, 5000] {
        let (_devs, paths) = devices(&format!("clones{version}"), 1, 13);
        let (mut w, _ds) = new_pool_v(&paths, version);
        create_filesystem(&mut w, "p/a", &[]).unwrap();
        w.sync().unwrap();
        w.snapshot("p/a@s").unwrap();
        w.sync().unwrap();
        ozfs_dsl::create::clone_filesystem(&mut w, "p/a@s", "p/c").unwrap();
        create_filesystem(&mut w, "p/b", &[]).unwrap();
        w.sync().unwrap();
        w.destroy_filesystem("p/b").unwrap();
        w.sync().unwrap();
        w.promote("p/c").unwrap();
        w.sync().unwrap();
        let dsl = w.dsl();
        // Expected: each file system in its origin's directory list.
        let mut want: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for name in ["p", "p/fs", "p/a", "p/c"] {
            let ds = dsl.lookup(name).unwrap();
            let dir = w.dir(ds.dir_obj).unwrap();
            assert_ne!(dir.origin_obj, 0, "{name} has an origin");
            let od = w.dataset(dir.origin_obj).unwrap().dir_obj;
            want.entry(od).or_default().push(ds.ds_obj);
        }
        for (od, mut heads) in want {
            let clones = w.dir(od).unwrap().clones;
            if version < 26 {
                assert_eq!(clones, 0, "no dd_clones on version {version}");
                continue;
            }
            let mut got: Vec<u64> = ozfs_dmu::zap_tx::list(&w.mos, clones)
                .unwrap()
                .iter()
                .map(|e| {
                    assert_eq!(
                        String::from_utf8_lossy(&e.name),
                        format!("{:x}", e.as_u64().unwrap())
                    );
                    e.as_u64().unwrap()
                })
                .collect();
            got.sort();
            heads.sort();
            assert_eq!(got, heads, "dd_clones of directory {od}");
        }
        drop(w);
        assert_clean_on_disk(&paths, &format!("v{version} clones"));
    }
}

/// The user, group and project accounting ozfs keeps at every sync equals
/// what walking every object of the file system finds: for each dnode it
/// marked accounted whose bonus names an owner (OpenZFS reads it at fixed
/// offsets), 512 bytes plus its used space and one object, summed per
/// uid, gid and project id; no entry of zero is kept.
type Sums = std::collections::BTreeMap<(u64, String), u64>;

fn walked_accounting(os: &ozfs_dmu::Objset, projects: bool) -> Sums {
    use ozfs_dmu::tx::{
        DNODE_FLAG_USEROBJUSED_ACCOUNTED, DNODE_FLAG_USERUSED_ACCOUNTED, GROUPUSED_OBJECT,
        PROJECTUSED_OBJECT, USERUSED_OBJECT,
    };
    let mut want = Sums::new();
    for r in os.object_ranges().expect("object ranges") {
        for obj in r.start.max(1)..r.end {
            if os.slot_owner(obj).expect("slot owner").is_some() {
                continue;
            }
            let dn = match os.dnode(obj) {
                Ok(d) if d.phys.object_type != 0 => d,
                _ => continue,
            };
            let Some((uid, gid, projid)) =
                ozfs_format::znode::owner_ids(dn.phys.bonustype, &dn.phys.bonus, dn.swap)
            else {
                continue;
            };
            let bytes = 512 + dn.phys.used;
            let mut owners = vec![(USERUSED_OBJECT, uid), (GROUPUSED_OBJECT, gid)];
            if projects {
                owners.push((PROJECTUSED_OBJECT, projid));
            }
            for (o, id) in owners {
                if dn.phys.flags & DNODE_FLAG_USERUSED_ACCOUNTED != 0 {
                    *want.entry((o, format!("{id:x}"))).or_default() += bytes;
                }
                if dn.phys.flags & DNODE_FLAG_USEROBJUSED_ACCOUNTED != 0 {
                    *want.entry((o, format!("obj-{id:x}"))).or_default() += 1;
                }
            }
        }
    }
    want
}

fn stored_accounting(os: &ozfs_dmu::Objset) -> Sums {
    use ozfs_dmu::tx::{GROUPUSED_OBJECT, PROJECTUSED_OBJECT, USERUSED_OBJECT};
    let mut got = Sums::new();
    for (o, phys) in [
        (USERUSED_OBJECT, &os.phys.userused_dnode),
        (GROUPUSED_OBJECT, &os.phys.groupused_dnode),
        (PROJECTUSED_OBJECT, &os.phys.projectused_dnode),
    ] {
        if phys.object_type == 0 {
            continue;
        }
        let dn = ozfs_dmu::Dnode {
            object: o,
            phys: phys.clone(),
            swap: os.swap,
        };
        for e in ozfs_dmu::zap::list(os, &dn).expect("accounting ZAP") {
            let v = e.as_u64().expect("a count");
            assert_ne!(v, 0, "an entry of zero is kept: {}", e.name_str());
            got.insert((o, e.name_str()), v);
        }
    }
    got
}

fn accounting_follows_every_change(version: u64) {
    init();
    let (_d, paths) = devices(&format!("acct{version}"), 1, 77);
    let (mut w, ds) = new_pool_v(&paths, version);
    let projects = version == 5000;
    let mut rng = sim::SplitMix64::new(version);
    let mut live: Vec<String> = Vec::new();
    for round in 0..6u64 {
        let txg = w.txg;
        {
            let tx = w.fs_tx(ds).expect("fs tx");
            let mut z = ZplTx::open(tx, txg, 131072).expect("zpl");
            let root = z.root;
            for i in 0..8 {
                let name = format!("f{round}-{i}");
                let uid = [0, 1000, 2000][(rng.next_u64() % 3) as usize];
                let gid = [0, 100][(rng.next_u64() % 2) as usize];
                let obj = z
                    .create(root, name.as_bytes(), 0o644, uid, gid, 0)
                    .expect("create");
                let len = (rng.next_u64() % 300_000) as usize;
                z.write(obj, 0, &pattern(rng.next_u64(), len))
                    .expect("write");
                live.push(name);
            }
            let d = z
                .mkdir(root, format!("d{round}").as_bytes(), 0o755, 1000, 100)
                .expect("mkdir");
            if projects {
                // A directory passing project 7 on: what is made in it
                // is project 7's.
                let mut a = z.attrs(d).expect("attrs");
                a.projid = Some(7);
                a.flags |= 1 << 46;
                z.set_attrs(d, &a).expect("project inherit");
                let f = z.create(d, b"in7", 0o644, 0, 0, 0).expect("create in d");
                z.write(f, 0, &pattern(round, 5000)).expect("write in d");
                assert_eq!(z.attrs(f).expect("attrs").projid, Some(7));
            }
            // Some files go, change owner, project or size.
            for _ in 0..3 {
                if live.is_empty() {
                    break;
                }
                let k = (rng.next_u64() as usize) % live.len();
                let name = live.swap_remove(k);
                let obj = z
                    .lookup(root, name.as_bytes())
                    .expect("lookup")
                    .expect("there");
                match rng.next_u64() % 4 {
                    0 => z.unlink(root, name.as_bytes()).expect("unlink"),
                    1 => {
                        let mut a = z.attrs(obj).expect("attrs");
                        a.uid = 3000;
                        a.gid = 300;
                        if projects {
                            a.projid = Some(42);
                        }
                        z.set_attrs(obj, &a).expect("chown");
                        live.push(name);
                    }
                    2 => {
                        z.truncate(obj, 1000).expect("truncate");
                        live.push(name);
                    }
                    _ => {
                        z.write(obj, 500_000, b"tail").expect("extend");
                        live.push(name);
                    }
                }
            }
        }
        w.sync().expect("sync");
        let dsl = DslPool::open(open_pool(&paths, false).expect("open")).expect("dsl");
        let os = dsl.objset(&dsl.lookup(FS).expect("fs")).expect("objset");
        let want = walked_accounting(&os, projects);
        let got = stored_accounting(&os);
        assert_eq!(got, want, "version {version}, round {round}");
        assert!(
            want.keys().any(|(_, k)| k == "bb8"),
            "the owners written are there"
        );
        if projects {
            assert!(
                want.keys()
                    .any(|(o, k)| *o == ozfs_dmu::tx::PROJECTUSED_OBJECT && k == "obj-7"),
                "project 7 counts its files"
            );
        }
        if projects {
            assert_eq!(os.phys.flags & 7, 7, "accounting complete from creation");
            assert!(
                os.bp.lsize() == 4096,
                "a 4 KiB objset holds the project dnode"
            );
        } else {
            assert_eq!(os.phys.flags & 7, 1, "user space only on version {version}");
            assert!(!want.keys().any(|(_, k)| k.starts_with("obj-")));
        }
    }
    drop(w);
    assert_clean_on_disk(&paths, "accounting");
}

#[test]
fn user_group_project_accounting_follows_every_change_v5000() {
    accounting_follows_every_change(5000);
}

#[test]
fn user_space_accounting_follows_every_change_v23() {
    accounting_follows_every_change(23);
}

/// A new file of a version-23 pool (a legacy znode: one block pointer in
/// its dnode) written past its first block and truncated back in the same
/// txg syncs: the hole left past the tree's reach needs no writing. (It
/// failed with "block 1 beyond a single-level object".)
#[test]
fn blocks_written_and_truncated_away_in_one_txg_sync() {
    init();
    let (_d, paths) = devices("trunc1txg", 1, 5);
    let (mut w, ds) = new_pool_v(&paths, 23);
    let txg = w.txg;
    {
        let tx = w.fs_tx(ds).expect("fs tx");
        let mut z = ZplTx::open(tx, txg, 131072).expect("zpl");
        let root = z.root;
        let obj = z.create(root, b"t", 0o644, 0, 0, 0).expect("create");
        z.write(obj, 0, &pattern(1, 256_916)).expect("write");
        z.truncate(obj, 1000).expect("truncate");
    }
    w.sync().expect("sync");
    drop(w);
    let z = zpl(&open_pool(&paths, false).expect("open")).expect("zpl");
    assert_eq!(read_file(&z, "t").expect("read"), pattern(1, 1000));
    assert_clean_on_disk(&paths, "truncated in one txg");
}

/// New-format dead lists (pool version 26 on, as OpenZFS keeps them):
/// snapshots taken and destroyed in every position, a clone written and
/// destroyed, a rollback, each sync checked by the space check (dead list
/// sums against their blocks, entries against their keys, the shared empty
/// bpobj's count against the entries naming it, unique bytes of every
/// snapshot against the next one's dead list); at the end the pool is
/// leak-free and every surviving snapshot reads as it was taken.
#[test]
fn snapshots_come_and_go_with_new_format_dead_lists() {
    init();
    let (_d, paths) = devices("dl5000", 1, 9);
    let (mut w, _) = new_pool_v(&paths, 5000);
    let mut rng = sim::SplitMix64::new(26);
    // snapshot name -> (file -> contents) as taken.
    let mut snaps: Vec<(String, std::collections::BTreeMap<String, Vec<u8>>)> = Vec::new();
    let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    for round in 0..14u64 {
        let ds = w.dsl().lookup(FS).expect("fs").ds_obj;
        for i in 0..4 {
            let name = format!("f{}", (rng.next_u64() % 10) + i);
            let data = pattern(rng.next_u64(), (rng.next_u64() % 200_000) as usize);
            write_file(&mut w, ds, &name, &data).expect("write");
            files.insert(name, data);
        }
        w.sync().expect("sync");
        let snap = format!("{FS}@s{round}");
        w.snapshot(&snap).expect("snapshot");
        snaps.push((snap, files.clone()));
        let head = w.dsl().lookup(FS).expect("fs").ds;
        let t = w
            .mos
            .dnode(head.deadlist_obj)
            .expect("dead list")
            .phys
            .object_type;
        assert_eq!(t, ozfs_dsl::deadlist::DEADLIST, "a new-format dead list");
        // Destroy one snapshot every other round: oldest, newest or middle.
        if round % 2 == 1 && snaps.len() > 2 {
            let k = match round % 3 {
                0 => 0,
                1 => snaps.len() - 1,
                _ => snaps.len() / 2,
            };
            let (name, _) = snaps.remove(k);
            w.destroy_snapshot(&name).expect("destroy snapshot");
            w.sync().expect("sync");
        }
    }
    // A clone of a middle snapshot, written, then destroyed.
    let origin = snaps[snaps.len() / 2].0.clone();
    ozfs_dsl::create::clone_filesystem(&mut w, &origin, "p/c").expect("clone");
    w.sync().expect("sync");
    let c = w.dsl().lookup("p/c").expect("clone").ds_obj;
    write_file(&mut w, c, "f1", &pattern(5, 70_000)).expect("write clone");
    w.sync().expect("sync");
    w.snapshot("p/c@cs").expect("clone snapshot");
    write_file(&mut w, c, "f2", &pattern(6, 50_000)).expect("write clone");
    w.sync().expect("sync");
    // The origin's neighbours go while the clone lives.
    let idx = snaps.len() / 2;
    if idx + 1 < snaps.len() {
        let (name, _) = snaps.remove(idx + 1);
        w.destroy_snapshot(&name).expect("destroy after the origin");
        w.sync().expect("sync");
    }
    w.destroy_snapshot("p/c@cs")
        .expect("destroy clone snapshot");
    w.sync().expect("sync");
    w.destroy_filesystem("p/c").expect("destroy clone");
    w.sync().expect("sync");
    // Back to the last snapshot.
    let ds = w.dsl().lookup(FS).expect("fs").ds_obj;
    write_file(&mut w, ds, "late", &pattern(7, 90_000)).expect("write");
    w.sync().expect("sync");
    let (_, last_files) = snaps.last().cloned().expect("a snapshot");
    w.rollback_to_latest(FS).expect("rollback");
    w.sync().expect("sync");
    for _ in 0..4 {
        w.force_empty_txg().expect("empty txg");
    }
    drop(w);
    assert_clean_on_disk(&paths, "after the dead list workout");
    let pool = open_pool(&paths, false).expect("open");
    let dsl = DslPool::open(pool.clone()).expect("dsl");
    for (name, want) in &snaps {
        let info = dsl.lookup(name).expect("snapshot");
        let z = Zpl::open(dsl.objset(&info).expect("objset"), name).expect("zpl");
        for (f, data) in want {
            assert_eq!(&read_file(&z, f).expect("read"), data, "{name}/{f}");
        }
    }
    let z = zpl(&pool).expect("zpl");
    for (f, data) in &last_files {
        assert_eq!(&read_file(&z, f).expect("read"), data, "rolled back {f}");
    }
    assert!(
        read_file(&z, "late").is_err(),
        "the rollback took 'late' away"
    );
}

/// The OpenZFS corpus (`../shared/corpus/openzfs-2.3`, or `$OZFS_CORPUS`).
fn corpus_dir() -> Option<PathBuf> {
    let c = std::env::var_os("OZFS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/openzfs-2.3")
        });
    c.is_dir().then_some(c)
}

/// c'', on a pool OpenZFS 2.3.2 made (`c1-single`: unflushed log space
/// maps, histograms, new-format dead lists with the shared empty bpobj,
/// user/group/project accounting, vdev ZAPs): its first read-write sync —
/// the logs folded into the metaslabs, a file OpenZFS wrote and the
/// snapshots still hold removed (onto the head's dead list), a new file
/// written — loses power after sampled numbers of writes, whole and torn.
/// Every crashed image opens, is clean for ozfs's leak check, and shows
/// the old state (logs, the old file, no new one) or the new one; some
/// get a writer and a checked sync again.
#[test]
fn crash_in_the_first_sync_of_an_openzfs_pool() {
    init();
    let Some(corpus) = corpus_dir() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "the OpenZFS corpus is missing (../shared beside the checkout)"
        );
        eprintln!("skipped: no OpenZFS corpus");
        return;
    };
    let gz = corpus.join("c1-single/d0.img.gz");
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .expect("gzip");
    assert!(out.status.success(), "unpacking {}", gz.display());
    let image = out.stdout;
    let base = SimDevice::new("ozc1-0", image.len() as u64, 7);
    for (i, chunk) in image.chunks(1 << 20).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            base.poke(chunk, (i << 20) as u64).expect("load the image");
        }
    }
    let paths = vec![PathBuf::from("sim:ozc1-0")];
    let new_data = pattern(12, 300_000);
    // The state: old (nothing changed) or new (the change synced).
    let state = |pool: &Arc<Pool>| -> std::result::Result<u8, String> {
        let dsl = DslPool::open(pool.clone()).map_err(|e| e.to_string())?;
        let info = dsl.lookup("c1-single").map_err(|e| e.to_string())?;
        let z = Zpl::open(dsl.objset(&info).map_err(|e| e.to_string())?, "c1-single")
            .map_err(|e| e.to_string())?;
        let old = z.resolve("/small-random.bin").is_ok();
        let new = match z.resolve("/from-ozfs.bin") {
            Ok(obj) => {
                let (dn, a) = z.attrs(obj).map_err(|e| e.to_string())?;
                let d = z
                    .read(&dn, &a, 0, a.size as usize)
                    .map_err(|e| e.to_string())?;
                if d != new_data {
                    return Err("from-ozfs.bin has other contents".into());
                }
                true
            }
            Err(_) => false,
        };
        match (old, new) {
            (true, false) => Ok(1),
            (false, true) => Ok(2),
            _ => Err(format!("a mix: old file {old}, new file {new}")),
        }
    };
    let run = base.fork(1);
    sim::register("ozc1-0", run.clone());
    let pool = open_pool(&paths, true).expect("open");
    let mut w = PoolWriter::open(pool).expect("a writer on OpenZFS's pool");
    run.record_trace(true);
    let start = run.write_clock();
    let ds = w.dsl().lookup("c1-single").expect("fs").ds_obj;
    {
        let txg = w.txg;
        let tx = w.fs_tx(ds).expect("fs tx");
        let mut z = ZplTx::open(tx, txg, 131072).expect("zpl");
        let root = z.root;
        z.unlink(root, b"small-random.bin").expect("unlink");
        let obj = z
            .create(root, b"from-ozfs.bin", 0o644, 1000, 100, 0)
            .expect("create");
        z.write(obj, 0, &new_data).expect("write");
    }
    w.sync().expect("the first sync");
    drop(w);
    let writes = run.write_clock() - start;
    let trace = run.take_trace();
    assert!(writes > 20, "the first sync writes ({writes} writes)");
    let step = (writes / 300).max(1);
    let mut outcomes = [0u64; 3];
    let mut n = 0;
    while n <= writes {
        for (k, keep) in [Keep::Random, Keep::RandomTorn].into_iter().enumerate() {
            let crashed = base.replay(&trace, start + n, keep, n * 2 + k as u64);
            sim::register("ozc1-0", crashed);
            let what = format!("crash after {n} of {writes} writes ({keep:?})");
            let pool = open_pool(&paths, false).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            assert_clean(&pool, &what);
            let g = state(&pool).unwrap_or_else(|e| panic!("{what}: {e}"));
            outcomes[g as usize] += 1;
            if n % (step * 8) == 0 {
                let mut w = PoolWriter::open(open_pool(&paths, true).expect("reopen"))
                    .unwrap_or_else(|e| panic!("{what}: writer: {e}"));
                let ds = w.dsl().lookup("c1-single").expect("fs").ds_obj;
                write_file_in(&mut w, ds, "after", b"x");
                w.sync()
                    .unwrap_or_else(|e| panic!("{what}: sync after: {e}"));
            }
        }
        n = if n == writes {
            writes + 1
        } else {
            (n + step).min(writes)
        };
    }
    assert!(outcomes[1] > 0 && outcomes[2] > 0, "{outcomes:?}");
    eprintln!(
        "crash_in_the_first_sync_of_an_openzfs_pool: {writes} writes, every {step}th crashed \
         (whole and torn): old {} / new {}",
        outcomes[1], outcomes[2]
    );
}

/// Create file `name` in the root of file system `ds` with `data`.
fn write_file_in(w: &mut PoolWriter, ds: u64, name: &str, data: &[u8]) {
    let txg = w.txg;
    let tx = w.fs_tx(ds).expect("fs tx");
    let mut z = ZplTx::open(tx, txg, 131072).expect("zpl");
    let root = z.root;
    let obj = z
        .create(root, name.as_bytes(), 0o644, 0, 0, 0)
        .expect("create");
    z.write(obj, 0, data).expect("write");
}

/// A pool upgraded from version 23 keeps its snapshots' bplist dead lists
/// while the head goes on in the new format (the first snapshot after the
/// upgrade keeps the head's bplist): destroying each snapshot — the one
/// whose next has a bplist but the one after that a new-format list, the
/// last bplist one (merged block by block into the head's), the oldest —
/// is space-checked at every sync and leaves a clean pool whose head reads
/// as written.
#[test]
fn snapshots_of_an_upgraded_pool_are_destroyed_across_both_formats() {
    init();
    let (_d, paths) = devices("dlmixed", 1, 11);
    let (mut w, _) = new_pool(&paths);
    let mut files = std::collections::BTreeMap::new();
    let mut step = |w: &mut PoolWriter, round: u64| {
        let ds = w.dsl().lookup(FS).expect("fs").ds_obj;
        for i in 0..3 {
            let name = format!("f{}", (round + i) % 5);
            let data = pattern(round * 10 + i, 40_000 + (i as usize) * 30_000);
            write_file(w, ds, &name, &data).expect("write");
            files.insert(name, data);
        }
        w.sync().expect("sync");
        w.snapshot(&format!("{FS}@s{round}")).expect("snapshot");
    };
    step(&mut w, 1);
    step(&mut w, 2);
    let all: Vec<&str> = ozfs_dsl::features::FEATURES
        .iter()
        .map(|f| f.name)
        .collect();
    ozfs_dsl::create::upgrade(&mut w, &all).expect("upgrade");
    w.sync().expect("sync");
    step(&mut w, 3);
    step(&mut w, 4);
    let dl_type = |w: &PoolWriter, name: &str| {
        let d = w.dsl().lookup(name).expect("dataset").ds;
        w.mos
            .dnode(d.deadlist_obj)
            .expect("dead list")
            .phys
            .object_type
    };
    assert_eq!(
        dl_type(&w, &format!("{FS}@s3")),
        ozfs_format::types::ot::BPOBJ
    );
    assert_eq!(
        dl_type(&w, &format!("{FS}@s4")),
        ozfs_dsl::deadlist::DEADLIST
    );
    for snap in ["s2", "s3", "s1", "s4"] {
        w.destroy_snapshot(&format!("{FS}@{snap}"))
            .unwrap_or_else(|e| panic!("destroy {snap}: {e}"));
        w.sync().expect("sync");
    }
    for _ in 0..4 {
        w.force_empty_txg().expect("empty txg");
    }
    drop(w);
    assert_clean_on_disk(&paths, "after destroying across both formats");
    let z = zpl(&open_pool(&paths, false).expect("open")).expect("zpl");
    for (f, data) in &files {
        assert_eq!(&read_file(&z, f).expect("read"), data, "{f}");
    }
}
