//! `zfs diff`: what changed in a file system between a snapshot and a later
//! snapshot of it, or its current state.
//!
//! # Theory
//!
//! Every ZPL object is named by its object number, and an object number
//! that is freed and used again gets a new generation (`gen`, the txg of
//! its creation). So an object is "the same file" in two versions of a
//! file system exactly when its number *and* generation match. ZFS updates
//! a znode's change time (`ctime`) with every change to the file — contents,
//! attributes, link count, its name — so, as OpenZFS's `zfs diff` does, a
//! file present in both versions with the same generation changed when its
//! ctime changed. Contents are never read.
//!
//! Each version is walked from its root directory (and into extended
//! attribute directories, named `<xattrdir>` as OpenZFS names them), giving
//! every reachable object its attributes and its names (parent, entry). The
//! two walks are compared object by object, in object-number order (the
//! order OpenZFS reports in), with OpenZFS's rules:
//!
//! * only in the older version: removed (`-`); only in the newer: created
//!   (`+`);
//! * in both with a different generation or file type: the object was
//!   reused — removed under its old path, then created under its new one;
//! * in both, same generation, ctime unchanged: not reported;
//! * otherwise, for a non-directory whose link count changed: modified with
//!   the change in links (`M … (+1)`), under its old path when links were
//!   added, its new path when links were removed; else, same path:
//!   modified (`M`); a different path: renamed (`R old -> new`).
//!
//! An object has one path, as in OpenZFS (which finds it through the
//! znode's parent pointer): the name it has in the directory its `parent`
//! attribute names (the first such entry), else the first name the walk
//! met. Paths are relative to the file system's root (`/` for the root
//! itself); [`Diff::mountpoint`] is put in front of them to print.
//!
//! OpenZFS finds the changed objects from block birth times instead of
//! walking both trees; the result is the same set (an object whose dnode is
//! unchanged has an unchanged ctime), this costs a walk of both versions.
//! Objects reachable from no directory (unlinked but open, on the delete
//! queue) are not seen here; OpenZFS reports them as `(on_delete_queue)`.
//!
//! # Invariants
//!
//! * Read-only: the pool's last synced state (when the daemon holds the
//!   pool and the newer version is the live file system, its open txg is
//!   committed first, as OpenZFS takes a temporary snapshot).
//! * The walk is linear in the objects: a directory reached a second time
//!   (a hard-linked directory, a cycle on a damaged pool) is refused as
//!   corrupt, and paths are built along the walk's tree, so they are
//!   finite; nothing from the disk is unwrapped.
//! * The first version must be an earlier snapshot of the second's file
//!   system (or of a file system it was cloned from), else OpenZFS's errors.

use crate::error::{Error, Result};
use crate::host::open_imported;
use ozfs_dsl::{DatasetInfo, DslPool};
use ozfs_format::znode::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};
use ozfs_zpl::Zpl;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// `-`: the path was removed.
    Removed,
    /// `+`: the path was created.
    Created,
    /// `M`: the path was modified (with `link_delta`: its link count changed).
    Modified,
    /// `R`: the path was renamed.
    Renamed,
}

impl ChangeKind {
    /// The character `zfs diff` prints.
    pub fn symbol(self) -> char {
        match self {
            ChangeKind::Removed => '-',
            ChangeKind::Created => '+',
            ChangeKind::Modified => 'M',
            ChangeKind::Renamed => 'R',
        }
    }
}

/// The type of a file, as `zfs diff -F` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Block,
    Char,
    Dir,
    Fifo,
    Symlink,
    Socket,
    Regular,
    Other,
}

impl FileType {
    /// From a znode's mode.
    pub fn of_mode(mode: u64) -> FileType {
        match mode & S_IFMT {
            S_IFBLK => FileType::Block,
            S_IFCHR => FileType::Char,
            S_IFDIR => FileType::Dir,
            S_IFIFO => FileType::Fifo,
            S_IFLNK => FileType::Symlink,
            S_IFSOCK => FileType::Socket,
            S_IFREG => FileType::Regular,
            _ => FileType::Other,
        }
    }

