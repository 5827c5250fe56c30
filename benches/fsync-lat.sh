#!/usr/bin/env bash
# fsync latency on ext4, zfs-fuse and ozfs, one fresh file system each, in
# one run (issue 34: the benchmark that judges a ZFS intent log).
#
#   benches/fsync-lat.sh                   (root; about 1 minute per target)
#
# The load: fio, one job, iodepth 1, ioengine psync, 4 KiB random writes
# (buffered) over a $FILE_SIZE file with `fsync=1` (an fsync(2) after every
# write), time-based for $RUNTIME seconds. The file is laid out and synced
# by a first fio pass (create_only) and `sync FILE`, so the timed run starts
# with nothing dirty. File systems: benches/lib/fsync-targets.sh (a
# $DEV_SIZE file per target, all in one directory under /var/tmp).
#
# Which of fio's JSON numbers are taken (jobs[0]):
#   iops           write.iops. One job at depth 1 with fsync=1 does write,
#                  fsync, write, fsync...: writes per second of run time are
#                  write+fsync pairs per second.
#   fsync p50/p99  sync.lat_ns.percentile 50 and 99: the time of the fsync(2)
#                  call alone (fio times it apart from the write).
#   write p50/p99  write.clat_ns.percentile 50 and 99: the pwrite(2) alone
#                  (psync is synchronous: completion latency = the call;
#                  buffered, so a copy into the page cache or, for FUSE, the
#                  request to the daemon).
#   write+fsync p50/p99  the sum of the write's and the fsync's percentile.
#                  fio records no per-pair time, and a percentile of a sum is
#                  not the sum of the percentiles, so this is an estimate; it
#                  is close because the fsync is most of the pair.
#   write+fsync mean  write.clat_ns.mean + sync.lat_ns.mean (exact for means).
# Every percentile fio printed (50, 90, 99, 99.9) is kept in the JSON line.
#
# Environment: TARGETS (default ext4,zfsfuse,ozfs), RUNTIME (30 s), ROUNDS
# (1; N runs every target N times in turn, the table shows medians),
# FILE_SIZE (256M), BS (4k), DEV_SIZE (4G, the same for every target),
# KEEP_WORK=1 keeps the logs, BENCH_RESULTS (a directory for the JSON lines
# instead of docs/bench-results).
# Output: one JSON line per target in docs/bench-results/fsync-lat-DATE.jsonl,
# then a table with ozfs/zfs-fuse and ozfs/ext4 ratios. Exit 1 if a target
# failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TARGETS=${TARGETS:-ext4,zfsfuse,ozfs}
RUNTIME=${RUNTIME:-30}
FILE_SIZE=${FILE_SIZE:-256M}
BS=${BS:-4k}
BT_TARGETS=${TARGETS//,/ }
. "$here/benches/lib/fsync-targets.sh"

bt_need
results=${BENCH_RESULTS:-$here/docs/bench-results}
mkdir -p "$results"
out=$results/fsync-lat-$(date +%F).jsonl
bt_begin fsync-lat

run() {
    local t=$1 log=$BT_WORK/$BT_TAG.log start load_before load_after f
    start=$(date +%s.%N)
    load_before=$(bt_load)
    bt_setup "$t" >>"$log" 2>&1
    f=$BT_MNT/fsync-lat.dat
    local job=(--name=fsync-lat "--filename=$f" "--size=$FILE_SIZE" --rw=randwrite "--bs=$BS"
               --ioengine=psync --iodepth=1 --numjobs=1 --fsync=1)
    in_target fio "${job[@]}" --create_only=1 >>"$log" 2>&1
    in_target sync "$f"
    bt_log "$t: fio randwrite $BS fsync=1, ${RUNTIME}s"
    in_target fio "${job[@]}" --time_based "--runtime=$RUNTIME" --percentile_list=50:90:99:99.9 \
        --output-format=json > "$BT_WORK/$BT_TAG-fio.json" 2>>"$log"
    bt_release >>"$log" 2>&1
    load_after=$(bt_load)
    local rec
    rec=$(python3 - "$BT_WORK/$BT_TAG-fio.json" <<PY
import json, sys
txt = open(sys.argv[1]).read()
j = json.loads(txt[txt.index("{"):])["jobs"][0]
if j["error"]:
    raise SystemExit("fio error %d" % j["error"])
w, s = j["write"], j["sync"]["lat_ns"]
us = lambda ns: round(ns / 1000, 1)
wp = {k.split(".")[0] if k.endswith(".000000") else k.rstrip("0"): us(v) for k, v in w["clat_ns"]["percentile"].items()}
sp = {k.split(".")[0] if k.endswith(".000000") else k.rstrip("0"): us(v) for k, v in s["percentile"].items()}
m = {"iops": round(w["iops"], 1), "writes": w["total_ios"], "fsyncs": j["sync"]["total_ios"],
     "pair_p50_us": round(wp["50"] + sp["50"], 1), "pair_p99_us": round(wp["99"] + sp["99"], 1),
     "pair_mean_us": us(w["clat_ns"]["mean"] + s["mean"]),
     "fsync_p50_us": sp["50"], "fsync_p99_us": sp["99"], "fsync_mean_us": us(s["mean"]),
     "fsync_max_us": us(s["max"]), "fsync_percentiles_us": sp,
     "write_p50_us": wp["50"], "write_p99_us": wp["99"], "write_mean_us": us(w["clat_ns"]["mean"]),
     "write_percentiles_us": wp, "runtime_ms": j["job_runtime"],
     "usr_cpu": j["usr_cpu"], "sys_cpu": j["sys_cpu"]}
print(json.dumps({"workload": "fsync-lat", "target": "$t", "round": $BT_ROUND, "status": "ok", "metrics": m,
    "summary": {k: m[k] for k in ("iops", "pair_p50_us", "pair_p99_us", "fsync_p50_us", "fsync_p99_us")},
    "params": {"bs": "$BS", "file_size": "$FILE_SIZE", "runtime_s": $RUNTIME, "dev_size": "$DEV_SIZE",
               "fio": "$(fio --version) ${job[*]:2} --time_based"},
    "problems": $(bt_problems),
    "target_info": $(bt_info "$t"),
    "load_before": [$load_before], "load_after": [$load_after],
    "duration_s": $(bt_since "$start")}))
PY
)
    bt_record "$out" "$rec"
    echo "$rec" >> "$BT_WORK/table"
    bt_log "$t: $(echo "$rec" | python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"])')"
}

