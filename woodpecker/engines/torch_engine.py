"""The torch engine: PyTorch CPU kernels (oneDNN/MKL), zero-copy to and from numpy.

Constants become torch tensors once, at build time. A fused node runs its base op and then its
epilogue in place on the fresh result, so conv+bias+residual+activation costs one conv call and
cheap in-place element-wise passes (Woodpecker-DL §2.1 epilogue fusion, library side).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from woodpecker.config import OPENMP_SPIN_S
from woodpecker.engines import names
from woodpecker.engines.base import BuildContext, Capabilities, Engine, Kernel, full_inputs
from woodpecker.engines.choice import KernelSpec
from woodpecker.ir.graph import Node
from woodpecker.ir.pattern import const_inputs
from woodpecker.ops import chain, fused, separable
from woodpecker.ops.fused import ACTIVATIONS, BASE_INPUTS, built_steps, run_program, runtime_count
from woodpecker.ops.shape import slice_index

# torch.from_numpy warns once about read-only arrays (views of constants); kernels never write
# their inputs, so the warning says nothing here.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


Builder = Callable[[Node, list], Callable]
_BUILDERS: dict[str, Builder] = {}
_COMPUTE = {"Conv", "FusedConv", separable.OP, chain.OP, "Gemm", "FusedGemm", "MatMul",
            "FusedMatMul",
            "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Sigmoid", "Tanh", "Gelu",
            "HardSigmoid", "HardSwish", "LeakyRelu", "Clip", "Relu", "BatchNormalization",
            "MaxPool", "AveragePool", "GlobalAveragePool", "Softmax", "LayerNormalization",
            "ReduceMean"}


def settle_threads() -> None:
    """Wait, off the clock, until torch's spinning workers have gone to sleep: for timing that
    interleaves torch with other runtimes (bench/timing.time_interleaved's `settle`).

    The wait is busy, not a sleep. Measured on inception_v3's 1x1 conv 768->192 at 17² timed
    interleaved (block 3) with ONNX Runtime and torch, medians of 60: with no wait the Halide
    kernel took 0.76 ms (0.39 without torch in the mix); with a 20 ms sleep after torch it took
    0.39-0.41 but ONNX Runtime 0.79 (0.46 without torch); with a 20 ms busy wait 0.39-0.40 and
    0.46-0.47, as without torch."""
    end = time.perf_counter() + OPENMP_SPIN_S
    while time.perf_counter() < end:
        pass


def _torch():
    import torch

    return torch


def builder(*ops: str):
    def register(fn: Builder) -> Builder:
        for o in ops:
            _BUILDERS[o] = fn
        return fn
    return register


class TorchEngine(Engine):
    name = names.TORCH
    caps = Capabilities(own_threads=True)
    rank = (1, 1)
    dtypes = frozenset({"float32", "int64", "int32", "bool"})

    @property
    def ops(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(_BUILDERS)

    def available(self) -> bool:
        try:
            _torch()
        except ImportError:
            return False
        return True

    def accepts(self, node: Node, ctx: BuildContext) -> bool:
        if node.op in _COMPUTE and any(v is not None and v.dtype.name != "float32"
                                       for v in node.outputs[:1]):
            return False
        check = _ACCEPTS.get(node.op)
        return check(node) if check else True

    def activate(self, threads: int) -> None:
        torch = _torch()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    def build(self, node: Node, ctx: BuildContext, kernel: KernelSpec | None = None) -> Kernel:
        torch = _torch()
        if torch.get_num_threads() != ctx.threads:
            torch.set_num_threads(ctx.threads)
        consts = [None if v is None or v.data is None else _to_torch(v.data) for v in node.inputs]
        fn = _BUILDERS[node.op](node, consts)
        from_numpy = torch.from_numpy

        def run(*args):
            out = fn(*(from_numpy(a) for a in args))
            return [o.numpy() for o in out] if isinstance(out, tuple) else [out.numpy()]

        return Kernel(run)


def _to_torch(data: np.ndarray):
    return _torch().from_numpy(np.array(data, order="C"))


def _args(node: Node, consts: list, fn: Callable) -> Callable:
    """Adapt `fn(*all_inputs)` to the kernel's run-time-only arguments."""
    if all(c is None for c in consts):
        return fn
    merge = full_inputs(node, consts)
    return lambda *args: fn(*merge(args))


# -- epilogues -----------------------------------------------------------------------------
def _epilogue(node: Node) -> Callable:
    """In-place epilogue on a fresh result `y`; Add steps consume the extra operands."""
    import torch.nn.functional as F

    steps = []
    for s in node.attrs.get("epilogue", []):
        kind = s["op"]
        if kind == "Add":
            steps.append(("add", None))
        elif kind == "Mul":
            steps.append(("fn", lambda y, c=s["scale"]: y.mul_(c)))
        elif kind == "Relu":
            steps.append(("fn", lambda y: y.relu_()))
        elif kind == "Clip":
            lo, hi = s.get("min"), s.get("max")
            steps.append(("fn", lambda y, lo=lo, hi=hi: y.clamp_(lo, hi)))
        elif kind == "Sigmoid":
            steps.append(("fn", lambda y: y.sigmoid_()))
        elif kind == "Tanh":
            steps.append(("fn", lambda y: y.tanh_()))
        elif kind == "HardSwish":
            steps.append(("fn", lambda y: F.hardswish(y, inplace=True)))
        elif kind == "Silu":
            steps.append(("fn", lambda y: F.silu(y, inplace=True)))
        elif kind == "HardSigmoid":
            a, b = s.get("alpha", 0.2), s.get("beta", 0.5)
            steps.append(("fn", lambda y, a=a, b=b: y.mul_(a).add_(b).clamp_(0, 1)))
        elif kind == "Gelu":
            ap = s.get("approximate", "none")
            steps.append(("fn", lambda y, ap=ap: F.gelu(y, approximate=ap)))
        else:
            raise ValueError(f"unknown epilogue step {kind}")

    def apply(y, operands):
        k = 0
        for kind, fn in steps:
            if kind == "add":
                y = y.add_(operands[k])
                k += 1
            else:
                y = fn(y)
        return y

    return apply


def _accept_epilogue(node: Node) -> bool:
    return all(s["op"] in ("Add", "Mul", "Silu") or s["op"] in ACTIVATIONS
               for s in node.attrs.get("epilogue", []))


def _n_base(node: Node) -> int:
    return BASE_INPUTS[node.op][1] if node.op in BASE_INPUTS else len(node.inputs)


# -- conv, gemm, matmul ---------------------------------------------------------------------
def _conv_pads(node: Node):
    nd = len(node.inputs[0].shape) - 2
    pads = node.attrs["_pads"]
    if pads[:nd] == pads[nd:]:
        return tuple(pads[:nd]), None
    pad_arg = []
    for i in reversed(range(nd)):
        pad_arg += [pads[i], pads[i + nd]]
    return (0,) * nd, pad_arg


@builder("Conv", "FusedConv")
def _conv(node: Node, consts: list):
    import torch.nn.functional as F

    nd = len(node.inputs[0].shape) - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    a = node.attrs
    padding, pre = _conv_pads(node)
    stride, dil, groups = tuple(a["strides"]), tuple(a["dilations"]), a.get("group", 1)
    epi = _epilogue(node)
    nb = _n_base(node)
    prologue = _program(node.attrs["prologue"], (1, node.inputs[0].shape[1]) + (1,) * nd) \
        if node.attrs.get("prologue") else None

    def run(x, w, b=None, *operands):
        operands, vectors = fused.split_operands(a, operands)
        if prologue is not None:
            x = prologue([x, *vectors], ())
        if pre is not None:
            x = F.pad(x, pre)
        y = conv(x, w, b, stride, padding, dil, groups)
        return epi(y, operands) if operands or node.attrs.get("epilogue") else y

    return _args(node, consts, lambda *xs: run(*xs[:nb], *xs[nb:]))


@builder(separable.OP)
def _separable(node: Node, consts: list):
    """The depthwise conv, then the 1×1 conv on its result (ops/separable.py)."""
    dw, pw = separable.parts(node)
    first, second = _conv(dw, consts[:3]), _conv(pw, [None] + consts[3:])
    return lambda x, *residuals: second(first(x), *residuals)


@builder(chain.OP)
def _chain(node: Node, consts: list):
    """Each conv on the one before's result (ops/chain.py)."""
    parts = chain.parts(node)
    m = len(parts)
    convs = [_conv(p, [consts[0] if i == 0 else None] + consts[1 + 2 * i:3 + 2 * i]
                   + (consts[1 + 2 * m:] if i == m - 1 else []))
             for i, p in enumerate(parts)]

    def run(x, *residuals):
        for f in convs[:-1]:
            x = f(x)
        return convs[-1](x, *residuals)
    return run


@builder("Gemm", "FusedGemm")
def _gemm(node: Node, consts: list):
    torch = _torch()
    import torch.nn.functional as F

    a = node.attrs
    ta, tb, alpha, beta = a.get("transA", 0), a.get("transB", 0), a.get("alpha", 1.0), \
        a.get("beta", 1.0)
    epi = _epilogue(node)
    has_epi = bool(a.get("epilogue"))
    b_const = consts[1]
    if b_const is not None and not tb:
        consts[1] = b_const.t().contiguous()   # F.linear wants (N, K)
        tb = 1
    linear = not ta and tb and alpha == 1.0 and beta == 1.0 and (
        node.input(2) is None or len(node.inputs[2].shape) == 1)

    def run(x, w, c=None, *operands):
        if linear:
            y = F.linear(x, w, c)
        else:
            xa = x.t() if ta else x
            wb = w.t() if tb else w
            y = torch.matmul(xa, wb)
            if alpha != 1.0:
                y = y.mul_(alpha)
            if c is not None:
                y = y.add_(c, alpha=beta)
        return epi(y, operands) if has_epi else y

    return _args(node, consts, lambda *xs: run(*xs[:3], *xs[3:]))


@builder("MatMul", "FusedMatMul")
def _matmul(node: Node, consts: list):
    torch = _torch()
    epi = _epilogue(node)
    has_epi = bool(node.attrs.get("epilogue"))

    def run(x, w, *operands):
        y = torch.matmul(x, w)
        return epi(y, operands) if has_epi else y

    return _args(node, consts, run)


# -- element-wise ---------------------------------------------------------------------------------
def _simple(fn_of_torch: Callable[..., Callable]) -> Builder:
    def build(node: Node, consts: list):
        return _args(node, consts, fn_of_torch(node))
    return build


_FNS = {
    "Add": lambda n: _torch().add, "Sub": lambda n: _torch().sub, "Mul": lambda n: _torch().mul,
    "Div": lambda n: _torch().div, "Pow": lambda n: _torch().pow,
    "Sqrt": lambda n: _torch().sqrt, "Erf": lambda n: _torch().erf,
    "Relu": lambda n: _torch().relu, "Sigmoid": lambda n: _torch().sigmoid,
    "Tanh": lambda n: _torch().tanh,
    "Gelu": lambda n: (lambda x, ap=n.attr("approximate", "none"):
                       _torch().nn.functional.gelu(x, approximate=ap)),
    "HardSwish": lambda n: _torch().nn.functional.hardswish,
    "LeakyRelu": lambda n: (lambda x, a=n.attr("alpha", 0.01): _torch().where(x < 0, x * a, x)),
    "HardSigmoid": lambda n: (lambda x, a=n.attr("alpha", 0.2), b=n.attr("beta", 0.5):
                              (x * a + b).clamp_(0, 1)),
    "Equal": lambda n: _torch().eq, "Where": lambda n: _torch().where,
    "Identity": lambda n: (lambda x: x),
    "Softmax": lambda n: (lambda x, ax=n.attr("axis", -1): _torch().softmax(x, ax)),
    "Transpose": lambda n: (lambda x, p=tuple(n.attrs["perm"]): x.permute(p)),
    "Reshape": lambda n: (lambda x, s=None, t=tuple(n.attrs["_shape"]): x.reshape(t)),
    "Expand": lambda n: (lambda x, s=None, t=tuple(n.attrs["_shape"]): x.expand(t)),
    "Flatten": lambda n: (lambda x, a=n.attrs["axis"]: x.reshape(
        int(np.prod(x.shape[:a], dtype=np.int64)), -1)),
    "Squeeze": lambda n: (lambda x, s=None, t=tuple(n.outputs[0].shape): x.reshape(t)),
    "Unsqueeze": lambda n: (lambda x, s=None, t=tuple(n.outputs[0].shape): x.reshape(t)),
    "Concat": lambda n: (lambda *xs, a=n.attrs["axis"]: _torch().cat(xs, a)),
    "Split": lambda n: (lambda x, s=None, sp=tuple(n.attrs["_split"]), a=n.attrs["axis"]:
                        tuple(_torch().split(x, sp, a))),
    "Slice": lambda n: (lambda x, *r, ix=slice_index(n.attrs["_slices"]): x[ix]),
    "Gather": lambda n: (lambda x, i, a=n.attrs["axis"]:
                         x[(slice(None),) * a + (_torch().where(i < 0, i + x.shape[a], i),)]),
    "Dropout": lambda n: (lambda x, *r: x),
    "GlobalAveragePool": lambda n: (lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True)),
    "ReduceMean": lambda n: (lambda x, *r, ax=tuple(n.attrs["_axes"]),
                             k=bool(n.attr("keepdims", 1)): x.mean(ax, keepdim=k) if ax else x),
}
for _name, _fn in _FNS.items():
    builder(_name)(_simple(_fn))


