"""The time a user waits: whole processes, from the command to its exit, advantage beside Stable-Baselines3
and TRL, one torch thread each, interleaved in one invocation.

    python -m benchmarks.startup            # -> benchmarks/results/startup.{md,json}
    python -m benchmarks.startup --quick    # one seed, fewer rows (a smoke run)

Three measurements:

1. **Commands** (advantage only): ``advantage --help``, ``advantage list``, ``advantage list ppo`` and a
   config error (``advantage train ppo trainer.total_stepz=5``), each the median of 5 processes.
2. **Whole runs** (``--seeds`` seeds, libraries interleaved): PPO and DQN on CartPole-v1 until the mean of
   10 deterministic episodes, evaluated every 5,000 steps, reaches 475 (``advantage train ALGO
   trainer.stop_at_return=475 ...`` against SB3 with the rl-baselines3-zoo hyperparameters and the same
   evaluation callback as :mod:`benchmarks.time_to_target`, then ``model.save``); and PPO for 500 steps
   (``advantage train ppo trainer.total_steps=500`` against SB3's ``learn(500)`` plus ``save``). The clock
   is the parent's: from ``Popen`` to the child's exit, as a shell waits for it.
3. **Phases** of one process per algorithm (ppo, dqn, sac, q_learning, sft, and SB3's PPO/DQN/SAC and
   TRL's SFTTrainer doing the same): interpreter start, imports, config, set-up (envs, model, optimizer)
   up to the first step, training, final evaluation, checkpoint, plot, exit. advantage's phases come from
   wrapping its run-context methods in the child (the command line's own path: ``advantage.cli.main``);
   the plot is drawn by the run's sidecar process, so its time is reported but not waited for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGET, EVAL_EVERY, EVAL_EPISODES, MAX_STEPS = 475.0, 5_000, 10, 100_000
CHILD_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


# -- whole processes -----------------------------------------------------------------------------------
def _timed(cmd: list[str], cwd: str) -> tuple[float, int, str]:
    """Seconds from launch to exit of ``cmd`` (its output captured: a child left running with the pipe
    open would be counted too), its exit code and its last line of output (stdout's; stderr's when the
    command failed)."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=CHILD_ENV, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    text = (out.stdout if out.returncode == 0 else out.stdout + out.stderr).strip().splitlines()
    return wall, out.returncode, text[-1] if text else ""


def advantage_cmd(kind: str, seed: int) -> list[str]:
    base = [sys.executable, "-m", "advantage", "train"]
    common = [f"trainer.seed={seed}", "trainer.torch_threads=1", "trainer.run_dir=run", "--quiet"]
    if kind == "steps500_ppo":
        return [*base, "ppo", "trainer.total_steps=500", *common]
    algo = kind.split("_")[1]
    return [
        *base,
        algo,
        f"trainer.stop_at_return={TARGET:g}",
        f"trainer.eval_every={EVAL_EVERY}",
        f"trainer.eval_episodes={EVAL_EPISODES}",
        f"trainer.total_steps={MAX_STEPS}",
        *common,
    ]


def sb3_script(kind: str, seed: int) -> str:
    """A whole SB3 program: imports, model, learn (with the target callback), save."""
    if kind in ("to475_ppo", "steps500_ppo"):  # the zoo's settings, as advantage's CartPole entry
        model = (
            "PPO('MlpPolicy', make_vec_env('CartPole-v1', n_envs=8, seed=SEED), n_steps=32, batch_size=256,"
            " n_epochs=20, gamma=0.98, gae_lambda=0.8, learning_rate=lin(1e-3), clip_range=lin(0.2),"
            " ent_coef=0.0, seed=SEED, device='cpu', verbose=0)"
        )
    else:  # to475_dqn
        model = (
            "DQN('MlpPolicy', 'CartPole-v1', learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,"
            " learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,"
            " gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,"
            " policy_kwargs={'net_arch': [256, 256]}, seed=SEED, device='cpu', verbose=0)"
        )
    learn = (
        f"model.learn({MAX_STEPS}, callback=sb3_callback(PROTO, time.perf_counter()))"
        if kind.startswith("to475")
        else "model.learn(500)"
    )
    return f"""
import sys, time
sys.path.insert(0, {str(HERE.parent)!r})
import torch
torch.set_num_threads(1)
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env
from benchmarks.time_to_target import Protocol, sb3_callback
PROTO = Protocol('CartPole-v1', {TARGET}, {EVAL_EVERY}, {EVAL_EPISODES}, {MAX_STEPS})
SEED = {seed}
def lin(v):
    return lambda progress: progress * v
model = {model}
{learn}
model.save('model')
print('steps', model.num_timesteps)
"""


