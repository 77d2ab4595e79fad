"""Timing a kernel as a plan calls it: with its weights, and a large input, out of the core's
caches.

Why (a choice WPK leaves open): a plan calls each layer once per inference, and the layers in
between evict its weights from the per-core L2, while the input was written a moment ago by
the previous layer. Timing a kernel back to back on the same arrays keeps its weights in L2,
and ranks configs by a case that never occurs. Measured on MnasNet's 1×1 conv 1152→192 at 7²
(Zen 4, 2 threads): the config tuning had kept (2 × 8 channels × 3 pixels) ran 0.171 ms back to
back but 0.208 ms with its weights cold, while (16 channels × 4 pixels) ran 0.163 ms cold;
the plan ran the kept kernel at 0.20 ms against ONNX Runtime's 0.124.

So each call reads its weights (argument 1) from the next of several copies that together
exceed the L2 of every core but fit a last-level cache, as a model's weights do: the copies
come from L3, as in a plan. An input (argument 0) of at least a core's L2 rotates the same
way: in a plan the producer has just written it, split among the cores, and it no longer fits
one core's L2. Measured on mobilenet_v2's 3×3 depthwise conv at 112² × 32 (1.6 MB input, Zen
4, 2 threads): tuning had kept channel tiles in parallel (each core reads every other cache
line of the whole image), 0.097 ms on a hot input; run right after its producer it took
0.17-0.21 ms, while rows in parallel took 0.13-0.14, and with a rotated input the ranking was
the same as after the producer (0.29 against 0.20). Other arguments stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ROTATED_BYTES = 16 << 20     # the weights' copies together: over any L2, within a usual L3
MIN_WEIGHT_BYTES = 16 << 10  # smaller weights are fetched in a few cache lines: not rotated
MIN_INPUT_BYTES = 1 << 20    # a core's L2 (Zen 4): a smaller input stays where its producer wrote


def rotating_call(kernel: Callable, args: list) -> Callable[[], object]:
    """A call of `kernel(*args)` that takes argument 1 (weights of at least MIN_WEIGHT_BYTES)
    and argument 0 (an input of at least MIN_INPUT_BYTES) from the next of their rotated
    copies (see the module docstring); a plain call when neither is worth it."""
    rotated = [i for i, least in ((0, MIN_INPUT_BYTES), (1, MIN_WEIGHT_BYTES))
               if i < len(args) and isinstance(args[i], np.ndarray) and args[i].nbytes >= least]
    if not rotated:
        return lambda: kernel(*args)
    count = max(2, ROTATED_BYTES // sum(args[i].nbytes for i in rotated))
    copies = []
    for _ in range(count):
        copy = list(args)
        for i in rotated:
            copy[i] = args[i].copy()
        copies.append(copy)
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(copies)
        return kernel(*copies[state[0]])

    return call
