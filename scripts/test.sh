#!/usr/bin/env bash
# Every test, C++ and Python; exits non-zero on any failure.
#   1. C++ unit tests (GoogleTest through CTest)
#   2. the CMake package: install, then build and run the C++ example against it
#   3. the Python module: the wheel (scripts/build_wheel.sh) installed into the venv,
#      then pytest (torch 2.13 parity; test_wheel.py installs it into a fresh venv too)
#   4. the C++ tests again, built with ASan + UBSan (scripts/sanitize.sh, build-asan/)
#   5. the libFuzzer harnesses of fuzz/, a bounded time each (scripts/fuzz.sh; built in 4)
# QKV_SKIP_SANITIZERS=1 skips 4 and 5 (quick local runs; CI runs them),
# QKV_SKIP_FUZZ=1 skips 5 only. See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${QKV_BUILD_DIR:-build}
VENV=${QKV_VENV:-.venv}
step() { printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

step "C++ tests (ctest)"
# nproc tests at once, each with its OpenMP team: threads that spin while
# waiting take the cores from the other tests (passive: 39 -> 25 s on a
# sample of the suite).
OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"

step "CMake package: install, then find_package(qkv) from examples/cpp"
cmake --install "$BUILD_DIR" >/dev/null
cmake -S examples/cpp -B "$BUILD_DIR/example-consumer" -G Ninja \
      -DCMAKE_PREFIX_PATH="$PWD/$BUILD_DIR/install" >/dev/null
cmake --build "$BUILD_DIR/example-consumer" >/dev/null
"$BUILD_DIR/example-consumer/hello_attention" >/dev/null

step "Python module: the wheel (scripts/build_wheel.sh), installed into $VENV"
# Through ccache, as the build of scripts/setup.sh: the library's objects are
# the same. The tests then import the repaired wheel itself, and test_wheel.py
# installs it once more into a fresh environment with nothing but numpy.
rm -rf build/dist
CCACHE_BASEDIR="$PWD" CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache${CMAKE_ARGS:+ $CMAKE_ARGS}" \
  PYTHON="$VENV/bin/python" QKV_DIST=build/dist QKV_NO_BUILD_ISOLATION=1 scripts/build_wheel.sh
wheel=$(ls build/dist/qkv-*.whl)
"$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
step "pytest python/tests"
QKV_WHEEL="$PWD/$wheel" "$VENV/bin/python" -m pytest -q python/tests --durations=15 "$@"

# Both run even when the first fails, so that one CI run shows every finding.
if [[ "${QKV_SKIP_SANITIZERS:-0}" != 1 ]]; then
  failed=()
  start=$SECONDS
  step "C++ tests under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh)"
  scripts/sanitize.sh || failed+=("scripts/sanitize.sh")
  step "sanitizers: $((SECONDS - start)) s"
  if [[ "${QKV_SKIP_FUZZ:-0}" != 1 ]]; then
    start=$SECONDS
    step "fuzzing the parsers (scripts/fuzz.sh)"
    QKV_FUZZ_SECONDS=${QKV_FUZZ_SECONDS:-10} scripts/fuzz.sh || failed+=("scripts/fuzz.sh")
    step "fuzzing: $((SECONDS - start)) s"
  fi
  if ((${#failed[@]})); then
    step "failed: ${failed[*]}"
    exit 1
  fi
fi
step "all tests passed"
