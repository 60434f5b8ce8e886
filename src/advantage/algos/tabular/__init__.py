"""Tabular and exact methods: TD control, Monte Carlo, and planning on known models (SPEC T1–T3)."""
