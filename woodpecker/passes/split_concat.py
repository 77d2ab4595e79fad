"""SERENITY's identity graph rewriting (thesis §3.4.3): a channel Concat read by convolutions is
split so that each concatenated part is consumed as soon as it exists.

- Concat → Conv (channel-wise partitioning, Eq. 3.3–3.6): y = Σ_i W_{*i} * x_i. Each part gets
  a partial Conv over its slice of input channels; the partial results are summed by FusedConv
  Add epilogues (partial_j = conv(x_j) + partial_{j-1}); the bias goes on the first part, the
  original epilogue (activations, residual adds) on the last.
- Concat → depthwise Conv (kernel-wise partitioning, Eq. 3.7–3.8): y = [w_i * x_i]_i. Each part
  gets a depthwise Conv over its channels and the results are concatenated.

Channel-wise ops between the Concat and the Conv (DARTS' ReLU before its 1×1 conv, the
spatial Slice of its factorized reduce) are moved onto the parts:
relu(concat(x_i)) = concat(relu(x_i)). A Concat is rewritten only when
every reader is such a path, so the concatenated tensor disappears. Which concats to rewrite
is decided by the memory scheduler (schedule/memory.py): only where the optimal peak goes down.

`split_copied_concats` applies Eq. 3.8 for speed instead, in the default pipeline: see there.
"""

from __future__ import annotations

from woodpecker.ir.graph import Graph, Node, Value
from woodpecker.ops.fused import channelwise_elementwise, prologue_vectors

CONVS = ("Conv", "FusedConv")


def _channelwise(node: Node) -> bool:
    """Ops that commute with a channel concat: ReLU (or a fused element-wise group of one
    run-time input), and a Slice (DARTS' factorized reduce takes x[:, :, 1:, 1:]) whose
    constant axes leave the channel axis alone."""
    if node.op == "Relu" or channelwise_elementwise(node):
        return True
    if node.op != "Slice" or len(node.inputs) < 4 or node.inputs[3] is None:
        return False
    if not all(v is None or v.is_const for v in node.inputs[1:]):
        return False
    return all(int(a) % 4 != 1 for a in node.inputs[3].data.reshape(-1))


def _rewritable(graph: Graph, reader: Node, v: Value) -> bool:
    """True when `reader` of v is a conv taking v's channels whole, or a channel-wise op all of
    whose readers are (recursively)."""
    if _channelwise(reader):
        out = reader.outputs[0]
        return (reader.inputs[0] is v and not graph.is_output(out) and bool(out.consumers)
                and all(_rewritable(graph, r, out) for r in dict.fromkeys(out.consumers)))
    if reader.op not in CONVS or reader.inputs[0] is not v or len(v.shape) != 4:
        return False
    if any(x is v for x in reader.inputs[1:]) or prologue_vectors(reader.attrs):
        return False   # (a prologue's per-channel vectors would need splitting too)
    group = reader.attrs.get("group", 1)
    steps = reader.attrs.get("epilogue", [])
    return group == 1 or (group == v.shape[1] and not any(s["op"] == "Add" for s in steps))


def candidates(graph: Graph) -> list[Node]:
    """Concat nodes (channel axis, 4-d, two or more run-time parts) every reader of which is a
    rewritable conv path."""
    out = []
    for node in graph.nodes:
        if node.op != "Concat" or len(node.inputs) < 2:
            continue
        y = node.outputs[0]
        if y.shape is None or len(y.shape) != 4 or node.attrs.get("axis") not in (1, -3):
            continue
        if graph.is_output(y) or not y.consumers or any(v.is_const for v in node.inputs):
            continue
        if all(_rewritable(graph, r, y) for r in dict.fromkeys(y.consumers)):
            out.append(node)
    return out


def split_concat(graph: Graph, concat: Node) -> None:
    """Rewrite one candidate Concat (see `candidates`) and every conv path reading it."""
    y = concat.outputs[0]
    for reader in list(dict.fromkeys(y.consumers)):
        _split_reader(graph, reader, list(concat.inputs))
    graph.remove_node(concat)
    graph.toposort()
    graph.dce()


def _split_reader(graph: Graph, reader: Node, parts: list[Value]) -> None:
    """Replace `reader` (of the concat of `parts`) by per-part nodes."""
    index = graph.nodes.index(reader)
    if _channelwise(reader):
        new, xs = [], []
        for x in parts:
            shape = x.shape[:2] + reader.outputs[0].shape[2:]
            out = graph.value(graph.fresh_name(reader.name), shape, x.dtype)
            new.append(Node(reader.op, graph.fresh_name(reader.name),
                            [x] + reader.inputs[1:], [out], dict(reader.attrs)))
            xs.append(out)
    elif reader.attrs.get("group", 1) == 1:
        new, xs = _channel_partitions(graph, reader, parts), []
    else:
        new, xs = _kernel_partitions(graph, reader, parts), []
    graph.remove_node(reader)
    for n in new:
        graph.add_node(n.op, n.inputs, n.outputs, n.attrs, n.name, index)
        index += 1
    if xs:
        for r in list(dict.fromkeys(reader.outputs[0].consumers)):
            _split_reader(graph, r, xs)


