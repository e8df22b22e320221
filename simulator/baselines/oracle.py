"""The oracle floor: for every second, the fewest workers whose true capacity carries that second's input.

Ground truth from the twin, with perfect foresight and no restart cost: no policy can use fewer
worker-seconds without falling behind, so it is reported as a floor, not run as a policy.
"""

from __future__ import annotations

import numpy as np

from simulator.twin import Twin

ORACLE = "oracle"
"""The oracle floor's name in comparisons (it is no policy)."""


def oracle_workers(twin: Twin) -> np.ndarray:
    """Per simulated second, the fewest workers of a fresh deployment whose capacity ≥ that second's arrivals.

    Capacity is not monotone in the scale-out under key skew (a larger n can have a hotter worker): the
    smallest n whose capacity reaches the load is where the running maximum of the capacities first does.
    """
    arrivals = twin.history.view("arrivals")
    max_n = twin.params.max_parallelism
    capacities = np.array([twin.reference_capacity_rps(n) for n in range(1, max_n + 1)])
    envelope = np.maximum.accumulate(capacities)
    return np.minimum(np.searchsorted(envelope, arrivals, side="left") + 1, max_n)
