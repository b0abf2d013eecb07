"""A tiny random Llama 3-style model (2 blocks, width 64, 4 query heads and 2 KV
heads of 16, tied output embeddings) in transformers, and the GGUF file
llama.cpp's converter would write for it (q/k rows permuted for interleaved
RoPE, `rope_freqs.weight` from rope_scaling) — for test_gguf_llama3.py and the
GGUF rows of test_errors_doc.py."""

import math

import gguf
import numpy as np
import torch
import transformers

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


def add_tiny_tokenizer(w):
    """The tokenizer keys of the tiny models' files (this one's and
    test_gguf_families.py's): a byte-level BPE over TOKENS with one merge,
    the last token "<|im_end|>" a control token and the end of text."""
    w.add_tokenizer_model("gpt2")
    w.add_token_list(TOKENS)
    w.add_token_merges(["a b"])
    w.add_token_types([1] * (VOCAB - 1) + [3])
    w.add_eos_token_id(VOCAB - 1)


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


def tiny_llama3():
    """LlamaForCausalLM with rope_scaling llama3 and random weights (seeded)."""
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


def write_gguf(path, hf_model, rope_freqs=True, extra=None, keys=None, block_count=LAYERS):
    """The file llama.cpp's converter would write for hf_model (F32, tied output), plus the
    tensors of `extra` (name -> array) and the float metadata of `keys` (name -> value);
    block_count may say other than the blocks written."""
    state = {k: v.detach().numpy().astype(np.float32) for k, v in hf_model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama3")
    w.add_block_count(block_count)
    w.add_context_length(256)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(BASE)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    add_tiny_tokenizer(w)
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
    for name, value in (keys or {}).items():
        w.add_float32(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
