"""ONNX backend node tests through Woodpecker with every installed engine (see selection.py)."""

from tests.conformance.selection import backend_tests
from woodpecker.backend import WoodpeckerBackend

globals().update(backend_tests(WoodpeckerBackend, __name__))
