//! Native encryption on a pool OpenZFS 2.3.2 made (`c7-crypt` of
//! ../shared/corpus/openzfs-2.3): `c7-crypt/gcm` (aes-256-gcm, a
//! passphrase) and `c7-crypt/ccm` (aes-128-ccm, a hex key), their keys in
//! the corpus's `keys/`. What is checked here, below the CLI, on OpenZFS's
//! own bytes:
//! - a locked dataset is refused with a permission error naming its
//!   encryption root, and a wrong key is refused without being kept;
//! - the right key unlocks the dataset and its snapshot;
//! - a dnode block is authenticated exactly as OpenZFS authenticates it:
//!   a changed block-pointer property or an encrypted bonus byte fails the
//!   MAC, while the fields OpenZFS leaves out (`dn_used`, a DVA) do not;
//! - a changed byte of an encrypted data block fails the MAC;
//! - the objset's portable and local MACs verify, and a change to its
//!   type, meta-dnode or accounting dnodes is caught;
//! - a scrub verifies every block of the pool without any key.

use ozfs_dsl::scrub::{scrub, ScanMode};
use ozfs_dsl::DslPool;
use ozfs_format::types::ot;
use ozfs_format::ErrorKind;
use std::sync::atomic::AtomicBool;

mod corpus;
use corpus::{corpus, open_pool};

fn key(name: &str) -> Vec<u8> {
    std::fs::read(corpus().join("c7-crypt/keys").join(name)).expect("key file")
}

