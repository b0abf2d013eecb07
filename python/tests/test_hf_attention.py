"""attn_implementation="qkv" in Hugging Face transformers 5.24 (registered by
`import qkv.torch`, python/qkv/_hf_attention.py) against "sdpa" (the oracle):

  - BertModel (models/all-MiniLM-L6-v2) on a PADDED batch: last hidden state
    and every parameter gradient within 1e-5 (relative to the largest |sdpa|
    value of that tensor), the padding passed as a [B, 1, 1, S] key mask;
  - 20 AdamW fine-tuning steps (fixed seed, dropout off) give the same losses
    to 1e-4;
  - SentenceTransformer(path, model_kwargs={"attn_implementation": "qkv"})
    encodes as with "sdpa";
  - a LLaMA model from a small random LlamaConfig with GQA, 2 layers: the
    same logits (left-padded batch) and the same greedy tokens, also through
    transformers' DynamicCache and StaticCache (decode steps: one query, no
    dense mask where the cache holds exactly the keys to see);
  - a Gemma 3 model from a small random Gemma3TextConfig with sliding and
    global layers (window 5 < the 14 tokens): logits, parameter gradients and
    greedy tokens as "sdpa", the sliding layers run without a dense mask
    (qkv's fused window) when nothing is padded, and over a key-padding mask
    when something is; a Mistral model (every layer windowed) likewise.
"""

import copy
import pathlib

import numpy as np
import pytest
import torch

qkv_torch = pytest.importorskip("qkv.torch")
transformers = pytest.importorskip("transformers")

from qkv import _hf_attention  # noqa: E402
from model_files import MINILM, needs_minilm  # noqa: E402

TOLERANCE = 1e-5

TEXTS = [
    "A man is eating food.",
    "The girl is carrying a baby while the man rides a horse through the field.",
    "Un café à Paris!",
    "Attention is all you need, they said, and then everybody computed softmax over and "
    "over again for years.",
]


def rel(ours, theirs):
    ours, theirs = ours.detach().double(), theirs.detach().double()
    assert ours.shape == theirs.shape
    return float((ours - theirs).abs().max() / max(theirs.abs().max(), 1e-12))


def test_registered_under_qkv():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert AttentionInterface._global_mapping["qkv"] is _hf_attention.attention_forward
    # Without a mask entry transformers builds no mask at all for "qkv".
    assert AttentionMaskInterface._global_mapping["qkv"].__name__ == "qkv_mask"
    _hf_attention.register()  # idempotent
    assert AttentionInterface._global_mapping["qkv"] is _hf_attention.attention_forward


@pytest.fixture
def qkv_calls(monkeypatch):
    """The calls of qkv's attention (so a parity is not sdpa against itself):
    the shape of each call's mask, None without one."""
    calls = []
    run = qkv_torch.scaled_dot_product_attention

    def counted(*args, **kwargs):
        mask = kwargs.get("attn_mask")
        calls.append(None if mask is None else tuple(mask.shape))
        return run(*args, **kwargs)

    monkeypatch.setattr(qkv_torch, "scaled_dot_product_attention", counted)
    return calls


def bert_pair(**config):
    models = {}
    for name in ("qkv", "sdpa"):
        torch.manual_seed(0)
        models[name] = transformers.BertModel.from_pretrained(
            MINILM, attn_implementation=name, add_pooling_layer=False, **config)
        assert models[name].config._attn_implementation == name
    return models


@pytest.fixture(scope="module")
def batch():
    tok = transformers.AutoTokenizer.from_pretrained(MINILM)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()  # the parity must be on padding
    return enc


@needs_minilm
def test_bert_outputs_and_gradients_on_padded_batch(batch, qkv_calls):
    models = bert_pair()
    torch.manual_seed(1)
    weights = torch.randn(*batch["input_ids"].shape, 384)
    real = batch["attention_mask"].bool()
    hidden, grads = {}, {}
    for name, model in models.items():
        model.eval()
        out = model(**batch).last_hidden_state
        (out * weights * real[..., None]).sum().backward()
        hidden[name] = out
        grads[name] = {n: p.grad for n, p in model.named_parameters()}
    # One masked call per layer, from the qkv model only; padding as one row
    # of keys per sequence (the kernels skip the padded keys), not [B, 1, L, S].
    batch_size, length = batch["input_ids"].shape
    assert qkv_calls == [(batch_size, 1, 1, length)] * 6
    err = rel(hidden["qkv"][real], hidden["sdpa"][real])
    print(f"\nhidden states (real tokens): {err:.2e}")
    assert err <= TOLERANCE
    assert rel(hidden["qkv"], hidden["sdpa"]) <= TOLERANCE
    scale = max(g.abs().max() for g in grads["sdpa"].values())
    worst = 0.0
    for n, g in grads["sdpa"].items():
        ours = grads["qkv"][n]
        assert ours is not None, n
        if n.endswith("attention.self.key.bias"):
            # Exactly 0 in exact arithmetic (softmax ignores a per-query constant):
            # both are rounding noise, compared with the largest gradient.
            assert float((ours - g).abs().max() / scale) <= TOLERANCE, n
            continue
        e = rel(ours, g)
        worst = max(worst, e)
        assert e <= TOLERANCE, f"gradient of {n}: {e:.2e}"
    print(f"parameter gradients: worst {worst:.2e}")


