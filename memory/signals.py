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


MAX_STATE_LATENCY_NS = 60e9
"""A state access slower than a minute is no measurement but bad data (a unit error, a garbled sample):
taken as is, it would read as memory pressure and restart the job into more memory."""


def hit_rate_of(operator: OperatorState) -> float:
    """The operator's hit rate; NaN when unknown or outside [0, 1] (bad data)."""
    return plausible_hit_rate(operator.cache_hit_rate)


def latency_ns_of(operator: OperatorState) -> float:
    """The operator's state-access latency; NaN when unknown, negative or above a minute (bad data)."""
    return plausible_latency_ns(operator.state_latency_ns)


def plausible_hit_rate(rate: float) -> float:
    return rate if math.isfinite(rate) and 0.0 <= rate <= 1.0 else math.nan


def plausible_latency_ns(latency_ns: float) -> float:
    return latency_ns if math.isfinite(latency_ns) and 0.0 <= latency_ns <= MAX_STATE_LATENCY_NS else math.nan


def implausible(operators: Iterable[OperatorState]) -> list[str]:
    """Names of the operators that reported a signal outside its plausible range (ignored as bad data)."""
    return [
        o.name
        for o in operators
        if (not math.isnan(o.cache_hit_rate) and math.isnan(hit_rate_of(o)))
        or (not math.isnan(o.state_latency_ns) and math.isnan(latency_ns_of(o)))
    ]


def lowest_hit_rate(operators: Iterable[OperatorState]) -> float:
    """The most pressed cache among the operators (NaN when none has a plausible hit rate)."""
    rates = [r for r in map(hit_rate_of, operators) if math.isfinite(r)]
    return min(rates) if rates else math.nan


def highest_latency_ns(operators: Iterable[OperatorState]) -> float:
    """The slowest state access among the operators (NaN when none reports a plausible latency)."""
    latencies = [t for t in map(latency_ns_of, operators) if math.isfinite(t)]
    return max(latencies) if latencies else math.nan


def has_signal(operator: OperatorState) -> bool:
    return math.isfinite(hit_rate_of(operator)) or math.isfinite(latency_ns_of(operator))
