"""The synthetic long histories: deterministic, and showing what retraining has to learn."""

from __future__ import annotations

import numpy as np
import pandas as pd

from forecasting.synthetic import (
    DAY_S,
    MONDAY_2026_01_05_S,
    WEEK_S,
    WorkloadShape,
    daily_shape,
    generate,
    generate_jobs,
)


def test_a_seed_always_gives_the_same_history_and_another_seed_another():
    first = generate(WorkloadShape(), seed=11, duration_s=2 * DAY_S)
    again = generate(WorkloadShape(), seed=11, duration_s=2 * DAY_S)
    other = generate(WorkloadShape(), seed=12, duration_s=2 * DAY_S)
    pd.testing.assert_frame_equal(first, again)
    assert not np.array_equal(first.rate.to_numpy()[:100], other.rate.to_numpy()[:100])


def test_the_history_has_daily_and_weekly_seasons_and_a_trend():
    shape = WorkloadShape(noise=0.0, spikes_per_week=0, missing_per_week=0, trend_per_week=0.05)
    frame = generate(shape, seed=1, duration_s=3 * WEEK_S)
    hour = np.mod(frame.timestamp, DAY_S) // 3600
    weekday = np.mod(frame.timestamp - MONDAY_2026_01_05_S, WEEK_S) // DAY_S
    weekdays, weekends = frame[weekday < 5], frame[weekday >= 5]
    assert 0.6 < weekends.rate.mean() / weekdays.rate.mean() < 0.7  # weekend_factor 0.65, plus trend
    evening, night = frame[hour == 20].rate.mean(), frame[hour == 4].rate.mean()
    assert evening > 1.6 * night  # (1 + 0.6/2) / (1 - 0.6/2) = 1.86 before noise
    first_week, last_week = frame[frame.timestamp < frame.timestamp[0] + WEEK_S], frame.tail(len(frame) // 3)
    assert 1.07 < last_week.rate.mean() / first_week.rate.mean() < 1.13  # two weeks of 5 % growth


def test_spikes_and_missing_stretches_appear_at_their_rates():
    frame = generate(WorkloadShape(spikes_per_week=20, missing_per_week=20), seed=3, duration_s=WEEK_S)
    steps = np.diff(frame.timestamp.to_numpy())
    assert (steps > 60).sum() >= 5  # holes in the timestamps: missing rows, not NaN
    assert len(frame) < WEEK_S / 60
    clean = generate(WorkloadShape(spikes_per_week=0, missing_per_week=0), seed=3, duration_s=WEEK_S)
    ratio = frame.set_index("timestamp").rate / clean.set_index("timestamp").rate
    assert ratio.max() > 1.4  # some stretch is multiplied by 1.5-3 (same noise draws shifted: loose bound)


def test_many_jobs_differ_in_size_and_phase():
    frame = generate_jobs(5, seed=4, duration_s=DAY_S, step_s=300.0)
    assert sorted(frame.job.unique()) == [f"job-{i:04d}" for i in range(5)]
    peaks = frame.loc[frame.groupby("job").rate.idxmax(), "timestamp"] % DAY_S
    assert frame.groupby("job").rate.mean().nunique() == 5
    assert peaks.nunique() > 1  # different time zones peak at different UTC hours
    pd.testing.assert_frame_equal(frame, generate_jobs(5, seed=4, duration_s=DAY_S, step_s=300.0))


def test_the_daily_shape_peaks_in_the_evening_and_is_lowest_at_night():
    hours = np.arange(0, 24, 0.25)
    shape = daily_shape(hours)
    assert shape.min() == 0.0 and shape.max() == 1.0
    assert 19.5 <= hours[np.argmax(shape)] <= 21.5
    assert 1.0 <= hours[np.argmin(shape)] <= 6.0
