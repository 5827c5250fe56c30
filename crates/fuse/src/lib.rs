//! # ozfs-fuse: a dataset mounted through FUSE, read-write
//!
//! (Read-only mounts over the read path alone: [`readonly`].)
//!
//! [`ZfsFuse`] implements `fuser::Filesystem` on top of the write path
//! ([`PoolWriter`] + [`ZplTx`]): every request reads and changes the file
//! system through the open transaction group's [`ObjsetTx`], so a change is
//! visible to the next request at once and becomes durable when the txg is
//! synced. [`serve`] mounts, runs the request loop in the calling thread and
//! returns after the file system is unmounted and the last txg is synced.
//!
//! ## Inode numbers
//! A FUSE inode number is the ZFS object number, except that FUSE's root
//! inode 1 stands for the ZPL root directory object (object 1 of a ZPL
//! objset is the master node, never a file, so nothing else maps to 1). The
//! generation reported with an entry is the znode's `gen` (the txg that
//! created it), so a reused object number is a different file to the kernel.
//! Inodes at or above 2^48 are the read-only `.zfs` directory and the
//! snapshots under `.zfs/snapshot` (see [`snapdir`]).
//!
//! ## Transaction groups and durability
//! All changes accumulate in the open txg (in memory). The txg is synced
//! (data, metadata, space maps, then the uberblock; flushes between):
//! * when the file data written since the last sync exceeds `txg_bytes`
//!   (64 MiB, or `OZFS_TXG_BYTES`);
//! * by a timer thread, at most `txg_interval` (5 s) after the first change
//!   of the txg;
//! * on `fsync`/`fsyncdir` (the reply is sent only after the sync, so an
//!   fsync that returned means everything done before it is on disk);
//! * when a space reservation fails (the txg's worst-case reservations are
//!   released by committing it) — only then is ENOSPC returned;
//! * on unmount (`destroy`) and on SIGINT/SIGTERM (see [`serve`]).
//!
//! The first two commit the txg in memory and queue its writes on the
//! pool's I/O thread ([`ozfs_spa::writeback`]): the next txg takes requests
//! while they are written, reads of blocks not yet written wait for them,
//! and the queue (`OZFS_WRITEBACK_BYTES`, 192 MiB) holds the session back only when the
//! devices fall behind. The others also wait until everything queued is
//! written (and report a failed write as EIO).
//!
//! What is durable when: nothing of a request is on disk before the next
//! sync; after an fsync everything before it is. A crash loses at most the
//! txgs not yet written, and the pool stays consistent (the uberblock is
//! the only commit point, and the queue writes in order). A failed queued
//! write stops the writer: later syncs and fsyncs fail.
//!
//! ## Request threads
//! The session thread takes every request under the state lock. A read of
//! at least 64 KiB of an object whose data the open txg has not changed
//! (an access time or mode staged does not count) is only *planned* there
//! — the committed objset, the dnode and an I/O hold on the pool
//! ([`ozfs_spa::pool::Pool::hold_io`]) — and a request thread reads,
//! verifies and replies while the session takes the next request. Blocks
//! read in part come through the pool's data cache and stay there; blocks
//! read whole are taken from it when there and otherwise not kept (the
//! kernel keeps a buffered reader's pages itself). While the hold is out, space freed after the held txg is not
//! made allocatable again: blocks a planned read follows cannot be reused
//! and overwritten under it (syncs go on).
//!
//! ## Open files that are unlinked; object number reuse
//! Removing the last name of a file that is open keeps the object with link
//! count 0, records it in the file system's delete queue (as ZFS does: key
//! = object number in hex), and frees it when the last handle is released.
//! The same holds while the kernel still knows the inode (every entry
//! replied counts as a lookup, `forget` gives them back): a freed object
//! number may be reused by the next create, and the kernel identifies
//! inodes by number alone — a new directory that got the number of a
//! removed one the kernel still caches (e.g. the parent of an open,
//! unlinked file) would be "dead" to it (ENOENT on every create). So
//! removed files and directories are freed on the last `forget`/release.
//! Orphans left by a crash are freed when the file system is next mounted
//! read-write (here, or by ZFS itself, which drains the same queue).
//!
//! ## Kernel caches
//! The kernel may keep entries and attributes for an hour (`CACHE_TTL`;
//! one second under `.zfs`, whose snapshots come and go unseen), the
//! listings it read (directories are opened with FOPEN_CACHE_DIR) and,
//! for an hour too, names looked up and missing (negative entries; only
//! in directories whose names match byte for byte, and at most
//! `MISSING_MAX` remembered at once: a name leaves the set when it is
//! made through the mount or at an invalidation; past the bound a
//! missing name is answered with ENOENT, which the kernel does not
//! keep). Changes
//! made through this mount the kernel sees itself. The others are notified
//! to it ([`fuser::Notifier`]):
//! * a file written in a txg: its attributes after the sync (the allocated
//!   size is known then), whoever synced;
//! * an access time recorded on a read or a listing;
//! * a change made through the pool's writer outside this mount (the
//!   daemon's `cp` into it, a raw record stored): every entry of every
//!   directory the kernel knows, every name it was told is missing and
//!   every inode it holds are invalidated
//!   ([`shared::Mounted::drop_kernel_caches`]).
//!
//! Listings are answered with READDIRPLUS (attributes with each name: no
//! LOOKUP per entry for `ls -l` or `find`); each name replied with a node
//! counts as a lookup, `.` and `..` excepted, as the kernel counts them.
//! FLUSH is refused once with ENOSYS: nothing is done at close, and the
//! kernel then stops sending it. Attributes are computed once per object
//! and kept with the objset until the object changes
//! (`ObjsetTx::obj_derived`).
//!
//! ## Limits (known gaps)
//! * File systems mounted read-only, and those [`ZplTx`] does not write
//!   (ZPL above 5, intent logs not replayed), are served by [`readonly`]
//!   ([`serve_readonly`]) straight from the read path.
//! * Directory lookups and listings decode the whole directory ZAP once
//!   (kept decoded while it is changed: fine up to hundreds of thousands of
//!   entries).
//! * `RENAME_EXCHANGE` and `RENAME_WHITEOUT` are refused with EINVAL;
//!   `RENAME_NOREPLACE` works. No POSIX locks beyond the kernel's local
//!   ones. `fallocate` serves mode 0 (extends the size, preallocates
//!   nothing: copy-on-write, as OpenZFS), `KEEP_SIZE` and `PUNCH_HOLE`;
//!   other modes EOPNOTSUPP.
//! * POSIX conformance (pjdfstest) is in docs/POSIX.md.
//! * One session thread takes the requests; only large reads of committed
//!   data run beside it (see "Request threads"). A txg sync's CPU work
//!   (trees, checksums, compression, allocation) runs in the thread that
//!   triggers it, and requests wait for that part; its device writes run
//!   behind.

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, Session, TimeOrNow,
};
use libc::{c_int, EEXIST, EINVAL, EISDIR, ENAMETOOLONG, ENOENT, ENOTDIR, ENOTEMPTY, EROFS};
use ozfs_dmu::tx::ObjsetTx;
use ozfs_dmu::zap_tx;
use ozfs_dsl::sync::PoolWriter;
use ozfs_format::znode::{
    ZplAttrs, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};
use ozfs_format::{Error, ErrorKind};
use ozfs_zpl::acl::{self, Acl};
use ozfs_zpl::write::ZplTx;
use ozfs_zpl::zil::{Itx, ItxEntry};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache attributes and entries it cannot be told
/// about when they change (`.zfs`, read-only mounts of live data).
const TTL: Duration = Duration::from_secs(1);
/// How long the kernel may cache the attributes and entries of a
/// read-write mount: every change the kernel does not see itself is
/// notified to it (see "Kernel caches" above).
const CACHE_TTL: Duration = Duration::from_secs(3600);

/// Most names kept by the kernel as missing at once (past it, a missing
/// name is answered ENOENT, which the kernel does not keep).
const MISSING_MAX: usize = 1 << 16;

/// The attributes of a negative entry: node 0 tells the kernel the name
/// is missing and to remember that for the entry's TTL.
fn missing_attr() -> FileAttr {
    FileAttr {
        ino: 0,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// The TTL of an inode's entry and attributes.
fn ttl(ino: u64) -> &'static Duration {
    if ino >= snapdir::VIRT_MIN {
        &TTL
    } else {
        &CACHE_TTL
    }
}
/// Object number mask of a directory entry value.
const OBJ_MASK: u64 = (1 << 48) - 1;
/// Bytes reserved at once for file data (reservations carry ~1 MiB of
/// worst-case metadata each, so small writes share one).
const RESERVE_CHUNK: u64 = 8 << 20;
const ENODATA: c_int = libc::ENODATA;

/// Whether a caller with primary group `gid` in process `pid` belongs to
/// group `group` (its supplementary groups from /proc; unreadable counts
/// as not a member).
fn in_group(group: u64, gid: u32, pid: u32) -> bool {
    if group == u64::from(gid) {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse::<u64>() == Ok(group)))
}

/// The notifier, the entries (directory inode, name) and the inodes the
/// kernel may cache of a mount.
type KernelKnown = (fuser::Notifier, Vec<(u64, Vec<u8>)>, Vec<u64>);

/// Result of a file system operation: errno on failure.
type Res<T> = Result<T, c_int>;

/// A new object's permission bits and the access and default ACL values
/// it inherits (see `State::inherit`).
type Inherited = (u64, Option<Vec<u8>>, Option<Vec<u8>>);

/// How a dataset is mounted.
#[derive(Debug, Clone)]
pub struct Options {
    /// Refuse every change (EROFS); nothing is ever synced.
    pub readonly: bool,
    /// Sync when this much file data is dirty.
    pub txg_bytes: u64,
    /// Sync at most this long after the first change of a txg.
    pub txg_interval: Duration,
    /// `fsname` shown in /proc/mounts.
    pub fsname: String,
    /// The `atime` property: reads and listings update the access time
    /// (relatime rule: only when it is not newer than the last change, or
    /// a day old — strict atime would turn every read into a write).
    pub atime: bool,
    /// The `setuid` property: off mounts `nosuid` (setuid/setgid bits are
    /// ignored by exec).
    pub setuid: bool,
    /// The `devices` property: off mounts `nodev` (device nodes cannot be
    /// opened).
    pub devices: bool,
    /// The `exec` property: off mounts `noexec`.
    pub exec: bool,
    /// `acltype=posix`: POSIX ACLs are stored, inherited and kept in step
    /// with the mode, and the kernel enforces them (FUSE_POSIX_ACL). Off:
    /// the ACL attributes are refused with EOPNOTSUPP.
    pub posix_acl: bool,
    /// `xattr=sa` (or OpenZFS 2.3's `on`): new xattrs of a ZPL 5 file
    /// system go into the znode's system attributes; false: into its
    /// xattr directory.
    pub xattr_sa: bool,
    /// The `sync` property.
    pub sync: SyncMode,
    /// fsync writes the intent log (else it commits the txg): off for
    /// encrypted file systems (ozfs writes no encrypted log yet),
    /// `logbias=throughput` and `OZFS_ZIL=0`.
    pub log: bool,
}

/// The `sync` property: what an `fsync` (and every change) waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// fsync, fdatasync, O_SYNC/O_DSYNC writes are made durable (through
    /// the intent log); other changes go with their txg.
    Standard,
    /// Every change is durable before it is answered.
    Always,
    /// fsync returns at once: changes go with their txg (up to 5 s lost
    /// in a crash, never a half-applied one).
    Disabled,
}

impl SyncMode {
    /// From the property's text (anything else: standard).
    pub fn from_prop(v: &str) -> SyncMode {
        match v {
            "always" => SyncMode::Always,
            "disabled" => SyncMode::Disabled,
            _ => SyncMode::Standard,
        }
    }
}

/// Whether mounts write the intent log (`OZFS_ZIL=0` turns it off: every
/// fsync then commits the txg, as ozfs did before it had a log).
pub fn zil_enabled() -> bool {
    std::env::var("OZFS_ZIL").map_or(true, |v| v != "0")
}

impl Options {
    /// Defaults: read-write, 64 MiB (or `OZFS_TXG_BYTES`), 5 s.
    /// The options of a dataset's mount from its properties (`readonly`,
    /// `atime`, `setuid`, `devices`, `exec`, `acltype`).
    pub fn dataset(
        fsname: &str,
        readonly: bool,
        atime: bool,
        setuid: bool,
        devices: bool,
        exec: bool,
        posix_acl: bool,
    ) -> Options {
        Options {
            readonly,
            atime,
            setuid,
            devices,
            exec,
            posix_acl,
            ..Options::new(fsname)
        }
    }

