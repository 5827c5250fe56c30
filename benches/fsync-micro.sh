#!/usr/bin/env bash
# fsync micro-benchmark on one ozfs mount (issue 34): 8 KiB write latency,
# write + fdatasync and overwrite + fdatasync latency from one thread, then
# fsyncs per second from THREADS threads at once (group commit), and the
# same 8 KiB overwrite + fdatasync on a plain host file beside the pool
# (what the host's flush alone costs).
#
#   benches/fsync-micro.sh            (root; about 30 s)
#   OZFS_ZIL=0 benches/fsync-micro.sh (the log off: a txg commit per fsync)
#
# FULL=1 writes the pool file whole first (no sparse regions on the host).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
oz=$here/target/release/ozfs
[ -x "$oz" ] || (cd "$here" && cargo build --release -p ozfs)
W=$(mktemp -d /var/tmp/ozfs-fsync-micro.XXXXXX)
export OZFS_STATE_DIR=$W/state
cleanup() {
    "$oz" zpool export fm >/dev/null 2>&1 || true
    pid=$(grep -o "pid [0-9]*" "$W/state/ozfsd.log" 2>/dev/null | tail -1 | cut -d' ' -f2 || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    fusermount -u -z "$W/mnt" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
if [ "${FULL:-0}" = 1 ]; then
    dd if=/dev/zero of="$W/d0" bs=1M count=1024 status=none
else
    truncate -s 1G "$W/d0"
fi
"$oz" zpool create -m "$W/mnt" fm "$W/d0"
for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo && break; sleep 0.1; done
python3 - "$W/mnt" "$W/host.dat" "${THREADS:-4}" <<'PY'
import os, sys, time, threading
mnt, host, nthreads = sys.argv[1], sys.argv[2], int(sys.argv[3])
buf = b"y" * 8192
fd = os.open(mnt + "/one", os.O_CREAT | os.O_WRONLY, 0o644)
for _ in range(200):
    os.write(fd, buf)
def per(n, f):
    t = time.time()
    for i in range(n):
        f(i)
    return (time.time() - t) / n * 1e6
print("8K write:                %7.1f us" % per(3000, lambda i: os.write(fd, buf)))
print("8K write + fdatasync:    %7.1f us" % per(500, lambda i: (os.write(fd, buf), os.fdatasync(fd))))
print("8K overwrite + fdatasync:%7.1f us" % per(500, lambda i: (os.pwrite(fd, buf, 0), os.fdatasync(fd))))
cnt = [0] * nthreads
def w(k):
    f = os.open(mnt + "/t%d" % k, os.O_CREAT | os.O_WRONLY, 0o644)
    t = time.time()
    while time.time() - t < 5:
        os.write(f, buf); os.fdatasync(f); cnt[k] += 1
ts = [threading.Thread(target=w, args=(k,)) for k in range(nthreads)]
[t.start() for t in ts]; [t.join() for t in ts]
print("%d threads: %.0f write+fdatasync/s in all" % (nthreads, sum(cnt) / 5))
h = os.open(host, os.O_CREAT | os.O_WRONLY, 0o644)
for i in range(256):
    os.pwrite(h, buf, i * 8192)
os.fsync(h)
print("host file 8K overwrite + fdatasync: %7.1f us" % per(1000, lambda i: (os.pwrite(h, buf, (i % 256) * 8192), os.fdatasync(h))))
PY
