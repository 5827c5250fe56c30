//! # Encrypted datasets: key objects and loaded keys
//!
//! Every encrypted DSL directory names, in its ZAP (`com.datto:crypto_key_obj`),
//! a DSL Crypto Key object in the MOS: a ZAP holding the directory's
//! wrapped master and HMAC keys (`DSL_CRYPTO_MASTER_KEY_1`,
//! `DSL_CRYPTO_HMAC_KEY_1`, the wrap's `DSL_CRYPTO_IV` and `DSL_CRYPTO_MAC`),
//! its suite (`DSL_CRYPTO_SUITE`), guid and version, and the directory of
//! its *encryption root* (`DSL_CRYPTO_ROOT_DDOBJ`). The encryption root's
//! key object also holds how the user's key is given: `keyformat`,
//! `pbkdf2salt`, `pbkdf2iters`. All datasets under one root are wrapped by
//! the root's wrapping key, so one `load-key` of the root unlocks them all;
//! snapshots share their head's directory and key.
//!
//! Loading a key derives the wrapping key and proves it by unwrapping the
//! root's own key object (a wrong key fails that MAC and nothing is kept).
//! The wrapping key is then held in the pool's [`ozfs_spa::KeyStore`], in
//! this process's memory only; each directory's master key is unwrapped
//! the first time one of its objsets is opened. Unloading forgets both.
//!
//! Invariants: key material never reaches a log, an error message or the
//! disk; a dataset whose key is not loaded is refused with a permission
//! error naming its encryption root, never read as corrupt.

use crate::pool::{DatasetInfo, DslPool};
use ozfs_codec::crypt::{KeyFormat, MasterKey, Suite, WrappedKey, WrappingKey};
use ozfs_dmu::zap;
use ozfs_format::types::object_type_is_zap;
use ozfs_format::zap::ZapEntry;
use ozfs_format::{Error, Result};
use std::sync::Arc;

/// The DSL directory ZAP entry naming its crypto key object.
pub const CRYPTO_KEY_OBJ: &str = "com.datto:crypto_key_obj";

/// What an encrypted directory's key object says.
#[derive(Debug, Clone)]
pub struct DirCrypt {
    pub key_obj: u64,
    /// The encryption root's DSL directory.
    pub root_dir: u64,
    pub wrapped: WrappedKey,
}

/// How the encryption root's key is given.
#[derive(Debug, Clone, Copy)]
pub struct KeyParams {
    pub format: KeyFormat,
    pub salt: u64,
    pub iters: u64,
}

/// A dataset's encryption properties, as `zfs get` shows them.
#[derive(Debug, Clone)]
pub struct CryptProps {
    pub suite: Suite,
    /// Full name of the encryption root.
    pub root: String,
    pub params: KeyParams,
    /// Whether this process holds the root's key.
    pub available: bool,
}

fn bytes_of(e: &ZapEntry, len: usize, what: &str) -> Result<Vec<u8>> {
    if e.int_len != 1 || e.value.len() != len {
        return Err(Error::corrupt(
            "DSL crypto key",
            format!(
                "{what}: {} integers of {} bytes, expected {len} bytes",
                e.value.len(),
                e.int_len
            ),
        ));
    }
    Ok(e.value.iter().map(|&b| b as u8).collect())
}

impl DslPool {
    /// The crypto key object of DSL directory `dir_obj`, None when the
    /// directory is not encrypted (or predates extensible directories).
    pub fn crypto_key_obj(&self, dir_obj: u64) -> Result<Option<u64>> {
        let dn = self.mos.dnode(dir_obj)?;
        if !object_type_is_zap(dn.phys.object_type) {
            return Ok(None);
        }
        match zap::lookup(&self.mos, &dn, CRYPTO_KEY_OBJ)? {
            None => Ok(None),
            Some(e) => e.as_u64().filter(|&o| o != 0).map(Some).ok_or_else(|| {
                Error::corrupt(
                    format!("DSL directory {dir_obj}"),
                    format!("{CRYPTO_KEY_OBJ} is not one object number"),
                )
            }),
        }
    }

    fn key_entry(&self, key_obj: u64, name: &str) -> Result<ZapEntry> {
        zap::lookup_obj(&self.mos, key_obj, name)?.ok_or_else(|| {
            Error::corrupt(
                format!("DSL crypto key {key_obj}"),
                format!("no {name} entry"),
            )
        })
    }

    fn key_u64(&self, key_obj: u64, name: &str) -> Result<u64> {
        self.key_entry(key_obj, name)?.as_u64().ok_or_else(|| {
            Error::corrupt(
                format!("DSL crypto key {key_obj}"),
                format!("{name} is not one integer"),
            )
        })
    }

