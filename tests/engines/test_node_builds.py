"""A library engine asks the library about a node by building it, once per distinct node
(engines/node_builds.py): identical nodes under other names are answered without a build,
a node that differs in what can decide the answer is built, a refusal keeps its reason."""

from __future__ import annotations

import numpy as np

from woodpecker.engines.base import BuildContext
from woodpecker.engines.node_builds import NodeBuilds
from woodpecker.engines.ort_engine import new_session
from woodpecker.errors import first_line
from woodpecker.ir.graph import Node, Value

F32 = np.dtype(np.float32)


def _add(name: str, shape=(2, 3), const=None) -> Node:
    a = Value(f"{name}_a", shape, F32)
    b = Value(f"{name}_b", shape, F32, data=const)
    return Node("Add", name, [a, b], [Value(f"{name}_y", shape, F32)])


def _counting():
    built = []

    def build(model: bytes, ctx: BuildContext):
        built.append(model)
        return new_session(model, ctx.threads)

    return built, build


def test_identical_nodes_are_built_once_and_their_own_build_made_when_needed():
    built, build = _counting()
    builds, ctx = NodeBuilds(build, first_line), BuildContext(1, 17)
    first, second = _add("first"), _add("second")
    assert builds.why_not(first, ctx) is None
    assert builds.why_not(second, ctx) is None
    assert len(built) == 1                 # the second answered from the first's signature
    session = builds.built(second, ctx)    # its own session (its own value names) now
    assert len(built) == 2
    x = np.ones((2, 3), np.float32)
    (y,) = session.run(None, {"second_a": x, "second_b": x})
    np.testing.assert_array_equal(y, 2 * x)
    assert builds.built(second, ctx) is session and len(built) == 2


def test_what_can_decide_the_answer_is_built_again():
    built, build = _counting()
    builds, ctx = NodeBuilds(build, first_line), BuildContext(1, 17)
    ones, twos = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    for node in (_add("a", const=ones), _add("b", const=twos), _add("c", shape=(4, 3)),
                 _add("d", const=ones)):
        assert builds.why_not(node, ctx) is None
    assert len(built) == 3        # a small constant's values, a shape: built; "d" is "a"
    builds.why_not(_add("e"), BuildContext(2, 17))
    assert len(built) == 4        # another thread count


def test_a_refusal_keeps_its_reason_for_identical_nodes():
    def build(model: bytes, ctx: BuildContext):
        raise RuntimeError("no kernel for this\nmore detail")

    builds, ctx = NodeBuilds(build, first_line), BuildContext(1, 17)
    assert builds.why_not(_add("a"), ctx) == "no kernel for this"
    assert builds.why_not(_add("b"), ctx) == "no kernel for this"
    assert builds.built(_add("c"), ctx) is None
    declined = NodeBuilds(build, first_line, refuse=lambda node: "declined first")
    assert declined.why_not(_add("d"), ctx) == "declined first"
