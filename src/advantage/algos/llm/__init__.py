"""Language-model post-training: SFT, reward models, DPO, GRPO (and its family) and PPO-RLHF.

The algorithm modules, one per trainer (each with the ``train``, ``check``, ``evaluate`` and
``load_policy`` its registry record names; none imports another): :mod:`~advantage.algos.llm.sft`,
:mod:`~advantage.algos.llm.reward_model`, :mod:`~advantage.algos.llm.dpo`,
:mod:`~advantage.algos.llm.grpo` and :mod:`~advantage.algos.llm.ppo_rlhf`. What they share, by what it
holds:

* :mod:`~advantage.algos.llm.data`: the task, split sizes, the order of the training set;
* :mod:`~advantage.algos.llm.models`: building and loading the policy's model, model folders, the
  reference, scalar heads, a model's checkpoint files;
* :mod:`~advantage.algos.llm.policy`: prompt texts and :class:`~advantage.algos.llm.policy.LMPolicy`;
* :mod:`~advantage.algos.llm.checks`: the checks made before any compute;
* :mod:`~advantage.algos.llm.training`: learning-rate schedule, resume and checkpoint snapshot;
* :mod:`~advantage.algos.llm.batches`: batch layout (collate, trimmed rows, a step's normaliser);
* :mod:`~advantage.algos.llm.evaluation` and :mod:`~advantage.algos.llm.preference_eval`: evaluation;
* :mod:`~advantage.algos.llm.reward_models`: the reward model as other trainers load and use it;
  :mod:`~advantage.algos.llm.scoring`: rewards of sampled completions;
* :mod:`~advantage.algos.llm.data_parallel`: the LM side of ``trainer.strategy`` (DDP, FSDP);
* :mod:`~advantage.algos.llm.grpo_rollout`, :mod:`~advantage.algos.llm.grpo_rewards` and
  :mod:`~advantage.algos.llm.workers`: GRPO's sampling side, reward shaping and Ray workers;
* :mod:`~advantage.algos.llm.run_config`: what the shared code reads of a run's config (Protocols).

Their configs and registry records are in :mod:`advantage.configs`; importing this package imports none
of these modules.
"""