@needs_minilm
def test_bert_fine_tuning_losses_match(batch):
    models = bert_pair(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(2)
    targets = torch.randn(len(TEXTS), 384)
    mask = batch["attention_mask"][..., None].float()
    losses = {}
    for name, model in models.items():
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        losses[name] = []
        for _ in range(20):
            hidden = model(**batch).last_hidden_state
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            loss = torch.nn.functional.mse_loss(pooled, targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    ours, theirs = np.array(losses["qkv"]), np.array(losses["sdpa"])
    print(f"\nlosses {theirs[0]:.5f} -> {theirs[-1]:.5f}; max |qkv - sdpa| "
          f"{np.abs(ours - theirs).max():.2e}")
    assert theirs[-1] < 0.9 * theirs[0]  # it learns
    assert np.abs(ours - theirs).max() <= 1e-4


@needs_minilm
def test_sentence_transformer_with_qkv_attention(qkv_calls):
    st = pytest.importorskip("sentence_transformers")
    texts = TEXTS + ["short", ""]
    emb = {}
    for name in ("qkv", "sdpa"):
        model = st.SentenceTransformer(str(MINILM), device="cpu",
                                       model_kwargs={"attn_implementation": name})
        assert model.transformers_model.config._attn_implementation == name
        emb[name] = model.encode(texts, batch_size=3, convert_to_tensor=True)
    assert len(qkv_calls) == 6 * 2 and any(qkv_calls)  # 2 batches, padded
    err = rel(emb["qkv"], emb["sdpa"])
    print(f"\nSentenceTransformer embeddings: {err:.2e}")
    assert err <= TOLERANCE


def causal_lm_pair(model_class, config):
    """Two `model_class` models of `config` with the same random weights (seed 0),
    in eval mode: ours on qkv's attention, the reference on torch's sdpa."""
    torch.manual_seed(0)
    reference = model_class._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    ours = model_class._from_config(copy.deepcopy(config), attn_implementation="qkv")
    assert reference.config._attn_implementation == "sdpa"
    assert ours.config._attn_implementation == "qkv"
    ours.load_state_dict(reference.state_dict())
    return ours.eval(), reference.eval()


def llama_pair():
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=None)
    ours, reference = causal_lm_pair(transformers.LlamaForCausalLM, config)
    assert ours.model.layers[0].self_attn.num_key_value_groups == 2
    return ours, reference


def test_llama_gqa_logits_and_greedy_generation(qkv_calls):
    ours, reference = llama_pair()
    torch.manual_seed(3)
    ids = torch.randint(3, 128, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding, as for generation
    mask[2, :2] = 0
    ids[mask == 0] = 0
    with torch.no_grad():
        logits = {m: model(input_ids=ids, attention_mask=mask).logits
                  for m, model in (("qkv", ours), ("sdpa", reference))}
    # The padded prefill runs causal over a [B, 1, 1, S] key mask, not sdpa's dense one.
    assert qkv_calls == [(3, 1, 1, 9)] * 2
    real = mask.bool()
    err = rel(logits["qkv"][real], logits["sdpa"][real])
    print(f"\nLLaMA logits (real tokens): {err:.2e}")
    assert err <= TOLERANCE
    kwargs = dict(attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = reference.generate(ids, **kwargs)
        got = ours.generate(ids, **kwargs)
    assert want.shape == (3, 9 + 24)
    assert torch.equal(got, want)
    assert len(set(want[0, 9:].tolist())) > 3  # not one token repeated
    # Training a decoder through qkv: causal prefill, gradients as sdpa's.
    for model in (ours, reference):
        model.zero_grad()
        labels = ids.masked_fill(mask == 0, -100)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    for (n, p), (_, q) in zip(ours.named_parameters(), reference.named_parameters()):
        assert rel(p.grad, q.grad) <= 1e-4, n


@pytest.fixture
def call_shapes(monkeypatch):
    """(query length, key length, has a mask, causal) of each qkv attention call."""
    calls = []
    run = qkv_torch.scaled_dot_product_attention

    def recorded(query, key, *args, **kwargs):
        calls.append((query.shape[-2], key.shape[-2], kwargs.get("attn_mask") is not None,
                      kwargs.get("causal")))
        return run(query, key, *args, **kwargs)

    monkeypatch.setattr(qkv_torch, "scaled_dot_product_attention", recorded)
    return calls


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_llama_generation_through_hugging_face_caches(cache, call_shapes):
    """Greedy generation through transformers' cache classes equals "sdpa"'s,
    and each step after the prompt is one query over the cached keys: qkv's
    few-query (decoding) kernel. DynamicCache: no mask, no causal rule (one
    query sees every cached key), keys growing by one a step. StaticCache:
    the cache's empty slots need sdpa's mask."""
    ours, reference = llama_pair()
    ids = torch.randint(3, 128, (2, 7), generator=torch.Generator().manual_seed(8))
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    with torch.no_grad():
        want = reference.generate(ids, **kwargs)
        call_shapes.clear()
        got = ours.generate(ids, **kwargs)
    assert torch.equal(got, want)
    layers = ours.config.num_hidden_layers
    steps = call_shapes[layers:]  # after the prompt's calls
    assert len(steps) == layers * (kwargs["max_new_tokens"] - 1)
    assert all(q_len == 1 for q_len, _, _, _ in steps)
    if cache == "dynamic":
        assert call_shapes[:layers] == [(7, 7, False, "top_left")] * layers
        assert [k_len for _, k_len, _, _ in steps[::layers]] == list(range(8, 8 + 9))
        assert all(not masked and causal is None for _, _, masked, causal in steps)
    else:
        assert all(masked for _, _, masked, _ in steps)


def test_attention_function_directly():
    """The function transformers calls equals transformers' sdpa_attention_forward:
    no mask with L < S is causal top-left (an empty StaticCache's prefill, the
    only case transformers passes it), GQA, a float mask, a sliding window,
    softcap is mapped (against torch ops)."""

    class Attn(torch.nn.Module):
        num_key_value_groups = 2
        is_causal = True

    torch.manual_seed(4)
    q = torch.randn(2, 4, 3, 8, dtype=torch.float64)
    k = torch.randn(2, 2, 7, 8, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 8, dtype=torch.float64)
    kr, vr = (x.repeat_interleave(2, dim=1) for x in (k, v))
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    out, weights = _hf_attention.attention_forward(Attn(), q, k, v, None, scaling=0.3)
    assert weights is None and out.shape == (2, 3, 4, 8)
    want, _ = sdpa_attention_forward(Attn(), q, k, v, None, scaling=0.3)
    assert rel(out, want) <= 1e-12
    keep = torch.ones(3, 3, dtype=torch.bool).tril()
    ref = torch.nn.functional.scaled_dot_product_attention(q, kr[:, :, :3], vr[:, :, :3],
                                                           attn_mask=keep, scale=0.3)
    assert rel(out, ref.transpose(1, 2)) <= 1e-12
    # A sliding window of 2 without a mask: query i sees keys i-1 and i.
    q6 = torch.randn(2, 4, 6, 8, dtype=torch.float64)
    k6, v6 = k[:, :, :6], v[:, :, :6]
    out, _ = _hf_attention.attention_forward(Attn(), q6, k6, v6, None, sliding_window=2,
                                             softcap=1.5)
    band = torch.ones(6, 6, dtype=torch.bool).tril() & ~torch.ones(6, 6, dtype=torch.bool).tril(-2)
    scores = q6 @ kr[:, :, :6].transpose(-1, -2) / 8**0.5
    scores = (1.5 * torch.tanh(scores / 1.5)).masked_fill(~band, float("-inf"))
    ref = torch.softmax(scores, dim=-1) @ vr[:, :, :6]
    assert rel(out, ref.transpose(1, 2)) <= 1e-12
    bias = torch.randn(2, 1, 3, 7, dtype=torch.float64)
    out, _ = _hf_attention.attention_forward(Attn(), q, k, v, bias, is_causal=False)
    want = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, attn_mask=bias)
    assert rel(out, want.transpose(1, 2)) <= 1e-12


def test_padded_causal_mask_runs_fused_for_that_tensor_only():
    """The dense mask built for a padded causal prefill runs as causal over a
    key mask; a copy of it runs as the dense mask it is; both equal sdpa on
    the rows that see a key. The record goes with the tensor."""
    import gc
    from transformers import masking_utils

    class Attn(torch.nn.Module):
        num_key_value_groups = 2
        is_causal = True

    padding = torch.ones(3, 9, dtype=torch.long)
    padding[1, :4] = 0
    padding[2, :2] = 0
    mask_function = masking_utils.AttentionMaskInterface._global_mapping[_hf_attention.NAME]
    dense = mask_function(3, 9, 9, attention_mask=padding.bool(),
                          mask_function=masking_utils.causal_mask_function,
                          allow_is_causal_skip=True)
    assert dense.shape == (3, 1, 9, 9) and id(dense) in _hf_attention._FUSED_FORM
    g = torch.Generator().manual_seed(9)
    q = torch.randn(3, 4, 9, 8, dtype=torch.float64, generator=g)
    k, v = (torch.randn(3, 2, 9, 8, dtype=torch.float64, generator=g) for _ in range(2))
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    want, _ = sdpa_attention_forward(Attn(), q, k, v, dense)
    fused, _ = _hf_attention.attention_forward(Attn(), q, k, v, dense)
    copied, _ = _hf_attention.attention_forward(Attn(), q, k, v, dense.clone())
    sees_a_key = padding.bool()  # left padding: a padded query sees no key
    assert rel(fused[sees_a_key], want[sees_a_key]) <= 1e-12
    assert rel(copied[sees_a_key], want[sees_a_key]) <= 1e-12
    records = len(_hf_attention._FUSED_FORM)
    del dense
    gc.collect()
    assert len(_hf_attention._FUSED_FORM) == records - 1


def test_import_qkv_torch_does_not_import_transformers():
    """Registration waits for transformers to load its interfaces (a hook),
    and also works when transformers came first."""
    import subprocess
    import sys
    # The qkv this test process imported (the source tree or an installed one).
    package_dir = pathlib.Path(_hf_attention.__file__).parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": str(package_dir)}
    script = ("import sys, qkv.torch\n"
              "assert 'transformers' not in sys.modules\n"
              "from transformers import AttentionInterface\n"
              "from transformers.masking_utils import AttentionMaskInterface\n"
              "assert 'qkv' in AttentionInterface._global_mapping\n"
              "assert 'qkv' in AttentionMaskInterface._global_mapping\n")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=600)
    script = ("import transformers.modeling_utils, transformers.masking_utils as m\n"
              "import qkv.torch\n"
              "assert 'qkv' in m.AttentionMaskInterface._global_mapping\n"
              "assert 'qkv' in transformers.modeling_utils.AttentionInterface._global_mapping\n")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=600)