def _program(program: list[dict], channels: tuple[int, ...]) -> Callable:
    """An element-wise program (ops/fused.py) as `run(inputs, consts)`, each step by its own
    op's torch function, the constants as views of one tensor."""
    torch = _torch()

    def make(step: dict):
        if step["op"] == "Clip":
            return lambda x, lo=None, hi=None: torch.clamp(x, lo, hi)
        return _FNS[step["op"]](Node(step["op"], "", [], [], step.get("attrs", {})))

    steps = built_steps(program, make)
    return lambda xs, consts: run_program(program, xs, consts, channels, steps)


@builder("FusedElementwise")
def _fused_elementwise(node: Node, consts: list):
    program = node.attrs["program"]
    n = runtime_count(program)
    scalars = consts[n].reshape(-1) if len(consts) > n else _torch().zeros(0)
    run = _program(program, fused.channel_shape(tuple(node.outputs[0].shape)))
    return lambda *xs: run(list(xs), scalars)


@builder("Clip")
def _clip(node: Node, consts: list):
    lo, hi = (None if i >= len(consts) or consts[i] is None else float(consts[i].reshape(-1)[0])
              for i in (1, 2))
    if lo is None and hi is None:
        return _args(node, consts, lambda x, *r: x)
    return _args(node, consts, lambda x, *r: x.clamp(lo, hi))


