#!/usr/bin/env bash
# Installs what qkv needs (Debian packages, a Python virtual environment with
# pinned packages) and builds it. Quick when everything is already there.
#   scripts/setup.sh            # build the library, the CLI and the C++ tests
# Environment: QKV_BUILD_DIR (default build), QKV_VENV (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(g++ cmake ninja-build pkg-config libgtest-dev libbenchmark-dev libcli11-dev
                 nlohmann-json3-dev libpng-dev libopenblas-openmp-dev libutf8proc-dev python3-venv
                 fortunes ccache
                 libcpp-httplib-dev  # qkv serve
                 libedit-dev         # qkv chat: line editing and history
                 chromium chromium-driver)  # the attention explorer's browser test
BUILD_DIR=${QKV_BUILD_DIR:-build}
VENV=${QKV_VENV:-.venv}

step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# --- Debian packages -----------------------------------------------------------
missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

# --- Python virtual environment with pinned packages ----------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  step "creating the Python virtual environment $VENV"
  python3 -m venv "$VENV"
fi
stamp="$VENV/.qkv-requirements"
if ! cmp -s requirements.txt "$stamp"; then
  step "installing pinned Python packages (requirements.txt)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
  cp requirements.txt "$stamp"
fi

# --- The pretrained model of the sentence-embedding examples and tests ----------
QKV_VENV="$VENV" scripts/fetch_model.sh

# --- Build ---------------------------------------------------------------------
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  step "configuring CMake in $BUILD_DIR"
  # ccache: scripts/test.sh's `pip install .` compiles the same library
  # sources with the same flags, and then takes them from the cache. base_dir
  # (below) lets a clone in another directory take them too.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
        -DCMAKE_INSTALL_PREFIX="$PWD/$BUILD_DIR/install" >/dev/null
fi
step "building (cmake --build $BUILD_DIR)"
# The command lines' paths relative to the clone, for ccache (as sanitize.sh).
CCACHE_BASEDIR="$PWD" cmake --build "$BUILD_DIR" -j"$(nproc)"

# --- `qkv` on PATH in the virtual environment ------------------------------------
# After `. .venv/bin/activate`, `qkv ...` runs this build's binary (the README's
# commands are written so); the wheel installs its own `qkv` the same way.
if [[ -x "$BUILD_DIR/tools/qkv" ]]; then
  ln -sfn "$PWD/$BUILD_DIR/tools/qkv" "$VENV/bin/qkv"
fi
