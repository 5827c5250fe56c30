//! `zfs send`: a snapshot as a send stream (format: `ozfs_format::stream`).
//!
//! Theory. A full stream describes every object of the snapshot's objset:
//! runs of free object numbers as FREEOBJECTS, each allocated object as an
//! OBJECT record (type, block size, bonus buffer) followed by a FREE of
//! everything past its last block, FREEs of its holes and a WRITE of each
//! data block's logical contents. An incremental stream from snapshot F
//! carries only what changed after F's creation txg: objects whose dnode
//! differs from F's (freed ones as FREEOBJECTS), and of those, blocks born
//! after F (all blocks when the object was created or reallocated since),
//! every hole (a hole's birth is not recorded in a version-23 pool, so a
//! receiver is told of all of them; freeing a hole is a no-op). The records
//! of an object follow its OBJECT record, as every receiver needs.
//!
//! The stream ends with END and the Fletcher-4 checksum of every byte before
//! it. Records are written in little-endian order, as zfs-fuse on x86 does.
//!
//! Invariants: the stream is generated from committed snapshots only (their
//! blocks never change), so it can be produced while the pool is in use.

use crate::pool::{DatasetInfo, DslPool};
use ozfs_codec::checksum::fletcher4_incremental;
use ozfs_dmu::objset::{Dnode, Objset};
use ozfs_format::stream::{self, Begin, ObjectRec, Record, WriteRec};
use ozfs_format::{BlkPtr, Cksum, Error, Result};
use std::io::Write;

/// A writer that keeps the stream's running checksum and byte count.
pub struct StreamOut<'a> {
    out: &'a mut dyn Write,
    pub cksum: Cksum,
    pub bytes: u64,
}

