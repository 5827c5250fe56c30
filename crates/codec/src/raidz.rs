//! RAID-Z geometry and parity. FORMAT.md §4.3.
//!
//! [`RaidzMap::new`] turns a DVA offset and size into columns on child devices
//! (including the single-parity 1 MiB swap quirk). [`generate_parity`] fills
//! P/Q/R; [`reconstruct`] recomputes up to `nparity` missing columns from the
//! rest by solving the system over GF(2^8) (polynomial 0x11D).
//!
//! ## Geometry
//!
//! A raidz vdev of `n` children with `p` parity columns stripes each block
//! across the children in units of `U = 2^ashift`. The block starts at sector
//! `b = offset / U`; child `b mod n` holds the first column, at byte offset
//! `(b / n)·U` on every child (columns that wrap past the last child are one
//! sector further down). With `S` data sectors, `q = S / (n−p)` full rows and
//! `r` leftover sectors, the first `r + p` columns ("big" columns) get `q + 1`
//! sectors, the others `q`. Columns `0..p` are parity, the rest hold the data in
//! order. Allocations are rounded to a multiple of `p + 1` sectors; the extra
//! "skip" sectors are never read and are not listed in the map (they are
//! counted in [`RaidzMap::asize`]).
//!
//! ## Parity
//!
//! Over GF(2^8) with polynomial x^8+x^4+x^3+x^2+1 and data columns
//! `D_0..D_{k−1}` (short columns zero-extended to the parity length):
//! `P = Σ D_j`, `Q = Σ 2^(k−1−j)·D_j`, `R = Σ 4^(k−1−j)·D_j` (evaluated by
//! Horner's rule, so even a zero-extended tail is multiplied). Multiplication
//! by 2 on eight bytes at once in a `u64` is
//! `((x << 1) & 0xfe..fe) ^ (((x >> 7) & 0x01..01) · 0x1d)`.
//!
//! Reconstruction of `m ≤ p` missing data columns picks `m` surviving parity
//! rows, computes the syndromes (parity of the surviving data XOR stored
//! parity), and solves the `m × m` system whose entries are
//! `g_row^(k−1−col)`. That matrix is a Vandermonde-like submatrix with distinct
//! nodes `2^(k−1−col)`, invertible for every choice of rows and columns when
//! `k ≤ 255`. Missing parity columns are then regenerated from the complete
//! data.
//!
//! ## Expanded RAID-Z ([`ExpandedRaidzMap`])
//!
//! `zpool attach` of a new child to a raidz vdev (OpenZFS's `raidz_expansion`
//! feature) widens it from `L` to `P = L + 1` children without recomputing
//! any parity: the reflow copies every allocated sector of the vdev's
//! address space to the same *address-space index* in the wider layout
//! (index `a` lives on child `a mod n` at sector `a / n`, for the old `n = L`
//! and then the new `n = P`). Blocks written before the expansion completed
//! keep their old columns and parity — their *logical width* is `L` — but
//! their sectors now sit where index `a` falls on `P` children.
//!
//! In the old layout, sector `i` of column `c` of a block starting at index
//! `b` is at index `b + i·L + c` (a column wraps onto the next child row
//! exactly as a width-`L` row of the address space does). So after the
//! reflow it is on child `(b + i·L + c) mod P`, sector `(b + i·L + c) / P`:
//! each *row* of `L` sectors is contiguous in the address space, and the
//! rows follow each other. The single-parity 1 MiB swap exchanges columns 0
//! and 1 in every row. Within one row every child appears at most once
//! (`L < P`), so parity can rebuild any row that lost at most `nparity`
//! sectors — reconstruction works row by row, by failed *child*, not by
//! column. Which width a block has is decided by its birth txg against the
//! txgs at which expansions completed (the vdev's `raidz_expand_txgs`).

use ozfs_format::{Error, Result};

/// One column of a RAID-Z row set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzCol {
    /// Child device index.
    pub dev: usize,
    /// Byte offset on the child, relative to the start of its allocatable area (add 4 MiB for the device byte).
    pub offset: u64,
    /// Bytes in this column (multiple of 2^ashift; may be 0 for skip columns).
    pub size: u64,
}

