"""The batched summaries and curves give exactly (bit for bit) what the one-at-a-time computations give.

The loop summarises thousands of series per iteration in batches (capacity/rows.py) and computes capacities
and recoveries for every scale-out at once; these tests hold each batched path to its scalar reference on
random data with gaps, negative values, warm-up cuts and legacy sources, so a rewrite that changes a
result by one rounding fails here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from capacity.dag import DagModel, _split_of
from capacity.model import CapacityModel, _valid_window, line_key, valid_windows
from capacity.regression import RegressionStats
from capacity.rows import RowGroups
from capacity.subtask_windows import _subtask_window, input_rps, subtask_windows
from messages.types import JobEdge, JobGraph, JobVertex, SubtaskSeries, WorkerSeries
from recovery.predict import predict_recoveries_s, predict_recovery_s

T = np.arange(5.0, 65.0, 5.0)


def _with_gaps(rng: np.random.Generator, values: np.ndarray, share: float = 0.1) -> np.ndarray:
    values = values.copy()
    values[rng.random(values.shape) < share] = np.nan
    return values


def test_row_summaries_equal_one_row_at_a_time() -> None:
    rng = np.random.default_rng(7)
    x = _with_gaps(rng, rng.random((300, 12)) * rng.uniform(0.01, 1e3, (300, 1)))
    y = _with_gaps(rng, rng.standard_normal((300, 12)) * 1e4 + 5e4)
    x[::7, 3] = np.inf
    keep = rng.random((300, 12)) < 0.85
    keep[:100] = True  # the common case: one group
    rows = RowGroups(keep)
    means, nanmeans, stats = rows.means(y), rows.nanmeans(x), rows.regressions(x, y)
    for i in range(300):
        kept_x, kept_y = x[i][keep[i]], y[i][keep[i]]
        assert stats[i] == RegressionStats.from_arrays(kept_x, kept_y)
        if keep[i].any():
            assert means[i] == kept_y.mean() or (math.isnan(means[i]) and math.isnan(kept_y.mean()))
            expected = float(np.nanmean(kept_x)) if np.isfinite(kept_x).any() else math.nan
            assert nanmeans[i] == expected or (math.isnan(nanmeans[i]) and math.isnan(expected))


def test_valid_windows_equal_one_worker_at_a_time() -> None:
    rng = np.random.default_rng(3)
    workers = tuple(
        WorkerSeries(
            f"tm-{i}",
            T,
            _with_gaps(rng, 0.11 + 0.8 * rng.random(12) - (0.5 if i % 9 == 0 else 0.0)),
            _with_gaps(rng, rng.random(12) * 5000.0),
        )
        for i in range(200)
    )
    batched = valid_windows(workers, 40.0, 60.0, 10.0, 0.8)  # the warm-up cuts the first samples
    single = [w for w in (_valid_window(worker, 60.0 - 40.0 + 10.0, 0.8) for worker in workers) if w]
    assert batched == single and len(single) > 150


def test_a_cpu_sample_above_the_bound_is_a_gap_not_a_point_of_the_line() -> None:
    """One bogus scrape (15 cores on a 1-core worker) in a window whose median is fine was learned into
    the worker's line: its capacity read 15% low for the windows after."""
    cpu, tput = 0.1 + 0.0002 * np.arange(12.0) * 300, np.arange(12.0) * 300
    spiked = cpu.copy()
    spiked[4] = 15.0
    clean = valid_windows((WorkerSeries("tm-0", T, cpu, tput),), None, 60.0, 0.0, 2.0)
    for series in (
        WorkerSeries("tm-0", T, spiked, tput),
        WorkerSeries("tm-0", T[:-1], spiked[:-1], tput[:-1]),
    ):
        (window,) = valid_windows((series, WorkerSeries("tm-1", T, cpu, tput)), None, 60.0, 0.0, 2.0)[:1]
        assert window.cpu_mean < 1.0 and window.stats.n == len(series.timestamps_s) - 1
        assert window.stats.slope == pytest.approx(clean[0].stats.slope)


def test_lines_at_equal_worker_line_at() -> None:
    rng = np.random.default_rng(5)
    model = CapacityModel()
    for step in range(4):
        workers = tuple(
            WorkerSeries(
                f"tm-{i}", T, 0.11 + (0.2 + 0.05 * (i % 5)) * rng.random(12), rng.random(12) * 3000.0
            )
            for i in range(60)
        )
        model.learn(valid_windows(workers, None, 60.0 * step, 0.0), 60.0 * step, 60)
    ids = [line_key(f"tm-{i}", 60) for i in range(65)]  # 5 never seen
    for pooled in (model.pooled_slope(), math.nan, 4000.0):
        lines = model.lines_at(ids, 0.95, pooled)
        for worker_id, line in zip(ids, lines.tolist(), strict=True):
            expected = model.worker_line_at(worker_id, 0.95, pooled)
            assert line == expected or (math.isnan(line) and math.isnan(expected))


