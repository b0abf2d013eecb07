"""qkv.distributed: attention over a sequence split across processes (ring attention).

    import torch.distributed as dist
    import qkv.distributed as qd
    dist.init_process_group("gloo", ...)          # every rank
    q, k, v = (x.chunk(world, -2)[rank] for x in (Q, K, V))         # this rank's block
    out = qd.ring_attention(q, k, v, is_causal=True)                  # [B, H, L_local, Ev]
    out.backward(grad)                            # every rank, together
    # Causal and balanced: the zig-zag layout, named to ring_attention.
    q, k, v = (qd.zigzag_split(x, rank, world) for x in (Q, K, V))
    out = qd.ring_attention(q, k, v, is_causal=True, layout="zigzag")
    full = qd.zigzag_gather(out)                  # the whole sequence, if needed

Each rank holds one block of the sequence: its queries, keys and values. The
key/value blocks travel around the ring of ranks (rank r sends to r + 1 and
receives from r − 1) with torch.distributed's isend/irecv, each transfer
overlapped with the attention of the block that arrived before it. The partial
outputs merge exactly through their log-sum-exp (qkv's kernels return it):

    lse = logaddexp(lse₁, lse₂),   o = o₁·exp(lse₁ − lse) + o₂·exp(lse₂ − lse)

The backward is a second ring pass: key/value blocks travel again, and with
them an accumulator of their dK, dV, which every rank adds its share to and
which arrives back at the block's owner after a full turn. A rank's share of a
block's gradient is exact because the backward op takes the forward's global
output and log-sum-exp: P = exp(S − lse) and D = rowsum(dO ∘ O) are the global
softmax and its row term restricted to the block (see _attend_backward).

Which tokens a rank holds only matters to causal attention, and the function
cannot see it, so the caller names it (`layout`):

- "contiguous" (the default, what x.chunk(N)[r] gives): rank r holds tokens
  [r·T/N, (r+1)·T/N). Rank r's queries see the blocks of ranks s < r whole,
  their own block causally, and nothing of ranks s > r: it skips those
  (the blocks still pass through it). Right, but unbalanced: rank N−1 does
  N − ½ blocks of work, rank 0 half of one, and every ring step waits for
  the slowest rank.
- "zigzag": the sequence is cut into 2N chunks and rank r holds chunks r and
  2N−1−r (one early, one late). At each ring step a rank attends either its
  whole query block to the first half of the arriving keys, or the second half
  of its queries to all arriving keys: half a block each time, on every rank
  (zigzag_split, zigzag_unsplit and zigzag_gather move tensors in and out of
  that layout). With a core per rank, causal attention up to 2 − 1/N times
  as fast as on contiguous blocks.

Transport: whatever backend the process group has (gloo on CPUs). What moves,
and when the transfers hide behind compute: docs/scaling.md. For processes on
one machine (tests, examples, benchmarks), init_local_group joins them:

    port = qd.free_port()                         # in the parent, once
    qd.init_local_group(rank, world_size, port)   # in each of the processes
"""

import datetime
import math
import os
import socket

import torch
import torch.distributed as dist

from . import _core
from . import runtime as _runtime
from . import torch as _qkv_torch

__all__ = ["free_port", "init_local_group", "ring_attention", "zigzag_gather",
           "zigzag_positions", "zigzag_split", "zigzag_unsplit"]

_FN = "ring_attention()"
_NEG_INF = float("-inf")
# Point-to-point tags: key/value blocks and gradient accumulators are matched apart.
_KV_TAG, _GRAD_TAG = 1, 2


# ---------------------------------------------------------------------------
# Process groups on one machine


def free_port(host="127.0.0.1"):
    """A TCP port on `host` that nothing listens on right now: the rendezvous
    port of a local process group (or of any local server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def init_local_group(rank, world_size, port, timeout_s=60, threads=1):
    """Joins a gloo process group of `world_size` processes on this machine,
    meeting at 127.0.0.1:`port` over the loopback interface. Each process
    runs torch and qkv on `threads` threads (1: a process per core). A
    collective that waits longer than `timeout_s` seconds raises."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(threads)
    _runtime.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


# ---------------------------------------------------------------------------
# The zig-zag layout


