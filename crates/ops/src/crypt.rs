//! Encryption keys for the operations that read encrypted datasets:
//! where a key comes from (`keylocation`: `prompt` or `file:///…`, or a
//! location given on the command line) and `zfs load-key` /
//! `unload-key`.
//!
//! A loaded key lives in the memory of the process that loaded it (the
//! pool's `KeyStore`) and nowhere else. A one-shot command that reads an
//! encrypted dataset loads the key it needs when asked to (`ozfs cp -l`,
//! as `zfs mount -l`); `zfs load-key` proves a key on the pool and keeps
//! it in the process that holds the pool — today none holds a read-only
//! import, so it proves the key and says so.
//!
//! Invariants: key material is read from the named place only, at most
//! 1 MiB of it, never echoed, never logged, and its final buffer is zeroed
//! once the wrapping key is derived (copies the standard library makes on
//! the way, growing a buffer or reading a line, are not).

use crate::error::{invalid, Error, Result};
use ozfs_codec::crypt::KeyFormat;
use ozfs_dsl::pool::DatasetInfo;
use ozfs_dsl::DslPool;
use std::io::Read;

/// How a command gets the keys of the encrypted datasets it reads or writes.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KeyLoad {
    /// Load missing keys from their `keylocation` (`-l`).
    pub load: bool,
    /// Read the key from here instead (`-L keylocation`).
    pub location: Option<String>,
}

impl KeyLoad {
    /// Whether any key is to be loaded.
    pub fn wanted(&self) -> bool {
        self.load || self.location.is_some()
    }
}

const MAX_KEY_FILE: u64 = 1 << 20;

/// Key material from `location` for a key in `format` of encryption root
/// `root`: `file:///path` is read whole; `prompt` reads the terminal
/// without echo (a passphrase twice is not asked: the key exists) or, when
/// standard input is not a terminal, standard input.
pub fn read_key_material(location: &str, format: KeyFormat, root: &str) -> Result<Zeroed> {
    let cannot = |m: String| Error::Invalid(format!("cannot load key for '{root}': {m}"));
    if let Some(path) = location.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(cannot(format!(
                "keylocation '{location}' is not an absolute file:// URI"
            )));
        }
        let f = std::fs::File::open(path)
            .map_err(|e| Error::io(format!("cannot load key for '{root}': {path}"), e))?;
        let mut buf = Vec::new();
        f.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(format!("cannot load key for '{root}': {path}"), e))?;
        if buf.len() as u64 > MAX_KEY_FILE {
            return Err(cannot(format!("{path} is larger than a key")));
        }
        return Ok(Zeroed(buf));
    }
    if location == "prompt" {
        return prompt(format, root).map(Zeroed);
    }
    if location.starts_with("https://") || location.starts_with("http://") {
        return Err(Error::unsupported(
            format!("cannot load key for '{root}'"),
            format!("keylocation '{location}' (network locations are not fetched)"),
        ));
    }
    Err(cannot(format!("invalid keylocation '{location}'")))
}

fn prompt(format: KeyFormat, root: &str) -> Result<Vec<u8>> {
    let tty = unsafe { libc::isatty(0) } == 1;
    let mut buf = Vec::new();
    if !tty {
        std::io::stdin()
            .take(MAX_KEY_FILE + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("standard input", e))?;
        return Ok(buf);
    }
    let what = match format {
        KeyFormat::Passphrase => "passphrase",
        _ => "key",
    };
    eprint!("Enter {what} for '{root}': ");
    // SAFETY: termios is plain data; fd 0 is a terminal (checked above).
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    let saved = unsafe { libc::tcgetattr(0, &mut t) } == 0;
    let old = t;
    if saved {
        t.c_lflag &= !libc::ECHO;
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) };
    }
    let mut line = String::new();
    let r = std::io::stdin().read_line(&mut line);
    if saved {
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &old) };
    }
    eprintln!();
    r.map_err(|e| Error::io("terminal", e))?;
    let mut bytes = std::mem::take(&mut line).into_bytes();
    buf.extend_from_slice(&bytes);
    ozfs_codec::crypt::wipe(&mut bytes);
    Ok(buf)
}

/// Bytes zeroed when dropped (key material on its way to a wrapping key).
pub struct Zeroed(pub Vec<u8>);

impl Drop for Zeroed {
    fn drop(&mut self) {
        ozfs_codec::crypt::wipe(&mut self.0);
    }
}

