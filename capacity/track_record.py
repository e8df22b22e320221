"""How far the capacity model's estimate for a scale-out the job was not running has been above what that
scale-out then showed once it ran: the model's own track record, learned from every rescale.

The estimate at the running scale-out is measured; at any other one it is a prediction (other workers,
another split of the key groups, lines extrapolated beyond what was seen). A plan that takes a prediction at
face value scales in to 95% of a capacity that turns out 5-10% lower, and the catch-up after that restart is
a long stretch over the SLO (the twin's `single` job on the sine trace: 290 and 412 s in one episode each).
So each rescale compares the prediction made for its target just before it with the estimate at that target
once the job has run there for `settle_s`; the plan divides the predictions by the `quantile` of those
ratios (never below 1: a prediction that was too low costs workers, not the SLO).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

RATIO_BOUNDS = (0.5, 2.0)
"""A ratio outside these is a broken estimate (a restart's empty window), not the model's error."""


@dataclass(frozen=True)
class _Pending:
    since_s: float
    scaleout: int
    predicted_rps: float


class CapacityTrackRecord:
    """Ratios of predicted to realized capacity at the targets of the last `window` rescales."""

    def __init__(self, window: int = 20, quantile: float = 0.9, settle_s: float = 120.0) -> None:
        if window < 1 or not 0 < quantile <= 1 or settle_s < 0:
            raise ValueError("window must be >= 1, quantile in (0, 1], settle_s >= 0")
        self.window, self.quantile, self.settle_s = window, quantile, settle_s
        self.ratios: deque[float] = deque(maxlen=window)
        self._pending: _Pending | None = None
        self._last: tuple[int, dict[int, float]] | None = None

    def observe(self, time_s: float, current: int, capacities_rps: dict[int, float], trusted: bool) -> None:
        """One loop's estimate. A changed scale-out starts a comparison with the previous loop's prediction
        for it; `trusted` (no problems in the data) loops at the new scale-out end it after `settle_s`."""
        if self._last is not None and current != self._last[0]:
            predicted = self._last[1].get(current, math.nan)
            self._pending = _Pending(time_s, current, predicted) if _usable(predicted) else None
        pending = self._pending
        realized = capacities_rps.get(current, math.nan)
        if (
            pending is not None
            and trusted
            and time_s - pending.since_s >= self.settle_s
            and _usable(realized)
        ):
            ratio = pending.predicted_rps / realized
            if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1]:
                self.ratios.append(ratio)
            self._pending = None
        if trusted:
            self._last = (current, dict(capacities_rps))

    def overestimate(self) -> float:
        """Factor (>= 1) by which a prediction at a scale-out not running has been too high; 1 before any
        rescale was seen through."""
        if not self.ratios:
            return 1.0
        return max(1.0, float(np.quantile(list(self.ratios), self.quantile)))

    def to_dict(self) -> dict[str, Any]:
        pending = self._pending
        return {
            "window": self.window,
            "quantile": self.quantile,
            "settle_s": self.settle_s,
            "ratios": list(self.ratios),
            "pending": None
            if pending is None
            else [pending.since_s, pending.scaleout, pending.predicted_rps],
            "last": None if self._last is None else [self._last[0], list(self._last[1].items())],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapacityTrackRecord:
        record = cls(
            int(data.get("window", 20)), float(data.get("quantile", 0.9)), float(data.get("settle_s", 120.0))
        )
        ratios = [float(r) for r in data.get("ratios", [])]
        record.ratios.extend(r for r in ratios if RATIO_BOUNDS[0] <= r <= RATIO_BOUNDS[1])  # as learned
        pending = data.get("pending")
        if pending is not None:
            record._pending = _Pending(float(pending[0]), int(pending[1]), float(pending[2]))
        last = data.get("last")
        if last is not None:
            record._last = (int(last[0]), {int(n): float(c) for n, c in last[1]})
        return record


def _usable(capacity_rps: float) -> bool:
    return math.isfinite(capacity_rps) and capacity_rps > 0
