"""Per-vertex capacity of a job graph from Flink's task metrics (DS2, Kalavri et al. OSDI'18, §3).

True processing rate (DS2 Eq. 1–2): the records a subtask processes per second of *useful* (busy) time.
Each subtask's rate is learned online with the exact regression of `capacity.regression`: x = busy share
of its time, y = records in per second, both over the loop window; the line's value at x = 1 is what the
subtask processes when busy all the time. The slope comes from regressing x on y (y is an exact count, the
busy gauge carries the noise; see capacity/model.py), and a fixed per-subtask overhead (timers,
watermarks: busy time without records) shifts the line instead of biasing the rate, as DS2's plain
ratio would. Where the busy time has no spread yet, the ratio records / busy stands in.

A subtask busy nearly all of a window while its inputs are held back (a source, or an upstream subtask
backpressured) shows its rate directly (DS2's ratio at full busy time), and that measurement wins over the
line: under CPU contention on a shared host the rate per busy second changes with the load, and a line
through lighter windows under-estimates it. Both guards come from real Flink: a restarted task's first
minute reads busy all the time at a trickle while its inputs read neither idle nor backpressured; and a
subtask never carries more than its rate, so a later window carrying more proves a reading wrong, and the
reading and the line through it start afresh. A subtask whose TaskManager's core is saturated (its
CPU at saturation, or its subtasks busy for more seconds than the core serves: capacity/cores.py) waits
for the core with records queued, which Flink also counts as busy: a reading there far under the rate
known is the core's share and is not learned, and a subtask seen there only has a lower bound. On the
twin's hot-key job one such window at parallelism 5 (a third of the parser's rate) made the parser's rate
look state-bound and promised 4,093 rps at parallelism 1, where it carries 26,000.

Rates are kept per (vertex, parallelism, subtask): a subtask's key-group range, and with it its state and
its cost per record, changes with the parallelism (a session window's cost grows with the keys it holds).
A subtask that comes back on another TaskManager (new hardware) starts its line afresh, and rates hold
for one configuration of the TaskManagers (`use_configuration`, e.g. the managed memory per slot: a
cache-bound vertex is another vertex with more memory). Another parallelism seen is predicted on today's
TaskManagers: where the one at a subtask's index now is not the one its rate was learned on, that rate is
today's one's, scaled by the state model below, and a rate learned on a TaskManager now gone is unknown.
A parallelism never run gives every subtask the rate of the subtask that binds at the nearest parallelism
seen (new TaskManagers' speeds are unknown; for an even split that is the slowest subtask, the per-vertex
counterpart of the job-level model's "average worker of the nearest scale-out"), scaled by how the cost
per record changes with the state a subtask holds: once two or more parallelisms are seen, 1 / rate =
a + b / p is fitted to their mean rates (a cost per record that grows with the keys held, and the keys
held shrink as 1 / p); a fit that changes the cost by less than 10% over the parallelisms seen is noise
(TaskManager speeds), and the rate is then taken as is. A vertex whose rates are all weak (records per busy
second at a light load, where an overhead not yet known can be most of the busy time: a lower bound, however
far off) extrapolates from its highest bound instead, with no cost model: a source idling at 1% busy over
12 subtasks must not teach that 8 subtasks carry a tenth of what 2 did.

Input fractions: each vertex's selectivity (records out / in, decayed sums) gives its input ratio a_v
(records per source record) by DS2's walk (Eq. 7–8) from the sources; each subtask's share of its vertex's
input is even for a rebalanced input and follows the key groups for a keyed one, whose per-key-group load
is estimated from the observed subtask loads (Flink assigns contiguous key-group ranges:
KeyGroupRangeAssignment), so the share of any parallelism can be computed, skew included. One parallelism
only tells a subtask's total, so its groups get even parts of it; every other parallelism seen cuts the
ranges elsewhere, and the loads that fit all of them at once (non-negative least squares, the even
parts as a weak prior among equal fits) find a hot key group within a few groups: with the total spread
over the range that held it at the last parallelism, the hot subtask of a higher, unseen parallelism
looked a third lighter than it is (the twin's hot-key job, twelve parallelisms seen). Within a run of groups
that every parallelism seen kept together the loads stay even parts, so a parallelism never seen that cuts
the run would split a hot key that no rescale splits: there the run's load above the typical group's goes
to the subtask that then carries most (`unseen_shares`). From the seven parallelisms the hot-key job had
seen on the traffic trace, the hot subtask's share at 13 came out 31% under the truth with even parts (the
job's capacity there 137,000 rps promised, 104,000 carried: 281 of the run's 323 s over the SLO) and 3%
under with the bound.

A vertex at parallelism n carries the source rate min_i rate_i / (a_v · share_i): the hottest subtask
saturates first. In reactive mode every vertex runs at the job's scale-out, so the job's capacity is the
minimum over vertices and the bottleneck is the vertex that attains it.

Seeds (`VertexSeed`, from a capacity plan's testbed runs: planning/seeds.py) are adopted by vertex name the
first time the graph shows a vertex of that name with nothing learned of it: each subtask's rate at every
parallelism the testbed ran, learned on no TaskManager (a testbed slot stands for any), the selectivity
from the testbed's input ratios, and a keyed vertex's subtask shares at each parallelism. The daemon's own
readings replace a seeded parallelism's rates at the first window there and outweigh the seeded
selectivity in one window; the seeded shares count as parallelisms seen, into which the daemon's own blend.
Until then the seeds carry the estimates to parallelisms never run, as any rates seen would.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import structlog

from capacity.key_groups import key_group_loads, share_row, unseen_shares
from capacity.regression import RegressionStats
from capacity.subtask_windows import MAX_BUSY_SHARE, SubtaskWindow
from config.schema import FLINK_MAX_PARALLELISM
from messages.types import MAX_RATE_RPS, JobGraph, VertexAssessment

_log = structlog.get_logger("foresail.dag")

CONTENDED_SHARE = 0.5
"""A subtask on a saturated core reading under this share of its known rate shows the core's share, not its
rate: another vertex's subtasks take the rest of the core (a smaller drop is learned: the slot carries less)."""


