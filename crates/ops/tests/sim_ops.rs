//! The operations layer in-process on simulated devices: a pool made,
//! written, snapshotted, cloned, promoted, sent, received and destroyed
//! through `ozfs_ops` alone, in milliseconds, with no binary, no daemon and
//! no zfs-fuse; the leak check and the space check (both after every sync)
//! hold throughout, and errors come back with their kinds.

use ozfs_format::ErrorKind;
use ozfs_ops::dataset::DestroyOpts;
use ozfs_ops::devices::TopSpec;
use ozfs_ops::pool::{self, CreateOpts};
use ozfs_ops::proto::{execute, Input, Progress, Request, Response};
use ozfs_ops::query::{self, PropValue, Selection, Types};
use ozfs_vdev::sim::{self, SimDevice};
use std::path::PathBuf;

fn run(req: Request) -> ozfs_ops::Result<Response> {
    execute(req, &Progress::none())
}

fn prop(name: &str, key: &str) -> String {
    let sel = Selection {
        operands: vec![name.to_string()],
        types: Types {
            fs: true,
            snap: true,
            vol: true,
        },
        ..Default::default()
    };
    let l = query::datasets(&sel, false).expect("list");
    let (_, v, _) = l[0]
        .props
        .iter()
        .find(|(n, _, _)| n == key)
        .unwrap_or_else(|| panic!("{name} has no {key}"));
    v.render(true)
}

fn leak_check(pool: &str) {
    let (_, p) = ozfs_ops::host::open_imported(pool).expect("open");
    let r = ozfs_dsl::verify::leak_check(&p).expect("leak check");
    assert!(r.clean(), "{pool}: {r:?}");
}

#[test]
fn operations_on_simulated_devices() {
    let t0 = std::time::Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    std::env::set_var("OZFS_STATE_DIR", work.path().join("state"));
    std::env::set_var("OZFS_CHECK_SPACE", "1");
    std::env::set_var("OZFS_CHECK_LEAKS", "1");
    for n in ["opsA", "opsB"] {
        sim::register(n, SimDevice::new(n, 128 << 20, 7));
    }
    let name = "simops";
    pool::create(
        name,
        &[TopSpec::Mirror(vec![
            PathBuf::from("sim:opsA"),
            PathBuf::from("sim:opsB"),
        ])],
        &CreateOpts::default(),
    )
    .expect("create pool");

    // A file system with a small tree in it.
    let fs = format!("{name}/fs");
    let made = run(Request::Create {
        name: fs.clone(),
        parents: false,
        props: vec![("compression".into(), "lzjb".into())],
        no_mount: true,
        volume: None,
    })
    .expect("create fs");
    assert!(matches!(made, Response::Created(ref v) if v == &vec![fs.clone()]));
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("d")).expect("mkdir");
    std::fs::write(src.join("a.txt"), b"alpha\n").expect("write");
    std::fs::write(src.join("d/b.bin"), vec![7u8; 300_000]).expect("write");
    run(Request::CopyIn {
        src: src.clone(),
        dataset: fs.clone(),
        path: "/".into(),
        recursive: true,
        keys: Default::default(),
    })
    .expect("copy in");
    assert_eq!(prop(&fs, "compression"), "lzjb");

    // Errors keep their kinds.
    let e = run(Request::Create {
        name: fs.clone(),
        parents: false,
        props: vec![],
        no_mount: true,
        volume: None,
    })
    .expect_err("exists");
    assert_eq!(e.kind(), ErrorKind::Exists, "{e}");
    let e = run(Request::Destroy {
        name: format!("{name}/nosuch"),
        opts: DestroyOpts::default(),
    })
    .expect_err("missing");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert_eq!(
        e.to_string(),
        format!("cannot open '{name}/nosuch': dataset does not exist")
    );

    // Snapshot, clone, promote: the origin moves to the clone.
    run(Request::Snapshot {
        names: vec![format!("{fs}@s1")],
        recursive: false,
    })
    .expect("snapshot");
    let clone = format!("{name}/clone");
    run(Request::Clone {
        snapshot: format!("{fs}@s1"),
        target: clone.clone(),
        no_mount: true,
    })
    .expect("clone");
    assert_eq!(prop(&clone, "origin"), format!("{fs}@s1"));
    run(Request::Promote {
        clone: clone.clone(),
    })
    .expect("promote");
    assert_eq!(prop(&fs, "origin"), format!("{clone}@s1"));
    leak_check(name);

    // Send the promoted snapshot, receive it as a new file system, copy out.
    let stream = work.path().join("s1.zstream");
    let bytes = ozfs_ops::dataset::send(
        &format!("{clone}@s1"),
        &mut std::fs::File::create(&stream).expect("stream file"),
    )
    .expect("send");
    assert!(bytes > 300_000 / 4, "stream of {bytes} bytes");
    let got = run(Request::Receive {
        target: format!("{name}/recv"),
        force: false,
        dry_run: false,
        no_mount: true,
        stream: Input::File(stream),
    })
    .expect("receive");
    match got {
        Response::Received(r) => {
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].snapshot, format!("{name}/recv@s1"));
            assert!(!r[0].incremental);
        }
        other => panic!("receive answered {other:?}"),
    }
    let out = work.path().join("out");
    let stats =
        ozfs_ops::copy::copy_out(&format!("{name}/recv"), "/src", &out, true).expect("copy out");
    assert!(stats.errors.is_empty(), "{:?}", stats.errors);
    assert_eq!(std::fs::read(out.join("a.txt")).expect("a"), b"alpha\n");
    assert_eq!(
        std::fs::read(out.join("d/b.bin")).expect("b"),
        vec![7u8; 300_000]
    );

    // Destroy with a plan: snapshots first, then file systems, children first.
    let plan = run(Request::Destroy {
        name: clone.clone(),
        opts: DestroyOpts {
            recursive: true,
            dry_run: true,
            defer: false,
        },
    })
    .expect("plan");
    match plan {
        Response::Destroyed(p) => {
            assert!(p.dry_run);
            assert_eq!(p.filesystems, vec![clone.clone()]);
        }
        other => panic!("destroy answered {other:?}"),
    }
    run(Request::Destroy {
        name: format!("{name}/recv"),
        opts: DestroyOpts {
            recursive: true,
            ..Default::default()
        },
    })
    .expect("destroy recv");
    run(Request::Rm {
        dataset: clone.clone(),
        path: "/src/d".into(),
        recursive: true,
        keys: Default::default(),
    })
    .expect("rm");
    leak_check(name);
    let st = ozfs_ops::status::status(name).expect("status");
    assert_eq!(st.state, "ONLINE");
    assert_eq!(st.tree.errors(), 0);
    assert_eq!(st.tree.children[0].children.len(), 2, "mirror of two");
    let used = query::datasets(
        &Selection {
            operands: vec![clone.clone()],
            types: Types {
                fs: true,
                snap: false,
                vol: true,
            },
            ..Default::default()
        },
        false,
    )
    .expect("list")[0]
        .props
        .iter()
        .find(|(n, _, _)| n == "used")
        .map(|(_, v, _)| v.clone());
    assert!(matches!(used, Some(PropValue::Bytes(_))), "{used:?}");
    pool::export(name).expect("export");
    assert!(
        ozfs_dsl::verify::checked_after_sync() >= 10,
        "only {} syncs were leak-checked",
        ozfs_dsl::verify::checked_after_sync()
    );
    eprintln!("operations on simulated devices: {:?}", t0.elapsed());
}
