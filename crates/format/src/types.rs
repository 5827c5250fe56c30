//! Enumerations with their ZFS names: DMU object types, checksum and
//! compression functions, objset types. Names match what zdb prints.
//!
//! The legacy type numbers (0..=53) index fixed tables taken from the
//! OpenZFS `dmu_ot[]` table; "new-style" types (bit 7 set) encode their
//! properties in the number itself: bit 6 metadata, bit 5 encrypted, bits
//! 0..5 the byteswap class. zfs-fuse (pool v23) knows types 0..=43 and uses
//! a few older names for them (see [`object_type_name_v23`]).

/// Checksum function numbers (`enum zio_checksum`).
pub mod cksum {
    pub const INHERIT: u8 = 0;
    pub const ON: u8 = 1;
    pub const OFF: u8 = 2;
    pub const LABEL: u8 = 3;
    pub const GANG_HEADER: u8 = 4;
    pub const ZILOG: u8 = 5;
    pub const FLETCHER2: u8 = 6;
    pub const FLETCHER4: u8 = 7;
    pub const SHA256: u8 = 8;
    pub const ZILOG2: u8 = 9;
    pub const NOPARITY: u8 = 10;
    pub const SHA512: u8 = 11;
    pub const SKEIN: u8 = 12;
    pub const EDONR: u8 = 13;
    pub const BLAKE3: u8 = 14;
}

/// Compression function numbers (`enum zio_compress`).
pub mod comp {
    pub const INHERIT: u8 = 0;
    pub const ON: u8 = 1;
    pub const OFF: u8 = 2;
    pub const LZJB: u8 = 3;
    pub const EMPTY: u8 = 4;
    pub const GZIP_1: u8 = 5;
    pub const GZIP_9: u8 = 13;
    pub const ZLE: u8 = 14;
    pub const LZ4: u8 = 15;
    pub const ZSTD: u8 = 16;
    /// ozfs's pre-compressed ("external") blocks (issue 7): the block holds
    /// an `ozfs_format::external` header and the client's payload. Only
    /// valid in pools where `org.ozfs:external_compression` is active;
    /// 127 is the top of OpenZFS's 7-bit field, clear of new algorithms.
    pub const EXTERNAL: u8 = 127;
}

/// DMU object type numbers used by ozfs code (full table in [`object_type_name`]).
pub mod ot {
    pub const NONE: u8 = 0;
    pub const OBJECT_DIRECTORY: u8 = 1;
    pub const OBJECT_ARRAY: u8 = 2;
    pub const PACKED_NVLIST: u8 = 3;
    pub const PACKED_NVLIST_SIZE: u8 = 4;
    pub const BPOBJ: u8 = 5;
    pub const BPOBJ_HDR: u8 = 6;
    pub const SPACE_MAP_HEADER: u8 = 7;
    pub const SPACE_MAP: u8 = 8;
    pub const INTENT_LOG: u8 = 9;
    pub const DNODE: u8 = 10;
    pub const OBJSET: u8 = 11;
    pub const DSL_DIR: u8 = 12;
    pub const DSL_DIR_CHILD_MAP: u8 = 13;
    pub const DSL_DS_SNAP_MAP: u8 = 14;
    pub const DSL_PROPS: u8 = 15;
    pub const DSL_DATASET: u8 = 16;
    pub const NEXT_CLONES: u8 = 37;
    pub const USERREFS: u8 = 41;
    pub const ZNODE: u8 = 17;
    pub const PLAIN_FILE_CONTENTS: u8 = 19;
    pub const DIRECTORY_CONTENTS: u8 = 20;
    pub const MASTER_NODE: u8 = 21;
    pub const UNLINKED_SET: u8 = 22;
    pub const ZVOL: u8 = 23;
    pub const ZVOL_PROP: u8 = 24;
    pub const POOL_PROPS: u8 = 31;
    pub const SA: u8 = 44;
    pub const SA_MASTER_NODE: u8 = 45;
    pub const SA_ATTR_REGISTRATION: u8 = 46;
    pub const SA_ATTR_LAYOUTS: u8 = 47;
    pub const DSL_CLONES: u8 = 52;
    /// `DMU_OT_DEDUP`: the type of the block pointers a dedup table's
    /// records are freed and scrubbed with.
    pub const DEDUP: u8 = 49;
    /// The user, group and project used-space ZAPs (objects -1, -2, -3).
    pub const USERGROUP_USED: u8 = 39;
    pub const ZAP_METADATA_NEW: u8 = 0xC4;
}

