"""rl-baselines3-zoo's published scores, side by side: advantage with its tuned entries against
Stable-Baselines3 with the zoo's hyperparameters, and the general defaults against SB3's plain defaults.

    pip install -e ".[bench]"                      # SB3; LunarLander rows also need the box2d extra,
                                                   # MuJoCo rows the mujoco extra (rows that cannot run
                                                   # are reported as skipped)
    python -m benchmarks.zoo_suite --quick         # smoke run: tiny budgets, 1 seed, 2 eval episodes
    python -m benchmarks.zoo_suite --rows ppo-CartPole-v1,dqn-CartPole-v1 --seeds 3
    python -m benchmarks.zoo_suite                 # every row, 3 seeds (about a day of CPU)
    python -m benchmarks.zoo_suite --jobs 2        # two pairs of runs at a time (one per core)

Finished runs are appended to ``<out>/zoo_suite_runs.jsonl`` (``--log``) as they end, and an invocation
skips the runs the log holds: the suite is built over several invocations, and the report covers every
run in the log.

Per row and seed, four processes, interleaved (so machine load affects all alike), one torch thread each:

* ``zoo``: advantage with ``hyperparams=auto`` (the row's entry in ``advantage/hyperparams``) against SB3
  with the zoo's hyperparameters for the row (``ZOO_SB3`` below: rl-baselines3-zoo ``hyperparams/*.yml``
  at commit 22e3ff2, transcribed as SB3 keyword arguments);
* ``defaults``: advantage with ``hyperparams=none`` against SB3 with its plain defaults (one env, no
  normalisation), at the row's budget.

The final score is the mean over seeds of 20 deterministic episodes, episode ``i`` of both libraries
starting from ``reset(seed=10_000 + i)`` (the same start states: for Pendulum, one set of 20 starts against
another moves the mean by tens of points); the training wall time excludes evaluation for both. The zoo's
published mean ± std (its ``benchmark.md``) is printed beside; the zoo measured LunarLander on ``-v2``
and MuJoCo on ``-v3``, and rows marked ``short`` run a shorter budget than the zoo's (compare with SB3 at
the same budget there). Writes ``<out>/zoo_suite.{md,json,png}`` (``--quick`` writes
``zoo_suite_quick.*``: a smoke run's numbers mean nothing).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVAL_EPISODES = 20
EVAL_SEED = 10_000  # episode i of the final evaluation starts from reset(seed=EVAL_SEED + i), both libraries


@dataclass(frozen=True)
class Row:
    algo: str
    env_id: str
    budget: int
    zoo_mean: float
    zoo_std: float
    sb3: dict[str, Any] = field(default_factory=dict)  # the zoo's hyperparameters as SB3 kwargs
    n_envs: int = 1
    normalize: bool = False
    noise: tuple[str, float] | None = None  # TD3/DDPG action noise: ("normal" | "ou", σ)
    short: bool = False  # a shorter budget than the zoo's published row

    @property
    def name(self) -> str:
        return f"{self.algo}-{self.env_id}"


_MUJOCO_PPO = dict(
    batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2,
    n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
    policy_kwargs="dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, "
    "net_arch=dict(pi=[256, 256], vf=[256, 256]))",
)  # fmt: skip
ROWS = [
    Row("ppo", "CartPole-v1", 100_000, 500.0, 0.0, n_envs=8, sb3=dict(
        n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate="lin_0.001", clip_range="lin_0.2")),
    Row("a2c", "CartPole-v1", 500_000, 500.0, 0.0, n_envs=8, sb3=dict(ent_coef=0.0)),
    Row("dqn", "CartPole-v1", 50_000, 500.0, 0.0, sb3=dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs="dict(net_arch=[256, 256])")),
    Row("dqn", "MountainCar-v0", 120_000, -100.849, 9.925, sb3=dict(
        learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000, gamma=0.98,
        target_update_interval=600, train_freq=16, gradient_steps=8, exploration_fraction=0.2,
        exploration_final_eps=0.07, policy_kwargs="dict(net_arch=[256, 256])")),
    Row("dqn", "LunarLander-v3", 100_000, 154.382, 79.241, sb3=dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1, policy_kwargs="dict(net_arch=[256, 256])")),
    Row("ppo", "LunarLander-v3", 1_000_000, 242.119, 31.823, n_envs=16, sb3=dict(
        n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01)),
    Row("a2c", "LunarLander-v3", 200_000, 155.751, 80.419, n_envs=8, sb3=dict(
        gamma=0.995, n_steps=5, learning_rate="lin_0.00083", ent_coef=0.00001)),
    Row("sac", "Pendulum-v1", 20_000, -156.995, 88.714, sb3=dict(learning_rate=1e-3)),
    Row("td3", "Pendulum-v1", 20_000, -151.855, 90.227, noise=("normal", 0.1), sb3=dict(
        gamma=0.98, buffer_size=200_000, learning_starts=10_000, gradient_steps=1, train_freq=1,
        learning_rate=1e-3, policy_kwargs="dict(net_arch=[400, 300])")),
    Row("ddpg", "Pendulum-v1", 20_000, -152.099, 94.282, noise=("normal", 0.1), sb3=dict(
        gamma=0.98, buffer_size=200_000, learning_starts=10_000, gradient_steps=1, train_freq=1,
        learning_rate=1e-3, policy_kwargs="dict(net_arch=[400, 300])")),
    Row("sac", "MountainCarContinuous-v0", 50_000, 94.679, 1.134, sb3=dict(
        learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1, train_freq=32,
        gradient_steps=32, gamma=0.9999, tau=0.01, learning_starts=0, use_sde=True,
        policy_kwargs="dict(log_std_init=-3.67, net_arch=[64, 64])")),
    Row("ppo", "Hopper-v5", 1_000_000, 2410.435, 10.026, normalize=True, sb3=_MUJOCO_PPO),
    Row("sac", "HalfCheetah-v5", 200_000, 9535.451, 100.470, short=True, sb3=dict(learning_starts=10_000)),
    Row("td3", "HalfCheetah-v5", 200_000, 9655.666, 969.916, short=True, noise=("normal", 0.1), sb3=dict(
        learning_starts=10_000, train_freq=1, gradient_steps=1, learning_rate=1e-3, batch_size=256,
        policy_kwargs="dict(net_arch=[400, 300])")),
]  # fmt: skip
BY_NAME = {r.name: r for r in ROWS}
VARIANTS = ("zoo", "defaults")
QUICK_BUDGET, QUICK_EPISODES = 1_000, 2


# ----------------------------------------------------------------------------------------------------
# Workers (one process each)


def _schedule(value: Any) -> Any:
    """The zoo's ``lin_X``: X decayed linearly to 0 over training (SB3 passes progress 1 → 0)."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value[4:])
        return lambda progress: progress * start
    return value


