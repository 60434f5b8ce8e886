"""trainer.kernels: which fast paths a run takes, validated like every option, written to config.yaml, in
force for the run's duration (and only then), for every algorithm that has a trainer section."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import advantage
from advantage import kernels
from advantage.cli import main
from advantage.errors import ConfigError
from advantage.registry import all_algorithms
from advantage.resolve import resolve_config


def test_the_modes_and_lists_parse():
    assert kernels.parse("fast") == frozenset(kernels.FAST_PATHS)
    assert kernels.parse("reference") == frozenset()
    assert kernels.parse("lm_forward, no_dynamo") == {"lm_forward", "no_dynamo"}


@given(st.text(max_size=40))
def test_any_other_value_is_one_clear_error(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = text.strip() in ("fast", "reference") or (names and all(n in kernels.FAST_PATHS for n in names))
    problems = kernels.problems(text)
    assert (problems == []) == bool(valid)
    if not valid:
        assert len(problems) == 1 and "allowed: fast, reference" in problems[0]
        assert len(problems[0]) < 600  # the value is echoed truncated, never whole


@pytest.mark.parametrize("algo", sorted(all_algorithms()))
def test_every_algorithm_has_the_option_and_checks_it(algo):
    try:
        _, cfg = resolve_config(algo)
        assert cfg.trainer.kernels == "fast"
    except ConfigError as e:  # an algorithm with a required option (ppo_rlhf's reward model)
        assert "kernels" not in str(e)
    with pytest.raises(ConfigError, match=r"kernels='bogus'"):
        resolve_config(algo, overrides={"trainer.kernels": "bogus"})


def test_a_bad_value_on_the_command_line_is_one_line_and_no_run(tmp_path, capsys):
    code = main(["train", "ppo", "trainer.kernels=fast,warp_drive", f"trainer.run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert code == 2 and "warp_drive" in err and "allowed: fast, reference" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_the_run_takes_its_option_records_it_and_restores_the_default(tmp_path, monkeypatch):
    seen = []
    import advantage.algos.ppo as ppo

    real = ppo.learn

    def spy(*args, **kwargs):
        seen.append({p for p in kernels.FAST_PATHS if kernels.enabled(p)})
        return real(*args, **kwargs)

    monkeypatch.setattr(ppo, "learn", spy)
    run_dir = tmp_path / "r"
    advantage.train(
        "ppo",
        quiet=True,
        **{
            "trainer.total_steps": 512,
            "algorithm.n_steps": 128,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
            "trainer.kernels": "reference",
            "trainer.run_dir": str(run_dir),
        },
    )
    assert seen and all(s == set() for s in seen)  # every fast path off during the run
    assert all(kernels.enabled(p) for p in kernels.FAST_PATHS)  # and back on after it
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["trainer"]["kernels"] == "reference"
