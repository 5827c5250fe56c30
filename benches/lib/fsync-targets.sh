# Sourced by benches/pgbench.sh and benches/fsync-lat.sh (issue 34): one
# fresh file system per target on a file of $DEV_SIZE under one work
# directory in /var/tmp, so every target sits on the same host file system.
#
#   ext4     mkfs.ext4 on a loop device over the file (the peer harness's
#            options: -E lazy_itable_init=0,lazy_journal_init=0), default mount
#   zfsfuse  zfs-fuse 0.7.0, a private daemon in its own mount namespace (the
#            recipe of scripts/lib/zfs-fuse.sh and crates/testkit, but keeping
#            the packaged /etc/zfs/zfsrc as a global daemon would read it);
#            `zpool create -f -m MNT POOL FILE`, defaults otherwise
#   ozfs     target/release/ozfs: `zpool create -f -O mountpoint=MNT POOL FILE`
#            with a private OZFS_STATE_DIR; the ozfs daemon (started on demand
#            by the create) mounts it through FUSE, as for a user
#
#   bt_begin NAME              work dir /var/tmp/ozfs-NAME.XXXXXX, EXIT/INT/TERM traps
#   bt_each TARGETS FUNC       FUNC TARGET for each target, each in a child process
#                              whose resources are released when it ends, however it ends;
#                              a failed target is reported and the next one runs
#   bt_setup TARGET            fresh file system mounted at $BT_MNT (set here)
#   in_target CMD...           run CMD where the mount is seen (zfsfuse: nsenter)
#   bt_hold KIND ARGS...       remember a resource; bt_release undoes them, newest first
#   bt_record FILE JSON        append a JSON line: run id, host, load and JSON's keys
#
# Every resource (loop device, mount, daemon, pool, postmaster) is written to
# $BT_WORK/held as soon as it exists; the child's EXIT trap and the script's
# EXIT trap both run bt_release, which is idempotent, so a failure or a
# Ctrl-C anywhere leaves no daemon, mount or loop device behind. A zfs-fuse
# or ozfs daemon started here is stopped here; nothing global is touched.

BT_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BT_OZ=$BT_REPO/target/release/ozfs
DEV_SIZE=${DEV_SIZE:-4G}
BT_WORK=""
BT_MNT=""
BT_TARGET=""
BT_ZPID=""
BT_CHILD=""
BT_RUN_ID=$(date +%Y%m%dT%H%M%S)

bt_log() { echo "[$(date +%T)] $*" >&2; }

