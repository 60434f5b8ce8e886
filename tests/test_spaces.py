"""Every standard Gymnasium space, as Stable-Baselines3 covers them.

Observations reach the MLP algorithms encoded as one vector (Gymnasium's ``FlattenObservation``: Box
flattened, Discrete one-hot, MultiDiscrete concatenated one-hots, MultiBinary bits, Dict and Tuple parts
concatenated); actions are Discrete and Box where they applied before, plus MultiDiscrete (independent
categoricals) and MultiBinary (independent Bernoullis) for the actor-critic family. The matrices below
enumerate every algorithm against every space type, so an algorithm added to the registry is tested here
too: what its registry record says it takes must train, and what it does not must be refused with one line
that names the space and the algorithms that take it.
"""

import json
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

import advantage
from advantage.cli import main
from advantage.envs.make import (
    _check_obs,
    check_env_api,
    describe_space,
    encode_observations,
    encoded_dtype,
    flatten_observations,
)
from advantage.errors import EnvError
from advantage.nn.actor_critic import ActorCritic, BernoulliHead, MultiCategoricalHead, make_head
from advantage.registry import all_algorithms
from advantage.resolve import resolve_config

FAST = {"trainer.tensorboard": False, "trainer.eval_episodes": 2, "trainer.eval_every": 0}

# ---------------------------------------------------------------------------------------------- the spaces

OBSERVATIONS = {
    "box": lambda: spaces.Box(-1.0, 1.0, (3,), np.float32),
    "image": lambda: spaces.Box(0, 255, (6, 6, 3), np.uint8),
    "discrete": lambda: spaces.Discrete(5, start=2),
    "multidiscrete": lambda: spaces.MultiDiscrete([3, 2, 4]),
    "multibinary": lambda: spaces.MultiBinary(4),
    "dict": lambda: spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "cell": spaces.Discrete(3),
            "bits": spaces.MultiBinary(2),
        }
    ),
    "tuple": lambda: spaces.Tuple((spaces.MultiBinary(3), spaces.Discrete(2), spaces.MultiDiscrete([2, 2]))),
    "text": lambda: spaces.Text(5),  # no vector encoding: refused by every algorithm
}
ENCODABLE = sorted(k for k in OBSERVATIONS if k != "text")
ACTIONS = {
    "discrete": lambda: spaces.Discrete(3, start=1),
    "box": lambda: spaces.Box(-2.0, 2.0, (2,), np.float32),
    "multidiscrete": lambda: spaces.MultiDiscrete([2, 3], start=[1, -1]),
    "multibinary": lambda: spaces.MultiBinary(3),
}


