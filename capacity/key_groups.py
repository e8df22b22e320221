"""Flink's key groups: which subtask holds each group at a parallelism, and each group's share of a keyed
vertex's records from the subtask shares seen at several parallelisms (capacity/dag.py explains why)."""

from __future__ import annotations

from functools import lru_cache

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
    starts = np.flatnonzero(np.diff(key_group_runs(groups, tuple(sorted(owners))), prepend=-1))
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


@lru_cache(maxsize=256)
def key_group_runs(groups: int, seen: tuple[int, ...]) -> np.ndarray:
    """Per key group, the index of its run: the longest ranges of groups that every parallelism `seen` keeps
    on one subtask (the shares seen cannot tell a run's groups apart). Parallelisms above `groups` are left
    out; with none left, all groups are one run. Cached, so the array is read-only."""
    kept = [p for p in seen if 1 <= p <= groups] or [1]
    cuts = np.any([np.diff(key_group_owner(groups, p), prepend=-1) != 0 for p in kept], axis=0)
    runs = np.cumsum(cuts) - 1
    runs.setflags(write=False)
    return runs


def unseen_shares(loads: np.ndarray, seen: tuple[int, ...], parallelism: int) -> np.ndarray:
    """Subtask shares at `parallelism` from the key-group loads, read warily where the parallelisms `seen`
    cannot tell the groups apart. Within a run (`key_group_runs`) the loads are even parts of the run's
    total: where this parallelism cuts the run, the part above the typical group's load may sit in one
    group, a hot key, which no rescale splits. It goes to the run's subtask that then carries most (the conservative reading,
    as mape/skew.py's hot group): spread evenly, the twin's hot-key job promised a third more at parallelism
    13 than its hot subtask carried. The typical load is the median group's, and for a run of half the
    groups or more (one or two parallelisms seen) the median of the groups outside it: such a run sets the
    median itself, and a hot key in it was not moved at all."""
    groups = len(loads)
    owner = key_group_owner(groups, parallelism)
    if parallelism in seen:
        return np.bincount(owner, weights=loads, minlength=parallelism)
    runs = key_group_runs(groups, seen)
    typical = np.full(runs[-1] + 1, np.median(loads))
    for run in np.flatnonzero(2 * np.bincount(runs) >= groups):
        outside = loads[runs != run]
        typical[run] = np.median(outside) if len(outside) else typical[run]
    base = np.minimum(loads, typical[runs])
    excess = np.bincount(runs, weights=loads - base)
    row = np.bincount(owner, weights=base, minlength=parallelism)
    first = owner[np.flatnonzero(np.diff(runs, prepend=-1))]
    last = owner[np.flatnonzero(np.diff(runs, append=runs[-1] + 1))]
    order = np.argsort(-excess, kind="stable")  # the largest first: each sees where the larger ones went
    order = order[excess[order] > 0]
    done = 0
    for i in np.flatnonzero(first[order] != last[order]):  # the runs cut here: at most parallelism − 1
        whole = order[done:i]  # kept on one subtask: their excess is known to be there
        row += np.bincount(first[whole], weights=excess[whole], minlength=parallelism)
        run = order[i]
        subtasks = np.arange(first[run], last[run] + 1)
        row[subtasks[np.argmax(row[subtasks])]] += excess[run]
        done = i + 1
    return row + np.bincount(first[order[done:]], weights=excess[order[done:]], minlength=parallelism)
