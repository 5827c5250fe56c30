#!/usr/bin/env bash
# The thesis's table 6.1 (issue 7): 128 KiB records filled 25/50/75/100 %,
# each fill stored densely (plain records back to back) and as
# pre-compressed records (sparse: one record per 128 KiB, its block
# `fill` % of it), so both files hold the same physical bytes. Each file is
# read back cold (page cache dropped, a fresh process, ozfs's cache empty)
# through the same raw-read engine, with the window prefetch on and off
# (OZFS_PREFETCH=0: one fetch thread). RUNS runs each, dense and
# pre-compressed alternating; mean, min, max, and the mean of the
# per-pair ratios.
# Prints markdown rows. RECORDS=100000 matches the thesis (13 GB at 100 %).
# Root required (drops the page cache).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
records=${RECORDS:-4096}
runs=${RUNS:-5}
cargo build --release --manifest-path "$here/Cargo.toml" -q --example rawbench -p ozfs
bench="$here/target/release/examples/rawbench"
work=$(mktemp -d /var/tmp/ozfs-rawbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# 2 x (0.25 + 0.5 + 0.75 + 1) x logical, plus room.
dev_mib=$(( records * 128 * 5 / 1024 + 1024 ))
truncate -s ${dev_mib}M "$work/d0"
t0=$(date +%s.%N)
"$bench" write "$work/d0" "$records"
echo "write: $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s" >&2
stats() { # mean min max of the numbers on stdin
  awk '{s+=$1; if(NR==1||$1<mn)mn=$1; if(NR==1||$1>mx)mx=$1} END{printf "%.3f %.3f %.3f", s/NR, mn, mx}'
}
one() { # kind fill prefetch -> "seconds bytes"
  drop
  OZFS_PREFETCH=$3 "$bench" read "$work/d0" "$1-$2"
}
echo "| fill | physical MiB | fetch threads | dense s (min–max) | pre-compressed s (min–max) | pre/dense (mean of pairs) | dense MiB/s | pre MiB/s |"
echo "|---|---|---|---|---|---|---|---|"
for fill in 25 50 75 100; do
  for pf in 1 0; do
    # Dense and pre-compressed alternate, so both see the same device.
    d=""; p=""; r=""
    for _ in $(seq "$runs"); do
      a=$(one dense $fill $pf | cut -d' ' -f1)
      b=$(one pre $fill $pf | cut -d' ' -f1)
      d="$d$a"$'\n'; p="$p$b"$'\n'; r="$r$(awk "BEGIN{print $b / $a}")"$'\n'
    done
    read -r dm dmin dmax <<<"$(printf '%s' "$d" | stats)"
    read -r pm pmin pmax <<<"$(printf '%s' "$p" | stats)"
    read -r rm _ _ <<<"$(printf '%s' "$r" | stats)"
    phys=$(awk "BEGIN{printf \"%.0f\", $records * 131072 * $fill / 100 / 1048576}")
    echo "| $fill % | $phys | $([ $pf = 1 ] && echo "2×CPUs" || echo 1) | $dm ($dmin–$dmax) | $pm ($pmin–$pmax) | $(awk "BEGIN{printf \"%.2f\", $rm}") | $(awk "BEGIN{printf \"%.0f\", $phys / $dm}") | $(awk "BEGIN{printf \"%.0f\", $phys / $pm}") |"
  done
done
