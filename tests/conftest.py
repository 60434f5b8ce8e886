import pytest


def pytest_addoption(parser, pluginmanager):
    """With pytest-xdist switched off (``-p no:xdist``) or not installed, accept the project's ``-n`` and
    ``--dist`` (pyproject's addopts) and ignore them: the tests then run in this one process, as ``-n 0``."""
    if pluginmanager.has_plugin("xdist") or pluginmanager.has_plugin("xdist.plugin"):
        return
    group = parser.getgroup("xdist", "pytest-xdist is off: its options are accepted and ignored")
    # _addoption: pytest reserves lower-case short options for itself; pytest-xdist registers -n this way
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=None, help="ignored without xdist")
    group.addoption("--dist", dest="dist", default="no", help="ignored without xdist")


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("xdist.plugin"):  # the marker xdist would have registered
        config.addinivalue_line("markers", "xdist_group(name): run with the group's other tests (xdist)")


def pytest_collection_modifyitems(config, items):
    """A ``-m`` given on the command line replaces pyproject's ``-m 'not heavy'``: ``-m "not slow"`` would
    then run the heavy tests too (minutes each). Unless the expression names ``heavy`` itself, they stay
    out, so ``python -m pytest -m "not slow"`` is the fast part of the default suite."""
    if "heavy" in (config.option.markexpr or ""):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own folder, so default run folders (runs/...) never collide."""
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def rewound(tmp_path):
    """``rewound(run_dir)``: a copy of a run folder with two checkpoints as it was at the first one (the
    last checkpoint removed, ``latest`` pointing back), i.e. the same run interrupted there."""
    import shutil

    def make(run_dir, name: str = "half"):
        dest = tmp_path / name
        shutil.copytree(run_dir, dest)
        ckpts = dest / "checkpoints"
        names = sorted(p.name for p in ckpts.glob("step_*"))
        shutil.rmtree(ckpts / names[-1])
        (ckpts / "latest").write_text(names[0] + "\n")
        return dest

    return make


# A tiny synthetic preference task and model size, shared by the tests that need a reward model.
RM_TASK = {"data.train_size": 64, "data.validation_size": 16, "data.test_size": 16, "data.response_length": 4}
RM_SMALL = {"hidden_size": 32, "layers": 1, "heads": 2}


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory):
    """The run folder of a reward model trained for two steps on the synthetic task (the scratch policy's
    tokenizer), for trainers that read ``worker.reward.model``."""
    import advantage

    over = {
        **RM_TASK,
        **{f"model.{k}": v for k, v in RM_SMALL.items()},
        "algorithm.batch_size": 8,
        "trainer.eval_episodes": 8,
        "trainer.eval_every": 0,
        "trainer.total_steps": 2,
        "trainer.tensorboard": False,
        "trainer.run_dir": str(tmp_path_factory.mktemp("rm") / "rm"),
    }
    return advantage.train("reward_model", quiet=True, **over).dir


@pytest.fixture
def assert_resume_exact(tmp_path, monkeypatch):
    """``assert_resume_exact(algo, overrides, at)``: train once straight; once more with a SIGTERM raised at
    the first step boundary at or after ``at`` (the run checkpoints there and stops), then ``resume`` it to
    the same ``trainer.total_steps``. Every tensor of the two final checkpoints must be bit-identical.
    Returns the straight run's final checkpoint tensors."""
    import signal

    import torch

    import advantage
    from advantage.context import RunContext

    def check(algo: str, common: dict, at: int) -> dict:
        straight = advantage.train(algo, quiet=True, **common, **{"trainer.run_dir": str(tmp_path / "a")})
        original, stopped_at = RunContext.tick, []

        def tick(self, step, snapshot):
            if step >= at and not stopped_at:
                stopped_at.append(step)
                signal.raise_signal(signal.SIGTERM)
            return original(self, step, snapshot)

        with monkeypatch.context() as m:
            m.setattr(RunContext, "tick", tick)
            half = advantage.train(algo, quiet=True, **common, **{"trainer.run_dir": str(tmp_path / "b")})
        assert half.step == stopped_at[0] < common["trainer.total_steps"]
        resumed = advantage.resume(half.dir, quiet=True)
        assert straight.step == resumed.step
        a, b = straight.checkpoint.tensors, resumed.checkpoint.tensors
        assert a.keys() == b.keys()
        differ = [k for k in a if not torch.equal(a[k], b[k])]
        assert not differ, differ
        return a

    return check


@pytest.fixture(autouse=True)
def _foreground_outputs(monkeypatch):
    """``main([...])`` in tests waits for its plot and TensorBoard events like the Python API (the command
    line leaves them to the run's sidecar process; tests/test_startup.py covers that path)."""
    import advantage.cli

    monkeypatch.setattr(advantage.cli, "BACKGROUND", False)


@pytest.fixture(autouse=True)
def _denormals_back_on():
    """Trainers flush denormals to zero for speed (``torch.set_flush_denormal(True)``, a process-wide CPU
    flag); a test that runs one leaves the flag set for the next test of its worker, where hypothesis'
    float strategies refuse to run. Each test gets the IEEE default back."""
    yield
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_flush_denormal(False)


@pytest.fixture
def fast_path(monkeypatch):
    """``fast_path(name, on)``: switch one fast path of :mod:`advantage.kernels` for the rest of the test (the
    ``trainer.kernels`` option's effect, without a run)."""
    from advantage import kernels

    def switch(name: str, on: bool) -> None:
        assert name in kernels.FAST_PATHS, name
        monkeypatch.setattr(kernels, "_on", kernels._on | {name} if on else kernels._on - {name})

    return switch
