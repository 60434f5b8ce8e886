"""GRPO family: the loss and its global normalizer, every preset end to end on a tiny model, dynamic
sampling, the metrics people look for, exact resume and the bad-input errors."""

from __future__ import annotations

import math
import os

import pytest
import torch

import advantage
from advantage.algos.llm import batches, grpo, grpo_rollout, scoring
from advantage.configs.grpo import PRESETS, ActorConfig
from advantage.envs.text import Reward, make_task
from advantage.errors import ConfigError, NonFiniteError
from advantage.math.advantages import GROUP_ADVANTAGES
from advantage.math.masked import step_normalizer

TINY = {
    "data.task": "addition",
    "data.digits": 2,
    "data.train_size": 64,
    "data.validation_size": 16,
    "data.test_size": 16,
    "data.rollout_batch_size": 4,
    "data.max_response_length": 6,
    "worker.rollout.n": 4,
    "worker.actor.model.hidden_size": 32,
    "worker.actor.model.layers": 1,
    "worker.actor.model.heads": 2,
    "worker.actor.learning_rate": 1e-3,
    "trainer.eval_episodes": 8,
    "trainer.eval_every": 0,
    "trainer.total_steps": 3,
    "trainer.tensorboard": False,
}


class CoinTask:
    """Addition prompts with a reward that depends on the completion's length parity: groups are a mix of
    all-equal and mixed rewards, so dynamic sampling has something to drop and something to keep."""

    def __init__(self):
        self.inner = make_task("addition", digits=2)
        self.name, self.alphabet, self.special_tokens = "coin", self.inner.alphabet, ()
        self.options: dict = {}

    def examples(self, split, n, seed):
        return self.inner.examples(split, n, seed)

    def verify(self, completion, example):
        ok = len(completion) % 2 == 0
        return Reward(float(ok), ok, True, completion, "parity")


@pytest.fixture
def coin_task(monkeypatch):
    from advantage.envs.text import registry

    def coin() -> CoinTask:
        return CoinTask()

    monkeypatch.setitem(registry.TASKS, "coin", coin)
    return coin


