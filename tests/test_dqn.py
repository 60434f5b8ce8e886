"""DQN: bad inputs, exact resume, learning CartPole, the overestimation measure (exact on a known MDP), one
update vs a reference."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import advantage
from advantage import optim
from advantage.algos.dqn import QNetwork, gradient_step, update_batches
from advantage.algos.dqn_probe import OverestimationProbe, greedy_horizon, greedy_returns
from advantage.configs.dqn import DQNAlgorithm, DQNModel
from advantage.data import PrioritizedReplayBuffer, ReplayBuffer
from advantage.errors import ConfigError, EnvError
from advantage.math import double_q_target, td_target
from advantage.resolve import resolve_config

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}


def test_continuous_actions_rejected_with_the_space():
    with pytest.raises(
        EnvError, match=r"dqn needs a Discrete action space; Pendulum-v1 has Box\(-2.0, 2.0, \(1,\)\)"
    ):
        advantage.train("dqn", quiet=True, **{"env.id": "Pendulum-v1"})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("algorithm.buffer_size", -5, "algorithm.buffer_size must be >= 1, got -5"),
        ("algorithm.n_step", 0, "algorithm.n_step must be >= 1, got 0"),
        ("algorithm.epsilon_end", 1.5, "algorithm.epsilon_end must be in [0, 1], got 1.5"),
        (
            "algorithm.batch_size",
            200_000,
            "algorithm.batch_size (200000) must be <= algorithm.buffer_size (100000)",
        ),
    ],
)
def test_invalid_options_are_config_errors(key, value, message):
    with pytest.raises(
        ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        advantage.train("dqn", quiet=True, **{key: value})


@pytest.mark.parametrize("preset", ["dqn", "rainbow_lite"])
def test_resume_is_exact(assert_resume_exact, preset):
    common = {
        **FAST,
        "preset": preset,
        "trainer.total_steps": 1500,
        "env.num_envs": 2,
        "algorithm.learning_starts": 200,
        "algorithm.train_freq": 64,
        "algorithm.gradient_steps": 4,
        "algorithm.buffer_size": 1000,
    }
    assert_resume_exact("dqn", common, at=700)


def test_linear_lr_schedule_decays_to_zero_over_the_run():
    """``algorithm.lr_schedule=linear``: each update's Adam step size is lr · (1 − step / total_steps)
    (SB3's linear schedule, as PPO and A2C have it), logged as train/learning_rate."""
    keys = {
        **FAST,
        "trainer.total_steps": 2000,
        "algorithm.learning_starts": 200,
        "algorithm.train_freq": 256,
        "algorithm.gradient_steps": 2,
        "algorithm.learning_rate": 1e-3,
    }
    run = advantage.train("dqn", quiet=True, **keys, **{"algorithm.lr_schedule": "linear"})
    rows = [r for r in run.metrics if "train/learning_rate" in r]
    assert len(rows) >= 5
    for r in rows:
        assert r["train/learning_rate"] == pytest.approx(1e-3 * max(0.0, 1 - r["step"] / 2000))
    constant = advantage.train("dqn", quiet=True, **keys, **{"algorithm.lr_schedule": "constant"})
    assert not any("train/learning_rate" in r for r in constant.metrics)
    losses = [[r["train/loss"] for r in x.metrics if "train/loss" in r] for x in (run, constant)]
    assert len(losses[0]) == len(losses[1]) and losses[0] != losses[1]  # same updates, other step sizes


def test_trunk_init_is_pytorchs_default_or_orthogonal():
    """``model.init``: ``torch`` leaves ``nn.Linear``'s default (uniform in ±1/√fan_in, weights and biases,
    as SB3's DQN); ``orthogonal`` gives orthogonal weights of gain √2 and zero biases."""
    space = gym.spaces.Box(-1.0, 1.0, (4,))
    torch.manual_seed(0)
    plain = QNetwork(space, 2, DQNModel(hidden_sizes=[64, 64], init="torch"))
    torch.manual_seed(0)
    ortho = QNetwork(space, 2, DQNModel(hidden_sizes=[64, 64], init="orthogonal"))
    for lin_p, lin_o, gain in zip(plain.trunk[::2], ortho.trunk[::2], (2**0.5, 1.0), strict=True):
        bound = 1 / lin_p.in_features**0.5
        assert lin_p.weight.abs().max() <= bound and lin_p.bias.abs().max() <= bound
        assert lin_p.bias.abs().sum() > 0
        assert torch.count_nonzero(lin_o.bias) == 0
        w = lin_o.weight  # [out, in] with out >= in here: orthonormal columns times the gain
        torch.testing.assert_close(w.T @ w, gain**2 * torch.eye(w.shape[1]), atol=1e-5, rtol=0)
    _, cfg = resolve_config("dqn", overrides={"env.id": "MountainCar-v0"})
    assert cfg.model.init == "torch"  # the zoo's values, tuned with SB3's default init


# ---- overestimation (V4): max_a Q against the greedy policy's Monte Carlo return ------------------------


class Corridor(gym.Env):
    """A deterministic corridor of 6 cells, one-hot observations: left / stay / right; reaching cell 5
    ends the episode with reward +1, every other step costs 0.1. Its model is known, so Q* (value
    iteration) and the value of any greedy policy are exact."""

    N, GOAL = 6, 5

    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.N,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.s = 0

    def _obs(self):
        return np.eye(self.N, dtype=np.float32)[self.s]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = int(self.np_random.integers(self.GOAL))  # any cell but the goal
        return self._obs(), {}

    def step(self, action):
        self.s = min(max(self.s + int(action) - 1, 0), self.GOAL)
        done = self.s == self.GOAL
        return self._obs(), 1.0 if done else -0.1, done, False, {}

    @classmethod
    def model(cls):
        """``P [S, A, S]`` (terminal transitions dropped) and ``R [S, A]``."""
        P, R = np.zeros((cls.N, 3, cls.N)), np.zeros((cls.N, 3))
        for s in range(cls.GOAL):  # the goal is terminal: no transitions, no reward
            for a in range(3):
                nxt = min(max(s + a - 1, 0), cls.GOAL)
                R[s, a] = 1.0 if nxt == cls.GOAL else -0.1
                if nxt != cls.GOAL:
                    P[s, a, nxt] = 1.0
        return P, R


class Opaque(Corridor):
    """The corridor with its position in a dict: a state :func:`env_state` does not save (as an
    emulator's), so a restored copy does not step as the original."""

    def __init__(self, render_mode=None):
        super().__init__()
        self.cell = {"s": 0}

    @property
    def s(self):
        return self.cell["s"]

    @s.setter
    def s(self, value):
        if hasattr(self, "cell"):
            self.cell["s"] = value


@pytest.fixture(scope="module")
def corridor_ids():
    for name, cls in (("Corridor", Corridor), ("OpaqueCorridor", Opaque)):
        if f"{name}Test-v0" not in gym.registry:
            gym.register(f"{name}Test-v0", entry_point=cls, max_episode_steps=20)
    return "CorridorTest-v0", "OpaqueCorridorTest-v0"


def _table_q(table: np.ndarray):
    """Q(s, ·) = table[s] for one-hot observations, as the network is called."""
    t = torch.as_tensor(table, dtype=torch.float32)
    return lambda obs: obs @ t


def _exact_greedy_value(table: np.ndarray, gamma: float, horizon: int) -> np.ndarray:
    """V_H of the greedy policy of ``table`` from the model: H backups of its Bellman operator."""
    P, R = Corridor.model()
    pi = table.argmax(-1)  # torch's argmax breaks ties the same way for these tables (no ties)
    rows = np.arange(Corridor.N)
    v = np.zeros(Corridor.N)
    for _ in range(horizon):
        v = R[rows, pi] + gamma * P[rows, pi] @ v
    return v


def _q_star(gamma: float) -> np.ndarray:
    P, R = Corridor.model()
    q = np.zeros((Corridor.N, 3))
    for _ in range(2000):  # value iteration to the fixed point (γ^2000 ≈ 0)
        q = R + gamma * P @ q.max(-1)
    return q


def test_greedy_horizon_is_the_smallest_with_gamma_power_below_tolerance():
    assert greedy_horizon(0.99, 1e-3) == 688  # 0.99^687 = 1.0009e-3, 0.99^688 = 0.9991e-3
    assert greedy_horizon(0.5, 0.25) == 2  # exactly 0.25 is enough
    assert greedy_horizon(0.9, 0.5) == 7
    assert greedy_horizon(0.0, 1e-3) == 1
    for g, tol in ((0.99, 1e-3), (0.9, 0.5), (0.95, 1e-6)):
        h = greedy_horizon(g, tol)
        assert g**h <= tol < g ** (h - 1)
    with pytest.raises(ValueError, match="gamma < 1"):
        greedy_horizon(1.0, 1e-3)


@pytest.mark.parametrize("noise", [0.0, 0.6, 2.0])
def test_greedy_returns_give_the_exact_gap_on_a_known_mdp(corridor_ids, noise):
    """From every non-terminal cell, restored from a saved state: the measured gap max_a Q − Ĝ of a given
    Q equals the exact gap max_a Q − V_H^{π_Q} from the model, for Q* (gap 0: V* = max Q*) and for Q*
    plus noise (a greedy policy that may wander, or stay forever)."""
    from advantage.envs import env_state

    gamma = 0.9
    H = greedy_horizon(gamma, 1e-3)
    table = _q_star(gamma) + noise * np.random.default_rng(1).normal(size=(Corridor.N, 3))
    table[Corridor.GOAL] = 0.0
    envs = [gym.make(corridor_ids[0]) for _ in range(Corridor.GOAL)]
    states, obs = [], []
    for s, env in enumerate(envs):
        env.reset(seed=s)
        env.unwrapped.s = s
        states.append(env_state(env))
        obs.append(env.unwrapped._obs())
        env.unwrapped.s = 0  # the rollout must start from the saved state, not the env's current one
    realized = greedy_returns(_table_q(table), envs, states, np.stack(obs), gamma, H)
    exact = _exact_greedy_value(table, gamma, H)[: Corridor.GOAL]
    np.testing.assert_allclose(realized, exact, rtol=0, atol=1e-12)
    predicted = table[: Corridor.GOAL].max(-1)
    if noise == 0.0:  # Q*: no gap at all
        np.testing.assert_allclose(predicted - realized, 0.0, atol=1e-12)
    else:
        assert np.abs(predicted - realized).max() > 0.1  # the noise makes a gap the test can see


def test_the_probe_measures_the_exact_gap_at_the_states_it_samples(corridor_ids):
    """OverestimationProbe end to end (ε-greedy episodes, snapshots every stride-th step, restore, greedy
    rollouts) on the corridor: its means equal the model's at the states it sampled."""
    from advantage.config import VecEnvConfig

    gamma = 0.9
    table = _q_star(gamma) + 0.6 * np.random.default_rng(1).normal(size=(Corridor.N, 3))
    table[Corridor.GOAL] = 0.0
    probe = OverestimationProbe(VecEnvConfig(id=corridor_ids[0]), 7, gamma, 1e-3)
    assert probe.horizon == 66 and probe.limit == 20 and probe.stride == 3
    q = _table_q(table)
    m = probe.measure(q, 0.5, seed=3)
    obs, _ = probe.sample_states(q, 0.5, seed=3)
    cells = obs.argmax(-1)
    assert len(cells) == 7 and len(set(cells.tolist())) > 1
    exact = _exact_greedy_value(table, gamma, probe.horizon)
    assert m["train/q_realized"] == pytest.approx(exact[cells].mean(), abs=1e-12)
    assert m["train/q_predicted"] == pytest.approx(table[cells].max(-1).mean(), abs=1e-6)  # float32 Q
    assert m["train/overestimation"] == pytest.approx(m["train/q_predicted"] - m["train/q_realized"])
    probe.close()


def test_an_env_whose_state_cannot_be_saved_is_refused(corridor_ids):
    from advantage.config import VecEnvConfig

    with pytest.raises(EnvError, match="algorithm.overestimation_every: a copy of OpaqueCorridorTest-v0"):
        OverestimationProbe(VecEnvConfig(id=corridor_ids[1]), 4, 0.9, 1e-3)
    with pytest.raises(ConfigError, match="algorithm.overestimation_every=10000 with algorithm.gamma=1.0"):
        advantage.train(
            "dqn", quiet=True, **{"algorithm.gamma": 1.0, "algorithm.overestimation_every": 10_000}
        )
    with pytest.raises(EnvError, match="a copy of OpaqueCorridorTest-v0 restored from a saved state"):
        advantage.train(
            "dqn",
            quiet=True,
            **{"env.id": corridor_ids[1], "algorithm.overestimation_every": 500, "trainer.total_steps": 600},
        )


def test_the_default_measures_overestimation_only_where_it_can(corridor_ids):
    """overestimation_every=-1 (the default): every 10,000 steps on an env whose state is saved and
    restored; off, and the run trains, on one whose state is not (Box2D's LunarLander, an emulator)."""
    from advantage.algos.dqn_probe import AUTO_EVERY, make_probe
    from advantage.resolve import resolve_config

    for env_id, on in ((corridor_ids[0], True), (corridor_ids[1], False)):
        _, cfg = resolve_config("dqn", overrides={"env.id": env_id})
        assert cfg.algorithm.overestimation_every == -1
        probe, every = make_probe(cfg)
        assert (probe is not None, every) == ((True, AUTO_EVERY) if on else (False, 0))
        if probe is not None:
            probe.close()
    run = advantage.train(
        "dqn",
        quiet=True,
        **FAST,
        **{"env.id": corridor_ids[1], "trainer.total_steps": 600, "algorithm.learning_starts": 100},
    )
    assert run.step >= 600 and not any("train/overestimation" in r for r in run.metrics)


def test_overestimation_is_measured_without_changing_training():
    """A short CartPole run: the measurement rows appear every overestimation_every steps, the realized
    returns are those of CartPole (1 per step, at most (1 − γ^H)/(1 − γ)), and the run trains exactly as
    with the measurement off (the probe has its own environments and generator)."""
    over = {
        **FAST,
        "trainer.total_steps": 2000,
        "algorithm.learning_starts": 500,
        "algorithm.train_freq": 256,
        "algorithm.gradient_steps": 8,
        "algorithm.overestimation_states": 8,
    }
    on = advantage.train("dqn", quiet=True, **over, **{"algorithm.overestimation_every": 600})
    off = advantage.train("dqn", quiet=True, **over, **{"algorithm.overestimation_every": 0})
    rows = [r for r in on.metrics if "train/overestimation" in r]
    assert [r["step"] // 600 for r in rows] == [1, 2, 3]
    ceiling = (1 - 0.99**688) / (1 - 0.99)
    for r in rows:
        assert 1.0 <= r["train/q_realized"] <= ceiling
        assert r["train/overestimation"] == pytest.approx(r["train/q_predicted"] - r["train/q_realized"])
    assert not any("train/overestimation" in r for r in off.metrics)
    losses = [[r["train/loss"] for r in run.metrics if "train/loss" in r] for run in (on, off)]
    assert losses[0] == losses[1]


def test_overestimation_probe_on_an_env_holding_its_state_as_a_tuple():
    """MountainCar-v0 (state a tuple after a step): the probe's restored copies step (it crashed there)."""
    run = advantage.train(
        "dqn",
        quiet=True,
        **FAST,
        **{"env.id": "MountainCar-v0", "trainer.total_steps": 1400, "algorithm.overestimation_every": 600},
        **{"algorithm.overestimation_states": 4, "algorithm.learning_starts": 200},
    )
    rows = [r for r in run.metrics if "train/q_realized" in r]
    assert len(rows) == 2 and all(-100 <= r["train/q_realized"] <= 0 for r in rows), rows


@pytest.mark.parametrize(
    "double, dueling, prioritized, loss, activation",
    [
        (False, "none", False, "huber", "relu"),  # the MLP cases: gradient by hand (QNetwork.td_backward)
        (True, "none", True, "huber", "relu"),
        (False, "none", True, "mse", "tanh"),
        (True, "none", False, "mse", "relu"),
        (True, "mean", False, "huber", "relu"),  # dueling: autograd
        (True, "mean", True, "huber", "relu"),
    ],
)
@pytest.mark.parametrize("lean_backward", ["1", "0"])
@pytest.mark.torch_versions
def test_an_update_takes_the_steps_of_the_per_batch_reference(
    double, dueling, prioritized, loss, activation, lean_backward, monkeypatch, fast_path
):
    """update_batches + gradient_step (all batches and target-network values of an update in one pass,
    the gradient by hand for an MLP, optim.step, the fused clip) take the steps of the textbook loop: per
    batch, Q_target on its next states, td_target / double_q_target, Huber or ½·MSE loss through autograd,
    torch's clip_grad_norm_ and torch.optim.Adam; with the dqn_td_backward fast path and without."""
    fast_path("dqn_td_backward", lean_backward == "1")
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    model, a = (
        DQNModel(hidden_sizes=[32, 32], dueling=dueling, activation=activation),
        DQNAlgorithm(double=double, max_grad_norm=0.05, loss=loss),
    )
    q, q_target = QNetwork(space, 2, model), QNetwork(space, 2, model)
    assert q.hand_backward == (dueling == "none" and lean_backward == "1")
    ref = copy.deepcopy(q)
    args = (500, (4,), np.float32, (), np.int64, 2, 3, 0.99, 0)
    buffer = PrioritizedReplayBuffer(*args, beta_steps=8) if prioritized else ReplayBuffer(*args)
    g = np.random.default_rng(0)
    for _ in range(200):
        obs, next_obs = g.normal(size=(2, 2, 4)).astype(np.float32)
        buffer.add(
            obs, g.integers(0, 2, 2), g.normal(size=2), next_obs, g.random(2) < 0.05, g.random(2) < 0.02
        )
    opt, ref_opt = optim.adam(q.parameters(), 1e-3), torch.optim.Adam(ref.parameters(), lr=1e-3, fused=True)
    clipped = 0
    for b in update_batches(buffer, q_target, 8, 32, double):
        _, td_error = gradient_step(q, opt, b, a)
        if prioritized:
            buffer.update_priorities(b["indices"].numpy(), td_error.numpy())
        with torch.no_grad():
            next_q = q_target(b["next_obs"])
            if double:
                y = double_q_target(b["rewards"], ref(b["next_obs"]), next_q, b["terminated"], b["discounts"])
            else:
                y = td_target(b["rewards"], next_q, b["terminated"], b["discounts"])
        pred = ref(b["obs"]).gather(1, b["actions"][:, None]).squeeze(1)
        if loss == "huber":
            per_sample = F.smooth_l1_loss(pred, y, reduction="none")
        else:
            per_sample = 0.5 * F.mse_loss(pred, y, reduction="none")
        ref_opt.zero_grad()
        (per_sample * b.get("weights", 1.0)).mean().backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(ref.parameters(), a.max_grad_norm)) > a.max_grad_norm
        ref_opt.step()
    assert clipped  # the clip was active (test_clip_grad_norm_is_torchs_arithmetic: both regimes)
    for p, r in zip(q.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_is_torchs_arithmetic():
    torch.manual_seed(0)
    for scale in (0.01, 100.0):  # below and above the max norm
        params = [torch.nn.Parameter(torch.randn(s)) for s in ((16, 4), (16,), (2, 16))]
        theirs = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for p, t in zip(params, theirs, strict=True):
            p.grad = scale * torch.randn_like(p)
            t.grad = p.grad.clone()
        torch.nn.utils.clip_grad_norm_(theirs, 1.0)
        optim.clip_grad_norm(params, 1.0)
        assert all(torch.equal(p.grad, t.grad) for p, t in zip(params, theirs, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.torch_versions), 1, 2])
def test_dqn_default_solves_cartpole_within_50k_steps(seed):
    run = advantage.train(
        "dqn",
        quiet=True,
        **{
            "trainer.seed": seed,
            "trainer.eval_every": 2500,
            "trainer.eval_episodes": 10,
            "trainer.stop_at_return": 475,
            "trainer.tensorboard": False,
        },
    )
    evals = [r["eval/return_mean"] for r in run.metrics if "eval/return_mean" in r]
    assert max(evals) >= 475 and run.step <= 50_000, evals


def test_atari_id_without_the_extra_names_it(monkeypatch):
    import builtins

    import gymnasium as gym

    if "ALE/Pong-v5" in gym.registry:
        pytest.skip("ALE ids already registered in this process")
    real_import = builtins.__import__

    def no_ale(name, *args, **kwargs):
        if name == "ale_py":
            raise ImportError("no ale_py")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ale)
    with pytest.raises(ConfigError, match=r"needs the Atari extra: pip install 'advantage\[atari\]'"):
        advantage.train("dqn", quiet=True, **{"preset": "atari"})


