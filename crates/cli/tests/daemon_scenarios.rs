//! Daemon scenario generator: random sequences of create, mount, unmount,
//! `set mountpoint`, rename, destroy, export, import and SIGTERM (the
//! daemon must exit within 60 s leaving nothing mounted), over nested
//! mountpoints (a parent's mountpoint a prefix of a child's, set in any
//! order) and symbolic links planted in a world-writable sticky directory
//! on the way to some of them.
//!
//! Every command runs under a watchdog timeout (a hang fails), and after
//! every step: the daemon is alive and never panicked; every file system
//! `zfs list` says is mounted is reachable at its mountpoint; nothing of
//! the pool is mounted after an export that succeeded; the root-owned
//! directory the links point to is untouched.
//!
//! Fixed seeds and a bounded number of steps by default (about a minute);
//! `OZFS_SCENARIO_SEED=N` runs one seed, `OZFS_SCENARIO_STEPS=N` that many
//! steps per seed.

mod dcommon;
use dcommon::*;
use std::fs;
use std::path::PathBuf;

/// splitmix64: small, deterministic, enough for choosing steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            Some(&v[self.below(v.len())])
        }
    }
}

fn env_u64(k: &str) -> Option<u64> {
    std::env::var(k).ok().and_then(|v| v.trim().parse().ok())
}

