#!/usr/bin/env bash
# The peer harness (../shared/bench) on zfs-fuse and ozfs in one run:
#   benches/peer.sh [WORKLOAD...] [run.sh options]
# (default workloads: the speed set of issue 19, dirscale kpios randio seqio).
# Results (jsonl + report + run log) go to docs/bench-results/; the figures
# are copied by hand into docs/BENCHMARKS.md with the machine and date.
# Needs root, the zfs-fuse daemon (started here if it is not running) and a
# release build of ozfs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bench=${BENCH_DIR:-$here/../shared/bench}
oz=$here/target/release/ozfs
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
command -v fio >/dev/null || apt-get install -y -q fio </dev/null
[ $# -gt 0 ] || set -- dirscale kpios randio seqio
# A daemon this script starts is stopped at the end: a global zfs-fuse
# would stand in the way of the tests' private ones.
started=
if ! pgrep -x zfs-fuse >/dev/null; then
    zfs-fuse
    started=1
    sleep 2
fi
stop() { [ -n "$started" ] && pkill -x zfs-fuse || true; }
trap stop EXIT
mkdir -p "$here/docs/bench-results"
export BENCH_RESULTS=$here/docs/bench-results
export PRODUCT_ZPOOL="$oz zpool" PRODUCT_ZFS="$oz zfs"
export OZFS_STATE_DIR=${OZFS_STATE_DIR:-/tmp/ozfs-bench-state}
cd "$bench"
./run.sh "$@" --targets "${TARGETS:-zfsfuse,product}"
