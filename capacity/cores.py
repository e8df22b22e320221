"""Each TaskManager's core as a limit of the job graph, from busy time rather than per-worker CPU lines.

In reactive mode a TaskManager runs one subtask of every vertex, and where the vertices compute rather than
wait, their work adds up on its core: the core saturates before any one of them is busy all the time. The
job-level CPU lines (capacity/model.py) see that, but through a worker's CPU per *source record*, which
changes with the scale-out (key groups move, a session window's state shrinks) and is read from a noisy
gauge: at low load a line extrapolates from barely above the idle floor, and a line without spread of its
own borrows the pooled slope of the other workers, which under-states the hot worker's cost. On the twin
that put the current capacity 3–8% off (median) on the CPU-bound graphs.

Here the busy time carries what changes (each subtask's busy seconds per source record come from its true
rate and its share, capacity/dag.py, at any parallelism), and the CPU gauge only teaches what does not:
how much CPU a busy second costs. One line, TaskManager CPU = a + s · (sum of its subtasks' busy shares),
pooled over every TaskManager and window (the code is the same everywhere), with a prior where data are
thin: a = the idle CPU, s = saturation − idle (a busy second is a second of one core, as Flink measures
busy time on the task's thread). A vertex that waits (a sink on an external store) pulls s down, as it
should: its busy time costs little CPU.

A TaskManager busy B_i = O_i + r · U_i at source rate r (O_i: fixed busy of its subtasks, timers and
watermarks, measured as what the rates do not explain; U_i: busy per source record) saturates its core at
a + s · (O_i + r · U_i) = saturation. At a parallelism not running now, TaskManager i holds subtask i of
every vertex (an even spread of slots; which subtask Flink puts where is not known in advance) and the
overhead of the current median TaskManager.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import structlog

from capacity.dag import CONTENDED_SHARE, DagModel
from capacity.model import MAX_CPU, CapacitySettings
from capacity.regression import RegressionStats
from capacity.subtask_windows import SubtaskWindow
from config.schema import FLINK_MAX_PARALLELISM
from messages.types import JobGraph

MAX_BUSY = float(FLINK_MAX_PARALLELISM)
"""Above the busy seconds per second a TaskManager's subtasks can add up to: the bound stored sums are judged by."""

_MAX_UNKNOWN_BUSY = 0.1
"""Share of the busy time that may come from vertices whose rates are not known yet (a sink that is never
busy enough to tell its rate): beyond it the cores' limit is not known."""


_PRIOR_SD_IDLE = 0.05
"""Prior uncertainty of the CPU at no busy time (the JVM's idle floor)."""

_PRIOR_SD_SLOPE = 0.3
"""Prior uncertainty of the CPU per busy second."""

_NOISE_SD = 0.02
"""Noise of one window's mean CPU reading (the data's weight against the prior)."""

_MIN_HEADROOM_CPU = 2 * _NOISE_SD
"""CPU the line must leave between its idle floor and the saturation CPU to bound the rate: CPU spent outside
the busy time (GC, compaction, checkpoint uploads) can lift the idle floor to the saturation, and a
headroom within a window's gauge noise of none gives a limit of a few records per second at every
scale-out, which the job keeping up now disproves."""

_HALF_LIFE_S = 86_400.0
"""Seconds of iterations after which a window's points count half in the line: a day. The CPU a busy second
costs changes with the TaskManagers' cores (two instead of one halve it) or the JVM, and a line that never
forgets learns that only after as many windows as the old setup ran (two weeks on 2 cores, then a day on 1:
0.45 CPU per busy second learned for 0.84, the cores' limit 1.9x too high). A day learns 90% of a change in
~3.3 days, while the true rates, learned from busy time, see it at once. Shorter half-lives cost the twin's
clean runs: a line that forgets the low-busy points of the load's troughs loses the spread that pins its
slope (4 hours: wordcount x traffic 105 -> 165 s over the SLO at 4.91 -> 5.21 workers). Counted in the
loop's seconds, not in windows, so that a shorter loop does not forget faster."""

_log = structlog.get_logger("foresail.cores")


@dataclass(frozen=True)
class CoreLimit:
    """The cores' limit per scale-out and what binds at the current one."""

    per_scaleout_rps: dict[int, float]
    taskmanager: str | None = None
    busy: float = math.nan
    """Sum of the binding TaskManager's subtasks' busy shares this window."""
    cpu_per_busy: float = math.nan
    idle_cpu: float = math.nan
    unusable: str = ""
    """Why the line tells no limit although the rates are known ('' when it does, or they are not)."""


