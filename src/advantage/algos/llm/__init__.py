"""Language-model post-training: SFT (and, building on it, reward models, PPO-RLHF, DPO and GRPO). Their
configs and registry records are in :mod:`advantage.configs`; importing this package imports none of
the training modules."""
