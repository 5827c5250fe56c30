//! `ozfs zdb`: display pool internals the way OpenZFS's zdb does:
//! `-C` config, `-u` uberblock, `-d…` datasets and objects (up to `-ddddd`
//! with indirect blocks), `-R` raw block reads, `-r` file copy-out,
//! `-e -p DIR` for pools that are not imported.

use crate::args::Args;
use crate::{CmdResult, Fail};
use ozfs_dmu::{zap, Dnode, Objset};
use ozfs_dsl::props::nicenum;
use ozfs_dsl::{DatasetInfo, DslPool};
use ozfs_format::types::{object_type_is_zap, object_type_name, objset_type_name, ot};
use ozfs_format::znode::ZplAttrs;
use ozfs_format::BlkPtr;
use ozfs_ops::host::Record;
use ozfs_spa::import::discover;
use ozfs_spa::{Pool, PoolOptions};
use ozfs_zpl::Zpl;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

const USAGE: &str = "Usage:	zdb [-CudAeLP] [-e [-p path ...]] poolname [object ...]
	zdb [-dA] [-e [-p path ...]] poolname[/dataset] [object ...]
	zdb -R [-A] [-e [-p path ...]] poolname vdev:offset:size[:flags]
	zdb -r [-e [-p path ...]] dataset path destination";

pub fn main(argv: &[String]) -> CmdResult {
    let a = Args::parse(argv, "bcdhilmsuvACDFGHLMPRSXeEYrVTQOKkNBWZ", "pUIoxatq")?;
    a.refuse("cFGHMNOQWXYZBEiksvKTLVxatqIUo", "zdb")
        .map_err(Fail::Err)?;
    if a.pos.is_empty() {
        return Err(Fail::Usage(USAGE.into()));
    }
    if a.flag('l') {
        return labels(&a.pos[0]);
    }
    let target = a.pos[0].clone();
    let pool_name = target.split(['/', '@']).next().unwrap_or("").to_string();
    let (pool, rec) = open_pool(&a, &pool_name)?;
    let out = run(&a, &pool, &target);
    if let Some(mut r) = rec {
        let _ = r.save_counters(&pool);
    }
    out
}

/// `zdb -l DEVICE`: the device's four labels as OpenZFS's zdb prints
/// them — each distinct config once, under the first label that holds it,
/// followed by the labels that hold it; a label that cannot be read is
/// named. Exit 2 when no label is valid, as OpenZFS does.
fn labels(path: &str) -> CmdResult {
    let dev = ozfs_vdev::device::open_path(std::path::Path::new(path), false)
        .map_err(|e| Fail::Err(format!("zdb: can't open '{path}': {e}")))?;
    let set = ozfs_vdev::labels::read_labels(dev.as_ref());
    let mut shown: Vec<usize> = Vec::new();
    let mut out = String::new();
    let mut any = false;
    for (i, c) in set.configs.iter().enumerate() {
        match c {
            Err(e) => {
                out.push_str(&format!(
                    "------------------------------------\nLABEL {i} \n------------------------------------\nfailed to unpack label {i}: {e}\n"
                ));
            }
            Ok(cfg) => {
                any = true;
                if shown
                    .iter()
                    .any(|&j| matches!(&set.configs[j], Ok(o) if o == cfg))
                {
                    continue;
                }
                shown.push(i);
                out.push_str(&format!(
                    "------------------------------------\nLABEL {i} \n------------------------------------\n"
                ));
                cfg.dump(4, &mut out);
                let same: Vec<String> = set
                    .configs
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| matches!(o, Ok(o) if o == cfg))
                    .map(|(j, _)| j.to_string())
                    .collect();
                out.push_str(&format!("    labels = {} \n", same.join(" ")));
            }
        }
    }
    print!("{out}");
    if any {
        Ok(())
    } else {
        Err(Fail::Usage(String::new()))
    }
}

fn open_pool(a: &Args, name: &str) -> Result<(Arc<Pool>, Option<Record>), Fail> {
    if a.flag('e') {
        let dirs: Vec<PathBuf> = {
            let d = a.opt_all('p');
            if d.is_empty() {
                vec![PathBuf::from("/dev")]
            } else {
                d.into_iter().map(PathBuf::from).collect()
            }
        };
        let pools = discover(&dirs).map_err(|e| Fail::Err(e.to_string()))?;
        let found = pools
            .into_iter()
            .find(|p| p.name == name || p.guid.to_string() == name)
            .ok_or_else(|| {
                Fail::Err(format!(
                    "zdb: can't open '{name}': No such file or directory"
                ))
            })?;
        let pool = Pool::open(
            found,
            &PoolOptions {
                readonly: true,
                max_txg: None,
            },
        )
        .map_err(|e| Fail::Err(format!("zdb: can't open '{name}': {e}")))?;
        return Ok((Arc::new(pool), None));
    }
    let (rec, pool) = ozfs_ops::host::open_imported(name).map_err(|_| {
        Fail::Err(format!(
            "zdb: can't open '{name}': No such file or directory"
        ))
    })?;
    Ok((pool, Some(rec)))
}

