"""How fast each testbed slot is, from the runs themselves (our extension of StreamBed, not the paper's).

Hosts differ in speed (the twin draws each pod's with a 5% spread; real clusters mix CPU generations), and
a run at n slots is paced by its slowest loaded slot. Left in the readings, that spread moves the
per-record work a vertex shows from run to run (runs at 1, 2, ... 8 slots add one host each) and the
state-cost fit reads it as work that splits, and the slowest of 8 testbed hosts meets the key-group skew
of 40 production hosts as if both fell on one slot. On the twin at 5% spread that put the `session`
plan 13% under the true MST at 40 slots; with equal hosts, 2%.

The testbed deploys each run afresh on the same hosts in the same order (the twin: pod i holds subtask i
of every vertex; local Flink: one host), so subtask i of a vertex that is fed evenly is busy in
proportion to 1/speed_i. Across runs, log busy = run-and-vertex level − log speed_i is one least-squares
problem; speeds are relative to their geometric mean (the production hosts are taken as alike on
average), and their spread is what the planner draws new hosts from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import f as f_distribution

from planning.estimator import Estimate
from planning.testbed import PhaseReading

SIGNIFICANCE = 0.01


@dataclass(frozen=True)
class SlotSpeeds:
    """Per testbed slot (subtask index) its speed relative to the geometric mean, and the standard
    deviation of log speed that new hosts are drawn with."""

    speeds: tuple[float, ...]
    log_sd: float

    def of(self, parallelism: int) -> np.ndarray:
        """The first `parallelism` slots' speeds (1.0 where a slot was never seen loaded)."""
        known = np.array(self.speeds[:parallelism], dtype=float)
        return np.concatenate((known, np.ones(max(parallelism - len(known), 0))))


def slot_speeds(estimates: Sequence[Estimate]) -> SlotSpeeds | None:
    """From the estimates' last passed tests; None when the runs do not tell the hosts apart (no run of two
    slots whose subtasks were all read, or differences within the readings' noise). Evenly fed vertices
    first; keyed ones, busy per share of the input, only where no vertex is fed evenly: a keyed
    subtask's work per record may grow with the keys it holds (state), which an evenly fed one's cannot."""
    finals = [e.final for e in estimates if e.mst_rps > 0]
    series = _log_busy_per_share(finals, keyed=False) or _log_busy_per_share(finals, keyed=True)
    if not series:
        return None
    slots = max(len(s) for s in series)
    rows = sum(len(s) for s in series)
    design = np.zeros((rows + 1, len(series) + slots))
    target = np.zeros(rows + 1)
    row = 0
    for level, log_busy in enumerate(series):
        for i, value in enumerate(log_busy):
            design[row, level] = 1.0
            design[row, len(series) + i] = -1.0
            target[row] = value
            row += 1
    design[rows, len(series) :] = 1.0  # Σ log speed = 0: speeds relative to their geometric mean
    solution = np.linalg.lstsq(design, target, rcond=None)[0]
    if not _hosts_differ(series, design[:rows] @ solution - target[:rows], slots):
        return None
    log_speed = solution[len(series) :]
    return SlotSpeeds(tuple(float(s) for s in np.exp(log_speed)), float(np.std(log_speed, ddof=1)))


def _hosts_differ(series: list[np.ndarray], residuals: np.ndarray, slots: int) -> bool:
    """F-test of per-host speeds against one level per run and vertex: the differences must stand out of
    the readings' noise beyond SIGNIFICANCE. Runs that leave no degree of freedom for the noise (one run
    at two slots) cannot tell a slow host from a noisy reading: the hosts are then taken as alike."""
    free = slots - 1
    dof = len(residuals) - len(series) - free
    if free < 1 or dof < 1:
        return False
    within = sum(float(np.sum((s - s.mean()) ** 2)) for s in series)
    noise = float(residuals @ residuals)
    if noise <= 0.0:
        return within > 0.0
    return bool(f_distribution.sf((within - noise) / free / (noise / dof), free, dof) < SIGNIFICANCE)


def _log_busy_per_share(readings: Sequence[PhaseReading], keyed: bool) -> list[np.ndarray]:
    """Per reading and vertex (keyed or fed evenly) with every subtask read, below saturation and with
    two or more subtasks: log(busy / share of the input) per subtask."""
    series = []
    for reading in readings:
        for v in reading.vertices:
            busy = np.array(v.subtask_busyness, dtype=float)
            share = np.array(v.subtask_shares, dtype=float)
            if bool(v.key_groups) != keyed or v.parallelism < 2 or len(busy) != v.parallelism:
                continue
            if keyed and not (len(share) == v.parallelism and np.all(share > 0)):
                continue
            if np.all(np.isfinite(busy)) and np.all(busy > 0) and np.all(busy < 1.0):
                series.append(np.log(busy / share) if keyed else np.log(busy))
    return series
