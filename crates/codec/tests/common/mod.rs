//! Shared test helpers: a deterministic xorshift generator and data builders.
#![allow(dead_code)]

/// xorshift64* — deterministic, dependency-free pseudo-random numbers.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Several kinds of test data of length `n`: zeros, text, random, repetitive, sparse.
pub fn corpus(n: usize, seed: u64) -> Vec<(&'static str, Vec<u8>)> {
    let mut r = Rng::new(seed);
    let text: Vec<u8> = b"The quick brown fox jumps over the lazy dog; ZFS stores blocks. "
        .iter()
        .cycle()
        .take(n)
        .copied()
        .collect();
    let words = [
        "alpha ", "beta ", "gamma ", "delta ", "\n", "zfs ", "block ", "0123 ",
    ];
    let mut prose = Vec::with_capacity(n + 8);
    while prose.len() < n {
        prose.extend_from_slice(words[r.below(words.len())].as_bytes());
    }
    prose.truncate(n);
    let repetitive: Vec<u8> = (0..n).map(|i| ((i / 7) % 5) as u8 * 3).collect();
    let mut sparse = vec![0u8; n];
    for _ in 0..n / 50 {
        let i = r.below(n.max(1));
        if i < n {
            sparse[i] = r.next() as u8 | 1;
        }
    }
    let mut mixed = r.bytes(n);
    for i in (0..n).step_by(1000) {
        let end = (i + 400).min(n);
        mixed[i..end].fill(0);
    }
    vec![
        ("zeros", vec![0u8; n]),
        ("text", text),
        ("prose", prose),
        ("random", r.bytes(n)),
        ("repetitive", repetitive),
        ("sparse", sparse),
        ("mixed", mixed),
    ]
}