fn run(a: &Args, pool: &Arc<Pool>, target: &str) -> CmdResult {
    if a.flag('R') {
        return raw_read(a, pool);
    }
    if a.flag('r') {
        return copy_file(a, pool);
    }
    if a.flag('m') {
        return dump_metaslabs(pool, a.count('m'));
    }
    if a.flag('b') {
        return leak_check(pool);
    }
    if a.flag('S') {
        return simulate_dedup(pool);
    }
    if a.flag('D') {
        return dump_ddts(pool, a.count('D'));
    }
    let any = a.flag('C') || a.flag('u') || a.flag('d') || a.flag('h');
    let dsl = DslPool::open(pool.clone())
        .map_err(|e| Fail::Err(format!("zdb: can't open '{}': {e}", pool.name)))?;
    if a.flag('h') {
        // The pool's history, every record (internal events too).
        let recs = ozfs_ops::history::records(&dsl)
            .map_err(|e| Fail::Err(format!("zdb: {}: history: {e}", pool.name)))?;
        let mut h = String::from("\nHistory:\n");
        for r in &recs {
            h.push_str(&crate::render::history_record(r, true, false));
        }
        print!("{h}");
    }
    let mut out = String::new();
    if a.flag('C') || !any {
        let cfg = dsl.mos_config().map_err(|e| Fail::Err(e.to_string()))?;
        out.push_str("\nMOS Configuration:\n");
        cfg.dump(8, &mut out);
    }
    if a.flag('u') || !any {
        dump_uberblock(pool, &mut out);
    }
    let dlevel = if any { a.count('d') } else { 1 };
    print!("{out}");
    out.clear();
    if dlevel > 0 {
        let objects: Vec<u64> = a.pos[1..].iter().filter_map(|s| s.parse().ok()).collect();
        if target.contains('/') || target.contains('@') {
            let ds = dsl
                .lookup(target)
                .map_err(|e| Fail::Err(format!("failed to hold dataset '{target}': {e}")))?;
            dump_dataset(&dsl, &ds, dlevel, &objects)?;
        } else {
            let mos = Objset::mos(pool.clone());
            let mos_used = dsl.mos_used().unwrap_or(0);
            dump_objset(&mos, "mos", "META", 0, 4, mos_used, dlevel, &objects, None)?;
            // In the order OpenZFS's zdb visits them.
            let all = dsl
                .objset_find_order()
                .map_err(|e| Fail::Err(e.to_string()))?;
            for ds in &all {
                dump_dataset(&dsl, ds, dlevel, &objects)?;
            }
            // OpenZFS's checks (a version-23 pool is zfs-fuse's world,
            // whose zdb has none).
            if pool.uberblock.version > 23 {
                let (text, ok) = verify_feature_refcounts(&dsl, &all)
                    .map_err(|e| Fail::Err(format!("zdb: {}: {e}", pool.name)))?;
                print!("{text}");
                if !ok {
                    return Err(Fail::Usage(String::new()));
                }
            }
        }
    }
    Ok(())
}

/// The features whose reference counts `zdb -d` checks, in OpenZFS's
/// order: per-dataset ones (counted over the datasets whose object names
/// the feature) and the bookmark and livelist ones (counted over
/// bookmarks and clone livelists). None: global.
const COUNTED_FEATURES: &[(&str, &str, bool)] = &[
    ("large_blocks", "org.open-zfs:large_blocks", true),
    ("large_dnode", "org.zfsonlinux:large_dnode", true),
    ("sha512", "org.illumos:sha512", true),
    ("skein", "org.illumos:skein", true),
    ("edonr", "org.illumos:edonr", true),
    (
        "userobj_accounting",
        "org.zfsonlinux:userobj_accounting",
        true,
    ),
    ("encryption", "com.datto:encryption", true),
    ("project_quota", "org.zfsonlinux:project_quota", true),
    (
        "redaction_bookmarks",
        "com.delphix:redaction_bookmarks",
        false,
    ),
    ("redacted_datasets", "com.delphix:redacted_datasets", true),
    ("bookmark_written", "com.delphix:bookmark_written", false),
    ("livelist", "com.delphix:livelist", false),
    ("zstd_compress", "org.freebsd:zstd_compress", true),
    ("zilsaxattr", "org.openzfs:zilsaxattr", true),
    ("blake3", "org.openzfs:blake3", true),
    (
        "redaction_list_spill",
        "com.delphix:redaction_list_spill",
        false,
    ),
    ("longname", "org.zfsonlinux:longname", true),
    ("large_microzap", "com.klarasystems:large_microzap", true),
];