@dataclass
class CoreModel:
    """The pooled CPU-per-busy-second line and the TaskManagers' fixed busy (the idle and saturation CPU
    are the job-level model's settings)."""

    settings: CapacitySettings = field(default_factory=CapacitySettings)
    stats: RegressionStats = field(default_factory=RegressionStats)
    """x = a TaskManager's summed busy share over a window, y = its mean CPU."""
    overhead_busy: float = 0.0
    """Median fixed busy share of a TaskManager's subtasks, from the last window that showed it."""
    said_unusable: str = field(default="", compare=False)
    """The kind of reason the line was last said unusable for (said once while it lasts; not saved)."""

    def learn(self, busy: dict[str, float], cpu: dict[str, float], interval_s: float) -> None:
        """Add one point per TaskManager that reported both this window (not from a saturated job: its
        busy time may include waiting for the core); the earlier points fade by the `interval_s` between
        iterations (`_HALF_LIFE_S`: the metrics window may be longer or shorter than the loop)."""
        pairs = [(b, cpu[tm]) for tm, b in busy.items() if tm in cpu and math.isfinite(cpu[tm])]
        if pairs:
            x, y = np.array(pairs).T
            fade = 0.5 ** (interval_s / _HALF_LIFE_S)
            self.stats = self.stats.faded(fade).merge(RegressionStats.from_arrays(x, y))

    def seed(self, points: Sequence[tuple[float, float]]) -> int:
        """Start the line from (busy share, CPU) points a capacity plan's testbed measured; a model that
        has data of its own keeps it. Returns the points taken."""
        if self.stats.n or not points:
            return 0
        x, y = np.array(points, dtype=float).T
        self.stats = RegressionStats.from_arrays(x, y)
        return len(points)

    def line(self) -> tuple[float, float]:
        """(CPU at no busy time, CPU per busy second): the posterior mean of the line under the prior."""
        s, st = self.settings, self.stats
        prior_precision = np.diag([1.0 / _PRIOR_SD_IDLE**2, 1.0 / _PRIOR_SD_SLOPE**2])
        prior_mean = np.array([s.idle_cpu, s.saturation_cpu - s.idle_cpu])
        sum_x, sum_y = st.n * st.mean_x, st.n * st.mean_y
        gram = np.array([[st.n, sum_x], [sum_x, st.m2_x + st.n * st.mean_x**2]]) / _NOISE_SD**2
        moment = np.array([sum_y, st.c_xy + st.n * st.mean_x * st.mean_y]) / _NOISE_SD**2
        idle, per_busy = np.linalg.solve(prior_precision + gram, prior_precision @ prior_mean + moment)
        return float(idle), float(per_busy)

    def limit(
        self,
        dag: DagModel,
        graph: JobGraph,
        windows: list[SubtaskWindow],
        busy: dict[str, float],
        current: int,
        max_scaleout: int,
    ) -> CoreLimit:
        """Source rate at which the first core saturates, per scale-out 1..max_scaleout (inf where no rate
        is known yet, or the line is unusable: then the CPU lines stand in, mape/vertex_analysis.py)."""
        idle, per_busy = self.line()
        if max_scaleout < 1:
            return CoreLimit({})
        saturation = self.settings.saturation_cpu
        if not saturation - idle > _MIN_HEADROOM_CPU:
            return self._unusable(
                "idle-at-saturation",
                f"the line's idle CPU {idle:.2f} leaves no room below the saturation CPU {saturation:.2f}",
                idle,
                per_busy,
            )
        if not per_busy > 0:
            reason = f"a busy second costs {per_busy:.2f} CPU"
            return self._unusable("no-cpu-per-busy", reason, idle, per_busy)
        budget = (saturation - idle) / per_busy  # busy seconds a core carries
        ratios = dag.input_ratios(graph)
        per_record = np.zeros((max_scaleout, max_scaleout))  # row p − 1: TaskManager i's busy per record
        running: dict[str, np.ndarray] = {}  # per vertex, its subtasks' busy per record as it runs now
        for vertex in graph.vertices:
            top = min(max_scaleout, vertex.max_parallelism)
            matrix = dag.busy_per_source_record(graph, vertex.vertex_id, ratios[vertex.vertex_id], top)
            per_record[:top, :top] += matrix
            per_record[top:, :top] += matrix[-1]  # above its max parallelism the vertex stays there
            if 1 <= vertex.parallelism <= top:
                running[vertex.vertex_id] = matrix[vertex.parallelism - 1, : vertex.parallelism]
        rated = {v for v, row in running.items() if (row > 0).any()}
        unknown = sum(w.busy for w in windows if math.isfinite(w.busy) and w.vertex_id not in rated)
        if unknown > _MAX_UNKNOWN_BUSY * sum(busy.values()):
            return CoreLimit({})  # busy time without a rate: how it grows with the load is unknown
        source_rps = sum(w.records_in_rps for w in windows if not graph.inputs(w.vertex_id))
        now = _running_limit(running, windows, busy, source_rps, budget)
        if now is not None:
            self.overhead_busy = now.overhead_busy
        if not (budget > self.overhead_busy and (now is None or now.capacity_rps > 0)):
            return self._unusable(  # a job that keeps up at a rate its cores could not carry at all
                "overhead-fills-core",
                f"the TaskManagers' fixed busy {self.overhead_busy:.2f} s per second fills the "
                f"{budget:.2f} s a core carries by the line",
                idle,
                per_busy,
            )
        self.said_unusable = ""
        with np.errstate(divide="ignore", invalid="ignore"):
            limits = np.where(per_record > 0, (budget - self.overhead_busy) / per_record, math.inf)
        inside = np.arange(max_scaleout)[None, :] < np.arange(1, max_scaleout + 1)[:, None]
        capacities = np.where(inside, limits, math.inf).min(axis=1)
        per_scaleout = {n: float(c) for n, c in enumerate(capacities.tolist(), start=1)}
        if now is None:
            return CoreLimit(per_scaleout, cpu_per_busy=per_busy, idle_cpu=idle)
        per_scaleout[current] = now.capacity_rps
        return CoreLimit(per_scaleout, now.taskmanager, now.busy, per_busy, idle)

    def _unusable(self, kind: str, reason: str, idle: float, per_busy: float) -> CoreLimit:
        """No limit from a line that cannot bound the rate (a zero capacity at every scale-out otherwise),
        said once per `kind` of reason while it lasts."""
        if kind != self.said_unusable:
            _log.warning(
                "cores-line-unusable",
                reason=reason,
                idle_cpu=round(idle, 3),
                cpu_per_busy=round(per_busy, 3),
                action="the cores bound no scale-out: the true rates and the CPU lines decide",
            )
            self.said_unusable = kind
        return CoreLimit({}, cpu_per_busy=per_busy, idle_cpu=idle, unusable=reason)

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"stats": self.stats.to_dict(), "overhead_busy": self.overhead_busy}

    @classmethod
    def from_dict(cls, data: dict, settings: CapacitySettings | None = None) -> CoreModel:
        """The model `to_dict` wrote (a count that never faded, from before the half-life, too). Sums no
        windows can give raise ValueError, as a truncated state does: the knowledge starts this part
        fresh (mape/knowledge.py) rather than plan with a line of NaN."""
        model = cls(settings or CapacitySettings())
        if "stats" in data:
            model.stats = RegressionStats.from_dict(data["stats"])
        model.overhead_busy = float(data.get("overhead_busy", 0.0))
        st = model.stats
        if not (
            math.isfinite(model.overhead_busy) and model.overhead_busy >= 0 and st.within(MAX_BUSY, MAX_CPU)
        ):
            raise ValueError(f"sums no windows give: {data}"[:200])
        return model


