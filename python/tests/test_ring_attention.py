"""qkv.distributed.ring_attention on 2 and 4 local processes (gloo) against
single-process SDPA: outputs and gradients, both layouts (contiguous blocks and
zig-zag), causal and not, with a padding mask; float32 (fused kernels) and
float64 (reference)."""

import datetime

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as TF

import qkv.distributed as qd
import qkv.torch
from distributed_helpers import init_gloo, run_ranks
from helpers import TOLERANCE, rel_err

CASES = [(dtype, layout, causal, padded) for dtype in (torch.float32, torch.float64)
         for layout in ("contiguous", "zigzag") for causal in (False, True)
         for padded in (False, True)]
B, H, E, EV, CHUNK = 2, 2, 16, 8, 8
# Contiguous blocks are one token shorter than two zig-zag chunks: odd, which
# only the zig-zag layout forbids.
CONTIGUOUS_BLOCK = 2 * CHUNK - 1
# The case run again without `layout`: the default must be right for causal
# attention on contiguous blocks (it used to assume zig-zag, silently).
DEFAULT_CASE = (torch.float64, "contiguous", True, True)


def case_id(case):
    dtype, layout, causal, padded = case
    return (f"{'f32' if dtype == torch.float32 else 'f64'}-{layout}-"
            f"{'causal' if causal else 'full'}{'-padded' if padded else ''}")


