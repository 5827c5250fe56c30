//! `zfs receive`: replaying a send stream into a file system.
//!
//! Theory. A full stream creates a new file system whose objset starts
//! empty; an incremental one changes an existing file system whose most
//! recent snapshot is the stream's source (its guid is the stream's
//! `fromguid`). The records are replayed into the file system's open
//! transaction: OBJECT allocates (or reshapes) an object at the sender's
//! number and sets its bonus buffer, FREEOBJECTS frees object numbers,
//! WRITE replaces a block, FREE punches a byte range. When END arrives its
//! checksum must equal the Fletcher-4 of every byte before it; then the
//! changes are synced and the snapshot is taken with the sender's guid and
//! creation time, so that the next incremental stream finds its source.
//!
//! Atomicity: large streams are synced as they go (memory stays bounded),
//! so a stream that fails — a bad record, a checksum mismatch, an early
//! end — is undone: a file system created for a full stream is destroyed,
//! an incremental one is rolled back to its snapshot. Either way the pool
//! is as it was, and nothing outside the target is ever touched.
//!
//! Every field is checked before it is used: record types, object numbers
//! (1 to 2^48), block sizes (512 B to 128 KiB, 16 MiB with LARGE_BLOCKS,
//! sectors), dnode slots, bonus lengths, offsets and lengths (no overflow,
//! whole blocks or within one), the `toguid` of each record, payload sizes
//! (bounded before reading), compressed payloads (decompressed into exactly
//! their logical size).
//!
//! OpenZFS's stream features are replayed as content, not as form:
//! compressed (`-c`) and embedded (`-e`) blocks are decompressed and written
//! as the target's properties say; large blocks (`-L`) are split into
//! 128 KiB blocks; dnodes of several slots are kept whole (the dataset gets
//! `large_dnode`). An embedded spill block comes as a WRITE_EMBEDDED at the
//! spill's block id (-2) times its size, and is taken as the spill block.
//! Streams this receiver cannot replay faithfully — byte-swapped ones, raw
//! (`-w`), deduplicated, redacted or resumed ones, clones — are
//! refused with a message that says which.

use crate::sync::PoolWriter;
use ozfs_codec::checksum::fletcher4_incremental;
use ozfs_dmu::objset::Dnode;
use ozfs_format::blkptr::BLKPTR_SIZE;
use ozfs_format::dnode::{bonus_room, DNODE_MAX_SLOTS};
use ozfs_format::stream::{self, Record, RECORD_SIZE};
use ozfs_format::{Cksum, Error, Result};
use std::io::Read;

/// Options of `zfs receive`.
#[derive(Debug, Clone, Default)]
pub struct RecvOptions {
    /// `-F`: roll the target back to its most recent snapshot first.
    pub force: bool,
}

/// What a receive did.
#[derive(Debug, Clone)]
pub struct Received {
    /// The snapshot created (`pool/fs@snap`).
    pub snapshot: String,
    /// The stream's name for it (`BEGIN`'s `toname`).
    pub from_name: String,
    pub incremental: bool,
    pub bytes: u64,
}

/// Stream features this receiver replays. Compressed (`-c`) and
/// embedded (`-e`) blocks are decompressed and written as the target's
/// properties say; blocks over 128 KiB (`-L`) are written as 128 KiB
/// blocks (what OpenZFS's own send does without `-L`); dnodes of several
/// slots are kept whole (the dataset lists `large_dnode`). The contents
/// are the sender's either way.
const RECEIVED_FEATURES: u64 = stream::FEATURE_SA_SPILL
    | stream::FEATURE_EMBED_DATA
    | stream::FEATURE_LZ4
    | stream::FEATURE_ZSTD
    | stream::FEATURE_COMPRESSED
    | stream::FEATURE_LARGE_BLOCKS
    | stream::FEATURE_SWITCH_TO_LARGE_BLOCKS
    | stream::FEATURE_LARGE_DNODE;

/// The names of stream features `f` (for a refusal).
fn unreceived_features(f: u64) -> String {
    const NAMES: &[(u64, &str)] = &[
        (stream::FEATURE_DEDUP, "deduplicated records (zfs send -D)"),
        (stream::FEATURE_DEDUPPROPS, "dedup properties"),
        (stream::FEATURE_RESUMING, "a resumed stream"),
        (stream::FEATURE_REDACTED, "a redacted stream"),
        (stream::FEATURE_RAW, "raw encrypted records (zfs send -w)"),
        (stream::FEATURE_HOLDS, "holds"),
        (stream::FEATURE_LONGNAME, "file names over 255 bytes"),
        (stream::FEATURE_LARGE_MICROZAP, "large micro ZAPs"),
    ];
    let mut out: Vec<&str> = NAMES
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if f & !NAMES.iter().fold(0, |a, (b, _)| a | b) != 0 {
        out.push("features unknown to ozfs");
    }
    out.join(", ")
}

/// Largest block size ozfs writes: bigger blocks of a stream are split.
const MAX_WRITTEN_BLOCK: u64 = 128 * 1024;

/// Sync the open txg after this many bytes of blocks.
const SYNC_EVERY: u64 = 64 << 20;

struct StreamIn<'a> {
    inp: &'a mut dyn Read,
    cksum: Cksum,
    bytes: u64,
}

impl StreamIn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.inp.read(&mut buf[done..]) {
                Ok(0) => {
                    return Err(Error::corrupt(
                        "send stream",
                        format!(
                            "ends early at byte {} (a record or its payload is cut off)",
                            self.bytes + done as u64
                        ),
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read the send stream", e)),
            }
        }
        fletcher4_incremental(&mut self.cksum, buf, false);
        self.bytes += buf.len() as u64;
        Ok(())
    }

    fn record(&mut self) -> Result<[u8; RECORD_SIZE]> {
        let mut b = [0u8; RECORD_SIZE];
        self.read(&mut b)?;
        Ok(b)
    }

    fn payload(&mut self, len: u64) -> Result<Vec<u8>> {
        // Bounded by Record::parse (16 MiB at most).
        let mut v = vec![0u8; len as usize];
        self.read(&mut v)?;
        Ok(v)
    }
}

fn bad(at: u64, m: impl std::fmt::Display) -> Error {
    Error::corrupt(format!("send stream at byte {at}"), m.to_string())
}