    /// The character `zfs diff -F` prints (`ls -F`'s, `F` for a regular file).
    pub fn symbol(self) -> char {
        match self {
            FileType::Block => 'B',
            FileType::Char => 'C',
            FileType::Dir => '/',
            FileType::Fifo => '|',
            FileType::Symlink => '@',
            FileType::Socket => '=',
            FileType::Regular => 'F',
            FileType::Other => '?',
        }
    }
}

/// One line of `zfs diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    /// The object (ZPL object number).
    pub object: u64,
    pub file_type: FileType,
    /// The change time shown by `-t` (seconds, nanoseconds): the newer
    /// version's, or for a removal the older one's.
    pub ctime: (u64, u64),
    /// Path relative to the file system's root (`/` for the root).
    pub path: Vec<u8>,
    /// For a rename, the new path.
    pub new_path: Option<Vec<u8>>,
    /// For a modification that changed the link count: by how much.
    pub link_delta: Option<i64>,
}

/// What `zfs diff` found.
#[derive(Debug, Clone)]
pub struct Diff {
    /// The older snapshot (full name).
    pub from: String,
    /// The newer snapshot or the file system (full name).
    pub to: String,
    /// The file system's mountpoint, put in front of every path (`""` for
    /// a file system mounted at `/`).
    pub mountpoint: String,
    /// The changes, in object-number order.
    pub changes: Vec<Change>,
}

/// A failure `zfs diff` reports as OpenZFS's libzfs does ("what: why").
fn refused(what: &str, why: &str) -> Error {
    Error::Invalid(format!("{what}: {why}"))
}

/// The two versions `zfs diff FROM [TO]` names, completed as OpenZFS
/// completes them: `fs@a fs@b`, `fs@a @b`, `@a fs@b`, `fs@a fs`, `@a fs`
/// and `fs@a` (the file system itself). Returns (from snapshot, to).
pub fn resolve_names(from: &str, to: Option<&str>) -> Result<(String, String)> {
    let Some(to) = to else {
        let Some((fs, snap)) = from.split_once('@') else {
            return Err(refused(
                &format!("Badly formed snapshot name {from}"),
                "missing '@' delimiter in snapshot name",
            ));
        };
        if fs.is_empty() || snap.is_empty() {
            return Err(refused(
                &format!("Badly formed snapshot name {from}"),
                "invalid name",
            ));
        }
        return Ok((from.to_string(), fs.to_string()));
    };
    let (fds, fsnap) = match from.split_once('@') {
        Some((d, s)) => (d, Some(s)),
        None => (from, None),
    };
    let (tds, tsnap) = match to.split_once('@') {
        Some((d, s)) => (d, Some(s)),
        None => (to, None),
    };
    let fsnap = fsnap.filter(|s| !s.is_empty());
    let Some(fsnap) = fsnap else {
        return Err(refused(
            "Unable to determine which snapshots to compare",
            "invalid name",
        ));
    };
    if tsnap == Some("") || (fds.is_empty() && tds.is_empty()) {
        return Err(refused(
            "Unable to determine which snapshots to compare",
            "invalid name",
        ));
    }
    let from_ds = if fds.is_empty() { tds } else { fds };
    let to_ds = if tds.is_empty() { fds } else { tds };
    let from_full = format!("{from_ds}@{fsnap}");
    let to_full = match tsnap {
        Some(s) => format!("{to_ds}@{s}"),
        None => to_ds.to_string(),
    };
    Ok((from_full, to_full))
}

