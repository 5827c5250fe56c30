//! The pool's command history (`zpool history`): the on-disk ring buffer
//! ZFS keeps in one MOS object, as pure functions over a byte-addressed
//! store (no I/O here: callers read and write the object's bytes).
//!
//! The MOS object directory's entry `history` names an object of type
//! "SPA history" (uint8 data, 128 KiB blocks) whose bonus, "SPA history
//! offsets", is [`HistoryPhys`]: five u64 — `pool_create_len`,
//! `phys_max_off`, `bof`, `eof`, `records_lost`.
//!
//! Theory. The data is a log of records, each an 8-byte little-endian
//! length then that many bytes of a packed nvlist (native encoding,
//! [`crate::nvnative`]). `bof` and `eof` are *logical* offsets: they only
//! grow. The first `pool_create_len` bytes (the record of the command that
//! created the pool, set when the first record is written) are kept for
//! ever; everything after them is a ring of `phys_max_off -
//! pool_create_len` bytes, logical offset `o` living at physical offset
//! `(o - pool_create_len) % ring + pool_create_len` ([`log_to_phys`]). A
//! record may wrap: its bytes continue at `pool_create_len`. Before a
//! record is written, the oldest records after the creation record are
//! dropped (`bof` moves past them, `records_lost` counts them) until the
//! free room is strictly larger than the record.
//!
//! The readable log ([`read_log`]) is the bytes `[0, pool_create_len)`
//! followed by the logical range `[max(bof, pool_create_len), eof)`.
//!
//! Invariants checked on every read (a hostile pool): `pool_create_len <=
//! phys_max_off <= MAX_HISTORY`, `bof <= eof`, the ring's live bytes fit
//! the ring, and every record length lies within the log; a violation is
//! an error naming the history object, never a panic or an unbounded
//! allocation.

use crate::error::{Error, Result};

/// Size of [`HistoryPhys`] on disk.
pub const HISTORY_PHYS_SIZE: usize = 40;
/// Smallest ring ZFS makes (`phys_max_off`).
pub const MIN_HISTORY: u64 = 128 << 10;
/// Largest ring ZFS makes (OpenZFS); larger values on disk are refused.
pub const MAX_HISTORY: u64 = 1 << 30;
/// Largest ring the pool-version-23 ZFS (zfs-fuse) makes.
pub const MAX_HISTORY_V23: u64 = 32 << 20;
/// Block size of the history object.
pub const HISTORY_BLOCK: u64 = 128 << 10;

/// `spa_history_phys_t`, the history object's bonus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryPhys {
    pub pool_create_len: u64,
    pub phys_max_off: u64,
    pub bof: u64,
    pub eof: u64,
    pub records_lost: u64,
}

impl HistoryPhys {
    /// A new, empty log for a pool of `pool_bytes` usable bytes, sized as
    /// the ZFS of its version does: feature-flag pools (OpenZFS) 1/1000 of
    /// it between 128 KiB and 1 GiB; version-23 pools 1% of it between 128
    /// KiB and 32 MiB (observed in zfs-fuse: 959447 bytes for a 96 MiB pool).
    pub fn new(pool_bytes: u64, feature_flags: bool) -> HistoryPhys {
        let phys_max_off = if feature_flags {
            (pool_bytes / 1000).clamp(MIN_HISTORY, MAX_HISTORY)
        } else {
            (pool_bytes / 100).clamp(MIN_HISTORY, MAX_HISTORY_V23)
        };
        HistoryPhys {
            phys_max_off,
            ..Default::default()
        }
    }

    /// Decode the bonus (`swap`: written on a host of the other byte order)
    /// and check its invariants.
    pub fn parse(b: &[u8], swap: bool) -> Result<HistoryPhys> {
        let f = |i: usize| crate::bytes::u64_at(b, i * 8, swap, "history offsets");
        let p = HistoryPhys {
            pool_create_len: f(0)?,
            phys_max_off: f(1)?,
            bof: f(2)?,
            eof: f(3)?,
            records_lost: f(4)?,
        };
        p.check()?;
        Ok(p)
    }

    /// The bonus bytes (host order).
    pub fn encode(&self) -> Vec<u8> {
        [
            self.pool_create_len,
            self.phys_max_off,
            self.bof,
            self.eof,
            self.records_lost,
        ]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect()
    }

    fn check(&self) -> Result<()> {
        let bad = |d: String| Err(Error::corrupt("history offsets", d));
        if self.phys_max_off > MAX_HISTORY || self.pool_create_len > self.phys_max_off {
            return bad(format!(
                "creation record {} bytes, log size {} (at most {MAX_HISTORY})",
                self.pool_create_len, self.phys_max_off
            ));
        }
        if self.bof > self.eof {
            return bad(format!("begin {} after end {}", self.bof, self.eof));
        }
        let live = self.eof - self.bof.max(self.pool_create_len.min(self.eof));
        if self.eof > 0 && live > self.ring() {
            return bad(format!(
                "{live} bytes between begin {} and end {} exceed the ring of {}",
                self.bof,
                self.eof,
                self.ring()
            ));
        }
        if self.pool_create_len > 0 && self.bof < self.pool_create_len {
            return bad(format!(
                "begin {} inside the creation record of {} bytes",
                self.bof, self.pool_create_len
            ));
        }
        Ok(())
    }