/// Receive a stream from `input` into `target` (`pool/fs` or
/// `pool/fs@snap`); `progress(bytes)` is called as it goes.
///
/// A compound stream (what `zfs send -I` and `-R` write: a header BEGIN
/// and END, the substreams, a final all-zero END) is received substream by
/// substream; a substream of a descendant (`-R`) goes to the same path
/// under `target`. Returns what each substream created.
pub fn receive(
    w: &mut PoolWriter,
    target: &str,
    input: &mut dyn Read,
    opts: &RecvOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<Received>> {
    let mut s = StreamIn {
        inp: input,
        cksum: Cksum([0; 4]),
        bytes: 0,
    };
    let first = s.record()?;
    if stream::begin_byteswapped(&first)? {
        return Err(Error::unsupported(
            "send stream",
            "a stream from a machine of the other byte order",
        ));
    }
    let (rec, payload) = Record::parse(&first, false)?;
    let Record::Begin(begin) = rec else {
        return Err(bad(0, "the stream does not start with a BEGIN record"));
    };
    if begin.versioninfo & 3 != stream::DMU_COMPOUNDSTREAM {
        return receive_one(w, target, &mut s, begin, payload, opts, progress).map(|r| vec![r]);
    }
    // The header: an nvlist of file systems and properties (with -R),
    // then END over it.
    let header = if payload > 0 {
        let nv = s.payload(payload)?;
        Some(ozfs_format::NvList::unpack(&nv).map_err(|e| e.context("replication stream header"))?)
    } else {
        None
    };
    let before = s.cksum;
    let (end, _) = Record::parse(&s.record()?, false)?;
    match end {
        Record::End { cksum, .. } if cksum == before => {}
        Record::End { .. } => {
            return Err(Error::corrupt(
                "send stream",
                "the checksum of the compound stream's header does not match",
            ))
        }
        _ => {
            return Err(bad(
                s.bytes,
                "the compound stream's header is not closed by END",
            ))
        }
    }
    if let Err(why) = ozfs_format::names::check_name(&begin.toname) {
        return Err(bad(
            56,
            format!(
                "BEGIN name {:?} of the compound stream is not valid: {why}",
                begin.toname
            ),
        ));
    }
    let top = begin.toname.split('@').next().unwrap_or("").to_string();
    let target_fs = target.split('@').next().unwrap_or(target).to_string();
    let mut out = Vec::new();
    loop {
        s.cksum = Cksum([0; 4]);
        let at = s.bytes;
        let raw = s.record()?;
        let (rec, payload) = Record::parse(&raw, false)?;
        match rec {
            Record::End { cksum, toguid } if cksum == Cksum([0; 4]) && toguid == 0 => break,
            Record::Begin(b) => {
                if b.versioninfo & 3 != stream::DMU_SUBSTREAM {
                    return Err(bad(at, "a compound stream inside a compound stream"));
                }
                let fs = b.toname.split('@').next().unwrap_or("");
                let rel = fs
                    .strip_prefix(top.as_str())
                    .ok_or_else(|| bad(at, format!("substream '{}' outside '{top}'", b.toname)))?;
                if !(rel.is_empty() || rel.starts_with('/')) {
                    return Err(bad(at, format!("substream '{}' outside '{top}'", b.toname)));
                }
                let t = format!("{target_fs}{rel}");
                let src_fs = fs.to_string();
                let r = receive_one(w, &t, &mut s, b, payload, opts, progress)?;
                if !r.incremental {
                    if let Some(h) = &header {
                        apply_header_props(w, h, &src_fs, &t)?;
                    }
                }
                out.push(r);
            }
            _ => return Err(bad(at, "expected a substream's BEGIN or the final END")),
        }
    }
    Ok(out)
}

/// Set on `target` the locally set properties a replication header lists
/// for file system `src` (unknown or malformed ones are skipped).
fn apply_header_props(
    w: &mut PoolWriter,
    header: &ozfs_format::NvList,
    src: &str,
    target: &str,
) -> Result<()> {
    let Some(fss) = header.get_nvlist("fss") else {
        return Ok(());
    };
    let Some(props) = fss.pairs.iter().find_map(|(_, v)| match v {
        ozfs_format::NvValue::NvList(f) if f.get_str("name") == Some(src) => f.get_nvlist("props"),
        _ => None,
    }) else {
        return Ok(());
    };
    let ds = w.dsl().lookup(target)?;
    let mut changed = false;
    for (k, v) in &props.pairs {
        if let Some(setting) = crate::props::received_setting(k, v) {
            // As OpenZFS: a received value this pool cannot hold is
            // skipped with a warning, the data still received.
            if let Err(e) = crate::props::check_for_pool(w, k, &setting) {
                eprintln!("cannot receive {k} property on {target}: {e}");
                continue;
            }
            crate::create::set_prop_dir(w, ds.dir_obj, k, &setting)?;
            changed = true;
        }
    }
    if changed {
        w.sync()?;
    }
    Ok(())
}

/// One substream, its BEGIN already read.
fn receive_one(
    w: &mut PoolWriter,
    target: &str,
    s: &mut StreamIn,
    begin: stream::Begin,
    payload: u64,
    opts: &RecvOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Received> {
    let hdrtype = begin.versioninfo & 3;
    let features = (begin.versioninfo >> 2) & 0x3fff_ffff;
    if hdrtype != stream::DMU_SUBSTREAM {
        return Err(bad(16, format!("stream header type {hdrtype}")));
    }
    let raw = features & stream::FEATURE_RAW != 0;
    if features & !(RECEIVED_FEATURES | stream::FEATURE_RAW) != 0 {
        return Err(Error::unsupported(
            "send stream",
            format!(
                "stream features {:#x} ({})",
                features & !(RECEIVED_FEATURES | stream::FEATURE_RAW),
                unreceived_features(features & !(RECEIVED_FEATURES | stream::FEATURE_RAW))
            ),
        ));
    }
    // System attributes (ZPL 5) need pool version 24; zfs-fuse's version 23
    // would get file systems it cannot read.
    if features & stream::FEATURE_SA_SPILL != 0 && w.version < 24 {
        return Err(Error::unsupported(
            "send stream",
            format!(
                "a file system with system attributes into a version-{} pool (it needs version 24 or feature flags)",
                w.version
            ),
        ));
    }
    // A raw stream (`zfs send -w`) carries its dataset's wrapped keys and
    // objset MAC in the BEGIN payload; a plain one carries none.
    let raw_keys = if raw {
        if payload == 0 || payload > stream::MAX_BEGIN_PAYLOAD {
            return Err(bad(
                4,
                format!("a raw stream's BEGIN payload of {payload} bytes"),
            ));
        }
        let bytes = s.payload(payload)?;
        let nv = ozfs_format::nvnative::unpack(&bytes)
            .map_err(|e| e.context("raw stream BEGIN payload"))?;
        let keys = nv
            .get_nvlist("crypt_keydata")
            .ok_or_else(|| Error::corrupt("raw stream BEGIN payload", "no crypt_keydata"))?;
        if features & stream::FEATURE_EMBED_DATA != 0 {
            return Err(bad(
                16,
                "a raw stream with embedded blocks (never encrypted)",
            ));
        }
        w.check_raw_recv()?;
        let k = crate::crypt::RawKeyData::parse(keys)?;
        if begin.fromguid != 0 && (k.from_ivset_guid == 0 || k.to_ivset_guid == 0) {
            return Err(Error::Invalid(
                "cannot receive raw incremental stream: it names no IV set guid of its source"
                    .into(),
            ));
        }
        Some(k)
    } else {
        if payload != 0 {
            return Err(bad(4, "a BEGIN payload in a plain stream"));
        }
        None
    };
    if begin.objset_type != stream::DMU_OST_ZFS && begin.objset_type != stream::DMU_OST_ZVOL {
        return Err(Error::unsupported(
            "send stream",
            format!(
                "objset type {} (file systems and volumes are received)",
                begin.objset_type
            ),
        ));
    }
    let volume = begin.objset_type == stream::DMU_OST_ZVOL;
    if begin.flags & stream::DRR_FLAG_CLONE != 0 {
        return Err(Error::unsupported("send stream", "clone streams"));
    }
    // The stream's name is as untrusted as the rest of it: checked with the
    // command line's rules before any part of it names anything here.
    if let Err(why) = ozfs_format::names::check_snapshot_name(&begin.toname) {
        return Err(bad(
            56,
            format!(
                "BEGIN name {:?} is not a valid snapshot name: {why}",
                begin.toname
            ),
        ));
    }
    let Some((_, sent_snap)) = begin.toname.split_once('@') else {
        return Err(bad(
            56,
            format!("BEGIN name '{}' is not a snapshot", begin.toname),
        ));
    };
    let (fs, snap) = match target.split_once('@') {
        Some((f, sn)) => (f.to_string(), sn.to_string()),
        None => (target.to_string(), sent_snap.to_string()),
    };
    if let Err(why) = ozfs_format::names::check_snapshot_name(&format!("{fs}@{snap}")) {
        return Err(Error::Invalid(format!(
            "cannot receive '{fs}@{snap}': invalid name: {why}"
        )));
    }
    let toguid = begin.toguid;
    let incremental = begin.fromguid != 0;
    let dsl = w.dsl();
    let existing = dsl.lookup(&fs).ok();
    if raw_keys.is_some() && existing.is_some() && !incremental {
        return Err(Error::Exists(format!(
            "cannot receive new filesystem stream: destination '{fs}' exists (a raw stream \
             makes a new file system)"
        )));
    }
    let ds_obj = if incremental {
        let head = existing.ok_or_else(|| {
            Error::not_found(format!(
                "cannot receive incremental stream: destination '{fs}' does not exist"
            ))
        })?;
        if head.is_snapshot {
            return Err(Error::Invalid(format!(
                "cannot receive into '{fs}': it is a snapshot"
            )));
        }
        // The objset block is never encrypted: its type reads without a
        // key (a raw stream's target has none loaded).
        let is_volume = !head.ds.bp.is_hole()
            && ozfs_dmu::Objset::open(w.pool.clone(), &head.ds.bp)?
                .phys
                .os_type
                == ozfs_format::objset::OBJSET_TYPE_ZVOL;
        if is_volume != volume {
            return Err(Error::Invalid(format!(
                "cannot receive incremental stream: '{fs}' is a {}, the stream's source a {}",
                if is_volume { "volume" } else { "file system" },
                if volume { "volume" } else { "file system" }
            )));
        }
        let latest = if head.ds.prev_snap_obj != 0 {
            Some(w.dataset(head.ds.prev_snap_obj)?).filter(|p| p.dir_obj == head.dir_obj)
        } else {
            None
        };
        let Some(latest) = latest else {
            return Err(Error::Invalid(format!(
                "cannot receive incremental stream: destination '{fs}' has no snapshots"
            )));
        };
        // A raw stream's key is checked before `-F` changes anything.
        if let Some(k) = &raw_keys {
            raw_incremental_check(w, &fs, head.ds_obj, k)?;
        }
        // Snapshots newer than the stream's source: `-F` destroys them (as
        // ZFS does), newest first; without it the receive is refused.
        let (head, latest) = if latest.guid != begin.fromguid {
            let snaps = dsl.snapshots(&head)?;
            let Some(from) = snaps.iter().find(|s| s.ds.guid == begin.fromguid) else {
                return Err(Error::Invalid(format!(
                    "cannot receive incremental stream: most recent snapshot of '{fs}' does not match incremental source"
                )));
            };
            let mut newer: Vec<&crate::DatasetInfo> = snaps
                .iter()
                .filter(|s| s.ds.creation_txg > from.ds.creation_txg)
                .collect();
            newer.sort_by_key(|s| std::cmp::Reverse(s.ds.creation_txg));
            if !opts.force {
                return Err(Error::Invalid(format!(
                    "cannot receive incremental stream: destination {fs} has snapshots (eg. {})\nmust destroy them to overwrite it",
                    newer.last().map(|s| s.name.as_str()).unwrap_or("")
                )));
            }
            let names: Vec<String> = newer.iter().map(|s| s.name.clone()).collect();
            for n in &names {
                w.destroy_snapshot(n)?;
                w.sync()?;
            }
            let head = w.dsl().lookup(&fs)?;
            let latest = w.dataset(head.ds.prev_snap_obj)?;
            if latest.guid != begin.fromguid {
                return Err(Error::Invalid(format!(
                    "cannot receive incremental stream: most recent snapshot of '{fs}' does not match incremental source"
                )));
            }
            (head, latest)
        } else {
            (head, latest)
        };
        let dsl = w.dsl();
        for sn in dsl.snapshots(&head)? {
            if sn.name.rsplit('@').next() == Some(snap.as_str()) {
                return Err(Error::Exists(format!(
                    "cannot receive incremental stream: destination '{fs}@{snap}' already exists"
                )));
            }
        }
        let modified = w.fs.get(&head.ds_obj).is_some_and(|t| t.is_dirty())
            || head.ds.bp.to_bytes() != latest.bp.to_bytes();
        if modified {
            if !opts.force {
                return Err(Error::Invalid(format!(
                    "cannot receive incremental stream: destination '{fs}' has been modified\nsince most recent snapshot"
                )));
            }
            w.rollback_to_latest(&fs)?;
            w.sync()?;
        }
        head.ds_obj
    } else {
        // With -F a full stream replaces an existing file system (without
        // children): its snapshots go (newest first), then its contents;
        // its own properties stay, as ZFS keeps the directory they live in.
        let mut keep: Vec<(String, crate::create::PropSetting)> = Vec::new();
        if let Some(ex) = existing {
            if !opts.force {
                return Err(Error::Exists(format!(
                    "cannot receive new filesystem stream: destination '{fs}' exists\nmust specify -F to overwrite it"
                )));
            }
            if ex.is_snapshot || !dsl.child_dirs(&ex.dir)?.is_empty() {
                return Err(Error::Invalid(format!(
                    "cannot receive new filesystem stream: destination '{fs}' has child file systems; destroy them first"
                )));
            }
            if ex.dir.props_zapobj != 0 {
                for e in ozfs_dmu::zap_tx::list(&w.mos, ex.dir.props_zapobj)? {
                    let v = match (e.int_len, e.as_u64(), e.as_string()) {
                        (8, Some(n), _) => crate::create::PropSetting::Num(n),
                        (1, _, Some(s)) => crate::create::PropSetting::Text(s),
                        _ => continue,
                    };
                    keep.push((e.name_str(), v));
                }
            }
            if ex.dir.quota != 0 {
                keep.push((
                    "quota".into(),
                    crate::create::PropSetting::Num(ex.dir.quota),
                ));
            }
            let mut snaps = dsl.snapshots(&ex)?;
            snaps.sort_by_key(|s| std::cmp::Reverse(s.ds.creation_txg));
            for s in &snaps {
                w.destroy_snapshot(&s.name)?;
                w.sync()?;
            }
            w.destroy_filesystem(&fs)?;
            w.sync()?;
        }
        let ds = match &raw_keys {
            Some(k) => {
                let ds = crate::create::create_filesystem_crypt(
                    w,
                    &fs,
                    &[],
                    crate::crypt::NewCrypt::Later,
                )?;
                let dir = w.dataset(ds)?.dir_obj;
                w.raw_recv_key(dir, ds, k)?;
                ds
            }
            None => crate::create::create_filesystem(w, &fs, &[])?,
        };
        if !keep.is_empty() {
            let dir = w.dataset(ds)?.dir_obj;
            for (k, v) in &keep {
                crate::create::set_prop_dir(w, dir, k, v)?;
            }
        }
        // The stream brings every object: start from an empty objset
        // (under an encrypted parent, sealed with the new file system's key).
        let fresh =
            w.fs.remove(&ds)
                .map(|t| (t.os.phys.clone(), t.os.key.clone()));
        if let Some((mut phys, key)) = fresh {
            phys.meta_dnode = crate::create::empty_meta_dnode();
            if volume {
                // A volume: its two objects come in the stream; no user
                // accounting (OpenZFS keeps it for file systems only).
                phys.os_type = ozfs_format::objset::OBJSET_TYPE_ZVOL;
                phys.flags = 0;
                phys.userused_dnode = Default::default();
                phys.groupused_dnode = Default::default();
                phys.projectused_dnode = Default::default();
            }
            let t = match &raw_keys {
                // Raw: the sender's meta-dnode shape and portable MAC, no
                // accounting (OpenZFS rebuilds it once the key is loaded).
                Some(k) => {
                    let md = &mut phys.meta_dnode;
                    md.checksum = k.mdn_checksum;
                    md.compress = k.mdn_compress;
                    md.nlevels = k.mdn_nlevels;
                    md.datablkszsec = (k.mdn_blksz / 512) as u16;
                    md.indblkshift = k.mdn_indblkshift;
                    md.nblkptr = k.mdn_nblkptr;
                    md.blkptr = vec![ozfs_format::BlkPtr::default(); k.mdn_nblkptr as usize];
                    md.maxblkid = k.mdn_maxblkid;
                    phys.flags = 0;
                    phys.portable_mac = k.portable_mac;
                    phys.local_mac = [0; 32];
                    phys.userused_dnode = Default::default();
                    phys.groupused_dnode = Default::default();
                    phys.projectused_dnode = Default::default();
                    let os = ozfs_dmu::Objset::from_parts(
                        w.pool.clone(),
                        ozfs_format::BlkPtr::default(),
                        phys,
                    );
                    let mut t = ozfs_dmu::tx::ObjsetTx::new(os);
                    t.raw_recv = true;
                    t.raw_maxblkid.insert(0, k.mdn_maxblkid);
                    t
                }
                None => {
                    let mut os = ozfs_dmu::Objset::from_parts(
                        w.pool.clone(),
                        ozfs_format::BlkPtr::default(),
                        phys,
                    );
                    os.key = key;
                    w.objset_tx(os)?
                }
            };
            w.fs.insert(ds, t);
        }
        // Committed empty, so that a failure can destroy it again (the
        // undo looks datasets up in the synced state).
        w.sync()?;
        ds
    };
    if let (Some(k), true) = (&raw_keys, incremental) {
        raw_incremental_setup(w, &fs, ds_obj, k)?;
    }
    let r = replay(w, ds_obj, s, toguid, features, begin.flags, progress);
    let r = r.and_then(|()| {
        w.sync()?;
        // A raw receive's objset is not written again without its key.
        if raw_keys.is_some() {
            w.fs.remove(&ds_obj);
        }
        let snap_obj =
            w.snapshot_as(&format!("{fs}@{snap}"), Some((toguid, begin.creation_time)))?;
        // The snapshot keeps the sender's IV set guid (a raw incremental
        // stream names it).
        if let Some(k) = &raw_keys {
            crate::features::zapify_dataset(w, snap_obj)?;
            ozfs_dmu::zap_tx::update(
                &mut w.mos,
                snap_obj,
                crate::crypt::IVSET_GUID,
                8,
                &[k.to_ivset_guid],
            )?;
        }
        Ok(snap_obj)
    });
    match r {
        Ok(_) => Ok(Received {
            snapshot: format!("{fs}@{snap}"),
            from_name: begin.toname.clone(),
            incremental,
            bytes: s.bytes,
        }),
        Err(e) => {
            // Undo: the target goes back to what it was.
            w.fs.remove(&ds_obj);
            let undo = if incremental {
                w.rollback_to_latest(&fs).map(|_| ())
            } else {
                w.destroy_filesystem(&fs)
            };
            let undo = undo.and_then(|()| w.sync());
            if let Err(u) = undo {
                return Err(Error::Invalid(format!(
                    "{e}; undoing the partial receive of '{fs}' failed too: {u}"
                )));
            }
            Err(e)
        }
    }
}

/// Replay the records after BEGIN into dataset `ds_obj` until END.
fn replay(
    w: &mut PoolWriter,
    ds_obj: u64,
    s: &mut StreamIn,
    toguid: u64,
    features: u64,
    begin_flags: u32,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut dirty = 0u64;
    let mut reported = s.bytes;
    let raw_stream = features & stream::FEATURE_RAW != 0;
    loop {
        let at = s.bytes;
        let before = s.cksum;
        let raw = s.record()?;
        let (rec, plen) =
            Record::parse(&raw, false).map_err(|e| e.context(&format!("byte {at}")))?;
        let guid_ok = |g: u64| {
            if g == toguid {
                Ok(())
            } else {
                Err(bad(
                    at,
                    format!("record for stream {g:#x} inside stream {toguid:#x}"),
                ))
            }
        };
        match rec {
            Record::End { cksum, toguid: g } => {
                guid_ok(g)?;
                if cksum != before {
                    return Err(Error::Checksum {
                        what: format!("send stream ({} bytes)", at),
                        expected: cksum,
                        computed: before,
                    });
                }
                return Ok(());
            }
            Record::Begin(_) => return Err(bad(at, "a second BEGIN record")),
            Record::Object(o) => {
                guid_ok(o.toguid)?;
                let payload = s.payload(plen)?;
                if raw_stream {
                    apply_object_raw(w, ds_obj, &o, &payload)
                } else {
                    apply_object(w, ds_obj, &o, &payload, features, begin_flags)
                }
                .map_err(|e| e.context(&format!("byte {at}")))?;
                dirty += 1024;
            }
            Record::FreeObjects {
                first,
                count,
                toguid: g,
            } => {
                guid_ok(g)?;
                let end = first
                    .checked_add(count)
                    .ok_or_else(|| bad(at, format!("FREEOBJECTS {first}+{count} overflows")))?;
                let tx = w.fs_tx(ds_obj)?;
                for obj in tx.allocated_in(first.max(1), end)? {
                    tx.free_object(obj)?;
                }
                dirty += 512;
            }
            Record::Write(wr) if raw_stream => {
                guid_ok(wr.toguid)?;
                let payload = s.payload(plen)?;
                dirty += payload.len() as u64;
                apply_write_raw(w, ds_obj, &wr, payload)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::Write(wr) => {
                guid_ok(wr.toguid)?;
                let payload = s.payload(plen)?;
                if wr.length % 8 != 0 {
                    return Err(bad(
                        at,
                        format!("WRITE of {} bytes (not a multiple of 8)", wr.length),
                    ));
                }
                let data = if wr.is_compressed() {
                    let what = format!(
                        "WRITE to object {} at {} (compression {})",
                        wr.object, wr.offset, wr.compression
                    );
                    expand(wr.compression, &payload, wr.length, &what)
                        .map_err(|e| e.context(&format!("byte {at}")))?
                } else {
                    payload
                };
                // Memory held: whole blocks, however small the write.
                dirty += apply_write(w, ds_obj, wr.object, wr.offset, data)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::WriteEmbedded(_) if raw_stream => {
                return Err(bad(
                    at,
                    "a WRITE_EMBEDDED record in a raw stream (encrypted blocks are never embedded)",
                ));
            }
            Record::WriteEmbedded(e) => {
                guid_ok(e.toguid)?;
                let payload = s.payload(plen)?;
                let what = format!("WRITE_EMBEDDED to object {} at {}", e.object, e.offset);
                if e.etype != 0 || e.lsize as u64 != e.length {
                    return Err(bad(
                        at,
                        format!(
                            "{what}: embedded type {}, {} bytes of {}",
                            e.etype, e.lsize, e.length
                        ),
                    ));
                }
                let data = expand(e.compression, &payload[..e.psize as usize], e.length, &what)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
                // OpenZFS sends a spill block small enough to be embedded
                // as a WRITE_EMBEDDED at the spill's block id (-2) times
                // its size: it is the object's spill block.
                if e.offset == 0u64.wrapping_sub(e.length.wrapping_mul(2)) {
                    dirty += data.len() as u64;
                    apply_spill(w, ds_obj, e.object, data)
                        .map_err(|e| e.context(&format!("byte {at}")))?;
                } else {
                    dirty += apply_write(w, ds_obj, e.object, e.offset, data)
                        .map_err(|e| e.context(&format!("byte {at}")))?;
                }
            }
            Record::Free {
                object,
                offset,
                length,
                toguid: g,
            } => {
                guid_ok(g)?;
                dirty += apply_free(w, ds_obj, object, offset, length)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::Spill(sp) if raw_stream => {
                guid_ok(sp.toguid)?;
                let payload = s.payload(plen)?;
                dirty += payload.len() as u64;
                apply_spill_raw(w, ds_obj, &sp, payload)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::Spill(sp) => {
                let object = sp.object;
                guid_ok(sp.toguid)?;
                if sp.compressed_size != 0 {
                    return Err(Error::unsupported(
                        "send stream",
                        format!("byte {at}: a raw SPILL record of object {object}"),
                    ));
                }
                let payload = s.payload(plen)?;
                dirty += payload.len() as u64;
                apply_spill(w, ds_obj, object, payload)
                    .map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::ObjectRange(r) if raw_stream => {
                guid_ok(r.toguid)?;
                apply_object_range(w, ds_obj, &r).map_err(|e| e.context(&format!("byte {at}")))?;
            }
            Record::ObjectRange(_) => {
                return Err(bad(
                    at,
                    "an OBJECT_RANGE record in a stream that is not raw",
                ))
            }
            Record::Other { kind } => {
                return Err(Error::unsupported(
                    "send stream",
                    format!("record type {kind} (deduplicated or raw streams)"),
                ))
            }
        }
        if dirty >= SYNC_EVERY {
            w.sync()?;
            dirty = 0;
        }
        if s.bytes >= reported + (4 << 20) {
            reported = s.bytes;
            progress(s.bytes);
        }
    }
}

/// Set the spill block of `object`, an object with system attributes.
fn apply_spill(w: &mut PoolWriter, ds_obj: u64, object: u64, data: Vec<u8>) -> Result<()> {
    let what = format!("SPILL of object {object}");
    let tx = w.fs_tx(ds_obj)?;
    let dn = live_dnode(tx, object, &what)?
        .ok_or_else(|| Error::corrupt(&what, "the object does not exist"))?;
    if dn.phys.bonustype != ozfs_format::types::ot::SA {
        return Err(Error::corrupt(&what, "the object has no system attributes"));
    }
    tx.set_spill(object, Some(data))
        .map_err(|e| e.context(&what))
}

/// The logical block (`length` bytes) of a block sent as stored with
/// compression function `comp`.
fn expand(comp: u8, stored: &[u8], length: u64, what: &str) -> Result<Vec<u8>> {
    use ozfs_format::types::comp as c;
    let known = matches!(
        comp,
        c::LZJB | c::GZIP_1..=c::GZIP_9 | c::ZLE | c::LZ4 | c::ZSTD
    );
    if !known {
        return Err(Error::corrupt(what, format!("compression function {comp}")));
    }
    let mut out = vec![0u8; length as usize];
    ozfs_codec::compress::decompress(comp, stored, &mut out).map_err(|e| e.context(what))?;
    Ok(out)
}

fn apply_object(
    w: &mut PoolWriter,
    ds_obj: u64,
    o: &stream::ObjectRec,
    payload: &[u8],
    features: u64,
    begin_flags: u32,
) -> Result<()> {
    let obj = o.object;
    let what = format!("OBJECT {obj}");
    if obj == 0 || obj >= 1 << 48 {
        return Err(Error::corrupt(&what, "object number out of range"));
    }
    // Pool version 23 knows object types below 44 (DDT_STATS is 43),
    // checksums up to sha256 (8) and compressions up to zle (14); system
    // attributes (SA 44, its master node, registry and layouts 45..47)
    // come with pool version 24.
    if o.object_type == 0 || o.object_type > 47 || o.bonustype > 47 {
        return Err(Error::corrupt(
            &what,
            format!("type {} bonus type {}", o.object_type, o.bonustype),
        ));
    }
    if (o.object_type >= 44 || o.bonustype >= 44) && w.version < 24 {
        return Err(Error::unsupported(
            &what,
            format!(
                "system attributes in a version-{} pool (they need version 24 or feature flags)",
                w.version
            ),
        ));
    }
    let sent_bs = o.blksz as u64;
    let max_bs = if features & stream::FEATURE_LARGE_BLOCKS != 0 {
        stream::MAX_BLOCK
    } else {
        MAX_WRITTEN_BLOCK
    };
    if !(512..=max_bs).contains(&sent_bs) || !sent_bs.is_multiple_of(512) {
        return Err(Error::corrupt(&what, format!("block size {sent_bs}")));
    }
    // A large block is written as 128 KiB blocks (its WRITEs are split).
    let bs = sent_bs.min(MAX_WRITTEN_BLOCK);
    // Dnode slots (0 in older streams means one).
    let slots = o.dn_slots.max(1);
    if slots > 1 && features & stream::FEATURE_LARGE_DNODE == 0 {
        return Err(Error::corrupt(
            &what,
            format!("{slots} dnode slots in a stream without large dnodes"),
        ));
    }
    if slots > DNODE_MAX_SLOTS || o.bonuslen as usize > bonus_room(slots) {
        return Err(Error::corrupt(
            &what,
            format!("bonus of {} bytes in {slots} dnode slots", o.bonuslen),
        ));
    }
    if slots > 1 && crate::features::refcount(w, crate::features::LARGE_DNODE)?.is_none() {
        return Err(Error::unsupported(
            &what,
            format!(
                "a dnode of {slots} slots into pool '{}', which does not have feature large_dnode enabled",
                w.pool.name
            ),
        ));
    }
    if o.raw_bonuslen != 0 {
        return Err(Error::unsupported(&what, "raw (encrypted) objects"));
    }
    if o.checksum > 8 || o.compress > 14 {
        return Err(Error::corrupt(
            &what,
            format!("checksum {} compression {}", o.checksum, o.compress),
        ));
    }
    let bonus = payload[..o.bonuslen as usize].to_vec();
    let tx = w.fs_tx(ds_obj)?;
    let is_sa = o.bonustype as u8 == ozfs_format::types::ot::SA;
    let spill_listed = begin_flags & stream::DRR_FLAG_SPILL_BLOCK != 0;
    let has_spill = o.flags & stream::DRR_OBJECT_SPILL != 0;
    // As OpenZFS: an object that keeps its block size and slots keeps its
    // blocks (an incremental stream sends only those that changed); its
    // type and bonus are replaced. Otherwise it is freed and made again.
    let kept = match live_dnode(tx, obj, &what)? {
        Some(d) => {
            let p = &d.phys;
            let reshaped = p.object_type as u32 != o.object_type
                || p.bonustype as u32 != o.bonustype
                || p.bonuslen as u32 != o.bonuslen;
            // Its spill block stays when the stream says it has one, or
            // (streams that do not say) when nothing else changed.
            let drop_spill = p.spill.is_some()
                && if reshaped {
                    !(spill_listed && has_spill)
                } else {
                    spill_listed && !has_spill
                };
            let cap = p.max_bonuslen() + if drop_spill { BLKPTR_SIZE } else { 0 };
            if p.datablksz() == bs
                && p.extra_slots as u64 + 1 == slots as u64
                && bonus.len() <= cap
                && (p.nblkptr == 1 || !is_sa)
            {
                if drop_spill {
                    tx.set_spill(obj, None)?;
                }
                let mut dn = tx.dnode(obj)?.phys;
                dn.object_type = o.object_type as u8;
                dn.bonustype = o.bonustype as u8;
                tx.set_dnode(obj, dn);
                true
            } else {
                tx.free_object(obj)?;
                false
            }
        }
        None => false,
    };
    if kept {
        tx.set_bonus(obj, bonus)?;
    } else {
        // As OpenZFS: objects in the new dnode's extra slots are freed;
        // the stream has replaced them.
        for s in obj + 1..obj + slots as u64 {
            if tx.owner_of_slot(s)?.is_none() && tx.slot_head(s)?.0 != 0 {
                tx.free_object(s)?;
            }
        }
        if is_sa {
            // An SA znode keeps one block pointer, leaving room for its
            // attributes to grow and for a spill block pointer.
            tx.claim_object(
                obj,
                o.object_type as u8,
                bs,
                o.bonustype as u8,
                vec![0; bonus_room(slots)],
                slots,
            )?;
            tx.set_bonus(obj, bonus)?;
        } else {
            tx.claim_object(
                obj,
                o.object_type as u8,
                bs,
                o.bonustype as u8,
                bonus,
                slots,
            )?;
        }
    }
    let mut dn = tx.dnode(obj)?.phys;
    dn.checksum = o.checksum;
    dn.compress = o.compress;
    tx.set_dnode(obj, dn);
    // A dnode of several slots: the dataset lists large_dnode.
    if slots > 1 {
        crate::features::activate_on_dataset(w, ds_obj, crate::features::LARGE_DNODE)
            .map_err(|e| e.context(&what))?;
    }
    Ok(())
}

/// The dnode of object `obj` of the objset being received (None: no such
/// object). A number inside another object's dnode of several slots is
/// no object: a record naming it is refused, as OpenZFS refuses it.
fn live_dnode(tx: &ozfs_dmu::tx::ObjsetTx, obj: u64, what: &str) -> Result<Option<Dnode>> {
    if let Some(owner) = tx.owner_of_slot(obj)? {
        return Err(Error::corrupt(
            what,
            format!("object {obj} lies inside object {owner}'s dnode"),
        ));
    }
    match tx.dnode(obj) {
        Ok(d) => Ok(Some(d)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Highest block id a received object may use (keeps trees within the
/// levels a dnode can address).
const MAX_BLKID: u64 = 1 << 40;

/// The block size of an object a record refers to (which must exist).
fn block_size_of(tx: &ozfs_dmu::tx::ObjsetTx, obj: u64, what: &str) -> Result<u64> {
    let dn = live_dnode(tx, obj, what)?
        .ok_or_else(|| Error::corrupt(what, "the object does not exist"))?;
    match dn.phys.datablksz() {
        0 => Err(Error::corrupt(what, "the object has block size 0")),
        bs => Ok(bs),
    }
}

/// Returns the bytes of blocks it changed. A write longer than the
/// object's block size is a large block of the sender (`-L`) split into
/// whole blocks here; its last piece is padded with zeros, as the large
/// block was past its data.
fn apply_write(
    w: &mut PoolWriter,
    ds_obj: u64,
    obj: u64,
    offset: u64,
    mut data: Vec<u8>,
) -> Result<u64> {
    let what = format!("WRITE to object {obj} at {offset}");
    let tx = w.fs_tx(ds_obj)?;
    let bs = block_size_of(tx, obj, &what)?;
    let len = data.len() as u64;
    let blkid = offset / bs;
    let end = offset
        .checked_add(len)
        .ok_or_else(|| Error::corrupt(&what, "offset out of range"))?;
    if blkid >= MAX_BLKID || end.div_ceil(bs) > MAX_BLKID {
        return Err(Error::corrupt(&what, "offset out of range"));
    }
    if offset.is_multiple_of(bs) && len == bs {
        tx.write_block(obj, blkid, data);
    } else if (offset % bs) + len <= bs {
        tx.write(obj, offset, &data)?;
    } else if bs == MAX_WRITTEN_BLOCK && offset.is_multiple_of(bs) {
        let pieces = len.div_ceil(bs);
        data.resize((pieces * bs) as usize, 0);
        for (i, piece) in data.chunks_exact(bs as usize).enumerate() {
            tx.write_block(obj, blkid + i as u64, piece.to_vec());
        }
        return Ok(pieces * bs);
    } else {
        return Err(Error::corrupt(
            &what,
            format!("{len} bytes cross a block boundary (block size {bs})"),
        ));
    }
    Ok(bs)
}

/// Returns the bytes of blocks it rewrote (partial frees).
fn apply_free(w: &mut PoolWriter, ds_obj: u64, obj: u64, offset: u64, length: u64) -> Result<u64> {
    let what = format!("FREE of object {obj} at {offset}");
    let tx = w.fs_tx(ds_obj)?;
    let bs = block_size_of(tx, obj, &what)?;
    let end = offset.saturating_add(length);
    if end <= offset {
        return Ok(0);
    }
    let mut touched = 0u64;
    let maxblk = tx.max_blkid(obj)?;
    let first = offset / bs;
    let last = ((end - 1) / bs).min(maxblk);
    let mut b = first;
    while b <= last {
        let Some(blk) = tx.next_block(obj, b, last, true)? else {
            break;
        };
        let bstart = blk.saturating_mul(bs);
        let bend = bstart.saturating_add(bs);
        if offset <= bstart && end >= bend {
            tx.punch_block(obj, blk);
        } else if let Some(mut data) = tx.read_block(obj, blk)? {
            let from = offset.max(bstart) - bstart;
            let to = end.min(bend) - bstart;
            data.resize(bs as usize, 0);
            data[from as usize..to as usize].fill(0);
            tx.write_block(obj, blk, data);
            touched += bs;
        }
        b = blk + 1;
    }
    Ok(touched)
}

/// The sealing a raw stream gives a block of type `object_type`: salt and
/// IV for an encrypted type, the MAC always.
fn raw_sealed(object_type: u8, c: &stream::RawCrypt) -> ozfs_codec::crypt::Sealed {
    ozfs_codec::crypt::Sealed {
        params: ozfs_format::types::object_type_is_encrypted(object_type).then_some((c.salt, c.iv)),
        mac: Some(c.mac),
    }
}

/// A raw OBJECT record: the dnode made exactly as the sender's (its dnode
/// block is authenticated as a whole): type, shape, checksum and
/// compression, `maxblkid`, and the bonus area as stored (encrypted).
fn apply_object_raw(
    w: &mut PoolWriter,
    ds_obj: u64,
    o: &stream::ObjectRec,
    payload: &[u8],
) -> Result<()> {
    let obj = o.object;
    let what = format!("raw OBJECT {obj}");
    if obj == 0 || obj >= 1 << 48 {
        return Err(Error::corrupt(&what, "object number out of range"));
    }
    let valid = |t: u32| u8::try_from(t).is_ok_and(ozfs_format::types::object_type_is_valid);
    if o.object_type == 0 || !valid(o.object_type) || !valid(o.bonustype) {
        return Err(Error::corrupt(
            &what,
            format!("type {} bonus type {}", o.object_type, o.bonustype),
        ));
    }
    // A dnode's own checksum and compression (usually inherit): values
    // OpenZFS's tables hold.
    if o.checksum as usize >= ozfs_format::types::CHECKSUM_FUNCTIONS
        || o.compress as usize >= ozfs_format::types::COMPRESS_FUNCTIONS
    {
        return Err(Error::corrupt(
            &what,
            format!("checksum {} compression {}", o.checksum, o.compress),
        ));
    }
    let slots = o.dn_slots.max(1);
    let bs = o.blksz as u64;
    if !bs.is_multiple_of(512) || !(512..=stream::MAX_BLOCK).contains(&bs) {
        return Err(Error::corrupt(&what, format!("block size {bs}")));
    }
    // A raw block cannot be split: blocks over what ozfs writes are not
    // received raw.
    if bs > MAX_WRITTEN_BLOCK {
        return Err(Error::unsupported(
            &what,
            format!("a raw stream with {bs}-byte blocks (ozfs writes blocks up to 128 KiB)"),
        ));
    }
    if slots > DNODE_MAX_SLOTS
        || !(1..=3).contains(&o.nblkptr)
        || !(10..=17).contains(&o.indblkshift)
        || o.nlevels == 0
        || o.nlevels > 12
    {
        return Err(Error::corrupt(
            &what,
            format!(
                "{slots} slots, {} block pointers, indirect shift {}, {} levels",
                o.nblkptr, o.indblkshift, o.nlevels
            ),
        ));
    }
    let spill = o.flags & stream::DRR_OBJECT_SPILL != 0;
    // The bonus area: what follows the block pointers, less a spill
    // pointer's room.
    let area = (slots as usize * 512)
        .saturating_sub(64 + 128 * o.nblkptr as usize + if spill { 128 } else { 0 });
    let raw_len = if o.raw_bonuslen != 0 {
        o.raw_bonuslen
    } else {
        o.bonuslen
    } as usize;
    if o.bonuslen as usize > area || raw_len > area || raw_len > payload.len() {
        return Err(Error::corrupt(
            &what,
            format!(
                "bonus of {} ({raw_len} stored) bytes in an area of {area}",
                o.bonuslen
            ),
        ));
    }
    if slots > 1 && crate::features::refcount(w, crate::features::LARGE_DNODE)?.is_none() {
        return Err(Error::unsupported(
            &what,
            format!(
                "a dnode of {slots} slots into pool '{}', which does not have feature large_dnode enabled",
                w.pool.name
            ),
        ));
    }
    let tx = w.fs_tx(ds_obj)?;
    // Its maxblkid within what its tree can address (a dnode that could
    // not be read back would make the file system impossible to destroy).
    let shape = ozfs_format::dnode::DnodePhys {
        object_type: o.object_type as u8,
        nblkptr: o.nblkptr,
        indblkshift: o.indblkshift,
        nlevels: o.nlevels,
        datablkszsec: (bs / 512) as u16,
        extra_slots: slots - 1,
        ..Default::default()
    };
    if o.maxblkid > shape.max_blkid_limit() {
        return Err(Error::corrupt(
            &what,
            format!(
                "maxblkid {} past what {} levels address",
                o.maxblkid, o.nlevels
            ),
        ));
    }
    // An object of the same shape keeps its blocks (an incremental stream
    // sends those that changed); any other is made anew.
    let kept = match live_dnode(tx, obj, &what)? {
        Some(d) => {
            let p = &d.phys;
            let same = p.datablksz() == bs
                && p.extra_slots as u64 + 1 == slots as u64
                && p.nblkptr == o.nblkptr
                && p.indblkshift == o.indblkshift
                && p.nlevels <= o.nlevels;
            if !same {
                tx.free_object(obj)?;
            }
            same
        }
        None => false,
    };
    if kept {
        // Blocks past the sent end go (a file shortened since the source
        // snapshot: the stream's FREE stops at its new maxblkid).
        if o.maxblkid < tx.dnode(obj)?.phys.maxblkid {
            tx.punch_from(obj, o.maxblkid + 1)?;
        }
    } else {
        // Objects in the new dnode's extra slots are freed, as OpenZFS does.
        for s in obj + 1..obj + slots as u64 {
            if tx.owner_of_slot(s)?.is_none() && tx.slot_head(s)?.0 != 0 {
                tx.free_object(s)?;
            }
        }
        tx.claim_object(
            obj,
            o.object_type as u8,
            bs,
            o.bonustype as u8,
            Vec::new(),
            slots,
        )?;
    }
    let mut dn = tx.dnode(obj)?.phys;
    if kept && !spill && dn.spill.is_some() {
        tx.set_spill(obj, None)?;
        dn = tx.dnode(obj)?.phys;
    }
    dn.object_type = o.object_type as u8;
    dn.bonustype = o.bonustype as u8;
    if !kept {
        dn.nblkptr = o.nblkptr;
        dn.blkptr = vec![ozfs_format::BlkPtr::default(); o.nblkptr as usize];
        dn.indblkshift = o.indblkshift;
        dn.nlevels = o.nlevels;
    }
    // A kept tree grows to the sender's levels when it is synced.
    tx.raw_nlevels.insert(obj, o.nlevels);
    dn.maxblkid = o.maxblkid;
    dn.checksum = o.checksum;
    dn.compress = o.compress;
    dn.bonuslen = o.bonuslen as u16;
    dn.bonus = payload[..raw_len].to_vec();
    tx.set_dnode(obj, dn);
    tx.raw_maxblkid.insert(obj, o.maxblkid);
    if slots > 1 {
        crate::features::activate_on_dataset(w, ds_obj, crate::features::LARGE_DNODE)
            .map_err(|e| e.context(&what))?;
    }
    Ok(())
}

/// A raw WRITE: the block stored as sent (compressed, encrypted, sealed).
fn apply_write_raw(
    w: &mut PoolWriter,
    ds_obj: u64,
    wr: &stream::WriteRec,
    payload: Vec<u8>,
) -> Result<()> {
    let what = format!("raw WRITE to object {} at {}", wr.object, wr.offset);
    if wr.checksum_flags & stream::DRR_RAW_BYTESWAP != 0 {
        return Err(Error::unsupported(&what, "blocks of the other byte order"));
    }
    let tx = w.fs_tx(ds_obj)?;
    let dn = live_dnode(tx, wr.object, &what)?
        .ok_or_else(|| Error::corrupt(&what, "the object does not exist"))?;
    let bs = dn.phys.datablksz();
    if bs == 0
        || !wr.offset.is_multiple_of(bs)
        || wr.length != bs
        || wr.offset / bs > dn.phys.maxblkid
    {
        return Err(Error::corrupt(
            &what,
            format!("{} bytes, block size {bs}", wr.length),
        ));
    }
    let psize = if wr.compressed_size != 0 {
        wr.compressed_size
    } else {
        wr.length
    };
    if payload.len() as u64 != psize || !psize.is_multiple_of(512) || psize > bs {
        return Err(Error::corrupt(
            &what,
            format!("{} bytes stored for {psize}", payload.len()),
        ));
    }
    if wr.object_type != dn.phys.object_type as u32 {
        return Err(Error::corrupt(
            &what,
            format!(
                "block type {} in an object of type {}",
                wr.object_type, dn.phys.object_type
            ),
        ));
    }
    stored_compression(wr.compression, &what)?;
    tx.write_raw(
        wr.object,
        wr.offset / bs,
        ozfs_dmu::tx::RawBlock {
            data: payload,
            compress: wr.compression,
            lsize: bs,
            sealed: raw_sealed(dn.phys.object_type, &wr.crypt),
        },
    );
    Ok(())
}

/// A raw SPILL: the object's spill block stored as sent.
fn apply_spill_raw(
    w: &mut PoolWriter,
    ds_obj: u64,
    sp: &stream::SpillRec,
    payload: Vec<u8>,
) -> Result<()> {
    let what = format!("raw SPILL of object {}", sp.object);
    if sp.flags & stream::DRR_RAW_BYTESWAP != 0 {
        return Err(Error::unsupported(&what, "blocks of the other byte order"));
    }
    // An unmodified spill block stays as it is.
    if sp.flags & stream::DRR_SPILL_UNMODIFIED != 0 {
        return Ok(());
    }
    let psize = sp.compressed_size;
    if payload.len() as u64 != psize
        || psize == 0
        || !psize.is_multiple_of(512)
        || !sp.length.is_multiple_of(512)
        || !(512..=MAX_WRITTEN_BLOCK).contains(&sp.length)
        || psize > sp.length
    {
        return Err(Error::corrupt(
            &what,
            format!(
                "{} bytes stored for {psize} of {}",
                payload.len(),
                sp.length
            ),
        ));
    }
    let tx = w.fs_tx(ds_obj)?;
    let dn = live_dnode(tx, sp.object, &what)?
        .ok_or_else(|| Error::corrupt(&what, "the object does not exist"))?;
    if dn.phys.bonustype != ozfs_format::types::ot::SA {
        return Err(Error::corrupt(&what, "the object has no system attributes"));
    }
    stored_compression(sp.compression, &what)?;
    tx.forget_derived(sp.object);
    tx.spills.remove(&sp.object);
    tx.raw_spills.insert(
        sp.object,
        ozfs_dmu::tx::RawBlock {
            data: payload,
            compress: sp.compression,
            lsize: sp.length,
            sealed: raw_sealed(ozfs_format::types::ot::SA, &sp.crypt),
        },
    );
    Ok(())
}

/// A raw OBJECT_RANGE: the sealing of the dnode block holding its objects.
fn apply_object_range(w: &mut PoolWriter, ds_obj: u64, r: &stream::ObjectRangeRec) -> Result<()> {
    let what = format!("OBJECT_RANGE {}+{}", r.first, r.numslots);
    let tx = w.fs_tx(ds_obj)?;
    let per = tx.os.phys.meta_dnode.datablksz() / 512;
    if per == 0 || !r.first.is_multiple_of(per) || r.numslots != per || r.first >= 1 << 48 {
        return Err(Error::corrupt(
            &what,
            format!("not one dnode block of {per} dnodes"),
        ));
    }
    if r.flags & stream::DRR_RAW_BYTESWAP != 0 {
        return Err(Error::unsupported(
            &what,
            "dnode blocks of the other byte order",
        ));
    }
    tx.raw_dnode_blocks.insert(
        r.first / per,
        raw_sealed(ozfs_format::types::ot::DNODE, &r.crypt),
    );
    Ok(())
}

/// An incremental raw stream goes onto a file system holding the same key
/// (its key object's guid the stream's) whose latest snapshot has the
/// stream's source IV set guid; its objset is then changed without a key,
/// as a raw receive changes it (`ObjsetTx::raw_recv`), ending with the
/// stream's portable MAC and meta-dnode size.
/// The checks of an incremental raw stream that need no change: the
/// target is encrypted with the stream's key (its key object's guid).
fn raw_incremental_check(
    w: &PoolWriter,
    fs: &str,
    ds_obj: u64,
    k: &crate::crypt::RawKeyData,
) -> Result<()> {
    let cannot = |m: &str| {
        Error::Invalid(format!(
            "cannot receive raw incremental stream into '{fs}': {m}"
        ))
    };
    let ds = w.dataset(ds_obj)?;
    let key_obj = w
        .dir_key_obj(ds.dir_obj)?
        .ok_or_else(|| cannot("it is not encrypted"))?;
    let guid = ozfs_dmu::zap_tx::lookup_u64(&w.mos, key_obj, "DSL_CRYPTO_GUID")?;
    if guid != k.wrapped.guid {
        return Err(cannot("its key is not the stream's"));
    }
    Ok(())
}

fn raw_incremental_setup(
    w: &mut PoolWriter,
    fs: &str,
    ds_obj: u64,
    k: &crate::crypt::RawKeyData,
) -> Result<()> {
    raw_incremental_check(w, fs, ds_obj, k)?;
    let cannot = |m: &str| {
        Error::Invalid(format!(
            "cannot receive raw incremental stream into '{fs}': {m}"
        ))
    };
    let ds = w.dataset(ds_obj)?;
    if ds.prev_snap_obj != 0 {
        let prev = ds.prev_snap_obj;
        let have =
            if w.mos.dnode(prev)?.phys.object_type == ozfs_format::types::ot::ZAP_METADATA_NEW {
                ozfs_dmu::zap_tx::lookup(&w.mos, prev, crate::crypt::IVSET_GUID.as_bytes())?
                    .and_then(|e| e.as_u64())
            } else {
                None
            };
        if have != Some(k.from_ivset_guid) {
            return Err(cannot(
                "IV set guid mismatch (the stream is not from this snapshot)",
            ));
        }
    }
    let os = ozfs_dmu::Objset::open(w.pool.clone(), &ds.bp)?;
    if os.phys.meta_dnode.nlevels != k.mdn_nlevels
        || os.phys.meta_dnode.datablksz() != k.mdn_blksz
        || os.phys.meta_dnode.nblkptr != k.mdn_nblkptr
    {
        return Err(cannot("its meta-dnode has another shape than the stream's"));
    }
    let mut t = ozfs_dmu::tx::ObjsetTx::new(os);
    t.raw_recv = true;
    t.os.phys.portable_mac = k.portable_mac;
    t.raw_maxblkid.insert(0, k.mdn_maxblkid);
    w.fs.insert(ds_obj, t);
    Ok(())
}

/// A compression function a stored block may name (not inherit, on or
/// empty, nor ozfs's own pre-compressed tag).
fn stored_compression(c: u8, what: &str) -> Result<()> {
    use ozfs_format::types::comp;
    if matches!(
        c,
        comp::OFF | comp::LZJB | comp::GZIP_1..=comp::GZIP_9 | comp::ZLE | comp::LZ4 | comp::ZSTD
    ) {
        Ok(())
    } else {
        Err(Error::corrupt(
            what,
            format!("stored with compression function {c}"),
        ))
    }
}
