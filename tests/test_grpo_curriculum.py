"""GRPO curriculum (SPEC L12). Adaptive difficulty (``algorithm.adaptive_difficulty``): the thresholds on a
hand-made sequence and the direction they move in, the rows each easy / medium / hard prompt puts in the
loss and their advantages, the combinations with process supervision and dynamic sampling, the config
errors and exact resume. Hard-example mining (``algorithm.curriculum=hard``): the weights, the draw
frequencies within binomial bounds, and the pass rates tracked in training."""

from __future__ import annotations

import math

import pytest
import torch

import advantage
from advantage.algos.llm import grpo, grpo_rollout
from advantage.errors import ConfigError
from advantage.math import curriculum
from advantage.math.advantages import GROUP_ADVANTAGES
from test_grpo import TINY, CoinTask  # tests/ is on sys.path (pytest rootdir-relative imports)
from test_grpo_process import OneStepCoin

G, HARD = 4, 6  # TINY's worker.rollout.n, and the hard prompts' samples in these tests

ON = {
    "data.task": "coin",
    "data.rollout_batch_size": 8,
    "algorithm.adaptive_difficulty": True,
    "algorithm.easy_samples": 2,
    "algorithm.hard_samples": HARD,
}


@pytest.fixture
def coins(monkeypatch):
    from advantage.envs.text import registry

    monkeypatch.setitem(registry.TASKS, "coin", CoinTask)
    monkeypatch.setitem(registry.TASKS, "one_step_coin", OneStepCoin)


def _train(tmp_path, name="run", **over):
    cfg = {**TINY, "data.digits": None, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("grpo", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


def _params(run):
    return dict(run.policy.model.named_parameters())


# ---- the thresholds and the split -----------------------------------------------------------------------


def test_thresholds_are_an_ema_of_the_quantiles_on_a_hand_made_sequence():
    a = {"hard_quantile": 0.25, "easy_quantile": 0.75, "rate": 0.1}
    nan = torch.full((2,), math.nan, dtype=torch.float64)
    # Step 1: sorted d = [0, .25, .5, 1]; the 0.25-quantile sits at position 0.75 (0 + .75·.25), the
    # 0.75-quantile at 2.25 (.5 + .25·.5). The first step takes them as they are.
    t1 = curriculum.difficulty_thresholds(nan, torch.tensor([0.5, 0.0, 1.0, 0.25]), **a)
    assert t1.tolist() == pytest.approx([0.1875, 0.625])
    # Step 2: sorted d = [0, 1, 1, 1]: quantiles (.75, 1); τ = .9 τ_1 + .1 q.
    t2 = curriculum.difficulty_thresholds(t1, torch.tensor([1.0, 1.0, 0.0, 1.0]), **a)
    assert t2.tolist() == pytest.approx([0.9 * 0.1875 + 0.1 * 0.75, 0.9 * 0.625 + 0.1 * 1.0])
    # Rate 1: no memory.
    t3 = curriculum.difficulty_thresholds(t2, torch.tensor([0.0, 0.0, 0.0, 0.0]), **{**a, "rate": 1.0})
    assert t3.tolist() == [0.0, 0.0] and t3.dtype == torch.float64


def test_split_by_difficulty():
    easy, hard = curriculum.split_by_difficulty(
        torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9]), torch.tensor([0.25, 0.75], dtype=torch.float64)
    )
    assert easy.tolist() == [False, False, False, True, True]  # d >= τ_easy (ties count)
    assert hard.tolist() == [True, True, False, False, False]  # d <= τ_hard (ties count)
    # Equal thresholds (the step's prompts barely differ): a prompt on them is neither.
    easy, hard = curriculum.split_by_difficulty(torch.tensor([0.5, 0.4, 0.6]), torch.tensor([0.5, 0.5]))
    assert easy.tolist() == [False, False, True] and hard.tolist() == [False, True, False]


