//! Name/value lists in libnvpair's *native* packed encoding (encoding byte
//! 0), the form the pool history's records are packed in (FORMAT.md §1.4
//! describes the XDR form of the same lists, [`crate::nvlist`]).
//!
//! Layout (integers in the byte order the header's `endian` byte names: 1
//! little-endian, 0 big-endian): the 4-byte stream header (`0`, `endian`,
//! 0, 0), then the top list's `version` (i32 = 0) and `nvflag` (u32) —
//! 8 bytes, libnvpair's `nvs_native_nvlist` — followed by its pairs and a
//! terminating zero i32. A pair is a 16-byte
//! header (`size` i32 = the whole pair rounded up to 8, `name_sz` i16 with
//! the NUL, reserved i16, `nelem` i32, `type` i32), the name and its NUL
//! padded to 8 bytes, then the value: scalars in their native width,
//! strings with their NUL, arrays packed; a string array and an nvlist
//! array begin with one zeroed pointer slot (8 bytes) per element. An
//! embedded list's value is its 24-byte `nvlist_t` image (`version`,
//! `nvflag`, a pointer slot written as zero, `flag`, pad); its pairs (and
//! terminator) follow right after the pair that holds it, and for an array
//! each element's pairs in turn.
//!
//! Decoding is defensive like the XDR decoder: every size is checked
//! against the buffer and against the pair that holds it, the nesting depth
//! is bounded ([`crate::nvlist::MAX_DEPTH`]), element counts are bounded by
//! the bytes they need, so hostile input costs linear work and never panics.
//! Encoding produces exactly libnvpair's bytes on a little-endian host.

use crate::error::{Error, Result};
use crate::nvlist::{NvList, NvValue, MAX_DEPTH, NV_ENCODE_NATIVE};

const NVLIST_IMAGE: usize = 24;
/// The top list's header: `version` and `nvflag`.
const TOP_HEADER: usize = 8;
const PAIR_HDR: usize = 16;

fn align8(x: usize) -> usize {
    (x + 7) & !7
}

fn corrupt(what: &str, detail: impl Into<String>) -> Error {
    Error::corrupt(format!("native nvlist: {what}"), detail)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|e| self.buf.get(self.pos..e))
            .ok_or_else(|| {
                Error::truncated(
                    format!("native nvlist: {what}"),
                    n,
                    self.buf.len().saturating_sub(self.pos),
                )
            })?;
        self.pos += n;
        Ok(s)
    }
}

fn int<const N: usize>(b: &[u8], big: bool) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    if big != cfg!(target_endian = "big") {
        a.reverse();
    }
    a
}

fn rd_u32(b: &[u8], off: usize, big: bool, what: &str) -> Result<u32> {
    let s = b
        .get(off..off + 4)
        .ok_or_else(|| corrupt(what, "truncated"))?;
    Ok(u32::from_ne_bytes(int::<4>(s, big)))
}

/// Decode a native-packed nvlist including its 4-byte header. Trailing
/// bytes after the top list's terminator are ignored.
pub fn unpack(buf: &[u8]) -> Result<NvList> {
    let hdr = buf
        .get(..4)
        .ok_or_else(|| Error::truncated("native nvlist header", 4, buf.len()))?;
    if hdr[0] != NV_ENCODE_NATIVE {
        return Err(corrupt(
            "header",
            format!("encoding {} is not native", hdr[0]),
        ));
    }
    let big = match hdr[1] {
        1 => false,
        0 => true,
        e => return Err(corrupt("header", format!("endian byte {e}"))),
    };
    let mut r = Reader { buf, pos: 4, big };
    let img = r.take(TOP_HEADER, "nvlist header")?;
    let mut top = list_header(img, big)?;
    decode_pairs(&mut r, &mut top, 0)?;
    Ok(top)
}

fn list_header(img: &[u8], big: bool) -> Result<NvList> {
    let version = rd_u32(img, 0, big, "nvl_version")?;
    if version != 0 {
        return Err(Error::unsupported(
            "native nvlist",
            format!("nvl_version {version}"),
        ));
    }
    Ok(NvList {
        flags: rd_u32(img, 4, big, "nvl_nvflag")?,
        pairs: Vec::new(),
    })
}

