//! # POSIX ACLs as ZFS on Linux keeps them (`acltype=posix`)
//!
//! OpenZFS on Linux stores a POSIX ACL as an ordinary extended attribute
//! named `system.posix_acl_access` (the access ACL) or
//! `system.posix_acl_default` (a directory's default ACL), whose value is
//! Linux's own xattr encoding: a little-endian `u32` version (2) followed
//! by 8-byte entries `{ u16 tag, u16 perm, u32 id }`, sorted by tag and,
//! within `USER`/`GROUP`, by id. This module decodes, checks and encodes
//! that value and carries the rules that tie an ACL to the mode bits:
//!
//! * **Equivalence.** An access ACL of only the three base entries
//!   (`USER_OBJ`, `GROUP_OBJ`, `OTHER`) says nothing the mode does not: it
//!   is not stored, only the mode is set ([`Acl::equiv_mode`]). An ACL with
//!   named users or groups has a `MASK`, and the mode's group bits show the
//!   mask, not `GROUP_OBJ`.
//! * **chmod.** Changing the mode rewrites the base entries of a stored
//!   access ACL: owner bits → `USER_OBJ`, group bits → `MASK` (or
//!   `GROUP_OBJ` without one), other bits → `OTHER` ([`Acl::chmod`]).
//! * **Inheritance.** An object created in a directory with a default ACL
//!   gets that ACL as its access ACL, its base entries masked by the
//!   requested mode (no umask applies), and a directory gets the default
//!   ACL as its own default too ([`Acl::create_masq`]).
//!
//! Invariants: [`Acl::parse`] accepts only what the kernel would
//! (`posix_acl_valid`): the right version, known tags, exactly one of each
//! base entry, a `MASK` whenever there are named entries, sorted unique
//! ids. Values read from disk go through it before any rule is applied, so
//! a damaged attribute is an error naming it, never a wrong mode.

use ozfs_format::{Error, Result};

/// The attribute that holds the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The attribute that holds a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;
/// The id of entries that name no one (`ACL_UNDEFINED_ID`).
const NO_ID: u32 = u32::MAX;

/// True for the two attribute names that carry POSIX ACLs.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

/// One ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A decoded, checked POSIX ACL (entries in their canonical order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<Entry>,
}

