#!/usr/bin/env bash
# What a dedup table costs in memory: 1 GiB of unique data in 1 KiB records
# (a million blocks, a million table entries) written with `ozfs cp` into a
# file system with dedup=on and with dedup=off, then a second GiB into the
# table that already holds a million entries, then 1 MiB (a thousand new
# entries) into the table of two million; the peak resident set of each
# `ozfs cp` (getrusage, VmHWM) and its time. Not run by CI.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
oz=$here/target/release/ozfs
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
work=${WORK:-/var/tmp/ozfs-dedup-mem}
rm -rf "$work"; mkdir -p "$work"
export OZFS_STATE_DIR=$work/state OZFS_CREATE_NOMOUNT=1
blocks=${BLOCKS:-1048576}
head -c $((blocks * 1024)) /dev/urandom > "$work/one.bin"
head -c $((blocks * 1024)) /dev/urandom > "$work/two.bin"
head -c $((1024 * 1024)) /dev/urandom > "$work/small.bin"
peak() { # label, command...: prints "label: peak RSS MiB, seconds"
    local label=$1; shift
    local t0=$(date +%s.%N)
    /usr/bin/time -f "%M" -o "$work/rss" "$@"
    local t1=$(date +%s.%N)
    printf '%-34s peak RSS %6d MiB  %6.1f s\n' "$label" $(( $(cat "$work/rss") / 1024 )) "$(echo "$t1 - $t0" | bc)"
}
for mode in off on; do
    truncate -s 8G "$work/d-$mode.img"
    "$oz" zpool create -O recordsize=1K -O dedup=$mode -O compression=off m$mode "$work/d-$mode.img"
    peak "dedup=$mode, first GiB" "$oz" cp "$work/one.bin" "m$mode:/one"
        peak "dedup=$mode, second GiB" "$oz" cp "$work/two.bin" "m$mode:/two"
    peak "dedup=$mode, then 1 MiB" "$oz" cp "$work/small.bin" "m$mode:/small"
    "$oz" zpool list -H -o name,alloc,dedup "m$mode"
    [ "$mode" = on ] && "$oz" zpool status -D "m$mode" | grep "dedup:"
    "$oz" zpool export "m$mode"
done
rm -rf "$work"
