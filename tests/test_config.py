"""Config: sections, YAML, dotted overrides, presets, validation with every problem listed at once."""

import pytest

from advantage.config import to_dict
from advantage.config_sources import flatten, nest, parse_overrides
from advantage.errors import ConfigError
from advantage.resolve import config_yaml, resolve_config


def test_defaults_and_dotted_overrides():
    spec, cfg = resolve_config("q_learning", overrides={"algorithm.gamma": 0.9, "env.is_slippery": False})
    assert spec.name == "q_learning"
    assert cfg.algorithm.gamma == 0.9
    assert cfg.env.kwargs == {"is_slippery": False}
    assert cfg.trainer.seed == 0


def test_cli_strings_are_parsed_as_yaml_scalars():
    over = parse_overrides(["algorithm.gamma=0.9", "env.is_slippery=false", "trainer.total_steps=20000"])
    assert over == {
        "algorithm": {"gamma": 0.9},
        "env": {"is_slippery": False},
        "trainer": {"total_steps": 20000},
    }


def test_override_without_equals_is_an_error():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["algorithm.gamma"])


def test_int_accepted_for_float_and_integral_float_for_int():
    _, cfg = resolve_config("q_learning", overrides={"algorithm.gamma": 1, "trainer.total_steps": 1000.0})
    assert cfg.algorithm.gamma == 1.0 and isinstance(cfg.algorithm.gamma, float)
    assert cfg.trainer.total_steps == 1000 and isinstance(cfg.trainer.total_steps, int)


def test_every_problem_reported_at_once():
    with pytest.raises(ConfigError) as info:
        resolve_config(
            "q_learning",
            overrides={
                "algorithm.gama": 0.9,  # unknown, close to gamma
                "algorithm.alpha": 1.5,  # out of range
                "trainer.total_steps": "many",  # wrong type
                "trainer.progress": "fancy",  # not a choice
                "trainer.seed": True,  # bool is not an int
                "env.is_slipery": True,  # unknown env kwarg
            },
        )
    problems = info.value.problems
    assert len(problems) == 6, problems
    text = "\n".join(problems)
    assert "unknown key algorithm.gama; did you mean algorithm.gamma?" in text
    assert "algorithm.alpha must be in (0, 1], got 1.5" in text
    assert "trainer.total_steps must be an integer, got 'many' (str)" in text
    assert "trainer.progress must be one of auto, bar, lines, none; got 'fancy'" in text
    assert "trainer.seed must be an integer, got True" in text
    assert "unknown key env.is_slipery for FrozenLake-v1; did you mean env.is_slippery?" in text


def test_env_kwarg_type_checked_against_constructor():
    with pytest.raises(ConfigError, match="env.is_slippery must be true or false, got 'maybe'"):
        resolve_config("q_learning", overrides={"env.is_slippery": "maybe"})


def test_cross_field_check():
    with pytest.raises(
        ConfigError, match=r"algorithm.epsilon_end \(0.5\) must be <= algorithm.epsilon_start"
    ):
        resolve_config("q_learning", overrides={"algorithm.epsilon_start": 0.1, "algorithm.epsilon_end": 0.5})


def test_unknown_env_suggests_close_names():
    with pytest.raises(ConfigError, match="did you mean FrozenLake-v1"):
        resolve_config("q_learning", overrides={"env.id": "FrozenLak-v1"})
    with pytest.raises(ConfigError, match="available versions: FrozenLake-v1"):
        resolve_config("q_learning", overrides={"env.id": "FrozenLake-v0"})


def test_unknown_algorithm_suggests():
    with pytest.raises(ConfigError, match="did you mean q_learning"):
        resolve_config("q_learnin")


def test_presets_and_unknown_preset():
    _, cfg = resolve_config("q_learning", overrides={"preset": "frozenlake"})
    assert cfg.env.kwargs["is_slippery"] is False
    # a later override beats the preset
    _, cfg = resolve_config("q_learning", overrides={"preset": "frozenlake", "trainer.total_steps": 5})
    assert cfg.trainer.total_steps == 5
    with pytest.raises(ConfigError, match="did you mean frozenlake"):
        resolve_config("q_learning", overrides={"preset": "frozenlak"})


def _file(tmp_path, text):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return f


