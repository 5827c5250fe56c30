#!/bin/bash
# make-ozfs-zvol.sh [WORKDIR] — HOST script: a pool image holding volumes
# ozfs made and wrote through its block devices, and the sha256 of each
# device, for zvol-check.sh to let the real OpenZFS 2.3 import it in the VM
# and read its /dev/zvol devices.  Run as root from the repository root:
#
#   W=$(scripts/oracle/make-ozfs-zvol.sh)
#   /work/shared/oracle/vm/openzfs-vm.sh run scripts/oracle/zvol-check.sh \
#       --disk $W/img/ozv.img --env POOL=ozv 2>&1 | tee $W/guest.log
#   sed -n '/^### sums$/,/^### /p' $W/guest.log | sed '1d;$d' | diff $W/host.sums -
#
# The pool `ozv` (256M file, OpenZFS feature flags): `ozv/vol`, 64M, not
# sparse (refreservation as libzfs computes it), 24M of seeded random bytes
# written at offset 1M through /dev/zvol/ozv/vol with direct I/O; `ozv/svol`,
# 32M, sparse, 8K blocks, an ext4 made on it holding a copy of
# /usr/share/doc/bash.  host.sums: the sha256 of each whole device (as the
# guest prints them), made before the export.
set -euo pipefail
OZFS=${OZFS:-$PWD/target/release/ozfs}
W=${1:-$(mktemp -d /var/tmp/ozfs-zvol.XXXXXX)}
mkdir -p "$W/img"
export OZFS_STATE_DIR=$W/state
truncate -s 256M "$W/img/ozv.img"
"$OZFS" zpool create -m none ozv "$W/img/ozv.img" >&2
"$OZFS" zpool export ozv >&2
"$OZFS" zpool import -d "$W/img" ozv >&2
"$OZFS" zfs create -V 64M ozv/vol >&2
"$OZFS" zfs create -s -b 8K -V 32M ozv/svol >&2
for _ in $(seq 100); do [ -b /dev/zvol/ozv/svol ] && break; sleep 0.1; done
python3 -c "
import random, sys
r = random.Random(35)
sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(24 << 20)))
" > "$W/pattern"
dd if="$W/pattern" of=/dev/zvol/ozv/vol bs=1M seek=1 oflag=direct conv=fsync status=none
mkfs.ext4 -q -F /dev/zvol/ozv/svol
mkdir -p "$W/ext4"
mount /dev/zvol/ozv/svol "$W/ext4"
cp -a /usr/share/doc/bash "$W/ext4/"
umount "$W/ext4"
for v in vol svol; do
    echo "$(sha256sum < /dev/zvol/ozv/$v | cut -d' ' -f1)  ozv/$v"
done | sort -k2 > "$W/host.sums"
"$OZFS" zfs get -Hp -o name,property,value volsize,volblocksize,refreservation ozv/vol ozv/svol > "$W/host.props"
"$OZFS" zpool export ozv >&2
pid=$(grep -o "pid [0-9]*" "$W/state/ozfsd.log" | tail -1 | cut -d' ' -f2 || true)
[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
if [ -x /opt/openzfs-2.3/bin/zdb ]; then
    /opt/openzfs-2.3/bin/zdb -e -p "$W/img" -bcc ozv > "$W/zdb-bcc.txt" 2>&1 || true
fi
echo "$W"
