"""What the twin recorded, second by second: the raw material a metrics backend may read.

Per-second quantities are indexed by second t (covering [t, t+1)); per-worker ones by the worker's
position in the deployment (its subtask index), which never changes during a worker's life because
scale-in removes the newest workers and scale-out appends. Boundary quantities (`*_at`) are the state at
time t, after every action taken at t, before second t is processed.
"""

from __future__ import annotations

import numpy as np

_SECOND_FIELDS: dict[str, tuple[type, float]] = {
    "arrivals": (np.int64, 0),
    "processed": (np.int64, 0),
    "running": (np.bool_, False),
    "saturated": (np.bool_, False),
    "worst_latency_s": (np.float64, 0.0),
    "lag_at": (np.int64, 0),
    "parallelism_at": (np.int64, 0),
    "restarts_at": (np.int64, 0),
    "run_start_at": (np.int64, -1),
    "managed_mb_at": (np.float64, 0.0),
    "state_hits": (np.float64, 0.0),
    "state_misses": (np.float64, 0.0),
    "state_accesses": (np.float64, 0.0),
    "state_latency_ns_sum": (np.float64, 0.0),
}


class TwinHistory:
    """Growable per-second arrays; read them through `view` so readers cannot alter the record."""

    def __init__(self, expected_seconds: int, expected_workers: int) -> None:
        self.length = 0
        rows = max(expected_seconds, 1)
        self._columns = max(expected_workers, 1)
        self._series = {
            name: np.full(rows, fill, dtype=dtype) for name, (dtype, fill) in _SECOND_FIELDS.items()
        }
        self._cpu = np.full((rows, self._columns), np.nan)
        self._throughput = np.full((rows, self._columns), np.nan)
        self._arrived = np.zeros(rows + 1, dtype=np.int64)
        """Records that arrived before each second, summed up to `_arrived_upto` (see `arrived_before`)."""
        self._arrived_upto = 0

    def ensure(self, t_s: int, workers: int) -> None:
        """Make room for second t_s and `workers` positions."""
        rows = len(self._cpu)
        if t_s >= rows or workers > self._columns:
            new_rows = rows if t_s < rows else max(2 * rows, t_s + 1)
            new_columns = max(self._columns, workers)
            for name, (dtype, fill) in _SECOND_FIELDS.items():
                grown = np.full(new_rows, fill, dtype=dtype)
                grown[:rows] = self._series[name]
                self._series[name] = grown
            arrived = np.zeros(new_rows + 1, dtype=np.int64)
            arrived[: rows + 1] = self._arrived
            self._arrived = arrived
            self._cpu = _grow_matrix(self._cpu, new_rows, new_columns)
            self._throughput = _grow_matrix(self._throughput, new_rows, new_columns)
            self._columns = new_columns

    def series(self, name: str) -> np.ndarray:
        """Writable array for the twin (the owner of the record)."""
        return self._series[name]

    @property
    def cpu(self) -> np.ndarray:
        return self._cpu

    @property
    def throughput(self) -> np.ndarray:
        return self._throughput

    def view(self, name: str) -> np.ndarray:
        """Read-only view of one recorded quantity over the seconds simulated so far."""
        if name == "cpu":
            array = self._cpu[: self.length]
        elif name == "throughput":
            array = self._throughput[: self.length]
        else:
            array = self._series[name][: self.length]
        view = array.view()
        view.setflags(write=False)
        return view

    def arrived_before(self) -> np.ndarray:
        """Read-only: records that arrived before each second 0..length (length + 1 values). Summed once
        as the record grows (a second's arrivals never change once recorded): a metrics window summing
        from second 0 at every read made a long run quadratic (+15 ms an iteration per simulated day)."""
        upto, length = self._arrived_upto, self.length
        if upto < length:
            arrivals = self._series["arrivals"][upto:length]
            self._arrived[upto + 1 : length + 1] = self._arrived[upto] + np.cumsum(arrivals)
            self._arrived_upto = length
        view = self._arrived[: length + 1].view()
        view.setflags(write=False)
        return view


def _grow_matrix(matrix: np.ndarray, rows: int, columns: int) -> np.ndarray:
    grown = np.full((rows, columns), np.nan)
    grown[: matrix.shape[0], : matrix.shape[1]] = matrix
    return grown
