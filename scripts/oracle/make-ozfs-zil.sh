#!/bin/bash
# make-ozfs-zil.sh [WORKDIR] — HOST script: make a pool image holding an
# intent log written by ozfs and never replayed, plus the manifests of what
# was made durable, for replay-check.sh to let the real OpenZFS 2.3 replay it
# in the VM.  Run as root (FUSE mounts) from anywhere:
#
#   scripts/oracle/make-ozfs-zil.sh                # work dir /var/tmp/ozfs-zil.XXXXXX
#   W=/var/tmp/ozfs-zil.abc123                     # (the path it prints)
#   /work/shared/oracle/vm/openzfs-vm.sh run scripts/oracle/replay-check.sh \
#       --share scripts/oracle --disk $W/img/POOL.img --env POOL=oz 2>&1 | tee $W/guest.log
#   sed -n '/^### manifest$/,/^### /p' $W/guest.log | sed '1d;$d' | diff $W/host.manifest -
#
# What it does, in a fresh work dir WORKDIR (default mktemp under /var/tmp):
#   1. pool `oz` on a 256M file (ozfs's default pool version: OpenZFS feature
#      flags), private OZFS_STATE_DIR=WORKDIR/state, file systems
#        oz     mountpoint WORKDIR/mnt/oz   (left empty)
#        oz/a   WORKDIR/mnt/a   defaults                       changes + fsync
#        oz/b   WORKDIR/mnt/b   recordsize=16k                 changes + fsync
#        oz/c   WORKDIR/mnt/c   recordsize=16k sync=always     changes, NO fsync
#      then a file `primer` made durable on each (the first log commit of a
#      mount syncs its txg, as OpenZFS's zil_create: done before the window
#      so that it commits nothing of the workload), and waits until that txg
#      has committed (the daemon commits a dirty txg 5 s after its first
#      change).
#   2. WORKDIR/workload.py on each file system: files of 1, 5000, 200000
#      bytes (seeded pseudo-random content), mkdir, nested dirs, symlinks
#      (relative, dangling, nested), hard links, renames within and across
#      directories, of a directory, replacing an existing file, unlink,
#      rmdir, overwrite in the middle (across 16k/128k record boundaries),
#      append, a write far past the end (a hole), os.truncate shrink and
#      grow, chmod (incl. setuid/sticky), chown/lchown to numeric ids, utime,
#      mkfifo, a character device; on oz/a and oz/b each group ends with
#      os.fsync / os.fdatasync of the files it touched and of their
#      directories, on oz/c (sync=always) nothing is fsynced.
#   3. with no export and no unmount, the manifest of every mounted file
#      system (zil-manifest.sh MOUNT DATASET, the same script the guest job
#      runs) into WORKDIR/manifest.<ds> and, concatenated in dataset order,
#      WORKDIR/host.manifest: the state that was made durable.
#   4. kill -9 of this work dir's ozfs daemon (its pid from
#      state/ozfsd.log, only that pid), fusermount -u -z of its mounts, the
#      pool file copied to WORKDIR/img/POOL.img.
#   5. OpenZFS's zdb -e -ivv of the image (WORKDIR/zdb-ivv.txt), the count of
#      TX_ records per type (WORKDIR/tx-counts.txt), and zdb -u's last
#      synced txg: steps 2–4 must fit in the daemon's 5 s txg interval, or
#      the txg commits the changes and the log's records become obsolete
#      (still a valid image, but then OpenZFS skips them); the script warns
#      when any record's txg is not above the last synced txg.
#
# Environment: OZFS (the binary, default target/release/ozfs of this
# repository; not built here), ZDB (default /opt/openzfs-2.3/bin/zdb),
# ZIL_MANIFEST (default zil-manifest.sh next to this script).
set -euo pipefail
export LC_ALL=C
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OZFS=${OZFS:-$REPO/target/release/ozfs}
ZDB=${ZDB:-/opt/openzfs-2.3/bin/zdb}
MANIFEST=${ZIL_MANIFEST:-$HERE/zil-manifest.sh}
[ "$(id -u)" = 0 ] || { echo "needs root (FUSE mounts, chown, mknod)" >&2; exit 2; }
[ -x "$OZFS" ] || { echo "no ozfs binary at $OZFS (cargo build --release -p ozfs)" >&2; exit 2; }
[ -x "$ZDB" ] || { echo "no OpenZFS zdb at $ZDB" >&2; exit 2; }
command -v fusermount >/dev/null || { echo "fusermount missing" >&2; exit 2; }

