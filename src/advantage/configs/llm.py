"""What every language-model algorithm's config shares: the ``data``, ``model`` and ``trainer`` sections,
the optimizer checks, and the ``data.*`` options of a task (for ``advantage list``). The code that builds
tasks, models and tokenizers is in :mod:`advantage.algos.llm.data` and :mod:`advantage.algos.llm.models`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from advantage import kernels
from advantage.config import TrainerConfig, device_problem, option, schedule_steps_problems, section
from advantage.errors import ConfigError
from advantage.schedules import LR_SCHEDULES

# The preference tasks' names: the keys of advantage.envs.text.preference.PREFERENCE_TASKS, written out so
# that listing and validating configs does not import the tasks (tests/test_startup.py compares them).
PREFERENCE_TASK_NAMES = ("synthetic", "dataset")


@dataclass
class DataConfig:
    """The ``data`` section. Keys other than those below are options of the task (``data.digits=3``,
    ``data.answer_format=tagged``, ``data.path=train.jsonl``), checked by the task."""

    task: str = option(
        "addition",
        "generated task (addition, multiplication, countdown, reverse, sort, code) or a dataset "
        "(dataset, math) read from data.path; `advantage list ALGO data.task=NAME` shows its options",
    )
    seed: int = option(0, "seed of the generated examples (fixed across training seeds)", lo=0)
    train_size: int | None = option(
        None, "training prompts (unset: every train row of a data file; 20000 generated)", lo=1
    )
    validation_size: int | None = option(
        None, "validation examples, evaluated during training (unset: every validation row; 200)", lo=1
    )
    test_size: int | None = option(
        None, "test examples, for advantage eval (unset: every test row; 500)", lo=1
    )
    max_prompt_length: int | None = option(
        None,
        "longest prompt in tokens (unset: measured from the data with the model's tokenizer before the "
        "run starts; a longer prompt is an error)",
        lo=1,
    )
    max_response_length: int = option(32, "most generated tokens per response", lo=1)
    chat_template: bool = option(
        False, "wrap plain-text prompts in the tokenizer's chat template (chat-message prompts always are)"
    )
    kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "task options", "extra": True})

    # Split sizes of a generated task when data.*_size is unset (a file's splits default to all its rows).
    GENERATED_SIZES: ClassVar[tuple[int, int, int]] = (20_000, 200, 500)


@dataclass
class LoRAConfig:
    rank: int = option(0, "LoRA rank (0: train every weight)", lo=0)
    alpha: float = option(16.0, "LoRA scaling numerator α (scale α / rank)", lo=0, lo_open=True)
    dropout: float = option(0.0, "LoRA dropout", lo=0, hi=1, hi_open=True)
    target_modules: list[str] = option(
        ["q_proj", "k_proj", "v_proj", "o_proj"], "module names that get adapters"
    )


@dataclass
class LMModelConfig:
    """The ``model`` section: a local Hugging Face model folder, or a tiny model built from a config."""

    init: str = option(
        "auto",
        "auto: pretrained when model.path is set, else scratch",
        choices=("auto", "scratch", "pretrained"),
    )
    path: str | None = option(
        None, "local save_pretrained folder, a checkpoint folder, or a run folder (its latest checkpoint)"
    )
    arch: str = option("qwen2", "scratch architecture", choices=("qwen2", "llama"))
    hidden_size: int = option(128, "scratch: hidden size", lo=8)
    layers: int = option(2, "scratch: transformer layers", lo=1)
    heads: int = option(4, "scratch: attention heads", lo=1)
    kv_heads: int | None = option(None, "scratch: key/value heads (grouped-query attention)", lo=1)
    intermediate_size: int | None = option(None, "scratch: MLP width (default 4 × hidden)", lo=1)
    max_position_embeddings: int = option(256, "scratch: context length in tokens", lo=8)
    trust_remote_code: bool = option(False, "allow a model folder to run its own Python code")
    pad_to_eos: bool = option(True, "use the EOS token as pad token when the tokenizer has none")
    dtype: str = option("float32", "parameter dtype", choices=("float32", "bfloat16"))
    lora: LoRAConfig = section(LoRAConfig, "LoRA adapters through peft")

    def problems(self) -> list[str]:
        out = []
        if self.init == "pretrained" and not self.path:
            out.append("model.path is required when model.init=pretrained")
        if self.init == "scratch" and self.path:
            out.append(f"model.path={self.path!r} is set but model.init=scratch; drop one of them")
        if self.hidden_size % self.heads:
            out.append(f"model.hidden_size={self.hidden_size} must be divisible by model.heads={self.heads}")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            out.append(f"model.heads={self.heads} must be divisible by model.kv_heads={self.kv_heads}")
        return out

    @property
    def pretrained(self) -> bool:
        return self.init == "pretrained" or (self.init == "auto" and self.path is not None)


@dataclass
class LMTrainerConfig(TrainerConfig):
    """The ``trainer`` section of language-model algorithms: steps are optimizer steps (one per batch)."""

    total_steps: int = option(1000, "optimizer steps to train for", lo=0)
    eval_every: int = option(100, "evaluate every N optimizer steps (0: only at the end)", lo=0)
    eval_episodes: int = option(200, "validation prompts per evaluation (at most data.validation_size)", lo=1)
    eval_samples: int = option(1, "samples per prompt for pass@K and maj@K during training (1: skip)", lo=1)
    eval_temperature: float = option(1.0, "sampling temperature of those samples", lo=0, lo_open=True)
    eval_batch_size: int = option(128, "prompts generated together during evaluation", lo=1)
    stop_at_return: float | None = option(
        None, "stop once eval/return_mean (mean greedy reward) reaches this"
    )
    log_every: int = option(10, "log training metrics every N optimizer steps", lo=1)
    run_dir: str | None = option(None, "run folder (default runs/<algo>-<task>-<YYYYmmdd-HHMMSS>)")
    device: str = option("cpu", "torch device of the models: cpu, cuda, cuda:N or mps")
    strategy: str = option(
        "single",
        "learner across processes: single, ddp (replicas) or fsdp (FSDP2 shards); docs/distributed.md",
        choices=("single", "ddp", "fsdp"),
    )
    nproc_per_node: int = option(1, "local processes the command line starts (torchrun sets its own)", lo=1)

    def problems(self) -> list[str]:
        # The spelling here; whether the device exists is checked before a run starts (resolve_config).
        problem = device_problem(self.device, available=False)
        out = schedule_steps_problems(self.schedule_steps) + kernels.problems(self.kernels)
        return out + ([problem] if problem else [])


class LMOptim:
    """The optimizer options of every language-model algorithm (sft, reward_model, dpo, and the actors of
    grpo and ppo_rlhf): AdamW, a linear warm-up then a decaying learning rate
    (:func:`advantage.schedules.warmup_decay`) and a global gradient-norm clip. Each option is
    written once here; an algorithm's section places it among its own options with its default (and
    may restate its ``help``): ``learning_rate: float = LMOptim.learning_rate(1e-3)``."""

    learning_rate = partial(option, help="peak learning rate", lo=0, lo_open=True)
    lr_schedule = partial(option, help="decay after warm-up", choices=LR_SCHEDULES)
    warmup_steps = partial(option, help="linear warm-up steps", lo=0)
    min_lr_ratio = partial(option, help="final learning rate / peak (cosine and linear)", lo=0, hi=1)
    weight_decay = partial(option, 0.0, "AdamW weight decay", lo=0)
    betas = partial(option, [0.9, 0.98], "AdamW (β1, β2)")
    max_grad_norm = partial(option, 1.0, help="global gradient-norm clip (0: none)", lo=0)


def task_rows(name: str, *, text: bool = True, preference: bool = False) -> list[tuple[str, Any, str]]:
    """``(data.<option>, default, meaning)`` of task ``name`` among the text tasks (``text``) and the
    preference tasks (``preference``), for ``advantage list ALGO data.task=NAME``."""
    from advantage.envs.text.options import describe_options

    registries: list[tuple[Any, Callable[[str], dict[str, Any]]]] = []
    if text:
        from advantage.envs.text import TASKS, task_options

        registries.append((TASKS, task_options))
    if preference:
        from advantage.envs.text.preference import PREFERENCE_TASKS, preference_task_options

        registries.append((PREFERENCE_TASKS, preference_task_options))
    for names, options in registries:
        if name in names:
            return describe_options(options(name))
    allowed = [n for names, _ in registries for n in names]
    raise ConfigError(f"data.task must be one of {', '.join(dict.fromkeys(allowed))}, got {name!r}")


def preference_task_options(name: str) -> list[tuple[str, Any, str]]:
    """``task_options`` of the algorithms that train on preference tasks (reward_model, dpo)."""
    return task_rows(name, text=False, preference=True)


@dataclass
class LMBatchAlgorithm:
    """The ``algorithm`` section of the language-model trainers that take batches from a fixed training set
    and accumulate micro-batches (sft, reward_model): the optimizer and the batch. Such an algorithm adds
    its own options after these, and restates one of these only to change its default or meaning."""

    learning_rate: float = LMOptim.learning_rate(1e-3)
    lr_schedule: str = LMOptim.lr_schedule("cosine")
    warmup_steps: int = LMOptim.warmup_steps(50)
    min_lr_ratio: float = LMOptim.min_lr_ratio(0.1)
    batch_size: int = option(64, "sequences per optimizer step", lo=1)
    micro_batch_size: int = option(0, "sequences per forward pass (0: the whole batch)", lo=0)
    weight_decay: float = LMOptim.weight_decay()
    betas: list[float] = LMOptim.betas()
    max_grad_norm: float = LMOptim.max_grad_norm()

    def problems(self) -> list[str]:
        out = []
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            out.append(f"algorithm.betas must be two numbers in [0, 1), got {self.betas}")
        if self.micro_batch_size > self.batch_size:
            out.append(
                f"algorithm.micro_batch_size={self.micro_batch_size} is larger than "
                f"algorithm.batch_size={self.batch_size}"
            )
        return out


@dataclass
class SamplingConfig:
    """The ``worker.rollout`` section of the trainers that sample responses (ppo_rlhf; grpo adds ``n``)."""

    temperature: float = option(1.0, "sampling temperature (log-probs and KL use it too)", lo=0, lo_open=True)
    top_p: float = option(1.0, "nucleus sampling", lo=0, hi=1, lo_open=True)
    top_k: int = option(0, "top-k sampling (0: off)", lo=0)
    min_new_tokens: int = option(
        0,
        "EOS forbidden for each response's first N tokens (0: off; = data.max_response_length: fixed-length "
        "responses, the same work per step, e.g. to benchmark); log-probs stay the unfiltered ones",
        lo=0,
    )

    def sampling(self) -> dict[str, Any]:
        """These options as the keyword arguments of :meth:`advantage.algos.llm.policy.LMPolicy.complete`."""
        names = ("temperature", "top_p", "top_k", "min_new_tokens")
        return {name: getattr(self, name) for name in names}


@dataclass
class RefConfig:
    micro_batch_size: int = option(0, "responses per reference forward pass (0: all)", lo=0)


class SamplingTrainerConfig:
    """What the configs of the trainers that sample (grpo, ppo_rlhf) share beside their sections: the
    policy's model section under ``worker.actor`` and the checks across sections."""

    data: Any
    worker: Any

    @property
    def model(self) -> LMModelConfig:
        """The policy's model section (``worker.actor.model``), where the shared LM code looks for it."""
        return self.worker.actor.model

    def rollout_problems(self, unit: str = "") -> list[str]:
        """``worker.actor.mini_batch_size`` (counted in ``unit``) and ``worker.rollout.min_new_tokens``
        against the ``data`` section."""
        out = []
        d, w = self.data, self.worker
        if w.actor.mini_batch_size > d.rollout_batch_size:
            out.append(
                f"worker.actor.mini_batch_size={w.actor.mini_batch_size}{unit} is more than "
                f"data.rollout_batch_size={d.rollout_batch_size}"
            )
        if w.rollout.min_new_tokens > d.max_response_length:
            out.append(
                f"worker.rollout.min_new_tokens={w.rollout.min_new_tokens} is more than "
                f"data.max_response_length={d.max_response_length}; allowed: 0 to {d.max_response_length}"
            )
        return out
