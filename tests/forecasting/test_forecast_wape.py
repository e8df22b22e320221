"""WAPE: Σ|y − ŷ| / Σy on finite pairs; None when nothing can be weighed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.accuracy import wape


def test_hand_computed_case():
    # |10-12| + |20-18| + |30-33| = 7 over 60
    assert wape(np.array([10.0, 20.0, 30.0]), np.array([12.0, 18.0, 33.0])) == pytest.approx(7 / 60)


def test_over_and_under_forecasts_weigh_the_same():
    assert wape(np.array([100.0]), np.array([150.0])) == wape(np.array([100.0]), np.array([50.0])) == 0.5


def test_zero_actuals_inside_a_series_still_count_their_error():
    # |0-5| + |10-10| = 5 over 10
    assert wape(np.array([0.0, 10.0]), np.array([5.0, 10.0])) == pytest.approx(0.5)


@pytest.mark.parametrize("actual", [[0.0, 0.0], [], [np.nan, np.nan]])
def test_nothing_to_weigh_by_gives_none(actual):
    assert wape(np.array(actual), np.ones(len(actual))) is None


def test_nan_pairs_are_left_out_on_either_side():
    actual = np.array([10.0, np.nan, 30.0, 40.0])
    forecast = np.array([11.0, 100.0, 27.0, np.nan])
    # only pairs 0 and 2: (1 + 3) / 40
    assert wape(actual, forecast) == pytest.approx(0.1)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shapes differ"):
        wape(np.ones(3), np.ones(4))


pairs = st.lists(st.tuples(st.floats(1.0, 1e6), st.floats(0.5, 1.5)), min_size=1, max_size=50)


@settings(max_examples=100, deadline=None)
@given(pairs, st.floats(0.01, 100.0))
def test_perfect_is_zero_and_scaling_both_series_changes_nothing(pairs, scale):
    actual = np.array([a for a, _ in pairs])
    forecast = actual * np.array([f for _, f in pairs])
    assert wape(actual, actual) == 0.0
    assert math.isclose(
        wape(actual * scale, forecast * scale), wape(actual, forecast), rel_tol=1e-9, abs_tol=1e-12
    )
