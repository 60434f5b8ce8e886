"""What a run reports while it runs: its metrics, the progress display, TensorBoard and the learning curve.

* :mod:`~advantage.monitoring.metrics`: ``metrics.jsonl``, one JSON object per log event, read back and
  checked row by row.
* :mod:`~advantage.monitoring.writer`: the :class:`~advantage.monitoring.writer.MetricsWriter` a run
  appends its rows with, mirrored to TensorBoard and drawn at the end.
* :mod:`~advantage.monitoring.sidecar`: the process of its own that writes the TensorBoard events and
  the end-of-run plot (``python -m advantage.monitoring.sidecar``).
* :mod:`~advantage.monitoring.plotting`: learning curves of one or several runs.
* :mod:`~advantage.monitoring.progress`: the live bar on a terminal, plain periodic lines otherwise.
"""
