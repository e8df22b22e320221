"""Analyze: turn an Observation into an Assessment, learning capacity on the way."""

from __future__ import annotations

import math

import numpy as np

from capacity.model import valid_windows
from mape.knowledge import Knowledge
from mape.types import Assessment, Observation


class Analyzer:
    """Capacity per scale-out and the workload summary the plan needs.

    The job counts as saturated when its backlog exceeds `saturated_backlog_s` seconds of its throughput:
    it then processes as fast as it can, so its throughput is its capacity.
    """

    def __init__(self, max_scaleout: int, saturated_backlog_s: float) -> None:
        self.max_scaleout = max_scaleout
        self.saturated_backlog_s = saturated_backlog_s

    def assess(self, observation: Observation, knowledge: Knowledge) -> Assessment:
        problems = list(observation.problems)
        rates = observation.input_rate_rps[np.isfinite(observation.input_rate_rps)]
        if len(rates) == 0:
            problems.append("no input-rate samples in the window")
        backlog = observation.backlog_records
        if backlog is None or not math.isfinite(backlog) or backlog < 0:
            problems.append(f"backlog unknown ({backlog})")
            backlog = math.nan
        current = observation.parallelism
        if current is None or current < 1:
            problems.append(f"parallelism unknown ({current})")
            current = knowledge.last_target_scaleout or 1

        capacity = knowledge.capacity
        windows = valid_windows(
            observation.workers, observation.uptime_s, observation.time_s, capacity.settings.warmup_s
        )
        throughput_rps = sum(w.throughput_mean_rps for w in windows)
        saturated = bool(windows) and backlog >= self.saturated_backlog_s * throughput_rps
        capacity.learn(windows, observation.time_s, saturated)
        estimate = capacity.estimate(windows, current, self.max_scaleout, observation.time_s, saturated)
        if current not in estimate.per_scaleout_rps:
            problems.append("no capacity known for the current scale-out yet")

        return Assessment(
            time_s=observation.time_s,
            current_scaleout=current,
            workload_avg_rps=float(rates.mean()) if len(rates) else math.nan,
            workload_max_rps=float(rates.max()) if len(rates) else math.nan,
            backlog_records=float(backlog),
            capacities_rps=estimate.per_scaleout_rps,
            capacity_sources=estimate.sources,
            capacity_method=estimate.method,
            warming_up=not windows,
            problems=tuple(problems),
        )
