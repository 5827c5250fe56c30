//! XDR-packed name/value lists (`nvlist_t`), as stored in vdev labels, the MOS
//! config object and send streams. See FORMAT.md §1.4.
//!
//! Decoding is defensive: every length is checked against the remaining
//! buffer, nesting depth is bounded ([`MAX_DEPTH`]), and element counts are
//! bounded by the bytes left, so a fuzzed nvlist costs at most linear work.
//! Encoding computes `decode_size` exactly as libnvpair does, so OpenZFS and
//! zfs-fuse accept what we pack.
//!
//! Wire layout (all integers big-endian): a 4-byte stream header
//! (`encoding`, `endian`, 0, 0) followed by one nvlist body. A body is
//! `version` (0), `nvflag`, a sequence of pairs, and a terminator of two zero
//! int32s. A pair is `encode_size`, `decode_size`, name (XDR string),
//! `data_type`, `nelem`, value. The decoder walks the stream sequentially (as
//! libnvpair does) and stops at the first pair whose `decode_size` is zero.

use crate::error::{Error, Result};
use std::fmt::Write as _;

/// Deepest nesting of embedded nvlists accepted when decoding.
pub const MAX_DEPTH: usize = 64;

/// `nvl_nvflag` value for lists with unique names.
pub const NV_UNIQUE_NAME: u32 = 1;
/// Stream header encoding byte for XDR.
pub const NV_ENCODE_XDR: u8 = 1;
/// Stream header encoding byte for the native encoding.
pub const NV_ENCODE_NATIVE: u8 = 0;

/// One typed value (`data_type_t` numbers in comments).
#[derive(Debug, Clone, PartialEq)]
pub enum NvValue {
    /// 1: a flag with no value.
    Boolean,
    Byte(u8),                 // 2
    Int16(i16),               // 3
    Uint16(u16),              // 4
    Int32(i32),               // 5
    Uint32(u32),              // 6
    Int64(i64),               // 7
    Uint64(u64),              // 8
    String(String),           // 9 (invalid UTF-8 is replaced lossily)
    ByteArray(Vec<u8>),       // 10
    Int16Array(Vec<i16>),     // 11
    Uint16Array(Vec<u16>),    // 12
    Int32Array(Vec<i32>),     // 13
    Uint32Array(Vec<u32>),    // 14
    Int64Array(Vec<i64>),     // 15
    Uint64Array(Vec<u64>),    // 16
    StringArray(Vec<String>), // 17
    Hrtime(i64),              // 18
    NvList(NvList),           // 19
    NvListArray(Vec<NvList>), // 20
    BooleanValue(bool),       // 21
    Int8(i8),                 // 22
    Uint8(u8),                // 23
    BooleanArray(Vec<bool>),  // 24
    Int8Array(Vec<i8>),       // 25
    Uint8Array(Vec<u8>),      // 26
    Double(f64),              // 27
}

impl NvValue {
    /// The `data_type_t` number of this value.
    pub fn type_code(&self) -> u32 {
        match self {
            NvValue::Boolean => 1,
            NvValue::Byte(_) => 2,
            NvValue::Int16(_) => 3,
            NvValue::Uint16(_) => 4,
            NvValue::Int32(_) => 5,
            NvValue::Uint32(_) => 6,
            NvValue::Int64(_) => 7,
            NvValue::Uint64(_) => 8,
            NvValue::String(_) => 9,
            NvValue::ByteArray(_) => 10,
            NvValue::Int16Array(_) => 11,
            NvValue::Uint16Array(_) => 12,
            NvValue::Int32Array(_) => 13,
            NvValue::Uint32Array(_) => 14,
            NvValue::Int64Array(_) => 15,
            NvValue::Uint64Array(_) => 16,
            NvValue::StringArray(_) => 17,
            NvValue::Hrtime(_) => 18,
            NvValue::NvList(_) => 19,
            NvValue::NvListArray(_) => 20,
            NvValue::BooleanValue(_) => 21,
            NvValue::Int8(_) => 22,
            NvValue::Uint8(_) => 23,
            NvValue::BooleanArray(_) => 24,
            NvValue::Int8Array(_) => 25,
            NvValue::Uint8Array(_) => 26,
            NvValue::Double(_) => 27,
        }
    }

