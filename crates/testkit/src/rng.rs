//! Deterministic pseudo-random data (xorshift64*), no external crates.
//! The same seed always produces the same bytes, so a failing test can be
//! re-run and investigated.

/// xorshift64* generator.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0 is remapped: xorshift must not start at 0).
    pub fn new(seed: u64) -> Self {
        let s = seed ^ 0x9E37_79B9_7F4A_7C15;
        XorShift(if s == 0 { 0x2545_F491_4F6C_DD1D } else { s })
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish value in `lo..hi` (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo, "empty range {lo}..{hi}");
        lo + self.next_u64() % (hi - lo)
    }

    /// Fills `buf` with random bytes (8 bytes per step: cheap enough for
    /// hundreds of MiB).
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&v[..n]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }

    /// Fills `buf` with compressible, text-like data: words from a small
    /// vocabulary, spaces and newlines (compresses well with lzjb/gzip, not
    /// trivially with zle).
    pub fn fill_text(&mut self, buf: &mut [u8]) {
        const WORDS: &[&[u8]] = &[
            b"zfs",
            b"pool",
            b"vdev",
            b"uberblock",
            b"label",
            b"dnode",
            b"objset",
            b"the",
            b"block",
            b"pointer",
            b"checksum",
            b"fletcher4",
            b"sha256",
            b"raidz",
            b"mirror",
            b"snapshot",
            b"dataset",
            b"znode",
            b"zap",
            b"indirect",
            b"lzjb",
            b"gzip",
            b"of",
            b"and",
            b"a",
            b"metaslab",
            b"spacemap",
            b"txg",
            b"intent",
            b"log",
            b"arc",
            b"copy-on-write",
        ];
        let mut i = 0;
        let mut col = 0;
        while i < buf.len() {
            let r = self.next_u64();
            let w = WORDS[(r % WORDS.len() as u64) as usize];
            for &b in w {
                if i >= buf.len() {
                    return;
                }
                buf[i] = b;
                i += 1;
            }
            if i >= buf.len() {
                return;
            }
            col += w.len() + 1;
            buf[i] = if col > 72 || (r >> 32) & 31 == 0 {
                col = 0;
                b'\n'
            } else {
                b' '
            };
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic() {
        let a = XorShift::new(7).bytes(100);
        let b = XorShift::new(7).bytes(100);
        let c = XorShift::new(8).bytes(100);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut t = vec![0u8; 1000];
        XorShift::new(1).fill_text(&mut t);
        assert!(t.iter().all(|&b| b.is_ascii()));
    }
}
