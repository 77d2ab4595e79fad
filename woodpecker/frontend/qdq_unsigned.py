"""A quantized (QDQ) model with its int8 activations carried as uint8: the same model, in the
type ONNX Runtime's x86 integer kernels are fastest on.

Contract: `unsigned_activations(model)` returns a copy of the ModelProto in which every
QuantizeLinear that quantizes a run-time tensor per tensor to int8 quantizes it to uint8 with
its zero point moved up by 128, and every DequantizeLinear reading such a tensor takes the same
moved zero point — or None where the model has no such pair. A quantized activation read by
anything but DequantizeLinear, or that is a graph output (its type would change where the user
sees it), keeps int8. Weights (initializers) and int32 biases are left as they are.

Why it is the same model: QuantizeLinear computes saturate(round(x / s) + z); with z + 128
and the uint8 range [0, 255] in place of [-128, 127] every quantized value is the int8 one
plus 128, and DequantizeLinear's (q - z) * s is unchanged — every real value the float nodes
see is the same. ONNX Runtime's fused integer kernels do not always round alike for the two
types, though: on the real-world set's QDQ ResNet-50 (issue 50) the outputs were identical on
2 of 4 inputs and differed by 3.5e-2 and 3.9e-2 of the largest output on the others, where
ORT's own outputs move by 4.0e-2 with its graph optimisations off. So library-first
(selection/library_first.py) treats it as one more plan of the user's graph, its outputs
checked against ONNX Runtime's on the file as written like any library's.

Why: ONNX Runtime runs QDQ convolutions with int8 activations (S8S8, what its own quantizer
writes by default) on a slower x86 path than uint8 activations with int8 weights (U8S8; its
quantization docs recommend U8S8 on x86-64). Measured on the 2-vCPU Zen 4 (AVX-512 VNNI) on
that ResNet-50: 5.31 ms as written, 2.50 ms with uint8 activations (OpenVINO 1.86 ms).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

SHIFT = 128


def unsigned_activations(model: onnx.ModelProto) -> onnx.ModelProto | None:
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    moved: dict[str, str] = {}     # int8 zero point initializer -> its uint8 twin
    quantized: set[str] = set()    # the activations to carry as uint8

    def int8_zero_point(node: onnx.NodeProto) -> onnx.TensorProto | None:
        zp = inits.get(node.input[2]) if len(node.input) > 2 else None
        if zp is None or zp.data_type != TensorProto.INT8 or len(zp.dims) != 0:
            return None
        return zp

    for node in graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits or \
                any(a.name == "output_dtype" for a in node.attribute):
            continue
        if int8_zero_point(node) is None or node.output[0] in outputs:
            continue
        if any(r.op_type != "DequantizeLinear" or int8_zero_point(r) is None
               for r in readers.get(node.output[0], [])):
            continue
        quantized.add(node.output[0])
    if not quantized:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {i.name for i in out.graph.initializer} | {i.name for i in out.graph.input} | \
        {n for node in out.graph.node for n in node.output}
    for node in out.graph.node:
        tensor = node.output[0] if node.op_type == "QuantizeLinear" else node.input[0]
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or tensor not in quantized:
            continue
        zp = node.input[2]
        if zp not in moved:
            twin = _fresh(f"{zp}_uint8", names)
            value = numpy_helper.to_array(inits[zp]).astype(np.int16) + SHIFT
            out.graph.initializer.append(numpy_helper.from_array(value.astype(np.uint8), twin))
            moved[zp] = twin
        node.input[2] = moved[zp]
    kept = [v for v in out.graph.value_info if v.name not in quantized]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept)
    return out


def _fresh(name: str, taken: set[str]) -> str:
    k, candidate = 0, name
    while candidate in taken:
        k += 1
        candidate = f"{name}_{k}"
    taken.add(candidate)
    return candidate