    /// The key object of an encrypted directory, read and checked; None
    /// for a directory that is not encrypted.
    pub fn dir_crypt(&self, dir_obj: u64) -> Result<Option<DirCrypt>> {
        let Some(key_obj) = self.crypto_key_obj(dir_obj)? else {
            return Ok(None);
        };
        let ctx = |e: Error| e.context(&format!("DSL crypto key of directory {dir_obj}"));
        let suite_v = self.key_u64(key_obj, "DSL_CRYPTO_SUITE").map_err(ctx)?;
        let suite = Suite::from_u64(suite_v).ok_or_else(|| {
            Error::unsupported(
                format!("DSL crypto key {key_obj}"),
                format!("encryption suite {suite_v}"),
            )
        })?;
        let guid = self.key_u64(key_obj, "DSL_CRYPTO_GUID").map_err(ctx)?;
        let root_dir = self
            .key_u64(key_obj, "DSL_CRYPTO_ROOT_DDOBJ")
            .map_err(ctx)?;
        // Version 0 is implied by a missing entry.
        let version = match zap::lookup_obj(&self.mos, key_obj, "DSL_CRYPTO_VERSION")? {
            None => 0,
            Some(e) => e.as_u64().ok_or_else(|| {
                Error::corrupt(
                    format!("DSL crypto key {key_obj}"),
                    "DSL_CRYPTO_VERSION is not one integer",
                )
            })?,
        };
        let master = bytes_of(
            &self.key_entry(key_obj, "DSL_CRYPTO_MASTER_KEY_1")?,
            32,
            "master key",
        )?;
        let hmac = bytes_of(
            &self.key_entry(key_obj, "DSL_CRYPTO_HMAC_KEY_1")?,
            64,
            "HMAC key",
        )?;
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&bytes_of(
            &self.key_entry(key_obj, "DSL_CRYPTO_IV")?,
            12,
            "IV",
        )?);
        let mut mac = [0u8; 16];
        mac.copy_from_slice(&bytes_of(
            &self.key_entry(key_obj, "DSL_CRYPTO_MAC")?,
            16,
            "MAC",
        )?);
        Ok(Some(DirCrypt {
            key_obj,
            root_dir,
            wrapped: WrappedKey {
                suite,
                guid,
                version,
                master,
                hmac,
                iv,
                mac,
            },
        }))
    }

    /// How encryption root `root_dir`'s key is given.
    pub fn key_params(&self, root_dir: u64) -> Result<KeyParams> {
        let key_obj = self.crypto_key_obj(root_dir)?.ok_or_else(|| {
            Error::corrupt(
                format!("DSL directory {root_dir}"),
                "named as an encryption root but has no crypto key",
            )
        })?;
        let f = self.key_u64(key_obj, "keyformat")?;
        let format = KeyFormat::from_u64(f).ok_or_else(|| {
            Error::corrupt(
                format!("DSL crypto key {key_obj}"),
                format!("keyformat {f}"),
            )
        })?;
        Ok(KeyParams {
            format,
            salt: self.key_u64(key_obj, "pbkdf2salt")?,
            iters: self.key_u64(key_obj, "pbkdf2iters")?,
        })
    }

    /// The `keylocation` property of encryption root `ds` (kept in its
    /// directory's props ZAP; "none" when not set).
    pub fn keylocation(&self, ds: &DatasetInfo) -> Result<String> {
        if ds.dir.props_zapobj == 0 {
            return Ok("none".into());
        }
        Ok(
            zap::lookup_obj(&self.mos, ds.dir.props_zapobj, "keylocation")?
                .and_then(|e| e.as_string())
                .unwrap_or_else(|| "none".into()),
        )
    }

    /// A dataset's encryption properties, None when it is not encrypted.
    pub fn crypt_props(&self, ds: &DatasetInfo) -> Result<Option<CryptProps>> {
        let Some(c) = self.dir_crypt(ds.dir_obj)? else {
            return Ok(None);
        };
        Ok(Some(CryptProps {
            suite: c.wrapped.suite,
            root: self.dir_name(c.root_dir)?,
            params: self.key_params(c.root_dir)?,
            available: self.pool.keys.wrapping(c.root_dir).is_some(),
        }))
    }

    /// Load the key of encryption root `ds` from `material` (the user's
    /// key in the root's `keyformat`). The key is proven on the root's own
    /// key object before it is kept; `dry_run` proves it and keeps nothing
    /// (`zfs load-key -n`). A dataset that is not an encryption root, or a
    /// key already loaded, is refused as OpenZFS refuses them.
    pub fn load_key(&self, ds: &DatasetInfo, material: &[u8], dry_run: bool) -> Result<()> {
        let head = self.head_name(ds);
        let c = self.root_crypt(ds, "loaded")?;
        if !dry_run && self.pool.keys.wrapping(c.root_dir).is_some() {
            return Err(Error::Exists(format!("'{head}': key already loaded")));
        }
        let p = self.key_params(c.root_dir)?;
        let wk = WrappingKey::derive(p.format, material, p.salt, p.iters)?;
        let mk = c
            .wrapped
            .unwrap_with(&wk)
            .map_err(|e| e.context(&format!("'{head}'")))?;
        if !dry_run {
            self.pool.keys.set_wrapping(c.root_dir, wk);
            self.pool.keys.set_master(ds.dir_obj, mk);
        }
        Ok(())
    }

    /// Forget encryption root `ds`'s key and every master key unwrapped
    /// with it.
    pub fn unload_key(&self, ds: &DatasetInfo) -> Result<()> {
        let head = self.head_name(ds);
        let c = self.root_crypt(ds, "unloaded")?;
        if self.pool.keys.wrapping(c.root_dir).is_none() {
            return Err(Error::Invalid(format!("'{head}': key already unloaded")));
        }
        let mut dirs = vec![c.root_dir];
        for d in self.list(&self.root()?, false, None)? {
            if let Ok(Some(dc)) = self.dir_crypt(d.dir_obj) {
                if dc.root_dir == c.root_dir {
                    dirs.push(d.dir_obj);
                }
            }
        }
        self.pool.keys.unload(c.root_dir, &dirs);
        Ok(())
    }

    /// The master key of encrypted dataset `ds`, unwrapped on first use
    /// with its encryption root's loaded key.
    pub fn dataset_key(&self, ds: &DatasetInfo) -> Result<Arc<MasterKey>> {
        self.dir_master_key(ds.dir_obj, &ds.name)
    }

    /// The master key of encrypted directory `dir_obj` (its datasets'
    /// name `name` for messages), unwrapped on first use with its
    /// encryption root's loaded key; a permission error naming the root
    /// when that key is not loaded.
    pub fn dir_master_key(&self, dir_obj: u64, name: &str) -> Result<Arc<MasterKey>> {
        if let Some(k) = self.pool.keys.master(dir_obj) {
            return Ok(k);
        }
        let c = self.dir_crypt(dir_obj)?.ok_or_else(|| {
            Error::corrupt(
                format!("dataset '{name}'"),
                "its objset is encrypted but its directory has no crypto key",
            )
        })?;
        let Some(wk) = self.pool.keys.wrapping(c.root_dir) else {
            let root = self
                .dir_name(c.root_dir)
                .unwrap_or_else(|_| format!("directory {}", c.root_dir));
            return Err(Error::Permission(format!(
                "dataset '{name}' is encrypted and the key of its encryption root '{root}' is not loaded"
            )));
        };
        let mk = c
            .wrapped
            .unwrap_with(&wk)
            .map_err(|e| e.context(&format!("dataset '{name}'")))?;
        Ok(self.pool.keys.set_master(dir_obj, mk))
    }

    /// The key object of `ds`, which must be an encryption root; refused
    /// as OpenZFS refuses keys `verb` ("loaded", "unloaded") elsewhere.
    fn root_crypt(&self, ds: &DatasetInfo, verb: &str) -> Result<DirCrypt> {
        let head = self.head_name(ds);
        let c = self
            .dir_crypt(ds.dir_obj)?
            .ok_or_else(|| Error::Invalid(format!("'{head}': encryption is not enabled")))?;
        if c.root_dir != ds.dir_obj {
            let root = self.dir_name(c.root_dir)?;
            return Err(Error::Invalid(format!(
                "'{head}': keys must be {verb} for encryption root of '{head}' ({root})"
            )));
        }
        Ok(c)
    }

    fn head_name(&self, ds: &DatasetInfo) -> String {
        ds.name.split('@').next().unwrap_or(&ds.name).to_string()
    }
}

