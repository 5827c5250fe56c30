#!/bin/bash
# Guest job for ../shared/oracle/vm/openzfs-vm.sh: make the pool with an
# unreplayed ZFS intent log that crates/cli/tests/fixtures/zil-openzfs-2.3.*
# hold.  The pool is frozen (`zpool freeze`, the hidden command the OpenZFS
# slog replay tests use: nothing after the freeze reaches the main pool, only
# the intent log), then sync operations that write every ZIL record type
# OpenZFS 2.3 writes on Linux, then exported: the image keeps the log
# unreplayed.  From the repository root:
#
#   truncate -s 128M /var/tmp/zl.img
#   /work/shared/oracle/vm/openzfs-vm.sh run scripts/oracle/make-zil.sh \
#       --disk /var/tmp/zl.img --share scripts/oracle 2>&1 | tee /var/tmp/make-zil.log
#   gzip -9 -c /var/tmp/zl.img > crates/cli/tests/fixtures/zil-openzfs-2.3.img.gz
#   sed -n '/^### manifest-after$/,/^### /p' /var/tmp/make-zil.log | sed '1d;$d' \
#       > crates/cli/tests/fixtures/zil-openzfs-2.3.manifest
#   sed -n '/^### zdb-ivv$/,/^### /p' /var/tmp/make-zil.log | sed '1d;$d' \
#       > crates/cli/tests/fixtures/zil-openzfs-2.3.zdb-ivv.txt
#
# (--share makes zil-manifest.sh available in the guest as /share/zil-manifest.sh.)
#
# Pool `zl` (128M file, ashift=12, default 2.3 features):
#   zl       mountpoint /zl
#   zl/a     /zlfs/a    xattr=sa (the 2.3 default), acltype=posix: TX_SETSAXATTR
#   zl/d     /zlfs/d    xattr=dir, acltype=posix: TX_MKXATTR, creates/writes in xattr dirs
#   zl/big   /zlfs/big  dnodesize=auto: creates with large dnodes (slots > 1)
#   zl/enc   /zlfs/enc  encryption=on keyformat=passphrase: encrypted log blocks.
#                       Passphrase "ozfs-zil-test-key" (no newline), kept by the
#                       guest in /var/tmp/zl/enc.key, keylocation=file:///var/tmp/zl/enc.key
#   zl/tp    /zlfs/tp   logbias=throughput: every write logged WR_INDIRECT
# All of them sync=always.  The children have their own mountpoints (not under
# /zl) so that no file system's manifest shows another's mount point.
#
# Output sections (`### name` lines): props, zdb-ivv (zdb -e -ivv of the
# exported, frozen pool: the dump of the unreplayed logs), zdb-ivv-enc (the
# same for zl/enc with its key), manifest-frozen (the live view before the
# export), manifest-after (after OpenZFS replayed the log at import),
# dmesg (replay errors), manifest-diff, mtime-diff, zdb-bcc, times.
# The fixture's manifest is the one after OpenZFS's replay: with
# acltype=posix (zl/a, zl/d) 2.3 applies the umask, and setfacl's mode change,
# without logging them, so there the replayed modes differ from the frozen
# view (0666/0777 for new files/dirs); see ZIL-FIXTURES.md.
set -uo pipefail
T0=$(date +%s)
tmark() { echo "time $1: $(( $(date +%s) - T0 ))s" >> /tmp/times; }
MANIFEST=${ZIL_MANIFEST:-${OZVM_SHARE:-/share}/zil-manifest.sh}
[ -r "$MANIFEST" ] || { echo "zil-manifest.sh not found at $MANIFEST (run with --share scripts/oracle)"; exit 1; }
D=/var/tmp/zl
IMG=$D/zl.img
KEY="ozfs-zil-test-key"
FSLIST="zl zl/a zl/big zl/d zl/enc zl/tp"
mp() { case $1 in zl) echo /zl ;; *) echo "/zlfs/${1#zl/}" ;; esac; }

echo 1 > /sys/module/zfs/parameters/zfs_bclone_enabled
echo "bclone_enabled: $(cat /sys/module/zfs/parameters/zfs_bclone_enabled)"
mkdir -p $D /tmp/src && truncate -s 128M $IMG
printf '%s' "$KEY" > $D/enc.key

# Source data: distinct but very compressible 128-byte lines, so that the
# image stays small.
gen() { # SIZE TAG
    seq -f "$2 %010.0f ..................................................................................................................." 1 $(( $1 / 128 + 1 )) | head -c "$1"
}
for s in 100 3000 4096 5000 20000 40000 65536 100000 131072 300000 1048576; do
    gen $s "src$s" > /tmp/src/$s
