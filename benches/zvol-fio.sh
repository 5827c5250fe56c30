#!/usr/bin/env bash
# Volumes against files (issue 35): fio on an ozfs volume's block device
# (the loop device over its FUSE file, /dev/zvol/POOL/VOL), on a file in
# an ozfs file system of the same pool, and on a plain file beside the
# pool's backing file (the host: what the disk under both gives), in one
# run.
#
#   benches/zvol-fio.sh            (root; about 4 minutes)
#
# Loads (fio, time-based, $RUNTIME seconds each, one job):
#   randwrite  4 KiB random writes, libaio iodepth 16, direct I/O
#   randread   4 KiB random reads, libaio iodepth 16, direct I/O
#   seqwrite   1 MiB sequential writes, libaio iodepth 4, direct I/O,
#              end_fsync
#   seqread    1 MiB sequential reads, libaio iodepth 4, direct I/O
# over a $SIZE region (the volume is $SIZE; the files are laid out first
# and synced). Caches are dropped before each read load. Numbers: fio's
# jobs[0] read or write iops and bw (MiB/s) and clat p50/p99.
#
# Environment: RUNTIME (20), SIZE (1G), DEV_SIZE (4G: the pool's sparse
# file under /var/tmp), BENCH_RESULTS (a directory for the JSON lines
# instead of docs/bench-results).
# Output: one JSON line per (target, load) in
# docs/bench-results/zvol-fio-DATE.jsonl, then a table with the volume's
# ratios to the file in ozfs and to the host file.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
oz=$here/target/release/ozfs
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
RUNTIME=${RUNTIME:-20}
SIZE=${SIZE:-1G}
DEV_SIZE=${DEV_SIZE:-4G}
out_dir=${BENCH_RESULTS:-$here/docs/bench-results}
mkdir -p "$out_dir"
day=$(date +%F)
run_id=$(date +%Y%m%dT%H%M%S)
json=$out_dir/zvol-fio-$day.jsonl
W=$(mktemp -d /var/tmp/ozfs-zvol-fio.XXXXXX)
export OZFS_STATE_DIR=$W/state
pool=zvf$$
cleanup() {
    "$oz" zpool export "$pool" >/dev/null 2>&1 || true
    pid=$(grep -o "pid [0-9]*" "$W/state/ozfsd.log" 2>/dev/null | tail -1 | cut -d' ' -f2 || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    fusermount -u -z "$W/mnt" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
truncate -s "$DEV_SIZE" "$W/d0"
"$oz" zpool create -m "$W/mnt" "$pool" "$W/d0"
"$oz" zpool export "$pool"
"$oz" zpool import -d "$W" "$pool"
"$oz" zfs create -V "$SIZE" "$pool/vol"
for _ in $(seq 100); do [ -b "/dev/zvol/$pool/vol" ] && break; sleep 0.1; done
dev=$(readlink -f "/dev/zvol/$pool/vol")
fsfile=$W/mnt/data
hostfile=$W/host.data
for f in "$fsfile" "$hostfile"; do
    fio --name=layout --filename="$f" --size="$SIZE" --rw=write --bs=1M \
        --create_only=0 --end_fsync=1 --output=/dev/null
done
load="$(uptime | sed 's/.*load average: //')"
declare -A RES
run() { # target file load
    local target=$1 file=$2 name=$3 args
    case $name in
    randwrite) args=(--rw=randwrite --bs=4k --iodepth=16) ;;
    randread) args=(--rw=randread --bs=4k --iodepth=16) ;;
    seqwrite) args=(--rw=write --bs=1M --iodepth=4 --end_fsync=1) ;;
    seqread) args=(--rw=read --bs=1M --iodepth=4) ;;
    esac
    sync
    echo 3 >/proc/sys/vm/drop_caches
    local o
    o=$(fio --name="$name" --filename="$file" --size="$SIZE" --direct=1 \
        --ioengine=libaio --time_based --runtime="$RUNTIME" "${args[@]}" \
        --output-format=json 2>/dev/null)
    python3 - "$target" "$name" "$run_id" "$load" "$o" "$json" <<'PY'
import json, sys
target, name, run_id, load, out, path = sys.argv[1:]
# fio may print notes before its JSON.
j = json.loads(out[out.index("{"):])["jobs"][0]
side = "read" if "read" in name else "write"
s = j[side]
pct = s.get("clat_ns", {}).get("percentile", {})
m = {
    "iops": round(s["iops"], 1),
    "bw_mib_s": round(s["bw_bytes"] / 1048576, 1),
    "clat_p50_us": round(pct.get("50.000000", 0) / 1000, 1),
    "clat_p99_us": round(pct.get("99.000000", 0) / 1000, 1),
}
line = {"run_id": run_id, "workload": "zvol-fio", "target": target, "load_name": name,
        "status": "ok", "metrics": m, "load_before": load}
open(path, "a").write(json.dumps(line) + "\n")
print("%s %s %s" % (target, name, json.dumps(m)))
PY
}
for name in randwrite randread seqwrite seqread; do
    run volume "$dev" "$name"
    run ozfs-file "$fsfile" "$name"
    run host-file "$hostfile" "$name"
done
python3 - "$json" "$run_id" <<'PY'
import json, sys
path, run_id = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if json.loads(l).get("run_id") == run_id]
get = lambda t, n: next(r["metrics"] for r in rows if r["target"] == t and r["load_name"] == n)
print("| load | volume | file in ozfs | host file | volume / ozfs file | volume / host |")
print("|---|---|---|---|---|---|")
for n in ["randwrite", "randread", "seqwrite", "seqread"]:
    key = "iops" if n.startswith("rand") else "bw_mib_s"
    unit = "IOPS" if key == "iops" else "MiB/s"
    v, f, h = get("volume", n)[key], get("ozfs-file", n)[key], get("host-file", n)[key]
    print("| %s | %.0f %s (p99 %.0f us) | %.0f | %.0f | %.2f | %.2f |" % (
        n, v, unit, get("volume", n)["clat_p99_us"], f, h, v / f if f else 0, v / h if h else 0))
PY
