"""Evaluate a policy for whole episodes; the same function serves training, ``advantage eval`` and the API."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from advantage.errors import NonFiniteError
from advantage.registry import Policy

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training episodes
SIDE_BY_SIDE = 16  # at most this many evaluation episodes run at once (one env copy each)


def envs_for(policy: Policy, episodes: int, deterministic: bool = True) -> int:
    """How many env copies :func:`evaluate_policy` can use for ``policy``: one per episode up to
    :data:`SIDE_BY_SIDE` for a deterministic policy with ``act_batch``, otherwise one."""
    if deterministic and hasattr(policy, "act_batch"):
        return max(1, min(episodes, SIDE_BY_SIDE))
    return 1


def evaluate_policy(
    policy: Policy,
    env: gym.Env,
    episodes: int,
    seed: int,
    deterministic: bool = True,
    max_steps: int = 10_000,
    more_envs: Sequence[gym.Env] = (),
) -> dict[str, Any]:
    """Run ``episodes`` episodes; episode ``i`` starts from ``env.reset(seed=seed + i)``, so a result
    depends only on the policy and the seed. An episode is cut after ``max_steps`` steps (environments
    without a time limit, such as CliffWalking, would otherwise let a looping policy run forever).

    With ``more_envs`` (copies of ``env``), a deterministic policy that has ``act_batch`` plays
    ``1 + len(more_envs)`` episodes side by side, one batched forward pass per step instead of one per
    episode and step; each episode still starts from its own seed in its own env, so the returns are those
    of the one-at-a-time loop (up to the float rounding of a batched matrix product).

    Returns:
        ``return_mean``, ``return_std`` (population std), ``length_mean``, ``episodes``, and
        ``success_rate`` if the environment reports ``info["is_success"]``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    envs = [env, *more_envs]
    if not (deterministic and len(envs) > 1 and episodes > 1 and hasattr(policy, "act_batch")):
        envs = [env]
    returns, lengths = [0.0] * episodes, [0] * episodes
    success: dict[int, float] = {}
    obs: dict[int, Any] = {}  # slot -> observation of its running episode
    running: dict[int, int] = {}  # slot -> episode index
    upcoming = iter(range(episodes))
    for slot in range(min(len(envs), episodes)):
        i = next(upcoming)
        obs[slot], _ = envs[slot].reset(seed=seed + i)
        running[slot] = i
    while running:
        slots = list(running)
        if len(envs) == 1:
            actions = [policy.act(obs[slots[0]], deterministic=deterministic)]
        else:
            actions = policy.act_batch(np.stack([obs[k] for k in slots]))  # type: ignore[attr-defined]
        for slot, action in zip(slots, actions, strict=True):
            i = running[slot]
            obs[slot], reward, terminated, truncated, info = envs[slot].step(action)
            if not math.isfinite(float(reward)):
                raise NonFiniteError(f"evaluation episode {i}, step {lengths[i]}: reward is {reward}")
            returns[i] += float(reward)
            lengths[i] += 1
            if terminated or truncated or lengths[i] >= max_steps:
                if "is_success" in info:
                    success[i] = float(info["is_success"])
                nxt = next(upcoming, None)
                if nxt is None:
                    del running[slot]
                else:
                    obs[slot], _ = envs[slot].reset(seed=seed + nxt)
                    running[slot] = nxt
    out: dict[str, Any] = {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "episodes": episodes,
    }
    if success:
        out["success_rate"] = float(np.mean(list(success.values())))
    return out


def record_video(
    policy: Policy, env: gym.Env, path: str, seed: int, deterministic: bool = True, max_steps: int = 10_000
) -> dict[str, Any]:
    """Play one episode in ``env`` (made with ``render_mode="rgb_array"``) and write it to ``path`` (mp4,
    at the env's ``render_fps``). Returns ``{"path", "return", "length"}``."""
    import imageio.v2 as imageio

    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    total, n = 0.0, 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs, deterministic=deterministic))
        frames.append(env.render())
        total += float(reward)
        n += 1
        if terminated or truncated or n >= max_steps:
            break
    fps = env.metadata.get("render_fps", 30)
    tmp = f"{path}.tmp.mp4"
    with imageio.get_writer(tmp, fps=fps, macro_block_size=1) as writer:
        for frame in frames:
            writer.append_data(np.asarray(frame))  # type: ignore[attr-defined]  # v2 writer; stubs type the base
    import os

    os.replace(tmp, path)
    return {"path": path, "return": total, "length": n}
