//! A reader between the two halves of another process's label update.
//!
//! A writer puts the new vdev tree into labels 0 and 2, then writes the
//! uberblock of that txg, then labels 1 and 3. A reader in between sees a
//! newest label whose tree no uberblock matches (the guid sum differs). As
//! ZFS does, the pool must then open with the tree of the newest label at
//! or below the uberblock's txg — here the tree before a `zpool attach`.
//!
//! Built from real states: the device of a one-disk pool is saved, a mirror
//! side is attached (new tree, new guid sum), and the saved image gets the
//! new configs of labels 0 and 2 only. ozfs must import that image (the
//! attached side absent) read-only, ONLINE with the one disk, and copy the
//! file out intact.

mod common;
mod wcommon;
use std::fs;
use std::os::unix::fs::FileExt;
use wcommon::*;

/// Label size, and where its config nvlist lies inside it.
const LABEL: u64 = 256 << 10;
const NV_OFF: u64 = 16 << 10;
const NV_LEN: usize = 112 << 10;

#[test]
fn torn_label_update() {
    let tag = "torn";
    let pool = new_devs("oztorn", Layout::Stripe, 1, 128);
    let name = pool.name().to_string();
    let oz = ozfs();
    let work = local_dir(tag);
    oz_create(&oz, &pool, None, &[]);
    let src = work.path().join("f");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(&src, &data).unwrap();
    oz_cp_in(&oz, &src, &format!("{name}:/f"));
    oz_export(&oz, &name);
    let dev = pool.devs()[0].clone();
    let old = fs::read(&dev).unwrap();

    // The new state: a mirror side attached.
    oz_import_rw(&oz, &pool.dev_dir(), &name);
    let side = work.path().join("side");
    fs::File::create(&side).unwrap().set_len(128 * MIB).unwrap();
    oz.ok(&[
        "zpool",
        "attach",
        &name,
        &dev.to_string_lossy(),
        &side.to_string_lossy(),
    ]);
    oz_export(&oz, &name);
    let new = fs::read(&dev).unwrap();

    // The old image with the new configs of labels 0 and 2.
    let torn_dir = work.path().join("torn");
    fs::create_dir(&torn_dir).unwrap();
    let torn = torn_dir.join("d0");
    fs::write(&torn, &old).unwrap();
    let size = old.len() as u64;
    let f = fs::OpenOptions::new().write(true).open(&torn).unwrap();
    for label in [0, size / LABEL * LABEL - 2 * LABEL] {
        let at = (label + NV_OFF) as usize;
        assert_ne!(
            old[at..at + NV_LEN],
            new[at..at + NV_LEN],
            "label at {label:#x}"
        );
        f.write_all_at(&new[at..at + NV_LEN], at as u64).unwrap();
    }
    drop(f);

    oz.ok(&[
        "zpool",
        "import",
        "-N",
        "-d",
        &torn_dir.to_string_lossy(),
        "-o",
        "readonly=on",
        &name,
    ]);
    let st = oz.ok(&["zpool", "status", &name]);
    assert!(st.contains("ONLINE") && !st.contains("mirror"), "{st}");
    let out = work.path().join("out");
    oz.ok(&["cp", &format!("{name}:/f"), &out.to_string_lossy()]);
    assert!(fs::read(&out).unwrap() == data, "file differs");
    oz_export(&oz, &name);
}