/// The dataset ZAP entry holding a snapshot's IV set guid (raw streams
/// name the source's and the target's).
pub const IVSET_GUID: &str = "com.datto:ivset_guid";

impl DslPool {
    /// The IV set guid of dataset `ds` (0 when it has none: datasets
    /// written before OpenZFS kept one).
    pub fn ivset_guid(&self, ds: &DatasetInfo) -> Result<u64> {
        let dn = self.mos.dnode(ds.ds_obj)?;
        if !object_type_is_zap(dn.phys.object_type) {
            return Ok(0);
        }
        match zap::lookup(&self.mos, &dn, IVSET_GUID)? {
            None => Ok(0),
            Some(e) => e.as_u64().ok_or_else(|| {
                Error::corrupt(
                    format!("dataset '{}'", ds.name),
                    format!("{IVSET_GUID} is not one integer"),
                )
            }),
        }
    }

    /// What a raw stream (`zfs send -w`) carries in its BEGIN payload as
    /// `crypt_keydata`, in OpenZFS's order (`dsl_crypto_populate_key_nvlist`):
    /// the directory's wrapped keys as they are stored (no key is needed
    /// or used), how the encryption root's key is given, the shape of the
    /// objset's meta-dnode `meta` and its portable MAC `portable_mac`,
    /// and the IV set guids of the snapshot and of the incremental source
    /// (`from_ivset`, 0 for a full stream).
    pub fn raw_key_nvlist(
        &self,
        ds: &DatasetInfo,
        meta: &ozfs_format::dnode::DnodePhys,
        portable_mac: &[u8],
        from_ivset: u64,
    ) -> Result<ozfs_format::NvList> {
        use ozfs_format::{NvList, NvValue};
        let Some(c) = self.dir_crypt(ds.dir_obj)? else {
            return Err(Error::Invalid(format!(
                "'{}' is not encrypted: a raw stream of it carries no keys",
                ds.name
            )));
        };
        // OpenZFS sends only keys of the current on-disk version.
        if c.wrapped.version != 1 {
            return Err(Error::unsupported(
                format!("cannot send '{}' raw", ds.name),
                format!("its key is of on-disk version {}", c.wrapped.version),
            ));
        }
        let root_key = self.crypto_key_obj(c.root_dir)?.ok_or_else(|| {
            Error::corrupt(
                format!("DSL directory {}", c.root_dir),
                "named as an encryption root but has no crypto key",
            )
        })?;
        let format = self.key_u64(root_key, "keyformat")?;
        let (iters, salt) = if KeyFormat::from_u64(format) == Some(KeyFormat::Passphrase) {
            (
                self.key_u64(root_key, "pbkdf2iters")?,
                self.key_u64(root_key, "pbkdf2salt")?,
            )
        } else {
            (0, 0)
        };
        let suite = self.key_u64(c.key_obj, "DSL_CRYPTO_SUITE")?;
        let w = &c.wrapped;
        let mut nv = NvList::new();
        let u = |nv: &mut NvList, k: &str, v: u64| nv.set(k, NvValue::Uint64(v));
        u(&mut nv, "DSL_CRYPTO_SUITE", suite);
        u(&mut nv, "DSL_CRYPTO_GUID", w.guid);
        u(&mut nv, "DSL_CRYPTO_VERSION", w.version);
        let a = |nv: &mut NvList, k: &str, v: &[u8]| nv.set(k, NvValue::Uint8Array(v.to_vec()));
        a(&mut nv, "DSL_CRYPTO_MASTER_KEY_1", &w.master);
        a(&mut nv, "DSL_CRYPTO_HMAC_KEY_1", &w.hmac);
        a(&mut nv, "DSL_CRYPTO_IV", &w.iv);
        a(&mut nv, "DSL_CRYPTO_MAC", &w.mac);
        a(&mut nv, "portable_mac", portable_mac);
        u(&mut nv, "keyformat", format);
        u(&mut nv, "pbkdf2iters", iters);
        u(&mut nv, "pbkdf2salt", salt);
        u(&mut nv, "mdn_checksum", meta.checksum as u64);
        u(&mut nv, "mdn_compress", meta.compress as u64);
        u(&mut nv, "mdn_nlevels", meta.nlevels as u64);
        u(&mut nv, "mdn_blksz", meta.datablksz());
        u(&mut nv, "mdn_indblkshift", meta.indblkshift as u64);
        u(&mut nv, "mdn_nblkptr", meta.nblkptr as u64);
        u(&mut nv, "mdn_maxblkid", meta.maxblkid);
        u(&mut nv, "to_ivset_guid", self.ivset_guid(ds)?);
        u(&mut nv, "from_ivset_guid", from_ivset);
        Ok(nv)
    }
}

