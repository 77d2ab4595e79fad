"""torch.compile(model, backend="woodpecker"): found through torch's backend entry point, the
outputs match eager PyTorch within 1e-4 (resnet18, mobilenet_v2, a transformer encoder); a
weight changed in place compiles again; a graph Woodpecker cannot take runs eagerly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from woodpecker.zoo.models import build_module, model_input  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name, grad", [("resnet18", False), ("mobilenet_v2", False),
                                        # no_grad would take nn.TransformerEncoder's fused
                                        # fast path, which has no ONNX export (runs eagerly)
                                        ("transformer_encoder", True)])
def test_zoo_models_match_eager(tmp_path, name, grad):
    torch.manual_seed(0)
    module = build_module(name).eval()
    x = torch.from_numpy(model_input(name))
    with torch.set_grad_enabled(grad):
        expected = module(x).detach()
        compiled = torch.compile(module, backend="woodpecker",
                                 options={"cache": str(tmp_path), "threads": 2})
        got = compiled(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert any(tmp_path.iterdir())          # a plan was compiled and saved


def test_weight_change_compiles_again_and_fallback(tmp_path, capsys):
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 10, 10)
    compiled = torch.compile(conv, backend="woodpecker", options={"cache": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-5)
        conv[0].weight.mul_(-2.0)
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-5)
    assert len(list(tmp_path.iterdir())) == 2

    class Polygamma(torch.nn.Module):   # no ONNX export of it: no plan takes the graph
        def forward(self, v):
            return torch.special.polygamma(2, v)

    v = torch.randn(4, 8)
    out = torch.compile(Polygamma(), backend="woodpecker", options={"cache": str(tmp_path)})(v)
    torch.testing.assert_close(out, torch.special.polygamma(2, v))
    assert "woodpecker: this graph runs in eager PyTorch" in capsys.readouterr().err


def test_unknown_option_is_one_clear_error():
    compiled = torch.compile(torch.nn.ReLU(), backend="woodpecker", options={"budget": "3m"})
    with pytest.raises(Exception, match="unknown woodpecker backend option 'budget'"):
        compiled(torch.randn(3))


@pytest.mark.parametrize("options, words", [
    ({"threads": "two"}, "threads must be a whole number"),
    ({"threads": -1}, "threads must be at least 1"),
    ({"engines": "nosuch"}, "unknown engine 'nosuch'"),
    ({"tune": "x"}, "bad budget 'x'"),
    ({"tuning_log": 42}, "tuning_log must be a path"),
    ({"cache": 42}, "cache must be a path"),
    ("x", "options are a dict"),                 # was dict()'s ValueError
])
def test_a_bad_option_value_is_an_error_not_an_eager_run(options, words):
    """A wrong option is the user's mistake, not the graph's: it used to leave every graph
    to eager PyTorch with a line on stderr (a non-dict options was dict()'s ValueError)."""
    from woodpecker.errors import WoodpeckerError
    from woodpecker.torch_backend import woodpecker_backend

    with pytest.raises(WoodpeckerError, match=words):
        woodpecker_backend(torch.fx.symbolic_trace(torch.nn.ReLU()), [torch.randn(3)], options)


def test_backend_name_works_without_importing_woodpecker(tmp_path):
    """The entry point (pyproject.toml) lets torch find "woodpecker" in a fresh process that
    never imported it."""
    import subprocess
    import sys

    code = f"""
import sys, torch
assert "woodpecker" not in sys.modules
m = torch.compile(torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU()).eval(),
                  backend="woodpecker", options={{"cache": {str(tmp_path)!r}}})
x = torch.randn(1, 2, 6, 6)
with torch.no_grad():
    torch.testing.assert_close(m(x), m._orig_mod(x), rtol=1e-4, atol=1e-5)
assert "woodpecker.torch_backend" in sys.modules
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_graph_break_leaves_the_python_in_between_to_torch(tmp_path):
    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.b = torch.nn.Conv2d(4, 2, 1)

        def forward(self, x):
            y = torch.relu(self.a(x))
            if y.sum() > 0:       # data-dependent: Dynamo breaks the graph here
                y = y * 2
            return self.b(y)

    module = Branchy().eval()
    graphs = []

    def counting(gm, example_inputs, options=None):
        from woodpecker.torch_backend import woodpecker_backend

        graphs.append(gm)
        return woodpecker_backend(gm, example_inputs, {"cache": str(tmp_path)})

    compiled = torch.compile(module, backend=counting)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-5)
    assert len(graphs) >= 2