def _train(tmp_path, name="run", **over):
    cfg = {**TINY, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("grpo", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


# ---- the loss ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_with_the_step_normalizer_equal_one_batch(mode):
    torch.manual_seed(0)
    B, T = 8, 5
    theta = torch.randn(B, T, requires_grad=True)
    old = torch.randn(B, T) * 0.1
    adv = torch.randn(B)
    mask = (torch.rand(B, T) > 0.3).float()
    mask[3] = 0.0  # an empty row
    actor = ActorConfig(loss_agg=mode, clip_low=0.2, clip_high=0.28)
    Z = step_normalizer(mask, mode)

    def logp():
        return torch.log_softmax(theta, -1)

    one, _ = grpo.grpo_loss(logp(), old, None, adv, mask, actor, Z, T)
    (g_one,) = torch.autograd.grad(one, theta)
    acc = torch.zeros(())
    for rows in ([0, 1, 2], [3, 4, 5, 6], [7]):
        part, _ = grpo.grpo_loss(logp()[rows], old[rows], None, adv[rows], mask[rows], actor, Z, T)
        acc = acc + part
    (g_acc,) = torch.autograd.grad(acc, theta)
    torch.testing.assert_close(acc, one)
    torch.testing.assert_close(g_acc, g_one)


def test_on_policy_ratio_is_one_and_equal_groups_give_a_finite_zero_loss():
    from advantage.math.advantages import GROUP_ADVANTAGES

    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    adv, m = GROUP_ADVANTAGES["grpo"](rewards, 4, 1e-6)
    assert adv[:4].tolist() == [0.0] * 4 and float(m["zero_std_frac"]) == 0.5
    logp = torch.randn(8, 3, requires_grad=True)
    loss, metrics = grpo.grpo_loss(logp, None, None, adv, torch.ones(8, 3), ActorConfig(), 8.0, 3)
    assert math.isfinite(float(loss)) and float(metrics["ratio_mean"]) == 1.0
    # The on-policy gradient is the policy gradient: -A_i / |o_i| per token, averaged over sequences.
    (g,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(g, -adv[:, None].expand(8, 3) / 3 / 8)


def test_kl_in_the_loss_uses_the_reference():
    actor = ActorConfig(kl_coef=0.1, kl_estimator="k3", loss_agg="token_mean")
    logp = torch.log(torch.full((2, 2), 0.5))
    ref = torch.log(torch.full((2, 2), 0.25))
    loss, m = grpo.grpo_loss(logp, None, ref, torch.zeros(2), torch.ones(2, 2), actor, 4.0, 2)
    k3 = math.exp(-math.log(2)) - 1 + math.log(2)  # r - 1 - log r with r = ref/π = 1/2
    assert float(loss) == pytest.approx(0.1 * k3)
    assert float(m["kl_ref"]) == pytest.approx(k3)


def test_gspo_on_policy_has_the_gradient_of_grpo():
    """With one epoch over one mini-batch (old_logp = sg(logp)) every sequence ratio is 1, clipping never
    binds, and GSPO's loss and gradient are those of ppo_clip with seq_mean_token_mean: the two presets
    differ only off-policy (ppo_epochs > 1 or several mini-batches)."""
    torch.manual_seed(0)
    theta = torch.randn(6, 4, 5, requires_grad=True)
    tokens = torch.randint(0, 5, (6, 4, 1))
    adv = torch.randn(6)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    mask = mask.float()

    def loss_and_grad(**actor):
        logp = torch.log_softmax(theta, -1).gather(-1, tokens).squeeze(-1)  # [B, T]
        cfg = ActorConfig(**{"loss_agg": "seq_mean_token_mean", **actor})
        Z = step_normalizer(mask, cfg.loss_agg)
        loss, _ = grpo.grpo_loss(logp, None, None, adv, mask, cfg, Z, 4)
        return loss, torch.autograd.grad(loss, theta)[0]

    preset = PRESETS["gspo"].overrides
    gspo = {k.removeprefix("worker.actor."): v for k, v in preset.items() if k.startswith("worker.actor.")}
    assert gspo["loss"] == "gspo" and gspo["loss_agg"] == "seq_mean_token_mean"
    gspo_loss, gspo_grad = loss_and_grad(**gspo)
    grpo_loss, grpo_grad = loss_and_grad(loss="ppo_clip", clip_low=0.2)
    torch.testing.assert_close(gspo_loss, grpo_loss)
    torch.testing.assert_close(gspo_grad, grpo_grad)


# ---- training end to end ------------------------------------------------------------------------------


METRICS = {
    "train/reward/mean",
    "train/reward/std",
    "train/reward/accuracy",
    "train/clipfrac_low",
    "train/clipfrac_high",
    "train/approx_kl",
    "train/entropy",
    "train/response/length_mean",
    "train/response/truncated_frac",
    "train/advantage/zero_std_frac",
    "train/tokens_per_second",
    "train/time/generate",
    "train/time/score",
    "train/time/learn",
}


@pytest.mark.parametrize(
    "preset",
    [pytest.param(p, marks=pytest.mark.torch_versions) if p == "grpo" else p for p in sorted(PRESETS)],
)
def test_every_preset_trains(tmp_path, coin_task, preset):
    run = _train(tmp_path, preset=preset, **{"data.task": "coin", "data.digits": None})
    rows = [r for r in run.metrics if "train/reward/mean" in r or "train/skipped" in r]
    assert len(rows) == 3
    trained = [r for r in rows if "train/reward/mean" in r and "train/loss" in r]
    assert trained, "no step trained"
    assert set(trained[0]) >= METRICS, METRICS - set(trained[0])
    if preset == "grpo":
        assert "train/kl_ref" in trained[0]
    assert all(math.isfinite(r["train/loss"]) for r in trained)


def test_dynamic_sampling_refills_the_batch(tmp_path, coin_task):
    run = _train(
        tmp_path,
        **{
            "data.task": "coin",
            "data.digits": None,
            "algorithm.dynamic_sampling": True,
            "algorithm.max_sampling_rounds": 8,
            "trainer.total_steps": 4,
        },
    )
    rows = [r for r in run.metrics if "train/rollout/prompts" in r]
    assert rows and all(r["train/rollout/prompts"] == 4 for r in rows)
    assert any(r["train/rollout/rounds"] > 1 for r in rows)  # some groups were all-equal and refilled
    assert any(r["train/advantage/zero_std_frac"] > 0 for r in rows)
    # Later rounds over-sample by the keep rate (asking only for the missing prompts never keeps more than
    # 4 groups with signal): some step found more than 4 and trimmed the surplus.
    kept = [r["train/rollout/sampled_prompts"] * (1 - r["train/advantage/zero_std_frac"]) for r in rows]
    assert any(k > 4.5 for k in kept)


def test_dynamic_sampling_with_nothing_to_learn_skips_the_step(tmp_path):
    # A fresh scratch model never adds correctly: every group is all-zero.
    run = _train(tmp_path, **{"algorithm.dynamic_sampling": True, "algorithm.max_sampling_rounds": 2})
    rows = [r for r in run.metrics if "train/skipped" in r]
    assert len(rows) == 3 and all(
        r["train/rollout/rounds"] == 2 for r in [*rows] if "train/rollout/rounds" in r
    )


def test_resume_is_exact(tmp_path, coin_task, rewound):
    over = {"data.task": "coin", "data.digits": None, "trainer.total_steps": 4, "trainer.checkpoint_every": 2}
    straight = _train(tmp_path, "straight", **over)
    resumed = advantage.resume(rewound(straight.dir), quiet=True)
    a = dict(straight.policy.model.named_parameters())
    b = dict(resumed.policy.model.named_parameters())
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_starts_from_an_sft_run_folder(tmp_path):
    sft_over = {
        "data.task": "addition",
        "data.digits": 2,
        "data.train_size": 64,
        "data.validation_size": 16,
        "data.test_size": 16,
        "model.hidden_size": 32,
        "model.layers": 1,
        "model.heads": 2,
        "trainer.eval_episodes": 8,
        "trainer.total_steps": 2,
        "trainer.tensorboard": False,
        "trainer.run_dir": str(tmp_path / "sft"),
    }
    sft_run = advantage.train("sft", quiet=True, **sft_over)
    run = _train(tmp_path, **{"worker.actor.model.path": str(sft_run.dir), "trainer.total_steps": 1})
    assert run.step == 1 and run.config.model.pretrained


# ---- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(GROUP_ADVANTAGES))
def test_group_of_one_is_refused_by_the_estimators_that_compare_a_group(name):
    """Every estimator whose registry entry says it needs groups refuses G = 1 before the run (dr_grpo
    used to pass the check and fail in its first step); the others train with one sample per prompt."""
    from advantage.resolve import resolve_config

    overrides = {**TINY, "worker.rollout.n": 1, "algorithm.advantage": name}
    if GROUP_ADVANTAGES.spec(name).get("groups"):
        with pytest.raises(ConfigError, match=f"worker.rollout.n=1 with algorithm.advantage={name}"):
            resolve_config("grpo", overrides=overrides)
    else:
        resolve_config("grpo", overrides=overrides)


def test_clip_high_below_clip_low():
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError, match="clip_high=0.1 is smaller than worker.actor.clip_low=0.2"):
        resolve_config("grpo", overrides={**TINY, "worker.actor.clip_high": 0.1})


def test_a_nan_reward_names_the_sample(tmp_path, monkeypatch, coin_task):
    def nan_verify(self, completion, example):
        return Reward(float("nan"), False, True, None, "broken")

    monkeypatch.setattr(CoinTask, "verify", nan_verify)
    with pytest.raises(NonFiniteError, match=r"the reward of completion .* for prompt '\d+\+\d+=' is nan"):
        _train(tmp_path, **{"data.task": "coin", "data.digits": None})


def _skip_without_kernel_sandbox() -> None:
    """The code task refuses to run without kernel isolation (test_sandbox.py checks that it fails closed)."""
    from advantage.envs.text.code.sandbox import kernel_isolation_problem

    if kernel_isolation_problem() is not None:
        pytest.skip("no kernel isolation for the code sandbox on this machine")


@pytest.mark.xdist_group("sandbox")  # with tests/test_sandbox.py (its process checks)
def test_code_task_rewards_come_from_the_sandbox_in_parallel():
    """GRPO's scorer runs the ``code`` task's sandbox, a process per completion, in parallel: the
    reference solution scores 1, a wrong one and a fake success (exit 0 before the tests) score 0."""
    from types import SimpleNamespace

    _skip_without_kernel_sandbox()
    task = make_task("code", timeout=2.0)
    exs = task.examples("train", 2, seed=0)
    texts = [
        exs[0].target,
        "def f(x):\n    return None",
        "import os\nos._exit(0)\ndef f(x):\n    return 0",
        exs[1].target,
    ]
    calls = []
    original = task.verify_many

    def spy(completions, examples, max_workers=2):
        calls.append(max_workers)
        return original(completions, examples, max_workers=max_workers)

    task.verify_many = spy
    rewards, correct = scoring.score(SimpleNamespace(task=task), exs, texts, G=2)
    assert rewards.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert correct.tolist() == [True, False, False, True]
    assert calls == [os.cpu_count() or 1]


@pytest.mark.xdist_group("sandbox")  # with tests/test_sandbox.py (its process checks)
def test_grpo_trains_on_the_code_task(tmp_path):
    """``data.task=code`` runs end to end: rollouts, sandboxed scoring, an update, metrics."""
    _skip_without_kernel_sandbox()
    run = _train(
        tmp_path,
        **{
            "data.task": "code",
            "data.digits": None,
            "data.timeout": 2.0,
            "data.max_prompt_length": 256,
            "worker.actor.model.max_position_embeddings": 320,
            "data.max_response_length": 24,
            "trainer.total_steps": 2,
        },
    )
    rows = [r for r in run.metrics if "train/reward/mean" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["train/reward/mean"]) and r["train/time/score"] > 0 for r in rows)


def test_trimmed_micro_batches_give_the_full_width_log_probs():
    from advantage.algos.llm.data import make_task
    from advantage.algos.llm.models import build_model
    from advantage.algos.llm.policy import LMPolicy
    from advantage.lm.model import sequence_logprobs
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("grpo", overrides=TINY)
    task = make_task(cfg.data)
    model, tok = build_model(cfg, task)
    with torch.no_grad():  # larger weights: varied lengths, some early EOS
        for p in model.parameters():
            p.normal_(0, 0.5)
    policy = LMPolicy(model, tok, task, cfg)
    g = torch.Generator().manual_seed(0)
    gen, _ = policy.complete(
        [e.prompt for e in policy.examples("train", 6)], temperature=1.0, samples=2, generator=g
    )
    assert len(set(gen.lengths.tolist())) > 1  # rows of different lengths
    rows = torch.arange(12)
    chunks = grpo.micro_batches(rows, gen.lengths, 12, auto=True)
    assert len(chunks) == 2 and sorted(torch.cat(chunks).tolist()) == rows.tolist()
    assert gen.lengths[chunks[0]].min() >= gen.lengths[chunks[1]].max()  # sorted by length
    ids, attn = gen.sequences()
    full = sequence_logprobs(model, ids, attn, response_start=gen.prompt_ids.shape[1])
    for r in chunks:
        t_ids, t_attn, p_len, t_len = batches.trimmed(gen, r)
        assert t_len == int(gen.lengths[r].max()) and t_ids.shape[1] <= ids.shape[1]
        part = sequence_logprobs(model, t_ids, t_attn, response_start=p_len)
        m = gen.response_mask[r, :t_len]
        torch.testing.assert_close(part * m, full[r, :t_len] * m, rtol=0, atol=1e-5)
        assert float(gen.response_mask[r, t_len:].sum()) == 0.0  # nothing cut was a response token
    assert [c.tolist() for c in grpo.micro_batches(rows, gen.lengths, 5, auto=False)] == [
        [0, 1, 2, 3, 4],
        [5, 6, 7, 8, 9],
        [10, 11],
    ]


# ---- rewards from a reward model (no verifier) ----------------------------------------------------------


def test_grpo_with_a_reward_model_on_the_synthetic_task(tmp_path, tiny_reward_model):
    from advantage.algos.llm.reward_models import load_reward_model
    from conftest import RM_SMALL, RM_TASK

    over = {
        **RM_TASK,
        "data.task": "synthetic",
        "data.rollout_batch_size": 4,
        "data.max_response_length": 5,
        **{f"worker.actor.model.{k}": v for k, v in RM_SMALL.items()},
        "worker.rollout.n": 4,
        "worker.reward.model": str(tiny_reward_model),
        "trainer.total_steps": 2,
        "trainer.eval_episodes": 8,
        "trainer.eval_every": 0,
        "trainer.tensorboard": False,
        "trainer.run_dir": str(tmp_path / "g"),
    }
    spy = []
    original = grpo_rollout.score

    def score(policy, exs, texts, G):
        rewards, correct = original(policy, exs, texts, G)
        spy.append(([e.prompt for e in exs for _ in range(G)], texts, rewards))
        return rewards, correct

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grpo_rollout, "score", score)
        run = advantage.train("grpo", quiet=True, **over)
    rm = load_reward_model(tiny_reward_model)
    prompts, texts, rewards = spy[0]
    torch.testing.assert_close(rewards, rm.score(prompts, texts).float())  # the reward is the RM's score
    last = [r for r in run.metrics if "eval/win_rate" in r][-1]
    assert 0.0 <= last["eval/win_rate"] <= 1.0 and "eval/rm_score" in last and "eval/hidden_score" in last