# Tools. Debian packages only, installed when missing.
bt_need() {
    local missing=()
    command -v fio >/dev/null || missing+=(fio)
    command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
    command -v nsenter >/dev/null || missing+=(util-linux)
    if [[ " ${BT_TARGETS:-} " == *zfsfuse* ]] && ! command -v zfs-fuse >/dev/null; then missing+=(zfs-fuse); fi
    if [ ${#missing[@]} -gt 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" </dev/null >/dev/null
    fi
    if [[ " ${BT_TARGETS:-} " == *ozfs* ]] && [ ! -x "$BT_OZ" ]; then
        (cd "$BT_REPO" && cargo build --release -p ozfs)
    fi
}

bt_begin() {
    [ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mounts, FUSE daemons)" >&2; exit 2; }
    BT_WORK=$(mktemp -d "/var/tmp/ozfs-$1.XXXXXX")
    chmod 755 "$BT_WORK"          # postgres must traverse it to its data directory
    : > "$BT_WORK/held"
    trap bt_finish EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

bt_hold() { echo "$*" >> "$BT_WORK/held"; }

# Is PID alive and running COMM? (guards against a reused pid)
bt_alive() { [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }

# Signal PID, wait up to SECS for it to go, then SIGKILL it.
bt_kill() {
    local pid=$1 comm=$2 sig=$3 secs=$4 i
    bt_alive "$pid" "$comm" || return 0
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do bt_alive "$pid" "$comm" || return 0; sleep 0.1; done
    bt_log "pid $pid ($comm) still there after ${secs}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do bt_alive "$pid" "$comm" || return 0; sleep 0.1; done
}

bt_mounted() { grep -q " $1 " /proc/self/mountinfo 2>/dev/null; }

bt_undo() {
    local kind=$1 a=${2:-} b=${3:-} i
    case $kind in
    pg) # a postmaster: fast shutdown (SIGINT), then its children and it by force
        if bt_alive "$a" postgres; then
            bt_log "stopping postgres (pid $a)"
            local kids; kids=$(pgrep -P "$a" || true)
            bt_kill "$a" postgres INT 60
            for i in $kids; do bt_kill "$i" postgres KILL 5; done
        fi ;;
    mount)
        if bt_mounted "$a"; then
            for i in 1 2 3 4 5 6 7 8 9 10; do umount "$a" 2>/dev/null && break; sleep 1; done
            bt_mounted "$a" && { bt_log "umount $a refused: lazy unmount"; umount -l "$a" || true; }
        fi ;;
    loop) # a = device, b = its backing file
        if losetup "$a" 2>/dev/null | grep -qF "$b"; then losetup -d "$a" || true; fi ;;
    zfsfuse) # a = daemon pid, b = pool
        if bt_alive "$a" zfs-fuse; then
            if [ -n "$b" ]; then
                for i in $(seq 30); do
                    timeout 120 nsenter -t "$a" -m zpool destroy -f "$b" >/dev/null 2>&1 && break
                    timeout 30 nsenter -t "$a" -m zpool list -H -o name 2>/dev/null | grep -qx "$b" || break
                    sleep 2
                done
            fi
            bt_kill "$a" zfs-fuse TERM 20
        fi ;;
    ozfs) # a = pool, b = state dir
        local pid
        pid=$(sed -n 's/^ozfs daemon: pid \([0-9]*\) listening.*/\1/p' "$b/ozfsd.log" 2>/dev/null | tail -1)
        if bt_alive "$pid" ozfs; then
            OZFS_STATE_DIR=$b timeout 300 "$BT_OZ" zpool destroy -f "$a" >/dev/null 2>&1 ||
                bt_log "ozfs zpool destroy $a failed (the daemon is stopped anyway)"
            bt_kill "$pid" ozfs TERM 60
        fi ;;
    file) rm -f "$a" ;;
    *) bt_log "unknown resource $kind" ;;
    esac
}

bt_release() {
    [ -n "$BT_WORK" ] && [ -s "$BT_WORK/held" ] || return 0
    local lines kind a b
    mapfile -t lines < "$BT_WORK/held"
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        read -r kind a b <<<"${lines[i]}"
        bt_undo "$kind" "$a" "$b" || true
    done
    : > "$BT_WORK/held"
}

bt_finish() {
    local rc=$?
    set +e
    trap - INT TERM
    if [ -n "$BT_CHILD" ] && kill -0 "$BT_CHILD" 2>/dev/null; then
        kill -TERM "$BT_CHILD" 2>/dev/null; wait "$BT_CHILD" 2>/dev/null
    fi
    bt_release
    if [ -n "$BT_WORK" ] && [ -d "$BT_WORK" ]; then
        if [ -n "${KEEP_WORK:-}" ] || [ $rc != 0 ]; then
            find "$BT_WORK" -maxdepth 1 -name '*.img' -delete
            bt_log "logs kept in $BT_WORK"
        else
            rm -rf "$BT_WORK"
        fi
    fi
    exit $rc
}

