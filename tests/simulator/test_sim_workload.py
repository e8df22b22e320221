"""Reading recorded traces and generating the built-in sine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.workload import builtin_sine, load_trace

TRACES = ["sine_60000_6h.csv", "advertising_6h_550K_max.csv", "tm_6h_100K_max.csv"]


@pytest.mark.parametrize("name", TRACES)
def test_shared_traces_load_as_six_hours_of_rates(name, recorded_workloads):
    path = recorded_workloads / name
    rates = load_trace(path)
    independent = pd.read_csv(path, sep="|")  # a second reader as the reference
    assert independent.iloc[:, 0].diff().dropna().eq(1).all()  # no gaps: one row per second
    assert len(rates) == len(independent) >= 21_600
    np.testing.assert_array_equal(rates, independent.iloc[:, 1].to_numpy(dtype=float))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_gaps_hold_the_previous_value(tmp_path):
    rates = load_trace(write(tmp_path, "second|count\n0|10\n1|20\n4|50\n5|60\n"))
    np.testing.assert_array_equal(rates, [10, 20, 20, 20, 50, 60])


def test_trace_time_starts_at_its_first_row(tmp_path):
    np.testing.assert_array_equal(load_trace(write(tmp_path, "second|count\n7|1\n8|2")), [1, 2])


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("0|10\n1|20\n", ":1:"),  # no header
        ("second|count\n0|10\n1|20|3\n", ":3:"),  # extra field
        ("second|count\n0|10\n1|abc\n", ":3:"),  # not a number
        ("second|count\n0|10\n2|20\n1|30\n", ":4:"),  # time goes back
        ("second|count\n0|10\n0|20\n", ":3:"),  # duplicate second
        ("second|count\n0|10\n1|-5\n", ":3:"),  # negative rate
        ("second|count\n0|10\n1|inf\n", ":3:"),  # not finite
        ("second|count\n", "no data"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, text, where):
    with pytest.raises(ValueError, match=where):
        load_trace(write(tmp_path, text))


def test_builtin_sine_resembles_the_wordcount_trace():
    rates = builtin_sine()
    assert len(rates) == 21_600
    assert rates.mean() == pytest.approx(32_500, rel=0.01)
    hour = 3600
    # two periods of 3 h starting at the mean, rising: peaks at 0:45 and 3:45, troughs at 2:15 and 5:15
    smooth = np.convolve(rates, np.ones(61) / 61, mode="valid")
    assert smooth.max() == pytest.approx(60_000, abs=150) and smooth.min() == pytest.approx(5_000, abs=150)
    smooth = np.concatenate((np.full(30, np.nan), smooth, np.full(30, np.nan)))
    for peak_s in (0.75 * hour, 3.75 * hour):
        assert abs(np.argmax(smooth[int(peak_s) - 1800 : int(peak_s) + 1800]) - 1800) < 120
    for trough_s in (2.25 * hour, 5.25 * hour):
        assert abs(np.argmin(smooth[int(trough_s) - 1800 : int(trough_s) + 1800]) - 1800) < 120
    noise = rates - (32_500 + 27_500 * np.sin(2 * np.pi * np.arange(21_600) / 10_800))
    assert noise.std() == pytest.approx(325, rel=0.05)  # 1 % of the mean


def test_builtin_sine_is_seeded():
    np.testing.assert_array_equal(builtin_sine(600, seed=3), builtin_sine(600, seed=3))
    assert not np.array_equal(builtin_sine(600, seed=3), builtin_sine(600, seed=4))
    assert (builtin_sine(600, noise_sd_rps=0.0) >= 0).all()
