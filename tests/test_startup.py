"""Start-up cost: what a run, ``advantage list``, ``--help`` and a config error import (issue: the time a
user waits). Each check runs in a fresh interpreter, since ``sys.modules`` is what is measured."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _python(code: str, cwd: Path | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    env = {"PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_eager_step_matches_torch_and_skips_dynamo() -> None:
    """``eager.step`` gives the parameters and optimizer state of ``opt.step()`` bit for bit, for each
    optimizer the algorithms use, without importing ``torch._dynamo`` (the plain steps run after)."""
    res = _python(
        """
        import json, sys, torch
        from advantage.optim import eager
        eager.install()  # what the advantage command does

        CASES = [
            (torch.optim.Adam, dict(lr=1e-2, eps=1e-5, fused=True)),
            (torch.optim.Adam, dict(lr=1e-2)),
            (torch.optim.RMSprop, dict(lr=1e-2, alpha=0.99, eps=1e-5)),
            (torch.optim.RMSprop, dict(lr=1e-2, alpha=0.99, eps=1e-5, foreach=True)),
            (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, fused=True)),
        ]

        def run(use_eager, cls, kw):
            torch.manual_seed(0)
            m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
            opt = cls(m.parameters(), **kw)
            for _ in range(4):
                opt.zero_grad(set_to_none=True)
                m(torch.randn(16, 4)).pow(2).mean().backward()
                eager.step(opt) if use_eager else opt.step()
            sd = opt.state_dict()
            opt.load_state_dict(sd)
            state = [t for s in sd["state"].values() for t in s.values() if torch.is_tensor(t)]
            return [p.detach().clone() for p in m.parameters()] + state

        mine = [run(True, cls, kw) for cls, kw in CASES]
        dynamo_before = "torch._dynamo" in sys.modules
        plain = [run(False, cls, kw) for cls, kw in CASES]
        same = [all(torch.equal(a, b) for a, b in zip(x, y)) for x, y in zip(mine, plain)]
        print(json.dumps({"dynamo_before": dynamo_before, "same": same,
                          "dynamo_after": "torch._dynamo" in sys.modules}))
        """
    )
    assert res["same"] == [True] * 5
    assert res["dynamo_before"] is False
    assert res["dynamo_after"] is True  # the plain path imports it: the check above can fail


def test_classic_run_imports_no_compiler(tmp_path: Path) -> None:
    """A short PPO and DQN run in one process: no ``torch._dynamo``."""
    res = _python(
        """
        import json, sys
        from advantage.cli import main
        for algo in ("ppo", "dqn"):
            assert main(["train", algo, "trainer.total_steps=600", "trainer.eval_episodes=1",
                         "trainer.tensorboard=false", "--quiet", f"trainer.run_dir=r-{algo}"]) == 0
        print(json.dumps({"dynamo": "torch._dynamo" in sys.modules}))
        """,
        cwd=tmp_path,
    )
    assert res == {"dynamo": False}


def test_side_by_side_evaluation_matches_one_at_a_time(tmp_path: Path) -> None:
    """Evaluation episodes played side by side (one batched forward pass per step) give the returns of
    the one-at-a-time loop: exactly for a discrete policy, to float rounding for a continuous one; more
    episodes than env copies run in waves, each from its own seed."""
    import gymnasium as gym
    import pytest

    import advantage
    from advantage.evaluation import envs_for, evaluate_policy

    fast = {"trainer.tensorboard": False, "trainer.plot": False, "trainer.eval_every": 0}
    for algo, env_id in (("dqn", "CartPole-v1"), ("ppo", "Pendulum-v1")):
        run = advantage.train(
            algo,
            quiet=True,
            **fast,
            **{"env.id": env_id, "trainer.total_steps": 1500, "trainer.run_dir": str(tmp_path / algo)},
        )
        policy = run.policy
        assert envs_for(policy, 10) == 10 and envs_for(policy, 10, deterministic=False) == 1
        envs = [gym.make(env_id) for _ in range(4)]
        one = evaluate_policy(policy, envs[0], 9, seed=3)
        many = evaluate_policy(policy, envs[0], 9, seed=3, more_envs=envs[1:])
        if algo == "dqn":
            assert one == many
        else:
            assert many["return_mean"] == pytest.approx(one["return_mean"], rel=1e-6)
            assert many["length_mean"] == one["length_mean"]
        # a different seed gives different episodes: the comparison above can fail
        assert evaluate_policy(policy, envs[0], 9, seed=4, more_envs=envs[1:]) != many


HEAVY = ("torch", "transformers", "advantage.algos.ppo")
# Not needed to list an environment algorithm's options either: arrays, environments, the config parser.
LISTING = ("numpy", "gymnasium", "omegaconf")


def test_list_and_config_error_import_no_training_code() -> None:
    """``advantage list``, ``advantage list ALGO`` and a config error read only the configs
    (:mod:`advantage.configs`): no torch, no transformers, no algorithm module (the records name their
    training functions, imported when a run starts); listing an environment algorithm imports no numpy,
    gymnasium or omegaconf either."""
    res = _python(
        f"""
        import contextlib, io, json, sys
        from advantage.cli import main
        heavy = {HEAVY + LISTING!r}
        out = {{}}
        for argv in (["train", "ppo", "trainer.total_stepz=5"], ["list"], ["list", "ppo"],
                     ["list", "dqn"], ["list", "sft"]):
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rc = main(argv)
            out[" ".join(argv)] = [rc, [m for m in heavy if m in sys.modules], err.getvalue()]
        print(json.dumps(out))
        """
    )
    for argv in ("list", "list ppo", "list dqn"):
        assert res[argv][:2] == [0, []], (argv, res[argv])
    rc, imported, _ = res["list sft"]  # reads its task's options: numpy and the parser, no torch
    assert rc == 0 and not set(imported) & set(HEAVY), imported
    rc, imported, err = res["train ppo trainer.total_stepz=5"]
    assert rc == 2 and imported == [], imported  # no numpy, gymnasium or OmegaConf either
    assert "unknown key trainer.total_stepz; did you mean trainer.total_steps?" in err


def test_env_ids_a_config_error_skips_are_checked_here() -> None:
    """A config whose env id is its algorithm's own default is not checked against Gymnasium (a config
    error in another section answers without importing it); every such default is checked here. An id
    the user sets is checked, together with every other problem."""
    import pytest

    from advantage.envs import check_env_config
    from advantage.errors import ConfigError
    from advantage.registry import all_algorithms
    from advantage.resolve import resolve_config

    checked = 0
    for name, algo in sorted(all_algorithms().items()):
        if not algo.uses_env:
            continue
        _, cfg = resolve_config(name, check_device=False)
        assert check_env_config(cfg.env) == [], (name, cfg.env.id)
        checked += 1
    assert checked > 20
    with pytest.raises(ConfigError) as e:
        resolve_config("ppo", None, {"env.id": "CartPol-v1", "trainer.total_stepz": 5})
    assert len(e.value.problems) == 2 and "CartPole-v1" in str(e.value)


def test_preference_task_names_match_the_tasks() -> None:
    """The config's copy of the preference tasks' names (kept out of the task modules' import) is theirs."""
    from advantage.configs.llm import PREFERENCE_TASK_NAMES
    from advantage.envs.text.preference import PREFERENCE_TASKS

    assert tuple(PREFERENCE_TASKS) == PREFERENCE_TASK_NAMES


def test_config_modules_map_names_to_the_modules_that_register_them() -> None:
    """``advantage.configs.MODULES`` (used to load one config module per run) names, for every
    registered algorithm, the module whose import registers it; checked module by module in a fresh
    interpreter, where nothing is registered yet."""
    res = _python(
        """
        import importlib, json
        from advantage import registry
        from advantage.configs import MODULES
        found = {}
        for module in sorted(set(MODULES.values())):
            before = set(registry.ALGORITHMS)
            importlib.import_module(f"advantage.configs.{module}")
            found.update(dict.fromkeys(set(registry.ALGORITHMS) - before, module))
        print(json.dumps({"found": found, "mapped": MODULES}))
        """
    )
    assert res["found"] == res["mapped"]


def test_tabular_run_imports_no_torch(tmp_path: Path) -> None:
    """A Q-table run saves its checkpoint with safetensors' numpy writer (the same bytes as the torch
    writer) and so never imports torch; its checkpoint loads and evaluates as before."""
    res = _python(
        """
        import json, sys
        from advantage.cli import main
        rc = main(["train", "q_learning", "env.id=FrozenLake-v1", "trainer.total_steps=1000",
                   "trainer.tensorboard=false", "--quiet", "trainer.run_dir=q"])
        torch_loaded = "torch" in sys.modules
        rc_eval = main(["eval", "q", "--episodes", "3", "--json"])
        print(json.dumps({"rc": [rc, rc_eval], "torch": torch_loaded}))
        """,
        cwd=tmp_path,
    )
    assert res == {"rc": [0, 0], "torch": False}
