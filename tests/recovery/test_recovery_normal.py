"""Normal behaviour: exact running mean and variance of workload − throughput of a processing job."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery.normal import NormalBehaviour


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-1e5, 1e5, allow_nan=False), min_size=2, max_size=300),
    st.lists(st.integers(0, 300), max_size=5),
)
def test_any_batching_equals_the_statistics_of_all_samples(diffs, cuts):
    diff = np.array(diffs)
    workload = np.full(len(diff), 2e5)
    throughput = workload - diff  # > 0 for every diff drawn
    model = NormalBehaviour()
    bounds = sorted({0, len(diff), *(c % (len(diff) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        model.update(workload[start:end], throughput[start:end])
    assert model.n == len(diff)
    scale = max(1.0, float(np.abs(diff).max()))
    assert math.isclose(model.mean_rps, float(diff.mean()), rel_tol=1e-9, abs_tol=1e-9 * scale)
    assert math.isclose(model.std_rps, float(diff.std(ddof=1)), rel_tol=1e-7, abs_tol=1e-7 * scale)


def test_outage_and_unknown_samples_are_not_normal_behaviour():
    model = NormalBehaviour()
    used = model.update(
        np.array([100.0, 100.0, np.nan, 100.0, 100.0]),
        np.array([90.0, 0.0, 50.0, np.nan, 110.0]),
    )
    assert used == 2
    assert model.mean_rps == 0  # (10 + -10) / 2
    assert model.std_rps == math.sqrt(200)  # ((10)² + (-10)²) / (2 - 1)


def test_trained_only_after_enough_samples():
    model = NormalBehaviour(min_samples=5)
    model.update(np.full(4, 100.0), np.full(4, 99.0))
    assert not model.trained
    model.update(np.array([100.0]), np.array([99.0]))
    assert model.trained


def test_round_trip():
    model = NormalBehaviour(min_samples=7)
    model.update(np.array([100.0, 120.0, 90.0]), np.array([95.0, 100.0, 91.0]))
    restored = NormalBehaviour.from_dict(json.loads(json.dumps(model.to_dict())))
    assert restored.to_dict() == model.to_dict()
    assert restored.std_rps == model.std_rps