    /// Number of elements as stored in `nelem` (0 for BOOLEAN, 1 for scalars).
    pub fn nelem(&self) -> usize {
        match self {
            NvValue::Boolean => 0,
            NvValue::ByteArray(v) | NvValue::Uint8Array(v) => v.len(),
            NvValue::Int16Array(v) => v.len(),
            NvValue::Uint16Array(v) => v.len(),
            NvValue::Int32Array(v) => v.len(),
            NvValue::Uint32Array(v) => v.len(),
            NvValue::Int64Array(v) => v.len(),
            NvValue::Uint64Array(v) => v.len(),
            NvValue::StringArray(v) => v.len(),
            NvValue::NvListArray(v) => v.len(),
            NvValue::BooleanArray(v) => v.len(),
            NvValue::Int8Array(v) => v.len(),
            _ => 1,
        }
    }

    /// Size of the value in libnvpair's native in-memory representation
    /// (the `value_sz` of `NVP_SIZE_CALC`).
    fn native_value_size(&self) -> usize {
        match self {
            NvValue::Boolean => 0,
            NvValue::Byte(_) | NvValue::Int8(_) | NvValue::Uint8(_) => 1,
            NvValue::Int16(_) | NvValue::Uint16(_) => 2,
            NvValue::Int32(_) | NvValue::Uint32(_) | NvValue::BooleanValue(_) => 4,
            NvValue::Int64(_) | NvValue::Uint64(_) | NvValue::Hrtime(_) | NvValue::Double(_) => 8,
            NvValue::String(s) => s.len() + 1,
            NvValue::ByteArray(v) | NvValue::Uint8Array(v) => v.len(),
            NvValue::Int8Array(v) => v.len(),
            NvValue::Int16Array(v) => v.len() * 2,
            NvValue::Uint16Array(v) => v.len() * 2,
            NvValue::Int32Array(v) => v.len() * 4,
            NvValue::Uint32Array(v) => v.len() * 4,
            NvValue::BooleanArray(v) => v.len() * 4,
            NvValue::Int64Array(v) => v.len() * 8,
            NvValue::Uint64Array(v) => v.len() * 8,
            NvValue::StringArray(v) => v.iter().map(|s| 8 + s.len() + 1).sum(),
            NvValue::NvList(_) => NVLIST_NATIVE_SIZE,
            NvValue::NvListArray(v) => v.len() * (8 + NVLIST_NATIVE_SIZE),
        }
    }

    /// Integer value widened to u64 (two's complement for signed types).
    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            NvValue::Byte(v) | NvValue::Uint8(v) => v as u64,
            NvValue::Int8(v) => v as i64 as u64,
            NvValue::Int16(v) => v as i64 as u64,
            NvValue::Uint16(v) => v as u64,
            NvValue::Int32(v) => v as i64 as u64,
            NvValue::Uint32(v) => v as u64,
            NvValue::Int64(v) | NvValue::Hrtime(v) => v as u64,
            NvValue::Uint64(v) => v,
            NvValue::BooleanValue(b) => b as u64,
            _ => return None,
        })
    }
}

/// sizeof(nvpair_t) in libnvpair's native form.
const NVPAIR_NATIVE_HDR: usize = 16;
/// sizeof(nvlist_t) in libnvpair's native form.
const NVLIST_NATIVE_SIZE: usize = 24;

fn nv_align8(x: usize) -> usize {
    (x + 7) & !7
}

fn align4(x: usize) -> usize {
    (x + 3) & !3
}

/// `decode_size` of a pair: libnvpair's `NVP_SIZE_CALC(name_sz, value_sz)`.
pub fn native_pair_size(name: &str, value: &NvValue) -> usize {
    nv_align8(NVPAIR_NATIVE_HDR + name.len() + 1) + nv_align8(value.native_value_size())
}

/// An ordered list of name/value pairs (insertion order kept; names unique in practice).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NvList {
    /// `nvl_nvflag` (1 = NV_UNIQUE_NAME for everything ZFS writes).
    pub flags: u32,
    pub pairs: Vec<(String, NvValue)>,
}

