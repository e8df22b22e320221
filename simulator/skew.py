"""Key skew as Flink produces it: keys hash into key groups, contiguous key-group ranges go to subtasks.

Equal-weight keys still give unequal subtask loads, because a finite number of keys lands unevenly in the
key groups and because `max_parallelism` is rarely a multiple of the parallelism. The hottest subtask then
caps the whole job through backpressure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def key_group_counts(num_keys: int, max_parallelism: int, rng: np.random.Generator) -> np.ndarray:
    """Keys per key group when `num_keys` equal-weight keys are hashed uniformly (a seeded stand-in for murmur)."""
    if num_keys < 1 or max_parallelism < 1:
        raise ValueError("num_keys and max_parallelism must be >= 1")
    groups = rng.integers(0, max_parallelism, size=num_keys)
    return np.bincount(groups, minlength=max_parallelism)


@dataclass(frozen=True)
class KeyGroups:
    """A keyed vertex's keys hashed into key groups: how many keys and how much load each group holds."""

    counts: np.ndarray
    """Keys per key group."""
    loads: np.ndarray
    """Relative records per key group (`subtask_shares` normalises): keys weighted by their popularity."""

    @classmethod
    def hashed(
        cls, num_keys: int, max_parallelism: int, rng: np.random.Generator, zipf_exponent: float = 0.0
    ) -> KeyGroups:
        """`num_keys` keys hashed uniformly (a seeded stand-in for murmur); key k (1-based) carries weight
        k^-zipf_exponent (0: equal weights, the draws then match `key_group_counts`)."""
        if num_keys < 1 or max_parallelism < 1:
            raise ValueError("num_keys and max_parallelism must be >= 1")
        groups = rng.integers(0, max_parallelism, size=num_keys)
        counts = np.bincount(groups, minlength=max_parallelism)
        if zipf_exponent == 0:
            return cls(counts, counts.astype(float))
        weights = np.arange(1, num_keys + 1, dtype=float) ** -zipf_exponent
        loads = np.bincount(groups, weights=weights, minlength=max_parallelism)
        return cls(counts, loads)

    def keys_held(self, parallelism: int) -> np.ndarray:
        """Keys each subtask holds at `parallelism` (its key groups' keys)."""
        owners = operator_index_for_key_group(np.arange(len(self.counts)), parallelism, len(self.counts))
        return np.bincount(owners, weights=self.counts, minlength=parallelism)


def operator_index_for_key_group(key_group: np.ndarray | int, parallelism: int, max_parallelism: int):
    """Flink's KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup: keyGroup * parallelism / maxParallelism."""
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(f"parallelism must be in 1..{max_parallelism}, got {parallelism}")
    return np.asarray(key_group) * parallelism // max_parallelism


def subtask_shares(key_counts: np.ndarray, parallelism: int) -> np.ndarray:
    """Share of the input each subtask (index = position in the worker list) receives; sums to exactly 1."""
    max_parallelism = len(key_counts)
    owners = operator_index_for_key_group(np.arange(max_parallelism), parallelism, max_parallelism)
    return np.bincount(owners, weights=key_counts, minlength=parallelism) / np.sum(key_counts)


def job_capacity_rps(shares: np.ndarray, capacities_rps: np.ndarray) -> float:
    """Input rate at which the first worker saturates: min_i(cap_i / share_i) over workers with a share."""
    loaded = shares > 0
    if not loaded.any():
        return float("inf")
    return float(np.min(capacities_rps[loaded] / shares[loaded]))
