//! Volumes over the network: an NBD server in the daemon.
//!
//! # Theory
//!
//! The Network Block Device protocol (the "fixed newstyle" handshake every
//! current client speaks: `qemu-img`, `qemu-io`, `qemu-system`'s
//! `nbd://` drives, `nbd-client`) carries a block device's reads and
//! writes over a stream. The daemon listens on a TCP address or a unix
//! socket (`ozfs nbd start`); an export's name is a volume's name
//! (`POOL/VOL`), and every request goes to the same state that serves
//! the volume's loop device (`ozfs_fuse::zvol`): one view of the volume,
//! whichever way it is reached.
//!
//! Handshake: the server's magic and flags, the client's flags, then
//! options until one picks an export: `NBD_OPT_EXPORT_NAME` (the old
//! reply: size and flags), `NBD_OPT_GO` and `NBD_OPT_INFO` (the export's
//! size and flags as `NBD_INFO_EXPORT`, its block sizes), `NBD_OPT_LIST`
//! (every volume the daemon serves), `NBD_OPT_ABORT`; anything else is
//! answered `NBD_REP_ERR_UNSUP` (no TLS, no structured replies: simple
//! replies only). Transmission: `READ`, `WRITE` (with `FUA`: flushed
//! before the reply), `FLUSH` (every write answered before it is on
//! stable storage when it is answered), `TRIM` and `WRITE_ZEROES` (the
//! range reads zeros after), `DISC`.
//!
//! # Invariants
//!
//! * Every length and offset from the client is checked before it is
//!   used: a request past the export's end gets EINVAL, an oversized
//!   request (over 32 MiB of data) ends the connection (its data cannot
//!   be skipped safely); a malformed handshake ends it with nothing done.
//! * Requests of one connection are answered in order; a write is
//!   answered only after the volume's txg holds it.

use ozfs_fuse::State;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const FLAG_C_NO_ZEROES: u32 = 2;

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_LIST: u32 = 3;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;

const REP_ACK: u32 = 1;
const REP_SERVER: u32 = 2;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
const REP_ERR_INVALID: u32 = (1 << 31) + 3;
const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;

const TF_HAS_FLAGS: u16 = 1;
const TF_READ_ONLY: u16 = 2;
const TF_SEND_FLUSH: u16 = 4;
const TF_SEND_FUA: u16 = 8;
const TF_SEND_TRIM: u16 = 32;
const TF_SEND_WRITE_ZEROES: u16 = 64;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
const CMD_WRITE_ZEROES: u16 = 6;
const CMD_FLAG_FUA: u16 = 1;

/// Largest READ or WRITE accepted (qemu sends at most 32 MiB).
const MAX_IO: u32 = 32 << 20;
/// Longest option data accepted in the handshake.
const MAX_OPTION: u32 = 64 << 10;

/// What a connection can reach: the volumes the daemon serves, by name.
pub trait Exports: Send + Sync {
    /// The state serving volume `name`, if it is served.
    fn find(&self, name: &str) -> Option<Arc<Mutex<State>>>;
    /// Every volume served.
    fn names(&self) -> Vec<String>;
}

fn rd_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn rd_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

fn bad(m: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string())
}

fn opt_reply(w: &mut impl Write, opt: u32, typ: u32, data: &[u8]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&typ.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    w.write_all(&b)
}

