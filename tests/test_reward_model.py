"""Reward model: last-token pooling under any padding, the pairwise and K-wise losses (K = 2 equal),
gradient accumulation, learning the synthetic task, checkpoints a later trainer can load, exact resume,
`advantage eval --json`, and the bad-input errors."""

from __future__ import annotations

import json
import time

import pytest
import torch

import advantage
from advantage.algos.llm import reward_model as rm
from advantage.algos.llm import reward_models
from advantage.cli import main
from advantage.errors import ConfigError
from advantage.math.preference import bradley_terry_loss, kwise_ranking_loss
from fp32_bounds import U, assert_within, chain_length, summed_bound

TINY = {
    "data.train_size": 64,
    "data.validation_size": 16,
    "data.test_size": 16,
    "model.hidden_size": 32,
    "model.layers": 1,
    "model.heads": 2,
    "algorithm.batch_size": 8,
    "algorithm.warmup_steps": 2,
    "trainer.eval_episodes": 16,
    "trainer.eval_every": 0,
    "trainer.total_steps": 6,
    "trainer.tensorboard": False,
}


def _train(tmp_path, name="run", **over):
    cfg = {**TINY, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("reward_model", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


def _model(seed=0) -> reward_models.RewardModel:
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    tok = build_char_tokenizer("abcdefgh=")
    backbone = build_scratch_model("qwen2", tok, hidden_size=32, layers=2, heads=2, seed=seed)
    model = reward_models.RewardModel(backbone, tok, seed=seed)
    with torch.no_grad():  # a non-zero head bias, so a wrong pooled position cannot hide behind it
        model.head.bias.fill_(0.3)
    return model.eval()


# ---- pooling -------------------------------------------------------------------------------------


def test_last_token_index_under_every_padding():
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    mixed = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 0, 0], [1, 1, 1, 1, 0]])  # prompt left, response right
    assert reward_models.last_token_index(right).tolist() == [2, 4, 0]
    assert reward_models.last_token_index(left).tolist() == [4, 4, 4]
    assert reward_models.last_token_index(mixed).tolist() == [3, 2, 3]
    with pytest.raises(ValueError, match="at least one real token"):
        reward_models.last_token_index(torch.tensor([[0, 0]]))


@pytest.mark.parametrize("side", ["right", "left", "mixed"])
def test_padded_batch_scores_equal_each_sequence_alone(side):
    model = _model()
    tok = model.tokenizer
    pairs = [("abc=", "ab"), ("hgfedc=", "a"), ("a=", "bbbbbbb"), ("cab=", "cab")]
    encoded = [model.encode(p, r) for p, r in pairs]
    alone = []
    with torch.no_grad():
        for p, r in encoded:
            ids = torch.tensor([p + r])
            alone.append(float(model(ids, torch.ones_like(ids))[0]))
        if side == "right":
            ids, mask = reward_models.collate_sequences([p + r for p, r in encoded], tok.pad_token_id)
        else:
            P = max(len(p) for p, _ in encoded)
            T = max(len(r) for _, r in encoded)
            ids = torch.full((len(encoded), P + T), tok.pad_token_id)
            mask = torch.zeros_like(ids)
            for i, (p, r) in enumerate(encoded):
                s = p + r
                # left: the whole sequence left-padded to P + T; mixed: prompt left, response right
                start = (P + T - len(s)) if side == "left" else P - len(p)
                ids[i, start : start + len(s)] = torch.tensor(s)
                mask[i, start : start + len(s)] = 1
        batched = model(ids, mask)
    assert batched.shape == (4,)
    torch.testing.assert_close(batched, torch.tensor(alone), atol=1e-5, rtol=0)
    # the read-out is the EOS every sequence ends with
    assert all(int(ids[i, j]) == tok.eos_token_id for i, j in enumerate(reward_models.last_token_index(mask)))
    # score() from text gives the same numbers
    torch.testing.assert_close(model.score(*zip(*pairs, strict=True)), torch.tensor(alone), atol=1e-5, rtol=0)


# ---- losses --------------------------------------------------------------------------------------


