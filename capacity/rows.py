"""Per-series summaries of many equal-length series at once, bit for bit what one series at a time gives.

The loop summarises every worker's and every subtask's window (12 samples each, up to thousands of
series); numpy's per-call overhead dominates one series at a time. Series of the same length are stacked
into rows and summarised together, grouped by which samples each keeps, so every row's sum runs over the
same contiguous values as before: a row-wise sum uses numpy's pairwise summation exactly as a 1-D sum
does, and a stacked matmul of a row with itself is the 1-D dot product. The results therefore equal
`x[keep].mean()`, `np.nanmean` and `RegressionStats.from_arrays` to the last bit (tests/capacity checks).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from capacity.regression import RegressionStats


def stacked(arrays: list[np.ndarray]) -> np.ndarray | None:
    """The arrays as the rows of one float matrix; None when their lengths differ (or there are none)."""
    if not arrays:
        return None
    try:
        matrix = np.array(arrays, dtype=float)
    except ValueError:  # ragged
        return None
    return matrix if matrix.ndim == 2 else None


class RowGroups:
    """The rows of a boolean keep-matrix grouped by their pattern of kept samples."""

    def __init__(self, keep: np.ndarray) -> None:
        self.keep = keep
        self.counts = keep.sum(axis=1)
        if not keep.any():
            self.groups = []
            return
        if keep.all():
            self.groups = [(np.arange(len(keep)), slice(None))]
            return
        patterns, inverse = np.unique(keep, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        self.groups = [
            (np.flatnonzero(inverse == k), pattern) for k, pattern in enumerate(patterns) if pattern.any()
        ]

    def blocks(self, *values: np.ndarray) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
        """Per group: its rows, and of each matrix in `values` the kept samples of those rows (contiguous)."""
        for rows, columns in self.groups:
            yield rows, [np.ascontiguousarray(v[rows][:, columns]) for v in values]

    def means(self, values: np.ndarray) -> np.ndarray:
        """Per row, the mean of the kept samples (NaN for a row that keeps none)."""
        out = np.full(len(self.keep), np.nan)
        for rows, (block,) in self.blocks(values):
            out[rows] = block.sum(axis=1) / block.shape[1]
        return out

    def nanmeans(self, values: np.ndarray) -> np.ndarray:
        """Per row, `np.nanmean` of the kept samples; NaN unless one of them is finite."""
        out = np.full(len(self.keep), np.nan)
        for rows, (block,) in self.blocks(values):
            missing = np.isnan(block)
            count = (~missing).sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                means = np.where(missing, 0.0, block).sum(axis=1) / count
            out[rows] = np.where(np.isfinite(block).any(axis=1), means, np.nan)
        return out

    def regressions(self, x: np.ndarray, y: np.ndarray) -> list[RegressionStats]:
        """Per row, `RegressionStats.from_arrays` of the kept (x, y) pairs (non-finite pairs dropped)."""
        finite = self.keep & np.isfinite(x) & np.isfinite(y)
        groups = self if np.array_equal(finite, self.keep) else RowGroups(finite)
        out = [RegressionStats()] * len(self.keep)
        for rows, (xs, ys) in groups.blocks(x, y):
            for row, stats in zip(rows.tolist(), _regressions(xs, ys), strict=True):
                out[row] = stats
        return out


def _regressions(xs: np.ndarray, ys: np.ndarray) -> list[RegressionStats]:
    n = xs.shape[1]
    mean_x = xs.sum(axis=1) / n
    mean_y = ys.sum(axis=1) / n
    dx = (xs - mean_x[:, None])[:, None, :]
    dy = (ys - mean_y[:, None])[:, None, :]
    m2_x = np.matmul(dx, dx.transpose(0, 2, 1))[:, 0, 0]
    m2_y = np.matmul(dy, dy.transpose(0, 2, 1))[:, 0, 0]
    c_xy = np.matmul(dx, dy.transpose(0, 2, 1))[:, 0, 0]
    return [
        RegressionStats(n, *values)
        for values in zip(
            mean_x.tolist(), mean_y.tolist(), m2_x.tolist(), m2_y.tolist(), c_xy.tolist(), strict=True
        )
    ]