def _channel_partitions(graph: Graph, conv: Node, xs: list[Value]) -> list[Node]:
    """Eq. 3.6: partial convs over channel slices, accumulated through Add epilogues."""
    w, b = conv.inputs[1], conv.input(2)
    residuals = conv.inputs[3:]
    steps = conv.attrs.get("epilogue", [])
    out = conv.outputs[0]
    base = {k: v for k, v in conv.attrs.items() if k != "epilogue"}
    nodes, acc, off = [], None, 0
    for j, x in enumerate(xs):
        c = x.shape[1]
        wj = graph.const(w.data[:, off:off + c], w.name)
        off += c
        last = j == len(xs) - 1
        y = out if last else graph.value(graph.fresh_name(conv.name), out.shape, out.dtype)
        name = graph.fresh_name(conv.name)
        if acc is None:
            # a prologue (passes/fuse_prologue.py) is element-wise: each part applies it
            ins = [x, wj, b] + (list(residuals) if last else [])
            epi = steps if last else []
            op, attrs = ("FusedConv", dict(base, epilogue=epi)) if epi or "prologue" in base \
                else ("Conv", dict(base))
        else:
            ins = [x, wj, None, acc] + (list(residuals) if last else [])
            op, attrs = "FusedConv", dict(base, epilogue=[{"op": "Add"}] + (steps if last else []))
        nodes.append(Node(op, name, ins, [y], attrs))
        acc = y
    return nodes


def _kernel_partitions(graph: Graph, conv: Node, xs: list[Value]) -> list[Node]:
    """Eq. 3.8: a depthwise conv per part (its slice of filters), then the Concat."""
    w, b = conv.inputs[1], conv.input(2)
    out = conv.outputs[0]
    mult = w.shape[0] // conv.attrs["group"]
    nodes, ys, off = [], [], 0
    for x in xs:
        c = x.shape[1]
        lo, hi = off * mult, (off + c) * mult
        off += c
        y = graph.value(graph.fresh_name(conv.name), (out.shape[0], hi - lo) + out.shape[2:],
                        out.dtype)
        ins = [x, graph.const(w.data[lo:hi], w.name),
               None if b is None else graph.const(b.data[lo:hi], b.name)]
        nodes.append(Node(conv.op, graph.fresh_name(conv.name), ins, [y],
                          dict(conv.attrs, group=c)))
        ys.append(y)
    nodes.append(Node("Concat", graph.fresh_name("Concat"), ys, [out], {"axis": 1}))
    return nodes


def split_copied_concats(graph: Graph) -> int:
    """Kernel-wise partitioning (Eq. 3.8) of every Concat read only by depthwise convs (through
    channel-wise ops) one of whose parts cannot be written in place (schedule/aliases.py: a
    part of two Concats lives in the first one's output and is copied into the other's, as is
    a graph input or output). Each depthwise part then reads its part where it lies, and the
    new Concat's parts, the per-part depthwise outputs, are read once and so written in place.

    Why: SwiftNet's dense cells concatenate earlier nodes' outputs, most of which feed two or
    three later concats; the copies took 0.35 ms of an all-Halide plan's 2.41 ms. The cost is
    a kernel call per part instead of one. Concats whose parts all go in place, and those read
    by a regular conv (whose split sums partial convs, more work), are left alone. Returns how
    many Concats were rewritten; each rewrite is re-decided on the graph as it stands, since
    splitting one Concat can free a shared part to go in place in another."""
    rewritten = 0
    while True:
        concat = next((c for c in candidates(graph)
                       if all(conv.attrs.get("group", 1) > 1
                              for conv in _conv_readers(c.outputs[0]))
                       and any(_copied(graph, p, c) for p in c.inputs)), None)
        if concat is None:
            return rewritten
        split_concat(graph, concat)
        rewritten += 1


def _conv_readers(v: Value):
    """The convs at the ends of v's channel-wise reader paths (see `_rewritable`)."""
    for reader in dict.fromkeys(v.consumers):
        if _channelwise(reader):
            yield from _conv_readers(reader.outputs[0])
        else:
            yield reader


def _copied(graph: Graph, part: Value, concat: Node) -> bool:
    """`part` cannot be written in place in `concat`'s output (schedule/aliases.py)."""
    concats = sum(1 for c in dict.fromkeys(part.consumers) if c.op == "Concat")
    return part.producer is None or graph.is_output(part) or concats > 1 \
        or concat.inputs.count(part) > 1
