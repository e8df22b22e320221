"""Reading Prometheus answers onto the loop's sample grid (pure: no I/O, no clock).

Prometheus evaluates a range query at start + k·step; a series with no value at a step simply lacks the
point. Here every series becomes an array on one fixed grid with NaN for a missing point, a NaN value or
an infinite one, so the loop sees gaps exactly as the twin shows them. Anything that is not the shape the
HTTP API documents raises `BadAnswer`, which the source turns into a named problem.
"""

from __future__ import annotations

import math

import numpy as np

_EPS = 1e-9


class BadAnswer(ValueError):
    """Prometheus answered, but not with data of the documented shape (or not with one series)."""


def sample_grid(now_s: float, window_s: float, step_s: float) -> np.ndarray:
    """Multiples of `step_s` in (now_s - window_s, now_s]: the twin's sample times, in epoch seconds."""
    first = math.floor((now_s - window_s) / step_s + _EPS) + 1
    last = math.floor(now_s / step_s + _EPS)
    return np.arange(first, last + 1, dtype=float) * step_s


def number(value: object) -> float:
    """A sample value as Prometheus encodes it (a string, "NaN" and "+Inf" included); non-finite → NaN."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadAnswer(f"sample value {value!r} is not a number")
    try:
        parsed = float(value)
    except (ValueError, OverflowError) as error:  # OverflowError: an integer of hundreds of digits
        raise BadAnswer(f"sample value {str(value)[:40]!r} is not a number") from error
    return parsed if math.isfinite(parsed) else math.nan


def parse_matrix(result: object, grid: np.ndarray, step_s: float, label: str | None) -> dict[str, np.ndarray]:
    """A range-query result as one grid-aligned array per value of `label`; with None, its one series.

    Series sharing a label value are added (a query not yet aggregated per worker still reads right);
    a point counts where at least one of them has a value. Without a label, more than one series is
    refused, as for an instant query: added, a series answered twice (two HA replicas told apart by a
    label, a proxy) doubled the input rate and the loop scaled out on it.
    """
    if label is None and isinstance(result, list) and len(result) > 1:
        raise BadAnswer(f"expected one series, got {len(result)}: aggregate them in the query")
    arrays = parse_matrix_by(result, grid, step_s, () if label is None else (label,))
    return {"" if not key else key[0]: values for key, values in arrays.items()}


def parse_matrix_by(
    result: object, grid: np.ndarray, step_s: float, labels: tuple[str, ...]
) -> dict[tuple[str, ...], np.ndarray]:
    """A range-query result as one grid-aligned array per combination of the `labels`' values (e.g. a
    subtask: vertex id, subtask index, TaskManager); series sharing them are added as in `parse_matrix`."""
    if not isinstance(result, list):
        raise BadAnswer(f"range result is {type(result).__name__}, expected a list of series")
    arrays: dict[tuple[str, ...], np.ndarray] = {}
    for series in result:
        metric, values = _series_parts(series, "values")
        key = tuple(metric.get(label) for label in labels)
        missing = [label for label, value in zip(labels, key, strict=True) if not isinstance(value, str)]
        if missing:
            raise BadAnswer(f"series {metric} has no {missing[0]!r} label to tell series apart")
        points = np.full(len(grid), np.nan)
        if not isinstance(values, list):
            raise BadAnswer(f"series {metric}: 'values' is not a list")
        for point in values:
            time_s, value = _point(point)
            index = round((time_s - grid[0]) / step_s) if len(grid) else -1
            if 0 <= index < len(grid) and abs(grid[index] - time_s) <= step_s / 2:
                points[index] = value
        previous = arrays.get(key)
        arrays[key] = points if previous is None else _nan_sum(previous, points)
    return arrays


def parse_instant(result: object) -> float | None:
    """The one value of an instant query; None when no series matched (NaN when its value is not finite)."""
    if isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict):
        return _point(result)[1]  # a scalar result: [time, "value"]
    if not isinstance(result, list):
        raise BadAnswer(f"instant result is {type(result).__name__}, expected a vector")
    if not result:
        return None
    if len(result) > 1:
        raise BadAnswer(f"expected one series, got {len(result)}: aggregate them in the query")
    _, value = _series_parts(result[0], "value")
    return _point(value)[1]


def parse_vector(result: object, label: str) -> dict[str, float]:
    """An instant-query vector as {value of `label`: value} (NaN for a non-finite value); series sharing a
    label value are added. Raises BadAnswer for another shape or a series without the label."""
    if not isinstance(result, list):
        raise BadAnswer(f"instant result is {type(result).__name__}, expected a vector")
    values: dict[str, float] = {}
    for series in result:
        metric, point = _series_parts(series, "value")
        key = metric.get(label)
        if not isinstance(key, str):
            raise BadAnswer(f"series {metric} has no {label!r} label")
        value = _point(point)[1]
        values[key] = value if key not in values else values[key] + value
    return values


def newest_sample_s(arrays: list[np.ndarray], grid: np.ndarray) -> float | None:
    """Time of the newest finite point across the arrays; None when there is none."""
    newest = None
    for array in arrays:
        finite = np.flatnonzero(np.isfinite(array))
        if len(finite):
            time_s = float(grid[finite[-1]])
            newest = time_s if newest is None else max(newest, time_s)
    return newest


def _series_parts(series: object, key: str) -> tuple[dict, object]:
    if not isinstance(series, dict) or not isinstance(series.get("metric"), dict) or key not in series:
        raise BadAnswer(f"series {str(series)[:120]!r} lacks 'metric' or {key!r}")
    return series["metric"], series[key]


def _point(point: object) -> tuple[float, float]:
    if not isinstance(point, list | tuple) or len(point) != 2:
        raise BadAnswer(f"sample {str(point)[:80]!r} is not a [time, value] pair")
    time_value, value = point
    if isinstance(time_value, bool) or not isinstance(time_value, int | float):
        raise BadAnswer(f"sample time {time_value!r} is not a number")
    try:
        time_s = float(time_value)
    except OverflowError:
        time_s = math.inf
    if not math.isfinite(time_s):
        raise BadAnswer(f"sample time {str(time_value)[:40]} is not a finite time")
    return time_s, number(value)


def _nan_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both_missing = np.isnan(a) & np.isnan(b)
    return np.where(both_missing, np.nan, np.nan_to_num(a) + np.nan_to_num(b))
