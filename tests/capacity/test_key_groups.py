"""The key-group loads solved over runs of groups equal the loads solved over every group, a job at Flink's
largest max parallelism is solved without a matrix over its 32,768 groups, and a parallelism never seen
gets the shares a hot key group hidden in a run may give it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls

from capacity.key_groups import _PRIOR_WEIGHT, key_group_loads, key_group_owner, unseen_shares


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


def _shares(loads: np.ndarray, parallelism: int) -> np.ndarray:
    return np.bincount(key_group_owner(len(loads), parallelism), weights=loads, minlength=parallelism)


@pytest.mark.parametrize("hot_group", [0, 37, 70, 127])
def test_a_hot_key_group_hidden_in_a_run_binds_at_a_parallelism_never_seen(hot_group):
    truth = np.ones(128)
    truth[hot_group] = 40.0  # one key carries a quarter of the records
    truth /= truth.sum()
    seen = (12,)
    loads = key_group_loads(128, {12: _shares(truth, 12)}, 12)
    for p in range(13, 40):
        evenly = _shares(loads, p)  # the run's total spread over its groups
        bounded = unseen_shares(loads, seen, p)
        assert bounded.sum() == pytest.approx(1.0)
        hottest = _shares(truth, p).max()  # at most one typical group more: which subtask holds it is unknown
        assert hottest - 1e-12 <= bounded.max() <= hottest + truth.min() + 1e-12
        assert bounded.max() >= evenly.max()
    assert min(_shares(loads, p).max() / _shares(truth, p).max() for p in range(13, 40)) < 0.8


@pytest.mark.parametrize("hot_group", [3, 64, 120])
def test_a_hot_key_in_a_run_of_half_the_groups_is_not_taken_for_the_typical_group(hot_group):
    # only 2 subtasks seen: each run holds half the groups, and the median over all of them lies in the hot run
    truth = np.ones(128)
    truth[hot_group] = 40.0
    truth /= truth.sum()
    loads = key_group_loads(128, {2: _shares(truth, 2)}, 2)
    for p in range(3, 30):
        assert unseen_shares(loads, (2,), p).max() >= _shares(truth, p).max() - 1e-12


@pytest.mark.parametrize("seed", range(10))
def test_a_parallelism_seen_keeps_the_shares_fitted_there(seed):
    rng = np.random.default_rng(seed)
    truth = rng.pareto(1.5, size=128) + 0.1
    truth /= truth.sum()
    seen = (3, 8, 11)
    loads = key_group_loads(128, {p: _shares(truth, p) for p in seen}, 11)
    for p in seen:
        assert unseen_shares(loads, seen, p) == pytest.approx(_shares(loads, p), abs=1e-12)
    for p in (5, 13, 29):
        assert unseen_shares(loads, seen, p).sum() == pytest.approx(1.0)
