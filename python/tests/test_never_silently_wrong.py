"""Contracts that used to break without a word (issue 37; docs/errors.md,
"Never silently wrong"): a limit the caller set is a limit, and an id is
reported as the caller wrote it."""

import pathlib

import numpy as np
import pytest

import qkv

ROOT = pathlib.Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

needs_smollm2 = pytest.mark.skipif(
    not GGUF.exists(), reason=f"{GGUF} is missing: scripts/fetch_model.sh fetches it")


@pytest.fixture(scope="module")
def smollm2_16():
    return qkv.models.load_gguf(GGUF, max_seq_len=16)


@needs_smollm2
def test_max_seq_len_bounds_logits_generate_and_sessions(smollm2_16):
    m = smollm2_16
    assert m.model.config.max_seq_len == 16
    assert m.logits(list(range(16))).shape == (1, 16, m.tokenizer.vocab_size)
    with pytest.raises(ValueError, match=r"positions 0 to 16 exceed max_seq_len = 16"):
        m.logits(list(range(17)))
    # 5 prompt tokens and 12 new ones need 16 positions (the last is not fed back).
    assert len(m.generate(list(range(5)), 12, stop_at_end_of_turn=False)) == 12
    with pytest.raises(ValueError, match=r"need 17 positions, but the context holds 16 "
                                         r"\(the model's max_seq_len\)"):
        m.generate(list(range(5)), 13)
    with pytest.raises(ValueError, match=r"max_len must be in \[0, max_seq_len = 16\] \(0 = max_seq_len\), got 17"):
        m.model.session(max_len=17)
    s = m.model.session(max_len=8)
    s.prefill(list(range(8)))
    with pytest.raises(ValueError, match=r"cache is full \(8 \(this session's max_len; the "
                                         r"model's max_seq_len is 16\) positions\)"):
        s.step([1])


@needs_smollm2
def test_a_huge_max_new_tokens_names_the_limit_instead_of_allocating(smollm2_16):
    with pytest.raises(ValueError, match=r"max_new_tokens = 1000000000 need 1000000001 "
                                         r"positions, but the context holds 16"):
        smollm2_16.generate([1, 2], 10**9)
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[0, 2\*\*63\), got -1"):
        smollm2_16.generate("Hi", -1)


@needs_smollm2
@pytest.mark.parametrize("bad", [2**31, 2**63, -1, 10**30])
def test_token_ids_out_of_range_are_named_as_given(smollm2_16, bad):
    tok = smollm2_16.tokenizer
    with pytest.raises(ValueError, match=rf"decode\(\): ids\[1\] = {bad} is out of range "
                                         rf"\[0, {tok.vocab_size}\)"):
        tok.decode([1, bad])
    with pytest.raises(ValueError, match=rf"token id {bad} is out of range"):
        tok.token_to_piece(bad)
    with pytest.raises(ValueError, match=rf"push\(\): token id {bad} is out of range"):
        tok.stream_decoder().push(bad)
    with pytest.raises(TypeError, match=r"token ids must be ints, got ids\[0\] = 1.5"):
        tok.decode([1.5])


@needs_smollm2
def test_model_ids_past_int64_are_not_wrapped(smollm2_16):
    # numpy holds 2**63 as uint64; a cast to int64 would make it negative.
    with pytest.raises(ValueError, match=r"ids\[1\] = 9223372036854775808 is not a token id"):
        smollm2_16.logits([1, 2**63])
    with pytest.raises(ValueError, match=r"ids\[3\] = -9223372036854775809 is not a token id"):
        smollm2_16.logits([[1, 2], [3, -2**63 - 1]])
    with pytest.raises(ValueError, match=r"ids\[0\] = 18446744073709551615 is not a token id"):
        smollm2_16.logits(np.array([2**64 - 1], dtype=np.uint64))