def case_inputs(case, world_size):
    """The whole sequence: q, k [B, H, T, E], v [B, H, T, Ev], the output's
    gradient, and the padding mask [B, T] (True = padding) or None. The
    first sequence is padded at its end over more than a rank's block (zig-zag:
    a chunk), the second at its start: with is_causal its first queries see no
    key at all."""
    dtype, layout, causal, padded = case
    block = CONTIGUOUS_BLOCK if layout == "contiguous" else 2 * CHUNK
    T = block * world_size
    g = torch.Generator().manual_seed(1000 * world_size + CASES.index(case))
    q, k = (torch.randn(B, H, T, E, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, H, T, EV, generator=g, dtype=torch.float64)
    grad = torch.randn(B, H, T, EV, generator=g, dtype=torch.float64)
    pad = None
    if padded:
        pad = torch.zeros(B, T, dtype=torch.bool)
        pad[0, T - (block if layout == "contiguous" else CHUNK) - 4:] = True
        pad[1, :3] = True
    return [t.to(dtype) for t in (q, k, v, grad)] + [pad]


def split(x, rank, world_size, layout, dim=-2):
    if layout == "zigzag":
        return qd.zigzag_split(x, rank, world_size, dim)
    return x.chunk(world_size, dim)[rank]


def unsplit(blocks, layout, dim=-2):
    return qd.zigzag_unsplit(blocks, dim) if layout == "zigzag" else torch.cat(blocks, dim)


def count_calls(name, calls):
    """Replaces qd.<name> (in this worker process) by a wrapper counting its calls."""
    fn = getattr(qd, name)

    def counted(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)
    setattr(qd, name, counted)


def run_case(case, rank, world_size, calls, **layout):
    """-> [output, dq, dk, dv] of this rank's block, and how many key blocks the
    forward and the backward attended to."""
    q, k, v, grad, pad = case_inputs(case, world_size)
    _, layout_name, causal, _ = case
    local = [split(t, rank, world_size, layout_name).clone().requires_grad_()
             for t in (q, k, v)]
    local_pad = None if pad is None else split(pad, rank, world_size, layout_name, dim=1)
    calls.update(_attend=0, _attend_backward=0)
    out = qd.ring_attention(*local, key_padding_mask=local_pad, is_causal=causal, **layout)
    forward_blocks = calls["_attend"]
    out.backward(split(grad, rank, world_size, layout_name))
    return ([out.detach()] + [t.grad for t in local],
            (forward_blocks, calls["_attend_backward"]))


def ring_worker(rank, world_size, port, out_dir):
    init_gloo(rank, world_size, port)
    calls = {}
    for name in ("_attend", "_attend_backward"):
        count_calls(name, calls)
    results, blocks = {}, {}
    for case in CASES:
        results[case_id(case)], blocks[case_id(case)] = run_case(
            case, rank, world_size, calls, layout=case[1])
    results["default"], _ = run_case(DEFAULT_CASE, rank, world_size, calls)
    results["blocks"] = blocks
    # Arguments that disagree between ranks: every rank raises, none hangs,
    # and the group still works afterwards.
    x = torch.randn(1, 1, 4 + 2 * rank, 8)
    try:
        qd.ring_attention(x, x, x)
        results["disagree"] = "no error"
    except ValueError as e:
        results["disagree"] = str(e)
    y = torch.ones(1, 1, 4, 8)
    try:
        qd.ring_attention(y, y, y, is_causal=True, layout="zigzag" if rank else "contiguous")
        results["layouts"] = "no error"
    except ValueError as e:
        results["layouts"] = str(e)
    bad = torch.randn(1, 1, 4, 8, dtype=torch.float64 if rank == 1 else torch.float32)
    try:
        qd.ring_attention(bad, bad, bad.float())
        results["invalid"] = "no error"
    except (TypeError, ValueError) as e:
        results["invalid"] = str(e)
    results["after"] = qd.ring_attention(y, y, y, is_causal=True)
    torch.save(results, out_dir / f"rank{rank}.pt")
    dist.destroy_process_group()


def reference(case, world_size):
    """Single-process SDPA on the whole sequence, float64, torch autograd:
    -> [output, dq, dk, dv]."""
    q, k, v, grad, pad = case_inputs(case, world_size)
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    T = q.shape[-2]
    keep = torch.ones(B, 1, T, T, dtype=torch.bool)
    if pad is not None:
        keep = keep & ~pad[:, None, None, :]
    if case[2]:
        keep = keep & torch.ones(T, T, dtype=torch.bool).tril()
    out = TF.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    out.backward(grad.double())
    return [out.detach(), q.grad, k.grad, v.grad], keep


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def ring_results(request, tmp_path_factory):
    world_size = request.param
    out_dir = tmp_path_factory.mktemp(f"ring{world_size}")
    run_ranks(ring_worker, world_size, (out_dir,), timeout=120)
    per_rank = [torch.load(out_dir / f"rank{r}.pt") for r in range(world_size)]
    return world_size, per_rank


def assert_equals_sdpa(per_rank, key, case, world_size):
    """The ranks' blocks (results[key]) put together against single-process
    SDPA: torch's in float64, and qkv's in the case's dtype."""
    dtype, layout = case[:2]
    ours = [unsplit([r[key][i] for r in per_rank], layout) for i in range(4)]
    expected, keep = reference(case, world_size)
    tol = TOLERANCE[np.float32 if dtype == torch.float32 else np.float64]
    for name, a, b in zip(("output", "dq", "dk", "dv"), ours, expected):
        assert a.dtype == dtype
        err = rel_err(a, b)
        assert err <= tol, f"{name}: relative error {err:.3g} > {tol:g}"
    q, k, v, grad, _ = case_inputs(case, world_size)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = qkv.torch.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    out.backward(grad)
    for name, a, b in zip(("output", "dq", "dk", "dv"), ours, (out, q.grad, k.grad, v.grad)):
        err = rel_err(a, b)
        assert err <= tol, f"{name} vs qkv single-process: relative error {err:.3g} > {tol:g}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_ring_equals_single_process_sdpa(ring_results, case):
    world_size, per_rank = ring_results
    assert_equals_sdpa(per_rank, case_id(case), case, world_size)


def test_causal_contiguous_blocks_by_default_equal_sdpa(ring_results):
    """The default layout is the obvious split, and causal attention on it is right."""
    world_size, per_rank = ring_results
    assert_equals_sdpa(per_rank, "default", DEFAULT_CASE, world_size)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_ring_attends_only_to_blocks_it_sees(ring_results, case):
    """Causal on contiguous blocks, rank r skips the blocks of ranks after it
    (r + 1 of N blocks, forward and backward); otherwise all N."""
    world_size, per_rank = ring_results
    for rank, results in enumerate(per_rank):
        expected = rank + 1 if case[1:3] == ("contiguous", True) else world_size
        assert results["blocks"][case_id(case)] == (expected, expected), f"rank {rank}"


def test_ring_ranks_that_disagree_all_raise(ring_results):
    world_size, per_rank = ring_results
    for rank, results in enumerate(per_rank):
        assert "block length is" in results["disagree"], results["disagree"]
        other = "'contiguous' on rank 0" if rank else "'zigzag' on rank 1"
        assert "layout is" in results["layouts"] and other in results["layouts"], \
            results["layouts"]
        if rank == 1:
            assert "one dtype" in results["invalid"], results["invalid"]
        else:
            assert "rank 1 rejected its arguments" in results["invalid"], results["invalid"]
        # The ranks still talk after the errors: causal attention of equal
        # values gives those values back.
        assert rel_err(results["after"], torch.ones(1, 1, 4, 8)) <= 1e-6


# --- single process ---------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_block_backward_with_global_statistics_gives_the_blocks_share(dtype, causal):
    """The premise of the ring's backward: each key block's backward, given the
    GLOBAL output and log-sum-exp, yields that block's dk, dv and share of dq."""
    g = torch.Generator().manual_seed(7)
    L, S1, S2 = 12, 12, 9
    q = torch.randn(2, 3, L, 16, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, S1 + S2, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, S1 + S2, 8, generator=g, dtype=torch.float64)
    grad = torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64)
    keep = torch.ones(2, S1 + S2, dtype=torch.bool)
    keep[1, S1 - 4:S1 + 2] = False
    mask = keep[:, None, None, :].expand(2, 1, L, S1 + S2)
    if causal:  # the first block causal (on the diagonal), the second seen whole
        mask = mask & torch.cat([torch.ones(L, S1, dtype=torch.bool).tril(),
                                 torch.ones(L, S2, dtype=torch.bool)], 1)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    out = TF.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask)
    out.backward(grad)

    q, k, v, grad = (t.to(dtype) for t in (q, k, v, grad))
    full_mask = mask.clone()
    global_out, global_lse, _ = torch.ops.qkv.scaled_dot_product_attention(
        q, k, v, attn_mask=full_mask)
    scale = 16 ** -0.5
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    for keys, diagonal in ((slice(0, S1), causal), (slice(S1, None), False)):
        dq_b, dk_b, dv_b = qd._attend_backward(
            grad, q, k[..., keys, :].contiguous(), v[..., keys, :].contiguous(),
            keep[:, keys].contiguous(), global_out, global_lse, diagonal, scale)
        dq += dq_b
        dks.append(dk_b)
        dvs.append(dv_b)
    tol = TOLERANCE[np.float32 if dtype == torch.float32 else np.float64]
    for name, a, b in (("dq", dq, qr.grad), ("dk", torch.cat(dks, -2), kr.grad),
                       ("dv", torch.cat(dvs, -2), vr.grad)):
        err = rel_err(a, b)
        assert err <= tol, f"{name}: relative error {err:.3g} > {tol:g}"