/// The pairs of `list` (its header already read), then those of the lists
/// its pairs embed, up to its terminator.
fn decode_pairs(r: &mut Reader<'_>, list: &mut NvList, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(corrupt("list", format!("nesting deeper than {MAX_DEPTH}")));
    }
    loop {
        let size_b = r.take(4, "pair size")?;
        let size = i32::from_ne_bytes(int::<4>(size_b, r.big));
        if size == 0 {
            return Ok(());
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s >= PAIR_HDR && s % 8 == 0)
            .ok_or_else(|| corrupt("pair", format!("size {size}")))?;
        // The whole pair (its size field already taken) must be present.
        r.pos -= 4;
        let pair = r.take(size, "pair")?;
        let big = r.big;
        let name_sz = u16::from_ne_bytes(int::<2>(&pair[4..6], big)) as usize;
        let nelem = rd_u32(pair, 8, big, "pair nelem")? as usize;
        let dtype = rd_u32(pair, 12, big, "pair type")?;
        let vstart = align8(PAIR_HDR + name_sz);
        if name_sz == 0 || vstart > size {
            return Err(corrupt(
                "pair",
                format!("name size {name_sz} in a pair of {size} bytes"),
            ));
        }
        let name_b = &pair[PAIR_HDR..PAIR_HDR + name_sz];
        if name_b[name_sz - 1] != 0 {
            return Err(corrupt("pair name", "not NUL-terminated"));
        }
        let name = String::from_utf8_lossy(&name_b[..name_sz - 1]).into_owned();
        let what = format!("pair '{name}'");
        let val = &pair[vstart..];
        let value = decode_value(r, val, dtype, nelem, depth, &what)?;
        list.pairs.push((name, value));
    }
}