    /// Bytes of the ring (after the creation record).
    pub fn ring(&self) -> u64 {
        self.phys_max_off - self.pool_create_len
    }
}

/// The physical offset of logical offset `off` (at or after the creation
/// record).
pub fn log_to_phys(off: u64, p: &HistoryPhys) -> u64 {
    let ring = p.ring().max(1);
    (off.saturating_sub(p.pool_create_len)) % ring + p.pool_create_len
}

/// Read `len` bytes of the log at logical offset `off` (past the creation
/// record), following the wrap: `read(phys_off, len)`.
fn read_logical(
    p: &HistoryPhys,
    off: u64,
    len: u64,
    read: &mut dyn FnMut(u64, usize) -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len as usize);
    let mut pos = off;
    while (out.len() as u64) < len {
        let phys = log_to_phys(pos, p);
        let n = (len - out.len() as u64).min(p.phys_max_off - phys);
        if n == 0 {
            return Err(Error::corrupt("history", "empty ring"));
        }
        let b = read(phys, n as usize)?;
        if b.len() as u64 != n {
            return Err(Error::truncated("history data", n as usize, b.len()));
        }
        out.extend_from_slice(&b);
        pos += n;
    }
    Ok(out)
}

/// The readable log's bytes: the creation record, then the live part of
/// the ring, in logical order.
pub fn read_log(
    p: &HistoryPhys,
    read: &mut dyn FnMut(u64, usize) -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    p.check()?;
    let mut out = Vec::new();
    if p.pool_create_len > 0 {
        let b = read(0, p.pool_create_len as usize)?;
        if b.len() as u64 != p.pool_create_len {
            return Err(Error::truncated(
                "history creation record",
                p.pool_create_len as usize,
                b.len(),
            ));
        }
        out = b;
    }
    let start = p.bof.max(p.pool_create_len);
    if p.eof > start {
        out.extend(read_logical(p, start, p.eof - start, read)?);
    }
    Ok(out)
}

/// Split a log into its records' packed nvlists, checking every length.
/// The offsets in errors are positions in the log as [`read_log`] returns it.
pub fn split_records(log: &[u8]) -> Result<Vec<&[u8]>> {
    let mut v = Vec::new();
    let mut pos = 0usize;
    while pos < log.len() {
        let lb = log.get(pos..pos + 8).ok_or_else(|| {
            Error::corrupt(
                "history",
                format!(
                    "record at {pos}: {} bytes left, a length takes 8",
                    log.len() - pos
                ),
            )
        })?;
        let len = u64::from_le_bytes(lb.try_into().unwrap_or([0; 8]));
        let body = usize::try_from(len)
            .ok()
            .filter(|&n| n > 0)
            .and_then(|n| log.get(pos + 8..(pos + 8).checked_add(n)?))
            .ok_or_else(|| {
                Error::corrupt(
                    "history",
                    format!(
                        "record at {pos}: length {len} runs past the end of the log ({} bytes)",
                        log.len()
                    ),
                )
            })?;
        v.push(body);
        pos += 8 + body.len();
    }
    Ok(v)
}

