"""Key-group census (our extension of StreamBed, not the paper's): one short run at a low rate with the
job at the parallelism of its key groups, so that each subtask of a keyed vertex holds one group and its
share of the vertex's records is that group's load.

Runs of 1..8 subtasks see a keyed vertex's load only as sums over wide key-group ranges; at 40+
subtasks the hottest subtask's few groups decide the capacity, and the skew model can only bound what
the ranges hide (planning/skew.py). The census measures it instead. It needs many slots but hardly any
capacity: the rate is half of what one slot carries, so on a real cluster one TaskManager declaring that
many slots (`taskmanager.numberOfTaskSlots`) on the testbed's cores runs it. It measures the data's keys,
not the hardware, so its shares hold at every parallelism.
"""

from __future__ import annotations

from collections.abc import Sequence

from planning.estimator import Estimate, EstimatorSettings
from planning.testbed import Phase, PhaseReading, Testbed

RATE_SHARE = 0.5
"""The census rate as a share of the lowest MST measured (far below what its many subtasks carry)."""


def census_parallelism(estimates: Sequence[Estimate]) -> int | None:
    """The fewest key groups of any keyed vertex the runs read (every vertex may run at it); None when
    no run read a keyed vertex."""
    groups = [v.key_groups for e in estimates for v in e.final.vertices if v.key_groups > 0]
    return min(groups) if groups else None


def take_census(
    testbed: Testbed,
    estimates: Sequence[Estimate],
    memory_mb: float,
    settings: EstimatorSettings,
    max_slots: int,
) -> PhaseReading | None:
    """Deploy at the key-group parallelism, let the job settle (ramp) and read one observation; None when
    no run read a keyed vertex, or its key groups outnumber the slots the testbed deploys."""
    parallelism = census_parallelism(estimates)
    passed = [e.mst_rps for e in estimates if e.mst_rps > 0]
    if parallelism is None or parallelism > max_slots or not passed:
        return None
    rate = RATE_SHARE * min(passed)
    testbed.deploy(parallelism, memory_mb)
    settle = [Phase(rate, settings.ramp_s)] if settings.ramp_s > 0 else []
    return testbed.run([*settle, Phase(rate, settings.observe_s)])[-1]