@dataclass(frozen=True)
class DagSettings:
    min_points: int = 6
    min_busy_std: float = 0.02
    min_slope_t: float = 10.0
    saturated_busy: float = 0.95
    """A window whose mean busy share reaches this shows the subtask's rate directly."""
    saturated_upstream_backpressure: float = 0.1
    """A busy window counts as saturated only when an upstream subtask spends this share backpressured."""
    saturated_contradicted: float = 1.1
    """A later window carrying this multiple of a saturated rate proves that rate wrong: it is dropped."""
    warmup_s: float = 120.0
    gauge_window_s: float = 60.0
    """Flink averages busy, idle and backpressured time over 60 s: within this long after a (re)start a
    task's readings mix in time it did not run (busy ≈ 1,000 ms/s at a trickle, a cold JVM), so no window
    that young is learned from, whatever the job-level warm-up."""

    @property
    def learning_warmup_s(self) -> float:
        return max(self.warmup_s, self.gauge_window_s)

    selectivity_decay: float = 0.9
    """Weight the decayed in/out sums keep per window (older windows fade)."""
    key_load_smoothing: float = 0.3
    """Weight of a new window in the per-key-group load estimate."""


@dataclass(frozen=True)
class VertexSeed:
    """What a testbed measured of one vertex, to start a daemon's model from (by vertex name: the testbed's
    vertex ids need not be the deployed job's)."""

    name: str
    rate_rps: dict[int, float]
    """Per parallelism run, the rate every subtask is given (the one that binds there)."""
    input_ratio: float
    """Records into the vertex per source record."""
    key_groups: int = 0
    """A keyed vertex's key groups (its max parallelism); 0: not keyed."""
    shares: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """A keyed vertex's subtask shares of its input per parallelism run."""


MAX_SELECTIVITY = 1000.0
"""Records out per record in beyond which a window's reading is damage, not an operator (a flatMap that
splits lines into words emits tens)."""
SELECTIVITY_JUMP = 100.0
"""A window whose selectivity is this multiple of the one known (taken as at least 1) is a damaged reading,
not learned: one join subtask reading 5e8 records/s out for one window sent every vertex to its max
parallelism for 59 loops, the decayed sums keeping it for that long."""

JUMP_RELEARN_WINDOWS = 5
"""Windows in a row, each beyond `SELECTIVITY_JUMP` and agreeing with one another within `JUMP_AGREEMENT`,
after which the vertex's selectivity is learned afresh from them: a redeployed job whose flatMap now
emits 200 records per record is an operator that changed, not a damaged reading (one window, or erratic
ones), and would otherwise be left out for good."""
JUMP_AGREEMENT = 2.0
NO_JUMP = (0, 0.0, 0.0)
"""A vertex's run of jump windows when there is none: (windows, records in, records out)."""

SEED_WEIGHT_RPS = 1.0
"""The records/s a seeded selectivity counts for in the decayed sums: one real window outweighs it."""


@dataclass(frozen=True)
class DagEstimate:
    per_scaleout_rps: dict[int, float]
    sources: dict[int, str]
    vertices: tuple[VertexAssessment, ...]
    bottleneck_id: str | None
    """Id of the vertex with the lowest capacity at the current parallelism (names may repeat)."""


_MIN_USEFUL_SHARE = 0.2
"""Share of a subtask's busy time that must be beyond the overhead for records / busy to tell its rate."""

_MIN_RATIO_BUSY = 0.05
"""Busy share beyond the overhead below which records / busy is a weak rate (an overhead not yet known
from a determined line can be most of it): used only for a vertex with no better one anywhere."""


@dataclass
class _VertexKnowledge:
    name: str = ""
    max_parallelism: int = 128
    records_in: float = 0.0
    records_out: float = 0.0
    jumped: tuple[int, float, float] = NO_JUMP
    """Windows in a row left out as a jump that agree, and their summed records in and out (not stored: a
    restart counts them anew)."""
    key_loads: np.ndarray | None = None
    """Per key group, the estimated share of the vertex's records (keyed vertices)."""
    shares_seen: dict[int, np.ndarray] = field(default_factory=dict)
    """Per parallelism seen, the subtasks' smoothed shares of the vertex's records (keyed vertices)."""


