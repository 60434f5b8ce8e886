r"""Trust Region Policy Optimization (Schulman et al. 2015, ICML).

Each update maximises the importance-sampled surrogate subject to a mean-KL trust region,

.. math::
    \max_\theta\ \mathcal L_{\theta_k}(\theta) = \mathbb E\Big[\frac{\pi_\theta(a|s)}{\pi_{\theta_k}(a|s)}
    \hat A(s,a)\Big] \quad\text{s.t.}\quad \mathbb E_s\big[D_\mathrm{KL}(\pi_{\theta_k}(\cdot|s)\,\|\,
    \pi_\theta(\cdot|s))\big] \le \delta,

by the natural-gradient step of :mod:`advantage.math.trust_region`: the gradient :math:`g` of
:math:`\mathcal L`, conjugate gradient on Fisher-vector products of the *exact* mean KL (categorical,
products of categoricals or Bernoullis for MultiDiscrete and MultiBinary actions, or diagonal Gaussian
before any tanh squashing — KL is invariant under the bijection), the step scaled so
its quadratic KL model is δ, then a backtracking line search that keeps the first candidate whose real
surrogate improves and whose real mean KL is at most δ (else no policy update this time).

The loop is ``collect (vectorized envs, GAE) → natural-gradient policy step → value regression``:

* Rollouts and GAE: :class:`advantage.rollout.onpolicy.OnPolicyCollector`, shared with PPO.
* Advantages are whitened over the batch; the policy and value networks are separate (a shared trunk
  would let the unconstrained value regression move the policy, so ``model.shared_trunk=true`` is
  refused).
* The value function is fitted afterwards with Adam on the MSE to the GAE returns,
  ``algorithm.vf_epochs`` passes of minibatches (Schulman et al. 2016 fit it by a trust region too;
  Adam is what Stable-Baselines3-contrib's and Spinning Up's TRPO do).
* Logged per update: ``train/kl`` (the accepted step's mean KL, ≤ δ by construction; 0 when rejected),
  ``train/backtracks``, ``train/accepted``, ``train/step_fraction``, ``train/improvement`` (real) and
  ``train/expected_improvement`` (linear model, :math:`g^\top\Delta\theta`), ``train/value_loss``,
  ``train/entropy``, ``train/explained_variance``.

Defaults follow Stable-Baselines3-contrib's TRPO (δ = 0.01, 15 CG iterations, damping 0.1, backtracking
0.8 up to 10 times, critic Adam 1e-3, 10 critic passes of minibatches of 128).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, cast

import torch
from torch import Tensor

from advantage import optim
from advantage.configs.trpo import TRPOAlgorithm, TRPOConfig
from advantage.context import RunContext
from advantage.envs import flatten_observations, make_vec_env
from advantage.errors import NonFiniteError
from advantage.math import (
    conjugate_gradient,
    fisher_vector_product,
    flat_grad,
    line_search,
    masked_whiten,
    natural_step,
)
from advantage.math.value_losses import explained_variance
from advantage.nn import ActorCritic
from advantage.nn.actor_critic import GaussianHead
from advantage.rollout.collector import actor_critic_snapshot, make_collector, resume_or_reset
from advantage.rollout.envsteps import setup_torch
from advantage.torch_state import LearnerState

# ----------------------------------------------------------------------------------------------------
# The policy's distribution and its exact KL


def distribution(model: ActorCritic, obs: Tensor) -> Tensor:
    """The policy's distribution parameters at ``obs [n, ...]``: the Gaussian mean ``[n, D]`` (Box; the
    log-std is the state-independent ``model.head.log_std``), otherwise the log-probabilities of every
    factor's outcomes side by side: ``[n, A]`` (Discrete), ``[n, Σ nvec]`` (MultiDiscrete, one
    categorical per entry), ``[n, 2K]`` (MultiBinary: ``log p_k`` and ``log(1 − p_k)`` of each bit)."""
    h = model.pi_body(model.flat_obs(obs))
    if isinstance(model.head, GaussianHead):
        return model.head.mean(h)
    return model.head.log_probs(h)


def mean_kl(model: ActorCritic, obs: Tensor, old: Tensor, old_log_std: Tensor | None) -> Tensor:
    r"""Mean over states of :math:`D_\mathrm{KL}(\pi_\text{old}(\cdot|s)\,\|\,\pi_\theta(\cdot|s))`, exact.

    Categorical: :math:`\sum_a p_\text{old}(a)(\log p_\text{old}(a) - \log p_\theta(a))`; for a product
    of independent factors (MultiDiscrete's categoricals, MultiBinary's Bernoullis) the KL is the sum of
    the factors' KLs, which is this same sum over the outcomes of every factor side by side. Diagonal
    Gaussian: :math:`\sum_d \log\frac{\sigma_d}{\sigma_{\text{old},d}} + \frac{\sigma_{\text{old},d}^2 +
    (\mu_{\text{old},d} - \mu_d)^2}{2\sigma_d^2} - \frac12`. ``old`` (and ``old_log_std``) are detached
    values of :func:`distribution` at :math:`\theta_k`."""
    new = distribution(model, obs)
    if old_log_std is None:
        return (old.exp() * (old - new)).sum(-1).mean()
    log_std = cast(GaussianHead, model.head).log_std.expand_as(new)  # old_log_std: a Gaussian policy
    old_ls = old_log_std.expand_as(new)
    kl = log_std - old_ls + ((2 * old_ls).exp() + (old - new) ** 2) / (2 * (2 * log_std).exp()) - 0.5
    return kl.sum(-1).mean()


# ----------------------------------------------------------------------------------------------------
# Training


def train(cfg: TRPOConfig, ctx: RunContext) -> None:
    a, t = cfg.algorithm, cfg.trainer
    setup_torch(t)
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    model = cfg.model.build(env.single_observation_space, env.single_action_space)
    pi_params = [*model.pi_body.parameters(), *model.head.parameters()]
    vf_params = [*model.v_body.parameters(), *model.value_head.parameters()]
    vf_opt = optim.adam(vf_params, a.vf_learning_rate, eps=1e-5)
    learner = LearnerState({"model": model}, {"vf_optim": vf_opt})
    rollout = make_collector(env, model, cfg, a.n_steps, ctx)
    step, _ = resume_or_reset(rollout, learner, ctx, t.seed)
    checkpoint = partial(actor_critic_snapshot, model, rollout, learner)

    while step < t.total_steps:
        batch, step = rollout.collect(step, a.gae_lambda)
        adv = batch.advantages
        if a.normalize_advantage and adv.shape[0] > 1:
            adv = masked_whiten(adv, torch.ones_like(adv))
        row = policy_step(model, pi_params, batch.obs, batch.actions, batch.logp, adv, a, step)
        row.update(value_step(model, vf_params, vf_opt, batch.obs, batch.returns, batch.values, a, step))
        row.update(rollout.metrics())
        ctx.log(step, row)
        if ctx.tick(step, checkpoint):
            break
    ctx.finish(step, checkpoint())
    env.close()
    rollout.close()


def policy_step(
    model: ActorCritic,
    params: list[torch.nn.Parameter],
    obs: Tensor,
    actions: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    a: TRPOAlgorithm,
    step: int,
) -> dict[str, Any]:
    """One natural-gradient step with line search on the policy parameters; returns the logged row."""
    with torch.no_grad():
        old = distribution(model, obs)
        head = model.head
        old_log_std = head.log_std.detach().clone() if isinstance(head, GaussianHead) else None

    def surrogate() -> tuple[Tensor, Tensor]:
        logp, entropy = model.head.log_prob_entropy(model.pi_body(model.flat_obs(obs)), actions)
        return (torch.exp(logp - old_logp) * adv).mean(), entropy.mean()

    loss, entropy = surrogate()
    g = flat_grad(loss, params)
    if not torch.isfinite(g).all():
        raise NonFiniteError(
            f"step {step}: the policy gradient is NaN/inf (surrogate {float(loss.detach())})"
        )
    fvp = fisher_vector_product(mean_kl(model, obs, old, old_log_std), params, a.cg_damping)
    step_dir = conjugate_gradient(fvp, g, a.cg_iters)
    try:
        if not torch.isfinite(step_dir).all():
            raise FloatingPointError("the conjugate-gradient direction is NaN/inf")
        full_step = natural_step(step_dir, fvp, a.max_kl)
    except FloatingPointError as e:  # e.g. rewards of 1e30: advantages overflow, s^T F s is 0 or inf
        raise NonFiniteError(f"step {step}: natural gradient step: {e}; weights not updated") from None
    expected = float(torch.dot(g, full_step))

    def evaluate() -> tuple[float, float]:
        return float(surrogate()[0]), float(mean_kl(model, obs, old, old_log_std))

    result = line_search(
        evaluate,
        params,
        full_step,
        a.max_kl,
        backtrack_coef=a.backtrack_coef,
        max_backtracks=a.max_backtracks,
    )
    return {
        "train/surrogate": float(loss.detach()),
        "train/entropy": float(entropy.detach()),
        "train/kl": result.kl,
        "train/accepted": float(result.accepted),
        "train/backtracks": result.backtracks,
        "train/step_fraction": result.fraction,
        "train/improvement": result.improvement,
        "train/expected_improvement": expected,
    }


def value_step(
    model: ActorCritic,
    params: list[torch.nn.Parameter],
    opt: torch.optim.Optimizer,
    obs: Tensor,
    returns: Tensor,
    old_values: Tensor,
    a: TRPOAlgorithm,
    step: int,
) -> dict[str, Any]:
    """``vf_epochs`` passes of minibatch Adam on ``0.5·(V(s) − R)²``; returns the logged row."""
    n = obs.shape[0]
    losses = []
    for _ in range(a.vf_epochs):
        perm = torch.randperm(n)
        for start in range(0, n, a.vf_minibatch_size):
            mb = perm[start : start + a.vf_minibatch_size]
            loss = 0.5 * ((model.value(obs[mb]) - returns[mb]) ** 2).mean()
            if not math.isfinite(float(loss.detach())):  # stop before a NaN reaches the weights
                raise NonFiniteError(
                    f"step {step}: value loss is {float(loss.detach())}; weights not updated"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            optim.step(opt)
            losses.append(float(loss.detach()))
    explained = explained_variance(old_values, returns)
    last_epoch = losses[-math.ceil(n / a.vf_minibatch_size) :]
    return {"train/value_loss": sum(last_epoch) / len(last_epoch), "train/explained_variance": explained}
