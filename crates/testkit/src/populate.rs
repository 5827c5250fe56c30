//! Content generators and mutators for mounted datasets.
//!
//! All functions take the *host* path of a mounted dataset (for zfs-fuse:
//! `TestPool::root(..)`, i.e. `/proc/<pid>/root/<mountpoint>`) and are
//! deterministic for a given seed.
//!
//! zfs-fuse quirks handled here:
//! * Timestamps go through FUSE with whole seconds only: zfs-fuse reports
//!   `st_mtim.tv_nsec = 0` and drops the nanoseconds of `utimensat`, but
//!   files it creates or modifies itself get nanosecond timestamps on disk.
//!   [`settle_times`] therefore re-sets every mtime to the whole second that
//!   zfs-fuse reports, so that the on-disk state equals what a manifest of
//!   the mount records.  Call it (or `TestPool::record`) before recording a
//!   manifest that a copy-out will be compared with.
//! * xattrs need the daemon's `-x` option (the harness passes it); they are
//!   stored as files in a hidden xattr directory.  Every listxattr/getxattr
//!   *creates* that directory.  If setxattr fails with ENOTSUP the profile's
//!   xattrs are skipped and [`PopulateReport::xattrs`] is false.

use crate::rng::XorShift;
use crate::{Error, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// What [`populate`] creates.  Start from a preset and tweak fields:
/// `Profile { dir20k: true, ..Profile::moderate(1) }`.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Seed of all generated data.
    pub seed: u64,
    /// `sizes/`: files of 0, 1, 511, 512, 513, 4095, 4096, 100K, 128K,
    /// 128K+1, 1M+1 bytes.
    pub sizes: bool,
    /// `large/`: ~5 MiB text-like (compressible) and ~5 MiB random files,
    /// 1 MiB of zeros, zero/random mixed blocks.
    pub large: bool,
    /// `sparse/`: islands with multi-MiB holes, a hole at the end, an
    /// all-hole file, one byte after a 64 MiB hole.
    pub sparse: bool,
    /// `dirs/micro100`: 100 entries (micro ZAP); `dirs/longnames`: names
    /// over 50 bytes (forces a fat ZAP); `emptydir`.
    pub dirs: bool,
    /// `dirs/fat20k`: 20,000 entries (fat ZAP).
    pub dir20k: bool,
    /// `deep/`: directory chain of depth 20.
    pub deep: bool,
    /// `links/`: symlinks of 1, 55, 56, 57, 300 bytes, dangling, absolute.
    pub symlinks: bool,
    /// `hl/`: a file with 3 names in 3 directories, a pair.
    pub hardlinks: bool,
    /// `xattr/`: user.* xattrs on files and a directory (small and 1 KiB).
    pub xattrs: bool,
    /// `names/`: UTF-8 and odd names.
    pub names: bool,
    /// `modes/`: 0600, 0755, 04755, 02755, 0444, 0000, 01777 and 0700 dirs.
    pub modes: bool,
    /// `owners/`: uid/gid 1000, 65534, a lchown'ed symlink.
    pub owners: bool,
    /// `fifos/`: named pipes.
    pub fifos: bool,
    /// `times/`: explicit mtimes (epoch+1, just before 2038, with nanoseconds; zfs-fuse refuses times past 2038 with EOVERFLOW).
    pub times: bool,
    /// `dup/`: identical copies (for dedup).
    pub dups: bool,
    /// `big/file_210m`: 210 MiB pseudo-random (3 levels of blocks).
    pub big: bool,
}

impl Profile {
    /// Everything except the 20k directory and the 210 MiB file (~16 MiB
    /// of data, a few hundred entries).
    pub fn moderate(seed: u64) -> Profile {
        Profile {
            seed,
            sizes: true,
            large: true,
            sparse: true,
            dirs: true,
            dir20k: false,
            deep: true,
            symlinks: true,
            hardlinks: true,
            xattrs: true,
            names: true,
            modes: true,
            owners: true,
            fifos: true,
            times: true,
            dups: true,
            big: false,
        }
    }