def test_grouped_order():
    # two groups: 3 rows each in a first block [0..5], 2 each in a second [6..9]
    assert curriculum.grouped_order(2, 3, 2).tolist() == [0, 1, 2, 6, 7, 3, 4, 5, 8, 9]


# ---- the rows in the loss and their advantages -------------------------------------------------------------


def _spy(monkeypatch):
    """Record, per step: the (easy, hard) split, every score() call's rewards and example count, and the
    advantages and normaliser that reach the loss."""
    seen: dict[str, list] = {"split": [], "score": [], "loss": []}
    split, score, loss = curriculum.split_by_difficulty, grpo_rollout.score, grpo.grpo_loss

    def split_spy(d, thresholds):
        easy, hard = split(d, thresholds)
        seen["split"].append((easy.clone(), hard.clone()))
        return easy, hard

    def score_spy(policy, exs, texts, n):
        rewards, correct = score(policy, exs, texts, n)
        seen["score"].append(([e.prompt for e in exs], n, rewards.clone()))
        return rewards, correct

    def loss_spy(logp, old, ref, adv, mask, actor, normalizer, max_len):
        seen["loss"].append((adv.detach().clone(), mask.clone(), normalizer))
        return loss(logp, old, ref, adv, mask, actor, normalizer, max_len)

    monkeypatch.setattr(grpo_rollout, "split_by_difficulty", split_spy)
    monkeypatch.setattr(grpo_rollout, "score", score_spy)
    monkeypatch.setattr(grpo, "grpo_loss", loss_spy)
    return seen


def test_easy_and_hard_prompts_put_their_rows_in_the_loss(tmp_path, coins, monkeypatch):
    seen = _spy(monkeypatch)
    # One micro-batch over the rows in order: the loss sees the rollout prompt by prompt.
    run = _train(tmp_path, **ON, **{"worker.actor.micro_batch_size": 1000})
    rows = [r for r in run.metrics if "train/curriculum/rows" in r]
    assert len(rows) == len(seen["split"]) == len(seen["loss"]) == 3
    scores = iter(seen["score"])
    n_easy = n_hard = 0
    for step, ((easy, hard), (adv, _, Z)) in enumerate(zip(seen["split"], seen["loss"], strict=True)):
        prompts, n, first = next(scores)  # the step's G samples of its 8 prompts
        assert n == G and len(prompts) == 8
        full = GROUP_ADVANTAGES["grpo"](first, G, 1e-6)[0]
        if hard.any():  # then HARD - G more samples of each hard prompt, in one call
            hard_prompts, n_x, extra = next(scores)
            assert n_x == HARD - G and hard_prompts == [prompts[j] for j in hard.nonzero().flatten()]
        sizes = [2 if e else HARD if h else G for e, h in zip(easy.tolist(), hard.tolist(), strict=True)]
        assert len(adv) == sum(sizes) == rows[step]["train/curriculum/rows"]
        assert len(adv) == Z  # seq_mean_token_mean: the normaliser counts the rows in the loss
        assert rows[step]["train/curriculum/easy_frac"] == pytest.approx(float(easy.float().mean()))
        assert rows[step]["train/curriculum/hard_frac"] == pytest.approx(float(hard.float().mean()))
        at, p = 0, 0
        for j, size in enumerate(sizes):
            got, group = adv[at : at + size], full[j * G : (j + 1) * G]
            if hard[j]:  # normalised over all HARD samples of the prompt: its G, then its new ones
                r = torch.cat([first[j * G : (j + 1) * G], extra[p * (HARD - G) : (p + 1) * (HARD - G)]])
                torch.testing.assert_close(got, GROUP_ADVANTAGES["grpo"](r, HARD, 1e-6)[0])
                assert float(got.sum()) == pytest.approx(0.0, abs=1e-5)
                p, n_hard = p + 1, n_hard + 1
            elif easy[j]:  # two of the group's G rows, advantages from the whole group
                assert all(bool(torch.isclose(group, x).any()) for x in got)
                n_easy += 1
            else:
                torch.testing.assert_close(got, group)
            at += size
    assert n_easy > 0 and n_hard > 0  # both kinds were exercised
    assert next(scores, None) is None


