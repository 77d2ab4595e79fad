"""Irregularly wired networks (SERENITY's workloads, thesis §3.5), as seeded PyTorch modules.

- RandWire (Xie et al. 2019, "small regime"): each stage is a Watts–Strogatz graph WS(N, K, P)
  made acyclic by orienting edges from lower to higher node index; a node is a sigmoid-weighted
  sum of its inputs, then ReLU, a 3×3 separable conv and BN; nodes without inputs read the
  stage input (stride 2), the stage output is the mean of the nodes without outputs.
- DARTS (Liu et al. 2019): the published DARTS_V2 normal/reduction cells stacked as the CIFAR
  network (8 cells, C=16); each cell's output is the channel concat of its four nodes, read by
  the next cells' ReLU-1×1 conv preprocessing (SERENITY's concat+conv pattern).
- SwiftNet-style (Zhang et al. 2019, cell A wiring as used by SERENITY): cells whose nodes each
  concat two or three earlier nodes and apply a depthwise-separable conv (the concat+depthwise
  pattern); the cell output is the concat of its sink nodes through a 1×1 conv. The wiring is
  drawn from a seed, since the searched SwiftNet cells are not published as code.

The forward passes run nodes in index order, which is the order the ONNX file keeps.
"""

from __future__ import annotations

import random


def _torch():
    import torch
    from torch import nn
    return torch, nn


def _bn_conv(nn, cin, cout, k=1, stride=1, groups=1, dilation=1):
    pad = dilation * (k - 1) // 2
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, groups=groups,
                                   bias=False), nn.BatchNorm2d(cout))


