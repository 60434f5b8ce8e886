"""The LM example's benchmarks without their runs (minutes each): the GRPO options mapped to TRL's
``GRPOConfig`` (benchmarks/grpo_learning_vs_trl.py), its verdict per seed, and the per-seed summary of the
README's SFT → GRPO pipeline (benchmarks/addition_example_seeds.py)."""

from __future__ import annotations

import pytest
from benchmarks.addition_example_seeds import summary as pipeline_summary
from benchmarks.addition_example_seeds import table as pipeline_table
from benchmarks.grpo_learning_vs_trl import ARMS, grpo_overrides, pairs, resolved, table, trl_config

SCRATCH = {"worker.actor.model.path": None, "worker.actor.model.init": "scratch"}


def config_of(arm: str, **extra):
    over = {**grpo_overrides("unused", 3, None, ARMS[arm][1]), **SCRATCH, **extra}
    return resolved(over)


def test_the_example_maps_to_trl_option_by_option(tmp_path):
    cfg = config_of("ours")
    a, r = cfg.worker.actor, cfg.worker.rollout
    kw = trl_config(cfg, str(tmp_path))
    assert kw["per_device_train_batch_size"] == cfg.data.rollout_batch_size * r.n
    assert kw["num_generations"] == r.n and kw["max_completion_length"] == cfg.data.max_response_length
    assert (kw["temperature"], kw["top_p"], kw["top_k"]) == (r.temperature, r.top_p, r.top_k)
    assert kw["loss_type"] == "grpo" and kw["scale_rewards"] == "group"  # seq_mean_token_mean, grpo
    assert kw["epsilon"] == kw["epsilon_high"] == a.clip_low
    assert kw["beta"] == 0.0 and kw["use_bias_correction_kl"] is False
    assert (kw["learning_rate"], kw["lr_scheduler_type"], kw["warmup_steps"]) == (
        a.learning_rate,
        a.lr_schedule,
        a.warmup_steps,
    )
    assert kw["max_steps"] == cfg.trainer.total_steps and kw["seed"] == 3
    assert kw["num_iterations"] == a.ppo_epochs and kw["save_steps"] == cfg.trainer.eval_every
    trl = pytest.importorskip("trl", minversion="1.16")
    trl.GRPOConfig(**kw)  # every keyword is one TRL takes


def test_the_kl_preset_maps_to_beta_with_plain_k3(tmp_path):
    kw = trl_config(config_of("trl kl"), str(tmp_path))
    assert kw["beta"] == 0.04 and kw["use_bias_correction_kl"] is False and kw["loss_type"] == "grpo"


@pytest.mark.parametrize(
    ("arm", "extra", "named"),
    [
        ("ours+ds", {}, "dynamic_sampling"),  # the example as it is: TRL has no dynamic sampling
        ("ours", {"worker.actor.loss": "gspo"}, "worker.actor.loss=gspo"),
        ("ours", {"algorithm.std_eps": 1e-6}, "std_eps"),
        ("ours", {"algorithm.advantage": "rloo"}, "algorithm.advantage=rloo"),
        ("trl kl", {"worker.actor.kl_estimator": "k1"}, "kl_estimator=k1"),
        ("ours", {"worker.actor.dual_clip": 3.0}, "dual_clip=3.0"),
        ("ours", {"worker.reward.overlong_buffer": 2}, "overlong_buffer=2"),
        ("ours", {"algorithm.curriculum": "hard"}, "curriculum=hard"),
    ],
)
def test_an_option_trl_cannot_express_is_refused_by_name(tmp_path, arm, extra, named):
    with pytest.raises(SystemExit, match=named):
        trl_config(config_of(arm, **extra), str(tmp_path))


def run(arm, seed, acc, step_s):
    lib = ARMS[arm][0]
    return {
        "arm": arm,
        "lib": lib,
        "seed": seed,
        "test_accuracy": acc,
        "test_n": 500,
        "median_step_s": step_s,
    }


def test_ours_holds_when_within_one_standard_error_of_trl():
    runs = [
        run("ours", 0, 0.80, 0.3),
        run("trl", 0, 0.81, 0.6),
        run("ours", 1, 0.70, 0.3),
        run("trl", 1, 0.75, 0.6),
    ]
    verdict = {q["seed"]: q for q in pairs(runs, [0, 1])}
    se = (0.81 * 0.19 / 500) ** 0.5  # 0.0175: 0.80 >= 0.81 - se
    assert verdict[0]["trl_se"] == pytest.approx(se) and verdict[0]["holds"]
    assert not verdict[1]["holds"]  # 0.70 < 0.75 - 0.019
    assert verdict[0]["step_time_ratio"] == pytest.approx(0.5)
    res = {
        "command": "python -m benchmarks.grpo_learning_vs_trl",
        "torch": "2.13.0+cpu",
        "transformers": "5",
        "trl": "1.16.0",
        "cpus": 2,
        "jobs": 2,
        "seeds": [0, 1],
        "sft": {"0": {"test_accuracy": 0.6}, "1": {"test_accuracy": 0.65}},
        "runs": [{**r, "steps": 300, "wall_s": 100.0} for r in runs],
        "pairs": pairs(runs, [0, 1]),
    }
    lines = table(res)
    assert "| 0 | 0.600 | 0.800 | 0.810 |" in lines
    assert "| ours | trl | 1 | 0.700 | 0.750 ± 0.019 | no | 0.50 |" in lines


def test_the_pipeline_summary_gives_spread_gain_and_dip():
    rows = [
        # seed, SFT test, SFT validation, GRPO test, lowest validation point of the GRPO run
        (0, 0.60, 0.62, 0.83, 0.60),
        (1, 0.67, 0.69, 0.87, 0.75),
    ]
    runs = [
        {
            "seed": s,
            "n": 500,
            "sft_steps": 400,
            "sft_test": st,
            "sft_validation": sv,
            "grpo_test": gt,
            "grpo_wall_s": 120.0,
            "gain_points": 100 * (gt - st),
            "dip_points": 100 * max(0.0, sv - low),
        }
        for s, st, sv, gt, low in rows
    ]
    s = pipeline_summary(runs)
    assert s["sft_spread_points"] == pytest.approx(7.0) and s["gain_min_points"] == pytest.approx(20.0)
    assert s["dip_max_points"] == pytest.approx(2.0)
    res = {
        "command": "python -m benchmarks.addition_example_seeds",
        "grpo_overrides": [],
        "torch": "2.13.0+cpu",
        "cpus": 2,
        "jobs": 2,
        "load_average_start": 0.5,
        "runs": runs,
        "summary": s,
    }
    lines = pipeline_table(res)
    assert "| 0 | 400 | 0.600 | 0.830 | +23.0 | 120 | 2.0 |" in lines
    assert "| 1 | 400 | 0.670 | 0.870 | +20.0 | 120 | 0.0 |" in lines