impl<'a> StreamOut<'a> {
    pub fn new(out: &'a mut dyn Write) -> StreamOut<'a> {
        StreamOut {
            out,
            cksum: Cksum([0; 4]),
            bytes: 0,
        }
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        fletcher4_incremental(&mut self.cksum, b, false);
        self.bytes += b.len() as u64;
        self.out
            .write_all(b)
            .map_err(|e| Error::io("write the send stream", e))
    }

    /// Write a record and its payload.
    pub fn record(&mut self, r: &Record, payload: &[u8]) -> Result<()> {
        let mut b = r.encode();
        // A BEGIN record's payload (an nvlist) has only its length to say
        // how long it is.
        if matches!(r, Record::Begin(_)) {
            b[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        }
        self.put(&b)?;
        if !payload.is_empty() {
            self.put(payload)?;
        }
        Ok(())
    }

    /// The END record (checksum of everything before it).
    pub fn end(&mut self, toguid: u64) -> Result<()> {
        let r = Record::End {
            cksum: self.cksum,
            toguid,
        };
        self.put(&r.encode())?;
        self.out
            .flush()
            .map_err(|e| Error::io("write the send stream", e))
    }
}

/// The header of a compound stream (`zfs send -I`/`-R`): BEGIN naming the
/// last snapshot, carrying the replication header nvlist (`-R`) as its
/// payload or none (`-I`), closed by END. Returns its bytes.
pub fn compound_header(
    out: &mut dyn Write,
    toname: &str,
    hdr: Option<&ozfs_format::NvList>,
) -> Result<u64> {
    let packed = hdr.map(|h| h.pack_xdr()).unwrap_or_default();
    let mut rec = Record::Begin(Begin {
        versioninfo: stream::DMU_COMPOUNDSTREAM,
        creation_time: 0,
        objset_type: 0,
        flags: 0,
        toguid: 0,
        fromguid: 0,
        toname: toname.to_string(),
    })
    .encode();
    rec[4..8].copy_from_slice(&(packed.len() as u32).to_le_bytes());
    let mut s = StreamOut::new(out);
    s.put(&rec)?;
    s.put(&packed)?;
    s.end(0)?;
    Ok(s.bytes)
}

/// The final END of a compound stream (all zero: a fresh stream's checksum).
pub fn compound_end(out: &mut dyn Write) -> Result<u64> {
    let mut s = StreamOut::new(out);
    s.end(0)?;
    Ok(s.bytes)
}

/// One stream to send: (incremental source, snapshot).
pub type SendPair = (Option<DatasetInfo>, DatasetInfo);

/// Free object numbers waiting to be sent as one FREEOBJECTS record.
struct FreeRun {
    first: u64,
    count: u64,
}

/// Level-0 blocks of an object: (blkid, birth txg), ascending.
fn data_blocks(os: &Objset, dn: &Dnode) -> Result<Vec<(u64, BlkPtr)>> {
    let mut v = Vec::new();
    os.walk_tree(dn, &mut |level, blkid, bp| {
        if level == 0 {
            v.push((blkid, *bp));
        }
        Ok(())
    })?;
    v.sort_unstable_by_key(|(b, _)| *b);
    Ok(v)
}

/// What a stream may carry beyond plain records (`zfs send -c`, `-e`,
/// `-L`), as OpenZFS's `setup_featureflags` grants them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOpts {
    /// `-c`: compressed blocks as they are stored (COMPRESSED, and LZ4 /
    /// ZSTD where the pool or snapshot uses them).
    pub compressed: bool,
    /// `-e`: blocks embedded in their pointers as WRITE_EMBEDDED records
    /// (EMBED_DATA, where the pool has `embedded_data` active).
    pub embedded: bool,
    /// `-L`: blocks over 128 KiB whole (LARGE_BLOCKS, where the snapshot
    /// lists `large_blocks`); without it they go in 128 KiB pieces.
    pub large_blocks: bool,
    /// `-w`: an encrypted snapshot goes out as it is stored (RAW): blocks
    /// still encrypted, with their salts, IVs and MACs, dnode blocks'
    /// parameters in OBJECT_RANGE records, the wrapped keys in the BEGIN
    /// payload; no key is needed. It implies `-L` and `-c` (and `-e` for
    /// a snapshot that is not encrypted, which then goes out as `-Lec`).
    pub raw: bool,
}

/// The encryption parameters of protected block `bp` as a raw stream
/// carries them, and its record flag (`DRR_RAW_BYTESWAP` when written in
/// the other byte order): salt and IV zero for a block that is only
/// authenticated (`zio_crypt_decode_params_bp`).
fn raw_crypt(bp: &BlkPtr, what: &dyn Fn() -> String) -> Result<(stream::RawCrypt, u8)> {
    if !bp.uses_crypt() || bp.is_embedded() || bp.level() != 0 {
        return Err(Error::corrupt(
            what(),
            "a block of an encrypted dataset that is not protected",
        ));
    }
    let swap = bp.little_endian() != ozfs_format::bytes::HOST_LITTLE_ENDIAN;
    let crypt = match bp.crypt_params(swap) {
        Some(p) => stream::RawCrypt {
            salt: p.salt,
            iv: p.iv,
            mac: p.mac,
        },
        None => stream::RawCrypt {
            mac: bp.mac(swap),
            ..Default::default()
        },
    };
    Ok((crypt, if swap { stream::DRR_RAW_BYTESWAP } else { 0 }))
}

/// A WRITE or SPILL of protected block `bp` exactly as stored (raw).
fn raw_write(
    s: &mut StreamOut,
    os: &Objset,
    obj: u64,
    object_type: u8,
    offset: u64,
    bp: &BlkPtr,
    toguid: u64,
) -> Result<()> {
    use ozfs_format::types::cksum;
    let what = || format!("object {obj} at {offset}");
    let (crypt, flags) = raw_crypt(bp, &what)?;
    let data = os.pool.read_physical(bp).map_err(|e| e.context(&what()))?;
    // The deduplication key: sizes in sectors less one, compression, the
    // crypt bit; the checksum as stored.
    let sectors = |n: u64| (n >> 9).saturating_sub(1) & 0xffff;
    let key_prop = sectors(bp.lsize())
        | (sectors(bp.psize()) << 16)
        | ((bp.compression() as u64 & 0x7f) << 32)
        | (1 << 39);
    let dedup = matches!(
        bp.checksum(),
        cksum::SHA256 | cksum::SHA512 | cksum::SKEIN | cksum::BLAKE3
    );
    let rec = if offset == SPILL_OFFSET {
        Record::Spill(stream::SpillRec {
            object: obj,
            length: bp.lsize(),
            toguid,
            flags,
            compression: bp.compression(),
            compressed_size: data.len() as u64,
            crypt,
        })
    } else {
        Record::Write(WriteRec {
            object: obj,
            object_type: object_type as u32,
            offset,
            length: bp.lsize(),
            toguid,
            checksum_type: bp.checksum(),
            checksum_flags: flags | if dedup { stream::DRR_CHECKSUM_DEDUP } else { 0 },
            compression: bp.compression(),
            key_cksum: bp.cksum().0,
            key_prop,
            compressed_size: data.len() as u64,
            crypt,
        })
    };
    s.record(&rec, &data)
}

/// [`raw_write`]'s offset for a spill block.
const SPILL_OFFSET: u64 = u64::MAX;

/// Send snapshot `to` (incremental from `from` when given) to `out`;
/// `progress(bytes)` is called as the stream grows. Returns the bytes written.
pub fn send(
    dsl: &DslPool,
    to: &DatasetInfo,
    from: Option<&DatasetInfo>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    send_with(dsl, to, from, out, progress, &SendOpts::default())
}

/// [`send`] with `-c`, `-e`, `-L` ([`SendOpts`]).
pub fn send_with(
    dsl: &DslPool,
    to: &DatasetInfo,
    from: Option<&DatasetInfo>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
    opts: &SendOpts,
) -> Result<u64> {
    if !to.is_snapshot {
        return Err(Error::Invalid(format!(
            "'{}' is not a snapshot (zfs send sends snapshots)",
            to.name
        )));
    }
    if let Some(f) = from {
        if !f.is_snapshot || f.dir_obj != to.dir_obj {
            return Err(Error::Invalid(format!(
                "incremental source '{}' is not an earlier snapshot of the same file system",
                f.name
            )));
        }
        if f.ds.creation_txg >= to.ds.creation_txg {
            return Err(Error::Invalid(format!(
                "incremental source '{}' is not earlier than '{}'",
                f.name, to.name
            )));
        }
    }
    // An encrypted snapshot sent raw is read as stored, without a key.
    let encrypted = dsl.is_encrypted(to)?;
    let raw = opts.raw && encrypted;
    let open = |d: &DatasetInfo| {
        if raw {
            Objset::open(dsl.pool.clone(), &d.ds.bp)
                .map_err(|e| e.context(&format!("dataset '{}'", d.name)))
        } else {
            dsl.objset(d)
        }
    };
    let os = open(to)?;
    let from_os = match from {
        Some(f) => Some(open(f)?),
        None => None,
    };
    let fromtxg = from.map(|f| f.ds.creation_txg).unwrap_or(0);
    let toguid = to.ds.guid;
    // A file system with system attributes (ZPL 5) may have spill blocks:
    // the stream says so, as OpenZFS's does.
    let volume = os.phys.os_type == ozfs_format::objset::OBJSET_TYPE_ZVOL;
    let zpl = if volume {
        0
    } else {
        ozfs_dmu::zap::lookup_obj(&os, 1, "VERSION")?
            .and_then(|e| e.as_u64())
            .unwrap_or(0)
    };
    let mut features = if zpl >= 5 {
        stream::FEATURE_SA_SPILL
    } else {
        0
    };
    // Dnodes of several slots: the snapshot lists large_dnode.
    let listed = |g: &str| crate::features::listed_on_dataset(&dsl.mos, to.ds_obj, g);
    if listed(crate::features::LARGE_DNODE)? {
        features |= stream::FEATURE_LARGE_DNODE;
    }
    // As OpenZFS's `setup_featureflags`: a raw send implies -L and -c,
    // and -e where the snapshot is not encrypted.
    if (opts.large_blocks || opts.raw) && listed(crate::features::LARGE_BLOCKS)? {
        features |= stream::FEATURE_LARGE_BLOCKS;
    }
    // Names over 255 bytes: the stream says so (OpenZFS's
    // `setup_featureflags`). Micro ZAPs over 128 KiB cannot go out in
    // 128 KiB pieces, and ozfs does not send them whole.
    if listed(crate::features::LONGNAME)? {
        features |= stream::FEATURE_LONGNAME;
    }
    if listed("com.klarasystems:large_microzap")? {
        return Err(Error::unsupported(
            format!("cannot send '{}'", to.name),
            "it uses micro ZAPs over 128 KiB (large_microzap)",
        ));
    }
    if (opts.embedded || opts.raw)
        && !encrypted
        && dsl.pool.feature_active("com.delphix:embedded_data")
    {
        features |= stream::FEATURE_EMBED_DATA;
    }
    if opts.compressed || opts.raw {
        features |= stream::FEATURE_COMPRESSED;
        if listed(crate::features::ZSTD)? {
            features |= stream::FEATURE_ZSTD;
        }
    }
    if raw {
        features |= stream::FEATURE_RAW;
    }
    if features & (stream::FEATURE_EMBED_DATA | stream::FEATURE_COMPRESSED) != 0
        && dsl.pool.feature_active(crate::features::LZ4)
    {
        features |= stream::FEATURE_LZ4;
    }
    // A raw stream carries the wrapped keys, the meta-dnode's shape and
    // the objset's portable MAC (the receiver rebuilds the objset exactly).
    let payload = if raw {
        let objset = dsl.pool.read_bp(&to.ds.bp)?;
        let mac = objset.get(720..752).ok_or_else(|| {
            Error::corrupt(format!("objset of '{}'", to.name), "shorter than 1 KiB")
        })?;
        let from_ivset = match from {
            Some(f) => dsl.ivset_guid(f)?,
            None => 0,
        };
        let keys = dsl.raw_key_nvlist(to, &os.phys.meta_dnode, mac, from_ivset)?;
        let mut nv = ozfs_format::NvList::new();
        nv.set("crypt_keydata", ozfs_format::NvValue::NvList(keys));
        // In the native encoding, as OpenZFS packs BEGIN payloads.
        ozfs_format::nvnative::pack(&nv)
    } else {
        Vec::new()
    };
    let mut s = StreamOut::new(out);
    s.record(
        &Record::Begin(Begin {
            versioninfo: stream::DMU_SUBSTREAM | features << 2,
            creation_time: to.ds.creation_time,
            objset_type: if volume {
                stream::DMU_OST_ZVOL
            } else {
                stream::DMU_OST_ZFS
            },
            // With system attributes, OBJECT records say which objects
            // have a spill block (a receiver drops the others' spill).
            // A raw stream (for OpenZFS only) also says, as OpenZFS's
            // do, that FREE records may follow an object's last block.
            flags: if raw {
                stream::DRR_FLAG_SPILL_BLOCK | stream::DRR_FLAG_FREERECORDS
            } else if features & stream::FEATURE_SA_SPILL != 0 {
                stream::DRR_FLAG_SPILL_BLOCK
            } else {
                0
            },
            toguid,
            fromguid: from.map(|f| f.ds.guid).unwrap_or(0),
            toname: to.name.clone(),
        }),
        &payload,
    )?;
    // No FREEOBJECTS names a number past the snapshot's meta-dnode (as
    // OpenZFS's `dump_freeobjects`: old receivers choke on them) — or past
    // the source's, whose objects the receiver has (ozfs's meta-dnode can
    // shrink).
    let max = os
        .max_object()
        .max(from_os.as_ref().map(|f| f.max_object()).unwrap_or(0));
    // Raw: the dnode block whose OBJECT_RANGE was sent last.
    let per_block = (os.phys.meta_dnode.datablksz() / 512).max(1);
    let mut range_block: Option<u64> = None;
    let mut run: Option<FreeRun> = None;
    let flush_run = |s: &mut StreamOut, run: &mut Option<FreeRun>| -> Result<()> {
        if let Some(r) = run.take() {
            s.record(
                &Record::FreeObjects {
                    first: r.first,
                    count: r.count,
                    toguid,
                },
                &[],
            )?;
        }
        Ok(())
    };
    // Free numbers go into runs: a full stream names every one, an
    // incremental one those that were allocated before.
    let free_span = |s: &mut StreamOut, run: &mut Option<FreeRun>, first: u64, count: u64| match run
    {
        Some(r) if r.first + r.count == first => {
            r.count += count;
            Ok(())
        }
        _ => {
            flush_run(s, run)?;
            *run = Some(FreeRun { first, count });
            Ok::<(), Error>(())
        }
    };
    // Only numbers that dnode blocks exist for (in either snapshot) are
    // looked at: the work follows the objects, not the meta-dnode's size.
    let mut ranges = os.object_ranges()?;
    if let Some(f) = &from_os {
        ranges.extend(f.object_ranges()?);
    }
    ranges.sort_by_key(|r| r.start);
    // The first number not yet accounted for.
    let mut next = 1u64;
    // The inner slots of a dnode of several slots are no objects: they
    // are skipped up to here.
    let mut inner_until = 0u64;
    for r in ranges {
        let (start, end) = (r.start.max(next), r.end.min(max));
        if start >= end {
            continue;
        }
        if from_os.is_none() && start > next {
            free_span(&mut s, &mut run, next, start - next)?;
        }
        for obj in start..end {
            // Raw: each dnode block of the snapshot (born since the
            // source) is announced with its encryption parameters before
            // any record of an object in it.
            if raw && range_block != Some(obj / per_block) {
                let blk = obj / per_block;
                range_block = Some(blk);
                if let Some(bp) = os.block_bp(&os.meta_dnode(), 0, blk)? {
                    if !bp.is_hole() && bp.birth() > fromtxg {
                        flush_run(&mut s, &mut run)?;
                        let (crypt, flags) =
                            raw_crypt(&bp, &|| format!("{}: dnode block {blk}", to.name))?;
                        s.record(
                            &Record::ObjectRange(stream::ObjectRangeRec {
                                first: blk * per_block,
                                numslots: per_block,
                                toguid,
                                flags,
                                crypt,
                            }),
                            &[],
                        )?;
                    }
                }
            }
            if obj < inner_until {
                continue;
            }
            let dn = match os.dnode(obj) {
                Ok(d) if d.phys.object_type != 0 => Some(d),
                Ok(_) | Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e.context(&format!("{}: object {obj}", to.name))),
            };
            // A number inside one of the source's dnodes of several slots
            // was no object there.
            let old = match &from_os {
                Some(f) if f.slot_owner(obj)?.is_none() => match f.dnode(obj) {
                    Ok(d) if d.phys.object_type != 0 => Some(d),
                    Ok(_) | Err(Error::NotFound(_)) => None,
                    Err(e) => return Err(e),
                },
                _ => None,
            };
            let Some(dn) = dn else {
                if from_os.is_none() || old.is_some() {
                    free_span(&mut s, &mut run, obj, 1)?;
                }
                continue;
            };
            inner_until = obj + 1 + dn.phys.extra_slots as u64;
            if let Some(o) = &old {
                if o.phys.encode() == dn.phys.encode() {
                    continue; // unchanged since the source snapshot
                }
            }
            flush_run(&mut s, &mut run)?;
            send_object(
                &mut s,
                &os,
                obj,
                &dn,
                old.as_ref(),
                fromtxg,
                toguid,
                features,
            )
            .map_err(|e| e.context(&format!("{}: object {obj}", to.name)))?;
            progress(s.bytes);
        }
        next = end;
    }
    if from_os.is_none() && next < max {
        free_span(&mut s, &mut run, next, max - next)?;
    }
    flush_run(&mut s, &mut run)?;
    s.end(toguid)?;
    progress(s.bytes);
    Ok(s.bytes)
}

