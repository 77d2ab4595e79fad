"""The same node tests on the numpy engine alone: the reference every kernel is checked against
must itself conform."""

from tests.conformance.selection import backend_tests
from woodpecker.backend import WoodpeckerBackend


class NumpyBackend(WoodpeckerBackend):
    engines = "numpy"


globals().update(backend_tests(NumpyBackend, __name__))
