"""Exact online simple linear regression (CPU → throughput) without keeping the observations.

One sample updates with Welford's recurrence; a batch is summarised in one exact pass and merged with
Chan et al.'s pairwise formulas. Applying the one-sample recurrence to a whole batch (as the Daedalus
code did) inflates variance and covariance, so batches always go through `merge`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RegressionStats:
    """Sufficient statistics of (x, y): count, means and centred (co-)moment sums."""

    n: float = 0
    """How many points; a weight (not a whole number) once `faded`."""
    mean_x: float = 0.0
    mean_y: float = 0.0
    m2_x: float = 0.0
    m2_y: float = 0.0
    c_xy: float = 0.0

    @classmethod
    def from_arrays(cls, x: np.ndarray, y: np.ndarray) -> RegressionStats:
        """Summarise a batch; pairs where either value is NaN/inf are ignored."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = x[keep], y[keep]
        if len(x) == 0:
            return cls()
        mean_x, mean_y = float(x.mean()), float(y.mean())
        dx, dy = x - mean_x, y - mean_y
        return cls(len(x), mean_x, mean_y, float(dx @ dx), float(dy @ dy), float(dx @ dy))

    def add(self, x: float, y: float) -> RegressionStats:
        """Welford's one-sample update; a non-finite pair leaves the statistics unchanged."""
        if not (math.isfinite(x) and math.isfinite(y)):
            return self
        n = self.n + 1
        dx = x - self.mean_x
        mean_x = self.mean_x + dx / n
        dy = y - self.mean_y
        mean_y = self.mean_y + dy / n
        return RegressionStats(
            n,
            mean_x,
            mean_y,
            self.m2_x + dx * (x - mean_x),
            self.m2_y + dy * (y - mean_y),
            self.c_xy + dx * (y - mean_y),
        )

    def merge(self, other: RegressionStats) -> RegressionStats:
        """Chan et al.'s exact combination of two disjoint summaries."""
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        dx = other.mean_x - self.mean_x
        dy = other.mean_y - self.mean_y
        weight = self.n * other.n / n
        return RegressionStats(
            n,
            self.mean_x + dx * other.n / n,
            self.mean_y + dy * other.n / n,
            self.m2_x + other.m2_x + dx * dx * weight,
            self.m2_y + other.m2_y + dy * dy * weight,
            self.c_xy + other.c_xy + dx * dy * weight,
        )

    def faded(self, weight: float) -> RegressionStats:
        """The same points, each counting `weight` (0..1) times: the means stay, the count and the sums
        shrink. Fading before every `merge` is exponential forgetting: a line that follows a change."""
        return RegressionStats(
            self.n * weight,
            self.mean_x,
            self.mean_y,
            self.m2_x * weight,
            self.m2_y * weight,
            self.c_xy * weight,
        )

    @property
    def var_x(self) -> float:
        return self.m2_x / self.n if self.n else math.nan

    @property
    def slope(self) -> float:
        """cov(X, Y) / var(X); NaN when X has no spread."""
        return self.c_xy / self.m2_x if self.m2_x > 0 else math.nan

    @property
    def reverse_slope(self) -> float:
        """dY/dX from regressing X on Y (var(Y) / cov(X, Y)): unbiased when X carries the noise and Y is
        exact; NaN unless X and Y co-vary positively."""
        return self.m2_y / self.c_xy if self.c_xy > 0 else math.nan

    @property
    def slope_t(self) -> float:
        """t-statistic of the slope (slope / its standard error); 0 when it cannot be computed."""
        if self.n < 3 or self.m2_x <= 0:
            return 0.0
        residual = max(self.m2_y - self.c_xy**2 / self.m2_x, 0.0) / (self.n - 2)
        if residual == 0:
            return math.inf if self.c_xy != 0 else 0.0
        return self.slope / math.sqrt(residual / self.m2_x)

    @property
    def intercept(self) -> float:
        return self.mean_y - self.slope * self.mean_x

    def predict(self, x: float) -> float:
        return self.intercept + self.slope * x

    def to_dict(self) -> dict[str, float]:
        # fields by hand: dataclasses.asdict deep-copies, and a large job's store saves thousands a minute
        return {
            "n": self.n,
            "mean_x": self.mean_x,
            "mean_y": self.mean_y,
            "m2_x": self.m2_x,
            "m2_y": self.m2_y,
            "c_xy": self.c_xy,
        }

    def within(self, top_x: float, top_y: float) -> bool:
        """Whether samples of x in [0, top_x] and y in [0, top_y] can give these sums: finite, the means
        within the ranges, each spread at most its range's, and a covariance the spreads allow."""
        sums = (self.n, self.mean_x, self.mean_y, self.m2_x, self.m2_y, self.c_xy)
        if not all(map(math.isfinite, sums)) or min(self.n, self.m2_x, self.m2_y) < 0:
            return False
        if not (0 <= self.mean_x <= top_x and 0 <= self.mean_y <= top_y):
            return False
        spread_ok = self.m2_x <= self.n * top_x**2 and self.m2_y <= self.n * top_y**2
        return spread_ok and self.c_xy**2 <= self.m2_x * self.m2_y * (1 + 1e-9) + 1e-12

    @classmethod
    def from_dict(cls, data: dict) -> RegressionStats:
        n = float(data["n"])  # a faded count is a weight; a whole one stays an int
        if not math.isfinite(n):
            raise ValueError(f"a count of {n}")
        return cls(
            n=int(n) if n.is_integer() else n,
            **{k: float(data[k]) for k in ("mean_x", "mean_y", "m2_x", "m2_y", "c_xy")},
        )