def test_the_loss_rows_are_the_prompts_own_samples(tmp_path, coins, monkeypatch):
    """The completions behind the loss rows: an easy prompt's are ``easy_samples`` of its own G, drawn at
    random (not always the first), a hard prompt's are its G then its ``hard_samples - G`` new ones."""
    from advantage.algos.llm.policy import LMPolicy

    seen = _spy(monkeypatch)
    sampled, used = [], []
    complete, rows_logprobs = LMPolicy.complete, grpo.rows_logprobs

    def complete_spy(self, prompts, **kw):
        gen, texts = complete(self, prompts, **kw)
        sampled.append(gen)
        return gen, texts

    def rows_spy(model, gen, rows, temperature):
        used.append((gen, rows.clone()))
        return rows_logprobs(model, gen, rows, temperature)

    monkeypatch.setattr(LMPolicy, "complete", complete_spy)
    monkeypatch.setattr(grpo, "rows_logprobs", rows_spy)
    _train(tmp_path, **ON, **{"worker.actor.micro_batch_size": 1000, "trainer.total_steps": 4})

    def tokens(gen, r):
        return gen.response_ids[r, : int(gen.lengths[r])].tolist()

    assert len(used) == len(seen["split"]) == 4  # on-policy, one micro-batch: all rows in order, once
    rounds = iter(sampled)
    moved = 0
    for (easy, hard), (gen, rows) in zip(seen["split"], used, strict=True):
        assert rows.tolist() == list(range(len(rows)))
        first = next(rounds)
        extra = next(rounds) if hard.any() else None
        at, p = 0, 0
        for j in range(len(easy)):
            own = [tokens(first, j * G + s) for s in range(G)]
            if hard[j]:
                new = [tokens(extra, p * (HARD - G) + s) for s in range(HARD - G)]
                assert [tokens(gen, at + s) for s in range(HARD)] == own + new
                at, p = at + HARD, p + 1
            elif easy[j]:
                kept = [tokens(gen, at + s) for s in range(2)]
                pairs = [[own[x], own[y]] for x in range(G) for y in range(x + 1, G)]
                assert kept in pairs  # two distinct rows of its own group, in order
                moved += kept != own[:2]
                at += 2
            else:
                assert [tokens(gen, at + s) for s in range(G)] == own
                at += G
        assert at == len(rows)
    assert moved > 0  # the rows are drawn, not the first easy_samples


def test_with_equal_sample_counts_training_is_unchanged(tmp_path, coins):
    """easy_samples = hard_samples = G: every prompt keeps its G rows, so the run trains exactly as one
    without adaptive difficulty (the option only adds metrics)."""
    off = _train(tmp_path, "off", **{"data.task": "coin", "data.rollout_batch_size": 8})
    on = _train(tmp_path, "on", **{**ON, "algorithm.easy_samples": G, "algorithm.hard_samples": G})
    assert any(r.get("train/curriculum/easy_frac", 0) > 0 for r in on.metrics)
    a, b = _params(off), _params(on)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert not any("train/curriculum/rows" in r for r in off.metrics)


def test_adaptive_difficulty_changes_training(tmp_path, coins):
    off = _train(tmp_path, "off", **{"data.task": "coin", "data.rollout_batch_size": 8})
    on = _train(tmp_path, "on", **ON)
    a, b = _params(off), _params(on)
    assert any(not torch.equal(a[k], b[k]) for k in a)


# ---- with process supervision, dynamic sampling and the other estimators -----------------------------------