def test_preset_on_the_command_line_applies_over_the_config_file(tmp_path):
    """Every pair of the four sources: the file, the file's preset, the command line's preset and the
    command line's keys (docs/concepts.md, "Where values come from")."""
    # file over the file's preset
    f = _file(tmp_path, "preset: frozenlake\ntrainer:\n  total_steps: 7\n")
    _, cfg = resolve_config("q_learning", f)
    assert cfg.trainer.total_steps == 7 and cfg.env.kwargs["is_slippery"] is False
    # the command line's preset over the file, for the keys it sets; the file's other keys stay
    f = _file(tmp_path, "algorithm:\n  gamma: 0.8\ntrainer:\n  total_steps: 7\n")
    _, cfg = resolve_config("q_learning", f, {"preset": "frozenlake"})
    assert cfg.trainer.total_steps == 20000 and cfg.algorithm.gamma == 0.8
    assert cfg.__dict__["_preset_note"] == (  # env.id: FrozenLake-v1 is q_learning's default already
        "preset frozenlake over the config file: env.is_slippery (unset) -> False, "
        "trainer.total_steps 7 -> 20000"
    )
    # the command line's preset replaces the file's preset (taxi's alpha=0.2 is not applied)
    f = _file(tmp_path, "preset: taxi\n")
    _, cfg = resolve_config("q_learning", f, {"preset": "frozenlake"})
    assert cfg.env.id == "FrozenLake-v1" and cfg.trainer.total_steps == 20000
    assert cfg.algorithm.alpha == resolve_config("q_learning")[1].algorithm.alpha != 0.2
    # the command line's keys over its preset, over the file and over the file's preset
    f = _file(tmp_path, "preset: taxi\ntrainer:\n  total_steps: 7\n")
    _, cfg = resolve_config("q_learning", f, {"preset": "frozenlake", "trainer.total_steps": 5})
    assert cfg.trainer.total_steps == 5
    assert "trainer.total_steps" not in cfg.__dict__["_preset_note"]  # the typed key set it, not the preset
    _, cfg = resolve_config("q_learning", f, {"trainer.total_steps": 5, "algorithm.alpha": 0.3})
    assert cfg.trainer.total_steps == 5 and cfg.algorithm.alpha == 0.3 and cfg.env.id == "Taxi-v4"
    # without a file a preset is below the keys, and there is nothing to report
    _, cfg = resolve_config("q_learning", overrides={"preset": "frozenlake", "trainer.total_steps": 5})
    assert cfg.trainer.total_steps == 5 and cfg.__dict__["_preset_note"] == ""


def test_a_saved_config_with_a_preset_prints_what_the_preset_changed(tmp_path, capsys):
    from advantage.cli import main

    run = tmp_path / "first"
    over = ["trainer.total_steps=50", "trainer.eval_episodes=1", "trainer.tensorboard=false"]
    over.append("trainer.plot=false")
    assert main(["train", "q_learning", "env.id=FrozenLake-v1", f"trainer.run_dir={run}", *over]) == 0
    capsys.readouterr()
    second = tmp_path / "second"
    args = ["train", "q_learning", "--config", str(run / "config.yaml"), "preset=frozenlake", *over]
    assert main([*args, f"trainer.run_dir={second}"]) == 0
    out = capsys.readouterr().out
    assert "preset frozenlake over the config file: env.is_slippery" in out
    assert "trainer.total_steps" not in out.split("preset frozenlake", 1)[1].splitlines()[0]  # typed after it
    assert "is_slippery: false" in (second / "config.yaml").read_text()