    /// Only the small-file parts (no `large/`, `sparse/`, `dup/`): fast.
    pub fn small(seed: u64) -> Profile {
        Profile {
            large: false,
            sparse: false,
            dups: false,
            ..Profile::moderate(seed)
        }
    }

    /// Nothing but what the caller switches on.
    pub fn none(seed: u64) -> Profile {
        Profile {
            seed,
            sizes: false,
            large: false,
            sparse: false,
            dirs: false,
            dir20k: false,
            deep: false,
            symlinks: false,
            hardlinks: false,
            xattrs: false,
            names: false,
            modes: false,
            owners: false,
            fifos: false,
            times: false,
            dups: false,
            big: false,
        }
    }
}

/// What [`populate`] managed to do.
#[derive(Debug, Clone, Default)]
pub struct PopulateReport {
    /// xattrs were requested and could be set.
    pub xattrs: bool,
    /// Notes on skipped features.
    pub notes: Vec<String>,
    /// Bytes of file data written.
    pub bytes: u64,
}

fn err(p: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error(format!("{what} {}: {e}", p.display()))
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error(format!("NUL in {}", p.display())))
}

fn mkdirs(p: &Path) -> Result<()> {
    fs::create_dir_all(p).map_err(|e| err(p, "mkdir", e))
}

/// Writes `len` bytes generated by `gen` (called per 1 MiB chunk) to a new
/// file `p`.
fn write_gen(p: &Path, len: u64, mut gen: impl FnMut(&mut [u8])) -> Result<()> {
    let mut f = File::create(p).map_err(|e| err(p, "create", e))?;
    let mut buf = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = left.min(MIB) as usize;
        gen(&mut buf[..n]);
        f.write_all(&buf[..n]).map_err(|e| err(p, "write", e))?;
        left -= n as u64;
    }
    Ok(())
}

/// Creates `p` with `len` pseudo-random bytes from `seed`.
pub fn write_random(p: &Path, len: u64, seed: u64) -> Result<()> {
    let mut r = XorShift::new(seed);
    write_gen(p, len, |b| r.fill(b))
}

/// Creates `p` with `len` bytes of compressible text-like data.
pub fn write_text(p: &Path, len: u64, seed: u64) -> Result<()> {
    let mut r = XorShift::new(seed);
    write_gen(p, len, |b| r.fill_text(b))
}

/// Creates `p` with explicit contents.
pub fn write_bytes(p: &Path, data: &[u8]) -> Result<()> {
    fs::write(p, data).map_err(|e| err(p, "write", e))
}

/// Writes `data` at `off` into existing file `p` (no truncation).
pub fn pwrite(p: &Path, off: u64, data: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(p)
        .map_err(|e| err(p, "open", e))?;
    f.seek(SeekFrom::Start(off))
        .map_err(|e| err(p, "seek", e))?;
    f.write_all(data).map_err(|e| err(p, "write", e))
}