def _items_and_tokens(model, examples):
    """``(prompt ids, [response ids + EOS])`` per ``(prompt, responses)``, as the trainer tokenizes."""
    return [(model.encode(p, rs[0])[0], [model.encode(p, r)[1] for r in rs]) for p, rs in examples]


def _summed_bound(model, examples, tokens, loss, normalizer):
    """What two fp32 sums of these items' gradients may differ by (tests/fp32_bounds.py), from each
    item's gradient computed alone."""
    items = rm.build_items(examples, loss)
    parts = []
    for j in range(len(items)):
        model.zero_grad(set_to_none=True)
        seqs, index = rm.micro_batch(items[j : j + 1], tokens)
        rm.rm_loss(model, seqs, index, normalizer, loss=loss)[0].backward()
        parts.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    lengths = [len(prompt) + len(r) for prompt, responses in tokens for r in responses]
    return summed_bound(parts, chain_length(model.backbone.config, sum(lengths), max(lengths)))


def test_kwise_with_two_responses_equals_pairwise_and_k3_averages_its_pairs():
    model = _model()
    examples = [("abc=", ("ab", "gh")), ("def=", ("e", "abcg")), ("gha=", ("hh", "b"))]
    tokens = _items_and_tokens(model, examples)
    from advantage.envs.text.preference import PreferenceExample

    exs = [PreferenceExample(p, r) for p, r in examples]
    grads = []
    for loss in ("pairwise", "kwise"):
        items = rm.build_items(exs, loss)
        assert items == [(0, (0, 1)), (1, (0, 1)), (2, (0, 1))]
        seqs, index = rm.micro_batch(items, tokens)
        model.zero_grad(set_to_none=True)
        value, stats = rm.rm_loss(model, seqs, index, 3.0, loss=loss)
        value.backward()
        grads.append((float(value.detach()), [p.grad.clone() for p in model.parameters()]))
        assert stats["pairs"] == 3 and stats["sequences"] == 6
    # The two losses are two formulas of the same function of the 6 scores (log σ(a − b) against a
    # log-softmax over 2): a few roundings of a value under 1, then the same backward from the scores.
    assert grads[0][0] == pytest.approx(grads[1][0], abs=8 * U)
    assert_within(grads[0][1], grads[1][1], _summed_bound(model, exs, tokens, "pairwise", 3.0))
    # Mixed K in one micro-batch: a ranking of 3 averages its 3 pairs, a pair counts once.
    exs = [PreferenceExample("abc=", ("abc", "ab", "xh")), PreferenceExample("def=", ("d", "a"))]
    tokens = _items_and_tokens(model, [(e.prompt, e.responses) for e in exs])
    seqs, index = rm.micro_batch(rm.build_items(exs, "kwise"), tokens)
    assert index.tolist() == [[0, 1, 2], [3, 4, -1]]
    with torch.no_grad():
        value, _ = rm.rm_loss(model, seqs, index, 2.0, loss="kwise")
        r = model.score(["abc=", "abc=", "abc=", "def=", "def="], ["abc", "ab", "xh", "d", "a"])
    three = (bradley_terry_loss(r[[0, 0, 1]], r[[1, 2, 2]])).mean()
    two = bradley_terry_loss(r[3:4], r[4:5])[0]
    assert float(value) == pytest.approx(float((three + two) / 2), abs=1e-6)
    assert float(value) == pytest.approx(
        float(kwise_ranking_loss(torch.stack([r[:3], torch.cat([r[3:], r[:1]])]), index >= 0).mean()),
        abs=1e-6,
    )
    # Pairwise training on a ranking of 3 uses its 3 pairs as separate items.
    assert rm.build_items(exs, "pairwise") == [(0, (0, 1)), (0, (0, 2)), (0, (1, 2)), (1, (0, 1))]


