#!/bin/bash
# Guest job for ../shared/oracle/vm/openzfs-vm.sh: let the real OpenZFS import
# pool images (typically written by ozfs, possibly holding an intent log that
# was never replayed), replay their logs and show what it sees.  From the
# repository root:
#
#   /work/shared/oracle/vm/openzfs-vm.sh run scripts/oracle/replay-check.sh \
#       --share scripts/oracle --disk POOL.img [--disk MORE.img]... \
#       --env POOL=zl [--env KEY=ozfs-zil-test-key [--env KEYDS="zl/enc"]] 2>&1 | tee /var/tmp/replay-check.log
#
# e.g. on the ZIL fixture:
#   gunzip -c crates/cli/tests/fixtures/zil-openzfs-2.3.img.gz > /var/tmp/zl-check.img
#   /work/shared/oracle/vm/openzfs-vm.sh run scripts/oracle/replay-check.sh \
#       --share scripts/oracle --disk /var/tmp/zl-check.img \
#       --env POOL=zl --env KEY=ozfs-zil-test-key --env KEYDS=zl/enc 2>&1 | tee /var/tmp/replay-check.log
#   sed -n '/^### manifest$/,/^### /p' /var/tmp/replay-check.log | sed '1d;$d' \
#       | diff - crates/cli/tests/fixtures/zil-openzfs-2.3.manifest
#
# The attached images are only read: each /dev/vdX is copied into a file in
# the guest first (the import, the replay and the export write to the copy).
# --share scripts/oracle provides /share/zil-manifest.sh.  POOL unset: every
# pool found on the disks is imported.  KEY: passphrase (or hex/raw key, as the
# dataset's keyformat says) loaded for every encrypted dataset whose key is
# not available from its keylocation.  KEYDS: encrypted datasets whose log
# zdb should also dump decrypted (zdb -K KEY DATASET).  ALTROOT (default
# /rcroot): the pools are imported with `zpool import -R ALTROOT`, so that
# the mountpoints they carry (for pools made by ozfs on the host: host paths
# such as /var/tmp/..., which could fall on the guest's own directories or
# on this job's /var/tmp/rc) are mounted under ALTROOT; ALTROOT= (empty)
# mounts them where the property says.  The manifests name datasets, not
# paths, so they do not depend on it.
#
# Output sections (`### name` lines): disks, zdb-ivv (zdb -e -ivv of each pool
# before the import: the logs as OpenZFS reads them), import, status,
# mounted, manifest (every mounted file system after the replay, lines
# prefixed with the dataset name), zdb-bcc (after the export), result.
set -uo pipefail
MANIFEST=${ZIL_MANIFEST:-${OZVM_SHARE:-/share}/zil-manifest.sh}
[ -r "$MANIFEST" ] || { echo "zil-manifest.sh not found at $MANIFEST (run with --share scripts/oracle)"; exit 1; }
D=/var/tmp/rc
mkdir -p $D
rc=0

echo "### disks"
for dev in /dev/vd[b-z]; do
    [ -b "$dev" ] || continue
    n=$(basename "$dev")
    dd if="$dev" of=$D/$n.img bs=1M status=none || { echo "copy of $dev FAILED"; exit 1; }
    echo "$dev -> $D/$n.img ($(stat -c %s $D/$n.img) bytes)"
done
echo "${OZVM_DISKS:-}"

if [ -n "${POOL:-}" ]; then
    pools=$POOL
else
    pools=$(zpool import -d $D 2>/dev/null | awk '$1 == "pool:" {print $2}')
fi
[ -n "$pools" ] || { echo "no pool found on the disks"; zpool import -d $D; exit 1; }
echo "pools: $pools"

echo "### zdb-ivv"
for p in $pools; do
    echo "## zdb -e -p $D -ivv $p"
    zdb -e -p $D -ivv $p 2>&1 || echo "zdb exit $?"
done
# zdb prints encrypted records as "(encrypted)" unless given the key, and
# only for a named encrypted dataset (-K on an unencrypted one aborts zdb).
for ds in ${KEYDS:-}; do
    echo "## zdb -e -p $D -ivv -K KEY $ds"
    zdb -e -p $D -ivv -K "$KEY" "$ds" 2>&1 || echo "zdb exit $?"
done

echo "### import"
ALTROOT=${ALTROOT-/rcroot}
for p in $pools; do
    zpool import -d $D -N -f ${ALTROOT:+-R "$ALTROOT"} $p 2>&1 || { echo "IMPORT OF $p FAILED"; rc=1; }
done
echo "### status"
zpool status -v 2>&1
if [ -n "${KEY:-}" ]; then
    for ds in $(zfs list -H -o name,keystatus -t filesystem 2>/dev/null | awk '$2 == "unavailable" {print $1}'); do
        root=$(zfs get -H -o value encryptionroot "$ds")
        [ "$(zfs get -H -o value keystatus "$root")" = available ] && continue
        printf '%s' "$KEY" | zfs load-key -L prompt "$root" 2>&1 || { echo "load-key $root FAILED"; rc=1; }
    done
fi
# the replay happens here, when each file system is mounted
zfs mount -a 2>&1 || { echo "zfs mount -a FAILED"; rc=1; }
echo "### mounted"
zfs get -H -o name,property,value -t filesystem mounted,mountpoint,keystatus 2>&1
zfs list -H -o name,mounted,mountpoint -t filesystem 2>/dev/null > /tmp/fslist
echo "### manifest"
while read -r ds mounted mnt; do
    if [ "$mounted" = yes ] && [ -d "$mnt" ]; then
        bash "$MANIFEST" "$mnt" "$ds" || { echo "manifest of $ds FAILED"; rc=1; }
    else
        echo "$ds NOT MOUNTED"
    fi
done < <(LC_ALL=C sort /tmp/fslist)
echo "### errors"
zpool status -x 2>&1
dmesg 2>/dev/null | grep -iE 'zfs|zil|panic|WARNING' | tail -20
for p in $pools; do
    zpool export $p 2>&1 || { echo "EXPORT OF $p FAILED"; rc=1; }
done
echo "### zdb-bcc"
for p in $pools; do
    echo "## zdb -e -p $D -bcc $p"
    zdb -e -p $D -bcc $p > /tmp/zdb-bcc 2>&1; st=$?
    tail -40 /tmp/zdb-bcc
    [ $st = 0 ] || { echo "zdb -bcc $p: exit $st"; rc=1; }
done
echo "### result"
echo "replay-check exit $rc"
exit $rc
