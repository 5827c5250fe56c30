#!/usr/bin/env bash
# Build and test the whole workspace in release mode (the integration tests
# copy >200 MiB files out of pools; debug builds would be slow).
#
#   scripts/test.sh [extra cargo test args...]
#
# Installs the system dependencies first (zfs-fuse etc., idempotent), needs
# root (the tests run a private zfs-fuse daemon in a mount namespace).
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

cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "==> cargo build --release"
cargo build --workspace --release --all-targets

echo "==> cargo test --workspace --release"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --release --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# Summary: per test binary results plus overall totals.
passed=0
failed=0
ignored=0
while read -r p f i; do
    passed=$((passed + p))
    failed=$((failed + f))
    ignored=$((ignored + i))
done < <(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log")
echo
echo "==> summary"
grep -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^/    /' || true
echo "total: $passed passed, $failed failed, $ignored ignored"
if [ "$status" -ne 0 ]; then
    echo "cargo test failed (exit $status)" >&2
fi
exit "$status"