/// Sequential big-endian XDR reader over a byte slice.
struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                Error::truncated(
                    format!("nvlist: {what}"),
                    self.pos.saturating_add(n),
                    self.buf.len(),
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Length-prefixed XDR string, padded to 4.
    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u32(what)? as usize;
        if len > self.remaining() {
            return Err(Error::truncated(
                format!("nvlist: {what}"),
                self.pos.saturating_add(len),
                self.buf.len(),
            ));
        }
        let b = self.take(len, what)?;
        let s = String::from_utf8_lossy(b).into_owned();
        let pad = align4(len) - len;
        self.take(pad, what)?;
        Ok(s)
    }

    /// Opaque bytes padded to 4 (no count word).
    fn opaque(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        let b = self.take(n, what)?.to_vec();
        self.take(align4(n) - n, what)?;
        Ok(b)
    }

    /// The count word of an `xdr_array`, which must equal `nelem`.
    fn array_count(&mut self, nelem: usize, elem_size: usize, what: &str) -> Result<()> {
        let n = self.u32(what)? as usize;
        if n != nelem {
            return Err(Error::corrupt(
                format!("nvlist: {what}"),
                format!("array count {n} != nelem {nelem}"),
            ));
        }
        if nelem.saturating_mul(elem_size) > self.remaining() {
            return Err(Error::truncated(
                format!("nvlist: {what}"),
                self.pos.saturating_add(nelem.saturating_mul(elem_size)),
                self.buf.len(),
            ));
        }
        Ok(())
    }
}

/// Big-endian XDR writer.
struct XdrWriter {
    out: Vec<u8>,
}

impl XdrWriter {
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.u32(v as u32);
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn opaque(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
        let pad = align4(b.len()) - b.len();
        self.out.resize(self.out.len() + pad, 0);
    }
    fn string(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.opaque(s.as_bytes());
    }
}

fn xdr_string_size(s: &str) -> usize {
    4 + align4(s.len())
}

/// Size in bytes of the XDR body of an embedded nvlist (version, flags, pairs, terminator).
fn body_encoded_size(nvl: &NvList) -> usize {
    8 + nvl
        .pairs
        .iter()
        .map(|(n, v)| pair_encoded_size(n, v))
        .sum::<usize>()
        + 8
}

/// `encode_size` of a pair: the total XDR bytes including the size words.
fn pair_encoded_size(name: &str, value: &NvValue) -> usize {
    let hdr = 4 + 4 + xdr_string_size(name) + 4 + 4;
    let v = match value {
        NvValue::Boolean => 0,
        NvValue::BooleanValue(_)
        | NvValue::Byte(_)
        | NvValue::Int8(_)
        | NvValue::Uint8(_)
        | NvValue::Int16(_)
        | NvValue::Uint16(_)
        | NvValue::Int32(_)
        | NvValue::Uint32(_) => 4,
        NvValue::Int64(_) | NvValue::Uint64(_) | NvValue::Hrtime(_) | NvValue::Double(_) => 8,
        NvValue::String(s) => xdr_string_size(s),
        NvValue::ByteArray(v) => align4(v.len()),
        NvValue::BooleanArray(v) => 4 + 4 * v.len(),
        NvValue::Int8Array(v) => 4 + 4 * v.len(),
        NvValue::Uint8Array(v) => 4 + 4 * v.len(),
        NvValue::Int16Array(v) => 4 + 4 * v.len(),
        NvValue::Uint16Array(v) => 4 + 4 * v.len(),
        NvValue::Int32Array(v) => 4 + 4 * v.len(),
        NvValue::Uint32Array(v) => 4 + 4 * v.len(),
        NvValue::Int64Array(v) => 4 + 8 * v.len(),
        NvValue::Uint64Array(v) => 4 + 8 * v.len(),
        NvValue::StringArray(v) => v.iter().map(|s| xdr_string_size(s)).sum(),
        NvValue::NvList(l) => body_encoded_size(l),
        NvValue::NvListArray(v) => v.iter().map(body_encoded_size).sum(),
    };
    hdr + v
}

fn encode_body(nvl: &NvList, w: &mut XdrWriter) {
    w.i32(0); // nvl_version
    w.u32(nvl.flags);
    for (name, value) in &nvl.pairs {
        encode_pair(name, value, w);
    }
    w.u32(0);
    w.u32(0);
}

