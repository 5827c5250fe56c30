#!/usr/bin/env bash
# Scrub and resilver (issue 5), same run, same backing filesystem:
# - scrub throughput of a two-way mirror filled with FILL_MIB of data, as a
#   fraction of reading the same device files sequentially with dd (page
#   cache dropped before each);
# - resilver time of one side of the mirror, replaced by a fresh file, for
#   the same device size filled to two levels (LOW_MIB and FILL_MIB): the
#   time should follow the data, not the device size.
# Prints markdown rows. Root required (drops the page cache).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dev_mib=${DEV_MIB:-4096}
low_mib=${LOW_MIB:-512}
fill_mib=${FILL_MIB:-2048}
cargo build --release --manifest-path "$here/Cargo.toml" -q
ozfs="$here/target/release/ozfs"
work=$(mktemp -d /var/tmp/ozfs-sbench.XXXXXX)
export OZFS_STATE_DIR="$work/state"
# The pool is served with `ozfs mount` below, not by the daemon.
export OZFS_CREATE_NOMOUNT=1
trap '"$ozfs" zpool destroy sb >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
day=$(date -u +%F)
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }

fill_pool() { # MiB of incompressible files, 256 MiB each
  local left=$1 i=0
  while [ "$left" -gt 0 ]; do
    local n=$((left < 256 ? left : 256))
    head -c ${n}M /dev/urandom > "$work/chunk"
    "$ozfs" cp "$work/chunk" "sb:/f$i"
    left=$((left - n)); i=$((i + 1))
  done
  rm -f "$work/chunk"
}

for mib in $low_mib $fill_mib; do
  rm -f "$work"/d*
  truncate -s ${dev_mib}M "$work/d0" "$work/d1" "$work/d2"
  "$ozfs" zpool create -o ashift=12 sb mirror "$work/d0" "$work/d1"
  fill_pool "$mib"
  alloc=$("$ozfs" zpool list -Hp -o alloc sb)
  # Scrub against dd of both device files (what the scrub must read).
  drop
  s=$(now); "$ozfs" zpool scrub sb; e=$(now)
  scrub_s=$(awk "BEGIN{print $e - $s}")
  drop
  s=$(now)
  dd if="$work/d0" of=/dev/null bs=1M count=$((mib + 64)) skip=4 status=none
  dd if="$work/d1" of=/dev/null bs=1M count=$((mib + 64)) skip=4 status=none
  e=$(now)
  dd_s=$(awk "BEGIN{print $e - $s}")
  scrub_mibs=$(awk "BEGIN{printf \"%.0f\", 2 * $alloc / 1048576 / $scrub_s}")
  dd_mibs=$(awk "BEGIN{printf \"%.0f\", 2 * ($mib + 64) / $dd_s}")
  echo "| $day | scrub, mirror, $mib MiB of data | ${scrub_s%.*}.$(echo "${scrub_s#*.}" | cut -c1-2) s | $scrub_mibs MiB/s | dd $dd_mibs MiB/s | $(ratio "$scrub_mibs" "$dd_mibs") |"
  # Resilver one side onto a fresh device.
  drop
  s=$(now); "$ozfs" zpool replace sb "$work/d1" "$work/d2"; e=$(now)
  res_s=$(awk "BEGIN{printf \"%.2f\", $e - $s}")
  echo "| $day | resilver, ${dev_mib} MiB devices, $mib MiB of data | $res_s s |"
  "$ozfs" zpool destroy sb
done