@dataclass(frozen=True)
class _RunningLimit:
    taskmanager: str
    busy: float
    overhead_busy: float
    """Median over the TaskManagers."""
    capacity_rps: float


def _running_limit(
    running: dict[str, np.ndarray],
    windows: list[SubtaskWindow],
    busy: dict[str, float],
    source_rps: float,
    budget: float,
) -> _RunningLimit | None:
    """The limit of the running deployment, from where each subtask really runs (None without this
    window's busy time or any known rate)."""
    if not busy or not source_rps > 0:
        return None
    per_record: dict[str, float] = defaultdict(float)
    for w in windows:
        row = running.get(w.vertex_id)
        if w.taskmanager_id in busy and row is not None and w.subtask_index < len(row):
            per_record[w.taskmanager_id] += float(row[w.subtask_index])
    rows = [(tm, busy[tm], per_record[tm]) for tm in busy if per_record.get(tm, 0.0) > 0]
    if not rows:
        return None
    overheads = [max(b - source_rps * u, 0.0) for _, b, u in rows]
    limits = [(budget - o) / u for o, (_, _, u) in zip(overheads, rows, strict=True)]
    i = int(np.argmin(limits))
    return _RunningLimit(rows[i][0], rows[i][1], float(np.median(overheads)), limits[i])