/// `lchown(2)`.
pub fn lchown(p: &Path, uid: u32, gid: u32) -> Result<()> {
    let c = cpath(p)?;
    // SAFETY: valid C string.
    if unsafe { libc::lchown(c.as_ptr(), uid, gid) } != 0 {
        return Err(err(p, "lchown", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `chmod` (follows symlinks; don't use on symlinks).
pub fn chmod(p: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| err(p, "chmod", e))
}

/// Sets the mtime (and atime to the same value) without following
/// symlinks.  zfs-fuse keeps only the seconds.
pub fn set_mtime(p: &Path, sec: i64, nsec: i64) -> Result<()> {
    let c = cpath(p)?;
    let ts = [
        libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as _,
        },
        libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as _,
        },
    ];
    // SAFETY: valid C string and timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(err(p, "utimensat", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `mkfifo(3)`.
pub fn mkfifo(p: &Path, mode: u32) -> Result<()> {
    let c = cpath(p)?;
    // SAFETY: valid C string.
    if unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) } != 0 {
        return Err(err(p, "mkfifo", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `lsetxattr(2)`; the error keeps the errno (ENOTSUP check).
pub fn set_xattr(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes())?;
    let n = CString::new(name)?;
    // SAFETY: valid C strings, value slice.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `lremovexattr(2)`.
pub fn remove_xattr(p: &Path, name: &str) -> Result<()> {
    let c = cpath(p)?;
    let n = CString::new(name).map_err(|_| Error("NUL in xattr name".into()))?;
    // SAFETY: valid C strings.
    if unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) } != 0 {
        return Err(err(p, "lremovexattr", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Fills `root` according to `profile`.
pub fn populate(root: &Path, profile: &Profile) -> Result<PopulateReport> {
    let mut rep = PopulateReport::default();
    let s = profile.seed.wrapping_mul(1_000_003);
    if profile.sizes {
        let d = root.join("sizes");
        mkdirs(&d)?;
        for (i, len) in [
            0,
            1,
            511,
            512,
            513,
            4095,
            4096,
            100 * KIB,
            128 * KIB,
            128 * KIB + 1,
            MIB + 1,
        ]
        .into_iter()
        .enumerate()
        {
            write_random(&d.join(format!("f_{len}")), len, s + i as u64)?;
            rep.bytes += len;
        }
    }
    if profile.large {
        let d = root.join("large");
        mkdirs(&d)?;
        write_text(&d.join("text_5m"), 5 * MIB + 333, s + 100)?;
        write_random(&d.join("random_5m"), 5 * MIB - 77, s + 101)?;
        write_gen(&d.join("zeros_1m"), MIB, |b| b.fill(0))?;
        // Alternating 128K blocks of zeros and random data.
        let mut r = XorShift::new(s + 102);
        let mut blk = 0u64;
        write_gen(&d.join("mixed_2m"), 2 * MIB, |b| {
            for c in b.chunks_mut(128 * KIB as usize) {
                if blk & 1 == 0 {
                    c.fill(0);
                } else {
                    r.fill(c);
                }
                blk += 1;
            }
        })?;
        rep.bytes += 13 * MIB;
    }
    if profile.sparse {
        let d = root.join("sparse");
        mkdirs(&d)?;
        let p = d.join("islands");
        File::create(&p).map_err(|e| err(&p, "create", e))?;
        let mut r = XorShift::new(s + 200);
        for (off, len) in [
            (0, 64 * KIB),
            (3 * MIB + 5, 100 * KIB),
            (9 * MIB, 4 * KIB),
            (20 * MIB, 1),
        ] {
            pwrite(&p, off, &r.bytes(len as usize))?;
        }
        set_len(&p, 24 * MIB)?;
        let p = d.join("hole_at_end");
        write_random(&p, 10_000, s + 201)?;
        set_len(&p, 6 * MIB)?;
        let p = d.join("all_hole");
        File::create(&p).map_err(|e| err(&p, "create", e))?;
        set_len(&p, 3 * MIB + 7)?;
        let p = d.join("far_byte");
        File::create(&p).map_err(|e| err(&p, "create", e))?;
        pwrite(&p, 64 * MIB + 3, b"!")?;
        rep.bytes += 200 * KIB;
    }
    if profile.dirs {
        let d = root.join("dirs").join("micro100");
        mkdirs(&d)?;
        for i in 0..100u64 {
            let p = d.join(format!("e{i:03}"));
            if i % 10 == 9 {
                mkdirs(&p)?;
            } else {
                write_random(&p, i * 37, s + 300 + i)?;
            }
        }
        let d = root.join("dirs").join("longnames");
        mkdirs(&d)?;
        for i in 0..3 {
            let name = format!(
                "{}_{i}",
                "long-name-that-does-not-fit-a-micro-zap-entry".repeat(2)
            );
            write_random(&d.join(name), 100 + i, s + 400 + i)?;
        }
        mkdirs(&root.join("emptydir"))?;
    }
    if profile.dir20k {
        let d = root.join("dirs").join("fat20k");
        mkdirs(&d)?;
        for i in 0..20_000u64 {
            let p = d.join(format!("entry_{i:05}"));
            if i % 1000 == 0 {
                write_random(&p, 1000 + i, s + 500 + i)?;
            } else {
                File::create(&p).map_err(|e| err(&p, "create", e))?;
            }
        }
    }
    if profile.deep {
        let mut d = root.join("deep");
        for i in 1..=20 {
            d = d.join(format!("d{i:02}"));
        }
        mkdirs(&d)?;
        write_text(&d.join("leaf.txt"), 3000, s + 600)?;
        write_text(&root.join("deep").join("d01").join("top.txt"), 10, s + 601)?;
    }
    if profile.symlinks {
        let d = root.join("links");
        mkdirs(&d)?;
        write_bytes(&d.join("target"), b"symlink target\n")?;
        symlink("target", d.join("short"))?;
        for len in [55usize, 56, 57, 300] {
            // A relative path of exactly `len` bytes that still resolves:
            // "./././.../target" (one "//" for odd lengths).
            let body = len - "target".len();
            let t = format!(
                "{}{}target",
                "./".repeat(body / 2),
                if body % 2 == 1 { "/" } else { "" }
            );
            assert_eq!(t.len(), len);
            symlink(&t, d.join(format!("len{len}")))?;
        }
        symlink("does/not/exist", d.join("dangling"))?;
        symlink("/etc/hostname", d.join("absolute"))?;
        symlink("../sizes", d.join("to_dir"))?;
        symlink("日本語/ä", d.join("utf8_target"))?;
    }
    if profile.hardlinks {
        let d = root.join("hl");
        mkdirs(&d.join("a"))?;
        mkdirs(&d.join("b"))?;
        write_random(&d.join("orig"), 70_000, s + 700)?;
        fs::hard_link(d.join("orig"), d.join("a").join("second"))?;
        fs::hard_link(d.join("orig"), d.join("b").join("third"))?;
        write_bytes(&d.join("pair1"), b"pair")?;
        fs::hard_link(d.join("pair1"), d.join("pair2"))?;
    }
    if profile.xattrs {
        let d = root.join("xattr");
        mkdirs(&d)?;
        let f = d.join("file_small");
        write_bytes(&f, b"has small xattrs\n")?;
        match set_xattr(&f, "user.text", b"hello world") {
            Ok(()) => {
                rep.xattrs = true;
                let mut r = XorShift::new(s + 800);
                let all: Vec<(PathBuf, &str, Vec<u8>)> = vec![
                    (f.clone(), "user.one", b"1".to_vec()),
                    (f.clone(), "user.empty", Vec::new()),
                    (f.clone(), "user.bin", vec![0, 1, 2, 255, 0]),
                    (d.join("file_1k"), "user.kib", r.bytes(1024)),
                    (d.join("file_1k"), "user.small", b"x".to_vec()),
                    (d.join("dir"), "user.dirattr", b"on a directory".to_vec()),
                    (d.join("dir"), "user.dirkib", r.bytes(1000)),
                    (d.join("many"), "user.a0", b"0".to_vec()),
                ];
                write_bytes(&d.join("file_1k"), b"has a 1 KiB xattr\n")?;
                mkdirs(&d.join("dir"))?;
                write_bytes(&d.join("many"), b"")?;
                for (p, n, v) in all {
                    set_xattr(&p, n, &v).map_err(|e| err(&p, &format!("setxattr {n}"), e))?;
                }
                for i in 1..12 {
                    let p = d.join("many");
                    set_xattr(&p, &format!("user.a{i}"), format!("value {i}").as_bytes())
                        .map_err(|e| err(&p, "setxattr", e))?;
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => {
                rep.notes
                    .push(format!("xattrs not supported here ({e}); skipped"));
            }
            Err(e) => return Err(err(&f, "setxattr user.text", e)),
        }
    }
    if profile.names {
        let d = root.join("names");
        mkdirs(&d)?;
        let long: String = "ä".repeat(127) + "x"; // 255 bytes
        for (i, n) in [
            "äöü",
            "日本語",
            "emoji 🎉",
            "with space",
            " leading space",
            "trailing space ",
            "a'quote\"double",
            "back\\slash",
            "-dash",
            "colon:at@hash#",
            "percent%20",
            long.as_str(),
        ]
        .iter()
        .enumerate()
        {
            write_random(&d.join(n), 10 + i as u64, s + 900 + i as u64)?;
        }
        mkdirs(&d.join("日本語ディレクトリ"))?;
        write_bytes(
            &d.join("日本語ディレクトリ").join("ファイル.txt"),
            "こんにちは\n".as_bytes(),
        )?;
    }
    if profile.modes {
        let d = root.join("modes");
        mkdirs(&d)?;
        for (name, mode) in [
            ("f0600", 0o600),
            ("f0755", 0o755),
            ("f4755", 0o4755),
            ("f2755", 0o2755),
            ("f0444", 0o444),
            ("f0000", 0),
        ] {
            let p = d.join(name);
            write_bytes(&p, name.as_bytes())?;
            chmod(&p, mode)?;
        }
        for (name, mode) in [("d1777", 0o1777), ("d0700", 0o700), ("d0555", 0o555)] {
            let p = d.join(name);
            mkdirs(&p)?;
            write_bytes(&p.join("inside"), b"inside")?;
            chmod(&p, mode)?;
        }
    }
    if profile.owners {
        let d = root.join("owners");
        mkdirs(&d)?;
        let p = d.join("u1000");
        write_bytes(&p, b"1000")?;
        lchown(&p, 1000, 1000)?;
        let p = d.join("u65534");
        write_bytes(&p, b"nobody")?;
        lchown(&p, 65534, 65534)?;
        let p = d.join("g100");
        write_bytes(&p, b"group 100")?;
        lchown(&p, 0, 100)?;
        let p = d.join("suid1000");
        write_bytes(&p, b"setuid after chown")?;
        lchown(&p, 1000, 1000)?;
        chmod(&p, 0o4750)?;
        let p = d.join("dir1000");
        mkdirs(&p)?;
        write_bytes(&p.join("file"), b"in a dir of 1000")?;
        lchown(&p.join("file"), 1000, 1001)?;
        lchown(&p, 1000, 1000)?;
        let p = d.join("link1000");
        symlink("u1000", &p)?;
        lchown(&p, 1000, 1000)?;
    }
    if profile.fifos {
        let d = root.join("fifos");
        mkdirs(&d)?;
        mkfifo(&d.join("fifo_a"), 0o644)?;
        mkfifo(&d.join("fifo_b"), 0o600)?;
        lchown(&d.join("fifo_b"), 1000, 1000)?;
    }
    if profile.dups {
        let d = root.join("dup");
        mkdirs(&d)?;
        for i in 0..4 {
            write_random(&d.join(format!("copy{i}")), 512 * KIB, s + 1000)?;
        }
        write_text(&d.join("text_a"), 300 * KIB, s + 1001)?;
        write_text(&d.join("text_b"), 300 * KIB, s + 1001)?;
        rep.bytes += 2600 * KIB;
    }
    if profile.big {
        let d = root.join("big");
        mkdirs(&d)?;
        write_random(&d.join("file_210m"), 210 * MIB + 4321, s + 1100)?;
        rep.bytes += 210 * MIB;
    }
    if profile.times {
        // Last: creating entries above changes directory mtimes.
        let d = root.join("times");
        mkdirs(&d)?;
        for (name, sec, nsec) in [
            ("epoch_plus_1", 1i64, 0i64),
            ("y2038", 2_147_000_000, 0),
            ("with_ns", 1_234_567_890, 123_456_789),
        ] {
            let p = d.join(name);
            write_bytes(&p, name.as_bytes())?;
            set_mtime(&p, sec, nsec)?;
        }
        symlink("epoch_plus_1", d.join("link_2001"))?;
        set_mtime(&d.join("link_2001"), 1_000_000_000, 5)?;
        mkdirs(&d.join("dir_1999"))?;
        set_mtime(&d.join("dir_1999"), 915_148_800, 0)?;
    }
    Ok(rep)
}

/// `truncate(2)` to `len` (grow or shrink).
pub fn set_len(p: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(p)
        .map_err(|e| err(p, "open", e))?;
    f.set_len(len).map_err(|e| err(p, "truncate", e))
}

static SETTLED: Mutex<Option<HashMap<PathBuf, i64>>> = Mutex::new(None);

/// Re-sets the mtime of entries under `root` (root included, not crossing
/// mounts) to the whole second currently reported.  See the module docs:
/// needed with zfs-fuse so that disk state == what `stat` shows.
///
/// Incremental: the first call for a `root` settles everything; later calls
/// only touch entries whose mtime is not older than (start of the previous
/// call - 1 s) — everything else was settled before or had its mtime set
/// explicitly (zfs-fuse stores explicit times with 0 ns).  Returns the
/// number of entries touched.
pub fn settle_times(root: &Path) -> Result<usize> {
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let since = SETTLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(root)
        .map(|t| t - 1);
    let n = settle_times_since(root, since)?;
    SETTLED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(root.to_path_buf(), start);
    Ok(n)
}

/// Settles the entries whose mtime is >= `since` (all of them for `None`).
pub fn settle_times_since(root: &Path, since: Option<i64>) -> Result<usize> {
    let dev = fs::symlink_metadata(root)
        .map_err(|e| err(root, "lstat", e))?
        .dev();
    let mut stack = vec![root.to_path_buf()];
    let mut n = 0;
    while let Some(p) = stack.pop() {
        let md = fs::symlink_metadata(&p).map_err(|e| err(&p, "lstat", e))?;
        if md.dev() != dev {
            continue;
        }
        if md.is_dir() {
            for de in fs::read_dir(&p).map_err(|e| err(&p, "readdir", e))? {
                stack.push(de.map_err(|e| err(&p, "readdir", e))?.path());
            }
        }
        let recent = match since {
            None => true,
            Some(s) => md.mtime() >= s,
        };
        if recent {
            set_mtime(&p, md.mtime(), 0)?;
            n += 1;
        }
    }
    Ok(n)
}

/// Removes a file, symlink, fifo or whole directory tree; missing is fine.
pub fn delete(root: &Path, rel: &str) -> Result<bool> {
    let p = root.join(rel);
    match fs::symlink_metadata(&p) {
        Err(_) => Ok(false),
        Ok(md) if md.is_dir() => {
            fs::remove_dir_all(&p).map_err(|e| err(&p, "rm -r", e))?;
            Ok(true)
        }
        Ok(_) => {
            fs::remove_file(&p).map_err(|e| err(&p, "rm", e))?;
            Ok(true)
        }
    }
}

/// Overwrites `len` bytes at `off` of `rel` with random data (if it
/// exists).  The file grows if the range ends past its size.
pub fn rewrite(root: &Path, rel: &str, off: u64, len: usize, seed: u64) -> Result<bool> {
    let p = root.join(rel);
    if !p.is_file() {
        return Ok(false);
    }
    pwrite(&p, off, &XorShift::new(seed).bytes(len))?;
    Ok(true)
}

/// Renames `from` to `to` (relative to root) if `from` exists; creates the
/// parent of `to`.
pub fn rename(root: &Path, from: &str, to: &str) -> Result<bool> {
    let (a, b) = (root.join(from), root.join(to));
    if fs::symlink_metadata(&a).is_err() {
        return Ok(false);
    }
    if let Some(parent) = b.parent() {
        mkdirs(parent)?;
    }
    fs::rename(&a, &b).map_err(|e| err(&a, &format!("rename to {}", b.display()), e))?;
    Ok(true)
}

/// Truncates/extends `rel` to `len` if it is a file.
pub fn truncate(root: &Path, rel: &str, len: u64) -> Result<bool> {
    let p = root.join(rel);
    if !p.is_file() {
        return Ok(false);
    }
    set_len(&p, len)?;
    Ok(true)
}

/// Creates (or replaces) file `rel` with `len` random bytes; creates parents.
pub fn add_file(root: &Path, rel: &str, len: u64, seed: u64) -> Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        mkdirs(parent)?;
    }
    write_random(&p, len, seed)
}

/// One round of typical changes between two snapshots: deletes, partial
/// rewrites, renames, truncations, new files, link/mode/xattr changes.
/// Works on whatever [`populate`] created (missing items are skipped).
/// Rounds 1 and 2 differ; later rounds add and remove a generated
/// directory.  Remember to call [`settle_times`] before recording.
pub fn mutate(root: &Path, round: u32, seed: u64) -> Result<()> {
    let s = seed.wrapping_mul(7919).wrapping_add(round as u64 * 101);
    match round {
        1 => {
            delete(root, "sizes/f_513")?;
            delete(root, "dirs/micro100/e007")?;
            delete(root, "dirs/micro100/e019")?; // a directory
            delete(root, "links/dangling")?;
            delete(root, "hl/b/third")?;
            rewrite(root, "large/random_5m", MIB + 100, 8000, s)?;
            rewrite(root, "large/text_5m", 0, 4096, s + 1)?;
            rewrite(root, "sparse/islands", 9 * MIB - 10, 70_000, s + 2)?;
            rewrite(root, "sizes/f_131072", 131_000, 100, s + 3)?;
            rename(root, "names/äöü", "names/renamed_äöü")?;
            rename(root, "deep/d01/d02/d03", "deep/moved_d03")?;
            truncate(root, "large/random_5m", 3 * MIB + 17)?;
            truncate(root, "sizes/f_4096", 10_000)?;
            add_file(root, "new_r1/file_a", 200 * KIB, s + 4)?;
            add_file(root, "new_r1/empty", 0, s + 5)?;
            add_file(root, "dirs/micro100/added", 3000, s + 6)?;
            if root.join("modes/f0600").exists() {
                chmod(&root.join("modes/f0600"), 0o640)?;
            }
            if root.join("owners/u1000").exists() {
                lchown(&root.join("owners/u1000"), 2000, 2000)?;
            }
            let x = root.join("xattr/file_small");
            if x.exists() && set_xattr(&x, "user.text", b"changed").is_ok() {
                remove_xattr(&x, "user.one")?;
            }
            if root.join("dirs/fat20k").is_dir() {
                for i in (0..20_000).step_by(97) {
                    delete(root, &format!("dirs/fat20k/entry_{i:05}"))?;
                }
            }
        }
        2 => {
            delete(root, "large/text_5m")?;
            delete(root, "sizes/f_0")?;
            delete(root, "deep/moved_d03")?;
            delete(root, "hl/orig")?;
            rewrite(root, "sizes/f_1048577", 500_000, 20_000, s)?;
            rewrite(root, "new_r1/file_a", 200 * KIB, 1000, s + 1)?; // append
            rewrite(root, "big/file_210m", 100 * MIB, 300_000, s + 2)?;
            truncate(root, "sparse/hole_at_end", 0)?;
            truncate(root, "sparse/islands", 5 * MIB)?;
            rename(root, "new_r1", "new_r1_renamed")?;
            rename(root, "hl/pair2", "pair2_moved_to_root")?;
            add_file(root, "new_r2/sub/file_b", 1_000_001, s + 3)?;
            add_file(root, "large/text_5m", 12_345, s + 4)?; // same name, new file
            if root.join("fifos").is_dir() {
                mkfifo(&root.join("fifos/fifo_new"), 0o640)?;
            }
            if root.join("dirs/fat20k").is_dir() {
                for i in 0..50 {
                    add_file(root, &format!("dirs/fat20k/zz_added_{i:03}"), i, s + 10 + i)?;
                }
            }
            let x = root.join("xattr/file_1k");
            if x.exists() {
                let _ = set_xattr(&x, "user.kib", &XorShift::new(s + 5).bytes(1024));
            }
        }
        n => {
            let dir = format!("gen_r{n}");
            for i in 0..10u64 {
                add_file(root, &format!("{dir}/f{i}"), i * 1000 + 1, s + i)?;
            }
            delete(root, &format!("gen_r{}", n - 1))?;
            rewrite(root, "sizes/f_1", 0, 1, s + 20)?;
        }
    }
    Ok(())
}
