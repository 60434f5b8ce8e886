"""Deep Q-Networks: DQN, Double DQN, Dueling heads, prioritized replay, n-step targets (SPEC V1–V5).

Mnih et al. 2015: a network replaces the Q-table; its regression target is ``r + γ max_a' Q_target(s', a')``.
Double DQN picks ``a'`` with the online network and values it with the target network (van Hasselt
et al. 2016), because the max over noisy estimates is biased upwards — the overestimation of Thrun & Schwartz
(1993) that this module logs. Dueling heads compute ``Q = V + (A − max A)`` (Wang et al. eq. 8) or the mean
variant (Wang et al. 2016, eq. 9).

The loop is ``act ε-greedily → store → every train_freq steps, gradient_steps × (sample → target →
loss → step) → update target``, composed from :mod:`advantage.math.q_targets` and
:mod:`advantage.data.replay`.

Implementation details:

1. Vectorized envs with Gymnasium's ``NEXT_STEP`` autoreset; the reset step is not stored.
2. n-step transitions are assembled in the buffer; each carries its own discount γ^k, so a transition
   cut short by the end of an episode bootstraps with the right power of γ. A truncated episode
   bootstraps from its final observation (never treated as terminal).
3. ε decays linearly from ``epsilon_start`` to ``epsilon_end`` over ``exploration_fraction`` of the run.
4. The target network is updated every ``target_update_interval`` environment steps with Polyak
   weight ``tau`` (``tau = 1``: a hard copy, the Nature DQN rule). It therefore never moves during the
   ``gradient_steps`` of one update, and neither does the buffer: with uniform replay the update draws all
   its batches at once and evaluates the target network on all their next states in one forward pass
   (:func:`update_batches`); only the online network's part runs per gradient step.
5. Huber (smooth L1) or MSE TD loss; prioritized replay weights the per-sample loss by its importance
   weight and feeds ``|δ|`` back as the new priority (so each batch is drawn after the previous step's
   priorities are in).
6. Overestimation made visible (SPEC V4): every ``overestimation_every`` environment steps the probe of
   :mod:`advantage.algos.dqn_probe` logs the mean ``max_a Q(s, a)`` over states sampled from ε-greedy
   episodes (``train/q_predicted``) next to the mean discounted return of greedy rollouts from them
   (``train/q_realized``) and their difference (``train/overestimation``). Training is untouched: the probe
   has its own environments and random generator.
7. On CPU a small network's gradient step costs mostly per-call overhead, not arithmetic: the optimizer
   is fused Adam (one kernel for every parameter, :func:`advantage.optim.adam`), the gradient-norm clip
   is two fused kernels, and the loss is read back once per step (the check that stops a NaN before it
   reaches the weights). For an MLP with a plain head (the default network) the TD step's
   gradient is also written out by hand (:meth:`QNetwork.td_backward`: three matmuls per layer, no
   autograd graph recorded and replayed); ``trainer.kernels`` without ``dqn_td_backward`` keeps autograd,
   and the tests check the two give the same loss and gradients (``benchmarks/results/fast_paths.md``:
   what each of these buys).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete
from torch import nn

from advantage import kernels, optim
from advantage.algos.dqn_probe import make_probe
from advantage.algos.offpolicy_common import buffer_state, check_buffer_memory, load_buffer
from advantage.configs.dqn import DQNAlgorithm, DQNConfig, DQNModel
from advantage.context import RunContext, Snapshot
from advantage.data import PrioritizedReplayBuffer, ReplayBuffer
from advantage.envs import env_state, make_vec_env, require_space
from advantage.envs.make import flatten_observations, require_vector_observations
from advantage.envs.replay import restore_or_restart
from advantage.errors import NonFiniteError
from advantage.math import double_q_target, dueling_combine, polyak_update, td_target
from advantage.nn import mlp
from advantage.rollout.envsteps import EnvSteps, setup_torch
from advantage.schedules import annealed, schedule_total
from advantage.torch_state import LearnerState, load_module


class NatureCNN(nn.Module):
    """Mnih et al. 2015: 3 conv layers + 512 units, on ``[C, 84, 84]`` uint8 frames scaled to [0, 1]."""

    def __init__(self, channels: int, out: int = 512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, out),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float() / 255.0)


class QNetwork(nn.Module):
    """``Q(s, ·)``: an MLP (or Nature CNN) trunk and a plain or dueling head."""

    def __init__(self, obs_space: gym.spaces.Box, n_actions: int, cfg: DQNModel):
        super().__init__()
        self.dueling = cfg.dueling
        hidden = list(cfg.hidden_sizes)
        if cfg.cnn:
            self.trunk: nn.Module = NatureCNN(obs_space.shape[0])
            width = 512
        else:
            # init: PyTorch's default (SB3's DQN; the zoo's values were tuned with it) or orthogonal
            self.trunk = mlp(
                [int(np.prod(obs_space.shape)), *hidden], cfg.activation, orthogonal=cfg.init == "orthogonal"
            )
            self.trunk.append(nn.ReLU() if cfg.activation == "relu" else nn.Tanh())
            width = hidden[-1]
        self.advantage = nn.Linear(width, n_actions)
        self.value = nn.Linear(width, 1) if cfg.dueling != "none" else None
        # the MLP trunk's linear layers, for the gradient by hand (the trunk, an MLP, runs them functionally)
        self._linears = None if cfg.cnn else [m for m in self.trunk.children() if isinstance(m, nn.Linear)]
        self._act = torch.relu if cfg.activation == "relu" else torch.tanh

    @property
    def hand_backward(self) -> bool:
        """Whether :meth:`td_backward` computes this network's gradient (an MLP trunk and a plain head)."""
        return self._linears is not None and self.value is None and kernels.enabled("dqn_td_backward")

    @torch.no_grad()
    def forward_saving(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` of an MLP with a plain head, without autograd: ``(Q [B, A], [x, h_1, …, h_L])``,
        each layer's input, kept for :meth:`td_backward`."""
        assert self._linears is not None
        saved = [obs]
        for lin in self._linears:
            saved.append(self._act(torch.addmm(lin.bias, saved[-1], lin.weight.t())))
        return torch.addmm(self.advantage.bias, saved[-1], self.advantage.weight.t()), saved

    @torch.no_grad()
    def td_backward(self, saved: list[torch.Tensor], grad_q: torch.Tensor) -> None:
        r"""Set ``.grad`` of every weight and bias to the gradient of a loss whose gradient in the network's
        output is ``grad_q`` ``[B, A]``, from the layer inputs ``saved`` of :meth:`forward_saving`
        (rows may be a prefix of the forward's). Backpropagation through :math:`h_l = f(h_{l-1}W_l^\top +
        b_l)`: :math:`\nabla W_l = g_l^\top h_{l-1}`, :math:`\nabla b_l = \textstyle\sum_B g_l`,
        :math:`g_{l-1} = (g_l W_l) \odot f'`, with :math:`f' = [h > 0]` for ReLU and :math:`1 - h^2` for
        tanh (both read from the layer's output).

        ReLU's :math:`f'` is autograd's own kernel, ``threshold_backward`` (one pass, where ``g * (h > 0)``
        first casts the mask to float: about six times slower on a 128 × 256 batch, and the same values).
        ``gᵀ x`` and tanh's ``g * (1 - h²)`` stay as they are: the alternatives round differently in the
        last bit, and a run must reproduce what this gradient gave before."""
        assert self._linears is not None
        layers = [*self._linears, self.advantage]
        relu = self._act is torch.relu
        g = grad_q
        for i in range(len(layers) - 1, -1, -1):
            lin, x = layers[i], saved[i][: g.shape[0]]
            lin.weight.grad = g.t() @ x
            lin.bias.grad = g.sum(0)
            if i > 0:
                g = g @ lin.weight
                # ReLU's backward (x, its output, is ≥ 0: g where x > 0, else 0; sign(x) is that 0/1 mask and
                # a tenth of the cost of torch.where with a scalar) or tanh's (1 − x²)
                g = g.mul_(x.sign()) if relu else g * (1 - x * x)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``[B, *obs_shape] -> [B, A]``."""
        h = self.trunk(obs)
        adv = nn.functional.linear(h, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return adv
        return dueling_combine(nn.functional.linear(h, self.value.weight, self.value.bias), adv, self.dueling)


class DQNPolicy:
    """The greedy policy of Q: ``start + argmax_a Q(s, a)`` (``start``: the Discrete space's first action)."""

    def __init__(self, q: QNetwork, start: int = 0):
        self.q, self.start = q, start

    def act(self, obs: Any, deterministic: bool = True) -> int:
        return self.act_batch(np.asarray(obs)[None])[0]

    @torch.inference_mode()
    def act_batch(self, obs: np.ndarray) -> list[int]:
        """Greedy actions for a batch of observations ``[N, ...]`` (side-by-side evaluation)."""
        greedy = self.q(torch.as_tensor(np.asarray(obs), dtype=torch.float32)).argmax(-1)
        return (greedy + self.start).tolist() if self.start else greedy.tolist()


def check_env(cfg: DQNConfig, env: gym.Env) -> None:
    """Discrete actions (a Q-value per action); observations with a vector encoding for the MLP (``env``
    made with :func:`~advantage.envs.flatten_observations`), or a Box (of images) for ``model.cnn``; a
    replay buffer that fits in memory."""
    raw_obs = env.unwrapped.observation_space
    require_space("dqn", cfg.env.id, "action", env.action_space, Discrete, other=raw_obs)
    if cfg.model.cnn:
        require_space("dqn", cfg.env.id, "observation", env.observation_space, Box, other=env.action_space)
    else:
        require_vector_observations("dqn", cfg.env.id, env.observation_space, env.action_space)
    check_buffer_memory(cfg, env, env.observation_space.dtype)  # DQN stores them as the space has them


def make_buffer(cfg: DQNConfig, obs_space: gym.spaces.Box) -> ReplayBuffer | PrioritizedReplayBuffer:
    """The replay buffer: n-step transitions of ``env.num_envs`` envs, uniform or prioritized (detail 2,
    5); prioritized replay's β reaches 1 at the run's last gradient step."""
    a, t = cfg.algorithm, cfg.trainer
    buffer_args: dict[str, Any] = dict(
        capacity=a.buffer_size,
        obs_shape=obs_space.shape,
        obs_dtype=obs_space.dtype,
        action_shape=(),
        action_dtype=np.int64,
        num_envs=cfg.env.num_envs,
        n_step=a.n_step,
        gamma=a.gamma,
        seed=t.seed,
    )
    if not a.prioritized:
        return ReplayBuffer(**buffer_args)
    return PrioritizedReplayBuffer(
        **buffer_args, alpha=a.per_alpha, beta_start=a.per_beta_start, beta_steps=beta_steps(a, t.total_steps)
    )


def beta_steps(a: DQNAlgorithm, total_steps: int) -> int:
    """The ``sample`` calls over which prioritized replay's β anneals to 1: the updates of a run of
    ``total_steps`` environment steps."""
    return max(1, (total_steps - a.learning_starts) // a.train_freq * a.gradient_steps)


def epsilon(a: DQNAlgorithm, step: int, total_steps: int) -> float:
    """ε of the ε-greedy policy at ``step``: linear from ``epsilon_start`` to ``epsilon_end`` over
    ``exploration_fraction`` of the run, then constant (detail 3)."""
    frac = min(1.0, step / max(1.0, a.exploration_fraction * total_steps))
    return a.epsilon_start + frac * (a.epsilon_end - a.epsilon_start)


def learn(
    q: QNetwork,
    q_target: QNetwork,
    opt: torch.optim.Optimizer,
    buffer: ReplayBuffer | PrioritizedReplayBuffer,
    a: DQNAlgorithm,
    step: int,
) -> float:
    """The learning phase: ``gradient_steps`` TD steps on sampled batches (prioritized replay: each
    batch's TD errors become its priorities); returns the mean loss."""
    losses = []
    for b in update_batches(buffer, q_target, a.gradient_steps, a.batch_size, a.double):
        loss, td_error = gradient_step(q, opt, b, a)
        if not math.isfinite(loss):
            raise NonFiniteError(f"step {step}: TD loss is {loss}; weights not updated")
        if td_error is not None:
            cast(PrioritizedReplayBuffer, buffer).update_priorities(b["indices"].numpy(), td_error.numpy())
        losses.append(loss)
    return sum(losses) / len(losses)


def train(cfg: DQNConfig, ctx: RunContext) -> None:
    a, t = cfg.algorithm, cfg.trainer
    setup_torch(t)
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    N = cfg.env.num_envs
    obs_space = cast(Box, env.single_observation_space)
    n_actions = int(cast(Discrete, env.single_action_space).n)
    start = int(cast(Discrete, env.single_action_space).start)  # actions are indices from 0 inside
    q, q_target = QNetwork(obs_space, n_actions, cfg.model), QNetwork(obs_space, n_actions, cfg.model)
    q_target.load_state_dict(q.state_dict())
    q_target.requires_grad_(False)
    params, target_params = list(q.parameters()), list(q_target.parameters())
    # fused Adam: one kernel updates every parameter
    opt = optim.adam(params, a.learning_rate)
    learner = LearnerState({"q": q, "q_target": q_target}, {"optim": opt})
    buffer = make_buffer(cfg, obs_space)
    rng = np.random.default_rng(t.seed)
    steps = EnvSteps(N)
    probe, every = make_probe(cfg)
    step, next_train, next_target = 0, a.learning_starts + a.train_freq, a.target_update_interval
    next_measure = every
    obs, _ = env.reset(seed=t.seed)
    if ctx.restored is not None:
        ck, s = ctx.restored, ctx.restored.state["algo"]
        learner.load(ck.tensors, s, str(ck.path))
        load_buffer(buffer, ck.tensors, s["buffer"])
        rng.bit_generator.state = s["rng"]
        step, next_train, next_target = ck.step, s["next_train"], s["next_target"]
        obs = ck.tensors["obs"].numpy().copy()
        steps.load(ck.tensors)
        next_measure = s.get("next_measure", next_measure)
        fresh = restore_or_restart(env, s["env"], t.seed, step, ctx)
        if fresh is not None:
            obs = fresh
            steps.restart()

    def snapshot() -> Snapshot:
        buf_tensors, buf_meta = buffer_state(buffer)
        tensors, meta = learner.save()
        state = {**meta, "buffer": buf_meta, "rng": rng.bit_generator.state, "env": env_state(env)}
        state |= {"next_train": next_train, "next_target": next_target, "next_measure": next_measure}
        return Snapshot(
            DQNPolicy(q, start),
            {**tensors, **buf_tensors, "obs": torch.as_tensor(obs), **steps.tensors()},
            state,
        )

    while step < t.total_steps:
        # ---- act ε-greedily in N envs ----------------------------------------------------------------
        eps = epsilon(a, step, schedule_total(t, step))
        with torch.inference_mode():
            greedy = q(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()
        explore = rng.random(N) < eps
        actions = np.where(explore, rng.integers(n_actions, size=N), greedy)
        next_obs, reward, term, trunc, _ = env.step(actions + start if start else actions)
        step, valid, _ = steps.record(step, reward, next_obs, term, trunc, ctx)
        buffer.add(obs, actions, reward, next_obs, term, trunc, valid=valid)
        obs = next_obs

        # ---- learn ---------------------------------------------------------------------------------
        if step >= next_train:
            next_train += a.train_freq
            # learning_starts below batch_size (the zoo's 0): the batches are drawn with replacement from the
            # transitions stored so far, as SB3 does; only an empty buffer (n-step windows not yet closed)
            # skips the update
            if len(buffer) > 0:
                total = schedule_total(t, step, after_step=True)  # the update after the env step
                if isinstance(buffer, PrioritizedReplayBuffer):  # β anneals over this part's total too
                    buffer.beta_steps = beta_steps(a, total)
                lr = annealed(a.learning_rate, a.lr_schedule, step, total)
                opt.param_groups[0]["lr"] = lr
                row = {"train/loss": learn(q, q_target, opt, buffer, a, step), "train/epsilon": eps}
                ctx.log(step, row | ({"train/learning_rate": lr} if a.lr_schedule == "linear" else {}))
        if probe is not None and step >= next_measure:
            # The probe's seed is the measurement's step mark: a resumed run measures the same states.
            try:
                ctx.log(step, probe.measure(q, eps, seed=t.seed * 1_000_003 + next_measure))
            except ValueError as e:  # a state a copy of the env could not take: measure no more
                print(f"dqn: overestimation probe switched off at step {step}: {e}", file=sys.stderr)
                probe.close()
                probe = None
            next_measure += every * (1 + (step - next_measure) // every)
        if step >= next_target:
            next_target += a.target_update_interval
            polyak_update(target_params, params, a.tau)
        if ctx.tick(step, snapshot):
            break
    ctx.finish(step, snapshot())
    env.close()
    if probe is not None:
        probe.close()


def update_batches(
    buffer: ReplayBuffer | PrioritizedReplayBuffer,
    q_target: QNetwork,
    num_batches: int,
    batch_size: int,
    double: bool,
) -> Iterator[dict[str, torch.Tensor]]:
    """The ``G = num_batches`` batches of one update as tensors, each with the part of its TD target that
    the target network gives: the target ``y`` itself (``target``, ``[B]``) for DQN's max target, or
    ``next_q_target`` = ``Q_target(s', ·)`` ``[B, A]`` for Double DQN, whose ``a'`` the online network
    picks at the step itself.

    The target network is frozen during an update (it moves between environment steps, never between the
    gradient steps of one update), and nothing is added to the buffer then. So with uniform replay all
    ``G`` batches are drawn in one call and ``Q_target`` runs once on all ``G·B`` next states: the
    targets of ``G`` separate passes, without paying ``G`` times the per-call overhead that dominates a
    small network on CPU. Prioritized replay must draw each batch after the previous step has updated
    the priorities, so it samples lazily, one batch per step.
    """
    if isinstance(buffer, PrioritizedReplayBuffer):
        for _ in range(num_batches):
            yield with_target_values(as_tensors(buffer.sample(batch_size)), q_target, double)
        return
    block = as_tensors(buffer.sample_batches(num_batches, batch_size))  # [G, B, ...]
    del block["weights"]  # all 1: the loss is a plain mean
    columns = {k: v.unbind(0) for k, v in with_target_values(block, q_target, double).items()}
    for g in range(num_batches):
        yield {k: v[g] for k, v in columns.items()}


@torch.no_grad()
def with_target_values(
    b: dict[str, torch.Tensor], q_target: QNetwork, double: bool
) -> dict[str, torch.Tensor]:
    """Add ``target`` (max target, :func:`td_target`) or ``next_q_target`` (Double DQN) to a batch whose
    arrays lead with ``[B]`` or ``[G, B]``."""
    lead = b["rewards"].shape
    next_q = q_target(b["next_obs"].flatten(0, len(lead) - 1))  # [G·B, A]
    if double:
        b["next_q_target"] = next_q.unflatten(0, lead)
    else:
        flat = {k: b[k].flatten() for k in ("rewards", "terminated", "discounts")}
        b["target"] = td_target(flat["rewards"], next_q, flat["terminated"], flat["discounts"]).view(lead)
    return b


def as_tensors(b: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """A sampled batch as CPU tensors (zero-copy where the dtype already fits): observations float32."""
    out = {k: torch.from_numpy(v) for k, v in b.items()}
    out["obs"] = out["obs"].float()
    out["next_obs"] = out["next_obs"].float()
    return out


def gradient_step(
    q: QNetwork, opt: torch.optim.Optimizer, b: dict[str, torch.Tensor], a: DQNAlgorithm
) -> tuple[float, torch.Tensor | None]:
    """One TD regression step on batch ``b`` (from :func:`update_batches`); returns the loss and, for a
    prioritized batch (one with importance ``weights``), the TD errors ``|Q(s, a) − y|`` ``[B]`` that
    become its new priorities.

    ``y`` is :func:`td_target` (``r + γ^k max_a' Q_target(s', a')``, computed ahead by
    :func:`update_batches`) or, with ``algorithm.double``, :func:`double_q_target` (the online network
    picks ``a'``, the target network values it). The loss is the mean Huber (or ½ squared) error,
    importance-weighted per sample under prioritized replay.
    """
    obs, B = b["obs"], b["obs"].shape[0]
    params = opt.param_groups[0]["params"]  # q's parameters (its one group), without walking the modules
    weights = b.get("weights")
    td: torch.Tensor | None  # the TD errors Q(s, a) − y [B], kept for prioritized replay's priorities
    if q.hand_backward:
        value, td = _td_gradient_by_hand(q, b, a)
    else:
        if a.double:
            # One forward pass over [s; s'] gives the online values at both (one set of per-layer calls, not
            # two); the s' half only picks a' and is detached: the target is a constant of the update.
            q_both = q(torch.cat([obs, b["next_obs"]]))
            q_obs, next_q_online = q_both[:B], q_both[B:].detach()
            target = double_q_target(
                b["rewards"], next_q_online, b["next_q_target"], b["terminated"], b["discounts"]
            )
        else:
            q_obs, target = q(obs), b["target"]
        pred = q_obs.gather(1, b["actions"][:, None]).squeeze(1)
        reduction = "mean" if weights is None else "none"
        if a.loss == "huber":
            loss = nn.functional.smooth_l1_loss(pred, target, reduction=reduction)
        else:
            loss = 0.5 * nn.functional.mse_loss(pred, target, reduction=reduction)
        if weights is not None:
            loss = (loss * weights).mean()
        value, td = float(loss.detach()), None if weights is None else pred.detach() - target
        if math.isfinite(value):
            optim.zero_grad(params)
            loss.backward()
    if not math.isfinite(value):  # the caller stops the run; a NaN must not reach the weights first
        return value, None
    if a.max_grad_norm > 0:
        optim.clip_grad_norm(params, a.max_grad_norm)
    optim.step(opt)
    return value, None if td is None or weights is None else td.abs()


@torch.no_grad()
def _td_gradient_by_hand(
    q: QNetwork, b: dict[str, torch.Tensor], a: DQNAlgorithm
) -> tuple[float, torch.Tensor]:
    r"""The loss of :func:`gradient_step` and the TD errors ``Q(s, a) − y`` ``[B]``, with the loss's
    gradient written out (:meth:`QNetwork.td_backward`) into every parameter's ``.grad`` when the loss is
    finite. The loss per sample is Huber :math:`\ell(\delta) = \tfrac12\delta^2` for :math:`|\delta| < 1`,
    :math:`|\delta| - \tfrac12` beyond (``smooth_l1_loss``), with
    :math:`\ell'(\delta) = \mathrm{clamp}(\delta, -1, 1)`, or :math:`\tfrac12\delta^2` with
    :math:`\ell' = \delta`; its mean (importance-weighted under prioritized replay) sends
    :math:`w_i\,\ell'(\delta_i)/B` to the output entry :math:`Q(s_i, a_i)` and zero to the others."""
    obs, actions, B = b["obs"], b["actions"], b["obs"].shape[0]
    if a.double:
        q_both, saved = q.forward_saving(torch.cat([obs, b["next_obs"]]))  # one pass over [s; s']
        q_obs = q_both[:B]
        target = double_q_target(
            b["rewards"], q_both[B:], b["next_q_target"], b["terminated"], b["discounts"]
        )
    else:
        (q_obs, saved), target = q.forward_saving(obs), b["target"]
    delta = q_obs.gather(1, actions[:, None]).squeeze(1) - target  # [B]
    if a.loss == "huber":
        per_sample = torch.where(delta.abs() < 1.0, 0.5 * delta * delta, delta.abs() - 0.5)
        slope = delta.clamp(-1.0, 1.0)
    else:
        per_sample, slope = 0.5 * delta * delta, delta
    weights = b.get("weights")
    if weights is not None:
        per_sample, slope = per_sample * weights, slope * weights
    value = float(per_sample.mean())
    if math.isfinite(value):  # a NaN must not reach the gradients (the caller stops the run)
        grad_q = torch.zeros_like(q_obs).scatter_(1, actions[:, None], (slope / B)[:, None])  # [B, A]
        q.td_backward(saved, grad_q)
    return value, delta


def _policy(cfg: DQNConfig, env: gym.Env, tensors: Any) -> DQNPolicy:
    space = cast(Discrete, env.action_space)
    q = QNetwork(cast(Box, env.observation_space), int(space.n), cfg.model)
    load_module("q", q, tensors)
    return DQNPolicy(q, int(space.start))
