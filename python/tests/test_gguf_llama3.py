"""A Llama 3-style GGUF file against transformers' LlamaForCausalLM.

A tiny random model (2 blocks, width 64, 4 query heads and 2 KV heads of 16,
tied output embeddings) is written here with the `gguf` package as llama.cpp's
converter writes a Llama 3.1 checkpoint: q/k rows permuted for interleaved
RoPE, and `rope_freqs.weight` computed from rope_scaling (rope_type "llama3").
qkv's logits, over a whole sequence and step by step through the KV cache,
are within 1e-4 of transformers' (max |diff| / max |ref|) built from the same
weights with rope_scaling={"rope_type": "llama3", ...}. Without the factors
they are far off, so the comparison sees them.
"""

import math

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

VOCAB, D, FFN, LAYERS, HEADS, KV_HEADS = 64, 64, 128, 2, 4, 2
HEAD_DIM = D // HEADS
BASE = 10000.0
# A short original context, so that every band of the llama3 rule (kept, smoothed,
# divided by `factor`) holds a frequency of a 16-dim head and matters within 48 positions.
ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
TOKENS = [chr(ord("a") + i) for i in range(26)] + [chr(ord("A") + i) for i in range(26)]
TOKENS += [str(i) for i in range(10)] + ["ab", "<|im_end|>"]
assert len(TOKENS) == VOCAB


def llama3_rope_factors(rope_scaling, base, dim):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type "llama3":
    the factor that divides each frequency. (The converter reads the original context
    from the config's top level, defaulting to 8192 — the value Llama 3.1's rope_scaling
    holds; here it is given as transformers reads it.)"""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope_scaling["factor"]
    low, high = rope_scaling["low_freq_factor"], rope_scaling["high_freq_factor"]
    old_context = rope_scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def permute(weights, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rows reordered so that
    llama.cpp's rotation of adjacent pairs equals transformers' half-split rotation."""
    w = weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
    return w.swapaxes(1, 2).reshape(weights.shape)


@pytest.fixture(scope="module")
def hf_model():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=BASE, rope_scaling=dict(ROPE_SCALING),
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False)
    generator = torch.Generator().manual_seed(3)
    model = transformers.LlamaForCausalLM(config)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith("norm.weight"):  # RMSNorm weights near 1, not all 1
            state[name] = 1.0 + 0.2 * torch.randn(tensor.shape, generator=generator)
        else:
            state[name] = 0.2 * torch.randn(tensor.shape, generator=generator)
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state)
    model.eval()
    return model


def write_gguf(path, hf_model, rope_freqs=True, extra=None):
    """The file llama.cpp's converter would write for hf_model (F32, tied output), plus the
    tensors of `extra` (name -> array)."""
    state = {k: v.detach().numpy().astype(np.float32) for k, v in hf_model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama3")
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(BASE)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    w.add_token_merges(["a b"])
    w.add_token_types([1] * (VOCAB - 1) + [3])
    w.add_eos_token_id(VOCAB - 1)
    w.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for i in range(LAYERS):
        hf, blk = f"model.layers.{i}.", f"blk.{i}."
        w.add_tensor(blk + "attn_norm.weight", state[hf + "input_layernorm.weight"])
        w.add_tensor(blk + "attn_q.weight", permute(state[hf + "self_attn.q_proj.weight"], HEADS))
        w.add_tensor(blk + "attn_k.weight",
                     permute(state[hf + "self_attn.k_proj.weight"], KV_HEADS))
        w.add_tensor(blk + "attn_v.weight", state[hf + "self_attn.v_proj.weight"])
        w.add_tensor(blk + "attn_output.weight", state[hf + "self_attn.o_proj.weight"])
        w.add_tensor(blk + "ffn_norm.weight", state[hf + "post_attention_layernorm.weight"])
        w.add_tensor(blk + "ffn_gate.weight", state[hf + "mlp.gate_proj.weight"])
        w.add_tensor(blk + "ffn_up.weight", state[hf + "mlp.up_proj.weight"])
        w.add_tensor(blk + "ffn_down.weight", state[hf + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", state["model.norm.weight"])
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(ROPE_SCALING, BASE, HEAD_DIM))
    for name, array in (extra or {}).items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def relative(ours, ref):
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


IDS = [int(i) for i in np.random.default_rng(5).integers(0, VOCAB, size=48)]


@pytest.fixture(scope="module")
def reference(hf_model):
    with torch.no_grad():
        return hf_model(torch.tensor([IDS])).logits[0].numpy()


def test_factors_are_the_converters(tmp_path, hf_model):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model), exact=True)
    factors = llama3_rope_factors(ROPE_SCALING, BASE, HEAD_DIM)
    assert m.model.config.rope_freq_factors == [float(f) for f in factors]
    # Every band of the rule is present: kept (1), smoothed, divided by the factor.
    assert factors[0] == 1 and 1 < factors[1] < 8 and factors[-1] == 8
    # transformers' inverse frequencies are the base's divided by the factors.
    inv = hf_model.model.rotary_emb.inv_freq.numpy()
    plain = 1.0 / BASE ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    np.testing.assert_allclose(inv, plain / factors, rtol=1e-6)


@pytest.mark.parametrize("exact", [True, False])
def test_logits_match_transformers(tmp_path, hf_model, reference, exact):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model), exact=exact)
    rel = relative(m.logits(IDS)[0], reference)
    print(f"exact={exact}: max relative logit difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


def test_cached_steps_match_transformers(tmp_path, hf_model, reference):
    m = qkv.models.load_gguf(write_gguf(tmp_path / "llama3.gguf", hf_model))
    session = m.model.session()
    rows = [session.prefill(IDS[:8])[0]]
    rows += [session.step([i])[0] for i in IDS[8:]]
    rel = relative(np.stack(rows), reference[7:])
    print(f"cached steps: max relative logit difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


def test_without_the_factors_the_logits_are_far_off(tmp_path, hf_model, reference):
    # The file without rope_freqs.weight is a plain-RoPE model: the test above sees the factors.
    m = qkv.models.load_gguf(write_gguf(tmp_path / "plain.gguf", hf_model, rope_freqs=False),
                             exact=True)
    assert m.model.config.rope_freq_factors == []
    rel = relative(m.logits(IDS)[0], reference)
    print(f"without rope_freqs.weight: max relative logit difference {rel:.3g}")
    assert rel > 1e-2


def test_a_stray_tensor_is_refused_by_name(tmp_path, hf_model):
    # A q bias (Qwen2 has them; llama.cpp's llama takes one too): qkv cannot apply it.
    path = write_gguf(tmp_path / "bias.gguf", hf_model,
                      extra={"blk.1.attn_q.bias": np.zeros(D, dtype=np.float32)})
    with pytest.raises(ValueError, match=r'tensor "blk\.1\.attn_q\.bias" is not one a llama '
                                         r'model uses'):
        qkv.models.load_gguf(path)


@pytest.mark.parametrize("content", [b"", b"GG", b"GGU"])
def test_a_short_file_gets_a_gguf_error(tmp_path, content):
    path = tmp_path / "short.gguf"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r'invalid GGUF file .*the magic "GGUF" needs 4 bytes'):
        qkv.models.load_gguf(path)