/// How a new file system is encrypted (`zfs create`).
pub enum NewCrypt {
    /// As its parent says: not encrypted under an unencrypted parent
    /// (`suite` must then be None: a suite alone needs a key format);
    /// under an encrypted one a new key of `suite` (the parent's when
    /// None), wrapped with the parent's encryption root's key, which must
    /// be loaded.
    Inherit { suite: Option<Suite> },
    /// A new encryption root: its key's parameters, the wrapping key
    /// derived from the user's key with them, and its `keylocation`.
    Root {
        suite: Suite,
        params: KeyParams,
        wrapping: WrappingKey,
        keylocation: String,
    },
    /// `encryption=off`: refused under an encrypted parent.
    Off,
    /// Set up by the caller (a clone shares its origin's key object).
    Later,
}

/// A checked plan for a new encrypted directory
/// ([`crate::sync::PoolWriter::plan_new_crypt`]).
pub struct CryptPlan {
    suite: Suite,
    params: KeyParams,
    wrapping: Arc<WrappingKey>,
    /// The encryption root (None: the new directory is one).
    root_dir: Option<u64>,
    keylocation: Option<String>,
}

impl crate::sync::PoolWriter {
    /// Check how new file system `name` under `parent_dir` is to be
    /// encrypted (`spec`), before anything is made: the parent's key
    /// loaded, the features enabled, no unencrypted child of an encrypted
    /// parent. None: it is not encrypted.
    pub fn plan_new_crypt(
        &self,
        name: &str,
        parent_dir: u64,
        spec: NewCrypt,
    ) -> Result<Option<CryptPlan>> {
        let cannot = format!("cannot create '{name}'");
        let dsl = self.dsl();
        let parent = dsl.dir_crypt(parent_dir)?;
        let plan = match spec {
            NewCrypt::Later => return Ok(None),
            NewCrypt::Off => {
                if parent.is_some() {
                    return Err(Error::Invalid(format!(
                        "{cannot}: an unencrypted file system cannot be created under an \
                         encrypted parent"
                    )));
                }
                return Ok(None);
            }
            NewCrypt::Inherit { suite } => {
                let Some(p) = parent else {
                    if suite.is_some() {
                        return Err(Error::Invalid(format!(
                            "{cannot}: Keyformat required for new encryption root."
                        )));
                    }
                    return Ok(None);
                };
                let Some(wk) = self.pool.keys.wrapping(p.root_dir) else {
                    let root = dsl
                        .dir_name(p.root_dir)
                        .unwrap_or_else(|_| format!("directory {}", p.root_dir));
                    return Err(Error::Permission(format!(
                        "{cannot}: the key of its encryption root '{root}' is not loaded \
                         (zfs load-key)"
                    )));
                };
                CryptPlan {
                    suite: suite.unwrap_or(p.wrapped.suite),
                    params: dsl.key_params(p.root_dir)?,
                    wrapping: wk,
                    root_dir: Some(p.root_dir),
                    keylocation: None,
                }
            }
            NewCrypt::Root {
                suite,
                params,
                wrapping,
                keylocation,
            } => CryptPlan {
                suite,
                params,
                wrapping: Arc::new(wrapping),
                root_dir: None,
                keylocation: Some(keylocation),
            },
        };
        for f in [crate::features::ENCRYPTION, "com.datto:bookmark_v2"] {
            if crate::features::refcount(self, f)?.is_none() {
                return Err(Error::unsupported(
                    cannot,
                    format!(
                        "pool '{}' does not have feature {f} enabled",
                        self.pool.name
                    ),
                ));
            }
        }
        Ok(Some(plan))
    }

