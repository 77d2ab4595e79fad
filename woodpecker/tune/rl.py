"""Proximal policy optimization (Schulman et al. 2017), the RL both `ppo` (Woodpecker-DL
§2.4) and `chameleon` (thesis ch. 2, "Architecture exploration for the adaptive exploration":
PPO, actor-critic) train, in PyTorch.

Contract: `ActorCritic(obs_dim, heads, ...)` is a policy over one or more categorical action
heads (a multi-discrete action: one choice per head) and a state-value estimate; layers are
given as (width, activation) lists — the first `shared` ones feed both the actor and the
critic. `gae` is the generalized advantage estimator (WPK Eq. 5–6), `ppo_update` minimizes the
negative of WPK Eq. 7, L = E[L^clip − c1·L^VF + c2·S]. All randomness (initial weights, dropout,
action sampling, minibatch order) comes from a `torch.Generator` or the seed the caller gives,
so a searcher is reproduced from its seed. Torch runs on one thread here: the networks are
small and the build workers use the other cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "selu": nn.SELU, "relu": nn.ReLU}
Layers = Sequence[tuple[int, str]]


def _mlp(width: int, layers: Layers, dropout: float = 0.0) -> tuple[nn.Sequential, int]:
    mods: list[nn.Module] = []
    for size, act in layers:
        mods += [nn.Linear(width, size), ACTIVATIONS[act]()]
        width = size
    if dropout and layers:
        mods.append(nn.Dropout(dropout))
    return nn.Sequential(*mods), width


@contextmanager
def seeded(seed: int):
    """Torch's global generator (weight init, dropout) set to `seed` inside, restored after,
    on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, heads: Sequence[int], *, shared: Layers = (),
                 actor: Layers = ((64, "tanh"),), critic: Layers = ((64, "tanh"),),
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = list(heads)
        self.shared, width = _mlp(obs_dim, shared)
        self.actor, a_width = _mlp(width, actor, dropout)
        self.critic, c_width = _mlp(width, critic)
        self.logits = nn.Linear(a_width, sum(self.heads))
        self.value_out = nn.Linear(c_width, 1)

    def forward(self, obs: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        h = self.shared(obs)
        logits = torch.split(self.logits(self.actor(h)), self.heads, dim=-1)
        return list(logits), self.value_out(self.critic(h)).squeeze(-1)

    @staticmethod
    def log_prob(logits: list[torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
        return sum(torch.log_softmax(lg, -1).gather(-1, actions[:, i:i + 1]).squeeze(-1)
                   for i, lg in enumerate(logits))

    @staticmethod
    def entropy(logits: list[torch.Tensor]) -> torch.Tensor:
        return sum(-(torch.softmax(lg, -1) * torch.log_softmax(lg, -1)).sum(-1)
                   for lg in logits)

    @torch.no_grad()
    def act(self, obs: np.ndarray, generator: torch.Generator,
            mask: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled actions (n, heads), their log-probabilities and the state values, the
        network in eval mode (no dropout). `mask[i]`: (n, head i) booleans, False forbids."""
        self.eval()
        logits, value = self(torch.as_tensor(obs, dtype=torch.float32))
        if mask is not None:
            logits = [lg.masked_fill(~torch.as_tensor(m), -1e9) for lg, m in zip(logits, mask)]
        actions = torch.stack([torch.multinomial(torch.softmax(lg, -1), 1,
                                                 generator=generator).squeeze(-1)
                               for lg in logits], -1)
        return actions.numpy(), self.log_prob(logits, actions).numpy(), value.numpy()


def gae(rewards: np.ndarray, values: np.ndarray, last_values: np.ndarray, gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages Ā_t = Σ_l (γλ)^l δ_{t+l}, δ_t = r_t + γV(s_{t+1}) − V(s_t) (WPK Eq. 5–6),
    for (T, envs) arrays of fixed-length episodes; returns (advantages, value targets)."""
    adv = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1])
    for t in reversed(range(rewards.shape[0])):
        nxt = last_values if t == rewards.shape[0] - 1 else values[t + 1]
        delta = rewards[t] + gamma * nxt - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, adv + values


def ppo_update(net: ActorCritic, opt: torch.optim.Optimizer, obs: np.ndarray,
               actions: np.ndarray, logp_old: np.ndarray, adv: np.ndarray,
               returns: np.ndarray, generator: torch.Generator, *, clip: float = 0.2,
               c1: float = 0.15, c2: float = 0.01, epochs: int = 4,
               minibatch: int = 64) -> float:
    """Minimize −(L^clip − c1·L^VF + c2·S) over minibatches (WPK Eq. 7); advantages are
    normalized per update. Returns the last minibatch's loss."""
    net.train()
    o = torch.as_tensor(obs, dtype=torch.float32)
    a = torch.as_tensor(actions, dtype=torch.int64)
    lp = torch.as_tensor(logp_old, dtype=torch.float32)
    ad = torch.as_tensor(adv, dtype=torch.float32)
    ad = (ad - ad.mean()) / (ad.std() + 1e-8) if len(ad) > 1 else ad
    ret = torch.as_tensor(returns, dtype=torch.float32)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        order = torch.randperm(len(o), generator=generator)
        for i in range(0, len(o), minibatch):
            idx = order[i:i + minibatch]
            logits, value = net(o[idx])
            ratio = torch.exp(net.log_prob(logits, a[idx]) - lp[idx])
            clipped = torch.min(ratio * ad[idx],
                                torch.clamp(ratio, 1 - clip, 1 + clip) * ad[idx])
            loss = -(clipped.mean() - c1 * ((value - ret[idx]) ** 2).mean()
                     + c2 * net.entropy(logits).mean())
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            opt.step()
    return float(loss.detach())
