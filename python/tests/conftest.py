"""pytest configuration for qkv's parity suite (torch 2.13 is the oracle)."""

import torch

# torch's MultiheadAttention may take a native "fast path" in eval mode with
# different numerics; pin the ordinary path so that comparisons are meaningful.
torch.backends.mha.set_fastpath_enabled(False)

# The cases are tiny: extra threads only add contention on a shared 2-core machine.
torch.set_num_threads(1)