    /// Make new directory `dir_obj` (head dataset `ds_obj`) encrypted as
    /// `plan` says, as OpenZFS's `dsl_dataset_create_crypt_sync`: a DSL
    /// Crypto Key object holding a new random master key wrapped with the
    /// encryption root's wrapping key, named by the directory (made a
    /// ZAP), the dataset listing `encryption`; a new root also gets its
    /// `keylocation`. The keys are then loaded in this process. Returns
    /// the new objset's master key.
    pub fn encrypt_new_dir(
        &mut self,
        dir_obj: u64,
        ds_obj: u64,
        plan: CryptPlan,
    ) -> Result<Arc<MasterKey>> {
        let CryptPlan {
            suite,
            params,
            wrapping,
            root_dir,
            keylocation,
        } = plan;
        let root_dir = root_dir.unwrap_or(dir_obj);
        let mk = MasterKey::generate(suite)?;
        let guid = ozfs_codec::crypt::random_u64()?;
        let w = mk.wrap(&wrapping, guid)?;
        self.make_key_object(
            dir_obj,
            ds_obj,
            &w,
            root_dir,
            &params,
            keylocation.as_deref(),
        )?;
        if keylocation.is_some() {
            self.pool.keys.set_wrapping_arc(dir_obj, wrapping);
        }
        Ok(self.pool.keys.set_master(dir_obj, mk))
    }

    /// A clone (`dir_obj`) of a snapshot of encrypted directory
    /// `origin_dir` shares the origin's key object, as OpenZFS's
    /// `dsl_crypto_key_clone_sync`: the new directory (made a ZAP) names
    /// it and its reference count rises. Nothing to do for an unencrypted
    /// origin.
    pub fn clone_dir_key(&mut self, dir_obj: u64, origin_dir: u64) -> Result<()> {
        let Some(key) = self.dir_key_obj(origin_dir)? else {
            return Ok(());
        };
        let refs = ozfs_dmu::zap_tx::lookup_u64(&self.mos, key, KEY_REFCOUNT)
            .map_err(|e| e.context(&format!("DSL crypto key {key}")))?;
        let refs = refs.checked_add(1).ok_or_else(|| {
            Error::corrupt(format!("DSL crypto key {key}"), "reference count overflows")
        })?;
        ozfs_dmu::zap_tx::update(&mut self.mos, key, KEY_REFCOUNT, 8, &[refs])?;
        crate::features::zapify_dataset(self, dir_obj)?;
        ozfs_dmu::zap_tx::add(&mut self.mos, dir_obj, CRYPTO_KEY_OBJ.as_bytes(), 8, &[key])
    }
}

/// The key object's entries written for wrapped key `w` of encryption
/// root `root_dir` with key parameters `params` (all but the reference
/// count), as OpenZFS's `dsl_crypto_key_sync_impl` writes them.
fn key_entries(
    w: &WrappedKey,
    root_dir: u64,
    params: &KeyParams,
) -> Vec<(&'static str, u8, Vec<u64>)> {
    let bytes = |b: &[u8]| -> Vec<u64> { b.iter().map(|&x| x as u64).collect() };
    vec![
        ("DSL_CRYPTO_SUITE", 8, vec![w.suite.value()]),
        ("DSL_CRYPTO_ROOT_DDOBJ", 8, vec![root_dir]),
        ("DSL_CRYPTO_GUID", 8, vec![w.guid]),
        ("DSL_CRYPTO_IV", 1, bytes(&w.iv)),
        ("DSL_CRYPTO_MAC", 1, bytes(&w.mac)),
        ("DSL_CRYPTO_MASTER_KEY_1", 1, bytes(&w.master)),
        ("DSL_CRYPTO_HMAC_KEY_1", 1, bytes(&w.hmac)),
        ("keyformat", 8, vec![params.format.value()]),
        ("pbkdf2salt", 8, vec![params.salt]),
        ("pbkdf2iters", 8, vec![params.iters]),
        ("DSL_CRYPTO_VERSION", 8, vec![w.version]),
    ]
}

impl crate::sync::PoolWriter {
    /// A new key object for directory `dir_obj` (head dataset `ds_obj`)
    /// holding `w`, named by the directory (made a ZAP), the dataset
    /// listing `encryption`, reference count 1; `keylocation` on a root.
    fn make_key_object(
        &mut self,
        dir_obj: u64,
        ds_obj: u64,
        w: &WrappedKey,
        root_dir: u64,
        params: &KeyParams,
        keylocation: Option<&str>,
    ) -> Result<u64> {
        let key_obj = self.mos.create_zap(
            ozfs_format::types::ot::ZAP_METADATA_NEW,
            0,
            Vec::new(),
            0,
            1,
        )?;
        for (k, len, v) in key_entries(w, root_dir, params) {
            ozfs_dmu::zap_tx::update(&mut self.mos, key_obj, k, len, &v)?;
        }
        ozfs_dmu::zap_tx::update(&mut self.mos, key_obj, KEY_REFCOUNT, 8, &[1])?;
        crate::features::zapify_dataset(self, dir_obj)?;
        ozfs_dmu::zap_tx::add(
            &mut self.mos,
            dir_obj,
            CRYPTO_KEY_OBJ.as_bytes(),
            8,
            &[key_obj],
        )?;
        crate::features::activate_on_dataset(self, ds_obj, crate::features::ENCRYPTION)?;
        if let Some(loc) = keylocation {
            self.set_keylocation(dir_obj, Some(loc))?;
        }
        Ok(key_obj)
    }

    /// Set (or, None, remove) directory `dir_obj`'s `keylocation`.
    fn set_keylocation(&mut self, dir_obj: u64, loc: Option<&str>) -> Result<()> {
        let props = self.dir(dir_obj)?.props_zapobj;
        if props == 0 {
            return Ok(());
        }
        match loc {
            Some(l) => {
                let mut vals: Vec<u64> = l.bytes().map(|b| b as u64).collect();
                vals.push(0);
                ozfs_dmu::zap_tx::update(&mut self.mos, props, "keylocation", 1, &vals)
            }
            None => ozfs_dmu::zap_tx::remove(&mut self.mos, props, b"keylocation").map(|_| ()),
        }
    }

