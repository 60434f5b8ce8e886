"""DQN on CartPole-v1: advantage vs Stable-Baselines3, side by side, same machine, one invocation.

    pip install -e ".[bench]"
    python -m benchmarks.cartpole_dqn   # 3 seeds each -> benchmarks/results/cartpole_dqn.{md,json,png}

SB3 uses the rl-baselines3-zoo CartPole-v1 DQN hyperparameters (lr 2.3e-3, batch 64, buffer 100k,
learning_starts 1000, γ 0.99, target update every 10 steps, train_freq 256, gradient_steps 128,
exploration over 16% of 50k steps to ε = 0.04, 256-256 MLP, 1 env). advantage runs the default of
``advantage train dqn`` unchanged: the plain max target with 3-step returns on a 128-128 MLP, 16 envs,
every 256 environment steps 64 gradient steps on batches of 128 at lr 4e-3 (decayed linearly to 0 over
the 50k steps), ε decaying over 8% of 50k
steps to 0.04; buffer, learning_starts, γ, the target update, the Huber loss and the gradient clip (10)
are the zoo's. The harness evaluates 10 greedy episodes every 2,500 environment steps and stops a run the
first time the mean reaches 475 (see :mod:`benchmarks.time_to_target` for how time is measured).
"""

from __future__ import annotations

import time

from benchmarks.time_to_target import Protocol, sb3_callback, sb3_main, sb3_result

PROTO = Protocol(env_id="CartPole-v1", target=475.0, eval_every=2_500, eval_episodes=10, max_steps=50_000)


def run_sb3(seed: int) -> dict:
    from stable_baselines3 import DQN

    t0 = time.perf_counter()
    harness = sb3_callback(PROTO, t0)
    model = DQN(
        "MlpPolicy",
        PROTO.env_id,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=PROTO.max_steps, callback=harness)
    return sb3_result(model, harness, t0)


def main() -> None:
    title = "DQN on CartPole-v1: advantage vs Stable-Baselines3"
    sb3_main(
        __doc__, "benchmarks.cartpole_dqn", "cartpole_dqn", title, PROTO, run_sb3, algo="dqn", overrides={}
    )


if __name__ == "__main__":
    main()