    pub fn new(fsname: &str) -> Options {
        Options {
            readonly: false,
            txg_bytes: std::env::var("OZFS_TXG_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|v| *v > 0)
                .unwrap_or(64 << 20),
            txg_interval: Duration::from_secs(5),
            fsname: fsname.to_string(),
            atime: true,
            setuid: true,
            devices: true,
            exec: true,
            posix_acl: false,
            xattr_sa: true,
            sync: SyncMode::Standard,
            log: zil_enabled(),
        }
    }

    /// The per-mount flags (`MS_*`) these options ask for: what a live
    /// change applies with [`remount_flags`].
    pub fn ms_flags(&self) -> libc::c_ulong {
        let mut f = 0;
        if self.readonly {
            f |= libc::MS_RDONLY;
        }
        if !self.setuid {
            f |= libc::MS_NOSUID;
        }
        if !self.devices {
            f |= libc::MS_NODEV;
        }
        if !self.exec {
            f |= libc::MS_NOEXEC;
        }
        // A remount keeps the old atime mode unless one is named: `relatime`
        // (the server's own rule) when atime is on.
        f |= if self.atime {
            libc::MS_RELATIME
        } else {
            libc::MS_NOATIME
        };
        f
    }
}

/// Changes the per-mount flags of the mount on `mountpoint` in place
/// (`mount -o remount,bind,…`): `nosuid`, `nodev`, `noexec`, `ro`,
/// `noatime` follow a property changed while mounted, as on OpenZFS, with
/// no unmount and nothing asked of the FUSE server.
pub fn remount_flags(mountpoint: &Path, opts: &Options) -> std::io::Result<()> {
    let c =
        std::ffi::CString::new(mountpoint.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let flags = libc::MS_REMOUNT | libc::MS_BIND | opts.ms_flags();
    // SAFETY: a remount of an existing mount point; all pointers valid or null.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Everything a mounted file system keeps between requests.
pub struct State {
    /// The pool's writer (its open txg holds every change not yet synced).
    pub writer: shared::Writer,
    /// Head dataset (or snapshot, read-only) object.
    pub ds_obj: u64,
    pub recordsize: u64,
    opts: Options,
    root: u64,
    delete_queue: u64,
    dirty_bytes: u64,
    /// The kernel took FUSE_HANDLE_KILLPRIV_V2: it leaves clearing the
    /// set-user-ID and set-group-ID bits on writes and truncates by
    /// callers without CAP_FSETID to us, and stops asking for
    /// `security.capability` before every write (see [`ZfsFuse::init`]).
    killpriv_v2: bool,
    dirty_since: Option<Instant>,
    /// Bytes reserved for file data in the open txg and not yet used.
    budget: u64,
    /// Open file handles per object.
    opens: HashMap<u64, u32>,
    /// Open handle → object.
    handles: HashMap<u64, u64>,
    /// Kernel lookup count per object (entries replied minus forgotten):
    /// an object number the kernel still knows must not be reused.
    lookups: HashMap<u64, u64>,
    /// Names the kernel was told are missing (negative entries it keeps
    /// for `CACHE_TTL`), as (directory inode, name): invalidated with the
    /// rest when the file system changes behind the kernel.
    missing: std::collections::HashSet<(u64, Vec<u8>)>,
    /// Unlinked objects kept alive by open handles or kernel references.
    orphans: BTreeSet<u64>,
    /// Directory handle → listing taken at the first read / rewind.
    dirs: HashMap<u64, Listing>,
    next_fh: u64,
    /// Set once the final sync ran: later requests change nothing.
    closed: bool,
    /// Snapshots seen through `.zfs/snapshot`.
    snaps: snapdir::Snaps,
    /// Where the kernel is told of changes it did not make (set once the
    /// session exists).
    notifier: Option<fuser::Notifier>,
    /// Files written in the open txg: their allocated size is known only
    /// after the sync, so their attributes are invalidated then.
    written: BTreeSet<u64>,
    /// Changes not yet committed to the intent log, in order
    /// (`ozfs_zpl::zil`): what the next fsync writes.
    itxs: Vec<ItxEntry>,
    /// A change the log does not express (xattrs, ACLs) is in the open
    /// txg: the next fsync commits the txg instead.
    unlogged: bool,
    /// A volume, served as one file (`zvol.rs`): its size and block size.
    vol: Option<ozfs_zpl::zvol::ZvolInfo>,
    /// The volume file's times (its dataset's creation) and group.
    vol_ctime: SystemTime,
    vol_gid: u32,
    /// A volume's snapshot (`snapdev=visible`): read straight from its
    /// objset, never through the writer.
    vol_snap: Option<(ozfs_dmu::Objset, ozfs_dmu::Dnode)>,
}

fn log_err(what: &str, e: &Error) {
    eprintln!("ozfs mount: {what}: {e}");
}

/// Without `acltype=posix` (ZFS's default on Linux is `off`) POSIX ACLs
/// are not kept: the `system.posix_acl_access` / `_default` attributes are
/// refused with EOPNOTSUPP, as OpenZFS refuses them, so that tools fall
/// back to the mode bits (`cp -a` then uses chmod instead of believing an
/// ACL was stored). With `acltype=posix` they are stored as OpenZFS on
/// Linux stores them (see [`ozfs_zpl::acl`]).
fn posix_acl_refused(posix_acl: bool, name: &[u8]) -> Res<()> {
    if !posix_acl && acl::is_acl_name(name) {
        Err(libc::EOPNOTSUPP)
    } else {
        Ok(())
    }
}

/// Map an ozfs error to an errno (unexpected ones are logged).
pub fn errno_of(what: &str, e: &Error) -> c_int {
    if matches!(
        e.kind(),
        ErrorKind::Corrupt | ErrorKind::Io | ErrorKind::Unsupported | ErrorKind::Invalid
    ) {
        log_err(what, e);
    }
    e.errno()
}

fn kind_of(mode: u64) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        S_IFIFO => FileType::NamedPipe,
        S_IFCHR => FileType::CharDevice,
        S_IFBLK => FileType::BlockDevice,
        S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// Directory entry type bits (`mode >> 12`) → file type.
fn kind_of_dtype(dtype: u64) -> FileType {
    kind_of(dtype << 12)
}

fn systime((sec, nsec): (u64, u64)) -> SystemTime {
    let s = sec as i64;
    let ns = nsec.min(999_999_999) as u32;
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::new(0, ns)
    }
}

fn ztime(t: SystemTime) -> (u64, u64) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos() as u64),
        Err(e) => {
            // Before 1970: seconds are stored as a negative int64.
            let d = e.duration();
            let mut s = -(d.as_secs() as i64);
            let mut ns = d.subsec_nanos() as u64;
            if ns > 0 {
                s -= 1;
                ns = 1_000_000_000 - ns;
            }
            (s as u64, ns)
        }
    }
}

fn ztime_or_now(t: TimeOrNow) -> (u64, u64) {
    match t {
        TimeOrNow::SpecificTime(t) => ztime(t),
        TimeOrNow::Now => ozfs_zpl::write::now(),
    }
}

/// Device number to store for a `dev_t` as FUSE passes it (the kernel's
/// 32-bit "new" encoding: `minor & 0xff | major << 8 | (minor & !0xff) << 12`).
/// zfs-fuse stores exactly that value in `zp_rdev` (verified: `mknod c 1 3`
/// gives 0x103, `c 300 70000` gives 0x11112c70), so it is stored as is.
fn zdev(rdev: u32) -> u64 {
    rdev as u64
}