/// The column map of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    pub nparity: usize,
    /// Columns 0..nparity are parity, the rest data, in order. Only the `acols` columns (size > 0 possible) are listed.
    pub cols: Vec<RaidzCol>,
    /// Allocated size in **bytes**, including skip sectors (equals [`raidz_asize`]).
    pub asize: u64,
}

impl RaidzMap {
    /// Map a block at DVA `offset` with physical size `psize` on a raidz of `dcols` children with `nparity` and `ashift`.
    pub fn new(offset: u64, psize: u64, ashift: u32, dcols: usize, nparity: usize) -> RaidzMap {
        let u = 1u64 << ashift;
        let n = dcols as u64;
        let p = nparity as u64;
        if dcols == 0 || nparity >= dcols {
            return RaidzMap {
                nparity,
                cols: Vec::new(),
                asize: 0,
            };
        }
        let b = offset >> ashift;
        let s = psize.div_ceil(u);
        let f = b % n;
        let co = (b / n) << ashift;
        let q = s / (n - p);
        let r = s - q * (n - p);
        let bc = if r == 0 { 0 } else { r + p };
        let tot = s + p * (q + u64::from(r != 0));
        let acols = if q == 0 { bc } else { n };
        let mut cols = Vec::with_capacity(acols as usize);
        for c in 0..acols {
            let mut dev = f + c;
            let mut off = co;
            if dev >= n {
                dev -= n;
                off += u;
            }
            let size = if c < bc { (q + 1) * u } else { q * u };
            cols.push(RaidzCol {
                dev: dev as usize,
                offset: off,
                size,
            });
        }
        if nparity == 1 && offset & (1 << 20) != 0 && cols.len() >= 2 {
            let (c0, c1) = (cols[0], cols[1]);
            cols[0].dev = c1.dev;
            cols[0].offset = c1.offset;
            cols[1].dev = c0.dev;
            cols[1].offset = c0.offset;
        }
        RaidzMap {
            nparity,
            cols,
            asize: tot.div_ceil(p + 1) * (p + 1) * u,
        }
    }

    /// Number of data bytes the data columns hold (psize rounded up to the sector size).
    pub fn data_size(&self) -> u64 {
        self.cols.iter().skip(self.nparity).map(|c| c.size).sum()
    }
}

/// The map of a block written with `logical` columns on a raidz vdev that
/// an expansion has since widened to `physical` children (module doc,
/// "Expanded RAID-Z"). `map` holds the block's columns as they were written
/// (sizes, parity first; each column's `dev`/`offset` is where its first
/// sector now lies); [`sector`](Self::sector) places every other sector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpandedRaidzMap {
    pub map: RaidzMap,
    /// Address-space index of the block's first sector.
    start: u64,
    logical: u64,
    physical: u64,
    ashift: u32,
    /// Single parity, block in an odd MiB: columns 0 and 1 trade places in every row.
    swap: bool,
}

impl ExpandedRaidzMap {
    /// Map a block at DVA `offset` with `psize` bytes, written `logical`
    /// columns wide, on a raidz now of `physical` children. Refuses a
    /// geometry that cannot be (`nparity` not below `logical`, or `logical`
    /// wider than `physical`).
    pub fn new(
        offset: u64,
        psize: u64,
        ashift: u32,
        logical: usize,
        physical: usize,
        nparity: usize,
    ) -> Result<ExpandedRaidzMap> {
        if nparity == 0 || nparity >= logical || logical > physical || ashift > 24 {
            return Err(Error::corrupt(
                "raidz expansion",
                format!(
                    "a block {logical} columns wide (parity {nparity}) on a raidz of {physical} children"
                ),
            ));
        }
        let map = RaidzMap::new(offset, psize, ashift, logical, nparity);
        let swap = nparity == 1 && offset & (1 << 20) != 0 && map.cols.len() >= 2;
        let mut m = ExpandedRaidzMap {
            map,
            start: offset >> ashift,
            logical: logical as u64,
            physical: physical as u64,
            ashift,
            swap,
        };
        for c in 0..m.map.cols.len() {
            let (dev, off) = m.sector(c, 0);
            m.map.cols[c].dev = dev;
            m.map.cols[c].offset = off;
        }
        Ok(m)
    }

