#!/usr/bin/env bash
# The main job: install and build what is needed, then walk through the
# tutorial with `qkv demo`. Extra arguments go to `qkv demo` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${QKV_BUILD_DIR:-build}/tools/qkv" demo "$@"
