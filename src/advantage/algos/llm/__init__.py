"""Language-model post-training: SFT (and, building on it, reward models, PPO-RLHF, DPO and GRPO)."""

from advantage.algos.llm import grpo, sft  # noqa: F401
