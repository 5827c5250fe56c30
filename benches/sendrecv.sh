#!/usr/bin/env bash
# Send and receive throughput (issue 6), same run, same backing filesystem:
# a file system holding SIZE_MIB of incompressible data in 256 MiB files
# plus a tree of small files, snapshotted; then, page cache dropped before
# each step and every command a fresh process (ozfs's block cache cold):
# - read: `ozfs cp -r` of the snapshot to a directory on the same disk
#   (and, separately, reading the files to /dev/null);
# - send: `ozfs zfs send` of the snapshot to a file on the same disk;
# - receive: `ozfs zfs receive` of that file into a second pool.
# Prints markdown rows: seconds, MiB/s, and send/receive as a fraction of
# reading the dataset. Root required (drops the page cache).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${SIZE_MIB:-1024}
cargo build --release --manifest-path "$here/Cargo.toml" -q
ozfs="$here/target/release/ozfs"
work=$(mktemp -d /var/tmp/ozfs-srbench.XXXXXX)
export OZFS_STATE_DIR="$work/state"
trap '"$ozfs" zpool destroy srb >/dev/null 2>&1 || true; "$ozfs" zpool destroy srr >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
day=$(date -u +%F)
secs() { awk "BEGIN{printf \"%.2f\", $2 - $1}"; }
mibs() { awk "BEGIN{printf \"%.0f\", $1 / $2}"; }
ratio() { awk "BEGIN{printf \"%.2f\", $1 / $2}"; }

dev_mib=$((size_mib * 2 + 512))
truncate -s ${dev_mib}M "$work/a0" "$work/b0"
"$ozfs" zpool create -o ashift=12 srb "$work/a0"
"$ozfs" zpool create -o ashift=12 srr "$work/b0"
"$ozfs" zfs create srb/data
left=$size_mib; i=0
while [ "$left" -gt 0 ]; do
  n=$((left < 256 ? left : 256))
  head -c ${n}M /dev/urandom > "$work/chunk"
  "$ozfs" cp "$work/chunk" "srb/data:/f$i"
  left=$((left - n)); i=$((i + 1))
done
rm -f "$work/chunk"
mkdir -p "$work/small"
for d in $(seq 1 20); do
  mkdir -p "$work/small/d$d"
  for f in $(seq 1 100); do head -c $((f * 97)) /dev/urandom > "$work/small/d$d/f$f"; done
done
"$ozfs" cp -r "$work/small" "srb/data:/small"
rm -rf "$work/small"
"$ozfs" zfs snapshot srb/data@b
bytes=$("$ozfs" zfs list -Hp -o refer srb/data@b)
mib=$(awk "BEGIN{print $bytes / 1048576}")

drop; s=$(now); "$ozfs" cp -r srb/data@b:/ "$work/out"; e=$(now)
read_s=$(secs "$s" "$e"); rm -rf "$work/out"
drop; s=$(now); "$ozfs" zfs send srb/data@b > "$work/stream"; e=$(now)
send_s=$(secs "$s" "$e")
stream_mib=$(awk "BEGIN{print $(stat -c %s "$work/stream") / 1048576}")
drop; s=$(now); "$ozfs" zfs receive srr/copy < "$work/stream"; e=$(now)
recv_s=$(secs "$s" "$e")
drop; s=$(now); "$ozfs" zfs send srb/data@b > /dev/null; e=$(now)
send_null_s=$(secs "$s" "$e")

echo "| $day | read (cp -r out), ${mib%.*} MiB | $read_s s | $(mibs "$mib" "$read_s") MiB/s | 1.00 |"
echo "| $day | zfs send to a file | $send_s s | $(mibs "$stream_mib" "$send_s") MiB/s | $(ratio "$read_s" "$send_s") |"
echo "| $day | zfs send to /dev/null | $send_null_s s | $(mibs "$stream_mib" "$send_null_s") MiB/s | $(ratio "$read_s" "$send_null_s") |"
echo "| $day | zfs receive from a file | $recv_s s | $(mibs "$stream_mib" "$recv_s") MiB/s | $(ratio "$read_s" "$recv_s") |"
