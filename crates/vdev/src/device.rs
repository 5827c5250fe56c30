//! Block devices: the one trait all device I/O goes through, and its file
//! implementation. Keeping I/O behind [`BlockDevice`] lets tests substitute
//! devices that fail, tear or corrupt deterministically.

use ozfs_format::{Error, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A device that can be read (and later written) at byte offsets.
pub trait BlockDevice: Send + Sync {
    /// Fill `buf` from byte `offset`. A short device is an error, never a partial read.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Name for messages (the path).
    fn name(&self) -> &str;
    /// Write `buf` at byte `offset`. Read-only devices refuse.
    fn write_at(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(Error::Invalid(format!(
            "{}: device is open read-only",
            self.name()
        )))
    }
    /// Make every completed write durable (fdatasync for files).
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// Write zeros over the parts of `[offset, offset + len)` the device
    /// does not store yet (holes of a sparse file), so that later writes
    /// there are overwrites: a host file system's `fdatasync` after a
    /// write into a hole also commits the block allocation (a journal
    /// commit), after an overwrite only the data and a cache flush.
    /// Reads are unchanged (a hole reads as zeros). Returns the bytes
    /// written; devices without holes write nothing.
    ///
    /// The caller must own the range: nothing else may be writing it (the
    /// allocator's free space of a metaslab only it allocates from).
    fn fill_holes(&self, _offset: u64, _len: u64) -> Result<u64> {
        Ok(0)
    }
}

/// Open a device by path: a registered simulated device for `sim:NAME`
/// (see [`crate::sim`]), else a file or block device node. Every pool
/// open, import and creation opens its devices here.
pub fn open_path(path: &Path, writable: bool) -> Result<Arc<dyn BlockDevice>> {
    if let Some(dev) = path
        .to_str()
        .and_then(|p| crate::sim::open_path(p, writable))
    {
        return Ok(dev);
    }
    Ok(Arc::new(FileDevice::open_mode(path, writable)?))
}

/// A plain file or a block device node.
pub struct FileDevice {
    file: File,
    writable: bool,
    size: u64,
    path: PathBuf,
    name: String,
}

impl FileDevice {
    /// Open read-only. Block devices are sized by seeking to their end.
    pub fn open(path: &Path) -> Result<FileDevice> {
        Self::open_mode(path, false)
    }

    /// Open for reading, and for writing if `writable`.
    pub fn open_mode(path: &Path, writable: bool) -> Result<FileDevice> {
        let name = path.display().to_string();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| Error::io(format!("open {name}"), e))?;
        let size = device_size(&file).map_err(|e| Error::io(format!("size of {name}"), e))?;
        Ok(FileDevice {
            file,
            writable,
            size,
            path: path.to_path_buf(),
            name,
        })
    }

    /// The path this device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::End(0))
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        fault::gone(&self.name)?;
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.size) {
            return Err(Error::io(
                format!(
                    "{}: read of {} bytes at offset {:#x}",
                    self.name,
                    buf.len(),
                    offset
                ),
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "beyond end of device"),
            ));
        }
        self.file.read_exact_at(buf, offset).map_err(|e| {
            Error::io(
                format!(
                    "{}: read of {} bytes at offset {:#x}",
                    self.name,
                    buf.len(),
                    offset
                ),
                e,
            )
        })
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        fault::check(&self.name, offset)?;
        fault::gone(&self.name)?;
        if !self.writable {
            return Err(Error::Invalid(format!(
                "{}: device is open read-only",
                self.name
            )));
        }
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.size) {
            return Err(Error::io(
                format!(
                    "{}: write of {} bytes at offset {:#x}",
                    self.name,
                    buf.len(),
                    offset
                ),
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "beyond end of device"),
            ));
        }
        self.file.write_all_at(buf, offset).map_err(|e| {
            Error::io(
                format!(
                    "{}: write of {} bytes at offset {:#x}",
                    self.name,
                    buf.len(),
                    offset
                ),
                e,
            )
        })
    }

    fn flush(&self) -> Result<()> {
        fault::gone(&self.name)?;
        if self.writable {
            self.file
                .sync_data()
                .map_err(|e| Error::io(format!("{}: flush", self.name), e))?;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn fill_holes(&self, offset: u64, len: u64) -> Result<u64> {
        use std::os::fd::AsRawFd;
        if !self.writable || len == 0 {
            return Ok(0);
        }
        let end = offset.saturating_add(len).min(self.size);
        let fd = self.file.as_raw_fd();
        let is_file = self.file.metadata().map(|m| m.is_file()).unwrap_or(false);
        if !is_file {
            return Ok(0);
        }
        const CHUNK: usize = 1 << 20;
        let zeros = vec![0u8; CHUNK];
        let mut pos = offset;
        let mut filled = 0u64;
        while pos < end {
            // SAFETY: lseek on an fd this device owns; it moves only the
            // file offset, which no I/O here uses (all I/O is positional).
            let hole = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_HOLE) };
            if hole < 0 {
                // No hole information (or none past `pos`): nothing to do.
                break;
            }
            let hole = hole as u64;
            if hole >= end {
                break;
            }
            // SAFETY: as above.
            let data = unsafe { libc::lseek(fd, hole as libc::off_t, libc::SEEK_DATA) };
            let hole_end = if data < 0 {
                end
            } else {
                (data as u64).min(end)
            };
            let mut p = hole;
            while p < hole_end {
                let n = ((hole_end - p) as usize).min(CHUNK);
                self.file.write_all_at(&zeros[..n], p).map_err(|e| {
                    Error::io(format!("{}: zero fill at offset {p:#x}", self.name), e)
                })?;
                p += n as u64;
                filled += n as u64;
            }
            pos = hole_end;
        }
        if filled > 0 {
            // Start writing the zeros back now, so that the next flush
            // waits for as little of them as possible.
            // SAFETY: sync_file_range on our own fd, no memory passed.
            unsafe {
                libc::sync_file_range(
                    fd,
                    offset as libc::off64_t,
                    (end - offset) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        Ok(filled)
    }
}

/// Deterministic fault injection for crash tests: with `OZFS_FAULT_WRITE_LIMIT=N`
/// in the environment, the process's first N device writes succeed and every
/// later one fails, like a device that stops accepting writes mid-sync.
pub mod fault {
    use ozfs_format::{Error, Result};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    static GONE: OnceLock<Option<String>> = OnceLock::new();

    /// With `OZFS_FAULT_GONE=<marker file>`: once the marker exists, every
    /// I/O to the device whose path is written in it fails with ENXIO, as a
    /// disk that was pulled out.
    pub fn gone(name: &str) -> Result<()> {
        let marker = GONE.get_or_init(|| std::env::var("OZFS_FAULT_GONE").ok());
        if let Some(m) = marker {
            if let Ok(s) = std::fs::read_to_string(m) {
                if s.lines().any(|l| l.trim() == name) {
                    return Err(Error::io(
                        format!("{name}: injected fault"),
                        std::io::Error::from_raw_os_error(6),
                    ));
                }
            }
        }
        Ok(())
    }
    static WRITES: AtomicU64 = AtomicU64::new(0);

    /// Fail if the write budget is spent.
    pub fn check(name: &str, offset: u64) -> Result<()> {
        let limit = *LIMIT.get_or_init(|| {
            std::env::var("OZFS_FAULT_WRITE_LIMIT")
                .ok()
                .and_then(|v| v.parse().ok())
        });
        if let Some(l) = limit {
            let n = WRITES.fetch_add(1, Ordering::SeqCst);
            if n >= l {
                return Err(Error::io(
                    format!("{name}: write at offset {offset:#x}"),
                    std::io::Error::other(format!(
                        "injected fault: device stopped accepting writes after {l}"
                    )),
                ));
            }
        }
        Ok(())
    }
}
