#!/usr/bin/env bash
# The directory-scaling tables of the seed (../shared/seeds/004_*: micro vs
# fat ZAP, zap_micro_max_size) on ozfs, through its FUSE mount:
#   1. create N empty files in one directory (open O_CREAT|O_EXCL, the peer
#      harness's dirscale.c) and look them up (nftw + lstat after export and
#      import: nothing cached), for N = 2047, 16000, 16838, 64000, with the
#      default 128 KiB micro ZAP limit and with OZFS_ZAP_MICRO_MAX_SIZE=1 MiB
#      (large_microzap); OpenZFS's zdb names the form each directory took;
#   2. beyond OpenZFS: 16838 files, all but 1000 removed; the fat ZAP becomes
#      a micro ZAP again (OZFS_ZAP_SHRINK=0 keeps it fat, as OpenZFS does),
#      and listing the 1000 left is timed both ways.
# Prints markdown tables. Root, gcc and a release build of ozfs needed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
oz=$here/target/release/ozfs
zdb=${OZFS_ORACLE_ZDB:-/opt/openzfs-2.3/bin/zdb}
counts=${DIR_COUNTS:-"2047 16000 16838 64000"}
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
work=$(mktemp -d /var/tmp/ozfs-seed.XXXXXX)
bin=$work/dirscale
gcc -O2 -o "$bin" "$here/../shared/bench/src/dirscale.c"
export OZFS_STATE_DIR=$work/state
cleanup() {
    "$oz" zpool export sd >/dev/null 2>&1 || true
    pkill -f "ozfs daemon" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mnt=$work/mnt
# A fresh pool and daemon, the ZAP tunables taken from the environment.
fresh() {
    "$oz" zpool export sd >/dev/null 2>&1 || true
    pkill -f "ozfs daemon" 2>/dev/null || true
    sleep 0.5
    rm -rf "$OZFS_STATE_DIR" "$work/d0" "$mnt"
    mkdir -p "$mnt"
    truncate -s 4G "$work/d0"
    "$oz" zpool create -f -O atime=off -m "$mnt" sd "$work/d0" >/dev/null
}
cycle() { # export, drop the host's caches, import: nothing cached
    "$oz" zpool export sd
    sync
    echo 3 >/proc/sys/vm/drop_caches
    "$oz" zpool import -d "$work" sd
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
rate() { python3 -c 'import sys; print("%.0f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
form() { # the ZAP form of /dir in OpenZFS's zdb (pool exported)
    "$oz" zpool export sd
    local f=?
    if [ -x "$zdb" ]; then
        # The root directory's entry names the object; its dump says
        # "microzap: SIZE bytes" or "Fat ZAP stats".
        f=$("$zdb" -e -p "$work" -dddd sd/ | awk -v e="$1" '
            !obj && $1 == e && $2 == "=" {obj = $3; next}
            obj && $1 == obj && /ZFS directory$/ {on = 1; next}
            on && /microzap:/ {print "micro, " $2 " bytes"; exit}
            on && /Fat ZAP stats/ {print "fat"; exit}')
    fi
    "$oz" zpool import -d "$work" sd
    echo "$f"
}

echo "ozfs $(git -C "$here" rev-parse --short HEAD), $(nproc) cores, $(date -u +%F)"
echo
echo "| N | zap_micro_max_size | create files/s | lookup (cold nftw+lstat) entries/s | ZAP form (OpenZFS zdb) |"
echo "|---|---|---|---|---|"
for micro in 131072 1048576; do
    for n in $counts; do
        export OZFS_ZAP_MICRO_MAX_SIZE=$micro
        fresh
        c=$("$bin" create "$mnt/dir" "$n")
        cycle
        w=$("$bin" walk "$mnt/dir")
        f=$(form dir)
        echo "| $n | $micro | $(rate "$n" "$(field "$c" seconds)") | $(rate "$(field "$w" entries)" "$(field "$w" seconds)") | $f |"
    done
done
unset OZFS_ZAP_MICRO_MAX_SIZE

echo
echo "| after 16838 created, 15838 removed | ZAP form (OpenZFS zdb) | list 1000 cold, entries/s | list 1000 warm, entries/s |"
echo "|---|---|---|---|"
for shrink in 0 1; do
    export OZFS_ZAP_SHRINK=$shrink
    fresh
    "$bin" create "$mnt/dir" 16838 >/dev/null
    (cd "$mnt/dir" && ls -f | grep -v '^\.' | sort | tail -n +1001 | xargs rm -f)
    f=$(form dir)
    cycle
    cold=$("$bin" walk "$mnt/dir")
    best=0
    for _ in 1 2 3 4 5; do
        w=$("$bin" walk "$mnt/dir")
        r=$(rate "$(field "$w" entries)" "$(field "$w" seconds)")
        [ "$r" -gt "$best" ] && best=$r
    done
    label="fat kept (OZFS_ZAP_SHRINK=0, as OpenZFS)"
    [ "$shrink" = 1 ] && label="shrunk (ozfs default)"
    echo "| $label | $f | $(rate "$(field "$cold" entries)" "$(field "$cold" seconds)") | $best |"
done