/// Serve one client on `s` until it disconnects or errs.
pub fn serve<S: Read + Write>(mut s: S, exports: &dyn Exports) -> std::io::Result<()> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello)?;
    let cflags = rd_u32(&mut s)?;
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let state = loop {
        if rd_u64(&mut s)? != IHAVEOPT {
            return Err(bad("bad option magic"));
        }
        let opt = rd_u32(&mut s)?;
        let len = rd_u32(&mut s)?;
        if len > MAX_OPTION {
            return Err(bad("option too long"));
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data)?;
        match opt {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data).into_owned();
                let Some(st) = exports.find(&name) else {
                    // The old option has no error reply: close.
                    return Ok(());
                };
                let (size, flags) = export_info(&st);
                let mut b = Vec::new();
                b.extend_from_slice(&size.to_be_bytes());
                b.extend_from_slice(&flags.to_be_bytes());
                if !no_zeroes {
                    b.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&b)?;
                break st;
            }
            OPT_ABORT => {
                let _ = opt_reply(&mut s, opt, REP_ACK, &[]);
                return Ok(());
            }
            OPT_LIST => {
                if !data.is_empty() {
                    opt_reply(&mut s, opt, REP_ERR_INVALID, &[])?;
                    continue;
                }
                for n in exports.names() {
                    let mut d = (n.len() as u32).to_be_bytes().to_vec();
                    d.extend_from_slice(n.as_bytes());
                    opt_reply(&mut s, opt, REP_SERVER, &d)?;
                }
                opt_reply(&mut s, opt, REP_ACK, &[])?;
            }
            OPT_INFO | OPT_GO => {
                // name length, name, count of info requests, the requests.
                let parsed = (|| {
                    let nl = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?) as usize;
                    let name = data.get(4..4usize.checked_add(nl)?)?;
                    let nreq = u16::from_be_bytes(data.get(4 + nl..6 + nl)?.try_into().ok()?);
                    if data.len() != 6 + nl + 2 * nreq as usize {
                        return None;
                    }
                    Some(String::from_utf8_lossy(name).into_owned())
                })();
                let Some(name) = parsed else {
                    opt_reply(&mut s, opt, REP_ERR_INVALID, &[])?;
                    continue;
                };
                let Some(st) = exports.find(&name) else {
                    opt_reply(&mut s, opt, REP_ERR_UNKNOWN, b"no such volume")?;
                    continue;
                };
                let (size, flags) = export_info(&st);
                let mut d = INFO_EXPORT.to_be_bytes().to_vec();
                d.extend_from_slice(&size.to_be_bytes());
                d.extend_from_slice(&flags.to_be_bytes());
                opt_reply(&mut s, opt, REP_INFO, &d)?;
                let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                d.extend_from_slice(&1u32.to_be_bytes());
                d.extend_from_slice(&4096u32.to_be_bytes());
                d.extend_from_slice(&MAX_IO.to_be_bytes());
                opt_reply(&mut s, opt, REP_INFO, &d)?;
                opt_reply(&mut s, opt, REP_ACK, &[])?;
                if opt == OPT_GO {
                    break st;
                }
            }
            _ => opt_reply(&mut s, opt, REP_ERR_UNSUP, &[])?,
        }
    };
    transmit(s, &state)
}

fn export_info(st: &Arc<Mutex<State>>) -> (u64, u16) {
    let g = ozfs_fuse::shared::lock(st);
    let size = g.volume_size().unwrap_or(0);
    let mut flags =
        TF_HAS_FLAGS | TF_SEND_FLUSH | TF_SEND_FUA | TF_SEND_TRIM | TF_SEND_WRITE_ZEROES;
    if g.is_readonly() {
        flags |= TF_READ_ONLY;
    }
    (size, flags)
}