fn decode_value(
    r: &mut Reader<'_>,
    val: &[u8],
    dtype: u32,
    nelem: usize,
    depth: usize,
    what: &str,
) -> Result<NvValue> {
    let big = r.big;
    let need = |n: usize, w: usize| -> Result<&[u8]> {
        n.checked_mul(w)
            .and_then(|len| val.get(..len))
            .ok_or_else(|| corrupt(what, format!("type {dtype}: {n} elements do not fit")))
    };
    let one = || -> Result<()> {
        if nelem == 1 {
            Ok(())
        } else {
            Err(corrupt(what, format!("type {dtype} with {nelem} elements")))
        }
    };
    macro_rules! scalar {
        ($t:ty, $n:expr, $v:path) => {{
            one()?;
            $v(<$t>::from_ne_bytes(int::<$n>(need(1, $n)?, big)))
        }};
    }
    macro_rules! array {
        ($t:ty, $n:expr, $v:path) => {{
            let b = need(nelem, $n)?;
            $v(b.chunks_exact($n)
                .map(|c| <$t>::from_ne_bytes(int::<$n>(c, big)))
                .collect())
        }};
    }
    Ok(match dtype {
        1 => NvValue::Boolean,
        2 => scalar!(u8, 1, NvValue::Byte),
        3 => scalar!(i16, 2, NvValue::Int16),
        4 => scalar!(u16, 2, NvValue::Uint16),
        5 => scalar!(i32, 4, NvValue::Int32),
        6 => scalar!(u32, 4, NvValue::Uint32),
        7 => scalar!(i64, 8, NvValue::Int64),
        8 => scalar!(u64, 8, NvValue::Uint64),
        9 => {
            one()?;
            let end = val
                .iter()
                .position(|&c| c == 0)
                .ok_or_else(|| corrupt(what, "string not NUL-terminated"))?;
            NvValue::String(String::from_utf8_lossy(&val[..end]).into_owned())
        }
        10 => NvValue::ByteArray(need(nelem, 1)?.to_vec()),
        11 => array!(i16, 2, NvValue::Int16Array),
        12 => array!(u16, 2, NvValue::Uint16Array),
        13 => array!(i32, 4, NvValue::Int32Array),
        14 => array!(u32, 4, NvValue::Uint32Array),
        15 => array!(i64, 8, NvValue::Int64Array),
        16 => array!(u64, 8, NvValue::Uint64Array),
        17 => {
            need(nelem, 8)?;
            let mut rest = &val[nelem * 8..];
            let mut v = Vec::with_capacity(nelem.min(rest.len()));
            for _ in 0..nelem {
                let end = rest
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or_else(|| corrupt(what, "string array element not NUL-terminated"))?;
                v.push(String::from_utf8_lossy(&rest[..end]).into_owned());
                rest = &rest[end + 1..];
            }
            NvValue::StringArray(v)
        }
        18 => scalar!(i64, 8, NvValue::Hrtime),
        19 => {
            one()?;
            let mut l = list_header(need(1, NVLIST_IMAGE)?, big)?;
            decode_pairs(r, &mut l, depth + 1)?;
            NvValue::NvList(l)
        }
        20 => {
            let imgs = nelem
                .checked_mul(8)
                .and_then(|p| val.get(p..))
                .ok_or_else(|| corrupt(what, "nvlist array does not fit"))?;
            let imgs = imgs
                .get(..nelem.saturating_mul(NVLIST_IMAGE))
                .ok_or_else(|| corrupt(what, "nvlist array does not fit"))?;
            let mut v = Vec::with_capacity(nelem);
            for img in imgs.chunks_exact(NVLIST_IMAGE) {
                let mut l = list_header(img, big)?;
                decode_pairs(r, &mut l, depth + 1)?;
                v.push(l);
            }
            NvValue::NvListArray(v)
        }
        21 => {
            one()?;
            NvValue::BooleanValue(i32::from_ne_bytes(int::<4>(need(1, 4)?, big)) != 0)
        }
        22 => scalar!(i8, 1, NvValue::Int8),
        23 => scalar!(u8, 1, NvValue::Uint8),
        24 => {
            let b = need(nelem, 4)?;
            NvValue::BooleanArray(
                b.chunks_exact(4)
                    .map(|c| i32::from_ne_bytes(int::<4>(c, big)) != 0)
                    .collect(),
            )
        }
        25 => NvValue::Int8Array(need(nelem, 1)?.iter().map(|&b| b as i8).collect()),
        26 => NvValue::Uint8Array(need(nelem, 1)?.to_vec()),
        27 => {
            one()?;
            NvValue::Double(f64::from_ne_bytes(int::<8>(need(1, 8)?, big)))
        }
        t => return Err(corrupt(what, format!("unknown data type {t}"))),
    })
}

/// Pack `nvl` in the native encoding of this (little-endian) host, header
/// included: what libnvpair's `nvlist_pack(…, NV_ENCODE_NATIVE)` produces.
pub fn pack(nvl: &NvList) -> Vec<u8> {
    let mut out = vec![NV_ENCODE_NATIVE, cfg!(target_endian = "little") as u8, 0, 0];
    out.extend_from_slice(&list_image(nvl)[..TOP_HEADER]);
    encode_pairs(nvl, &mut out);
    out
}

fn list_image(nvl: &NvList) -> [u8; NVLIST_IMAGE] {
    let mut img = [0u8; NVLIST_IMAGE];
    img[4..8].copy_from_slice(&nvl.flags.to_ne_bytes());
    img
}

