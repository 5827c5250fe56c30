#!/bin/bash
# Guest job for ../shared/oracle/vm/openzfs-vm.sh: make the small pool with
# block cloning active that crates/cli/tests/fixtures/bclone-openzfs-2.3.img.gz
# holds (OpenZFS 2.3.2, files cloned with cp --reflink within one file system,
# a recursive snapshot), written to the attached disk:
#
#   truncate -s 128M d0.img
#   ../shared/oracle/vm/openzfs-vm.sh run scripts/oracle/make-bclone.sh --disk d0.img
#   gzip -9 -c d0.img > crates/cli/tests/fixtures/bclone-openzfs-2.3.img.gz
#
# It prints OpenZFS's bclone figures, the files' sha256 and zdb -bcc's verdict
# (the test checks ozfs against those figures).
set -uo pipefail
echo 1 > /sys/module/zfs/parameters/zfs_bclone_enabled 2>/dev/null
echo "bclone_enabled: $(cat /sys/module/zfs/parameters/zfs_bclone_enabled 2>/dev/null)"
mkdir -p /var/tmp/bc && truncate -s 128M /var/tmp/bc/d0.img
zpool create -o ashift=12 -O mountpoint=/bc bc /var/tmp/bc/d0.img || exit 1
zfs create bc/a && zfs create bc/b || exit 1
head -c 150000 /dev/urandom | base64 > /bc/a/f1
head -c 20000 /dev/urandom > /bc/a/f2
head -c 30000 /dev/urandom | base64 > /bc/a/f3
zpool sync bc
cp --reflink=always /bc/a/f1 /bc/a/f1.clone || echo "CLONE FAILED f1"
cp --reflink=always /bc/a/f3 /bc/a/f3.clone || echo "CLONE FAILED f3"
cp --reflink=always /bc/a/f2 /bc/a/f2.c1 || echo "CLONE FAILED f2"
cp --reflink=always /bc/a/f2 /bc/a/f2.c2 || echo "CLONE FAILED f2 2"
cp --reflink=always /bc/a/f1 /bc/a/f1.c2 || echo "CLONE FAILED f1 c2"
zfs snapshot -r bc@s1
zpool sync bc
echo "### props"; zpool get -H -o property,value bcloneused,bclonesaved,bcloneratio,feature@block_cloning bc
echo "### sums"; (cd /bc && sha256sum a/*)
zpool export bc || exit 1
echo "### zdb"; zdb -e -p /var/tmp/bc -bcc bc 2>&1 | tail -30
dd if=/var/tmp/bc/d0.img of=/dev/vdb bs=1M status=none && sync
echo "### done"