    /// Whether directory `dir_obj` is a clone's (its origin a real
    /// snapshot, not the pool's `$ORIGIN`).
    fn is_clone_dir(&self, dir_obj: u64) -> Result<bool> {
        let origin = self.dir(dir_obj)?.origin_obj;
        if origin == 0 {
            return Ok(false);
        }
        let odir = self.dataset(origin)?.dir_obj;
        let root = self.dir(self.root_dir_obj)?;
        let origin_dir = ozfs_dmu::zap_tx::lookup(&self.mos, root.child_dir_zapobj, b"$ORIGIN")?
            .and_then(|e| e.as_u64());
        Ok(origin_dir != Some(odir))
    }
}

/// The key object's count of directories sharing it.
const KEY_REFCOUNT: &str = "DSL_CRYPTO_REFCOUNT";

impl crate::sync::PoolWriter {
    /// The crypto key object of DSL directory `dir_obj` as the open txg
    /// has it (None: not encrypted).
    pub fn dir_key_obj(&self, dir_obj: u64) -> Result<Option<u64>> {
        let dn = self.mos.dnode(dir_obj)?;
        if !object_type_is_zap(dn.phys.object_type) {
            return Ok(None);
        }
        // As `DslPool::crypto_key_obj`, on the open txg: an entry that is
        // not one object number is damage, never "not encrypted".
        match ozfs_dmu::zap_tx::lookup(&self.mos, dir_obj, CRYPTO_KEY_OBJ.as_bytes())? {
            None => Ok(None),
            Some(e) => e.as_u64().filter(|&o| o != 0).map(Some).ok_or_else(|| {
                Error::corrupt(
                    format!("DSL directory {dir_obj}"),
                    format!("{CRYPTO_KEY_OBJ} is not one object number"),
                )
            }),
        }
    }

    /// Refuse `what` on an encrypted directory (promoting an encrypted
    /// clone: OpenZFS moves key objects and checks encryption roots, which
    /// ozfs does not do yet).
    pub fn refuse_encrypted(&self, dir_obj: u64, what: &str) -> Result<()> {
        if self.dir_key_obj(dir_obj)?.is_some() {
            return Err(Error::unsupported(
                what,
                "the dataset is encrypted (ozfs does not promote encrypted clones yet)",
            ));
        }
        Ok(())
    }

    /// A destroyed directory's key object, as OpenZFS's
    /// `dsl_crypto_key_destroy_sync`: its reference count drops, and the
    /// object goes with the last reference.
    pub fn release_dir_key(&mut self, dir_obj: u64) -> Result<()> {
        let Some(key) = self.dir_key_obj(dir_obj)? else {
            return Ok(());
        };
        let refs = ozfs_dmu::zap_tx::lookup_u64(&self.mos, key, KEY_REFCOUNT)
            .map_err(|e| e.context(&format!("DSL crypto key {key}")))?;
        if refs > 1 {
            ozfs_dmu::zap_tx::update(&mut self.mos, key, KEY_REFCOUNT, 8, &[refs - 1])
        } else {
            self.mos.free_object(key)
        }
    }

    /// The encryption root of directory `dir_obj` as the open txg has it
    /// (None: not encrypted).
    fn dir_encryption_root(&self, dir_obj: u64) -> Result<Option<u64>> {
        let Some(key) = self.dir_key_obj(dir_obj)? else {
            return Ok(None);
        };
        ozfs_dmu::zap_tx::lookup_u64(&self.mos, key, "DSL_CRYPTO_ROOT_DDOBJ")
            .map(Some)
            .map_err(|e| e.context(&format!("DSL crypto key {key}")))
    }

    /// An encrypted directory that is not its own encryption root stays
    /// under that root (OpenZFS's `dsl_dir_rename_crypt_check`): its key
    /// is wrapped by the root's, which `change-key` re-wraps by walking
    /// the root's descendants.
    pub fn rename_crypt_check(&self, dir_obj: u64, new_parent: u64) -> Result<()> {
        let Some(root) = self.dir_encryption_root(dir_obj)? else {
            return Ok(());
        };
        if root == dir_obj || self.dir_encryption_root(new_parent)? == Some(root) {
            return Ok(());
        }
        Err(Error::Permission(
            "cannot move encrypted child outside of its encryption root".into(),
        ))
    }

    /// A new snapshot `snap_obj` of an encrypted dataset gets its IV set
    /// guid (random) where `bookmark_v2` is enabled, as OpenZFS's
    /// `dsl_dataset_snapshot_sync_impl` gives it (raw incremental streams
    /// name it).
    pub fn snapshot_ivset_guid(&mut self, dir_obj: u64, snap_obj: u64) -> Result<()> {
        if self.dir_key_obj(dir_obj)?.is_none()
            || crate::features::refcount(self, "com.datto:bookmark_v2")?.is_none()
        {
            return Ok(());
        }
        crate::features::zapify_dataset(self, snap_obj)?;
        let guid = ozfs_dmu::tx::random_u64();
        ozfs_dmu::zap_tx::update(&mut self.mos, snap_obj, IVSET_GUID, 8, &[guid])
    }
}

/// How `zfs change-key` changes an encryption root's key.
pub enum ChangeKey {
    /// A new wrapping key (`-o keyformat=…`, a new passphrase…): the
    /// dataset becomes (or stays) an encryption root with these key
    /// parameters and `keylocation`.
    New {
        params: KeyParams,
        wrapping: WrappingKey,
        keylocation: String,
    },
    /// `-i`: the encryption root joins its parent's encryption root.
    Inherit,
}