fn transmit<S: Read + Write>(mut s: S, st: &Arc<Mutex<State>>) -> std::io::Result<()> {
    // The volume file is its mount's root (FUSE inode 1).
    let root = 1;
    let mut hdr = [0u8; 28];
    loop {
        match s.read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let be32 = |a: usize| u32::from_be_bytes([hdr[a], hdr[a + 1], hdr[a + 2], hdr[a + 3]]);
        if be32(0) != REQUEST_MAGIC {
            return Err(bad("bad request magic"));
        }
        let flags = u16::from_be_bytes([hdr[4], hdr[5]]);
        let cmd = u16::from_be_bytes([hdr[6], hdr[7]]);
        let handle: [u8; 8] = hdr[8..16].try_into().unwrap_or([0; 8]);
        let offset = u64::from_be_bytes(hdr[16..24].try_into().unwrap_or([0; 8]));
        let len = be32(24);
        let reply = |s: &mut S, err: u32, data: &[u8]| -> std::io::Result<()> {
            let mut b = Vec::with_capacity(16 + data.len());
            b.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
            b.extend_from_slice(&err.to_be_bytes());
            b.extend_from_slice(&handle);
            b.extend_from_slice(data);
            s.write_all(&b)
        };
        let off = i64::try_from(offset).ok();
        let errno = |e: i32| -> u32 {
            match e {
                libc::EPERM | libc::EROFS => 1,
                libc::ENOSPC | libc::EDQUOT => 28,
                libc::EINVAL | libc::EFBIG => 22,
                _ => 5,
            }
        };
        match cmd {
            CMD_READ => {
                if len > MAX_IO {
                    return Err(bad("read too large"));
                }
                let r = match off {
                    Some(o) => ozfs_fuse::shared::lock(st).vol_read(root, o, len),
                    None => Err(libc::EINVAL),
                };
                match r {
                    Ok(d) if d.len() == len as usize => reply(&mut s, 0, &d)?,
                    Ok(_) => reply(&mut s, 22, &[])?,
                    Err(e) => reply(&mut s, errno(e), &[])?,
                }
            }
            CMD_WRITE => {
                if len > MAX_IO {
                    return Err(bad("write too large"));
                }
                let mut data = vec![0u8; len as usize];
                s.read_exact(&mut data)?;
                let r = match off {
                    Some(o) => {
                        let mut g = ozfs_fuse::shared::lock(st);
                        g.vol_write(root, o, &data).and_then(|_| {
                            if flags & CMD_FLAG_FUA != 0 {
                                g.vol_fsync()
                            } else {
                                Ok(())
                            }
                        })
                    }
                    None => Err(libc::EINVAL),
                };
                reply(&mut s, r.err().map(errno).unwrap_or(0), &[])?;
            }
            CMD_FLUSH => {
                let r = ozfs_fuse::shared::lock(st).vol_fsync();
                reply(&mut s, r.err().map(errno).unwrap_or(0), &[])?;
            }
            CMD_TRIM | CMD_WRITE_ZEROES => {
                let r = match off {
                    Some(o) if len > 0 => {
                        let mut g = ozfs_fuse::shared::lock(st);
                        g.vol_fallocate(
                            root,
                            o,
                            len as i64,
                            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        )
                        .and_then(|()| {
                            if flags & CMD_FLAG_FUA != 0 {
                                g.vol_fsync()
                            } else {
                                Ok(())
                            }
                        })
                    }
                    Some(_) => Ok(()),
                    None => Err(libc::EINVAL),
                };
                reply(&mut s, r.err().map(errno).unwrap_or(0), &[])?;
            }
            CMD_DISC => return Ok(()),
            _ => reply(&mut s, 22, &[])?,
        }
    }
}

