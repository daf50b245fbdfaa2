#!/usr/bin/env bash
# Build the fuzz targets with libFuzzer and SanitizerCoverage on the stable
# toolchain (RUSTC_BOOTSTRAP lets stable rustc take the flags cargo-fuzz
# passes), then run each for SECS seconds (default 60) on its own corpus.
#   fuzz/run.sh [--cpu] [SECS] [TARGET...]
# With --cpu, SECS counts the fuzzer's own CPU time (user + system, read from
# /proc), not wall time: on a shared machine a run at `nice -n 19` then still
# gets the CPU minutes it was given. Every run ends with the CPU seconds used.
# With cargo-fuzz installed, `RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET` is the same.
set -euo pipefail
cd "$(dirname "$0")"
cpu=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(superblock catalog journal data_block rowlog recovery etrace importers hotset)
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros.
host=$(rustc -vV | sed -n 's/^host: //p')
cargo build --release --bins --target "$host"
tick=$(getconf CLK_TCK)

# CPU seconds (user + system) of process $1 and its waited-for children.
cpu_of() {
  awk -v t="$tick" '{ print int(($14 + $15 + $16 + $17) / t) }' "/proc/$1/stat" 2>/dev/null || echo 0
}

for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  cp -n seeds/"$t"/* "corpus/$t"/ 2>/dev/null || true
  if [ $cpu = 1 ]; then limit=0; echo "== $t: ${secs} CPU seconds"; else limit=$secs; echo "== $t: ${secs}s"; fi
  log=$(mktemp)
  ./target/"$host"/release/"$t" -max_total_time="$limit" -print_final_stats=1 \
    -artifact_prefix="artifacts/$t/" "corpus/$t" >"$log" 2>&1 &
  pid=$!
  used=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    now=$(cpu_of "$pid")
    [ "$now" -gt 0 ] && used=$now
    if [ $cpu = 1 ] && [ "$used" -ge "$secs" ]; then kill -INT "$pid" 2>/dev/null || true; fi
  done
  if wait "$pid"; then status=ok; else status=$?; fi
  tail -n 12 "$log"
  rm -f "$log"
  echo "== $t: ${used} CPU seconds, exit ${status}"
  ls artifacts/"$t"/ 2>/dev/null | grep -q . && echo "== $t: findings in artifacts/$t/" || true
done