def whole_runs(seeds: int, kinds: list[str]) -> list[dict[str, Any]]:
    rows = []
    for kind in kinds:
        for seed in range(seeds):
            for lib in ("sb3", "advantage"):  # interleaved: load affects both alike
                with tempfile.TemporaryDirectory() as tmp:
                    if lib == "sb3":
                        cmd = [sys.executable, "-c", sb3_script(kind, seed)]
                    else:
                        cmd = advantage_cmd(kind, seed)
                    wall, rc, last = _timed(cmd, tmp)
                if rc != 0:
                    raise RuntimeError(f"{lib} {kind} seed {seed} failed ({rc}): {last}")
                rows.append({"kind": kind, "lib": lib, "seed": seed, "seconds": wall, "last_line": last})
                print(json.dumps(rows[-1]), flush=True)
    return rows


COMMANDS = {
    "help": ["--help"],
    "list": ["list"],
    "list_ppo": ["list", "ppo"],
    "config_error": ["train", "ppo", "trainer.total_stepz=5"],
}


def commands(repeats: int) -> dict[str, float]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in COMMANDS.items():
            times = [_timed([sys.executable, "-m", "advantage", *args], tmp)[0] for _ in range(repeats)]
            out[name] = statistics.median(times)
            print(f"advantage {' '.join(args)}: {out[name]:.3f} s", flush=True)
    return out


# -- phases ---------------------------------------------------------------------------------------------
PHASE_ARGS = {
    "ppo": ["ppo", "trainer.total_steps=5000"],
    "dqn": ["dqn", "trainer.total_steps=5000"],
    "sac": ["sac", "env.id=Pendulum-v1", "trainer.total_steps=1000"],
    "q_learning": ["q_learning", "env.id=FrozenLake-v1", "trainer.total_steps=5000"],
    "sft": [
        "sft",
        "model.arch=llama",
        "model.hidden_size=64",
        "model.layers=2",
        "model.heads=2",
        "algorithm.batch_size=8",
        "trainer.total_steps=20",
        "trainer.eval_every=0",
    ],
}


def phase_worker_advantage(algo: str, launched: float) -> dict[str, float]:
    """Run ``advantage train`` through the command line's own entry point, stamping its phases."""
    marks = {"start": time.time()}
    from advantage import cli, context, registry, runs  # the command line's imports

    marks["imports"] = time.time()
    # The algorithm's module (and with it torch) is imported when its first function is called: counted
    # as imports, not as set-up.
    marks["import_in_config_s"] = marks["import_in_set_up_s"] = 0.0
    orig_resolve_entry = registry.Entry.resolve

    def resolve_entry(self: Any) -> Any:
        if self._fn is not None:
            return self._fn
        start = time.time()
        fn = orig_resolve_entry(self)
        phase = "import_in_set_up_s" if "config" in marks else "import_in_config_s"
        marks[phase] += time.time() - start
        return fn

    registry.Entry.resolve = resolve_entry  # type: ignore[method-assign]
    orig_init, orig_tick = context.RunContext.__init__, context.RunContext.tick
    orig_eval, orig_save = context.RunContext.evaluate, context.RunContext.save
    orig_resolve, orig_finish = runs.resolve_config, context.RunContext.finish

    def resolve(*a: Any, **k: Any) -> Any:
        out = orig_resolve(*a, **k)
        marks.setdefault("config", time.time())
        return out

    def init(self: Any, *a: Any, **k: Any) -> None:
        marks.setdefault("config", time.time())
        orig_init(self, *a, **k)
        marks["run_context"] = time.time()

    def tick(self: Any, *a: Any, **k: Any) -> bool:
        marks.setdefault("first_step", time.time())
        return orig_tick(self, *a, **k)

    def finish(self: Any, *a: Any, **k: Any) -> Any:
        marks["training"] = time.time()
        return orig_finish(self, *a, **k)

    def evaluate(self: Any, *a: Any, **k: Any) -> Any:
        start = time.time()
        out = orig_eval(self, *a, **k)
        if "training" in marks:
            marks["final_eval_s"] = time.time() - start
        return out

    def save(self: Any, *a: Any, **k: Any) -> Any:
        start = time.time()
        out = orig_save(self, *a, **k)
        if "training" in marks:
            marks["checkpoint_s"] = time.time() - start
        return out

    runs.resolve_config = resolve
    context.RunContext.__init__, context.RunContext.tick = init, tick  # type: ignore[method-assign]
    context.RunContext.finish, context.RunContext.evaluate, context.RunContext.save = (  # type: ignore[method-assign]
        finish,
        evaluate,
        save,
    )
    rc = cli.main(["train", *PHASE_ARGS[algo], "trainer.torch_threads=1", "trainer.run_dir=run", "--quiet"])
    marks["returned"] = time.time()
    if rc != 0:
        raise SystemExit(rc)
    plot = Path("run/plots/learning_curve.png")
    while not plot.exists() and time.time() < marks["returned"] + 60:  # the sidecar's plot, not waited for
        time.sleep(0.05)
    marks["plot_ready"] = time.time()
    return {"launched": launched, **marks}