#[test]
fn keys_unlock_and_blocks_authenticate_as_openzfs_wrote_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = open_pool("c7-crypt", &["d0.img"], dir.path());
    let dsl = DslPool::open(pool.clone()).expect("DSL");
    let gcm = dsl.lookup("c7-crypt/gcm").expect("gcm");
    let ccm = dsl.lookup("c7-crypt/ccm").expect("ccm");

    // What the key objects say (props.txt: encryption, keyformat,
    // pbkdf2iters, encryptionroot).
    let p = dsl.crypt_props(&gcm).expect("props").expect("encrypted");
    assert_eq!(p.suite.name(), "aes-256-gcm");
    assert_eq!(p.root, "c7-crypt/gcm");
    assert_eq!(p.params.format.name(), "passphrase");
    assert_eq!(p.params.iters, 350000);
    assert!(!p.available);
    let p = dsl.crypt_props(&ccm).expect("props").expect("encrypted");
    assert_eq!(
        (p.suite.name(), p.params.format.name(), p.params.iters),
        ("aes-128-ccm", "hex", 0)
    );
    assert!(dsl
        .crypt_props(&dsl.lookup("c7-crypt").expect("root"))
        .expect("props")
        .is_none());

    // Locked: refused as a permission error naming the root, not corrupt.
    let e = dsl.objset(&gcm).err().expect("locked dataset refused");
    assert_eq!(e.kind(), ErrorKind::Permission, "{e}");
    assert!(e.to_string().contains("c7-crypt/gcm"), "{e}");

    // Wrong keys: refused, nothing kept.
    for (ds, k) in [
        (&gcm, b"not-the-passphrase".to_vec()),
        (&ccm, key("secret.pass")),
    ] {
        let e = dsl.load_key(ds, &k, false).expect_err("wrong key refused");
        assert!(
            matches!(e.kind(), ErrorKind::Permission | ErrorKind::Invalid),
            "{e}"
        );
    }
    assert!(dsl.objset(&gcm).is_err());
    let e = dsl
        .load_key(&gcm, &key("ccm.hex"), false)
        .expect_err("a hex key is not this passphrase");
    assert!(e.to_string().contains("incorrect key"), "{e}");

    // A dry run proves the key and keeps nothing.
    dsl.load_key(&gcm, &key("secret.pass"), true)
        .expect("dry run");
    assert!(
        !dsl.crypt_props(&gcm)
            .expect("props")
            .expect("enc")
            .available
    );

    // The right keys.
    dsl.load_key(&gcm, &key("secret.pass"), false)
        .expect("gcm key");
    dsl.load_key(&ccm, &key("ccm.hex"), false).expect("ccm key");
    assert!(dsl.load_key(&gcm, &key("secret.pass"), false).is_err());
    for name in ["c7-crypt/gcm", "c7-crypt/gcm@s1", "c7-crypt/ccm@s1"] {
        let ds = dsl.lookup(name).expect(name);
        dsl.objset(&ds).expect(name);
    }

    // The objset block: both of its MACs verify, and a change to what
    // each covers is caught (the portable MAC: the type and meta-dnode;
    // the local MAC: the accounting dnodes, present and complete here).
    let raw_os = pool.read_bp(&gcm.ds.bp).expect("objset block");
    let mk0 = dsl.dataset_key(&gcm).expect("master key");
    mk0.verify_objset(&raw_os, false)
        .expect("objset MACs verify");
    assert!(
        raw_os[712] & 1 == 1 && raw_os[1024] != 0,
        "accounting complete and present: the local MAC is checked"
    );
    for (off, what) in [
        (704, "os_type"),
        (64 + 48, "meta-dnode block pointer LSIZE"),
        (16, "meta-dnode maxblkid"),
        (1024 + 64 + 48, "user-used dnode block pointer"),
        (2048 + 16, "project-used maxblkid"),
    ] {
        let mut b = raw_os.clone();
        b[off] ^= 1;
        assert!(
            mk0.verify_objset(&b, false).is_err(),
            "{what} changed, MACs verified"
        );
    }
    let mut b = raw_os.clone();
    b[512] ^= 1; // the intent-log header is covered by neither MAC
    mk0.verify_objset(&b, false)
        .expect("ZIL header is not authenticated");

    // The first dnode block of gcm's objset, as stored and as decrypted.
    let os = dsl.objset(&gcm).expect("objset");
    let mk = dsl.dataset_key(&gcm).expect("master key");
    let bp = os
        .block_bp(&os.meta_dnode(), 0, 0)
        .expect("bp")
        .expect("dnode block 0");
    assert!(bp.is_encrypted() && bp.object_type() == ot::DNODE);
    let stored = pool.read_physical(&bp).expect("stored bytes");
    let plain = mk
        .decrypt_block(&bp, false, stored.clone())
        .expect("decrypts");
    assert_eq!(
        plain,
        pool.read_bp_keyed(&bp, Some(&mk)).expect("keyed read")
    );
    // A file system's dnode with an SA bonus (encrypted) and a block pointer.
    let slot = (0..stored.len() / 512)
        .find(|&i| {
            let d = &plain[i * 512..];
            d[0] != 0 && d[4] == ot::SA && d[3] >= 1 && d[64..80].iter().any(|&b| b != 0)
        })
        .expect("a dnode with an SA bonus and a block");
    let base = slot * 512;
    assert_ne!(
        stored[base + 192..base + 256],
        plain[base + 192..base + 256],
        "the SA bonus is stored encrypted"
    );
    let try_flip = |off: usize| {
        let mut b = stored.clone();
        b[off] ^= 0x01;
        mk.decrypt_block(&bp, false, b)
    };
    // Authenticated: the block pointer's properties (LSIZE) and MAC, the
    // dnode's type; encrypted: the bonus.
    for (off, what) in [
        (base + 64 + 48, "block pointer LSIZE"),
        (base + 64 + 120, "block pointer MAC"),
        (base, "dnode type"),
        (base + 200, "SA bonus"),
    ] {
        assert!(
            try_flip(off).is_err(),
            "{what} changed but the MAC verified"
        );
    }
    // Left out of the authentication, as OpenZFS leaves them out.
    for (off, what) in [
        (base + 24, "dn_used"),
        (base + 64 + 8, "DVA offset"),
        (base + 64 + 96, "checksum word 0"),
    ] {
        assert!(
            try_flip(off).is_ok(),
            "{what} is not authenticated by OpenZFS"
        );
    }

    // An encrypted data block: any byte changed fails its MAC.
    let root = ozfs_zpl::Zpl::open(os.clone(), "c7-crypt/gcm").expect("ZPL");
    let obj = root.resolve("/random.bin").expect("random.bin");
    let (dn, _) = root.attrs(obj).expect("attrs");
    let dbp = os.block_bp(&dn, 0, 0).expect("bp").expect("block 0");
    assert!(dbp.is_encrypted());
    let mut data = pool.read_physical(&dbp).expect("stored");
    mk.decrypt_block(&dbp, false, data.clone())
        .expect("decrypts");
    data[7] ^= 0x80;
    let e = mk.decrypt_block(&dbp, false, data).expect_err("MAC fails");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");

    // Unloaded: locked again.
    dsl.unload_key(&gcm).expect("unload");
    assert!(dsl.objset(&gcm).is_err());
    assert!(dsl.unload_key(&gcm).is_err(), "already unloaded");

    // A scrub needs no key: every copy of every block verifies.
    let stop = AtomicBool::new(false);
    let r = scrub(
        &pool,
        &pool.uberblock.rootbp,
        ScanMode::Scrub,
        0,
        false,
        &stop,
        &|_| {},
    )
    .expect("scrub");
    assert!(r.bad.is_empty(), "{:?}", r.bad);
    assert_eq!(r.progress.errors, 0);
    // Every block was reached, the encrypted datasets' too: OpenZFS's
    // `zdb -bcc` counts 4505600 bytes allocated.
    assert_eq!(r.progress.examined, 4505600);
    assert_eq!(r.progress.issued, r.progress.examined);
}

