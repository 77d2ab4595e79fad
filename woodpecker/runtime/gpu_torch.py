"""torch as a GPU plan's library engine (issue 54, WPK §2.5's per-operator choice between
generated kernels and the vendor's: cuDNN convolutions, cuBLAS products), and the torch form
of every GPU task kind.

Contract: `compute(torch, task, args)` is a task in torch ops on tensors in the model's
layout (NCHW images; a conv's weight as the GPU kernels store it, HWIO) and returns its output
in that layout — the device script's mirror of a plan (benchmarks/gpu_device.py) and the
reference both use it. `TorchKernel(torch, task, ins, out)` is a drop-in for a step's
generated kernel: the same tensors the kernel would take (its argument views over the arena
and the weights, in the device layout: NHWC images, a conv's residuals as its kernel reads
them), `launch()` computes the step into `out`. Weights are laid out once at binding (a
conv's as OIHW in channels-last memory, which cuDNN reads as it reads NHWC images), so a
launch is the library call and one copy into the arena. Choice: a library step's output is
copied into its arena slot (torch has no `out=` for a convolution); the per-node choice
(tune/gpu_batch.py) weighs that copy because it is in what the device times.

torch is imported by the caller, never here: a plan without library steps loads with numpy
alone (runtime/gpu_plan.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from woodpecker.tasks import NHWC

_GELU = {"tanh": "tanh"}


def epilogue(torch, y, steps, residuals):
    """A conv's or product's epilogue steps (tasks/conv.epilogue_steps) on `y`."""
    F, res = torch.nn.functional, iter(residuals)
    for s in steps:
        op = s[0]
        y = (y + next(res) if op == "Add" else torch.relu(y) if op == "Relu"
             else y * s[1] if op == "Mul" else torch.clamp(y, s[1], s[2]) if op == "Clip"
             else torch.sigmoid(y) if op == "Sigmoid" else torch.tanh(y) if op == "Tanh"
             else F.hardswish(y) if op == "HardSwish" else F.silu(y) if op == "Silu"
             else torch.clamp(y * s[1] + s[2], 0, 1) if op == "HardSigmoid"
             else F.gelu(y, approximate=_GELU.get(s[1], "none")))
    return y


def run_steps(torch, steps, value_of):
    """An element-wise program's last value ((op, args, attrs) steps, ops/fused.py);
    `value_of(ref)` gives an ("in", i), ("const", j) or ("channel", j) argument."""
    values = []
    for op, refs, attrs in steps:
        a = [None if r is None else values[r[1]] if r[0] == "step" else value_of(r)
             for r in refs]
        attrs = dict(attrs)
        y = (a[0] + a[1] if op == "Add" else a[0] - a[1] if op == "Sub"
             else a[0] * a[1] if op == "Mul" else a[0] / a[1] if op == "Div"
             else torch.clamp(a[0], a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else None)
             if op == "Clip"
             else torch.where(a[0] < 0, a[0] * attrs.get("alpha", 0.01), a[0])
             if op == "LeakyRelu"
             else epilogue(torch, a[0], [(op, attrs.get("alpha", 0.2), attrs.get("beta", 0.5))
                                         if op == "HardSigmoid" else (op, "none")], []))
        values.append(y)
    return values[-1]


def program(torch, task, args):
    """A fused element-wise group's program: on NCHW tensors (constants scalars, or per
    channel along axis 1), or a group of another rank's on its rows (per last axis)."""
    xs, k = args[:task.inputs], args[task.inputs] if task.consts else None
    rows = task.kind == "elementwise_rows"
    xs = [x.reshape(-1, task.c) for x in xs] if rows else xs
    chan = [1, -1] if rows else [1, -1] + [1] * (xs[0].dim() - 2)
    width = task.c if rows else xs[0].shape[1]
    return run_steps(torch, task.program, lambda r: xs[r[1]] if r[0] == "in" else k[r[1]]
                     if r[0] == "const" else k[r[1]:r[1] + width].reshape(chan))