/// `zfs diff FROM [TO]`: the changes from snapshot FROM to the later
/// snapshot or file system TO (default: FROM's file system).
pub fn diff(from: &str, to: Option<&str>) -> Result<Diff> {
    let (from, to) = resolve_names(from, to)?;
    for n in [&from, &to] {
        crate::names::DatasetName::parse(n)?;
    }
    let to_fs = to.split('@').next().unwrap_or("").to_string();
    let from_fs = from.split('@').next().unwrap_or("").to_string();
    let pool_name = crate::names::pool_of(&to_fs).to_string();
    if crate::names::pool_of(&from_fs) != pool_name {
        return Err(refused(
            "Not an earlier snapshot from the same fs",
            "invalid name",
        ));
    }
    // The live file system as it is now: have the daemon commit its open
    // txg (OpenZFS takes a temporary snapshot, which syncs).
    if !to.contains('@') && !crate::host::in_daemon() && crate::client::daemon_holds(&pool_name) {
        crate::proto::execute(
            crate::proto::Request::Sync {
                pool: pool_name.clone(),
            },
            &crate::proto::Progress::none(),
        )
        .map_err(|e| e.context(&format!("cannot sync '{pool_name}'")))?;
    }
    let (mut rec, pool) = open_imported(&pool_name)
        .map_err(|_| Error::NotFound(format!("cannot open '{to_fs}': dataset does not exist")))?;
    let result = (|| {
        let dsl = DslPool::open(pool.clone())
            .map_err(|e| e.context(&format!("cannot open '{pool_name}'")))?;
        let missing =
            |n: &str| Error::NotFound(format!("cannot open '{n}': dataset does not exist"));
        dsl.lookup(&to_fs).map_err(|_| missing(&to_fs))?;
        dsl.lookup(&from_fs).map_err(|_| missing(&from_fs))?;
        let no_snap =
            || Error::NotFound("Unable to obtain diffs: No such file or directory".to_string());
        let from_ds = dsl.lookup(&from).map_err(|_| no_snap())?;
        let to_ds = dsl.lookup(&to).map_err(|_| no_snap())?;
        if !descends_from(&dsl, &to_ds, &from_ds)? {
            return Err(if from_fs != to_fs {
                refused("Not an earlier snapshot from the same fs", "invalid name")
            } else {
                // The kernel's EXDEV, as libzfs words it.
                Error::Invalid(
                    "Unable to obtain diffs: \n   Not an earlier snapshot from the same fs".into(),
                )
            });
        }
        let mountpoint = mountpoint_of(&dsl, &to_fs)?;
        let open = |ds: &DatasetInfo| -> Result<Zpl> {
            let ctx = |e: Error| e.context(&format!("cannot open '{}'", ds.name));
            let os = dsl.objset(ds).map_err(ctx)?;
            Zpl::open(os, &ds.name).map_err(ctx)
        };
        let older = walk(&open(&from_ds)?)?;
        let newer = walk(&open(&to_ds)?)?;
        Ok(Diff {
            changes: compare(&older, &newer),
            from: from.clone(),
            to: to.clone(),
            mountpoint,
        })
    })();
    let saved = rec.save_counters(&pool);
    let d = result?;
    saved.map_err(|e| e.context("could not save error counters"))?;
    Ok(d)
}

/// Is snapshot `from` earlier than `to` in `to`'s history: a snapshot of
/// `to`'s file system taken before it (any, when `to` is the file system),
/// or one at or before the origin of a file system it was cloned from?
fn descends_from(dsl: &DslPool, to: &DatasetInfo, from: &DatasetInfo) -> Result<bool> {
    if !from.is_snapshot {
        return Ok(false);
    }
    let from_txg = from.ds.creation_txg;
    // (DSL directory, txgs before which a snapshot of it is earlier).
    let mut dir_obj = to.dir_obj;
    let mut dir = to.dir;
    let mut before = if to.is_snapshot {
        to.ds.creation_txg
    } else {
        u64::MAX
    };
    let mut seen = HashSet::new();
    loop {
        if from.ds.dir_obj == dir_obj {
            return Ok(from_txg < before);
        }
        if dir.origin_obj == 0 || !seen.insert(dir.origin_obj) || seen.len() > 4096 {
            return Ok(false);
        }
        let origin = dsl.dataset(dir.origin_obj)?;
        before = origin.creation_txg.saturating_add(1);
        dir_obj = origin.dir_obj;
        dir = dsl.dir(dir_obj)?;
    }
}