done
big_of() { case $1 in zl/a) echo 1048576 ;; *) echo 300000 ;; esac; }

# perl helpers (perl-base is in the guest): renameat2 (x86_64 syscall 316;
# RENAME_EXCHANGE 2, RENAME_WHITEOUT 4) and FICLONERANGE (_IOW(0x94, 13, 32 bytes))
renameat2() { # FLAGS OLD NEW
    perl -e 'syscall(316, -100, $ARGV[1], -100, $ARGV[2], $ARGV[0] + 0) == 0
             or die "renameat2 $ARGV[1] $ARGV[2]: $!\n"' "$@"
}
clonerange() { # SRC SRCOFF LEN DST DSTOFF
    perl -e 'open(my $s, "<", $ARGV[0]) or die "$ARGV[0]: $!\n";
             open(my $d, "+<", $ARGV[3]) or die "$ARGV[3]: $!\n";
             ioctl($d, 0x4020940d, pack("q<Q<Q<Q<", fileno($s), $ARGV[1], $ARGV[2], $ARGV[4]))
                 or die "FICLONERANGE: $!\n"' "$@"
}
try() { "$@" || echo "FAILED ($?): $*"; }

# ---------------------------------------------------------------- pool ----
zpool create -o ashift=12 -O mountpoint=/zl zl $IMG || exit 1
zfs create -o mountpoint=/zlfs/a -o acltype=posix zl/a || exit 1
zfs create -o mountpoint=/zlfs/d -o xattr=dir -o acltype=posix zl/d || exit 1
zfs create -o mountpoint=/zlfs/big -o dnodesize=auto zl/big || exit 1
zfs create -o mountpoint=/zlfs/tp -o logbias=throughput zl/tp || exit 1
if zfs create -o mountpoint=/zlfs/enc -o encryption=on -o keyformat=passphrase \
        -o keylocation=file://$D/enc.key zl/enc; then
    :
else
    echo "ENCRYPTED DATASET NOT CREATED"; FSLIST=${FSLIST/ zl\/enc/}
fi
tmark pool-created

# Base content (reaches the main pool before the freeze).
base() { # MOUNTPOINT
    local m=$1
    mkdir -p $m/base/rmdir-me $m/base/mvdir/inner $m/base/xdir
    cp /tmp/src/300000 $m/base/mid.bin
    cp /tmp/src/300000 $m/base/trunc-shrink
    cp /tmp/src/20000 $m/base/trunc-grow
    cp /tmp/src/300000 $m/base/punch
    cp /tmp/src/3000 $m/base/otrunc
    echo "append base" > $m/base/append-me
    for f in chmod-me chown-me touch-me rm-me chattr-me immut acl-me; do echo "$f" > $m/base/$f; done
    for f in mv-a mv-b mv-over mv-over-target x1 x2 x3 w1; do echo "content of $f" > $m/base/$f; done
    gen 5000 linksrc > $m/base/linksrc; ln $m/base/linksrc $m/base/linksrc-2
    gen 4096 direct > $m/base/direct
    gen 5000 openunl > $m/base/open-unlink
    # clone source: 2 full 128K blocks + a partial one; range-clone target: 3 blocks
    gen 300000 clonesrc > $m/base/clone-src
    gen 393216 clonedst > $m/base/clone-dst
    echo xa > $m/base/xa
    setfattr -n user.keep -v keep-me $m/base/xa
    setfattr -n user.drop -v drop-me $m/base/xa
    setfattr -n user.change -v old-value $m/base/xa
}
for fs in $FSLIST; do base "$(mp $fs)"; done
zpool sync zl
for fs in $FSLIST; do zfs set sync=always $fs; done
# One synced write per file system so that each has a ZIL header before the
# freeze (the slog tests' work-around: without it no log records are written).
for fs in $FSLIST; do
    dd if=/dev/zero of="$(mp $fs)/base/zil-hdr" bs=1 count=1 conv=fsync status=none
done
# Hole-punch the free space of the file vdev: the blocks that earlier txgs
# wrote and freed would otherwise stay in the image (and in its .gz).
zpool trim -w zl || echo "zpool trim FAILED"
echo "### props"
zfs version
zpool get -H -o property,value all zl | grep -E 'feature@(zilsaxattr|block_cloning|large_dnode|encryption|project_quota)|ashift|size'
zfs get -H -o name,property,value -t filesystem xattr,dnodesize,logbias,sync,encryption,acltype,compression,recordsize zl -r
tmark base-done

