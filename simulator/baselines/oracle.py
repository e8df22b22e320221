"""The oracle floor: for every second, the fewest workers whose true capacity carries that second's input.

Ground truth from the twin, with perfect foresight and no restart cost: no policy can use fewer
worker-seconds without falling behind, so it is reported as a floor, not run as a policy.
"""

from __future__ import annotations

import numpy as np

from simulator.twin import Twin

ORACLE = "oracle"
"""The oracle floor's name in comparisons (it is no policy)."""


def oracle_workers(twin: Twin, arrivals_rps: np.ndarray | None = None) -> np.ndarray:
    """Per simulated second, the fewest workers of a fresh deployment whose capacity ≥ that second's arrivals
    (by default the seconds the twin has run; `arrivals_rps`: any per-second load, e.g. its whole trace).

    Capacity is not monotone in the scale-out under key skew (a larger n can have a hotter worker): the
    smallest n whose capacity reaches the load is where the running maximum of the capacities first does.
    """
    arrivals = twin.history.view("arrivals") if arrivals_rps is None else np.asarray(arrivals_rps)
    max_n = twin.max_parallelism  # a vertex's may be below the twin's: 64 crashed scoring at 65
    capacities = np.array([twin.reference_capacity_rps(n) for n in range(1, max_n + 1)])
    envelope = np.maximum.accumulate(capacities)
    return np.minimum(np.searchsorted(envelope, arrivals, side="left") + 1, max_n)


def fewest_workers_with_rescales(needed: np.ndarray, max_rescales: int) -> float:
    """Mean workers of the cheapest schedule that gives every second at least `needed` workers and changes
    its scale-out at most `max_rescales` times (the start is free): the oracle floor under a rescale budget.

    Still no restart cost and perfect foresight, so it is a floor too; with issue 16's budget (3 rescales per
    hour) it says how close to the per-second floor a policy within that budget can get at all. Changes
    only pay at the seconds where the need changes (a later rise or an earlier fall is never dearer), so
    the dynamic programme runs over those runs of equal need: cost[r, n] = fewest worker-seconds so far
    ending at n with r changes."""
    needed = np.asarray(needed, dtype=int).ravel()
    if len(needed) == 0:
        return float("nan")
    starts = np.flatnonzero(np.diff(needed, prepend=needed[0] - 1))
    lengths = np.diff(np.append(starts, len(needed)))
    scaleouts = np.arange(1, int(needed.max()) + 1)
    budget = max(int(max_rescales), 0)
    cost = np.full((budget + 1, len(scaleouts)), np.inf)
    cost[0] = 0.0  # the start: any scale-out, no change yet
    for i, (need, length) in enumerate(zip(needed[starts], lengths, strict=True)):
        if i:  # arriving with one change more: from the best other scale-out of one change less
            order = np.argsort(cost[:-1], axis=1)
            best, second = order[:, 0], order[:, min(1, len(scaleouts) - 1)]
            rows = np.arange(budget)
            changed = np.repeat(cost[rows, best][:, None], len(scaleouts), axis=1)
            at_best = scaleouts[None, :] - 1 == best[:, None]
            changed[at_best] = np.broadcast_to(cost[rows, second][:, None], changed.shape)[at_best]
            cost[1:] = np.minimum(cost[1:], changed)
        cost += scaleouts * length
        cost[:, scaleouts < need] = np.inf
    return float(cost.min() / len(needed))