/// Where the file system's paths are printed from: where the daemon
/// mounted it, else its `mountpoint` property; `/` becomes `""` (no double
/// slash). OpenZFS refuses a file system that is not mounted; here only
/// one without a mountpoint path (`none`, `legacy`) is refused.
fn mountpoint_of(dsl: &DslPool, fs: &str) -> Result<String> {
    let mp = match crate::client::list_mounts()
        .into_iter()
        .find(|(d, _)| d == fs)
    {
        Some((_, m)) => m,
        None => {
            let ds = dsl.lookup(fs).map_err(|_| {
                Error::NotFound(format!("cannot open '{fs}': dataset does not exist"))
            })?;
            let props = dsl
                .properties(&ds, 0)
                .map_err(|e| e.context(&format!("cannot open '{fs}'")))?;
            props
                .iter()
                .find(|(n, _, _)| n == "mountpoint")
                .map(|(_, v, _)| v.render(true))
                .unwrap_or_default()
        }
    };
    if !mp.starts_with('/') || crate::mountinfo::check_mountpoint(&mp).is_err() {
        return Err(refused(
            "Cannot diff an unmounted snapshot",
            "operation not applicable to datasets of this type",
        ));
    }
    Ok(if mp == "/" { String::new() } else { mp })
}

/// What the walk keeps of an object.
#[derive(Debug, Clone)]
struct Node {
    gen: u64,
    mode: u64,
    links: u64,
    ctime: (u64, u64),
    /// The znode's parent attribute.
    parent: u64,
    /// Names: (directory or, for an xattr directory, its file; entry).
    names: Vec<(u64, Vec<u8>)>,
}

/// One version of a file system: every object reachable from its root.
struct Tree {
    root: u64,
    nodes: BTreeMap<u64, Node>,
}

impl Tree {
    /// The name an object is known by: the entry in the directory its
    /// parent attribute names, else the first one met.
    fn name_of(&self, obj: u64) -> Option<&(u64, Vec<u8>)> {
        let n = self.nodes.get(&obj)?;
        n.names
            .iter()
            .find(|(p, _)| *p == n.parent)
            .or_else(|| n.names.first())
    }

    /// The path of an object below the root (`/` for the root). Parents
    /// were all met before their children, so the chain ends at the root;
    /// its length is bounded all the same.
    fn path(&self, obj: u64) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut cur = obj;
        while cur != self.root && parts.len() <= self.nodes.len() {
            let Some((parent, name)) = self.name_of(cur) else {
                break;
            };
            parts.push(name);
            cur = *parent;
        }
        if parts.is_empty() {
            return b"/".to_vec();
        }
        let mut out = Vec::new();
        for p in parts.iter().rev() {
            out.push(b'/');
            out.extend_from_slice(p);
        }
        out
    }
}

/// What the walk has still to read.
enum Pending {
    /// A directory's entries.
    Dir(u64),
    /// The extended-attribute directory `xdir` of object `owner`.
    Xattrs { owner: u64, xdir: u64 },
}

/// The name OpenZFS gives an extended-attribute directory in a path.
const XATTR_DIR_NAME: &[u8] = b"<xattrdir>";

/// Walk a file system from its root: attributes and names of every object
/// reachable through directories and extended-attribute directories.
fn walk(zpl: &Zpl) -> Result<Tree> {
    let mut nodes: BTreeMap<u64, Node> = BTreeMap::new();
    let mut queue: VecDeque<Pending> = VecDeque::new();
    // Visit `obj`, reached as `name` in `parent`.
    let visit = |nodes: &mut BTreeMap<u64, Node>,
                 queue: &mut VecDeque<Pending>,
                 obj: u64,
                 parent: u64,
                 name: Vec<u8>|
     -> Result<()> {
        if let Some(n) = nodes.get_mut(&obj) {
            if n.mode & S_IFMT == S_IFDIR || obj == zpl.root {
                return Err(Error::corrupt(
                    format!("{}: object {obj}", zpl.name),
                    "a directory is reached twice",
                ));
            }
            n.names.push((parent, name));
            return Ok(());
        }
        let (_, a) = zpl.attrs(obj)?;
        if a.mode & S_IFMT == S_IFDIR {
            queue.push_back(Pending::Dir(obj));
        }
        if a.xattr != 0 {
            queue.push_back(Pending::Xattrs {
                owner: obj,
                xdir: a.xattr,
            });
        }
        let names = if obj == zpl.root {
            Vec::new()
        } else {
            vec![(parent, name)]
        };
        nodes.insert(
            obj,
            Node {
                gen: a.gen,
                mode: a.mode,
                links: a.links,
                ctime: a.ctime,
                parent: a.parent,
                names,
            },
        );
        Ok(())
    };
    visit(&mut nodes, &mut queue, zpl.root, zpl.root, Vec::new())?;
    while let Some(p) = queue.pop_front() {
        match p {
            Pending::Xattrs { owner, xdir } => {
                visit(&mut nodes, &mut queue, xdir, owner, XATTR_DIR_NAME.to_vec())?
            }
            Pending::Dir(dir) => {
                let (dn, _) = zpl.attrs(dir)?;
                for e in zpl.readdir(&dn)? {
                    visit(&mut nodes, &mut queue, e.object, dir, e.name)?;
                }
            }
        }
    }
    Ok(Tree {
        root: zpl.root,
        nodes,
    })
}

