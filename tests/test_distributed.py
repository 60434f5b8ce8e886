"""Language-model learners on torch.distributed (gloo, CPU): a run on 2 ranks (ddp, fsdp) takes the steps
of one process on the same global batch; its checkpoints resume on 1 and 2 ranks; a rank killed mid-run
ends the job with an error naming it; the bad inputs of a launch are clear errors before any process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import advantage
from advantage import distributed
from advantage.errors import ConfigError
from conftest import RM_SMALL, RM_TASK

TINY = {
    "data.task": "addition",
    "data.digits": 2,
    "data.train_size": 64,
    "data.validation_size": 8,
    "data.test_size": 8,
    "model.hidden_size": 32,
    "model.layers": 1,
    "model.heads": 2,
    "algorithm.batch_size": 8,
    "algorithm.warmup_steps": 2,
    "trainer.eval_episodes": 8,
    "trainer.eval_every": 0,
    "trainer.total_steps": 3,
    "trainer.log_every": 1,
    "trainer.tensorboard": False,
    "trainer.plot": False,
}
# The preference algorithms: the synthetic task (their default) at the same model size.
PREF = {
    **{k: v for k, v in TINY.items() if k not in ("data.task", "data.digits")},
    "data.response_length": 4,
}
# GRPO: rewards that differ within a group (DAPO's overlong punishment on length) so the steps are not 0.
GRPO = {
    **{k: v for k, v in TINY.items() if not k.startswith(("model.", "algorithm."))},
    "data.rollout_batch_size": 4,
    "data.max_response_length": 6,
    "worker.rollout.n": 4,
    "worker.reward.overlong_buffer": 5,
    "worker.actor.model.hidden_size": 32,
    "worker.actor.model.layers": 1,
    "worker.actor.model.heads": 2,
}
# PPO-RLHF: the conftest's reward model (worker.reward.model, set by the test) and its task.
PPO = {
    **{k: v for k, v in TINY.items() if not k.startswith(("model.", "algorithm.", "data."))},
    **RM_TASK,
    "data.rollout_batch_size": 8,
    "data.max_response_length": 5,
    **{f"worker.actor.model.{k}": v for k, v in RM_SMALL.items()},
    "worker.actor.ppo_epochs": 2,
}
CONFIGS = {"sft": TINY, "dpo": PREF, "reward_model": PREF, "grpo": GRPO, "ppo_rlhf": PPO}
# The tests that share the module's runs (one_process, two_ranks) stay on one pytest-xdist worker, so each
# run is made once.
SHARED = pytest.mark.xdist_group("distributed_sft")
SRC = str(Path(advantage.__file__).parents[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in distributed.RENDEZVOUS}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=SRC + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def _args(over: dict) -> list[str]:
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in over.items()]


def _cli(command: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command], env=_env(), capture_output=True, text=True, timeout=600, **kw
    )


def _launch(run_dir: Path, strategy: str, algo: str = "sft", **over) -> subprocess.CompletedProcess:
    """``advantage train ALGO … trainer.nproc_per_node=2`` (the command line starts both ranks)."""
    cfg = {**TINY, "trainer.strategy": strategy, "trainer.nproc_per_node": 2, "trainer.run_dir": run_dir}
    res = _cli(["-m", "advantage", "train", algo, *_args({**cfg, **over}), "--quiet"], cwd=run_dir.parent)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _losses(run_dir: Path, key: str = "train/loss") -> list[float]:
    return [r[key] for r in advantage.Run(run_dir).metrics if key in r]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The last checkpoint's model weights and its tensors (optimizer moments, a value head)."""
    from safetensors.torch import load_file

    ckpt = advantage.Run(run_dir).checkpoint
    out = load_file(str(ckpt.path / "model.safetensors"))
    out.update({f"ckpt.{k}": v for k, v in ckpt.tensors.items() if k != "torch_rng"})
    return out


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], tol: float = 1e-5) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: SFT in one process (``single``) on the same global batch, 3 steps."""
    run_dir = tmp_path_factory.mktemp("single") / "run"
    advantage.train("sft", quiet=True, **{**TINY, "trainer.run_dir": str(run_dir)})
    return run_dir


@SHARED
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_one_rank_group_matches_one_process(tmp_path, one_process, strategy):
    """ddp and fsdp on a process group of one take the same steps as ``single`` (the same code path as N
    ranks, without a launcher)."""
    run = advantage.train(
        "sft", quiet=True, **{**TINY, "trainer.strategy": strategy, "trainer.run_dir": str(tmp_path / "r")}
    )
    assert _losses(run.dir) == pytest.approx(_losses(one_process), abs=1e-5)
    assert _close(_weights(run.dir), _weights(one_process)) < 1e-5
    assert not distributed.current().group  # the group is left when the run ends


@pytest.mark.parametrize("algo", ["dpo", "reward_model", "grpo", "ppo_rlhf"])
def test_fsdp_checkpoint_resumes_exactly(tmp_path, request, rewound, algo):
    """fsdp (a group of one): the step-2 checkpoint, its full optimizer state and (reward model, PPO-RLHF's
    critic) value head and trunk put back into the shards, resumes to the uninterrupted run's step-3 loss
    and weights."""
    over = {**CONFIGS[algo], "trainer.strategy": "fsdp", "trainer.checkpoint_every": 2}
    if algo == "ppo_rlhf":
        over["worker.reward.model"] = str(request.getfixturevalue("tiny_reward_model"))
    run = advantage.train(algo, quiet=True, **{**over, "trainer.run_dir": str(tmp_path / "run")})
    half = rewound(run.dir)
    advantage.resume(half, quiet=True)
    assert _losses(half) == pytest.approx(_losses(run.dir), abs=1e-6)
    assert _close(_weights(half), _weights(run.dir)) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "strategy"),
    [(a, s) for a in ("dpo", "reward_model") for s in ("ddp", "fsdp")]
    # GRPO and PPO-RLHF on each strategy, with the options that read the whole batch, several per run
    # (each run costs CI half a minute)
    + [("grpo:batch_std+curriculum+mini_batches", "ddp"), ("grpo:dynamic_sampling+mini_batches", "fsdp")]
    + [("grpo:reinforce_pp", "ddp")]
    + [("ppo_rlhf", "ddp"), ("ppo_rlhf:mini_batches", "fsdp")],
)
def test_two_ranks_take_the_one_process_steps(tmp_path, request, algo, strategy):
    """DPO, the reward model (each rank takes half of the pairs), GRPO (half of the prompt groups) and
    PPO-RLHF (half of the prompts), sampled on their rank, on 2 ranks: the losses, gradient norms and
    weights of one process (``single``) on the same global batch, within 1e-5: each prompt's samples
    are drawn from its slot's seed, wherever it is sampled. After the colon, options joined by ``+``:
    ``batch_std``: GRPO with Lite PPO's batch std, taken over every rank's rewards; ``reinforce_pp``: the
    REINFORCE++ preset, per-token returns whitened over every rank's tokens (responses of different
    widths on each rank) with the KL reward per token; ``curriculum``:
    hard-prompt mining; ``dynamic_sampling``: DAPO's refill rounds (each rank samples them whole, then
    trains on its share); ``mini_batches``: 2 epochs of mini-batches drawn from the global batch (a rank
    holds any share of each, none included, and makes as many forwards as the others)."""
    algo, _, variants = algo.partition(":")
    over = dict(CONFIGS[algo])
    options = set(variants.split("+")) - {""}
    if "batch_std" in options:
        over["algorithm.advantage"] = "batch_std"
    if "reinforce_pp" in options:
        from advantage.configs.grpo import PRESETS

        over |= PRESETS["reinforce_pp"].overrides
    if "curriculum" in options:  # prompts picked by every rank alike from the gathered pass counts
        over["algorithm.curriculum"] = "hard"
    if "dynamic_sampling" in options:  # refill rounds, each sampled whole on every rank
        over |= {"algorithm.dynamic_sampling": True, "algorithm.dynamic_sampling_on": "reward"}
        over["algorithm.max_sampling_rounds"] = 8
    if "mini_batches" in options:  # grpo: 2 of 4 prompts; ppo_rlhf: 3 of 8 rows (uneven shares)
        over["worker.actor.mini_batch_size"] = 2 if algo == "grpo" else 3
        over["worker.actor.ppo_epochs"] = 2
        over["worker.actor.micro_batch_size"] = 2
    if algo == "ppo_rlhf":
        over["worker.reward.model"] = str(request.getfixturevalue("tiny_reward_model"))
    one = advantage.train(algo, quiet=True, **{**over, "trainer.run_dir": str(tmp_path / "one")}).dir
    cfg = {**over, "trainer.strategy": strategy, "trainer.nproc_per_node": 2}
    res = _cli(["-m", "advantage", "train", algo, *_args({**cfg, "trainer.run_dir": tmp_path / "two"})])
    assert res.returncode == 0, res.stderr[-3000:]
    losses = ("train/policy_loss", "train/value_loss") if algo == "ppo_rlhf" else ("train/loss",)
    if algo == "grpo":  # the advantage's group std, logged as one process logs it (batch_std too)
        losses += ("train/advantage/group_std_mean",)
    for key in (*losses, "train/grad_norm"):
        assert _losses(tmp_path / "two", key) == pytest.approx(_losses(one, key), abs=1e-5)
    assert _close(_weights(tmp_path / "two"), _weights(one)) < 1e-5


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """``two_ranks(strategy)``: the folder of SFT on 2 ranks started by ``trainer.nproc_per_node=2`` (3
    steps, checkpoints at steps 2 and 3), launched once per strategy for the tests of this module."""
    runs: dict[str, Path] = {}

    def get(strategy: str) -> Path:
        if strategy not in runs:
            runs[strategy] = tmp_path_factory.mktemp(strategy) / "two"
            _launch(runs[strategy], strategy, **{"trainer.checkpoint_every": 2})
        return runs[strategy]

    return get


@SHARED
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_take_the_one_process_steps_and_resume_on_one_and_two(
    one_process, two_ranks, rewound, strategy
):
    """2 ranks: the losses, gradient norms, final weights and AdamW moments of one process within 1e-5;
    the step-2 checkpoint they wrote resumes on 2 ranks and on 1 rank to the uninterrupted step-3 loss,
    and the checkpoint folder loads with ``AutoModelForCausalLM.from_pretrained``."""
    from transformers import AutoModelForCausalLM

    run_dir = two_ranks(strategy)
    # rank 0 wrote the run folder as one process does; the other rank wrote nothing, anywhere
    assert os.listdir(run_dir.parent) == ["two"]
    assert sorted(os.listdir(run_dir)) == sorted(os.listdir(one_process))
    losses = _losses(run_dir)
    assert losses == pytest.approx(_losses(one_process), abs=1e-5)
    assert _losses(run_dir, "train/grad_norm") == pytest.approx(
        _losses(one_process, "train/grad_norm"), abs=1e-5
    )
    assert _close(_weights(run_dir), _weights(one_process)) < 1e-5
    AutoModelForCausalLM.from_pretrained(advantage.Run(run_dir).checkpoint.path)
    # on 2 ranks, by the command line
    half = rewound(run_dir, "half2")
    res = _cli(["-m", "advantage", "resume", str(half), "--quiet"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert _losses(half)[-1] == pytest.approx(losses[-1], abs=1e-5)
    # on 1 rank, in this process
    half = rewound(run_dir, "half1")
    advantage.resume(half, quiet=True, **{"trainer.nproc_per_node": 1, "trainer.strategy": "single"})
    assert _losses(half)[-1] == pytest.approx(losses[-1], abs=1e-5)


@pytest.mark.heavy  # two local Ray instances beside two ranks: over a minute, past CI's budget
def test_grpo_by_torchrun_with_ray_workers_on_each_rank_takes_the_one_process_steps(tmp_path):
    """GRPO launched by ``torchrun`` on 2 ranks, each rank's share of the prompts sampled and scored by its
    own Ray worker (``trainer.num_workers=1``): every prompt's samples come from its slot's draws, so the
    steps are those of one process without workers, within 1e-5 (and so those of
    ``trainer.nproc_per_node=2``, tested against the same one process above)."""
    pytest.importorskip("ray")
    one = advantage.train("grpo", quiet=True, **{**GRPO, "trainer.run_dir": str(tmp_path / "one")}).dir
    cfg = {**GRPO, "trainer.strategy": "ddp", "trainer.num_workers": 1, "trainer.run_dir": tmp_path / "two"}
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    res = _cli([*torchrun, "-m", "advantage", "train", "grpo", *_args(cfg), "--quiet"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for key in ("train/loss", "train/grad_norm", "train/reward/mean"):
        assert _losses(tmp_path / "two", key) == pytest.approx(_losses(one, key), abs=1e-5)
    assert _close(_weights(tmp_path / "two"), _weights(one)) < 1e-5


@SHARED
@pytest.mark.slow
def test_torchrun_gives_the_metrics_of_nproc_per_node(tmp_path, two_ranks):
    """``torchrun --nproc-per-node 2 -m advantage train sft …`` and ``advantage train sft …
    trainer.nproc_per_node=2`` log the same losses."""
    cfg = {**TINY, "trainer.strategy": "ddp", "trainer.run_dir": tmp_path / "torchrun"}
    cfg["trainer.checkpoint_every"] = 2
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    res = _cli([*torchrun, "-m", "advantage", "train", "sft", *_args(cfg), "--quiet"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert _losses(tmp_path / "torchrun") == _losses(two_ranks("ddp"))


def _rank_pid(parent: int, rank: int, deadline: float) -> int:
    """The pid of the process with ``RANK=rank`` among the launcher's children (Linux /proc)."""
    while time.monotonic() < deadline:
        for pid in map(int, subprocess.run(["pgrep", "-P", str(parent)], capture_output=True,
                                           text=True).stdout.split()):  # fmt: skip
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} process")