def _dag(rng: np.random.Generator) -> tuple[JobGraph, list[SubtaskSeries]]:
    vertices = tuple(JobVertex(f"v{v}", f"op{v}", 6, 32) for v in range(4))
    edges = (JobEdge("v0", "v1", "HASH"), JobEdge("v1", "v2", "REBALANCE"), JobEdge("v2", "v3", "BROADCAST"))
    subtasks = []
    for v in range(4):
        for i in range(7):  # subtask 6 belongs to an earlier deployment
            records_in = _with_gaps(rng, (1.0 + 0.4 * (i % 3)) * rng.uniform(500.0, 3000.0, 12))
            busy = 20.0 + 0.2 * records_in + rng.standard_normal(12)
            busy = np.full(12, np.nan) if v == 0 else busy  # a legacy source
            subtasks.append(
                SubtaskSeries(
                    f"v{v}", i, f"tm-{i}", T, records_in, 1.5 * records_in, busy, 0 * busy, 1e3 - busy
                )
            )
    return JobGraph(vertices, edges), subtasks


def test_subtask_windows_equal_one_subtask_at_a_time() -> None:
    graph, subtasks = _dag(np.random.default_rng(11))
    batched = subtask_windows(subtasks, graph, 40.0, 60.0, 10.0)
    one_by_one = (
        _subtask_window(s, input_rps(s, s.vertex_id == "v0"), 30.0) for s in subtasks if s.subtask_index < 6
    )
    single = [w for w in one_by_one if w]
    assert len(batched) == 24
    for got, expected in zip(batched, single, strict=True):
        assert got.stats == expected.stats and got.vertex_id == expected.vertex_id
        for name in ("records_in_rps", "records_out_rps", "busy", "backpressured"):
            a, b = getattr(got, name), getattr(expected, name)
            assert a == b or (math.isnan(a) and math.isnan(b)), name


@pytest.mark.parametrize("parallelism", [3, 6])
def test_capacity_curve_equals_vertex_capacity_at_every_parallelism(parallelism: int) -> None:
    graph, subtasks = _dag(np.random.default_rng(13))
    graph = JobGraph(
        tuple(JobVertex(v.vertex_id, v.name, parallelism, 32) for v in graph.vertices), graph.edges
    )
    model = DagModel()
    for step in range(8):
        model.learn(graph, subtask_windows(subtasks, graph, None, 60.0 * step, 0.0))
    ratios = model.input_ratios(graph)
    for vertex in graph.vertices:
        for ratio in (ratios[vertex.vertex_id], math.nan, 0.0, 2.5):
            capacities, kinds = model.capacity_curve(graph, vertex.vertex_id, ratio, 32)
            for p in range(1, 33):
                model._curves.clear()  # recomputed for 1..p alone, not read from the curve to 32
                capacity, kind = model.vertex_capacity_rps(graph, vertex.vertex_id, p, ratio)
                assert (capacities[p - 1], kinds[p - 1]) == (capacity, kind)
                expected = _capacity_at(model, graph, vertex.vertex_id, p, ratio)
                assert capacity == pytest.approx(expected, rel=1e-12) or capacity == expected == math.inf
        for source_rps in (500.0, 4000.0, 40000.0):
            assert model.needed_parallelism(graph, vertex.vertex_id, source_rps, 32) == _needed(
                model, graph, vertex.vertex_id, ratios[vertex.vertex_id], source_rps
            )


def _capacity_at(model: DagModel, graph: JobGraph, vertex_id: str, parallelism: int, ratio: float) -> float:
    """The scalar reference: the hottest subtask's limit at this parallelism alone, rate / (ratio × share)
    over the subtasks that get input and whose rate is known (inf where none binds)."""
    if math.isnan(ratio) or ratio <= 0 or model._extrapolation(graph, vertex_id).rates(1)[1] == "unknown":
        return math.inf
    rates, _ = model._extrapolation(graph, vertex_id).rates(parallelism)
    shares = model._share_row(vertex_id, _split_of(graph, vertex_id), parallelism)
    limits = [
        rate / (ratio * share)
        for rate, share in zip(rates.tolist(), shares.tolist(), strict=True)
        if share > 0 and math.isfinite(rate)
    ]
    return min(limits, default=math.inf)


def _needed(model: DagModel, graph: JobGraph, vertex_id: str, ratio: float, source_rps: float) -> int | None:
    """needed_parallelism one parallelism at a time."""
    for p in range(1, 33):
        model._curves.clear()
        capacity, kind = model.vertex_capacity_rps(graph, vertex_id, p, ratio)
        if kind == "unknown":
            return None
        if capacity >= source_rps:
            return p
    return None


def test_recoveries_equal_one_candidate_at_a_time() -> None:
    rng = np.random.default_rng(17)
    forecast = 3000.0 + 1000.0 * np.sin(np.arange(900) / 60.0) + 50.0 * rng.standard_normal(900)
    capacities = np.concatenate((rng.uniform(0.0, 8000.0, 600), [math.nan, -1.0, 0.0, math.inf, 3000.0]))
    gap = forecast.copy()
    gap[400] = math.nan  # a gap in the forecast: no promise beyond it
    cases = ((5e5, 3e4, 30.0), (0.0, 0.0, 0.0), (1e6, 0.0, 12.5), (0.0, math.nan, 1.0), (3e6, 0.0, 899.0))
    for rates in (forecast, gap, np.full(900, math.nan)):
        for backlog, replay, downtime in cases:
            got = predict_recoveries_s(capacities, rates, backlog, replay, downtime)
            expected = [predict_recovery_s(c, rates, backlog, replay, downtime) for c in capacities]
            assert got.tolist() == expected
    assert np.isfinite(predict_recoveries_s(capacities, forecast, 5e5, 3e4, 30.0)).sum() > 100
