"""Tiny random models of each GGUF family qkv runs, against transformers.

For llama (Llama 3: rope_freqs, tied output), qwen2 (q/k/v biases, own output
head), qwen3 (per-head q/k RMSNorm, a head dim other than width / heads) and
gemma3 (q/k norms, norms after attention and the FFN, GeGLU, embeddings ×
√width, local layers with a sliding window and their own RoPE base beside a
global layer), a transformers model with random weights is written here as a
GGUF file with the `gguf` package, in the layout llama.cpp's converter writes
(llama: q/k rows permuted; gemma3: norm weights stored as 1 + w). The file is
then loaded twice, by transformers (`from_pretrained(dir, gguf_file=...)`,
float32, eager attention) and by qkv (`qkv.models.load_gguf`), and their
logits must agree to 1e-4 (max |diff| / max |ref|), over the whole sequence
and step by step through qkv's KV cache. The transformers model read back from
the file must equal the one written, so the layout is the converter's and not
one the two readers merely share.
"""

import math

import numpy as np
import pytest

import qkv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

# The converter's Llama 3 rope_freqs and q/k permutation, as test_gguf_llama3.py writes them,
# and the tiny vocabulary with its tokenizer keys.
from tiny_llama3_gguf import VOCAB, add_tiny_tokenizer, llama3_rope_factors, permute  # noqa: E402

D, FFN = 64, 128
IDS = [int(i) for i in np.random.default_rng(11).integers(0, VOCAB, size=40)]
WINDOW = 8  # gemma3's local layers see 8 positions of the 40


def relative(ours, ref):
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


# Each family: its transformers config, the overrides transformers' GGUF reader needs for
# what the file does not say (see FAMILIES' comments), and what the converter writes.
LLAMA_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
FAMILIES = {
    "llama": dict(
        config=lambda: transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=dict(LLAMA_ROPE),
            tie_word_embeddings=True),
        # transformers' GGUF reader has no rope_freqs: give it the scaling they came from.
        overrides=dict(rope_scaling=dict(LLAMA_ROPE, rope_theta=10000.0))),
    "qwen2": dict(
        config=lambda: transformers.Qwen2Config(
            vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False),
        overrides={}),
    "qwen3": dict(
        config=lambda: transformers.Qwen3Config(
            vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6,
            tie_word_embeddings=True),
        # transformers' qwen3 GGUF table does not read attention.key_length.
        overrides=dict(head_dim=32)),
    "gemma3": dict(
        config=lambda: transformers.Gemma3TextConfig(
            vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            query_pre_attn_scalar=32, max_position_embeddings=256, rms_norm_eps=1e-6,
            sliding_window=WINDOW, rope_theta=1e6, rope_local_base_freq=10000.0,
            tie_word_embeddings=True),
        # The file holds no query_pre_attn_scalar: llama.cpp scales by the head dim, which
        # is the converted checkpoints' query_pre_attn_scalar (256 in Gemma 3 270M).
        overrides=dict(query_pre_attn_scalar=32)),
}


def random_model(family, **config_changes):
    config = FAMILIES[family]["config"]()
    for k, v in config_changes.items():
        setattr(config, k, v)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    g = torch.Generator().manual_seed(7)
    state = {}
    for name, t in model.state_dict().items():
        if family == "gemma3" and name.endswith("norm.weight"):
            state[name] = 0.2 * torch.randn(t.shape, generator=g)  # used as 1 + w
        elif name.endswith("norm.weight"):
            state[name] = 1.0 + 0.2 * torch.randn(t.shape, generator=g)
        else:
            state[name] = 0.2 * torch.randn(t.shape, generator=g)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=False)
    return model.eval()