/// Load the key of `ds`'s encryption root as `keys` says, unless it is
/// loaded already or `ds` is not encrypted.
pub fn load_for(dsl: &DslPool, ds: &DatasetInfo, keys: &KeyLoad) -> Result<()> {
    if !keys.wanted() {
        return Ok(());
    }
    let Some(c) = dsl.crypt_props(ds)? else {
        return Ok(());
    };
    if c.available {
        return Ok(());
    }
    let root = dsl.lookup(&c.root)?;
    let location = match &keys.location {
        Some(l) => l.clone(),
        None => dsl.keylocation(&root)?,
    };
    if location == "none" {
        return Err(invalid(format!(
            "cannot load key for '{}': keylocation is none",
            c.root
        )));
    }
    if location == "prompt" && crate::host::in_daemon() {
        return Err(invalid(format!(
            "cannot load key for '{}': the ozfs daemon holds the pool and cannot prompt; \
             give the key's location with -L file:///… (or zfs load-key it first)",
            c.root
        )));
    }
    let material = read_key_material(&location, c.params.format, &c.root)?;
    dsl.load_key(&root, &material.0, false)
}

/// The pool's writer when this process is the daemon holding it (keys
/// loaded there stay), and a DSL view over the same pool either way.
fn held_dsl(dataset: &str) -> Result<(Option<ozfs_dsl::shared::Writer>, DslPool)> {
    if crate::host::in_daemon() {
        let w = crate::host::writer_for(dataset)?;
        let dsl = w.dsl();
        return Ok((Some(w), dsl));
    }
    Ok((None, DslPool::open(crate::host::open_imported(dataset)?.1)?))
}

/// `zfs load-key [-n] [-L keylocation] DATASET`: read the key of
/// encryption root `dataset` and prove it on the pool. The key is kept
/// only by a process that holds the pool: the daemon, which then writes
/// and mounts the root's file systems; elsewhere a proven key is reported
/// as not kept (an error unless `dry_run`).
pub fn load_key(dataset: &str, location: Option<&str>, dry_run: bool) -> Result<()> {
    let (held, dsl) = held_dsl(dataset)?;
    let ds = dsl
        .lookup(dataset)
        .map_err(|_| Error::NotFound(format!("cannot open '{dataset}': dataset does not exist")))?;
    // Not encrypted, or not an encryption root: the DSL's refusal.
    let Some(c) = dsl.crypt_props(&ds)?.filter(|c| c.root == ds.name) else {
        return dsl
            .load_key(&ds, &[], true)
            .map_err(|e| e.context("Key load error"));
    };
    let location = match location {
        Some(l) => l.to_string(),
        None => dsl.keylocation(&ds)?,
    };
    if held.is_some() && location == "prompt" {
        return Err(invalid(format!(
            "cannot load key for '{dataset}': the ozfs daemon holds the pool and cannot prompt; \
             give the key's location with -L file:///…"
        )));
    }
    let material = read_key_material(&location, c.params.format, &c.root)?;
    let keep = held.is_some() && !dry_run;
    dsl.load_key(&ds, &material.0, !keep)
        .map_err(|e| e.context("Key load error"))?;
    if dry_run || keep {
        return Ok(());
    }
    Err(Error::unsupported(
        format!("cannot keep the key of '{dataset}'"),
        "the key is correct, but no ozfs process holds the pool to keep it in (start the daemon, or a read-only import has none); read and write encrypted datasets with `ozfs cp -l` and `ozfs mount -l`",
    ))
}

/// The encryption roots at `name` and below it (`recursive`), or of every
/// imported pool (`name` None): what `zfs load-key -r`/`-a` act on.
pub fn encryption_roots(name: Option<&str>, recursive: bool) -> Result<Vec<String>> {
    let pools: Vec<String> = match name {
        Some(n) => vec![crate::names::pool_of(n).to_string()],
        None => crate::host::Record::all(),
    };
    let mut out = Vec::new();
    for p in pools {
        let (_rec, pool) = crate::host::open_imported(&p)?;
        let dsl = DslPool::open(pool)?;
        let start = match name {
            Some(n) => dsl.lookup(n).map_err(|_| {
                Error::NotFound(format!("cannot open '{n}': dataset does not exist"))
            })?,
            None => dsl.root()?,
        };
        let all = if recursive || name.is_none() {
            dsl.list(&start, false, None)?
        } else {
            vec![start]
        };
        for ds in all {
            if let Some(c) = dsl.crypt_props(&ds)? {
                if c.root == ds.name {
                    out.push(ds.name);
                }
            }
        }
    }
    Ok(out)
}