# ---------------------------------------------------------------- freeze ----
zpool freeze zl || { echo "zpool freeze FAILED"; exit 1; }
echo "frozen"
# Frozen txgs still sync: their blocks are written (only the labels and
# uberblocks are not, and nothing is freed), so each one leaves metadata in
# what the exported pool sees as free space.  Few txgs keep the image small.
TXG_TIMEOUT=$(cat /sys/module/zfs/parameters/zfs_txg_timeout)
echo 600 > /sys/module/zfs/parameters/zfs_txg_timeout
tmark frozen

ops() { # FS MOUNTPOINT
    local fs=$1 m=$2 big; big=$(big_of $fs)
    cd "$m" || return 1
    # TX_CREATE (regular, fifo, char and block device), TX_WRITE
    try touch new-empty
    try dd if=/tmp/src/100 of=new-small bs=100 count=1 status=none     # WR_COPIED
    try dd if=/tmp/src/20000 of=new-20k bs=20000 count=1 status=none   # > zil_maxcopied: WR_NEED_COPY
    try dd if=/tmp/src/100000 of=new-100k bs=100000 count=1 status=none # one partial block: WR_INDIRECT
    try dd if=/tmp/src/$big of=new-big bs=$big count=1 status=none    # full blocks: WR_INDIRECT
    try mkfifo new-fifo
    try mknod new-chr c 1 3
    try mknod new-blk b 7 0
    # TX_MKDIR
    try mkdir dir1
    try mkdir -p dir1/sub/deep
    # TX_SYMLINK
    try ln -s new-small sym-short
    try ln -s "/a/rather/long/symlink/target/that/does/not/fit/in/the/bonus/buffer/of/an/old/style/znode/$(printf 'x%.0s' $(seq 1 120))" sym-long
    # TX_LINK, TX_REMOVE of one of two links
    try ln base/linksrc dir1/hardlink
    try rm base/linksrc-2
    # TX_REMOVE, TX_RMDIR, created-then-removed
    try rm base/rm-me
    try rmdir base/rmdir-me
    try touch tmp-x; try rm tmp-x
    try dd if=/tmp/src/3000 of=tmp-y bs=3000 count=1 status=none; try rm tmp-y
    try mkdir tmp-d; try rmdir tmp-d
    # TX_RENAME: same dir, across dirs, over an existing file, a directory across dirs
    try mv base/mv-a base/mv-a2
    try mv base/mv-b dir1/mv-b
    try mv -f base/mv-over base/mv-over-target
    try mv base/mvdir dir1/mvdir
    # TX_RENAME_EXCHANGE (same dir; file <-> directory across dirs), TX_RENAME_WHITEOUT
    try renameat2 2 base/x1 base/x2
    try renameat2 2 base/x3 dir1/sub
    try renameat2 4 base/w1 base/w1-moved
    # writes into existing files: small overwrite in the middle (WR_COPIED),
    # 64K overwrite in the middle of a block (WR_INDIRECT), append, O_DIRECT
    try dd if=/tmp/src/4096 of=base/mid.bin bs=4096 seek=25 count=1 conv=notrunc status=none
    try dd if=/tmp/src/65536 of=base/mid.bin bs=65536 seek=3 count=1 conv=notrunc status=none
    try sh -c 'printf "appended line\n" >> base/append-me'
    try dd if=/tmp/src/4096 of=base/direct bs=4096 count=1 conv=notrunc oflag=direct status=none
    # TX_TRUNCATE: shrink, grow, punch a hole, O_TRUNC
    try truncate -s 5000 base/trunc-shrink
    try truncate -s 200000 base/trunc-grow
    try fallocate -p -o 65536 -l 131072 base/punch
    try sh -c ': > base/otrunc'
    # TX_SETATTR: mode, owner, group, times; on a symlink; ioctl flags (xvattr)
    try chmod 4751 base/chmod-me
    try chown 1234:5678 base/chown-me
    try chgrp 99 new-small
    try chown -h 4321:8765 sym-short
    try touch -d '2001-02-03 04:05:06.123456789' base/touch-me
    try touch -a -d '1999-12-31 23:59:59' base/touch-me
    try chattr +d base/chattr-me
    try chattr -p 42 base/chattr-me
    try chattr +P dir1
    # xattrs (xattr=sa: TX_SETSAXATTR; xattr=dir: TX_MKXATTR + dir ops)
    try setfattr -n user.new -v "a new value" new-small
    try setfattr -n user.bin -v 0x00ff10ee00 new-small
    # An empty value: on xattr=sa, 2.3 logs it as TX_SETSAXATTR with size 0,
    # which its replay takes for a removal (ENOENT: replay stops, the rest of
    # the log is dropped).  Only where it is a file in the xattr directory.
    [ "$(zfs get -H -o value xattr $fs)" = dir ] && try setfattr -n user.empty new-empty
    try setfattr -x user.drop base/xa
    try setfattr -n user.change -v "the new value" base/xa
    try setfattr -n user.large -v "0x$(od -An -tx1 -v /tmp/src/20000 | tr -d ' \n')" new-20k
    # > 32768 bytes: too large for an SA xattr, stored in the xattr directory even on xattr=sa
    try setfattr -n user.huge -v "0x$(od -An -tx1 -v /tmp/src/40000 | tr -d ' \n')" new-20k
    try setfattr -h -n trusted.onlink -v on-a-symlink sym-short
    try setfattr -n user.ondir -v dir-value dir1
    # POSIX ACLs (system.posix_acl_* xattrs), default ACL inherited by a create
    if [ "$(zfs get -H -o value acltype $fs)" = posix ]; then
        try setfacl -m u:1000:rwx,g:100:r-x base/acl-me
        try mkdir acldir
        try setfacl -d -m u:1000:rwx acldir
        try touch acldir/inherits
        try mkdir acldir/subdir
    fi
    # TX_CLONE_RANGE: whole file (cp --reflink), and two blocks into the middle of another file
    try cp --reflink=always base/clone-src clone-copy
    try clonerange base/clone-src 0 262144 base/clone-dst 131072
    # unlinked while open: the write after the unlink is not logged
    exec 7<>base/open-unlink
    try rm base/open-unlink
    echo "written after unlink" >&7
    exec 7>&-
    # last: an immutable file
    try chattr +i base/immut
    cd /
}
ops_root() { # a few records in the pool's root file system too
    cd /zl || return 1
    try dd if=/tmp/src/3000 of=root-new bs=3000 count=1 status=none
    try mkdir root-dir
    try mv base/mv-a root-dir/
    try chmod 600 base/chmod-me
    try setfattr -n user.root -v root-value root-new
    cd /
}
for fs in $FSLIST; do
    [ $fs = zl ] && continue
    echo "ops $fs"; ops $fs "$(mp $fs)"