if [ $# -ge 1 ]; then W=$1; mkdir -p "$W"; else W=$(mktemp -d /var/tmp/ozfs-zil.XXXXXX); fi
W=$(cd "$W" && pwd)
[ ! -e "$W/pool.file" ] || { echo "$W already used" >&2; exit 2; }
export OZFS_STATE_DIR=$W/state
FSLIST="oz oz/a oz/b oz/c"
mp() { case $1 in oz) echo "$W/mnt/oz" ;; *) echo "$W/mnt/${1#oz/}" ;; esac; }
log() { echo "[$(date +%T.%3N)] $*" >&2; }
oz() { timeout 300 "$OZFS" "$@"; }

DPID=
cleanup() {
    local rc=$? ds
    # Only this work dir's daemon, by its pid (checked to still be ozfs).
    if [ -n "$DPID" ] && [ "$(cat /proc/$DPID/comm 2>/dev/null)" = ozfs ]; then
        log "cleanup: kill -9 $DPID"; kill -9 "$DPID" 2>/dev/null || true
    fi
    for ds in $FSLIST; do
        grep -q " $(mp $ds) " /proc/self/mountinfo 2>/dev/null && fusermount -u -z "$(mp $ds)" 2>/dev/null || true
    done
    exit $rc
}
trap cleanup EXIT

T0=$(date +%s.%N)
log "work dir $W"
mkdir -p "$W/mnt" "$W/img"
truncate -s 256M "$W/pool.file"
oz zpool create -m "$(mp oz)" oz "$W/pool.file"
DPID=$(sed -n 's/^ozfs daemon: pid \([0-9]*\) .*/\1/p' "$OZFS_STATE_DIR/ozfsd.log" | tail -1)
[ -n "$DPID" ] && [ "$(cat /proc/$DPID/comm)" = ozfs ] || { echo "no ozfs daemon pid in $OZFS_STATE_DIR/ozfsd.log" >&2; exit 1; }
log "ozfs daemon pid $DPID"
oz zfs create -o mountpoint="$(mp oz/a)" oz/a
oz zfs create -o mountpoint="$(mp oz/b)" -o recordsize=16k oz/b
oz zfs create -o mountpoint="$(mp oz/c)" -o recordsize=16k -o sync=always oz/c
for ds in $FSLIST; do
    for i in $(seq 100); do grep -q " $(mp $ds) " /proc/self/mountinfo && break; sleep 0.1; done
    grep -q " $(mp $ds) " /proc/self/mountinfo || { echo "$ds not mounted at $(mp $ds)" >&2; exit 1; }
done
oz zfs get -H -o name,property,value recordsize,sync,mountpoint,version $FSLIST > "$W/props.txt"
oz zpool get all oz > "$W/pool-props.txt" 2>&1 || true
# Prime each file system's log: the first log commit of a mount creates the
# log and, as OpenZFS's zil_create, waits for that txg to sync, which would
# commit everything changed before it (on every file system) and leave the
# window's records obsolete.  One durable change each (a file `primer`),
# then let that txg commit (5 s after its first change) before the window.
for ds in oz/a oz/b oz/c; do
    python3 - "$(mp $ds)" "$ds" <<'EOF'
import os, sys
root, ds = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(root, "primer"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"made before the window: creates the log\n")
if ds != "oz/c":
    os.fsync(fd)
os.close(fd)
if ds != "oz/c":
    d = os.open(root, os.O_RDONLY); os.fsync(d); os.close(d)
EOF
done
sleep 7

cat > "$W/workload.py" <<'EOF'
# workload.py MOUNT MODE [MOUNT MODE]...   MODE: fsync (each group ends
# with fsync/fdatasync of what it touched) or nosync (sync=always: none).
import os, random, stat, sys

def data(seed, n):
    return random.Random(seed).randbytes(n)

def put(path, b, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, b)
    finally:
        os.close(fd)

