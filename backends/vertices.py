"""Per-subtask task metrics onto the job graph (pure: no I/O, no clock).

Prometheus keeps a subtask's series after a rescale: for minutes it still answers for subtasks that no
longer exist (an index at or above the vertex's parallelism now, a vertex of an earlier job graph), and a
subtask that moved to another TaskManager shows as two series. Only subtasks of the graph as it runs now
are kept; a moved subtask keeps its newest TaskManager, with the previous one's samples only from before
the move. A window in which some vertex lacks one of the metrics altogether is not a per-vertex view:
() and the reason, so the analysis falls back to the job-level model.
"""

from __future__ import annotations

import numpy as np

from messages.types import JobGraph, SubtaskSeries

METRICS = ("records_in_rps", "records_out_rps", "busy_ms_per_s", "backpressured_ms_per_s", "idle_ms_per_s")
"""The per-subtask series, named as `SubtaskSeries` fields."""

Key = tuple[str, str, str]
"""(vertex id, subtask index, TaskManager id) as the queries' labels give them."""


def subtask_series(
    graph: JobGraph, grid: np.ndarray, metrics: dict[str, dict[Key, np.ndarray]]
) -> tuple[tuple[SubtaskSeries, ...], str | None]:
    """Every live subtask's series, ordered by vertex (topologically) and index; or () and why not."""
    placements: dict[tuple[str, int], dict[str, dict[str, np.ndarray]]] = {}
    for name in METRICS:
        for (vertex_id, index_text, taskmanager), values in metrics.get(name, {}).items():
            try:
                index = int(index_text)
            except ValueError:
                return (), f"subtask index {index_text!r} of vertex {vertex_id} is not a number"
            if not _exists(graph, vertex_id, index):
                continue  # a subtask (or vertex) that a rescale or a redeployment removed
            placements.setdefault((vertex_id, index), {}).setdefault(taskmanager, {})[name] = values
    subtasks = []
    for vertex in graph.vertices:
        indices = sorted(index for vertex_id, index in placements if vertex_id == vertex.vertex_id)
        reported = {
            name for i in indices for series in placements[(vertex.vertex_id, i)].values() for name in series
        }
        missing = [name for name in METRICS if name not in reported]
        if missing:
            return (), f"vertex {vertex.name!r}: no {', '.join(missing)} series"
        for index in indices:
            taskmanager, series = _merge_moves(placements[(vertex.vertex_id, index)], len(grid))
            subtasks.append(SubtaskSeries(vertex.vertex_id, index, taskmanager, grid, **series))
    return tuple(subtasks), None


def _exists(graph: JobGraph, vertex_id: str, index: int) -> bool:
    vertex = next((v for v in graph.vertices if v.vertex_id == vertex_id), None)
    return vertex is not None and 0 <= index < vertex.parallelism


def _merge_moves(
    by_taskmanager: dict[str, dict[str, np.ndarray]], length: int
) -> tuple[str, dict[str, np.ndarray]]:
    """One subtask seen on several TaskManagers: the series of the placement that began last, earlier ones'
    only before it began (a windowed query, `avg_over_time(…[1m])`, shows a left TaskManager for a minute
    more, so the newest placement is the one that started last, not the one that ended last)."""

    def span(series: dict[str, np.ndarray]) -> tuple[int, int]:
        finite = np.flatnonzero(np.any([np.isfinite(a) for a in series.values()], axis=0))
        return (int(finite[0]), int(finite[-1])) if len(finite) else (length, -1)

    ordered = sorted(by_taskmanager, key=lambda tm: (*span(by_taskmanager[tm]), tm), reverse=True)
    current = ordered[0]
    merged = {name: by_taskmanager[current].get(name, np.full(length, np.nan)).copy() for name in METRICS}
    began = span(by_taskmanager[current])[0]
    for earlier in ordered[1:]:
        for name, values in by_taskmanager[earlier].items():
            before = slice(0, began)
            gap = np.isnan(merged[name][before])
            merged[name][before][gap] = values[before][gap]
        began = min(began, span(by_taskmanager[earlier])[0])
    return current, merged
