#!/usr/bin/env bash
# Run pjdfstest (cargo install pjdfstest) against a fresh ozfs mount, or
# against an ext4 loop image (tmpfs if loop devices are unavailable) for the
# baseline. Needs root. See docs/POSIX.md.
#
#   scripts/pjdfstest.sh [ozfs|ext4] [pjdfstest test patterns...]
#
# ozfs: builds the release binary, creates a 256 MiB single-device pool with
# `ozfs zpool create`, serves it with `ozfs mount`, runs the suite, unmounts
# and exports the pool. Prints pjdfstest's output (failures with reasons)
# and its summary line.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$(pwd)
target=${1:-ozfs}
[ $# -gt 0 ] && shift
cfg="$repo/scripts/pjdfstest.toml"
pjd=$(command -v pjdfstest || echo "$HOME/.cargo/bin/pjdfstest")
[ -x "$pjd" ] || { echo "pjdfstest is not installed: cargo install pjdfstest (or scripts/install-deps.sh)" >&2; exit 1; }

work=$(mktemp -d /var/tmp/ozfs-pjdfstest.XXXXXX)
chmod 755 "$work"   # the suite switches to unprivileged users
mnt="$work/mnt"
second="$work/second"   # another file system for the EXDEV cases
mkdir -p "$mnt" "$second"
pid=
cleanup() {
    if mountpoint -q "$mnt"; then
        if [ "$target" = ozfs ]; then fusermount -u "$mnt" || true; else umount "$mnt" || true; fi
    fi
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

case "$target" in
ozfs)
    cargo build --release --bin ozfs >&2
    oz="$repo/target/release/ozfs"
    export OZFS_STATE_DIR="$work/state"
    # The pool is served with `ozfs mount` below, not by the daemon.
    export OZFS_CREATE_NOMOUNT=1
    mkdir -p "$work/devs" "$OZFS_STATE_DIR"
    truncate -s 256M "$work/devs/d0"
    pool="pjd$$"
    "$oz" zpool create -f -m "$work/pmnt" "$pool" "$work/devs/d0"
    "$oz" mount "$pool" "$mnt" >"$work/mount.log" 2>&1 &
    pid=$!
    ;;
ext4)
    truncate -s 512M "$work/ext4.img"
    mkfs.ext4 -q -F "$work/ext4.img"
    if ! mount -o loop "$work/ext4.img" "$mnt"; then
        echo "pjdfstest.sh: no loop device, using tmpfs" >&2
        mount -t tmpfs tmpfs "$mnt"
    fi
    ;;
*)
    echo "usage: $0 [ozfs|ext4] [patterns...]" >&2
    exit 2
    ;;
esac
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$work/mount.log" >&2 || true; echo "not mounted" >&2; exit 1; }

status=0
start=$(date +%s)
"$pjd" -c "$cfg" -p "$mnt" -s "$second" "$@" || status=$?
echo "pjdfstest on $target: $(( $(date +%s) - start )) s"

if [ "$target" = ozfs ]; then
    fusermount -u "$mnt"
    wait "$pid"
    pid=
    if [ -s "$work/mount.log" ]; then echo "ozfs mount printed:" >&2; cat "$work/mount.log" >&2; fi
    "$oz" zpool export "$pool"
fi
exit "$status"
