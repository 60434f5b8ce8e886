"""Evaluate a policy for whole episodes; the same function serves training, ``advantage eval`` and the API."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from advantage.errors import NonFiniteError
from advantage.registry import Policy

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training episodes


def evaluate_policy(
    policy: Policy,
    env: gym.Env,
    episodes: int,
    seed: int,
    deterministic: bool = True,
    max_steps: int = 10_000,
) -> dict[str, Any]:
    """Run ``episodes`` episodes; episode ``i`` starts from ``env.reset(seed=seed + i)``, so a result
    depends only on the policy and the seed. An episode is cut after ``max_steps`` steps (environments
    without a time limit, such as CliffWalking, would otherwise let a looping policy run forever).

    Returns:
        ``return_mean``, ``return_std`` (population std), ``length_mean``, ``episodes``, and
        ``success_rate`` if the environment reports ``info["is_success"]``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    returns, lengths, successes = [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, n = 0.0, 0
        while True:
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, deterministic=deterministic))
            if not math.isfinite(float(reward)):
                raise NonFiniteError(f"evaluation episode {i}, step {n}: reward is {reward}")
            total += float(reward)
            n += 1
            if terminated or truncated or n >= max_steps:
                break
        returns.append(total)
        lengths.append(n)
        if "is_success" in info:
            successes.append(float(info["is_success"]))
    out: dict[str, Any] = {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "episodes": episodes,
    }
    if successes:
        out["success_rate"] = float(np.mean(successes))
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
            writer.append_data(np.asarray(frame))
    import os

    os.replace(tmp, path)
    return {"path": path, "return": total, "length": n}
