"""docs/errors.md against what qkv says: every message it quotes after an
exception name (or `qkv <command>: error:`) is produced here by the input of
its row, and every command of its ```console blocks is run with the `qkv`
binary, its stderr and exit code compared. `…` in the page stands for any text.

A row whose message has no reproduction below fails, as does a reproduction
whose row is gone: the page and this file change together.
"""

import os
import pathlib
import re
import shlex
import subprocess

import numpy as np
import pytest
import torch

import qkv
import qkv.models
import qkv.text
from helpers import cli_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
MINILM = ROOT / "models" / "all-MiniLM-L6-v2"
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
sdpa = qkv.nn.functional.scaled_dot_product_attention

# `ValueError: message`, or the CLI's `qkv train: error: message`.
QUOTED = re.compile(r"`((?:[A-Za-z]+(?:Error|Interrupt))|qkv [a-z]+: error): ([^`]*)`")


def table_rows():
    """(label, [(kind, message pattern)]) of every table row that quotes a message."""
    for line in DOC.read_text().splitlines():
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        quoted = [m for cell in cells[1:] for m in QUOTED.findall(cell)]
        if quoted:
            yield cells[0], quoted


def console_examples():
    """(command, expected stderr lines, exit code) of the ```console blocks."""
    examples, current = [], None
    for line in re.findall(r"```console\n(.*?)```", DOC.read_text(), re.S):
        for row in line.splitlines():
            if row.startswith("$ "):
                current = [row[2:], []]
            elif (m := re.fullmatch(r"\[exit (\d+)\]", row)):
                examples.append((current[0], current[1], int(m.group(1))))
            else:
                current[1].append(row)
    return examples


def matches(pattern, text):
    """`pattern` with `…` for any text matches the start of `text`."""
    regex = ".*".join(re.escape(piece) for piece in pattern.split("…"))
    return re.match(regex, text, re.S) is not None


def outcome(reproduce, tmp):
    """(exception name, message) of what `reproduce(tmp)` raised, or what it
    returned for the CLI."""
    try:
        result = reproduce(tmp)
    except BaseException as e:  # noqa: BLE001 - the kind is what is checked
        return type(e).__name__, str(e)
    if not isinstance(result, tuple):
        pytest.fail(f"{reproduce}: nothing was raised")
    return result


# The Hugging Face cache at its default place (~/.cache/huggingface/hub), as
# the quoted messages show it.
HF_CACHE_VARIABLES = ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def qkv_cli(args, cwd):
    """(exit code, stderr) of `qkv args` run in cwd."""
    env = {k: v for k, v in os.environ.items() if k not in HF_CACHE_VARIABLES}
    run = subprocess.run([str(cli_path())] + shlex.split(args), cwd=cwd, capture_output=True,
                         text=True, timeout=300, env=env)
    return run.returncode, run.stderr


def cli_error(args, tmp):
    """("qkv <command>: error", message) of a run that must exit 1."""
    code, stderr = qkv_cli(args, tmp)
    assert code == 1, stderr
    command, _, message = stderr.strip().partition(": error: ")
    return f"{command}: error", message


# --- the inputs of the rows, by the start of their label -------------------------------


def folder_with_config(tmp, text):
    (tmp / "m").mkdir()
    (tmp / "m" / "config.json").write_text(text)
    return tmp / "m"


def minilm_with_layers(tmp, value):
    if not (MINILM / "model.safetensors").exists():
        pytest.skip("run scripts/fetch_model.sh")
    config = (MINILM / "config.json").read_text()
    folder = folder_with_config(
        tmp, config.replace('"num_hidden_layers": 6', f'"num_hidden_layers": {value}'))
    for name in ("tokenizer.json", "model.safetensors"):
        (folder / name).symlink_to(MINILM / name)
    return folder


def tokenizer_without_config(tmp):
    (tmp / "tokenizer.json").write_text("{}")
    return qkv.SentenceEncoder(tmp)


def train_on_invalid_utf8(tmp):
    (tmp / "bad.txt").write_bytes(b"ab\ncd\nxyw\xc0\xafz\n%\n")
    return cli_error("train lm --text bad.txt --steps 1 --out m.safetensors", tmp)


def smollm2(max_seq_len):
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is missing: scripts/fetch_model.sh fetches it")
    return qkv.models.load_gguf(SMOLLM2, max_seq_len=max_seq_len)


def short_gguf(tmp):
    (tmp / "short.gguf").write_bytes(b"GG")
    return qkv.models.load_gguf(tmp / "short.gguf")


