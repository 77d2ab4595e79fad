"""`ppo` — Woodpecker-DL's RL search (§2.4): a PPO agent changes one knob per action and is
rewarded by the measured runtime against a moving average of the runtimes.

- Observation (the paper's O_conv, for every template): the task's shape parameters (log2),
  each knob's value index scaled to [0, 1], and the moving average α_t (over the task's first
  valid runtime, so every task shares one scale).
- Action: one categorical over every (knob, value) pair — "an action updates one parameter at
  a time"; values that would break the space's constraints are masked out.
- Network: four fully-connected layers of 512, 1024, 1024, 512 with tanh, tanh, selu, selu, a
  dropout with keep probability 15 %, a linear layer (the paper's); the value function is a
  separate 2×64 tanh network (RLlib's default of unshared value layers).
- Reward (Eq. 4): r_t = α_{t−1} − min(β_t, 2α_{t−1}), β_t the measured runtime (an invalid
  candidate counts as β_t = ∞, i.e. r_t = −α_{t−1}), divided by the task's scale.
- α_t (Eq. 3): the paper writes α_t = (0.8·α_{t−1} + β_t)/t with α_0 = 0. Taken literally
  it decays like β/t (α_3 ≈ 0.57β, α_10 ≈ 0.11β), so from the third step on every candidate
  gets r_t = −α_{t−1}: no signal. `alpha="ema"` (the default) reads it as the moving average
  the text names, α_t = 0.8·α_{t−1} + 0.2·β_t (α_1 = β_1); `alpha="eq3"` is the literal form.
- Loss Eq. 7 with c1 = 0.15 (the paper's) and GAE (Eq. 5–6, γ = 0.9, λ = 0.95). The paper's
  entropy coefficient c2 = 20 is for its reward scale (raw runtimes); with normalized
  advantages it keeps the policy uniform — random search — so c2 = 0.01 (PPO's usual).

Episodes: `batch` parallel environments (one candidate each per step, so each step's
candidates build in parallel), `horizon` steps each; a PPO update after each round of episodes.
An episode starts from the best measured configuration (half the environments) or a random
one. A step onto a configuration already measured is rewarded from the log without measuring.
"""

from __future__ import annotations

import json

import numpy as np

from woodpecker.tasks.space import Config, KnobSpace
from woodpecker.tune.context import TuningContext
from woodpecker.tune.features import task_features

WPK_LAYERS = ((512, "tanh"), (1024, "tanh"), (1024, "selu"), (512, "selu"))