/// The FUSE `rdev` of a stored device number: zfs-fuse's form as is; the
/// 64-bit `(major << 32) | minor` form (ZFS on 64-bit Solaris/Linux) is
/// converted.
fn linux_dev(z: u64) -> u32 {
    if z >> 32 == 0 {
        return z as u32;
    }
    let major = ((z >> 32) & 0xfff) as u32;
    let minor = (z & 0xfffff) as u32;
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// FUSE attributes of a znode: inode `ino`, `used` bytes on disk, data
/// block size `blksz`.
fn file_attr(ino: u64, a: &ZplAttrs, used: u64, blksz: u64) -> FileAttr {
    FileAttr {
        ino,
        size: a.size,
        blocks: used.div_ceil(512),
        atime: systime(a.atime),
        mtime: systime(a.mtime),
        ctime: systime(a.ctime),
        crtime: systime(a.crtime),
        kind: kind_of(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.links.min(u32::MAX as u64) as u32,
        uid: a.uid as u32,
        gid: a.gid as u32,
        rdev: linux_dev(a.rdev),
        blksize: blksz.clamp(512, 131072) as u32,
        flags: 0,
    }
}

/// A directory handle's listing: `.`, `..` and the entries, as (inode,
/// kind, name), and the mark kept with the objset while the directory
/// is unchanged (live directories only).
struct Listing {
    entries: Vec<(u64, FileType, Vec<u8>)>,
    mark: Option<Arc<ListingMark>>,
}

/// Kept with the objset as a value derived from a directory
/// ([`ObjsetTx::keep_obj_derived`]) when its listing is taken: every
/// change to the directory (and a sync of its blocks) drops it, so while
/// the objset holds this very mark the listing is current.
/// (Not zero-sized: marks are told apart by address.)
struct ListingMark(#[allow(dead_code)] u8);

fn check_name(name: &OsStr) -> Res<&[u8]> {
    let b = name.as_bytes();
    if b.len() > 255 {
        return Err(ENAMETOOLONG);
    }
    if b.is_empty() || b.contains(&b'/') || b.contains(&0) {
        return Err(EINVAL);
    }
    Ok(b)
}

impl State {
    /// Prepare a mounted file system over `writer`'s dataset `ds_obj`.
    /// Read-write mounts first free the orphans a crash may have left.
    pub fn new(
        writer: PoolWriter,
        ds_obj: u64,
        recordsize: u64,
        opts: Options,
    ) -> Result<State, Error> {
        State::with_writer(shared::Writer::Own(writer), ds_obj, recordsize, opts)
    }

    /// [`State::new`] over an owned or (held) shared writer.
    fn with_writer(
        mut writer: shared::Writer,
        ds_obj: u64,
        recordsize: u64,
        opts: Options,
    ) -> Result<State, Error> {
        // The type from the objset block itself (never encrypted; and not
        // through the writer, which refuses a dataset whose log waits for
        // the replay below). A volume's snapshot is read straight from it:
        // no objset of a snapshot ever enters the writer's open txg.
        let dsp = writer.dataset(ds_obj)?;
        let os = if dsp.bp.is_hole() {
            None
        } else {
            Some(ozfs_dmu::Objset::open(writer.pool.clone(), &dsp.bp)?)
        };
        let snapshot = dsp.next_snap_obj != 0;
        match os {
            Some(os) if os.phys.os_type == ozfs_format::objset::OBJSET_TYPE_ZVOL => {
                let (size, blocksize) = os.read_zvol_info()?;
                let info = ozfs_zpl::zvol::ZvolInfo { size, blocksize };
                let snap = if snapshot {
                    let dn = os.dnode(ozfs_zpl::zvol::ZVOL_OBJ)?;
                    Some((os, dn))
                } else {
                    None
                };
                return State::volume(writer, ds_obj, info, opts, snap);
            }
            _ if snapshot => {
                return Err(Error::Invalid(format!(
                    "{}: a snapshot of a file system is mounted with 'ozfs mount'",
                    opts.fsname
                )))
            }
            _ => {}
        }
        // An intent log left by a writer that stopped (a crash, a kill)
        // is replayed before anything is served.
        if !opts.readonly {
            if let Some(r) =
                ozfs_zpl::zil::replay_if_needed(&mut writer, ds_obj, recordsize, opts.xattr_sa)?
            {
                if r.applied > 0 {
                    eprintln!(
                        "ozfs mount: {}: intent log replayed ({} records applied, {} skipped)",
                        opts.fsname, r.applied, r.skipped
                    );
                }
            }
        }
        let txg = writer.txg;
        let (root, delete_queue) = {
            let tx = writer.fs_tx(ds_obj)?;
            let z = ZplTx::open(tx, txg, recordsize)?;
            (z.root, z.delete_queue)
        };
        let mut st = State::fresh(writer, ds_obj, recordsize, opts);
        st.root = root;
        st.delete_queue = delete_queue;
        st.snaps.ctime = st.dataset_ctime();
        if !st.opts.readonly && delete_queue != 0 {
            let ents = zap_tx::list(st.tx()?, delete_queue)?;
            if !ents.is_empty() {
                for e in ents {
                    if let Some(v) = e.as_u64() {
                        st.free_object(v & OBJ_MASK)?;
                    }
                }
                st.sync()?;
            }
        }
        Ok(st)
    }

    /// A state with nothing open, cached or pending yet.
    fn fresh(writer: shared::Writer, ds_obj: u64, recordsize: u64, opts: Options) -> State {
        State {
            writer,
            ds_obj,
            recordsize,
            opts,
            root: 0,
            delete_queue: 0,
            dirty_bytes: 0,
            killpriv_v2: false,
            dirty_since: None,
            budget: 0,
            opens: HashMap::new(),
            lookups: HashMap::new(),
            missing: Default::default(),
            handles: HashMap::new(),
            orphans: BTreeSet::new(),
            dirs: HashMap::new(),
            next_fh: 1,
            closed: false,
            snaps: snapdir::Snaps::default(),
            notifier: None,
            written: BTreeSet::new(),
            itxs: Vec::new(),
            unlogged: false,
            vol: None,
            vol_ctime: SystemTime::UNIX_EPOCH,
            vol_gid: 0,
            vol_snap: None,
        }
    }

    /// The state of a volume served as one file (see `zvol.rs`), its
    /// intent log replayed first; `snap`: a volume's snapshot, served
    /// read-only from its own objset.
    fn volume(
        writer: shared::Writer,
        ds_obj: u64,
        info: ozfs_zpl::zvol::ZvolInfo,
        mut opts: Options,
        snap: Option<(ozfs_dmu::Objset, ozfs_dmu::Dnode)>,
    ) -> Result<State, Error> {
        let mut writer = writer;
        if snap.is_some() {
            opts.readonly = true;
        }
        // The log a stopped writer left is replayed before anything is
        // served (and an empty chain OpenZFS leaves is freed).
        if !opts.readonly {
            if let Some(n) = ozfs_zpl::zvol::replay_if_needed(&mut writer, ds_obj)? {
                if n > 0 {
                    eprintln!(
                        "ozfs: volume {}: intent log replayed ({n} records applied)",
                        opts.fsname
                    );
                }
            }
        }
        // A snapshot's device never writes: no log.
        if opts.readonly {
            opts.log = false;
        }
        let creation = writer.dataset(ds_obj).map(|d| d.creation_time).unwrap_or(0);
        let disk_gid = std::fs::read_to_string("/etc/group")
            .ok()
            .and_then(|g| {
                g.lines()
                    .find(|l| l.starts_with("disk:"))
                    .and_then(|l| l.split(':').nth(2))
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0);
        let mut st = State::fresh(writer, ds_obj, info.blocksize, opts);
        st.vol = Some(info);
        st.vol_ctime = State::vol_times(creation);
        st.vol_gid = disk_gid;
        st.vol_snap = snap;
        Ok(st)
    }

    fn tx(&mut self) -> Result<&mut ObjsetTx, Error> {
        self.writer.fs_tx(self.ds_obj)
    }

    fn z(&mut self) -> Result<ZplTx<'_>, Error> {
        let txg = self.writer.txg;
        let rs = self.recordsize;
        let xattr_sa = self.opts.xattr_sa;
        let tx = self.writer.fs_tx(self.ds_obj)?;
        let mut z = ZplTx::open(tx, txg, rs)?;
        z.xattr_sa = xattr_sa;
        Ok(z)
    }

    fn obj(&self, ino: u64) -> u64 {
        if ino == fuser::FUSE_ROOT_ID {
            self.root
        } else {
            ino
        }
    }

    fn ino(&self, obj: u64) -> u64 {
        if obj == self.root {
            fuser::FUSE_ROOT_ID
        } else {
            obj
        }
    }

    /// The options this file system is served with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Takes the property-driven options of `o` (readonly, atime, setuid,
    /// devices, exec) on a live mount: going read-only first syncs what is
    /// pending, so nothing written before the change is lost. The mount's
    /// kernel flags are changed by the caller ([`remount_flags`]).
    /// Whether this mount keeps POSIX ACLs (`acltype=posix` when it was
    /// mounted: the kernel learns it once, at FUSE init, so a change needs
    /// a new mount).
    pub fn posix_acl(&self) -> bool {
        self.opts.posix_acl
    }

    pub fn set_flags(&mut self, o: &Options) -> Result<(), Error> {
        if o.readonly && !self.opts.readonly {
            self.sync()?;
        }
        self.opts.readonly = o.readonly;
        self.opts.atime = o.atime;
        self.opts.setuid = o.setuid;
        self.opts.devices = o.devices;
        self.opts.exec = o.exec;
        Ok(())
    }

    fn writable(&self) -> Res<()> {
        if self.opts.readonly || self.closed {
            Err(EROFS)
        } else {
            Ok(())
        }
    }

    fn changed(&mut self) {
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    /// Commit the open txg and wait until it — and every txg committed
    /// before it — is on the devices (no-op when read-only).
    pub fn sync(&mut self) -> Result<(), Error> {
        self.commit(true)
    }

    /// Commit the open txg and go on: its writes are queued on the pool's
    /// I/O thread while the next txg takes requests (the timer and the
    /// dirty-data limit; [`PoolWriter::sync_behind`]).
    fn sync_behind(&mut self) -> Result<(), Error> {
        self.commit(false)
    }

    fn commit(&mut self, wait: bool) -> Result<(), Error> {
        if self.opts.readonly {
            return Ok(());
        }
        // Every object whose blocks this sync writes gets its allocated
        // size then: the kernel is told after it.
        if let Ok(tx) = self.writer.fs_tx(self.ds_obj) {
            let objs = tx.data.keys().chain(tx.ext.keys()).map(|&(o, _)| o);
            self.written.extend(objs);
        }
        if wait {
            self.writer.sync()?;
        } else {
            self.writer.sync_behind()?;
        }
        self.dirty_bytes = 0;
        self.dirty_since = None;
        self.budget = 0;
        self.synced();
        Ok(())
    }

    /// The txg was committed (by us or another holder of the writer): the
    /// files written in it have their final allocated size.
    fn synced(&mut self) {
        // Changes of committed txgs need no log.
        let open = self.writer.txg;
        self.itxs.retain(|e| e.txg >= open);
        self.unlogged = false;
        let written = std::mem::take(&mut self.written);
        for obj in written {
            self.inval_attrs(obj);
        }
    }

    /// Tell the kernel an object's attributes changed (attributes only: no
    /// page is touched, so this is safe under any lock and in any request).
    fn inval_attrs(&self, obj: u64) {
        if let Some(n) = &self.notifier {
            if obj == self.root || self.lookups.contains_key(&obj) {
                let _ = n.inval_inode(self.ino(obj), -1, 0);
            }
        }
    }

    /// What the kernel may hold of this file system, with the notifier to
    /// invalidate it by ([`shared::drop_kernel_caches`]): every inode it
    /// knows (a directory's listing and attributes go with its inode), and
    /// every name in a directory it knows that is not a directory now (the
    /// name may have held another object the kernel still maps it to),
    /// and every name it was told is missing (forgotten here: the kernel
    /// looks each up again) unless it is now a directory the kernel holds.
    /// Names of directories are left alone: invalidating one would detach
    /// what is mounted on it (a child dataset) and the working directories
    /// of processes below it; a copy merges into a directory, never
    /// replaces it.
    pub(crate) fn kernel_known(&mut self) -> Option<KernelKnown> {
        let n = self.notifier.clone()?;
        let mut objs: Vec<u64> = self.lookups.keys().copied().collect();
        if !self.lookups.contains_key(&self.root) {
            objs.push(self.root);
        }
        let mut entries = Vec::new();
        for &o in &objs {
            let dir = self.ino(o);
            if !self.attrs(o).is_ok_and(|a| a.mode & S_IFMT == S_IFDIR) {
                continue;
            }
            let Ok(tx) = self.tx() else { continue };
            let Ok(ents) = zap_tx::list(tx, o) else {
                continue;
            };
            for e in ents {
                let Some(v) = e.as_u64() else { continue };
                // ZPL 1 entries carry no type: those are invalidated too.
                if v >> 60 != libc::DT_DIR as u64 {
                    entries.push((dir, e.name));
                }
            }
        }
        // Names once missing, unless now a directory the kernel holds
        // (made or found through the mount since: a READDIRPLUS, a
        // rename): left alone as directories are above.
        let missing: Vec<(u64, Vec<u8>)> = self.missing.drain().collect();
        for (parent, name) in missing {
            let held_dir = match self.lookup_obj(self.obj(parent), &name) {
                Ok(Some(o)) => {
                    self.lookups.contains_key(&o)
                        && self.attrs(o).is_ok_and(|a| a.mode & S_IFMT == S_IFDIR)
                }
                _ => false,
            };
            if !held_dir {
                entries.push((parent, name));
            }
        }
        let inos = objs.iter().map(|&o| self.ino(o)).collect();
        Some((n, entries, inos))
    }

    fn sync_errno(&mut self, what: &str) -> Res<()> {
        self.sync().map_err(|e| errno_of(what, &e))
    }

    /// Sync if the txg has been dirty for longer than the interval.
    pub fn sync_if_old(&mut self) {
        if let Some(t) = self.dirty_since {
            if t.elapsed() >= self.opts.txg_interval {
                if let Err(e) = self.sync_behind() {
                    log_err("periodic sync", &e);
                    // Tried again an interval later, not at every tick.
                    self.dirty_since = Some(Instant::now());
                }
            }
        }
    }

    /// Final sync; afterwards every change is refused.
    pub fn close(&mut self) -> Result<(), Error> {
        if self.closed {
            return Ok(());
        }
        // Orphans still open at unmount (the kernel released everything,
        // normally): free them now.
        let orphans: Vec<u64> = std::mem::take(&mut self.orphans).into_iter().collect();
        if !self.opts.readonly {
            for o in orphans {
                self.free_object(o)?;
            }
        }
        if !self.opts.readonly {
            self.writer.zil_close(self.ds_obj);
        }
        let r = self.sync();
        self.closed = true;
        r
    }

    /// Remember a change for the intent log (when this mount writes one).
    pub(crate) fn log(&mut self, itx: Itx) {
        if self.opts.log && !self.opts.readonly {
            let txg = self.writer.txg;
            self.itxs.push(ItxEntry { txg, itx });
        }
    }

    /// A change the log cannot express: the next fsync commits the txg.
    fn log_unloggable(&mut self) {
        self.unlogged = true;
    }

    /// `fsync`/`fdatasync` (and what O_SYNC/O_DSYNC writes make the
    /// kernel send): `reply` is answered once every change made so far is
    /// durable — through the intent log, the commit sharing its write and
    /// flush with every other commit waiting at the time (the reply is
    /// sent by the log writer, and this request thread goes on) — or by a
    /// txg commit where the log is off, holds no chain yet, or cannot
    /// express a change. `sync=disabled` answers at once.
    pub(crate) fn fsync_reply(&mut self, reply: ReplyEmpty) {
        if self.opts.readonly || self.closed || self.opts.sync == SyncMode::Disabled {
            return reply.ok();
        }
        match self.log_commit() {
            // Committed with the txg: durable already.
            Ok(None) => reply.ok(),
            Ok(Some(c)) => {
                let pool = self.writer.pool.clone();
                let done: ozfs_spa::zilio::Completion = Box::new(move |r| match r {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(errno_of("fsync (intent log)", &e)),
                });
                if let Some(done) = c.submit(&pool, done) {
                    let r = self.sync();
                    done(r);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    /// Commit the changes made so far to the intent log: the blocks to
    /// queue, or None when the txg was committed instead (done: durable).
    pub(crate) fn log_commit(&mut self) -> Res<Option<ozfs_dsl::zil::Commit>> {
        if !self.opts.log || self.unlogged {
            self.itxs.clear();
            return self.sync_errno("fsync").map(|()| None);
        }
        let itxs = std::mem::take(&mut self.itxs);
        let ds = self.ds_obj;
        let masks = ozfs_zpl::zil::AttrMasks::of_version(self.writer.version);
        let recs = self
            .tx()
            .and_then(|tx| ozfs_zpl::zil::records(tx, itxs, masks));
        let c = recs.and_then(|recs| self.writer.zil_commit(ds, recs));
        match c {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                // Whatever went wrong, a txg commit makes it all durable;
                // the log starts afresh after it.
                log_err("intent log commit (committing the txg instead)", &e);
                self.writer.zil_close(ds);
                self.sync_errno("fsync").map(|()| None)
            }
        }
    }

    /// `sync=always`: the change just made is durable before its reply.
    fn sync_always(&mut self) -> Res<()> {
        if self.opts.sync != SyncMode::Always || self.opts.readonly {
            return Ok(());
        }
        match self.log_commit()? {
            None => Ok(()),
            Some(c) => {
                let (tx, rx) = std::sync::mpsc::channel();
                let done: ozfs_spa::zilio::Completion = Box::new(move |r| {
                    let _ = tx.send(r);
                });
                let pool = self.writer.pool.clone();
                if let Some(done) = c.submit(&pool, done) {
                    let r = self.sync();
                    done(r);
                }
                match rx.recv() {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(errno_of("sync=always (intent log)", &e)),
                    Err(_) => Err(libc::EIO),
                }
            }
        }
    }

    /// Reserve room for `n` bytes of file data, syncing once if the open
    /// txg's reservations are what stands in the way.
    fn reserve(&mut self, n: u64) -> Res<()> {
        // Quotas first: a write past one fails with EDQUOT, whatever the
        // pool has free.
        let ds = self.ds_obj;
        self.writer
            .charge_quota(ds, n)
            .map_err(|e| errno_of("quota", &e))?;
        if self.budget >= n {
            self.budget -= n;
            return Ok(());
        }
        let chunk = n.max(RESERVE_CHUNK);
        if self.writer.reserve(chunk).is_ok() {
            self.budget += chunk - n;
            return Ok(());
        }
        match self.writer.reserve(n) {
            Ok(()) => return Ok(()),
            Err(e) if !ozfs_spa::metaslab::is_enospc(&e) => return Err(errno_of("reserve", &e)),
            Err(_) => {}
        }
        // Commit the txg (its reservations were worst cases) and try again.
        self.sync_errno("sync before reserve")?;
        match self.writer.reserve(n) {
            Ok(()) => Ok(()),
            Err(e) => Err(errno_of("reserve", &e)),
        }
    }

    fn attrs(&mut self, obj: u64) -> Res<ZplAttrs> {
        let z = self.z().map_err(|e| errno_of("open file system", &e))?;
        z.attrs(obj).map_err(|e| match e {
            Error::NotFound(_) => ENOENT,
            e => errno_of(&format!("attributes of object {obj}"), &e),
        })
    }

    /// Record an access (read, listing) under the atime property's rule.
    /// Best effort: a failure to record it never fails the read.
    fn touch_atime(&mut self, obj: u64) {
        if !self.opts.atime || self.opts.readonly || self.closed {
            return;
        }
        let Ok(mut a) = self.attrs(obj) else { return };
        let now = ozfs_zpl::write::now();
        let stale =
            a.atime <= a.mtime || a.atime <= a.ctime || now.0 >= a.atime.0.saturating_add(86_400);
        if !stale {
            return;
        }
        a.atime = now;
        if let Ok(mut z) = self.z() {
            if z.set_attrs(obj, &a).is_ok() {
                self.changed();
                self.inval_attrs(obj);
            }
        }
    }

    /// FUSE attributes of an object, plus its generation: kept with the
    /// objset until the object changes or is synced.
    fn fattr(&mut self, obj: u64) -> Res<(FileAttr, u64)> {
        if let Ok(tx) = self.tx() {
            if let Some(v) = tx.with_obj_derived(obj, |v: &(FileAttr, u64)| *v) {
                return Ok(v);
            }
        }
        let a = self.attrs(obj)?;
        let ino = self.ino(obj);
        let tx = self.tx().map_err(|e| errno_of("open file system", &e))?;
        let dn = tx
            .dnode(obj)
            .map_err(|e| errno_of(&format!("dnode {obj}"), &e))?;
        let mut used = dn.phys.used_bytes();
        if a.mode & S_IFMT == S_IFREG && tx.data.range((obj, 0)..=(obj, u64::MAX)).next().is_some()
        {
            // Not yet written: count the size rounded up to the block size.
            let bs = dn.phys.datablksz().max(512);
            used = used.max(a.size.div_ceil(bs) * bs);
        }
        let attr = file_attr(ino, &a, used, dn.phys.datablksz());
        tx.keep_obj_derived(obj, Arc::new((attr, a.gen)));
        Ok((attr, a.gen))
    }

    fn lookup_obj(&mut self, dir: u64, name: &[u8]) -> Res<Option<u64>> {
        let z = self.z().map_err(|e| errno_of("open file system", &e))?;
        match z.lookup(dir, name) {
            Ok(o) => Ok(o),
            Err(e) => {
                // Looking up in a non-directory.
                if let Ok(a) = z.attrs(dir) {
                    if a.mode & S_IFMT != S_IFDIR {
                        return Err(ENOTDIR);
                    }
                }
                Err(errno_of(&format!("lookup in directory {dir}"), &e))
            }
        }
    }

    fn dir_attrs(&mut self, dir: u64) -> Res<ZplAttrs> {
        let a = self.attrs(dir)?;
        if a.mode & S_IFMT != S_IFDIR {
            return Err(ENOTDIR);
        }
        Ok(a)
    }

    /// Owner of a new node in `dir`: the caller, with BSD/SysV setgid
    /// directory semantics (the group of the directory, and new
    /// directories inherit S_ISGID).
    fn new_owner(&mut self, dir: u64, req_uid: u32, req_gid: u32) -> Res<(u64, u64)> {
        let d = self.dir_attrs(dir)?;
        if d.mode & 0o2000 != 0 {
            Ok((req_uid as u64, d.gid))
        } else {
            Ok((req_uid as u64, req_gid as u64))
        }
    }

    fn entry_exists(&mut self, dir: u64, name: &[u8]) -> Res<()> {
        if self.lookup_obj(dir, name)?.is_some() {
            return Err(EEXIST);
        }
        Ok(())
    }

    // ----- object lifetime --------------------------------------------

    /// Free an object with link count 0 and its xattrs; drop it from the delete queue.
    fn free_object(&mut self, obj: u64) -> Result<(), Error> {
        let dq = self.delete_queue;
        let z = self.z()?;
        match z.attrs(obj) {
            Ok(a) if a.links == 0 => {
                if a.xattr != 0 {
                    for e in zap_tx::list(z.tx, a.xattr)? {
                        if let Some(v) = e.as_u64() {
                            z.tx.free_object(v & OBJ_MASK)?;
                        }
                    }
                    z.tx.free_object(a.xattr)?;
                }
                z.tx.free_object(obj)?;
            }
            // Gone already, or relinked: only the queue entry goes.
            Ok(_) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        if dq != 0 {
            zap_tx::remove(z.tx, dq, format!("{obj:x}").as_bytes())?;
        }
        self.changed();
        Ok(())
    }

    /// Whether the kernel or an open handle still refers to `obj`.
    fn held(&self, obj: u64) -> bool {
        self.opens.get(&obj).copied().unwrap_or(0) > 0
            || self.lookups.get(&obj).copied().unwrap_or(0) > 0
    }

    /// Keep `obj` (links now 0) until the kernel and every handle let go
    /// of it: it goes into the delete queue and the orphan set.
    fn orphan(&mut self, obj: u64) -> Result<(), Error> {
        let dq = self.delete_queue;
        let z = self.z()?;
        if dq != 0 {
            zap_tx::add(z.tx, dq, format!("{obj:x}").as_bytes(), 8, &[obj])?;
        }
        self.orphans.insert(obj);
        Ok(())
    }

    /// Remove the non-directory name `name` (object `obj`) from `dir`. If it
    /// was the last link of a file that is open or still known to the
    /// kernel, the object stays (links 0, in the delete queue) until its
    /// last release / forget (its number must not be reused before).
    fn remove_name(&mut self, dir: u64, name: &[u8], obj: u64) -> Result<(), Error> {
        let held = self.held(obj);
        let mut z = self.z()?;
        let mut a = z.attrs(obj)?;
        if !held || a.links > 1 {
            z.unlink(dir, name)?;
        } else {
            // Hold one extra link across the unlink so nothing is freed.
            a.links += 1;
            z.set_attrs(obj, &a)?;
            z.unlink(dir, name)?;
            let mut a = z.attrs(obj)?;
            a.links = 0;
            z.set_attrs(obj, &a)?;
            self.orphan(obj)?;
        }
        self.log(ozfs_zpl::zil::remove_itx(dir, name, false));
        self.changed();
        Ok(())
    }

    /// Remove the empty directory `name` (object `obj`) from `dir`; kept
    /// as an orphan while the kernel knows it (see [`State::remove_name`]).
    fn remove_dir_name(&mut self, dir: u64, name: &[u8], obj: u64) -> Result<(), Error> {
        let held = self.held(obj);
        let mut z = self.z()?;
        if !held {
            z.rmdir(dir, name)?;
        } else {
            z.remove_dir_entry(dir, name, obj)?;
            self.orphan(obj)?;
        }
        self.log(ozfs_zpl::zil::remove_itx(dir, name, true));
        self.changed();
        Ok(())
    }

    /// The kernel forgot `n` lookups of `ino`.
    fn forget(&mut self, ino: u64, n: u64) {
        if ino >= snapdir::VIRT_MIN {
            return;
        }
        let obj = self.obj(ino);
        let Some(c) = self.lookups.get_mut(&obj) else {
            return;
        };
        *c = c.saturating_sub(n);
        if *c > 0 {
            return;
        }
        self.lookups.remove(&obj);
        if !self.held(obj) && self.orphans.remove(&obj) && !self.closed {
            if let Err(e) = self.free_object(obj) {
                log_err(&format!("free unlinked object {obj}"), &e);
            }
        }
    }

    /// Whether the kernel may keep `name` in directory `parent` as missing
    /// (a negative entry, node 0): a live directory whose ZAP matches
    /// names byte for byte (left out, conservatively: one that folds case
    /// or normalizes Unicode, where ZFS finds other spellings of a name,
    /// which this lookup does not yet do), on a mount that can invalidate
    /// it, within [`MISSING_MAX`] names. The name is remembered for
    /// [`Self::kernel_known`] until it exists through this mount
    /// ([`Self::named`]).
    fn remember_missing(&mut self, parent: u64, name: &[u8]) -> bool {
        if parent >= snapdir::VIRT_MIN
            || self.notifier.is_none()
            || self.missing.len() >= MISSING_MAX
        {
            return false;
        }
        let dir = self.obj(parent);
        let exact = match self.tx() {
            Ok(tx) => zap_tx::normflags(tx, dir).is_ok_and(|f| f == 0),
            Err(_) => false,
        };
        if exact {
            self.missing.insert((parent, name.to_vec()));
        }
        exact
    }

    /// Name `name` of directory `parent` now exists through this mount
    /// (the kernel holds it): it is no longer one the kernel was told is
    /// missing.
    fn named(&mut self, parent: u64, name: &OsStr) {
        if !self.missing.is_empty() {
            self.missing.remove(&(parent, name.as_bytes().to_vec()));
        }
    }

    /// An entry for `a` is being replied: the kernel now holds one more lookup.
    fn looked_up(&mut self, a: &FileAttr) {
        if a.ino >= snapdir::VIRT_MIN {
            return;
        }
        let obj = self.obj(a.ino);
        *self.lookups.entry(obj).or_insert(0) += 1;
    }

    fn new_handle(&mut self, obj: u64) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, obj);
        *self.opens.entry(obj).or_insert(0) += 1;
        fh
    }

    fn release_handle(&mut self, fh: u64) -> Res<()> {
        let Some(obj) = self.handles.remove(&fh) else {
            return Ok(());
        };
        let n = self.opens.entry(obj).or_insert(1);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.opens.remove(&obj);
            if !self.held(obj) && self.orphans.remove(&obj) && !self.closed {
                self.free_object(obj)
                    .map_err(|e| errno_of(&format!("free unlinked object {obj}"), &e))?;
            }
        }
        Ok(())
    }

    // ----- operations --------------------------------------------------

    /// Attributes of any inode (live or under `.zfs`).
    fn do_getattr(&mut self, ino: u64) -> Res<(FileAttr, u64)> {
        if ino >= snapdir::VIRT_MIN {
            return self.v_getattr(ino);
        }
        let obj = self.obj(ino);
        self.fattr(obj)
    }

    /// EROFS for a change under `.zfs`; EEXIST for creating `.zfs` itself
    /// in the root, EROFS for removing or renaming it.
    fn check_change(&self, inos: &[u64], names: &[(u64, &OsStr, bool)]) -> Res<()> {
        for &i in inos {
            snapdir::not_virtual(i)?;
        }
        for &(dir, name, create) in names {
            if snapdir::is_ctl_name(dir, name) {
                return Err(if create { EEXIST } else { EROFS });
            }
        }
        Ok(())
    }

    /// The entry `name` of directory `parent`: None when the name is
    /// missing from a live directory (only that: a damaged entry is an
    /// error, and a name missing under `.zfs` is ENOENT).
    fn lookup_entry(&mut self, parent: u64, name: &OsStr) -> Res<Option<(FileAttr, u64)>> {
        if parent >= snapdir::VIRT_MIN {
            return self.v_lookup(parent, name.as_bytes()).map(Some);
        }
        if snapdir::is_ctl_name(parent, name) {
            return self.v_getattr(snapdir::CTL_INO).map(Some);
        }
        let dir = self.obj(parent);
        let name = name.as_bytes();
        if name.len() > 255 {
            return Err(ENAMETOOLONG);
        }
        let obj = if name == b"." {
            dir
        } else if name == b".." {
            self.dir_attrs(dir)?.parent
        } else {
            match self.lookup_obj(dir, name)? {
                Some(o) => o,
                None => return Ok(None),
            }
        };
        self.fattr(obj).map(Some)
    }

    #[allow(clippy::too_many_arguments)]
    fn do_setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> Res<FileAttr> {
        if ino >= snapdir::VIRT_MIN {
            let nothing = mode.is_none()
                && uid.is_none()
                && gid.is_none()
                && size.is_none()
                && atime.is_none()
                && mtime.is_none();
            if nothing {
                return Ok(self.v_getattr(ino)?.0);
            }
            return Err(EROFS);
        }
        let obj = self.obj(ino);
        if mode.is_none()
            && uid.is_none()
            && gid.is_none()
            && size.is_none()
            && atime.is_none()
            && mtime.is_none()
        {
            return Ok(self.fattr(obj)?.0);
        }
        self.writable()?;
        if let Some(size) = size {
            self.written.insert(obj);
            let a = self.attrs(obj)?;
            match a.mode & S_IFMT {
                S_IFDIR => return Err(EISDIR),
                S_IFREG => {}
                _ => return Err(EINVAL),
            }
            if size > a.size {
                self.reserve(0)?;
            }
            let mut z = self.z().map_err(|e| errno_of("open", &e))?;
            z.truncate(obj, size)
                .map_err(|e| errno_of(&format!("truncate object {obj}"), &e))?;
        }
        let mut a = self.attrs(obj)?;
        let now = ozfs_zpl::write::now();
        if let Some(m) = mode {
            a.mode = (a.mode & S_IFMT) | (m as u64 & 0o7777);
            // A chmod rewrites the base entries of a stored access ACL.
            if let Some(mut acl) = self.access_acl(obj)? {
                acl.chmod(a.mode);
                let mut z = self.z().map_err(|e| errno_of("open", &e))?;
                z.set_xattr(obj, acl::ACCESS, &acl.encode())
                    .map_err(|e| errno_of("chmod", &e))?;
                self.log_unloggable();
            }
        }
        if let Some(u) = uid {
            a.uid = u as u64;
        }
        if let Some(g) = gid {
            a.gid = g as u64;
        }
        if (uid.is_some() || gid.is_some()) && mode.is_none() && a.mode & S_IFMT != S_IFDIR {
            // chown clears set-user-ID and set-group-ID (group-executable).
            a.mode &= !0o4000;
            if a.mode & 0o010 != 0 {
                a.mode &= !0o2000;
            }
        }
        if let Some(t) = atime {
            a.atime = ztime_or_now(t);
        }
        if let Some(t) = mtime {
            a.mtime = ztime_or_now(t);
        }
        a.ctime = now;
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        z.set_attrs(obj, &a)
            .map_err(|e| errno_of(&format!("setattr object {obj}"), &e))?;
        use ozfs_zpl::zil::attr;
        let mask = [
            (mode.is_some(), attr::MODE),
            (uid.is_some(), attr::UID),
            (gid.is_some(), attr::GID),
            (size.is_some(), attr::SIZE),
            (atime.is_some(), attr::ATIME),
            (mtime.is_some(), attr::MTIME),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |m, (_, b)| m | b);
        let itx = ozfs_zpl::zil::setattr_itx(&z, obj, mask)
            .map_err(|e| errno_of(&format!("setattr object {obj}"), &e))?;
        self.log(itx);
        self.changed();
        self.sync_always()?;
        Ok(self.fattr(obj)?.0)
    }

    fn do_readlink(&mut self, ino: u64) -> Res<Vec<u8>> {
        if ino >= snapdir::VIRT_MIN {
            return self.v_readlink(ino);
        }
        let obj = self.obj(ino);
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFLNK {
            return Err(EINVAL);
        }
        if let Some(t) = a.symlink {
            return Ok(t);
        }
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        tx.read(obj, 0, a.size.min(65536) as usize)
            .map_err(|e| errno_of(&format!("readlink object {obj}"), &e))
    }

    /// Create a non-directory, non-symlink node.
    #[allow(clippy::too_many_arguments)]
    fn do_mknod(
        &mut self,
        req_uid: u32,
        req_gid: u32,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Res<(FileAttr, u64)> {
        self.check_change(&[parent], &[(parent, name, true)])?;
        self.writable()?;
        let dir = self.obj(parent);
        let name = check_name(name)?;
        let (mut mode, acl_access, acl_default) = self.inherit(dir, mode as u64, umask, false)?;
        if mode & S_IFMT == 0 {
            mode |= S_IFREG;
        }
        let fmt = mode & S_IFMT;
        if !matches!(fmt, S_IFREG | S_IFIFO | S_IFCHR | S_IFBLK | S_IFSOCK) {
            return Err(EINVAL);
        }
        let (uid, gid) = self.new_owner(dir, req_uid, req_gid)?;
        self.entry_exists(dir, name)?;
        let zrdev = if fmt == S_IFCHR || fmt == S_IFBLK {
            zdev(rdev)
        } else {
            0
        };
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        let obj = z
            .create(dir, name, mode, uid, gid, zrdev)
            .map_err(|e| errno_of("create", &e))?;
        let itx =
            ozfs_zpl::zil::create_itx(&z, dir, name, obj).map_err(|e| errno_of("create", &e))?;
        self.log(itx);
        self.store_inherited(obj, acl_access, acl_default)?;
        self.changed();
        self.sync_always()?;
        self.fattr(obj)
    }

    fn do_mkdir(
        &mut self,
        req_uid: u32,
        req_gid: u32,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Res<(FileAttr, u64)> {
        self.check_change(&[parent], &[(parent, name, true)])?;
        self.writable()?;
        let dir = self.obj(parent);
        let name = check_name(name)?;
        let (mode, acl_access, acl_default) =
            self.inherit(dir, mode as u64 & 0o7777, umask, true)?;
        let mut mode = mode & 0o7777;
        let (uid, gid) = self.new_owner(dir, req_uid, req_gid)?;
        if self.dir_attrs(dir)?.mode & 0o2000 != 0 {
            mode |= 0o2000;
        }
        self.entry_exists(dir, name)?;
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        let obj = z
            .mkdir(dir, name, mode, uid, gid)
            .map_err(|e| errno_of("mkdir", &e))?;
        if mode & 0o2000 != 0 {
            // ZplTx::mkdir keeps only the permission bits it was given; make sure.
            let mut a = z.attrs(obj).map_err(|e| errno_of("mkdir", &e))?;
            if a.mode & 0o2000 == 0 {
                a.mode |= 0o2000;
                z.set_attrs(obj, &a).map_err(|e| errno_of("mkdir", &e))?;
            }
        }
        let itx =
            ozfs_zpl::zil::create_itx(&z, dir, name, obj).map_err(|e| errno_of("mkdir", &e))?;
        self.log(itx);
        self.store_inherited(obj, acl_access, acl_default)?;
        self.changed();
        self.sync_always()?;
        self.fattr(obj)
    }

    fn do_unlink(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        self.check_change(&[parent], &[(parent, name, false)])?;
        self.writable()?;
        let dir = self.obj(parent);
        let name = name.as_bytes();
        let obj = self.lookup_obj(dir, name)?.ok_or(ENOENT)?;
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(EISDIR);
        }
        self.remove_name(dir, name, obj)
            .map_err(|e| errno_of("unlink", &e))?;
        self.sync_always()
    }

    fn do_rmdir(&mut self, parent: u64, name: &OsStr) -> Res<()> {
        self.check_change(&[parent], &[(parent, name, false)])?;
        self.writable()?;
        let dir = self.obj(parent);
        let name = name.as_bytes();
        if name == b"." {
            return Err(EINVAL);
        }
        if name == b".." {
            return Err(ENOTEMPTY);
        }
        let obj = self.lookup_obj(dir, name)?.ok_or(ENOENT)?;
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT != S_IFDIR {
            return Err(ENOTDIR);
        }
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        if !zap_tx::list(tx, obj)
            .map_err(|e| errno_of("rmdir", &e))?
            .is_empty()
        {
            return Err(ENOTEMPTY);
        }
        self.remove_dir_name(dir, name, obj)
            .map_err(|e| errno_of("rmdir", &e))?;
        self.sync_always()
    }

    fn do_symlink(
        &mut self,
        req_uid: u32,
        req_gid: u32,
        parent: u64,
        name: &OsStr,
        target: &Path,
    ) -> Res<(FileAttr, u64)> {
        self.check_change(&[parent], &[(parent, name, true)])?;
        self.writable()?;
        let dir = self.obj(parent);
        let name = check_name(name)?;
        let t = target.as_os_str().as_bytes();
        if t.is_empty() {
            return Err(ENOENT);
        }
        if t.len() > 4095 {
            return Err(ENAMETOOLONG);
        }
        let (uid, gid) = self.new_owner(dir, req_uid, req_gid)?;
        self.entry_exists(dir, name)?;
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        let obj = z
            .symlink(dir, name, t, uid, gid)
            .map_err(|e| errno_of("symlink", &e))?;
        let itx =
            ozfs_zpl::zil::create_itx(&z, dir, name, obj).map_err(|e| errno_of("symlink", &e))?;
        self.log(itx);
        self.changed();
        self.sync_always()?;
        self.fattr(obj)
    }

    fn do_rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Res<()> {
        self.check_change(
            &[parent, newparent],
            &[(parent, name, false), (newparent, newname, false)],
        )?;
        self.writable()?;
        const RENAME_NOREPLACE: u32 = 1;
        const RENAME_EXCHANGE: u32 = 2;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(EINVAL);
        }
        let sdir = self.obj(parent);
        let ddir = self.obj(newparent);
        let sname = name.as_bytes();
        let dname = check_name(newname)?;
        if flags & RENAME_EXCHANGE != 0 {
            self.lookup_obj(sdir, sname)?.ok_or(ENOENT)?;
            self.lookup_obj(ddir, dname)?.ok_or(ENOENT)?;
            let mut z = self.z().map_err(|e| errno_of("open", &e))?;
            z.exchange(sdir, sname, ddir, dname)
                .map_err(|e| errno_of("rename (exchange)", &e))?;
            self.log(ozfs_zpl::zil::rename_itx(sdir, sname, ddir, dname, true));
            self.changed();
            return self.sync_always();
        }
        let obj = self.lookup_obj(sdir, sname)?.ok_or(ENOENT)?;
        self.dir_attrs(ddir)?;
        let a = self.attrs(obj)?;
        let is_dir = a.mode & S_IFMT == S_IFDIR;
        if let Some(target) = self.lookup_obj(ddir, dname)? {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(EEXIST);
            }
            if target == obj {
                // Two names of one file: nothing happens.
                return Ok(());
            }
            let ta = self.attrs(target)?;
            let t_dir = ta.mode & S_IFMT == S_IFDIR;
            match (is_dir, t_dir) {
                (true, false) => return Err(ENOTDIR),
                (false, true) => return Err(EISDIR),
                (true, true) => {
                    let tx = self.tx().map_err(|e| errno_of("open", &e))?;
                    if !zap_tx::list(tx, target)
                        .map_err(|e| errno_of("rename", &e))?
                        .is_empty()
                    {
                        return Err(ENOTEMPTY);
                    }
                }
                (false, false) => {}
            }
        }
        if is_dir {
            // Refuse moving a directory under itself.
            let mut p = ddir;
            for _ in 0..4096 {
                if p == obj {
                    return Err(EINVAL);
                }
                if p == self.root {
                    break;
                }
                p = self.attrs(p)?.parent;
            }
        }
        if let Some(target) = self.lookup_obj(ddir, dname)? {
            // May be open or known to the kernel: keep it alive if so.
            if self.attrs(target)?.mode & S_IFMT != S_IFDIR {
                self.remove_name(ddir, dname, target)
            } else {
                self.remove_dir_name(ddir, dname, target)
            }
            .map_err(|e| errno_of("rename (replace)", &e))?;
        }
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        z.rename(sdir, sname, ddir, dname)
            .map_err(|e| errno_of("rename", &e))?;
        self.log(ozfs_zpl::zil::rename_itx(sdir, sname, ddir, dname, false));
        self.changed();
        self.sync_always()
    }

    fn do_link(&mut self, ino: u64, newparent: u64, newname: &OsStr) -> Res<(FileAttr, u64)> {
        self.check_change(&[ino, newparent], &[(newparent, newname, true)])?;
        self.writable()?;
        let obj = self.obj(ino);
        let dir = self.obj(newparent);
        let name = check_name(newname)?;
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(libc::EPERM);
        }
        if a.links == 0 {
            return Err(ENOENT);
        }
        if a.links >= u32::MAX as u64 {
            return Err(libc::EMLINK);
        }
        self.dir_attrs(dir)?;
        self.entry_exists(dir, name)?;
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        z.link(dir, name, obj).map_err(|e| errno_of("link", &e))?;
        self.log(ozfs_zpl::zil::link_itx(dir, name, obj));
        self.changed();
        self.sync_always()?;
        self.fattr(obj)
    }

    fn do_open(&mut self, ino: u64, flags: i32) -> Res<u64> {
        if ino >= snapdir::VIRT_MIN {
            return self.v_open(ino, flags);
        }
        let obj = self.obj(ino);
        let a = self.attrs(obj)?;
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.writable()?;
            if a.mode & S_IFMT == S_IFDIR {
                return Err(EISDIR);
            }
        }
        Ok(self.new_handle(obj))
    }

    /// Plan a read: small reads and reads of objects whose data changed in
    /// the open txg are done here, under the state lock; large reads of
    /// objects whose data is unchanged ([`ObjsetTx::data_is_clean`]) come
    /// back as the committed objset and dnode, to be read by a request
    /// thread without the lock ([`ReadPlan::Committed`]).
    fn plan_read(&mut self, ino: u64, offset: i64, size: u32) -> Res<ReadPlan> {
        if ino >= snapdir::VIRT_MIN {
            return self.v_read(ino, offset, size).map(ReadPlan::Done);
        }
        let obj = self.obj(ino);
        let a = self.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            return Err(EISDIR);
        }
        let off = offset.max(0) as u64;
        if off >= a.size {
            return Ok(ReadPlan::Done(Vec::new()));
        }
        let n = (a.size - off).min(size as u64) as usize;
        self.touch_atime(obj);
        let synced = self.writer.txg.saturating_sub(1);
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        if size < OFFLOAD_MIN || !tx.data_is_clean(obj) {
            return tx
                .read(obj, off, n)
                .map(ReadPlan::Done)
                .map_err(|e| errno_of(&format!("read object {obj}"), &e));
        }
        let dn = tx
            .os
            .dnode(obj)
            .map_err(|e| errno_of(&format!("read object {obj}"), &e))?;
        Ok(ReadPlan::Committed(Box::new(CommittedRead {
            hold: tx.os.pool.hold_io(synced),
            os: tx.os.clone(),
            dn,
            off,
            len: n,
        })))
    }

    /// `lseek` with `SEEK_DATA` / `SEEK_HOLE` (the kernel handles the other
    /// kinds): the answer follows the file's block pointers at record
    /// granularity, counting this txg's writes and punched holes; the end of
    /// the file is a hole. Files under `.zfs` are all data.
    fn do_lseek(&mut self, ino: u64, offset: i64, whence: i32) -> Res<i64> {
        let want_data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(EINVAL),
        };
        if offset < 0 {
            return Err(libc::ENXIO);
        }
        let off = offset as u64;
        let (a, _) = self.do_getattr(ino)?;
        if off >= a.size {
            return Err(libc::ENXIO);
        }
        if ino >= snapdir::VIRT_MIN {
            return Ok(if want_data { offset } else { a.size as i64 });
        }
        let obj = self.obj(ino);
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        let bs = tx
            .dnode(obj)
            .map_err(|e| errno_of("lseek", &e))?
            .phys
            .datablksz()
            .max(1);
        let found = tx
            .next_block(obj, off / bs, (a.size - 1) / bs, want_data)
            .map_err(|e| errno_of(&format!("lseek object {obj}"), &e))?;
        match (found, want_data) {
            (Some(b), _) => Ok((b.saturating_mul(bs)).max(off).min(a.size) as i64),
            (None, true) => Err(libc::ENXIO),
            (None, false) => Ok(a.size as i64),
        }
    }

    fn do_write(&mut self, ino: u64, offset: i64, data: &[u8]) -> Res<u32> {
        snapdir::not_virtual(ino)?;
        self.writable()?;
        let obj = self.obj(ino);
        if offset < 0 {
            return Err(EINVAL);
        }
        let off = offset as u64;
        if off
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(libc::EFBIG);
        }
        // What the txg will write is whole blocks: a small write into a
        // block not yet dirty costs the block (a 4 KiB write into a
        // 128 KiB record is 128 KiB at sync).
        let cost = self.dirty_cost(obj, off, data.len() as u64);
        self.reserve(cost)?;
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        z.write(obj, off, data)
            .map_err(|e| errno_of(&format!("write object {obj}"), &e))?;
        self.log(Itx::Write {
            obj,
            off,
            len: data.len() as u64,
        });
        self.changed();
        self.dirty_bytes += cost;
        self.written.insert(obj);
        if self.dirty_bytes >= self.opts.txg_bytes {
            self.sync_behind()
                .map_err(|e| errno_of("sync (dirty data limit)", &e))?;
        }
        self.sync_always()?;
        Ok(data.len() as u32)
    }

    /// The bytes a write of `len` at `off` of `obj` adds to the open txg:
    /// the whole of each block it touches that this txg has not dirtied
    /// yet (at least `len`), as OpenZFS's dirty accounting charges
    /// whole dbufs. The dirty-data limit and the space reservation use
    /// it, so small random writes cannot grow a txg (and its memory and
    /// allocations) a record size beyond the limit.
    fn dirty_cost(&mut self, obj: u64, off: u64, len: u64) -> u64 {
        let Ok(tx) = self.writer.fs_tx(self.ds_obj) else {
            return len;
        };
        let Ok(dn) = tx.dnode(obj) else {
            return len;
        };
        // A file of one block smaller than the record size grows that
        // block as it grows: charged what is written.
        let bs = dn.phys.datablksz();
        if dn.phys.maxblkid == 0 && bs < self.recordsize {
            return len;
        }
        tx.dirty_cost(obj, bs, off, len)
    }

    /// Clear set-user-ID, and set-group-ID where the group may execute
    /// (a mandatory-locking mark otherwise), as a write or truncate by a
    /// caller without CAP_FSETID does (the kernel's `should_remove_suid`,
    /// left to us under FUSE_HANDLE_KILLPRIV_V2).
    ///
    /// Set-group-ID without group execute goes too when the caller is not
    /// in the file's group (Linux's `setattr_should_drop_sgid`): its
    /// primary group is `caller_gid`, its other groups those of process
    /// `pid` (read only in that rare case).
    fn kill_suid(&mut self, ino: u64, caller_gid: u32, pid: u32) -> Res<()> {
        let a = self.attrs(self.obj(ino))?;
        let mut mode = a.mode & 0o7777;
        if mode & 0o4000 != 0 {
            mode &= !0o4000;
        }
        if mode & 0o2010 == 0o2010 || (mode & 0o2000 != 0 && !in_group(a.gid, caller_gid, pid)) {
            mode &= !0o2000;
        }
        if mode != a.mode & 0o7777 {
            self.do_setattr(ino, Some(mode as u32), None, None, None, None, None)?;
            // The kernel keeps the mode it cached (a write's reply carries
            // no attributes): it must not exec with the old set-ID bits.
            self.inval_attrs(self.obj(ino));
        }
        Ok(())
    }

    /// `fallocate`: mode 0 extends the size (no preallocation: ZFS is
    /// copy-on-write, as OpenZFS does), `KEEP_SIZE` alone changes nothing,
    /// `PUNCH_HOLE | KEEP_SIZE` zeroes the range; other modes EOPNOTSUPP.
    fn do_fallocate(&mut self, ino: u64, offset: i64, length: i64, mode: i32) -> Res<()> {
        snapdir::not_virtual(ino)?;
        self.writable()?;
        let obj = self.obj(ino);
        if mode & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        self.written.insert(obj);
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        if punch && mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if offset < 0 || length <= 0 {
            return Err(EINVAL);
        }
        let (off, len) = (offset as u64, length as u64);
        let end = off.checked_add(len).filter(|e| *e <= i64::MAX as u64);
        let end = end.ok_or(libc::EFBIG)?;
        let a = self.attrs(obj)?;
        match a.mode & S_IFMT {
            S_IFDIR => return Err(EISDIR),
            S_IFREG => {}
            _ => return Err(libc::ENODEV),
        }
        if punch {
            // Partial blocks at both ends are rewritten.
            self.reserve(2 * self.recordsize)?;
            let mut z = self.z().map_err(|e| errno_of("open", &e))?;
            z.punch_hole(obj, off, len)
                .map_err(|e| errno_of(&format!("punch hole in object {obj}"), &e))?;
            self.log(ozfs_zpl::zil::truncate_itx(obj, off, len));
        } else {
            let mut z = self.z().map_err(|e| errno_of("open", &e))?;
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > a.size {
                z.truncate(obj, end)
                    .map_err(|e| errno_of(&format!("extend object {obj}"), &e))?;
                let itx = ozfs_zpl::zil::setattr_itx(&z, obj, ozfs_zpl::zil::attr::SIZE)
                    .map_err(|e| errno_of(&format!("extend object {obj}"), &e))?;
                self.log(itx);
            } else {
                let mut a = a;
                a.ctime = ozfs_zpl::write::now();
                z.set_attrs(obj, &a)
                    .map_err(|e| errno_of(&format!("fallocate object {obj}"), &e))?;
            }
        }
        self.changed();
        self.sync_always()
    }

    /// A directory handle; its listing is taken by the first `readdir`
    /// (the kernel may serve the whole listing from its cache instead).
    fn do_opendir(&mut self, ino: u64) -> Res<u64> {
        if ino < snapdir::VIRT_MIN {
            self.dir_attrs(self.obj(ino))?;
            self.touch_atime(self.obj(ino));
        }
        let fh = self.next_fh;
        self.next_fh += 1;
        Ok(fh)
    }

    /// The listing of directory handle `fh` for a read at `offset` (taken
    /// out of the handle; the caller puts it back): a fresh one for the
    /// first read or a rewind. A live directory's listing is marked with
    /// the objset ([`ListingMark`]) until the directory changes.
    fn take_listing(&mut self, ino: u64, fh: u64, offset: i64) -> Res<Listing> {
        match self.dirs.remove(&fh) {
            Some(l) if offset != 0 => Ok(l),
            _ => {
                let entries = self.listing_ino(ino)?;
                let mut mark = None;
                if ino < snapdir::VIRT_MIN {
                    let obj = self.obj(ino);
                    if let Ok(tx) = self.tx() {
                        let m = Arc::new(ListingMark(0));
                        tx.keep_obj_derived(obj, m.clone());
                        mark = Some(m);
                    }
                }
                Ok(Listing { entries, mark })
            }
        }
    }

    /// The attributes READDIRPLUS hands the kernel for entry `name` →
    /// `eino` of directory `dir`; None when the name is gone or moved since
    /// the listing was taken (never handed to the kernel as an entry it
    /// would keep for an hour). A `current` listing (its mark still held,
    /// [`Self::listing_current`]) is of the directory as it is: its names
    /// need no lookup.
    fn plus_entry(
        &mut self,
        dir: u64,
        eino: u64,
        name: &[u8],
        current: bool,
    ) -> Res<Option<(FileAttr, u64)>> {
        let dots = name == b"." || name == b"..";
        if !dots && !current && eino < snapdir::VIRT_MIN {
            match self.lookup_obj(dir, name)? {
                Some(o) if self.ino(o) == eino => {}
                _ => return Ok(None),
            }
        }
        match self.do_getattr(eino) {
            Ok(v) => Ok(Some(v)),
            Err(ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the objset still holds `mark`, the mark taken with a
    /// listing of `dir`: the directory has not changed since.
    fn listing_current(&mut self, dir: u64, mark: Option<&Arc<ListingMark>>) -> bool {
        let Some(m) = mark else { return false };
        let Ok(tx) = self.tx() else { return false };
        tx.with_obj_derived(dir, |held: &ListingMark| std::ptr::eq(held, &**m))
            .unwrap_or(false)
    }

    /// Listing of any directory inode (live or under `.zfs`).
    fn listing_ino(&mut self, ino: u64) -> Res<Vec<(u64, FileType, Vec<u8>)>> {
        if ino >= snapdir::VIRT_MIN {
            return self.v_listing(ino);
        }
        let obj = self.obj(ino);
        let mut l = self.listing(obj)?;
        if obj == self.root && self.snapdir_visible() {
            l.retain(|(_, _, n)| n != snapdir::CTL_NAME);
            l.insert(
                2,
                (
                    snapdir::CTL_INO,
                    FileType::Directory,
                    snapdir::CTL_NAME.to_vec(),
                ),
            );
        }
        Ok(l)
    }

    /// `.`, `..` and the entries of a directory.
    fn listing(&mut self, obj: u64) -> Res<Vec<(u64, FileType, Vec<u8>)>> {
        let a = self.dir_attrs(obj)?;
        let parent = self.ino(a.parent);
        let me = self.ino(obj);
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        let ents = zap_tx::list(tx, obj).map_err(|e| errno_of("readdir", &e))?;
        let mut out = Vec::with_capacity(ents.len() + 2);
        out.push((me, FileType::Directory, b".".to_vec()));
        out.push((parent, FileType::Directory, b"..".to_vec()));
        for e in ents {
            let Some(v) = e.as_u64() else { continue };
            let o = v & OBJ_MASK;
            let kind = if v >> 60 == 0 {
                // ZPL 1 entries carry no type: ask the object.
                match self.attrs(o) {
                    Ok(a) => kind_of(a.mode),
                    Err(_) => FileType::RegularFile,
                }
            } else {
                kind_of_dtype(v >> 60)
            };
            out.push((self.ino(o), kind, e.name));
        }
        Ok(out)
    }

    fn do_xattr_dir(&mut self, ino: u64) -> Res<(u64, ZplAttrs)> {
        let obj = self.obj(ino);
        let a = self.attrs(obj)?;
        Ok((obj, a))
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Res<Vec<u8>> {
        posix_acl_refused(self.opts.posix_acl, name)?;
        if ino >= snapdir::VIRT_MIN {
            return self
                .v_xattrs(ino)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
                .ok_or(ENODATA);
        }
        let (_, a) = self.do_xattr_dir(ino)?;
        // The SA xattrs first, then the xattr directory (OpenZFS's order).
        if let Some(packed) = &a.dxattr {
            let sa = ozfs_zpl::fs::sa_xattrs(packed).map_err(|e| errno_of("getxattr", &e))?;
            if let Some((_, v)) = sa.into_iter().find(|(n, _)| n == name) {
                return Ok(v);
            }
        }
        if a.xattr == 0 {
            return Err(ENODATA);
        }
        let f = match self.lookup_obj(a.xattr, name) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(ENODATA),
            Err(ENOENT) => return Err(ENODATA),
            Err(e) => return Err(e),
        };
        let fa = self.attrs(f)?;
        if fa.size > 64 << 20 {
            return Err(libc::E2BIG);
        }
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        tx.read(f, 0, fa.size as usize)
            .map_err(|e| errno_of("getxattr", &e))
    }

    fn list_xattrs(&mut self, ino: u64) -> Res<Vec<u8>> {
        if ino >= snapdir::VIRT_MIN {
            let mut out = Vec::new();
            for (n, _) in self.v_xattrs(ino)? {
                out.extend_from_slice(&n);
                out.push(0);
            }
            return Ok(out);
        }
        let (_, a) = self.do_xattr_dir(ino)?;
        let mut out = Vec::new();
        if let Some(packed) = &a.dxattr {
            let sa = ozfs_zpl::fs::sa_xattrs(packed).map_err(|e| errno_of("listxattr", &e))?;
            for (n, _) in sa {
                if posix_acl_refused(self.opts.posix_acl, &n).is_err() {
                    continue;
                }
                out.extend_from_slice(&n);
                out.push(0);
            }
        }
        if a.xattr == 0 {
            return Ok(out);
        }
        let tx = self.tx().map_err(|e| errno_of("open", &e))?;
        for e in zap_tx::list(tx, a.xattr).map_err(|e| errno_of("listxattr", &e))? {
            // ACL attributes are offered only where ACLs are kept.
            if posix_acl_refused(self.opts.posix_acl, &e.name).is_err() {
                continue;
            }
            out.extend_from_slice(&e.name);
            out.push(0);
        }
        Ok(out)
    }

    fn set_xattr(&mut self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> Res<()> {
        posix_acl_refused(self.opts.posix_acl, name.as_bytes())?;
        snapdir::not_virtual(ino)?;
        self.writable()?;
        let name = name.as_bytes();
        if name.is_empty() || name.len() > 255 {
            return Err(if name.is_empty() {
                EINVAL
            } else {
                libc::ERANGE
            });
        }
        if name.contains(&b'/') {
            return Err(EINVAL);
        }
        let exists = match self.get_xattr(ino, name) {
            Ok(_) => true,
            Err(ENODATA) => false,
            Err(e) => return Err(e),
        };
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(ENODATA);
        }
        self.reserve(value.len() as u64)?;
        self.log_unloggable();
        if acl::is_acl_name(name) {
            self.set_acl(ino, name, value, exists)?;
            return self.sync_always();
        }
        let obj = self.obj(ino);
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        z.set_xattr(obj, name, value)
            .map_err(|e| errno_of("setxattr", &e))?;
        let mut a = z.attrs(obj).map_err(|e| errno_of("setxattr", &e))?;
        a.ctime = ozfs_zpl::write::now();
        z.set_attrs(obj, &a).map_err(|e| errno_of("setxattr", &e))?;
        self.changed();
        self.sync_always()
    }

    /// Sets a POSIX ACL (`acltype=posix`): the access ACL sets the mode and
    /// is stored only when it says more than the mode; a default ACL only
    /// on a directory. `exists`: the attribute is stored now.
    fn set_acl(&mut self, ino: u64, name: &[u8], value: &[u8], exists: bool) -> Res<()> {
        let obj = self.obj(ino);
        let parsed = Acl::parse(value, &format!("object {obj}")).map_err(|_| EINVAL)?;
        let a = self.attrs(obj)?;
        let (store, bits) = if name == acl::ACCESS {
            let (bits, equiv) = parsed.equiv_mode();
            (!equiv, Some(bits))
        } else {
            if a.mode & S_IFMT != S_IFDIR {
                return Err(libc::EACCES);
            }
            (true, None)
        };
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        if store {
            z.set_xattr(obj, name, &parsed.encode())
                .map_err(|e| errno_of("setxattr", &e))?;
        } else if exists {
            z.remove_xattr(obj, name)
                .map_err(|e| errno_of("setxattr", &e))?;
        }
        // Read again: storing may have given the object its xattr directory.
        let mut a = z.attrs(obj).map_err(|e| errno_of("setxattr", &e))?;
        if let Some(bits) = bits {
            a.mode = (a.mode & !0o777) | bits;
        }
        a.ctime = ozfs_zpl::write::now();
        z.set_attrs(obj, &a).map_err(|e| errno_of("setxattr", &e))?;
        self.changed();
        Ok(())
    }

    /// The stored access ACL of `obj`, if any (`acltype=posix` only).
    fn access_acl(&mut self, obj: u64) -> Res<Option<Acl>> {
        if !self.opts.posix_acl {
            return Ok(None);
        }
        match self.get_xattr(self.ino(obj), acl::ACCESS) {
            Ok(v) => Acl::parse(&v, &format!("object {obj}"))
                .map(Some)
                .map_err(|e| errno_of("ACL", &e)),
            Err(ENODATA) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What a new object in directory `dir` of requested mode `mode` gets:
    /// its permission bits, and the access and default ACLs to store. With
    /// a default ACL on `dir` the umask does not apply (POSIX 1003.1e).
    fn inherit(&mut self, dir: u64, mode: u64, umask: u32, is_dir: bool) -> Res<Inherited> {
        let masked = mode & !(umask as u64 & 0o777);
        if !self.opts.posix_acl {
            return Ok((masked, None, None));
        }
        let def = match self.get_xattr(self.ino(dir), acl::DEFAULT) {
            Ok(v) => v,
            Err(ENODATA) => return Ok((masked, None, None)),
            Err(e) => return Err(e),
        };
        let d = Acl::parse(&def, &format!("default ACL of directory {dir}"))
            .map_err(|e| errno_of("ACL", &e))?;
        let (access, bits) = d.create_masq(mode & 0o7777);
        let mode = (mode & !0o7777) | bits;
        Ok((mode, access.map(|a| a.encode()), is_dir.then(|| d.encode())))
    }

    /// Stores the ACLs [`State::inherit`] gave a new object.
    fn store_inherited(
        &mut self,
        obj: u64,
        access: Option<Vec<u8>>,
        def: Option<Vec<u8>>,
    ) -> Res<()> {
        if access.is_some() || def.is_some() {
            self.log_unloggable();
        }
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        for (name, v) in [(acl::ACCESS, access), (acl::DEFAULT, def)] {
            if let Some(v) = v {
                z.set_xattr(obj, name, &v)
                    .map_err(|e| errno_of("setxattr", &e))?;
            }
        }
        Ok(())
    }

    fn remove_xattr(&mut self, ino: u64, name: &OsStr) -> Res<()> {
        posix_acl_refused(self.opts.posix_acl, name.as_bytes())?;
        snapdir::not_virtual(ino)?;
        self.writable()?;
        let name = name.as_bytes();
        let obj = self.obj(ino);
        let mut z = self.z().map_err(|e| errno_of("open", &e))?;
        if !z
            .remove_xattr(obj, name)
            .map_err(|e| errno_of("removexattr", &e))?
        {
            return Err(ENODATA);
        }
        let mut a = z.attrs(obj).map_err(|e| errno_of("removexattr", &e))?;
        a.ctime = ozfs_zpl::write::now();
        z.set_attrs(obj, &a)
            .map_err(|e| errno_of("removexattr", &e))?;
        self.log_unloggable();
        self.changed();
        self.sync_always()
    }

    /// (blocks, bfree, bavail, files, ffree, bsize) in 4 KiB units.
    fn statfs(&mut self) -> (u64, u64, u64, u64, u64, u32) {
        const BS: u64 = 4096;
        let total = self.writer.alloc.total_space();
        let free = self.writer.alloc.free_space();
        let avail = if self.opts.readonly {
            0
        } else {
            let pool = self
                .writer
                .writable_space()
                .unwrap_or(0)
                .saturating_sub(self.budget);
            let ds = self.ds_obj;
            match self.writer.quota_room(ds) {
                Ok(Some(room)) => pool.min(room),
                _ => pool,
            }
        };
        let used_objs = self.tx().map(|t| t.os.object_count()).unwrap_or(0);
        let ffree = avail / 512;
        (
            total / BS,
            free / BS,
            avail / BS,
            used_objs + ffree,
            ffree,
            BS as u32,
        )
    }
}

/// Reads at least this large (the kernel's readahead and large `read`s)
/// may be served by a request thread.
const OFFLOAD_MIN: u32 = 64 * 1024;

/// What [`State::plan_read`] decided.
enum ReadPlan {
    Done(Vec<u8>),
    Committed(Box<CommittedRead>),
}

/// A read of committed blocks, for a request thread.
struct CommittedRead {
    hold: ozfs_spa::pool::IoToken,
    os: ozfs_dmu::objset::Objset,
    dn: ozfs_dmu::objset::Dnode,
    off: u64,
    len: usize,
}

type Job = Box<dyn FnOnce() + Send>;

/// Request threads: large reads of committed data run here, several at
/// once, while the session thread goes on taking requests. A job carries
/// an I/O hold on the synced txg it reads, so the space of the blocks it
/// follows cannot be reused meanwhile.
struct Workers {
    tx: Option<std::sync::mpsc::Sender<Job>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn new(n: usize) -> Workers {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..n)
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("ozfs-read-{i}"))
                    .spawn(move || loop {
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(j) => j(),
                            Err(_) => return,
                        }
                    })
            })
            .filter_map(|t| t.ok())
            .collect();
        Workers {
            tx: Some(tx),
            threads,
        }
    }

    /// Run `job` on a request thread (or here if there is none).
    fn run(&self, job: Job) {
        match &self.tx {
            Some(tx) if !self.threads.is_empty() => {
                if let Err(e) = tx.send(job) {
                    (e.0)();
                }
            }
            _ => job(),
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Number of request threads: `OZFS_FUSE_THREADS`, else the CPU count
/// (2 to 8).
fn worker_count() -> usize {
    std::env::var("OZFS_FUSE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .clamp(2, 8)
        })
}

/// The FUSE file system: shares its [`State`] with the timer and signal threads.
pub struct ZfsFuse {
    st: Arc<Mutex<State>>,
    workers: Workers,
}

impl ZfsFuse {
    pub fn new(st: Arc<Mutex<State>>) -> ZfsFuse {
        ZfsFuse {
            st,
            workers: Workers::new(worker_count()),
        }
    }

    fn lock(&self) -> shared::Guard<'_> {
        shared::lock(&self.st)
    }

    /// The state, locked with the pool's writer held; `None` once the
    /// writer is gone for good (the pool was exported under a mount that
    /// is still in the kernel): requests then get EIO, never a panic.
    fn live(&self) -> Option<shared::Guard<'_>> {
        Some(self.lock()).filter(|g| g.writer_held())
    }
}

