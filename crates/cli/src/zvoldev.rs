//! Block devices for volumes without a kernel module: a loop device over
//! the volume's FUSE file, and the `/dev/zvol/POOL/VOL` link OpenZFS users
//! look for.
//!
//! # Theory
//!
//! The daemon serves each volume as a one-file FUSE mount
//! (`ozfs_fuse::zvol`) at `STATE_DIR/zvol/POOL/VOL`. Here a free loop
//! device is taken from `/dev/loop-control` (`LOOP_CTL_GET_FREE`) and
//! bound to that file with `LOOP_CONFIGURE` (direct I/O where the kernel
//! allows it on a FUSE file, so the page cache is not kept twice). It
//! stays bound while the volume is served; `LOOP_CLR_FD` releases it (the
//! kernel defers that to the last close of a device still open). `/dev/zvol/POOL/VOL` then links to `/dev/loopN`, as
//! OpenZFS's udev rules link to `/dev/zdN`.
//!
//! # Invariants
//!
//! * A link is made only after its loop device is bound, and removed
//!   before the device is released: a link never names another file's
//!   loop device.
//! * Detaching never waits for users of the device: the kernel finishes
//!   the detach when the last one closes it (autoclear); until then the
//!   FUSE file stays busy and its unmount reports it.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_DIRECT_IO: u32 = 16;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A volume's block device: the loop device and the link naming it.
#[derive(Debug, Clone)]
pub struct VolDev {
    pub loop_dev: PathBuf,
    pub link: PathBuf,
}

/// Where `/dev/zvol` links live (`OZFS_ZVOL_DIR` for tests).
pub fn zvol_dir() -> PathBuf {
    std::env::var_os("OZFS_ZVOL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/zvol"))
}

/// Bind a free loop device to `file` and link `zvol_dir()/dataset` to it.
pub fn attach(file: &Path, dataset: &str, readonly: bool) -> Result<VolDev, String> {
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| format!("/dev/loop-control: {e}"))?;
    let backing = OpenOptions::new()
        .read(true)
        .write(!readonly)
        .open(file)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let mut last = String::new();
    // Another process may take the free device first: try a few.
    for _ in 0..8 {
        // SAFETY: an ioctl without arguments on a descriptor we own.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(format!(
                "no free loop device: {}",
                std::io::Error::last_os_error()
            ));
        }
        let dev = PathBuf::from(format!("/dev/loop{n}"));
        let lo = match OpenOptions::new().read(true).write(!readonly).open(&dev) {
            Ok(f) => f,
            Err(e) => {
                last = format!("{}: {e}", dev.display());
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        // No autoclear: the device stays bound while the volume is served,
        // whoever opens and closes it; `detach` releases it.
        let mut flags = LO_FLAGS_DIRECT_IO;
        if readonly {
            flags |= LO_FLAGS_READ_ONLY;
        }
        let mut r = configure(&lo, &backing, flags, file);
        if r.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EINVAL))
        {
            // No direct I/O on this file: through the page cache.
            r = configure(&lo, &backing, flags & !LO_FLAGS_DIRECT_IO, file);
        }
        match r {
            Ok(()) => {
                let link = zvol_dir().join(dataset);
                if let Some(p) = link.parent() {
                    std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
                }
                let _ = std::fs::remove_file(&link);
                if let Err(e) = std::os::unix::fs::symlink(&dev, &link) {
                    // SAFETY: as above.
                    unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_CLR_FD) };
                    return Err(format!("{}: {e}", link.display()));
                }
                return Ok(VolDev {
                    loop_dev: dev,
                    link,
                });
            }
            // Taken meanwhile: the next free one.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                last = format!("{}: {e}", dev.display());
            }
            Err(e) => return Err(format!("{}: {e}", dev.display())),
        }
    }
    Err(format!("no loop device could be bound: {last}"))
}

fn configure(
    lo: &std::fs::File,
    backing: &std::fs::File,
    flags: u32,
    file: &Path,
) -> std::io::Result<()> {
    let mut name = [0u8; 64];
    let bytes = file.as_os_str().as_encoded_bytes();
    let n = bytes.len().min(63);
    name[..n].copy_from_slice(&bytes[..n]);
    let cfg = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info: LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: flags,
            lo_file_name: name,
            lo_crypt_name: [0; 64],
            lo_encrypt_key: [0; 32],
            lo_init: [0; 2],
        },
        reserved: [0; 8],
    };
    // SAFETY: LOOP_CONFIGURE reads a `struct loop_config`, which
    // `LoopConfig` lays out exactly (304 bytes), alive for the call.
    let r = unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_CONFIGURE, &cfg as *const LoopConfig) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Make the loop device take its backing file's new size
/// (`LOOP_SET_CAPACITY`, after `zfs set volsize`).
pub fn set_capacity(d: &VolDev) -> Result<(), String> {
    let lo = OpenOptions::new()
        .read(true)
        .open(&d.loop_dev)
        .map_err(|e| format!("{}: {e}", d.loop_dev.display()))?;
    // SAFETY: an ioctl without arguments on a descriptor we own.
    if unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_SET_CAPACITY) } < 0 {
        return Err(format!(
            "{}: {}",
            d.loop_dev.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Release what a daemon that died left of a volume's device served from
/// `file`: loop devices still bound to it (their I/O fails once its server
/// is gone), and the dead FUSE mount on it (detached lazily).
pub fn clear_stale(file: &Path) {
    if let Ok(dir) = std::fs::read_dir("/sys/block") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                continue;
            }
            let backing = e.path().join("loop/backing_file");
            let Ok(b) = std::fs::read_to_string(&backing) else {
                continue;
            };
            let b = b.trim_end_matches('\n');
            // The kernel names a deleted file "PATH (deleted)".
            let b = b.strip_suffix(" (deleted)").unwrap_or(b);
            if Path::new(b) == file {
                if let Ok(lo) = OpenOptions::new().read(true).open(format!("/dev/{name}")) {
                    // SAFETY: an ioctl without arguments on our descriptor.
                    unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_CLR_FD) };
                }
            }
        }
    }
    if let Ok(c) = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()) {
        // SAFETY: a NUL-terminated path; fails harmlessly when nothing is
        // mounted there.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Remove the link, then let the loop device go (now, or — the kernel
/// sets autoclear on a device still open — when its last user closes it).
pub fn detach(d: &VolDev) {
    if std::fs::read_link(&d.link).is_ok_and(|t| t == d.loop_dev) {
        let _ = std::fs::remove_file(&d.link);
        // Empty parents up to the zvol directory go too.
        let top = zvol_dir();
        let mut p = d.link.parent().map(Path::to_path_buf);
        while let Some(dir) = p {
            if dir == top || std::fs::remove_dir(&dir).is_err() {
                break;
            }
            p = dir.parent().map(Path::to_path_buf);
        }
    }
    if let Ok(lo) = OpenOptions::new().read(true).open(&d.loop_dev) {
        // SAFETY: an ioctl without arguments on a descriptor we own.
        unsafe { libc::ioctl(lo.as_raw_fd(), LOOP_CLR_FD) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn loop_config_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<super::LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<super::LoopConfig>(), 304);
    }
}
