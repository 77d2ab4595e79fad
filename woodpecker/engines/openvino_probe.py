"""OpenVINO's compile of a large model, bounded in time (issue 76: compile time linear in the
graph, a library slow to build a session bounded rather than waited for).

Why: OpenVINO 2026.4's CPU plugin compiles a long chain of element-wise ops in time that
grows much faster than the chain — its snippets pass tokenizes the chain into one subgraph:
250 / 500 / 1,000 / 3,000 chained Relus compiled in 0.36 / 1.3 / 9.7 / 66 s (2-vCPU AMD EPYC
Zen 5, 2 threads), 0.37 / 0.75 / 1.15 s for the last three with `SNIPPETS_MODE` DISABLE —
while a 3,958-op transformer encoder (34 layers) compiles in 1.4 s with snippets and runs
27 % faster with them (2.84 against 3.90 ms), so snippets stay on wherever they finish.
A native compile cannot be interrupted in-process, so:

Contract: `bounded_compile(core, model, config, ops, limit_s)` compiles `model` (an
`openvino.Model` read from `source`) in-process, except where it has `ops` ≥
`config.OPENVINO_PROBE_OPS` operations: then a child process compiles it first with
OpenVINO's model cache on and is killed at `limit_s`; where it finished, the in-process compile
loads the child's result from the cache (3.9 s → 0.09 s for the 1,000-Relu chain); where it
did not, the child tries again with snippets off, and a second overrun is an `EngineError`
saying so (the node-builds answer: OpenVINO declined, the other libraries run the model).
What an attempt taught is kept for the process by the model's op counts (its size and how
many ops of each type): a model of the same counts — the same graph as selection rewrites it
for OpenVINO, or a copy — starts from the attempt that finished, or is declined at once
where none did (the 10,000-Relu chain's rewrite spent another 20 s relearning it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from woodpecker.errors import EngineError


def bounded_compile(core: Any, model: Any, source: "bytes | str", config: dict, ops: int,
                    limit_s: float, probe_ops: int) -> Any:
    """OpenVINO's compiled `model` (module docstring); `config` must hold `CACHE_DIR` when
    `ops` ≥ `probe_ops`."""
    if ops < probe_ops:
        return core.compile_model(model, "CPU", config)
    counts = (ops, tuple(sorted(Counter(op.get_type_name() for op in model.get_ops()).items())))
    attempts = [dict(config), {**config, "SNIPPETS_MODE": "DISABLE"}][_LEARNED.get(counts, 0):]
    with tempfile.TemporaryDirectory(prefix="woodpecker-ov-") as tmp:
        # a path of this process's own (a sealed copy under /proc/self) is written out for the
        # child, which has its own /proc/self
        data = source if isinstance(source, bytes) else \
            (Path(source).read_bytes() if source.startswith("/proc/self/") else None)
        path = source if data is None else _written(Path(tmp) / "model.onnx", data)
        for attempt in attempts:
            if _child_compiles(path, attempt, limit_s):
                return core.compile_model(model, "CPU", attempt)
            _LEARNED[counts] = _LEARNED.get(counts, 0) + 1
    raise EngineError(f"OpenVINO did not compile this {ops}-op model within {limit_s:g} s "
                      "(with its snippets on or off): left to the other libraries")


# per model's op counts, how many attempts (snippets on, then off) overran (module docstring)
_LEARNED: dict[tuple, int] = {}


def _written(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _child_compiles(path: str, config: dict, limit_s: float) -> bool:
    """Whether a child process compiled the model at `path` with `config` (writing OpenVINO's
    cache) within `limit_s`; killed past it."""
    cmd = [sys.executable, "-m", __name__, path, json.dumps(config)]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=limit_s,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _main(argv: list[str]) -> int:
    import openvino as ov

    core = ov.Core()
    core.compile_model(core.read_model(argv[0]), "CPU", json.loads(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