/// Number of legacy (table-driven) DMU object types (`DMU_OT_NUMTYPES`).
pub const DMU_OT_NUMTYPES: u8 = 54;
/// Bit marking a new-style object type.
pub const DMU_OT_NEWTYPE: u8 = 0x80;
/// New-style type bit: metadata.
pub const DMU_OT_METADATA: u8 = 0x40;
/// New-style type bit: encrypted.
pub const DMU_OT_ENCRYPTED: u8 = 0x20;
/// New-style type mask of the byteswap class.
pub const DMU_OT_BYTESWAP_MASK: u8 = 0x1f;
/// Number of checksum functions known to OpenZFS (`ZIO_CHECKSUM_FUNCTIONS`).
pub const CHECKSUM_FUNCTIONS: usize = 15;
/// Number of compression functions known to OpenZFS (`ZIO_COMPRESS_FUNCTIONS`).
pub const COMPRESS_FUNCTIONS: usize = 17;

/// Byteswap classes (`dmu_object_byteswap_t`).
pub mod bswap {
    pub const UINT8: u8 = 0;
    pub const UINT16: u8 = 1;
    pub const UINT32: u8 = 2;
    pub const UINT64: u8 = 3;
    pub const ZAP: u8 = 4;
    pub const DNODE: u8 = 5;
    pub const OBJSET: u8 = 6;
    pub const ZNODE: u8 = 7;
    pub const OLDACL: u8 = 8;
    pub const ACL: u8 = 9;
    /// Number of classes.
    pub const NUMFUNCS: u8 = 10;
}

/// (name, byteswap class, metadata) per legacy type, as in OpenZFS's `dmu_ot[]`.
const DMU_OT: [(&str, u8, bool); DMU_OT_NUMTYPES as usize] = {
    use bswap::*;
    [
        ("unallocated", UINT8, true),
        ("object directory", ZAP, true),
        ("object array", UINT64, true),
        ("packed nvlist", UINT8, true),
        ("packed nvlist size", UINT64, true),
        ("bpobj", UINT64, true),
        ("bpobj header", UINT64, true),
        ("SPA space map header", UINT64, true),
        ("SPA space map", UINT64, true),
        ("ZIL intent log", UINT64, true),
        ("DMU dnode", DNODE, true),
        ("DMU objset", OBJSET, true),
        ("DSL directory", UINT64, true),
        ("DSL directory child map", ZAP, true),
        ("DSL dataset snap map", ZAP, true),
        ("DSL props", ZAP, true),
        ("DSL dataset", UINT64, true),
        ("ZFS znode", ZNODE, true),
        ("ZFS V0 ACL", OLDACL, true),
        ("ZFS plain file", UINT8, false),
        ("ZFS directory", ZAP, true),
        ("ZFS master node", ZAP, true),
        ("ZFS delete queue", ZAP, true),
        ("zvol object", UINT8, false),
        ("zvol prop", ZAP, true),
        ("other uint8[]", UINT8, false),
        ("other uint64[]", UINT64, false),
        ("other ZAP", ZAP, true),
        ("persistent error log", ZAP, true),
        ("SPA history", UINT8, true),
        ("SPA history offsets", UINT64, true),
        ("Pool properties", ZAP, true),
        ("DSL permissions", ZAP, true),
        ("ZFS ACL", ACL, true),
        ("ZFS SYSACL", UINT8, true),
        ("FUID table", UINT8, true),
        ("FUID table size", UINT64, true),
        ("DSL dataset next clones", ZAP, true),
        ("scan work queue", ZAP, true),
        ("ZFS user/group/project used", ZAP, true),
        ("ZFS user/group/project quota", ZAP, true),
        ("snapshot refcount tags", ZAP, true),
        ("DDT ZAP algorithm", ZAP, true),
        ("DDT statistics", ZAP, true),
        ("System attributes", UINT8, true),
        ("SA master node", ZAP, true),
        ("SA attr registration", ZAP, true),
        ("SA attr layouts", ZAP, true),
        ("scan translations", ZAP, true),
        ("deduplicated block", UINT8, false),
        ("DSL deadlist map", ZAP, true),
        ("DSL deadlist map hdr", UINT64, true),
        ("DSL dir clones", ZAP, true),
        ("bpobj subobj", UINT64, true),
    ]
};