class PPOSearch:
    def __init__(self, ctx: TuningContext, batch: int = 8, horizon: int = 8,
                 alpha: str = "ema", c1: float = 0.15, c2: float = 0.01,
                 gamma: float = 0.9, lam: float = 0.95, lr: float = 3e-4,
                 layers=WPK_LAYERS, keep_prob: float = 0.15) -> None:
        import torch

        from woodpecker.tune.rl import ActorCritic, seeded

        if alpha not in ("ema", "eq3"):
            raise ValueError(f"alpha must be 'ema' or 'eq3', not {alpha!r}")
        self.ctx, self.space, self.rng = ctx, ctx.space, ctx.rng
        self.batch, self.horizon, self.alpha_rule = batch, horizon, alpha
        self.c1, self.c2, self.gamma, self.lam = c1, c2, gamma, lam
        self.params = {"batch": batch, "horizon": horizon, "alpha": alpha, "c1": c1, "c2": c2,
                       "gamma": gamma, "lam": lam, "lr": lr, "keep_prob": keep_prob}
        self.knobs = self.space.knobs
        self.actions = [(i, v) for i, k in enumerate(self.knobs) for v in range(len(k.values))]
        tf = task_features(ctx.task)
        self.task_obs = np.array([tf[k] for k in sorted(tf)], dtype=np.float32) / 16.0
        obs_dim = len(self.task_obs) + len(self.knobs) + 1
        self.generator = torch.Generator().manual_seed(ctx.seed)
        self._updates = 0
        with seeded(ctx.seed):
            self.net = ActorCritic(obs_dim, [len(self.actions)], actor=layers,
                                   critic=((64, "tanh"), (64, "tanh")), dropout=1 - keep_prob)
            self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.costs: dict[str, float | None] = {KnobSpace.key(r.config): r.cost_s
                                               for r in ctx.own_records()}
        self.scale = min((c for c in self.costs.values() if c), default=None)
        self.states: list[Config] = []
        self.alpha = np.zeros(batch)
        self.t = np.zeros(batch, dtype=int)
        self.pending: list[tuple[int, np.ndarray, int, float, float, Config]] = []
        self.rollout: list[list] = [[] for _ in range(batch)]   # (obs, action, logp, value, r)

    # -- environment ---------------------------------------------------------------------------
    def _obs(self, env: int) -> np.ndarray:
        c = self.states[env]
        idx = [k.values.index(c[k.name]) / max(1, len(k.values) - 1) for k in self.knobs]
        a = self.alpha[env] / self.scale if self.scale else 0.0
        return np.concatenate([self.task_obs, np.array(idx + [a], dtype=np.float32)])

    def _mask(self, env: int) -> np.ndarray:
        c = self.states[env]
        return np.array([self.space.is_valid(dict(c, **{self.knobs[i].name:
                                                        self.knobs[i].values[v]}))
                         for i, v in self.actions])

    def _start(self, env: int) -> Config:
        valid = sorted((k for k, c in self.costs.items() if c), key=lambda k: self.costs[k])
        if valid and env < self.batch // 2:
            return json.loads(valid[min(env, len(valid) - 1)])
        seeds = self.space.seeds
        if not valid and env < len(seeds):
            return dict(seeds[env])
        return self.space.sample(self.rng)

    def _reward(self, env: int, beta: float | None) -> float:
        """Eq. 4 for the runtime β_t (None: invalid), then α_t by the chosen rule."""
        prev = self.alpha[env]
        t = self.t[env] + 1
        b = beta if beta else float("inf")
        r = 0.0 if t == 1 else (prev - min(b, 2 * prev))
        b_for_alpha = b if beta else 2 * prev
        if t == 1:
            self.alpha[env] = beta or 0.0
        elif self.alpha_rule == "ema":
            self.alpha[env] = 0.8 * prev + 0.2 * b_for_alpha
        else:
            self.alpha[env] = (0.8 * prev + b_for_alpha) / t
        self.t[env] = t
        return r / self.scale if self.scale else 0.0

    # -- searcher ------------------------------------------------------------------------------
    def ask(self) -> list[Config]:
        import torch

        if not self.states:     # episode starts; all measured already (resume): step on
            self.states = [self._start(e) for e in range(self.batch)]
            fresh = self._fresh([(e, None, 0, 0.0, 0.0, c) for e, c in enumerate(self.states)])
            if fresh:
                return fresh
        for _ in range(4 * self.horizon):
            obs = np.stack([self._obs(e) for e in range(self.batch)])
            masks = [np.stack([self._mask(e) for e in range(self.batch)])]
            with torch.random.fork_rng(devices=[]):
                actions, logp, value = self.net.act(obs, self.generator, masks)
            steps = []
            for e in range(self.batch):
                i, v = self.actions[int(actions[e, 0])]
                nxt = dict(self.states[e], **{self.knobs[i].name: self.knobs[i].values[v]})
                steps.append((e, obs[e], int(actions[e, 0]), float(logp[e]), float(value[e]),
                              nxt))
            fresh = self._fresh(steps)
            if fresh:
                return fresh
        return [c for c in (self._unmeasured() for _ in range(self.batch)) if c]

    def _fresh(self, steps) -> list[Config]:
        """Steps whose configuration is measured already are completed now; the others wait
        for `tell`. Returns the distinct configurations to measure."""
        self.pending = []
        out: dict[str, Config] = {}
        for step in steps:
            key = KnobSpace.key(step[5])
            if key in self.costs:
                self._complete(step, self.costs[key])
            else:
                self.pending.append(step)
                out.setdefault(key, step[5])
        return list(out.values())

    def _unmeasured(self) -> Config | None:
        for _ in range(200):
            c = self.space.sample(self.rng)
            if KnobSpace.key(c) not in self.costs:
                return c
        return None

    def tell(self, configs: list[Config], costs: list[float | None]) -> None:
        for c, cost in zip(configs, costs):
            self.costs[KnobSpace.key(c)] = cost
            if cost and (self.scale is None):
                self.scale = cost
        for step in self.pending:
            self._complete(step, self.costs.get(KnobSpace.key(step[5])))
        self.pending = []

    def _complete(self, step, cost: float | None) -> None:
        env, obs, action, logp, value, nxt = step
        r = self._reward(env, cost)
        self.states[env] = nxt
        if obs is not None:
            self.rollout[env].append((obs, action, logp, value, r))
        if all(len(r) >= self.horizon for r in self.rollout):
            self._update()

    def _update(self) -> None:
        import torch

        from woodpecker.tune.rl import gae, ppo_update, seeded

        roll = [r[: self.horizon] for r in self.rollout]
        obs = np.array([[s[0] for s in r] for r in roll]).transpose(1, 0, 2)
        act = np.array([[s[1] for s in r] for r in roll]).T
        logp = np.array([[s[2] for s in r] for r in roll]).T
        val = np.array([[s[3] for s in r] for r in roll]).T
        rew = np.array([[s[4] for s in r] for r in roll]).T
        with torch.no_grad():
            self.net.eval()
            last = self.net(torch.as_tensor(np.stack([self._obs(e) for e in range(self.batch)]),
                                            dtype=torch.float32))[1].numpy()
        adv, ret = gae(rew, val, last, self.gamma, self.lam)
        n = obs.shape[0] * obs.shape[1]
        with seeded(self.ctx.seed * 7919 + self._updates):
            ppo_update(self.net, self.opt, obs.reshape(n, -1), act.reshape(n, 1),
                       logp.reshape(n), adv.reshape(n), ret.reshape(n), self.generator,
                       c1=self.c1, c2=self.c2)
        self._updates += 1
        self.rollout = [[] for _ in range(self.batch)]
        self.states = [self._start(e) for e in range(self.batch)]
        self.alpha[:] = 0.0
        self.t[:] = 0