/// Append one packed record (its length is prepended here) to the log
/// described by `p`, which is updated: the oldest records after the
/// creation record are dropped while the room left is not larger than
/// what is written; the first record ever written becomes the creation
/// record. `read(phys, len)` reads the stored bytes (to find the lengths of
/// the records dropped), `write(phys, bytes)` stores bytes.
pub fn append(
    p: &mut HistoryPhys,
    record: &[u8],
    read: &mut dyn FnMut(u64, usize) -> Result<Vec<u8>>,
    write: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    p.check()?;
    let mut bytes = (record.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(record);
    let len = bytes.len() as u64;
    if len >= p.ring() {
        return Err(Error::Invalid(format!(
            "history record of {len} bytes does not fit a log of {}",
            p.ring()
        )));
    }
    // Drop the oldest records until the record fits.
    while p.ring() - (p.eof - p.bof) <= len {
        if p.bof >= p.eof {
            return Err(Error::corrupt("history", "no record left to drop"));
        }
        let lb = read_logical(p, p.bof, 8, read)?;
        let reclen = u64::from_le_bytes(lb.as_slice().try_into().unwrap_or([0; 8]));
        let next = p.bof.saturating_add(8).saturating_add(reclen);
        if reclen == 0 || next > p.eof {
            return Err(Error::corrupt(
                "history",
                format!(
                    "record at {}: length {reclen} runs past the end {}",
                    p.bof, p.eof
                ),
            ));
        }
        p.bof = next;
        p.records_lost += 1;
    }
    let mut done = 0u64;
    while done < len {
        let phys = log_to_phys(p.eof + done, p);
        let n = (len - done).min(p.phys_max_off - phys);
        write(phys, &bytes[done as usize..(done + n) as usize])?;
        done += n;
    }
    p.eof += len;
    if p.pool_create_len == 0 {
        p.pool_create_len = p.eof;
        p.bof = p.eof;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(Vec<u8>);
    impl Mem {
        fn append(&mut self, p: &mut HistoryPhys, rec: &[u8]) -> Result<()> {
            let snap = self.0.clone();
            let buf = std::cell::RefCell::new(&mut self.0);
            append(
                p,
                rec,
                &mut |o, n| Ok(snap[o as usize..o as usize + n].to_vec()),
                &mut |o, b| {
                    buf.borrow_mut()[o as usize..o as usize + b.len()].copy_from_slice(b);
                    Ok(())
                },
            )
        }
        fn records(&self, p: &HistoryPhys) -> Vec<Vec<u8>> {
            let log = read_log(p, &mut |o, n| {
                Ok(self.0[o as usize..o as usize + n].to_vec())
            })
            .expect("log");
            split_records(&log)
                .expect("records")
                .into_iter()
                .map(|r| r.to_vec())
                .collect()
        }
    }

    fn rec(i: usize) -> Vec<u8> {
        // Lengths vary so records wrap at every position.
        vec![i as u8; 5 + i % 13]
    }

    #[test]
    fn a_tiny_ring_wraps_keeping_the_creation_record_and_the_newest() {
        let mut p = HistoryPhys {
            phys_max_off: 128,
            ..Default::default()
        };
        let mut m = Mem(vec![0; 128]);
        let create = b"created".to_vec();
        m.append(&mut p, &create).expect("create record");
        assert_eq!(p.pool_create_len, 15);
        assert_eq!((p.bof, p.eof), (15, 15));
        let mut written = Vec::new();
        for i in 1..200 {
            m.append(&mut p, &rec(i)).expect("append");
            written.push(rec(i));
            let got = m.records(&p);
            assert_eq!(got[0], create, "after record {i}");
            let kept = &got[1..];
            // The newest records, in order, and nothing else.
            assert_eq!(
                kept,
                &written[written.len() - kept.len()..],
                "after record {i}"
            );
            assert_eq!(p.records_lost as usize, written.len() - kept.len());
            // Room left is always positive; live bytes fit the ring.
            assert!(p.eof - p.bof < p.ring());
        }
        assert!(p.records_lost > 100);
    }

    #[test]
    fn a_record_larger_than_the_ring_is_refused() {
        let mut p = HistoryPhys {
            phys_max_off: 64,
            ..Default::default()
        };
        let mut m = Mem(vec![0; 64]);
        m.append(&mut p, b"c").expect("create");
        assert!(m.append(&mut p, &[1u8; 60]).is_err());
    }

    #[test]
    fn damaged_offsets_and_lengths_are_errors() {
        let bad = [
            HistoryPhys {
                phys_max_off: MAX_HISTORY + 1,
                ..Default::default()
            },
            HistoryPhys {
                pool_create_len: 10,
                phys_max_off: 5,
                ..Default::default()
            },
            HistoryPhys {
                phys_max_off: 100,
                bof: 20,
                eof: 10,
                ..Default::default()
            },
            HistoryPhys {
                pool_create_len: 10,
                phys_max_off: 100,
                bof: 10,
                eof: 200,
                ..Default::default()
            },
            HistoryPhys {
                pool_create_len: 10,
                phys_max_off: 100,
                bof: 5,
                eof: 20,
                ..Default::default()
            },
        ];
        for p in bad {
            assert!(HistoryPhys::parse(&p.encode(), false).is_err(), "{p:?}");
        }
        let mut log = 4u64.to_le_bytes().to_vec();
        log.extend_from_slice(b"abcd");
        assert_eq!(split_records(&log).expect("ok").len(), 1);
        log[0] = 5;
        assert!(split_records(&log).is_err());
        assert!(split_records(&log[..6]).is_err());
        log[0] = 0;
        assert!(split_records(&log).is_err());
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(1);
        assert!(split_records(&huge).is_err());
    }

    #[test]
    fn new_log_size_follows_the_pool() {
        assert_eq!(HistoryPhys::new(96 << 20, true).phys_max_off, MIN_HISTORY);
        assert_eq!(
            HistoryPhys::new(1 << 38, true).phys_max_off,
            (1u64 << 38) / 1000
        );
        assert_eq!(HistoryPhys::new(u64::MAX, true).phys_max_off, MAX_HISTORY);
        assert_eq!(HistoryPhys::new(95_944_700, false).phys_max_off, 959_447);
        assert_eq!(HistoryPhys::new(8 << 20, false).phys_max_off, MIN_HISTORY);
        assert_eq!(
            HistoryPhys::new(u64::MAX, false).phys_max_off,
            MAX_HISTORY_V23
        );
    }
}
