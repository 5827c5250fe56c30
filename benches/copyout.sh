#!/usr/bin/env bash
# Copy-out throughput: zfs-fuse writes a 1 GiB file (128K records, compression
# off, one file device); after export, `ozfs cp` copies it out, and `cat` reads
# the same number of bytes from the backing device file. Both are timed in the
# same run, cold-ish (page cache dropped before each) and warm (second run).
# Prints a markdown table row to append to docs/BENCHMARKS.md. Root required.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${SIZE_MIB:-1024}
"$here/scripts/install-deps.sh" >/dev/null
cargo build --release --manifest-path "$here/Cargo.toml" -q
ozfs="$here/target/release/ozfs"
work=$(mktemp -d /var/tmp/ozfs-bench.XXXXXX)
export OZFS_STATE_DIR="$work/state"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
. "$here/scripts/lib/zfs-fuse.sh"
start_private_zfs_fuse "$work"
pid=$ZFS_FUSE_PID
mkdir -p "$work/dev" "$work/mnt"
truncate -s $((size_mib + 256))M "$work/dev/d0"
Z zpool create -f -O compression=off -O recordsize=128k -m "$work/mnt" bench "$work/dev/d0" >/dev/null 2>&1
head -c $((size_mib * 1024 * 1024)) /dev/urandom > "/proc/$pid/root$work/mnt/big"
Z zpool export bench
"$ozfs" zpool import -d "$work/dev" bench

t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); awk "BEGIN{print $e - $s}"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
bytes=$((size_mib * 1024 * 1024))
for run in cold warm; do
  [ "$run" = cold ] && drop
  tc=$(t sh -c "head -c $bytes '$work/dev/d0' > /dev/null")
  [ "$run" = cold ] && drop
  rm -f "$work/out"
  s=$(date +%s.%N); "$ozfs" cp bench:/big "$work/out"; e=$(date +%s.%N); to=$(awk "BEGIN{print $e - $s}")
  mbc=$(awk "BEGIN{print $size_mib / $tc}"); mbo=$(awk "BEGIN{print $size_mib / $to}")
  printf '| %s | %s | %s MiB | cat %.0f MiB/s | ozfs cp %.0f MiB/s | ratio %.2f |\n' \
    "$(date -u +%F)" "$run" "$size_mib" "$mbc" "$mbo" "$(awk "BEGIN{print $mbo / $mbc}")"
done
