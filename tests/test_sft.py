"""SFT: the response-only loss and its global normalizer, checkpoints that are model folders, exact resume,
LoRA, evaluation (accuracy, pass@K, maj@K) and the bad-input errors."""

from __future__ import annotations

import json

import pytest
import torch

import advantage
from advantage.algos.llm import sft
from advantage.algos.llm.batches import collate
from advantage.algos.llm.training import learning_rate
from advantage.cli import main
from advantage.configs.sft import SFTAlgorithm
from advantage.errors import ConfigError
from fp32_bounds import assert_within, chain_length, summed_bound

TINY = {
    "data.task": "addition",
    "data.digits": 2,
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
    """A tiny SFT run; an override set to None drops that key."""
    cfg = {**TINY, "trainer.run_dir": str(tmp_path / name), **over}
    return advantage.train("sft", quiet=True, **{k: v for k, v in cfg.items() if v is not None})


def _policy_and_batch():
    from advantage.algos.llm.data import make_task
    from advantage.algos.llm.models import build_model
    from advantage.algos.llm.policy import LMPolicy
    from advantage.resolve import resolve_config

    _, cfg = resolve_config("sft", overrides=TINY)
    task = make_task(cfg.data)
    model, tok = build_model(cfg, task)
    policy = LMPolicy(model, tok, task, cfg)
    prompts, responses = sft.tokenize_examples(policy, policy.examples("train", 8), 64, 32)
    return model, tok, prompts, responses


def test_collate_layout_left_pads_prompts_and_right_pads_responses():
    mb = collate([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_id=0)
    assert mb["input_ids"].tolist() == [[5, 6, 7, 1, 2, 0], [0, 0, 8, 3, 4, 9]]
    assert mb["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert mb["response_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert int(mb["P"]) == 3


def test_loss_is_mean_nll_of_response_tokens_only():
    from advantage.lm.model import sequence_logprobs

    model, tok, prompts, responses = _policy_and_batch()
    mb = collate(prompts, responses, tok.pad_token_id)
    n = float(mb["response_mask"].sum())
    loss = sft.sft_loss(model, mb, n)
    # Naive: each sequence alone, unpadded, summing -log p over its response tokens.
    total = 0.0
    for p, r in zip(prompts, responses, strict=True):
        ids = torch.tensor([p + r])
        logp = sequence_logprobs(model, ids, torch.ones_like(ids), response_start=len(p))
        total += float(-logp.detach().sum())
    assert float(loss.detach()) == pytest.approx(total / n, rel=1e-5)
    assert n == sum(len(r) for r in responses)  # EOS included, prompt excluded


def _accumulation_bound(model, tok, prompts, responses, n):
    """What two fp32 sums of the per-sequence gradients of the SFT loss may differ by, per parameter
    (tests/fp32_bounds.py); the per-sequence gradients are computed one sequence at a time."""
    parts = []
    for p, r in zip(prompts, responses, strict=True):
        model.zero_grad(set_to_none=True)
        sft.sft_loss(model, collate([p], [r], tok.pad_token_id), n).backward()
        parts.append([q.grad.clone() for q in model.parameters()])
    model.zero_grad(set_to_none=True)
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    longest = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    return summed_bound(parts, chain_length(model.config, tokens, longest))


def test_gradient_accumulation_equals_one_big_batch():
    model, tok, prompts, responses = _policy_and_batch()
    n = float(sum(len(r) for r in responses))

    def grads(micro: int) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        for j in range(0, len(prompts), micro):
            mb = collate(prompts[j : j + micro], responses[j : j + micro], tok.pad_token_id)
            sft.sft_loss(model, mb, n).backward()
        return [p.grad.clone() for p in model.parameters()]

    full, accumulated = grads(8), grads(3)  # uneven micro-batches: 3 + 3 + 2
    bound = _accumulation_bound(model, tok, prompts, responses, n)
    assert_within(full, accumulated, bound)
    # A per-micro-batch mean would differ: the normalizer has to be the step's token count.
    model.zero_grad(set_to_none=True)
    for j in range(0, 8, 3):
        mb = collate(prompts[j : j + 3], responses[j : j + 3], tok.pad_token_id)
        sft.sft_loss(model, mb, float(mb["response_mask"].sum())).backward()
    wrong = [p.grad for p in model.parameters()]
    with pytest.raises(AssertionError, match="above its bound"):  # far outside the rounding bound
        assert_within(full, wrong, bound)


def test_learning_rate_schedules():
    a = SFTAlgorithm(learning_rate=1.0, warmup_steps=10, min_lr_ratio=0.1, lr_schedule="cosine")
    assert learning_rate(a, 0, 110) == pytest.approx(0.1)
    assert learning_rate(a, 9, 110) == pytest.approx(1.0)
    assert learning_rate(a, 10, 110) == pytest.approx(1.0)
    assert learning_rate(a, 60, 110) == pytest.approx(0.55)
    assert learning_rate(a, 110, 110) == pytest.approx(0.1)
    a.lr_schedule = "linear"
    assert learning_rate(a, 60, 110) == pytest.approx(0.55)
    assert learning_rate(a, 35, 110) == pytest.approx(0.1 + 0.9 * 0.75)
    a.lr_schedule = "constant"
    assert learning_rate(a, 100, 110) == 1.0


def test_checkpoint_is_a_model_folder_with_identical_logprobs(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from advantage.lm.model import sequence_logprobs

    run = _train(tmp_path)
    folder = run.checkpoint.path
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(run.checkpoint.files)
    hf = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, attn_implementation="eager"
    ).eval()
    hf_default = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ours = run.policy.model
    ids = torch.tensor([tok("13+4=17", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    a = sequence_logprobs(hf, ids, torch.ones_like(ids), response_start=5)
    b = sequence_logprobs(ours, ids, torch.ones_like(ids), response_start=5)
    assert torch.equal(a, b)  # same weights, same attention kernel: bit for bit
    c = sequence_logprobs(hf_default, ids, torch.ones_like(ids), response_start=5)
    torch.testing.assert_close(c, b, rtol=0, atol=1e-5)  # transformers' default kernel (sdpa)
    # ... and a later run starts from it with model.path.
    run2 = _train(tmp_path, "from_path", **{"model.path": str(folder), "trainer.total_steps": 2})
    assert run2.config.model.pretrained and run2.step == 2


@pytest.mark.torch_versions
def test_training_lowers_the_loss(tmp_path):
    run = _train(
        tmp_path, **{"trainer.total_steps": 40, "trainer.log_every": 5, "algorithm.learning_rate": 1e-2}
    )
    losses = [r["train/loss"] for r in run.metrics if "train/loss" in r]
    assert len(losses) == 8
    assert losses[-1] < 0.8 * losses[0]


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path, rewound):
    straight = _train(tmp_path, "straight", **{"trainer.total_steps": 10, "trainer.checkpoint_every": 5})
    # The same run interrupted at step 5: its folder as it was then, resumed to the end.
    resumed = advantage.resume(rewound(straight.dir), quiet=True)
    assert resumed.step == 10
    a = dict(straight.policy.model.named_parameters())
    b = dict(resumed.policy.model.named_parameters())
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_lora_trains_adapters_and_saves_a_merged_model(tmp_path):
    run = _train(tmp_path, **{"model.lora.rank": 4, "model.lora.target_modules": ["q_proj", "v_proj"]})
    cfg = json.loads((run.checkpoint.path / "config.json").read_text())
    assert cfg["model_type"] == "qwen2"
    names = [n for n, _ in run.policy.model.named_parameters()]
    assert not any("lora" in n for n in names)  # merged: a plain model
    assert any(k.startswith("adapter.") and "lora_A" in k for k in run.checkpoint.tensors)
    resumed = advantage.resume(run.dir, quiet=True, **{"trainer.total_steps": 8})
    assert resumed.step == 8


def test_eval_cli_prints_accuracy_pass_at_k_and_maj_at_k(tmp_path, capsys):
    run = _train(tmp_path)
    capsys.readouterr()
    assert main(["eval", str(run.dir), "--samples", "4", "--json", "--limit", "8"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 8 and res["samples"] == 4
    assert res["split"] == "test"
    for key in ("accuracy", "pass@1", "pass@4", "maj@4", "return_mean"):
        assert 0.0 <= res[key] <= 1.0, key
    assert res["pass@4"] >= res["pass@1"]
    assert main(["eval", str(run.dir), "--episodes", "3"]) == 2
    assert "--samples K" in capsys.readouterr().err


def test_eval_metrics_logged_during_training(tmp_path):
    run = _train(tmp_path, **{"trainer.eval_every": 3, "trainer.eval_samples": 2})
    evals = [r for r in run.metrics if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [3, 6]
    assert {"eval/pass@2", "eval/maj@2", "eval/pass@1", "eval/n"} <= set(evals[0])


# ---- bad input ------------------------------------------------------------------------------------


def test_dataset_missing_prompt_column_and_empty_dataset(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    with pytest.raises(ConfigError, match="no column 'prompt'"):
        over = {"data.task": "dataset", "data.path": str(bad), "data.prompt_key": "prompt"}
        _train(tmp_path, **over, **{"data.digits": None})
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        _train(tmp_path, **{"data.task": "dataset", "data.path": str(empty), "data.digits": None})
    assert not (tmp_path / "run").exists()  # nothing created for a bad config


def test_prompt_longer_than_the_limit(tmp_path):
    with pytest.raises(ConfigError, match="longer than data.max_prompt_length=2"):
        _train(tmp_path, **{"data.max_prompt_length": 2})


def test_prompt_and_response_longer_than_the_context(tmp_path):
    with pytest.raises(ConfigError, match="exceeds the model's context of 64 tokens"):
        _train(tmp_path, **{"model.max_position_embeddings": 64, "data.max_prompt_length": 48})
    assert not (tmp_path / "run").exists()


def test_tokenizer_without_pad_token(tmp_path):
    from advantage.lm.model import build_char_tokenizer, build_scratch_model

    tok = build_char_tokenizer("0123456789+=")
    model = build_scratch_model("qwen2", tok, hidden_size=32, layers=1, heads=2)
    folder = tmp_path / "nopad"
    model.save_pretrained(folder)
    tok.pad_token = None
    tok.save_pretrained(folder)
    with pytest.raises(ConfigError, match="has no pad token.*model.pad_to_eos=true"):
        _train(tmp_path, **{"model.path": str(folder), "model.pad_to_eos": False})
    assert _train(tmp_path, **{"model.path": str(folder)}).step == 6  # pad = eos by default
    # A config that does not name a pad token makes transformers invent one the model cannot embed.
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("pad_token", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="does not fit the model.*pad id 20"):
        _train(tmp_path, "other", **{"model.path": str(folder)})


@pytest.mark.parametrize("algo, key", [("sft", "model"), ("grpo", "worker.actor.model")])
def test_a_bad_tokenizer_is_one_problem_naming_the_key_as_written(tmp_path, algo, key):
    from advantage.lm.model import build_char_tokenizer, build_scratch_model
    from advantage.resolve import resolve_config

    tok = build_char_tokenizer("0123456789+=")
    folder = tmp_path / "nopad"
    build_scratch_model("qwen2", tok, hidden_size=32, layers=1, heads=2).save_pretrained(folder)
    tok.pad_token = None
    tok.save_pretrained(folder)
    with pytest.raises(ConfigError) as e:
        resolve_config(algo, overrides={f"{key}.path": str(folder), f"{key}.pad_to_eos": False})
    assert len(e.value.problems) == 1, e.value.problems
    assert f"({key}.pad_to_eos=true)" in e.value.problems[0]


def test_bad_model_options_are_listed_together():
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError) as e:
        resolve_config(
            "sft",
            overrides={
                "model.init": "pretrained",
                "model.hidden_size": 30,
                "model.heads": 4,
                "data.task": "additon",
                "algorithm.micro_batch_size": 128,
            },
        )
    text = str(e.value)
    assert "model.path is required" in text
    assert "divisible by model.heads=4" in text
    assert "micro_batch_size=128 is larger" in text


def test_packing_gives_the_same_loss_and_gradients_as_padding():
    model, tok, prompts, responses = _policy_and_batch()
    n = float(sum(len(r) for r in responses))
    packed = sft.pack(prompts, responses, tok.pad_token_id, length=24)
    assert packed["input_ids"].shape[0] < len(prompts)  # several sequences share a row
    assert float(packed["target_mask"].sum()) == n
    model.zero_grad(set_to_none=True)
    a = sft.sft_loss(model, collate(prompts, responses, tok.pad_token_id), n)
    a.backward()
    ga = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    b = sft.packed_loss(model, packed, n)
    b.backward()
    gb = [p.grad.clone() for p in model.parameters()]
    assert float(a.detach()) == pytest.approx(float(b.detach()), rel=1e-5)
    assert_within(ga, gb, _accumulation_bound(model, tok, prompts, responses, n))
    # Without the restarting positions the rows would attend across sequences: a different loss.
    cross = model(input_ids=packed["input_ids"]).logits[:, :-1].float()
    logp = cross.gather(-1, packed["input_ids"][:, 1:, None]).squeeze(-1) - cross.logsumexp(-1)
    wrong = float((-(logp * packed["target_mask"][:, 1:]).sum() / n).detach())
    assert abs(wrong - float(a.detach())) > 1e-3
    with pytest.raises(ConfigError, match="pack_length=4"):
        sft.pack(prompts, responses, tok.pad_token_id, length=4)


def test_packed_training_runs(tmp_path):
    run = _train(tmp_path, **{"algorithm.packing": True, "algorithm.pack_length": 32})
    assert run.step == 6
