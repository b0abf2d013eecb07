"""DistributedDataParallel (gloo, 2 and 4 local processes) training a model whose
attention is qkv's: 20 steps give the parameters of one process training on the
whole batch (examples/python/ddp_train.py is the model and the loop)."""

import pathlib
import sys

import numpy as np
import pytest
import torch

from distributed_helpers import run_ranks
from helpers import rel_err

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"))
import ddp_train  # noqa: E402

STEPS, BATCH, SEQ = 20, 8, 16
DTYPES = [torch.float32, torch.float64]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"{n}ranks")
def ddp_results(request, tmp_path_factory):
    world_size = request.param
    out_path = tmp_path_factory.mktemp(f"ddp{world_size}") / "ddp"
    run_ranks(ddp_train.ddp_worker, world_size, (STEPS, BATCH, SEQ, DTYPES, str(out_path)),
              timeout=120)
    return world_size, [torch.load(f"{out_path}.rank{r}") for r in range(world_size)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_ddp_equals_single_process_on_the_whole_batch(ddp_results, dtype):
    world_size, per_rank = ddp_results
    torch.set_num_threads(1)
    single = ddp_train.build(dtype)
    initial = {name: p.detach().clone() for name, p in single.named_parameters()}
    losses = ddp_train.train(single, ddp_train.batches(STEPS, BATCH, SEQ))
    assert losses[-1] < 0.8 * losses[0], "the model should learn something in 20 steps"
    for rank, results in enumerate(per_rank):
        ours = results[str(dtype)]["parameters"]
        for name, p in single.named_parameters():
            assert ours[name].dtype == dtype
            err = rel_err(ours[name], p)
            assert err <= TOLERANCE[dtype], f"rank {rank}, {name}: relative error {err:.3g}"
            # the comparison means something: every parameter moved
            assert not torch.equal(ours[name], initial[name]), name
    # The mean of the ranks' first losses is the whole batch's first loss.
    first = np.mean([r[str(dtype)]["losses"][0] for r in per_rank])
    assert abs(first - losses[0]) <= 1e-5 * abs(losses[0])
