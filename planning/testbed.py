"""What the planner needs from a testbed: deploy a configuration, inject rates phase by phase, and say
what the source achieved, how many records were pending, per vertex its input rate and busyness, and the
TaskManagers' CPU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class VertexReading:
    """One vertex over a phase: records/s into the whole vertex, its tasks' mean busy share (0..1, NaN
    when the engine reports none), its parallelism, each subtask's share of its input (empty: not
    read), for a keyed vertex its max parallelism (the number of key groups; 0: not keyed), and each
    subtask's busy share (empty: not read)."""

    name: str
    input_rps: float
    busyness: float
    parallelism: int
    subtask_shares: tuple[float, ...] = ()
    key_groups: int = 0
    subtask_busyness: tuple[float, ...] = ()

    @property
    def true_rate_rps(self) -> float:
        """Records/s one task would process busy all the time (DS2's true rate; NaN without busyness)."""
        if not self.busyness > 0:
            return float("nan")
        return self.input_rps / self.parallelism / self.busyness

    def busy_slot_s(self, speeds: Sequence[float] = ()) -> float:
        """Busy seconds per second summed over the subtasks, each at its slot's `speeds` (where every
        subtask and slot is known; else as read)."""
        if len(self.subtask_busyness) == self.parallelism and len(speeds) >= self.parallelism:
            return float(sum(b * s for b, s in zip(self.subtask_busyness, speeds, strict=False)))
        return self.busyness * self.parallelism

    @property
    def slowest_true_rate_rps(self) -> float:
        """The slowest subtask's true rate (the Flink operator's autoscaler aggregates busy time by MAX for
        the same reason: subtasks on slower hosts or sharing a busier slot set the vertex's pace); the
        mean's where the subtasks were not read."""
        rates = [
            self.input_rps * share / busy
            for share, busy in zip(self.subtask_shares, self.subtask_busyness, strict=False)
            if share > 0 and busy > 0
        ]
        if len(rates) != self.parallelism:
            return self.true_rate_rps
        return min(rates)


@dataclass(frozen=True)
class Phase:
    """Inject `rate_rps` source records/s for `duration_s`."""

    rate_rps: float
    duration_s: float


@dataclass(frozen=True)
class PhaseReading:
    """What one phase showed: the source's achieved rate, the records pending at its start and end, per
    vertex its rates and busyness, and the TaskManagers' mean CPU load (the gauge the daemon reads, Flink's
    `Status.JVM.CPU.Load`; NaN: not read)."""

    injected_rps: float
    achieved_rps: float
    pending_start: float
    pending_end: float
    vertices: tuple[VertexReading, ...] = ()
    cpu_load: float = math.nan

    def busy_per_taskmanager(self, task_managers: int) -> float:
        """The vertices' busy seconds per second over `task_managers`, what one TaskManager's core carries
        on average: the x of the daemon's core line (capacity/cores.py), which leaves out a vertex that
        reports no busy time (a legacy source) the same way. NaN when no vertex reports it."""
        reporting = [v for v in self.vertices if math.isfinite(v.busyness)]
        if task_managers < 1 or not reporting:
            return math.nan
        return sum(v.busy_slot_s() for v in reporting) / task_managers

    def busy_s_per_record(self, speeds: Sequence[float] = ()) -> dict[str, float]:
        """Per vertex with a busyness reading, its busy slot-seconds per source record (its weight in a
        slot's load); empty when the source achieved nothing. With `speeds` (per slot, relative to the
        testbed's mean host: planning/speeds.py) each subtask's busy time counts at a mean host's pace."""
        if not self.achieved_rps > 0:
            return {}
        return {
            v.name: v.busy_slot_s(speeds) / self.achieved_rps
            for v in self.vertices
            if math.isfinite(v.busyness) and v.busyness > 0
        }


class Testbed(Protocol):
    """A place to run the job at a given configuration (the twin; a local Flink cluster)."""

    @property
    def max_rate_rps(self) -> float:
        """The fastest the generator injects (the warm-up's 'full rate')."""
        ...

    def deploy(self, slots: int, memory_mb: float) -> None:
        """Start the job afresh at `slots` slots of `memory_mb` each."""
        ...

    def run(self, phases: list[Phase]) -> list[PhaseReading]:
        """Run the phases one after the other on the deployed job; one reading per phase. On a real
        cluster a reading ends up to one metrics fetch after its boundary, so the next phase's first
        records may count in it: a phase whose reading matters is last or followed by the same rate (the
        last rate holds until the next run)."""
        ...
