//! # Native encryption: keys and blocks
//!
//! An encrypted dataset (OpenZFS's `encryption=` property) has a *master
//! key* of the suite's length and a 64-byte *HMAC key*, both chosen at
//! random when the encryption root is created. They are kept in the MOS,
//! in the dataset directory's DSL Crypto Key object, *wrapped*: encrypted
//! with the suite's mode (CCM or GCM) under the user's *wrapping key* — always
//! AES-256, whatever the suite's key length — a 12-byte IV and a 16-byte MAC
//! stored beside them, the key object's guid, suite and version as the
//! associated data (version 0 authenticated the guid alone). The wrapping
//! key is the user's key itself (`keyformat=raw`: 32 bytes; `hex`: 64 hex
//! digits) or PBKDF2-HMAC-SHA1 of a passphrase (`passphrase`: 8 to 512
//! bytes) with the stored salt — a u64, taken in its little-endian bytes —
//! and iteration count. A wrong key fails the wrap's MAC: that is how a
//! wrong key is told from a right one, and nothing is decrypted with it.
//!
//! Each encrypted block is encrypted with a key derived from the master
//! key by HKDF-SHA512 (no salt; the block's 8-byte salt as the info), an
//! AEAD (AES-CCM or AES-GCM, 12-byte nonce, 16-byte tag) over the block's
//! physical (already compressed) bytes. The block pointer carries the
//! salt and IV where its third DVA would be and the tag in checksum words
//! 2–3; words 0–1 are a truncated checksum of the ciphertext, which the
//! pool verifies before anything here runs.
//!
//! Dnode blocks are special: the dnodes' cores and block pointers stay
//! plain (the pool must walk them without keys) and only the bonus
//! buffers of encrypted bonus types are encrypted, one cipher stream over
//! all of them in dnode order. What stays plain is authenticated as the
//! AEAD's associated data: each dnode's 64-byte core (its flags masked to
//! the portable spill bit, `dn_used` zeroed), then for each block pointer
//! (and the spill pointer) its portable properties and MAC, then each
//! unencrypted bonus area. This module builds exactly that, so a tampered
//! block pointer inside a dnode block fails the tag as OpenZFS's would.
//!
//! Invariants: nothing decrypted is returned that did not pass its tag
//! (blocks that are only authenticated — indirect blocks and unencrypted
//! types — are checked by their truncated checksum, not their MACs); key bytes
//! live in types that zero themselves when dropped and are never written
//! anywhere; every length and slot count read from a block is checked
//! before it is used (a dnode's extra slots, its block pointer count).

use aes::{Aes128, Aes192, Aes256};
use aes_gcm::aead::consts::{U12, U16};
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::AesGcm;
use ccm::Ccm;
use ozfs_format::types::{object_type_is_encrypted, ot};
use ozfs_format::{BlkPtr, CryptParams, Error, Result};

/// Length of every wrapping key (`WRAPPING_KEY_LEN`).
pub const WRAPPING_KEY_LEN: usize = 32;
/// Length of the HMAC key kept beside each master key.
pub const HMAC_KEY_LEN: usize = 64;
/// The DSL Crypto Key version OpenZFS writes today.
pub const KEY_VERSION_CURRENT: u64 = 1;

/// An encryption suite (`enum zio_encrypt`, values 3..=8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Aes128Ccm,
    Aes192Ccm,
    Aes256Ccm,
    Aes128Gcm,
    Aes192Gcm,
    Aes256Gcm,
}

impl Suite {
    /// The suite stored as `DSL_CRYPTO_SUITE`, or None for off/inherit/
    /// unknown values.
    pub fn from_u64(v: u64) -> Option<Suite> {
        Some(match v {
            3 => Suite::Aes128Ccm,
            4 => Suite::Aes192Ccm,
            5 => Suite::Aes256Ccm,
            6 => Suite::Aes128Gcm,
            7 => Suite::Aes192Gcm,
            8 => Suite::Aes256Gcm,
            _ => return None,
        })
    }
    /// The value of the `encryption` property.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Aes128Ccm => "aes-128-ccm",
            Suite::Aes192Ccm => "aes-192-ccm",
            Suite::Aes256Ccm => "aes-256-ccm",
            Suite::Aes128Gcm => "aes-128-gcm",
            Suite::Aes192Gcm => "aes-192-gcm",
            Suite::Aes256Gcm => "aes-256-gcm",
        }
    }
    /// The suite of the same mode with a `len`-byte key (16, 24 or 32).
    pub fn with_key_len(self, len: usize) -> Suite {
        let gcm = matches!(self, Suite::Aes128Gcm | Suite::Aes192Gcm | Suite::Aes256Gcm);
        match (gcm, len) {
            (false, 16) => Suite::Aes128Ccm,
            (false, 24) => Suite::Aes192Ccm,
            (false, _) => Suite::Aes256Ccm,
            (true, 16) => Suite::Aes128Gcm,
            (true, 24) => Suite::Aes192Gcm,
            (true, _) => Suite::Aes256Gcm,
        }
    }
    /// Key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Suite::Aes128Ccm | Suite::Aes128Gcm => 16,
            Suite::Aes192Ccm | Suite::Aes192Gcm => 24,
            Suite::Aes256Ccm | Suite::Aes256Gcm => 32,
        }
    }
}

/// How a user's key is given (`keyformat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    Raw,
    Hex,
    Passphrase,
}

impl KeyFormat {
    /// The stored `keyformat` number (1 raw, 2 hex, 3 passphrase).
    pub fn from_u64(v: u64) -> Option<KeyFormat> {
        Some(match v {
            1 => KeyFormat::Raw,
            2 => KeyFormat::Hex,
            3 => KeyFormat::Passphrase,
            _ => return None,
        })
    }
    /// The `keyformat` property's value.
    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::Raw => "raw",
            KeyFormat::Hex => "hex",
            KeyFormat::Passphrase => "passphrase",
        }
    }
}

