"""One callable per runtime, each pinned to the same thread count, all fed the same input."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from woodpecker.engines.names import ONNXRUNTIME, OPENVINO, TORCH
from woodpecker.errors import WoodpeckerError
from woodpecker.options import Precision

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]
RUNTIMES = (ONNXRUNTIME, TORCH, OPENVINO)


def onnxruntime_runner(onnx_bytes: bytes, threads: int) -> Runner:
    from woodpecker.engines.ort_engine import new_session

    sess = new_session(onnx_bytes, threads)   # every graph optimisation (ORT's default level)
    return lambda feeds: sess.run(None, feeds)


def torch_runner(zoo_meta: dict | None, threads: int) -> Runner:
    """The same PyTorch module, run eagerly; needs the zoo metadata to rebuild it."""
    import torch

    from woodpecker.zoo import build_module

    if not zoo_meta or "woodpecker.zoo" not in zoo_meta:
        raise WoodpeckerError("torch comparison needs a zoo model (the original PyTorch module "
                              "is not in an ONNX file)")
    module = build_module(zoo_meta["woodpecker.zoo"], int(zoo_meta.get("woodpecker.zoo.seed", 0)))
    torch.set_num_threads(threads)

    def run(feeds):
        with torch.inference_mode():
            out = module(*(torch.from_numpy(x) for x in feeds.values()))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.numpy() for o in outs]

    return run


def openvino_runner(onnx_bytes: bytes, threads: int,
                    precision: Precision = Precision.FP32) -> Runner:
    try:
        import openvino as ov
    except ImportError:
        raise WoodpeckerError("openvino is not installed (pip install -e .[bench])") from None
    from woodpecker.engines.openvino_engine import compile_config

    core = ov.Core()
    # f32 like every other runtime compared: OpenVINO's CPU plugin otherwise computes in
    # bfloat16 where the CPU has it (AVX512_BF16 or AMX: the Zen 4 VMs here report
    # INFERENCE_PRECISION_HINT bfloat16 by default, which ran ResNet-50 in 19.8 ms against
    # ONNX Runtime's 38.4) — another, less exact result, not a faster f32 runtime. The same
    # properties as Woodpecker's OpenVINO engine (latency hint, one stream, the threads, no
    # pinning): a comparison of engines, not of settings — with OpenVINO's default pinning and
    # streams the runtime ran PP-OCRv4's detector in 33.6 ms where the engine's plan ran 25.9.
    # (`precision`: what a `--precision` compile is compared against — OpenVINO in that type)
    config = compile_config(threads, precision=precision)
    compiled = core.compile_model(core.read_model(onnx_bytes), "CPU", config)
    request = compiled.create_infer_request()

    def run(feeds):
        # the inputs' memory shared, not copied (OpenVINO's own advice for latency; Woodpecker's
        # OpenVINO steps do it too): copying them made this runner 1-6 % slower than the same
        # compiled model sharing them (paired medians over 200 calls, tv_regnet_y_400mf 0.94,
        # timm_mixnet_s 0.986, hf_t5 0.995; Zen 5). The outputs are the caller's own arrays.
        res = request.infer(feeds, share_inputs=True)
        return [np.asarray(res[o]) for o in compiled.outputs]

    return run


def make_runner(name: str, onnx_bytes: bytes, zoo_meta: dict | None, threads: int) -> Runner:
    if name == ONNXRUNTIME:
        return onnxruntime_runner(onnx_bytes, threads)
    if name == TORCH:
        return torch_runner(zoo_meta, threads)
    if name == OPENVINO:
        return openvino_runner(onnx_bytes, threads)
    raise WoodpeckerError(f"unknown runtime {name!r} for --against; known: {', '.join(RUNTIMES)}")


def versions() -> dict[str, str]:
    out = {}
    for mod in ("numpy", "onnx", "onnxruntime", "torch", "openvino"):
        try:
            out[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            pass
    from woodpecker.version import __version__

    out["woodpecker"] = __version__
    return out
