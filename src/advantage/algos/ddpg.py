r"""Deep Deterministic Policy Gradient, DDPG (Lillicrap et al. 2016, "Continuous control with deep
reinforcement learning"; the deterministic policy gradient of Silver et al. 2014) (SPEC P7).

The study notes: "为了继续用DQN的off-policy，且能应对连续action的任务" — keep DQN's off-policy learning from a
replay buffer, but for continuous actions, where :math:`\max_{a'} Q(s', a')` can no longer be read off a
vector of outputs. Relative to DQN the changes are:

1. The critic takes the action as an *input*, :math:`Q_\theta(s, a)`, instead of outputting one value
   per action.
2. An actor :math:`\mu_\phi(s)` replaces the max: it is trained to output the action the critic rates
   highest, by gradient ascent through the critic, :math:`\nabla_\phi \frac1B\sum Q_\theta(s, \mu_\phi(s))`
   (the deterministic policy gradient), and the target uses it in place of the argmax:
   :math:`y = r + \gamma(1-d)\,Q_{\bar\theta}(s', \mu_{\bar\phi}(s'))`
   (:func:`advantage.math.q_targets.clipped_double_q_target` with one critic).
3. Target networks for both, updated softly every step by Polyak averaging,
   :math:`\bar\theta \leftarrow \tau\theta + (1-\tau)\bar\theta`
   (:func:`advantage.math.q_targets.polyak_update`),
   instead of DQN's periodic hard copy.
4. Exploration by adding noise to the deterministic action, in place of ε-greedy.

Implementation details: Gaussian exploration noise of std 0.1 in normalized action units (Fujimoto et al.
2018's re-tuned DDPG and SB3; the paper's Ornstein-Uhlenbeck noise brings no benefit on these tasks);
uniform random actions before ``learning_starts``; critic loss :math:`\text{MSE}(Q_\theta(s, a), y)`; no
batch normalization, no L2 weight decay on the critic (Fujimoto et al.'s "our DDPG", SB3).

DDPG trains with TD3's code (:func:`advantage.algos.td3.train`, :func:`advantage.algos.td3.update`):
its ``algorithm`` section (:class:`advantage.configs.ddpg.DDPGAlgorithm`) switches TD3's three changes
off — one critic, actor and targets moved on every update, no target policy noise.
"""

from advantage.configs.ddpg import DDPGAlgorithm, DDPGConfig, DDPGModel  # noqa: F401  (on this API page)