impl crate::sync::PoolWriter {
    /// `zfs change-key` of file system `name` (directory `dir_obj`), as
    /// OpenZFS's `spa_keystore_change_key_sync`: every key object wrapped
    /// by the root `dir_obj` belongs to (its own, and its descendants'
    /// under the same root, clones' shared objects once) is unwrapped
    /// with the loaded key and wrapped again — a new IV, the same guid and
    /// master keys — with the new wrapping key (or, `Inherit`, the
    /// parent's root's), naming its new root and key parameters; the
    /// root's `keylocation` follows. Data blocks are not touched. The old
    /// wrapping key must be loaded (`zfs load-key`, `change-key -l`).
    pub fn change_key(&mut self, name: &str, dir_obj: u64, how: ChangeKey) -> Result<()> {
        let cannot = format!("cannot change key of '{name}'");
        let dsl = self.dsl();
        let c = dsl
            .dir_crypt(dir_obj)?
            .ok_or_else(|| Error::Invalid(format!("{cannot}: encryption is not enabled")))?;
        let old_root = c.root_dir;
        let old_wk = self.pool.keys.wrapping(old_root).ok_or_else(|| {
            Error::Permission(format!(
                "{cannot}: Permission denied: the key of its encryption root is not loaded \
                 (zfs load-key, or change-key -l)"
            ))
        })?;
        let (new_root, params, wk, keylocation) = match how {
            ChangeKey::New {
                params,
                wrapping,
                keylocation,
            } => (dir_obj, params, Arc::new(wrapping), Some(keylocation)),
            ChangeKey::Inherit => {
                if old_root != dir_obj {
                    return Err(Error::Invalid(format!(
                        "{cannot}: Key inheritting can only be performed on encryption roots."
                    )));
                }
                let parent = self.dir(dir_obj)?.parent_obj;
                let pc = dsl.dir_crypt(parent)?.ok_or_else(|| {
                    Error::Invalid(format!(
                        "{cannot}: Root dataset cannot inherit key from an unencrypted parent."
                    ))
                })?;
                let pwk = self.pool.keys.wrapping(pc.root_dir).ok_or_else(|| {
                    Error::Permission(format!(
                        "{cannot}: the key of the parent's encryption root is not loaded"
                    ))
                })?;
                (pc.root_dir, dsl.key_params(pc.root_dir)?, pwk, None)
            }
        };
        if self.is_clone_dir(dir_obj)? {
            return Err(Error::Invalid(format!(
                "{cannot}: Keys cannot be changed on clones (a clone always uses its origin's key)."
            )));
        }
        // The directories whose keys change: `dir_obj` and its
        // descendants still under the old root (a child that is its own
        // root, and what is under it, keeps its key). A clone shares its
        // origin's key object: re-wrapped with the origin, never on its own.
        let head = dsl.lookup(&dsl.dir_name(dir_obj)?)?;
        let mut todo: Vec<(u64, WrappedKey)> = Vec::new();
        for d in dsl.list(&head, false, None)? {
            if d.dir_obj != dir_obj && self.is_clone_dir(d.dir_obj)? {
                continue;
            }
            let Some(dc) = dsl.dir_crypt(d.dir_obj)? else {
                continue;
            };
            if (d.dir_obj == dir_obj || dc.root_dir == old_root)
                && !todo.iter().any(|(k, _)| *k == dc.key_obj)
            {
                // Every key is re-wrapped before any is written: a failure
                // leaves the open txg untouched.
                let mk = dc.wrapped.unwrap_with(&old_wk)?;
                todo.push((dc.key_obj, mk.wrap(&wk, dc.wrapped.guid)?));
            }
        }
        for (key_obj, w) in &todo {
            for (k, len, v) in key_entries(w, new_root, &params) {
                ozfs_dmu::zap_tx::update(&mut self.mos, *key_obj, k, len, &v)?;
            }
        }
        self.set_keylocation(dir_obj, keylocation.as_deref())?;
        match keylocation {
            Some(_) => self.pool.keys.set_wrapping_arc(dir_obj, wk),
            None if old_root == dir_obj => self.pool.keys.unload(dir_obj, &[]),
            None => {}
        }
        Ok(())
    }
}

/// What a raw stream's BEGIN payload (`crypt_keydata`) says about the
/// encrypted dataset it carries: its wrapped keys and key parameters, the
/// portable MAC of its objset, the shape of its meta-dnode (which that MAC
/// covers) and its IV set guids. Every field is checked before use.
#[derive(Debug, Clone)]
pub struct RawKeyData {
    pub wrapped: WrappedKey,
    pub params: KeyParams,
    pub portable_mac: [u8; 32],
    /// The meta-dnode: checksum, compress, nlevels, block size, indirect
    /// block shift, block pointers, maxblkid.
    pub mdn_checksum: u8,
    pub mdn_compress: u8,
    pub mdn_nlevels: u8,
    pub mdn_blksz: u64,
    pub mdn_indblkshift: u8,
    pub mdn_nblkptr: u8,
    pub mdn_maxblkid: u64,
    pub to_ivset_guid: u64,
    pub from_ivset_guid: u64,
}