def pwrite(path, off, b, flags=0):
    fd = os.open(path, os.O_WRONLY | flags)
    try:
        os.pwrite(fd, b, off) if not flags & os.O_APPEND else os.write(fd, b)
    finally:
        os.close(fd)

def run(root, mode):
    sync = mode == "fsync"
    def fs(*paths, data_only=False):
        if not sync:
            return
        for p in paths:
            fd = os.open(os.path.join(root, p), os.O_RDONLY)
            try:
                (os.fdatasync if data_only else os.fsync)(fd)
            finally:
                os.close(fd)
    J = lambda *p: os.path.join(root, *p)
    tag = os.path.basename(root)
    # 1. files of several sizes
    put(J("one"), b"1")
    put(J("five"), data(tag + "five", 5000))
    put(J("big"), data(tag + "big", 200000))
    put(J("big2"), data(tag + "big2", 200000))
    put(J("grow"), data(tag + "grow", 5000))
    put(J("empty"), b"")
    put(J("victim"), b"to be replaced by a rename\n")
    put(J("doomed"), data(tag + "doomed", 3000))
    fs("one", "five", "big", "big2", "grow", "empty", "victim", "doomed", ".")
    # 2. directories, nested
    os.mkdir(J("d1"))
    os.makedirs(J("d1", "d2", "d3"))
    os.mkdir(J("gone.dir"))
    os.mkdir(J("mv.dir"))
    put(J("d1", "d2", "d3", "deep"), data(tag + "deep", 12345))
    put(J("mv.dir", "inner"), b"inside a directory that moves\n")
    fs("d1/d2/d3/deep", "mv.dir/inner", "d1/d2/d3", "d1/d2", "d1", "gone.dir", "mv.dir", ".")
    # 3. symlinks and hard links
    os.symlink("five", J("ln.five"))
    os.symlink("../../one", J("d1", "d2", "ln.up"))
    os.symlink("no/such/target", J("ln.dangling"))
    os.symlink("x" * 200, J("ln.long"))
    os.link(J("big"), J("d1", "big.hl"))
    os.link(J("one"), J("one.hl"))
    fs("d1/d2", "d1", ".")
    # 4. renames: within a dir, across dirs, a directory, replacing a file
    os.rename(J("five"), J("five.renamed"))
    os.rename(J("one"), J("d1", "d2", "one.moved"))
    os.rename(J("mv.dir"), J("d1", "mv.dir.moved"))
    put(J("d1", "src"), data(tag + "src", 777))
    fs("d1/src")
    os.rename(J("d1", "src"), J("victim"))
    fs("d1/d2", "d1", ".")
    # 5. unlink, rmdir
    os.unlink(J("doomed"))
    os.unlink(J("one.hl"))
    os.rmdir(J("gone.dir"))
    fs(".")
    # 6. overwrite in the middle, append, a write far past the end
    pwrite(J("big"), 16380, data(tag + "mid1", 3000))      # across a 16k boundary
    pwrite(J("big"), 131000, data(tag + "mid2", 2000))     # across the 128k boundary
    pwrite(J("five.renamed"), 0, data(tag + "app", 1234), os.O_APPEND)
    pwrite(J("d1", "d2", "d3", "deep"), 1 << 20, b"after a hole\n")
    fs("big", "five.renamed", data_only=True)
    fs("d1/d2/d3/deep")
    # 7. truncate: shrink, grow
    os.truncate(J("big2"), 50001)
    os.truncate(J("grow"), 300000)
    os.truncate(J("empty"), 7)
    fs("big2", "grow", "empty")
    # 8. chmod, chown, utime
    os.chmod(J("five.renamed"), 0o640)
    os.chmod(J("grow"), 0o4755)
    os.chmod(J("d1", "d2"), 0o1777)
    os.chown(J("big2"), 1234, 5678)
    os.chown(J("d1", "d2", "d3"), 4321, 8765)
    os.chown(J("ln.five"), 2222, 3333, follow_symlinks=False)
    os.utime(J("victim"), ns=(1_000_000_000_123_456_789, 1_500_000_000_987_654_321))
    fs("five.renamed", "grow", "d1/d2", "big2", "d1/d2/d3", "victim", ".")
    # 9. special files
    os.mkfifo(J("fifo"), 0o600)
    os.mknod(J("d1", "chr"), 0o620 | stat.S_IFCHR, os.makedev(1, 3))
    fs("d1", ".")
    # 10. a last mixed group: a file made, renamed over a hard link, chmod'ed
    put(J("last"), data(tag + "last", 40000))
    os.link(J("last"), J("d1", "last.hl"))
    os.rename(J("last"), J("d1", "big.hl"))   # replaces a link of big
    os.chmod(J("d1", "big.hl"), 0o600)
    fs("d1/big.hl", "d1", ".")