def taskmanager_busy(windows: list[SubtaskWindow]) -> dict[str, float]:
    """Per TaskManager, the summed busy share of its subtasks this window; a TaskManager with a subtask
    whose busy time is missing (but reported by others of its vertex) is left out. Vertices that never
    report busy time (a legacy source) are left out everywhere."""
    reporting = {w.vertex_id for w in windows if math.isfinite(w.busy)}
    totals: dict[str, float] = defaultdict(float)
    broken: set[str] = set()
    for w in windows:
        if w.taskmanager_id is None or w.vertex_id not in reporting:
            continue
        if math.isfinite(w.busy):
            totals[w.taskmanager_id] += w.busy
        else:
            broken.add(w.taskmanager_id)
    return {tm: b for tm, b in totals.items() if tm not in broken}


NEAR_SATURATION = 0.85
"""Share of the saturation CPU from which a TaskManager whose subtasks are overbooked counts as contended,
and from which its CPU (censored by the core) teaches nothing of the CPU per busy second
(mape/vertex_knowledge.py)."""

_COMPUTING_BUSY = 0.05
"""Busy share from which a subtask counts as computing on its TaskManager's core."""


_SIBLING_MIN_BUSY = 0.01
"""Busy share a sibling's records per busy second is read at, at least: a gauge under it rounds to nothing,
and records / this much busy still under-states the sibling's rate."""


def contended_taskmanagers(
    windows: list[SubtaskWindow],
    cpu: dict[str, float],
    model: CoreModel,
    busy: dict[str, float] | None = None,
    keyed: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """TaskManagers whose core two or more computing subtasks shared while saturated: their CPU reached
    saturation, or it came near it (a 60 s mean over seconds saturated and seconds not) while they were
    busy for more seconds than the core serves (each waits for it with records queued, which Flink counts
    as busy time), or while a subtask of a vertex without key groups (`keyed`: those with) processed under
    `CONTENDED_SHARE` of the records per busy second of a sibling elsewhere. Such siblings run the same
    code on the same kind of records, and a sibling's records per busy second only under-state its rate
    (its busy time includes fixed overhead), so the slow one waits for its core, whatever the line of
    CPU per busy second says: that line learns from the same inflated busy time. (On the twin's session
    job a TaskManager whose session subtask took its core read its source at 10,000 records per busy
    second, its siblings at 150,000, one window after the line stopped calling it overbooked; learned,
    that rate held 18 slots through the next surge, believed to carry 30,000 rps while the job kept up
    with 48,600.) A lone subtask busy all the time
    shows its own rate (the twin's single job catching up at 9 TaskManagers read 50,000 rps, its
    capacity); subtasks busy at little CPU wait on something else (a sink on its store)."""
    idle, per_busy = model.line()
    served = (model.settings.saturation_cpu - idle) / per_busy if per_busy > 0 else math.inf
    computing: dict[str, int] = defaultdict(int)
    for w in windows:
        if w.taskmanager_id is not None and math.isfinite(w.busy) and w.busy >= _COMPUTING_BUSY:
            computing[w.taskmanager_id] += 1
    busy = taskmanager_busy(windows) if busy is None else busy  # `busy`: the caller's, when it has it
    shared = {tm for tm, n in computing.items() if n >= 2 and math.isfinite(cpu.get(tm, math.nan))}
    saturation = model.settings.saturation_cpu
    near = {tm for tm in shared if cpu[tm] >= NEAR_SATURATION * saturation}
    slower = _slower_than_siblings(windows, keyed)
    return frozenset(
        tm
        for tm in shared
        if cpu[tm] >= saturation or (tm in near and (busy.get(tm, -math.inf) > served or tm in slower))
    )


def _slower_than_siblings(windows: list[SubtaskWindow], keyed: frozenset[str]) -> set[str]:
    """TaskManagers holding a computing subtask of a vertex without key groups whose records per busy
    second are under `CONTENDED_SHARE` of another subtask's of the vertex (docstring above)."""
    by_vertex: dict[str, list[SubtaskWindow]] = defaultdict(list)
    for w in windows:
        if w.vertex_id not in keyed and w.records_in_rps > 0 and math.isfinite(w.busy):
            by_vertex[w.vertex_id].append(w)
    slower = set()
    for mine in by_vertex.values():
        # a computing subtask's own bound is its reading, so under half the highest it is never that one
        fastest = max(w.records_in_rps / max(w.busy, _SIBLING_MIN_BUSY) for w in mine)
        slower.update(
            w.taskmanager_id
            for w in mine
            if w.taskmanager_id is not None
            and w.busy >= _COMPUTING_BUSY
            and w.records_in_rps / w.busy < CONTENDED_SHARE * fastest
        )
    return slower