class SpacesEnv(gym.Env):
    """Observations of the space named ``obs``, actions of the space named ``act``, 8-step episodes.
    Every action the env receives is checked against its space (dtype, shape, ``start`` offsets): an
    algorithm that hands it anything else fails the test. The reward is the first entry of the action's
    encoding (the action is ``start`` for a Discrete one), so there is something to learn."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, obs: str = "dict", act: str = "multidiscrete", render_mode=None):
        self.observation_space = OBSERVATIONS[obs]()
        self.action_space = ACTIONS[act]()
        self.render_mode = render_mode
        self.t = 0

    def _obs(self):
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} ({type(action).__name__}) is not in {self.action_space}")
        self.t += 1
        reward = float(gym.spaces.flatten(self.action_space, action)[0])
        return self._obs(), reward, False, self.t >= 8, {}


def env_id(obs: str, act: str) -> str:
    name = f"AdvantageSpaces-{obs}-{act}-v0"
    if name not in gym.registry:
        gym.register(name, entry_point=SpacesEnv, kwargs={"obs": obs, "act": act})
    return name


# Small runs: every algorithm trains a few hundred steps on its cheapest settings.
SMALL = {
    "ppo": {
        "env.num_envs": 2,
        "algorithm.n_steps": 32,
        "algorithm.minibatch_size": 32,
        "algorithm.n_epochs": 2,
    },
    "a2c": {"env.num_envs": 2, "algorithm.n_steps": 8},
    "trpo": {"env.num_envs": 2, "algorithm.n_steps": 32, "algorithm.vf_epochs": 2},
    "reinforce": {"env.num_envs": 2, "algorithm.episodes_per_update": 4},
    "reinforce_is": {"env.num_envs": 2, "algorithm.episodes_per_update": 4, "algorithm.reuse": 2},
    "dqn": {
        "algorithm.learning_starts": 64,
        "algorithm.buffer_size": 1000,
        "algorithm.batch_size": 32,
        "algorithm.overestimation_every": 0,
    },
    **{
        algo: {"algorithm.learning_starts": 64, "algorithm.buffer_size": 1000, "algorithm.batch_size": 32}
        for algo in ("sac", "td3", "ddpg")
    },
}
MLP_ALGORITHMS = sorted(SMALL)


def test_every_algorithm_with_observations_from_gymnasium_is_enumerated():
    """The matrices cover every algorithm whose network is an MLP: one added later must be added to
    ``SMALL`` (and so to every case below)."""
    mlp = {name for name, spec in all_algorithms().items() if getattr(spec.config, "flatten_obs", False)}
    assert mlp == set(SMALL)


def _accepts(algo: str, obs: str, act: str) -> bool:
    """What the algorithm's registry record says it takes."""
    spec = all_algorithms()[algo]
    return (
        type(OBSERVATIONS[obs]()).__name__ in spec.observation_spaces
        and type(ACTIONS[act]()).__name__ in spec.action_spaces
    )


def _takers(obs: str, act: str) -> str:
    """The refusal's last part: every algorithm (tabular ones too) that takes both spaces."""
    names = sorted(a for a, spec in all_algorithms().items() if spec.uses_env and _accepts(a, obs, act))
    kinds = f"{type(OBSERVATIONS[obs]()).__name__} observations and {type(ACTIONS[act]()).__name__} actions"
    return f"; algorithms for {kinds}: {', '.join(names)}"


def _train(algo: str, obs: str, act: str, steps: int = 200):
    over = {**FAST, **SMALL[algo], "env.id": env_id(obs, act), "trainer.total_steps": steps}
    return advantage.train(algo, quiet=True, **over)


