#!/usr/bin/env bash
# ozfs's main job on an embedded default. Part 1: zfs-fuse (the reference ZFS)
# builds a file-backed pool with datasets, files, links and a snapshot; ozfs
# finds, imports, lists and copies it out, compared with the original.
# Part 2: ozfs creates its own file-backed pool, mounts a dataset through FUSE,
# it is used with ordinary tools, then exported; zfs-fuse verifies it (zdb)
# and imports it.
# Runs as root on a fresh Debian machine (installs what it needs).
set -euo pipefail
# Root is needed (FUSE mounts, a private zfs-fuse): a user with sudo is
# asked for it; root runs as is (a bare Debian root shell has no sudo).
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo -E bash "$0" "$@"
  fi
  echo "$0: run as root (FUSE mounts and a private zfs-fuse need it)" >&2
  exit 1
fi
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/install-deps.sh"
cargo build --release --manifest-path "$here/Cargo.toml" -q
ozfs="$here/target/release/ozfs"

work=$(mktemp -d /var/tmp/ozfs-demo.XXXXXX)
export OZFS_STATE_DIR="$work/state"
pid=""
cleanup() {
  # The daemon lets go of a pool left imported by a failed run.
  "$ozfs" zpool export own >/dev/null 2>&1 || true
  fusermount -u -z "$work/own/home" 2>/dev/null || true
  fusermount -u -z "$work/own" 2>/dev/null || true
  if [ -n "$pid" ]; then
    timeout 30 nsenter -t "$pid" -m zpool export -f demo >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A private zfs-fuse daemon in its own mount namespace (see crates/testkit).
. "$here/scripts/lib/zfs-fuse.sh"
start_private_zfs_fuse "$work"
pid=$ZFS_FUSE_PID

mkdir -p "$work/dev" "$work/mnt"
truncate -s 128M "$work/dev/a" "$work/dev/b"
echo "== zfs-fuse: zpool create demo mirror a b; datasets, files, a snapshot"
Z zpool create -f -m "$work/mnt" demo mirror "$work/dev/a" "$work/dev/b"
Z zfs create -o compression=gzip-9 demo/docs
m="/proc/$pid/root$work/mnt"
cp -r /usr/share/doc/bash "$m/docs/"
echo "hello from zfs-fuse" > "$m/hello.txt"
ln -s hello.txt "$m/link"
ln "$m/hello.txt" "$m/hardlink"
head -c 5000000 /dev/urandom > "$m/random.bin"
Z zfs snapshot -r demo@first
echo "rewritten after the snapshot" > "$m/hello.txt"
Z zpool export demo

echo "== ozfs zpool import -d $work/dev"
"$ozfs" zpool import -d "$work/dev"
"$ozfs" zpool import -d "$work/dev" -o readonly=on demo
echo "== ozfs zpool status / list, zfs list -t all"
"$ozfs" zpool status demo
"$ozfs" zpool list demo
"$ozfs" zfs list -t all -r demo
echo "== ozfs cp -r demo@first:/ and demo/docs:/ out, compared with zfs-fuse's mount"
"$ozfs" cp -r demo@first:/ "$work/out-first"
"$ozfs" cp -r demo:/ "$work/out-live"
"$ozfs" cp -r demo/docs:/ "$work/out-docs"
cat "$work/out-first/hello.txt" "$work/out-live/hello.txt"
Z zpool import -d "$work/dev" demo
diff -r -x docs "$m" "$work/out-live" && diff -r "$m/docs" "$work/out-docs" && echo "copy-out equals the zfs-fuse mount"

echo
echo "== ozfs zpool create: a new mirror pool on files, mounted through FUSE and used"
Z zpool import -d "$work/dev" demo >/dev/null 2>&1 || true
truncate -s 128M "$work/dev/n0" "$work/dev/n1"
# As with OpenZFS, the new pool is mounted (the ozfs daemon serves it) and so
# is every file system created in it. Version 23, for zfs-fuse to import
# (without -o version=23 ozfs makes a feature-flag pool, as OpenZFS does).
"$ozfs" zpool create -o version=23 -m "$work/own" own mirror "$work/dev/n0" "$work/dev/n1"
"$ozfs" zfs create -o compression=lzjb own/home
for _ in $(seq 100); do grep -q " $work/own/home " /proc/self/mountinfo && break; sleep 0.1; done
cp -r /usr/share/doc/bash "$work/own/home/"
echo "written through the mount" > "$work/own/home/note.txt"
ln -s note.txt "$work/own/home/link"
ls -la "$work/own/home"
cat "$work/own/home/link"
df -h "$work/own/home" | tail -1
"$ozfs" zfs list -r own
"$ozfs" zpool export own
echo "== zfs-fuse checks the pool ozfs wrote: zdb -bcc, then imports it"
Z zdb -e -p "$work/dev" -bcc own | grep -E 'leak|No leaks'
Z zpool import -d "$work/dev" -R "$work/alt" own
diff -r /usr/share/doc/bash "/proc/$pid/root$work/alt$work/own/home/bash" && echo "zfs-fuse sees what was written through the ozfs mount"
Z zpool export own

echo
echo "== ozfs's default pool (feature flags, as OpenZFS makes them), judged by OpenZFS 2.3's zdb"
truncate -s 128M "$work/dev/f0"
mkdir -p "$work/devf" && mv "$work/dev/f0" "$work/devf/f0"
"$ozfs" zpool create -m none feat "$work/devf/f0"
"$ozfs" zfs create -o compression=on feat/docs
"$ozfs" cp -r /usr/share/doc/bash feat/docs:/bash
"$ozfs" zpool get -H -o property,value feature@lz4_compress,feature@hole_birth feat
"$ozfs" zpool export feat
openzfs_zdb=/opt/openzfs-2.3/bin/zdb
if [ -x "$openzfs_zdb" ]; then
  "$openzfs_zdb" -e -p "$work/devf" -bcc feat 2>/dev/null | grep -E 'No leaks|leaked'
else
  echo "(OpenZFS's zdb is not installed: scripts/install-deps.sh installs it)"
fi
