"""Plausibility checks of an Observation: data that parses but cannot be true must not drive a decision.

Each check is a pure function from the Observation (plus what the previous one left behind) to named
problems. A problem reads `implausible[<reason>]: <detail>`, so the audit event names the reason and the
daemon's metrics count it (`reasons_in`). Any problem makes the plan hold (`hold-bad-data`): the loop never
scales in, or out, on such data.

Reasons:
- ``negative-rate``: an input rate or a worker throughput below zero (e.g. a query adding the derivative of
  a shrinking backlog).
- ``non-finite-rate``: an infinite input rate, throughput or CPU (NaN stays a gap, handled elsewhere).
- ``cpu-out-of-range``: a worker's CPU load outside [0, cores] (CPU in percent, a wrong query).
- ``throughput-above-input`` (not part of `check`, available to callers): the workers processed more
  records than arrived plus the backlog there was to drain. On the real Flink stack (end-to-end tests) the
  per-worker throughput meters legitimately ran 1.6-11x above the input rate while an initial backlog was
  drained, so holding on it stopped the loop from ever scaling: it stays out until it is calibrated.
- ``parallelism-mismatch``: the job's parallelism differs from the number of workers reporting, once the
  job has run for a whole window.
- ``stale-samples``: the newest input-rate sample is older than half the window.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from messages.types import Observation

REASONS = (
    "negative-rate",
    "non-finite-rate",
    "cpu-out-of-range",
    "throughput-above-input",
    "parallelism-mismatch",
    "stale-samples",
)
_PATTERN = re.compile(r"^implausible\[([a-z-]+)\]")

THROUGHPUT_SLACK = 1.25
"""Processed records may exceed arrivals + drainable backlog by this factor before they count as
implausible: meters and rates are averaged over different windows, and a restart replays records."""
MIN_RPS = 20.0
"""Throughputs this small are noise to the throughput check."""


@dataclass(frozen=True)
class Implausible:
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"implausible[{self.reason}]: {self.detail}"


def check(
    observation: Observation, previous_backlog_records: float | None = None, cores: float = 1.0
) -> list[Implausible]:
    """Every implausibility of the observation; `previous_backlog_records` is the backlog one window ago
    (None: unknown, the throughput check then allows the current backlog only)."""
    return [
        *rates(observation),
        *cpu(observation, cores),
        *parallelism_mismatch(observation),
        *stale(observation),
    ]


def reasons_in(problems: tuple[str, ...] | list[str]) -> list[str]:
    """The reason names of the plausibility problems among an assessment's problems (for metrics)."""
    return [match.group(1) for p in problems if (match := _PATTERN.match(p))]


def rates(observation: Observation) -> list[Implausible]:
    found = []
    series = [("input rate", observation.input_rate_rps)] + [
        (f"throughput of {w.worker_id}", w.throughput_rps) for w in observation.workers
    ]
    for name, values in series:
        if np.isinf(values).any():
            found.append(Implausible("non-finite-rate", f"{name} is infinite"))
        finite = values[np.isfinite(values)]
        if len(finite) and finite.min() < 0:
            found.append(Implausible("negative-rate", f"{name} down to {finite.min():.1f} records/s"))
    return found


def cpu(observation: Observation, cores: float = 1.0) -> list[Implausible]:
    found = []
    for worker in observation.workers:
        if np.isinf(worker.cpu).any():
            found.append(Implausible("non-finite-rate", f"CPU of {worker.worker_id} is infinite"))
        finite = worker.cpu[np.isfinite(worker.cpu)]
        if len(finite) and (finite.min() < 0 or finite.max() > cores * 1.05):
            found.append(
                Implausible(
                    "cpu-out-of-range",
                    f"CPU of {worker.worker_id} {finite.min():.2f}..{finite.max():.2f} outside [0, {cores:g}] "
                    "(a load in cores, not percent, is expected)",
                )
            )
    return found


def throughput_above_input(
    observation: Observation, previous_backlog_records: float | None
) -> list[Implausible]:
    """Records/s processed ≤ records/s arrived + the backlog there was to drain over the window (× slack)."""
    arrived_rps = _mean(observation.input_rate_rps)
    processed_rps = sum(_mean(w.throughput_rps, 0.0) for w in observation.workers)
    if not math.isfinite(arrived_rps) or processed_rps < MIN_RPS:
        return []
    backlog = [b for b in (previous_backlog_records, observation.backlog_records) if _finite(b)]
    drainable = max(backlog, default=0.0)
    allowed_rps = THROUGHPUT_SLACK * (arrived_rps + drainable / observation.window_s) + MIN_RPS
    if processed_rps <= allowed_rps:
        return []
    return [
        Implausible(
            "throughput-above-input",
            f"workers processed {processed_rps:.0f} records/s, but {arrived_rps:.0f} arrived and "
            f"{drainable:.0f} were waiting",
        )
    ]


def parallelism_mismatch(observation: Observation) -> list[Implausible]:
    """Workers with a sample at the window's newest instant vs the parallelism, on a job up for a window."""
    parallelism, uptime_s = observation.parallelism, observation.uptime_s
    if parallelism is None or uptime_s is None or not _finite(uptime_s) or uptime_s < observation.window_s:
        return []
    newest = [
        w.timestamps_s[np.isfinite(w.throughput_rps)].max(initial=-math.inf) for w in observation.workers
    ]
    if not newest or max(newest) == -math.inf:
        return []
    reporting = sum(1 for t in newest if t >= max(newest))
    if reporting == parallelism:
        return []
    return [
        Implausible(
            "parallelism-mismatch", f"parallelism {parallelism}, but {reporting} workers report throughput"
        )
    ]


def stale(observation: Observation) -> list[Implausible]:
    known = observation.input_timestamps_s[np.isfinite(observation.input_rate_rps)]
    if len(known) == 0:
        return []  # no samples at all: named elsewhere ("no input-rate samples")
    age_s = observation.time_s - float(known.max())
    if age_s <= observation.window_s / 2:
        return []
    return [Implausible("stale-samples", f"newest input-rate sample is {age_s:.0f} s old")]


def _mean(values: np.ndarray, default: float = math.nan) -> float:
    known = values[np.isfinite(values)]
    return float(known.mean()) if len(known) else default


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