def gemma3_pair():
    config = transformers.Gemma3TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention",
                     "full_attention"],
        max_position_embeddings=64, initializer_range=0.2, pad_token_id=0, bos_token_id=1,
        eos_token_id=None, query_pre_attn_scalar=12, attention_dropout=0.0)
    return causal_lm_pair(transformers.Gemma3ForCausalLM, config)


@pytest.fixture
def window_calls(monkeypatch):
    """(window_left, has a mask) of each qkv attention call."""
    calls = []
    run = qkv_torch.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append((kwargs.get("window_left"), kwargs.get("attn_mask") is not None))
        return run(*args, **kwargs)

    monkeypatch.setattr(qkv_torch, "scaled_dot_product_attention", counted)
    return calls


def test_gemma3_sliding_window_without_a_dense_mask(window_calls):
    ours, reference = gemma3_pair()
    assert [layer.self_attn.sliding_window for layer in ours.model.layers] == [5, 5, 5, None]
    torch.manual_seed(5)
    ids = torch.randint(3, 128, (2, 14))
    # No padding: the sliding layers run qkv's fused window, no [L, S] mask.
    for model in (ours, reference):
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
    assert window_calls == [(4, False)] * 3 + [(None, False)]
    with torch.no_grad():
        want = reference(input_ids=ids).logits
        got = ours(input_ids=ids).logits
    err = rel(got, want)
    print(f"\nGemma 3 logits: {err:.2e}")
    assert err <= TOLERANCE
    for (n, p), (_, q) in zip(ours.named_parameters(), reference.named_parameters()):
        assert rel(p.grad, q.grad) <= TOLERANCE, n
    # Greedy generation past the window (the sliding cache runs L = 1 decode steps).
    kwargs = dict(max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want_tokens = reference.generate(ids, **kwargs)
        got_tokens = ours.generate(ids, **kwargs)
    assert torch.equal(got_tokens, want_tokens)
    # Left padding: the sliding layers run the fused window over a key mask,
    # the global one causal over it (no [L, S] mask reaches the kernel).
    window_calls.clear()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits
    assert window_calls == [(4, True)] * 3 + [(None, True)]
    assert rel(got[mask.bool()], want[mask.bool()]) <= TOLERANCE


def test_mistral_sliding_window_prefill_and_generation(window_calls):
    """Mistral: every layer windowed by config.sliding_window."""
    config = transformers.MistralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
        max_position_embeddings=64, initializer_range=0.2, pad_token_id=0, eos_token_id=None)
    ours, reference = causal_lm_pair(transformers.MistralForCausalLM, config)
    ids = torch.randint(3, 128, (2, 11), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        err = rel(ours(input_ids=ids).logits, reference(input_ids=ids).logits)
        assert window_calls == [(3, False)] * 2
        assert err <= TOLERANCE
        kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert torch.equal(ours.generate(ids, **kwargs), reference.generate(ids, **kwargs))