#[allow(clippy::too_many_arguments)]
fn send_object(
    s: &mut StreamOut,
    os: &Objset,
    obj: u64,
    dn: &Dnode,
    old: Option<&Dnode>,
    fromtxg: u64,
    toguid: u64,
    features: u64,
) -> Result<()> {
    let p = &dn.phys;
    let bs = p.datablksz();
    if bs == 0 || bs > stream::MAX_BLOCK {
        return Err(Error::corrupt(
            format!("object {obj}"),
            format!("block size {bs}"),
        ));
    }
    let raw = features & stream::FEATURE_RAW != 0;
    let mut bonus = p.bonus.clone();
    bonus.truncate(p.bonuslen as usize);
    bonus.resize((p.bonuslen as usize).div_ceil(8) * 8, 0);
    // Raw: the whole bonus area as stored (encrypted past the bonus's
    // length too), and the dnode's shape.
    let mut raw_bonuslen = 0u32;
    if raw && p.bonuslen != 0 {
        let room = p.max_bonuslen();
        if (p.bonuslen as usize) > room {
            return Err(Error::corrupt(
                format!("object {obj}"),
                format!("a bonus of {} bytes in {room}", p.bonuslen),
            ));
        }
        let b = os
            .dnode_block_of(obj)?
            .ok_or_else(|| Error::corrupt(format!("object {obj}"), "its dnode block vanished"))?;
        let at = b.at
            + ozfs_format::dnode::DNODE_CORE_SIZE
            + ozfs_format::blkptr::BLKPTR_SIZE * p.nblkptr as usize;
        bonus = b
            .bytes
            .get(at..at + room)
            .ok_or_else(|| {
                Error::corrupt(
                    format!("object {obj}"),
                    "its bonus runs past its dnode block",
                )
            })?
            .to_vec();
        raw_bonuslen = room as u32;
    }
    // Blocks over 128 KiB go out in 128 KiB pieces, the object announced
    // with that block size, as OpenZFS sends them without `-L` (a stream
    // without LARGE_BLOCKS may not name larger blocks).
    let piece = if features & stream::FEATURE_LARGE_BLOCKS != 0 {
        bs
    } else {
        bs.min(ozfs_format::blkptr::SPA_OLD_MAXBLOCKSIZE)
    };
    s.record(
        &Record::Object(ObjectRec {
            object: obj,
            object_type: p.object_type as u32,
            bonustype: p.bonustype as u32,
            blksz: piece as u32,
            bonuslen: p.bonuslen as u32,
            checksum: p.checksum,
            compress: p.compress,
            // One slot is sent as 0 (as zfs-fuse's streams have it), but
            // in raw streams, which only OpenZFS receives, as OpenZFS does.
            dn_slots: if p.extra_slots > 0 || raw {
                p.extra_slots + 1
            } else {
                0
            },
            flags: if p.spill.is_some_and(|b| !b.is_hole()) {
                stream::DRR_OBJECT_SPILL
            } else {
                0
            } | if raw && dn.swap {
                stream::DRR_RAW_BYTESWAP
            } else {
                0
            },
            raw_bonuslen,
            toguid,
            indblkshift: if raw { p.indblkshift } else { 0 },
            nlevels: if raw { p.nlevels } else { 0 },
            nblkptr: if raw { p.nblkptr } else { 0 },
            maxblkid: if raw { p.maxblkid } else { 0 },
        }),
        &bonus,
    )?;
    let end = p.maxblkid.saturating_add(1).saturating_mul(bs);
    s.record(
        &Record::Free {
            object: obj,
            offset: end,
            length: u64::MAX,
            toguid,
        },
        &[],
    )?;
    // Only blocks born since the source are sent when the object kept its
    // type, block size, slots and bonus size (every receiver, zfs-fuse's
    // too, then keeps its blocks).
    let same_shape = old.is_some_and(|o| {
        o.phys.object_type == p.object_type
            && o.phys.datablksz() == bs
            && o.phys.extra_slots == p.extra_slots
            && o.phys.bonustype == p.bonustype
            && o.phys.bonuslen == p.bonuslen
    });
    let blocks = data_blocks(os, dn)?;
    let mut next = 0u64; // first blkid not yet covered
    let free = |s: &mut StreamOut, from: u64, to: u64| -> Result<()> {
        if to > from {
            s.record(
                &Record::Free {
                    object: obj,
                    offset: from.saturating_mul(bs),
                    length: (to - from).saturating_mul(bs),
                    toguid,
                },
                &[],
            )?;
        }
        Ok(())
    };
    for (blkid, bp) in blocks {
        if blkid > p.maxblkid {
            break;
        }
        free(s, next, blkid)?;
        next = blkid + 1;
        if same_shape && bp.birth() <= fromtxg {
            continue;
        }
        if raw {
            raw_write(
                s,
                os,
                obj,
                p.object_type,
                blkid.saturating_mul(bs),
                &bp,
                toguid,
            )?;
            continue;
        }
        if send_as_stored(s, os, obj, blkid, bs, piece, &bp, features, toguid)? {
            continue;
        }
        let data = os
            .data_block(dn, blkid)?
            .ok_or_else(|| Error::corrupt(format!("object {obj}"), "block vanished"))?;
        // Blocks are whole records; a short one (never written by ZFS) is
        // padded, the common case goes out without a copy.
        let padded;
        let buf: &[u8] = if data.len() as u64 == bs {
            &data
        } else {
            let mut v = data.as_ref().clone();
            v.resize(bs as usize, 0);
            padded = v;
            &padded
        };
        for (i, part) in buf.chunks(piece as usize).enumerate() {
            s.record(
                &Record::Write(WriteRec {
                    object: obj,
                    object_type: p.object_type as u32,
                    offset: blkid.saturating_mul(bs).saturating_add(i as u64 * piece),
                    length: part.len() as u64,
                    toguid,
                    checksum_type: 0,
                    checksum_flags: 0,
                    compression: 0,
                    key_cksum: [0; 4],
                    key_prop: 0,
                    compressed_size: 0,
                    crypt: Default::default(),
                }),
                part,
            )?;
        }
    }
    free(s, next, p.maxblkid.saturating_add(1))?;
    // The system attributes beyond the bonus buffer, after the object's
    // blocks (where OpenZFS's traversal puts them).
    if let Some(sp) = p.spill.filter(|b| !b.is_hole()) {
        if raw {
            return raw_write(
                s,
                os,
                obj,
                ozfs_format::types::ot::SA,
                SPILL_OFFSET,
                &sp,
                toguid,
            );
        }
        let data = os
            .read_bp(&sp)
            .map_err(|e| e.context(&format!("spill block of object {obj}")))?;
        s.record(
            &Record::Spill(stream::SpillRec {
                object: obj,
                length: data.len() as u64,
                toguid,
                flags: 0,
                compression: 0,
                compressed_size: 0,
                crypt: Default::default(),
            }),
            &data,
        )?;
    }
    Ok(())
}

