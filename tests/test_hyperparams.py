"""Tuned hyperparameters per environment (advantage/hyperparams/*.yml): shipped entries are valid, the
CartPole entries hold the tuned values, precedence, bad files, the record in config.yaml."""

import json
from pathlib import Path

import pytest
import yaml

from advantage.cli import main
from advantage.config import build, to_dict
from advantage.config_sources import flatten, merge, nest
from advantage.errors import ConfigError
from advantage.hyperparams import DIR, load_table, shipped_file
from advantage.registry import get_algorithm
from advantage.resolve import config_yaml, resolve_config

CLASSIC = ("ppo", "a2c", "trpo", "dqn", "ddpg", "td3", "sac")


@pytest.mark.parametrize("algo", CLASSIC)
def test_every_shipped_entry_is_valid_and_cited(algo):
    spec = get_algorithm(algo)
    path = shipped_file(algo)
    assert path is not None and path.parent == DIR
    table = load_table(path, spec.config)
    assert table, algo
    for env_id, entry in table.items():
        assert "rl-baselines3-zoo" in entry.source or "our own tuning" in entry.source, env_id
        # the entry on top of the general defaults passes every check, cross-field ones included
        _, problems = build(spec.config, merge(nest(dict(spec.defaults)), nest(dict(entry.overrides))))
        assert problems == [], (algo, env_id, problems)


def test_required_envs_have_entries():
    def ids(algo):
        return set(load_table(shipped_file(algo), get_algorithm(algo).config))

    common = {"MountainCar-v0", "LunarLander-v3", "Acrobot-v1", "CartPole-v1"}
    assert common <= ids("ppo") and common <= ids("dqn")
    cont = {"Pendulum-v1", "MountainCarContinuous-v0", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"}
    assert cont <= ids("ppo") and cont <= ids("sac") and cont <= ids("td3")
    assert {"ALE/Pong-v5", "ALE/Breakout-v5"} <= ids("dqn")


def test_cartpole_entries_hold_the_tuned_values_and_none_gives_general_defaults():
    _, ppo = resolve_config("ppo")
    a = ppo.algorithm
    assert (ppo.env.num_envs, a.n_steps, a.minibatch_size, a.gamma, a.gae_lambda, a.learning_rate) == (
        8,
        32,
        256,
        0.98,
        0.8,
        1e-3,
    )
    assert (a.n_epochs, a.lr_schedule, a.clip_schedule) == (20, "linear", "linear")
    assert (ppo.model.activation, ppo.model.shared_trunk, ppo.trainer.total_steps) == ("tanh", False, 100_000)
    # preset=cartpole: tuned for wall-clock time to 475 (benchmarks/cartpole_ppo.py)
    _, fast = resolve_config("ppo", None, {"preset": "cartpole"})
    fast_values = (fast.model.activation, fast.model.shared_trunk, fast.algorithm.learning_rate)
    assert fast_values == ("relu", True, 2e-3)
    _, gen = resolve_config("ppo", None, {"hyperparams": "none"})
    assert (gen.algorithm.gamma, gen.algorithm.gae_lambda, gen.algorithm.n_steps) == (0.99, 0.95, 128)

    _, dqn = resolve_config("dqn")
    d = dqn.algorithm
    assert (d.learning_rate, d.target_update_interval, d.train_freq, d.gradient_steps, d.batch_size) == (
        4e-3,
        10,
        256,
        64,
        128,
    )
    assert (dqn.env.num_envs, d.n_step, d.exploration_fraction, dqn.model.hidden_sizes) == (
        16,
        3,
        0.08,
        [128, 128],
    )
    _, gen = resolve_config("dqn", None, {"hyperparams": "none"})
    assert (gen.algorithm.learning_rate, gen.algorithm.train_freq, gen.algorithm.gradient_steps) == (
        1e-4,
        4,
        1,
    )
    assert (gen.algorithm.target_update_interval, gen.env.num_envs) == (10_000, 1)


def _user_file(tmp_path: Path, entries: dict) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path


def test_precedence_entry_below_preset_file_and_keys(tmp_path):
    f = _user_file(
        tmp_path,
        {
            "CartPole-v1": {
                "source": "a test",
                "algorithm.gamma": 0.5,  # the preset sets it: the preset wins
                "algorithm.ent_coef": 0.3,  # nobody else sets it: the entry's value holds
                "algorithm.vf_coef": 0.9,  # the --config file sets it
                "algorithm.max_grad_norm": 2.0,  # an explicit key sets it
            }
        },
    )
    over = {"hyperparams": str(f), "preset": "cartpole", "algorithm.max_grad_norm": 1.0}
    _, cfg = resolve_config("ppo", {"algorithm": {"vf_coef": 0.1}}, over)
    a = cfg.algorithm
    assert (a.gamma, a.ent_coef, a.vf_coef, a.max_grad_norm) == (0.98, 0.3, 0.1, 1.0)
    # the shipped entry for the env picked by a key
    _, cfg = resolve_config("ppo", None, {"env.id": "Acrobot-v1"})
    assert (cfg.env.num_envs, cfg.algorithm.n_steps, cfg.algorithm.normalize_obs) == (16, 256, True)
    _, cfg = resolve_config("ppo", None, {"env.id": "Acrobot-v1", "algorithm.n_steps": 64})
    assert cfg.algorithm.n_steps == 64


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"source": "x", "algorithm.gama": 0.9}, "algorithm.gama"),
        ({"source": "x", "algorithm.n_steps": "many"}, "algorithm.n_steps"),
        ({"source": "x", "model": {"hidden_sizes": "big"}}, "model.hidden_sizes"),
        ({"algorithm.gamma": 0.9}, "source"),
    ],
)
def test_bad_entry_names_file_env_and_key(tmp_path, entry, key):
    f = _user_file(tmp_path, {"Acrobot-v1": entry})
    with pytest.raises(ConfigError) as e:
        resolve_config("ppo", None, {"hyperparams": str(f), "env.id": "Acrobot-v1"})
    msg = str(e.value)
    assert str(f) in msg and "Acrobot-v1" in msg and key in msg, msg


