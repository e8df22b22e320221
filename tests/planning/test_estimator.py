"""The Capacity Estimator: doubling then bisection to 1%, the pass rule, the timings it spends."""

from itertools import pairwise

import pytest

from planning.estimator import EstimateError, EstimatorSettings, estimate_mst, passed
from planning.testbed import PhaseReading
from tests.planning.fakes import CurveTestbed


@pytest.mark.parametrize("mst", [750.0, 12_345.0, 3.3e6])
def test_the_estimate_lands_within_the_sensitivity_of_the_true_mst(mst):
    testbed = CurveTestbed(lambda slots, memory: mst, max_rate_rps=5 * mst)
    estimate = estimate_mst(testbed, 3, 512.0)
    # a test passes up to 1/0.99 of the MST (the 99% rule); bisection stops within 1% of the last rate
    assert 0.97 * mst <= estimate.mst_rps <= mst / 0.99
    assert any(not t.passed for t in estimate.tests)
    assert testbed.deployments == [(3, 512.0)]


def test_rates_double_until_the_first_failure_then_bisect():
    testbed = CurveTestbed(lambda slots, memory: 1000.0, max_rate_rps=2000.0)
    tests = estimate_mst(testbed, 1, 1.0).tests
    rates = [t.rate_rps for t in tests]
    first_failure = next(i for i, t in enumerate(tests) if not t.passed)
    assert all(b == 2 * a for a, b in pairwise(rates[: first_failure + 1]))
    after = rates[first_failure + 1 :]
    assert after and all(
        min(rates[:i]) < r < max(rates) for i, r in enumerate(after, start=first_failure + 1)
    )


def test_timings_are_the_settings_and_the_count_is_capped():
    settings = EstimatorSettings(warmup_s=50, cooldown_s=5, ramp_s=7, observe_s=11, max_tests=3)
    testbed = CurveTestbed(lambda slots, memory: 1e6, max_rate_rps=1e6)  # no backlog: cooldowns as set
    estimate = estimate_mst(testbed, 2, 1.0, settings)
    assert len(estimate.tests) == 3
    assert testbed.seconds == estimate.testbed_s == 50 + 3 * (5 + 7 + 11)


def test_a_growing_backlog_fails_even_at_99_percent_of_the_rate():
    settings = EstimatorSettings()
    steady = PhaseReading(1000.0, 995.0, 100.0, 100.0)
    growing = PhaseReading(1000.0, 995.0, 100.0, 100.0 + 0.02 * 1000 * 30)
    assert passed(steady, settings, 30.0)
    assert not passed(growing, settings, 30.0)
    assert not passed(PhaseReading(1000.0, 980.0, 0.0, 0.0), settings, 30.0)


def test_a_cooldown_lasts_until_the_last_tests_backlog_drained():
    settings = EstimatorSettings()  # the warm-up at 5x the MST leaves 480,000 records: 485 s to drain
    testbed = CurveTestbed(lambda slots, memory: 1000.0, max_rate_rps=5000.0)
    first = estimate_mst(testbed, 1, 1.0, settings).tests[0]
    assert first.reading.pending_start <= 0.01 * first.rate_rps * settings.observe_s
    capped = EstimatorSettings(max_drain_s=45)
    estimate = estimate_mst(CurveTestbed(lambda slots, memory: 1000.0, max_rate_rps=5000.0), 1, 1.0, capped)
    assert estimate.tests[0].reading.pending_start > 100_000  # at most 45 s of draining before each test
    per_test = capped.ramp_s + capped.observe_s
    assert estimate.testbed_s <= capped.warmup_s + len(estimate.tests) * (45 + per_test)


def test_a_job_that_carries_nothing_is_named_at_its_warm_up_not_after_hours_of_cooldowns():
    """Every test waited its 10-minute cooldown for a drain that never came (41 h of testbed time for a
    plan), then the plan said only that the surrogate predicts 0."""
    testbed = CurveTestbed(lambda slots, memory: 0.0, max_rate_rps=5_000.0)
    with pytest.raises(EstimateError, match="processed no record in the 120 s warm-up"):
        estimate_mst(testbed, 2, 158.0)
    assert testbed.seconds == 120.0
