r"""Experience replay for off-policy learning: a uniform ring buffer with n-step returns, and proportional
prioritized replay (Schaul et al. 2016) on a sum-tree.

Both are preallocated numpy arrays; sampling is vectorized over the batch (no Python loop per sample).
``add`` takes one step of ``num_envs`` parallel environments at a time and keeps, per environment, a window
of at most ``n_step`` pending steps from which the n-step transitions are emitted (Hessel et al. 2018:
:math:`Q(s_0,a_0) = r_1 + \gamma r_2 + \gamma^2 r_3 + \dots`):

.. math::
    (s_t,\ a_t,\ R^{(k)}_t = \textstyle\sum_{i<k} \gamma^i r_{t+i},\ s_{t+k},\ \text{term},\ \gamma^k)

with ``k = n_step``, or fewer when the episode ends first. On ``terminated`` the whole window is flushed
with ``term = True``; on ``truncated`` (a time limit) it is flushed with ``term = False`` and ``s_{t+k}`` =
the final observation, so the learner bootstraps from it: a truncation is never treated as terminal. The
stored per-transition discount :math:`\gamma^k` goes straight into
``advantage.math.td_target(rewards, next_q, terminated, gamma=discounts)``.

``next_obs`` passed to ``add`` must be the true next observation: at an episode end, the final one (which
Gymnasium's ``NEXT_STEP`` autoreset returns from that step); the reset step that follows is not a
transition and is skipped with ``valid=False`` for that environment.

``state_dict()`` returns one flat dict whose values are numpy arrays (the stored transitions, the pending
windows, the priorities) or JSON-able values (counters, the numpy Generator state): the arrays go to
``advantage.checkpoint.save_checkpoint(tensors=...)``, the rest to its ``state``; ``load_state_dict`` of the
merged dict (arrays may come back as CPU torch tensors) resumes adding and sampling exactly.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym
    from numpy.typing import DTypeLike

    from advantage.config import VecEnvConfig

from advantage.errors import ConfigError

__all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "SumTree"]

_STORED = ("obs", "actions", "rewards", "next_obs", "terminated", "discounts")


def available_memory() -> int:
    """Bytes of memory available for new allocations (``MemAvailable``, else the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**62


def memory_problem(what: str, nbytes: int) -> str | None:
    """A message when ``nbytes`` (for ``what``, e.g. ``"algorithm.buffer_size=10**9: the replay
    buffer"``) would not fit in the memory available now, else None. Checked before allocating."""
    free = available_memory()
    if nbytes <= free:
        return None
    return f"{what} needs {nbytes / 2**30:.3g} GiB of memory, but only {free / 2**30:.3g} GiB is available"


def replay_bytes(
    capacity: int,
    obs_shape: tuple[int, ...],
    obs_dtype: DTypeLike,
    action_shape: tuple[int, ...],
    action_dtype: DTypeLike,
) -> int:
    """The bytes :class:`ReplayBuffer` allocates for ``capacity`` transitions."""
    obs = int(np.prod(obs_shape, dtype=np.float64)) * np.dtype(obs_dtype).itemsize
    act = int(np.prod(action_shape, dtype=np.float64)) * np.dtype(action_dtype).itemsize
    return capacity * (2 * obs + act + 4 + 1 + 4)


class _RolloutSteps(Protocol):
    @property
    def n_steps(self) -> int: ...


class RolloutSize(Protocol):
    """What sizes an on-policy rollout in a config: ``algorithm.n_steps`` steps of ``env.num_envs`` envs."""

    @property
    def env(self) -> VecEnvConfig: ...

    @property
    def algorithm(self) -> _RolloutSteps: ...


def check_rollout_memory(cfg: RolloutSize, env: gym.Env | gym.vector.VectorEnv) -> None:
    """:class:`ConfigError` before anything runs when one on-policy rollout (``algorithm.n_steps`` ×
    ``env.num_envs`` steps: observation, action and about 8 float32 numbers each) would not fit in the
    memory available (PPO, TRPO, A2C)."""
    obs_size = math.prod(env.observation_space.shape or (1,))
    act_size = math.prod(env.action_space.shape or (1,))
    n, envs = cfg.algorithm.n_steps, cfg.env.num_envs
    what = f"algorithm.n_steps={n} × env.num_envs={envs}: one rollout"
    problem = memory_problem(what, n * envs * 4 * (obs_size + act_size + 8))
    if problem:
        raise ConfigError(problem)


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_unit(name: str, value: Any) -> float:
    if not isinstance(value, int | float | np.floating) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return float(value)


_BIT_GENERATORS: dict[str, type[np.random.BitGenerator]] = {
    g.__name__: g for g in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937)
}
_BIT_GENERATORS |= {g.__name__: g for g in (np.random.Philox, np.random.SFC64)}


