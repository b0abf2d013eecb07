#!/usr/bin/env bash
# Builds llama.cpp's own C++ tools (llama-bench, llama-server, llama-cli) once, from the
# source that llama-cpp-python==0.3.36 carries in vendor/llama.cpp (the same llama.cpp the
# Python peer of bench/decode_vs_llamacpp.py runs), with -DGGML_NATIVE=ON, into a cache
# folder, and prints the folder of the binaries. Quick when they are already there.
#   bench/build_llama_cpp.sh                  # -> ~/.cache/qkv-peers/llama.cpp-0.3.36/bin
#   QKV_PEERS_CACHE=/elsewhere bench/build_llama_cpp.sh
# Takes about 15 minutes on two cores. The bench scripts take the binaries' paths
# (--llama-bench, --llama-server); ik_llama.cpp is built the same way from its own source
# (github.com/ikawrakow/ik_llama.cpp): bench/build_llama_cpp.sh --source DIR --name ik_llama.cpp
# --cmake -DGGML_IQK_FA_ALL_QUANTS=OFF (its flash-attention kernels for f16/q8_0 caches only,
# the caches both engines use here; all quants take hours of two cores). --cmake passes
# any option on to llama.cpp's CMake.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36
NAME=llama.cpp-$VERSION
SOURCE=""
EXTRA=()
while (($#)); do
  case "$1" in
    --source) SOURCE=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --cmake) EXTRA+=("$2"); shift 2 ;;
    *) echo "build_llama_cpp.sh: unknown argument '$1' (expected --source DIR, --name NAME," \
         "--cmake -DOPTION=VALUE)" >&2
       exit 2 ;;
  esac
done
CACHE=${QKV_PEERS_CACHE:-$HOME/.cache/qkv-peers}
DEST=$CACHE/$NAME
VENV=${QKV_VENV:-.venv}
step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

if [[ -x "$DEST/bin/llama-bench" && -x "$DEST/bin/llama-server" ]]; then
  echo "$DEST/bin"
  exit 0
fi
mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [[ -z "$SOURCE" ]]; then
  step "downloading llama-cpp-python==$VERSION's source (it carries llama.cpp)"
  # Only this package from source: its build tools come as wheels, from the venv.
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-build-isolation \
    --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -d "$work"
  tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  SOURCE=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
fi
[[ -f "$SOURCE/CMakeLists.txt" ]] || { echo "build_llama_cpp.sh: no CMakeLists.txt in $SOURCE" >&2; exit 1; }
step "building llama-bench, llama-server and llama-cli from $SOURCE (native flags) into $DEST"
cmake -S "$SOURCE" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON "${EXTRA[@]}" >&2
cmake --build "$work/build" -j"$(nproc)" --target llama-bench llama-server llama-cli >&2
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial/bin"
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-server" "$work/build/bin/llama-cli" \
  "$DEST.partial/bin/"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"  # appears whole or not at all
echo "$DEST/bin"
