"""The online regression equals a batch least-squares fit, whatever way the data arrives."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity.regression import RegressionStats

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
points = st.lists(st.tuples(st.floats(0, 1, allow_nan=False), finite), min_size=3, max_size=200)


def _lstsq(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    design = np.column_stack([np.ones_like(xs), xs])
    (intercept, slope), *_ = np.linalg.lstsq(design, ys, rcond=None)
    return float(intercept), float(slope)


def _close(a: float, b: float, scale: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * scale)


@settings(max_examples=300, deadline=None)
@given(points, st.lists(st.integers(0, 200), max_size=6), st.booleans())
def test_any_split_of_batches_equals_numpy_least_squares(data, cuts, one_by_one_first):
    xs = np.array([p[0] for p in data])
    ys = np.array([p[1] for p in data])
    if np.ptp(xs) < 1e-3:  # slope is ill-conditioned for both methods; the guard test covers it
        xs = xs + np.linspace(0, 0.5, len(xs))
    bounds = sorted({0, len(xs), *(c % (len(xs) + 1) for c in cuts)})
    stats = RegressionStats()
    for start, end in itertools.pairwise(bounds):
        if one_by_one_first and start == 0:
            for x, y in zip(xs[start:end], ys[start:end], strict=True):
                stats = stats.add(float(x), float(y))
        else:
            stats = stats.merge(RegressionStats.from_arrays(xs[start:end], ys[start:end]))
    intercept, slope = _lstsq(xs, ys)
    scale = max(1.0, float(np.abs(ys).max()))
    assert stats.n == len(xs)
    assert _close(stats.slope, slope, scale * 10)
    assert _close(stats.intercept, intercept, scale * 10)
    assert _close(stats.mean_x, float(xs.mean()), 1.0)
    assert _close(stats.m2_x, float(((xs - xs.mean()) ** 2).sum()), 1.0)


def test_welford_one_by_one_equals_batch():
    rng = np.random.default_rng(3)
    xs, ys = rng.uniform(0.2, 0.9, 500), rng.normal(40_000, 5_000, 500)
    one_by_one = RegressionStats()
    for x, y in zip(xs, ys, strict=True):
        one_by_one = one_by_one.add(float(x), float(y))
    batch = RegressionStats.from_arrays(xs, ys)
    for name in ("mean_x", "mean_y", "m2_x", "m2_y", "c_xy"):
        assert math.isclose(getattr(one_by_one, name), getattr(batch, name), rel_tol=1e-9)


def test_nan_and_constant_cpu_are_guarded():
    stats = RegressionStats.from_arrays(np.array([0.5, np.nan, 0.5, 0.5]), np.array([1.0, 2.0, np.inf, 3.0]))
    assert stats.n == 2
    assert math.isnan(stats.slope)
    assert stats.add(math.nan, 1.0) == stats
    assert RegressionStats().merge(stats) == stats
    assert math.isnan(RegressionStats().var_x)


def test_reverse_slope_is_the_inverse_of_regressing_x_on_y():
    rng = np.random.default_rng(5)
    ys = rng.uniform(1_000, 8_000, 2_000)  # light load: X moves little beside its noise
    xs = 0.1 + ys / 60_000 + rng.normal(0, 0.03, 2_000)  # noise in X only, as with a CPU gauge
    stats = RegressionStats.from_arrays(xs, ys)
    _, x_per_y = _lstsq(ys, xs)
    assert math.isclose(stats.reverse_slope, 1 / x_per_y, rel_tol=1e-9)
    assert abs(stats.reverse_slope - 60_000) / 60_000 < 0.05  # unbiased by the noise in X
    assert stats.slope < 0.8 * 60_000  # regressing Y on X is attenuated by it
    assert math.isnan(RegressionStats.from_arrays(np.array([0.5, 0.4]), np.array([1.0, 2.0])).reverse_slope)


def test_round_trips_through_dict():
    stats = RegressionStats.from_arrays(np.array([0.1, 0.5, 0.9]), np.array([10.0, 50.0, 95.0]))
    assert RegressionStats.from_dict(stats.to_dict()) == stats


@settings(max_examples=200, deadline=None)
@given(points, points, st.floats(0.05, 1.0))
def test_fading_before_a_merge_equals_weighted_least_squares(old, new, weight):
    """Exponential forgetting: the old points count `weight` times each, the new ones once."""
    xs = np.array([p[0] for p in old + new]) + np.linspace(0, 0.5, len(old) + len(new))
    ys = np.array([p[1] for p in old + new])
    w = np.r_[np.full(len(old), weight), np.ones(len(new))]
    k = len(old)
    stats = RegressionStats.from_arrays(xs[:k], ys[:k]).faded(weight)
    stats = stats.merge(RegressionStats.from_arrays(xs[k:], ys[k:]))
    mean_x, mean_y = np.average(xs, weights=w), np.average(ys, weights=w)
    slope = float(w @ ((xs - mean_x) * (ys - mean_y)) / (w @ (xs - mean_x) ** 2))
    scale = max(1.0, float(np.abs(ys).max()))
    assert math.isclose(stats.n, w.sum(), rel_tol=1e-12)
    assert _close(stats.slope, slope, scale * 10)
    assert _close(stats.intercept, float(mean_y - slope * mean_x), scale * 10)
    assert RegressionStats.from_dict(stats.to_dict()) == stats
