"""The capacity model's track record: predictions for a rescale's target against what it then showed."""

from __future__ import annotations

import pytest

from capacity.track_record import CapacityTrackRecord

PREDICTED = {4: 40_000.0, 5: 50_000.0, 6: 60_000.0}


def _rescale(record: CapacityTrackRecord, start_s: float, to: int, realized_rps: float, settle_s=120.0):
    """Loops at 60 s: one at scale-out 4 predicting PREDICTED, then at `to` (realized) until settled."""
    record.observe(start_s, 4, {**PREDICTED, 4: 40_000.0}, trusted=True)
    t = start_s + 60.0
    while t <= start_s + 60.0 + settle_s:
        record.observe(t, to, {**PREDICTED, to: realized_rps}, trusted=True)
        t += 60.0


def test_no_rescale_seen_through_means_no_correction():
    record = CapacityTrackRecord()
    assert record.overestimate() == 1.0
    record.observe(0.0, 4, PREDICTED, trusted=True)
    record.observe(60.0, 5, PREDICTED, trusted=True)  # not settled yet
    assert record.overestimate() == 1.0 and not record.ratios


def test_a_prediction_that_was_too_high_raises_the_factor_and_one_too_low_does_not_lower_it():
    record = CapacityTrackRecord(quantile=1.0)
    _rescale(record, 0.0, 5, realized_rps=45_454.5)  # predicted 50k: 10% too high
    assert record.overestimate() == pytest.approx(1.1, rel=1e-4)
    low = CapacityTrackRecord()
    _rescale(low, 0.0, 6, realized_rps=66_000.0)  # predicted 60k: too low
    assert low.ratios[0] == pytest.approx(60 / 66) and low.overestimate() == 1.0


def test_the_estimate_is_compared_only_after_the_job_settled_there():
    record = CapacityTrackRecord(settle_s=120.0)
    record.observe(0.0, 4, PREDICTED, trusted=True)
    record.observe(60.0, 5, {**PREDICTED, 5: 10_000.0}, trusted=True)  # restarting: a low, early reading
    assert not record.ratios
    record.observe(120.0, 5, {**PREDICTED, 5: 49_000.0}, trusted=False)  # bad data: not compared
    assert not record.ratios
    record.observe(180.0, 5, {**PREDICTED, 5: 50_000.0}, trusted=True)
    assert list(record.ratios) == [1.0]


def test_a_rescale_superseded_before_it_settled_is_not_scored_against_the_next_one():
    record = CapacityTrackRecord(quantile=1.0)
    record.observe(0.0, 4, PREDICTED, trusted=True)
    record.observe(60.0, 5, PREDICTED, trusted=True)
    record.observe(120.0, 6, {**PREDICTED, 6: 50_000.0}, trusted=True)  # 5 -> 6: predicted 60k at 60 s
    record.observe(240.0, 6, {**PREDICTED, 6: 50_000.0}, trusted=True)
    assert list(record.ratios) == [pytest.approx(1.2)]


def test_broken_estimates_are_not_the_model_s_error():
    record = CapacityTrackRecord()
    _rescale(record, 0.0, 5, realized_rps=5_000.0)  # 10x: an empty window, not a model error
    assert not record.ratios and record.overestimate() == 1.0


def test_the_quantile_keeps_one_outlier_among_many_from_dominating():
    record = CapacityTrackRecord(window=20, quantile=0.9)
    for k in range(19):
        _rescale(record, 1_000.0 * k, 5, realized_rps=50_000.0 / 1.02)
    _rescale(record, 30_000.0, 5, realized_rps=50_000.0 / 1.5)
    assert 1.02 <= record.overestimate() < 1.1


def test_it_survives_a_restart_mid_comparison():
    record = CapacityTrackRecord(quantile=1.0)
    _rescale(record, 0.0, 5, realized_rps=50_000.0 / 1.05)
    record.observe(1_000.0, 5, PREDICTED, trusted=True)
    record.observe(1_060.0, 6, PREDICTED, trusted=True)  # pending: predicted 60k for 6
    restored = CapacityTrackRecord.from_dict(record.to_dict())
    restored.observe(1_200.0, 6, {**PREDICTED, 6: 50_000.0}, trusted=True)
    assert list(restored.ratios) == [pytest.approx(1.05), pytest.approx(1.2)]