/// The sealing side (`MasterKey::seal`, `indirect_mac`), which ozfs uses
/// to write into encrypted datasets, recomputes the MACs OpenZFS wrote:
/// every indirect block's MAC of its children (meta-dnode and files, no
/// key) and the objset's portable and local MACs, byte for byte. A block sealed anew opens again with
/// the same key, under a new salt and IV.
#[test]
fn sealing_recomputes_the_macs_openzfs_wrote() {
    use ozfs_codec::crypt::indirect_mac;
    use ozfs_dmu::objset::Dnode;
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = open_pool("c7-crypt", &["d0.img"], dir.path());
    let dsl = DslPool::open(pool.clone()).expect("DSL");
    for (name, k) in [("c7-crypt/gcm", "secret.pass"), ("c7-crypt/ccm", "ccm.hex")] {
        let ds = dsl.lookup(name).expect(name);
        dsl.load_key(&ds, &key(k), false).expect("key");
        let os = dsl.objset(&ds).expect("objset");
        let mk = dsl.dataset_key(&ds).expect("master key");

        // The objset block: sealing a copy writes the same two MACs.
        let raw_os = pool.read_bp(&ds.ds.bp).expect("objset block");
        let mut resealed = raw_os.clone();
        resealed[720..784].fill(0);
        let s = mk
            .seal(ot::OBJSET, 0, &raw_os, &mut resealed)
            .expect("seal objset");
        assert_eq!((s.params, s.mac), (None, None));
        assert_eq!(resealed, raw_os, "{name}: objset MACs recomputed");

        // Indirect blocks: the MAC of their children.
        let zpl = ozfs_zpl::Zpl::open(os.clone(), name).expect("ZPL");
        let mut trees = vec![os.meta_dnode()];
        for path in ["/random.bin", "/text.txt", "/sparse.img"] {
            let obj = zpl.resolve(path).expect(path);
            trees.push(os.dnode(obj).expect("dnode"));
        }
        let mut indirect = 0;
        for dn in &trees {
            os.walk_tree(dn, &mut |level, _, bp| {
                if level > 0 && !bp.is_hole() {
                    let block = pool.read_bp(bp).expect("indirect block");
                    assert_eq!(indirect_mac(&block).expect("mac"), bp.mac(false));
                    indirect += 1;
                }
                Ok(())
            })
            .expect("walk");
        }
        assert!(indirect >= 4, "{name}: {indirect} indirect blocks");

        // Accounting blocks: an encrypted type, sealed like file data.
        let mut sealed_blocks = 0;
        for phys in [
            &os.phys.userused_dnode,
            &os.phys.groupused_dnode,
            &os.phys.projectused_dnode,
        ] {
            let dn = Dnode {
                object: 0,
                phys: phys.clone(),
                swap: false,
            };
            os.walk_tree(&dn, &mut |_, _, bp| {
                if !bp.is_hole() {
                    assert!(bp.is_encrypted(), "{bp:?}");
                    let stored = pool.read_physical(bp).expect("stored");
                    mk.decrypt_block(bp, false, stored).expect("decrypts");
                    sealed_blocks += 1;
                }
                Ok(())
            })
            .expect("walk");
        }
        assert!(
            sealed_blocks >= 3,
            "{name}: {sealed_blocks} accounting blocks"
        );

        // A dnode block and a data block sealed anew open again.
        let mbp = os
            .block_bp(&os.meta_dnode(), 0, 0)
            .expect("bp")
            .expect("dnode block 0");
        let fbp = {
            let obj = zpl.resolve("/random.bin").expect("random.bin");
            os.block_bp(&os.dnode(obj).expect("dnode"), 0, 0)
                .expect("bp")
                .expect("block 0")
        };
        for bp in [mbp, fbp] {
            let plain = mk
                .decrypt_block(&bp, false, pool.read_physical(&bp).expect("stored"))
                .expect("decrypts");
            let mut sealed = plain.clone();
            let s = mk
                .seal(bp.object_type(), 0, &plain, &mut sealed)
                .expect("seal");
            let (salt, iv) = s.params.expect("encrypted");
            assert_ne!(sealed, plain, "sealed bytes differ from the plain ones");
            let mut nbp = bp;
            nbp.words[4] = u64::from_le_bytes(salt);
            nbp.words[5] = u64::from_le_bytes(iv[..8].try_into().expect("8"));
            nbp.words[11] = (nbp.words[11] & 0xffff_ffff)
                | (u32::from_le_bytes(iv[8..].try_into().expect("4")) as u64) << 32;
            let mac = s.mac.expect("mac");
            nbp.words[14] = u64::from_le_bytes(mac[..8].try_into().expect("8"));
            nbp.words[15] = u64::from_le_bytes(mac[8..].try_into().expect("8"));
            assert_eq!(
                mk.decrypt_block(&nbp, false, sealed.clone())
                    .expect("opens"),
                plain
            );
            let mid = sealed.len() / 2;
            sealed[mid] ^= 1;
            assert!(mk.decrypt_block(&nbp, false, sealed).is_err());
        }
    }
}