/// A 32-byte wrapping key, zeroed when dropped.
pub struct WrappingKey([u8; WRAPPING_KEY_LEN]);

impl Drop for WrappingKey {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

impl WrappingKey {
    /// The wrapping key from what the user gave, in `format`: raw (exactly
    /// 32 bytes), hex (64 hex digits) or a passphrase (8..=512 bytes,
    /// stretched with PBKDF2-HMAC-SHA1 over `salt`'s little-endian bytes
    /// and `iters` rounds). A trailing newline of a hex key or passphrase
    /// read from a file or terminal is not part of it.
    pub fn derive(
        format: KeyFormat,
        material: &[u8],
        salt: u64,
        iters: u64,
    ) -> Result<WrappingKey> {
        let bad = |d: String| Err(Error::Invalid(format!("key: {d}")));
        let line = |m: &[u8]| -> usize {
            let mut n = m.len();
            if n > 0 && m[n - 1] == b'\n' {
                n -= 1;
                if n > 0 && m[n - 1] == b'\r' {
                    n -= 1;
                }
            }
            n
        };
        let mut k = [0u8; WRAPPING_KEY_LEN];
        match format {
            KeyFormat::Raw => {
                if material.len() != WRAPPING_KEY_LEN {
                    return bad(format!(
                        "a raw key is {WRAPPING_KEY_LEN} bytes, {} given",
                        material.len()
                    ));
                }
                k.copy_from_slice(material);
            }
            KeyFormat::Hex => {
                let m = &material[..line(material)];
                if m.len() != 2 * WRAPPING_KEY_LEN {
                    return bad(format!(
                        "a hex key is {} hex digits, {} given",
                        2 * WRAPPING_KEY_LEN,
                        m.len()
                    ));
                }
                for (i, pair) in m.chunks_exact(2).enumerate() {
                    match (hex_val(pair[0]), hex_val(pair[1])) {
                        (Some(h), Some(l)) => k[i] = h << 4 | l,
                        _ => {
                            wipe(&mut k);
                            return bad(format!("not a hex digit at position {}", 2 * i));
                        }
                    }
                }
            }
            KeyFormat::Passphrase => {
                let m = &material[..line(material)];
                if !(8..=512).contains(&m.len()) {
                    return bad(format!("a passphrase is 8 to 512 bytes, {} given", m.len()));
                }
                if iters == 0 || iters > u32::MAX as u64 {
                    return Err(Error::corrupt(
                        "DSL crypto key",
                        format!("pbkdf2iters {iters}"),
                    ));
                }
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(m, &salt.to_le_bytes(), iters as u32, &mut k);
            }
        }
        Ok(WrappingKey(k))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Overwrite key bytes in a way the optimiser keeps.
pub fn wipe(b: &mut [u8]) {
    for x in b.iter_mut() {
        // SAFETY: `x` is a valid, aligned, exclusive reference.
        unsafe { std::ptr::write_volatile(x, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// A dataset's master and HMAC keys as the DSL Crypto Key object stores
/// them: wrapped.
#[derive(Debug, Clone)]
pub struct WrappedKey {
    pub suite: Suite,
    pub guid: u64,
    pub version: u64,
    /// `DSL_CRYPTO_MASTER_KEY_1` (32 bytes; the suite's length is used).
    pub master: Vec<u8>,
    /// `DSL_CRYPTO_HMAC_KEY_1` (64 bytes).
    pub hmac: Vec<u8>,
    pub iv: [u8; 12],
    pub mac: [u8; 16],
}

impl WrappedKey {
    /// Unwrap with `wk`; a wrong wrapping key (or a damaged key object)
    /// fails the MAC and is refused as a permission error.
    pub fn unwrap_with(&self, wk: &WrappingKey) -> Result<MasterKey> {
        let kl = self.suite.key_len();
        if self.master.len() < kl || self.hmac.len() != HMAC_KEY_LEN {
            return Err(Error::corrupt(
                "DSL crypto key",
                format!(
                    "master key {} bytes, HMAC key {} bytes",
                    self.master.len(),
                    self.hmac.len()
                ),
            ));
        }
        if self.version > KEY_VERSION_CURRENT {
            return Err(Error::unsupported(
                "DSL crypto key",
                format!("version {}", self.version),
            ));
        }
        let mut buf = [0u8; 32 + HMAC_KEY_LEN];
        buf[..kl].copy_from_slice(&self.master[..kl]);
        buf[kl..kl + HMAC_KEY_LEN].copy_from_slice(&self.hmac);
        let mut aad = [0u8; 24];
        aad[..8].copy_from_slice(&self.guid.to_le_bytes());
        let aad_len = if self.version == 0 {
            8
        } else {
            aad[8..16].copy_from_slice(&(suite_value(self.suite)).to_le_bytes());
            aad[16..24].copy_from_slice(&self.version.to_le_bytes());
            24
        };
        // The wrap is always AES-256 (the whole wrapping key) in the
        // suite's mode, whatever the suite's own key length.
        let r = aead_open(
            self.suite.with_key_len(WRAPPING_KEY_LEN),
            &wk.0,
            &self.iv,
            &aad[..aad_len],
            &mut buf[..kl + HMAC_KEY_LEN],
            &self.mac,
        );
        if r.is_err() {
            wipe(&mut buf);
            return Err(Error::Permission(
                "incorrect key provided (the wrapped key's MAC does not verify)".into(),
            ));
        }
        let mut mk = MasterKey {
            suite: self.suite,
            version: self.version,
            master: [0u8; 32],
            hmac: [0u8; HMAC_KEY_LEN],
        };
        mk.master[..kl].copy_from_slice(&buf[..kl]);
        mk.hmac.copy_from_slice(&buf[kl..kl + HMAC_KEY_LEN]);
        wipe(&mut buf);
        Ok(mk)
    }
}

impl MasterKey {
    /// A new dataset key (`zio_crypt_key_init`): the suite's length of
    /// random master key and 64 random bytes of HMAC key, current version.
    pub fn generate(suite: Suite) -> Result<MasterKey> {
        let mut mk = MasterKey {
            suite,
            version: KEY_VERSION_CURRENT,
            master: [0u8; 32],
            hmac: [0u8; HMAC_KEY_LEN],
        };
        let kl = suite.key_len();
        random_fill(&mut mk.master[..kl])?;
        random_fill(&mut mk.hmac)?;
        Ok(mk)
    }

    /// Wrap this key with `wk` for a DSL Crypto Key object of `guid`
    /// (`zio_crypt_key_wrap`): AES-256 in the suite's mode, a random IV,
    /// the guid, suite and version as associated data. The stored master
    /// key is 32 bytes, zero past the suite's length.
    pub fn wrap(&self, wk: &WrappingKey, guid: u64) -> Result<WrappedKey> {
        let kl = self.suite.key_len();
        let mut buf = [0u8; 32 + HMAC_KEY_LEN];
        buf[..kl].copy_from_slice(&self.master[..kl]);
        buf[kl..kl + HMAC_KEY_LEN].copy_from_slice(&self.hmac);
        // Version 0 authenticated the guid alone (as `unwrap_with` reads it).
        let mut aad = [0u8; 24];
        aad[..8].copy_from_slice(&guid.to_le_bytes());
        aad[8..16].copy_from_slice(&suite_value(self.suite).to_le_bytes());
        aad[16..24].copy_from_slice(&self.version.to_le_bytes());
        let aad_len = if self.version == 0 { 8 } else { 24 };
        let mut iv = [0u8; 12];
        random_fill(&mut iv)?;
        let tag = aead_seal(
            self.suite.with_key_len(WRAPPING_KEY_LEN),
            &wk.0,
            &iv,
            &aad[..aad_len],
            &mut buf[..kl + HMAC_KEY_LEN],
        )
        .map_err(|()| Error::Invalid("wrapping a dataset key failed".into()))?;
        let mut master = buf[..kl].to_vec();
        master.resize(32, 0);
        let hmac = buf[kl..kl + HMAC_KEY_LEN].to_vec();
        wipe(&mut buf);
        Ok(WrappedKey {
            suite: self.suite,
            guid,
            version: self.version,
            master,
            hmac,
            iv,
            mac: tag,
        })
    }
}

/// A random u64 from the operating system (key guids, PBKDF2 salts).
pub fn random_u64() -> Result<u64> {
    let mut b = [0u8; 8];
    random_fill(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

impl Suite {
    /// The suite's `enum zio_encrypt` value (as the key object stores it).
    pub fn value(self) -> u64 {
        suite_value(self)
    }
}

impl KeyFormat {
    /// The `keyformat` value a key object stores (`ZFS_KEYFORMAT_*`).
    pub fn value(self) -> u64 {
        match self {
            KeyFormat::Raw => 1,
            KeyFormat::Hex => 2,
            KeyFormat::Passphrase => 3,
        }
    }
}

fn suite_value(s: Suite) -> u64 {
    match s {
        Suite::Aes128Ccm => 3,
        Suite::Aes192Ccm => 4,
        Suite::Aes256Ccm => 5,
        Suite::Aes128Gcm => 6,
        Suite::Aes192Gcm => 7,
        Suite::Aes256Gcm => 8,
    }
}

/// Run `$body` with `$c` bound to the AEAD of `$suite` keyed with `$key`
/// (a wrong key length is an error, `()`).
macro_rules! with_aead {
    ($suite:expr, $key:expr, $c:ident => $body:expr) => {{
        macro_rules! run {
            ($t:ty) => {{
                let $c = <$t>::new_from_slice($key).map_err(|_| ())?;
                $body
            }};
        }
        match $suite {
            Suite::Aes128Ccm => run!(Ccm<Aes128, U16, U12>),
            Suite::Aes192Ccm => run!(Ccm<Aes192, U16, U12>),
            Suite::Aes256Ccm => run!(Ccm<Aes256, U16, U12>),
            Suite::Aes128Gcm => run!(AesGcm<Aes128, U12>),
            Suite::Aes192Gcm => run!(AesGcm<Aes192, U12>),
            Suite::Aes256Gcm => run!(AesGcm<Aes256, U12>),
        }
    }};
}

/// Seal (encrypt) `buf` in place, returning the tag.
fn aead_seal(
    suite: Suite,
    key: &[u8],
    iv: &[u8; 12],
    aad: &[u8],
    buf: &mut [u8],
) -> std::result::Result<[u8; 16], ()> {
    with_aead!(suite, key, c => c
        .encrypt_in_place_detached(iv.into(), aad, buf)
        .map(|t| t.into())
        .map_err(|_| ()))
}

/// Open (decrypt and verify) `buf` in place; the tag is checked before
/// the caller may use a byte.
fn aead_open(
    suite: Suite,
    key: &[u8],
    iv: &[u8; 12],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; 16],
) -> std::result::Result<(), ()> {
    with_aead!(suite, key, c => c
        .decrypt_in_place_detached(iv.into(), aad, buf, tag.into())
        .map_err(|_| ()))
}

/// A dataset's unwrapped keys, zeroed when dropped. Held only in the
/// memory of the process that reads the dataset.
pub struct MasterKey {
    suite: Suite,
    version: u64,
    master: [u8; 32],
    hmac: [u8; HMAC_KEY_LEN],
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        wipe(&mut self.master);
        wipe(&mut self.hmac);
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MasterKey({}, version {})",
            self.suite.name(),
            self.version
        )
    }
}

impl MasterKey {
    /// The suite this key is for.
    pub fn suite(&self) -> Suite {
        self.suite
    }

    /// The key object's version (0: written before OpenZFS's errata fix).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The per-block key for `salt`: HKDF-SHA512 of the master key with
    /// the salt as the info.
    fn block_key(&self, salt: &[u8; 8]) -> [u8; 32] {
        let kl = self.suite.key_len();
        let mut out = [0u8; 32];
        let hk = hkdf::Hkdf::<sha2::Sha512>::new(None, &self.master[..kl]);
        // The output is at most 32 bytes, far below HKDF's limit.
        if hk.expand(salt, &mut out[..kl]).is_err() {
            wipe(&mut out);
        }
        out
    }

    /// Decrypt one encrypted block's physical bytes: `data` is what the
    /// pool read and checksummed (PSIZE bytes, decrypted in place), `bp` the block's pointer
    /// (`swap`: it came from the other byte order). Returns the plain
    /// physical bytes, still compressed as the pointer says. Dnode blocks
    /// decrypt only their encrypted bonus buffers, with everything else
    /// authenticated; intent-log blocks are refused as unsupported.
    pub fn decrypt_block(&self, bp: &BlkPtr, swap: bool, mut data: Vec<u8>) -> Result<Vec<u8>> {
        let Some(p) = bp.crypt_params(swap) else {
            return Ok(data);
        };
        let t = bp.object_type();
        if t == ot::INTENT_LOG {
            return Err(Error::unsupported(
                "intent log block",
                "encrypted intent-log blocks are not read",
            ));
        }
        let mut key = self.block_key(&p.salt);
        let kl = self.suite.key_len();
        // Ordinary blocks decrypt in place: no copy on the read path.
        let r = if t == ot::DNODE {
            self.open_dnode_block(&key[..kl], &p, swap, &data)
        } else {
            aead_open(self.suite, &key[..kl], &p.iv, &[], &mut data, &p.mac)
                .map(|()| data)
                .map_err(|()| tag_error(bp))
        };
        wipe(&mut key);
        r
    }

    /// Verify a level-0 block of an unencrypted type in this key's objset
    /// (the ZPL master node, a volume's properties): stored in the clear,
    /// authenticated by HMAC-SHA512 of its physical bytes (16 bytes kept,
    /// in checksum words 2–3 of its pointer), as `spa_do_crypt_mac_abd`.
    /// A mismatch is an authentication error naming the block's type.
    pub fn verify_authenticated(&self, bp: &BlkPtr, swap: bool, stored: &[u8]) -> Result<()> {
        use hmac::Mac;
        let mut m = <hmac::Hmac<sha2::Sha512> as Mac>::new_from_slice(&self.hmac)
            .map_err(|_| Error::corrupt("dataset key", "HMAC key"))?;
        m.update(stored);
        let d = m.finalize().into_bytes();
        // Constant time is not needed (the MAC is public in the pointer),
        // only equality.
        if d[..16] != bp.mac(swap) {
            return Err(Error::corrupt(
                "encrypted dataset",
                format!(
                    "{} block fails its MAC (authentication error: changed, or not this \
                     dataset's key)",
                    ozfs_format::types::object_type_name(bp.object_type())
                ),
            ));
        }
        Ok(())
    }

    /// Verify an encrypted dataset's objset block (its plain bytes as
    /// stored, `swap`: the other byte order) against the two MACs it
    /// carries: the portable MAC over its type and meta-dnode, the local
    /// MAC over the user, group and project accounting dnodes (none when
    /// accounting is incomplete or absent). HMAC-SHA512 with the dataset's
    /// HMAC key, the first 32 bytes kept.
    pub fn verify_objset(&self, data: &[u8], swap: bool) -> Result<()> {
        let what = "encrypted objset";
        if swap {
            return Err(Error::unsupported(
                what,
                "objset MACs of a pool in the other byte order are not checked",
            ));
        }
        let (portable, local) = self.objset_macs(data)?;
        if portable[..] != data[OS_PORTABLE_MAC..OS_PORTABLE_MAC + 32] {
            return Err(Error::corrupt(
                what,
                "its portable MAC does not verify (its meta-dnode or type was changed)",
            ));
        }
        if let Some(local) = local {
            if local[..] != data[OS_LOCAL_MAC..OS_LOCAL_MAC + 32] {
                return Err(Error::corrupt(
                    what,
                    "its local MAC does not verify (its accounting objects were changed)",
                ));
            }
        }
        Ok(())
    }

    /// The MACs an objset block (host order) must carry: the portable
    /// one, and the local one (None when it is to be zero: accounting
    /// incomplete or no accounting objects), as `zio_crypt_do_objset_hmacs`.
    fn objset_macs(&self, data: &[u8]) -> Result<([u8; 32], Option<[u8; 32]>)> {
        use hmac::Mac;
        const V1: usize = 1024;
        const V2: usize = 2048;
        const V3: usize = 4096;
        let what = "encrypted objset";
        if data.len() < V1 {
            return Err(Error::corrupt(what, format!("{} bytes", data.len())));
        }
        let word = |off: usize| u64::from_le_bytes(data[off..off + 8].try_into().unwrap_or([0; 8]));
        let new_mac = || {
            <hmac::Hmac<sha2::Sha512> as Mac>::new_from_slice(&self.hmac)
                .map_err(|_| Error::corrupt(what, "HMAC key"))
        };
        let dnode = |off: usize| -> Result<Vec<u8>> {
            let d = &data[off..off + 512];
            let nblkptr = (d[3] as usize).min(3);
            let mut out = Vec::with_capacity(64 + 4 * 32);
            auth_dnode(
                &mut out,
                d,
                nblkptr,
                d[7] & (1 << 2) != 0,
                false,
                self.version,
            )?;
            Ok(out)
        };
        let (os_type, flags) = (word(704), word(712));
        // Portable: the type (OpenZFS feeds it byte-swapped on a
        // little-endian host — a quirk kept for compatibility — so its
        // big-endian bytes), the portable flags (none today), the
        // meta-dnode.
        let mut m = new_mac()?;
        m.update(&os_type.to_be_bytes());
        m.update(&0u64.to_le_bytes());
        m.update(&dnode(0)?);
        let mut portable = [0u8; 32];
        portable.copy_from_slice(&m.finalize().into_bytes()[..32]);
        // Local: the accounting objects, when present and complete.
        let ty = |off: usize| data.get(off).copied().unwrap_or(0);
        let none = (data.len() >= V3 && ty(1024) == 0 && ty(1536) == 0 && ty(2048) == 0)
            || (data.len() >= V2 && ty(1024) == 0 && ty(1536) == 0)
            || data.len() <= V1;
        if flags & 1 == 0 || none {
            return Ok((portable, None));
        }
        let mut m = new_mac()?;
        m.update(&flags.to_le_bytes());
        for (off, need) in [(1024, V2), (1536, V2), (2048, V3)] {
            if data.len() >= need && ty(off) != 0 {
                m.update(&dnode(off)?);
            }
        }
        let mut local = [0u8; 32];
        local.copy_from_slice(&m.finalize().into_bytes()[..32]);
        Ok((portable, Some(local)))
    }

    /// Seal one block of this key's objset before it is checksummed and
    /// written, as OpenZFS's `zio_encrypt` does for a new block:
    /// `logical` is its uncompressed contents, `stored` its physical bytes
    /// (compressed, padded; changed in place). Per kind:
    /// * indirect blocks (`level` > 0): a MAC of their children's
    ///   authenticated forms ([`indirect_mac`]), no key involved;
    /// * the objset block: its portable and local MACs written into it
    ///   (it must be stored uncompressed); no MAC in its pointer;
    /// * unencrypted types (the master node, a volume's properties):
    ///   HMAC-SHA512 of the stored bytes, 16 bytes kept;
    /// * dnode blocks: the encrypted types' bonus areas encrypted, all the
    ///   rest authenticated (the mirror of the read side);
    /// * every other block: encrypted whole under a fresh salt and IV.
    pub fn seal(
        &self,
        object_type: u8,
        level: u8,
        logical: &[u8],
        stored: &mut [u8],
    ) -> Result<Sealed> {
        if level > 0 {
            return Sealed::indirect(logical);
        }
        if object_type == ot::OBJSET {
            let (portable, local) = self.objset_macs(stored)?;
            stored[OS_PORTABLE_MAC..OS_PORTABLE_MAC + 32].copy_from_slice(&portable);
            stored[OS_LOCAL_MAC..OS_LOCAL_MAC + 32].copy_from_slice(&local.unwrap_or([0; 32]));
            return Ok(Sealed {
                params: None,
                mac: None,
            });
        }
        if !object_type_is_encrypted(object_type) {
            use hmac::Mac;
            let mut m = <hmac::Hmac<sha2::Sha512> as Mac>::new_from_slice(&self.hmac)
                .map_err(|_| Error::corrupt("dataset key", "HMAC key"))?;
            m.update(stored);
            let mut mac = [0u8; 16];
            mac.copy_from_slice(&m.finalize().into_bytes()[..16]);
            return Ok(Sealed {
                params: None,
                mac: Some(mac),
            });
        }
        let mut salt = [0u8; 8];
        let mut iv = [0u8; 12];
        random_fill(&mut salt)?;
        random_fill(&mut iv)?;
        let mut key = self.block_key(&salt);
        let kl = self.suite.key_len();
        let r = if object_type == ot::DNODE {
            let (aad, enc) = dnode_layout(stored, false, self.version)?;
            let mut stream: Vec<u8> = Vec::with_capacity(enc.iter().map(|&(_, n)| n).sum());
            for &(off, n) in &enc {
                stream.extend_from_slice(&stored[off..off + n]);
            }
            let r = aead_seal(self.suite, &key[..kl], &iv, &aad, &mut stream);
            if r.is_ok() {
                let mut at = 0;
                for &(off, n) in &enc {
                    stored[off..off + n].copy_from_slice(&stream[at..at + n]);
                    at += n;
                }
            }
            wipe(&mut stream);
            r
        } else {
            aead_seal(self.suite, &key[..kl], &iv, &[], stored)
        };
        wipe(&mut key);
        let mac = r.map_err(|()| Error::Invalid("encrypting a block failed".into()))?;
        Ok(Sealed {
            params: Some((salt, iv)),
            mac: Some(mac),
        })
    }

    fn open_dnode_block(
        &self,
        key: &[u8],
        p: &CryptParams,
        swap: bool,
        data: &[u8],
    ) -> Result<Vec<u8>> {
        let (aad, enc) = dnode_layout(data, swap, self.version)?;
        let mut out = data.to_vec();
        // One cipher stream over the encrypted bonus areas, concatenated.
        let total: usize = enc.iter().map(|&(_, n)| n).sum();
        let mut stream = Vec::with_capacity(total);
        for &(off, n) in &enc {
            stream.extend_from_slice(&data[off..off + n]);
        }
        aead_open(self.suite, key, &p.iv, &aad, &mut stream, &p.mac).map_err(|()| {
            Error::corrupt(
                "encrypted dnode block",
                "its MAC does not verify (wrong key or damaged block)",
            )
        })?;
        let mut at = 0;
        for &(off, n) in &enc {
            out[off..off + n].copy_from_slice(&stream[at..at + n]);
            at += n;
        }
        wipe(&mut stream);
        Ok(out)
    }
}

/// What seals the blocks of an encrypted objset being written.
#[derive(Debug)]
pub enum Sealer {
    /// Its master key: every block sealed here ([`MasterKey::seal`]).
    Key(std::sync::Arc<MasterKey>),
    /// A raw receive (`zfs send -w`), no key: level-0 blocks come sealed
    /// in the stream (stored as sent, never through here), indirect blocks
    /// get the MAC of their children ([`indirect_mac`]), and the objset
    /// block carries the stream's portable MAC as it is.
    Raw,
}

impl Sealer {
    /// Seal one block (see [`MasterKey::seal`]).
    pub fn seal(
        &self,
        object_type: u8,
        level: u8,
        logical: &[u8],
        stored: &mut [u8],
    ) -> Result<Sealed> {
        match self {
            Sealer::Key(k) => k.seal(object_type, level, logical, stored),
            Sealer::Raw if level > 0 => Sealed::indirect(logical),
            Sealer::Raw if object_type == ot::OBJSET => Ok(Sealed {
                params: None,
                mac: None,
            }),
            Sealer::Raw => Err(Error::Invalid(format!(
                "a level-0 {} block of a raw receive must come sealed from the stream",
                ozfs_format::types::object_type_name(object_type)
            ))),
        }
    }
}

/// Offsets of the MACs in an objset block (`os_portable_mac`,
/// `os_local_mac`, 32 bytes each).
const OS_PORTABLE_MAC: usize = 720;
const OS_LOCAL_MAC: usize = 752;

/// What sealing a block puts in its block pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// Salt and IV of an encrypted block (its third DVA and the fill
    /// word's high half); None for a block only authenticated.
    pub params: Option<([u8; 8], [u8; 12])>,
    /// The MAC for checksum words 2–3; None for an objset block (its
    /// MACs are inside it and its checksum is whole).
    pub mac: Option<[u8; 16]>,
}

impl Sealed {
    /// An indirect block's sealing: the MAC of its children
    /// ([`indirect_mac`] of its uncompressed contents), no key involved.
    pub fn indirect(logical: &[u8]) -> Result<Sealed> {
        Ok(Sealed {
            params: None,
            mac: Some(indirect_mac(logical)?),
        })
    }
}

/// The MAC of an indirect block of an encrypted objset (its
/// uncompressed contents): SHA-512 over each child pointer's
/// authenticated form (current key version), 16 bytes kept, as
/// `zio_crypt_do_indirect_mac_checksum`. Needs no key: raw receives and
/// keyless writers compute it too.
pub fn indirect_mac(block: &[u8]) -> Result<[u8; 16]> {
    indirect_mac_swapped(block, false)
}

/// [`indirect_mac`] of an indirect block written in the other byte order
/// (`swap`: its pointers are read swapped, as `BP_SHOULD_BYTESWAP`).
pub fn indirect_mac_swapped(block: &[u8], swap: bool) -> Result<[u8; 16]> {
    use sha2::Digest;
    if !block.len().is_multiple_of(128) {
        return Err(Error::corrupt(
            "indirect block of an encrypted dataset",
            format!(
                "{} bytes, not a whole number of block pointers",
                block.len()
            ),
        ));
    }
    let mut aad = Vec::with_capacity(block.len() / 128 * 32);
    for c in block.chunks_exact(128) {
        auth_bp(&mut aad, c, swap, KEY_VERSION_CURRENT)?;
    }
    let d = sha2::Sha512::digest(&aad);
    let mut mac = [0u8; 16];
    mac.copy_from_slice(&d[..16]);
    Ok(mac)
}

/// Random bytes from the operating system (salts, IVs).
fn random_fill(b: &mut [u8]) -> Result<()> {
    getrandom::fill(b).map_err(|e| Error::Invalid(format!("no random bytes for a block IV: {e}")))
}

/// A byte range of a block: (offset, length).
type Span = (usize, usize);

/// The layout of a dnode block under encryption: what authenticates it
/// (the associated data: each dnode's core and block pointers, each
/// unencrypted bonus area) and where the bonus areas to encrypt lie
/// (offset, length), in dnode order, as `zio_crypt_init_uios_dnode`.
fn dnode_layout(data: &[u8], swap: bool, version: u64) -> Result<(Vec<u8>, Vec<Span>)> {
    const SLOT: usize = 512;
    const CORE: usize = 64;
    const BP: usize = 128;
    const FLAG_SPILL: u8 = 1 << 2;
    let what = "encrypted dnode block";
    if !data.len().is_multiple_of(SLOT) {
        return Err(Error::corrupt(
            what,
            format!("{} bytes, not a whole number of dnodes", data.len()),
        ));
    }
    let slots = data.len() / SLOT;
    let mut aad: Vec<u8> = Vec::with_capacity(data.len());
    let mut enc: Vec<Span> = Vec::new();
    let mut i = 0;
    while i < slots {
        let d = &data[i * SLOT..];
        let (dn_type, nblkptr, bonustype, flags, bonuslen, extra) = (
            d[0],
            d[3] as usize,
            d[4],
            d[7],
            u16_of(d, 10, swap),
            d[12] as usize,
        );
        let span = (extra + 1) * SLOT;
        if i + extra + 1 > slots {
            return Err(Error::corrupt(
                what,
                format!("dnode {i} claims {extra} extra slots past the block's end"),
            ));
        }
        let spill = flags & FLAG_SPILL != 0;
        let bonus_off = CORE + nblkptr * BP;
        let bonus_end = if spill { span - BP } else { span };
        if (nblkptr == 0 && dn_type != 0) || bonus_off > bonus_end {
            return Err(Error::corrupt(
                what,
                format!("dnode {i}: {nblkptr} block pointers in {span} bytes"),
            ));
        }
        let base = i * SLOT;
        auth_dnode(&mut aad, &d[..span], nblkptr, spill, swap, version)?;
        let encrypted = dn_type != 0 && object_type_is_encrypted(bonustype) && bonuslen != 0;
        if encrypted {
            enc.push((base + bonus_off, bonus_end - bonus_off));
        } else {
            aad.extend_from_slice(&d[bonus_off..bonus_end]);
        }
        i += extra + 1;
    }
    Ok((aad, enc))
}

fn tag_error(bp: &BlkPtr) -> Error {
    Error::corrupt(
        "encrypted block",
        format!(
            "{} block fails its MAC (damaged, or not this dataset's key)",
            ozfs_format::types::object_type_name(bp.object_type())
        ),
    )
}

fn u16_of(d: &[u8], off: usize, swap: bool) -> u16 {
    let v = u16::from_le_bytes([d[off], d[off + 1]]);
    if swap {
        v.swap_bytes()
    } else {
        v
    }
}

/// Append what authenticates one dnode (`span` bytes, `nblkptr` block
/// pointers, a spill pointer at its end when `spill`): its 64-byte core with
/// the flags masked to the portable spill bit and `dn_used` zeroed, then
/// each block pointer's authenticated form. The same bytes are the
/// associated data of a dnode block and the input of an objset's MACs.
fn auth_dnode(
    out: &mut Vec<u8>,
    d: &[u8],
    nblkptr: usize,
    spill: bool,
    swap: bool,
    version: u64,
) -> Result<()> {
    const CORE: usize = 64;
    const BP: usize = 128;
    if d.len() < CORE + nblkptr * BP + if spill { BP } else { 0 } {
        return Err(Error::corrupt(
            "encrypted dnode",
            format!("{nblkptr} block pointers do not fit {} bytes", d.len()),
        ));
    }
    let mut core = [0u8; CORE];
    core.copy_from_slice(&d[..CORE]);
    core[7] &= 1 << 2;
    core[24..32].fill(0);
    out.extend_from_slice(&core);
    for j in 0..nblkptr {
        let off = CORE + j * BP;
        auth_bp(out, &d[off..off + BP], swap, version)?;
    }
    if spill {
        auth_bp(out, &d[d.len() - BP..], swap, version)?;
    }
    Ok(())
}

/// Append a block pointer's authenticated form (`blkptr_auth_buf_t`): its
/// properties with the non-portable fields cleared, little-endian, then its
/// MAC, then (from version 1) eight zero bytes.
fn auth_bp(aad: &mut Vec<u8>, raw: &[u8], swap: bool, version: u64) -> Result<()> {
    let bp = BlkPtr::from_bytes(raw, swap)?;
    if bp.is_embedded() {
        return Err(Error::corrupt(
            "block pointer of an encrypted dataset",
            "an embedded block pointer (never written in an encrypted dataset)",
        ));
    }
    let mac = bp.mac(swap);
    let mut prop = bp.prop();
    let set = |prop: &mut u64, shift: u32, bits: u32, v: u64| {
        let mask = ((1u64 << bits) - 1) << shift;
        *prop = (*prop & !mask) | ((v << shift) & mask);
    };
    if version == 0 {
        set(&mut prop, 62, 1, 0); // dedup
        set(&mut prop, 40, 8, 0); // checksum
        set(&mut prop, 16, 16, 0); // psize = 512 (stored as sectors - 1)
    } else if bp.is_hole() {
        prop = 0;
    } else {
        if bp.level() != 0 {
            set(&mut prop, 63, 1, 0); // byte order
            set(&mut prop, 32, 7, 0); // compression
            set(&mut prop, 16, 16, 0); // psize = 512
        }
        set(&mut prop, 62, 1, 0);
        set(&mut prop, 40, 8, 0);
    }
    aad.extend_from_slice(&prop.to_le_bytes());
    aad.extend_from_slice(&mac);
    if version != 0 {
        aad.extend_from_slice(&[0u8; 8]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ozfs_format::ErrorKind;

    #[test]
    fn passphrase_is_pbkdf2_sha1_over_the_salt_le_bytes() {
        // Python's hashlib.pbkdf2_hmac('sha1', b'correct horse battery',
        // struct.pack('<Q', 0x0123456789abcdef), 1000, 32).
        let want = "356594bcb411d314d9e5a095f67729f9e4656d8639f8cd9e26812badd2f2ce5a";
        for input in [&b"correct horse battery"[..], b"correct horse battery\n"] {
            let k = WrappingKey::derive(KeyFormat::Passphrase, input, 0x0123456789abcdef, 1000)
                .expect("derive");
            let hex: String = k.0.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, want);
        }
        for bad in [&b"short"[..], &[b'x'; 513][..]] {
            let e = WrappingKey::derive(KeyFormat::Passphrase, bad, 1, 1)
                .err()
                .expect("refused");
            assert_eq!(e.kind(), ErrorKind::Invalid);
        }
        assert!(WrappingKey::derive(KeyFormat::Passphrase, b"long enough", 1, 0).is_err());
    }

    #[test]
    fn hex_and_raw_keys_are_checked() {
        let hex = b"00000000000000000000000000000000000000000000000000000000000c155c\n";
        let k = WrappingKey::derive(KeyFormat::Hex, hex, 0, 0).expect("hex");
        assert_eq!(&k.0[29..], &[0x0c, 0x15, 0x5c]);
        assert!(k.0[..29].iter().all(|&b| b == 0));
        let mut bad = hex.to_vec();
        bad[3] = b'g';
        assert!(WrappingKey::derive(KeyFormat::Hex, &bad, 0, 0).is_err());
        assert!(WrappingKey::derive(KeyFormat::Hex, &hex[..62], 0, 0).is_err());
        assert!(WrappingKey::derive(KeyFormat::Raw, &[7u8; 32], 0, 0).is_ok());
        assert!(WrappingKey::derive(KeyFormat::Raw, &[7u8; 33], 0, 0).is_err());
    }

    #[test]
    fn block_keys_are_hkdf_sha512_of_the_master_key() {
        let mut master = [0u8; 32];
        for (i, b) in master.iter_mut().enumerate().take(16) {
            *b = i as u8;
        }
        let mk = MasterKey {
            suite: Suite::Aes128Gcm,
            version: 1,
            master,
            hmac: [0; HMAC_KEY_LEN],
        };
        // Python: HMAC-SHA512 extract with an empty salt, expand with the
        // salt bytes as info, 16 bytes.
        let k = mk.block_key(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let hex: String = k[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "d402d95f7362ebf3d771faa4950d9725");
        assert!(k[16..].iter().all(|&b| b == 0));
    }

    /// Wrap as OpenZFS wraps (AES-256 in the suite's mode, guid, suite and
    /// version as associated data), then unwrap.
    fn wrap(suite: Suite, version: u64, wk: &[u8; 32]) -> (WrappedKey, Vec<u8>) {
        let kl = suite.key_len();
        let mut plain: Vec<u8> = (0..kl + HMAC_KEY_LEN).map(|i| (i * 7 + 3) as u8).collect();
        let keys = plain.clone();
        let guid = 0x1122334455667788u64;
        let mut aad = guid.to_le_bytes().to_vec();
        if version == 1 {
            aad.extend_from_slice(&suite_value(suite).to_le_bytes());
            aad.extend_from_slice(&1u64.to_le_bytes());
        }
        let iv = [9u8; 12];
        let tag: [u8; 16] = match suite.with_key_len(32) {
            Suite::Aes256Gcm => AesGcm::<Aes256, U12>::new_from_slice(wk)
                .expect("key")
                .encrypt_in_place_detached((&iv).into(), &aad, &mut plain)
                .expect("seal")
                .into(),
            _ => Ccm::<Aes256, U16, U12>::new_from_slice(wk)
                .expect("key")
                .encrypt_in_place_detached((&iv).into(), &aad, &mut plain)
                .expect("seal")
                .into(),
        };
        let mut master = plain[..kl].to_vec();
        master.resize(32, 0);
        (
            WrappedKey {
                suite,
                guid,
                version,
                master,
                hmac: plain[kl..].to_vec(),
                iv,
                mac: tag,
            },
            keys,
        )
    }

    #[test]
    fn generated_keys_wrap_and_unwrap() {
        let wk = WrappingKey([0x33u8; 32]);
        for suite in [Suite::Aes128Ccm, Suite::Aes256Gcm, Suite::Aes192Gcm] {
            let mk = MasterKey::generate(suite).expect("generate");
            let kl = suite.key_len();
            assert!(mk.master[kl..].iter().all(|&b| b == 0));
            assert!(mk.master[..kl].iter().any(|&b| b != 0));
            let w = mk.wrap(&wk, 0xfeed).expect("wrap");
            assert_eq!((w.master.len(), w.hmac.len(), w.version), (32, 64, 1));
            assert_ne!(&w.master[..kl], &mk.master[..kl], "stored wrapped");
            let back = w.unwrap_with(&wk).expect("unwrap");
            assert_eq!(back.master, mk.master);
            assert_eq!(back.hmac, mk.hmac);
            assert!(w.unwrap_with(&WrappingKey([0x34u8; 32])).is_err());
            // Two keys are never the same.
            let other = MasterKey::generate(suite).expect("generate");
            assert_ne!(other.master, mk.master);
        }
    }

    #[test]
    fn unwrapping_needs_the_right_key() {
        let wk = [0x5au8; 32];
        for suite in [Suite::Aes128Ccm, Suite::Aes256Gcm, Suite::Aes192Gcm] {
            for version in [0, 1] {
                let (w, keys) = wrap(suite, version, &wk);
                let mk = w.unwrap_with(&WrappingKey(wk)).expect("unwrap");
                let kl = suite.key_len();
                assert_eq!(&mk.master[..kl], &keys[..kl]);
                assert_eq!(&mk.hmac[..], &keys[kl..]);
                let mut other = wk;
                other[31] ^= 1;
                let e = w.unwrap_with(&WrappingKey(other)).expect_err("wrong key");
                assert_eq!(e.kind(), ErrorKind::Permission);
                let mut tampered = w.clone();
                tampered.guid ^= 1;
                assert!(tampered.unwrap_with(&WrappingKey(wk)).is_err());
            }
        }
        let (mut w, _) = wrap(Suite::Aes256Gcm, 1, &wk);
        w.version = 2;
        let e = w.unwrap_with(&WrappingKey(wk)).expect_err("version 2");
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }
}
