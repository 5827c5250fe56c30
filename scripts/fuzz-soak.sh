#!/usr/bin/env bash
# Long fuzzing soak (not run by CI): the structured campaign of
# crates/cli/tests/fuzz_campaign.rs with many more cases and several seeds,
# then each cargo-fuzz target for a while (needs a nightly toolchain and
# cargo-fuzz, installed here on first use).
#
#   scripts/fuzz-soak.sh [CASES_PER_SEED] [SECONDS_PER_FUZZ_TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-20000}
secs=${2:-300}
for seed in 13 101 4242 90001; do
    echo "==> campaign, seed $seed, $cases image cases and $cases stream cases"
    OZFS_FUZZ_SEED=$seed OZFS_FUZZ_IMAGE_CASES=$cases OZFS_FUZZ_STREAM_CASES=$cases \
        cargo test --release -p ozfs --test fuzz_campaign -- --nocapture
done
if ! command -v cargo-fuzz >/dev/null; then
    rustup toolchain install nightly --profile minimal
    cargo install --locked cargo-fuzz
fi
cd fuzz
for t in $(sed -n 's/^name = "\(.*\)"/\1/p' Cargo.toml | grep -v ozfs-fuzz); do
    echo "==> cargo fuzz run $t ($secs s)"
    cargo +nightly fuzz run "$t" -- -max_total_time="$secs"
done
