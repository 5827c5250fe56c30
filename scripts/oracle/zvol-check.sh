#!/bin/bash
# Guest job for ../shared/oracle/vm/openzfs-vm.sh: the real OpenZFS imports
# a pool image with volumes (made by ozfs: make-ozfs-zvol.sh), and prints
# the sha256 of each /dev/zvol device, its volume properties, a read-only
# mount of an ext4 found on one, then writes to a volume, scrubs, exports
# and runs zdb -bcc.  See make-ozfs-zvol.sh for the host side.
#
# Sections (`### name`): import, props, sums (sha256 of every volume's
# device, `HASH  POOL/VOL`, sorted), ext4, write, scrub, zdb-bcc, result.
set -uo pipefail
D=/var/tmp/zc
mkdir -p $D
for dev in /dev/vd[b-z]; do
    [ -b "$dev" ] || continue
    dd if="$dev" of=$D/$(basename "$dev").img bs=1M status=none
done
POOL=${POOL:-ozv}
rc=0
echo "### import"
zpool import -d $D -N "$POOL" || { echo "import FAILED"; exit 1; }
zpool status "$POOL"
udevadm settle 2>/dev/null || true
for _ in $(seq 100); do
    n=$(ls /dev/zvol/"$POOL"/ 2>/dev/null | wc -l)
    [ "$n" -ge 1 ] && break
    sleep 0.2
done
sleep 1
echo "### props"
zfs get -Hp -o name,property,value volsize,volblocksize,refreservation -t volume -r "$POOL"
echo "### sums"
for v in $(zfs list -H -o name -t volume -r "$POOL" | sort); do
    echo "$(sha256sum < /dev/zvol/$v | cut -d' ' -f1)  $v"
done
echo "### ext4"
for v in $(zfs list -H -o name -t volume -r "$POOL"); do
    if blkid /dev/zvol/$v 2>/dev/null | grep -q ext4; then
        mkdir -p $D/m
        mount -o ro /dev/zvol/$v $D/m && { echo "$v: $(find $D/m -type f | wc -l) files"; umount $D/m; }
        e2fsck -fn /dev/zvol/$v >/dev/null 2>&1 && echo "$v: e2fsck clean" || { echo "$v: e2fsck FAILED"; rc=1; }
    fi
done
echo "### write"
first=$(zfs list -H -o name -t volume -r "$POOL" | sort | head -1)
dd if=/dev/urandom of=/dev/zvol/$first bs=1M count=2 seek=4 oflag=direct conv=fsync status=none && echo "wrote 2M into $first" || { echo "write FAILED"; rc=1; }
echo "### scrub"
zpool scrub -w "$POOL"
zpool status -v "$POOL" | sed -n '/scan:/,$p'
zpool status -x "$POOL" | grep -q "is healthy" || rc=1
zpool export "$POOL"
echo "### zdb-bcc"
zdb -e -p $D -bcc "$POOL" 2>&1 | tail -12
zdb -e -p $D -bcc "$POOL" 2>&1 | grep -q "No leaks" || rc=1
echo "### result"
echo "rc=$rc"
exit $rc
