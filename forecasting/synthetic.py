"""Long synthetic workload histories for the retraining tests and benchmarks (seeded, deterministic).

A job's input rate over weeks, at a fixed step (1 minute by default), made of what real traffic shows:
a daily shape with a morning and a stronger evening peak, quieter weekends, a slow trend, autocorrelated
noise, short spikes (campaigns, replays) and missing stretches (scrape or exporter outages; those rows
are absent, as in a Prometheus export). Everything random comes from one `numpy.random.Generator` seeded
by the caller, so a seed always gives the same history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
MONDAY_2026_01_05_S = 1_767_571_200.0  # 2026-01-05T00:00:00Z, a Monday: histories start on a week boundary


@dataclass(frozen=True)
class WorkloadShape:
    """One job's traffic pattern; rates in records/s, durations in seconds."""

    base_rps: float = 10_000.0
    daily_amplitude: float = 0.6  # peak-to-trough swing of the daily shape, relative to the base
    weekend_factor: float = 0.65  # weekend traffic relative to a weekday at the same hour
    trend_per_week: float = 0.02  # relative growth per week
    noise: float = 0.04  # std of the multiplicative AR(1) noise
    noise_correlation_s: float = 600.0  # e-folding time of the noise
    spikes_per_week: float = 3.0
    missing_per_week: float = 2.0
    utc_offset_h: float = 0.0  # where the job's users live: shifts the daily shape


def daily_shape(hour_of_day: np.ndarray) -> np.ndarray:
    """Relative load by local hour, in 0..1: night trough ~04:00, morning peak ~10:00, evening ~20:30."""
    hour = np.asarray(hour_of_day, dtype=float)

    def bump(centre_h: float, width_h: float) -> np.ndarray:
        distance = np.minimum(np.abs(hour - centre_h), 24 - np.abs(hour - centre_h))  # on the day's circle
        return np.exp(-0.5 * (distance / width_h) ** 2)

    shape = 0.55 * bump(10.0, 2.5) + 1.0 * bump(20.5, 2.0) + 0.35 * bump(14.5, 3.0)
    return (shape - shape.min()) / (shape.max() - shape.min())


def generate(
    shape: WorkloadShape,
    seed: int,
    duration_s: float,
    step_s: float = 60.0,
    start_s: float = MONDAY_2026_01_05_S,
) -> pd.DataFrame:
    """Columns `timestamp` (epoch seconds) and `rate` (records/s); rows of missing stretches are absent."""
    rng = np.random.default_rng(seed)
    times_s = start_s + np.arange(int(duration_s // step_s)) * step_s
    local_s = times_s + shape.utc_offset_h * 3600.0
    hour = np.mod(local_s, DAY_S) / 3600.0
    weekday = np.floor(np.mod(local_s - MONDAY_2026_01_05_S, WEEK_S) / DAY_S)  # 0 = Monday
    weekend = np.where(weekday >= 5, shape.weekend_factor, 1.0)
    level = 1.0 - shape.daily_amplitude / 2 + shape.daily_amplitude * daily_shape(hour)
    trend = 1.0 + shape.trend_per_week * (times_s - start_s) / WEEK_S
    rates = shape.base_rps * trend * level * weekend * np.exp(_ar1(rng, times_s.size, step_s, shape))
    rates = _add_spikes(rng, rates, step_s, shape.spikes_per_week)
    keep = _missing_mask(rng, times_s.size, step_s, shape.missing_per_week)
    return pd.DataFrame({"timestamp": times_s[keep], "rate": np.round(rates[keep], 3)})


def generate_jobs(
    jobs: int, seed: int, duration_s: float, step_s: float = 60.0, start_s: float = MONDAY_2026_01_05_S
) -> pd.DataFrame:
    """Columns `job`, `timestamp`, `rate` for `jobs` different jobs (sizes, time zones, amplitudes vary)."""
    children = np.random.SeedSequence(seed).spawn(jobs + 1)
    variety = np.random.default_rng(children[0])
    frames = []
    for index in range(jobs):
        shape = WorkloadShape(
            base_rps=float(variety.choice([500.0, 2_000.0, 10_000.0, 50_000.0])),
            daily_amplitude=float(variety.uniform(0.4, 0.8)),
            weekend_factor=float(variety.uniform(0.5, 0.9)),
            trend_per_week=float(variety.uniform(-0.01, 0.05)),
            utc_offset_h=float(variety.choice([-8.0, -5.0, 0.0, 1.0, 8.0])),
        )
        job_seed = int(children[index + 1].generate_state(1)[0])
        frame = generate(shape, job_seed, duration_s, step_s, start_s)
        frames.append(frame.assign(job=f"job-{index:04d}")[["job", "timestamp", "rate"]])
    return pd.concat(frames, ignore_index=True)


def _ar1(rng: np.random.Generator, size: int, step_s: float, shape: WorkloadShape) -> np.ndarray:
    """Stationary AR(1) log-noise with the shape's std and correlation time."""
    phi = float(np.exp(-step_s / shape.noise_correlation_s))
    shocks = rng.normal(0.0, shape.noise * np.sqrt(1 - phi**2), size)
    noise = np.empty(size)
    previous = rng.normal(0.0, shape.noise)
    # scipy.signal.lfilter would do, but the explicit recursion states the model (and is fast enough)
    for i, shock in enumerate(shocks):
        previous = phi * previous + shock
        noise[i] = previous
    return noise


def _add_spikes(rng: np.random.Generator, rates: np.ndarray, step_s: float, per_week: float) -> np.ndarray:
    """Multiply short stretches (5-30 min) by 1.5-3x: traffic no seasonality predicts."""
    rates = rates.copy()
    count = rng.poisson(per_week * rates.size * step_s / WEEK_S)
    for _ in range(count):
        length = max(1, int(rng.uniform(300, 1800) // step_s))
        start = int(rng.integers(0, max(1, rates.size - length)))
        rates[start : start + length] *= rng.uniform(1.5, 3.0)
    return rates


def _missing_mask(rng: np.random.Generator, size: int, step_s: float, per_week: float) -> np.ndarray:
    """True for kept rows; missing stretches last 5 minutes to 3 hours."""
    keep = np.ones(size, dtype=bool)
    count = rng.poisson(per_week * size * step_s / WEEK_S)
    for _ in range(count):
        length = max(1, int(rng.uniform(300, 3 * 3600) // step_s))
        start = int(rng.integers(0, max(1, size - length)))
        keep[start : start + length] = False
    return keep
