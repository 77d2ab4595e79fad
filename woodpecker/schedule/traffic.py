"""Off-chip traffic of an execution order (thesis §3.5): the activation bytes moved between a
cache of a given size and memory when the graph runs in its current node order, the cache
managed by Belady's rule (evict what is used again farthest in the future).

Contract: `offchip_traffic(graph, cache_bytes)` → `Traffic(read_bytes, write_bytes)`. The model,
choices where the thesis is silent: whole tensors are cached (no partial tensors); a node reads
its activation inputs (graph inputs included; weights are streamed by every order alike and
left out), then writes its outputs into the cache (write-allocate, no read); the current
node's operands are not evicted while it runs, and one that does not fit beside them (or the
cache at all) goes straight to memory. A miss reads the tensor; evicting a written tensor
still to be read (or a graph output) writes it back, and so do the graph outputs still cached
at the end; a dead tensor is dropped free. Among the tensors that may go, Belady's choice:
those never used again first, then the one whose next use is farthest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from woodpecker.ir.graph import Graph
from woodpecker.schedule.problem import value_bytes


@dataclass(frozen=True)
class Traffic:
    read_bytes: int
    write_bytes: int

    @property
    def total(self) -> int:
        return self.read_bytes + self.write_bytes


def l2_bytes(default: int = 512 << 10) -> int:
    """This machine's per-core L2 cache size (Linux sysfs), else `default`."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                text = (index / "size").read_text().strip().upper()
                unit = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
                return int(text.rstrip("KM")) * unit
        except (OSError, ValueError):
            continue
    return default


def offchip_traffic(graph: Graph, cache_bytes: int) -> Traffic:
    """Belady-managed traffic of the activations of `graph` in its node order."""
    uses: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None and not v.is_const:
                uses.setdefault(v.name, []).append(i)
    outputs = {v.name for v in graph.outputs}
    size: dict[str, int] = {v.name: value_bytes(v) for v in graph.inputs}
    cached: dict[str, bool] = {}          # name → dirty
    used = 0
    read = write = 0

    def next_use(name: str, now: int) -> float:
        later = [u for u in uses.get(name, ()) if u > now]
        return later[0] if later else float("inf")

    def make_room(need: int, now: int, pinned: set[str]) -> bool:
        """Evict until `need` bytes fit; False when only the node's own operands are left."""
        nonlocal used, write
        while used + need > cache_bytes:
            victims = [n for n in cached if n not in pinned]
            if not victims:
                return False
            victim = max(victims, key=lambda n: (next_use(n, now), size[n]))
            if cached.pop(victim) and (next_use(victim, now) < float("inf")
                                       or victim in outputs):
                write += size[victim]
            used -= size[victim]
        return True

    for i, node in enumerate(graph.nodes):
        ins = [v.name for v in node.inputs if v is not None and not v.is_const]
        outs = [v.name for v in node.outputs]
        for v in node.outputs:
            size[v.name] = value_bytes(v)
        pinned = set(ins) | set(outs)
        for name in dict.fromkeys(ins):
            if name in cached:
                continue
            read += size[name]
            if make_room(size[name], i, pinned):
                cached[name] = False
                used += size[name]
        for name in outs:
            if not make_room(size[name], i, pinned):      # streamed to memory
                if uses.get(name) or name in outputs:
                    write += size[name]
                continue
            cached[name] = True
            used += size[name]
        for name in [n for n in cached if next_use(n, i) == float("inf")
                     and n not in outputs]:
            used -= size[name]
            del cached[name]            # dead: dropped free
    write += sum(size[n] for n, dirty in cached.items() if dirty and n in outputs)
    return Traffic(read, write)