def run_sb3(row: Row, variant: str, seed: int, budget: int, episodes: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn  # noqa: F401  (policy_kwargs strings name nn.ReLU)

    zoo = variant == "zoo"
    t0 = time.perf_counter()
    env = make_vec_env(row.env_id, n_envs=row.n_envs if zoo else 1, seed=seed)
    if zoo and row.normalize:
        env = VecNormalize(env, gamma=row.sb3.get("gamma", 0.99))
    kwargs: dict[str, Any] = {}
    if zoo:
        kwargs = {k: _schedule(v) for k, v in row.sb3.items()}
        if isinstance(kwargs.get("policy_kwargs"), str):
            kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"])  # the zoo's own format; trusted text
        if row.noise is not None:
            n = env.action_space.shape[-1]
            cls = NormalActionNoise if row.noise[0] == "normal" else OrnsteinUhlenbeckActionNoise
            kwargs["action_noise"] = cls(np.zeros(n), row.noise[1] * np.ones(n))
    model = getattr(sb3, row.algo.upper())("MlpPolicy", env, seed=seed, device="cpu", **kwargs)
    model.learn(total_timesteps=budget)
    train_s = time.perf_counter() - t0
    eval_env = gym.make(row.env_id)
    returns = []
    for i in range(episodes):
        obs, _ = eval_env.reset(seed=EVAL_SEED + i)
        done, total = False, 0.0
        while not done:
            x = env.normalize_obs(obs) if isinstance(env, VecNormalize) else obs
            action, _ = model.predict(x, deterministic=True)
            obs, r, term, trunc, _ = eval_env.step(action)
            total += float(r)
            done = term or trunc
        returns.append(total)
    return {"score": float(np.mean(returns)), "train_seconds": train_s}


def _our_keys(row: Row, variant: str, budget: int, episodes: int) -> dict[str, Any]:
    return {
        "env.id": row.env_id,
        "hyperparams": "auto" if variant == "zoo" else "none",
        "trainer.total_steps": budget,
        "trainer.eval_every": 0,
        "trainer.eval_episodes": episodes,
        "trainer.tensorboard": False,
        "trainer.progress": "none",
        "trainer.torch_threads": 1,
        "trainer.checkpoint_every": 0,
    }


# Options added after runs were logged, left out of the fingerprint while they hold the value that means
# "as before" (so adding an option does not make every logged run of the algorithm stale).
AS_BEFORE: dict[str, dict[tuple[str, str], Any]] = {
    "dqn": {("algorithm", "lr_schedule"): "constant", ("model", "init"): "orthogonal"},
    "ppo": {("model", "init"): "orthogonal"},
    "a2c": {("model", "init"): "orthogonal"},
    "sac": {
        ("algorithm", "use_sde"): False,
        ("algorithm", "sde_sample_freq"): -1,
        ("model", "log_std_init"): -3.0,
    },
}
# Options added later that mean nothing while a switch is off: left out of the fingerprint then.
ONLY_WITH = {"sac": {("model", "sde_learn_features"): ("algorithm", "use_sde")}}


def config_hash(row: Row, variant: str, budget: int) -> str:
    """A fingerprint of the config our run of (row, variant) resolves to, seed and run folder aside: a
    logged run whose fingerprint differs (a tuned entry or a default changed since) is run again."""
    from advantage.config import to_dict
    from advantage.resolve import resolve_config

    _, cfg = resolve_config(row.algo, overrides=_our_keys(row, variant, budget, EVAL_EPISODES))
    tree = to_dict(cfg)
    for key in ("seed", "run_dir", "eval_episodes"):
        tree["trainer"].pop(key, None)
    if not tree["trainer"].get("schedule_steps"):  # no earlier parts (a run never resumed): as before the key
        tree["trainer"].pop("schedule_steps", None)
    if tree["trainer"].get("kernels") == "fast":  # every fast path, as runs did before the option existed
        tree["trainer"].pop("kernels", None)
    for (section, key), value in AS_BEFORE.get(row.algo, {}).items():
        if section in tree and tree[section].get(key, value) == value:
            tree[section].pop(key, None)
    for (section, key), (switch_section, switch) in ONLY_WITH.get(row.algo, {}).items():
        if not tree.get(switch_section, {}).get(switch, False):
            tree.get(section, {}).pop(key, None)
    # Behaviour changed without a key: updates due before a batch's worth of transitions is stored were
    # skipped, and now draw with replacement from what is stored (SB3's). Runs where that happens (their
    # learning_starts is below the batch) are stale; the others are not.
    algo = tree.get("algorithm", {})
    if algo.get("learning_starts", 0) < algo.get("batch_size", 0):
        tree["early_batches"] = "with replacement"
    text = json.dumps(tree, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_ours(row: Row, variant: str, seed: int, budget: int, episodes: int) -> dict[str, Any]:
    import advantage

    with tempfile.TemporaryDirectory() as tmp:
        keys = _our_keys(row, variant, budget, episodes)
        keys.update({"trainer.seed": seed, "trainer.run_dir": os.path.join(tmp, "run")})
        run = advantage.train(row.algo, quiet=True, **keys)
        final = [r for r in run.metrics if "eval/return_mean" in r][-1]
        same_starts = run.evaluate(episodes, seed=EVAL_SEED)  # SB3's start states
    return {
        "score": same_starts["return_mean"],
        "score_own_seeds": final["eval/return_mean"],  # the run's own final evaluation
        "eval_seed": EVAL_SEED,
        "config_hash": config_hash(row, variant, budget),
        "train_seconds": final["time"] - final.get("eval/seconds", 0.0),
    }


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    row = BY_NAME[args.row]
    fn = run_sb3 if args.worker == "sb3" else run_ours
    result = fn(row, args.variant, args.seed, args.budget, args.episodes)
    result.update(row=row.name, lib=args.worker, variant=args.variant, seed=args.seed, budget=args.budget)
    print(json.dumps(result))


# ----------------------------------------------------------------------------------------------------
# Driver


def _env_available(env_id: str) -> str | None:
    import gymnasium as gym

    try:
        gym.make(env_id).close()
    except Exception as e:  # a missing extra (box2d, mujoco): the row is skipped, with the reason
        return f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
    return None


def _load_log(log: Path | None) -> list[dict[str, Any]]:
    """The runs previous invocations appended to ``log`` (one JSON object per line), the last of each
    (row, library, variant, seed, budget) only: two invocations running the same row both log it."""
    if log is None or not log.exists():
        return []
    return _newest(json.loads(line) for line in log.read_text().splitlines() if line.strip())


def _newest(runs: Any) -> list[dict[str, Any]]:
    """The last of each (row, library, variant, seed, budget) among ``runs``, in order of arrival."""
    last = {(r["row"], r["lib"], r["variant"], r["seed"], r.get("budget")): r for r in runs}
    return list(last.values())


@functools.cache
def _current_hash(name: str, variant: str, budget: int) -> str | None:
    return config_hash(BY_NAME[name], variant, budget) if name in BY_NAME else None


def _comparable(result: dict[str, Any]) -> bool:
    """A finished run scored from the suite's evaluation start states (``EVAL_SEED``) and, for ours, with
    the config the row resolves to today (an entry tuned since makes its old runs stale)."""
    if "score" not in result:
        return False
    if result["lib"] == "sb3":
        return True
    return result.get("eval_seed") == EVAL_SEED and result.get("config_hash") == _current_hash(
        result["row"], result["variant"], result["budget"]
    )


def run_suite(
    rows: list[Row],
    seeds: int,
    quick: bool,
    variants: tuple[str, ...],
    log: Path | None = None,
    jobs: int = 1,
    again: bool = False,
) -> dict[str, Any]:
    """Run every (seed, row, variant) pair, SB3 then advantage back to back, ``jobs`` pairs at a time (one
    torch thread each: ``jobs`` up to the core count; both runs of a pair meet the same other load). With
    ``log``, each result is appended to it as it ends and runs it already holds (same budget) are not run
    again, so the suite (about a day of CPU) can be built over several invocations and a killed one loses
    the runs in flight at most. ``again`` runs the pairs of ``rows`` once more though the log holds them
    (both libraries, back to back: a re-timing after a speed change that leaves the config as it was); the
    newer runs replace the logged ones in the report."""
    from concurrent.futures import ThreadPoolExecutor

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # errors of earlier invocations are run again, and so are advantage runs scored on its own evaluation
    # seeds (logs written before both libraries were evaluated from the same start states)
    results = [r for r in _load_log(log) if _comparable(r)]
    done = {(r["row"], r["lib"], r["variant"], r["seed"], r["budget"]) for r in results}
    if again:
        picked = {r.name for r in rows}
        done = {d for d in done if d[0] not in picked}
    skipped = {r.name: why for r in rows if (why := _env_available(r.env_id))}
    budget_of = {r.name: QUICK_BUDGET if quick else r.budget for r in rows}
    episodes = QUICK_EPISODES if quick else EVAL_EPISODES
    pairs = [
        (seed, row.name, variant)
        for seed in range(seeds)
        for row in rows
        if row.name not in skipped
        for variant in variants
    ]
    lock = threading.Lock()

    def run_pair(pair: tuple[int, str, str]) -> None:
        seed, name, variant = pair
        budget = budget_of[name]
        for lib in ("sb3", "advantage"):  # interleaved
            if (name, lib, variant, seed, budget) in done:
                continue
            cmd = [sys.executable, __file__, "--worker", lib, "--row", name, "--variant", variant]
            cmd += ["--seed", str(seed), "--budget", str(budget), "--episodes", str(episodes)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode != 0:
                tail = " | ".join(out.stderr.strip().splitlines()[-3:])
                result = dict(row=name, lib=lib, variant=variant, seed=seed, error=tail)
            else:
                result = json.loads(out.stdout.strip().splitlines()[-1])
            with lock:
                results.append(result)
                print(json.dumps(result), flush=True)
                if log is not None and "score" in result:
                    with log.open("a") as f:
                        f.write(json.dumps(result) + "\n")

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(run_pair, pairs))
    # --again's runs replace the logged ones
    return {"quick": quick, "seeds": seeds, "results": _newest(results), "skipped": skipped}


def summarize(data: dict[str, Any], rows: list[Row]) -> list[dict[str, Any]]:
    table = []
    for row in rows:
        for variant in VARIANTS:
            cell: dict[str, Any] = {"row": row.name, "variant": variant}
            for lib in ("advantage", "sb3"):
                rs = [r for r in data["results"] if r["row"] == row.name and r["variant"] == variant]
                ok = [r for r in rs if r["lib"] == lib and "score" in r]
                if not ok:
                    continue
                scores = [r["score"] for r in ok]
                cell[lib] = {
                    "mean": statistics.fmean(scores),
                    "std": statistics.pstdev(scores),
                    "train_seconds": statistics.median(r["train_seconds"] for r in ok),
                    "seeds": len(ok),
                }
            if "advantage" in cell and "sb3" in cell:
                cell["time_ratio"] = cell["advantage"]["train_seconds"] / cell["sb3"]["train_seconds"]
                cell["bar"] = bar(row, variant, cell["sb3"])
                cell["met"] = cell["advantage"]["mean"] >= cell["bar"]
                table.append(cell)
    return table


def bar(row: Row, variant: str, sb3: dict[str, Any]) -> float:
    """The score our mean must reach (issue 19's acceptance): the zoo's published mean minus its std for
    a ``zoo`` row at the zoo's budget; SB3's mean minus one std across seeds otherwise (a shortened
    budget, or the general defaults against SB3's plain defaults)."""
    if variant == "zoo" and not row.short:
        return row.zoo_mean - row.zoo_std
    return sb3["mean"] - sb3["std"]


def report(data: dict[str, Any], rows: list[Row], out: Path, quick: bool) -> None:
    stem = "zoo_suite_quick" if quick else "zoo_suite"
    out.mkdir(parents=True, exist_ok=True)
    table = summarize(data, rows)
    data = {**data, "table": table}
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))
    lines = [
        "### rl-baselines3-zoo rows: advantage vs Stable-Baselines3"
        + (" (SMOKE RUN: --quick)" if quick else ""),
        "",
        "Written by `python -m benchmarks.zoo_suite"
        + (" --quick" if quick else "")
        + "`; final score = mean over seeds of each seed's deterministic-episode mean (± std across seeds).",
        "",
        "| row | variant | budget | seeds | advantage | SB3 | zoo published | bar | met "
        "| train s (ours / SB3) | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cell in table:
        row = BY_NAME[cell["row"]]
        a, s = cell["advantage"], cell["sb3"]
        budget = QUICK_BUDGET if quick else row.budget
        zoo = f"{row.zoo_mean:.1f} ± {row.zoo_std:.1f}" if cell["variant"] == "zoo" else "-"
        lines.append(
            f"| {row.name}{' (short)' if row.short else ''} | {cell['variant']} | {budget} | {a['seeds']} "
            f"| {a['mean']:.1f} ± {a['std']:.1f} | {s['mean']:.1f} ± {s['std']:.1f} | {zoo} "
            f"| {cell['bar']:.1f} | {'yes' if cell['met'] else 'no'} "
            f"| {a['train_seconds']:.1f} / {s['train_seconds']:.1f} | {cell['time_ratio']:.2f} |"
        )
    if table:
        ratios = [c["time_ratio"] for c in table]
        lines += [
            "",
            f"Rows: {len(table)}; score at or above the bar: {sum(c['met'] for c in table)}; training time "
            f"ours / SB3: median {statistics.median(ratios):.2f}, highest {max(ratios):.2f}. Bar: the zoo's "
            "published mean minus its std (zoo rows at the zoo's budget), else SB3's mean minus its std "
            "across seeds; a row's train s is the median over seeds.",
        ]
    for name, why in data["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    errors = [r for r in data["results"] if "error" in r]
    for r in errors:
        lines.append(f"\nerror {r['row']} {r['lib']} {r['variant']} seed {r['seed']}: {r['error']}")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    _plot(table, out / f"{stem}.png")


def _plot(table: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in table if c["variant"] == "zoo"]
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(cells)), 3.5))
    for i, c in enumerate(cells):
        row = BY_NAME[c["row"]]
        span = max(abs(row.zoo_mean), 1.0)  # scores relative to the zoo's published mean
        for j, (lib, color) in enumerate((("advantage", "C0"), ("sb3", "C1"))):
            ax.bar(
                i + (j - 0.5) * 0.35, c[lib]["mean"] / span, 0.35, color=color, label=lib if i == 0 else None
            )
        ax.plot([i - 0.4, i + 0.4], [row.zoo_mean / span] * 2, "k-", label="zoo" if i == 0 else None)
    ax.set_xticks(range(len(cells)), [c["row"] for c in cells], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("score / |zoo mean|")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", help=f"comma-separated subset of: {', '.join(BY_NAME)}")
    p.add_argument("--seeds", type=int, default=None, help="seeds per row (default 3; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, 2 eval episodes")
    p.add_argument("--variants", default=",".join(VARIANTS), help="zoo, defaults or both")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument(
        "--log",
        help="JSON-lines file of finished runs, appended as they end; runs it holds are not repeated and "
        "the report covers all of them (default: <out>/zoo_suite_runs.jsonl; --quick: none unless given)",
    )
    p.add_argument("--report-only", action="store_true", help="write the report from --log, run nothing")
    p.add_argument("--jobs", type=int, default=1, help="pairs of runs at a time (at most the core count)")
    p.add_argument(
        "--again",
        action="store_true",
        help="run the picked rows' pairs again though the log holds them (both libraries: re-timing after a "
        "speed change); the newer runs replace the logged ones",
    )
    p.add_argument("--worker", choices=["sb3", "advantage"], help=argparse.SUPPRESS)
    p.add_argument("--row", help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    p.add_argument("--episodes", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return
    names = args.rows.split(",") if args.rows else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown rows {unknown}; available: {', '.join(BY_NAME)}")
    variants = tuple(v for v in args.variants.split(",") if v)
    if not set(variants) <= set(VARIANTS):
        p.error(f"--variants takes {', '.join(VARIANTS)}")
    rows = [BY_NAME[n] for n in names]
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    log = Path(args.log) if args.log else None if args.quick else Path(args.out) / "zoo_suite_runs.jsonl"
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        results = [r for r in _load_log(log) if _comparable(r)]
        data: dict[str, Any] = {"quick": False, "seeds": seeds, "results": results, "skipped": {}}
    else:
        data = run_suite(rows, seeds, args.quick, variants, log, args.jobs, args.again)
    if log is not None:  # every row the log holds, not only this invocation's
        rows = [r for r in ROWS if any(x["row"] == r.name for x in data["results"])]
    report(data, rows, Path(args.out), args.quick)
    print(f"wrote {Path(args.out) / ('zoo_suite_quick' if args.quick else 'zoo_suite')}.md")


if __name__ == "__main__":
    main()