def test_center_rewards_term_and_gradient_accumulation():
    from advantage.envs.text.preference import PreferenceExample

    model = _model()
    exs = [PreferenceExample(f"{c}bc=", (c, "hg", "dd")) for c in "abcdefg"]
    tokens = _items_and_tokens(model, [(e.prompt, e.responses) for e in exs])
    items = rm.build_items(exs, "kwise")
    seqs, index = rm.micro_batch(items, tokens)
    with torch.no_grad():
        base, _ = rm.rm_loss(model, seqs, index, 7.0, loss="kwise")
        centered, _ = rm.rm_loss(model, seqs, index, 7.0, loss="kwise", center_coef=0.5)
        r = model(*reward_models.collate_sequences(seqs, model.tokenizer.pad_token_id)).view(7, 3)
    assert float(centered - base) == pytest.approx(float(0.5 * (r.mean(-1) ** 2).mean()), rel=1e-5)

    def grads(micro):
        model.zero_grad(set_to_none=True)
        for j in range(0, len(items), micro):
            s, i = rm.micro_batch(items[j : j + micro], tokens)
            rm.rm_loss(model, s, i, float(len(items)), loss="kwise")[0].backward()
        return [p.grad.clone() for p in model.parameters()]

    bound = _summed_bound(model, exs, tokens, "kwise", float(len(items)))
    assert_within(grads(7), grads(3), bound)  # 3 + 3 + 1


# ---- training ------------------------------------------------------------------------------------


# The learning test's settings (over TINY); benchmarks/reward_model_test_seeds.py runs them over seeds for
# docs/algorithms/reward_models.md.
LEARNS = {
    "data.train_size": 8000,
    "data.validation_size": 200,
    "data.response_length": 4,  # coarser scores than the default 6: fewer near-ties
    "model.hidden_size": 64,
    "model.layers": 2,
    "model.heads": 4,
    "algorithm.batch_size": 32,
    "algorithm.warmup_steps": 10,
    "trainer.total_steps": 200,
    "trainer.eval_episodes": 200,
    "trainer.log_every": 50,
}


@pytest.mark.torch_versions
def test_a_tiny_reward_model_learns_the_synthetic_task(tmp_path):
    start = time.perf_counter()
    run = _train(tmp_path, **LEARNS)
    seconds = time.perf_counter() - start
    final = [r for r in run.metrics if "eval/accuracy" in r][-1]
    assert final["eval/accuracy"] >= 0.75, (final, seconds)
    assert final["eval/return_mean"] == final["eval/accuracy"]
    assert final["eval/hidden_agreement"] == final["eval/accuracy"]  # no label noise: the same pairs
    assert final["eval/hidden_correlation"] > 0.5
    losses = [r["train/loss"] for r in run.metrics if "train/loss" in r]
    assert losses[-1] < losses[0] < 0.75  # starts near log 2
    test = run.evaluate(split="test")
    assert test["accuracy"] >= 0.75 and test["n"] == 16


def test_kwise_run_with_k2_equals_the_pairwise_run(tmp_path):
    a = _train(tmp_path, "pairwise", **{"algorithm.loss": "pairwise"})
    b = _train(tmp_path, "kwise", **{"algorithm.loss": "kwise"})
    pa, pb = dict(a.policy.model.named_parameters()), dict(b.policy.model.named_parameters())
    for k in pa:
        torch.testing.assert_close(pa[k], pb[k], atol=1e-6, rtol=1e-5, msg=k)