fn encode_pair(name: &str, value: &NvValue, w: &mut XdrWriter) {
    w.u32(pair_encoded_size(name, value) as u32);
    w.u32(native_pair_size(name, value) as u32);
    w.string(name);
    w.u32(value.type_code());
    w.u32(value.nelem() as u32);
    match value {
        NvValue::Boolean => {}
        NvValue::BooleanValue(b) => w.i32(*b as i32),
        NvValue::Byte(v) | NvValue::Uint8(v) => w.u32(*v as u32),
        NvValue::Int8(v) => w.i32(*v as i32),
        NvValue::Int16(v) => w.i32(*v as i32),
        NvValue::Uint16(v) => w.u32(*v as u32),
        NvValue::Int32(v) => w.i32(*v),
        NvValue::Uint32(v) => w.u32(*v),
        NvValue::Int64(v) | NvValue::Hrtime(v) => w.u64(*v as u64),
        NvValue::Uint64(v) => w.u64(*v),
        NvValue::Double(v) => w.u64(v.to_bits()),
        NvValue::String(s) => w.string(s),
        NvValue::ByteArray(v) => w.opaque(v),
        NvValue::BooleanArray(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|b| w.i32(*b as i32));
        }
        NvValue::Int8Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.i32(*x as i32));
        }
        NvValue::Uint8Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.u32(*x as u32));
        }
        NvValue::Int16Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.i32(*x as i32));
        }
        NvValue::Uint16Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.u32(*x as u32));
        }
        NvValue::Int32Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.i32(*x));
        }
        NvValue::Uint32Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.u32(*x));
        }
        NvValue::Int64Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.u64(*x as u64));
        }
        NvValue::Uint64Array(v) => {
            w.u32(v.len() as u32);
            v.iter().for_each(|x| w.u64(*x));
        }
        NvValue::StringArray(v) => v.iter().for_each(|s| w.string(s)),
        NvValue::NvList(l) => encode_body(l, w),
        NvValue::NvListArray(v) => v.iter().for_each(|l| encode_body(l, w)),
    }
}

/// Decode an nvlist body at the reader's position.
fn decode_body(r: &mut XdrReader<'_>, depth: usize) -> Result<NvList> {
    if depth > MAX_DEPTH {
        return Err(Error::corrupt(
            "nvlist",
            format!("nesting deeper than {MAX_DEPTH}"),
        ));
    }
    let version = r.i32("nvl_version")?;
    if version != 0 {
        return Err(Error::unsupported(
            "nvlist",
            format!("nvl_version {version}"),
        ));
    }
    let flags = r.u32("nvl_nvflag")?;
    let mut pairs = Vec::new();
    loop {
        let encode_size = r.u32("pair encode_size")? as usize;
        let decode_size = r.u32("pair decode_size")? as usize;
        if decode_size == 0 {
            // End of list (libnvpair only looks at decode_size).
            break;
        }
        let name = r.string("pair name")?;
        let what = format!("pair '{name}'");
        let dtype = r.u32(&what)?;
        let nelem = r.u32(&what)? as usize;
        let value = decode_value(r, dtype, nelem, depth, &what)?;
        // encode_size/decode_size are informational for a sequential
        // reader (libnvpair does not check them either); other writers'
        // native sizes (e.g. 32-bit hosts) may legitimately differ.
        let _ = encode_size;
        pairs.push((name, value));
    }
    Ok(NvList { flags, pairs })
}