@pytest.mark.slow
def test_a_rank_killed_mid_run_ends_the_job_naming_it_and_resume_continues(tmp_path):
    """SIGKILL to rank 1 after the first checkpoint: the job ends with an error naming rank 1 and the
    signal, exit code 1; the checkpoint loads and the run resumes (on 1 rank) to its last step."""
    run_dir = tmp_path / "run"
    cfg = {**TINY, "trainer.strategy": "ddp", "trainer.nproc_per_node": 2, "trainer.run_dir": run_dir}
    cfg.update({"trainer.total_steps": 100_000, "trainer.checkpoint_every": 1, "trainer.worker_timeout": 30})
    proc = subprocess.Popen(
        [sys.executable, "-m", "advantage", "train", "sft", *_args(cfg), "--quiet"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoints" / "latest").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        os.kill(_rank_pid(proc.pid, 1, deadline), signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "error: rank 1 of 2 was killed by SIGKILL" in err
    step = advantage.Run(run_dir).step
    assert step >= 1
    run = advantage.resume(
        run_dir, quiet=True, **{"trainer.total_steps": step + 1, "trainer.nproc_per_node": 1}
    )
    assert run.step == step + 1


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_rank_at_one_step_with_a_checkpoint(tmp_path):
    """The launcher passes SIGTERM on: the ranks agree on the step, rank 0 checkpoints it and says how
    to continue, and the command exits 143 as a one-process run does."""
    run_dir = tmp_path / "run"
    cfg = {**TINY, "trainer.strategy": "ddp", "trainer.nproc_per_node": 2, "trainer.run_dir": run_dir}
    cfg.update({"trainer.total_steps": 100_000, "trainer.checkpoint_every": 1000})
    proc = subprocess.Popen(
        [sys.executable, "-m", "advantage", "train", "sft", *_args(cfg), "--quiet"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / "metrics.jsonl").exists() or not _losses(run_dir):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    step = advantage.Run(run_dir).step
    assert f"stopped at step {step} (checkpoint saved)" in out


# ----------------------------------------------------------------------------------------------------
# Bad input: clear errors before any process starts


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"trainer.strategy": "zero"}, "trainer.strategy"),
        (
            {"trainer.strategy": "ddp", "trainer.nproc_per_node": 16},
            "16 ranks (trainer.nproc_per_node or WORLD_SIZE) are more than algorithm.batch_size=8 allows",
        ),
        (
            {"trainer.strategy": "ddp", "trainer.nproc_per_node": 3},
            "algorithm.batch_size=8 is not divisible by the 3 ranks",
        ),
        ({"trainer.nproc_per_node": 2}, "trainer.strategy=single runs in one process, but 2 ranks"),
        ({"trainer.strategy": "fsdp", "model.lora.rank": 4}, "trainer.strategy=fsdp with LoRA"),
    ],
)
def test_bad_launch_configs_are_clear_errors(tmp_path, over, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        advantage.train("sft", quiet=True, **{**TINY, "trainer.run_dir": str(tmp_path / "r"), **over})
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"algorithm.advantage": "batch_std", "algorithm.supervision": "process"},
            "with process supervision needs a group advantage, not batch_std",
        ),
        ({"data.rollout_batch_size": 3}, "data.rollout_batch_size=3 is not divisible by the 2 ranks"),
        (
            {"algorithm.adaptive_difficulty": True, "algorithm.dynamic_sampling": True},
            "with algorithm.adaptive_difficulty and algorithm.dynamic_sampling is not supported",
        ),
    ],
)
def test_grpo_options_that_need_the_whole_batch_are_errors_on_ranks(over, message):
    from advantage.resolve import resolve_config

    over = {**GRPO, "trainer.strategy": "ddp", **over}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        resolve_config("grpo", overrides={**over, "trainer.nproc_per_node": 2})


