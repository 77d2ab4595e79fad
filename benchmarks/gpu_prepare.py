"""Issue 54's device bundle, built here (Halide, onnx, the compiler): GPU plans of zoo models
at batch 1 and 16 in fp32 and fp16, and a tuning batch of resnet18's GPU tasks
(tune/gpu_batch.py), for benchmarks/gpu_device.py to run on the lent GPU.

    python benchmarks/gpu_prepare.py BUNDLE [--target cuda:h200] [--models resnet18,resnet50]
        [--batches 1,16] [--precisions fp32,fp16] [--candidates 12]

Each plan's weights are replaced by numpy-generated ones (gpu_device.generated_weights: the
device regenerates the same bytes, so no weights travel: resnet50's alone are 98 MiB of the
64 the device tool carries) and its expected output for a seeded input is computed here by the
plan's walk on this CPU; the bundle then drops weights.bin. Models whose ops have no GPU
template yet are listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_device import feeds_of, generated_weights  # noqa: E402
from woodpecker.compiler_gpu import check_on_host, compile_gpu, gpu_graph  # noqa: E402
from woodpecker.engines.halide.gpu.runtime_build import cuda_runtime  # noqa: E402
from woodpecker.errors import WoodpeckerError  # noqa: E402
from woodpecker.runtime.trust import SIGNATURE_FIELD, signature, unsigned_bytes  # noqa: E402
from woodpecker.target import Target, machine_facts  # noqa: E402
from woodpecker.tune.gpu_batch import write_batch  # noqa: E402
from woodpecker.zoo import export  # noqa: E402

SEED = 0


def at_batch(model: str, batch: int) -> "onnx.ModelProto | Path":
    """Zoo model `model` for a batch of `batch`: the zoo's file at 1, else its torch module
    exported again from a batch of that size (a transformer's file has its batch baked into
    its Reshape shapes), by the zoo's exporter and opset."""
    if batch == 1:
        return export(model)
    import torch

    from woodpecker.frontend.torch_import import export_module
    from woodpecker.zoo.models import build_module, model_input

    x = torch.from_numpy(np.concatenate([model_input(model, SEED)] * batch))
    data = export_module(build_module(model, SEED), (x,), input_names=["input"],
                         output_names=["output"], opset=17, exporters=("torchscript",))
    return onnx.load_from_string(data)


def prepare_plan(model: str, batch: int, target: Target, bundle: Path,
                 precision: str = "fp32") -> dict:
    folder = bundle / f"{model}_b{batch}_{precision}"
    compile_gpu(at_batch(model, batch), folder, target, precision=precision)
    plan_json = folder / "plan.json"
    doc = json.loads(plan_json.read_text())
    data = generated_weights(doc, SEED)
    (folder / "weights.bin").write_bytes(data)
    doc["weights"]["sha256"] = hashlib.sha256(data).hexdigest()
    doc[SIGNATURE_FIELD] = signature(unsigned_bytes(doc))     # (edited here: signed again)
    plan_json.write_text(json.dumps(doc, indent=1))
    if batch == 1:     # the walk on this CPU is serial: batch 16's is left to torch's check
        np.savez(folder / "expected.npz", **check_on_host(folder, feeds_of(doc)))
    (folder / "weights.bin").unlink()
    # the device has another plan key: it opens the plan pinned by this digest
    return {"model": model, "batch": batch, "precision": precision, "folder": folder.name,
            "seed": SEED, "digest": "sha256:" + hashlib.sha256(plan_json.read_bytes()).hexdigest()}


def prepare_batch(model: str, target: Target, bundle: Path, per_task: int) -> str:
    """A tuning batch of every GPU task of `model` (tune/gpu_batch.py)."""
    write_batch(gpu_graph(str(export(model))), target, bundle / "batch", per_task)
    return "batch"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--target", default="cuda:h200")
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,transformer_encoder")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--candidates", type=int, default=12)
    ap.add_argument("--batch-model", default="resnet18",
                    help="the model whose GPU tasks the tuning batch holds ('' for none)")
    args = ap.parse_args(argv)
    bundle, target = Path(args.bundle), Target.parse(args.target)
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    t0 = time.perf_counter()
    manifest = {"built": {"target": target.to_json(), "machine": machine_facts(),
                          "halide_target": target.halide_target},
                "plans": [], "batch": None, "skipped": []}
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for precision in args.precisions.split(","):
                try:
                    manifest["plans"].append(prepare_plan(model, batch, target, bundle,
                                                          precision))
                except WoodpeckerError as e:
                    manifest["skipped"].append(f"{model} batch {batch} {precision}: {e}")
                print(f"{model} batch {batch} {precision}: {time.perf_counter() - t0:.0f} s",
                      flush=True)
    if args.batch_model:
        manifest["batch"] = prepare_batch(args.batch_model, target, bundle, args.candidates)
    shutil.copyfile(cuda_runtime(target), bundle / "runtime.so")
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    batch = json.loads((bundle / "batch" / "batch.json").read_text())["candidates"] \
        if manifest["batch"] else []
    print(f"bundle {bundle}: {size / 2**20:.1f} MiB, {len(manifest['plans'])} plans, "
          f"{len(batch)} tuning candidates, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