def compute(torch, task, args: list) -> Any:
    """`task` on `args` in the model's layout (see the module contract)."""
    F, kind = torch.nn.functional, task.kind
    if kind == "conv2d":
        w = args[1].permute(3, 2, 0, 1)         # HWIO (HW1C depthwise) -> OIHW
        top, left, bottom, right = task.pads
        x, vectors = args[0], args[len(args) - task.vectors:]
        if task.prologue:           # x · s[c] (squeeze-and-excitation), a ReLU first, …
            x = run_steps(torch, task.prologue, lambda r: x if r[1] == 0 else vectors[r[1] - 1])
        x = x if top == left == bottom == right == 0 else F.pad(x, (left, right, top, bottom))
        y = F.conv2d(x, w, args[2] if task.has_bias else None, task.stride, 0, task.dilation,
                     task.groups)
        return epilogue(torch, y, task.epilogue,
                        args[2 + task.has_bias:len(args) - task.vectors])
    if kind == "pool":
        top, left, bottom, right = task.pads
        if task.reduce == "max":
            x = F.pad(args[0], (left, right, top, bottom), value=float("-inf"))
            return F.max_pool2d(x, (task.kh, task.kw), task.stride, 0, task.dilation,
                                task.ceil_mode)
        return F.avg_pool2d(args[0], (task.kh, task.kw), task.stride, (top, left),
                            task.ceil_mode, task.count_include_pad)
    if kind == "dense":
        b = args[1] if task.weights else args[1].reshape(task.batch, task.k, task.n)
        y = args[0].reshape(task.batch, task.m, task.k) @ b
        rest = args[2:]
        if task.bias:
            y, rest = y + rest[0].reshape(y.shape[-1] if task.bias == "row" else y.shape), \
                rest[1:]
        return epilogue(torch, y, task.epilogue, [
            r.reshape(-1) if how == "row" else r.reshape(y.shape)
            for r, how in zip(rest, task.residuals)])
    if kind == "rows":
        x = args[0].reshape(task.rows, task.width)
        if task.op == "softmax":
            return torch.softmax(x, -1)
        if task.op == "layernorm":
            return F.layer_norm(x, (task.width,), args[1].reshape(-1),
                                args[2].reshape(-1) if task.has_bias else None, task.epsilon)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + task.epsilon) \
            * args[1].reshape(-1)
    if kind == "move":
        y = args[0].reshape(task.in_shape)[task.index()]
        kept = [o for o, _, _ in task.axes if o >= 0]
        return y.permute(sorted(range(len(kept)), key=lambda i: kept[i]))
    if kind in ("elementwise", "elementwise_rows"):
        return program(torch, task, args)
    if kind == "concat":
        return torch.cat(list(args), dim=task.model_axis)
    raise NotImplementedError(f"no torch form of {kind} tasks")


def _nchw(t, shape):
    """A device NHWC tensor (or a flat (N, H·W, C) view of one) as NCHW, no copy."""
    n, c, h, w = shape
    return t.reshape(n, h, w, c).permute(0, 3, 1, 2)


def model_args(task, args: list) -> list:
    """The kernel's arguments (device layout) as `compute` takes them (the model's)."""
    if getattr(task, "layout", "") != NHWC or task.kind == "elementwise_rows":
        return list(args)
    args = list(args)
    if task.kind == "conv2d":
        if not task.reads_nchw:
            args[0] = _nchw(args[0], (task.n, task.c, task.h, task.w))
        first = 2 + task.has_bias
        for i in range(first, first + sum(1 for s in task.epilogue if s[0] == "Add")):
            args[i] = _nchw(args[i], (task.n, task.k, task.out_h, task.out_w))
        for i in range(len(args) - task.vectors, len(args)):      # (N, 1, 1, C) vectors
            args[i] = _nchw(args[i], (task.n, task.c, 1, 1))
    elif task.kind == "pool":
        args[0] = _nchw(args[0], (task.n, task.c, task.h, task.w))
    elif task.kind == "concat":                     # NHWC images along any axis
        args = [_nchw(a, (s[0], s[3], s[1], s[2])) for a, s in zip(args, task.shapes)]
    else:                                           # a 4-d element-wise group
        for i in range(task.inputs):
            args[i] = _nchw(args[i], (task.n, task.c, task.h, task.w))
    return args


class TorchKernel:
    """A step computed by torch on the kernel's own tensors (see the module contract)."""

    def __init__(self, torch, task, ins: list, out, stream=None) -> None:
        self.torch, self.task, self.stream = torch, task, stream
        ins = list(ins)
        if task.kind == "conv2d":     # OIHW once, channels-last like the images
            oihw = ins[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
            ins[1] = oihw.permute(2, 3, 1, 0)
        self.args = model_args(task, ins)
        nhwc = getattr(task, "layout", "") == NHWC and task.kind != "elementwise_rows"
        shape = tuple(task.out_shape)
        # the model-layout view of the output slot: a copy into it writes the device layout
        self.out = out.reshape(shape).permute(0, 3, 1, 2) if nhwc else out.reshape(shape)

    def launch(self) -> None:
        on = contextlib.nullcontext() if self.stream is None else \
            self.torch.cuda.stream(self.stream)
        with self.torch.no_grad(), on:
            self.out.copy_(compute(self.torch, self.task, self.args).reshape(self.out.shape))

    __call__ = launch


class _Events:
    def __init__(self, torch) -> None:
        self.torch = torch

    def start(self) -> None:
        self.a, self.b = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.a.record()

    def stop(self) -> float:
        self.b.record()
        self.b.synchronize()
        return self.a.elapsed_time(self.b)


class _Clock:
    def start(self) -> None:
        self.t = time.perf_counter()

    def stop(self) -> float:
        return (time.perf_counter() - self.t) * 1e3


def clock(torch, device: str):
    """start()/stop() -> milliseconds: CUDA events on a GPU, wall time on a CPU."""
    return _Events(torch) if device != "cpu" else _Clock()


def library_candidate(task, inputs: list, device: str = "cuda"):
    """A batch's library candidate (runtime/gpu_measure.py): torch on `device` over copies of
    the task's inputs, as (launch, fetch, timer) — CUDA events on a GPU, wall time on a CPU."""
    import numpy as np
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device here")
    ins = [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in inputs]
    half = getattr(task, "dtype", "") == "float16"
    out = torch.empty(tuple(task.out_shape), dtype=torch.float16 if half else torch.float32,
                      device=device)
    kernel = TorchKernel(torch, task, ins, out)

    def fetch():
        return out.cpu().numpy()
    return kernel.launch, fetch, clock(torch, device)
