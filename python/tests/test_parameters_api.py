"""parameters() / named_parameters() on every qkv module and model, as torch's:
the module's own parameters (live arrays, not copies) in torch's order and
names, and qkv's optimizers given them train the module, step for step as
torch.optim over torch's parameters() does.
"""

import numpy as np
import pytest
import torch

import qkv
from helpers import encoder_layer_like_torch, rel_err

# Every qkv.nn module, built small, with its torch counterpart where torch has one.
MODULES = {
    "Linear": lambda: (qkv.nn.Linear(6, 4), torch.nn.Linear(6, 4)),
    "LayerNorm": lambda: (qkv.nn.LayerNorm(6), torch.nn.LayerNorm(6)),
    "RMSNorm": lambda: (qkv.nn.RMSNorm(6), torch.nn.RMSNorm(6)),
    "Embedding": lambda: (qkv.nn.Embedding(10, 6), torch.nn.Embedding(10, 6)),
    "MultiheadAttention": lambda: (qkv.nn.MultiheadAttention(8, 2),
                                   torch.nn.MultiheadAttention(8, 2)),
    "TransformerEncoderLayer": lambda: (
        qkv.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
        torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)),
    "TransformerDecoderLayer": lambda: (
        qkv.nn.TransformerDecoderLayer(8, 2, 16, batch_first=True),
        torch.nn.TransformerDecoderLayer(8, 2, 16, batch_first=True)),
    "TransformerEncoder": lambda: (
        qkv.nn.TransformerEncoder(qkv.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2,
                                  enable_nested_tensor=False),
        torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
                                    2, enable_nested_tensor=False)),
    "TransformerDecoder": lambda: (
        qkv.nn.TransformerDecoder(qkv.nn.TransformerDecoderLayer(8, 2, 16, batch_first=True), 2),
        torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, batch_first=True),
                                    2)),
    "Transformer": lambda: (
        qkv.nn.Transformer(8, 2, 1, 1, 16, batch_first=True),
        torch.nn.Transformer(8, 2, 1, 1, 16, batch_first=True)),
    "LearnedPositionalEncoding": lambda: (qkv.nn.positional.LearnedPositionalEncoding(8, 16),
                                          None),
    "RelativePositionBias": lambda: (qkv.nn.positional.RelativePositionBias(2), None),
    "SinusoidalPositionalEncoding": lambda: (
        qkv.nn.positional.SinusoidalPositionalEncoding(8, 16), None),
    "RotaryEmbedding": lambda: (qkv.nn.positional.RotaryEmbedding(8), None),
    "Alibi": lambda: (qkv.nn.positional.Alibi(2), None),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_parameters_are_the_modules_own_in_torch_order(name):
    ours, theirs = MODULES[name]()
    named = ours.named_parameters()
    params = ours.parameters()
    assert [n for n, _ in named] == list(ours.state_dict())
    if theirs is not None:
        assert [n for n, _ in named] == [n for n, _ in theirs.named_parameters()]
        assert sum(p.size for p in params) == sum(p.numel() for p in theirs.parameters())
    assert len(params) == len(named)
    for (n, a), p in zip(named, params):
        assert isinstance(a, np.ndarray) and a is not None and np.shares_memory(a, p), n
    # Live: writing through parameters() changes the module (state_dict() is a copy).
    for i, (n, a) in enumerate(named):
        a[...] = i + 0.5
    state = ours.state_dict()
    for i, (n, _) in enumerate(named):
        assert np.all(state[n] == i + 0.5), n
        state[n][...] = -1  # copies: no effect
    assert all(np.all(a == i + 0.5) for i, (_, a) in enumerate(ours.named_parameters()))


def test_named_parameters_prefix_and_recurse():
    layer, theirs = MODULES["TransformerEncoderLayer"]()
    assert [n for n, _ in layer.named_parameters(prefix="enc")] == [
        "enc." + n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in layer.named_parameters(recurse=False)] == [
        n for n, _ in theirs.named_parameters(recurse=False)]
    assert len(layer.parameters(recurse=False)) == len(list(theirs.parameters(recurse=False)))
    mha, theirs = MODULES["MultiheadAttention"]()
    assert [n for n, _ in mha.named_parameters(recurse=False)] == [
        n for n, _ in theirs.named_parameters(recurse=False)]


