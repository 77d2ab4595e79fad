"""Off-chip traffic under Belady's rule (schedule/traffic.py): the limits (a cache holding
everything moves only the graph's inputs and outputs; no cache moves every read and every
kept write), a hand-checked chain, and bounds on random DAGs."""

from hypothesis import given, settings

from tests.schedule.test_arenas import chain_graph, dag_graphs
from woodpecker.schedule.problem import value_bytes
from woodpecker.schedule.traffic import offchip_traffic


def _reads(g):
    return sum(value_bytes(v) for n in g.nodes for v in dict.fromkeys(n.inputs)
               if v is not None and not v.is_const)


@settings(max_examples=150, deadline=None)
@given(dag_graphs())
def test_limits_and_bounds(g):
    inputs = sum(value_bytes(v) for v in g.inputs)
    outputs = sum(value_bytes(v) for v in g.outputs)
    everything = offchip_traffic(g, 1 << 30)
    assert (everything.read_bytes, everything.write_bytes) == (inputs, outputs)
    nothing = offchip_traffic(g, 0)
    assert nothing.read_bytes == _reads(g)
    assert nothing.write_bytes == sum(value_bytes(v) for n in g.nodes for v in n.outputs)
    some = offchip_traffic(g, 256)
    assert inputs <= some.read_bytes <= nothing.read_bytes
    assert outputs <= some.write_bytes <= nothing.write_bytes


def test_chain_fits_two_tensors():
    """x (4 B) → v0 → v1 → v2 (400 B each): with room for two tensors only x is read and
    only the output written; with room for one, every intermediate goes out and back."""
    g = chain_graph([100, 100, 100])
    two = offchip_traffic(g, 800)
    assert (two.read_bytes, two.write_bytes) == (4, 400)
    one = offchip_traffic(g, 400)
    assert (one.read_bytes, one.write_bytes) == (4 + 400 + 400, 400 + 400 + 400)
