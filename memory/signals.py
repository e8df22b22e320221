"""State signals from RocksDB's cumulative tickers and Flink's latency histograms (pure arithmetic).

RocksDB's block-cache hit and miss counts are cumulative since the instance opened and restart from zero
with the job, so the hit rate over a loop window comes from their increases (rates) over the window, not
from the lifetime totals. Justin's prototype reported 0 when there were no misses; the right value is 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from messages.types import OperatorState


def hit_rate(hits: float, misses: float) -> float:
    """hits / (hits + misses) over the window; 1.0 with reads and no misses; NaN with no reads at all
    (the cache was not used, so it says nothing) or when a count is unknown or negative."""
    if not (math.isfinite(hits) and math.isfinite(misses)) or hits < 0 or misses < 0:
        return math.nan
    reads = hits + misses
    if reads == 0:
        return math.nan
    return 1.0 if misses == 0 else hits / reads


def lowest_hit_rate(operators: Iterable[OperatorState]) -> float:
    """The most pressed cache among the operators (NaN when none has a hit rate)."""
    rates = [o.cache_hit_rate for o in operators if math.isfinite(o.cache_hit_rate)]
    return min(rates) if rates else math.nan


def highest_latency_ns(operators: Iterable[OperatorState]) -> float:
    """The slowest state access among the operators (NaN when none reports a latency)."""
    latencies = [o.state_latency_ns for o in operators if math.isfinite(o.state_latency_ns)]
    return max(latencies) if latencies else math.nan


def has_signal(operator: OperatorState) -> bool:
    return math.isfinite(operator.cache_hit_rate) or math.isfinite(operator.state_latency_ns)
