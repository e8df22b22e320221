"""Capacity of a stateful job at a (scale-out, memory level) it has not run at, from where it has run.

Why not the capacity model's own extrapolation: it scales the average worker linearly with the number of
workers, which holds when a worker's speed does not depend on n. A stateful operator that reads through
RocksDB's block cache is slower the more of its reads miss, and its hit rate follows its cache / working-
set ratio (Justin §3). Keys — and with them the working set — are spread over the workers, so a worker's
working set shrinks as n grows while its cache stays: fewer workers each miss more. On the twin, the
linear extrapolation promised 5 workers at level 1 twice their real capacity, and the job fell behind.

What is kept: a worker's capacity depends on n and the level only through its cache / working-set ratio.
Keys are not spread evenly: the busiest worker holds a share max_share of the state and of the records,
and the job saturates with it. With the balance b(n) = 1 / (n × max_share) (mean over max of the workers'
throughputs, measured at each scale-out), that worker's ratio is cache(level) / (max_share × W) = A / W
for the effective aggregate cache A = n × b(n) × cache(level), and the job's capacity is n × b(n) × its
capacity. Every observed capacity C, at any level, is a point (A, C / (n × b(n))) of one curve; a
configuration's capacity is n × b(n) × the curve at its A. (Without the balance, one worker — perfectly
balanced — and nine skewed ones fell on one curve, and the curve promised 35% more than 7 workers at
level 0 gave an update-heavy job.)

- between observed points: linear in the time per record (1 / capacity), not in the capacity. A record
  costs its hit-path time plus its misses × a miss's cost, and the miss ratio falls linearly with the
  cache under uniform access (the twin) and convexly under skewed access (LRU miss-ratio curves): the time
  per record is linear or convex in A, so interpolating it is exact or errs low. Interpolating the
  capacity itself errs high between a cache-starved point and a cached one (a 1/x between them): on the
  twin's read-heavy job it promised 3 workers at level 2 15% more than they carried, and the scale-in to
  them cost 87 s over the SLO;
- above the largest A seen: the value there (no gain assumed from cache never tried);
- below the smallest: the line through the two lowest points (slope ≥ 0), floored at 0. A hit-rate-driven
  capacity is convex in the hit rate (1 / (1 + misses × cost)), so this line errs on the low side.

It is used only for a job that reads through the cache (it has shown a hit rate): a write-only operator
does not depend on the cache, and keeps the capacity model's estimates.
"""

from __future__ import annotations

import math

import numpy as np

from memory.capacities import LevelCapacities
from memory.levels import MemoryLevels, block_cache_mb


class CacheCurve:
    """Per-worker capacity (records/s) as a function of the aggregate block cache (MB)."""

    def __init__(self, points: list[tuple[float, float]]) -> None:
        by_cache: dict[float, list[float]] = {}
        for cache_mb, per_worker_rps in points:
            if math.isfinite(cache_mb) and math.isfinite(per_worker_rps) and per_worker_rps > 0:
                by_cache.setdefault(cache_mb, []).append(per_worker_rps)
        self.cache_mb = np.array(sorted(by_cache))
        self.per_worker_rps = np.array([float(np.mean(by_cache[c])) for c in self.cache_mb])

    def __bool__(self) -> bool:
        return len(self.cache_mb) > 0

    def at(self, aggregate_cache_mb: float) -> float:
        """Per-worker capacity at this aggregate cache (NaN without points)."""
        caches, rates = self.cache_mb, self.per_worker_rps
        if len(caches) == 0:
            return math.nan
        if aggregate_cache_mb >= caches[0] or len(caches) == 1:
            return 1.0 / float(np.interp(aggregate_cache_mb, caches, 1.0 / rates))
        slope = max((rates[1] - rates[0]) / (caches[1] - caches[0]), 0.0)
        return max(float(rates[0] + slope * (aggregate_cache_mb - caches[0])), 0.0)


def observed_curve(capacities: LevelCapacities, levels: MemoryLevels) -> CacheCurve:
    """The curve through every capacity observed at any level and scale-out."""
    points = []
    for level in capacities.known_levels():
        if level > levels.max_level:
            continue
        for n, capacity_rps in capacities.observed(level).items():
            even_workers = n * capacities.balance_at(n)
            points.append(
                (even_workers * block_cache_mb(levels.managed_mb(level)), capacity_rps / even_workers)
            )
    return CacheCurve(points)


def capacities_at(
    level: int,
    capacities: LevelCapacities,
    levels: MemoryLevels,
    curve: CacheCurve,
    max_scaleout: int,
) -> tuple[dict[int, float], dict[int, str]]:
    """Capacity per scale-out 1..max at `level`: observed where the job ran so, else from the curve."""
    observed = capacities.observed(level)
    cache_per_worker_mb = block_cache_mb(levels.managed_mb(level))
    per_scaleout, sources = {}, {}
    for n in range(1, max_scaleout + 1):
        if n in observed:
            per_scaleout[n], sources[n] = observed[n], "observed"
        elif curve:
            even_workers = n * capacities.balance_at(n)
            per_scaleout[n] = even_workers * curve.at(even_workers * cache_per_worker_mb)
            sources[n] = "cache-curve"
    return per_scaleout, sources
