"""Key-group skew at parallelisms the testbed never ran (our extension of StreamBed, not the paper's).

A keyed vertex's records go to key groups, and Flink gives subtask i the contiguous key-group range
i·G/n..(i+1)·G/n (G = max parallelism). At a large n each subtask holds few groups, so uneven group loads
and G not dividing by n make the hottest subtask carry far more than 1/n: the job saturates earlier
than a curve through small, well-balanced runs says. The subtask shares the testbed reports at each
parallelism it ran are sums of group loads over known ranges; the least-squares group loads closest to
even (minimum norm) reproduce them, resolving loads to the ranges the runs tell apart.

A slot (TaskManager) holds one subtask of every vertex, so its load per source record is the sum over
vertices of the vertex's busy seconds per source record times the subtask's share. The imbalance at n
is the hottest slot's load over the mean slot's; the surrogate is fitted to MST × imbalance (what the
job would carry balanced) and its prediction divided by the imbalance at the planned n. Hosts that differ
in speed (planning/speeds.py) pace their slots: a run's imbalance counts each slot at its host's speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capacity.key_groups import key_group_owner
from planning.estimator import Estimate
from planning.speeds import SlotSpeeds
from planning.testbed import PhaseReading


def subtask_shares(loads: np.ndarray, parallelism: int) -> np.ndarray:
    """Each of `parallelism` subtasks' share of a keyed vertex's records, from its key-group loads."""
    owner = key_group_owner(len(loads), parallelism)
    return np.bincount(owner, weights=loads, minlength=parallelism) / loads.sum()


def hottest_share(loads: np.ndarray, parallelism: int) -> float:
    """The largest share of a keyed vertex's records one of `parallelism` subtasks gets."""
    return float(subtask_shares(loads, parallelism).max())


@dataclass(frozen=True)
class GroupLoads:
    """A keyed vertex's key-group loads as the readings tell them: per cell (key groups that every
    reading's ranges keep together) its load, and how unevenly a cell's load may split over its groups."""

    mean: np.ndarray
    """Per group, its cell's load split evenly (the least-squares loads nearest to even)."""
    cells: tuple[np.ndarray, ...]
    """Indices of the groups of each cell the readings cannot tell apart."""
    shape: float
    """Gamma shape of a group's load (mean² / variance; inf: every group alike): a cell's load splits
    over its groups as Dirichlet(shape, …, shape)."""


def group_loads(key_groups: int, readings: Sequence[tuple[int, Sequence[float]]]) -> GroupLoads:
    """Per key group its share of the vertex's records from (parallelism, subtask shares) readings.

    The readings are exact sums over ranges; groups that fall in the same range at every parallelism run
    form a cell whose total the least-squares solution nearest to even gives. Inside a cell nothing was
    measured: with group loads drawn independently from one gamma distribution, the split of a cell's
    total is Dirichlet with the distribution's shape, which the readings estimate (a subtask of m groups
    strays from m/G by m·σ² on average). Gamma, not normal: one hot key puts a quarter of the records in
    one group, and a heavy tail says a cell that carries much may carry it in one group."""
    even = np.full(key_groups, 1.0 / key_groups)
    rows, targets, spreads, owners = [], [], [], []
    for parallelism, shares in readings:
        owner = key_group_owner(key_groups, parallelism)
        owners.append(owner)
        held = np.bincount(owner, minlength=parallelism)
        for i, share in enumerate(shares):
            rows.append((owner == i).astype(float))
            targets.append(share)
            if parallelism > 1:
                spreads.append((share - held[i] / key_groups) ** 2 / held[i])
    if not rows:
        return GroupLoads(even, (np.arange(key_groups),), math.inf)  # nothing known: even
    matrix, target = np.array(rows), np.array(targets)
    mean = np.clip(even + np.linalg.pinv(matrix) @ (target - matrix @ even), 0.0, None)
    signature = np.array(owners).T  # per group, its subtask at every run
    _, cell_of = np.unique(signature, axis=0, return_inverse=True)
    cells = tuple(np.flatnonzero(cell_of.ravel() == c) for c in range(cell_of.max() + 1))
    variance = float(np.mean(spreads)) if spreads else 0.0
    shape = (1.0 / key_groups) ** 2 / variance if variance > 0 else math.inf
    return GroupLoads(mean / mean.sum(), cells, shape)


DRAWS = 400
QUANTILE = 0.9
"""The planner provisions for the imbalance that 90% of the group loads the readings allow stay below."""


