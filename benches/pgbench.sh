#!/usr/bin/env bash
# PostgreSQL 15 pgbench on ext4, zfs-fuse and ozfs, one fresh file system
# each, in one run (issue 34: the benchmark that judges a ZFS intent log).
#
#   benches/pgbench.sh                     (root; about 1 minute per target and round)
#
# Per target: a file system on a $DEV_SIZE file in one work directory under
# /var/tmp (benches/lib/fsync-targets.sh says how each is made and mounted);
# initdb a cluster in it (owned by and run as `postgres`, trust auth, C
# locale), start it on a private port with its socket in the work directory
# and no TCP listener, `pgbench -i -s $SCALE`, CHECKPOINT, then
# `pgbench -c $CLIENTS -j $JOBS -T $DURATION` (TPC-B-like; every commit waits
# for its WAL to be fdatasync'ed: fsync, synchronous_commit and
# wal_sync_method are left at their defaults and recorded); stop postgres and
# tear the file system down.
#
# Environment: TARGETS (default ext4,zfsfuse,ozfs), DURATION (20 s), SCALE
# (10), CLIENTS (4), JOBS (2), DEV_SIZE (4G, the same for every target),
# ROUNDS (1; N runs every target N times in turn, the table shows medians),
# PGPORT (a private one), KEEP_WORK=1 keeps the logs, BENCH_RESULTS (a
# directory for the JSON lines instead of docs/bench-results).
# Output: one JSON line per target in docs/bench-results/pgbench-DATE.jsonl
# (status ok or failed with the log's tail; metrics: tps, latency average
# and stddev, transactions, 5 s progress, initdb and pgbench -i times; load
# before and after: the machine is shared), then a table with ozfs/zfs-fuse
# and ozfs/ext4 ratios. Exit 1 if a target failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TARGETS=${TARGETS:-ext4,zfsfuse,ozfs}
DURATION=${DURATION:-20}
SCALE=${SCALE:-10}
CLIENTS=${CLIENTS:-4}
JOBS=${JOBS:-2}
PGPORT=${PGPORT:-$((55000 + $$ % 1000))}
PGBIN=/usr/lib/postgresql/15/bin
BT_TARGETS=${TARGETS//,/ }
. "$here/benches/lib/fsync-targets.sh"

bt_need
[ -x "$PGBIN/postgres" ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 </dev/null >/dev/null
id postgres >/dev/null   # the package makes the user
# The package's own cluster, if it made one, is left alone: ours use their
# own port, socket directory and data directory.

results=${BENCH_RESULTS:-$here/docs/bench-results}
mkdir -p "$results"
out=$results/pgbench-$(date +%F).jsonl
bt_begin pgbench

pg() { in_target runuser -u postgres -- "$@"; }

run() {
    local t=$1 log=$BT_WORK/$BT_TAG.log start data sock t0 t_initdb t_init pid
    start=$(date +%s.%N)
    local load_before; load_before=$(bt_load)
    bt_setup "$t" >>"$log" 2>&1
    data=$BT_MNT/pgdata sock=$BT_WORK/sock-$t
    mkdir -p "$sock"; chown postgres: "$sock"
    touch "$BT_WORK/$BT_TAG-postgres.log"; chown postgres: "$BT_WORK/$BT_TAG-postgres.log"
    in_target install -d -o postgres -g postgres -m 700 "$data"

    t0=$(date +%s.%N)
    pg "$PGBIN/initdb" -D "$data" -U postgres -A trust -E UTF8 --no-locale >>"$log" 2>&1
    t_initdb=$(bt_since "$t0")
    pg "$PGBIN/pg_ctl" -D "$data" -l "$BT_WORK/$BT_TAG-postgres.log" -w -t 300 \
        -o "-p $PGPORT -k $sock -c listen_addresses=''" start >>"$log" 2>&1 || {
        pid=$(in_target head -1 "$data/postmaster.pid" 2>/dev/null || true)
        [ -z "$pid" ] || bt_hold pg "$pid"
        return 1
    }
    pid=$(in_target head -1 "$data/postmaster.pid")
    bt_hold pg "$pid"
    local PSQL=("$PGBIN/psql" -X -q -h "$sock" -p "$PGPORT" -U postgres -d postgres -v ON_ERROR_STOP=1)

    t0=$(date +%s.%N)
    pg "$PGBIN/pgbench" -h "$sock" -p "$PGPORT" -U postgres -i -s "$SCALE" postgres >>"$log" 2>&1
    t_init=$(bt_since "$t0")
    pg "${PSQL[@]}" -c CHECKPOINT >>"$log" 2>&1
    local settings
    settings=$(pg "${PSQL[@]}" -At -c "select json_object_agg(name, setting) from pg_settings where name in
        ('server_version','fsync','synchronous_commit','wal_sync_method','full_page_writes','shared_buffers',
         'wal_buffers','max_wal_size','checkpoint_timeout','commit_delay','wal_level')")

    bt_log "$t: pgbench -c $CLIENTS -j $JOBS -T $DURATION"
    pg "$PGBIN/pgbench" -h "$sock" -p "$PGPORT" -U postgres -c "$CLIENTS" -j "$JOBS" -T "$DURATION" -P 5 \
        postgres > "$BT_WORK/$BT_TAG-pgbench.out" 2>&1 || { cat "$BT_WORK/$BT_TAG-pgbench.out" >>"$log"; return 1; }
    cat "$BT_WORK/$BT_TAG-pgbench.out" >>"$log"
    local du; du=$(in_target du -sm "$data" | cut -f1)
    pg "$PGBIN/pg_ctl" -D "$data" -m fast -t 120 stop >>"$log" 2>&1
    bt_release >>"$log" 2>&1
    local load_after; load_after=$(bt_load)

    local rec
    rec=$(python3 - "$BT_WORK/$BT_TAG-pgbench.out" <<PY
import json, re, sys
txt = open(sys.argv[1]).read()
def num(pat):
    m = re.search(pat, txt)
    return float(m.group(1)) if m else None
prog = [float(x) for x in re.findall(r"progress: [\d.]+ s, ([\d.]+) tps", txt)]
m = {"tps": num(r"tps = ([\d.]+) \(without initial connection time\)"),
     "latency_avg_ms": num(r"latency average = ([\d.]+) ms"),
     "latency_stddev_ms": num(r"latency stddev = ([\d.]+) ms"),
     "transactions": num(r"number of transactions actually processed: (\d+)"),
     "failed_transactions": num(r"number of failed transactions: (\d+)"),
     "initial_connection_ms": num(r"initial connection time = ([\d.]+) ms"),
     "progress_tps_5s": prog,
     "initdb_s": round($t_initdb, 2), "pgbench_init_s": round($t_init, 2),
     "data_dir_mib": $du}
if m["tps"] is None:
    raise SystemExit("no tps in pgbench output")
print(json.dumps({"workload": "pgbench", "target": "$t", "round": $BT_ROUND, "status": "ok", "metrics": m,
    "summary": {"tps": round(m["tps"], 1), "latency_avg_ms": m["latency_avg_ms"]},
    "params": {"scale": $SCALE, "clients": $CLIENTS, "jobs": $JOBS, "duration_s": $DURATION,
               "dev_size": "$DEV_SIZE", "postgres": $settings},
    "problems": $(bt_problems "$BT_WORK/$BT_TAG-postgres.log"),
    "target_info": $(bt_info "$t"),
    "load_before": [$load_before], "load_after": [$load_after],
    "duration_s": $(bt_since "$start")}))
PY
)
    bt_record "$out" "$rec"
    echo "$rec" >> "$BT_WORK/table"
    bt_log "$t: $(grep -E '^(tps|latency average)' "$BT_WORK/$BT_TAG-pgbench.out" | tr '\n' ' ')"
}

bt_each "$TARGETS" run

bt_failed_records "$out" pgbench

echo
echo "pgbench -c $CLIENTS -j $JOBS -T $DURATION, scale $SCALE, $(date +%F), $(nproc) CPUs; results in $out"
python3 - "$BT_WORK/table" <<'PY'
import json, os, statistics, sys
runs = {}
for line in (open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []):
    r = json.loads(line)
    runs.setdefault(r["target"], []).append(r)
med = lambda t, k: statistics.median(r["metrics"][k] for r in runs[t])
def ratio(a, b):
    return "%.2f" % (med(a, "tps") / med(b, "tps")) if a in runs and b in runs else "-"
many = any(len(v) > 1 for v in runs.values())
print("| target | TPS%s | latency avg | x ext4 (TPS) | x zfs-fuse (TPS) | initdb | pgbench -i | load before |"
      % (" (median; each round)" if many else ""))
print("|---|---|---|---|---|---|---|---|")
for t in ("ext4", "zfsfuse", "ozfs"):
    if t in runs:
        each = " (%s)" % ", ".join("%.0f" % r["metrics"]["tps"] for r in runs[t]) if many else ""
        print("| %s | %.0f%s | %.3f ms | %s | %s | %.1f s | %.1f s | %s |"
              % (t, med(t, "tps"), each, med(t, "latency_avg_ms"), ratio(t, "ext4"), ratio(t, "zfsfuse"),
                 med(t, "initdb_s"), med(t, "pgbench_init_s"),
                 " ".join(",".join(map(str, r["load_before"])) for r in runs[t])))
print("ozfs/zfs-fuse = %s, ozfs/ext4 = %s (TPS)" % (ratio("ozfs", "zfsfuse"), ratio("ozfs", "ext4")))
PY
[ -z "$BT_FAILED" ] || { echo "failed:$BT_FAILED (logs kept in $BT_WORK)" >&2; KEEP_WORK=1; exit 1; }
