"""Model zoo (needs the `zoo` extra): seeded random-weight models exported to ONNX and cached.

Batch-norm statistics are randomised too, so BatchNorm folding is exercised with real numbers.
Each export carries `woodpecker.zoo.*` metadata, so `bench` can rebuild the identical PyTorch
module to compare against.
"""

from woodpecker.zoo.models import MODELS, ZooModel, build_module, export, model_input

__all__ = ["MODELS", "ZooModel", "build_module", "export", "model_input"]
