"""Timing a kernel as a plan calls it: with its weights out of the core's caches.

Why (a choice WPK leaves open): a plan calls each layer once per inference, and the layers in
between evict its weights from the per-core L2, while the input was written a moment ago by
the previous layer. Timing a kernel back to back on the same arrays keeps its weights in L2,
and ranks configs by a case that never occurs. Measured on MnasNet's 1×1 conv 1152→192 at 7²
(Zen 4, 2 threads): the config tuning had kept (2 × 8 channels × 3 pixels) ran 0.171 ms back to
back but 0.208 ms with its weights cold, while (16 channels × 4 pixels) ran 0.163 ms cold;
the plan ran the kept kernel at 0.20 ms against ONNX Runtime's 0.124.

So each call reads its weights (argument 1) from the next of several copies that together
exceed the L2 of every core but fit a last-level cache, as a model's weights do: the copies
come from L3, as in a plan. Other arguments stay as they are.

And a kernel that can write into a given array (a Halide `AotKernel`: `out_shape`,
`out_dtype`, `out=`) writes every call into one array allocated once, as a plan writes into its
arena: a fresh output each call faults its pages in first. Measured on Emerald Rapids (2
threads): a 128×768 float32 → bf16 copy took 0.09-0.11 ms into a fresh output and 0.008-0.011
ms into a reused one; `dense_bf16` 128×768·768×768 0.32 and 0.48 ms (its two knob values) against
0.18 and 0.22.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from woodpecker.config import MIN_WEIGHT_BYTES, ROTATED_BYTES


def rotating_call(kernel: Callable, args: list) -> Callable[[], object]:
    """A call of `kernel(*args)` that takes argument 1 from the next of its rotated copies
    (see the module docstring); a plain call when argument 1 is not a weight array worth it."""
    run = _into_one_output(kernel)
    w = args[1] if len(args) > 1 else None
    if not isinstance(w, np.ndarray) or w.nbytes < MIN_WEIGHT_BYTES:
        return lambda: run(*args)
    copies = [[*args[:1], w.copy(), *args[2:]] for _ in range(max(2, ROTATED_BYTES // w.nbytes))]
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(copies)
        return run(*copies[state[0]])

    return call


def _into_one_output(kernel: Callable) -> Callable:
    """`kernel`, writing every call into one output array where it takes one (module
    docstring); as it is otherwise."""
    shape, dtype = getattr(kernel, "out_shape", None), getattr(kernel, "out_dtype", None)
    if shape is None or dtype is None:
        return kernel
    out = np.empty(shape, dtype)
    return lambda *a: kernel(*a, out=out)