def _check_layout(length, world_size, what):
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{what}: world_size must be a positive int, got {world_size!r}")
    if length % (2 * world_size) != 0:
        raise ValueError(f"{what}: the sequence length {length} must be divisible by "
                         f"2·world_size = {2 * world_size} (2N chunks of equal length)")


def zigzag_split(x, rank, world_size, dim=-2):
    """Rank `rank`'s block of a whole sequence in the zig-zag layout.

    x: [..., T, ...] with the sequence along `dim` (-2 for [B, H, T, E],
    1 for a [B, T] padding mask)  ->  [..., 2T/(2N), ...]

    The sequence is cut into 2N equal chunks (N = world_size); rank r holds
    chunk r followed by chunk 2N−1−r. T must be divisible by 2N.
    """
    _check_layout(x.shape[dim], world_size, "zigzag_split()")
    if not 0 <= rank < world_size:
        raise ValueError(f"zigzag_split(): rank must be in [0, {world_size}), got {rank}")
    chunks = x.chunk(2 * world_size, dim)
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim)


def zigzag_unsplit(blocks, dim=-2):
    """The whole sequence from every rank's zig-zag block (blocks[r] from rank r):
    the inverse of zigzag_split."""
    halves = [b.chunk(2, dim) for b in blocks]
    if any(len(h) != 2 or h[0].shape != h[1].shape for h in halves):
        raise ValueError("zigzag_unsplit(): every block must have an even length along dim "
                         f"{dim} (two chunks), got {[b.shape[dim] for b in blocks]}")
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim)


def zigzag_gather(x, group=None, dim=-2):
    """Collective: every rank's zig-zag block gathered into the whole sequence,
    on every rank of `group` (all_gather, then zigzag_unsplit)."""
    x = x.contiguous()
    blocks = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(blocks, x, group=group)
    return zigzag_unsplit(blocks, dim)


def zigzag_positions(seq_len, rank, world_size):
    """The positions (token indices in the whole sequence) of rank `rank`'s
    zig-zag block: int64 [2·seq_len/(2N)], e.g. for rotary embeddings."""
    return zigzag_split(torch.arange(seq_len), rank, world_size, dim=0)


# ---------------------------------------------------------------------------
# The ring


class _Ring:
    """This rank's place in `group`: it sends to the next rank and receives
    from the previous one."""

    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def shift(self, send, tag):
        """Starts sending `send` to the next rank and receiving a tensor like it
        from the previous one. -> (the receive buffer, works to wait on);
        `send` must stay unchanged until the works are done."""
        received = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, group=self.group,
                          group_peer=(self.rank + 1) % self.size, tag=tag),
               dist.P2POp(dist.irecv, received, group=self.group,
                          group_peer=(self.rank - 1) % self.size, tag=tag)]
        return received, dist.batch_isend_irecv(ops)


class _NoComm:
    """A ring whose shifts move nothing: every step sees this rank's own block
    again. The same arithmetic as a real ring without its traffic (the
    benchmark's compute-only time)."""

    def __init__(self, rank, size):
        self.rank, self.size, self.group = rank, size, None

    def shift(self, send, tag):
        return send, []


def _wait(works):
    for work in works:
        work.wait()


class _Packer:
    """Packs a key block, a value block and the keys' keep mask into one flat
    tensor, so that one message per step carries them."""

    def __init__(self, k, v, keep):
        self.k_shape, self.v_shape = k.shape, v.shape
        self.keep_shape = None if keep is None else keep.shape
        self.k_numel, self.v_numel = k.numel(), v.numel()

    def pack(self, k, v, keep):
        parts = [k.reshape(-1), v.reshape(-1)]
        if keep is not None:
            parts.append(keep.reshape(-1).to(k.dtype))
        return torch.cat(parts)

    def unpack(self, flat):
        """-> (k, v, keep or None), views of `flat` (keep a new bool tensor)."""
        k = flat[:self.k_numel].view(self.k_shape)
        v = flat[self.k_numel:self.k_numel + self.v_numel].view(self.v_shape)
        keep = None
        if self.keep_shape is not None:
            keep = flat[self.k_numel + self.v_numel:].view(self.keep_shape) != 0
        return k, v, keep


_LAYOUTS = ("contiguous", "zigzag")