def test_one_step_process_supervision_trains_as_outcome_supervision(tmp_path, coins):
    """With one step per completion process supervision is outcome supervision, hard prompts' extra
    samples included (their step tensors and process advantages over all HARD samples)."""
    over = {**ON, "data.task": "one_step_coin"}
    outcome = _train(tmp_path, "outcome", **over)
    process = _train(tmp_path, "process", **over, **{"algorithm.supervision": "process"})
    assert any(r.get("train/curriculum/extra_samples", 0) > 0 for r in process.metrics)
    a, b = _params(outcome), _params(process)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "over",
    [
        {"algorithm.supervision": "process", "data.task": "one_step_coin"},
        {"algorithm.dynamic_sampling": True, "algorithm.max_sampling_rounds": 8},
        {"algorithm.advantage": "batch_std", "worker.reward.length_preference": 0.1},
        {"algorithm.advantage": "rloo", "algorithm.kl_reward_coef": 0.05, "worker.actor.kl_coef": 0.05},
        {"worker.actor.mini_batch_size": 3, "worker.actor.ppo_epochs": 2, "algorithm.overlong_filter": True},
        {"algorithm.curriculum": "hard", "worker.actor.loss_agg": "token_mean"},
    ],
    ids=["process", "dynamic_sampling", "batch_std", "rloo_kl", "mini_batches", "hard_mining"],
)
def test_trains_with_the_other_options(tmp_path, coins, monkeypatch, over):
    seen = _spy(monkeypatch)
    run = _train(tmp_path, **{**ON, **over})
    rows = [r for r in run.metrics if "train/curriculum/rows" in r]
    assert len(rows) == 3 and all(math.isfinite(r["train/loss"]) for r in rows)
    steps = zip(seen["split"], rows, strict=True)
    for (easy, hard), r in steps:  # every prompt's rows, whatever the mini- and micro-batches
        expected = sum(
            2 if e else HARD if h else G for e, h in zip(easy.tolist(), hard.tolist(), strict=True)
        )
        assert r["train/curriculum/rows"] == expected
    per_epoch = sum(len(adv) for adv, _, _ in seen["loss"]) // run.config.worker.actor.ppo_epochs
    assert per_epoch == sum(r["train/curriculum/rows"] for r in rows)
    if over.get("algorithm.supervision") == "process":
        assert all(adv.dim() == 2 for adv, _, _ in seen["loss"])
    if over.get("algorithm.dynamic_sampling"):
        assert all(r["train/rollout/prompts"] == 8 for r in rows)


# ---- config errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"algorithm.easy_samples": 5},
            r"algorithm.easy_samples=5 is more than worker.rollout.n=4.*allowed: 2 to 4",
        ),
        ({"algorithm.easy_samples": 1}, r"algorithm.easy_samples must be >= 2, got 1"),
        (
            {"algorithm.hard_samples": 3},
            r"algorithm.hard_samples=3 is less than worker.rollout.n=4.*allowed: >= 4",
        ),
        (
            {"algorithm.hard_quantile": 0.8},
            r"algorithm.hard_quantile=0.8 is not below algorithm.easy_quantile=0.75",
        ),
        ({"algorithm.easy_quantile": 1.5}, r"algorithm.easy_quantile must be in \[0, 1\], got 1.5"),
        ({"algorithm.difficulty_rate": 0.0}, r"algorithm.difficulty_rate must be in \(0, 1\], got 0.0"),
        (
            {"worker.rollout.n": 1, "algorithm.advantage": "dr_grpo"},
            r"worker.rollout.n=1 with algorithm.adaptive_difficulty: .* G must be >= 2",
        ),
    ],
)
def test_config_errors(over, message):
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError, match=message):
        resolve_config("grpo", overrides={**TINY, "algorithm.adaptive_difficulty": True, **over})


