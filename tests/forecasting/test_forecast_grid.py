"""Samples onto the bucket grid: de-duplication, NaN, completeness, gaps, retention."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.grid import BucketGrid, bucket_means, fill_gaps


def grid(max_gap: int = 3, retention: int = 1000, reset_gap: int = 100) -> BucketGrid:
    return BucketGrid(
        resolution_s=10.0, max_gap_buckets=max_gap, retention_buckets=retention, reset_gap_buckets=reset_gap
    )


def snapshot(g: BucketGrid) -> tuple[int, list[float], list[bool]]:
    return g.first, g.values.tolist(), g.observed.tolist()


def test_bucket_means_average_per_bucket():
    buckets, means = bucket_means(np.array([0.0, 5.0, 10.0, 19.9, 35.0]), np.array([1, 3, 10, 20, 7.0]), 10.0)
    assert buckets.tolist() == [0, 1, 3]
    assert means.tolist() == [2.0, 15.0, 7.0]


def test_fill_gaps_interpolates_short_runs_and_holds_long_ones():
    values = np.array([10.0, np.nan, np.nan, 40.0, np.nan, np.nan, np.nan, np.nan, 0.0])
    filled, observed = fill_gaps(values, max_gap_buckets=2)
    assert filled.tolist() == [10.0, 20.0, 30.0, 40.0, 40.0, 40.0, 40.0, 40.0, 0.0]
    assert observed.tolist() == [True, False, False, True, False, False, False, False, True]


def test_a_bucket_is_final_only_once_data_past_its_end_arrived():
    g = grid()
    g.add(np.arange(0.0, 10.0, 5.0), np.array([1.0, 3.0]))  # bucket 0 holds 0 s and 5 s
    assert g.values.size == 0
    g.add(np.array([10.0]), np.array([9.0]))  # the watermark reaches the end of bucket 0
    assert snapshot(g) == (0, [2.0], [True])


def test_overlapping_windows_fed_twice_give_the_same_buckets_as_once():
    seconds = np.arange(0.0, 300.0, 5.0)
    rates = 100 + seconds
    once = grid()
    once.add(seconds, rates)
    twice = grid()
    for start in range(0, 300, 30):  # 60-s windows every 30 s: each sample arrives twice
        window = (seconds >= start) & (seconds < start + 60)
        twice.add(seconds[window], rates[window])
    assert snapshot(twice) == snapshot(once)
    assert twice.late_samples > 0  # the re-sent samples of final buckets were dropped, not re-averaged


def test_while_a_bucket_is_open_the_latest_value_for_a_timestamp_wins():
    g = grid()
    g.add(np.array([0.0, 5.0]), np.array([100.0, 100.0]))
    g.add(np.array([5.0]), np.array([300.0]))  # revised value for 5 s
    g.add(np.array([10.0]), np.array([0.0]))
    assert g.values.tolist() == [200.0]


def test_nan_negative_and_implausible_rates_are_ignored_and_do_not_overwrite():
    g = grid()
    g.add(np.array([0.0, 5.0]), np.array([100.0, 200.0]))
    g.add(np.array([5.0, 6.0, 7.0, 8.0]), np.array([np.nan, -1.0, np.inf, 1.79e308]))
    g.add(np.array([np.nan, 10.0]), np.array([5.0, 0.0]))
    assert g.values.tolist() == [150.0]


def test_samples_for_final_buckets_are_late_and_dropped():
    g = grid()
    g.add(np.array([0.0, 10.0, 20.0]), np.array([1.0, 2.0, 3.0]))
    before = snapshot(g)
    g.add(np.array([3.0, 15.0]), np.array([1000.0, 1000.0]))
    assert snapshot(g) == before
    assert g.late_samples == 2


def test_a_gap_closes_only_when_data_beyond_it_arrive_then_short_gaps_are_interpolated():
    g = grid(max_gap=3)
    g.add(np.array([0.0, 10.0]), np.array([100.0, 100.0]))
    g.add(np.array([50.0]), np.array([500.0]))  # buckets 2..4 empty, bucket 5 still open
    assert g.values.tolist() == [100.0, 100.0]
    g.add(np.array([60.0]), np.array([600.0]))
    assert g.values.tolist() == [100.0, 100.0, 200.0, 300.0, 400.0, 500.0]
    assert g.observed.tolist() == [True, True, False, False, False, True]


def test_longer_gaps_hold_the_last_value_and_are_marked():
    g = grid(max_gap=3)
    g.add(np.array([0.0, 60.0, 70.0]), np.array([100.0, 700.0, 700.0]))  # buckets 1..5 empty: 5 > 3
    assert g.values.tolist() == [100.0] * 6 + [700.0]
    assert g.observed.tolist() == [True] + [False] * 5 + [True]


def test_a_gap_longer_than_the_reset_gap_restarts_the_history():
    g = grid(reset_gap=5)
    g.add(np.array([0.0, 10.0, 20.0]), np.array([1.0, 2.0, 3.0]))
    g.add(np.array([200.0, 210.0]), np.array([9.0, 9.0]))
    assert g.epoch == 1
    assert snapshot(g) == (20, [9.0], [True])


def test_retention_keeps_only_the_last_buckets():
    g = grid(retention=5)
    g.add(np.arange(0.0, 101.0, 10.0), np.arange(11.0))
    assert snapshot(g) == (5, [5.0, 6.0, 7.0, 8.0, 9.0], [True] * 5)
    assert g.end == 10


def test_state_round_trip_keeps_open_samples():
    g = grid()
    g.add(np.array([0.0, 5.0, 10.0, 12.0]), np.array([1.0, 2.0, 3.0, 4.0]))
    restored = grid()
    restored.load_state(json.loads(json.dumps(g.state_dict(), allow_nan=False)))
    for each in (g, restored):
        each.add(np.array([20.0]), np.array([0.0]))
    assert snapshot(restored) == snapshot(g) == (0, [1.5, 3.5], [True, True])


samples = st.lists(
    st.tuples(st.integers(0, 400), st.floats(0, 1e5)), min_size=1, max_size=80, unique_by=lambda s: s[0]
)


@settings(max_examples=150, deadline=None)
@given(samples, st.lists(st.tuples(st.integers(0, 79), st.integers(1, 80)), max_size=8))
def test_any_chunking_and_resending_of_a_stream_gives_the_same_grid(stream, resends):
    """Windows may overlap and repeat; as long as they arrive in time order, the grid is the same."""
    stream.sort()
    stamps = np.array([s[0] for s in stream], dtype=float)
    rates = np.array([s[1] for s in stream])
    reference = grid()
    reference.add(stamps, rates)
    chunked = grid()
    for index in range(len(stream)):
        chunked.add(stamps[index : index + 1], rates[index : index + 1])
        for start, length in resends:  # re-send an earlier window (all of it already seen)
            if start <= index:
                chunked.add(
                    stamps[max(0, index - length) : index + 1], rates[max(0, index - length) : index + 1]
                )
    assert snapshot(chunked) == snapshot(reference)
