"""Learned downtime of a rescale, per direction, from the downtimes actually observed.

The estimate is the median of the last `window` observations together with the initial value counted as
`PRIOR_WEIGHT` pseudo-observations. The median makes one odd restart (a slow image pull, a stuck
TaskManager) unable to move it, while a real shift wins after a few consistent observations — unlike the
authors' ±1 s steps, which take a minute of rescales to follow a 60 s shift and follow every outlier.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Literal

import numpy as np

Direction = Literal["out", "in"]
DIRECTIONS: tuple[Direction, ...] = ("out", "in")

PRIOR_WEIGHT = 2
"""Pseudo-observations the initial value counts as: one outlier then meets two votes for the prior."""
MAX_DOWNTIME_S = 86_400.0
"""Longer is no rescale's downtime (a big state's restore may take an hour or more; a day, no): three
stored ones of 10^9 s made every candidate's recovery exceed the target, and the plan held the largest
scale-out."""


def direction_of(current_scaleout: int, target_scaleout: int) -> Direction:
    """'out' when adding workers; otherwise 'in' — a restart at the same scale-out (a failure) stops the
    same workers without starting new pods, like a scale-in."""
    return "out" if target_scaleout > current_scaleout else "in"


def replays(direction: Direction, scale_out_at_checkpoint: bool) -> bool:
    """Whether a restart rolls back to the last periodic checkpoint and processes its records again: all do
    but a scale-out on Flink >= 2.0 (FLIP-461), which restarts from a checkpoint that just completed."""
    return not (direction == "out" and scale_out_at_checkpoint)


class DowntimeModel:
    """Downtime estimates for scaling out and in, learned robustly from observations."""

    def __init__(self, initial_out_s: float = 30.0, initial_in_s: float = 15.0, window: int = 20) -> None:
        if window < 1:
            raise ValueError(f"window must be ≥ 1, got {window}")
        for name, value in (("initial_out_s", initial_out_s), ("initial_in_s", initial_in_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite downtime ≥ 0 s, got {value}")
        self.initial_s: dict[Direction, float] = {"out": float(initial_out_s), "in": float(initial_in_s)}
        self.window = window
        self._observed_s: dict[Direction, deque[float]] = {d: deque(maxlen=window) for d in DIRECTIONS}

    def estimate(self, direction: Direction) -> float:
        """Downtime (s) to plan with for a rescale in `direction`."""
        values = [self.initial_s[_checked(direction)]] * PRIOR_WEIGHT + list(self._observed_s[direction])
        return float(np.median(values))

    def observe(self, direction: Direction, downtime_s: float) -> None:
        """Record one observed downtime; NaN, negative or longer than `MAX_DOWNTIME_S` (nothing was
        measured, or no rescale) are ignored."""
        direction = _checked(direction)
        if 0 <= downtime_s <= MAX_DOWNTIME_S:
            self._observed_s[direction].append(float(downtime_s))

    def observations_s(self, direction: Direction) -> list[float]:
        """The observations the estimate currently uses, oldest first."""
        return list(self._observed_s[_checked(direction)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "initial_out_s": self.initial_s["out"],
            "initial_in_s": self.initial_s["in"],
            "window": self.window,
            "observed_s": {d: list(self._observed_s[d]) for d in DIRECTIONS},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], configured: DowntimeModel | None = None) -> DowntimeModel:
        """The stored observations; the initial downtimes and the window from `configured` where given
        (the configuration, which the stored ones overrode after a change)."""
        if configured is not None:
            model = cls(configured.initial_s["out"], configured.initial_s["in"], configured.window)
        else:
            model = cls(float(data["initial_out_s"]), float(data["initial_in_s"]), int(data["window"]))
        for direction in DIRECTIONS:
            for value in data.get("observed_s", {}).get(direction, []):
                model.observe(direction, float(value))
        return model


def _checked(direction: str) -> Direction:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return direction  # type: ignore[return-value]
