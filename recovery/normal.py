"""Normal behaviour of a running job: the running mean and variance of diff = workload − throughput.

Daedalus §3.5 classifies a sample as anomalous when its diff lies more than k standard deviations from
the mean of normal operation. The statistics are exact online ones (Welford, batches merged with Chan et
al.'s formulas), fed with live samples only — the authors' code fitted this model to a test CSV.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MIN_SAMPLES = 30
"""Samples before the mean and standard deviation are trusted (about half a minute at 1 s)."""


class NormalBehaviour:
    """Running mean and variance of workload − throughput while the job is processing normally."""

    def __init__(self, min_samples: int = MIN_SAMPLES) -> None:
        self.min_samples = min_samples
        self.n = 0
        self.mean_rps = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean, in (records/s)²

    @property
    def trained(self) -> bool:
        """Whether enough samples back the statistics for a k·std test."""
        return self.n >= max(self.min_samples, 2)

    @property
    def std_rps(self) -> float:
        """Sample standard deviation of the diff; NaN below two samples."""
        return math.sqrt(self.m2 / (self.n - 1)) if self.n >= 2 else math.nan

    def update(self, workload_rps: np.ndarray, throughput_rps: np.ndarray) -> int:
        """Add the samples of a processing job; returns how many were used.

        Samples where either value is unknown or the job processed nothing (throughput ≤ 0: it was down)
        are skipped — they describe an outage, not normal behaviour.
        """
        workload = np.asarray(workload_rps, dtype=float).ravel()
        throughput = np.asarray(throughput_rps, dtype=float).ravel()
        keep = np.isfinite(workload) & np.isfinite(throughput) & (throughput > 0)
        diff = workload[keep] - throughput[keep]
        if len(diff) == 0:
            return 0
        batch_mean = float(diff.mean())
        batch_m2 = float(((diff - batch_mean) ** 2).sum())
        n = self.n + len(diff)
        delta = batch_mean - self.mean_rps
        self.m2 += batch_m2 + delta * delta * self.n * len(diff) / n
        self.mean_rps += delta * len(diff) / n
        self.n = n
        return len(diff)

    def to_dict(self) -> dict[str, Any]:
        return {"min_samples": self.min_samples, "n": self.n, "mean_rps": self.mean_rps, "m2": self.m2}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NormalBehaviour:
        model = cls(int(data.get("min_samples", MIN_SAMPLES)))
        model.n = int(data["n"])
        model.mean_rps = float(data["mean_rps"])
        model.m2 = float(data["m2"])
        return model