/// Whether ZAP-with-bonus object `obj` of the MOS has entry `name`.
fn has_entry(dsl: &DslPool, obj: u64, name: &str) -> ozfs_format::Result<bool> {
    let dn = dsl.mos.dnode(obj)?;
    if !object_type_is_zap(dn.phys.object_type) {
        return Ok(false);
    }
    Ok(zap::lookup(&dsl.mos, &dn, name)?.is_some())
}

/// What OpenZFS's `zdb -d` checks after the datasets: each counted
/// feature's reference count in the MOS against its consumers, then the
/// device-removal counts. The lines as OpenZFS prints them, and whether
/// every count agreed. Bookmarks are not read: a bookmark feature with a
/// nonzero count is reported as not checked rather than guessed.
fn verify_feature_refcounts(
    dsl: &DslPool,
    all: &[DatasetInfo],
) -> ozfs_format::Result<(String, bool)> {
    let enabled = ozfs_dsl::features::enabled(&dsl.mos)?;
    let refcount = |guid: &str| enabled.iter().find(|(n, _)| n == guid).map(|(_, c)| *c);
    let mut out = String::new();
    let mut ok = true;
    let mut line = |out: &mut String, name: &str, have: u64, want: u64| {
        if have == want {
            let _ = writeln!(out, "Verified {name} feature refcount of {want} is correct");
        } else {
            ok = false;
            let _ = writeln!(
                out,
                "{name} feature refcount mismatch: {have} consumers != {want} refcount"
            );
        }
    };
    for &(name, guid, per_dataset) in COUNTED_FEATURES {
        let Some(want) = refcount(guid) else { continue };
        let have = if per_dataset {
            let mut n = 0;
            for ds in all {
                if has_entry(dsl, ds.ds_obj, guid)? {
                    n += 1;
                }
            }
            n
        } else if name == "livelist" {
            let mut n = 0;
            for ds in all.iter().filter(|d| !d.is_snapshot) {
                if has_entry(dsl, ds.dir_obj, "com.delphix:livelist")? {
                    n += 1;
                }
            }
            n
        } else if want != 0 {
            let _ = writeln!(
                out,
                "{name} feature refcount of {want} not verified (bookmarks are not read)"
            );
            continue;
        } else {
            0
        };
        line(&mut out, name, have, want);
    }
    // Device removal: one indirect vdev per removal; the obsolete-count
    // objects (precise flags, obsolete space maps, mapping counts, a
    // condensing record, the obsolete bpobj, remap dead lists).
    let (mut indirect, mut precise, mut obsolete_sm, mut havecounts) = (0u64, 0, 0, 0);
    for top in dsl.pool.root.children.iter() {
        let Some(mapping) = top.config.get_u64("com.delphix:indirect_object") else {
            continue;
        };
        if mapping == 0 {
            continue;
        }
        indirect += 1;
        // A mapping with per-entry counts has the longer bonus
        // (`vimp_counts_object` after the three words of version 0).
        if dsl.mos.dnode(mapping)?.phys.bonus.len() > 24 {
            havecounts += 1;
        }
        if let Some(zap_obj) = dsl.top_zap(top.id) {
            if has_entry(dsl, zap_obj, "com.delphix:obsolete_counts_are_precise")? {
                precise += 1;
            }
            if has_entry(dsl, zap_obj, "com.delphix:indirect_obsolete_sm")? {
                obsolete_sm += 1;
            }
        }
    }
    let dr = refcount("com.delphix:device_removal").unwrap_or(0);
    if dr == indirect {
        let _ = writeln!(
            out,
            "Verified device_removal feature refcount of {dr} is correct"
        );
    } else {
        ok = false;
        let _ = writeln!(
            out,
            "Number of indirect vdevs ({indirect}) does not match feature count ({dr})"
        );
    }
    let mut oc = precise + obsolete_sm + havecounts;
    if has_entry(dsl, 1, "com.delphix:condensing_indirect")? {
        oc += 2;
    }
    if has_entry(dsl, 1, "com.delphix:obsolete_bpobj")? {
        oc += 1;
    }
    for ds in all {
        if has_entry(dsl, ds.ds_obj, "com.delphix:remap_deadlist")? {
            oc += 1;
        }
    }
    let want = refcount("com.delphix:obsolete_counts").unwrap_or(0);
    if want == oc {
        let _ = writeln!(
            out,
            "Verified indirect_refcount feature refcount of {want} is correct"
        );
    } else {
        ok = false;
        let _ = writeln!(
            out,
            "Number of obsolete counts objects ({oc}) does not match feature count ({want})"
        );
    }
    Ok((out, ok))
}