bt_each "$TARGETS" run

bt_failed_records "$out" fsync-lat

echo
echo "fio $BS randwrite, fsync=1, 1 job, iodepth 1, $FILE_SIZE file, ${RUNTIME}s, $(date +%F), $(nproc) CPUs; results in $out"
python3 - "$BT_WORK/table" <<'PY'
import json, os, statistics, sys
runs = {}
for line in (open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []):
    r = json.loads(line)
    runs.setdefault(r["target"], []).append(r)
med = lambda t, k: statistics.median(r["metrics"][k] for r in runs[t])
def ratio(k, a, b):
    return "%.2f" % (med(a, k) / med(b, k)) if a in runs and b in runs else "-"
many = any(len(v) > 1 for v in runs.values())
print("| target | IOPS%s | write+fsync p50 | p99 | fsync p50 | fsync p99 | write p50 | IOPS x ext4 | IOPS x zfs-fuse | load before |"
      % (" (median; each round)" if many else ""))
print("|---|---|---|---|---|---|---|---|---|---|")
for t in ("ext4", "zfsfuse", "ozfs"):
    if t in runs:
        each = " (%s)" % ", ".join("%.0f" % r["metrics"]["iops"] for r in runs[t]) if many else ""
        print("| %s | %.0f%s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.1f µs | %s | %s | %s |"
              % (t, med(t, "iops"), each, med(t, "pair_p50_us"), med(t, "pair_p99_us"), med(t, "fsync_p50_us"),
                 med(t, "fsync_p99_us"), med(t, "write_p50_us"), ratio("iops", t, "ext4"), ratio("iops", t, "zfsfuse"),
                 " ".join(",".join(map(str, r["load_before"])) for r in runs[t])))
for k in ("iops", "pair_p50_us", "pair_p99_us"):
    print("%s: ozfs/zfs-fuse = %s, ozfs/ext4 = %s" % (k, ratio(k, "ozfs", "zfsfuse"), ratio(k, "ozfs", "ext4")))
PY
[ -z "$BT_FAILED" ] || { echo "failed:$BT_FAILED (logs kept in $BT_WORK)" >&2; KEEP_WORK=1; exit 1; }
