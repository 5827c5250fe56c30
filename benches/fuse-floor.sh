#!/usr/bin/env bash
# The floor under ozfs's metadata speed on this machine (issue 19): what
# one FUSE round trip costs, and how many round trips a create and a
# listed entry take.
#   benches/fuse-floor.sh [N]        (default N = 20000; needs root)
# Prints, as JSON lines from benches/src/fuse_floor.c:
#   * a read of a missing extended attribute (one GETXATTR round trip)
#     with the caller and the daemon free to run on any CPU, then with
#     both held on CPU 0;
#   * a stat of a missing name (the kernel keeps it as missing: no round
#     trip after the first);
#   * N creates and a warm walk of them, with the FUSE requests each sent
#     (counted with the kernel's fuse tracepoints, Linux 6.15 and later).
# Figures and what they mean: docs/BENCHMARKS.md "Session 18".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
oz=$here/target/release/ozfs
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
n=${1:-20000}
work=$(mktemp -d /tmp/ozfs-floor.XXXXXX)
export OZFS_STATE_DIR=$work/state
tr=/sys/kernel/tracing
cleanup() {
    [ -e "$tr/events/fuse/fuse_request_send/enable" ] &&
        echo 0 > "$tr/events/fuse/fuse_request_send/enable"
    "$oz" zpool destroy -f floor >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
bin=$work/fuse_floor
gcc -O2 -Wall -o "$bin" "$here/benches/src/fuse_floor.c"
truncate -s 4G "$work/dev.img"
"$oz" zpool create -f -m "$work/mnt" floor "$work/dev.img"
daemon=$(pgrep -n -f -- "$oz daemon")
all=0-$(($(nproc) - 1))

touch "$work/mnt/file"
echo "# one round trip, anywhere"
"$bin" xattr "$work/mnt/file" 200000
echo "# one round trip, caller and daemon on CPU 0"
taskset -a -p -c 0 "$daemon" >/dev/null
taskset -c 0 "$bin" xattr "$work/mnt/file" 200000
taskset -a -p -c "$all" "$daemon" >/dev/null
echo "# a missing name, looked up again and again"
"$bin" stat "$work/mnt/missing" 200000

[ -d "$tr/events" ] || mount -t tracefs nodev "$tr" 2>/dev/null || true
traced() {
    if [ -e "$tr/events/fuse/fuse_request_send/enable" ]; then
        echo > "$tr/trace"
        echo 1 > "$tr/tracing_on"
        echo 1 > "$tr/events/fuse/fuse_request_send/enable"
        "$@"
        echo 0 > "$tr/events/fuse/fuse_request_send/enable"
        { grep -o '([A-Z_]*)' "$tr/trace" || true; } | tr -d '()' | sort | uniq -c | sort -rn
    else
        "$@"
        echo "(no fuse tracepoints in this kernel: requests not counted)"
    fi
}
echo 16384 > "$tr/buffer_size_kb" 2>/dev/null || true
echo "# $n creates in one directory, and the requests they sent"
traced "$bin" create "$work/mnt/d" "$n"
echo "# the warm walk of that directory, and its requests"
traced "$bin" walk "$work/mnt/d"
echo "# the walk again, the listing now in the kernel's cache"
traced "$bin" walk "$work/mnt/d"