/// Whether `t` is a valid object type (legacy < 54, or new-style with a known byteswap class).
pub fn object_type_is_valid(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        t & DMU_OT_BYTESWAP_MASK < bswap::NUMFUNCS
    } else {
        t < DMU_OT_NUMTYPES
    }
}

/// Byteswap class of a valid object type, or None.
pub fn object_type_bswap(t: u8) -> Option<u8> {
    if !object_type_is_valid(t) {
        None
    } else if t & DMU_OT_NEWTYPE != 0 {
        Some(t & DMU_OT_BYTESWAP_MASK)
    } else {
        Some(DMU_OT[t as usize].1)
    }
}

/// Name of a byteswap class (`dmu_ot_byteswap[].ob_name`): "uint8" ... "acl", else "UNKNOWN".
pub fn bswap_class_name(b: u8) -> &'static str {
    match b {
        0 => "uint8",
        1 => "uint16",
        2 => "uint32",
        3 => "uint64",
        4 => "zap",
        5 => "dnode",
        6 => "objset",
        7 => "znode",
        8 => "oldacl",
        9 => "acl",
        _ => "UNKNOWN",
    }
}

/// zdb's name for a DMU object type, e.g. `"ZFS plain file"`, `"DSL directory"`,
/// `"object directory"`, `"ZFS directory"`, `"DMU dnode"`, `"SPA space map"`.
/// New-style types (bit 7 set) get names like `"zap"`/`"uint64"` per their bswap class.
pub fn object_type_name(t: u8) -> &'static str {
    if t & DMU_OT_NEWTYPE != 0 {
        if object_type_is_valid(t) {
            bswap_class_name(t & DMU_OT_BYTESWAP_MASK)
        } else {
            "UNKNOWN"
        }
    } else if t < DMU_OT_NUMTYPES {
        DMU_OT[t as usize].0
    } else {
        "UNKNOWN"
    }
}

/// The name zfs-fuse's zdb (pool v23) prints: identical to [`object_type_name`] except
/// 5 "bplist", 6 "bplist header", 38 "scrub work queue", 39 "ZFS user/group used",
/// 40 "ZFS user/group quota"; types >= 44 are unknown to zfs-fuse.
pub fn object_type_name_v23(t: u8) -> &'static str {
    match t {
        5 => "bplist",
        6 => "bplist header",
        38 => "scrub work queue",
        39 => "ZFS user/group used",
        40 => "ZFS user/group quota",
        0..=43 => object_type_name(t),
        _ => "UNKNOWN",
    }
}

/// Whether blocks of this type count as metadata (FORMAT.md §5.6 "meta" column).
pub fn object_type_is_metadata(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        t & DMU_OT_METADATA != 0
    } else if t < DMU_OT_NUMTYPES {
        DMU_OT[t as usize].2
    } else {
        false
    }
}

/// Legacy types whose level-0 blocks are encrypted in an encrypted dataset
/// (the `ot_encrypt` column of OpenZFS's `dmu_ot[]`): the intent log, dnode
/// blocks (their encrypted bonus buffers), ACLs, file and volume contents,
/// directories, the delete queue, the FUID table, user/group/project
/// accounting and quota ZAPs, and the system-attribute objects. Everything
/// else in such a dataset (the objset, the master node, indirect blocks) is
/// only authenticated.
const ENCRYPTED_TYPES: [u8; 19] = [
    9, 10, 18, 19, 20, 22, 23, 25, 26, 33, 34, 35, 39, 40, 44, 45, 46, 47, 49,
];

/// Whether level-0 blocks of type `t` are encrypted in an encrypted
/// dataset (`DMU_OT_IS_ENCRYPTED`): new-style types say so in bit 5.
pub fn object_type_is_encrypted(t: u8) -> bool {
    if t & DMU_OT_NEWTYPE != 0 {
        t & DMU_OT_ENCRYPTED != 0
    } else {
        ENCRYPTED_TYPES.contains(&t)
    }
}

/// Whether objects of this type are ZAPs (byteswap class "zap").
pub fn object_type_is_zap(t: u8) -> bool {
    object_type_bswap(t) == Some(bswap::ZAP)
}

/// zdb/zfs name of a checksum function, e.g. `"fletcher4"`, `"sha256"`, `"inherit"`.
pub fn checksum_name(c: u8) -> &'static str {
    const NAMES: [&str; CHECKSUM_FUNCTIONS] = [
        "inherit",
        "on",
        "off",
        "label",
        "gang_header",
        "zilog",
        "fletcher2",
        "fletcher4",
        "sha256",
        "zilog2",
        "noparity",
        "sha512",
        "skein",
        "edonr",
        "blake3",
    ];
    NAMES.get(c as usize).copied().unwrap_or("UNKNOWN")
}

