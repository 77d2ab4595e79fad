"""transformers encoders (BERT, DistilBERT, ViT; tiny configs, random weights — no hub access)
compiled from the module through torch's current exporter: every op they export to is
supported, and the outputs match eager PyTorch within 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

import woodpecker

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")


def bert():
    c = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=128,
                                max_position_embeddings=64)
    return transformers.BertModel(c), text_inputs()


def distilbert():
    c = transformers.DistilBertConfig(vocab_size=500, dim=64, n_layers=2, n_heads=4,
                                      hidden_dim=128, max_position_embeddings=64)
    return transformers.DistilBertModel(c), text_inputs()


def vit():
    c = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=128)
    return transformers.ViTModel(c), {"pixel_values": torch.randn(1, 3, 32, 32,
                                                                  generator=torch.Generator().manual_seed(0))}


def text_inputs():
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[0, 12:] = 0          # padding: the mask's Where/And path is exercised
    return {"input_ids": torch.randint(0, 500, (1, 16), generator=g), "attention_mask": mask}


@pytest.mark.parametrize("build", [bert, distilbert, vit])
def test_encoder_compiles_and_matches_eager(build):
    torch.manual_seed(0)
    module, inputs = build()
    module.eval()
    with torch.no_grad():
        expected = module(**inputs).last_hidden_state.numpy()
    m = woodpecker.compile(module, example_inputs=inputs, threads=1)
    assert m.plan.meta["metadata"]["woodpecker.exporter"] == "dynamo"
    out = m.run({k: v.numpy() for k, v in inputs.items()})
    got = out[m.outputs[0][0]]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