def write_gguf(path, family, model, keys=None):
    """The file llama.cpp's converter writes for `model` (F32), plus float keys `keys`."""
    c = model.config
    arch = family
    s = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{family}")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(256)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(VOCAB)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if family == "gemma3":
        w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
        w.add_sliding_window(c.sliding_window)
    else:
        w.add_rope_freq_base(c.rope_parameters["rope_theta"] if hasattr(c, "rope_parameters")
                             and c.rope_parameters else c.rope_theta)
    if family in ("qwen3", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if family == "llama":
        w.add_rope_dimension_count(head_dim)
    add_tiny_tokenizer(w)
    for name, value in (keys or {}).items():
        w.add_float32(f"{arch}.{name}", value)

    def norm(name):
        return s[name] + 1.0 if family == "gemma3" else s[name]

    w.add_tensor("token_embd.weight", s["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        hf, blk = f"model.layers.{i}.", f"blk.{i}."
        q, k = s[hf + "self_attn.q_proj.weight"], s[hf + "self_attn.k_proj.weight"]
        if family == "llama":
            q, k = permute(q, c.num_attention_heads), permute(k, c.num_key_value_heads)
        w.add_tensor(blk + "attn_norm.weight", norm(hf + "input_layernorm.weight"))
        w.add_tensor(blk + "attn_q.weight", q)
        w.add_tensor(blk + "attn_k.weight", k)
        w.add_tensor(blk + "attn_v.weight", s[hf + "self_attn.v_proj.weight"])
        if family == "qwen2":
            for p in "qkv":
                w.add_tensor(blk + f"attn_{p}.bias", s[hf + f"self_attn.{p}_proj.bias"])
        if family in ("qwen3", "gemma3"):
            w.add_tensor(blk + "attn_q_norm.weight", norm(hf + "self_attn.q_norm.weight"))
            w.add_tensor(blk + "attn_k_norm.weight", norm(hf + "self_attn.k_norm.weight"))
        w.add_tensor(blk + "attn_output.weight", s[hf + "self_attn.o_proj.weight"])
        if family == "gemma3":
            w.add_tensor(blk + "post_attention_norm.weight",
                         norm(hf + "post_attention_layernorm.weight"))
            w.add_tensor(blk + "ffn_norm.weight", norm(hf + "pre_feedforward_layernorm.weight"))
            w.add_tensor(blk + "post_ffw_norm.weight",
                         norm(hf + "post_feedforward_layernorm.weight"))
        else:
            w.add_tensor(blk + "ffn_norm.weight", s[hf + "post_attention_layernorm.weight"])
        w.add_tensor(blk + "ffn_gate.weight", s[hf + "mlp.gate_proj.weight"])
        w.add_tensor(blk + "ffn_up.weight", s[hf + "mlp.up_proj.weight"])
        w.add_tensor(blk + "ffn_down.weight", s[hf + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", norm("model.norm.weight"))
    if not c.tie_word_embeddings:
        w.add_tensor("output.weight", s["lm_head.weight"])
    if family == "llama":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(LLAMA_ROPE, 10000.0, head_dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def from_gguf(path, family, **overrides):
    """transformers' model read from the file (float32, eager attention)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32,
        attn_implementation="eager", **dict(FAMILIES[family]["overrides"], **overrides))
    return model.eval()


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_files(request, tmp_path_factory):
    """(family, path, transformers' logits of IDS from the file)."""
    family = request.param
    written = random_model(family)
    path = write_gguf(tmp_path_factory.mktemp(family) / f"{family}.gguf", family, written)
    read = from_gguf(path, family)
    ref = hf_logits(read, IDS)
    # The file is what the converter writes: reading it back gives the model written.
    rel = relative(ref, hf_logits(written, IDS))
    assert rel <= 1e-5, f"{family}: transformers' model from the file differs by {rel:.3g}"
    return family, path, ref


def test_logits_match_transformers(family_files):
    family, path, ref = family_files
    m = qkv.models.load_gguf(path)
    assert m.architecture == family
    rel = relative(m.logits(IDS)[0], ref)
    print(f"{family}: max relative logit difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


@pytest.mark.parametrize("prefill", [1, 5, 20])
def test_cached_steps_match_transformers(family_files, prefill):
    # gemma3's local layers keep 8 positions in a ring: a prefill of 20 overruns it at once,
    # and the steps after any prefill wrap it.
    family, path, ref = family_files
    m = qkv.models.load_gguf(path)
    session = m.model.session()
    rows = [session.prefill(IDS[:prefill])[0]]
    rows += [session.step([i])[0] for i in IDS[prefill:]]
    rel = relative(np.stack(rows), ref[prefill - 1:])
    print(f"{family}, prefill {prefill}: max relative difference vs transformers {rel:.3g}")
    assert rel <= 1e-4


def test_gemma3_config_is_read_from_the_file(family_files):
    family, path, _ = family_files
    if family != "gemma3":
        pytest.skip("gemma3 only")
    c = qkv.models.load_gguf(path).model.config
    assert c.sliding_windows == [WINDOW] * 5 + [0]  # five local layers, then a global one
    assert (c.rope_base, c.sliding_rope_base) == (1e6, 10000.0)
    assert c.head_dim == 32 and c.qk_norm and c.post_norms and c.ffn == "geglu"
    assert c.embedding_scale == pytest.approx(math.sqrt(D))


def test_gemma3_final_logit_softcapping(tmp_path):
    # A key Gemma 2 has and Gemma 3's converter would write: used, not ignored.
    cap = 2.0
    written = random_model("gemma3", final_logit_softcapping=cap)
    path = write_gguf(tmp_path / "capped.gguf", "gemma3", written,
                      keys={"final_logit_softcapping": cap})
    ref = hf_logits(from_gguf(path, "gemma3", final_logit_softcapping=cap), IDS)
    assert np.abs(ref).max() < cap  # the cap is in effect
    rel = relative(qkv.models.load_gguf(path).logits(IDS)[0], ref)
    assert rel <= 1e-4


def test_gemma3_attention_softcapping_is_refused(tmp_path):
    path = write_gguf(tmp_path / "attn_cap.gguf", "gemma3", random_model("gemma3"),
                      keys={"attn_logit_softcapping": 50.0})
    with pytest.raises(ValueError, match="gemma3.attn_logit_softcapping"):
        qkv.models.load_gguf(path)