def _refused(algo: str, obs: str, act: str, capsys) -> str:
    """The command line's answer to a refused pair: exit status 2 and one line."""
    code = main(["train", algo, f"env.id={env_id(obs, act)}", "trainer.tensorboard=false"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert not Path("runs").exists()
    return err


# ------------------------------------------------------------------------------ algorithms × spaces


# The observation space each action space is paired with (the issue's: Dict observations with
# MultiDiscrete actions, Tuple observations with MultiBinary actions, a Discrete-observation env).
PAIRED_OBS = {"discrete": "discrete", "box": "dict", "multidiscrete": "dict", "multibinary": "tuple"}


@pytest.mark.parametrize("act", sorted(ACTIONS))
@pytest.mark.parametrize("algo", MLP_ALGORITHMS)
def test_every_algorithm_with_every_action_space(algo, act, capsys):
    obs = PAIRED_OBS[act]
    if _accepts(algo, obs, act):
        run = _train(algo, obs, act)
        assert run.step >= 200
        res = run.evaluate(episodes=2)  # a new env, the same encoding: the policy acts in it
        assert res["episodes"] == 2 and res["length_mean"] == 8
        return
    err = _refused(algo, obs, act, capsys)
    space = describe_space(ACTIONS[act]())
    assert f"{algo} needs a " in err and f"action space; {env_id(obs, act)} has {space}" in err
    assert err.endswith(_takers(obs, act)), err


@pytest.mark.parametrize("obs", sorted(OBSERVATIONS))
@pytest.mark.parametrize("algo", MLP_ALGORITHMS)
def test_every_algorithm_with_every_observation_space(algo, obs, capsys):
    act = "box" if algo in ("sac", "td3", "ddpg") else "discrete"
    if _accepts(algo, obs, act):
        run = _train(algo, obs, act)
        assert run.step >= 200
        assert run.evaluate(episodes=2)["length_mean"] == 8
        return
    err = _refused(algo, obs, act, capsys)
    assert err == (
        f"error: {algo} needs a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple observation space; "
        f"{env_id(obs, act)} has {describe_space(OBSERVATIONS[obs]())}"
    )


@pytest.mark.parametrize("obs", ["box", "multidiscrete", "multibinary", "dict", "tuple"])
@pytest.mark.parametrize("algo", ["q_learning", "value_iteration", "semi_gradient_sarsa"])
def test_tabular_and_linear_methods_refuse_what_is_not_a_table_index(algo, obs, capsys):
    err = _refused(algo, obs, "discrete", capsys)
    space = describe_space(OBSERVATIONS[obs]())
    assert f"{algo} needs a Discrete observation space; {env_id(obs, 'discrete')} has {space}" in err
    assert err.endswith(_takers(obs, "discrete")), err  # those that take it, not the table methods
    assert "q_learning" not in err.split(";")[-1]


def test_the_refusal_names_the_algorithms_for_the_space():
    with pytest.raises(EnvError) as info:
        advantage.train("dqn", quiet=True, **{"env.id": "Pendulum-v1"})
    assert str(info.value) == (
        "dqn needs a Discrete action space; Pendulum-v1 has Box(-2.0, 2.0, (1,)); algorithms for Box "
        "observations and Box actions: a2c, ddpg, ppo, reinforce, reinforce_is, sac, td3, trpo"
    )


@pytest.mark.parametrize("algo", ["ppo", "a2c", "trpo", "reinforce"])
def test_squash_is_for_box_actions_only(algo):
    with pytest.raises(EnvError, match="model.squash=true needs a Box action space; .* has MultiBinary"):
        advantage.train(algo, quiet=True, **{"env.id": env_id("tuple", "multibinary"), "model.squash": True})


@pytest.mark.parametrize("env", ["FrozenLake-v1", "CliffWalking-v1", "Blackjack-v1"])
@pytest.mark.parametrize("algo", ["ppo", "a2c", "trpo", "reinforce", "dqn"])
def test_toy_text_tasks_train(algo, env):
    """What was refused before ("needs a Box observation space"): Discrete and Tuple observations."""
    over = {**FAST, **SMALL[algo], "env.id": env, "trainer.total_steps": 200, "env.max_episode_steps": 20}
    run = advantage.train(algo, quiet=True, **over)
    assert run.step >= 200


# ------------------------------------------------------------------------------ the switch and encoding


def test_the_switch_is_the_algorithms_network():
    def cfg(algo, **over):
        return resolve_config(algo, None, over)[1]

    for algo in MLP_ALGORITHMS:
        assert flatten_observations(cfg(algo)), algo
    assert not flatten_observations(cfg("dqn", **{"model.cnn": True}))  # the Nature CNN keeps images
    for algo in ("q_learning", "mc_control", "value_iteration", "semi_gradient_td"):
        assert not flatten_observations(cfg(algo)), algo


@pytest.mark.parametrize("obs", ENCODABLE)
def test_encoding_is_gymnasiums_flatten_in_a_compact_dtype(obs):
    env = gym.make(env_id(obs, "discrete"))
    raw_space = env.observation_space
    encoded = encode_observations(env)
    raw, _ = env.reset(seed=3)
    got, _ = encoded.reset(seed=3)
    expected = gym.spaces.flatten(raw_space, raw)
    if obs == "box":
        assert encoded is env  # already a vector: nothing added
    assert got.shape == (gym.spaces.flatdim(raw_space),) == encoded.observation_space.shape
    assert got.dtype == encoded.observation_space.dtype == encoded_dtype(raw_space)
    np.testing.assert_allclose(got, expected.astype(np.float64), rtol=1e-6)
    # one-hots and bits in one byte each; a real-valued part makes it float32; a Box keeps its dtype
    want = {"box": np.float32, "image": np.uint8, "dict": np.float32}.get(obs, np.uint8)
    assert got.dtype == want


def test_a_space_without_a_vector_encoding_is_left_for_the_check_to_refuse():
    env = gym.make(env_id("text", "discrete"))
    assert encode_observations(env) is env


def test_discrete_one_hot_respects_start():
    """Discrete(5, start=2): observation x is the one-hot e_{x−2}."""
    for seed in range(10):
        raw, _ = gym.make(env_id("discrete", "discrete")).reset(seed=seed)
        got, _ = encode_observations(gym.make(env_id("discrete", "discrete"))).reset(seed=seed)
        assert 2 <= raw < 7
        np.testing.assert_array_equal(got, np.eye(5, dtype=np.uint8)[raw - 2])


def test_image_observations_reach_an_mlp_flattened():
    """A Box of several dimensions (CarRacing's 96×96×3) used to meet a Linear over its last axis only."""
    space = OBSERVATIONS["image"]()
    model = ActorCritic(space, spaces.Discrete(3), [16])
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(5)]), dtype=torch.float32)
    action, logp, value = model.act(obs)
    assert action.shape == (5,) and logp.shape == (5,) and value.shape == (5,)
    flat = ActorCritic(spaces.Box(0, 255, (108,), np.uint8), spaces.Discrete(3), [16])
    flat.load_state_dict(model.state_dict())  # the same weights: the first Linear takes all 108 inputs
    torch.testing.assert_close(flat.value(obs.reshape(5, -1)), model.value(obs))


