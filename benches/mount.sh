#!/usr/bin/env bash
# Through-the-mount benchmarks, ozfs (FUSE) against zfs-fuse, same machine,
# same backing filesystem, same run (issue 4): fio sequential write and read
# of 1 GiB in 1 MiB blocks, 4 KiB random read and write, and creating then
# listing N files in one directory (the directory-scaling load of the seeds).
# Prints markdown rows with ozfs / zfs-fuse ratios. Root required.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${SIZE_MIB:-1024}
rand_s=${RAND_SECONDS:-15}
counts=${DIR_COUNTS:-"2047 16838 64000"}
"$here/scripts/install-deps.sh" >/dev/null
command -v fio >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y fio >/dev/null
cargo build --release --manifest-path "$here/Cargo.toml" -q
ozfs="$here/target/release/ozfs"
work=$(mktemp -d /var/tmp/ozfs-mbench.XXXXXX)
export OZFS_STATE_DIR="$work/state"
# The pool is served with `ozfs mount` below, not by the daemon.
export OZFS_CREATE_NOMOUNT=1
pid=""; mpid=""
cleanup() {
  fusermount -u "$work/omnt" 2>/dev/null || true
  [ -n "$mpid" ] && kill "$mpid" 2>/dev/null
  if [ -n "$pid" ]; then timeout 60 nsenter -t "$pid" -m zpool destroy -f zb >/dev/null 2>&1 || true; kill "$pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
. "$here/scripts/lib/zfs-fuse.sh"
start_private_zfs_fuse "$work"
pid=$ZFS_FUSE_PID
devsize=$((size_mib * 3 + 1024))M
mkdir -p "$work/zdev" "$work/odev" "$work/zmnt" "$work/omnt"
truncate -s $devsize "$work/zdev/d0" "$work/odev/d0"
Z zpool create -f -O atime=off -m "$work/zmnt" zb "$work/zdev/d0" >/dev/null 2>&1
"$ozfs" zpool create -o ashift=12 -O atime=off ob "$work/odev/d0"
"$ozfs" mount ob "$work/omnt" & mpid=$!
for _ in $(seq 100); do grep -q " $work/omnt " /proc/self/mountinfo && break; sleep 0.1; done
zdir="/proc/$pid/root$work/zmnt"
odir="$work/omnt"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fiobw() { fio --output-format=json "$@" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round((j["write"]["bw"]+j["read"]["bw"])/1024,1))'; }
fioiops() { fio --output-format=json "$@" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round(j["write"]["iops"]+j["read"]["iops"]))'; }
declare -A R
for t in z o; do
  d=$([ $t = z ] && echo "$zdir" || echo "$odir")
  R[$t.seqw]=$(fiobw --name=w --filename="$d/seq" --rw=write --bs=1M --size=${size_mib}M --end_fsync=1)
  drop
  R[$t.seqr]=$(fiobw --name=r --filename="$d/seq" --rw=read --bs=1M --size=${size_mib}M)
  rm -f "$d/seq"
  R[$t.rr]=$(fioiops --name=rr --filename="$d/rand" --rw=randread --bs=4k --size=256M --time_based --runtime=$rand_s)
  R[$t.rw]=$(fioiops --name=rw --filename="$d/rand" --rw=randwrite --bs=4k --size=256M --time_based --runtime=$rand_s)
  rm -f "$d/rand"
  for n in $counts; do
    mkdir -p "$d/dir$n"
    R[$t.c$n]=$(python3 - "$d/dir$n" "$n" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
t = time.time()
for i in range(n):
    os.close(os.open(f"{d}/f{i:07d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
c = n / (time.time() - t)
t = time.time()
k = sum(1 for e in os.scandir(d) if e.is_file(follow_symlinks=False) and os.lstat(e.path))
w = k / (time.time() - t)
print(f"{c:.0f} {w:.0f}")
PY
)
  done
done
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }
day=$(date -u +%F)
echo "| $day | seq write 1M | ${R[z.seqw]} MiB/s | ${R[o.seqw]} MiB/s | $(ratio ${R[o.seqw]} ${R[z.seqw]}) |"
echo "| $day | seq read 1M | ${R[z.seqr]} MiB/s | ${R[o.seqr]} MiB/s | $(ratio ${R[o.seqr]} ${R[z.seqr]}) |"
echo "| $day | rand read 4K | ${R[z.rr]} IOPS | ${R[o.rr]} IOPS | $(ratio ${R[o.rr]} ${R[z.rr]}) |"
echo "| $day | rand write 4K | ${R[z.rw]} IOPS | ${R[o.rw]} IOPS | $(ratio ${R[o.rw]} ${R[z.rw]}) |"
for n in $counts; do
  read -r zc zw <<<"${R[z.c$n]}"; read -r oc ow <<<"${R[o.c$n]}"
  echo "| $day | create $n files | $zc/s | $oc/s | $(ratio $oc $zc) |"
  echo "| $day | list $n files | $zw/s | $ow/s | $(ratio $ow $zw) |"
done