def test_defaults_and_unchecked_when_off():
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("grpo", overrides={**TINY, "algorithm.adaptive_difficulty": True})
    assert cfg.difficulty_samples() == (2, 8)  # G/2 (at least 2) and 2G for G = 4
    _, cfg = resolve_config(
        "grpo", overrides={**TINY, "worker.rollout.n": 7, "algorithm.adaptive_difficulty": True}
    )
    assert cfg.difficulty_samples() == (4, 14)
    # Off, the sample counts are not checked against G (they are unused).
    resolve_config("grpo", overrides={**TINY, "algorithm.easy_samples": 9, "algorithm.hard_samples": 2})


# ---- resume ------------------------------------------------------------------------------------------------


def test_resume_is_exact(tmp_path, coins, rewound):
    over = {**ON, "trainer.total_steps": 4, "trainer.checkpoint_every": 2}
    straight = _train(tmp_path, "straight", **over)
    resumed = advantage.resume(rewound(straight.dir), quiet=True)
    a, b = _params(straight), _params(resumed)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    keys = ("train/curriculum/easy_threshold", "train/curriculum/hard_threshold", "train/curriculum/rows")
    logged = [{k: r[k] for k in keys} for r in straight.metrics if keys[0] in r]
    again = [{k: r[k] for k in keys} for r in resumed.metrics if keys[0] in r]
    assert len(logged) == 4 and again[-2:] == logged[-2:]  # the thresholds came back with the checkpoint


# ---- the direction adaptive difficulty moves in ------------------------------------------------------------


def test_thresholds_follow_the_difficulties_up_and_down_without_overshooting():
    """As the model improves (the prompts' mean rewards rise) both thresholds rise, each step a fraction α
    of the way to the step's quantile and never past it; as it gets worse they fall. A prompt is judged
    against the model of the moment."""
    a = {"hard_quantile": 0.25, "easy_quantile": 0.75, "rate": 0.2}
    g = torch.Generator().manual_seed(0)
    tau = torch.full((2,), math.nan, dtype=torch.float64)
    history = []
    level = [0.1 + 0.8 * t / 39 for t in range(40)] + [0.9 - 0.8 * t / 39 for t in range(40)]
    for p in level:  # 16 prompts, mean reward of 8 samples each at success rate p
        d = torch.binomial(torch.full((16,), 8.0), torch.full((16,), p), generator=g) / 8
        q = torch.quantile(d.double(), torch.tensor([0.25, 0.75], dtype=torch.float64))
        new = curriculum.difficulty_thresholds(tau, d, **a)
        if not bool(tau.isnan().any()):
            lo, hi = torch.minimum(tau, q), torch.maximum(tau, q)
            assert bool(((new >= lo - 1e-12) & (new <= hi + 1e-12)).all())  # towards q, not past it
        tau = new
        history.append(tau.clone())
    up, down = torch.stack(history[:40]), torch.stack(history[40:])
    assert bool((up[-1] > up[0] + 0.5).all()) and bool((down[-1] < down[0] - 0.5).all())
    assert bool((up[-1, 0] <= up[-1, 1]) & (down[-1, 0] <= down[-1, 1]))  # τ_hard <= τ_easy throughout
    # Relative to the model: a prompt solved half the time is easy for the weak model of the start and
    # hard for the strong one at the top; so it gets fewer samples at first and more later.
    split = curriculum.split_by_difficulty
    assert [bool(x) for x in split(torch.tensor([0.5]), history[0])] == [True, False]
    assert [bool(x) for x in split(torch.tensor([0.5]), history[39])] == [False, True]


# ---- hard-example mining (algorithm.curriculum=hard) -------------------------------------------------------


def test_hard_example_weights_hand_values():
    passes, tries = torch.tensor([0.0, 3.0, 4.0, 1.0, 0.0]), torch.tensor([0.0, 4.0, 4.0, 4.0, 4.0])
    w = curriculum.hard_example_weights(passes, tries, 0.1)
    assert w.tolist() == pytest.approx([1.1, 0.35, 0.1, 0.85, 1.1])  # unseen counts as never solved


