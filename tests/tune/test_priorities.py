"""The library budget split (tune/priorities.py): tasks weighted by their time on ONNX Runtime
and the promise of their best known kernel, heaviest first; a task without a library time
gets its roofline work in the library's units."""

from __future__ import annotations

import io

import pytest

from tests.helpers import make_model, rand
from woodpecker.config import LIBRARY_HOPELESS_WEIGHT, LIBRARY_REACH, LIBRARY_WON_WEIGHT, MIN_SHARE
from woodpecker.tune.priorities import deepest_first, library_weights, promise


def test_promise_follows_how_close_the_best_known_kernel_came():
    assert promise(None, 1.0) == promise(1.0, None) == 1.0
    assert promise(0.8, 1.0) == LIBRARY_WON_WEIGHT
    assert promise(1.2, 1.0) == 1.0
    assert promise(LIBRARY_REACH * 1.01, 1.0) == LIBRARY_HOPELESS_WEIGHT


def test_weights_are_library_time_times_promise_with_a_floor():
    library = [4.0, 1.0, None, 2.0]
    work = [8.0, 2.0, 6.0, 4.0]                 # two units of work a library ms
    best = [None, 0.5, None, 10.0]
    w = library_weights(library, best, work)
    assert w[0] == 4.0 and w[1] == LIBRARY_WON_WEIGHT * 1.0
    assert w[2] == 3.0                          # 6 units of work at the median 0.5 ms a unit
    assert w[3] == max(LIBRARY_HOPELESS_WEIGHT * 2.0, MIN_SHARE * 10.0)
    assert deepest_first(w) == [0, 2, 1, 3] if w[1] > w[3] else [0, 2, 3, 1]
    assert deepest_first([1.0, 3.0, 3.0]) == [1, 2, 0]


def _two_convs():
    """A small 1x1 conv, then a 3x3 one with eight times its work."""
    from onnx import helper

    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w1": rand(16, 16, 1, 1, seed=1), "w2": rand(16, 16, 3, 3, seed=2)}
    return make_model(nodes, [("x", [1, 16, 24, 24])], [("y", [1, 16, 24, 24])], inits)


def test_a_library_split_probes_onnx_runtime_and_tunes_the_heaviest_task_first(tmp_path):
    pytest.importorskip("halide")
    from woodpecker.frontend.onnx_import import import_onnx
    from woodpecker.options import TuneOptions
    from woodpecker.passes import optimize
    from woodpecker.target import Target
    from woodpecker.tune.driver import open_log, tune_graph
    from woodpecker.tune.extract import extract_tasks
    from woodpecker.tune.priorities import library_times

    graph = import_onnx(_two_convs())
    optimize(graph)
    groups = extract_tasks(graph, parts=True)
    times = library_times(graph, groups, 1)
    assert all(t is not None and t > 0 for t in times)
    target = Target.parse("cpu", 1)
    out = io.StringIO()
    results = tune_graph(graph, target, open_log(str(tmp_path / "t.jsonl"), False, out, target),
                         TuneOptions("60s", "random", max_trials=1, split="library"), out)
    assert "budget split by library time: 2 of 2 task(s) timed on ONNX Runtime" in \
        out.getvalue()
    assert len(groups) == 2
    heaviest = max(range(len(groups)), key=lambda i: times[i])
    assert results[0][0].task.key == groups[heaviest].task.key