args = sys.argv[1:]
for i in range(0, len(args), 2):
    run(args[i], args[i + 1])
EOF

# ---- the window: workload, manifests, kill; all within the 5 s txg interval
TW0=$(date +%s.%N)
python3 "$W/workload.py" "$(mp oz/a)" fsync "$(mp oz/b)" fsync "$(mp oz/c)" nosync
TW1=$(date +%s.%N)
for ds in $FSLIST; do
    bash "$MANIFEST" "$(mp $ds)" "$ds" > "$W/manifest.${ds//\//_}"
done
TW2=$(date +%s.%N)
kill -9 "$DPID"
TW3=$(date +%s.%N)
for i in $(seq 50); do [ -d /proc/$DPID ] || break; sleep 0.1; done
[ ! -d /proc/$DPID ] || { echo "daemon $DPID still there" >&2; exit 1; }
DPID=
for ds in $FSLIST; do fusermount -u -z "$(mp $ds)"; done
cat $(for ds in $FSLIST; do echo "$W/manifest.${ds//\//_}"; done) > "$W/host.manifest"
cp --sparse=always "$W/pool.file" "$W/img/POOL.img"
sha256sum "$W/img/POOL.img" > "$W/img/POOL.img.sha256"
{
    echo "workload   $(echo "$TW1 - $TW0" | bc) s"
    echo "manifests  $(echo "$TW2 - $TW1" | bc) s"
    echo "to kill    $(echo "$TW3 - $TW0" | bc) s (window; the txg interval is 5 s)"
} > "$W/times.txt"

# ---- what OpenZFS's zdb sees in the image
"$ZDB" -e -p "$W/img" -ivv oz > "$W/zdb-ivv.txt" 2>&1 || echo "zdb -ivv exit $?" >> "$W/zdb-ivv.txt"
"$ZDB" -e -p "$W/img" -u oz > "$W/zdb-u.txt" 2>&1 || true
synced=$(awk '$1 == "txg" && $2 == "=" {print $3; exit}' "$W/zdb-u.txt")
# record lines: "TX_TYPE  len N, txg T, seq S" (zdb's per-type summary
# lines, "TX_TYPE  COUNT", are not records)
grep -aoE 'TX_[A-Z_0-9]+ +len +[0-9]+, txg [0-9]+' "$W/zdb-ivv.txt" > "$W/records.txt" || true
ntx=$(wc -l < "$W/records.txt")
{
    echo "# all file systems"
    awk '{print $1}' "$W/records.txt" | sort | uniq -c | sort -rn
    # per dataset: zdb prints "Dataset NAME [ZPL], ..." before each log
    awk '/^Dataset /{ds=$2} match($0, /TX_[A-Z_0-9]+ +len /){t=$1; n[ds" "t]++} END {for (k in n) print k, n[k]}' \
        "$W/zdb-ivv.txt" | sort | awk '$1 != p {print "# " $1; p=$1} {printf "%7d %s\n", $3, $2}'
} > "$W/tx-counts.txt"
old=$(awk -v s="${synced:-0}" '$NF + 0 <= s + 0 {n++} END {print n+0}' "$W/records.txt")
{
    echo "last synced txg (zdb -u): ${synced:-?}"
    echo "TX_ records: $ntx (grep -c TX_: $(grep -ac TX_ "$W/zdb-ivv.txt")); with txg <= last synced (obsolete): $old"
} >> "$W/times.txt"
cat "$W/times.txt" >&2
cat "$W/tx-counts.txt" >&2
[ "$ntx" -gt 0 ] || { echo "no TX_ records in the log" >&2; exit 1; }
[ "$old" = 0 ] || log "WARNING: $old records are older than the last synced txg (window too slow?)"
log "done in $(echo "$(date +%s.%N) - $T0" | bc) s: $W/img/POOL.img"
echo "$W"
