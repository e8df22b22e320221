"""One loop window of Flink's task metrics per subtask, summarised for the per-vertex model (capacity/dag.py):
the regression of records in on busy share (DS2's true rate, capacity/regression.py) and the window's means,
from the valid samples only: past the warm-up after a (re)start, finite and plausible, of subtasks that
exist now (a rescale leaves the old ones' series behind). Records out are held to the same range as records
in: one join subtask reading 10^15 records/s out taught a selectivity that sent every vertex to its max
parallelism for three hours."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from capacity.regression import RegressionStats
from capacity.rows import RowGroups, stacked
from messages.types import MAX_RATE_RPS, JobGraph, SubtaskSeries

MAX_BUSY_SHARE = 1.05
"""The most of a second a subtask reports busy (Flink's 1,000 ms/s and the meter's rounding)."""


@dataclass(frozen=True)
class SubtaskWindow:
    """One subtask's valid samples in this loop window."""

    vertex_id: str
    subtask_index: int
    taskmanager_id: str | None
    stats: RegressionStats
    """x = busy share (0..1), y = records in per second."""
    records_in_rps: float
    records_out_rps: float
    busy: float
    """Mean busy share (NaN where Flink reports none: a legacy source)."""
    backpressured: float


def subtask_windows(
    subtasks: Iterable[SubtaskSeries],
    graph: JobGraph,
    uptime_s: float | None,
    now_s: float,
    warmup_s: float,
) -> list[SubtaskWindow]:
    """Valid samples per subtask: past the warm-up after the (re)start, finite and plausible (records
    0..MAX_RATE_RPS in and out, busy within a second), of subtasks that exist now. A source counts what it emits as
    its input (Flink reports no records in for a source task). Series of one length (the usual case) are
    summarised together (capacity/rows.py), with the same result.
    """
    sources = {v.vertex_id for v in graph.sources}
    started_s = now_s - uptime_s if uptime_s is not None and math.isfinite(uptime_s) else -math.inf
    current = current_subtasks(subtasks, graph)
    records = [input_rps(s, s.vertex_id in sources) for s in current]
    timestamps = stacked([s.timestamps_s for s in current])
    if timestamps is None:
        windows = (_subtask_window(s, r, started_s + warmup_s) for s, r in zip(current, records, strict=True))
        return [w for w in windows if w is not None]
    records_in = stacked(records)
    keep = (timestamps >= started_s + warmup_s) & np.isfinite(plausible_rps(records_in))
    rows = RowGroups(keep)
    busy = _plausible_share(stacked([s.busy_ms_per_s for s in current]) / 1000.0)
    backpressured = _plausible_share(stacked([s.backpressured_ms_per_s for s in current]) / 1000.0)
    stats = rows.regressions(busy, records_in)
    records_in_rps = rows.means(records_in).tolist()
    records_out = plausible_rps(stacked([s.records_out_rps for s in current]))
    records_out_rps = rows.nanmeans(records_out).tolist()
    busy_mean, backpressured_mean = rows.nanmeans(busy).tolist(), rows.nanmeans(backpressured).tolist()
    return [
        SubtaskWindow(
            series.vertex_id,
            series.subtask_index,
            series.taskmanager_id,
            stats[i],
            records_in_rps[i],
            records_out_rps[i],
            busy_mean[i],
            backpressured_mean[i],
        )
        for i, series in enumerate(current)
        if rows.counts[i]
    ]


def current_subtasks(subtasks: Iterable[SubtaskSeries], graph: JobGraph) -> list[SubtaskSeries]:
    """The series of subtasks that exist at the graph's parallelism: after a scale-in, the range query still
    returns the removed subtasks' samples from before the restart."""
    parallelism = {v.vertex_id: v.parallelism for v in graph.vertices}
    return [s for s in subtasks if s.subtask_index < parallelism.get(s.vertex_id, 0)]


def input_rps(series: SubtaskSeries, source: bool) -> np.ndarray:
    """The subtask's records in per second; for a source that reports none, what it emits."""
    if source and not np.nansum(series.records_in_rps) > 0:
        return series.records_out_rps
    return series.records_in_rps


def plausible_rps(records_rps: np.ndarray) -> np.ndarray:
    """Records-per-second samples, NaN where one is no rate: negative or above MAX_RATE_RPS (a subtask
    reading 10^12 records/s taught a capacity that scaled the job in)."""
    with np.errstate(invalid="ignore"):
        return np.where((records_rps >= 0) & (records_rps <= MAX_RATE_RPS), records_rps, np.nan)


def _plausible_share(share: np.ndarray) -> np.ndarray:
    """Busy (or backpressured) shares outside a second are gaps, never rates."""
    return np.where((share < 0) | (share > MAX_BUSY_SHARE), np.nan, share)


def _subtask_window(series: SubtaskSeries, records: np.ndarray, from_s: float) -> SubtaskWindow | None:
    """One subtask's window: its samples from `from_s` on whose records in are a plausible rate."""
    keep = (series.timestamps_s >= from_s) & np.isfinite(plausible_rps(records))
    if not keep.any():
        return None
    records_in = records[keep]
    busy = _plausible_share(series.busy_ms_per_s[keep] / 1000.0)
    backpressured = _plausible_share(series.backpressured_ms_per_s[keep] / 1000.0)
    out = plausible_rps(series.records_out_rps[keep])
    return SubtaskWindow(
        series.vertex_id,
        series.subtask_index,
        series.taskmanager_id,
        RegressionStats.from_arrays(busy, records_in),
        float(records_in.mean()),
        float(np.nanmean(out)) if np.isfinite(out).any() else math.nan,
        float(np.nanmean(busy)) if np.isfinite(busy).any() else math.nan,
        float(np.nanmean(backpressured)) if np.isfinite(backpressured).any() else math.nan,
    )