/// `zfs unload-key DATASET`: forget encryption root `dataset`'s key in
/// the daemon that holds its pool. Elsewhere no process keeps keys, so a
/// key is never loaded: refused as OpenZFS refuses an unloaded key (after
/// checking `dataset` is an encryption root).
pub fn unload_key(dataset: &str) -> Result<()> {
    let (held, dsl) = held_dsl(dataset)?;
    let ds = dsl
        .lookup(dataset)
        .map_err(|_| Error::NotFound(format!("cannot open '{dataset}': dataset does not exist")))?;
    dsl.unload_key(&ds)
        .map_err(|e| e.context("Key unload error"))?;
    if let Some(mut w) = held {
        w.release_unloaded_keys()?;
    }
    Ok(())
}

/// The PBKDF2 iterations of a new passphrase key, and the fewest
/// accepted (OpenZFS's `DEFAULT_PBKDF2_ITERATIONS`, `MIN_PBKDF2_ITERATIONS`).
pub const DEFAULT_PBKDF2_ITERS: u64 = 350_000;
pub const MIN_PBKDF2_ITERS: u64 = 100_000;

/// A new key as `zfs create` / `zfs change-key` properties give it:
/// its format (`keyformat`, else `default_format`), PBKDF2 iterations
/// (`pbkdf2iters`; passphrases only, at least [`MIN_PBKDF2_ITERS`], else
/// `default_iters` or [`DEFAULT_PBKDF2_ITERS`]), `keylocation` (else
/// `default_location`), a new random salt for a passphrase, and the
/// wrapping key derived from the key read there now.
fn new_key(
    what: &str,
    get: &dyn Fn(&str) -> Option<String>,
    default_format: Option<KeyFormat>,
    default_iters: Option<u64>,
    default_location: String,
) -> Result<(
    ozfs_dsl::crypt::KeyParams,
    ozfs_codec::crypt::WrappingKey,
    String,
)> {
    let cannot = |m: &str| invalid(format!("{what}: {m}"));
    let format = match get("keyformat") {
        None => default_format.ok_or_else(|| cannot("keyformat required"))?,
        Some(f) => [KeyFormat::Raw, KeyFormat::Hex, KeyFormat::Passphrase]
            .into_iter()
            .find(|x| x.name() == f)
            .ok_or_else(|| cannot(&format!("invalid keyformat '{f}'")))?,
    };
    let iters = match (format, get("pbkdf2iters")) {
        (KeyFormat::Passphrase, Some(v)) => {
            let n: u64 = v
                .parse()
                .map_err(|_| cannot(&format!("invalid pbkdf2iters '{v}'")))?;
            if n < MIN_PBKDF2_ITERS || n > u32::MAX as u64 {
                return Err(cannot(&format!(
                    "pbkdf2iters must be between {MIN_PBKDF2_ITERS} and {}",
                    u32::MAX
                )));
            }
            n
        }
        (KeyFormat::Passphrase, None) => default_iters.unwrap_or(DEFAULT_PBKDF2_ITERS),
        (_, None) => 0,
        (_, Some(_)) => {
            return Err(cannot(
                "Cannot specify pbkdf2iters with a non-passphrase keyformat.",
            ))
        }
    };
    let keylocation = get("keylocation").unwrap_or(default_location);
    if keylocation != "prompt" && !keylocation.starts_with("file:///") {
        return Err(cannot(&format!("invalid keylocation '{keylocation}'")));
    }
    if keylocation == "prompt" && crate::host::in_daemon() {
        return Err(cannot(
            "the ozfs daemon holds the pool and cannot prompt; give keylocation=file:///…",
        ));
    }
    let salt = if format == KeyFormat::Passphrase {
        ozfs_codec::crypt::random_u64()?
    } else {
        0
    };
    let material = read_key_material(&keylocation, format, what)?;
    let wrapping = ozfs_codec::crypt::WrappingKey::derive(format, &material.0, salt, iters)
        .map_err(|e| e.context(what))?;
    Ok((
        ozfs_dsl::crypt::KeyParams {
            format,
            salt,
            iters,
        },
        wrapping,
        keylocation,
    ))
}