/// [`ZfsFuse::live`] in a request handler: the guard, or EIO replied and
/// the handler left.
macro_rules! live {
    ($fs:expr, $reply:expr) => {
        match $fs.live() {
            Some(g) => g,
            None => {
                $reply.error(libc::EIO);
                return;
            }
        }
    };
}

impl Filesystem for ZfsFuse {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), c_int> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        {
            use fuser::consts::{FUSE_DO_READDIRPLUS, FUSE_READDIRPLUS_AUTO};
            let _ = config.add_capabilities(FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO);
        }
        // The kernel then no longer asks for `security.capability` before
        // each write (a round trip per write: about half the cost of a
        // small one); it marks write and truncate requests whose caller
        // lacks CAP_FSETID, and we clear the set-ID bits (kill_suid).
        const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
        if config.add_capabilities(FUSE_HANDLE_KILLPRIV_V2).is_ok() {
            self.lock().killpriv_v2 = true;
        }
        if self.lock().opts.posix_acl {
            // The kernel checks access against the ACLs it reads with
            // getxattr, and leaves the umask to us: it must not apply
            // under a default ACL.
            use fuser::consts::{FUSE_DONT_MASK, FUSE_POSIX_ACL};
            if let Err(missing) = config.add_capabilities(FUSE_POSIX_ACL | FUSE_DONT_MASK) {
                eprintln!("ozfs mount: the kernel lacks POSIX ACL support ({missing:#x}): acltype=posix is not enforced");
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = shared::close(&self.st) {
            log_err("final sync", &e);
        }
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut st = live!(self, reply);
        match st.lookup_entry(parent, name) {
            Ok(Some((a, gen))) => {
                st.looked_up(&a);
                reply.entry(ttl(a.ino), &a, gen)
            }
            Ok(None) if st.remember_missing(parent, name.as_bytes()) => {
                reply.entry(&CACHE_TTL, &missing_attr(), 0)
            }
            Ok(None) => reply.error(ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        if let Some(mut g) = self.live() {
            g.forget(ino, nlookup);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            match st.vol_check_ino(ino).and_then(|()| st.vol_attr()) {
                Ok(a) => reply.attr(&Duration::from_secs(1), &a),
                Err(e) => reply.error(e),
            }
            return;
        }
        match st.do_getattr(ino) {
            Ok((a, _)) => reply.attr(ttl(a.ino), &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            match st.vol_setattr(ino, size) {
                Ok(a) => reply.attr(&Duration::from_secs(1), &a),
                Err(e) => reply.error(e),
            }
            return;
        }
        // A truncate by a caller without CAP_FSETID clears the set-ID bits
        // (the kernel's FATTR_KILL_SUIDGID, which fuser does not pass on:
        // root stands for CAP_FSETID).
        if st.killpriv_v2 && size.is_some() && mode.is_none() && req.uid() != 0 {
            if let Err(e) = st.kill_suid(ino, req.gid(), req.pid()) {
                reply.error(e);
                return;
            }
        }
        match st.do_setattr(ino, mode, uid, gid, size, atime, mtime) {
            Ok(a) => reply.attr(ttl(a.ino), &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match live!(self, reply).do_readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mut st = live!(self, reply);
        match st.do_mknod(req.uid(), req.gid(), parent, name, mode, umask, rdev) {
            Ok((a, gen)) => {
                st.named(parent, name);
                st.looked_up(&a);
                reply.entry(ttl(a.ino), &a, gen)
            }
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = live!(self, reply);
        match st.do_mkdir(req.uid(), req.gid(), parent, name, mode, umask) {
            Ok((a, gen)) => {
                st.named(parent, name);
                st.looked_up(&a);
                reply.entry(ttl(a.ino), &a, gen)
            }
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        match live!(self, reply).do_unlink(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        match live!(self, reply).do_rmdir(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut st = live!(self, reply);
        match st.do_symlink(req.uid(), req.gid(), parent, link_name, target) {
            Ok((a, gen)) => {
                st.named(parent, link_name);
                st.looked_up(&a);
                reply.entry(ttl(a.ino), &a, gen)
            }
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let mut st = live!(self, reply);
        match st.do_rename(parent, name, newparent, newname, flags) {
            Ok(()) => {
                st.named(newparent, newname);
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut st = live!(self, reply);
        match st.do_link(ino, newparent, newname) {
            Ok((a, gen)) => {
                st.named(newparent, newname);
                st.looked_up(&a);
                reply.entry(ttl(a.ino), &a, gen)
            }
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
            match st
                .vol_check_ino(ino)
                .and_then(|()| if writing { st.writable() } else { Ok(()) })
            {
                // Each request goes to the volume as it comes (no page
                // cache in between: the loop device has its own).
                Ok(()) => reply.opened(0, fuser::consts::FOPEN_DIRECT_IO),
                Err(e) => reply.error(e),
            }
            return;
        }
        match st.do_open(ino, flags) {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            match st.vol_read(ino, offset, size) {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e),
            }
            return;
        }
        let plan = st.plan_read(ino, offset, size);
        drop(st);
        match plan {
            Ok(ReadPlan::Done(d)) => reply.data(&d),
            Ok(ReadPlan::Committed(r)) => self.workers.run(Box::new(move || {
                let CommittedRead {
                    hold,
                    os,
                    dn,
                    off,
                    len,
                } = *r;
                let _hold = hold;
                let mut out = vec![0u8; len];
                match os.read_into_client(&dn, off, &mut out) {
                    Ok(()) => reply.data(&out),
                    Err(e) => reply.error(errno_of(&format!("read object {}", dn.object), &e)),
                }
            })),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
        let mut st = live!(self, reply);
        if st.is_volume() {
            match st.vol_write(ino, offset, data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(e),
            }
            return;
        }
        let kill = st.killpriv_v2 && write_flags & FUSE_WRITE_KILL_SUIDGID != 0;
        if kill {
            if let Err(e) = st.kill_suid(ino, req.gid(), req.pid()) {
                reply.error(e);
                return;
            }
        }
        match st.do_write(ino, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return reply.error(libc::EOPNOTSUPP);
        }
        match st.do_lseek(ino, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _lock_owner: u64,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at close: ENOSYS makes the kernel stop sending
        // FLUSH, one request less per close.
        reply.error(libc::ENOSYS);
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return reply.ok();
        }
        match st.release_handle(fh) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        // A volume's flush too goes through its intent log.
        live!(self, reply).fsync_reply(reply);
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            match st.vol_fallocate(ino, offset, length, mode) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
            return;
        }
        match st.do_fallocate(ino, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        // The kernel keeps a listing it read in the directory's page cache
        // and serves the next opendir from it, until the directory changes
        // through this mount or is invalidated (`.zfs` changes unseen).
        let flags = if ino >= snapdir::VIRT_MIN {
            0
        } else {
            fuser::consts::FOPEN_CACHE_DIR | fuser::consts::FOPEN_KEEP_CACHE
        };
        match live!(self, reply).do_opendir(ino) {
            Ok(fh) => reply.opened(fh, flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = live!(self, reply);
        let list = match st.take_listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let skip = offset.max(0) as usize;
        for (i, (ino, kind, name)) in list.entries.iter().enumerate().skip(skip) {
            if reply.add(*ino, (i + 1) as i64, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        st.dirs.insert(fh, list);
        reply.ok();
    }

    /// READDIR with every entry's attributes (the kernel then needs no
    /// LOOKUP per name for `ls -l`, `find`, nftw). Each name replied with
    /// a node counts as a lookup the kernel holds, except `.` and `..`,
    /// which the kernel never links.
    fn readdirplus(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let mut st = live!(self, reply);
        let list = match st.take_listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let mut added = false;
        let dir = st.obj(ino);
        let skip = offset.max(0) as usize;
        // Nothing below changes the directory: one look for the batch.
        let current = st.listing_current(dir, list.mark.as_ref());
        for (i, (eino, _, name)) in list.entries.iter().enumerate().skip(skip) {
            let (a, gen) = match st.plus_entry(dir, *eino, name, current) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                Err(e) if !added => {
                    st.dirs.insert(fh, list);
                    return reply.error(e);
                }
                Err(_) => break,
            };
            let name = OsStr::from_bytes(name);
            if reply.add(*eino, (i + 1) as i64, name, ttl(*eino), &a, gen) {
                break;
            }
            added = true;
            if name != "." && name != ".." {
                st.looked_up(&a);
            }
        }
        st.dirs.insert(fh, list);
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        live!(self, reply).dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        live!(self, reply).fsync_reply(reply);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let (blocks, bfree, bavail, files, ffree, bsize) = live!(self, reply).statfs();
        reply.statfs(blocks, bfree, bavail, files, ffree, bsize, 255, bsize);
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return reply.error(libc::EOPNOTSUPP);
        }
        match st.set_xattr(ino, name, value, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return reply.error(libc::ENODATA);
        }
        match st.get_xattr(ino, name.as_bytes()) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return if size == 0 {
                reply.size(0)
            } else {
                reply.data(&[])
            };
        }
        match st.list_xattrs(ino) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut st = live!(self, reply);
        if st.is_volume() {
            return reply.error(libc::EOPNOTSUPP);
        }
        match st.remove_xattr(ino, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        // Only reached without default_permissions; the kernel checks modes.
        reply.ok();
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = live!(self, reply);
        let mode = if mode & S_IFMT as u32 == 0 {
            mode | S_IFREG as u32
        } else {
            mode
        };
        let r = st
            .do_mknod(req.uid(), req.gid(), parent, name, mode, umask, 0)
            .and_then(|(a, gen)| {
                let fh = st.do_open(a.ino, flags)?;
                Ok((a, gen, fh))
            });
        match r {
            Ok((a, gen, fh)) => {
                st.named(parent, name);
                st.looked_up(&a);
                reply.created(ttl(a.ino), &a, gen, fh, 0)
            }
            Err(e) => reply.error(e),
        }
    }
}

/// The mount options every ozfs mount has, from `o`.
///
/// The dataset's properties decide the per-mount flags (OpenZFS's
/// zfs_mount options): a pool from elsewhere carries setuid-root files
/// and device nodes, and `setuid=off`/`devices=off`/`exec=off` must hold
/// against them. `allow_other` so that every user sees the file system
/// as with a kernel one; `default_permissions` so that the kernel checks
/// modes and owners (docs/POSIX.md).
fn mount_options(o: &Options) -> Vec<MountOption> {
    let flag = |on: bool, yes: MountOption, no: MountOption| if on { yes } else { no };
    vec![
        MountOption::FSName(o.fsname.clone()),
        MountOption::Subtype("ozfs".into()),
        MountOption::DefaultPermissions,
        MountOption::AllowOther,
        flag(o.devices, MountOption::Dev, MountOption::NoDev),
        flag(o.setuid, MountOption::Suid, MountOption::NoSuid),
        flag(o.exec, MountOption::Exec, MountOption::NoExec),
        flag(o.atime, MountOption::Atime, MountOption::NoAtime),
        flag(o.readonly, MountOption::RO, MountOption::RW),
    ]
}

/// Mount `st`'s file system on `mountpoint` (canonicalized) with the
/// options every ozfs mount has; returns the session, the mountpoint and
/// the txg interval.
fn open_session(
    st: &Arc<Mutex<State>>,
    mountpoint: &Path,
) -> std::io::Result<(Session<ZfsFuse>, PathBuf, Duration)> {
    let mountpoint: PathBuf = mountpoint.canonicalize()?;
    open_session_at(st, &mountpoint, mountpoint.clone(), false)
}

/// Mount a FUSE file system on `target` with mount(2), as fuser does for
/// root (type `fuse`, the `/dev/fuse` descriptor, root mode, owner,
/// `allow_other`, `default_permissions`, and the per-mount flags
/// [`mount_options`] gives), but on `target` exactly as given: a
/// `/proc/self/fd/N` link is followed by the kernel to the directory it
/// names. Returns the `/dev/fuse` descriptor for the session.
fn mount_direct(target: &Path, o: &Options) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?;
    let fd: std::os::fd::OwnedFd = dev.into();
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},default_permissions,allow_other",
        fd.as_raw_fd()
    );
    let mut flags: libc::c_ulong = 0;
    for (off, flag) in [
        (!o.devices, libc::MS_NODEV),
        (!o.setuid, libc::MS_NOSUID),
        (!o.exec, libc::MS_NOEXEC),
        (!o.atime, libc::MS_NOATIME),
        (o.readonly, libc::MS_RDONLY),
    ] {
        if off {
            flags |= flag;
        }
    }
    let bad = |_| std::io::Error::from_raw_os_error(libc::EINVAL);
    let source = CString::new(o.fsname.as_bytes()).map_err(bad)?;
    let fstype = CString::new("fuse").map_err(bad)?;
    let tgt = CString::new(target.as_os_str().as_bytes()).map_err(bad)?;
    let data = CString::new(data).map_err(bad)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; the kernel copies them.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            tgt.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr() as *const libc::c_void,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// [`open_session`] mounting on `target` whose path is `mountpoint`.
/// `direct`: `target` is `/proc/self/fd/N` of a directory the caller
/// opened and checked, and the mount must land on that very directory:
/// ozfs then calls mount(2) itself on `target` (the kernel follows the
/// descriptor's link to the directory it names, never a path resolved
/// again), with the session on the `/dev/fuse` descriptor it opened
/// ([`mount_direct`]). fuser's own mount would canonicalize `target` back
/// into a path string and mount on whatever that path leads to by then.
/// Without the privilege to mount (not root), fuser's mount (through
/// `fusermount`) is used.
fn open_session_at(
    st: &Arc<Mutex<State>>,
    target: &Path,
    mountpoint: PathBuf,
    direct: bool,
) -> std::io::Result<(Session<ZfsFuse>, PathBuf, Duration)> {
    let (o, interval) = {
        let g = st.lock().map_err(|_| std::io::Error::other("state lock"))?;
        (g.opts.clone(), g.opts.txg_interval)
    };
    let opts = mount_options(&o);
    let direct_fd = if direct {
        match mount_direct(target, &o) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let session = match direct_fd {
        Some(fd) => Session::from_fd(ZfsFuse::new(st.clone()), fd, fuser::SessionACL::All),
        None => Session::new(ZfsFuse::new(st.clone()), target, &opts)?,
    };
    shared::lock(st).notifier = Some(session.notifier());
    raise_readahead(&mountpoint);
    Ok((session, mountpoint, interval))
}

/// The kernel's readahead for a new mount: `OZFS_READAHEAD_KB`, default
/// 4096 (OpenZFS's prefetch reaches 8 MiB ahead). A FUSE mount starts
/// with its backing device's default, 128 KiB, which keeps sequential
/// readers to one 128 KiB request at a time, and the kernel applies
/// FUSE_INIT's limit (never above that default) when the session
/// answers it. So the mount's bdi is raised in sysfs (root only; best
/// effort) by a short-lived thread once the session has answered INIT:
/// it looks a few times in the first seconds.
pub(crate) fn raise_readahead(mountpoint: &Path) {
    let kb = std::env::var("OZFS_READAHEAD_KB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(4096);
    if kb == 0 {
        return;
    }
    let mountpoint = mountpoint.to_path_buf();
    let _ = std::thread::Builder::new()
        .name("ozfs-readahead".into())
        .spawn(move || {
            for ms in [100, 400, 1500] {
                std::thread::sleep(Duration::from_millis(ms));
                let Some(path) = bdi_readahead_path(&mountpoint) else {
                    continue;
                };
                let now = std::fs::read_to_string(&path).unwrap_or_default();
                if now.trim() != kb.to_string() {
                    let _ = std::fs::write(&path, format!("{kb}\n"));
                }
            }
        });
}

/// `/sys/class/bdi/MAJ:MIN/read_ahead_kb` of the newest mount on
/// `mountpoint`, from `/proc/self/mountinfo` (a `stat` of the mount point
/// would be a request to the session).
fn bdi_readahead_path(mountpoint: &Path) -> Option<String> {
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return None;
    };
    let want = mountinfo_escape(mountpoint.as_os_str().as_bytes());
    // The newest mount on that point is listed last.
    let dev = info.split(|&b| b == b'\n').rev().find_map(|l| {
        let mut f = l.split(|&b| b == b' ');
        let dev = f.nth(2)?;
        let point = f.nth(1)?;
        (point == want.as_slice()).then_some(dev)
    });
    // A device number is "major:minor", digits only.
    let dev = dev.filter(|d| d.iter().all(|&b| b.is_ascii_digit() || b == b':'))?;
    Some(format!(
        "/sys/class/bdi/{}/read_ahead_kb",
        String::from_utf8_lossy(dev)
    ))
}

/// A path as `/proc/self/mountinfo` writes it (space, tab, newline and
/// backslash as octal escapes).
fn mountinfo_escape(p: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(p.len());
    for &b in p {
        match b {
            b' ' | b'\t' | b'\n' | b'\\' => s.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => s.push(b),
        }
    }
    s
}

/// The periodic txg sync of a mount: a thread that syncs a txg at most
/// `interval` after its first change, until `stop`.
fn spawn_txg_timer(st: Arc<Mutex<State>>, stop: Arc<AtomicBool>, interval: Duration) {
    std::thread::spawn(move || {
        let tick = (interval / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let mut g = shared::lock(&st);
            if !g.closed && g.writer_held() {
                g.sync_if_old();
            }
        }
    });
}

/// Block the termination signals in the calling thread (and the threads it
/// starts afterwards), so that only the thread waiting for them sees them.
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mnt.to_string_lossy();
    s.lines()
        .any(|l| l.split(' ').nth(4).map(|p| p == want).unwrap_or(false))
}

/// Mount `st`'s file system on `mountpoint` and serve requests until it is
/// unmounted (`fusermount -u`, `umount`) or the process gets SIGINT,
/// SIGTERM or SIGHUP; then sync the last txg and return.
///
/// On a signal: the txg is synced (under the state lock, so nothing changes
/// after it), then the mount is unmounted; if it is busy, it is detached
/// (lazily unmounted) and the process exits 0 at once — everything done
/// through the mount is on disk at that point.
pub fn serve(st: Arc<Mutex<State>>, mountpoint: &Path) -> std::io::Result<()> {
    let sigset = block_signals();
    let (mut session, mountpoint, interval) = open_session(&st, mountpoint)?;
    let stop = Arc::new(AtomicBool::new(false));
    spawn_txg_timer(st.clone(), stop.clone(), interval);
    // Unmounted here while a copy of the mount lives on elsewhere: the
    // loop must still end (bounded exit after `fusermount -u`).
    if let Some(m) = shared::newest_on(&mountpoint) {
        shared::watch_mount(m, stop.clone());
    }

    // Termination signals: sync, unmount (or detach and exit).
    {
        let st = st.clone();
        let mnt = mountpoint.clone();
        std::thread::spawn(move || {
            let mut sig: c_int = 0;
            // SAFETY: waits for one of the blocked signals in `sigset`.
            let r = unsafe { libc::sigwait(&sigset, &mut sig) };
            if r != 0 {
                return;
            }
            let Ok(cmnt) = std::ffi::CString::new(mnt.as_os_str().as_bytes()) else {
                return;
            };
            let mut g = match st.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if let Err(e) = g.sync() {
                log_err("sync on signal", &e);
            }
            // SAFETY: unmounting our own mount point by path.
            if unsafe { libc::umount2(cmnt.as_ptr(), 0) } == 0 {
                // The request loop ends; serve() finishes the job.
                return;
            }
            if let Err(e) = g.close() {
                log_err("final sync", &e);
            }
            // SAFETY: as above; lazy unmount of a busy mount.
            unsafe { libc::umount2(cmnt.as_ptr(), libc::MNT_DETACH) };
            std::process::exit(if g.closed { 0 } else { 1 });
        });
    }

    let res = session.run();
    stop.store(true, Ordering::Relaxed);
    // Make sure the mount is gone if the loop ended for another reason.
    if is_mounted(&mountpoint) {
        session.unmount();
    }
    drop(session); // calls destroy() → final sync, if not done yet
    let mut g = match st.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    g.close()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    res
}

pub mod readonly;
pub mod shared;
pub mod snapdir;
pub mod zvol;

pub use readonly::serve_readonly;