# bt_each "ext4,zfsfuse,ozfs" FUNC: FUNC TARGET in a child with set -e; the
# child's exit releases what it held. With ROUNDS=N the targets are run in
# turn N times (ext4 zfsfuse ozfs ext4 ...), so that a change of load on a
# shared machine falls on all of them; BT_ROUND is the round, BT_TAG names
# the run's files (TARGET, or TARGET.rN). Failed runs' tags are in BT_FAILED.
BT_FAILED=""
BT_ROUND=1
BT_TAG=""
bt_each() {
    local t r rc rounds=${ROUNDS:-1}
    for t in ${1//,/ }; do
        case $t in ext4|zfsfuse|ozfs) ;; *) echo "unknown target $t" >&2; return 2 ;; esac
    done
    for ((r = 1; r <= rounds; r++)); do
        for t in ${1//,/ }; do
            BT_ROUND=$r
            if [ "$rounds" = 1 ]; then BT_TAG=$t; else BT_TAG=$t.r$r; fi
            (
                set -euo pipefail
                trap bt_release EXIT
                trap 'exit 143' TERM
                BT_TARGET=$t
                "$2" "$t"
            ) &
            BT_CHILD=$!
            rc=0; wait "$BT_CHILD" || rc=$?
            BT_CHILD=""
            if [ $rc != 0 ]; then
                bt_log "$BT_TAG FAILED (exit $rc)"
                BT_FAILED="$BT_FAILED $BT_TAG"
            fi
        done
    done
}

# bt_failed_records FILE WORKLOAD: a JSON line for each failed run, with its
# log's tail, and the tail on stderr.
bt_failed_records() {
    local tag t r err
    for tag in $BT_FAILED; do
        t=${tag%%.*}; r=1; [[ $tag == *.r* ]] && r=${tag##*.r}
        err=$(tail -n 15 "$BT_WORK/$tag.log" 2>/dev/null | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
        bt_record "$1" "{\"workload\":\"$2\",\"target\":\"$t\",\"round\":$r,\"status\":\"failed\",\"error\":$err,\"target_info\":$(bt_info "$t")}"
        echo "=== $tag failed; log tail:" >&2; tail -n 15 "$BT_WORK/$tag.log" >&2 || true
    done
}

# The private zfs-fuse: its own mount namespace, /run/zfs, /var/lock/zfs and
# /etc/zfs (so neither its pools nor its socket meet another daemon's), with
# the packaged zfsrc copied in.
bt_start_zfs_fuse() {
    local d=$BT_WORK/zfsfuse-$BT_TAG i
    mkdir -p "$d"
    cat > "$d/ns.sh" <<'NS'
#!/bin/bash
mount --make-rprivate /
mkdir -p /run/zfs /var/lock/zfs /etc/zfs
[ -f /etc/zfs/zfsrc ] && cp /etc/zfs/zfsrc "$1/zfsrc"
mount -t tmpfs tmpfs /run/zfs; mount -t tmpfs tmpfs /var/lock/zfs; mount -t tmpfs tmpfs /etc/zfs
[ -f "$1/zfsrc" ] && cp "$1/zfsrc" /etc/zfs/zfsrc
exec zfs-fuse --no-daemon
NS
    chmod +x "$d/ns.sh"
    unshare -m --propagation private "$d/ns.sh" "$d" >"$d/zfs-fuse.log" 2>&1 </dev/null &
    BT_ZPID=$!
    bt_hold zfsfuse "$BT_ZPID"
    for i in $(seq 100); do
        timeout 30 nsenter -t "$BT_ZPID" -m zpool list >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "zfs-fuse did not start (see $d/zfs-fuse.log)" >&2
    return 1
}

in_target() {
    if [ "$BT_TARGET" = zfsfuse ]; then
        nsenter -t "$BT_ZPID" -m -- "$@"
    else
        "$@"
    fi
}

bt_setup() {
    local t=$1 img=$BT_WORK/$1.img
    BT_TARGET=$t
    BT_MNT=$BT_WORK/mnt-$t
    mkdir -p "$BT_MNT"
    rm -f "$img"; truncate -s "$DEV_SIZE" "$img"
    bt_hold file "$img"
    case $t in
    ext4)
        local loop
        loop=$(losetup -f --show "$img")
        bt_hold loop "$loop" "$img"
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
        mount "$loop" "$BT_MNT"
        bt_hold mount "$BT_MNT" ;;
    zfsfuse)
        bt_start_zfs_fuse
        local pool=bz$$
        timeout 300 nsenter -t "$BT_ZPID" -m zpool create -f -m "$BT_MNT" "$pool" "$img"
        # replace the daemon's line: destroy this pool before stopping it
        sed -i "s|^zfsfuse $BT_ZPID\$|zfsfuse $BT_ZPID $pool|" "$BT_WORK/held" ;;
    ozfs)
        export OZFS_STATE_DIR=$BT_WORK/ozfs-state-$BT_TAG
        local pool=bo$$
        bt_hold mount "$BT_MNT"      # undone last: a mount the stopped daemon left behind
        bt_hold ozfs "$pool" "$OZFS_STATE_DIR"
        timeout 300 "$BT_OZ" zpool create -f -O mountpoint="$BT_MNT" "$pool" "$img" ;;
    esac
    local i
    for i in $(seq 100); do in_target grep -q " $BT_MNT " /proc/self/mountinfo && break; sleep 0.1; done
    in_target grep -q " $BT_MNT " /proc/self/mountinfo || { echo "$t: $BT_MNT not mounted" >&2; return 1; }
    bt_log "$t: fresh file system on $img ($DEV_SIZE) mounted at $BT_MNT"
}

