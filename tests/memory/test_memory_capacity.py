"""Capacity knowledge per (scale-out, memory level) and the cache curve between configurations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capacity.model import valid_windows
from memory.capacities import LevelCapacities
from memory.curve import CacheCurve, capacities_at, observed_curve
from memory.levels import MemoryLevels, block_cache_mb
from messages.types import WorkerSeries
from simulator.memory_model import PROFILES, capacity_factors

LEVELS = MemoryLevels(158.0, 3)


def _learn(
    capacities: LevelCapacities, level: int, scaleout: int, per_worker_rps: float, configuration: bool
) -> None:
    """Windows of `scaleout` workers near saturation, each processing `per_worker_rps` at CPU 0.9."""
    stamps = np.arange(12) * 5.0
    workers = tuple(
        WorkerSeries(
            f"tm-{i}", stamps, np.linspace(0.5, 0.9, 12), np.linspace(0.5, 0.9, 12) / 0.9 * per_worker_rps
        )
        for i in range(scaleout)
    )
    windows = valid_windows(workers, None, 60.0, 0.0)
    model = capacities.model(level, scaleout if configuration else None)
    model.learn(windows, 60.0, scaleout)
    model.estimate(windows, scaleout, 12, 60.0)


def test_each_level_and_each_configuration_learns_apart_and_survives_a_round_trip():
    capacities = LevelCapacities()
    _learn(capacities, 0, 4, 5_000.0, configuration=False)
    _learn(capacities, 1, 3, 9_000.0, configuration=True)
    restored = LevelCapacities.from_dict(capacities.to_dict())
    assert set(restored.models) == {(0, None), (1, 3)}
    assert restored.known_levels() == [0, 1]
    assert restored.observed(1) == pytest.approx(capacities.observed(1))
    assert restored.observed(1).keys() == {3}
    assert restored.observed(2) == {}


def test_the_shared_model_of_a_level_extrapolates_to_every_scaleout():
    capacities = LevelCapacities()
    _learn(capacities, 0, 4, 5_000.0, configuration=False)
    estimates = capacities.estimates(12, 60.0)
    assert set(estimates) == {0} and set(estimates[0]) == set(range(1, 13))
    assert capacities.estimates(12, 60.0, skip=0) == {}


def test_the_curve_interpolates_the_time_per_record_between_caches_and_is_flat_above_the_largest():
    curve = CacheCurve([(1000.0, 4_000.0), (2000.0, 8_000.0)])
    assert curve.at(1500.0) == pytest.approx(1 / ((1 / 4_000 + 1 / 8_000) / 2))  # 5,333, not 6,000
    assert curve.at(5000.0) == pytest.approx(8_000.0)  # no gain assumed from cache never tried


def test_between_two_observed_configurations_the_curve_matches_the_twins_cache_exactly():
    # the twin's read-heavy worker: hit rate = aggregate cache / working set, a miss costs 5 record times
    profile = PROFILES["read-heavy"]
    cache_per_worker_mb = block_cache_mb(316.0)  # 252 MB: 2 workers hit 25%, 7 workers 88%

    def per_worker(n: int) -> float:
        factor = capacity_factors(profile, 316.0, np.full(n, 1 / n))
        return 10_000.0 * float(factor[0])

    curve = CacheCurve([(n * cache_per_worker_mb, per_worker(n)) for n in (2, 7)])
    for n in (3, 4, 5, 6):
        assert curve.at(n * cache_per_worker_mb) == pytest.approx(per_worker(n), rel=1e-9)


def test_below_the_smallest_cache_the_curve_follows_its_lowest_slope_down_to_zero():
    curve = CacheCurve([(1000.0, 4_000.0), (2000.0, 8_000.0)])
    assert curve.at(500.0) == pytest.approx(2_000.0)
    assert curve.at(0.0) == 0.0
    falling = CacheCurve([(1000.0, 5_000.0), (2000.0, 4_000.0)])  # more cache, slower: noise, not a trend
    assert falling.at(500.0) == pytest.approx(5_000.0)
    assert CacheCurve([(1000.0, 4_000.0)]).at(10.0) == pytest.approx(4_000.0)
    assert not CacheCurve([]) and math.isnan(CacheCurve([]).at(100.0))


def test_the_curve_is_drawn_in_aggregate_block_cache_over_every_level():
    capacities = LevelCapacities()
    _learn(capacities, 0, 8, 4_000.0, configuration=True)  # 8 × 94 MB cache
    _learn(capacities, 1, 4, 8_000.0, configuration=True)  # 4 × 252 MB cache
    curve = observed_curve(capacities, LEVELS)
    assert list(curve.cache_mb) == [752.0, 1008.0]
    per_scaleout, sources = capacities_at(2, capacities, LEVELS, curve, 12)
    assert sources[2] == "cache-curve"
    assert per_scaleout[1] == pytest.approx(curve.at(568.0))  # 1 worker at level 2: 568 MB of cache
    assert per_scaleout[2] == pytest.approx(2 * curve.at(1136.0))
    per_scaleout, sources = capacities_at(0, capacities, LEVELS, curve, 12)
    assert sources[8] == "observed" and sources[7] == "cache-curve"


def test_skew_is_taken_out_of_the_curve_and_put_back_per_scaleout():
    # 8 workers whose busiest has twice the average share (balance 0.5) carry half of 8 even workers
    capacities = LevelCapacities()
    _learn(capacities, 1, 1, 8_000.0, configuration=True)
    capacities.observe_balance(8, 0.5)
    curve = observed_curve(capacities, LEVELS)
    assert list(curve.cache_mb) == [252.0]  # one worker: balanced by definition
    per_scaleout, _ = capacities_at(0, capacities, LEVELS, curve, 12)
    one_worker = capacities.observed(1)[1]
    assert per_scaleout[8] == pytest.approx(8 * 0.5 * one_worker)  # flat curve: only the skew differs
    assert capacities.balance_at(9) == 0.5 and capacities.balance_at(1) == 1.0
    assert LevelCapacities.from_dict(capacities.to_dict()).balance == {8: 0.5}


def test_balance_is_smoothed_and_impossible_values_are_ignored():
    capacities = LevelCapacities()
    capacities.observe_balance(4, 0.8)
    capacities.observe_balance(4, 0.6)
    capacities.observe_balance(4, 1.7)
    capacities.observe_balance(4, math.nan)
    assert capacities.balance_at(4) == pytest.approx(0.7 * 0.8 + 0.3 * 0.6)
    assert LevelCapacities().balance_at(6) == 1.0