def test_missing_file_and_env_without_entry(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        resolve_config("ppo", None, {"hyperparams": str(tmp_path / "nope.yaml")})
    _, cfg = resolve_config("ppo", None, {"env.id": "CartPole-v0"})
    note = cfg.__dict__["_hyperparams"][1]
    assert "no entry for CartPole-v0" in note and "general defaults" in note
    assert cfg.algorithm.n_steps == 128


@pytest.mark.parametrize("over", [{"env.id": "Acrobot-v1"}, {"env.id": "Acrobot-v1", "hyperparams": "none"}])
def test_saved_config_records_the_entry_and_reproduces_the_run(tmp_path, over):
    spec, cfg = resolve_config("ppo", None, dict(over))
    text = config_yaml(spec, cfg)
    saved = yaml.safe_load(text)
    if "hyperparams" in over:
        assert saved["hyperparams"] == "none"
    else:
        assert saved["hyperparams"]["env_id"] == "Acrobot-v1"
        assert saved["hyperparams"]["file"] == "advantage/hyperparams/ppo.yml"
        assert "rl-baselines3-zoo" in saved["hyperparams"]["source"]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    spec2, again = resolve_config(None, path)
    assert flatten(to_dict(again)) == flatten(to_dict(cfg))
    assert config_yaml(spec2, again) == text


def test_list_shows_env_ids_with_entries(capsys):
    assert main(["list", "ppo"]) == 0
    out = capsys.readouterr().out
    assert "Acrobot-v1" in out and "HalfCheetah-v5" in out


def test_train_prints_the_entry(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [
        "trainer.total_steps=256",
        "trainer.eval_episodes=1",
        "trainer.progress=none",
        "trainer.tensorboard=false",
        "trainer.run_dir=r",
    ]
    assert main(["train", "ppo", *args]) == 0
    out = capsys.readouterr().out
    assert "hyperparams: CartPole-v1 from advantage/hyperparams/ppo.yml (source: rl-baselines3-zoo" in out
    assert yaml.safe_load(Path("r/config.yaml").read_text())["hyperparams"]["env_id"] == "CartPole-v1"


def test_quiet_keeps_the_hyperparams_line_as_the_docs_say(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [
        "trainer.total_steps=64",
        "trainer.eval_episodes=1",
        "trainer.tensorboard=false",
        "trainer.run_dir=r",
    ]
    assert main(["train", "ppo", "--quiet", *args]) == 0
    assert "hyperparams: CartPole-v1 from advantage/hyperparams/ppo.yml" in capsys.readouterr().out
    doc = (Path(__file__).resolve().parents[1] / "docs" / "hyperparams.md").read_text()
    assert "`--quiet` keeps these lines" in doc and "`--quiet` prints none" not in doc


def test_a_saved_config_on_another_env_takes_that_envs_entry(tmp_path):
    """A CartPole run's config.yaml with env.id=Acrobot-v1: the CartPole entry's values (and the ones it
    left at their defaults that Acrobot's entry sets) leave the file, Acrobot's entry applies and is
    recorded, as for a fresh Acrobot run; a value the user changed in the file stays."""
    spec, cartpole = resolve_config("ppo", None, {"algorithm.vf_coef": 0.7})
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml(spec, cartpole))
    _, moved = resolve_config("ppo", path, {"env.id": "Acrobot-v1"})
    _, fresh = resolve_config("ppo", None, {"env.id": "Acrobot-v1", "algorithm.vf_coef": 0.7})
    assert flatten(to_dict(moved)) == flatten(to_dict(fresh))
    record, note = moved.__dict__["_hyperparams"]
    assert record["env_id"] == "Acrobot-v1"
    assert note.startswith("hyperparams: the config file was tuned for CartPole-v1; env.id is Acrobot-v1")
    assert "algorithm.n_steps" in note and "Acrobot-v1 from advantage/hyperparams/ppo.yml" in note
    # the same env: the file reproduces its run, nothing is re-resolved
    _, same = resolve_config("ppo", path)
    assert flatten(to_dict(same)) == flatten(to_dict(cartpole)) and same.__dict__["_hyperparams"][1] == ""


def test_docs_list_every_shipped_entry():
    from advantage.hyperparams import shipped_env_ids

    text = (Path(__file__).parents[1] / "docs" / "hyperparams.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2] for line in text.splitlines() if "| `" in line}
    for algo in CLASSIC:
        assert [e.strip() for e in rows[algo].split(",")] == list(shipped_env_ids(algo)), algo


@pytest.mark.slow
def test_zoo_suite_quick_on_one_row(tmp_path):
    # The suite's smoke run on its cheapest row and one variant: two worker processes (SB3, advantage).
    import subprocess
    import sys

    pytest.importorskip("stable_baselines3")
    script = ["-m", "benchmarks.zoo_suite"]
    root = Path(__file__).parents[1]
    log = tmp_path / "runs.jsonl"
    args = ["--quick", "--rows", "dqn-CartPole-v1", "--variants", "zoo", "--out", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, *script, *args, "--log", str(log)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(log.read_text().splitlines()) == 2  # one finished run per line, appended as it ends
    # A second invocation with the same log runs nothing again and reports what the log holds.
    again = subprocess.run(
        [sys.executable, *script, *args, "--log", str(log)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and '"score"' not in again.stdout, again.stdout[-2000:]
    assert len(log.read_text().splitlines()) == 2
    data = json.loads((tmp_path / "zoo_suite_quick.json").read_text())
    assert {(r["lib"], r["variant"]) for r in data["results"]} == {("sb3", "zoo"), ("advantage", "zoo")}
    assert all("score" in r for r in data["results"]), data["results"]
    ours = next(r for r in data["results"] if r["lib"] == "advantage")
    assert ours["eval_seed"] == 10_000 and "score_own_seeds" in ours  # SB3's evaluation start states
    md = (tmp_path / "zoo_suite_quick.md").read_text()
    assert "SMOKE RUN" in md and "dqn-CartPole-v1" in md and (tmp_path / "zoo_suite_quick.png").exists()
    # A logged run of ours made with another config (an entry tuned since) is stale: only it runs again.
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for r in lines:
        if r["lib"] == "advantage":
            r["config_hash"] = "tuned-since"
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    third = subprocess.run(
        [sys.executable, *script, *args, "--log", str(log)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert third.returncode == 0, third.stderr[-2000:]
    rerun = [json.loads(line) for line in third.stdout.splitlines() if '"score"' in line]
    assert [r["lib"] for r in rerun] == ["advantage"] and rerun[0]["config_hash"] != "tuned-since"
    # --again runs both libraries once more (a re-timing); the report keeps the newer runs.
    fourth = subprocess.run(
        [sys.executable, *script, *args, "--log", str(log), "--again"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fourth.returncode == 0, fourth.stderr[-2000:]
    newer = [json.loads(line) for line in fourth.stdout.splitlines() if '"score"' in line]
    assert [r["lib"] for r in newer] == ["sb3", "advantage"] and len(log.read_text().splitlines()) == 5
    data = json.loads((tmp_path / "zoo_suite_quick.json").read_text())
    assert sorted(r["train_seconds"] for r in data["results"]) == sorted(r["train_seconds"] for r in newer)


def test_zoo_suite_table_is_the_report_of_its_log(tmp_path):
    """``benchmarks/results/zoo_suite.md`` (quoted by docs/hyperparams.md) is what ``--report-only`` writes
    from the committed run log with today's entries and defaults: a run of ours made with a config that
    has changed since drops out of the report, so a stale table fails here."""
    import subprocess
    import sys

    pytest.importorskip("matplotlib")
    root = Path(__file__).parents[1]
    results = root / "benchmarks" / "results"
    args = ["--report-only", "--out", str(tmp_path), "--log", str(results / "zoo_suite_runs.jsonl")]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.zoo_suite", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "zoo_suite.md").read_text() == (results / "zoo_suite.md").read_text()
    assert "zoo_suite.md" in (root / "docs" / "hyperparams.md").read_text()