/// Compare two versions, object by object, with OpenZFS's rules.
fn compare(older: &Tree, newer: &Tree) -> Vec<Change> {
    let mut out = Vec::new();
    let objects: BTreeSet<u64> = older
        .nodes
        .keys()
        .chain(newer.nodes.keys())
        .copied()
        .collect();
    for obj in objects {
        let f = older.nodes.get(&obj);
        let t = newer.nodes.get(&obj);
        let line = |kind, tree: &Tree, n: &Node| Change {
            kind,
            object: obj,
            file_type: FileType::of_mode(n.mode),
            ctime: n.ctime,
            path: tree.path(obj),
            new_path: None,
            link_delta: None,
        };
        match (f, t) {
            (None, None) => {}
            (Some(f), None) => out.push(line(ChangeKind::Removed, older, f)),
            (None, Some(t)) => out.push(line(ChangeKind::Created, newer, t)),
            (Some(f), Some(t)) => {
                if f.gen != t.gen || f.mode & S_IFMT != t.mode & S_IFMT {
                    out.push(line(ChangeKind::Removed, older, f));
                    out.push(line(ChangeKind::Created, newer, t));
                    continue;
                }
                if f.ctime == t.ctime {
                    continue;
                }
                let is_dir = f.mode & S_IFMT == S_IFDIR;
                let delta = if is_dir || f.links == 0 || t.links == 0 {
                    0
                } else {
                    t.links as i64 - f.links as i64
                };
                let fpath = older.path(obj);
                let tpath = newer.path(obj);
                let mut c = line(ChangeKind::Modified, newer, t);
                if delta != 0 {
                    c.path = if delta > 0 { fpath } else { tpath };
                    c.link_delta = Some(delta);
                } else if fpath == tpath {
                    c.path = fpath;
                } else {
                    c.kind = ChangeKind::Renamed;
                    c.path = fpath;
                    c.new_path = Some(tpath);
                }
                out.push(c);
            }
        }
    }
    out
}