# What each target is, for the records.
bt_info() {
    case $1 in
    ext4) printf '{"fs":"ext4","kernel":"%s","mkfs":"mkfs.ext4 -E lazy_itable_init=0,lazy_journal_init=0","mount":"defaults","device":"loop device over a %s file"}' \
        "$(uname -r)" "$DEV_SIZE" ;;
    zfsfuse) printf '{"fs":"zfs-fuse","version":"%s","create":"zpool create -f -m MNT POOL FILE","zfsrc":"%s","device":"one %s file vdev"}' \
        "$(dpkg-query -W -f '${Version}' zfs-fuse 2>/dev/null)" \
        "$(grep -v '^#' /etc/zfs/zfsrc 2>/dev/null | grep . | tr '\n' ';')" "$DEV_SIZE" ;;
    ozfs) printf '{"fs":"ozfs","version":"%s","commit":"%s","create":"ozfs zpool create -f -O mountpoint=MNT POOL FILE (mounted by the ozfs daemon)","device":"one %s file vdev"}' \
        "$("$BT_OZ" --version 2>/dev/null)" "$(git -C "$BT_REPO" rev-parse --short HEAD 2>/dev/null)" "$DEV_SIZE" ;;
    esac
}

bt_host() {
    local src fstype
    read -r src fstype < <(findmnt -n -o SOURCE,FSTYPE -T /var/tmp)
    printf '{"nproc":%s,"mem_gib":%s,"kernel":"%s","host_fs":"%s on %s (/var/tmp)","cpu":"%s"}' \
        "$(nproc)" "$(awk '/MemTotal/{printf "%.1f", $2/1048576}' /proc/meminfo)" "$(uname -r)" \
        "$fstype" "$src" "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
}

# Seconds since a `date +%s.%N` stamp.
bt_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# bt_problems [FILE...]: a JSON list of the lines of the target's daemon log
# (zfs-fuse, ozfs) and of FILEs that look like trouble, at most 20.
bt_problems() {
    local logs=("$@")
    case $BT_TARGET in
    zfsfuse) logs+=("$BT_WORK/zfsfuse-$BT_TAG/zfs-fuse.log") ;;
    ozfs) logs+=("$BT_WORK/ozfs-state-$BT_TAG/ozfsd.log") ;;
    esac
    { grep -h -i -E 'error|fail|panic|fatal|warn|abort|corrupt' "${logs[@]}" 2>/dev/null || true; } |
        { grep -v 'LOG:  aborting any active transactions' || true; } |
        head -n 20 | python3 -c 'import json,sys; print(json.dumps([l.rstrip() for l in sys.stdin]))'
}

bt_load() { cut -d' ' -f1-3 /proc/loadavg | tr ' ' ','; }

# bt_record FILE JSON: JSON (an object with workload, target, status, ...)
# gets run_id, ts and host added, and is appended to FILE.
bt_record() {
    python3 - "$1" "$2" "$BT_RUN_ID" "$(bt_host)" <<'PY'
import json, sys, datetime
path, rec, run_id, host = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
out = {"run_id": run_id, "ts": datetime.datetime.now().isoformat(timespec="seconds")}
out.update(rec)
out["host"] = host
with open(path, "a") as f:
    f.write(json.dumps(out) + "\n")
PY
}
