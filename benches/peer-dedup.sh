#!/usr/bin/env bash
# The peer harness's dedup workload (../shared/bench: 240 unique 2 MiB files,
# each written twice, dedup=off then on) on zfs-fuse and ozfs in one run
# (see peer.sh).
exec "$(dirname "$0")/peer.sh" dedup "$@"
