"""A small trained classifier with real statistics: a CNN fitted to scikit-learn's digits.

Contract: `digits_classifier(seed)` trains, in a few seconds on two cores, a three-layer CNN
(Conv 1→16 3×3 + ReLU, Conv 16→32 3×3 stride 2 + ReLU, Flatten, Gemm 512→10) on the 8×8
handwritten digits scikit-learn ships (1797 images, 16 grey levels, scaled to [0, 1]), split
75/25 by a seeded shuffle, and returns it as ONNX (input `image` [N, 1, 8, 8] float32, output
`logits` [N, 10]) with the split's images and labels. The same seed gives the same weights
(torch's deterministic CPU kernels, one thread). Test accuracy is about 97 %.

Why it exists: quantization's accuracy must be measured on data with real statistics (issue 53:
"a small classifier the test trains from a dataset a package ships") — random weights and
inputs have none of the outliers and skewed activations calibration is for. The graph is built
with onnx.helper from the trained tensors, not by torch's exporter (seconds saved per test,
and no exporter version in the way).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

EPOCHS = 20
BATCH = 64


@dataclass(frozen=True)
class DigitsModel:
    onnx: bytes                 # the trained float model
    train_images: np.ndarray    # [N, 1, 8, 8] float32 in [0, 1]
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray

    def batches(self, images: np.ndarray, size: int = 1):
        """Feeds of `size` images each, as the model's input name wants them."""
        for i in range(0, len(images), size):
            yield {"image": images[i:i + size]}


def _data(seed: int):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * 0.75)
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def _train(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 10))
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(EPOCHS):
            for idx in torch.randperm(len(xt), generator=gen).split(BATCH):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
                opt.step()
        return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    finally:
        torch.set_num_threads(threads)


def _graph(w: dict[str, np.ndarray]) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(w["0.weight"], "c1_w"),
             numpy_helper.from_array(w["0.bias"], "c1_b"),
             numpy_helper.from_array(w["2.weight"], "c2_w"),
             numpy_helper.from_array(w["2.bias"], "c2_b"),
             numpy_helper.from_array(w["5.weight"], "fc_w"),
             numpy_helper.from_array(w["5.bias"], "fc_b")]
    nodes = [
        helper.make_node("Conv", ["image", "c1_w", "c1_b"], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "c2_w", "c2_b"], ["c2"], name="conv2",
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="woodpecker.zoo.digits")
    onnx.checker.check_model(model)
    return model.SerializeToString()


@functools.lru_cache(maxsize=2)
def digits_classifier(seed: int = 0) -> DigitsModel:
    """The trained classifier and its data split (see the module's contract); trained once
    per process and seed (its arrays are shared: do not write to them)."""
    xtr, ytr, xte, yte = _data(seed)
    return DigitsModel(_graph(_train(xtr, ytr, seed)), xtr, ytr, xte, yte)
