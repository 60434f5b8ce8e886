"""Other libraries' names (advantage.migration): the unknown-key message points from theirs to ours, every row
names keys that exist, docs/migration.md shows the module's table, and its command for each library trains
and evaluates (a tiny model folder of one's own stands in for ``my-model``: nothing is downloaded)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from advantage.config import describe
from advantage.errors import ConfigError
from advantage.migration import ALGORITHM_NAMES, LIBRARIES, NAMES, markdown
from advantage.registry import all_algorithms
from advantage.resolve import resolve_config

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migration.md"


def _error(algo: str, **over) -> str:
    with pytest.raises(ConfigError) as e:
        resolve_config(algo, overrides=over)
    return str(e.value)


@pytest.mark.parametrize(
    "algo, key, message",
    [
        (
            "ppo",
            "total_timesteps",
            "unknown key total_timesteps; SB3's total_timesteps is trainer.total_steps",
        ),
        ("ppo", "n_envs", "unknown key n_envs; SB3's n_envs is env.num_envs"),
        ("ppo", "env.n_envs", "unknown key env.n_envs for CartPole-v1; SB3's n_envs is env.num_envs"),
        (
            "grpo",
            "data.train_files",
            "verl's and EasyR1's data.train_files is data.path (with data.task=math; a file or a list)",
        ),
        ("grpo", "data.val_files", "verl's and EasyR1's data.val_files is data.validation_path"),
        ("grpo", "actor_rollout_ref.rollout.n", "verl's actor_rollout_ref.rollout.n is worker.rollout.n"),
        ("grpo", "actor_rollout_ref.actor.entropy_coeff", "verl's actor_rollout_ref.* is worker.*"),
        ("grpo", "trainer.total_epochs", "verl's trainer.total_epochs is trainer.total_steps (steps here"),
        ("grpo", "trainer.total_episodes", "EasyR1's trainer.total_episodes is trainer.total_steps"),
        ("sft", "num_train_epochs", "TRL's num_train_epochs is trainer.total_steps"),
        ("ppo", "batch_size", "SB3's batch_size is algorithm.minibatch_size"),
        ("dqn", "batch_size", "SB3's batch_size is algorithm.batch_size"),
        ("ppo", "num_minibatches", "CleanRL's num_minibatches is algorithm.minibatch_size (a size here"),
        ("dqn", "n_timesteps", "rl-zoo's n_timesteps is trainer.total_steps"),
    ],
)
def test_another_librarys_name_points_to_ours(algo, key, message):
    assert message in _error(algo, **{key: 1})


def test_their_algorithm_names():
    assert "unknown algorithm 'PPO'; SB3's PPO is ppo (available:" in _error("PPO")
    assert "TRL's GRPOTrainer is grpo" in _error("GRPOTrainer")
    assert "did you mean q_learning? (algorithm names are lower case)" in _error("Q_Learning")
    for theirs, (library, ours) in ALGORITHM_NAMES.items():
        assert library in LIBRARIES and ours in all_algorithms(), theirs


def _keys(algo: str) -> set[str]:
    return {k for k, _, _ in describe(all_algorithms()[algo].config)}


def test_every_row_names_our_keys_and_the_message_finds_it():
    """Each row: a library we list, our keys exist (an algorithm's, or the math task's data.* options),
    and typing their name gives the row's pointer for an algorithm that has our key."""
    from advantage.envs.text.registry import task_options

    algos = {name: _keys(name) for name in all_algorithms()}
    math_options = {f"data.{k}" for k in task_options("math")}
    for row in NAMES:
        assert row.library in LIBRARIES, row
        for ours in row.ours:
            section = ours.endswith(".*") and any(
                k.startswith(ours[:-1]) for ks in algos.values() for k in ks
            )
            assert section or ours in math_options or any(ours in ks for ks in algos.values()), row
        first = row.ours[0]
        algo = (
            "sft"
            if first in math_options
            else next(
                a
                for a, ks in algos.items()
                if first in ks or (first.endswith(".*") and any(k.startswith(first[:-1]) for k in ks))
            )
        )
        typed = row.theirs[:-1] + "anything" if row.theirs.endswith(".*") else row.theirs
        message = _error(algo, **{typed: 1, **({"data.task": "math"} if algo in _LM else {})})
        assert f"{row.library}'s" in message and f" is {row.ours[0]}" in message, (row, message)


_LM = {"sft", "dpo", "reward_model", "grpo", "ppo_rlhf"}


def test_the_page_shows_the_modules_table():
    text = PAGE.read_text()
    start, end = "<!-- names: advantage.migration.markdown -->\n", "<!-- /names -->"
    assert text.split(start, 1)[1].split(end, 1)[0] == markdown()
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "migration.md" in nav


def _page_commands() -> list[str]:
    """The `advantage train` commands of the page's "One command each" section, one per library."""
    section = PAGE.read_text().split("## One command each", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for b in blocks for line in b.splitlines() if line.startswith("advantage train")]


def test_the_page_has_a_command_for_each_library():
    section = PAGE.read_text().split("## One command each", 1)[1].split("\n## ", 1)[0]
    for library in ("Stable-Baselines3", "rl-baselines3-zoo", "CleanRL", "TRL", "verl", "EasyR1"):
        assert f"**{library}.**" in section
    assert len(_page_commands()) == 6


@pytest.fixture(scope="module")
def my_model(tmp_path_factory):
    """The reader's own model folder (``my-model`` on the page): a tiny Qwen2 with a BPE tokenizer."""
    from advantage.envs.text.samples import word_problems
    from advantage.lm.tiny_folder import save_tiny_folder

    texts = [f"{p['question']} {p['reasoning']} \\boxed{{{p['answer']}}}" for p in word_problems(300, seed=1)]
    return save_tiny_folder(tmp_path_factory.mktemp("model") / "my-model", texts)


# Shorter runs than the page's (what each command trains is the page's; how long is not the point here)
SHORT = {
    "trainer.total_steps": 2,
    "trainer.tensorboard": False,
    "trainer.plot": False,
    "trainer.eval_episodes": 2,
}
SHORT_LM = {"data.rollout_batch_size": 2, "worker.actor.mini_batch_size": 2, "data.max_response_length": 8}


@pytest.mark.slow
@pytest.mark.parametrize("command", _page_commands(), ids=lambda c: c.split()[2])
def test_the_pages_command_trains_and_evaluates(command, tmp_path, my_model, monkeypatch):
    from advantage.cli import _split_algo, build_parser, main

    monkeypatch.chdir(ROOT)  # the page's paths are the repository's
    argv = shlex.split(command.replace("my-model", str(my_model)))[1:]
    ns, extra = build_parser().parse_known_args(argv)
    algo, rest = _split_algo([*ns.args, *extra])
    run_dir = tmp_path / "run"
    over = [*rest, *(f"{k}={v}" for k, v in SHORT.items()), f"trainer.run_dir={run_dir}"]
    if algo == "grpo":
        over += [f"{k}={v}" for k, v in SHORT_LM.items()]
    config = ["--config", ns.config] if ns.config else []
    assert main(["train", algo, *config, "--quiet", *over]) == 0
    import advantage

    assert advantage.Run.load(run_dir).step >= 2
    assert main(["eval", str(run_dir), "--episodes", "2"] if algo not in _LM else ["eval", str(run_dir)]) == 0
