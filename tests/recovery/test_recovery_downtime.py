"""Learned downtime: a median with the initial value as a prior — robust to outliers, follows real shifts."""

from __future__ import annotations

import json
import math

import pytest

from recovery.downtime import DowntimeModel, direction_of


def test_starts_from_the_papers_initial_downtimes():
    model = DowntimeModel()
    assert model.estimate("out") == 30
    assert model.estimate("in") == 15


def test_direction_treats_a_restart_at_the_same_scale_out_as_scaling_in():
    assert direction_of(4, 6) == "out"
    assert direction_of(6, 4) == "in"
    assert direction_of(5, 5) == "in"


def test_one_outlier_does_not_move_a_fresh_estimate():
    model = DowntimeModel()
    model.observe("out", 300)
    assert model.estimate("out") == 30  # median of 30, 30 (prior) and 300


def test_one_outlier_barely_moves_an_established_estimate():
    model = DowntimeModel()
    for downtime_s in (32, 29, 31):
        model.observe("out", downtime_s)
    model.observe("out", 300)
    assert model.estimate("out") == 30.5  # median of 29, 30, 30, 31, 32, 300


def test_learns_a_shifted_downtime_within_three_observations():
    model = DowntimeModel()
    for downtime_s in (58, 61, 60):
        model.observe("out", downtime_s)
    assert model.estimate("out") == 58  # median of 30, 30, 58, 60, 61
    model.observe("out", 62)
    assert model.estimate("out") == 59  # median of 30, 30, 58, 60, 61, 62 = (58 + 60) / 2
    assert model.estimate("in") == 15  # directions are learned apart


def test_old_observations_leave_the_window():
    model = DowntimeModel(window=5)
    for _ in range(5):
        model.observe("in", 60)
    for _ in range(5):
        model.observe("in", 20)
    assert model.observations_s("in") == [20] * 5
    assert model.estimate("in") == 20


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf])
def test_ignores_unmeasured_downtimes(bad):
    model = DowntimeModel()
    model.observe("out", bad)
    assert model.observations_s("out") == []
    assert model.estimate("out") == 30


def test_rejects_an_unknown_direction():
    with pytest.raises(ValueError, match="direction"):
        DowntimeModel().observe("up", 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="direction"):
        DowntimeModel().estimate("sideways")  # type: ignore[arg-type]


def test_round_trip_keeps_estimates_window_and_learning():
    model = DowntimeModel(initial_out_s=40, initial_in_s=10, window=3)
    for downtime_s in (50, 55, 52, 51):
        model.observe("out", downtime_s)
    model.observe("in", 12)
    restored = DowntimeModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert restored.to_dict() == model.to_dict()
    assert restored.observations_s("out") == [55, 52, 51]
    for m in (model, restored):
        m.observe("out", 80)  # pushes 55 out of the 3-wide window in both
    assert restored.estimate("out") == model.estimate("out") == 51  # median of 40, 40, 52, 51, 80