def phase_worker_sb3(algo: str, launched: float) -> dict[str, float]:
    marks = {"start": time.time()}
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env

    marks["imports"] = time.time()
    marks["config"] = marks["imports"]
    if algo == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
        model: Any = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, device="cpu", seed=0)
        steps = 5000
    elif algo == "dqn":
        model = DQN("MlpPolicy", "CartPole-v1", learning_starts=1000, device="cpu", seed=0)
        steps = 5000
    else:
        model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=100, device="cpu", seed=0)
        steps = 1000
    marks["run_context"] = time.time()
    model.learn(steps)
    marks["training"] = time.time()
    start = time.time()
    model.save("model")
    marks["checkpoint_s"] = time.time() - start
    marks["returned"] = time.time()
    return {"launched": launched, **marks}


def phase_worker_trl(launched: float) -> dict[str, float]:
    """TRL's SFTTrainer on the tiny Llama, character tokenizer and addition texts of advantage's sft row."""
    marks = {"start": time.time()}
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from advantage.envs.text import make_task
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    marks["imports"] = time.time()
    task = make_task("addition")
    tok = build_char_tokenizer(task.alphabet, extra_tokens=task.special_tokens)
    rows = [{"prompt": e.prompt, "completion": e.target} for e in task.examples("train", 400, 0)]
    model = build_scratch_model("llama", tok, hidden_size=64, layers=2, heads=2, seed=0)
    args = SFTConfig(
        output_dir="out",
        max_steps=20,
        per_device_train_batch_size=8,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    marks["config"] = time.time()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    marks["run_context"] = time.time()
    trainer.train()
    marks["training"] = time.time()
    start = time.time()
    trainer.save_model("model")
    marks["checkpoint_s"] = time.time() - start
    marks["returned"] = time.time()
    return {"launched": launched, **marks}


def phases(rows: list[tuple[str, str]]) -> list[dict[str, Any]]:
    out = []
    for lib, algo in rows:
        with tempfile.TemporaryDirectory() as tmp:
            launched = time.time()
            cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", lib, algo, str(launched)]
            wall, rc, last = _timed(cmd, tmp)
        if rc != 0:
            raise RuntimeError(f"phases {lib} {algo} failed ({rc}): {last}")
        m = json.loads(last)
        ended = m["launched"] + wall
        row = {
            "lib": lib,
            "algo": algo,
            "interpreter": m["start"] - m["launched"],
            "imports": m["imports"]
            - m["start"]
            + m.get("import_in_config_s", 0.0)
            + m.get("import_in_set_up_s", 0.0),
            "config": m["config"] - m["imports"] - m.get("import_in_config_s", 0.0),
            "set_up": m["run_context"] - m["config"] - m.get("import_in_set_up_s", 0.0),
            "first_step": (m["first_step"] - m["run_context"]) if "first_step" in m else None,
            "training": m["training"] - m.get("first_step", m["run_context"]),
            "final_eval": m.get("final_eval_s"),
            "checkpoint": m.get("checkpoint_s"),
            "plot_after_exit": (m["plot_ready"] - m["returned"]) if "plot_ready" in m else None,
            "exit": ended - m.get("plot_ready", m["returned"]) if "plot_ready" not in m else None,
            "total": wall - ((m["plot_ready"] - m["returned"]) if "plot_ready" in m else 0.0),
        }
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


# -- report ---------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def report(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = ["### Start-up and whole-process times", "", result["machine"], ""]
    lines += ["| command | median s |", "|---|---|"]
    lines += [f"| `advantage {' '.join(COMMANDS[k])}` | {v:.3f} |" for k, v in result["commands"].items()]
    lines += ["", "| run | SB3 median s | advantage median s | ratio |", "|---|---|---|---|"]
    for kind, s in result["whole"].items():
        lines.append(f"| {kind} | {s['sb3']:.2f} | {s['advantage']:.2f} | {s['ratio']:.2f} |")
    lines += [
        "",
        "| library | algorithm | interpreter | imports | config | set-up | to first step | training | "
        "final eval | checkpoint | total (s) | plot done after exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["phases"]:
        lines.append(
            f"| {r['lib']} | {r['algo']} | {_fmt(r['interpreter'])} | {_fmt(r['imports'])} | "
            f"{_fmt(r['config'])} | {_fmt(r['set_up'])} | {_fmt(r['first_step'])} | {_fmt(r['training'])} | "
            f"{_fmt(r['final_eval'])} | {_fmt(r['checkpoint'])} | {_fmt(r['total'])} | "
            f"{_fmt(r['plot_after_exit'])} |"
        )
    lines += ["", "Per-seed whole-process times:", "", "| run | library | seed | s |", "|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['lib']} | {r['seed']} | {r['seconds']:.2f} |" for r in result["runs"]]
    (out / "startup.md").write_text("\n".join(lines) + "\n")
    (out / "startup.json").write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one seed, PPO only, 2 repeats per command")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument(
        "--parts",
        default="commands,whole,phases",
        help="which measurements to (re)run; the others are kept from the existing results file",
    )
    p.add_argument("--phase", nargs=3, metavar=("LIB", "ALGO", "LAUNCHED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase:
        lib, algo, launched = args.phase[0], args.phase[1], float(args.phase[2])
        if lib == "advantage":
            marks = phase_worker_advantage(algo, launched)
        elif lib == "sb3":
            marks = phase_worker_sb3(algo, launched)
        else:
            marks = phase_worker_trl(launched)
        print(json.dumps(marks))
        return
    seeds = 1 if args.quick else args.seeds
    kinds = ["steps500_ppo", "to475_ppo"] if args.quick else ["to475_ppo", "to475_dqn", "steps500_ppo"]
    phase_rows = [("advantage", "ppo"), ("sb3", "ppo")]
    if not args.quick:
        phase_rows += [
            ("advantage", "dqn"),
            ("sb3", "dqn"),
            ("advantage", "sac"),
            ("sb3", "sac"),
            ("advantage", "q_learning"),
            ("advantage", "sft"),
            ("trl", "sft"),
        ]
    parts = set(args.parts.split(","))
    previous = Path(args.out) / "startup.json"
    result: dict[str, Any] = (
        json.loads(previous.read_text()) if parts != {"commands", "whole", "phases"} else {}
    )
    load = f"load average {os.getloadavg()[0]:.2f} at start"
    if "commands" in parts:
        result["commands"] = commands(2 if args.quick else 5)
    if "whole" in parts:
        rows = whole_runs(seeds, kinds)
        whole = {}
        for kind in kinds:
            med = {
                lib: statistics.median(r["seconds"] for r in rows if r["kind"] == kind and r["lib"] == lib)
                for lib in ("sb3", "advantage")
            }
            whole[kind] = {**med, "ratio": med["advantage"] / med["sb3"]}
        result.update(whole=whole, runs=rows)
    if "phases" in parts:
        result["phases"] = phases(phase_rows)
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
    machine += f"{platform.python_version()}"
    result.setdefault("load", {})[args.parts] = f"{load}, {os.getloadavg()[0]:.2f} at the end"
    result["machine"] = machine + "; " + "; ".join(f"{k}: {v}" for k, v in result["load"].items())
    report(result, Path(args.out))
    print((Path(args.out) / "startup.md").read_text())


if __name__ == "__main__":
    main()
