"""PPO on CartPole-v1: advantage vs Stable-Baselines3, side by side, same machine, one invocation.

    pip install -e ".[bench]"
    python -m benchmarks.cartpole_ppo   # 3 seeds each -> benchmarks/results/cartpole_ppo.{md,json,png}

SB3 uses the rl-baselines3-zoo CartPole-v1 hyperparameters (8 envs, n_steps 32, batch 256, 20 epochs,
γ 0.98, λ 0.8, lr 1e-3 → 0 and clip 0.2 → 0 linearly, 64-64 tanh MLPs); advantage uses its ``cartpole``
preset (the default of ``advantage train``). The harness evaluates 10 deterministic episodes every 5,000
environment steps and stops a run the first time the mean reaches 475 (see :mod:`benchmarks.time_to_target`
for how time is measured). SB3 checks every 8 steps, so its evaluations fall on multiples of 5,000;
advantage evaluates at the first rollout boundary past each multiple (every 256 steps), which can only cost
it extra steps.
"""

from __future__ import annotations

import time

from benchmarks.time_to_target import Protocol, sb3_callback, sb3_main, sb3_result

PROTO = Protocol(env_id="CartPole-v1", target=475.0, eval_every=5_000, eval_episodes=10, max_steps=100_000)


def run_sb3(seed: int) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    def linear(v: float):
        return lambda progress_remaining: progress_remaining * v

    t0 = time.perf_counter()
    harness = sb3_callback(PROTO, t0)
    env = make_vec_env(PROTO.env_id, n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        ent_coef=0.0,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=PROTO.max_steps, callback=harness)
    return sb3_result(model, harness, t0)


def main() -> None:
    title = "PPO on CartPole-v1: advantage vs Stable-Baselines3"
    sb3_main(
        __doc__,
        "benchmarks.cartpole_ppo",
        "cartpole_ppo",
        title,
        PROTO,
        run_sb3,
        algo="ppo",
        overrides={"preset": "cartpole"},
    )


if __name__ == "__main__":
    main()