def _step_plan(rank, source, causal, layout, half):
    """Which of this rank's queries meet which keys of `source`'s block:
    -> (query rows, key rows, diagonal), or None when no query sees a key of
    it (the step computes nothing).

    Contiguous layout: an earlier rank's block is seen whole, a later one's
    not at all, the rank's own block causally. Zig-zag layout (chunks r and
    2N−1−r on rank r): a block from an earlier rank is seen by every query up
    to its first chunk; a block from a later rank only by the second half of
    the queries, all of it; its own block causally."""
    everything = slice(None)
    if not causal:
        return everything, everything, False
    if source == rank:
        return everything, everything, True
    if layout == "contiguous":
        return (everything, everything, False) if source < rank else None
    if source < rank:
        return everything, slice(0, half), False
    return slice(half, None), everything, False


# ---------------------------------------------------------------------------
# One block's attention, forward and backward


def _mask_arguments(keep, diagonal):
    """The op's (attn_mask, causal, window_right) for a key block with keep
    mask `keep` [B, S] (True = take part) on or off the diagonal."""
    mask = None if keep is None else keep[:, None, None, :]
    if not diagonal:
        return mask, "none", None
    if mask is None:
        return None, "top_left", None
    # qkv (as torch) refuses attn_mask with causal; a window ending at the
    # query (window_right=0) is the same causal mask and combines with it.
    return mask, "none", 0


def _options(q, k, v, keep, diagonal, scale):
    """The argument tuple of qkv's SDPA entry points (those torch.ops.qkv's
    ops call). The ring calls them directly: the first call of a torch custom
    op imports torch._dynamo, ~2 s and ~70 MB in every rank's process."""
    mask, causal, window_right = _mask_arguments(keep, diagonal)
    return _qkv_torch._core_args(q, k, v, mask, 0.0, causal, scale, False, None, window_right,
                                 None, None, None, None, False, "auto", "float32")


def _attend(q, k, v, keep, diagonal, scale):
    """Attention of queries q over one key block.

    q: [B, H, Lq, E]  k: [B, H, S, E]  v: [B, H, S, Ev]  keep: bool [B, S] or None
    -> (output [B, H, Lq, Ev], logsumexp float64 [B, H, Lq]; -inf for a row that
       sees none of the block's keys, whose output is 0)
    """
    out, lse, _, _ = _core.scaled_dot_product_attention_op(
        _options(q, k, v, keep, diagonal, scale), _FN)
    return _qkv_torch._as_torch(out, q.dtype), _qkv_torch._as_torch(lse, torch.float64)


def _sdpa_backward(grad_out, q, k, v, keep, out, lse, diagonal, scale):
    """qkv's SDPA backward: -> (dq, dk, dv) given the `out` and `lse` it is told."""
    grads = _core.scaled_dot_product_attention_op_backward(
        grad_out, out, lse, _options(q, k, v, keep, diagonal, scale), _FN)
    return tuple(_qkv_torch._as_torch(g, q.dtype) for g in grads[:3])


def _attend_backward(grad_out, q, k, v, keep, out, lse, diagonal, scale):
    """This key block's share of attention's gradients, given the GLOBAL output
    `out` and log-sum-exp `lse` of the queries (over all blocks' keys).

    -> (dq share [B, H, Lq, E], dk [B, H, S, E], dv [B, H, S, Ev])

    float32 runs qkv's fused backward, which takes P = exp(S − lse) and
    D = rowsum(dO ∘ O) from the `out` and `lse` it is given: with the global
    ones that is the global softmax restricted to the block, so the result is
    the block's exact share. qkv's float64 (reference) backward recomputes the
    softmax over the keys it sees instead, so there the block's local
    attention (o_b, lse_b, P_b) is corrected to the global one: with
    w = exp(lse_b − lse) (P = w·P_b) and c = w·dO·(o_b − O),
      dv = backward's dv at dO' = w·dO          (Σ_i P_ij dO_i)
      dS = dS' + c_i·P_b,ij                     (dS' the local dS at dO')
      dq += scale·c_i·Σ_j P_b,ij k_j,  dk_j += scale·Σ_i P_b,ij c_i q_i,
    the two sums being attention with values k and the dv of it at dO'' = c·q.
    """
    if q.dtype == torch.float32:
        return _sdpa_backward(grad_out, q, k, v, keep, out, lse, diagonal, scale)
    local_out, local_lse = _attend(q, k, v, keep, diagonal, scale)
    seen = local_lse != _NEG_INF
    w = torch.where(seen, torch.exp(local_lse - torch.where(seen, lse, 0.0)), 0.0)
    dq, dk, dv = _sdpa_backward((w.unsqueeze(-1) * grad_out).to(q.dtype), q, k, v, keep,
                                local_out, local_lse, diagonal, scale)
    c = (w * ((local_out - out) * grad_out).sum(-1)).unsqueeze(-1).to(q.dtype)
    key_mean, key_lse = _attend(q, k, k, keep, diagonal, scale)
    _, _, dk_extra = _sdpa_backward((c * q).contiguous(), q, k, k, keep, key_mean, key_lse,
                                    diagonal, scale)
    return dq + scale * c * key_mean, dk + scale * dk_extra, dv