@builder("BatchNormalization")
def _bn(node: Node, consts: list):
    F = _torch().nn.functional
    eps = node.attr("epsilon", 1e-5)
    return _args(node, consts, lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, False, 0.0, eps))


@builder("LayerNormalization")
def _ln(node: Node, consts: list):
    F = _torch().nn.functional
    shape = node.inputs[0].shape
    axis = node.attr("axis", -1) % len(shape)
    norm = tuple(shape[axis:])
    eps = node.attr("epsilon", 1e-5)

    def run(x, s, b=None):
        return F.layer_norm(x, norm, s.expand(norm), None if b is None else b.expand(norm), eps)

    return _args(node, consts, run)


@builder("MaxPool", "AveragePool")
def _pool(node: Node, consts: list):
    F = _torch().nn.functional
    nd = len(node.inputs[0].shape) - 2
    a = node.attrs
    k, s, d = tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"])
    ceil = bool(a.get("ceil_mode", 0))
    padding, pre = _conv_pads(node)
    if node.op == "MaxPool":
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]

        def run(x):
            if pre is not None:
                x = F.pad(x, pre, value=float("-inf"))
            return pool(x, k, s, padding, d, ceil)
    else:
        pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
        include = bool(a.get("count_include_pad", 0))

        def run(x):
            return pool(x, k, s, padding, ceil, include)
    return run


