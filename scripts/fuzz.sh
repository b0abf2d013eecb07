#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (clang, with ASan and UBSan), replays every seed of fuzz/corpus/<name>/, then fuzzes each
# harness for a bounded time from its seeds. Any crash, sanitizer report, leak, uncaught exception
# other than qkv::Error, allocation over 2 GB or input slower than 10 s fails
# the run; the reproducer's path is printed. Called by scripts/test.sh;
# see docs/testing.md.
#   scripts/fuzz.sh                        # every fuzzer
#   scripts/fuzz.sh tokenize safetensors   # only these
# The harnesses come from the sanitizer build when scripts/sanitize.sh has
# configured one (build-asan/fuzz/, built there), else from a build of their own
# (build-fuzz/).
# Environment: QKV_FUZZ_BUILD_DIR (default: as above), QKV_FUZZ_SECONDS
# (per fuzzer, default 20), QKV_FUZZ_JOBS (fuzzers at once, default nproc),
# QKV_FUZZ_OUT (new corpus entries, logs and crash files; default a new
# temporary directory: the corpora in the repository are never written).
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN_DIR=${QKV_ASAN_BUILD_DIR:-build-asan}
SECONDS_EACH=${QKV_FUZZ_SECONDS:-20}
JOBS=${QKV_FUZZ_JOBS:-$(nproc)}
step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# clang with its sanitizer runtimes and OpenMP.
source scripts/clang_toolchain.sh

# --- Build ---------------------------------------------------------------------
if [[ -z "${QKV_FUZZ_BUILD_DIR:-}" ]] &&
   grep -q '^QKV_BUILD_FUZZERS:BOOL=ON' "$ASAN_DIR/CMakeCache.txt" 2>/dev/null; then
  step "building the fuzzers in the sanitizer build ($ASAN_DIR)"
  fuzz_targets=()
  for f in fuzz/fuzz_*.cc; do f=${f#fuzz/}; fuzz_targets+=("${f%.cc}"); done
  cmake --build "$ASAN_DIR" -j"$(nproc)" --target "${fuzz_targets[@]}"
  BUILD_DIR=$ASAN_DIR/fuzz
else
  BUILD_DIR=${QKV_FUZZ_BUILD_DIR:-build-fuzz}
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    step "configuring the fuzzers in $BUILD_DIR"
    cmake -S fuzz -B "$BUILD_DIR" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  fi
  step "building the fuzzers ($BUILD_DIR)"
  time cmake --build "$BUILD_DIR" -j"$(nproc)"
fi

# --- Run -----------------------------------------------------------------------
if (($#)); then fuzzers=("$@"); else
  fuzzers=()
  for f in fuzz/fuzz_*.cc; do f=${f#fuzz/fuzz_}; fuzzers+=("${f%.cc}"); done
fi
OUT=${QKV_FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/qkv-fuzz.XXXXXX")}
mkdir -p "$OUT"
supp="$PWD/tests/sanitizers"
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:print_summary=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:report_error_type=1:suppressions=$supp/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMP_NUM_THREADS=1

# One fuzzer, in two parts, each leaving its exit status in $OUT/<name>/:
#  seeds: every seed of fuzz/corpus/<name>/ once, whole (the hostile ones are
#         up to 300 KB: 100,000-deep nesting);
#  fuzz:  QKV_FUZZ_SECONDS of fuzzing from the seeds (with fuzz/<name>.dict as
#         libFuzzer's dictionary where there is one), inputs up to 16 KB (larger
#         seeds are cut: inputs of hundreds of KB would make it 100x slower).
#         New inputs go to $OUT/<name>/corpus (libFuzzer writes into the first
#         corpus directory); the repository's seeds are only read.
LIMITS=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048)
run_one() {
  local name=$1 dir="$OUT/$1"
  mkdir -p "$dir/corpus"
  "$BUILD_DIR/fuzz_$name" "${LIMITS[@]}" -artifact_prefix="$dir/seed-" fuzz/corpus/"$name"/* \
      >"$dir/seeds.log" 2>&1 && echo 0 >"$dir/seeds.status" || echo $? >"$dir/seeds.status"
  local dict=()
  [[ -f fuzz/$name.dict ]] && dict=(-dict="fuzz/$name.dict")
  "$BUILD_DIR/fuzz_$name" "${LIMITS[@]}" "${dict[@]}" -max_total_time="$SECONDS_EACH" -max_len=16384 \
      -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" "fuzz/corpus/$name" \
      >"$dir/fuzz.log" 2>&1 && echo 0 >"$dir/fuzz.status" || echo $? >"$dir/fuzz.status"
}

# The sanitizer's report of a failed run: its kind, the first distinct frames,
# the reproducer.
report() {
  local log=$1
  grep -E -m1 -A40 '^==[0-9]+==ERROR|runtime error:|^==[0-9]+== ERROR: libFuzzer|expectation failed|terminate called' "$log" |
    grep -v -E 'fuzzer::|__sanitizer_print_stack_trace|libc.so|libstdc\+\+.so|nptl/|raise.c|abort.c' |
    sed -E 's/^ +#[0-9]+ 0x[0-9a-f]+ in /    /' | awk '!seen[$0]++' | head -10 | cut -c1-200 |
    sed 's/^/    /' || true
  { grep -E '^Running: |Test unit written to' "$log" || true; } | tail -1 |
    sed -E 's/^Running: //; s/^.*Test unit written to //; s/^/    input: /'
}

step "fuzzing: ${fuzzers[*]} (${SECONDS_EACH} s each, $JOBS at a time; output in $OUT)"
for name in "${fuzzers[@]}"; do
  [[ -x "$BUILD_DIR/fuzz_$name" ]] || { echo "no fuzzer $name" >&2; exit 2; }
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  run_one "$name" &
done
wait

failed=()
for name in "${fuzzers[@]}"; do
  dir="$OUT/$name"
  seeds=$(cat "$dir/seeds.status") fuzzed=$(cat "$dir/fuzz.status")
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/fuzz.log" | grep -o '[0-9]*$' || echo "?")
  printf 'fuzz_%-20s seeds %-6s fuzzing %-6s %10s runs\n' "$name" \
    "$( ((seeds == 0)) && echo ok || echo FAILED)" "$( ((fuzzed == 0)) && echo ok || echo FAILED)" "$runs"
  ((seeds == 0)) || { failed+=("$name(seeds)"); report "$dir/seeds.log"; }
  ((fuzzed == 0)) || { failed+=("$name"); report "$dir/fuzz.log"; }
done
if ((${#failed[@]})); then
  step "fuzzers failed: ${failed[*]} (logs and reproducers in $OUT/<name>/)"
  echo "reproduce: $BUILD_DIR/fuzz_<name> <crash file>" >&2
  exit 1
fi
step "fuzzing found nothing"