def _merge(out, lse, block_out, block_lse):
    """In place: (out, lse) over keys A, and block_out, block_lse over keys B
    -> the attention over A ∪ B. Rows that see no key stay 0 and -inf."""
    merged = torch.logaddexp(lse, block_lse)
    seen = merged != _NEG_INF
    base = torch.where(seen, merged, 0.0)
    w_old = torch.where(seen, torch.exp(lse - base), 0.0).unsqueeze(-1).to(out.dtype)
    w_new = torch.where(seen, torch.exp(block_lse - base), 0.0).unsqueeze(-1).to(out.dtype)
    out.mul_(w_old).add_(block_out * w_new)
    lse.copy_(merged)


def _rows(x, rows):
    return x[..., rows, :].contiguous()


# ---------------------------------------------------------------------------
# The two ring passes


def _ring_forward(q, k, v, keep, causal, layout, scale, ring):
    """-> (output [B, H, L, Ev], logsumexp float64 [B, H, L]) of this rank's
    queries over every rank's keys."""
    half = q.shape[-2] // 2
    packer = _Packer(k, v, keep)
    block = packer.pack(k, v, keep)
    out = lse = None
    for step in range(ring.size):
        works = []
        if step + 1 < ring.size:  # the next block travels while this one computes
            incoming, works = ring.shift(block, _KV_TAG)
        source = (ring.rank - step) % ring.size
        plan = _step_plan(ring.rank, source, causal, layout, half)
        if plan is not None:
            rows, keys, diagonal = plan
            kb, vb, keepb = packer.unpack(block)
            block_out, block_lse = _attend(
                _rows(q, rows), _rows(kb, keys), _rows(vb, keys),
                None if keepb is None else keepb[:, keys].contiguous(), diagonal, scale)
            if out is None:  # step 0: this rank's own block, every query
                out, lse = block_out.clone(), block_lse.clone()
            else:
                _merge(out[..., rows, :], lse[..., rows], block_out, block_lse)
        _wait(works)
        if works:
            block = incoming
    return out, lse


def _ring_backward(grad_out, q, k, v, keep, out, lse, causal, layout, scale, ring):
    """-> (dq, dk, dv) of this rank's blocks. Key/value blocks travel as in the
    forward; each rank adds its share of dK, dV of the block it holds to the
    accumulator that arrives from the previous rank (computed there one step
    earlier) and passes it on; after N steps it reaches the block's owner.
    Both transfers of a step overlap the next step's compute. A block none of
    this rank's queries see passes its accumulator on unchanged."""
    half = q.shape[-2] // 2
    packer = _Packer(k, v, keep)
    block = packer.pack(k, v, keep)
    k_numel = k.numel()
    dq = torch.zeros_like(q)
    incoming_grad, grad_works, in_flight = None, [], None
    for step in range(ring.size):
        kv_works = []
        if step + 1 < ring.size:
            incoming, kv_works = ring.shift(block, _KV_TAG)
        source = (ring.rank - step) % ring.size
        plan = _step_plan(ring.rank, source, causal, layout, half)
        if plan is None:  # step > 0: the rank's own block is never skipped
            _wait(grad_works)
            grad = incoming_grad
        else:
            rows, keys, diagonal = plan
            kb, vb, keepb = packer.unpack(block)
            dq_b, dk_b, dv_b = _attend_backward(
                _rows(grad_out, rows), _rows(q, rows), _rows(kb, keys), _rows(vb, keys),
                None if keepb is None else keepb[:, keys].contiguous(), _rows(out, rows),
                lse[..., rows].contiguous(), diagonal, scale)
            dq[..., rows, :] += dq_b
            grad = torch.zeros(k_numel + v.numel(), dtype=q.dtype)
            grad[:k_numel].view(k.shape)[..., keys, :] = dk_b
            grad[k_numel:].view(v.shape)[..., keys, :] = dv_b
            if step > 0:  # the accumulator of this block, from the previous rank
                _wait(grad_works)
                grad += incoming_grad
        if ring.size == 1:  # nothing to pass on (and gloo cannot send to itself)
            incoming_grad = grad
        else:
            # Kept until the send is waited for (next step): one accumulator in flight.
            incoming_grad, grad_works = ring.shift(grad, _GRAD_TAG)
            in_flight = grad
        _wait(kv_works)
        if kv_works:
            block = incoming
    _wait(grad_works)  # after a full turn: this rank's own block's dK, dV
    del in_flight
    return dq, incoming_grad[:k_numel].view(k.shape), incoming_grad[k_numel:].view(v.shape)


