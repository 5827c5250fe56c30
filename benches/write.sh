#!/usr/bin/env bash
# Write throughput through the library API against dd on the same filesystem,
# in the same run (issue 3): 1 GiB sequential in 128K records, and 1 MiB random
# writes over 64 files. Both targets end with their data durable (ozfs syncs
# its txgs with flushes; dd uses conv=fsync).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${SIZE_MIB:-1024}
cargo build --release --manifest-path "$here/Cargo.toml" -q --example writebench
bin="$here/target/release/examples/writebench"
work=$(mktemp -d /var/tmp/ozfs-wbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }
for mode in seq rand; do
  rm -f "$work/dev" "$work/dd"
  s=$(date +%s.%N); dd if=/dev/urandom of="$work/src" bs=1M count=$size_mib status=none 2>/dev/null || true; e=$(date +%s.%N)
  s=$(date +%s.%N); dd if="$work/src" of="$work/dd" bs=1M conv=fsync status=none; e=$(date +%s.%N)
  dd_mibs=$(awk "BEGIN{print $size_mib / ($e - $s)}")
  rm -f "$work/dd"
  truncate -s $((size_mib * 2 + 512))M "$work/dev"
  out=$("$bin" $mode "$work/dev" $size_mib)
  oz=$(echo "$out" | awk '{print $(NF-1)}')
  printf '| %s | %s | %s MiB | dd %.0f MiB/s | ozfs %.0f MiB/s | %s |\n' "$(date -u +%F)" "$mode" "$size_mib" "$dd_mibs" "$oz" "$(ratio "$oz" "$dd_mibs")"
  rm -f "$work/src"
done