def _accept_pool(node: Node) -> bool:
    nd = len(node.inputs[0].shape) - 2
    a = node.attrs
    if len(node.outputs) != 1 or not 1 <= nd <= 3:
        return False
    _, pre = _conv_pads(node)
    padding = a["_pads"][:nd]
    if any(p > k // 2 for p, k in zip(padding, a["kernel_shape"])):
        return False
    if node.op == "AveragePool":
        return pre is None and all(x == 1 for x in a["dilations"]) and nd <= 3
    return True


def _accept_conv(node: Node) -> bool:
    return 1 <= len(node.inputs[0].shape) - 2 <= 3 and _accept_epilogue(node)


_ACCEPTS: dict[str, Callable[[Node], bool]] = {
    "Conv": _accept_conv, "FusedConv": _accept_conv,
    separable.OP: lambda n: all(_accept_conv(p) for p in separable.parts(n)),
    chain.OP: lambda n: all(_accept_conv(p) for p in chain.parts(n)),
    "FusedGemm": _accept_epilogue, "FusedMatMul": _accept_epilogue,
    "MaxPool": _accept_pool, "AveragePool": _accept_pool,
    "Clip": lambda n: const_inputs(n, 1, 2),
    "Dropout": lambda n: len(n.outputs) == 1,
    "LayerNormalization": lambda n: len(n.outputs) == 1,
    "Slice": lambda n: all(st > 0 for _, _, st in n.attrs["_slices"]),
    "Div": lambda n: n.outputs[0].dtype.name == "float32",
    "Gather": lambda n: n.inputs[1].dtype.name in ("int64", "int32"),
    # every step a torch function (a quantized model's Q/DQ steps are not)
    "FusedElementwise": lambda n: all(s["op"] in _FNS or s["op"] == "Clip"
                                      for s in n.attrs["program"]),
}