fn encode_pairs(nvl: &NvList, out: &mut Vec<u8>) {
    for (name, value) in &nvl.pairs {
        let start = out.len();
        let size = crate::nvlist::native_pair_size(name, value);
        out.extend_from_slice(&(size as i32).to_ne_bytes());
        out.extend_from_slice(&((name.len() + 1) as i16).to_ne_bytes());
        out.extend_from_slice(&0i16.to_ne_bytes());
        let nelem = match value {
            NvValue::Boolean => 0,
            v => v.nelem(),
        };
        out.extend_from_slice(&(nelem as i32).to_ne_bytes());
        out.extend_from_slice(&value.type_code().to_ne_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.resize(start + align8(PAIR_HDR + name.len() + 1), 0);
        encode_value(value, out);
        out.resize(start + size, 0);
        // Embedded lists follow the pair that holds them.
        match value {
            NvValue::NvList(l) => encode_pairs(l, out),
            NvValue::NvListArray(v) => v.iter().for_each(|l| encode_pairs(l, out)),
            _ => {}
        }
    }
    out.extend_from_slice(&0i32.to_ne_bytes());
}

fn encode_value(value: &NvValue, out: &mut Vec<u8>) {
    match value {
        NvValue::Boolean => {}
        NvValue::Byte(v) | NvValue::Uint8(v) => out.push(*v),
        NvValue::Int8(v) => out.push(*v as u8),
        NvValue::Int16(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::Uint16(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::Int32(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::Uint32(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::BooleanValue(b) => out.extend_from_slice(&(*b as i32).to_ne_bytes()),
        NvValue::Int64(v) | NvValue::Hrtime(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::Uint64(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::Double(v) => out.extend_from_slice(&v.to_ne_bytes()),
        NvValue::String(s) => {
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        }
        NvValue::ByteArray(v) | NvValue::Uint8Array(v) => out.extend_from_slice(v),
        NvValue::Int8Array(v) => out.extend(v.iter().map(|&b| b as u8)),
        NvValue::Int16Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::Uint16Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::Int32Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::Uint32Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::BooleanArray(v) => v
            .iter()
            .for_each(|&x| out.extend_from_slice(&(x as i32).to_ne_bytes())),
        NvValue::Int64Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::Uint64Array(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_ne_bytes())),
        NvValue::StringArray(v) => {
            out.resize(out.len() + 8 * v.len(), 0);
            for s in v {
                out.extend_from_slice(s.as_bytes());
                out.push(0);
            }
        }
        NvValue::NvList(l) => out.extend_from_slice(&list_image(l)),
        NvValue::NvListArray(v) => {
            out.resize(out.len() + 8 * v.len(), 0);
            v.iter().for_each(|l| out.extend_from_slice(&list_image(l)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NvList {
        let mut inner = NvList::new();
        inner.set("k", NvValue::Uint64(7));
        let mut l = NvList::new();
        l.set("history time", NvValue::Uint64(1_700_000_000));
        l.set(
            "history command",
            NvValue::String("zpool create tank /dev/x".into()),
        );
        l.set("nested", NvValue::NvList(inner.clone()));
        l.set(
            "arr",
            NvValue::NvListArray(vec![inner.clone(), NvList::new()]),
        );
        l.set(
            "names",
            NvValue::StringArray(vec!["a".into(), "".into(), "bcd".into()]),
        );
        l.set("flag", NvValue::Boolean);
        l.set("b", NvValue::BooleanValue(true));
        l.set("after", NvValue::Int32(-3));
        l
    }

    #[test]
    fn round_trips() {
        let l = sample();
        let b = pack(&l);
        assert_eq!(&b[..4], &[0, 1, 0, 0]);
        assert_eq!(unpack(&b).expect("unpack"), l);
    }

    #[test]
    fn known_bytes_of_a_u64_pair() {
        let mut l = NvList::new();
        l.set("a", NvValue::Uint64(5));
        let b = pack(&l);
        // header, nvlist_t (flags 1), pair of 32 bytes, terminator.
        assert_eq!(b.len(), 4 + 8 + 32 + 4);
        assert_eq!(&b[8..12], &1u32.to_le_bytes());
        assert_eq!(&b[12..16], &32i32.to_le_bytes());
        assert_eq!(&b[16..18], &2i16.to_le_bytes());
        assert_eq!(&b[24..28], &8u32.to_le_bytes());
        assert_eq!(&b[28..30], b"a\0");
        assert_eq!(&b[36..44], &5u64.to_le_bytes());
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let b = pack(&sample());
        for n in 0..b.len() - 4 {
            assert!(unpack(&b[..n]).is_err(), "prefix {n}");
        }
        for i in 0..b.len() {
            for x in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut c = b.clone();
                c[i] = x;
                let _ = unpack(&c);
            }
        }
    }
}