def check_same_state(ours, theirs, what):
    state = ours.state_dict()
    for name, value in theirs.state_dict().items():
        value = value.numpy()
        if name == "self_attn.in_proj_bias":
            # Its key third has gradient 0 in exact arithmetic; Adam scales the
            # rounding noise there up to steps of lr (see test_optim_parity.py):
            # not comparable, left out.
            state[name][16:32] = value[16:32]
        assert rel_err(state[name], value) <= 1e-10, f"{what}, {name}"


@pytest.mark.parametrize("given", ["parameters", "named_parameters", "generator"])
@pytest.mark.parametrize("kind", ["AdamW", "Adam", "SGD"])
def test_optimizer_over_parameters_trains_the_module_as_torch(given, kind):
    ours, theirs = encoder_layer_like_torch()
    kwargs = {"lr": 1e-2, "weight_decay": 0.1}
    if kind == "SGD":
        kwargs["momentum"] = 0.9
    params = {"parameters": ours.parameters(), "named_parameters": ours.named_parameters(),
              "generator": (p for p in ours.parameters())}[given]
    opt_q = getattr(qkv.optim, kind)(params, **kwargs)
    opt_t = getattr(torch.optim, kind)(theirs.parameters(), **kwargs)
    rng = np.random.default_rng(3)
    for step in range(3):
        x, g = rng.standard_normal((2, 2, 5, 16))
        (theirs(torch.from_numpy(x)) * torch.from_numpy(g)).sum().backward()
        opt_t.step()
        opt_t.zero_grad()
        _, grad_fn = ours.forward_with_grad(x)
        grad_fn(g)
        if given == "generator":  # a plain list of arrays: the gradients are passed
            opt_q.step(list(ours.named_grads().values()))
        else:  # the module's own gradient buffers, as torch's .grad
            opt_q.step()
        ours.zero_grad()
        check_same_state(ours, theirs, f"{kind} over {given}, step {step}")


def test_optimizer_over_parameters_of_a_module_without_backward():
    """Linear has no forward_with_grad: its parameters() are still its own
    arrays, and step(grads) updates the module."""
    ours, theirs = MODULES["Linear"]()
    ours.load_state_dict(theirs.state_dict())
    opt_q = qkv.optim.AdamW(ours.parameters(), lr=0.1)
    opt_t = torch.optim.AdamW(theirs.parameters(), lr=0.1)
    x = torch.randn(3, 6)
    for _ in range(2):
        theirs(x).square().sum().backward()
        opt_q.step([p.grad.numpy() for p in theirs.parameters()])
        opt_t.step()
        opt_t.zero_grad()
        y = torch.from_numpy(np.asarray(ours(x.numpy())))
        assert rel_err(y, theirs(x).detach()) <= 1e-6
    with pytest.raises(TypeError, match="pass the gradients"):
        opt_q.step()


def test_models_have_parameters():
    config = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 32}
    bert = qkv.models.BertModel(config)
    named = bert.named_parameters()
    assert [n for n, _ in named] == list(bert.state_dict())
    assert sum(a.size for a in bert.parameters()) == bert.num_parameters()
    ids = np.array([[1, 2, 3]])
    before = bert(ids)
    dict(named)["embeddings.word_embeddings.weight"][...] = 0  # live
    assert not np.allclose(bert(ids), before)
    decoder = qkv.models.DecoderModel(vocab_size=50, d_model=16, num_layers=1, num_heads=2,
                                      ffn_hidden=32, max_seq_len=8)
    assert [n for n, _ in decoder.named_parameters()] == list(decoder.state_dict())
    assert sum(a.size for a in decoder.parameters()) == decoder.num_parameters()


def test_optimizer_refuses_empty_and_wrong_parameters():
    with pytest.raises(ValueError, match="empty"):
        qkv.optim.AdamW(qkv.nn.positional.RotaryEmbedding(8).parameters())
    with pytest.raises(TypeError, match="params"):
        qkv.optim.AdamW(3)
