"""Pieces shared by the linear-function-approximation methods (SPEC T4): features, policies, the model.

These methods estimate values as :math:`w^\\top x(s)` (or :math:`w^\\top x(s, a)`) on environments with
``Discrete`` states and actions whose model is known (``env.unwrapped.P``, as in the toy-text envs and
``Baird-v0``): the model gives the true values the value error is measured against, the behaviour
policy's state distribution, and the expected (DP) updates.

``algorithm.features`` names the feature map:

* ``onehot``: :math:`x(s) = e_s` — a table in disguise (removes the function-approximation leg);
* ``baird``: Sutton & Barto's features for ``Baird-v0`` (:func:`advantage.envs.baird_features`);
* ``module:function``: a function of yours, ``function(state: int) -> sequence of floats`` (the same
  length for every state), imported by name.

For action values the state features are repeated per action in separate blocks,
:math:`x(s, a) = x(s) \\otimes e_a`, so each action has its own weights on the same features.
"""

from __future__ import annotations

import importlib
import math
from typing import cast

import gymnasium as gym
import numpy as np
import torch

from advantage.algos.tabular.common import check_discrete, table_shape
from advantage.configs.linear import LinearConfig, LinearPredictionAlgorithm
from advantage.context import RunContext
from advantage.envs import TabularModel, baird_features, tabular_model
from advantage.envs.baird import INITIAL_WEIGHTS
from advantage.errors import ConfigError, EnvError
from advantage.math.linear_td import state_distribution, value_error


def resolve_features(spec: str, env_id: str) -> str:
    """``auto`` (the default): Baird's features on ``Baird-v0``, the counterexample they were made for,
    one-hot (a table) on any other env; any other spec as it is."""
    if spec != "auto":
        return spec
    return "baird" if env_id == "Baird-v0" else "onehot"


def feature_matrix(spec: str, n_states: int) -> np.ndarray:
    """The features of every state, ``[S, d]`` float64 (``spec`` resolved: :func:`resolve_features`).

    Raises:
        ConfigError: naming ``algorithm.features``: Baird's features on another state count, a function
            that cannot be imported, or one that returns rows of different lengths or non-finite values.
    """
    if spec == "onehot":
        return np.eye(n_states)
    if spec == "baird":
        if n_states != 7:
            raise ConfigError(
                f"algorithm.features=baird needs Baird-v0's 7 states; this env has {n_states} "
                "(use onehot or a function 'module:function')"
            )
        return baird_features()
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"algorithm.features={spec!r}: cannot import {name} from {module}: {e}") from None
    if not callable(fn):
        raise ConfigError(f"algorithm.features={spec!r} is not a function")
    try:
        rows = [np.asarray(fn(s), dtype=np.float64).reshape(-1) for s in range(n_states)]
    except Exception as e:  # the user's code: report it on the field
        raise ConfigError(f"algorithm.features={spec!r} failed on a state: {type(e).__name__}: {e}") from None
    lengths = {r.shape[0] for r in rows}
    if len(lengths) != 1 or 0 in lengths:
        raise ConfigError(
            f"algorithm.features={spec!r} must return the same non-zero number of floats for every state; "
            f"got lengths {sorted(lengths)}"
        )
    phi = np.stack(rows)
    if not np.all(np.isfinite(phi)):
        raise ConfigError(f"algorithm.features={spec!r} returned a non-finite value")
    return phi


def action_features(phi: np.ndarray, n_actions: int) -> np.ndarray:
    """State-action features ``[S, A, A·d]``: :math:`x(s, a) = x(s) \\otimes e_a` (block ``a`` holds x(s))."""
    n_states, d = phi.shape
    out = np.zeros((n_states, n_actions, n_actions * d))
    for a in range(n_actions):
        out[:, a, a * d : (a + 1) * d] = phi
    return out


