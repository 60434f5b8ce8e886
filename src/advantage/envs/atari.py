"""Atari: registration of the ALE environments and the standard preprocessing (Mnih et al. 2015;
Machado et al. 2018), composed from Gymnasium's own wrappers.

Training envs get: no-op starts (up to 30), frame skip 4 with max-pooling of the last two frames,
84×84 grayscale, a life loss ends the episode (``terminal_on_life_loss``; Gymnasium's wrapper then resets
the game, a simplification of the "episodic life" of OpenAI baselines), rewards clipped to their sign,
and a stack of the last 4 frames. Evaluation envs get the same observations but real rewards and whole
games, so evaluation reports game scores.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from advantage.errors import EnvError


def register_ale(env_id: str) -> None:
    """Make ``ALE/...`` ids known to Gymnasium (ale-py registers them on import)."""
    if not env_id.startswith("ALE/") or env_id in gym.registry:
        return
    try:
        import ale_py
    except ImportError:
        raise EnvError(f"env.id {env_id!r} needs the Atari extra: pip install 'advantage[atari]'") from None
    gym.register_envs(ale_py)


def atari_wrappers(env: gym.Env, training: bool) -> gym.Wrapper:
    """The preprocessing above; the base env must be made with ``frameskip=1``."""
    if getattr(env.unwrapped, "_frameskip", 1) != 1:
        raise EnvError("env.wrappers=atari needs env.frameskip=1 (the wrapper skips frames itself)")
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=training, grayscale_obs=True
    )
    if training:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(float(r))))
    return gym.wrappers.FrameStackObservation(env, 4)