fn scenario(seed: u64, steps: usize) {
    let pool = format!("dsc{seed}");
    let e = Env::new(&pool);
    let mut rng = Rng(seed);
    let root = e.dir("t");
    let public = e.dir("pub");
    fs::create_dir_all(&public).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&public, fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = e.dir("victim");
    fs::create_dir_all(&victim).unwrap();
    fs::write(victim.join("keep"), b"root's").unwrap();
    let places: Vec<PathBuf> = vec![
        root.join("m"),
        root.join("m/inner"),
        root.join("m/inner/deep"),
        root.join("n"),
        public.join("a"),
        public.join("a/b"),
        public.join("l/x"),
    ];
    e.ok(&[
        "zfs",
        "set",
        &format!("mountpoint={}", root.display()),
        &pool,
    ]);
    let mut counter = 0;
    let mut exported = false;
    let mut log = Vec::new();
    for step in 0..steps {
        let t_step = std::time::Instant::now();
        let names: Vec<String> = if exported {
            Vec::new()
        } else {
            e.listed().into_iter().map(|(n, _, _)| n).collect()
        };
        let children: Vec<String> = names.iter().filter(|n| n.contains('/')).cloned().collect();
        let what = if exported {
            9
        } else {
            // SIGTERM (and the restart after it) costs seconds: rarer.
            match rng.below(20) {
                19 => 10,
                w => w % 9,
            }
        };
        let args: Vec<String> = match what {
            0 | 1 => {
                counter += 1;
                let parent = rng.pick(&names).cloned().unwrap_or(pool.clone());
                let ds = format!("{parent}/c{counter}");
                if parent.matches('/').count() >= 3 {
                    continue;
                }
                match rng.pick(&places) {
                    Some(p) if rng.below(2) == 0 => vec![
                        "zfs".into(),
                        "create".into(),
                        "-o".into(),
                        format!("mountpoint={}", p.display()),
                        ds,
                    ],
                    _ => vec!["zfs".into(), "create".into(), ds],
                }
            }
            2 => match (rng.pick(&children), rng.pick(&places)) {
                (Some(ds), Some(p)) if rng.below(3) > 0 => vec![
                    "zfs".into(),
                    "set".into(),
                    format!("mountpoint={}", p.display()),
                    ds.clone(),
                ],
                (Some(ds), _) => vec![
                    "zfs".into(),
                    "inherit".into(),
                    "mountpoint".into(),
                    ds.clone(),
                ],
                _ => continue,
            },
            3 => match rng.pick(&names) {
                Some(ds) => vec!["zfs".into(), "mount".into(), ds.clone()],
                None => continue,
            },
            4 => match rng.pick(&names) {
                Some(ds) => vec!["zfs".into(), "unmount".into(), ds.clone()],
                None => continue,
            },
            5 => match (rng.pick(&children), rng.pick(&names)) {
                (Some(from), Some(under)) => {
                    counter += 1;
                    vec![
                        "zfs".into(),
                        "rename".into(),
                        from.clone(),
                        format!("{under}/r{counter}"),
                    ]
                }
                _ => continue,
            },
            6 => match rng.pick(&children) {
                Some(ds) if rng.below(2) == 0 => vec!["zfs".into(), "destroy".into(), ds.clone()],
                Some(ds) => vec!["zfs".into(), "destroy".into(), "-r".into(), ds.clone()],
                None => continue,
            },
            7 => {
                // A user's link in the sticky directory, towards root's
                // directory, where a mountpoint may lead.
                let l = public.join("l");
                if rng.below(2) == 0 {
                    let _ = fs::remove_dir(&l);
                    let _ = std::os::unix::fs::symlink(&victim, &l);
                } else if fs::symlink_metadata(&l).is_ok_and(|m| m.file_type().is_symlink()) {
                    let _ = fs::remove_file(&l);
                }
                vec!["zfs".into(), "mount".into(), "-a".into()]
            }
            8 => vec!["zpool".into(), "export".into(), pool.clone()],
            10 => {
                // SIGTERM: the daemon exits in bounded time, leaving
                // nothing mounted; `zfs mount -a` starts a new one.
                let pid = e.daemon_pid().expect("daemon pid");
                // SAFETY: signalling the daemon this test started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let t0 = std::time::Instant::now();
                // SAFETY: signal 0 only checks that the process exists.
                while unsafe { libc::kill(pid, 0) } == 0 {
                    assert!(
                        t0.elapsed() < std::time::Duration::from_secs(60),
                        "seed {seed} step {step}: no exit after SIGTERM\n{}\n{}",
                        log.join("\n"),
                        e.log()
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                assert!(
                    e.pool_mounts().is_empty(),
                    "seed {seed} step {step}: mounted after SIGTERM: {:#?}\n{}",
                    e.pool_mounts(),
                    e.log()
                );
                vec!["zfs".into(), "mount".into(), "-a".into()]
            }
            _ => vec![
                "zpool".into(),
                "import".into(),
                "-d".into(),
                e.work.path().to_string_lossy().into_owned(),
                pool.clone(),
            ],
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = e.run(&argv);
        log.push(format!(
            "{step}: {} -> {:?} ({} ms) {}",
            args.join(" "),
            out.code,
            t_step.elapsed().as_millis(),
            out.stderr.lines().next().unwrap_or("")
        ));
        let ctx = format!("seed {seed} step {step}:\n{}", log.join("\n"));
        match what {
            8 if out.success() => {
                exported = true;
                assert!(
                    e.pool_mounts().is_empty(),
                    "{ctx}\nexport succeeded with mounts left: {:#?}",
                    e.pool_mounts()
                );
            }
            9 => {
                // An import may hold the pool and still fail (a mount
                // refused): whether the pool is held decides.
                exported = !e.run(&["zpool", "list", "-H", &pool]).success();
            }
            _ => {}
        }
        if exported {
            // With no pool left the daemon may leave on its own (--auto).
            assert!(
                !e.log().contains("panicked"),
                "{ctx}
{}",
                e.log()
            );
        } else {
            e.assert_alive(&ctx);
        }
        if !exported {
            e.assert_mounted_reachable(&ctx);
        }
        let kept: Vec<_> = fs::read_dir(&victim)
            .unwrap()
            .map(|d| d.unwrap().file_name())
            .collect();
        assert_eq!(
            kept,
            ["keep"],
            "{ctx}\nthe daemon wrote through a planted link"
        );
    }
    // Shown with --nocapture (and kept by the harness on a failure).
    eprintln!("seed {seed}:\n{}", log.join("\n"));
    if !exported {
        let out = e.run(&["zpool", "export", &pool]);
        if out.success() {
            assert!(e.pool_mounts().is_empty(), "{:#?}", e.pool_mounts());
        }
    }
}

#[test]
fn daemon_scenarios() {
    let steps = env_u64("OZFS_SCENARIO_STEPS").unwrap_or(100) as usize;
    let seeds: Vec<u64> = match env_u64("OZFS_SCENARIO_SEED") {
        Some(s) => vec![s],
        None => vec![1, 2, 3, 4],
    };
    for seed in seeds {
        let t0 = std::time::Instant::now();
        scenario(seed, steps);
        eprintln!("scenario seed {seed}: {steps} steps in {:?}", t0.elapsed());
    }
}