/// How new file system `name` is encrypted, from the encryption
/// properties given to `zfs create` (`encryption`, `keyformat`,
/// `keylocation`, `pbkdf2iters`), as libzfs's `zfs_crypto_create` decides:
/// a key format makes a new encryption root (its key read now from
/// `keylocation`, `prompt` by default; a passphrase stretched over a new
/// random salt); `encryption` alone asks for an encrypted child of an
/// encrypted parent; nothing inherits the parent's.
pub fn new_crypt(name: &str, props: &[&(String, String)]) -> Result<ozfs_dsl::crypt::NewCrypt> {
    use ozfs_codec::crypt::Suite;
    use ozfs_dsl::crypt::NewCrypt;
    let cannot = |m: &str| invalid(format!("cannot create '{name}': {m}"));
    let get = |k: &str| props.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let suite = match get("encryption") {
        None => None,
        Some("off") => {
            if props.len() > 1 {
                return Err(cannot(
                    "Encryption must be turned on to set encryption properties.",
                ));
            }
            return Ok(NewCrypt::Off);
        }
        Some("on") => Some(Suite::Aes256Gcm),
        Some(v) => Some(
            (3..=8)
                .filter_map(Suite::from_u64)
                .find(|s| s.name() == v)
                .ok_or_else(|| cannot(&format!("invalid encryption value '{v}'")))?,
        ),
    };
    if get("keyformat").is_none() {
        if get("keylocation").is_some() || get("pbkdf2iters").is_some() {
            return Err(cannot("Keyformat required for new encryption root."));
        }
        return Ok(NewCrypt::Inherit { suite });
    }
    let (params, wrapping, keylocation) = new_key(
        &format!("cannot create '{name}'"),
        &|k| get(k).map(str::to_string),
        None,
        None,
        "prompt".to_string(),
    )?;
    Ok(NewCrypt::Root {
        suite: suite.unwrap_or(Suite::Aes256Gcm),
        params,
        wrapping,
        keylocation,
    })
}

/// `zfs change-key [-l] [-i] [-o keyformat=…] [-o keylocation=…] [-o
/// pbkdf2iters=…] DATASET`: wrap the keys under `dataset`'s encryption root
/// with a new key read from the (new) `keylocation` (its format and
/// iterations kept unless given; a passphrase gets a new salt), or with
/// its parent's root's (`inherit`). The current key must be loaded in the
/// process holding the pool (`load`: loaded first from its keylocation).
pub fn change_key(
    dataset: &str,
    load: bool,
    inherit: bool,
    props: &[(String, String)],
) -> Result<()> {
    use ozfs_dsl::crypt::ChangeKey;
    let cannot = |m: &str| invalid(format!("cannot change key of '{dataset}': {m}"));
    let mut w = crate::host::writer_for(dataset)?;
    let dsl = w.dsl();
    let ds = dsl
        .lookup(dataset)
        .map_err(|_| Error::NotFound(format!("cannot open '{dataset}': dataset does not exist")))?;
    if ds.is_snapshot {
        return Err(cannot("snapshots' keys cannot be changed"));
    }
    let c = dsl
        .crypt_props(&ds)?
        .ok_or_else(|| cannot("encryption is not enabled"))?;
    if load {
        load_for(
            &dsl,
            &ds,
            &KeyLoad {
                load: true,
                location: None,
            },
        )?;
    }
    let how = if inherit {
        ChangeKey::Inherit
    } else {
        let get = |k: &str| {
            props
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string())
        };
        let same_passphrase = c.params.format == KeyFormat::Passphrase
            && get("keyformat").is_none_or(|f| f == "passphrase");
        let location = if c.root == ds.name {
            dsl.keylocation(&ds)?
        } else {
            "prompt".to_string()
        };
        let (params, wrapping, keylocation) = new_key(
            &format!("cannot change key of '{dataset}'"),
            &get,
            Some(c.params.format),
            same_passphrase.then_some(c.params.iters),
            location,
        )?;
        ChangeKey::New {
            params,
            wrapping,
            keylocation,
        }
    };
    w.change_key(dataset, ds.dir_obj, how)?;
    w.sync()
        .map_err(|e| e.context(&format!("cannot change key of '{dataset}'")))
}