def test_dqn_stores_one_hot_observations_in_a_byte():
    from advantage.algos.dqn import make_buffer
    from advantage.envs import make_vec_env

    cfg = resolve_config("dqn", None, {"env.id": "FrozenLake-v1", "algorithm.buffer_size": 100})[1]
    env = make_vec_env(cfg.env, flatten_obs=flatten_observations(cfg))
    buffer = make_buffer(cfg, env.single_observation_space)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.shape == (1, 16)
    assert buffer.obs.dtype == np.uint8
    env.close()


@pytest.mark.parametrize("obs, stored", [("image", np.uint8), ("tuple", np.uint8), ("dict", np.float32)])
def test_offpolicy_replay_stores_byte_observations_in_a_byte(obs, stored):
    from advantage.algos.offpolicy_common import Experience

    class Ctx:  # what Experience.env_step reports finished episodes to
        def episode(self, step, ret, length):
            pass

    over = {"env.id": env_id(obs, "box"), "algorithm.buffer_size": 100, "algorithm.batch_size": 4}
    exp = Experience(resolve_config("sac", None, over)[1])
    assert exp.buffer.obs.dtype == stored
    for _ in range(10):
        exp.env_step(exp.random_actions(), Ctx())
    batch_obs, *_, next_obs, _, _ = exp.sample(4)
    assert batch_obs.dtype == next_obs.dtype == torch.float32  # what the networks take
    assert batch_obs.shape == (4, gym.spaces.flatdim(OBSERVATIONS[obs]()))
    exp.close()


# --------------------------------------------------------------------------------- describe and check