@dataclass
class DagModel:
    """The per-vertex knowledge: true rates per (vertex, parallelism, subtask), selectivities, key loads."""

    settings: DagSettings = field(default_factory=DagSettings)
    rates: dict[tuple[str, int, int], RegressionStats] = field(default_factory=dict)
    placement: dict[tuple[str, int, int], str | None] = field(default_factory=dict)
    """The TaskManager each subtask's rate was learned on."""
    saturated: dict[tuple[str, int, int], float] = field(default_factory=dict)
    """Records per busy second of the last windows in which the subtask was busy nearly all the time."""
    bounds: set[tuple[str, int, int]] = field(default_factory=set)
    """Subtasks learned on a contended TaskManager only: their rates are lower bounds (the share of the core
    the other subtasks left them), replaced by the first reading off contention."""
    _contended_before: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)
    """The TaskManagers contended in the last window: the next one's samples straddle the end of it."""
    _live: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)
    """The TaskManagers of the last window: a rate learned on any other one was a TaskManager now gone."""
    vertices: dict[str, _VertexKnowledge] = field(default_factory=dict)
    seeds: dict[str, VertexSeed] = field(default_factory=dict)
    """Seeds by vertex name not adopted yet (no graph seen with that name)."""
    configuration: str = ""
    _tables: dict[str, dict[int, np.ndarray]] | None = field(default=None, repr=False, compare=False)
    _overhead: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    """Per vertex (rates key), `_overheads()` as of the last rebuild of `_tables`."""
    _strong: set[str] = field(default_factory=set, repr=False, compare=False)
    """Vertices (rates keys) with a strong rate somewhere, as of the last rebuild of `_tables`."""
    _curves: dict[tuple, tuple[np.ndarray, list[str], np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False
    )
    """Per (vertex, input ratio, split), capacities at parallelism 1..p and every subtask's limit as computed
    from the current rates; emptied whenever the rates, key loads or configuration change."""
    _extrapolations: dict[tuple[str, int], _Extrapolation] = field(
        default_factory=dict, repr=False, compare=False
    )
    """Per (vertex, its parallelism now), its rates at any parallelism; emptied with `_curves` (the
    per-vertex plan asks for every parallelism of every vertex)."""
    _warned: set[str] = field(default_factory=set, repr=False, compare=False)
    """Vertices whose implausible selectivity has been logged (once each)."""

    # ---- learning -------------------------------------------------------------------------------
    def use_configuration(self, configuration: str) -> None:
        """Learn and estimate rates of this TaskManager configuration from now on."""
        if configuration != self.configuration:
            self.configuration, self._tables = configuration, None
            self._forget_estimates()

    def _forget_estimates(self) -> None:
        self._curves.clear()
        self._extrapolations.clear()

    def _rid(self, vertex_id: str) -> str:
        """The key a vertex's rates are kept under in the current configuration."""
        return f"{vertex_id}@{self.configuration}" if self.configuration else vertex_id

    def seed(self, seeds: Iterable[VertexSeed]) -> None:
        """Keep seeds to adopt when the graph shows their vertices (module docstring)."""
        self.seeds.update((s.name, s) for s in seeds)

    def _adopt_seeds(self, graph: JobGraph) -> None:
        """Turn the seeds of this graph's vertices into rates, selectivities and key loads, where nothing is
        learned of the vertex yet (its own readings always win). Only when the seeds name every vertex: a
        plan of another job that shares a source and a sink by name would leave the rest unknown, and an
        unknown vertex bounds nothing (a 1-slot capacity of 681,162 records/s where 1,754 fit)."""
        if not self.seeds:
            return
        names = [v.name for v in graph.vertices]
        if not set(names) <= set(self.seeds):
            return
        mine = {  # a name two vertices share tells neither apart
            v.vertex_id: self.seeds.pop(v.name)
            for v in graph.vertices
            if v.name in self.seeds and names.count(v.name) == 1
        }
        if not mine:
            return
        learned = {rid for rid, _, _ in self.rates}
        for vertex_id, seed in mine.items():
            vertex, rid = graph.vertex(vertex_id), self._rid(vertex_id)
            if rid in learned:
                continue
            for p, rate in seed.rate_rps.items():
                if 1 <= p <= vertex.max_parallelism and math.isfinite(rate) and rate > 0:
                    for i in range(p):
                        key = (rid, p, i)
                        self.rates[key], self.placement[key], self.saturated[key] = (
                            RegressionStats(),
                            None,
                            rate,
                        )
            known = self.vertices.setdefault(vertex_id, _VertexKnowledge())
            known.name, known.max_parallelism = vertex.name, vertex.max_parallelism
            selectivity = _seeded_selectivity(graph, vertex_id, mine)
            if known.records_in <= 0 and math.isfinite(selectivity) and selectivity >= 0:
                known.records_in, known.records_out = SEED_WEIGHT_RPS, SEED_WEIGHT_RPS * selectivity
            shares = {  # only rows that are shares: every row kept cuts the key-group runs (`unseen_shares`)
                p: row / row.sum()
                for p, s in seed.shares.items()
                if p <= vertex.max_parallelism and (row := share_row(s, p)) is not None
            }
            if shares and seed.key_groups == vertex.max_parallelism and known.key_loads is None:
                known.shares_seen = shares
                known.key_loads = key_group_loads(known.max_parallelism, shares, max(shares))
        self._tables = None
        self._forget_estimates()

    def learn(
        self, graph: JobGraph, windows: list[SubtaskWindow], contended: frozenset[str] = frozenset()
    ) -> None:
        """Learn rates, selectivities and key loads from one loop window. A subtask on a `contended`
        TaskManager (its core saturated) waits for the core with records queued, which Flink counts as
        busy, so its records per busy second are a lower bound of its rate (the cores' limit is
        capacity/cores.py's). Such a reading under `CONTENDED_SHARE` of the rate known for the subtask is
        the share of the core the other subtasks left it, and is not learned; a smaller drop is (the slot
        does carry less). A subtask first seen on a contended TaskManager learns its readings as a lower
        bound, which its first reading off contention replaces: at parallelism 1 every vertex shares one
        saturated core, and those shares are no rate to carry to 18 slots (a cold start on the twin's ysb
        job read the projection at 1,548 rps, where it carries 62,000). A TaskManager contended in the
        last window counts as contended in this one too: its samples straddle the end of the contention
        (hot-key × sine on the twin: a parser learned 7,088 rps, where it carries 23,000, from the window
        after one)."""
        self._adopt_seeds(graph)
        contended, self._contended_before = contended | self._contended_before, contended
        self._live = frozenset(w.taskmanager_id for w in windows if w.taskmanager_id)
        self._extrapolations.clear()  # they read `_live`
        below = self._below_known(graph, [w for w in windows if w.taskmanager_id in contended])
        self._tables = None
        self._forget_estimates()
        by_vertex = _group(windows)
        decay = self.settings.selectivity_decay
        for vertex in graph.vertices:
            known = self.vertices.setdefault(vertex.vertex_id, _VertexKnowledge())
            known.name, known.max_parallelism = vertex.name, vertex.max_parallelism
            mine = by_vertex.get(vertex.vertex_id, [])
            if not mine:
                continue
            held_back = self._upstream_held_back(graph, vertex.vertex_id, by_vertex)
            for w in mine:
                if w.stats.n and (w.vertex_id, w.subtask_index) not in below:
                    key = (self._rid(vertex.vertex_id), vertex.parallelism, w.subtask_index)
                    known_stats = self.rates.get(key, RegressionStats())
                    known_rate = self.saturated.pop(key, None)
                    on_contended = w.taskmanager_id in contended
                    if self.placement.get(key, w.taskmanager_id) != w.taskmanager_id or (
                        key in self.bounds and not on_contended
                    ):
                        # other hardware, or the first reading off contention: its own line
                        known_stats, known_rate = RegressionStats(), None
                        self.bounds.discard(key)
                    elif (
                        known_rate is not None
                        and w.records_in_rps > self.settings.saturated_contradicted * known_rate
                    ):
                        # a subtask never carries more than its rate: that reading was wrong, and the line
                        # through it too (a task's first minute after a restart reads busy all the time at a
                        # trickle; a rising load's first saturated window averages in the minute before)
                        known_stats, known_rate = RegressionStats(), None
                    if on_contended and known_stats.n == 0:
                        self.bounds.add(key)
                    self.rates[key] = known_stats.merge(w.stats)
                    self.placement[key] = w.taskmanager_id
                    if held_back and w.busy >= self.settings.saturated_busy and w.records_in_rps > 0:
                        seen = w.records_in_rps / w.busy
                        known_rate = seen if known_rate is None else 0.5 * known_rate + 0.5 * seen
                    if known_rate is not None:
                        self.saturated[key] = known_rate
            records_in = sum(w.records_in_rps for w in mine)
            # in and out of the same subtasks: one reporting no records out must not read as a filter
            reported = [w for w in mine if math.isfinite(w.records_out_rps)]
            window_in = sum(w.records_in_rps for w in reported)
            window_out = sum(w.records_out_rps for w in reported)
            if self._plausible_selectivity(known, vertex.vertex_id, window_in, window_out):
                known.records_in = decay * known.records_in + window_in
                known.records_out = decay * known.records_out + window_out
            if (
                _split_by_groups(graph, vertex.vertex_id)
                and len(mine) == vertex.parallelism
                and records_in > 0
            ):
                self._learn_key_loads(known, mine, vertex.parallelism)

    def _plausible_selectivity(
        self, known: _VertexKnowledge, vertex_id: str, records_in: float, records_out: float
    ) -> bool:
        """Whether one window's records in and out may teach the vertex's selectivity: some records in, and
        records out within `MAX_SELECTIVITY` and `SELECTIVITY_JUMP` times the selectivity known (at least 1)
        of them. A damaged window is left out and said once per vertex."""
        if records_in <= 0:
            if records_out > 0:
                self._warn_selectivity(known, vertex_id, records_in, records_out, "records out with none in")
            return False
        learned = known.records_out / known.records_in if known.records_in > 0 else 0.0
        if records_out > MAX_SELECTIVITY * records_in:
            self._warn_selectivity(
                known, vertex_id, records_in, records_out, f"above {MAX_SELECTIVITY:g} out per in"
            )
            return False
        limit = SELECTIVITY_JUMP * max(learned, 1.0)
        if records_out <= limit * records_in:
            known.jumped = NO_JUMP
            return True
        if self._relearned_after_jump(known, vertex_id, records_in, records_out):
            return True
        self._warn_selectivity(known, vertex_id, records_in, records_out, f"above {limit:g} out per in")
        return False

    @staticmethod
    def _relearned_after_jump(
        known: _VertexKnowledge, vertex_id: str, records_in: float, records_out: float
    ) -> bool:
        """Counts a window beyond the jump limit; the `JUMP_RELEARN_WINDOWS`-th in a row that agrees with
        the ones before replaces the vertex's sums with theirs (True: the window is then learned on top)."""
        count, jumped_in, jumped_out = known.jumped
        relative = (records_out / records_in) / (jumped_out / jumped_in) if count else math.nan
        agrees = 1 / JUMP_AGREEMENT <= relative <= JUMP_AGREEMENT
        if agrees and count + 1 >= JUMP_RELEARN_WINDOWS:
            _log.warning(
                "dag-selectivity-relearned",
                vertex=known.name or vertex_id,
                selectivity_before=known.records_out / known.records_in if known.records_in > 0 else None,
                selectivity=(jumped_out + records_out) / (jumped_in + records_in),
                windows=count + 1,
                reason=f"{count + 1} windows in a row agree on a selectivity beyond {SELECTIVITY_JUMP:g}x the "
                "one known: the operator changed",
            )
            known.records_in, known.records_out, known.jumped = jumped_in, jumped_out, NO_JUMP
            return True
        known.jumped = (
            (count + 1, jumped_in + records_in, jumped_out + records_out)
            if agrees
            else (1, records_in, records_out)
        )
        return False

    def _warn_selectivity(
        self, known: _VertexKnowledge, vertex_id: str, records_in: float, records_out: float, reason: str
    ) -> None:
        if vertex_id not in self._warned:
            self._warned.add(vertex_id)
            _log.warning(
                "dag-selectivity-window-left-out",
                vertex=known.name or vertex_id,
                records_in_rps=records_in,
                records_out_rps=records_out,
                reason=reason,
            )

    def _below_known(self, graph: JobGraph, windows: list[SubtaskWindow]) -> set[tuple[str, int]]:
        """(vertex, subtask) of the windows whose records per busy second are under `CONTENDED_SHARE` of the
        rate known for the subtask (at its parallelism, or filled from the nearest seen)."""
        below = set()
        for vertex_id, mine in _group(windows).items():
            known, kind = self.vertex_rates(graph, vertex_id, graph.vertex(vertex_id).parallelism)
            if kind == "unknown":
                continue
            below.update(
                (vertex_id, w.subtask_index)
                for w in mine
                if w.busy > 0
                and w.subtask_index < len(known)
                and w.records_in_rps / w.busy < CONTENDED_SHARE * known[w.subtask_index]
            )
        return below

    def _upstream_held_back(
        self, graph: JobGraph, vertex_id: str, by_vertex: dict[str, list[SubtaskWindow]]
    ) -> bool:
        """Whether a busy window of the vertex can be a saturated one: it is a source, or an upstream vertex
        is backpressured (a vertex that cannot keep up holds its inputs back; a restarted task's first
        minute reads busy all the time while its inputs read neither idle nor backpressured). True where
        the upstream's backpressure is not reported."""
        inputs = graph.inputs(vertex_id)
        if not inputs:
            return True
        shares = [
            w.backpressured
            for e in inputs
            for w in by_vertex.get(e.source_id, [])
            if math.isfinite(w.backpressured)
        ]
        return not shares or max(shares) >= self.settings.saturated_upstream_backpressure

    def _learn_key_loads(
        self, known: _VertexKnowledge, windows: list[SubtaskWindow], parallelism: int
    ) -> None:
        """Update this parallelism's subtask shares, then the key-group loads that fit every parallelism."""
        loads = np.zeros(parallelism)
        for w in windows:
            loads[w.subtask_index] = w.records_in_rps
        share = loads / loads.sum()
        seen = known.shares_seen.get(parallelism)
        if seen is not None and len(seen) == parallelism and np.isfinite(seen).all():
            alpha = self.settings.key_load_smoothing
            share = (1 - alpha) * seen + alpha * share
        known.shares_seen[parallelism] = share
        known.key_loads = key_group_loads(known.max_parallelism, known.shares_seen, parallelism)

    # ---- estimating -----------------------------------------------------------------------------
    def subtask_rate_rps(self, vertex_id: str, parallelism: int, index: int) -> float:
        """Records/s the subtask processes when busy all the time; NaN when unknown."""
        rid = self._rid(vertex_id)
        self._rate_table(vertex_id)  # rebuilds the overheads after learning
        return self._rate_of((rid, parallelism, index), self._overhead.get(rid, 0.0))[0]

    def _rate_of(self, key: tuple[str, int, int], overhead: float = 0.0) -> tuple[float, bool]:
        """The subtask's rate at busy 1 and whether it is a strong one: its line's value there, else its
        records per busy second beyond the vertex's `overhead`; weak where too little of the busy time is
        beyond it to tell (a light load: the plain ratio, which under-states the rate)."""
        bound = key in self.bounds
        if key in self.saturated:
            return self.saturated[key], not bound
        stats = self.rates.get(key)
        if stats is None or stats.n == 0 or stats.mean_y <= 0:
            return math.nan, False
        slope = self._determined_slope(stats)
        if slope > 0:
            return stats.mean_y + slope * (1.0 - stats.mean_x), not bound
        useful = stats.mean_x - overhead
        if useful > _MIN_USEFUL_SHARE * stats.mean_x and useful >= _MIN_RATIO_BUSY:
            return stats.mean_y * (1.0 - overhead) / useful, not bound
        return (stats.mean_y / stats.mean_x if stats.mean_x > 0 else math.nan), False

    def _determined_slope(self, stats: RegressionStats) -> float:
        """Records per busy second of a line its own data determine; NaN otherwise."""
        s = self.settings
        if stats.n >= s.min_points and stats.var_x >= s.min_busy_std**2 and stats.slope_t >= s.min_slope_t:
            return stats.reverse_slope
        return math.nan

    def _overheads(self) -> dict[str, float]:
        """Per vertex (rates key), the busy share its subtasks spend without records (timers, watermarks):
        the median busy at no records of its determined lines, 0 until one is. Without it a light load's
        records / busy under-states the rate many times over (5 ms of overhead beside 1 ms of records)."""
        at_zero: dict[str, list[float]] = {}
        for (rid, _, _), stats in self.rates.items():
            slope = self._determined_slope(stats)
            at_zero.setdefault(rid, [])
            if slope > 0:
                at_zero[rid].append(min(max(stats.mean_x - stats.mean_y / slope, 0.0), 0.5))
        return {rid: float(np.median(v)) if v else 0.0 for rid, v in at_zero.items()}

    def _rate_table(self, vertex_id: str) -> dict[int, np.ndarray]:
        """Per observed parallelism, the vertex's per-subtask rates (NaN unknown); rebuilt after learning."""
        if self._tables is None:
            tables: dict[str, dict[int, np.ndarray]] = {}
            self._overhead = self._overheads()
            rates = {key: self._rate_of(key, self._overhead[key[0]]) for key in self.rates}
            strong = {rid for (rid, _, _), (rate, sure) in rates.items() if sure and math.isfinite(rate)}
            for (rid, p, i), (rate, sure) in rates.items():
                row = tables.setdefault(rid, {}).setdefault(p, np.full(p, np.nan))
                if i < p and (sure or rid not in strong):  # a weak rate only where nothing better is known
                    row[i] = rate
            self._tables, self._strong = tables, strong
        return self._tables.get(self._rid(vertex_id), {})

    def vertex_rates(self, graph: JobGraph, vertex_id: str, parallelism: int) -> tuple[np.ndarray, str]:
        """Per subtask rates at `parallelism` and where they come from ('observed', 'nearest' or 'unknown'):
        subtasks never seen take the rate of the subtask that binds at the nearest parallelism seen, scaled
        by the state model (see module docstring)."""
        return self._extrapolation(graph, vertex_id).rates(parallelism)

    def _extrapolation(self, graph: JobGraph, vertex_id: str) -> _Extrapolation:
        key = (vertex_id, graph.vertex(vertex_id).parallelism)
        if key not in self._extrapolations:
            self._extrapolations[key] = _Extrapolation(self, graph, vertex_id)
        return self._extrapolations[key]

    def _mean_rate(self, vertex_id: str, parallelism: int) -> float:
        row = self._rate_table(vertex_id).get(parallelism)
        return float(np.nanmean(row)) if row is not None and np.isfinite(row).any() else math.nan

    def selectivity(self, vertex_id: str) -> float:
        known = self.vertices.get(vertex_id)
        if known is None or known.records_in <= 0:
            return math.nan
        return known.records_out / known.records_in

    def input_ratios(self, graph: JobGraph) -> dict[str, float]:
        """DS2's walk: records each vertex receives per source record, where the sources together read
        one (each its share of what they read: 1 each made a join of a 1,000 and a 10 rps stream receive
        2 records per source record, half its capacity). An input that sends nothing adds nothing (its
        selectivity is unknown: NaN would make the vertex unknown)."""
        ratios = self._source_shares(graph)
        for vertex in graph.vertices:
            inputs = graph.inputs(vertex.vertex_id)
            if inputs:
                ratios[vertex.vertex_id] = sum(
                    ratios[e.source_id] * self.selectivity(e.source_id) for e in inputs if ratios[e.source_id]
                )
        return ratios

    def _source_shares(self, graph: JobGraph) -> dict[str, float]:
        sources = [v.vertex_id for v in graph.vertices if not graph.inputs(v.vertex_id)]
        read = [self.vertices[v].records_in if v in self.vertices else 0.0 for v in sources]
        total = sum(read)
        if len(sources) == 1 or not total > 0:
            return dict.fromkeys(sources, 1.0 / len(sources))
        return {v: r / total for v, r in zip(sources, read, strict=True)}

    def shares(self, graph: JobGraph, vertex_id: str, parallelism: int) -> np.ndarray:
        """Each subtask's share of the vertex's input at `parallelism` (skew from the key-group loads)."""
        return self._share_row(vertex_id, _split_of(graph, vertex_id), parallelism)

    def _share_row(self, vertex_id: str, split: str, parallelism: int) -> np.ndarray:
        if split == "broadcast":
            return np.ones(parallelism)
        known = self.vertices.get(vertex_id)
        if split == "groups" and known is not None and known.key_loads is not None:
            return unseen_shares(known.key_loads, tuple(sorted(known.shares_seen)), parallelism)
        return np.full(parallelism, 1.0 / parallelism)

    def vertex_capacity_rps(
        self, graph: JobGraph, vertex_id: str, parallelism: int, input_ratio: float
    ) -> tuple[float, str]:
        """Source records/s the vertex carries at `parallelism`: its hottest subtask's limit (inf: it never
        binds; 'unknown' when its rates or an upstream selectivity are not known)."""
        capacities, kinds = self.capacity_curve(graph, vertex_id, input_ratio, parallelism)
        return float(capacities[-1]), kinds[-1]

    def capacity_curve(
        self, graph: JobGraph, vertex_id: str, input_ratio: float, top: int
    ) -> tuple[np.ndarray, list[str]]:
        """The vertex's capacity at every parallelism 1..top (index p − 1) and where each comes from, over a
        matrix of every parallelism's rates and shares; cached until the next learning."""
        capacities, kinds, _ = self._limits(graph, vertex_id, input_ratio, top)
        return capacities, kinds

    def busy_per_source_record(
        self, graph: JobGraph, vertex_id: str, input_ratio: float, top: int
    ) -> np.ndarray:
        """Row p − 1: the busy seconds each subtask spends per source record at parallelism p, beyond its
        fixed overhead (1 / its limit; 0 where it gets no input or its rate is unknown)."""
        return 1.0 / self._limits(graph, vertex_id, input_ratio, top)[2]

    def _limits(
        self, graph: JobGraph, vertex_id: str, input_ratio: float, top: int
    ) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Capacities and kinds of `capacity_curve`, and row p − 1: each subtask's source-rate limit at p."""
        split = _split_of(graph, vertex_id)
        key = (vertex_id, input_ratio, split)
        cached = self._curves.get(key)
        if cached is not None and len(cached[0]) >= top:
            return cached[0][:top], cached[1][:top], cached[2][:top, :top]
        if math.isnan(input_ratio) or input_ratio <= 0:
            kind = "unknown" if math.isnan(input_ratio) else "no-input"
            return np.full(top, math.inf), [kind] * top, np.full((top, top), math.inf)
        rates, kinds = np.full((top, top), np.nan), []
        extrapolation = self._extrapolation(graph, vertex_id)
        for p in range(1, top + 1):
            rates[p - 1, :p], kind = extrapolation.rates(p)
            kinds.append(kind)
        if kinds[0] == "unknown":
            return np.full(top, math.inf), kinds, np.full((top, top), math.inf)
        load = input_ratio * self._share_matrix(vertex_id, split, top)
        with np.errstate(divide="ignore", invalid="ignore"):
            limits = np.where((load > 0) & np.isfinite(rates), rates / load, math.inf)
        capacities = limits.min(axis=1)
        self._curves[key] = (capacities, kinds, limits)
        return capacities, kinds, limits

    def _share_matrix(self, vertex_id: str, split: str, top: int) -> np.ndarray:
        """Row p − 1: the shares at parallelism p, padded with 0 to `top` columns."""
        parallelisms = np.arange(1, top + 1)
        inside = np.arange(top)[None, :] < parallelisms[:, None]
        if split == "even":
            return np.where(inside, 1.0 / parallelisms[:, None], 0.0)
        if split == "broadcast":
            return inside.astype(float)
        matrix = np.zeros((top, top))
        for p in parallelisms:  # row by row: owners of every group × every p can be large
            matrix[p - 1, :p] = self._share_row(vertex_id, split, int(p))
        return matrix

    def estimate(
        self, graph: JobGraph, windows: list[SubtaskWindow], current: int, max_scaleout: int
    ) -> DagEstimate:
        """Capacity per scale-out 1..max_scaleout (min over vertices) and the current vertices' state."""
        ratios = self.input_ratios(graph)
        per_scaleout, sources, bottlenecks = {}, {}, {}
        if graph.vertices and max_scaleout >= 1:
            scaleouts = np.arange(1, max_scaleout + 1)
            capacity = np.empty((len(graph.vertices), max_scaleout))
            nearest = np.empty((len(graph.vertices), max_scaleout), dtype=bool)
            for row, vertex in enumerate(graph.vertices):
                top = min(max_scaleout, vertex.max_parallelism)
                curve, kinds = self.capacity_curve(graph, vertex.vertex_id, ratios[vertex.vertex_id], top)
                index = np.minimum(scaleouts, vertex.max_parallelism) - 1
                capacity[row] = curve[index]
                nearest[row] = (np.array(kinds) == "nearest")[index]
            first_min = capacity.argmin(axis=0)  # the first vertex attaining the minimum, as a strict < scan
            best = capacity[first_min, np.arange(max_scaleout)]
            extrapolated = nearest.any(axis=0)
            for n, value, vertex, guessed in zip(
                scaleouts.tolist(), best.tolist(), first_min.tolist(), extrapolated.tolist(), strict=True
            ):
                if math.isfinite(value):
                    per_scaleout[n], bottlenecks[n] = value, graph.vertices[vertex].vertex_id
                    sources[n] = "extrapolated" if guessed else "observed"
        by_vertex = _group(windows)
        vertices = tuple(
            self._vertex_estimate(graph, v.vertex_id, by_vertex.get(v.vertex_id, []), ratios[v.vertex_id])
            for v in graph.vertices
        )
        return DagEstimate(per_scaleout, sources, vertices, bottlenecks.get(current))

    def _vertex_estimate(
        self, graph: JobGraph, vertex_id: str, windows: list[SubtaskWindow], ratio: float
    ) -> VertexAssessment:
        vertex = graph.vertex(vertex_id)
        records = np.array([w.records_in_rps for w in windows])
        busy = [w.busy for w in windows if math.isfinite(w.busy)]
        pressure = [w.backpressured for w in windows if math.isfinite(w.backpressured)]
        capacity, _ = self.vertex_capacity_rps(graph, vertex_id, vertex.parallelism, ratio)
        return VertexAssessment(
            vertex_id=vertex_id,
            name=vertex.name,
            parallelism=vertex.parallelism,
            keyed=graph.keyed(vertex_id),
            input_ratio=ratio,
            selectivity=self.selectivity(vertex_id),
            true_rate_rps=self._mean_rate(vertex_id, vertex.parallelism),
            utilization=max(busy) if busy else math.nan,
            backpressured=max(pressure) if pressure else math.nan,
            skew=float(records.max() / records.mean()) if len(records) and records.mean() > 0 else math.nan,
            capacity_rps=capacity,
        )

    def needed_parallelism(
        self, graph: JobGraph, vertex_id: str, source_rps: float, max_parallelism: int | None = None
    ) -> int | None:
        """Smallest parallelism at which the vertex carries `source_rps` (DS2's target, skew-aware);
        None when even its max parallelism does not (or nothing is known of it)."""
        vertex = graph.vertex(vertex_id)
        ratio = self.input_ratios(graph)[vertex_id]
        top = min(vertex.max_parallelism, max_parallelism or vertex.max_parallelism)
        if top < 1:
            return None
        capacities, kinds = self.capacity_curve(graph, vertex_id, ratio, top)
        for p, (capacity, kind) in enumerate(zip(capacities.tolist(), kinds, strict=True), start=1):
            if kind == "unknown":
                return None
            if capacity >= source_rps:
                return p
        return None

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "rates": [
                [v, p, i, s.to_dict(), self.placement.get((v, p, i)), self.saturated.get((v, p, i))]
                for (v, p, i), s in self.rates.items()
            ],
            "bounds": [list(key) for key in self.bounds],
            "vertices": {
                vid: {
                    "name": k.name,
                    "max_parallelism": k.max_parallelism,
                    "records_in": k.records_in,
                    "records_out": k.records_out,
                    "key_loads": None if k.key_loads is None else k.key_loads.tolist(),
                    "shares_seen": {str(p): v.tolist() for p, v in k.shares_seen.items()},
                }
                for vid, k in self.vertices.items()
            },
            "seeds": [
                [
                    s.name,
                    {str(p): r for p, r in s.rate_rps.items()},
                    s.input_ratio,
                    s.key_groups,
                    {str(p): list(v) for p, v in s.shares.items()},
                ]
                for s in self.seeds.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: dict, settings: DagSettings | None = None) -> DagModel:
        """The model `to_dict` wrote, keeping only what can be true; the rest is dropped with one warning. A
        subtask or parallelism outside Flink's range (a parallelism of -5 sized an array at every later
        analysis and held the loop for good), a rate that is no rate (every rate at 1e300 kept the job at
        one worker for good: only a window carrying more disproves a rate), a subtask-share row that does
        not fit its parallelism (3 shares at parallelism 2 failed every analysis and was saved back each
        time)."""
        model, dropped = cls(settings or DagSettings()), []
        for entry in data.get("rates", []):
            _load(dropped, "rate", model._load_rate, entry)
        for entry in data.get("bounds", []):
            _load(dropped, "bound", model._load_bound, entry)
        for vertex_id, known in data.get("vertices", {}).items():
            _load(dropped, f"vertex {vertex_id}", model._load_vertex, str(vertex_id), known, dropped)
        for entry in data.get("seeds", []):
            _load(dropped, "seed", model._load_seed, entry)
        if dropped:
            _log.warning("dag-store-implausible-entries-dropped", dropped=dict(Counter(dropped)))
        return model

    def _load_rate(self, entry: list) -> None:
        vertex_id, parallelism, index, stats, taskmanager, saturated = entry
        key = (str(vertex_id), int(parallelism), int(index))
        stats = RegressionStats.from_dict(stats)
        if not (
            _subtask_of(key)
            and stats.within(MAX_BUSY_SHARE, MAX_RATE_RPS)
            and isinstance(taskmanager, str | None)
        ):
            raise ValueError
        if saturated is not None and _rate(saturated) is None:
            raise ValueError
        self.rates[key], self.placement[key] = stats, taskmanager
        if saturated is not None:
            self.saturated[key] = float(saturated)

    def _load_bound(self, entry: list) -> None:
        vertex_id, parallelism, index = entry
        key = (str(vertex_id), int(parallelism), int(index))
        if not _subtask_of(key):
            raise ValueError
        self.bounds.add(key)

    def _load_vertex(self, vertex_id: str, known: dict, dropped: list[str]) -> None:
        max_parallelism = int(known.get("max_parallelism", 128))
        if not _parallelism(max_parallelism):
            raise ValueError
        vertex = self.vertices[vertex_id] = _VertexKnowledge(str(known.get("name", "")), max_parallelism)
        records_in, records_out = float(known.get("records_in", 0.0)), float(known.get("records_out", 0.0))
        if _plausible_sums(records_in, records_out, self.settings.selectivity_decay):
            vertex.records_in, vertex.records_out = records_in, records_out
        else:
            dropped.append(f"vertex {vertex_id} selectivity")
        loads = known.get("key_loads")
        if loads is not None:
            vertex.key_loads = share_row(loads, max_parallelism)
            if vertex.key_loads is None:
                dropped.append(f"vertex {vertex_id} key loads")
        for p, row in known.get("shares_seen", {}).items():
            share = share_row(row, int(p)) if str(p).isdigit() and _parallelism(int(p)) else None
            if share is None:
                dropped.append(f"vertex {vertex_id} shares at {p}")
            else:
                vertex.shares_seen[int(p)] = share

    def _load_seed(self, entry: list) -> None:
        name, rates, ratio, groups, shares = entry
        seed_rates = {int(p): _rate(r) for p, r in rates.items() if _parallelism(int(p))}
        seed_shares = {int(p): share_row(v, int(p)) for p, v in shares.items() if _parallelism(int(p))}
        self.seed(
            [
                VertexSeed(
                    str(name),
                    {p: r for p, r in seed_rates.items() if r is not None},
                    float(ratio),
                    int(groups),
                    {p: tuple(v.tolist()) for p, v in seed_shares.items() if v is not None},
                )
            ]
        )


def _load(dropped: list[str], what: str, load, *args) -> None:
    """Run one entry's loader; an entry it cannot read or refuses is noted in `dropped`, never raised."""
    try:
        load(*args)
    except (TypeError, ValueError, KeyError, AttributeError):
        dropped.append(what)


def _rate(value: object) -> float | None:
    """A stored records-per-second rate, or None where it cannot be one (not in (0, MAX_RATE_RPS])."""
    rate = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    return rate if 0 < rate <= MAX_RATE_RPS else None


def _plausible_sums(records_in: float, records_out: float, decay: float) -> bool:
    """Decayed records-in and -out sums the windows can give: finite, ≥ 0, at most every subtask's top rate
    summed over the decay, out within `MAX_SELECTIVITY` of in."""
    top = MAX_RATE_RPS * FLINK_MAX_PARALLELISM / max(1.0 - decay, 1e-3)
    if not (0 <= records_in <= top and 0 <= records_out <= top):
        return False
    return records_out <= MAX_SELECTIVITY * records_in or records_out == 0


def _parallelism(parallelism: int) -> bool:
    return 1 <= parallelism <= FLINK_MAX_PARALLELISM


def _subtask_of(key: tuple[str, int, int]) -> bool:
    """(vertex, parallelism, subtask index) names a subtask Flink can run."""
    _, parallelism, index = key
    return _parallelism(parallelism) and 0 <= index < parallelism


class _Extrapolation:
    """One vertex's rates at any parallelism: observed where seen, else the binding subtask's rate at the
    nearest parallelism seen, scaled by the state model 1 / rate = a + b / p (module docstring). Computes
    the fill of each nearest parallelism and the state model once, however many parallelisms are asked."""

    def __init__(self, model: DagModel, graph: JobGraph, vertex_id: str) -> None:
        self.model, self.graph, self.vertex_id = model, graph, vertex_id
        self.table = model._rate_table(vertex_id)
        self.known = _known(self.table)
        self.fills: dict[int, float] = {}
        bounds_only = model._rid(vertex_id) not in model._strong
        self.highest_bound = (  # lower bounds only: the highest seen is the closest anywhere
            max(map(self._binding_rate, self.known)) if bounds_only and self.known else None
        )
        self.state = None if bounds_only else self._state_model()
        if self.highest_bound is None:
            self.table = self._on_todays_taskmanagers()
            self.known = _known(self.table)

    def rates(self, parallelism: int) -> tuple[np.ndarray, str]:
        rates = self.table.get(parallelism, np.full(parallelism, np.nan))
        if self.highest_bound is not None:
            kind = "observed" if np.isfinite(rates).all() else "nearest"
            return np.fmax(rates, self.highest_bound), kind
        if np.isfinite(rates).all():
            return rates, "observed"
        if not self.known:
            return rates, "unknown"
        nearest = min(self.known, key=lambda p: (abs(p - parallelism), p))
        fill = self._binding_rate(nearest) * self._state_factor(nearest, parallelism)
        return np.where(np.isfinite(rates), rates, fill), "observed" if nearest == parallelism else "nearest"

    def _on_todays_taskmanagers(self) -> dict[int, np.ndarray]:
        """The rows of the other parallelisms seen as the TaskManagers of today would carry them. A rate
        learned there on another TaskManager than the one at that subtask's index now is that TaskManager's
        rate now, scaled by the state model; one learned on a TaskManager now gone, at an index beyond
        today's, is unknown (filled as a subtask never seen). TaskManager speeds vary (5% CoV on the twin) and
        the sine trace's cycles replace the TaskManagers beyond its trough: the session job, planning a
        scale-in from 12 on the rate a faster TaskManager once had at that index, promised 5% more than 11
        then carried (63 s over the SLO)."""
        model, rid = self.model, self.model._rid(self.vertex_id)
        now = self.graph.vertex(self.vertex_id).parallelism
        here = self.table.get(now)
        if here is None or not model._live:
            return self.table
        todays = [model.placement.get((rid, now, i)) for i in range(now)]
        placed = {now: here}
        for p, row in self.table.items():
            if p == now:
                continue
            row, factor = row.copy(), self._state_factor(now, p)
            for i in range(p):
                learned_on = model.placement.get((rid, p, i))
                if learned_on is None:
                    continue  # a seed: a testbed's slot stands for any TaskManager
                if i < now and learned_on != todays[i]:
                    row[i] = here[i] * factor
                elif i >= now and learned_on not in model._live:
                    row[i] = math.nan
            placed[p] = row
        return placed

    def _binding_rate(self, parallelism: int) -> float:
        """The rate of the subtask that limits the vertex at a parallelism seen."""
        if parallelism not in self.fills:
            seen = self.table[parallelism]
            shares = self.model.shares(self.graph, self.vertex_id, parallelism)
            with np.errstate(divide="ignore", invalid="ignore"):
                limits = np.where(np.isfinite(seen), seen / shares, np.inf)
            self.fills[parallelism] = float(seen[int(np.argmin(limits))])
        return self.fills[parallelism]

    def _state_model(self) -> tuple[float, float] | None:
        """(a, b) of 1 / rate = a + b / p over the mean rates seen; None for fewer than two parallelisms
        or a fit that changes the cost by less than 10% over them (TaskManager speeds, not state)."""
        if len(self.known) < 2:
            return None
        costs = np.array([1.0 / np.nanmean(self.table[p]) for p in self.known])
        inverse_p = 1.0 / np.array(self.known, dtype=float)
        b, a = np.polyfit(inverse_p, costs, 1)
        if a < 0:  # a cost per record that reaches 0 at some p: 1e20 rps predicted there; all state instead
            a, b = 0.0, float(inverse_p @ costs / (inverse_p @ inverse_p))
        if not (b > 0 and a + b / self.known[0] > 1.1 * (a + b / self.known[-1])):
            return None
        return float(a), float(b)

    def _state_factor(self, seen: int, target: int) -> float:
        if self.state is None:
            return 1.0
        a, b = self.state
        cost_target = a + b / target
        return (a + b / seen) / cost_target if cost_target > 0 else 1.0


def _known(table: dict[int, np.ndarray]) -> list[int]:
    """The parallelisms with a rate for some subtask, ascending."""
    return sorted(p for p, row in table.items() if np.isfinite(row).any())


def _seeded_selectivity(graph: JobGraph, vertex_id: str, seeds: dict[str, VertexSeed]) -> float:
    """Records out per record in from the testbed's input ratios: a seeded downstream vertex fed by this one
    alone receives everything it emits (NaN: there is none)."""
    ratio = seeds[vertex_id].input_ratio
    for edge in graph.outputs(vertex_id):
        downstream = seeds.get(edge.target_id)
        if downstream is not None and len(graph.inputs(edge.target_id)) == 1 and ratio > 0:
            return downstream.input_ratio / ratio
    return math.nan


def _split_of(graph: JobGraph, vertex_id: str) -> str:
    """How `shares` splits the vertex's input: 'broadcast', by key 'groups' or 'even'."""
    inputs = graph.inputs(vertex_id)
    if inputs and all(e.ship_strategy.upper() == "BROADCAST" for e in inputs):
        return "broadcast"
    return "groups" if _split_by_groups(graph, vertex_id) else "even"


def _split_by_groups(graph: JobGraph, vertex_id: str) -> bool:
    """A keyed vertex splits its input by key groups; so does a source, by its input's partitions (a
    source whose split is even learns even loads)."""
    return graph.keyed(vertex_id) or not graph.inputs(vertex_id)


def _group(windows: list[SubtaskWindow]) -> dict[str, list[SubtaskWindow]]:
    grouped: dict[str, list[SubtaskWindow]] = {}
    for w in windows:
        grouped.setdefault(w.vertex_id, []).append(w)
    return grouped