def randwire(size: str = "cifar", nodes: int = 32, k: int = 4, p: float = 0.75, channels: int = 78,
             seed: int = 0, classes: int | None = None):
    """RandWire-WS small regime; `size` "cifar" (32×32 input) or "imagenet" (224×224)."""
    import networkx as nx
    torch, nn = _torch()

    class Node(nn.Module):
        def __init__(self, n_in, cin, cout, stride):
            super().__init__()
            self.w = nn.Parameter(torch.randn(n_in)) if n_in > 1 else None
            self.dw = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
            self.pw = _bn_conv(nn, cin, cout)

        def forward(self, xs):
            if self.w is None:
                x = xs[0]
            else:
                g = torch.sigmoid(self.w)
                x = xs[0] * g[0]
                for i in range(1, len(xs)):
                    x = x + xs[i] * g[i]
            return self.pw(self.dw(torch.relu(x)))

    class Stage(nn.Module):
        def __init__(self, cin, cout, stage_seed):
            super().__init__()
            g = nx.connected_watts_strogatz_graph(nodes, k, p, seed=stage_seed)
            self.preds = [sorted(v for v in g.neighbors(u) if v < u) for u in range(nodes)]
            has_succ = {v for u in range(nodes) for v in self.preds[u]}
            self.sinks = [u for u in range(nodes) if u not in has_succ]
            self.body = nn.ModuleList(
                Node(max(1, len(self.preds[u])), cin if not self.preds[u] else cout, cout,
                     2 if not self.preds[u] else 1) for u in range(nodes))

        def forward(self, x):
            out = []
            for u, node in enumerate(self.body):
                out.append(node([x] if not self.preds[u] else [out[v] for v in self.preds[u]]))
            y = out[self.sinks[0]]
            for s in self.sinks[1:]:
                y = y + out[s]
            return y / len(self.sinks)

    c = channels
    imagenet = size == "imagenet"
    stem = nn.Sequential(_bn_conv(nn, 3, c // 2, 3, 2 if imagenet else 1), nn.ReLU(),
                         *([_bn_conv(nn, c // 2, c, 3, 2), nn.ReLU()] if imagenet else
                           [_bn_conv(nn, c // 2, c, 3, 1), nn.ReLU()]))
    rng = random.Random(seed)
    stages = [Stage(c, c, rng.randrange(1 << 30)), Stage(c, 2 * c, rng.randrange(1 << 30)),
              Stage(2 * c, 4 * c, rng.randrange(1 << 30))]
    head = nn.Sequential(nn.ReLU(), _bn_conv(nn, 4 * c, 1280), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, classes or (1000 if imagenet else 10)))
    return nn.Sequential(stem, *stages, head)


# DARTS_V2 (Liu et al. 2019, genotypes.py of the paper's release): (op, input) pairs, two per node.
DARTS_V2_NORMAL = [("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0),
                   ("sep_conv_3x3", 1), ("sep_conv_3x3", 1), ("skip_connect", 0),
                   ("skip_connect", 0), ("dil_conv_3x3", 2)]
DARTS_V2_REDUCE = [("max_pool_3x3", 0), ("max_pool_3x3", 1), ("skip_connect", 2),
                   ("max_pool_3x3", 1), ("max_pool_3x3", 0), ("skip_connect", 2),
                   ("skip_connect", 2), ("max_pool_3x3", 1)]


def darts(channels: int = 16, layers: int = 8, classes: int = 10):
    """The DARTS_V2 CIFAR network (32×32 input), without auxiliary head or drop-path."""
    torch, nn = _torch()

    def relu_conv_bn(cin, cout, k=1, stride=1, groups=1, dilation=1):
        return nn.Sequential(nn.ReLU(), *_bn_conv(nn, cin, cout, k, stride, groups, dilation))

    class FactorizedReduce(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.a = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
            self.b = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            x = torch.relu(x)
            return self.bn(torch.cat([self.a(x), self.b(x[:, :, 1:, 1:])], dim=1))

    def sep_conv(c, stride):
        return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False),
                             *_bn_conv(nn, c, c), nn.ReLU(),
                             nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False), *_bn_conv(nn, c, c))

    def make_op(name, c, stride):
        if name == "sep_conv_3x3":
            return sep_conv(c, stride)
        if name == "dil_conv_3x3":
            return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, 3, stride, 2, dilation=2, groups=c,
                                                      bias=False), *_bn_conv(nn, c, c))
        if name == "max_pool_3x3":
            return nn.MaxPool2d(3, stride, 1)
        return nn.Identity() if stride == 1 else FactorizedReduce(c, c)

    class Cell(nn.Module):
        def __init__(self, c_pp, c_p, c, reduction, reduction_prev):
            super().__init__()
            self.pre0 = FactorizedReduce(c_pp, c) if reduction_prev else relu_conv_bn(c_pp, c)
            self.pre1 = relu_conv_bn(c_p, c)
            genotype = DARTS_V2_REDUCE if reduction else DARTS_V2_NORMAL
            self.inputs = [i for _, i in genotype]
            self.ops = nn.ModuleList(make_op(name, c, 2 if reduction and i < 2 else 1)
                                     for name, i in genotype)

        def forward(self, s0, s1):
            states = [self.pre0(s0), self.pre1(s1)]
            for j in range(0, len(self.ops), 2):
                states.append(self.ops[j](states[self.inputs[j]]) +
                              self.ops[j + 1](states[self.inputs[j + 1]]))
            return torch.cat(states[2:], dim=1)

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            c_curr = 3 * channels
            self.stem = _bn_conv(nn, 3, c_curr, 3)
            c_pp, c_p, c_curr = c_curr, c_curr, channels
            cells, reduction_prev = [], False
            for i in range(layers):
                reduction = i in (layers // 3, 2 * layers // 3)
                if reduction:
                    c_curr *= 2
                cells.append(Cell(c_pp, c_p, c_curr, reduction, reduction_prev))
                reduction_prev = reduction
                c_pp, c_p = c_p, 4 * c_curr
            self.cells = nn.ModuleList(cells)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(c_p, classes))

        def forward(self, x):
            s0 = s1 = self.stem(x)
            for cell in self.cells:
                s0, s1 = s1, cell(s0, s1)
            return self.head(s1)

    return Network()


def swiftnet(channels: tuple[int, ...] = (32, 64, 128), nodes: int = 8, seed: int = 0,
             classes: int = 2):
    """SwiftNet-style cell network for 96×96 visual-wake-word inputs (see module docstring)."""
    torch, nn = _torch()

    class Cell(nn.Module):
        def __init__(self, c, rng):
            super().__init__()
            self.inputs = [[0]] + [sorted(rng.sample(range(u), min(u, rng.choice((2, 3)))))
                                   for u in range(1, nodes)]
            read = {v for ins in self.inputs for v in ins}
            self.sinks = [u for u in range(nodes) if u + 1 not in read]
            self.body = nn.ModuleList()
            for ins in self.inputs:
                cin = c * len(ins)
                self.body.append(nn.Sequential(
                    nn.Conv2d(cin, cin, 3, 1, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                    nn.ReLU(), _bn_conv(nn, cin, c)))
            self.out = nn.Sequential(_bn_conv(nn, c * len(self.sinks), c), nn.ReLU())

        def forward(self, x):
            states = [x]   # state 0 is the cell input, node u writes state u + 1
            for ins, node in zip(self.inputs, self.body):
                parts = [states[i] for i in ins]
                states.append(node(parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)))
            return self.out(torch.cat([states[u + 1] for u in self.sinks], dim=1))

    rng = random.Random(seed)
    layers = [_bn_conv(nn, 3, channels[0], 3, 2), nn.ReLU()]
    for i, c in enumerate(channels):
        if i:
            layers += [_bn_conv(nn, channels[i - 1], c, 3, 2), nn.ReLU()]
        layers.append(Cell(c, rng))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], classes)]
    return nn.Sequential(*layers)
