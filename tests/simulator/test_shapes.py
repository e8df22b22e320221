"""The load-shape family (simulator/shapes.py): stated seeds, the form each kind promises, the split."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.shapes import DEVELOPMENT, FAMILY, HELD_OUT, PEAK_RPS, QUIET_START_S, SUITES, shape_rates


@pytest.mark.parametrize("name", list(FAMILY))
def test_every_shape_is_reproducible_and_scaled_to_the_shared_peak(name):
    rates = shape_rates(name)
    assert np.array_equal(rates, shape_rates(name))
    assert rates.max() == pytest.approx(PEAK_RPS)
    assert rates.min() >= 0.01 * PEAK_RPS and np.all(np.isfinite(rates))
    assert len(rates) == FAMILY[name].duration_s


def test_step_surges_step_by_one_and_a_half_to_three_after_a_quiet_start():
    rates = shape_rates("step-surges")
    base = np.median(rates[:QUIET_START_S])
    assert rates[:QUIET_START_S].max() < 1.1 * base  # only noise before the first surge
    minutes = rates[: len(rates) // 60 * 60].reshape(-1, 60).mean(axis=1) / base
    up = minutes > 1.3
    inside = up[1:-1] & up[:-2] & up[2:]  # minutes of a surge, not the ones it starts or ends in
    surging = minutes[1:-1][inside]
    assert len(surging) >= 5 and surging.min() > 1.4 and surging.max() < 3.1


def test_a_sudden_flash_crowd_doubles_the_load_within_a_minute_a_slow_one_does_not():
    def fastest_minute_rise(name: str) -> float:
        minutes = shape_rates(name)[:14_400].reshape(-1, 60).mean(axis=1)
        return float(np.max(minutes[1:] / minutes[:-1]))

    assert fastest_minute_rise("flash-crowd-sudden") > 1.6
    assert fastest_minute_rise("flash-crowd-slow") < 1.15


def test_the_fast_daily_cycle_has_weekends_below_the_weekdays():
    shape = FAMILY["daily-fast"]
    day_s = int(shape.params["day_s"])
    peaks = shape.rates()[: 7 * day_s].reshape(7, day_s).max(axis=1)
    assert peaks[5:].max() < 0.8 * peaks[:5].min()


def test_held_out_shapes_are_apart_from_the_development_ones():
    assert not {s.name for s in DEVELOPMENT} & {s.name for s in HELD_OUT}
    assert not {s.seed for s in DEVELOPMENT} & {s.seed for s in HELD_OUT}
    assert all(s.held_out for s in HELD_OUT) and not any(s.held_out for s in DEVELOPMENT)
    assert set(SUITES["family"]) == set(FAMILY)


def test_an_unknown_shape_names_the_family():
    with pytest.raises(KeyError, match="step-surges"):
        shape_rates("tsunami")
