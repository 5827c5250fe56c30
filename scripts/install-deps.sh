#!/usr/bin/env bash
# Install the system packages the ozfs test-suite needs (Debian/Ubuntu).
#
# Idempotent: does nothing when everything is already installed, runs
# `apt-get update` only when a package is missing and cannot be found in the
# current package lists.  Safe without a TTY/stdin (CI).
#
# The test harness (crates/testkit) runs its own private zfs-fuse daemon in a
# private mount namespace, with tmpfs over /run/zfs, /var/lock/zfs and
# /etc/zfs, so a system zfs-fuse daemon (started or not by the package's
# postinst) does not interfere.  We still try hard not to start one: a
# temporary policy-rc.d denies service starts during the install.
set -euo pipefail

PKGS=(zfs-fuse fuse attr rsync acl zstd e2fsprogs qemu-utils)

# Cargo tools the tests use: fsx (file-system exerciser, crates.io).
if ! command -v fsx >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/fsx" ]; then
    echo "install-deps: cargo install fsx"
    cargo install --quiet --locked fsx --version 0.3.2 </dev/null || echo "install-deps: fsx could not be installed; the fsx test part will be skipped" >&2
fi

# pjdfstest (POSIX file system test suite, Rust rewrite, crates.io): run
# against an ozfs mount by crates/cli/tests/posix_pjdfstest.rs, see
# docs/POSIX.md. Building it takes a few minutes.
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
    echo "install-deps: cargo install pjdfstest"
    cargo install --quiet --locked pjdfstest --version 0.2.2 </dev/null || echo "install-deps: pjdfstest could not be installed; posix_pjdfstest will fail under CI=true" >&2
fi

# OpenZFS 2.3's own zdb/zstream in user space (beside zfs-fuse, no kernel
# module): the oracle the corpus tests compare ozfs's zdb with. From
# ../shared/oracle next to the checkout; the tests that need it fail under
# CI=true when it is missing.
ORACLE_SCRIPT="$(cd "$(dirname "$0")/.." && pwd)/../shared/oracle/openzfs-userland.sh"
if [ ! -x /opt/openzfs-2.3/bin/zdb ] && [ -f "$ORACLE_SCRIPT" ]; then
    echo "install-deps: OpenZFS 2.3 user-space tools into /opt/openzfs-2.3"
    bash "$ORACLE_SCRIPT" /opt/openzfs-2.3 </dev/null || echo "install-deps: the OpenZFS oracle could not be installed" >&2
fi

# FUSE device node (best effort; normally present).
if [ ! -e /dev/fuse ] && [ "$(id -u)" -eq 0 ]; then
    modprobe fuse 2>/dev/null || true
    [ -e /dev/fuse ] || { mknod -m 0666 /dev/fuse c 10 229 2>/dev/null || true; }
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all present (${PKGS[*]})"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    SUDO=(sudo -n)
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

echo "install-deps: installing ${missing[*]}"

# Deny service starts (zfs-fuse's postinst would start the system daemon)
# unless the machine already has a policy.
POLICY=/usr/sbin/policy-rc.d
policy_created=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    policy_created=1
fi
cleanup() {
    if [ "$policy_created" = 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
trap cleanup EXIT

# Update the package lists only if apt cannot see a candidate for a package.
need_update=0
for p in "${missing[@]}"; do
    cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
        need_update=1
    fi
done
if [ "$need_update" = 1 ]; then
    "${SUDO[@]}" apt-get update -q </dev/null
fi

if ! "${SUDO[@]}" apt-get install "${APT_OPTS[@]}" "${missing[@]}" </dev/null; then
    # Stale lists (404 on a superseded version): refresh once and retry.
    "${SUDO[@]}" apt-get update -q </dev/null
    "${SUDO[@]}" apt-get install "${APT_OPTS[@]}" "${missing[@]}" </dev/null
fi

for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || {
        echo "install-deps: $p failed to install" >&2
        exit 1
    }
done
command -v zfs-fuse >/dev/null || [ -x /usr/sbin/zfs-fuse ] || {
    echo "install-deps: zfs-fuse binary not found after install" >&2
    exit 1
}
echo "install-deps: done"