fn decode_value(
    r: &mut XdrReader<'_>,
    dtype: u32,
    nelem: usize,
    depth: usize,
    what: &str,
) -> Result<NvValue> {
    // Scalars must have exactly one element, BOOLEAN none.
    let want_scalar = |n: usize| -> Result<()> {
        if n != 1 {
            Err(Error::corrupt(
                format!("nvlist: {what}"),
                format!("type {dtype} with nelem {n}"),
            ))
        } else {
            Ok(())
        }
    };
    // Every array element costs at least 1 byte (byte arrays) or 4 (XDR ints).
    let min_elem = match dtype {
        10 => 1,
        20 => 16,
        _ => 4,
    };
    if nelem.saturating_mul(min_elem) > r.remaining() {
        return Err(Error::truncated(
            format!("nvlist: {what}"),
            r.pos.saturating_add(nelem.saturating_mul(min_elem)),
            r.buf.len(),
        ));
    }
    Ok(match dtype {
        1 => {
            if nelem != 0 {
                return Err(Error::corrupt(
                    format!("nvlist: {what}"),
                    "BOOLEAN with nonzero nelem",
                ));
            }
            NvValue::Boolean
        }
        2 => {
            want_scalar(nelem)?;
            NvValue::Byte(r.u32(what)? as u8)
        }
        3 => {
            want_scalar(nelem)?;
            NvValue::Int16(r.i32(what)? as i16)
        }
        4 => {
            want_scalar(nelem)?;
            NvValue::Uint16(r.u32(what)? as u16)
        }
        5 => {
            want_scalar(nelem)?;
            NvValue::Int32(r.i32(what)?)
        }
        6 => {
            want_scalar(nelem)?;
            NvValue::Uint32(r.u32(what)?)
        }
        7 => {
            want_scalar(nelem)?;
            NvValue::Int64(r.u64(what)? as i64)
        }
        8 => {
            want_scalar(nelem)?;
            NvValue::Uint64(r.u64(what)?)
        }
        9 => {
            want_scalar(nelem)?;
            NvValue::String(r.string(what)?)
        }
        10 => NvValue::ByteArray(r.opaque(nelem, what)?),
        11 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.i32(what)? as i16);
            }
            NvValue::Int16Array(v)
        }
        12 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.u32(what)? as u16);
            }
            NvValue::Uint16Array(v)
        }
        13 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.i32(what)?);
            }
            NvValue::Int32Array(v)
        }
        14 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.u32(what)?);
            }
            NvValue::Uint32Array(v)
        }
        15 => {
            r.array_count(nelem, 8, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.u64(what)? as i64);
            }
            NvValue::Int64Array(v)
        }
        16 => {
            r.array_count(nelem, 8, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.u64(what)?);
            }
            NvValue::Uint64Array(v)
        }
        17 => {
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.string(what)?);
            }
            NvValue::StringArray(v)
        }
        18 => {
            want_scalar(nelem)?;
            NvValue::Hrtime(r.u64(what)? as i64)
        }
        19 => {
            want_scalar(nelem)?;
            NvValue::NvList(decode_body(r, depth + 1)?)
        }
        20 => {
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(decode_body(r, depth + 1)?);
            }
            NvValue::NvListArray(v)
        }
        21 => {
            want_scalar(nelem)?;
            NvValue::BooleanValue(r.i32(what)? != 0)
        }
        22 => {
            want_scalar(nelem)?;
            NvValue::Int8(r.i32(what)? as i8)
        }
        23 => {
            want_scalar(nelem)?;
            NvValue::Uint8(r.u32(what)? as u8)
        }
        24 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.i32(what)? != 0);
            }
            NvValue::BooleanArray(v)
        }
        25 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.i32(what)? as i8);
            }
            NvValue::Int8Array(v)
        }
        26 => {
            r.array_count(nelem, 4, what)?;
            let mut v = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                v.push(r.u32(what)? as u8);
            }
            NvValue::Uint8Array(v)
        }
        27 => {
            want_scalar(nelem)?;
            NvValue::Double(f64::from_bits(r.u64(what)?))
        }
        t => {
            return Err(Error::corrupt(
                format!("nvlist: {what}"),
                format!("unknown data type {t}"),
            ))
        }
    })
}

fn pad(out: &mut String, indent: usize) {
    let _ = write!(out, "{:indent$}", "");
}

