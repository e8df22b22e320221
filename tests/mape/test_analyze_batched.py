"""The Analyzer's per-worker summaries over all workers at once equal the one-worker-at-a-time results."""

from __future__ import annotations

import math

import numpy as np

from mape.analyze import _total_throughput, _worker_rate, _worker_rates
from messages.types import Observation, WorkerSeries

STAMPS = np.arange(5.0, 65.0, 5.0)


def _observation(rng: np.random.Generator, offset_s: float, uptime_s: float | None) -> Observation:
    workers = []
    for i in range(40):
        throughput = rng.uniform(0.0, 5000.0, 12)
        throughput[rng.random(12) < 0.15] = math.nan
        if i % 10 == 0:
            throughput[:] = math.nan  # a worker that did not report
        busy = None if i % 3 == 0 else rng.uniform(0.0, 1.0, 12)
        if busy is not None and i % 7 == 0:
            busy[4] = math.nan
        workers.append(
            WorkerSeries(f"tm-{i}", STAMPS + offset_s, rng.uniform(0.1, 1.0, 12), throughput, busy)
        )
    return Observation(60.0, 60.0, STAMPS, np.full(12, 1e5), tuple(workers), 0.0, 40, uptime_s)


def _total_one_by_one(observation: Observation) -> np.ndarray:
    """The running sum worker by worker (what the Analyzer computed before it summed all at once)."""
    total = np.full(len(observation.input_timestamps_s), np.nan)
    for worker in observation.workers:
        values = np.interp(
            observation.input_timestamps_s, worker.timestamps_s, worker.throughput_rps, np.nan, np.nan
        )
        total = np.where(np.isnan(total), values, total + np.nan_to_num(values))
    return total


def test_total_throughput_equals_the_running_sum_worker_by_worker() -> None:
    rng = np.random.default_rng(21)
    for offset_s in (0.0, 2.5):  # sampled at the input rate's timestamps, and between them
        observation = _observation(rng, offset_s, None)
        total = _total_throughput(observation)
        assert np.array_equal(total, _total_one_by_one(observation), equal_nan=True)
        assert np.isfinite(total).sum() >= 10


def test_worker_rates_equal_one_worker_at_a_time() -> None:
    rng = np.random.default_rng(23)
    for uptime_s in (None, 40.0):  # with and without a warm-up cut (warm-up 10 s: from 30 s on)
        observation = _observation(rng, 0.0, uptime_s)
        from_s = -math.inf if uptime_s is None else 60.0 - uptime_s + 10.0
        single = [r for r in (_worker_rate(w, from_s) for w in observation.workers) if r is not None]
        rates = _worker_rates(observation, 10.0)
        assert len(rates["worker_throughput_rps"]) == len(single) >= 30
        for got, expected in zip(rates["worker_throughput_rps"], (t for t, _ in single), strict=True):
            assert got == expected
        for got, expected in zip(rates["worker_busy_ratio"], (b for _, b in single), strict=True):
            assert got == expected or (math.isnan(got) and math.isnan(expected))
