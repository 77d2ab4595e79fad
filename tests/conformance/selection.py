"""Which ONNX backend node tests apply to Woodpecker.

Included: every node test whose model uses only supported op types (or ones the import
reads as their QDQ form). Of those, a test whose model
Woodpecker rejects at import with `UnsupportedOpError` (element types numpy cannot hold such as
float8/int4/bfloat16/string, sequence or optional values, opsets below 13, training-mode
BatchNormalization and Dropout) or imports with an Opaque node (a variant Woodpecker does not
define, run by a library: its definition is the library's) or whose expected output ONNX
Runtime itself does not give (`DIFFERS`) is excluded and listed in the summary; every other
included test must pass.
"""

from __future__ import annotations

import onnx.backend.test
from onnx.backend.test.loader import load_model_tests

from woodpecker.errors import UnsupportedOpError
from woodpecker.frontend.onnx_import import import_onnx
from woodpecker.frontend.qoperator import REWRITES
from woodpecker.ops import SUPPORTED

INCLUDED: list[str] = []
EXCLUDED: dict[str, str] = {}
# Tests whose expected output ONNX Runtime itself does not give: Woodpecker follows ONNX
# Runtime, the reference every model result is checked against.
DIFFERS = {
    "test_resize_downsample_scales_linear_align_corners":
        "ONNX Runtime 1.32 reads align_corners over the output's length (4 columns to 2 at "
        "0 and 3); the spec divides by in x scale - 1 (at 0 and 2.14)",
    "test_convinteger_with_padding":
        "ONNX Runtime 1.32's ConvInteger takes the weights' zero point per tensor only ('Non "
        "per-tensor quantization is not supported now'); the test gives one per channel",
}


def _select() -> None:
    # and the ops the import reads as their QDQ form (frontend/qoperator.py)
    supported = set(SUPPORTED) | {op for domain, op in REWRITES if domain == ""}
    for case in load_model_tests(kind="node"):
        ops = {n.op_type for n in case.model.graph.node}
        if not ops or not ops <= supported:
            continue
        if case.name in DIFFERS:
            EXCLUDED[case.name] = f"differs: {DIFFERS[case.name]}"
            continue
        try:
            graph = import_onnx(case.model)
        except UnsupportedOpError as e:
            EXCLUDED[case.name] = str(e)
            continue
        except Exception:  # noqa: BLE001 - any other failure must show up as a failing test
            graph = None
        opaque = [n.attrs["why"] for n in graph.nodes if n.op == "Opaque"] if graph else []
        if opaque:     # the library's definition, not Woodpecker's: not this suite's subject
            EXCLUDED[case.name] = f"opaque: {opaque[0]}"
            continue
        INCLUDED.append(case.name)


_select()


def backend_tests(backend, module_name: str) -> dict:
    """Test classes for `backend` over the included tests, for a module's globals()."""
    suite = onnx.backend.test.BackendTest(backend, module_name)
    for name in INCLUDED:
        suite.include(rf"^{name}_cpu$")
    return suite.test_cases