@dataclass(frozen=True)
class SkewModel:
    """Per vertex: busy seconds per source record (its weight in a slot's load) and, for keyed vertices,
    the estimated key-group loads; with `speeds`, how much the hosts differ (planning/speeds.py)."""

    weights: dict[str, float]
    loads: dict[str, GroupLoads]
    quantile: float = QUANTILE
    seed: int = 0
    speeds: SlotSpeeds | None = None

    def imbalance(self, parallelism: int) -> float:
        """The hottest slot's load over the mean slot's at `parallelism` (1.0: balanced): its `quantile`
        over group loads drawn as the readings allow (common draws for every parallelism). With speeds,
        times what hosts drawn with the testbed's spread add to the hottest slot of the mean loads, their
        median: the quantile covers what the readings leave unknown about the keys, while a new cluster's
        hosts are a fresh draw that the plan's 110% covers like any other noise (the 0.9 quantile of both
        at once put the plans 8-12% under the true MST on the twin)."""
        rng = np.random.default_rng(self.seed)
        imbalance = self._ratio(self._slot_loads(parallelism, rng))
        if self.speeds is None:
            return imbalance
        return imbalance * self._host_factor(self._slot_loads(parallelism, None)[:, 0], rng)

    def realized(self, parallelism: int) -> float:
        """The imbalance of the testbed's own run at `parallelism`: its measured hosts, the mean group
        loads (which the runs resolve at the parallelisms they ran)."""
        slot_load = self._slot_loads(parallelism, None)
        if self.speeds is not None:
            slot_load = slot_load / self.speeds.of(parallelism)[:, None]
        return self._ratio(slot_load)

    def hottest_paced(self, name: str, parallelism: int) -> float:
        """A keyed vertex's hottest subtask share at `parallelism` (mean group loads), times what hosts
        drawn with the testbed's spread add to it, their median (as `imbalance` paces a slot): sized on
        the shares alone, a vertex planned to carry 1.10x the target carried 0.96-0.98x where a slow host
        ran its hottest subtask."""
        shares = subtask_shares(self.loads[name].mean, parallelism)
        if self.speeds is None:
            return float(shares.max())
        return float(shares.max()) * self._host_factor(shares, np.random.default_rng(self.seed))

    def _host_factor(self, loads: np.ndarray, rng: np.random.Generator) -> float:
        """What hosts drawn with the testbed's spread add to the hottest of `loads` (one per slot): the
        median over draws of the hottest load paced by its host, over the hottest load at equal hosts."""
        paced = loads[:, None] / rng.lognormal(0.0, self.speeds.log_sd, size=(len(loads), DRAWS))
        return float(np.median(paced.max(axis=0)) / loads.max())

    def _slot_loads(self, parallelism: int, rng: np.random.Generator | None) -> np.ndarray:
        """(slots × draws) loads per source record; without `rng` one column of the mean group loads."""
        draws = DRAWS if rng is not None else 1
        slot_load = np.zeros((parallelism, draws))
        for name, weight in sorted(self.weights.items()):
            known = self.loads.get(name)
            if known is None:
                slot_load += weight / parallelism
                continue
            drawn = np.repeat(known.mean[:, None], draws, axis=1)
            if rng is not None and math.isfinite(known.shape):
                for cell in known.cells:  # each cell keeps its total, so every run keeps its shares
                    if len(cell) > 1:
                        split = rng.dirichlet(np.full(len(cell), known.shape), size=draws).T
                        drawn[cell] = known.mean[cell].sum() * split
            owner = key_group_owner(len(known.mean), parallelism)
            ranges = np.zeros((parallelism, len(known.mean)))
            ranges[owner, np.arange(len(known.mean))] = 1.0
            slot_load += weight * (ranges @ drawn)
        return slot_load

    def _ratio(self, slot_load: np.ndarray) -> float:
        """The hottest slot over the mean of a slot's load at equal hosts, the `quantile` over draws."""
        mean = sum(self.weights.values()) / slot_load.shape[0]
        if not mean > 0:
            return 1.0
        return float(np.quantile(slot_load.max(axis=0) / mean, self.quantile))


def skew_model(
    estimates: Sequence[Estimate],
    quantile: float = QUANTILE,
    census: Sequence[PhaseReading] = (),
    speeds: SlotSpeeds | None = None,
) -> SkewModel | None:
    """From the estimates' last passed tests and any key-group census (planning/census.py: its shares
    resolve every group, so no cell is left to draw); None when no keyed vertex reported its shares and
    the hosts are not known to differ."""
    finals = [e.final for e in estimates if e.mst_rps > 0 and e.final.achieved_rps > 0]
    if not finals:
        return None
    keyed: dict[str, tuple[int, list[tuple[int, tuple[float, ...]]]]] = {}
    for reading in [*finals, *census]:
        for v in reading.vertices:
            if v.key_groups > 0 and len(v.subtask_shares) == v.parallelism:
                keyed.setdefault(v.name, (v.key_groups, []))[1].append((v.parallelism, v.subtask_shares))
    if not keyed and speeds is None:
        return None
    largest = max(finals, key=lambda r: (r.vertices[0].parallelism if r.vertices else 0, r.achieved_rps))
    weights = largest.busy_s_per_record(speeds.speeds if speeds is not None else ())
    loads = {name: group_loads(groups, readings) for name, (groups, readings) in keyed.items()}
    return SkewModel(weights, loads, quantile, speeds=speeds)