done
ops_root
tmark ops-done

manifests() { # print every file system's manifest
    local fs
    for fs in $FSLIST; do bash "$MANIFEST" "$(mp $fs)" $fs; done
}
echo "### manifest-frozen"
manifests | tee /tmp/manifest-frozen
ZIL_MANIFEST_MTIME=1 manifests > /tmp/mtime-frozen
tmark manifest-frozen

zpool export zl || { echo "EXPORT FAILED"; zpool export -f zl || exit 1; }
tmark exported
echo "$TXG_TIMEOUT" > /sys/module/zfs/parameters/zfs_txg_timeout
echo "### zdb-ivv"
zdb -e -p $D -ivv zl 2>&1
echo "### zdb-ivv-enc"
zdb -e -p $D -ivv -K "$KEY" zl/enc 2>&1
echo "### label"
zdb -l $IMG 2>&1 | grep -E "state|txg|hostid|name" | sort -u
dd if=$IMG of=/dev/vdb bs=1M status=none && sync
echo "image copied to /dev/vdb"
tmark image-copied

# ---------------------------------------------------------- replay -----
echo "### import"
zpool import -d $D -f -l zl 2>&1 || { echo "IMPORT FAILED"; zpool import -d $D 2>&1; exit 1; }
zfs mount -a 2>&1
zpool status -v zl 2>&1
zfs get -H -o name,property,value -r mounted,keystatus zl 2>&1
tmark replayed
echo "### dmesg"
dmesg | grep -iE 'zfs|zil|replay|WARNING|error' | tail -30
echo "### manifest-after"
manifests | tee /tmp/manifest-after
ZIL_MANIFEST_MTIME=1 manifests > /tmp/mtime-after
echo "### manifest-diff"
if diff /tmp/manifest-frozen /tmp/manifest-after; then echo "IDENTICAL (frozen live view == after replay)"; fi
echo "### mtime-diff"
diff /tmp/mtime-frozen /tmp/mtime-after | head -100 || true
echo "mtime diff lines: $(diff /tmp/mtime-frozen /tmp/mtime-after | grep -c '^[<>]')"
zpool export zl || exit 1
echo "### zdb-bcc"
zdb -e -p $D -bcc zl 2>&1 | tail -40
tmark done
echo "### times"
cat /tmp/times
echo "### done"