def _inclusion(w: list[float], n: int) -> list[float]:
    """Exact inclusion probabilities of n draws without replacement, each ∝ weight among the rest."""
    import itertools

    out = [0.0] * len(w)
    for order in itertools.permutations(range(len(w)), n):
        p, left = 1.0, sum(w)
        for i in order:
            p *= w[i] / left
            left -= w[i]
        for i in order:
            out[i] += p
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_hard_prompts_are_drawn_as_often_as_their_weights_say(n):
    """3,000 draws: each prompt's count within 4.5 binomial standard deviations of M·π, π its exact
    inclusion probability (for n = 1, w / Σw = (1 − pass rate + floor) / Σ)."""
    passes = torch.tensor([0.0, 8.0, 2.0, 6.0, 4.0, 1.0])
    tries = torch.tensor([8.0, 8.0, 8.0, 8.0, 8.0, 0.0])
    w = curriculum.hard_example_weights(passes, tries, 0.1)
    pi = torch.tensor(_inclusion(w.tolist(), n), dtype=torch.float64)
    if n == 1:
        torch.testing.assert_close(pi, (w / w.sum()).double())
    g = torch.Generator().manual_seed(0)
    M = 3_000
    counts = torch.zeros(6, dtype=torch.float64)
    for _ in range(M):
        picked = curriculum.sample_hard_prompts(passes, tries, n, 0.1, g)
        assert len(set(picked)) == n
        counts[picked] += 1
    sd = (M * pi * (1 - pi)).sqrt()
    assert bool(((counts - M * pi).abs() <= 4.5 * sd).all()), (counts / M, pi)
    assert counts[0] > 5 * counts[1]  # never solved vs always solved: 1.1 vs 0.1


def test_with_no_floor_solved_prompts_are_drawn_only_when_needed():
    g = torch.Generator().manual_seed(0)
    tries = torch.full((5,), 4.0)
    solved = torch.tensor([4.0, 4.0, 0.0, 4.0, 4.0])  # only prompt 2 is ever failed
    for _ in range(50):
        picked = curriculum.sample_hard_prompts(solved, tries, 3, 0.0, g)
        assert len(set(picked)) == 3 and picked[0] == 2
    all_solved = curriculum.sample_hard_prompts(torch.full((5,), 4.0), tries, 3, 0.0, g)  # weights all 0
    assert len(set(all_solved)) == 3


def test_pass_rates_tracked_in_training_are_what_the_verifier_said(tmp_path, coins, monkeypatch):
    """curriculum=hard end to end: the pass counts the sampler is given grow, prompt by prompt, by the
    correct samples the verifier reported for the prompts drawn in the step before."""
    draws, verdicts = [], []
    sample, score = curriculum.sample_hard_prompts, grpo_rollout.score

    def sample_spy(passes, tries, n, floor, generator):
        picked = sample(passes, tries, n, floor, generator)
        draws.append((passes.clone(), tries.clone(), picked))
        return picked

    def score_spy(policy, exs, texts, G):
        rewards, correct = score(policy, exs, texts, G)
        verdicts.append(correct.view(-1, G).sum(-1).float())
        return rewards, correct

    monkeypatch.setattr(grpo_rollout, "sample_hard_prompts", sample_spy)
    monkeypatch.setattr(grpo_rollout, "score", score_spy)
    _train(tmp_path, **{"data.task": "coin", "algorithm.curriculum": "hard", "trainer.total_steps": 4})
    assert len(draws) == 4 and len(verdicts) == 4
    assert draws[0][1].sum() == 0  # nothing tried yet: every weight is 1 + floor
    for (passes, tries, picked), right, (passes2, tries2, _) in zip(draws, verdicts, draws[1:], strict=False):
        want_p, want_t = passes.clone(), tries.clone()
        want_p[picked] += right
        want_t[picked] += G
        assert torch.equal(passes2, want_p) and torch.equal(tries2, want_t)