    /// Sectors in column `col` (0 past the last column).
    pub fn rows_of(&self, col: usize) -> u64 {
        self.map.cols.get(col).map_or(0, |c| c.size >> self.ashift)
    }

    /// Where sector `row` of column `col` lies: child index and byte offset
    /// on the child (relative to its allocatable area, like [`RaidzCol`]).
    pub fn sector(&self, col: usize, row: u64) -> (usize, u64) {
        let c = if self.swap && col < 2 { 1 - col } else { col } as u64;
        let a = self.start + row * self.logical + c;
        (
            (a % self.physical) as usize,
            (a / self.physical) << self.ashift,
        )
    }
}

/// ASIZE of a `psize` block on this raidz (FORMAT.md §4.3 formula).
pub fn raidz_asize(psize: u64, ashift: u32, dcols: usize, nparity: usize) -> u64 {
    if dcols <= nparity {
        return 0;
    }
    let p = nparity as u64;
    let mut a = psize.div_ceil(1u64 << ashift);
    a += p * a.div_ceil(dcols as u64 - p);
    (a.div_ceil(p + 1) * (p + 1)) << ashift
}

// ---------------------------------------------------------------------------
// GF(2^8)

/// exp table (generator 2, polynomial 0x11D), doubled so `EXP[a + b]` needs no reduction.
const GF_EXP: [u8; 512] = gf_tables().0;
/// log table; `GF_LOG[0]` is unused.
const GF_LOG: [u8; 256] = gf_tables().1;

const fn gf_tables() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u32 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    exp[510] = exp[0];
    exp[511] = exp[1];
    (exp, log)
}

/// Product in GF(2^8).
#[inline]
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        GF_EXP[GF_LOG[a as usize] as usize + GF_LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse in GF(2^8) (`a != 0`).
#[inline]
pub fn gf_inv(a: u8) -> u8 {
    debug_assert!(a != 0);
    GF_EXP[255 - GF_LOG[a as usize] as usize]
}

/// 2^e in GF(2^8).
#[inline]
fn gf_pow2(e: usize) -> u8 {
    GF_EXP[e % 255]
}

/// Multiply eight packed GF(2^8) bytes by 2.
#[inline(always)]
fn mul2_u64(x: u64) -> u64 {
    const HI: u64 = 0x8080_8080_8080_8080;
    let m = (x & HI) >> 7;
    ((x << 1) & 0xfefe_fefe_fefe_fefe) ^ (m * 0x1d)
}

#[inline(always)]
fn mul2_u8(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 }
}