/// A path as `zfs diff` prints it without `-h`: every byte that is not
/// printable ASCII other than space (that is, a control character, space,
/// DEL, any byte of 0x80 and above) and every backslash becomes `\` and
/// four octal digits (`\0040` for a space).
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        if b > b' ' && b != b'\\' && b < 0x7f {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\{b:04o}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_matches_hand_computed() {
        assert_eq!(escape(b"plain-name_1.txt"), "plain-name_1.txt");
        assert_eq!(escape(b"a b"), "a\\0040b");
        assert_eq!(escape(b"tab\there"), "tab\\0011here");
        assert_eq!(escape(b"nl\n"), "nl\\0012");
        assert_eq!(escape(b"back\\slash"), "back\\0134slash");
        assert_eq!(escape(b"\x7f"), "\\0177");
        assert_eq!(escape(b"\x01"), "\\0001");
        // UTF-8 "é" is 0xc3 0xa9.
        assert_eq!(escape("é".as_bytes()), "\\0303\\0251");
        assert_eq!(escape(b"\xff"), "\\0377");
        assert_eq!(escape(b"~!<xattrdir>"), "~!<xattrdir>");
        assert_eq!(escape(b""), "");
    }

    /// An object: (number, gen, mode, links, ctime seconds, names).
    type Obj<'a> = (u64, u64, u64, u64, u64, &'a [(u64, &'a str)]);

    fn tree(objs: &[Obj<'_>]) -> Tree {
        let mut nodes = BTreeMap::new();
        for &(obj, gen, mode, links, ct, names) in objs {
            let names: Vec<(u64, Vec<u8>)> = names
                .iter()
                .map(|(p, n)| (*p, n.as_bytes().to_vec()))
                .collect();
            nodes.insert(
                obj,
                Node {
                    gen,
                    mode,
                    links,
                    ctime: (ct, 0),
                    parent: names.first().map(|n| n.0).unwrap_or(obj),
                    names,
                },
            );
        }
        Tree { root: 3, nodes }
    }

    #[test]
    fn compare_follows_openzfs_rules() {
        const D: u64 = S_IFDIR | 0o755;
        const F: u64 = S_IFREG | 0o644;
        const L: u64 = S_IFLNK | 0o777;
        let older = tree(&[
            (3, 1, D, 4, 10, &[]),
            (4, 1, D, 2, 10, &[(3, "d")]),
            (5, 1, F, 1, 10, &[(3, "reused")]),
            (6, 1, F, 2, 10, &[(3, "two"), (4, "two-b")]),
            (7, 1, F, 1, 10, &[(4, "same")]),
            (8, 1, F, 1, 10, &[(3, "type")]),
        ]);
        let newer = tree(&[
            (3, 1, D, 4, 20, &[]),
            // The directory renamed: R; what is below it is not reported
            // unless it changed.
            (4, 1, D, 2, 20, &[(3, "e")]),
            (5, 9, F, 1, 20, &[(3, "again")]),
            (6, 1, F, 1, 20, &[(4, "two-b")]),
            (7, 1, F, 1, 10, &[(4, "same")]),
            (8, 1, L, 1, 20, &[(3, "type")]),
        ]);
        type Line = (char, String, Option<String>, Option<i64>);
        let got: Vec<Line> = compare(&older, &newer)
            .into_iter()
            .map(|c| {
                let s = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
                (
                    c.kind.symbol(),
                    s(&c.path),
                    c.new_path.as_deref().map(s),
                    c.link_delta,
                )
            })
            .collect();
        let want: Vec<Line> = vec![
            ('M', "/".into(), None, None),
            ('R', "/d".into(), Some("/e".into()), None),
            ('-', "/reused".into(), None, None),
            ('+', "/again".into(), None, None),
            // A link removed: the new path, with the change.
            ('M', "/e/two-b".into(), None, Some(-1)),
            ('-', "/type".into(), None, None),
            ('+', "/type".into(), None, None),
        ];
        assert_eq!(got, want);
        // Nothing changed: nothing reported.
        assert!(compare(&older, &older).is_empty());
    }

    #[test]
    fn names_complete_as_openzfs() {
        let ok = |f: &str, t: Option<&str>| resolve_names(f, t).expect("accepted");
        assert_eq!(ok("p/fs@a", None), ("p/fs@a".into(), "p/fs".into()));
        assert_eq!(
            ok("p/fs@a", Some("p/fs@b")),
            ("p/fs@a".into(), "p/fs@b".into())
        );
        assert_eq!(ok("p/fs@a", Some("@b")), ("p/fs@a".into(), "p/fs@b".into()));
        assert_eq!(ok("@a", Some("p/fs@b")), ("p/fs@a".into(), "p/fs@b".into()));
        assert_eq!(ok("p/fs@a", Some("p/fs")), ("p/fs@a".into(), "p/fs".into()));
        assert_eq!(ok("@a", Some("p/fs")), ("p/fs@a".into(), "p/fs".into()));
        for (f, t) in [
            ("p/fs", None),
            ("p/fs", Some("p/fs@b")),
            ("@a", Some("@b")),
            ("p/fs@a", Some("p/fs@")),
            ("p/fs@", Some("p/fs")),
        ] {
            assert!(resolve_names(f, t).is_err(), "{f} {t:?} accepted");
        }
    }
}
