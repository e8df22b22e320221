"""How managed memory changes what a stateful worker can process: the twin's model of Justin §3.

A stateful operator keeps its keyed state in RocksDB, whose managed memory is split into a write buffer
(MemTable) and a block cache. Justin's microbenchmarks (§3, Fig. 4: 1,000,000 uniformly drawn keys,
1,000 B events, one operator at 1..8 tasks and 128..2,048 MB) give three shapes:

- **read-heavy**: capacity rises with the cache / working-set ratio: a read that misses the cache goes
  to the SSD through the LSM levels;
- **write-heavy**: flat: writes land in the MemTable whatever the cache (only a MemTable below 64 MB,
  at 128 MB, was slightly slower);
- **update-heavy** (read then overwrite): needs a minimum (128 MB sustained the rate at no parallelism)
  and then plateaus, the write path dominating;
- stateless operators use no managed memory and are unaffected.

The numbers and where they come from:

- Split (Justin §3, `memory.levels.write_buffer_mb`): MemTable = the largest power of two strictly below
  half the memory, at most 64 MB; the rest is cache (128 MB → 32 + 96, 256 → 64 + 192, 512 → 64 + 448;
  158 → 64 + 94).
- Hit rate: keys are drawn uniformly, so an LRU cache holding a fraction c / W of a worker's working set
  W hits with probability min(1, c / W) (the independent-reference model with equal popularities). A
  worker's working set is its key share of the operator's state, so scaling out shrinks it too.
- Read state: `state_mb` = 2,000 MB and a miss costing `miss_cost` = 5 hit-path record times. Justin's
  read workload sustained 50k/s from (4 tasks; 1,024 MB) or (8; 512), was slightly below it at (8; 256)
  and not reached at (4; 512). Under the hit-rate model those four statements hold together only for a
  working set between 1,792 and 3,584 MB (2,000: 1M keys × 1 KB values, doubled for RocksDB's block and
  index overhead) and a miss cost of at least 4.8 hit-path times ((8; 256): θ = 192 / 250 = 0.77 must
  bring a worker that sustains ≥ 12.5k/s fully cached down to just below 6.25k/s).
- Write stalls: a MemTable below 64 MB adds `stall_cost` × (64 / MemTable − 1) record times per write:
  0.05 for plain writes ("slightly below" at 128 MB), 1.0 for updates (128 MB "cannot sustain").
- Updates: reads cost `miss_cost` = 0.5 of an update's (heavier) record time on a miss: the plateau that
  Justin saw for 4 and 8 tasks, where more memory gave no significant gain.
- State-access latency: a cache hit 2 µs, a MemTable write 3 µs (in-memory RocksDB operations including
  Flink's serialization), a miss its share of the record time: `miss_cost` hit-path record times. With the
  twin's per-worker speed (~10-20k records/s) a miss is ~0.3 ms, so Justin's 1 ms latency threshold does
  not fire in the twin; the hit rate does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memory.levels import WRITE_BUFFER_MAX_MB as MEMTABLE_MAX_MB
from memory.levels import block_cache_mb as cache_mb
from memory.levels import write_buffer_mb as memtable_mb


@dataclass(frozen=True)
class StateProfile:
    """How a job's keyed operator uses its state, per record it processes."""

    name: str
    operator: str
    """Operator name the twin reports the state signals under."""
    reads_per_record: float = 0.0
    writes_per_record: float = 0.0
    state_mb: float = 0.0
    """Working set of the whole operator in the block cache (split over workers by key share)."""
    miss_cost: float = 0.0
    """Extra time of a read that misses the cache, in hit-path record times."""
    stall_cost: float = 0.0
    """Extra time per write per unit of MemTable shortfall below 64 MB (see module docstring)."""
    hit_latency_ns: float = 2_000.0
    write_latency_ns: float = 3_000.0

    @property
    def stateful(self) -> bool:
        return self.reads_per_record > 0 or self.writes_per_record > 0


PROFILES: dict[str, StateProfile] = {
    "stateless": StateProfile("stateless", "map"),
    "read-heavy": StateProfile("read-heavy", "lookup", reads_per_record=1.0, state_mb=2000.0, miss_cost=5.0),
    "write-heavy": StateProfile("write-heavy", "store", writes_per_record=1.0, state_mb=2000.0, stall_cost=0.05),
    "update-heavy": StateProfile(
        "update-heavy", "update", reads_per_record=1.0, writes_per_record=1.0, state_mb=2000.0,
        miss_cost=0.5, stall_cost=1.0,
    ),
}  # fmt: skip


def hit_rates(profile: StateProfile, managed_mb: float, shares: np.ndarray) -> np.ndarray:
    """Block-cache hit rate of each worker: cache / its working set, capped at 1 (uniform keys, LRU)."""
    working_set = np.asarray(shares, dtype=float) * profile.state_mb
    cache = cache_mb(managed_mb)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(working_set > 0, np.minimum(1.0, cache / working_set), 1.0)


def capacity_factors(profile: StateProfile, managed_mb: float, shares: np.ndarray) -> np.ndarray:
    """Each worker's capacity relative to a fully cached one (1.0 for a stateless operator)."""
    shares = np.asarray(shares, dtype=float)
    if not profile.stateful:
        return np.ones(len(shares))
    misses = profile.reads_per_record * (1.0 - hit_rates(profile, managed_mb, shares)) * profile.miss_cost
    memtable = memtable_mb(managed_mb)
    shortfall = MEMTABLE_MAX_MB / memtable - 1.0 if memtable > 0 else 1e6
    stalls = profile.writes_per_record * profile.stall_cost * max(shortfall, 0.0)
    return 1.0 / (1.0 + misses + stalls)


@dataclass(frozen=True)
class StateRates:
    """Per record the job processes: cache hits, misses, state accesses and their summed latency."""

    hits: float
    misses: float
    accesses: float
    latency_ns: float
    used_mb: float
    """Managed memory the operator's RocksDB instances hold in total (MemTables + filled caches)."""


def state_rates(
    profile: StateProfile, managed_mb: float, shares: np.ndarray, record_time_ns: float
) -> StateRates:
    """What the state backend does per record at this configuration (shares: each worker's key share).

    `record_time_ns` is the hit-path time of one record on a speed-1.0 worker; a miss takes `miss_cost`
    of them.
    """
    shares = np.asarray(shares, dtype=float)
    if not profile.stateful:
        return StateRates(0.0, 0.0, 0.0, 0.0, 0.0)
    theta = hit_rates(profile, managed_mb, shares)
    reads = profile.reads_per_record
    hit_share = float(shares @ theta)  # records go to workers by key share
    miss_ns = profile.miss_cost * record_time_ns
    read_ns = reads * (hit_share * profile.hit_latency_ns + (1 - hit_share) * miss_ns)
    write_ns = profile.writes_per_record * profile.write_latency_ns
    filled = np.minimum(cache_mb(managed_mb), shares * profile.state_mb) + memtable_mb(managed_mb)
    return StateRates(
        hits=reads * hit_share,
        misses=reads * (1 - hit_share),
        accesses=reads + profile.writes_per_record,
        latency_ns=read_ns + write_ns,
        used_mb=float(np.minimum(filled, managed_mb).sum()),
    )