def _rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    """A generator in ``state``; only numpy's bit generators (a name read from a checkpoint must never
    pick an arbitrary function of ``numpy.random``)."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"unknown bit generator {str(name)[:40]!r} in the replay buffer's state")
    bit_gen = _BIT_GENERATORS[name]()
    bit_gen.state = state
    return np.random.Generator(bit_gen)


class ReplayBuffer:
    r"""Uniform experience replay over a ring of ``capacity`` transitions, with n-step returns.

    Args:
        capacity: number of transitions kept; the oldest is overwritten first.
        obs_shape, obs_dtype: shape and numpy dtype of one observation.
        action_shape, action_dtype: of one action (``()`` and an integer dtype for a discrete action).
        num_envs: ``N``, the number of parallel environments each ``add`` call holds one step of.
        n_step: ``n >= 1`` rewards summed per transition.
        gamma: discount in [0, 1] used for the n-step sums and the stored discounts.
        seed: seed of the buffer's own ``np.random.Generator`` (sampling only).

    Stored per transition: ``obs`` and ``next_obs`` (``obs_dtype``), ``actions`` (``action_dtype``),
    ``rewards`` (float32, the n-step sum), ``terminated`` (bool), ``discounts`` (float32, :math:`\gamma^k`).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: DTypeLike,
        action_shape: tuple[int, ...],
        action_dtype: DTypeLike,
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        seed: int = 0,
    ):
        self.capacity = _check_positive_int("capacity", capacity)
        self.num_envs = _check_positive_int("num_envs", num_envs)
        self.n_step = _check_positive_int("n_step", n_step)
        self.gamma = _check_unit("gamma", gamma)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.action_shape = tuple(int(d) for d in action_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_dtype = np.dtype(action_dtype)
        C, E, n = self.capacity, self.num_envs, self.n_step
        need = replay_bytes(C, self.obs_shape, self.obs_dtype, self.action_shape, self.action_dtype)
        problem = memory_problem(f"a replay buffer of {C} transitions", need)
        if problem:
            raise ConfigError(problem)
        self.obs = np.zeros((C, *self.obs_shape), self.obs_dtype)
        self.actions = np.zeros((C, *self.action_shape), self.action_dtype)
        self.rewards = np.zeros(C, np.float32)
        self.next_obs = np.zeros((C, *self.obs_shape), self.obs_dtype)
        self.terminated = np.zeros(C, bool)
        self.discounts = np.zeros(C, np.float32)
        self.pos = 0  # next slot to write
        self.size = 0  # transitions stored; equals pos until the ring first wraps
        self.rng = np.random.default_rng(seed)
        # Pending n-step windows: a ring of n slots per env, oldest step at slot `_p_start`.
        self._p_obs = np.zeros((E, n, *self.obs_shape), self.obs_dtype)
        self._p_act = np.zeros((E, n, *self.action_shape), self.action_dtype)
        self._p_rew = np.zeros((E, n), np.float64)
        self._p_start = np.zeros(E, np.int64)
        self._p_len = np.zeros(E, np.int64)
        self._gamma_pow = self.gamma ** np.arange(n + 1, dtype=np.float64)  # γ^0 … γ^n

    def __len__(self) -> int:
        return self.size

    # ------------------------------------------------------------------------------------------ adding

    def _as_batch(self, name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
        x = np.asarray(x)
        if x.shape != (self.num_envs, *shape):
            want = (self.num_envs, *shape)
            raise ValueError(f"{name} must have shape {want} (num_envs first), got {x.shape}")
        return x

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> np.ndarray:
        """Add one step of all ``N = num_envs`` environments; emit the transitions it completes.

        Args:
            obs, next_obs: ``[N, *obs_shape]``; ``next_obs`` is the final observation at an episode end.
            actions: ``[N, *action_shape]``.
            rewards, terminated, truncated: ``[N]``.
            valid: optional bool ``[N]``; environments with ``False`` are skipped entirely (the reset step
                of a ``NEXT_STEP`` autoreset vector env).

        Returns:
            int64 ``[M]``, the buffer slots written by this call (``M`` may be 0), in env order and, within
            an env, oldest start step first.
        """
        E, n = self.num_envs, self.n_step
        obs = self._as_batch("obs", obs, self.obs_shape)
        next_obs = self._as_batch("next_obs", next_obs, self.obs_shape)
        actions = self._as_batch("actions", actions, self.action_shape)
        rewards = self._as_batch("rewards", rewards, ()).astype(np.float64)
        term = self._as_batch("terminated", terminated, ()).astype(bool)
        trunc = self._as_batch("truncated", truncated, ()).astype(bool)
        live = np.ones(E, bool) if valid is None else self._as_batch("valid", valid, ()).astype(bool)

        env = np.flatnonzero(live)
        slot = (self._p_start[env] + self._p_len[env]) % n  # always 0 when n == 1
        self._p_obs[env, slot] = obs[env]
        self._p_act[env, slot] = actions[env]
        self._p_rew[env, slot] = rewards[env]
        if n == 1:
            # Fast path (continuous control adds one step per call): every live step is a finished 1-step
            # transition. Same transitions, slots and state as the general path below, with a third of
            # its numpy calls; the pending window's slot 0 is written above, so state_dict() is identical.
            return self._write(
                obs=obs[env],
                actions=actions[env],
                rewards=rewards[env],
                next_obs=next_obs[env],
                terminated=term[env],
                discounts=np.full(env.size, self._gamma_pow[1]),
            )
        self._p_len[env] += 1

        done = np.zeros(E, bool)
        done[env] = term[env] | trunc[env]
        full = live & ~done & (self._p_len == n)
        # (env, j) pairs to emit: every pending step of a finished episode, the oldest step of a full window.
        d_env = np.flatnonzero(done)
        d_len = self._p_len[d_env]
        e = np.concatenate([np.repeat(d_env, d_len), np.flatnonzero(full)])
        j = np.concatenate(
            [np.arange(d_len.sum()) - np.repeat(np.cumsum(d_len) - d_len, d_len), np.zeros(full.sum(), int)]
        )
        order = np.argsort(e, kind="stable")  # done and full envs are disjoint: env order, then j
        e, j = e[order], j[order]

        written = np.zeros(0, np.int64)
        if e.size:
            k = self._p_len[e] - j  # rewards in each emitted sum, 1..n
            first = (self._p_start[e] + j) % n
            i = np.arange(n)
            slots = (first[:, None] + i) % n  # [M, n]
            terms = np.where(i < k[:, None], self._gamma_pow[i] * self._p_rew[e[:, None], slots], 0.0)
            written = self._write(
                obs=self._p_obs[e, first],
                actions=self._p_act[e, first],
                rewards=terms.sum(axis=1),
                next_obs=next_obs[e],
                terminated=term[e],  # False for a full window (not done) and for a truncation
                discounts=self._gamma_pow[k],
            )

        self._p_start[d_env] = 0
        self._p_len[d_env] = 0
        self._p_start[full] = (self._p_start[full] + 1) % n
        self._p_len[full] -= 1
        return written

    def _write(self, **fields: np.ndarray) -> np.ndarray:
        m = len(fields["obs"])
        if m > self.capacity:  # more than fits in one call: only the newest `capacity` survive
            fields = {k: v[-self.capacity :] for k, v in fields.items()}
            self.pos = (self.pos + m - self.capacity) % self.capacity
            m = self.capacity
        idx = (self.pos + np.arange(m)) % self.capacity
        for name, value in fields.items():
            getattr(self, name)[idx] = value
        self.pos = (self.pos + m) % self.capacity
        self.size = min(self.size + m, self.capacity)
        return idx.astype(np.int64)

    # ---------------------------------------------------------------------------------------- sampling

    def check_batch_size(self, batch_size: int) -> int:
        """Raise a ValueError unless ``batch_size >= 1`` and the buffer holds a transition. A batch larger
        than what is stored is allowed: draws are with replacement (as Stable-Baselines3's, whose replay
        algorithms learn from the first few transitions when ``learning_starts`` is below the batch)."""
        batch_size = _check_positive_int("batch_size", batch_size)
        if self.size == 0:
            raise ValueError(f"cannot sample batch_size={batch_size} from an empty replay buffer")
        return batch_size

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at ``indices`` (int ``[B]``, or any shape, e.g. ``[G, B]``, which then leads every
        array) as a dict of new arrays, ``indices`` included."""
        out = {name: getattr(self, name)[indices] for name in _STORED}
        out["indices"] = np.asarray(indices, np.int64)
        return out

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` transitions uniformly at random, with replacement.

        Returns:
            ``obs``, ``next_obs`` ``[B, *obs_shape]``; ``actions`` ``[B, *action_shape]``; ``rewards``,
            ``discounts``, ``weights`` (all 1) float32 ``[B]``; ``terminated`` bool ``[B]``; ``indices``
            int64 ``[B]``.
        """
        batch_size = self.check_batch_size(batch_size)
        batch = self.gather(self.rng.integers(0, self.size, size=batch_size))
        batch["weights"] = np.ones(batch_size, np.float32)
        return batch

    def sample_batches(self, num_batches: int, batch_size: int) -> dict[str, np.ndarray]:
        """``num_batches`` independent uniform batches in one draw and one gather: the dict of
        :meth:`sample` with a leading ``[G, B]`` (``G = num_batches``) on every array.

        The batches of a learner's update are independent draws from the same stored transitions (nothing
        is added between its gradient steps), so drawing them together samples the same distribution as
        ``G`` calls of :meth:`sample` (not the same numbers: the generator is consumed in one call) and
        costs one numpy call per field instead of ``G``.
        """
        num_batches = _check_positive_int("num_batches", num_batches)
        batch_size = self.check_batch_size(batch_size)
        batch = self.gather(self.rng.integers(0, self.size, size=(num_batches, batch_size)))
        batch["weights"] = np.ones((num_batches, batch_size), np.float32)
        return batch

    # ----------------------------------------------------------------------------------------- resuming

    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "obs_shape": list(self.obs_shape),
            "obs_dtype": self.obs_dtype.name,
            "action_shape": list(self.action_shape),
            "action_dtype": self.action_dtype.name,
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
        }

    def state_dict(self) -> dict[str, Any]:
        """Flat dict: numpy arrays (the stored transitions, only the filled part; the pending n-step
        windows) and JSON-able values (configuration, write position, size, the Generator state).
        Split it with ``isinstance(v, np.ndarray)``."""
        state: dict[str, Any] = {name: getattr(self, name)[: self.size].copy() for name in _STORED}
        state |= {
            "pending_obs": self._p_obs.copy(),
            "pending_actions": self._p_act.copy(),
            "pending_rewards": self._p_rew.copy(),
            "pending_start": self._p_start.copy(),
            "pending_len": self._p_len.copy(),
        }
        return (
            state | self._config() | {"pos": self.pos, "size": self.size, "rng": self.rng.bit_generator.state}
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (arrays may be numpy arrays or CPU torch tensors). The buffer must
        have been built with the same configuration; a mismatch is a ValueError naming the field."""
        for key, mine in self._config().items():
            if state.get(key) != mine:
                raise ValueError(
                    f"replay buffer state has {key}={state.get(key)!r}, this buffer has {key}={mine!r}"
                )
        size, pos = int(state["size"]), int(state["pos"])
        if not (0 <= size <= self.capacity and 0 <= pos < self.capacity):
            raise ValueError(f"replay buffer state has size={size}, pos={pos}; capacity is {self.capacity}")
        for name in _STORED:
            rows = np.asarray(state[name])
            if rows.shape[0] != size:
                raise ValueError(f"replay buffer state: {name} has {rows.shape[0]} rows, size={size}")
            getattr(self, name)[:size] = rows
        self._p_obs[...] = np.asarray(state["pending_obs"])
        self._p_act[...] = np.asarray(state["pending_actions"])
        self._p_rew[...] = np.asarray(state["pending_rewards"])
        self._p_start[...] = np.asarray(state["pending_start"])
        self._p_len[...] = np.asarray(state["pending_len"])
        self.size, self.pos = size, pos
        self.rng = _rng_from_state(state["rng"])


class SumTree:
    """Sum and min segment trees over ``capacity`` leaves, as flat float64 numpy arrays.

    Node 1 is the root, node ``i`` has children ``2i`` and ``2i+1``, leaf ``j`` is node ``leaf0 + j`` with
    ``leaf0`` the power of two >= capacity. Every internal node is recomputed from its two children (never
    by adding deltas), so the root equals the sum of the leaves with no drift, however many updates.
    Unused leaves hold 0 in the sum tree and +inf in the min tree.
    """

    def __init__(self, capacity: int):
        self.capacity = _check_positive_int("capacity", capacity)
        self.depth = (self.capacity - 1).bit_length()
        self.leaf0 = 1 << self.depth
        self.sums = np.zeros(2 * self.leaf0, np.float64)
        self.mins = np.full(2 * self.leaf0, np.inf, np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        return float(self.mins[1])

    def leaves(self) -> np.ndarray:
        return self.sums[self.leaf0 : self.leaf0 + self.capacity]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` (unique ints) to ``values``; one vectorized pass per tree level."""
        node = np.asarray(indices, np.int64) + self.leaf0
        self.sums[node] = values
        self.mins[node] = values
        node = np.unique(node)
        for _ in range(self.depth if node.size else 0):
            node >>= 1  # sorted stays sorted: dropping repeats of the previous entry dedupes it
            node = node[np.concatenate(([True], node[1:] != node[:-1]))]
            self.sums[node] = self.sums[2 * node] + self.sums[2 * node + 1]
            self.mins[node] = np.minimum(self.mins[2 * node], self.mins[2 * node + 1])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaf index holding prefix mass ``mass`` (float ``[B]`` in [0, total)) for every entry at once:
        the descent loops over the tree's depth, not over the batch."""
        u = np.array(mass, np.float64)
        node = np.ones(u.shape, np.int64)
        for _ in range(self.depth):
            left = 2 * node
            left_sum = self.sums[left]
            # Never step into an empty subtree, even when rounding pushes u past the last mass.
            right = (u >= left_sum) & (self.sums[left + 1] > 0)
            u = np.where(right, u - left_sum, u)
            node = np.where(right, left + 1, left)
        return node - self.leaf0


class PrioritizedReplayBuffer:
    r"""Proportional prioritized experience replay (Schaul, Quan, Antonoglou & Silver 2016).

    Transition i is drawn with :math:`P(i) = p_i / \sum_j p_j`, where :math:`p_i = (|\delta_i| +
    \epsilon)^\alpha` from its last TD error (new transitions get the largest priority seen so far, 1 at
    the start, so each is replayed at least once soon). Sampling is stratified: the total mass is cut into
    ``B`` equal segments and one point is drawn uniformly in each. The bias is corrected by importance
    weights normalized by the largest possible weight (the min-priority transition in the buffer):

    .. math::
        w_i = \frac{(N P(i))^{-\beta}}{\max_j (N P(j))^{-\beta}} = \Big(\frac{p_i}{\min_j p_j}\Big)^{-\beta}
        \in (0, 1]

    with ``N = len(buffer)``. β is annealed linearly over **calls to** :meth:`sample` (gradient updates,
    not environment steps): the k-th call (k = 0, 1, …) uses
    :math:`\beta_k = \beta_\text{start} + (\beta_\text{end} - \beta_\text{start}) \min(1, k /
    \text{beta\_steps})`.

    Storage and n-step logic are a :class:`ReplayBuffer` (``self.buffer``); the priorities a
    :class:`SumTree` (``self.tree``). Arguments up to ``seed`` are the ReplayBuffer's.

    Args:
        alpha: priority exponent α >= 0 (0 = uniform).
        beta_start, beta_end: β in [0, 1] at the first call and after ``beta_steps`` calls.
        beta_steps: number of ``sample`` calls over which β is annealed, >= 1.
        eps: ε > 0 added to |δ| so no transition gets probability 0.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: DTypeLike,
        action_shape: tuple[int, ...],
        action_dtype: DTypeLike,
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 0.99,
        seed: int = 0,
        *,
        alpha: float = 0.6,
        beta_start: float = 0.4,
        beta_end: float = 1.0,
        beta_steps: int,
        eps: float = 1e-6,
    ):
        self.buffer = ReplayBuffer(
            capacity, obs_shape, obs_dtype, action_shape, action_dtype, num_envs, n_step, gamma, seed
        )
        if not isinstance(alpha, int | float) or alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        if not isinstance(eps, int | float) or eps <= 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.alpha, self.eps = float(alpha), float(eps)
        self.beta_start = _check_unit("beta_start", beta_start)
        self.beta_end = _check_unit("beta_end", beta_end)
        self.beta_steps = _check_positive_int("beta_steps", beta_steps)
        self.tree = SumTree(self.buffer.capacity)
        self.max_priority = 1.0  # largest p_i = (|δ|+ε)^α so far, given to new transitions
        self.sample_calls = 0

    def __len__(self) -> int:
        return len(self.buffer)

    @property
    def beta(self) -> float:
        """β the next :meth:`sample` call will use."""
        frac = min(1.0, self.sample_calls / self.beta_steps)
        return self.beta_start + frac * (self.beta_end - self.beta_start)

    def add(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """:meth:`ReplayBuffer.add`; the new transitions get priority ``max_priority``."""
        written = self.buffer.add(*args, **kwargs)
        if written.size:
            self.tree.update(written, np.full(written.size, self.max_priority))
        return written

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Stratified proportional sample; the dict of :meth:`ReplayBuffer.sample` with importance
        ``weights`` (float32 ``[B]``, max possible 1). Advances the β schedule by one call."""
        B = self.buffer.check_batch_size(batch_size)
        beta, total = self.beta, self.tree.total
        mass = (np.arange(B) + self.buffer.rng.random(B)) * (total / B)
        idx = self.tree.find(np.minimum(mass, np.nextafter(total, 0.0)))
        p = self.tree.sums[self.tree.leaf0 + idx]
        # (N P(i))^-β / (N P_min)^-β; N and the total cancel, leaving the priority ratio.
        weights = (p / self.tree.min) ** (-beta)
        batch = self.buffer.gather(idx)
        batch["weights"] = weights.astype(np.float32)
        self.sample_calls += 1
        return batch

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        r"""Set :math:`p_i = (|\delta_i| + \epsilon)^\alpha` for ``indices`` (the ``indices`` of a sampled
        batch) from their TD errors (numpy or a detached CPU tensor, ``[B]``). A repeated index takes its
        last error. An index overwritten by ``add`` since it was sampled updates the new transition."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        td = np.asarray(td_errors, np.float64).reshape(-1)
        if idx.shape != td.shape:
            raise ValueError(f"indices {idx.shape} and td_errors {td.shape} must have the same length")
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise ValueError(f"indices must be in [0, {len(self)}), got values in [{idx.min()}, {idx.max()}]")
        if not np.isfinite(td).all():
            raise ValueError("td_errors must be finite, got NaN or inf")
        if not idx.size:
            return
        _, last = np.unique(idx[::-1], return_index=True)
        keep = idx.size - 1 - last
        priorities = (np.abs(td[keep]) + self.eps) ** self.alpha
        self.tree.update(idx[keep], priorities)
        self.max_priority = max(self.max_priority, float(priorities.max()))

    def state_dict(self) -> dict[str, Any]:
        """The buffer's state plus the priorities (leaves; the trees are rebuilt exactly on load), the
        max priority and the β-schedule counter."""
        state = self.buffer.state_dict()
        state |= {
            "priorities": self.tree.leaves()[: len(self)].copy(),
            "alpha": self.alpha,
            "beta_start": self.beta_start,
            "beta_end": self.beta_end,
            "beta_steps": self.beta_steps,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "sample_calls": self.sample_calls,
        }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (see :meth:`ReplayBuffer.load_state_dict`)."""
        for key in ("alpha", "eps"):
            theirs, mine = state.get(key), getattr(self, key)
            if theirs != mine:
                raise ValueError(f"replay buffer state has {key}={theirs!r}, this buffer has {key}={mine!r}")
        self.buffer.load_state_dict(state)
        priorities = np.asarray(state["priorities"], np.float64)
        self.tree = SumTree(self.buffer.capacity)
        if priorities.size:
            self.tree.update(np.arange(priorities.size), priorities)
        self.max_priority = float(state["max_priority"])
        self.sample_calls = int(state["sample_calls"])


def replay_problems(a: Any) -> list[str]:
    """Config checks every replay-based algorithm shares (``a``: its ``algorithm`` section): the batch fits
    in the buffer. ``learning_starts`` may be below ``batch_size`` (the zoo's ``learning_starts: 0``): the
    policy acts from then on, and the updates due before a batch's worth is stored draw their batches with
    replacement from the transitions stored (as Stable-Baselines3 does, with which the zoo tuned its values).
    """
    out = []
    if a.batch_size > a.buffer_size:
        out.append(
            f"algorithm.batch_size ({a.batch_size}) must be <= algorithm.buffer_size ({a.buffer_size})"
        )
    return out
