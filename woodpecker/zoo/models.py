"""Zoo model builders and the cached ONNX export."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from woodpecker.cache import cache_dir
from woodpecker.errors import WoodpeckerError

ZOO_VERSION = 1  # bump when a builder changes, so cached exports are not reused


@dataclass(frozen=True)
class ZooModel:
    name: str
    input_shape: tuple[int, ...]
    build: Callable[[], object]
    description: str


def _tv(name: str, **kw) -> Callable[[], object]:
    def build():
        import torchvision.models as tvm

        return getattr(tvm, name)(weights=None, **kw)
    return build


def _transformer():
    import torch

    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=2, dim_feedforward=512,
                                             dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def _vit_tiny():
    """A ViT-Tiny-sized vision transformer (patch 16, 4 layers of width 192, 3 heads): the
    family's structure at a size a 2-core CPU runs in milliseconds. torchvision zero-initialises
    the classifier head, which would make every output 0: it gets random weights instead."""
    import torch
    from torchvision.models import VisionTransformer

    vit = VisionTransformer(image_size=224, patch_size=16, num_layers=4, num_heads=3,
                            hidden_dim=192, mlp_dim=768, num_classes=1000)
    torch.nn.init.normal_(vit.heads.head.weight, std=0.02)
    torch.nn.init.normal_(vit.heads.head.bias, std=0.02)
    return vit


def _irregular(family: str, *args):
    from woodpecker.zoo import irregular

    return getattr(irregular, family)(*args)


IMAGENET = (1, 3, 224, 224)


def _torchvision(name: str, description: str, shape: tuple[int, ...] = IMAGENET,
                 **kw) -> ZooModel:
    """The zoo entry of torchvision model `name` (built with keyword arguments `kw`)."""
    return ZooModel(name, shape, _tv(name, **kw), description)


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    _torchvision("resnet18", "torchvision ResNet-18"),
    _torchvision("mobilenet_v2", "torchvision MobileNetV2"),
    _torchvision("squeezenet1_1", "torchvision SqueezeNet 1.1"),
    _torchvision("inception_v3", "torchvision Inception v3, 299x299, no aux logits",
                 (1, 3, 299, 299), aux_logits=False, init_weights=True),
    _torchvision("shufflenet_v2_x1_0", "torchvision ShuffleNetV2 x1.0"),
    _torchvision("mnasnet1_0", "torchvision MNASNet 1.0"),
    ZooModel("randwire_cifar", (1, 3, 32, 32), lambda: _irregular("randwire", "cifar"),
             "RandWire-WS(32, 4, 0.75) small regime, C=78, CIFAR-size (32x32)"),
    ZooModel("randwire_imagenet", IMAGENET, lambda: _irregular("randwire", "imagenet"),
             "RandWire-WS(32, 4, 0.75) small regime, C=78, ImageNet-size (224x224)"),
    ZooModel("darts_cifar", (1, 3, 32, 32), lambda: _irregular("darts"),
             "DARTS_V2 cells, 8 cells, C=16, CIFAR-size (32x32)"),
    ZooModel("swiftnet_vww", (1, 3, 96, 96), lambda: _irregular("swiftnet"),
             "SwiftNet-style cells (concat + depthwise-separable nodes), 96x96"),
    ZooModel("transformer_encoder", (1, 128, 128), _transformer,
             "nn.TransformerEncoder: d_model 128, 2 heads, 2 layers, FF 512, seq 128"),
    # the families people deploy on CPUs that the models above do not represent
    _torchvision("resnet50", "torchvision ResNet-50"),
    _torchvision("mobilenet_v3_small",
                 "torchvision MobileNetV3-Small (squeeze-and-excitation, HardSwish)"),
    _torchvision("efficientnet_b0",
                 "torchvision EfficientNet-B0 (squeeze-and-excitation, SiLU, 5x5 depthwise)"),
    _torchvision("regnet_x_400mf", "torchvision RegNetX-400MF (grouped convs)"),
    _torchvision("densenet121", "torchvision DenseNet-121 (dense blocks of concatenations)"),
    _torchvision("googlenet", "torchvision GoogLeNet, no aux logits", aux_logits=False,
                 init_weights=True),
    _torchvision("convnext_tiny",
                 "torchvision ConvNeXt-Tiny (7x7 depthwise, LayerNorm over channels, GELU)"),
    ZooModel("vit_tiny", IMAGENET, _vit_tiny,
             "ViT-Tiny-sized torchvision VisionTransformer: patch 16, 4 layers, width 192"),
]}


def _get(name: str) -> ZooModel:
    if name not in MODELS:
        raise WoodpeckerError(f"unknown zoo model {name!r}; available: {', '.join(MODELS)}")
    return MODELS[name]


def build_module(name: str, seed: int = 0):
    """The eval-mode torch module with seeded random weights and batch-norm statistics."""
    import torch

    spec = _get(name)
    torch.manual_seed(seed)
    module = spec.build().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                m.weight.copy_(1.0 + 0.1 * torch.randn(c, generator=gen))
                m.bias.copy_(0.1 * torch.randn(c, generator=gen))
    return module


def model_input(name: str, seed: int = 0) -> np.ndarray:
    """A seeded random input of the model's shape."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(_get(name).input_shape).astype(np.float32)


def export(name: str, output: "str | os.PathLike | None" = None, seed: int = 0) -> Path:
    """Export zoo model `name` to ONNX (cached); copy to `output` when given."""
    import onnx

    from woodpecker.frontend.torch_import import export_module

    _get(name)
    cached = cache_dir() / "zoo" / f"{name}-seed{seed}-v{ZOO_VERSION}.onnx"
    if not cached.is_file():
        import torch

        module = build_module(name, seed)
        x = torch.from_numpy(model_input(name, seed))
        # the zoo's files stay those every recorded result was measured on: opset 17 from
        # the TorchScript exporter (ZOO_VERSION 1)
        data = export_module(module, (x,), input_names=["input"], output_names=["output"],
                             opset=17, exporters=("torchscript",))
        proto = onnx.load_from_string(data)
        for key, value in (("woodpecker.zoo", name), ("woodpecker.zoo.seed", str(seed)),
                           ("woodpecker.zoo.version", str(ZOO_VERSION))):
            onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props},
                                                key: value})
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}")
        onnx.save(proto, tmp)
        os.replace(tmp, cached)
    if output is None:
        return cached
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(cached.read_bytes())
    return out
