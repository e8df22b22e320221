"""Ground-truth recovery of every restart in a twin run: from the stop until the backlog is drained.

Used only to score runs (the loop observes recovery from metrics, like it would on a real cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.twin import Twin


@dataclass(frozen=True)
class TrueRecovery:
    stop_s: int
    recovery_s: float | None  # None: not recovered before the next stop or the end of the run
    next_stop_s: int | None


def true_recoveries(twin: Twin, caught_up_s: float = 2.0) -> list[TrueRecovery]:
    """For each restart: seconds until the consumer lag is back within `caught_up_s` seconds of input."""
    history = twin.history
    restarts = history.view("restarts_at")
    lag = history.view("lag_at")
    arrivals = history.view("arrivals")
    running = history.view("running")
    stops = np.flatnonzero(np.diff(restarts, prepend=0) > 0)
    results = []
    for index, stop in enumerate(stops):
        end = int(stops[index + 1]) if index + 1 < len(stops) else len(lag)
        span = slice(int(stop) + 1, end)
        caught_up = running[span] & (lag[span] <= caught_up_s * np.maximum(arrivals[span], 1))
        hits = np.flatnonzero(caught_up)
        recovery = float(hits[0] + 1) if len(hits) else None
        results.append(TrueRecovery(int(stop), recovery, end if end < len(lag) else None))
    return results


def recovery_summary(twin: Twin, target_s: float) -> dict[str, float | int | None]:
    """Counts and shares for the JSON summary; unrecovered restarts count as outside the target."""
    recoveries = true_recoveries(twin)
    times = [r.recovery_s for r in recoveries if r.recovery_s is not None]
    within = sum(1 for t in times if t <= target_s)
    return {
        "recoveries": len(recoveries),
        "recovery_within_target_share": round(within / len(recoveries), 4) if recoveries else None,
        "recovery_median_s": float(np.median(times)) if times else None,
        "recovery_max_s": float(max(times)) if times else None,
    }