def test_checkpoint_is_a_model_folder_plus_a_value_head(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    run = _train(tmp_path, **{"data.k": 3, "algorithm.loss": "kwise"})
    folder = run.checkpoint.path
    own = {reward_models.HEAD_FILE, reward_models.META_FILE}
    assert {"config.json", "model.safetensors", "tokenizer.json", *own} <= set(run.checkpoint.files)
    head = load_file(folder / reward_models.HEAD_FILE)
    assert torch.equal(head["weight"], run.checkpoint.tensors["value_head.weight"])
    assert torch.equal(head["bias"], run.checkpoint.tensors["value_head.bias"])
    AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)  # the backbone alone loads too
    # What a later PPO-RLHF / GRPO run does with worker.reward.model=RUN_DIR:
    loaded = reward_models.load_reward_model(run.dir)
    prompts, responses = ["abcde=", "abcde=", "hhh="], ["abc", "fgh", ""]
    torch.testing.assert_close(loaded.score(prompts, responses), run.policy.model.score(prompts, responses))
    assert isinstance(run.act(("abcde=", "abc")), float)
    assert run.act(("abcde=", "abc")) == pytest.approx(float(loaded.score(["abcde="], ["abc"])[0]), abs=1e-6)
    # ... and the run folder can also start a new reward model (or a policy) as model.path
    run2 = _train(tmp_path, "from_path", **{"model.path": str(run.dir), "trainer.total_steps": 2})
    assert run2.config.model.pretrained and run2.step == 2
    with pytest.raises(ConfigError, match="not a reward model folder"):
        reward_models.load_reward_model(tmp_path / "nowhere")


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path, rewound):
    straight = _train(tmp_path, "straight", **{"trainer.total_steps": 10, "trainer.checkpoint_every": 5})
    resumed = advantage.resume(rewound(straight.dir), quiet=True)
    assert resumed.step == 10
    a, b = straight.policy.model.state_dict(), resumed.policy.model.state_dict()
    assert a.keys() == b.keys() and any(k.startswith("head.") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_lora_reward_model_trains_and_resumes(tmp_path):
    run = _train(tmp_path, **{"model.lora.rank": 4, "model.lora.target_modules": ["q_proj", "v_proj"]})
    assert any(k.startswith("adapter.") for k in run.checkpoint.tensors)
    assert not any("lora" in n for n, _ in run.policy.model.named_parameters())  # merged when saved
    assert advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 8}).step == 8


def test_dataset_task_with_rankings(tmp_path):
    rows = [
        {"prompt": f"q{i}", "responses": [f"good {i}", f"ok {i}", f"bad {i}"], "split": s}
        for i, s in enumerate(["train"] * 20 + ["validation"] * 4 + ["test"] * 4)
    ]
    path = tmp_path / "ranked.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    over = {
        "data.task": "dataset",
        "data.path": str(path),
        "data.train_size": 20,
        "data.validation_size": 4,
        "data.test_size": 4,
        "trainer.eval_episodes": 4,
        "trainer.eval_every": 3,
        "algorithm.loss": "kwise",
        "algorithm.batch_size": 4,
    }
    run = _train(tmp_path, **over)
    evals = [r for r in run.metrics if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [3, 6]
    assert evals[-1]["eval/pairs"] == 12 and "eval/hidden_agreement" not in evals[-1]
    train_rows = [r for r in run.metrics if "train/accuracy" in r]
    assert train_rows and 0 <= train_rows[-1]["train/accuracy"] <= 1


def test_eval_cli_prints_accuracy(tmp_path, capsys):
    run = _train(tmp_path, **{"data.label_noise": 0.2})
    capsys.readouterr()
    assert main(["eval", str(run.dir), "--json", "--limit", "8"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["split"] == "test" and res["n"] == 8 and res["pairs"] == 8
    assert 0 <= res["accuracy"] <= 1 and res["return_mean"] == res["accuracy"]
    assert 0 <= res["hidden_agreement"] <= 1 and "margin" in res
    assert main(["eval", str(run.dir), "--samples", "4"]) == 2
    assert "does not sample" in capsys.readouterr().err


# ---- bad input ------------------------------------------------------------------------------------


def test_config_errors_create_nothing(tmp_path):
    with pytest.raises(ConfigError, match="did you mean '?synthetic"):
        _train(tmp_path, **{"data.task": "synthetc"})
    with pytest.raises(ConfigError, match="unknown option data.digits"):
        _train(tmp_path, **{"data.digits": 3})
    with pytest.raises(ConfigError, match="trainer.eval_episodes=32 is more than data.validation_size=16"):
        _train(tmp_path, **{"trainer.eval_episodes": 32})
    with pytest.raises(ConfigError, match="exceeds the model's context of 64 tokens"):
        _train(tmp_path, **{"model.max_position_embeddings": 64, "data.max_prompt_length": 48})
    with pytest.raises(ConfigError, match="data.path is required"):
        _train(tmp_path, **{"data.task": "dataset"})
    with pytest.raises(ConfigError, match="algorithm.loss"):
        _train(tmp_path, **{"algorithm.loss": "listwise"})
    assert not (tmp_path / "run").exists()


def test_response_longer_than_the_limit(tmp_path):
    with pytest.raises(ConfigError, match="longer than data.max_response_length=3"):
        _train(tmp_path, **{"data.max_response_length": 3})