def test_merging_two_blocks_through_logsumexp_is_exact():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g, dtype=torch.float64) for _ in range(3))
    keep = torch.tensor([[True, True, True, False, False, False]])
    out, lse = qd._attend(q, k, v, keep, False, 8 ** -0.5)
    a_out, a_lse = qd._attend(q, k[..., :3, :], v[..., :3, :], keep[:, :3], False, 8 ** -0.5)
    b_out, b_lse = qd._attend(q, k[..., 3:, :], v[..., 3:, :], keep[:, 3:], False, 8 ** -0.5)
    assert torch.isinf(b_lse).all() and not b_out.any()  # block b: only padding
    a_out = a_out.clone()
    qd._merge(a_out, a_lse, b_out, b_lse)
    assert rel_err(a_out, out) <= 1e-15 and rel_err(a_lse, lse) <= 1e-15


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_step_plans_cover_the_causal_mask_once(world_size, layout):
    """Over all ranks and ring steps, the (query, key) pairs the plans attend
    to are each pair of the causal mask exactly once, and a skipped step
    (None) is one whose block no query sees."""
    T, half = 4 * world_size, 2
    position = [split(torch.arange(T), r, world_size, layout, dim=0)
                for r in range(world_size)]
    seen = torch.zeros(T, T, dtype=torch.int64)
    for rank in range(world_size):
        for source in range(world_size):
            plan = qd._step_plan(rank, source, True, layout, half)
            if plan is None:
                assert (position[rank][:, None] < position[source][None, :]).all()
                continue
            rows, keys, diagonal = plan
            queries, keys = position[rank][rows], position[source][keys]
            pairs = torch.ones(len(queries), len(keys), dtype=torch.int64)
            seen[queries[:, None], keys[None, :]] += pairs.tril() if diagonal else pairs
    assert torch.equal(seen, torch.ones(T, T, dtype=torch.int64).tril())


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_zigzag_split_and_unsplit(world_size):
    T = 4 * world_size
    x = torch.arange(2 * T).reshape(2, T)
    blocks = [qd.zigzag_split(x, r, world_size, dim=1) for r in range(world_size)]
    c = T // (2 * world_size)
    for r, block in enumerate(blocks):  # chunks r and 2N-1-r
        second = (2 * world_size - 1 - r) * c
        assert block[0].tolist() == list(range(r * c, (r + 1) * c)) + \
            list(range(second, second + c))
        assert torch.equal(qd.zigzag_positions(T, r, world_size), block[0])
    assert torch.equal(qd.zigzag_unsplit(blocks, dim=1), x)
    with pytest.raises(ValueError, match="divisible by 2·world_size"):
        qd.zigzag_split(torch.zeros(1, T + 1), 0, world_size, dim=1)