def test_synthetic_task_without_a_reward_model_is_refused():
    with pytest.raises(ConfigError, match="data.task=synthetic has no verifier: set worker.reward.model"):
        advantage.train("grpo", quiet=True, **{"data.task": "synthetic", "data.digits": None})


# ---- the example config ----------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_applies_on_top_of_the_example(preset):
    """``preset=NAME`` typed next to ``--config`` applies over the file for the keys it sets
    (defaults < file < that preset < overrides): `advantage train grpo --config
    examples/grpo_addition.yaml preset=NAME` runs NAME, and the file's other settings stay."""
    from pathlib import Path

    from advantage.resolve import resolve_config

    path = Path(__file__).resolve().parents[1] / "examples" / "grpo_addition.yaml"
    # The model path names a run folder made by examples/sft_addition.yaml; a scratch model stands in.
    scratch = {"worker.actor.model.path": None, "worker.actor.model.init": "scratch"}
    _, cfg = resolve_config("grpo", config=path, overrides={"preset": preset, **scratch})
    assert cfg.worker.rollout.n == 16  # the file's own settings are kept
    for key, value in PRESETS[preset].overrides.items():
        node = cfg
        for part in key.split("."):
            node = getattr(node, part)
        assert node == value, key


def test_min_new_tokens_gives_fixed_length_responses(tmp_path):
    """``worker.rollout.min_new_tokens = data.max_response_length``: every response is exactly that long
    (the fixed work of a benchmark); more than the maximum is a config error naming both keys."""
    from advantage.resolve import resolve_config

    run = _train(tmp_path, **{"worker.rollout.min_new_tokens": 6, "trainer.total_steps": 2})
    lengths = [r["train/response/length_mean"] for r in run.metrics if "train/response/length_mean" in r]
    assert lengths and all(x == 6.0 for x in lengths)
    with pytest.raises(ConfigError, match="worker.rollout.min_new_tokens=7 is more than data.max_response"):
        resolve_config("grpo", overrides={**TINY, "worker.rollout.min_new_tokens": 7})


