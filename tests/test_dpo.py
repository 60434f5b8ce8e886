"""DPO: the loss through the trainer's plumbing, accumulation, a short run that learns the synthetic
preferences, evaluation, exact resume and bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch

import advantage
from advantage.algos.llm import dpo
from advantage.cli import main
from advantage.errors import ConfigError
from fp32_bounds import assert_within, chain_length, summed_bound

TINY = {
    "data.train_size": 64,
    "data.validation_size": 16,
    "data.test_size": 16,
    "model.hidden_size": 32,
    "model.layers": 1,
    "model.heads": 2,
    "algorithm.batch_size": 8,
    "algorithm.learning_rate": 3e-3,
    "trainer.eval_episodes": 16,
    "trainer.eval_every": 0,
    "trainer.total_steps": 4,
    "trainer.tensorboard": False,
}


def _train(tmp_path, name="run", **over):
    cfg = {**TINY, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("dpo", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


def _model_and_items(n=6):
    from advantage.algos.llm.models import build_model
    from advantage.algos.llm.policy import LMPolicy
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("dpo", overrides=TINY)
    task = dpo.make_task(cfg.data)
    model, tok = build_model(cfg, task)
    policy = LMPolicy(model, tok, task, cfg)
    items = dpo.tokenize_pairs(tok, dpo.pairs_of(policy.examples("train", n)), cfg.data)
    return model, tok, items


def test_sequence_logps_are_sums_over_each_response():
    from advantage.lm.model import sequence_logprobs

    model, tok, items = _model_and_items(3)
    chosen, rejected = dpo.sequence_logps(model, items, tok.pad_token_id)
    for k, (p, c, r) in enumerate(items):
        for resp, got in ((c, chosen[k]), (r, rejected[k])):
            ids = torch.tensor([p + resp])
            want = sequence_logprobs(model, ids, torch.ones_like(ids), response_start=len(p)).sum()
            assert float(got) == pytest.approx(float(want), abs=1e-5)


def test_micro_batches_equal_one_batch_and_start_at_log_2():
    model, tok, items = _model_and_items(8)
    loss_fn = dpo.dpo_loss_fn(dpo.DPOAlgorithm(beta=0.5))
    with torch.no_grad():
        ref_c, ref_r = dpo.sequence_logps(model, items, tok.pad_token_id)
    model.zero_grad(set_to_none=True)
    pc, pr = dpo.sequence_logps(model, items, tok.pad_token_id)
    one = loss_fn(pc, pr, ref_c, ref_r).sum() / len(items)
    assert float(one.detach()) == pytest.approx(math.log(2), abs=1e-5)  # policy == reference
    one.backward()
    g_one = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    for j in range(0, len(items), 3):
        pc, pr = dpo.sequence_logps(model, items[j : j + 3], tok.pad_token_id)
        (loss_fn(pc, pr, ref_c[j : j + 3], ref_r[j : j + 3]).sum() / len(items)).backward()
    g_micro = [p.grad.clone() for p in model.parameters()]
    parts = []  # each pair's gradient alone, for the magnitudes (tests/fp32_bounds.py)
    for j in range(len(items)):
        model.zero_grad(set_to_none=True)
        pc, pr = dpo.sequence_logps(model, items[j : j + 1], tok.pad_token_id)
        (loss_fn(pc, pr, ref_c[j : j + 1], ref_r[j : j + 1]).sum() / len(items)).backward()
        parts.append([p.grad.clone() for p in model.parameters()])
    tokens = sum(len(p) + len(c) + len(r) for p, c, r in items)
    longest = max(len(p) + max(len(c), len(r)) for p, c, r in items)
    assert_within(g_one, g_micro, summed_bound(parts, chain_length(model.config, tokens, longest)))


@pytest.mark.torch_versions
def test_training_learns_the_preferences(tmp_path):
    run = _train(tmp_path, **{"trainer.total_steps": 40, "trainer.eval_every": 40, "trainer.log_every": 5})
    train_rows = [r for r in run.metrics if "train/loss" in r]
    assert train_rows[0]["train/loss"] == pytest.approx(math.log(2), abs=0.05)
    assert train_rows[-1]["train/loss"] < train_rows[0]["train/loss"]
    evals = [r for r in run.metrics if "eval/accuracy" in r]
    assert evals[-1]["eval/accuracy"] > 0.5
    assert {"eval/reward_margin", "eval/rewards_chosen", "eval/rewards_rejected"} <= set(evals[-1])
    # the synthetic task has a hidden rule: greedy responses are compared with the reference's
    last = evals[-1]
    assert last["eval/wins"] + last["eval/ties"] + last["eval/losses"] == last["eval/n"]
    assert last["eval/win_rate"] == (last["eval/wins"] + 0.5 * last["eval/ties"]) / last["eval/n"]
    assert 0.0 <= last["eval/hidden_score"] <= 1.0 and 0.0 <= last["eval/reference_hidden_score"] <= 1.0


@pytest.mark.parametrize("loss_type", ["ipo", "hinge"])
def test_variants_train(tmp_path, loss_type):
    run = _train(tmp_path, **{"algorithm.loss_type": loss_type, "algorithm.precompute_ref": False})
    assert all(math.isfinite(r["train/loss"]) for r in run.metrics if "train/loss" in r)


def test_eval_cli_and_resume(tmp_path, capsys, rewound):
    straight = _train(tmp_path, "straight", **{"trainer.total_steps": 4, "trainer.checkpoint_every": 2})
    capsys.readouterr()
    assert main(["eval", str(straight.dir), "--json", "--limit", "8"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["split"] == "test" and 0.0 <= res["accuracy"] <= 1.0 and res["n"] >= 8
    resumed = advantage.resume(rewound(straight.dir), quiet=True)
    a = dict(straight.policy.model.named_parameters())
    b = dict(resumed.policy.model.named_parameters())
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_dataset_missing_a_column(tmp_path):
    bad = tmp_path / "prefs.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "chosen": "b"}) + "\n")
    with pytest.raises(ConfigError, match="rejected"):
        _train(tmp_path, **{"data.task": "dataset", "data.path": str(bad)})
    assert not (tmp_path / "run").exists()
