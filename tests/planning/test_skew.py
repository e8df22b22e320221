"""The key-group skew model: it reproduces what the runs measured and extrapolates the imbalance."""

import numpy as np
import pytest

from capacity.key_groups import key_group_owner
from planning.skew import SkewModel, group_loads


def shares_at(loads, parallelism):
    return np.bincount(key_group_owner(len(loads), parallelism), weights=loads, minlength=parallelism)


@pytest.fixture
def loads():
    counts = np.random.default_rng(3).poisson(5.0, 128).astype(float)
    return counts / counts.sum()


def test_the_estimated_loads_reproduce_every_reading(loads):
    readings = [(n, tuple(shares_at(loads, n))) for n in (1, 3, 5, 8)]
    estimated = group_loads(128, readings)
    for n, shares in readings:
        assert shares_at(estimated.mean, n) == pytest.approx(shares, abs=1e-12)
    assert 0 < estimated.shape < np.inf
    assert sorted(np.concatenate(estimated.cells).tolist()) == list(range(128))  # cells partition the groups


def test_the_imbalance_at_a_run_parallelism_is_the_measured_one(loads):
    readings = [(n, tuple(shares_at(loads, n))) for n in (2, 5, 8)]
    model = SkewModel({"count": 1.0}, {"count": group_loads(128, readings)})
    measured = shares_at(loads, 5)
    assert model.imbalance(5) == pytest.approx(measured.max() * 5, rel=1e-9)


@pytest.mark.parametrize("parallelism", [3, 40, 43, 64])
def test_even_loads_leave_only_flinks_range_quantization(parallelism):
    even = np.full(128, 1 / 128)
    readings = [(n, tuple(shares_at(even, n))) for n in (1, 2, 4, 8)]
    model = SkewModel({"count": 1.0, "parse": 2.0}, {"count": group_loads(128, readings)})
    held = np.bincount(key_group_owner(128, parallelism), minlength=parallelism)
    # the hottest slot: the even vertex's 1/n plus the keyed vertex's largest range, over the mean 3/n
    expected = (2.0 / parallelism + held.max() / 128) / (3.0 / parallelism)
    assert model.imbalance(parallelism) == pytest.approx(expected, rel=1e-9)


def test_unresolved_skew_raises_the_planned_imbalance(loads):
    """Beyond what the runs resolve the model provisions for a quantile of what the loads could be."""
    readings = [(n, tuple(shares_at(loads, n))) for n in (1, 4, 8)]
    known = group_loads(128, readings)
    cautious = SkewModel({"count": 1.0}, {"count": known}, quantile=0.9)
    hopeful = SkewModel({"count": 1.0}, {"count": known}, quantile=0.1)
    assert cautious.imbalance(40) > hopeful.imbalance(40) >= 1.0


@pytest.mark.parametrize("hot_group", [5, 37, 90])
def test_a_hot_key_the_runs_cannot_isolate_is_provisioned_for(loads, hot_group):
    """One group carries a quarter of the records (a hot key); runs of 1..8 subtasks see it only inside a
    cell of a few groups. The planned imbalance at 64 subtasks must not fall below the true one: spread
    evenly over its cell, the hot key would look a few times lighter than it is."""
    skewed = 0.75 * loads
    skewed[hot_group] += 0.25
    readings = [(n, tuple(shares_at(skewed, n))) for n in range(1, 9)]
    model = SkewModel({"count": 1.0}, {"count": group_loads(128, readings)})
    assert model.imbalance(64) >= shares_at(skewed, 64).max() * 64


def test_a_key_group_census_resolves_the_hot_key_exactly(loads):
    """With one reading at one subtask per key group every group's load is measured: the imbalance at
    any parallelism is the true one, not a quantile over what the ranges hide."""
    skewed = 0.75 * loads
    skewed[37] += 0.25
    readings = [(n, tuple(shares_at(skewed, n))) for n in range(1, 9)]
    census = group_loads(128, [*readings, (128, tuple(skewed))])
    assert all(len(cell) == 1 for cell in census.cells)
    measured = SkewModel({"count": 1.0}, {"count": census})
    bounded = SkewModel({"count": 1.0}, {"count": group_loads(128, readings)})
    for parallelism in (40, 64, 100):
        truth = shares_at(skewed, parallelism).max() * parallelism
        assert measured.imbalance(parallelism) == pytest.approx(truth, rel=1e-9)
    assert measured.imbalance(64) < bounded.imbalance(64)
