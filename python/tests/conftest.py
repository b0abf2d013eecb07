"""pytest configuration for qkv's parity suite (torch 2.13 is the oracle)."""

import torch

# torch's MultiheadAttention may take a native "fast path" in eval mode with
# different numerics; pin the ordinary path so that comparisons are meaningful.
torch.backends.mha.set_fastpath_enabled(False)

# The cases are tiny: extra threads only add contention on a shared 2-core machine.
torch.set_num_threads(1)

# The Ctrl-C tests send SIGINT and expect KeyboardInterrupt, as in a terminal.
# A runner started in the background by a non-interactive shell inherits SIGINT
# ignored, and then Python installs no handler: restore Python's own.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
