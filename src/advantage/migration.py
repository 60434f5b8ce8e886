"""The names users of other RL libraries type, and ours: one table for the unknown-key message ("SB3's
total_timesteps is trainer.total_steps") and for the docs page ``docs/migration.md``, which shows it
(``tests/test_migration.py`` checks the page against :data:`NAMES`).

A name from another library is the first thing a new user types, and a plain "unknown key" (or a
spelling suggestion such as ``n_envs`` → ``env``) sends them to the option list to guess. Each row maps
one of their names, as they write it (a constructor argument, a script flag, a dotted Hydra key), to our
dotted key(s); the message names the first of ours that the algorithm has (SB3's ``batch_size`` is
``algorithm.minibatch_size`` for PPO and ``algorithm.batch_size`` for DQN).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ALGORITHM_NAMES", "LIBRARIES", "NAMES", "Name", "algorithm_hint", "hint", "leaves", "markdown"]

LIBRARIES = ("SB3", "rl-zoo", "CleanRL", "TRL", "verl", "EasyR1")


@dataclass(frozen=True)
class Name:
    """One name of another library and ours.

    Attributes:
        library: one of :data:`LIBRARIES`.
        theirs: their name as typed: a bare argument (``total_timesteps``) matches that key in any
            section (``env.n_envs`` too); a dotted one (``actor_rollout_ref.rollout.n``) matches exactly,
            or as a prefix when it ends in ``.*``.
        ours: our dotted keys, in order of preference; the first one the algorithm has is named (one
            ending in ``.*`` stands for a section).
        note: what differs beyond the name (units, a product of two of theirs), said after it.
    """

    library: str
    theirs: str
    ours: tuple[str, ...]
    note: str = ""


def _n(library: str, theirs: str, *ours: str, note: str = "") -> Name:
    return Name(library, theirs, ours, note)


_LR = ("algorithm.learning_rate", "worker.actor.learning_rate")
_MICRO = ("algorithm.micro_batch_size", "worker.actor.micro_batch_size")
_MODEL = ("model.path", "worker.actor.model.path")

NAMES: tuple[Name, ...] = (
    # Stable-Baselines3: constructor arguments and learn()
    _n("SB3", "total_timesteps", "trainer.total_steps"),
    _n("SB3", "n_envs", "env.num_envs"),
    _n("SB3", "learning_rate", *_LR),
    _n("SB3", "batch_size", "algorithm.minibatch_size", "algorithm.batch_size"),
    _n("SB3", "n_epochs", "algorithm.n_epochs"),
    _n("SB3", "n_steps", "algorithm.n_steps"),
    _n("SB3", "gae_lambda", "algorithm.gae_lambda"),
    _n("SB3", "clip_range", "algorithm.clip_range"),
    _n("SB3", "ent_coef", "algorithm.ent_coef"),
    _n("SB3", "vf_coef", "algorithm.vf_coef"),
    _n("SB3", "target_kl", "algorithm.target_kl"),
    _n("SB3", "exploration_initial_eps", "algorithm.epsilon_start"),
    _n("SB3", "exploration_final_eps", "algorithm.epsilon_end"),
    _n("SB3", "policy_kwargs", "model.hidden_sizes", "model.actor_hidden", note="net_arch is a model key"),
    _n("SB3", "net_arch", "model.hidden_sizes", "model.actor_hidden"),
    _n("SB3", "verbose", "trainer.progress"),
    # rl-baselines3-zoo: hyperparams/*.yml keys and train.py flags
    _n("rl-zoo", "n_timesteps", "trainer.total_steps"),
    _n("rl-zoo", "normalize", "algorithm.normalize_obs", note="and algorithm.normalize_reward"),
    _n("rl-zoo", "eval_freq", "trainer.eval_every"),
    _n("rl-zoo", "eval_episodes", "trainer.eval_episodes"),
    _n("rl-zoo", "n_eval_episodes", "trainer.eval_episodes"),
    _n("rl-zoo", "save_freq", "trainer.checkpoint_every"),
    _n("rl-zoo", "env", "env.id", note="--env"),
    # CleanRL: the scripts' Args
    _n("CleanRL", "env_id", "env.id"),
    _n("CleanRL", "num_envs", "env.num_envs"),
    _n("CleanRL", "num_steps", "algorithm.n_steps"),
    _n("CleanRL", "update_epochs", "algorithm.n_epochs"),
    _n(
        "CleanRL",
        "num_minibatches",
        "algorithm.minibatch_size",
        note="a size here: num_envs · num_steps / num_minibatches",
    ),
    _n("CleanRL", "clip_coef", "algorithm.clip_range"),
    _n("CleanRL", "norm_adv", "algorithm.normalize_advantage"),
    _n("CleanRL", "clip_vloss", "algorithm.value_clip"),
    _n("CleanRL", "anneal_lr", "algorithm.lr_schedule", note="anneal_lr=True is lr_schedule=linear"),
    _n("CleanRL", "start_e", "algorithm.epsilon_start"),
    _n("CleanRL", "end_e", "algorithm.epsilon_end"),
    _n("CleanRL", "train_frequency", "algorithm.train_freq"),
    _n("CleanRL", "target_network_frequency", "algorithm.target_update_interval"),
    _n("CleanRL", "cuda", "trainer.device"),
    # TRL: TrainingArguments and the trainers' configs
    _n("TRL", "max_steps", "trainer.total_steps"),
    _n("TRL", "num_train_epochs", "trainer.total_steps", note="steps here, not epochs"),
    _n("TRL", "per_device_train_batch_size", *_MICRO),
    _n(
        "TRL",
        "gradient_accumulation_steps",
        "algorithm.batch_size",
        "worker.actor.mini_batch_size",
        note="the batch itself: micro-batch × accumulation",
    ),
    _n("TRL", "model_name_or_path", *_MODEL),
    _n("TRL", "output_dir", "trainer.run_dir"),
    _n("TRL", "lr_scheduler_type", "algorithm.lr_schedule", "worker.actor.lr_schedule"),
    _n("TRL", "logging_steps", "trainer.log_every"),
    _n("TRL", "eval_steps", "trainer.eval_every"),
    _n("TRL", "save_steps", "trainer.checkpoint_every"),
    _n("TRL", "max_prompt_length", "data.max_prompt_length"),
    _n("TRL", "max_completion_length", "data.max_response_length"),
    _n("TRL", "num_generations", "worker.rollout.n"),
    _n("TRL", "num_iterations", "worker.actor.ppo_epochs"),
    _n("TRL", "epsilon", "worker.actor.clip_low"),
    _n("TRL", "epsilon_high", "worker.actor.clip_high"),
    _n("TRL", "lora_r", "model.lora.rank", "worker.actor.model.lora.rank"),
    _n("TRL", "center_rewards_coefficient", "algorithm.center_rewards_coef"),
    _n("TRL", "dataset_name", "data.path", note="a local file, with data.task=math"),
    # verl: Hydra keys of ppo_trainer.yaml
    _n("verl", "data.train_files", "data.path", note="with data.task=math; a file or a list"),
    _n("verl", "data.val_files", "data.validation_path", note="with data.task=math; a file or a list"),
    _n("verl", "data.train_batch_size", "data.rollout_batch_size"),
    _n("verl", "actor_rollout_ref.model.path", "worker.actor.model.path"),
    _n("verl", "actor_rollout_ref.actor.optim.lr", "worker.actor.learning_rate"),
    _n("verl", "actor_rollout_ref.actor.ppo_mini_batch_size", "worker.actor.mini_batch_size"),
    _n("verl", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "worker.actor.micro_batch_size"),
    _n("verl", "actor_rollout_ref.actor.ppo_epochs", "worker.actor.ppo_epochs"),
    _n("verl", "actor_rollout_ref.actor.clip_ratio_low", "worker.actor.clip_low"),
    _n("verl", "actor_rollout_ref.actor.clip_ratio_high", "worker.actor.clip_high"),
    _n("verl", "actor_rollout_ref.actor.kl_loss_coef", "worker.actor.kl_coef"),
    _n("verl", "actor_rollout_ref.actor.kl_loss_type", "worker.actor.kl_estimator"),
    _n("verl", "actor_rollout_ref.actor.loss_agg_mode", "worker.actor.loss_agg"),
    _n("verl", "actor_rollout_ref.rollout.n", "worker.rollout.n"),
    _n("verl", "actor_rollout_ref.rollout.temperature", "worker.rollout.temperature"),
    _n("verl", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "worker.ref.micro_batch_size"),
    _n(
        "verl",
        "actor_rollout_ref.*",
        "worker.*",
        note="its actor, rollout and ref: worker.actor, .rollout, .ref",
    ),
    _n("verl", "algorithm.adv_estimator", "algorithm.advantage"),
    _n("verl", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_reward_coef"),
    _n("verl", "trainer.total_epochs", "trainer.total_steps", note="steps here, not epochs"),
    _n("verl", "trainer.total_training_steps", "trainer.total_steps"),
    _n("verl", "trainer.test_freq", "trainer.eval_every"),
    _n("verl", "trainer.save_freq", "trainer.checkpoint_every"),
    _n("verl", "trainer.default_local_dir", "trainer.run_dir"),
    _n("verl", "trainer.n_gpus_per_node", "trainer.nproc_per_node"),
    # EasyR1: examples/config.yaml (its worker.* layout is ours)
    _n("EasyR1", "data.train_files", "data.path", note="with data.task=math; a file or a list"),
    _n("EasyR1", "data.val_files", "data.validation_path", note="with data.task=math; a file or a list"),
    _n("EasyR1", "algorithm.adv_estimator", "algorithm.advantage"),
    _n("EasyR1", "algorithm.kl_penalty", "worker.actor.kl_estimator"),
    _n("EasyR1", "algorithm.kl_coef", "worker.actor.kl_coef"),
    _n("EasyR1", "worker.actor.global_batch_size", "worker.actor.mini_batch_size"),
    _n("EasyR1", "worker.actor.micro_batch_size_per_device_for_update", "worker.actor.micro_batch_size"),
    _n("EasyR1", "worker.actor.model.model_path", "worker.actor.model.path"),
    _n("EasyR1", "worker.actor.optim.lr", "worker.actor.learning_rate"),
    _n("EasyR1", "worker.actor.optim.weight_decay", "worker.actor.weight_decay"),
    _n("EasyR1", "worker.actor.clip_ratio_low", "worker.actor.clip_low"),
    _n("EasyR1", "worker.actor.clip_ratio_high", "worker.actor.clip_high"),
    _n("EasyR1", "trainer.total_episodes", "trainer.total_steps", note="steps here, not epochs"),
    _n("EasyR1", "trainer.max_steps", "trainer.total_steps"),
    _n("EasyR1", "trainer.val_freq", "trainer.eval_every"),
    _n("EasyR1", "trainer.save_checkpoint_path", "trainer.run_dir"),
    _n("EasyR1", "trainer.n_gpus_per_node", "trainer.nproc_per_node"),
)

# Their algorithm (class, trainer) names: the algorithm argument of `advantage train`.
ALGORITHM_NAMES: Mapping[str, tuple[str, str]] = {
    "PPO": ("SB3", "ppo"),
    "A2C": ("SB3", "a2c"),
    "DQN": ("SB3", "dqn"),
    "SAC": ("SB3", "sac"),
    "TD3": ("SB3", "td3"),
    "DDPG": ("SB3", "ddpg"),
    "TRPO": ("SB3", "trpo"),
    "SFTTrainer": ("TRL", "sft"),
    "DPOTrainer": ("TRL", "dpo"),
    "GRPOTrainer": ("TRL", "grpo"),
    "RewardTrainer": ("TRL", "reward_model"),
    "PPOTrainer": ("TRL", "ppo_rlhf"),
}


def _matches(name: Name, key: str) -> bool:
    if name.theirs.endswith(".*"):
        return key.startswith(name.theirs[:-1])
    if "." in name.theirs:
        return key == name.theirs
    return key.rsplit(".", 1)[-1] == name.theirs


def hint(keys: Iterable[str], known: Iterable[str]) -> str:
    """``; SB3's total_timesteps is trainer.total_steps`` for the first of ``keys`` (dotted names as typed)
    that another library uses, naming the first of our keys that is in ``known`` (the algorithm's keys;
    a ``data.`` key counts when ``known`` has a data section, since tasks add their own); ``""`` when none.
    An exact dotted row wins over a bare name and a ``.*`` prefix row comes last."""
    known = set(known)
    has_data = any(k.startswith("data.") for k in known)

    def ours_in(name: Name) -> str | None:
        for key in name.ours:
            section = key.endswith(".*") and any(k.startswith(key[:-1]) for k in known)
            if key in known or section or (has_data and key.startswith("data.")):
                return key
        return None

    for key in keys:
        rows = [n for n in NAMES if _matches(n, key)]
        rows.sort(key=lambda n: (n.theirs.endswith(".*"), "." not in n.theirs))
        for row in rows:
            ours = ours_in(row)
            if ours is None:
                continue
            same = [n.library for n in rows if n.theirs == row.theirs and ours_in(n) == ours]
            who = " and ".join(f"{lib}'s" for lib in dict.fromkeys(same))
            note = f" ({row.note})" if row.note else ""
            return f"; {who} {row.theirs} is {ours}{note}"
    return ""


def leaves(key: str, value: Any) -> list[str]:
    """The dotted names under ``key`` (``value`` a nested mapping of overrides), or ``[key]``."""
    if not isinstance(value, Mapping) or not value:
        return [key]
    return [name for k, v in value.items() for name in leaves(f"{key}.{k}", v)]


def algorithm_hint(name: str, available: Iterable[str]) -> str:
    """``; SB3's PPO is ppo`` for another library's algorithm name, or a lower-case match; ``""`` if none."""
    available = set(available)
    if name in ALGORITHM_NAMES and ALGORITHM_NAMES[name][1] in available:
        library, ours = ALGORITHM_NAMES[name]
        return f"; {library}'s {name} is {ours}"
    lower = name.lower().replace("-", "_")
    if lower in available:
        return f"; did you mean {lower}? (algorithm names are lower case)"
    return ""


def markdown() -> str:
    """The tables of ``docs/migration.md``: every row of :data:`NAMES` by library, then the algorithm
    names (``python -m advantage.migration`` prints them; a test checks the page holds them)."""
    lines = ["| library | their name | ours | note |", "|---|---|---|---|"]
    for library in LIBRARIES:
        for n in NAMES:
            if n.library == library:
                ours = " or ".join(f"`{k}`" for k in n.ours)
                lines.append(f"| {library} | `{n.theirs}` | {ours} | {n.note} |")
    lines += ["", "| library | their algorithm | ours |", "|---|---|---|"]
    lines += [f"| {lib} | `{theirs}` | `{ours}` |" for theirs, (lib, ours) in ALGORITHM_NAMES.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