def test_a_shorter_generation_budget_than_the_sft_run_trained_on_is_warned(tmp_path, capsys):
    """GSM8K's recipe: SFT on answers of up to 256 tokens, then GRPO generating 48 cut nearly every answer
    before its end; the run now says so, naming both lengths."""
    sft = advantage.train(
        "sft",
        quiet=True,
        **{
            **{k: v for k, v in TINY.items() if k.startswith(("data.", "trainer.")) and "rollout" not in k},
            "data.max_response_length": 12,
            "model.hidden_size": 32,
            "model.layers": 1,
            "model.heads": 2,
            "trainer.total_steps": 1,
            "trainer.run_dir": str(tmp_path / "sft"),
        },
    )
    over = {**TINY, "worker.actor.model.path": str(sft.dir), "trainer.total_steps": 1}
    for k in ("worker.actor.model.hidden_size", "worker.actor.model.layers", "worker.actor.model.heads"):
        over.pop(k)
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("grpo", overrides=over)
    (warning,) = cfg.__dict__["_warnings"]
    assert f"worker.actor.model.path={sft.dir} was trained on responses of up to 12 tokens" in warning
    assert "data.max_response_length=6 here" in warning and "raise data.max_response_length to 12" in warning
    advantage.train(
        "grpo", quiet=False, progress=False, **{**over, "trainer.run_dir": str(tmp_path / "grpo")}
    )
    assert warning in capsys.readouterr().out
    _, cfg = resolve_config("grpo", overrides={**over, "data.max_response_length": 12})
    assert cfg.__dict__["_warnings"] == []