/// Parity row `row` (0 = P, 1 = Q, 2 = R): `acc = acc · 2^row ^ d`, with `d` zero-extended past its end.
fn horner_step(row: usize, acc: &mut [u8], d: &[u8]) {
    let n = d.len().min(acc.len());
    let (head, tail) = acc.split_at_mut(n);
    let d = &d[..n];
    let mut ac = head.chunks_exact_mut(8);
    let mut dc = d.chunks_exact(8);
    match row {
        0 => {
            for (a, x) in (&mut ac).zip(&mut dc) {
                let v = u64::from_ne_bytes((*a).try_into().unwrap())
                    ^ u64::from_ne_bytes(x.try_into().unwrap());
                a.copy_from_slice(&v.to_ne_bytes());
            }
        }
        1 => {
            for (a, x) in (&mut ac).zip(&mut dc) {
                let v = mul2_u64(u64::from_ne_bytes((*a).try_into().unwrap()))
                    ^ u64::from_ne_bytes(x.try_into().unwrap());
                a.copy_from_slice(&v.to_ne_bytes());
            }
        }
        _ => {
            for (a, x) in (&mut ac).zip(&mut dc) {
                let v = mul2_u64(mul2_u64(u64::from_ne_bytes((*a).try_into().unwrap())))
                    ^ u64::from_ne_bytes(x.try_into().unwrap());
                a.copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    for (a, x) in ac.into_remainder().iter_mut().zip(dc.remainder()) {
        *a = mul_gen(row, *a) ^ x;
    }
    if row > 0 {
        let mut tc = tail.chunks_exact_mut(8);
        for a in &mut tc {
            let mut v = u64::from_ne_bytes((*a).try_into().unwrap());
            for _ in 0..row {
                v = mul2_u64(v);
            }
            a.copy_from_slice(&v.to_ne_bytes());
        }
        for a in tc.into_remainder() {
            *a = mul_gen(row, *a);
        }
    }
}

#[inline(always)]
fn mul_gen(row: usize, mut x: u8) -> u8 {
    for _ in 0..row {
        x = mul2_u8(x);
    }
    x
}

/// Compute parity rows into `out[i]` for rows `rows[i]` over `data`, treating data columns with
/// `skip[j] == true` as all-zero. Each `out[i]` must have the parity length.
fn parity_rows(rows: &[usize], out: &mut [&mut [u8]], data: &[Vec<u8>], skip: &[bool]) {
    for (o, &row) in out.iter_mut().zip(rows) {
        o.fill(0);
        for (j, d) in data.iter().enumerate() {
            let d: &[u8] = if skip[j] { &[] } else { d };
            horner_step(row, o, d);
        }
    }
}

/// Compute parity columns `cols[0..nparity]` from data columns `cols[nparity..]` (shorter data columns are
/// zero-extended to the length of `cols[nparity]`; parity buffers must have that length).
pub fn generate_parity(nparity: usize, cols: &mut [Vec<u8>]) {
    if nparity == 0 || cols.len() <= nparity {
        return;
    }
    let (par, data) = cols.split_at_mut(nparity);
    let plen = data[0].len();
    for (row, pc) in par.iter_mut().enumerate() {
        if pc.len() != plen {
            pc.resize(plen, 0);
        }
        // Start from the first data column, then Horner-step the rest.
        pc.copy_from_slice(&data[0]);
        for d in &data[1..] {
            horner_step(row, pc, d);
        }
    }
}

/// Reconstruct the columns listed in `missing` (indices into `cols`, at most `nparity` of them, parity or data)
/// from the others. Buffers of missing columns must already have the right length; their contents are overwritten.
pub fn reconstruct(nparity: usize, cols: &mut [Vec<u8>], missing: &[usize]) -> Result<()> {
    let ncols = cols.len();
    if nparity == 0 || nparity > 3 || ncols <= nparity {
        return Err(Error::Invalid(format!(
            "raidz reconstruct: bad geometry (nparity {nparity}, {ncols} columns)"
        )));
    }
    let mut is_missing = vec![false; ncols];
    for &m in missing {
        if m >= ncols {
            return Err(Error::Invalid(format!(
                "raidz reconstruct: column {m} out of range ({ncols} columns)"
            )));
        }
        is_missing[m] = true;
    }
    let nmiss = is_missing.iter().filter(|&&x| x).count();
    if nmiss == 0 {
        return Ok(());
    }
    if nmiss > nparity {
        return Err(Error::corrupt(
            "raidz",
            format!("{nmiss} columns missing, parity {nparity} can rebuild at most {nparity}"),
        ));
    }
    let k = ncols - nparity;
    let plen = cols[nparity].len();
    for (i, c) in cols.iter().enumerate().take(nparity) {
        if c.len() != plen {
            return Err(Error::Invalid(format!(
                "raidz reconstruct: parity column {i} has {} bytes, expected {plen}",
                c.len()
            )));
        }
    }
    let miss_data: Vec<usize> = (0..k).filter(|&j| is_missing[nparity + j]).collect();
    let avail_par: Vec<usize> = (0..nparity).filter(|&i| !is_missing[i]).collect();
    let m = miss_data.len();

    if m > 0 {
        let rows = &avail_par[..m];
        let (par, data) = cols.split_at_mut(nparity);
        let skip: Vec<bool> = (0..k).map(|j| is_missing[nparity + j]).collect();
        // Syndromes: stored parity XOR parity of the surviving data.
        let mut syn: Vec<Vec<u8>> = vec![vec![0u8; plen]; m];
        {
            let mut outs: Vec<&mut [u8]> = syn.iter_mut().map(|v| v.as_mut_slice()).collect();
            parity_rows(rows, &mut outs, data, &skip);
        }
        for (s, &row) in syn.iter_mut().zip(rows) {
            for (a, b) in s.iter_mut().zip(par[row].iter()) {
                *a ^= b;
            }
        }
        // Matrix A[r][c] = g_row^(k-1-col), g_row = 2^row, so entry = 2^(row·(k-1-col)).
        let mut a = [[0u8; 3]; 3];
        for (r, &row) in rows.iter().enumerate() {
            for (c, &col) in miss_data.iter().enumerate() {
                a[r][c] = gf_pow2(row * (k - 1 - col));
            }
        }
        let inv = gf_invert(&a, m).ok_or_else(|| {
            Error::corrupt("raidz", "reconstruction matrix is singular".to_string())
        })?;
        // D_c = Σ_r inv[c][r] · S_r, using per-coefficient 256-entry product tables.
        for (c, &col) in miss_data.iter().enumerate() {
            let mut tabs = [[0u8; 256]; 3];
            for (r, t) in tabs.iter_mut().enumerate().take(m) {
                let coef = inv[c][r];
                for (x, e) in t.iter_mut().enumerate() {
                    *e = gf_mul(coef, x as u8);
                }
            }
            let out = &mut data[col];
            let n = out.len().min(plen);
            match m {
                1 => {
                    for (o, &s0) in out[..n].iter_mut().zip(&syn[0][..n]) {
                        *o = tabs[0][s0 as usize];
                    }
                }
                2 => {
                    for ((o, &s0), &s1) in out[..n].iter_mut().zip(&syn[0][..n]).zip(&syn[1][..n]) {
                        *o = tabs[0][s0 as usize] ^ tabs[1][s1 as usize];
                    }
                }
                _ => {
                    for (((o, &s0), &s1), &s2) in out[..n]
                        .iter_mut()
                        .zip(&syn[0][..n])
                        .zip(&syn[1][..n])
                        .zip(&syn[2][..n])
                    {
                        *o = tabs[0][s0 as usize] ^ tabs[1][s1 as usize] ^ tabs[2][s2 as usize];
                    }
                }
            }
        }
    }

    // Regenerate missing parity from the now-complete data.
    let miss_par: Vec<usize> = (0..nparity).filter(|&i| is_missing[i]).collect();
    if !miss_par.is_empty() {
        let (par, data) = cols.split_at_mut(nparity);
        let skip = vec![false; k];
        for &row in &miss_par {
            let mut outs = [par[row].as_mut_slice()];
            parity_rows(&[row], &mut outs, data, &skip);
        }
    }
    Ok(())
}

/// Invert the leading `n × n` block of `a` over GF(2^8) (Gauss–Jordan). None if singular.
fn gf_invert(a: &[[u8; 3]; 3], n: usize) -> Option<[[u8; 3]; 3]> {
    let mut m = *a;
    let mut inv = [[0u8; 3]; 3];
    for (i, row) in inv.iter_mut().enumerate().take(n) {
        row[i] = 1;
    }
    for col in 0..n {
        let piv = (col..n).find(|&r| m[r][col] != 0)?;
        m.swap(col, piv);
        inv.swap(col, piv);
        let f = gf_inv(m[col][col]);
        for j in 0..n {
            m[col][j] = gf_mul(m[col][j], f);
            inv[col][j] = gf_mul(inv[col][j], f);
        }
        for r in 0..n {
            if r != col && m[r][col] != 0 {
                let g = m[r][col];
                for j in 0..n {
                    m[r][j] ^= gf_mul(g, m[col][j]);
                    inv[r][j] ^= gf_mul(g, inv[col][j]);
                }
            }
        }
    }
    Some(inv)
}
