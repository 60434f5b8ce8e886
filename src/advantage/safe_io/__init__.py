"""Bounded, link-safe reading of files the program does not trust: a config, a hyperparameter table, a
dataset, a model folder, a run folder someone else could write into.

* :mod:`~advantage.safe_io.read`: the readers of bytes, text, JSON, YAML and model folders, each read
  capped in size, depth and count before the work it protects.
* :mod:`~advantage.safe_io.interpolations`: OmegaConf's ``${…}`` costed before it is resolved.
* :mod:`~advantage.safe_io.parquet`: Parquet datasets read within bounds, the footer checked first.
* :mod:`~advantage.safe_io.run_files`: the files inside a run folder, opened relative to the folder's
  descriptor and never through a symbolic link.
"""
