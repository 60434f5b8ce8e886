"""Algorithms: one module of training code per algorithm. Importing this package imports none of them:
their configs, presets and registry records live in :mod:`advantage.configs`, whose records name the
training functions here (:class:`~advantage.registry.Entry`), imported when a run starts."""