def test_a_missing_rendezvous_variable_is_named(tmp_path, monkeypatch):
    for name, value in [("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "x")]:
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="MASTER_PORT is not set"):
        advantage.train("sft", quiet=True, **{**TINY, "trainer.strategy": "ddp", "trainer.run_dir": "r"})


def test_nproc_per_node_from_python_points_to_the_launchers(tmp_path):
    with pytest.raises(ConfigError, match="started by the command line .* or by torchrun"):
        advantage.train(
            "sft",
            quiet=True,
            **{**TINY, "trainer.strategy": "ddp", "trainer.nproc_per_node": 2, "trainer.run_dir": "r"},
        )


def test_the_launcher_names_the_killed_rank_first(monkeypatch, capsys):
    """Rank 0 failed first (its collective lost its peer) and rank 1 was killed: the error names rank 1
    and the signal as the cause, then rank 0."""
    import torch.distributed.run as run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(args):
        f0 = ProcessFailure(local_rank=0, pid=10, exitcode=1, error_file="/nonexistent")
        f1 = ProcessFailure(local_rank=1, pid=11, exitcode=-signal.SIGKILL, error_file="/nonexistent")
        f1.timestamp = f0.timestamp + 1
        raise ChildFailedError("advantage", {0: f0, 1: f1})

    monkeypatch.setattr(run, "run", failed)
    assert distributed.launch(2, ["train", "sft"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: rank 1 of 2 was killed by SIGKILL; the other ranks were stopped",
        "  (then rank 0 of 2 exited with code 1)",
    ]


def test_an_error_on_a_rank_names_the_rank(monkeypatch, capsys):
    """Under a launcher every rank's output reaches the console: its error line says which rank."""
    import advantage.runs
    from advantage.cli import main

    def boom(*args, **kwargs):
        raise RuntimeError("lost the peer")

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(advantage.runs, "train", boom)
    with pytest.raises(RuntimeError):
        main(["train", "sft"])
    assert "error: rank 1: RuntimeError: lost the peer" in capsys.readouterr().err
