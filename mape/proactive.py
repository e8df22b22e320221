"""The foresail policy: Daedalus's Algorithm 1 — scale ahead of the load, rarely, within a recovery target.

Capacities come from the capacity model, the per-second forecast from the forecaster and the predicted
recovery time per candidate from the recovery module (all in the Assessment). Every proposal names the
rule that decided it:

- ``only-if-necessary``: a rescale happened in the last `necessary_window_s` and the current capacity still
  carries the average load and the forecast until the next loop — keep it.
- ``current-valid``: the smallest valid scale-out is the current one.
- ``long-lived``: the smallest valid scale-out that also carries the whole forecast horizon.
- ``idle``: no load arrives, none is forecast until the next loop and nothing waits: the smallest
  scale-out whose restart meets the recovery target (with nothing to catch up, its downtime), kept while
  idle. An idle job teaches no capacity (0 > 0 fails every candidate), so without this rule it would fall
  through to ``max-scaleout``, and flap between two small scale-outs.
- ``max-scaleout``: nothing smaller is valid.

A candidate is valid when its capacity exceeds the average load, its predicted recovery meets the target,
and it carries the forecast until it would have recovered. Scaling in is skipped while the job still
catches up (backlog larger than what the candidate processes in one loop: records against records).
"""

from __future__ import annotations

import math

import numpy as np

from mape.knowledge import Knowledge
from messages.types import Assessment
from recovery.downtime import direction_of

IDLE_RPS = 1.0
"""Below this average input (and forecast until the next loop) the job counts as idle."""


class ProactivePolicy:
    name = "foresail"

    def __init__(
        self,
        min_scaleout: int,
        max_scaleout: int,
        recovery_target_s: float,
        loop_interval_s: float,
        necessary_window_s: float = 600.0,
    ) -> None:
        self.min_scaleout = min_scaleout
        self.max_scaleout = max_scaleout
        self.recovery_target_s = recovery_target_s
        self.loop_interval_s = loop_interval_s
        self.necessary_window_s = necessary_window_s

    def propose(self, assessment: Assessment, knowledge: Knowledge) -> tuple[int, str, tuple[str, ...]]:
        a = assessment
        forecast = (
            a.forecast_rps
            if a.forecast_rps is not None and len(a.forecast_rps)
            else np.array([a.workload_avg_rps])
        )
        current = a.current_scaleout
        average = a.workload_avg_rps
        next_loop_max = _peak(forecast, self.loop_interval_s)
        horizon_max = float(forecast.max())
        load = f"average {average:.0f} rps, forecast max {next_loop_max:.0f} next loop / {horizon_max:.0f} horizon"

        if _idle(average, next_loop_max, a.backlog_records, self.loop_interval_s):
            return self._idle(a, knowledge, load)

        since = math.inf if knowledge.last_rescale_s is None else a.time_s - knowledge.last_rescale_s
        capacity_now = a.capacity(current)
        if since < self.necessary_window_s and capacity_now > average and capacity_now > next_loop_max:
            return (
                current,
                "only-if-necessary",
                (
                    f"rescaled {since:.0f} s ago; capacity({current}) = {capacity_now:.0f} rps carries it",
                    load,
                ),
            )

        skipped: list[str] = []
        for scaleout in range(self.min_scaleout, self.max_scaleout + 1):
            capacity = a.capacity(scaleout)
            if not capacity > average:
                continue
            recovery_s = a.recovery_s.get(scaleout, math.inf)
            if recovery_s > self.recovery_target_s:
                skipped.append(
                    f"{scaleout}: recovery {recovery_s:.0f} s > target {self.recovery_target_s:.0f} s"
                )
                continue
            until_recovered = _peak(forecast, recovery_s)
            if capacity < until_recovered:
                skipped.append(
                    f"{scaleout}: capacity {capacity:.0f} < forecast {until_recovered:.0f} until recovered"
                )
                continue
            chosen = f"capacity({scaleout}) = {capacity:.0f} rps, recovery {recovery_s:.0f} s"
            if scaleout == current:
                return scaleout, "current-valid", (chosen, load, *skipped[-3:])
            if scaleout < current and a.backlog_records > capacity * self.loop_interval_s:
                skipped.append(f"{scaleout}: still catching up (backlog {a.backlog_records:.0f} records)")
                continue
            if capacity > horizon_max:
                return scaleout, "long-lived", (chosen, load, *skipped[-3:])
        short = sum(1 for n in range(self.min_scaleout, self.max_scaleout + 1) if not a.capacity(n) > average)
        return (
            self.max_scaleout,
            "max-scaleout",
            (
                "no smaller scale-out is valid",
                load,
                f"{short} scale-outs with capacity ≤ average",
                *skipped[-3:],
            ),
        )

    def _idle(self, a: Assessment, knowledge: Knowledge, load: str) -> tuple[int, str, tuple[str, ...]]:
        """The smallest scale-out whose restart recovers within the target; with no load and no backlog a
        restart only costs its downtime, which stands in where no recovery could be predicted (capacity 0)."""
        current = a.current_scaleout
        for scaleout in range(self.min_scaleout, self.max_scaleout + 1):
            recovery_s = a.recovery_s.get(scaleout, math.inf)
            if not math.isfinite(recovery_s):
                recovery_s = knowledge.downtime.estimate(direction_of(current, scaleout))
            if recovery_s <= self.recovery_target_s:
                return scaleout, "idle", (f"idle: {load}", f"{scaleout} recovers in {recovery_s:.0f} s")
        return (
            current,
            "idle",
            (f"idle: {load}", "no scale-out recovers within the target: keep the current one"),
        )


def _idle(average_rps: float, next_loop_max_rps: float, backlog_records: float, interval_s: float) -> bool:
    """No load now or until the next loop, and no more waiting than an idle loop's worth of records."""
    return average_rps < IDLE_RPS and next_loop_max_rps < IDLE_RPS and backlog_records < IDLE_RPS * interval_s


def _peak(forecast: np.ndarray, seconds: float) -> float:
    """Highest forecast rate over the next `seconds` (at least the next second)."""
    if not math.isfinite(seconds):
        return float(forecast.max())
    return float(forecast[: max(1, math.ceil(seconds))].max())