def initial_weights(cfg: LinearConfig, size: int, blocks: int = 1) -> np.ndarray:
    """``model.init_weights``, or its default (see :class:`advantage.configs.linear.LinearModel`);
    ``size`` is the weight count."""
    given = cfg.model.init_weights
    if given is not None:
        if len(given) != size:
            raise ConfigError(
                f"model.init_weights has {len(given)} values; features={cfg.algorithm.features} on this env "
                f"need {size}"
            )
        if not all(math.isfinite(v) for v in given):
            raise ConfigError(f"model.init_weights must be finite, got {given}")
        return np.asarray(given, dtype=np.float64)
    if resolve_features(cfg.algorithm.features, cfg.env.id) == "baird":
        return np.tile(np.asarray(INITIAL_WEIGHTS), blocks)
    return np.zeros(size)


def policy_table(env: gym.Env, which: str, choice: str, env_id: str) -> np.ndarray:
    """The policy ``[S, A]`` that ``algorithm.<which>=<choice>`` names: the env's own ``behavior_policy``
    or ``target_policy`` (``env``; Baird-v0 has both), the uniform one (``uniform``), or ``auto``: the
    env's own where it defines one, else uniform."""
    if choice == "auto":
        choice = "env" if getattr(env.unwrapped, f"{which}_policy", None) is not None else "uniform"
    if choice != "env":
        n_states, n_actions = table_shape(env)
        return np.full((n_states, n_actions), 1.0 / n_actions)
    table = getattr(env.unwrapped, f"{which}_policy", None)
    if table is None:
        raise ConfigError(
            f"algorithm.{which}=env, but {env_id} defines no {which} policy (only Baird-v0 does); use uniform"
        )
    return np.asarray(table, dtype=np.float64)


def visit_distribution(env: gym.Env, model: TabularModel, mu: np.ndarray) -> np.ndarray:
    """The distribution of states the behaviour policy ``mu [S, A]`` visits in ``env`` (whose ``model``
    is given), restarting at the env's start distribution on termination and after its time limit
    (:func:`advantage.math.linear_td.state_distribution`)."""
    p_mu = torch.from_numpy(np.einsum("sa,sat->st", mu, model.transitions))
    n_states = table_shape(env)[0]
    start = getattr(env.unwrapped, "initial_state_distrib", None)  # toy-text envs and Baird-v0 have one
    h = np.full(n_states, 1.0 / n_states) if start is None else np.asarray(start, dtype=np.float64)
    limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    return state_distribution(p_mu, torch.from_numpy(h), limit).numpy()


def value_metrics(
    w: torch.Tensor, values: np.ndarray, truth: np.ndarray, weights: np.ndarray
) -> dict[str, float]:
    """The logged metrics: ‖w‖, and the ``weights``-weighted RMS error
    (:func:`advantage.math.linear_td.value_error`) and the largest error of ``values`` against ``truth``
    (all three of one shape: ``[S]`` state values or ``[S, A]`` action values)."""
    t = torch.from_numpy
    return {
        "train/weight_norm": float(torch.linalg.vector_norm(w)),
        "train/value_error": float(
            value_error(t(values).reshape(-1), t(truth).reshape(-1), t(weights).reshape(-1))
        ),
        "train/value_error_max": float(np.max(np.abs(values - truth))),
    }


def check_weights(ctx: RunContext, step: int, w: torch.Tensor) -> None:
    """Stops a run whose weights diverged to a non-finite ‖w‖ (:meth:`RunContext.check_finite`)."""
    ctx.check_finite(step, "‖w‖ (the weights diverged)", float(torch.linalg.vector_norm(w)))


def check_linear(cfg: LinearConfig, env: gym.Env, name: str, control: bool = False) -> None:
    """``check_env`` of the linear methods (``name``: the algorithm): Discrete spaces, a known model,
    features and weights that fit, and the env's own policies when the config asks for them.
    ``control``: weights per action."""
    check_discrete(cfg, env, name)
    try:
        tabular_model(env, cfg.env.id)
    except EnvError as e:
        raise EnvError(f"{name}: {e}") from None
    n_states, n_actions = table_shape(env)
    phi = feature_matrix(resolve_features(cfg.algorithm.features, cfg.env.id), n_states)
    blocks = n_actions if control else 1
    initial_weights(cfg, phi.shape[1] * blocks, blocks)
    policy_table(env, "behavior", cfg.algorithm.behavior, cfg.env.id)
    if not control:
        target = cast(LinearPredictionAlgorithm, cfg.algorithm).target  # prediction: a target policy
        policy_table(env, "target", target, cfg.env.id)
