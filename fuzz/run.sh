#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 20) with libFuzzer's seed fixed
# (-seed=1), starting from the committed seeds in fuzz/corpus/TARGET. New inputs libFuzzer
# finds go to fuzz/work/corpus/TARGET (ignored by git), so the seeds stay as committed and
# later runs on the same machine start from what earlier ones found. A crash stops the script
# with libFuzzer's report; the input is saved under fuzz/artifacts/TARGET, and
# `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...` replays it.
#
#   bash fuzz/run.sh [SECONDS]
set -euo pipefail
seconds="${1:-20}"
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: no nightly toolchain; cargo fuzz needs one (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

cargo +nightly fuzz build
for target in $(cargo +nightly fuzz list); do
  echo "== fuzz $target for ${seconds}s"
  work="fuzz/work/corpus/$target"
  mkdir -p "$work"
  cargo +nightly fuzz run "$target" "$work" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -seed=1 -print_final_stats=1
done
