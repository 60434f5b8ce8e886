"""Language-model post-training: SFT (and, building on it, reward models, PPO-RLHF, DPO and GRPO)."""

from advantage.algos.llm import dpo, grpo, ppo_rlhf, reward_model, sft  # noqa: F401