/// `zdb -b`: traverse every block and compare with the space maps.
fn leak_check(pool: &Arc<Pool>) -> CmdResult {
    DslPool::open(pool.clone())
        .map_err(|e| Fail::Err(format!("zdb: can't open '{}': {e}", pool.name)))?;
    println!("\nTraversing all blocks to verify nothing leaked ...\n");
    let r = ozfs_dsl::verify::leak_check(pool)
        .map_err(|e| Fail::Err(format!("zdb: traversal of '{}' failed: {e}", pool.name)))?;
    for (v, o, l) in &r.leaked {
        println!("leaked space: vdev {v}, offset 0x{o:x}, size {l}");
    }
    for (v, o, l) in &r.unallocated {
        println!("referenced but not allocated: vdev {v}, offset 0x{o:x}, size {l}");
    }
    for (v, o, l) in &r.doubly {
        println!("referenced twice: vdev {v}, offset 0x{o:x}, size {l}");
    }
    for b in &r.bad_blocks {
        println!("{b}");
    }
    if r.clean() {
        println!("\tNo leaks (block sum matches space maps exactly)\n");
    } else {
        println!(
            "block traversal size {} != alloc {} (unreachable {})\n",
            r.referenced,
            r.allocated,
            r.allocated as i64 - r.referenced as i64
        );
    }
    println!("\tbp count: {:>20}", r.blocks);
    println!("\tpre-compressed: {:>14}", r.external);
    println!("\tdeferred free: {:>15}", r.deferred);
    println!("\tintent log: {:>18}", r.log);
    println!("\tbp allocated: {:>16}", r.referenced);
    println!("\tspace map allocated: {:>9}", r.allocated);
    if r.clean() {
        Ok(())
    } else {
        Err(Fail::Err(format!(
            "zdb: pool '{}' is not consistent",
            pool.name
        )))
    }
}

fn dump_uberblock(pool: &Pool, out: &mut String) {
    let ub = &pool.uberblock;
    let _ = writeln!(out, "\nUberblock:");
    let _ = writeln!(out, "\tmagic = {:016x}", 0x00bab10cu64);
    let _ = writeln!(out, "\tversion = {}", ub.version);
    let _ = writeln!(out, "\ttxg = {}", ub.txg);
    let _ = writeln!(out, "\tguid_sum = {}", ub.guid_sum);
    let _ = writeln!(
        out,
        "\ttimestamp = {} UTC = {}",
        ub.timestamp,
        ozfs_dsl::PropValue::Time(ub.timestamp).render(false)
    );
    let _ = writeln!(out, "\tbp = {}", ub.rootbp.to_zdb_string());
    if ub.mmp_magic == 0xa11cea11 {
        let _ = writeln!(out, "\tmmp_magic = {:016x}", ub.mmp_magic);
    }
    if ub.checkpoint_txg != 0 {
        let _ = writeln!(out, "\tcheckpoint_txg = {}", ub.checkpoint_txg);
    }
    let _ = writeln!(out);
}

