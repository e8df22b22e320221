"""A loop window's samples per subtask: only the valid ones reach the per-vertex model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from capacity.subtask_windows import subtask_windows
from messages.types import JobEdge, JobGraph, JobVertex, SubtaskSeries

GRAPH = JobGraph(
    (JobVertex("src", "source", 1, 128), JobVertex("agg", "agg", 2, 128)), (JobEdge("src", "agg", "HASH"),)
)
T = np.arange(5.0, 65.0, 5.0)


def _subtask(index: int, records_rps: np.ndarray, busy_ms: float = 500.0) -> SubtaskSeries:
    busy = np.full(len(T), busy_ms)
    return SubtaskSeries("agg", index, "tm-a", T, records_rps, records_rps, busy, 0 * T, 1000 - busy)


@pytest.mark.parametrize("damage", [1e12, -5.0, np.inf, np.nan])
def test_a_subtask_sample_that_is_no_rate_is_left_out(damage):
    """A subtask reading 10^12 records/s taught a capacity that scaled the job in (3 → 1 subtasks)."""
    records = np.full(len(T), 500.0)
    records[-1] = damage
    windows = subtask_windows(
        [_subtask(0, records), _subtask(1, np.full(len(T), 500.0))], GRAPH, None, 65.0, 0
    )
    assert [w.records_in_rps for w in windows] == [500.0, 500.0]
    assert [w.stats.n for w in windows] == [len(T) - 1, len(T)]


@pytest.mark.parametrize("damage", [5_000.0, -300.0])
def test_a_backpressured_share_outside_a_second_is_a_gap(damage):
    """5,000 ms/s read as 5.0: "upstream held back", so the busy subtasks downstream were learned as
    saturated. Busy time outside a second was already a gap."""
    series = _subtask(0, np.full(len(T), 500.0))
    held = np.full(len(T), 200.0)
    held[-1] = damage
    damaged = dataclasses.replace(series, backpressured_ms_per_s=held)
    (window,) = subtask_windows([damaged], GRAPH, None, 65.0, 0)
    assert window.backpressured == pytest.approx(0.2)