def test_ring_attention_needs_an_initialized_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(RuntimeError, match="init_process_group"):
        qd.ring_attention(x, x, x)


@pytest.fixture()
def world_of_one(monkeypatch):
    """A gloo group of this process alone: the ring has one rank."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = dist.TCPStore("127.0.0.1", qd.free_port(), 1, True,
                          timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ring_of_one_rank_is_sdpa(world_of_one, causal, layout):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 10, 8, generator=g).requires_grad_() for _ in range(3))
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 6:] = True
    out = qd.ring_attention(q, k, v, key_padding_mask=pad, is_causal=causal, layout=layout)
    out.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    keep = ~pad[:, None, None, :]
    if causal:
        keep = keep & torch.ones(10, 10, dtype=torch.bool).tril()
    expected = qkv.torch.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    expected.sum().backward()
    assert rel_err(out, expected) <= 1e-6
    for a, t in zip(grads, (q, k, v)):
        assert rel_err(a, t.grad) <= 1e-5


@pytest.mark.parametrize("args, error, message", [
    (dict(q=torch.zeros(2, 4, 8)), ValueError, "q must be 4-D"),
    (dict(q=torch.zeros(1, 1, 4, 8, dtype=torch.float16)), TypeError, "q must be float32"),
    (dict(k=torch.zeros(1, 1, 4, 8, dtype=torch.float64)), TypeError, "one dtype"),
    (dict(k=torch.zeros(1, 2, 4, 8)), ValueError, "k must have q's shape"),
    (dict(v=torch.zeros(1, 1, 5, 8)), ValueError, "v must be"),
    (dict(q=[1.0]), TypeError, "q must be a torch.Tensor"),
    (dict(is_causal=True, layout="zigzag", q=torch.zeros(1, 1, 3, 8),
          k=torch.zeros(1, 1, 3, 8), v=torch.zeros(1, 1, 3, 8)), ValueError, "must be even"),
    (dict(layout="zig-zag"), ValueError, "layout must be 'contiguous' .* or 'zigzag'"),
    (dict(layout=None), ValueError, "layout must be .* got None"),
    (dict(key_padding_mask=torch.zeros(1, 4)), TypeError, "key_padding_mask must be a bool"),
    (dict(key_padding_mask=torch.zeros(1, 5, dtype=torch.bool)), ValueError,
     r"key_padding_mask must be \[B, L\] = \[1, 4\]"),
    (dict(scale=float("nan")), ValueError, "scale must be a finite"),
])
def test_ring_attention_rejects_bad_arguments(world_of_one, args, error, message):
    kwargs = dict(q=torch.zeros(1, 1, 4, 8), k=torch.zeros(1, 1, 4, 8),
                  v=torch.zeros(1, 1, 4, 8))
    kwargs.update(args)
    with pytest.raises(error, match=message):
        qd.ring_attention(**kwargs)