impl NvList {
    /// An empty list with NV_UNIQUE_NAME.
    pub fn new() -> Self {
        NvList {
            flags: NV_UNIQUE_NAME,
            pairs: Vec::new(),
        }
    }
    /// Decode a packed nvlist including its 4-byte header (XDR encoding 1; native 0 may be rejected as unsupported).
    /// Trailing bytes after the terminator are ignored (labels are zero-padded).
    pub fn unpack(buf: &[u8]) -> Result<NvList> {
        if buf.len() < 4 {
            return Err(Error::truncated("nvlist header", 4, buf.len()));
        }
        match buf[0] {
            NV_ENCODE_XDR => {}
            NV_ENCODE_NATIVE => {
                return Err(Error::unsupported("nvlist", "native encoding"));
            }
            e => {
                return Err(Error::corrupt(
                    "nvlist header",
                    format!("unknown encoding {e}"),
                ))
            }
        }
        let mut r = XdrReader { buf, pos: 4 };
        decode_body(&mut r, 0)
    }
    /// Pack as XDR with the 4-byte header (`01 01 00 00` on little-endian hosts).
    pub fn pack_xdr(&self) -> Vec<u8> {
        let mut w = XdrWriter {
            out: Vec::with_capacity(4 + body_encoded_size(self)),
        };
        w.out.push(NV_ENCODE_XDR);
        w.out.push(crate::bytes::HOST_LITTLE_ENDIAN as u8);
        w.out.push(0);
        w.out.push(0);
        encode_body(self, &mut w);
        w.out
    }
    /// Size in bytes of [`pack_xdr`](Self::pack_xdr)'s output (what `nvlist_size(NV_ENCODE_XDR)` reports).
    pub fn packed_size(&self) -> usize {
        4 + body_encoded_size(self)
    }
    /// First value named `name`.
    pub fn get(&self, name: &str) -> Option<&NvValue> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The value of pair `name`, to change in place.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut NvValue> {
        self.pairs
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
    /// Value as u64 (accepts Uint64, Int64, Uint32, Int32... any integer type), else None.
    pub fn get_u64(&self, name: &str) -> Option<u64> {
        self.get(name).and_then(NvValue::as_u64)
    }
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            NvValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn get_nvlist(&self, name: &str) -> Option<&NvList> {
        match self.get(name)? {
            NvValue::NvList(l) => Some(l),
            _ => None,
        }
    }
    pub fn get_nvlist_array(&self, name: &str) -> Option<&[NvList]> {
        match self.get(name)? {
            NvValue::NvListArray(l) => Some(l),
            _ => None,
        }
    }
    pub fn get_u64_array(&self, name: &str) -> Option<&[u64]> {
        match self.get(name)? {
            NvValue::Uint64Array(l) => Some(l),
            _ => None,
        }
    }
    /// Whether a pair with this name exists (of any type).
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
    /// Replace or append a pair.
    pub fn set(&mut self, name: &str, value: NvValue) {
        if let Some(pos) = self.pairs.iter().position(|(n, _)| n == name) {
            self.pairs[pos].1 = value;
            // Drop any later duplicates so the name is unique.
            let mut i = pos + 1;
            while i < self.pairs.len() {
                if self.pairs[i].0 == name {
                    self.pairs.remove(i);
                } else {
                    i += 1;
                }
            }
        } else {
            self.pairs.push((name.to_string(), value));
        }
    }
    /// Remove every pair with this name.
    pub fn remove(&mut self, name: &str) {
        self.pairs.retain(|(n, _)| n != name);
    }
    /// Render like `zdb -C` does (indented `name: value` lines, nested lists indented by 4).
    pub fn dump(&self, indent: usize, out: &mut String) {
        for (name, value) in &self.pairs {
            dump_pair(name, value, indent, out);
        }
    }
}

fn dump_scalar(name: &str, v: impl std::fmt::Display, indent: usize, out: &mut String) {
    pad(out, indent);
    let _ = writeln!(out, "{name}: {v}");
}

fn dump_array<T: std::fmt::Display>(name: &str, v: &[T], indent: usize, out: &mut String) {
    for (i, x) in v.iter().enumerate() {
        pad(out, indent);
        let _ = writeln!(out, "{name}[{i}]: {x}");
    }
}

fn dump_pair(name: &str, value: &NvValue, indent: usize, out: &mut String) {
    match value {
        NvValue::Boolean => {
            pad(out, indent);
            let _ = writeln!(out, "{name}");
        }
        NvValue::BooleanValue(b) => dump_scalar(name, b, indent, out),
        NvValue::Byte(v) | NvValue::Uint8(v) => dump_scalar(name, v, indent, out),
        NvValue::Int8(v) => dump_scalar(name, v, indent, out),
        NvValue::Int16(v) => dump_scalar(name, v, indent, out),
        NvValue::Uint16(v) => dump_scalar(name, v, indent, out),
        NvValue::Int32(v) => dump_scalar(name, v, indent, out),
        NvValue::Uint32(v) => dump_scalar(name, v, indent, out),
        NvValue::Int64(v) => dump_scalar(name, v, indent, out),
        NvValue::Uint64(v) => dump_scalar(name, v, indent, out),
        NvValue::String(s) => dump_scalar(name, format_args!("'{s}'"), indent, out),
        NvValue::ByteArray(v) | NvValue::Uint8Array(v) => dump_array(name, v, indent, out),
        NvValue::Int8Array(v) => dump_array(name, v, indent, out),
        NvValue::Int16Array(v) => dump_array(name, v, indent, out),
        NvValue::Uint16Array(v) => dump_array(name, v, indent, out),
        NvValue::Int32Array(v) => dump_array(name, v, indent, out),
        NvValue::Uint32Array(v) => dump_array(name, v, indent, out),
        NvValue::Int64Array(v) => dump_array(name, v, indent, out),
        NvValue::Uint64Array(v) => dump_array(name, v, indent, out),
        NvValue::StringArray(v) => {
            for (i, s) in v.iter().enumerate() {
                pad(out, indent);
                let _ = writeln!(out, "{name}[{i}]: '{s}'");
            }
        }
        NvValue::NvList(l) => {
            pad(out, indent);
            let _ = writeln!(out, "{name}:");
            l.dump(indent + 4, out);
        }
        NvValue::NvListArray(v) => {
            for (i, l) in v.iter().enumerate() {
                pad(out, indent);
                let _ = writeln!(out, "{name}[{i}]:");
                l.dump(indent + 4, out);
            }
        }
        // libnvpair's dumper has no case for these; it prints this (unindented).
        NvValue::Hrtime(_) | NvValue::BooleanArray(_) | NvValue::Double(_) => {
            let _ = writeln!(out, "bad config type {} for {name}", value.type_code());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of FORMAT.md §1.4.
    const VERSION_5000: [u8; 56] = [
        0x01, 0x01, 0x00, 0x00, // header
        0, 0, 0, 0, 0, 0, 0, 1, // version 0, nvflag 1
        0, 0, 0, 0x24, 0, 0, 0, 0x20, // encode 36, decode 32
        0, 0, 0, 7, b'v', b'e', b'r', b's', b'i', b'o', b'n', 0, // name
        0, 0, 0, 8, 0, 0, 0, 1, // UINT64, nelem 1
        0, 0, 0, 0, 0, 0, 0x13, 0x88, // 5000
        0, 0, 0, 0, 0, 0, 0, 0, // terminator
    ];

    #[test]
    fn golden_decode() {
        let nvl = NvList::unpack(&VERSION_5000).unwrap();
        assert_eq!(nvl.flags, 1);
        assert_eq!(nvl.get_u64("version"), Some(5000));
        assert_eq!(nvl.pairs.len(), 1);
    }

    #[test]
    fn golden_encode() {
        let mut nvl = NvList::new();
        nvl.set("version", NvValue::Uint64(5000));
        let packed = nvl.pack_xdr();
        if crate::bytes::HOST_LITTLE_ENDIAN {
            assert_eq!(packed, VERSION_5000);
        }
        assert_eq!(packed.len(), nvl.packed_size());
    }

    #[test]
    fn trailing_zeros_ignored() {
        let mut b = VERSION_5000.to_vec();
        b.extend_from_slice(&[0u8; 100]);
        assert_eq!(NvList::unpack(&b).unwrap().get_u64("version"), Some(5000));
    }

    #[test]
    fn decode_sizes() {
        // Hand-computed NVP_SIZE_CALC values.
        assert_eq!(native_pair_size("version", &NvValue::Uint64(1)), 32);
        assert_eq!(
            native_pair_size("name", &NvValue::String("tank".into())),
            24 + 8
        );
        assert_eq!(
            native_pair_size("vdev_tree", &NvValue::NvList(NvList::new())),
            32 + 24
        );
        assert_eq!(
            native_pair_size("children", &NvValue::NvListArray(vec![NvList::new(); 2])),
            32 + 64
        );
        assert_eq!(native_pair_size("features_for_read", &NvValue::Boolean), 40);
        assert_eq!(
            native_pair_size("s", &NvValue::StringArray(vec!["ab".into(), "".into()])),
            24 + 24
        );
    }

    fn sample() -> NvList {
        let mut leaf = NvList::new();
        leaf.set("type", NvValue::String("file".into()));
        leaf.set("id", NvValue::Uint64(0));
        leaf.set("guid", NvValue::Uint64(0x1234_5678_9abc_def0));
        leaf.set("path", NvValue::String("/tmp/a".into()));
        let mut top = NvList::new();
        top.set("type", NvValue::String("mirror".into()));
        top.set("children", NvValue::NvListArray(vec![leaf.clone(), leaf]));
        let mut nvl = NvList::new();
        nvl.set("version", NvValue::Uint64(23));
        nvl.set("name", NvValue::String("tank".into()));
        nvl.set("vdev_tree", NvValue::NvList(top));
        nvl.set("features_for_read", NvValue::NvList(NvList::new()));
        nvl.set("flag", NvValue::Boolean);
        nvl.set("hole_array", NvValue::Uint64Array(vec![1, 2, 3]));
        nvl.set("b", NvValue::ByteArray(vec![1, 2, 3, 4, 5]));
        nvl.set("i8", NvValue::Int8(-3));
        nvl.set("u16a", NvValue::Uint16Array(vec![7, 8]));
        nvl.set("sa", NvValue::StringArray(vec!["x".into(), "yz".into()]));
        nvl.set("bv", NvValue::BooleanValue(true));
        nvl.set("hr", NvValue::Hrtime(-5));
        nvl.set("d", NvValue::Double(1.5));
        nvl.set("ba", NvValue::BooleanArray(vec![true, false]));
        nvl.set("i64a", NvValue::Int64Array(vec![-1, 2]));
        nvl.set("i32", NvValue::Int32(-7));
        nvl.set("u32a", NvValue::Uint32Array(vec![9]));
        nvl.set("u8a", NvValue::Uint8Array(vec![200]));
        nvl.set("i8a", NvValue::Int8Array(vec![-2]));
        nvl.set("i16a", NvValue::Int16Array(vec![-300]));
        nvl.set("i32a", NvValue::Int32Array(vec![-70000]));
        nvl.set("byte", NvValue::Byte(255));
        nvl.set("i16", NvValue::Int16(-2));
        nvl.set("u16", NvValue::Uint16(65535));
        nvl.set("u32", NvValue::Uint32(4_000_000_000));
        nvl.set("i64", NvValue::Int64(-9));
        nvl.set("u8", NvValue::Uint8(8));
        nvl
    }

    #[test]
    fn round_trip_all_types() {
        let nvl = sample();
        let packed = nvl.pack_xdr();
        assert_eq!(packed.len(), nvl.packed_size());
        let back = NvList::unpack(&packed).unwrap();
        assert_eq!(back, nvl);
        assert_eq!(back.pack_xdr(), packed);
    }

    #[test]
    fn dump_like_zdb() {
        let mut nvl = NvList::new();
        nvl.set("version", NvValue::Uint64(23));
        nvl.set("name", NvValue::String("tank".into()));
        let mut leaf = NvList::new();
        leaf.set("type", NvValue::String("file".into()));
        let mut top = NvList::new();
        top.set("type", NvValue::String("root".into()));
        top.set("children", NvValue::NvListArray(vec![leaf]));
        nvl.set("vdev_tree", NvValue::NvList(top));
        nvl.set("hole_array", NvValue::Uint64Array(vec![1]));
        nvl.set("com.delphix:hole_birth", NvValue::Boolean);
        let mut s = String::new();
        nvl.dump(4, &mut s);
        assert_eq!(
            s,
            "    version: 23\n    name: 'tank'\n    vdev_tree:\n        type: 'root'\n        children[0]:\n            type: 'file'\n    hole_array[0]: 1\n    com.delphix:hole_birth\n"
        );
    }

    #[test]
    fn set_get_remove() {
        let mut nvl = NvList::new();
        nvl.set("a", NvValue::Uint32(1));
        nvl.set("a", NvValue::Int64(-1));
        assert_eq!(nvl.pairs.len(), 1);
        assert_eq!(nvl.get_u64("a"), Some(u64::MAX));
        assert_eq!(nvl.get_str("a"), None);
        nvl.remove("a");
        assert!(nvl.get("a").is_none());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(NvList::unpack(&[]).is_err());
        assert!(NvList::unpack(&[0, 1, 0, 0]).is_err());
        assert!(NvList::unpack(&VERSION_5000[..30]).is_err());
        // Huge nelem in a uint64 array.
        let mut nvl = NvList::new();
        nvl.set("a", NvValue::Uint64Array(vec![1]));
        let mut p = nvl.pack_xdr();
        // nelem is at 4 + 8 + 8 + 8 (name "a" padded) + 4
        p[32..36].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
        assert!(NvList::unpack(&p).is_err());
    }

    #[test]
    fn depth_bounded() {
        let mut l = NvList::new();
        for _ in 0..(MAX_DEPTH + 5) {
            let mut outer = NvList::new();
            outer.set("n", NvValue::NvList(l));
            l = outer;
        }
        let p = l.pack_xdr();
        assert!(NvList::unpack(&p).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let base = sample().pack_xdr();
        for i in 0..3000 {
            let mut b = base.clone();
            for _ in 0..(1 + i % 8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % b.len();
                b[pos] = (x >> 32) as u8;
            }
            let _ = NvList::unpack(&b);
            let cut = (x as usize >> 8) % b.len();
            let _ = NvList::unpack(&b[..cut]);
        }
        for n in 0..500 {
            let mut b = vec![1u8, 1, 0, 0];
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            let _ = NvList::unpack(&b);
        }
    }
}