impl Acl {
    /// Decodes and checks the xattr value `v`; `what` names it in errors.
    pub fn parse(v: &[u8], what: &str) -> Result<Acl> {
        let bad = |why: &str| Error::corrupt(what, format!("POSIX ACL {why}"));
        if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) {
            return Err(bad(&format!("of {} bytes (4 + 8 per entry)", v.len())));
        }
        let version = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
        if version != VERSION {
            return Err(bad(&format!("version {version}, not {VERSION}")));
        }
        let entries: Vec<Entry> = v[4..]
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        let acl = Acl { entries };
        acl.check().map_err(|why| bad(&why))?;
        Ok(acl)
    }

    /// The kernel's validity rules (see the module comment).
    fn check(&self) -> std::result::Result<(), String> {
        let mut last_tag = 0u16;
        let mut last_id: Option<u32> = None;
        let (mut named, mut mask) = (false, false);
        let mut base = 0;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return Err(format!("entry with permission bits {:#x}", e.perm));
            }
            if e.tag < last_tag {
                return Err("entries out of order".into());
            }
            match e.tag {
                USER_OBJ | GROUP_OBJ | OTHER | MASK => {
                    if e.tag == last_tag {
                        return Err(format!("two entries of tag {:#x}", e.tag));
                    }
                    if e.tag == MASK {
                        mask = true;
                    } else {
                        base += 1;
                    }
                    last_id = None;
                }
                USER | GROUP => {
                    if e.tag != last_tag {
                        last_id = None;
                    }
                    if e.id == NO_ID || last_id.is_some_and(|l| e.id <= l) {
                        return Err(format!("named entries of tag {:#x} not sorted", e.tag));
                    }
                    last_id = Some(e.id);
                    named = true;
                }
                t => return Err(format!("unknown entry tag {t:#x}")),
            }
            last_tag = e.tag;
        }
        if base != 3 {
            return Err("without its three base entries".into());
        }
        if named && !mask {
            return Err("with named entries and no mask".into());
        }
        Ok(())
    }

    /// The xattr value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 8 * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// The permission bits (0o777) this ACL stands for, and whether the
    /// mode alone says all it does (only the three base entries).
    pub fn equiv_mode(&self) -> (u64, bool) {
        let mut mode = 0u64;
        let mut equiv = true;
        for e in &self.entries {
            let p = e.perm as u64 & 7;
            match e.tag {
                USER_OBJ => mode |= p << 6,
                // Entries are sorted: a MASK comes after GROUP_OBJ and wins.
                GROUP_OBJ => mode |= p << 3,
                OTHER => mode |= p,
                MASK => {
                    mode = (mode & !0o70) | p << 3;
                    equiv = false;
                }
                _ => equiv = false,
            }
        }
        (mode, equiv)
    }

    fn has(&self, tag: u16) -> bool {
        self.entries.iter().any(|e| e.tag == tag)
    }

    /// Rewrites the base entries from permission bits `mode` (a chmod).
    pub fn chmod(&mut self, mode: u64) {
        let mask = self.has(MASK);
        for e in &mut self.entries {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                MASK => e.perm = ((mode >> 3) & 7) as u16,
                GROUP_OBJ if !mask => e.perm = ((mode >> 3) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                _ => {}
            }
        }
    }

    /// A default ACL applied to a new object of permission bits `mode`:
    /// returns the new object's access ACL (`None` when the mode says it
    /// all) and its permission bits.
    pub fn create_masq(&self, mode: u64) -> (Option<Acl>, u64) {
        let mut acl = self.clone();
        let mut mode = mode & 0o7777;
        let mut equiv = true;
        let mask = acl.has(MASK);
        for e in &mut acl.entries {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((mode >> 6) & 7) as u16;
                    mode &= (e.perm as u64) << 6 | !0o700;
                }
                OTHER => {
                    e.perm &= (mode & 7) as u16;
                    mode &= e.perm as u64 | !0o7;
                }
                MASK => equiv = false,
                GROUP_OBJ => {}
                _ => equiv = false,
            }
        }
        // The group class: the mask if there is one, else GROUP_OBJ.
        let gtag = if mask { MASK } else { GROUP_OBJ };
        if let Some(e) = acl.entries.iter_mut().find(|e| e.tag == gtag) {
            e.perm &= ((mode >> 3) & 7) as u16;
            mode &= (e.perm as u64) << 3 | !0o70;
        }
        ((!equiv).then_some(acl), mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    /// `setfacl -m u:1000:rw,g::r,m::rw,o::-` on a 0640 file, as the
    /// kernel hands it over (bytes taken from `getfattr -e hex` on ext4).
    const GOLDEN: &str =
        "0200000001000600ffffffff02000600e803000004000400ffffffff10000600ffffffff20000000ffffffff";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn golden_value_round_trips() {
        let v = hex(GOLDEN);
        let a = Acl::parse(&v, "t").unwrap();
        assert_eq!(
            a.entries,
            vec![
                e(USER_OBJ, 6, NO_ID),
                e(USER, 6, 1000),
                e(GROUP_OBJ, 4, NO_ID),
                e(MASK, 6, NO_ID),
                e(OTHER, 0, NO_ID)
            ]
        );
        assert_eq!(a.encode(), v);
        // The group bits show the mask.
        assert_eq!(a.equiv_mode(), (0o660, false));
    }

    #[test]
    fn base_only_is_the_mode() {
        let a = Acl {
            entries: vec![
                e(USER_OBJ, 7, NO_ID),
                e(GROUP_OBJ, 5, NO_ID),
                e(OTHER, 1, NO_ID),
            ],
        };
        assert!(a.check().is_ok());
        assert_eq!(a.equiv_mode(), (0o751, true));
    }

    #[test]
    fn invalid_values_are_refused() {
        let good = hex(GOLDEN);
        let mut v = good.clone();
        v[0] = 1; // version
        assert!(Acl::parse(&v, "t").is_err());
        assert!(Acl::parse(&good[..good.len() - 3], "t").is_err());
        // Without the mask.
        let a = Acl {
            entries: vec![
                e(USER_OBJ, 6, NO_ID),
                e(USER, 6, 1000),
                e(GROUP_OBJ, 4, NO_ID),
                e(OTHER, 0, NO_ID),
            ],
        };
        assert!(Acl::parse(&a.encode(), "t").is_err());
        // Two named entries for one user; unsorted; a stray tag.
        for entries in [
            vec![
                e(USER_OBJ, 6, NO_ID),
                e(USER, 6, 5),
                e(USER, 4, 5),
                e(GROUP_OBJ, 4, NO_ID),
                e(MASK, 6, NO_ID),
                e(OTHER, 0, NO_ID),
            ],
            vec![
                e(GROUP_OBJ, 4, NO_ID),
                e(USER_OBJ, 6, NO_ID),
                e(OTHER, 0, NO_ID),
            ],
            vec![
                e(USER_OBJ, 6, NO_ID),
                e(GROUP_OBJ, 4, NO_ID),
                e(0x40, 4, NO_ID),
                e(OTHER, 0, NO_ID),
            ],
        ] {
            assert!(Acl::parse(&Acl { entries }.encode(), "t").is_err());
        }
    }

    #[test]
    fn chmod_rewrites_mask_not_group() {
        let mut a = Acl::parse(&hex(GOLDEN), "t").unwrap();
        a.chmod(0o705);
        assert_eq!(a.entries[0].perm, 7);
        assert_eq!(a.entries[1].perm, 6, "named user kept");
        assert_eq!(a.entries[2].perm, 4, "GROUP_OBJ kept under a mask");
        assert_eq!(a.entries[3].perm, 0, "mask from the group bits");
        assert_eq!(a.entries[4].perm, 5);
    }

    #[test]
    fn inheritance_masks_by_the_requested_mode() {
        // A default ACL u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x; a file
        // created 0666 (no umask applies under a default ACL).
        let d = Acl {
            entries: vec![
                e(USER_OBJ, 7, NO_ID),
                e(USER, 7, 1000),
                e(GROUP_OBJ, 5, NO_ID),
                e(MASK, 7, NO_ID),
                e(OTHER, 5, NO_ID),
            ],
        };
        let (acl, mode) = d.create_masq(0o666);
        let acl = acl.expect("extended");
        assert_eq!(mode, 0o664);
        let perms: Vec<u16> = acl.entries.iter().map(|e| e.perm).collect();
        assert_eq!(perms, [6, 7, 5, 6, 4]);
        // Base-only default: only the mode.
        let b = Acl {
            entries: vec![
                e(USER_OBJ, 7, NO_ID),
                e(GROUP_OBJ, 0, NO_ID),
                e(OTHER, 0, NO_ID),
            ],
        };
        assert_eq!(b.create_masq(0o777), (None, 0o700));
    }
}
