#!/bin/bash
# make-zfsfuse-zil.sh WORKDIR POOL — a pool zfs-fuse (pool version 23) left
# with an unreplayed intent log: a private zfs-fuse daemon
# (scripts/lib/zfs-fuse.sh) creates POOL on WORKDIR/dev/d0 with file system
# POOL/fs, makes changes each made durable by an fsync (50 appends, a
# mkdir, a rename across directories, a symlink, a hard link, a truncate
# and a chmod through the link), lists what was fsynced into
# WORKDIR/expected.txt, then is killed with SIGKILL (no export: its log
# keeps the records). Used by crates/cli/tests/zil.rs; prints nothing else.
set -euo pipefail
work=$1
pool=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/zfs-fuse.sh"
mkdir -p "$work/dev"
start_private_zfs_fuse "$work"
trap 'stop_private_zfs_fuse' EXIT
truncate -s 256M "$work/dev/d0"
Z zpool create -m "/$pool" "$pool" "$work/dev/d0" >/dev/null 2>&1
Z zfs create "$pool/fs"
Z env D="/$pool/fs" python3 - <<'PY'
import os
d = os.environ["D"]
os.mkdir(d + "/dir")
fd = os.open(d + "/dir/f", os.O_CREAT | os.O_WRONLY, 0o644)
for i in range(50):
    os.write(fd, (b"%08d" % i) * 512)
    os.fsync(fd)
os.rename(d + "/dir/f", d + "/g")
os.symlink("g", d + "/s")
os.link(d + "/g", d + "/h")
fd2 = os.open(d, os.O_RDONLY)
os.fsync(fd2)
os.truncate(d + "/h", 1000)
os.chmod(d + "/h", 0o600)
fd3 = os.open(d + "/h", os.O_RDONLY)
os.fsync(fd3)
PY
Z sh -c "cd /$pool/fs && find . | sort && sha256sum g && stat -c '%n %a %s %h' g h s" \
    > "$work/expected.txt"
kill -9 "$ZFS_FUSE_PID"
wait "$ZFS_FUSE_PID" 2>/dev/null || true
trap - EXIT