/// Send block `blkid` of `obj` as it is stored, if the stream allows it
/// and the block is whole in it: an embedded block as WRITE_EMBEDDED
/// (EMBED_DATA; its payload as it sits in the pointer), a compressed one
/// as a WRITE of its physical bytes (COMPRESSED; lz4 and zstd only where
/// the stream names them). False: it goes out as logical data.
#[allow(clippy::too_many_arguments)]
fn send_as_stored(
    s: &mut StreamOut,
    os: &Objset,
    obj: u64,
    blkid: u64,
    bs: u64,
    piece: u64,
    bp: &BlkPtr,
    features: u64,
    toguid: u64,
) -> Result<bool> {
    use ozfs_format::types::comp;
    if bs != piece || bp.is_hole() {
        return Ok(false);
    }
    let c = bp.compression();
    let named = match c {
        comp::LZ4 => features & stream::FEATURE_LZ4 != 0,
        comp::ZSTD => features & stream::FEATURE_ZSTD != 0,
        _ => true,
    };
    if bp.is_embedded() {
        if features & stream::FEATURE_EMBED_DATA == 0 || bp.etype() != 0 || !named {
            return Ok(false);
        }
        let payload = bp.embedded_payload()?;
        let mut padded = payload.clone();
        padded.resize(payload.len().div_ceil(8) * 8, 0);
        s.record(
            &Record::WriteEmbedded(stream::WriteEmbeddedRec {
                object: obj,
                offset: blkid.saturating_mul(bs),
                length: bs,
                toguid,
                compression: c,
                etype: bp.etype(),
                lsize: bp.lsize() as u32,
                psize: bp.psize() as u32,
            }),
            &padded,
        )?;
        return Ok(true);
    }
    // As OpenZFS's `send_reader`: only file data (level 0, not metadata)
    // in the host's byte order goes out compressed; a receiver stores such
    // blocks as they come, without byteswapping them.
    if features & stream::FEATURE_COMPRESSED == 0
        || matches!(c, comp::OFF | comp::INHERIT | comp::EMPTY | comp::ON)
        || !named
        || bp.is_gang()
        || bp.uses_crypt()
        || bp.lsize() != bs
        || bp.level() != 0
        || ozfs_format::types::object_type_is_metadata(bp.object_type())
        || bp.little_endian() != ozfs_format::bytes::HOST_LITTLE_ENDIAN
    {
        return Ok(false);
    }
    let raw = os
        .pool
        .read_physical(bp)
        .map_err(|e| e.context(&format!("object {obj} block {blkid}")))?;
    s.record(
        &Record::Write(WriteRec {
            object: obj,
            object_type: bp.object_type() as u32,
            offset: blkid.saturating_mul(bs),
            length: bs,
            toguid,
            checksum_type: 0,
            checksum_flags: 0,
            compression: c,
            key_cksum: [0; 4],
            key_prop: 0,
            compressed_size: raw.len() as u64,
            crypt: Default::default(),
        }),
        &raw,
    )?;
    Ok(true)
}