def test_yaml_file_and_round_trip(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algo: sarsa\nalgorithm:\n  gamma: 0.8\nenv:\n  id: CliffWalking-v1\n")
    spec, cfg = resolve_config(None, f)
    assert spec.name == "sarsa" and cfg.algorithm.gamma == 0.8 and cfg.env.id == "CliffWalking-v1"
    saved = tmp_path / "saved.yaml"
    saved.write_text(config_yaml(spec, cfg))
    spec2, cfg2 = resolve_config(None, saved)
    assert spec2.name == "sarsa" and to_dict(cfg2) == to_dict(cfg)
    # command-line overrides beat the file
    _, cfg3 = resolve_config(None, f, {"algorithm.gamma": 0.5})
    assert cfg3.algorithm.gamma == 0.5


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        resolve_config("q_learning", bad)
    with pytest.raises(ConfigError, match="no such file"):
        resolve_config("q_learning", tmp_path / "missing.yaml")
    other = tmp_path / "other.yaml"
    other.write_text("algo: sarsa\n")
    with pytest.raises(ConfigError, match="for algorithm 'sarsa'"):
        resolve_config("q_learning", other)


def test_env_var_interpolation(monkeypatch, tmp_path):
    monkeypatch.setenv("ADV_TEST_GAMMA", "0.7")
    f = tmp_path / "c.yaml"
    f.write_text("algorithm:\n  gamma: ${oc.decode:${oc.env:ADV_TEST_GAMMA}}\n")
    _, cfg = resolve_config("q_learning", f)
    assert cfg.algorithm.gamma == 0.7


def test_nest_flatten_inverse():
    d = {"a.b": 1, "a.c.d": 2, "e": 3}
    assert flatten(nest(d)) == d


def test_example_configs_are_valid(monkeypatch):
    from pathlib import Path

    root = Path(__file__).parent.parent
    monkeypatch.chdir(root)  # examples are run from the repository root (data.path=examples/data/...)
    examples = sorted((root / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        # A pipeline example starts from another example's run folder, which does not exist here.
        text = path.read_text()
        key = "worker.actor.model.path" if "\nworker:" in text else "model.path"
        over = {key: None} if "runs/" in text.split("path:")[-1][:40] else {}
        if "reward:\n    model: runs/" in path.read_text():  # chains from a reward-model run: checked early
            with pytest.raises(ConfigError) as info:
                resolve_config(None, path, over)
            assert info.value.problems == [
                f"worker.reward.model={'runs/reward_model_synthetic'!r} does not exist"
            ]
            continue
        spec, cfg = resolve_config(None, path, over)
        assert spec.name and (cfg.env.id if spec.uses_env else cfg.data.task)


def test_plain_merge_is_omegaconf_merge() -> None:
    """Config layers without interpolations merge without OmegaConf (a config error answers faster); on
    random trees of dicts, lists and scalars the result equals OmegaConf's, value and type, and anything
    else (an interpolation, OmegaConf's ``???``, a value changing kind) is left to OmegaConf."""
    import random

    from omegaconf import OmegaConf

    from advantage.config_sources import _merge_plain, merge

    rng = random.Random(0)

    def tree(depth: int) -> object:
        r = rng.random()
        if depth < 3 and r < 0.35:
            return {rng.choice("abcde"): tree(depth + 1) for _ in range(rng.randint(0, 3))}
        if depth < 3 and r < 0.45:
            return [tree(depth + 1) for _ in range(rng.randint(0, 2))]
        return rng.choice([None, True, False, 0, 3, 2.5, "x", "y"])

    compared = 0
    for _ in range(3000):
        trees = tuple({rng.choice("abc"): tree(1) for _ in range(3)} for _ in range(rng.randint(2, 4)))
        mine = _merge_plain(trees)
        if mine is None:
            continue
        ref = OmegaConf.to_container(OmegaConf.merge(*[OmegaConf.create(t) for t in trees]), resolve=True)
        assert repr(mine) == repr(ref), trees
        compared += 1
    assert compared > 500
    assert _merge_plain(({"a": 1}, {"a": "${b}"})) is None
    assert _merge_plain(({"a": 1}, {"a": "???"})) is None
    assert _merge_plain(({"a": {"b": 1}}, {"a": 2})) is None
    assert merge({"a": 1, "b": 2}, {"a": "${b}"}) == {"a": 2, "b": 2}  # through OmegaConf


def test_simple_overrides_parse_as_omegaconf_does() -> None:
    """``key=value`` items of plain numbers, booleans and words are parsed without OmegaConf, to what its
    dotlist parser gives (value and type); YAML's other spellings (``yes``, ``0x1F``, ``1_000``, ``.inf``,
    ``~``, lists, quotes, interpolations) and a key that is also a prefix go to OmegaConf."""
    from omegaconf import OmegaConf

    from advantage.config_sources import _simple_overrides, parse_overrides

    values = [
        *("5", "0", "-3", "-0", "1.5", "-2.25", "1e-3", "1E5", "1.0e-4", "1.5e+3", "3.0"),
        *("true", "True", "false", "False", "CartPole-v1", "runs/a", "examples/a.yaml", "a-b_c", "_x"),
        *("007", "1_000", "0x1F", ".5", "1.", "TRUE", "yes", "no", "on", "off", "y", "N", "null", "Null"),
        *("~", "", "x:y", "12:30", "'q'", "[1,2]", "{a: 1}", "${x}", ".inf", "nan", "-inf", "a b", "+5"),
    ]
    fast = 0
    for v in values:
        items = [f"algorithm.x={v}", "trainer.seed=3"]
        mine = _simple_overrides(items)
        if mine is None:
            continue
        fast += 1
        ref = OmegaConf.to_container(OmegaConf.from_dotlist(items), resolve=False)
        assert repr(mine) == repr(ref), v
    assert fast == 20
    assert _simple_overrides(["a.b=1", "a=2"]) is None
    assert parse_overrides(["a=[1, 2]", "b=yes"]) == {"a": [1, 2], "b": True}  # through OmegaConf