fn dump_dataset(dsl: &DslPool, ds: &DatasetInfo, dlevel: usize, objects: &[u64]) -> CmdResult {
    if ds.ds.bp.is_hole() {
        return Ok(());
    }
    // An encrypted dataset without its key: its objset and dnodes read
    // as stored (bonus buffers of encrypted types stay ciphertext).
    let os = match dsl.objset(ds) {
        Err(ozfs_format::Error::Permission(_)) => Objset::open(dsl.pool.clone(), &ds.ds.bp),
        r => r,
    }
    .map_err(|e| Fail::Err(e.to_string()))?;
    let kind = match os.phys.os_type {
        2 => "ZPL",
        3 => "ZVOL",
        _ => objset_type_name(os.phys.os_type),
    };
    let zpl = if os.phys.os_type == 2 {
        Zpl::open(
            Objset::open(dsl.pool.clone(), &ds.ds.bp).map_err(|e| Fail::Err(e.to_string()))?,
            &ds.name,
        )
        .ok()
    } else {
        None
    };
    dump_objset(
        &os,
        &ds.name,
        kind,
        ds.ds_obj,
        ds.ds.creation_txg,
        ds.ds.referenced_bytes,
        dlevel,
        objects,
        zpl.as_ref(),
    )?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn dump_objset(
    os: &Objset,
    name: &str,
    kind: &str,
    id: u64,
    cr_txg: u64,
    refd: u64,
    dlevel: usize,
    objects: &[u64],
    zpl: Option<&Zpl>,
) -> CmdResult {
    println!(
        "Dataset {name} [{kind}], ID {id}, cr_txg {cr_txg}, {}, {} objects",
        nicenum(refd),
        os.bp.fill()
    );
    if dlevel < 2 {
        return Ok(());
    }
    println!();
    println!(
        "{:>10}  {:>3}  {:>5}  {:>5}  {:>5}  {:>6}  {:>5}  {:>6}  type",
        "Object", "lvl", "iblk", "dblk", "dsize", "dnsize", "lsize", "%full"
    );
    let meta = os.meta_dnode();
    dump_object(os, &meta, dlevel, zpl)?;
    // Every object that dnode blocks exist for (never 1..max_object: a
    // meta-dnode's maxblkid is only an upper bound), or the ones asked for.
    let list: Vec<std::ops::Range<u64>> = if objects.is_empty() {
        match os.object_ranges() {
            Ok(r) => r,
            Err(e) => {
                println!("	<error listing objects: {e}>");
                Vec::new()
            }
        }
    } else {
        objects.iter().map(|&o| o..o.saturating_add(1)).collect()
    };
    for obj in list
        .into_iter()
        .flatten()
        .filter(|&o| o != 0 || !objects.is_empty())
    {
        match os.dnode(obj) {
            Ok(dn) if dn.phys.object_type != 0 => dump_object(os, &dn, dlevel, zpl)?,
            Ok(_) => {}
            Err(ozfs_format::Error::NotFound(_)) => {}
            Err(e) => println!("{obj:>10}  <error: {e}>"),
        }
        if !objects.is_empty() {
            continue;
        }
    }
    println!();
    Ok(())
}

fn dump_object(os: &Objset, dn: &Dnode, dlevel: usize, zpl: Option<&Zpl>) -> CmdResult {
    let p = &dn.phys;
    let dblk = p.datablksz();
    // No overflow: maxblkid is checked on decode ((maxblkid + 1) × dblk <= 2^64).
    let blocks = p.maxblkid.saturating_add(1);
    let lsize = blocks.saturating_mul(dblk);
    let fill: u64 = p.blkptr.iter().map(|b| b.fill()).sum();
    let full = if p.object_type == ot::DNODE {
        let per = (dblk / 512).max(1);
        100.0 * fill as f64 / (blocks as f64 * per as f64)
    } else {
        100.0 * fill as f64 / blocks as f64
    };
    let ib = if p.indblkshift == 0 {
        0
    } else {
        1u64 << p.indblkshift.min(30)
    };
    let mut tname = object_type_name(p.object_type).to_string();
    if p.bonustype != 0 && p.bonuslen > 0 {
        let _ = write!(tname, " (bonus {})", object_type_name(p.bonustype));
    }
    println!(
        "{:>10}  {:>3}  {:>5}  {:>5}  {:>5}  {:>6}  {:>5}  {:>6.2}  {}",
        dn.object,
        p.nlevels,
        nicenum(ib),
        nicenum(dblk),
        nicenum(p.used_bytes()),
        nicenum(p.size() as u64),
        nicenum(lsize),
        full,
        object_type_name(p.object_type)
    );
    if dlevel < 4 {
        return Ok(());
    }
    let mut flags = Vec::new();
    if p.flags & 1 != 0 {
        flags.push("USED_BYTES");
    }
    if p.flags & 2 != 0 {
        flags.push("USERUSED_ACCOUNTED");
    }
    if p.flags & 4 != 0 {
        flags.push("SPILL_BLKPTR");
    }
    println!("\tdnode flags: {}", flags.join(" "));
    if dlevel >= 6 && !p.bonus.is_empty() {
        println!("\tbonus ({} bytes):", p.bonus.len());
        for (i, c) in p.bonus.chunks(16).enumerate() {
            let hex: Vec<String> = c.iter().map(|b| format!("{b:02x}")).collect();
            println!("\t  {:04x}: {}", i * 16, hex.join(" "));
        }
    }
    println!("\tdnode maxblkid: {}", p.maxblkid);
    if let Some(z) = zpl {
        if p.bonustype == ot::ZNODE || p.bonustype == ot::SA {
            if let Ok((_, a)) = z.attrs(dn.object) {
                dump_znode(z, dn.object, &a);
            }
        }
    }
    if object_type_is_zap(p.object_type) && dn.object != 0 {
        match zap::list(os, dn) {
            Ok(ents) => {
                println!("\t{} entries", ents.len());
                for e in ents {
                    let v = if e.int_len == 1 {
                        format!("{:?}", e.as_string().unwrap_or_default())
                    } else {
                        e.value
                            .iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    println!("\t\t{} = {}", e.name_str(), v);
                }
            }
            Err(e) => println!("\tZAP error: {e}"),
        }
    }
    if dlevel >= 5 {
        println!("Indirect blocks:");
        let epbs = p.indblkshift.saturating_sub(7) as u32;
        let nlevels = p.nlevels;
        let r = os.walk_tree(dn, &mut |level, blkid, bp: &BlkPtr| {
            let shift = (level as u32) * epbs;
            let off = if shift >= 64 {
                0
            } else {
                (blkid << shift).saturating_mul(dblk)
            };
            let mut s = format!("{off:>16x} ");
            for l in (-1..nlevels as i32).rev() {
                if l == level as i32 {
                    let _ = write!(s, "L{level:x}");
                } else {
                    s.push(' ');
                }
            }
            s.push(' ');
            s.push_str(&bp.to_zdb_compact(false));
            if bp.compression() == ozfs_format::types::comp::EXTERNAL && !bp.is_hole() {
                // The algorithm and exact size live in the block's header.
                match os.pool.read_external_image(bp) {
                    Ok(img) => match ozfs_format::external::ExtHeader::parse(&img) {
                        Ok(h) => {
                            let name = ozfs_format::external::tag_name(h.tag).unwrap_or_default();
                            let _ = write!(s, " external {name} csize={:x}", h.csize);
                        }
                        Err(e) => {
                            let _ = write!(s, " external <{e}>");
                        }
                    },
                    Err(e) => {
                        let _ = write!(s, " external <{e}>");
                    }
                }
            }
            println!("{s}");
            Ok(())
        });
        if let Err(e) = r {
            println!("\t<error walking blocks: {e}>");
        }
        println!();
    }
    Ok(())
}

fn dump_znode(z: &Zpl, obj: u64, a: &ZplAttrs) {
    let path = zpl_path(z, obj).unwrap_or_else(|| "???<object#...>".to_string());
    let t = |x: (u64, u64)| ozfs_dsl::PropValue::Time(x.0).render(false);
    println!("\tpath\t{path}");
    println!("\tuid     {}", a.uid);
    println!("\tgid     {}", a.gid);
    println!("\tatime\t{}", t(a.atime));
    println!("\tmtime\t{}", t(a.mtime));
    println!("\tctime\t{}", t(a.ctime));
    println!("\tcrtime\t{}", t(a.crtime));
    println!("\tgen\t{}", a.gen);
    println!("\tmode\t{:o}", a.mode);
    println!("\tsize\t{}", a.size);
    println!("\tparent\t{}", a.parent);
    println!("\tlinks\t{}", a.links);
    println!("\tpflags\t{:x}", a.flags);
    if a.xattr != 0 {
        println!("\txattr\t{}", a.xattr);
    }
    if a.rdev != 0 {
        println!("\trdev\t{:#x}", a.rdev);
    }
}

/// Rebuild a path by following parent pointers and searching each parent for the child.
fn zpl_path(z: &Zpl, obj: u64) -> Option<String> {
    let mut parts = Vec::new();
    let mut cur = obj;
    for _ in 0..256 {
        if cur == z.root {
            parts.reverse();
            return Some(format!("/{}", parts.join("/")));
        }
        let (_, a) = z.attrs(cur).ok()?;
        let (pdn, _) = z.attrs(a.parent).ok()?;
        let ents = z.readdir(&pdn).ok()?;
        let e = ents.into_iter().find(|e| e.object == cur)?;
        parts.push(String::from_utf8_lossy(&e.name).into_owned());
        cur = a.parent;
    }
    None
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        u64::from_str_radix(s, 16).ok()
    }
}

fn raw_read(a: &Args, pool: &Arc<Pool>) -> CmdResult {
    let Some(spec) = a.pos.get(1) else {
        return Err(Fail::Usage(USAGE.into()));
    };
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() < 3 {
        return Err(Fail::Usage(format!(
            "invalid block specifier '{spec}': expected vdev:offset:size[:flags]"
        )));
    }
    let bad = || Fail::Usage(format!("invalid block specifier '{spec}'"));
    let vdev = parts[0].parse::<u64>().map_err(|_| bad())?;
    let offset = parse_num(parts[1]).ok_or_else(bad)?;
    let size_s = parts[2].rsplit('/').next().unwrap_or(parts[2]);
    let size = parse_num(size_s).ok_or_else(bad)?;
    let flags = parts.get(3).copied().unwrap_or("");
    if size == 0 || size % 512 != 0 || size > 16 << 20 || offset % 512 != 0 {
        return Err(Fail::Err(format!("zdb: invalid block specifier '{spec}': offset and size must be multiples of 512, size at most 16M")));
    }
    let top = pool
        .root
        .children
        .get(vdev as usize)
        .ok_or_else(|| Fail::Err(format!("zdb: vdev {vdev} does not exist")))?;
    let data = pool
        .read_raw(vdev, offset, size)
        .map_err(|e| Fail::Err(format!("zdb: read failed: {e}")))?;
    if flags.contains('r') {
        use std::io::Write;
        std::io::stdout()
            .write_all(&data)
            .map_err(|e| Fail::Err(e.to_string()))?;
        return Ok(());
    }
    println!("\nFound vdev type: {}", top.type_name);
    let mut out = String::new();
    let _ = writeln!(out, "\n{}:{:x}:{:x}", vdev, offset, size);
    let _ = writeln!(
        out,
        "{:6}    0 1 2 3 4 5 6 7   8 9 a b c d e f  0123456789abcdef",
        ""
    );
    for (i, chunk) in data.chunks(16).enumerate() {
        let w0 = u64::from_le_bytes(chunk[0..8].try_into().unwrap_or([0; 8]));
        let w1 = u64::from_le_bytes(chunk[8..16].try_into().unwrap_or([0; 8]));
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if (0x20..0x7f).contains(&b) {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        let _ = writeln!(out, "{:06x}:  {:016x}  {:016x}  {}", i * 16, w0, w1, ascii);
    }
    print!("{out}");
    Ok(())
}

fn copy_file(a: &Args, pool: &Arc<Pool>) -> CmdResult {
    if a.pos.len() != 3 {
        return Err(Fail::Usage(USAGE.into()));
    }
    let (ds_name, path, dest) = (&a.pos[0], &a.pos[1], &a.pos[2]);
    let dsl = DslPool::open(pool.clone()).map_err(|e| Fail::Err(e.to_string()))?;
    let ds = dsl
        .lookup(ds_name)
        .map_err(|e| Fail::Err(format!("failed to hold dataset '{ds_name}': {e}")))?;
    let os = dsl.objset(&ds).map_err(|e| Fail::Err(e.to_string()))?;
    let zpl = Zpl::open(os, ds_name).map_err(|e| Fail::Err(e.to_string()))?;
    let p = if path.starts_with('/') {
        path.clone()
    } else {
        format!("/{path}")
    };
    let obj = zpl
        .resolve(&p)
        .map_err(|e| Fail::Err(format!("failed to find '{path}': {e}")))?;
    let (_, attrs) = zpl.attrs(obj).map_err(|e| Fail::Err(e.to_string()))?;
    if attrs.mode & ozfs_format::znode::S_IFMT != ozfs_format::znode::S_IFREG {
        return Err(Fail::Err(format!("zdb: '{path}' is not a regular file")));
    }
    eprintln!("Copying object {obj} to file {dest}");
    ozfs_zpl::copyout::copy_out(
        &zpl,
        &p,
        std::path::Path::new(dest),
        ozfs_zpl::copyout::CopyOptions {
            owners: false,
            xattrs: false,
        },
    )
    .map_err(|e| Fail::Err(format!("zdb: copy failed: {e}")))?;
    eprintln!("Object {obj} copied successfully");
    Ok(())
}

/// `zdb -D[D[D]]`: the dedup tables as OpenZFS 2.3's zdb prints them —
/// per checksum its table's form and directory, per class object its
/// space, entries and (at -DDD) histogram, the fast-dedup journals; then
/// (at -DD) the histogram over all tables and the dedup ratio line.
fn dump_ddts(pool: &Arc<Pool>, level: usize) -> CmdResult {
    use ozfs_spa::ddt::{checksum_name, object_name, DdtStat, Histogram};
    let dsl = DslPool::open(pool.clone())
        .map_err(|e| Fail::Err(format!("zdb: can't open '{}': {e}", pool.name)))?;
    let tables =
        ozfs_dsl::ddt::report(&dsl).map_err(|e| Fail::Err(format!("zdb: {}: {e}", pool.name)))?;
    let flag_names = |v: u64, names: &[&str]| {
        if v == 0 {
            return String::new();
        }
        let mut n: Vec<&str> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| v & (1 << i) != 0)
            .map(|(_, s)| *s)
            .collect();
        if v >> names.len() != 0 {
            n.push("UNKNOWN");
        }
        format!(" [{}]", n.join(" "))
    };
    let mut out = String::new();
    let mut all = Histogram::default();
    for t in &tables {
        let cname = checksum_name(t.checksum);
        let form = match t.version {
            0 => "LEGACY",
            1 => "FDT",
            _ => "UNKNOWN",
        };
        out.push_str(&format!(
            "DDT-{cname}: version={} [{form}]; flags=0x{:02x}{}; rootobj={}\n",
            t.version,
            t.flags,
            flag_names(t.flags, &["FLAT", "LOG"]),
            t.rootobj
        ));
        for o in &t.objects {
            all.add(&o.histogram);
            if o.entries == 0 {
                continue;
            }
            let name = object_name(t.checksum, o.class);
            out.push_str(&format!(
                "{name}: dspace={}; mspace={}; entries={}\n",
                o.dspace, o.mspace, o.entries
            ));
            if level >= 3 {
                out.push_str(&format!("{name}: object={}\n", o.object));
                out.push_str(&crate::render::ddt_histogram(&o.histogram, None));
            }
        }
        for l in &t.logs {
            out.push_str(&format!(
                "DDT-log-{cname}-{}: flags=0x{:02x}{}; obj={}; len={}; txg={}; entries={}\n",
                l.n,
                l.flags,
                flag_names(l.flags, &["FLUSHING", "CHECKPOINT"]),
                l.object,
                l.length,
                l.first_txg,
                l.entries
            ));
        }
    }
    let total: DdtStat = all.total();
    if total.blocks == 0 {
        out.push_str("All DDTs are empty\n");
        print!("{out}");
        return Ok(());
    }
    out.push('\n');
    if level >= 2 {
        out.push_str("DDT histogram (aggregated over all DDTs):\n");
        out.push_str(&crate::render::ddt_histogram(&all, Some(&total)));
    }
    out.push_str(&crate::render::dedup_ratio_line(&total));
    print!("{out}");
    Ok(())
}

/// `zdb -S`: the histogram a dedup table would have if every data block
/// of the pool were deduplicated, and its ratio line.
fn simulate_dedup(pool: &Arc<Pool>) -> CmdResult {
    let h =
        ozfs_dsl::ddt::simulate(pool).map_err(|e| Fail::Err(format!("zdb: {}: {e}", pool.name)))?;
    let total = h.total();
    let mut out = String::from("Simulated DDT histogram:\n");
    out.push_str(&crate::render::ddt_histogram(&h, Some(&total)));
    out.push_str(&crate::render::dedup_ratio_line(&total));
    print!("{out}");
    Ok(())
}

/// `zdb -m[mm]`: metaslabs and (at -mmm) their space map entries.
fn dump_metaslabs(pool: &Arc<Pool>, level: usize) -> CmdResult {
    use ozfs_spa::spacemap::{decode, replay, SmEntry, SpaceMapHeader};
    let mos = Objset::mos(pool.clone());
    for top in &pool.root.children {
        let ms_shift = top.config.get_u64("metaslab_shift").unwrap_or(0);
        let arr = top.config.get_u64("metaslab_array").unwrap_or(0);
        // The range pool creation uses (and the writer accepts): a smaller
        // shift would make `count` below as large as the device in bytes.
        if !(17..=40).contains(&ms_shift) || arr == 0 {
            continue;
        }
        let count = top.asize >> ms_shift;
        println!(
            "\nvdev {}\tmetaslabs {}\toffset\t\tspacemap\tfree",
            top.id, count
        );
        let adn = mos.dnode(arr).map_err(|e| Fail::Err(e.to_string()))?;
        // `count` is bounded by the device (asize is checked against it,
        // the shift is at least 17): at most 1/16384 of its size.
        let data = mos
            .read(&adn, 0, (count * 8) as usize)
            .map_err(|e| Fail::Err(e.to_string()))?;
        for id in 0..count as usize {
            let sm = ozfs_format::bytes::u64_at(&data, id * 8, adn.swap, "metaslab array")
                .map_err(|e| Fail::Err(e.to_string()))?;
            let (ms_start, ms_size) = ozfs_spa::metaslab::Geometry::of(top).metaslab_range(
                top.ashift as u32,
                ms_shift as u32,
                id as u64,
            );
            if sm == 0 {
                if level >= 2 {
                    println!(
                        "\tmetaslab {id:6}\toffset {:12x}\tspacemap      0\tfree {}",
                        ms_start,
                        nicenum(ms_size)
                    );
                }
                continue;
            }
            let dn = mos.dnode(sm).map_err(|e| Fail::Err(e.to_string()))?;
            let hdr = SpaceMapHeader::parse(&dn.phys.bonus, dn.swap)
                .map_err(|e| Fail::Err(e.to_string()))?;
            println!(
                "\tmetaslab {id:6}\toffset {:12x}\tspacemap {sm:6}\tfree {}",
                ms_start,
                nicenum(ms_size.saturating_sub(hdr.alloc.max(0) as u64))
            );
            if level >= 3 {
                let raw = mos
                    .read_sized(
                        &dn,
                        hdr.length,
                        ozfs_dsl::sync::MAX_SPACE_MAP_BYTES,
                        &format!("space map object {sm}"),
                    )
                    .map_err(|e| Fail::Err(e.to_string()))?;
                let entries = decode(&raw, dn.swap, top.ashift as u32)
                    .map_err(|e| Fail::Err(e.to_string()))?;
                for (i, e) in entries.iter().enumerate() {
                    match e {
                        SmEntry::Alloc { offset, len } => println!(
                            "\t    [{i:4}]    A  range: {:010x}-{:010x}  size: {:06x}",
                            offset + ms_start,
                            offset + len + ms_start,
                            len
                        ),
                        SmEntry::Free { offset, len } => println!(
                            "\t    [{i:4}]    F  range: {:010x}-{:010x}  size: {:06x}",
                            offset + ms_start,
                            offset + len + ms_start,
                            len
                        ),
                        SmEntry::Debug { action, pass, txg } => println!(
                            "\t    [{i:4}]  {}  txg {txg} pass {pass}",
                            if *action == 0 { "ALLOC:" } else { "FREE: " }
                        ),
                    }
                }
                if let Err(e) = replay(&entries) {
                    println!("\t    space map does not replay: {e}");
                }
            }
        }
    }
    Ok(())
}