/// The locally set properties of a file system's directory, as a
/// replication header lists them (numbers as uint64, text as strings).
fn local_props(dsl: &DslPool, dir_props: u64) -> Result<ozfs_format::NvList> {
    let mut nv = ozfs_format::NvList::new();
    if dir_props == 0 {
        return Ok(nv);
    }
    for e in ozfs_dmu::zap::list_obj(&dsl.mos, dir_props)? {
        let name = e.name_str();
        if name.contains('$') {
            continue;
        }
        if e.int_len == 1 {
            let bytes: Vec<u8> = e
                .value
                .iter()
                .map(|&v| v as u8)
                .take_while(|&b| b != 0)
                .collect();
            nv.set(
                &name,
                ozfs_format::NvValue::String(String::from_utf8_lossy(&bytes).into_owned()),
            );
        } else if let Some(v) = e.as_u64() {
            nv.set(&name, ozfs_format::NvValue::Uint64(v));
        }
    }
    Ok(nv)
}

/// The plan of a replication stream (`zfs send -R top@tosnap`, `-I`/`-i`
/// from `fromsnap`): its header nvlist — `tosnap`, `fromsnap`, and `fss`,
/// per file system (key: its guid in hex) its name, locally set
/// properties, snapshots by name with guids — and the (from, to) snapshot
/// pairs to send, parents first, each file system's snapshots in order.
pub fn replication_plan(
    dsl: &DslPool,
    top: &DatasetInfo,
    tosnap: &str,
    fromsnap: Option<&str>,
) -> Result<(ozfs_format::NvList, Vec<SendPair>)> {
    use ozfs_format::{NvList, NvValue};
    let mut fss = NvList::new();
    let mut pairs = Vec::new();
    for fs in dsl.list(top, false, None)? {
        if fs.is_snapshot {
            continue;
        }
        let mut snaps = dsl.snapshots(&fs)?;
        snaps.sort_by_key(|s| s.ds.creation_txg);
        let short = |s: &DatasetInfo| s.name.rsplit('@').next().unwrap_or("").to_string();
        let Some(to_idx) = snaps.iter().position(|s| short(s) == tosnap) else {
            continue; // file systems without the snapshot are not sent
        };
        let mut nvfs = NvList::new();
        nvfs.set("name", NvValue::String(fs.name.clone()));
        nvfs.set("parentfromsnap", NvValue::Uint64(0));
        nvfs.set(
            "props",
            NvValue::NvList(local_props(dsl, fs.dir.props_zapobj)?),
        );
        let mut sn = NvList::new();
        let mut sp = NvList::new();
        for s in &snaps {
            sn.set(&short(s), NvValue::Uint64(s.ds.guid));
            sp.set(&short(s), NvValue::NvList(NvList::new()));
        }
        nvfs.set("snaps", NvValue::NvList(sn));
        nvfs.set("snapprops", NvValue::NvList(sp));
        fss.set(&format!("0x{:x}", fs.ds.guid), NvValue::NvList(nvfs));
        let from_idx = match fromsnap {
            Some(f) => snaps.iter().position(|s| short(s) == f),
            None => None,
        };
        let start = match (fromsnap, from_idx) {
            (Some(_), Some(i)) => i,
            // New since the source: send it whole.
            (Some(_), None) | (None, _) => {
                pairs.push((None, snaps[0].clone()));
                0
            }
        };
        for i in start..to_idx {
            pairs.push((Some(snaps[i].clone()), snaps[i + 1].clone()));
        }
    }
    let mut hdr = NvList::new();
    if let Some(f) = fromsnap {
        hdr.set("fromsnap", NvValue::String(f.to_string()));
    }
    hdr.set("tosnap", NvValue::String(tosnap.to_string()));
    hdr.set("fss", NvValue::NvList(fss));
    Ok((hdr, pairs))
}
