"""Fit StreamBed's released measurements the way its Table IV was made: the surrogate on the best prefix
of the runs (lowest leave-one-out MAE over 5..20 runs), then the fewest slots (at least 3) whose predicted
MST reaches the over-provisioned rate at each memory level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planning.surrogate import Observation, Surrogate, best_prefix, fit

OVERPROVISION = 1.1
"""StreamBed asks the model for 110% of the requested rate."""


@dataclass(frozen=True)
class ReleasedFit:
    runs: int
    """How many of the first measurements the model was fitted on."""
    surrogate: Surrogate
    slots: dict[float, int | None]
    """Per memory level (MB), the planned slots (None: not reached within the search bound)."""


def fit_released(
    observations: Sequence[Observation],
    model: str,
    target_rate_rps: float,
    memories_mb: Sequence[float],
    min_slots: int = 3,
    max_slots: int = 100_000,
) -> ReleasedFit:
    runs = best_prefix(model, observations)
    surrogate = fit(model, observations[:runs])
    rate = OVERPROVISION * target_rate_rps
    slots = {m: surrogate.slots_for(rate, m, min_slots, max_slots) for m in memories_mb}
    return ReleasedFit(runs, surrogate, slots)