class _RingAttention(torch.autograd.Function):

    @staticmethod
    def forward(ctx, q, k, v, keep, causal, layout, scale, ring):
        out, lse = _ring_forward(q, k, v, keep, causal, layout, scale, ring)
        ctx.save_for_backward(q, k, v, keep, out, lse)
        ctx.causal, ctx.layout, ctx.scale, ctx.ring = causal, layout, scale, ring
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        q, k, v, keep, out, lse = ctx.saved_tensors
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        dq, dk, dv = _ring_backward(grad_out.to(q.dtype).contiguous(), q, k, v, keep, out, lse,
                                    ctx.causal, ctx.layout, ctx.scale, ctx.ring)
        return dq, dk, dv, None, None, None, None, None


# ---------------------------------------------------------------------------
# Checks: every rank must agree, or every rank raises


_DTYPES = {torch.float32: 1, torch.float64: 2}
_FIELDS = ("arguments valid", "batch", "heads", "block length", "query/key head dim",
           "value head dim", "dtype", "is_causal", "key_padding_mask given", "layout")
# How a disagreement names a descriptor's coded values.
_VALUE_NAMES = {"dtype": {code: str(t) for t, code in _DTYPES.items()},
                "layout": {code: repr(name) for code, name in enumerate(_LAYOUTS)}}


def _local_problem(q, k, v, key_padding_mask, is_causal, scale, layout):
    """-> (exception or None, the descriptor other ranks must share)."""
    if not (isinstance(layout, str) and layout in _LAYOUTS):
        return ValueError(f"{_FN}: layout must be 'contiguous' (rank r holds tokens "
                          "[r·T/N, (r+1)·T/N)) or 'zigzag' (zigzag_split's chunks r and "
                          f"2N−1−r), got {layout!r}"), None
    tensors = {"q": q, "k": k, "v": v}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return TypeError(f"{_FN}: {name} must be a torch.Tensor, got {type(t).__name__}"), None
        if t.dim() != 4:
            return ValueError(f"{_FN}: {name} must be 4-D [B, H, L, E] (this rank's block), "
                              f"got shape {tuple(t.shape)}"), None
        if t.dtype not in _DTYPES:
            return TypeError(f"{_FN}: {name} must be float32 or float64, got {t.dtype}"), None
        if t.device.type != "cpu":
            return ValueError(f"{_FN}: {name} must be a CPU tensor, got device {t.device}"), None
    if not q.dtype == k.dtype == v.dtype:
        return TypeError(f"{_FN}: q, k and v must have one dtype, got {q.dtype}, {k.dtype} "
                         f"and {v.dtype}"), None
    B, H, L, E = q.shape
    if tuple(k.shape) != (B, H, L, E):
        return ValueError(f"{_FN}: k must have q's shape {tuple(q.shape)} (blocks of one "
                          f"sequence, as many heads), got {tuple(k.shape)}"), None
    if tuple(v.shape[:3]) != (B, H, L):
        return ValueError(f"{_FN}: v must be [B, H, L, Ev] = [{B}, {H}, {L}, Ev] like k, got "
                          f"{tuple(v.shape)}"), None
    if L == 0 or E == 0 or v.shape[-1] == 0:
        return ValueError(f"{_FN}: empty blocks are not allowed, got q {tuple(q.shape)} and v "
                          f"{tuple(v.shape)}"), None
    if is_causal and layout == "zigzag" and L % 2 != 0:
        return ValueError(f"{_FN}: is_causal with layout='zigzag' needs two chunks per rank, "
                          f"so the block length must be even, got {L}"), None
    if key_padding_mask is not None:
        m = key_padding_mask
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            kind = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            return TypeError(f"{_FN}: key_padding_mask must be a bool torch.Tensor "
                             f"(True = padding), got {kind}"), None
        if tuple(m.shape) != (B, L):
            return ValueError(f"{_FN}: key_padding_mask must be [B, L] = [{B}, {L}] (this "
                              f"rank's keys), got {tuple(m.shape)}"), None
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)):
        return ValueError(f"{_FN}: scale must be a finite number or None, got {scale!r}"), None
    return None, (1, B, H, L, E, v.shape[-1], _DTYPES[q.dtype], int(bool(is_causal)),
                  int(key_padding_mask is not None), _LAYOUTS.index(layout))