/// Where the daemon listens for NBD clients: `tcp:HOST:PORT` (port 10809
/// by default) or `unix:PATH`.
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Listener {
    pub fn bind(addr: &str) -> Result<Listener, String> {
        if let Some(p) = addr.strip_prefix("unix:") {
            let _ = std::fs::remove_file(p);
            let l = std::os::unix::net::UnixListener::bind(p).map_err(|e| format!("{p}: {e}"))?;
            return Ok(Listener::Unix(l));
        }
        let a = addr.strip_prefix("tcp:").unwrap_or(addr);
        let a = if a.contains(':') {
            a.to_string()
        } else {
            format!("{a}:10809")
        };
        let l = std::net::TcpListener::bind(&a).map_err(|e| format!("{a}: {e}"))?;
        Ok(Listener::Tcp(l))
    }

    /// Accept clients forever, each served on a thread of its own.
    pub fn run(self, exports: Arc<dyn Exports>) {
        match self {
            Listener::Tcp(l) => {
                for c in l.incoming().flatten() {
                    let _ = c.set_nodelay(true);
                    let ex = exports.clone();
                    std::thread::spawn(move || {
                        if let Err(e) = serve(c, ex.as_ref()) {
                            eprintln!("ozfs daemon: nbd client: {e}");
                        }
                    });
                }
            }
            Listener::Unix(l) => {
                for c in l.incoming().flatten() {
                    let ex = exports.clone();
                    std::thread::spawn(move || {
                        if let Err(e) = serve(c, ex.as_ref()) {
                            eprintln!("ozfs daemon: nbd client: {e}");
                        }
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's bytes in, the server's bytes out.
    struct Pipe {
        input: std::io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Pipe {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(b)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct NoExports;
    impl Exports for NoExports {
        fn find(&self, _: &str) -> Option<Arc<Mutex<State>>> {
            None
        }
        fn names(&self) -> Vec<String> {
            vec!["p/v".into()]
        }
    }

    fn option(opt: u32, data: &[u8]) -> Vec<u8> {
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    fn run(client: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
        let mut p = Pipe {
            input: std::io::Cursor::new(client),
            output: Vec::new(),
        };
        let r = serve(&mut p, &NoExports);
        (r, p.output)
    }

    /// The option replies in `out` after the 18-byte greeting: (opt, type, data).
    fn replies(out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut at = 18;
        while at + 20 <= out.len() {
            assert_eq!(out[at..at + 8], REPLY_MAGIC.to_be_bytes());
            let be = |a: usize| u32::from_be_bytes(out[a..a + 4].try_into().unwrap());
            let (opt, typ, len) = (be(at + 8), be(at + 12), be(at + 16) as usize);
            v.push((opt, typ, out[at + 20..at + 20 + len].to_vec()));
            at += 20 + len;
        }
        v
    }

    #[test]
    fn greeting_then_list_info_and_abort() {
        let mut c = 3u32.to_be_bytes().to_vec(); // FIXED_NEWSTYLE | NO_ZEROES
        c.extend(option(OPT_LIST, &[]));
        let mut go = 5u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"p/nope");
        go.extend_from_slice(&0u16.to_be_bytes());
        c.extend(option(OPT_INFO, &go));
        c.extend(option(OPT_GO, &go));
        c.extend(option(99, &[]));
        c.extend(option(OPT_ABORT, &[]));
        let (r, out) = run(c);
        assert!(r.is_ok());
        assert_eq!(out[..8], NBDMAGIC.to_be_bytes());
        assert_eq!(out[8..16], IHAVEOPT.to_be_bytes());
        assert_eq!(
            out[16..18],
            (FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes()
        );
        let r = replies(&out);
        let mut server = 3u32.to_be_bytes().to_vec();
        server.extend_from_slice(b"p/v");
        assert_eq!(r[0], (OPT_LIST, REP_SERVER, server));
        assert_eq!(r[1], (OPT_LIST, REP_ACK, vec![]));
        // The name length says 5, the name is 6 bytes: refused, not read past.
        assert_eq!((r[2].0, r[2].1), (OPT_INFO, REP_ERR_INVALID));
        assert_eq!((r[3].0, r[3].1), (OPT_GO, REP_ERR_INVALID));
        assert_eq!((r[4].0, r[4].1), (99, REP_ERR_UNSUP));
        assert_eq!((r[5].0, r[5].1), (OPT_ABORT, REP_ACK));
    }

    #[test]
    fn unknown_export_is_refused_by_name() {
        let mut c = 3u32.to_be_bytes().to_vec();
        let mut go = 6u32.to_be_bytes().to_vec();
        go.extend_from_slice(b"p/nope");
        go.extend_from_slice(&1u16.to_be_bytes());
        go.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        c.extend(option(OPT_GO, &go));
        let (r, out) = run(c);
        // The client hung up after the refusal: the end of its stream.
        assert!(r.is_err());
        let r = replies(&out);
        assert_eq!((r[0].0, r[0].1), (OPT_GO, REP_ERR_UNKNOWN));
    }

    #[test]
    fn hostile_handshakes_end_the_connection_cleanly() {
        // Bad option magic.
        let mut c = 3u32.to_be_bytes().to_vec();
        c.extend_from_slice(&[0xAA; 16]);
        assert!(run(c).0.is_err());
        // An option claiming 4 GiB of data.
        let mut c = 3u32.to_be_bytes().to_vec();
        c.extend_from_slice(&IHAVEOPT.to_be_bytes());
        c.extend_from_slice(&OPT_LIST.to_be_bytes());
        c.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(run(c).0.is_err());
        // Truncated anywhere: an error, never a panic.
        let mut full = 3u32.to_be_bytes().to_vec();
        full.extend(option(OPT_LIST, &[]));
        for n in 0..full.len() {
            let _ = run(full[..n].to_vec());
        }
        // EXPORT_NAME of an unknown export: closed without a reply.
        let mut c = 3u32.to_be_bytes().to_vec();
        c.extend(option(OPT_EXPORT_NAME, b"p/nope"));
        let (r, out) = run(c);
        assert!(r.is_ok());
        assert_eq!(out.len(), 18);
    }
}
