# Source this: a private zfs-fuse daemon in its own mount namespace, so it can
# neither disturb nor be disturbed by another zfs-fuse on the machine (the
# same recipe the Rust test harness uses, see crates/testkit).
#
#   start_private_zfs_fuse WORKDIR   # sets ZFS_FUSE_PID; Z runs zpool/zfs/zdb in it
#   Z zpool create ...               # every call has a timeout (ZFS_FUSE_TIMEOUT, 600 s)
#   stop_private_zfs_fuse            # kills it (pools are left as they are)
#
# Its mounts are visible from outside through /proc/$ZFS_FUSE_PID/root/...

ZFS_FUSE_PID=""

start_private_zfs_fuse() {
  local work=$1
  cat > "$work/ns.sh" <<'NS'
#!/bin/bash
mount --make-rprivate /
mkdir -p /run/zfs /var/lock/zfs /etc/zfs
mount -t tmpfs tmpfs /run/zfs; mount -t tmpfs tmpfs /var/lock/zfs; mount -t tmpfs tmpfs /etc/zfs
exec zfs-fuse --no-daemon
NS
  chmod +x "$work/ns.sh"
  unshare -m --propagation private "$work/ns.sh" >"$work/zfs-fuse.log" 2>&1 &
  ZFS_FUSE_PID=$!
  for _ in $(seq 50); do Z zpool list >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "zfs-fuse did not start (see $work/zfs-fuse.log)" >&2
  return 1
}

Z() { timeout "${ZFS_FUSE_TIMEOUT:-600}" nsenter -t "$ZFS_FUSE_PID" -m "$@"; }

stop_private_zfs_fuse() {
  [ -n "$ZFS_FUSE_PID" ] && kill "$ZFS_FUSE_PID" 2>/dev/null || true
}