@pytest.mark.slow
def test_atari_preset_runs_10k_steps_of_pong_on_cpu():
    pytest.importorskip("ale_py", reason="the atari extra (part of dev) is not installed")
    run = advantage.train(
        "dqn",
        quiet=True,
        **{
            "preset": "atari",
            "env.id": "ALE/Pong-v5",
            "trainer.total_steps": 10_000,
            "algorithm.learning_starts": 9_000,
            "algorithm.buffer_size": 10_000,
            "trainer.eval_every": 0,
            "trainer.eval_episodes": 1,
            "trainer.tensorboard": False,
        },
    )
    assert run.step == 10_000
    q = run.checkpoint.tensors
    assert q["q.trunk.net.0.weight"].shape == (32, 4, 8, 8)  # Nature CNN on 4 stacked 84x84 frames
    evals = [r for r in run.metrics if "eval/return_mean" in r]
    assert -21 <= evals[-1]["eval/return_mean"] <= 21  # a real Pong score, unclipped
    assert any("train/loss" in r for r in run.metrics)


def test_the_docs_quote_the_overestimation_results_file():
    """docs/algorithms/dqn.md quotes benchmarks/results/dqn_overestimation.json (written by
    benchmarks/dqn_overestimation.py, 3 seeds of DQN and Double DQN on CartPole): every number, and the
    claim that DQN's measured overestimation is above Double DQN's on every seed."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    results = json.loads((root / "benchmarks/results/dqn_overestimation.json").read_text())
    import re

    # the page's results references (<!-- =PATH -->, tests/test_docs_numbers.py) sit between the numbers
    docs = re.sub(r"<!--.*?-->", "", (root / "docs/algorithms/dqn.md").read_text(), flags=re.S)
    docs = docs.replace("−", "-")
    section = docs[docs.index("What these runs show") : docs.index("## Double DQN")]
    assert results["dqn_above_double_every_seed"] is True
    runs, means = results["runs"], results["means"]
    for seed in ("0", "1", "2"):
        dqn, double = runs["dqn"][seed], runs["double_dqn"][seed]
        assert dqn["overestimation"] > double["overestimation"]
        pair = f"{dqn['overestimation']:+.1f} against {double['overestimation']:+.1f} (seed {seed})"
        assert pair in section, pair
        for run in (dqn, double):
            assert f"{run['final_eval_return']:.1f}" in section
    for preset in ("dqn", "double_dqn"):
        m = means[preset]
        for value in (f"{m['overestimation']:+.1f}", f"{m['q_predicted']:.1f}", f"{m['q_realized']:.1f}"):
            assert value in section, value
    seed0 = runs["dqn"]["0"]
    assert (
        f"predicts {seed0['q_predicted']:.1f}" in section and f"obtains {seed0['q_realized']:.1f}" in section
    )