/// zdb/zfs name of a compression function, e.g. `"lzjb"`, `"gzip-9"`, `"off"`, `"uncompressed"` is NOT used: off => "off".
pub fn compression_name(c: u8) -> &'static str {
    if c == comp::OFF {
        "off"
    } else {
        compression_table_name(c)
    }
}

/// The name in `zio_compress_table[]` (what zdb prints inside block pointers):
/// identical to [`compression_name`] except that 2 is `"uncompressed"`.
pub fn compression_table_name(c: u8) -> &'static str {
    const NAMES: [&str; COMPRESS_FUNCTIONS] = [
        "inherit",
        "on",
        "uncompressed",
        "lzjb",
        "empty",
        "gzip-1",
        "gzip-2",
        "gzip-3",
        "gzip-4",
        "gzip-5",
        "gzip-6",
        "gzip-7",
        "gzip-8",
        "gzip-9",
        "zle",
        "lz4",
        "zstd",
    ];
    NAMES.get(c as usize).copied().unwrap_or("UNKNOWN")
}

/// Objset type name: 0 "NONE", 1 "META", 2 "ZFS", 3 "ZVOL", 4 "OTHER".
pub fn objset_type_name(t: u64) -> &'static str {
    match t {
        0 => "NONE",
        1 => "META",
        2 => "ZFS",
        3 => "ZVOL",
        4 => "OTHER",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(object_type_name(0), "unallocated");
        assert_eq!(object_type_name(ot::OBJECT_DIRECTORY), "object directory");
        assert_eq!(object_type_name(ot::BPOBJ), "bpobj");
        for (t, enc) in [
            (ot::DNODE, true),
            (ot::OBJSET, false),
            (ot::PLAIN_FILE_CONTENTS, true),
            (ot::DIRECTORY_CONTENTS, true),
            (ot::MASTER_NODE, false),
            (ot::SA, true),
            (ot::ZNODE, false),
            (0xe4, true),
            (0xe4 & !DMU_OT_ENCRYPTED, false),
        ] {
            assert_eq!(object_type_is_encrypted(t), enc, "type {t}");
        }
        assert_eq!(object_type_name(ot::DNODE), "DMU dnode");
        assert_eq!(object_type_name(ot::PLAIN_FILE_CONTENTS), "ZFS plain file");
        assert_eq!(object_type_name(ot::ZVOL_PROP), "zvol prop");
        assert_eq!(object_type_name(ot::SA), "System attributes");
        assert_eq!(object_type_name(53), "bpobj subobj");
        assert_eq!(object_type_name(54), "UNKNOWN");
        assert_eq!(object_type_name(ot::ZAP_METADATA_NEW), "zap");
        assert_eq!(object_type_name(0xC3), "uint64");
        assert_eq!(object_type_name(0x9f), "UNKNOWN");
        assert_eq!(object_type_name_v23(5), "bplist");
        assert_eq!(object_type_name_v23(17), "ZFS znode");
        assert_eq!(checksum_name(cksum::FLETCHER4), "fletcher4");
        assert_eq!(checksum_name(200), "UNKNOWN");
        assert_eq!(compression_name(comp::OFF), "off");
        assert_eq!(compression_table_name(comp::OFF), "uncompressed");
        assert_eq!(compression_name(comp::GZIP_9), "gzip-9");
        assert_eq!(compression_name(comp::LZ4), "lz4");
        assert_eq!(objset_type_name(2), "ZFS");
    }

    #[test]
    fn classes() {
        assert!(object_type_is_zap(ot::MASTER_NODE));
        assert!(object_type_is_zap(ot::DIRECTORY_CONTENTS));
        assert!(object_type_is_zap(ot::ZAP_METADATA_NEW));
        assert!(!object_type_is_zap(ot::DSL_DIR));
        assert!(!object_type_is_zap(200));
        assert!(!object_type_is_metadata(ot::PLAIN_FILE_CONTENTS));
        assert!(!object_type_is_metadata(ot::ZVOL));
        assert!(object_type_is_metadata(ot::DNODE));
        assert!(object_type_is_metadata(0xC4));
        assert!(!object_type_is_metadata(0x84));
        assert!(object_type_is_valid(53) && !object_type_is_valid(54));
    }
}