impl RawKeyData {
    /// Read and check `crypt_keydata`.
    pub fn parse(nv: &ozfs_format::NvList) -> Result<RawKeyData> {
        let what = "raw stream crypt_keydata";
        let u = |k: &str| -> Result<u64> {
            nv.get_u64(k)
                .ok_or_else(|| Error::corrupt(what, format!("no integer {k}")))
        };
        let bytes = |k: &str, len: usize| -> Result<Vec<u8>> {
            match nv.get(k) {
                Some(ozfs_format::NvValue::Uint8Array(v)) if v.len() == len => Ok(v.clone()),
                _ => Err(Error::corrupt(what, format!("{k} is not {len} bytes"))),
            }
        };

        let suite_v = u("DSL_CRYPTO_SUITE")?;
        let suite = Suite::from_u64(suite_v)
            .ok_or_else(|| Error::corrupt(what, format!("encryption suite {suite_v}")))?;
        let version = u("DSL_CRYPTO_VERSION")?;
        if version != 1 {
            return Err(Error::unsupported(what, format!("key version {version}")));
        }
        let fmt_v = u("keyformat")?;
        let format = KeyFormat::from_u64(fmt_v)
            .ok_or_else(|| Error::corrupt(what, format!("keyformat {fmt_v}")))?;
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&bytes("DSL_CRYPTO_IV", 12)?);
        let mut mac = [0u8; 16];
        mac.copy_from_slice(&bytes("DSL_CRYPTO_MAC", 16)?);
        let mut portable_mac = [0u8; 32];
        portable_mac.copy_from_slice(&bytes("portable_mac", 32)?);
        let small = |k: &str, max: u64| -> Result<u8> {
            let v = u(k)?;
            if v > max {
                return Err(Error::corrupt(what, format!("{k} {v}")));
            }
            Ok(v as u8)
        };
        let mdn_blksz = u("mdn_blksz")?;
        if !(512..=(128 << 10)).contains(&mdn_blksz) || !mdn_blksz.is_power_of_two() {
            return Err(Error::corrupt(what, format!("mdn_blksz {mdn_blksz}")));
        }
        let mdn_indblkshift = small("mdn_indblkshift", 17)?;
        if mdn_indblkshift < 10 {
            return Err(Error::corrupt(
                what,
                format!("mdn_indblkshift {mdn_indblkshift}"),
            ));
        }
        let mdn_nblkptr = small("mdn_nblkptr", 3)?;
        let mdn_nlevels = small("mdn_nlevels", 12)?;
        // OpenZFS's meta-dnodes: three block pointers, indirect blocks of
        // at least 4 KiB.
        if mdn_nblkptr != 3 || mdn_nlevels == 0 || mdn_indblkshift < 12 {
            return Err(Error::corrupt(
                what,
                format!(
                    "meta-dnode of {mdn_nblkptr} block pointers, {mdn_nlevels} levels, \
                     indirect shift {mdn_indblkshift}"
                ),
            ));
        }
        let mdn_maxblkid = u("mdn_maxblkid")?;
        let shape = ozfs_format::dnode::DnodePhys {
            object_type: ozfs_format::types::ot::DNODE,
            nblkptr: mdn_nblkptr,
            indblkshift: mdn_indblkshift,
            nlevels: mdn_nlevels,
            datablkszsec: (mdn_blksz / 512) as u16,
            ..Default::default()
        };
        if mdn_maxblkid > shape.max_blkid_limit() {
            return Err(Error::corrupt(what, format!("mdn_maxblkid {mdn_maxblkid}")));
        }
        let (iters, salt) = (u("pbkdf2iters")?, u("pbkdf2salt")?);
        if (format == KeyFormat::Passphrase) != (iters != 0) {
            return Err(Error::corrupt(
                what,
                format!("keyformat {} with pbkdf2iters {iters}", format.name()),
            ));
        }
        Ok(RawKeyData {
            wrapped: WrappedKey {
                suite,
                guid: u("DSL_CRYPTO_GUID")?,
                version,
                master: bytes("DSL_CRYPTO_MASTER_KEY_1", 32)?,
                hmac: bytes("DSL_CRYPTO_HMAC_KEY_1", 64)?,
                iv,
                mac,
            },
            params: KeyParams {
                format,
                salt,
                iters,
            },
            portable_mac,
            mdn_checksum: small("mdn_checksum", 8)?,
            mdn_compress: small("mdn_compress", 14)?,
            mdn_nlevels,
            mdn_blksz,
            mdn_indblkshift,
            mdn_nblkptr,
            mdn_maxblkid,
            to_ivset_guid: u("to_ivset_guid")?,
            from_ivset_guid: nv.get_u64("from_ivset_guid").unwrap_or(0),
        })
    }
}

impl crate::sync::PoolWriter {
    /// A raw stream needs the pool's `encryption` and `bookmark_v2`
    /// features enabled (checked before anything is made).
    pub fn check_raw_recv(&self) -> Result<()> {
        for f in [crate::features::ENCRYPTION, "com.datto:bookmark_v2"] {
            if crate::features::refcount(self, f)?.is_none() {
                return Err(Error::unsupported(
                    "raw receive",
                    format!(
                        "pool '{}' does not have feature {f} enabled",
                        self.pool.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The key object of a file system received raw (directory `dir_obj`,
    /// head dataset `ds_obj`): the stream's wrapped keys as they are, the
    /// received file system its own encryption root with `keylocation`
    /// `prompt`, as OpenZFS's `dsl_crypto_recv_raw_key_sync` makes it. No
    /// key is needed or loaded.
    pub fn raw_recv_key(&mut self, dir_obj: u64, ds_obj: u64, k: &RawKeyData) -> Result<()> {
        self.check_raw_recv()?;
        self.make_key_object(
            dir_obj,
            ds_obj,
            &k.wrapped,
            dir_obj,
            &k.params,
            Some("prompt"),
        )
        .map(|_| ())
    }
}
