"""Hybrid CPU/memory scaling after Justin: memory levels, state signals, per-level capacity knowledge,
the decision history of each operator, and the memory-aware policy."""
