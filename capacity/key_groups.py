"""Flink's key groups: which subtask holds each group at a parallelism, and each group's share of a keyed
vertex's records from the subtask shares seen at several parallelisms (capacity/dag.py explains why)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

_PRIOR_WEIGHT = 0.05
"""Weight of the even parts against the observed shares in `key_group_loads` (a share is ~1/p, a group's
part ~1/groups: the prior only decides among loads the shares cannot tell apart)."""


def key_group_owner(max_parallelism: int, parallelism: int) -> np.ndarray:
    """Subtask of each key group (Flink's KeyGroupRangeAssignment: keyGroup · parallelism / maxParallelism)."""
    return np.arange(max_parallelism) * parallelism // max_parallelism


def key_group_loads(groups: int, shares_seen: dict[int, np.ndarray], latest: int) -> np.ndarray:
    """Per key group, its share of the records: the non-negative loads whose sums over every seen
    parallelism's ranges match that parallelism's subtask shares, and among loads that fit equally, the
    closest to the latest parallelism's even parts (a weak prior).

    Solved over atoms, the runs of key groups that every seen parallelism (the latest included) assigns to
    the same subtask: the shares cannot tell a run's groups apart and the prior is even within it, so the
    optimum spreads each run's load evenly, and the problem over runs (a run of n groups weighs its prior
    by 1/√n) has the same optimum as the one over groups. A job at Flink's largest max parallelism (32,768)
    has a few dozen runs, where a matrix over its groups takes gigabytes. A row that is no share of its
    parallelism (a damaged store: 3 shares at parallelism 2, a NaN) is left out, or for the latest one taken
    as even, rather than failing every analysis."""
    usable = {p: s for p, s in shares_seen.items() if p <= groups and share_row(s, p) is not None}
    owners = {p: key_group_owner(groups, p) for p in {*usable, latest}}
    owner = owners[latest]
    latest_shares = share_row(shares_seen.get(latest), latest)
    if latest_shares is None:
        latest_shares = np.full(latest, 1.0 / latest)
    prior = (latest_shares / np.maximum(np.bincount(owner, minlength=latest), 1))[owner]
    if len(usable) < 2:
        return prior
    starts = np.flatnonzero(np.any([np.diff(o, prepend=-1) != 0 for o in owners.values()], axis=0))
    sizes = np.diff(starts, append=groups)
    rows = [owners[p][starts][None, :] == np.arange(p)[:, None] for p in usable]
    weights = _PRIOR_WEIGHT / np.sqrt(sizes)
    matrix = np.vstack([*rows, np.diag(weights)])
    target = np.concatenate([*usable.values(), weights * sizes * prior[starts]])
    runs, _ = nnls(matrix.astype(float), target)
    loads = np.repeat(runs / sizes, sizes)
    total = loads.sum()
    return loads / total if total > 0 else prior


def share_row(values: object, length: int) -> np.ndarray | None:
    """`values` as a row of subtask shares where they can be one: `length` finite values ≥ 0, sum > 0."""
    try:
        row = np.array(values, dtype=float)
    except (TypeError, ValueError):
        return None
    if row.shape != (length,) or not np.isfinite(row).all() or (row < 0).any() or not row.sum() > 0:
        return None
    return row