@pytest.mark.parametrize(
    "space, text",
    [
        (spaces.Discrete(4), "Discrete(4)"),
        (spaces.Discrete(3, start=-1), "Discrete(3, start=-1)"),
        (spaces.Box(-2.0, 2.0, (1,), np.float32), "Box(-2.0, 2.0, (1,))"),
        (spaces.Box(np.zeros(2), np.array([1.0, 2.0]), dtype=np.float64), "Box(2,)"),
        (spaces.MultiDiscrete([3, 2]), "MultiDiscrete([3, 2])"),
        (spaces.MultiDiscrete([3, 2], start=[1, 0]), "MultiDiscrete([3, 2], start=[1, 0])"),
        (spaces.MultiBinary(5), "MultiBinary(5)"),
        (spaces.MultiBinary([2, 3]), "MultiBinary((2, 3))"),
        (
            spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,)), "goal": spaces.Discrete(3)}),
            "Dict(goal: Discrete(3), pos: Box(-1.0, 1.0, (2,)))",  # Gymnasium sorts a dict's keys
        ),
        (spaces.Tuple((spaces.MultiBinary(2), spaces.Discrete(2))), "Tuple(MultiBinary(2), Discrete(2))"),
        (spaces.Text(5), "Text"),
    ],
)
def test_describe_space(space, text):
    assert describe_space(space) == text


@pytest.mark.parametrize(
    "space, obs, message",
    [
        (
            spaces.Box(-1, 1, (3,)),
            np.zeros(4),
            r"an observation of shape \(4,\); the observation space is Box",
        ),
        (spaces.Discrete(3), 3, r"an observation 3 \(int\), not in Discrete\(3\)"),
        (spaces.Discrete(3, start=1), 0, r"an observation 0 \(int\), not in Discrete\(3, start=1\)"),
        (spaces.Discrete(3), 1.0, r"an observation 1.0 \(float\), not in Discrete\(3\)"),
        (
            spaces.MultiDiscrete([2, 2]),
            np.array([0, 2]),
            r"\[0 2\] \(int64, shape \(2,\)\), not in MultiDiscrete",
        ),
        (
            spaces.MultiBinary(3),
            np.array([0, 1]),
            r"\[0 1\] \(int64, shape \(2,\)\), not in MultiBinary\(3\)",
        ),
        (
            spaces.MultiBinary(2),
            np.array([0, 2], np.int8),
            r"\[0 2\] \(int8, shape \(2,\)\), not in MultiBinary",
        ),
        (
            spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))}),
            {"a": 1},
            r"a dict with keys \['a'\] \(expected the keys \['a', 'b'\]\)",
        ),
        (
            spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))}),
            {"a": 5, "b": np.zeros(2)},
            r"whose part \['a'\] is 5 \(int\), not in Discrete\(2\); the observation space is Dict\(a: ",
        ),
        (
            spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))}),
            {"a": 1, "b": np.zeros(3)},
            r"whose part \['b'\] has shape \(3,\)",
        ),
        (
            spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
            (1,),
            r"a tuple of 1 \(expected a tuple of 2\)",
        ),
        (
            spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(2))),
            (1, np.array([3, 0])),
            r"whose part \[1\] is \[3 0\] \(int64, shape \(2,\)\), not in MultiBinary\(2\)",
        ),
    ],
)
def test_an_observation_outside_its_space_is_one_clear_error(space, obs, message):
    with pytest.raises(EnvError, match=r"^Env-v0: step\(\) returned " + ".*" + message):
        _check_obs("Env-v0", "step()", obs, space)


@pytest.mark.parametrize("space", [OBSERVATIONS[k]() for k in sorted(OBSERVATIONS)], ids=sorted(OBSERVATIONS))
def test_members_of_every_space_pass_the_check(space):
    space.seed(0)
    for _ in range(5):
        _check_obs("Env-v0", "reset()", space.sample(), space)


class _BadDict(SpacesEnv):
    def _obs(self):
        obs = self.observation_space.sample()
        obs["cell"] = 7  # outside Discrete(3)
        return obs


