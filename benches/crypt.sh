#!/usr/bin/env bash
# Cost of native encryption (issue 17): `ozfs cp` of one file of random
# bytes into and out of an unencrypted and an aes-256-gcm file system of the
# same pool, in the same run (compression off in both, so the difference is
# sealing and opening: per-block HKDF, AES-GCM, MACs). Prints one table row:
# date, size, MiB/s in and out for each, and the ratios encrypted/plain.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${SIZE_MIB:-1024}
cargo build --release --manifest-path "$here/Cargo.toml" -q --bin ozfs
oz="$here/target/release/ozfs"
work=$(mktemp -d /var/tmp/ozfs-cbench.XXXXXX)
export OZFS_STATE_DIR="$work/state"
trap '"$oz" zpool export cb >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
truncate -s $((size_mib * 3 + 1024))M "$work/dev"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/key.hex"
dd if=/dev/urandom of="$work/src" bs=1M count="$size_mib" status=none
"$oz" zpool create -m none -O compression=off cb "$work/dev"
"$oz" zfs create cb/plain
"$oz" zfs create -o encryption=aes-256-gcm -o keyformat=hex \
  -o keylocation="file://$work/key.hex" cb/enc
t() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); awk "BEGIN{print $size_mib / ($e - $s)}"; }
# Each write starts with the page cache's dirty data written back, so one
# target does not pay for the other's.
settle() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; cat "$work/src" > /dev/null; }
settle; in_e=$(t "$oz" cp -L "file://$work/key.hex" "$work/src" cb/enc:/f)
settle; in_p=$(t "$oz" cp "$work/src" cb/plain:/f)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
out_p=$(t "$oz" cp cb/plain:/f "$work/out")
rm -f "$work/out"
out_e=$(t "$oz" cp -L "file://$work/key.hex" cb/enc:/f "$work/out")
cmp "$work/src" "$work/out"
r() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }
printf '| %s | %s MiB | in: plain %.0f, aes-256-gcm %.0f MiB/s (%s) | out: plain %.0f, aes-256-gcm %.0f MiB/s (%s) |\n' \
  "$(date -u +%F)" "$size_mib" "$in_p" "$in_e" "$(r "$in_e" "$in_p")" "$out_p" "$out_e" "$(r "$out_e" "$out_p")"