def _check_ranks_agree(problem, descriptor, ring):
    """All-gathers the ranks' descriptors: a rank whose arguments are invalid,
    or that disagrees with another, makes every rank raise (instead of the
    others blocking in a transfer that never comes)."""
    mine = torch.tensor(descriptor if descriptor else (0,) * len(_FIELDS), dtype=torch.int64)
    everyone = [torch.empty_like(mine) for _ in range(ring.size)]
    dist.all_gather(everyone, mine, group=ring.group)
    if problem is not None:
        raise problem
    for other, theirs in enumerate(everyone):
        if theirs[0] == 0:
            raise ValueError(f"{_FN}: rank {other} rejected its arguments (its error says why); "
                             "every rank stops")
        for field, a, b in zip(_FIELDS, mine.tolist(), theirs.tolist()):
            if a != b:
                a, b = (_VALUE_NAMES.get(field, {}).get(x, x) for x in (a, b))
                raise ValueError(f"{_FN}: every rank must pass blocks of one shape and the same "
                                 f"options, but {field} is {a} on rank {ring.rank} and {b} on "
                                 f"rank {other}")


def ring_attention(q, k, v, key_padding_mask=None, is_causal=False, scale=None, group=None,
                   layout="contiguous"):
    """Scaled dot-product attention over a sequence split across the ranks of
    `group` (ring attention), differentiable.

    q: [B, H, L, E]  k: [B, H, L, E]  v: [B, H, L, Ev]  ->  [B, H, L, Ev]

    q, k, v are this rank's block of the sequence (L = T/N tokens of the whole
    T); the output is the attention of this rank's queries over the keys of
    every rank, equal to scaled_dot_product_attention on the whole sequence
    restricted to this rank's rows. Every rank of `group` (default: the world)
    must call it, with blocks of one shape and the same options, and later
    call backward together too.

    key_padding_mask: bool [B, L], True = this key is padding (torch's
        key_padding_mask polarity); it travels with its keys.
    is_causal: causal attention over the whole sequence. Which tokens each
        rank holds decides what it sees, and the blocks cannot tell, hence:
    layout: how the sequence was split (only causal attention depends on it).
        "contiguous" (default): rank r holds tokens [r·L, (r+1)·L), as
        x.chunk(N, -2)[r] gives; exact, but rank N−1 does about 2N − 1 times
        rank 0's work. "zigzag": the blocks of zigzag_split (chunks r and
        2N−1−r of 2N; L even), every rank the same work: the fast path for
        causal attention. The caller must say which one it used: a wrong
        layout gives wrong numbers, not an error.
    scale: defaults to 1/sqrt(E).

    float32 (qkv's fused kernels) or float64 (its float64 reference) CPU
    tensors. Memory per rank: this rank's blocks, two key/value blocks in
    flight, and no L×S matrix. Errors (every rank raises, none hangs):
    TypeError / ValueError naming the argument, or the field on which two
    ranks disagree.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{_FN}: torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group first (every rank)")
    ring = _Ring(group)
    problem, descriptor = _local_problem(q, k, v, key_padding_mask, is_causal, scale, layout)
    _check_ranks_agree(problem, descriptor, ring)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    keep = None if key_padding_mask is None else ~key_padding_mask
    out, _ = _RingAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), keep,
                                  bool(is_causal), layout, scale, ring)
    return out