def test_check_env_api_catches_a_dict_part_outside_its_space_before_training(capsys):
    if "AdvantageBadDict-v0" not in gym.registry:
        gym.register("AdvantageBadDict-v0", entry_point=_BadDict, kwargs={"obs": "dict", "act": "discrete"})
    with pytest.raises(EnvError, match=r"AdvantageBadDict-v0: reset\(\) returned an observation whose part"):
        check_env_api("AdvantageBadDict-v0", gym.make("AdvantageBadDict-v0"))
    assert main(["train", "ppo", "env.id=AdvantageBadDict-v0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "['cell'] is 7 (int), not in Discrete(3)" in err and len(err.splitlines()) == 1
    assert not Path("runs").exists()


# ------------------------------------------------------------------------------------------- the heads


def _hidden(n: int = 6, width: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_multicategorical_log_prob_and_entropy_are_those_of_a_product_of_categoricals():
    space = spaces.MultiDiscrete([3, 2, 4])
    head = MultiCategoricalHead(5, space).double()
    h = _hidden()
    z = head.logits(h)
    factors = [torch.distributions.Categorical(logits=part) for part in z.split([3, 2, 4], dim=-1)]
    action = torch.stack([f.sample() for f in factors], dim=-1)  # [N, 3]
    logp, entropy = head.log_prob_entropy(h, action)
    torch.testing.assert_close(logp, sum(f.log_prob(action[:, k]) for k, f in enumerate(factors)))
    torch.testing.assert_close(entropy, sum(f.entropy() for f in factors))
    a, lp = head.sample(h)
    assert a.shape == (6, 3) and a.dtype == torch.long
    torch.testing.assert_close(lp, head.log_prob_entropy(h, a)[0])
    for k, n in enumerate([3, 2, 4]):
        assert int(a[:, k].min()) >= 0 and int(a[:, k].max()) < n
    greedy, _ = head.sample(h, deterministic=True)
    torch.testing.assert_close(greedy, torch.stack([f.probs.argmax(-1) for f in factors], dim=-1))


def test_bernoulli_log_prob_and_entropy_are_those_of_independent_bits():
    head = BernoulliHead(5, spaces.MultiBinary(4)).double()
    h = _hidden()
    z = head.logits(h)
    bits = torch.distributions.Bernoulli(logits=z)
    action = bits.sample()
    logp, entropy = head.log_prob_entropy(h, action)
    torch.testing.assert_close(logp, bits.log_prob(action).sum(-1))
    torch.testing.assert_close(entropy, bits.entropy().sum(-1))
    a, lp = head.sample(h)
    assert a.shape == (6, 4) and set(a.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(lp, head.log_prob_entropy(h, a)[0])
    torch.testing.assert_close(head.sample(h, deterministic=True)[0], (z > 0).double())


@pytest.mark.parametrize(
    "space", [spaces.MultiDiscrete([3, 2, 4]), spaces.MultiBinary(4), spaces.Discrete(3)]
)
def test_head_gradients(space):
    """``gradcheck`` of log π and the entropy in the trunk's output h, and the parameters' gradients of
    log π against those torch.distributions gives."""
    head = make_head(5, space).double()
    h = _hidden(4).requires_grad_(True)
    action, _ = head.sample(h.detach())
    assert torch.autograd.gradcheck(lambda x: head.log_prob_entropy(x, action), (h,))

    z = head.logits(h.detach())
    if isinstance(space, spaces.MultiBinary):
        ref = torch.distributions.Bernoulli(logits=z).log_prob(action).sum()
    elif isinstance(space, spaces.MultiDiscrete):
        parts = z.split([3, 2, 4], dim=-1)
        ref = sum(
            torch.distributions.Categorical(logits=p).log_prob(action[:, k]).sum()
            for k, p in enumerate(parts)
        )
    else:
        ref = torch.distributions.Categorical(logits=z).log_prob(action).sum()
    params = list(head.parameters())
    want = torch.autograd.grad(ref, params)
    got = torch.autograd.grad(head.log_prob_entropy(h.detach(), action)[0].sum(), params)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_sampling_frequencies_follow_the_probabilities():
    torch.manual_seed(0)
    md = MultiCategoricalHead(2, spaces.MultiDiscrete([3, 2]))
    bern = BernoulliHead(2, spaces.MultiBinary(2))
    with torch.no_grad():
        md.logits[0].weight.zero_()
        md.logits[0].bias.copy_(torch.tensor([0.0, 1.0, 2.0, -1.0, 1.0]))
        bern.logits[0].weight.zero_()
        bern.logits[0].bias.copy_(torch.tensor([1.5, -0.5]))
    h = torch.zeros(20_000, 2)
    a, _ = md.sample(h)
    p0 = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    p1 = torch.softmax(torch.tensor([-1.0, 1.0]), 0)
    torch.testing.assert_close(torch.bincount(a[:, 0], minlength=3) / 20_000, p0, atol=0.015, rtol=0)
    torch.testing.assert_close(torch.bincount(a[:, 1], minlength=2) / 20_000, p1, atol=0.015, rtol=0)
    b, _ = bern.sample(h)
    torch.testing.assert_close(b.mean(0), torch.sigmoid(torch.tensor([1.5, -0.5])), atol=0.015, rtol=0)


@pytest.mark.parametrize("space", [ACTIONS[k]() for k in sorted(ACTIONS)], ids=sorted(ACTIONS))
def test_to_env_gives_the_env_an_action_of_its_space(space):
    head = make_head(5, space)
    for _ in range(20):
        with torch.no_grad():
            action, _ = head.sample(torch.randn(3, 5))
        for a in head.to_env(action):
            assert space.contains(a), (a, space)


def test_multidiscrete_of_several_dimensions_keeps_its_shape():
    space = spaces.MultiDiscrete(np.array([[2, 3], [4, 2]]))
    head = make_head(5, space)
    with torch.no_grad():
        action, _ = head.sample(torch.randn(7, 5))
    assert action.shape == (7, 4)
    out = head.to_env(action)
    assert out.shape == (7, 2, 2) and all(space.contains(a) for a in out)


def test_trpo_kl_of_the_new_heads_is_the_sum_of_their_factors_kls():
    from advantage.algos.trpo import distribution, mean_kl

    dist = torch.distributions
    for space in (spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3)):
        model = ActorCritic(spaces.Box(-1, 1, (4,)), space, [8]).double()
        obs = _hidden(6, 4)
        z_old = model.head.logits(model.pi_body(obs)).detach()
        old = distribution(model, obs).detach()
        with torch.no_grad():
            for p in model.head.parameters():
                p.add_(0.3 * torch.randn_like(p))
        z_new = model.head.logits(model.pi_body(obs))
        if isinstance(space, spaces.MultiBinary):
            want = dist.kl_divergence(dist.Bernoulli(logits=z_old), dist.Bernoulli(logits=z_new)).sum(-1)
        else:
            pairs = zip(z_old.split([3, 2], dim=-1), z_new.split([3, 2], dim=-1), strict=True)
            cat = dist.Categorical
            want = sum(dist.kl_divergence(cat(logits=o), cat(logits=n)) for o, n in pairs)
        assert float(want.mean().detach()) > 1e-3  # the parameters moved
        torch.testing.assert_close(mean_kl(model, obs, old, None), want.mean())


# ------------------------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_ppo_solves_frozenlake_and_evaluates_the_same_from_the_run(capsys):
    """PPO on FrozenLake (deterministic moves) reaches the goal, and ``advantage eval`` of the run folder
    sees the one-hot observations the policy was trained on."""
    run = advantage.train(
        "ppo",
        quiet=True,
        **{
            **FAST,
            "env.id": "FrozenLake-v1",
            "env.is_slippery": False,
            "trainer.seed": 0,
            "trainer.total_steps": 20_000,
            "trainer.eval_every": 1000,
            "trainer.eval_episodes": 5,
            "trainer.stop_at_return": 1.0,
            "trainer.run_dir": "lake",
        },
    )
    assert run.step <= 10_000
    evals = [row for row in run.metrics if "eval/return_mean" in row]
    assert evals[-1]["eval/return_mean"] == 1.0 and evals[-1]["eval/success_rate"] == 1.0
    assert main(["eval", "lake", "--episodes", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["return_mean"] == 1.0 and res["success_rate"] == 1.0
