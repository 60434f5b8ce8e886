"""The benchmarks: scripts that measure advantage (often beside a peer library: Stable-Baselines3, TRL) and
write what they measure to ``benchmarks/results/``, which the docs quote; run one from the repository root
as ``python -m benchmarks.NAME`` (its docstring gives its options). The harnesses they share:
:mod:`benchmarks.time_to_target` (to a target return, beside Stable-Baselines3), :mod:`benchmarks.step_time`
(per-step time, beside TRL), :mod:`benchmarks.side_by_side` (the command line of both) and
:mod:`benchmarks.pipeline` (the documented commands in fresh processes, and the results files).
"""