/// Every block OpenZFS wrote in the encrypted file systems and their
/// snapshots, read with the key: each indirect block's MAC recomputed from
/// its children, each dnode and data block's tag, each authenticated block's
/// HMAC (the master node, the accounting ZAPs) — none refused, so the
/// checks that refuse forgeries (`hostile_crypt`) refuse nothing real.
#[test]
fn every_block_openzfs_wrote_authenticates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pool = open_pool("c7-crypt", &["d0.img"], dir.path());
    let dsl = DslPool::open(pool.clone()).expect("DSL");
    let gcm = dsl.lookup("c7-crypt/gcm").expect("gcm");
    let ccm = dsl.lookup("c7-crypt/ccm").expect("ccm");
    dsl.load_key(&gcm, &key("secret.pass"), false)
        .expect("gcm key");
    dsl.load_key(&ccm, &key("ccm.hex"), false).expect("ccm key");
    let mut blocks = 0u64;
    let mut authenticated = 0u64;
    let mut under_indirect = 0u64;
    for name in [
        "c7-crypt/gcm",
        "c7-crypt/gcm@s1",
        "c7-crypt/ccm",
        "c7-crypt/ccm@s1",
    ] {
        let ds = dsl.lookup(name).expect("dataset");
        assert!(dsl.is_encrypted(&ds).expect("DSL"), "{name}");
        let os = dsl.objset(&ds).expect("objset with its MACs");
        let meta = os.meta_dnode();
        let mut dnodes: Vec<ozfs_dmu::objset::Dnode> = Vec::new();
        for special in [
            &os.phys.userused_dnode,
            &os.phys.groupused_dnode,
            &os.phys.projectused_dnode,
        ] {
            if special.object_type != 0 {
                dnodes.push(ozfs_dmu::objset::Dnode {
                    object: u64::MAX,
                    phys: special.clone(),
                    swap: meta.swap,
                });
            }
        }
        for obj in os.object_ranges().expect("objects").into_iter().flatten() {
            if obj == 0 {
                continue;
            }
            match os.dnode(obj) {
                Ok(d) if d.phys.object_type != 0 => dnodes.push(d),
                _ => {}
            }
        }
        for dn in &dnodes {
            let mut from = 0;
            while let Some(b) = os.next_data_block(dn, from).expect("tree") {
                let bp = os
                    .block_bp(dn, 0, b)
                    .unwrap_or_else(|e| panic!("{name} object {} block {b}: {e}", dn.object))
                    .expect("a block");
                if bp.is_authenticated() {
                    authenticated += 1;
                }
                if dn.phys.nlevels > 1 {
                    under_indirect += 1;
                }
                os.read_block(dn, b)
                    .unwrap_or_else(|e| panic!("{name} object {} block {b}: {e}", dn.object));
                blocks += 1;
                from = b + 1;
            }
        }
    }
    assert!(blocks > 50, "{blocks} blocks read");
    assert!(
        under_indirect > 10,
        "{under_indirect} blocks under indirect blocks"
    );
    assert!(
        authenticated >= 4,
        "{authenticated} authenticated blocks (master nodes, accounting)"
    );
}