def tiny_llama3_file(tmp, **changes):
    """The tiny Llama 3 GGUF file of test_gguf_llama3.py, with `changes` (see write_gguf)."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from tiny_llama3_gguf import tiny_llama3, write_gguf

    return qkv.models.load_gguf(write_gguf(tmp / "tiny.gguf", tiny_llama3(), **changes))


def short_safetensors(tmp):
    path = tmp / "short.safetensors"
    path.write_bytes((16).to_bytes(8, "little") + b"{}      ")
    return path


class Scaled(torch.Tensor):
    """A torch.Tensor subclass, refused by name."""


def q4():
    return torch.randn(1, 2, 3, 4)


REPRODUCE = {
    "a model folder that does not exist": lambda tmp: qkv.SentenceEncoder(tmp / "absent"),
    "a folder without `config.json`": tokenizer_without_config,
    "JSON nested deeper than 64 levels": lambda tmp: qkv.models.BertModel.from_pretrained(
        folder_with_config(tmp, "[" * 100 + "]" * 100)),
    "invalid JSON": lambda tmp: qkv.models.BertModel.from_pretrained(
        folder_with_config(tmp, '{"vocab_size": 1e400}')),
    "config sizes that are not whole numbers": lambda tmp: qkv.SentenceEncoder(
        minilm_with_layers(tmp, "1e12")),
    "safetensors: short file": lambda tmp: qkv.models.DecoderModel.load(short_safetensors(tmp)),
    "a missing or unreadable safetensors": lambda tmp: qkv.models.DecoderModel.load(
        tmp / "absent.safetensors"),
    "a training corpus (`qkv train lm --text`)": train_on_invalid_utf8,
    "sizes that disagree": lambda tmp: sdpa(q4(), torch.randn(1, 2, 3, 5), q4()),
    "a dtype qkv does not compute in": lambda tmp: sdpa(q4().int(), q4(), q4()),
    "a float mask of another dtype": lambda tmp: sdpa(
        q4(), q4(), q4(), attn_mask=torch.zeros(3, 3, dtype=torch.float64)),
    "a tensor on another device": lambda tmp: sdpa(q4().to("meta"), q4(), q4()),
    "a torch.Tensor subclass": lambda tmp: sdpa(
        q4(), q4(), q4(), attn_mask=torch.zeros(3, 3).as_subclass(Scaled)),
    "nested (strided or jagged)": lambda tmp: sdpa(*[torch.nested.nested_tensor(
        [torch.randn(2, 3, 4), torch.randn(2, 5, 4)])] * 3),
    "NaN or ±inf in query": lambda tmp: sdpa(torch.full((1, 2, 3, 4), float("nan")), q4(), q4()),
    "finite inputs whose scores overflow": lambda tmp: sdpa(*[torch.full((1, 1, 4, 4), 1e20)] * 3),
    "out-of-range scalars": lambda tmp: sdpa(q4(), q4(), q4(), dropout_p=1.5),
    "`attn_mask` together with `is_causal`": lambda tmp: sdpa(
        q4(), q4(), q4(), attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True),
    "token ids outside the vocabulary": lambda tmp: qkv.models.DecoderModel(
        vocab_size=50, d_model=8, num_layers=1, num_heads=2, max_seq_len=8).forward([1, 50]),
    "module arguments": lambda tmp: qkv.nn.MultiheadAttention(10, 3),
    "a shape whose element count": lambda tmp: qkv.nn.Linear(2**31, 2**31),
    "a tensor the system cannot allocate": lambda tmp: qkv.nn.Linear(2**28, 2**28),
    # Never silently wrong
    "a RoPE decoder (any GGUF model)": lambda tmp: smollm2(16).logits(list(range(17))),
    "`generate(prompt, 10**9)`": lambda tmp: smollm2(16).generate([1, 2], 10**9),
    "a token id past int32": [lambda tmp: smollm2(16).tokenizer.decode([1, 2**31]),
                              lambda tmp: smollm2(16).logits([1, 2**63])],
    "a GGUF file shorter than its magic": short_gguf,
    "a GGUF key that changes the math": lambda tmp: tiny_llama3_file(
        tmp, keys={"llama.attn_logit_softcapping": 30.0}),
    "a GGUF tensor no part of the model uses": lambda tmp: tiny_llama3_file(
        tmp, extra={"blk.1.attn_q.bias": np.zeros(64, dtype=np.float32)}),
    "a GGUF file whose `block_count` understates": lambda tmp: tiny_llama3_file(
        tmp, block_count=1),
    "a GGUF file whose metadata promises": lambda tmp: tiny_llama3_file(tmp, block_count=3),
}


def reproduction(label):
    keys = [k for k in REPRODUCE if label.startswith(k)]
    assert len(keys) == 1, (f"docs/errors.md row {label!r} quotes a message but has "
                            f"{len(keys)} reproductions in {pathlib.Path(__file__).name}")
    return REPRODUCE[keys[0]]


ROWS = list(table_rows())


def test_every_reproduction_has_its_row():
    labels = [label for label, _ in ROWS]
    stale = [k for k in REPRODUCE if not any(label.startswith(k) for label in labels)]
    assert not stale, f"rows gone from docs/errors.md: {stale}"


@pytest.mark.parametrize("label,quoted", ROWS, ids=[label[:40] for label, _ in ROWS])
def test_the_quoted_message_is_what_qkv_says(label, quoted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reproduce = reproduction(label)
    reproduce = reproduce if isinstance(reproduce, list) else [reproduce]
    assert len(reproduce) == len(quoted), f"{label!r} quotes {len(quoted)} messages"
    for (kind, pattern), one in zip(quoted, reproduce):
        got_kind, message = outcome(one, tmp_path)
        assert got_kind == kind, f"{label!r}: documented {kind}, qkv raised {got_kind}: {message}"
        assert matches(pattern, message), (f"{label!r}:\n  documented: {pattern}\n"
                                           f"  qkv says:   {message}")


@pytest.mark.parametrize("command,stderr,code", console_examples(),
                         ids=[c for c, _, _ in console_examples()])
def test_the_command_line_examples(command, stderr, code, tmp_path):
    if not cli_path().is_file():
        pytest.skip(f"the qkv CLI is missing at {cli_path()}: build it or set QKV_CLI")
    (tmp_path / "short.gguf").write_bytes(b"GG")
    assert command.startswith("qkv ")
    got_code, got_stderr = qkv_cli(command[4:], tmp_path)
    assert got_code == code, got_stderr
    lines = got_stderr.splitlines()
    assert len(lines) == len(stderr) and all(
        matches(p, line) for p, line in zip(stderr, lines)), got_stderr
