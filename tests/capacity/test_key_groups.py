"""The key-group loads solved over runs of groups equal the loads solved over every group, and a job at
Flink's largest max parallelism is solved without a matrix over its 32,768 groups."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls

from capacity.key_groups import _PRIOR_WEIGHT, key_group_loads, key_group_owner


def _over_every_group(groups: int, shares_seen: dict[int, np.ndarray], latest: int) -> np.ndarray:
    """The problem as first written: one column per key group (a groups × groups prior block)."""
    owner = key_group_owner(groups, latest)
    prior = (shares_seen[latest] / np.maximum(np.bincount(owner, minlength=latest), 1))[owner]
    rows = [key_group_owner(groups, p)[None, :] == np.arange(p)[:, None] for p in shares_seen]
    matrix = np.vstack([*rows, _PRIOR_WEIGHT * np.eye(groups)])
    loads, _ = nnls(matrix.astype(float), np.concatenate([*shares_seen.values(), _PRIOR_WEIGHT * prior]))
    return loads / loads.sum()


@pytest.mark.parametrize("seed", range(20))
def test_runs_of_groups_give_the_loads_of_every_group(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([16, 128, 256]))
    seen = sorted({int(p) for p in rng.integers(1, min(groups, 40), size=rng.integers(2, 5))})
    if len(seen) < 2:  # a single parallelism seen is the prior alone
        seen = [3, 7]
    shares = {p: rng.dirichlet(np.ones(p)) for p in seen}  # noisy, not always consistent with one load
    latest = int(rng.choice(seen))
    assert key_group_loads(groups, shares, latest) == pytest.approx(
        _over_every_group(groups, shares, latest), abs=1e-9
    )


def test_the_largest_max_parallelism_is_solved_and_fits_every_seen_parallelism():
    groups = 32_768
    truth = np.ones(groups)
    truth[5_000] = 2_000.0  # one hot key group
    truth /= truth.sum()
    shares = {p: np.bincount(key_group_owner(groups, p), weights=truth, minlength=p) for p in (4, 6, 9)}
    loads = key_group_loads(groups, shares, 9)
    assert loads.shape == (groups,) and loads.sum() == pytest.approx(1.0)
    for p, seen in shares.items():
        fitted = np.bincount(key_group_owner(groups, p), weights=loads, minlength=p)
        assert fitted == pytest.approx(seen, abs=0.01)
