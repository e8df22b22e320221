"""Per-record work that shrinks with the parallelism, fitted per vertex from the runs' busy times."""

import math

import pytest

from planning.estimator import Estimate
from planning.estimator import Test as RateTest
from planning.state_cost import state_cost
from planning.testbed import PhaseReading, VertexReading

RATE_RPS = 1000.0


def estimate(parallelism: int, cost_s: dict[str, float]) -> Estimate:
    """A run whose last passed test shows each vertex busy for `cost_s` slot-seconds per source record."""
    vertices = tuple(
        VertexReading(name, RATE_RPS, RATE_RPS * c / parallelism, parallelism) for name, c in cost_s.items()
    )
    reading = PhaseReading(RATE_RPS, RATE_RPS, 0.0, 0.0, vertices)
    return Estimate(parallelism, 512.0, RATE_RPS, (RateTest(RATE_RPS, True, reading),), reading, 60.0)


def test_a_vertex_whose_work_splits_is_fitted_and_the_others_stay_flat():
    runs = [estimate(n, {"parse": 50e-6, "session": 100e-6 + 400e-6 / n}) for n in (1, 2, 4, 8)]
    cost = state_cost(runs)
    fitted = {v.name: (v.fixed_s, v.split_s) for v in cost.vertices}
    assert fitted["session"] == pytest.approx((100e-6, 400e-6), rel=1e-6)
    assert fitted["parse"] == pytest.approx((50e-6, 0.0), abs=1e-12)
    assert cost.factor(40) == pytest.approx((150 + 10) / 150, rel=1e-6)
    assert cost.factor(1) > cost.factor(8) > cost.factor(64) > 1.0


def test_work_that_rises_with_the_parallelism_is_no_state_cost():
    """Per-subtask overheads make a record a little dearer at more slots: not a cost to extrapolate down."""
    runs = [estimate(n, {"job": 140e-6 + 2e-6 * n}) for n in (1, 2, 4, 8)]
    assert state_cost(runs) is None


def test_runs_at_one_parallelism_or_without_busy_time_give_no_state_cost():
    assert state_cost([estimate(4, {"job": 1e-4}), estimate(4, {"job": 1.1e-4})]) is None
    assert state_cost([estimate(n, {"legacy": math.nan}) for n in (1, 8)]) is None
