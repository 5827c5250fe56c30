//! Enumerations with their ZFS names: DMU object types, checksum and
//! compression functions, objset types. Names match what zdb prints.

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
    pub const ZNODE: u8 = 17;
    pub const PLAIN_FILE_CONTENTS: u8 = 19;
    pub const DIRECTORY_CONTENTS: u8 = 20;
    pub const MASTER_NODE: u8 = 21;
    pub const UNLINKED_SET: u8 = 22;
    pub const ZVOL: u8 = 23;
    pub const ZVOL_PROP: u8 = 24;
    pub const SA: u8 = 44;
    pub const ZAP_METADATA_NEW: u8 = 0xC4;
}

/// zdb's name for a DMU object type, e.g. `"ZFS plain file"`, `"DSL directory"`,
/// `"object directory"`, `"ZFS directory"`, `"DMU dnode"`, `"SPA space map"`.
/// New-style types (bit 7 set) get names like `"zap"`/`"uint64"` per their bswap class.
pub fn object_type_name(_t: u8) -> &'static str {
    unimplemented!()
}

/// Whether blocks of this type count as metadata (FORMAT.md §5.6 "meta" column).
pub fn object_type_is_metadata(_t: u8) -> bool {
    unimplemented!()
}

/// Whether objects of this type are ZAPs (byteswap class "zap").
pub fn object_type_is_zap(_t: u8) -> bool {
    unimplemented!()
}

/// zdb/zfs name of a checksum function, e.g. `"fletcher4"`, `"sha256"`, `"inherit"`.
pub fn checksum_name(_c: u8) -> &'static str {
    unimplemented!()
}

/// zdb/zfs name of a compression function, e.g. `"lzjb"`, `"gzip-9"`, `"off"`, `"uncompressed"` is NOT used: off => "off".
pub fn compression_name(_c: u8) -> &'static str {
    unimplemented!()
}

/// Objset type name: 0 "NONE", 1 "META", 2 "ZFS", 3 "ZVOL", 4 "OTHER".
pub fn objset_type_name(_t: u64) -> &'static str {
    unimplemented!()
}
