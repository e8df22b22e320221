"""Hit rate from ticker increases, memory levels and Flink's managed-memory split."""

from __future__ import annotations

import math

import pytest

from memory.levels import MemoryLevels, block_cache_mb, write_buffer_mb
from memory.signals import has_signal, highest_latency_ns, hit_rate, lowest_hit_rate
from messages.types import OperatorState


def test_hit_rate_is_hits_over_reads_in_the_window():
    assert hit_rate(900.0, 100.0) == pytest.approx(0.9)


def test_no_misses_is_a_full_hit_rate_not_zero():
    assert hit_rate(5_000.0, 0.0) == 1.0  # Justin's prototype reported 0 here


def test_no_reads_at_all_gives_no_hit_rate():
    assert math.isnan(hit_rate(0.0, 0.0))


@pytest.mark.parametrize(
    ("hits", "misses"), [(math.nan, 10.0), (10.0, math.nan), (math.inf, 1.0), (-1.0, 5.0)]
)
def test_unknown_or_impossible_counts_give_no_hit_rate(hits, misses):
    assert math.isnan(hit_rate(hits, misses))


def test_the_most_pressed_operator_speaks_for_the_job_and_nan_is_skipped():
    operators = [
        OperatorState("a", True, cache_hit_rate=0.9, state_latency_ns=2e5),
        OperatorState("b", True, cache_hit_rate=0.6, state_latency_ns=math.nan),
        OperatorState("c", True),
    ]
    assert lowest_hit_rate(operators) == 0.6
    assert highest_latency_ns(operators) == 2e5
    assert math.isnan(lowest_hit_rate(operators[2:]))
    assert [has_signal(o) for o in operators] == [True, True, False]


def test_level_x_doubles_the_base_per_slot_and_none_means_no_managed_memory():
    levels = MemoryLevels(158.0, 3)
    assert [levels.managed_mb(x) for x in levels.all] == [158.0, 316.0, 632.0, 1264.0]
    assert levels.managed_mb(None) == 0.0
    with pytest.raises(ValueError):
        levels.managed_mb(4)


def test_observed_memory_maps_to_the_nearest_level_within_bounds():
    levels = MemoryLevels(158.0, 3)
    assert [levels.level_of(mb) for mb in (158, 300, 632, 5000, 64)] == [0, 1, 2, 3, 0]
    assert (
        levels.level_of(0.0) is None and levels.level_of(None) is None and levels.level_of(math.nan) is None
    )


def test_managed_memory_splits_into_memtable_and_cache_as_justin_reports():
    # Justin §3: 128 MB → 32 MB MemTable + 96 MB cache; 256 → 64 + 192; 512 → 64 + 448
    assert [(write_buffer_mb(m), block_cache_mb(m)) for m in (128, 256, 512)] == [
        (32, 96),
        (64, 192),
        (64, 448),
    ]
    assert (write_buffer_mb(158), block_cache_mb(158)) == (64, 94)
    assert block_cache_mb(0) == 0
