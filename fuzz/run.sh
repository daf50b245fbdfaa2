#!/usr/bin/env bash
# Build the fuzz targets with libFuzzer and SanitizerCoverage on the stable
# toolchain (RUSTC_BOOTSTRAP lets stable rustc take the flags cargo-fuzz
# passes), then run each for SECS seconds (default 60) on its own corpus.
#   fuzz/run.sh [SECS] [TARGET...]
# With cargo-fuzz installed, `RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET` is the same.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(superblock catalog journal data_block rowlog recovery etrace importers)
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --bins --target "$host"
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  cp -n seeds/"$t"/* "corpus/$t"/ 2>/dev/null || true
  echo "== $t: ${secs}s"
  ./target/"$host"/release/"$t" -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" "corpus/$t" 2>&1 | tail -n 12 || echo "== $t: stopped on a finding (see artifacts/$t/)"
done
