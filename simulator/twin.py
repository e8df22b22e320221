"""A 1-second discrete-time digital twin of a Flink job in reactive mode reading from Kafka.

Ground truth lives here (true capacity, every record's latency); the loop may only see it through
`simulator.metrics`. The per-second step touches a handful of scalars and one small numpy vector per
quantity, so a 6-hour trace simulates in well under a second or two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal, NamedTuple

import numpy as np

from forecasting.grid import runs
from simulator.deployment import CPU_BOTTLENECK, Deployment, JobLoad, WorkerInfo
from simulator.history import TwinHistory
from simulator.latency import LatencyTracker
from simulator.memory_model import PROFILES, StateRates, state_rates
from simulator.params import TwinParams
from simulator.skew import KeyGroups
from simulator.subtask_memory import subtask_memory_mb
from simulator.topology import Topology, TopologyError, VertexSpec

__all__ = ["BoundaryState", "Twin", "TwinRescale", "WorkerInfo"]


class TwinRescale(NamedTuple):
    """A per-vertex rescale from its request to every vertex running at its target (ground truth)."""

    requested_s: int
    finished_s: int
    vertex_parallelism: dict[str, int]


class BoundaryState(NamedTuple):
    """State of the job at an instant, after the actions taken at that instant."""

    lag_records: int
    parallelism: int
    restarts: int
    run_start_s: int | None  # None while the job is down
    managed_mb: float = 0.0  # managed memory per slot


def single_topology(params: TwinParams) -> Topology:
    """Today's one-operator job with the twin's key knobs (what `topologies/single.yaml` declares)."""
    vertex = VertexSpec(
        name="job", ship="HASH", num_keys=params.num_keys, max_parallelism=params.max_parallelism
    )
    return Topology(name="single", vertices=(vertex,))


def max_parallelism_of(params: TwinParams, topology: Topology) -> int:
    """The largest scale-out a twin of `topology` runs: its own max parallelism and every vertex's."""
    return min(params.max_parallelism, *(v.max_parallelism for v in topology.vertices))


class Twin:
    """Simulated Flink job: a DAG of vertices on TaskManagers with key-skewed shares, a Kafka log,
    checkpoints, restarts, latency. The default topology is one keyed CPU-bound operator."""

    def __init__(
        self,
        trace_rps: np.ndarray,
        params: TwinParams | None = None,
        *,
        parallelism: int = 12,
        seed: int = 0,
        topology: Topology | None = None,
        granularity: Literal["job", "vertex"] = "job",
    ) -> None:
        """`granularity` 'vertex': the adaptive scheduler, every vertex at its own parallelism (all at
        `parallelism` to start), rescaled by `scale_vertices` with the per-vertex path's short downtime and
        no replay (Flink 2.x restarts from the checkpoint it waits for, FLIP-461)."""
        if granularity not in ("job", "vertex"):
            raise ValueError(f"granularity must be 'job' or 'vertex', got {granularity!r}")
        self.granularity = granularity
        self.params = params if params is not None else TwinParams()
        self.topology = topology if topology is not None else single_topology(self.params)
        self.max_parallelism = max_parallelism_of(self.params, self.topology)
        """The largest scale-out it runs: its own max parallelism and every vertex's."""
        initial_n = self._validate_parallelism(parallelism)
        trace = np.asarray(trace_rps, dtype=float)
        if trace.ndim != 1 or len(trace) == 0 or not np.all(np.isfinite(trace)) or np.any(trace < 0):
            raise ValueError("trace_rps must be a non-empty 1-D array of finite rates >= 0")
        self._trace_rps = trace.copy()
        self._trace_rps.setflags(write=False)
        # whole records, rounded on the running total: rounding each second alone made a trace of 1.5 rps
        # arrive at 2 (+33%) and one of 2.5 at 2 (-20%)
        arrivals = np.diff(np.rint(np.cumsum(trace)), prepend=0.0).astype(np.int64)
        self._arrivals = arrivals.tolist()  # Python ints: fast scalar access in the step
        self._cumulative = np.concatenate(([0], np.cumsum(arrivals)))

        keys_seq, speed_seq, cpu_seq, downtime_seq, failure_seq = np.random.SeedSequence(seed).spawn(5)
        p = self.params
        self.profile = PROFILES[p.job_profile]
        self._deployment = Deployment(
            self.topology,
            _hash_keys(self.topology, keys_seq),
            np.random.default_rng(speed_seq),
            p.speed_cov,
            self.profile,
            p.managed_mb,
        )
        self._cpu_rng = np.random.default_rng(cpu_seq)
        self._downtime_rng = np.random.default_rng(downtime_seq)
        self._failure_rng = np.random.default_rng(failure_seq)

        self._deployment.worker_capacity_rps = self._sized_worker_capacity_rps(float(trace.max()))

        self._phi = math.exp(-1.0 / p.cpu_noise_tau_s) if p.cpu_noise_tau_s > 0 else 0.0
        self._innovation_sd = p.cpu_noise_sd * math.sqrt(1.0 - self._phi**2)
        self._failure_p = p.failure_rate_per_hour / 3600.0

        self._t = 0
        self._log_end = 0  # Kafka log end offset
        self._position = 0  # consumer position
        self._high_water = 0  # records processed at least once
        self._checkpoint = 0  # consumer position in the last completed checkpoint
        self._processed_total = 0
        self._carry = 0.0  # fractional capacity carried to the next second
        self._running = True
        self._run_start = 0
        self._resume_at: int | None = None
        self._restarts = 0
        self._rescales = 0
        self._worker_seconds = 0
        self._down_seconds = 0
        self._managed_mb_seconds = 0.0
        self._subtask_seconds = 0
        self._subtask_mb_seconds = 0.0
        self._cpu_used_seconds = 0.0
        self._memory_changes = 0
        self.completed_rescales: list[TwinRescale] = []
        """Per-vertex rescales in request order (a finished one has finished_s <= now)."""
        self._state = StateRates(0.0, 0.0, 0.0, 0.0, 0.0)  # per record, at the current configuration

        self._noise = np.zeros(0)  # per-worker AR(1) CPU noise state
        self._loads: list[tuple[int, JobLoad]] = []  # (since, coefficients) per deployment

        self.history = TwinHistory(len(trace) + 1, max(initial_n, p.reference_scaleout))
        self.latency = LatencyTracker(self._cumulative, p.base_latency_s)
        if granularity == "vertex":
            self._deployment.vertex_parallelism = self._capped(initial_n)
            initial_n = max(self._deployment.vertex_parallelism)
        self._resize(initial_n, 0)

    def _sized_worker_capacity_rps(self, peak_rps: float) -> float:
        """Explicit capacity, or the one that lets a fresh reference deployment carry the peak plus headroom."""
        p = self.params
        if p.worker_capacity_rps is not None:
            return float(p.worker_capacity_rps)
        if peak_rps <= 0:
            raise ValueError("cannot size workers from a trace whose peak is 0; set worker_capacity_rps")
        # capacity is linear in the per-worker capacity: measure the reference deployment at unit capacity
        unit_rps = self._deployment.reference_capacity_rps(p.reference_scaleout)
        sized_rps = (1.0 + p.headroom) * peak_rps / unit_rps if unit_rps > 0 else math.inf
        # (a 77-vertex chain of cost and selectivity 1e4 each carries 5e-308 per unit: workers of inf)
        if not (math.isfinite(unit_rps) and unit_rps > 0 and math.isfinite(sized_rps)):
            raise TopologyError(
                self.topology.name,
                (
                    f"a {p.reference_scaleout}-worker deployment carries {unit_rps:g} records/s per unit of "
                    "worker capacity, so no worker size can carry the trace (check costs and overheads)",
                ),
            )
        return sized_rps

    # ----------------------------------------------------------------------------- public state
    @property
    def now_s(self) -> float:
        return float(self._t)

    @property
    def duration_s(self) -> int:
        """Length of the trace; past it no records arrive."""
        return len(self._arrivals)

    @property
    def trace_rps(self) -> np.ndarray:
        return self._trace_rps

    @property
    def parallelism(self) -> int:
        return self._deployment.size

    @property
    def vertex_parallelism(self) -> dict[str, int]:
        """Subtasks per vertex name now (reactive mode: the scale-out, capped by each max parallelism)."""
        return dict(zip((v.name for v in self.topology.vertices), self._load.parallelism, strict=True))

    @property
    def slot_seconds(self) -> int:
        """Task slots held so far, summed over seconds (one slot per TaskManager)."""
        return self._worker_seconds

    @property
    def subtask_seconds(self) -> int:
        """Subtasks run so far, summed over vertices and seconds."""
        return self._subtask_seconds

    @property
    def subtask_memory_mb_seconds(self) -> float:
        """Per-subtask overhead memory and network buffers held so far (MB·s): what fewer subtasks save."""
        return self._subtask_mb_seconds

    @property
    def cpu_used_seconds(self) -> float:
        """CPU the TaskManagers used so far (core-seconds: the per-worker CPU load summed, idle JVMs and
        per-subtask overheads included), as against the cores they hold (`worker_seconds`)."""
        return self._cpu_used_seconds

    @property
    def worker_ids(self) -> tuple[str, ...]:
        return tuple(w.worker_id for w in self._deployment.workers)

    @property
    def worker_capacity_rps(self) -> float:
        """Saturation throughput of a speed-1.0 worker on a cost-1.0 vertex (sized from the trace unless
        given)."""
        return self._deployment.worker_capacity_rps

    @property
    def running(self) -> bool:
        return self._running

    @property
    def uptime_s(self) -> float:
        return float(self._t - self._run_start) if self._running else 0.0

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def rescales(self) -> int:
        return self._rescales

    @property
    def records_in(self) -> int:
        return self._log_end

    @property
    def records_processed(self) -> int:
        """Unique records processed (replays after a rollback not counted twice)."""
        return self._high_water

    @property
    def records_processed_total(self) -> int:
        """Records processed including replays."""
        return self._processed_total

    @property
    def backlog_records(self) -> int:
        """Consumer lag: log end offset minus consumer position (rolled-back records included)."""
        return self._log_end - self._position

    @property
    def unprocessed_records(self) -> int:
        """Records never processed yet; records_in == records_processed + unprocessed_records always."""
        return self._log_end - self._high_water

    @property
    def worker_seconds(self) -> int:
        return self._worker_seconds

    @property
    def downtime_s(self) -> int:
        """Seconds simulated so far in which the job was not running."""
        return self._down_seconds

    @property
    def managed_mb(self) -> float:
        """Managed memory per slot (TaskManager) now."""
        return self._deployment.managed_mb

    @property
    def managed_mb_seconds(self) -> float:
        """Managed memory held so far, summed over workers and seconds (MB·s)."""
        return self._managed_mb_seconds

    @property
    def memory_changes(self) -> int:
        """Reconfigurations that changed the managed memory (each also counts as a rescale)."""
        return self._memory_changes

    @property
    def state_rates(self) -> StateRates:
        """What the state backend does per processed record at the current configuration."""
        return self._state

    # ----------------------------------------------------------------------------- ground truth
    def true_capacity_rps(self) -> float:
        """Input rate the current deployment sustains (during a downtime: the one being started)."""
        return self._capacity_rps

    def worker_capacities_rps(self) -> np.ndarray:
        """Records/s of a cost-1.0 vertex each current worker processes at saturation, in subtask order."""
        return self._deployment.capacities_rps()

    @property
    def load(self) -> JobLoad:
        """What the current deployment does per source record (per vertex and subtask)."""
        return self._load

    def load_at(self, t_s: int) -> JobLoad:
        """What the deployment at instant t_s <= now did per source record."""
        self._check_past(t_s)
        return next(load for since, load in reversed(self._loads) if since <= t_s)

    def true_bottleneck(self) -> str:
        """The vertex whose subtask saturates first at the current deployment, or 'cpu' (a core)."""
        index = self._load.bottleneck
        return "cpu" if index == CPU_BOTTLENECK else self.topology.vertices[index].name

    def true_vertex_capacities_rps(self) -> dict[str, float]:
        """Per vertex, the source rate at which its hottest subtask is busy all the time."""
        limits = self._load.subtask_capacity_rps.min(axis=1)
        return {v.name: float(c) for v, c in zip(self.topology.vertices, limits, strict=True)}

    def true_vertex_limits_rps_for(self, parallelism: dict[str, int]) -> dict[str, float]:
        """Per vertex, the source rate its hottest subtask carries at a per-vertex parallelism (vertices
        not named: the current scale-out), each subtask on a core of its own: the ground truth for a
        per-vertex requirement sized one task per slot (StreamBed's BIDS2)."""
        names = [v.name for v in self.topology.vertices]
        vector = tuple(parallelism.get(name, self.parallelism) for name in names)
        limits = self._deployment.vertex_limits_rps_for(vector)
        return {name: float(limit) for name, limit in zip(names, limits, strict=True)}

    @property
    def overhead_mb_per_worker(self) -> float:
        """Memory the subtasks of one TaskManager hold besides the process and managed memory."""
        return float(sum(v.overhead_mb for v in self.topology.vertices))

    def true_capacity_rps_for(self, n: int, managed_mb: float | None = None) -> float:
        """Capacity if the job were rescaled to n now (at `managed_mb` per slot, default the current
        memory): keep the oldest n workers or add new pods."""
        return self._deployment.capacity_rps_for(self._validate_parallelism(n), managed_mb)

    def reference_capacity_rps(self, n: int) -> float:
        """Capacity of a fresh n-worker deployment (pods tm-0001..n): the yardstick for sizing and floors."""
        return self._deployment.reference_capacity_rps(self._validate_parallelism(n))

    def seconds_over_slo(self, slo_s: float = 30.0, from_s: int = 0) -> int:
        """Seconds (from `from_s` on) whose worst record latency (or oldest waiting record's age) exceeded
        the SLO."""
        return int(np.count_nonzero(self.history.view("worst_latency_s")[from_s:] > slo_s))

    def seconds_over_slo_after_restart(self, slo_s: float = 30.0, from_s: int = 0) -> int:
        """Of those seconds, the ones in an episode (consecutive seconds over the SLO) that a restart
        began: the job stood still at its first second or in the `slo_s` before, while its oldest record
        waited. The rest began while the job ran behind its load (a scale-out that ends such an episode
        does not make it a restart's). The split says which a policy must fix: fewer or better-timed
        restarts, or more capacity."""
        over = self.history.view("worst_latency_s") > slo_s
        over[:from_s] = False
        stopped = ~self.history.view("running")
        return sum(
            end - start
            for start, end in runs(over)
            if stopped[max(0, start - math.ceil(slo_s)) : start + 1].any()
        )

    # ----------------------------------------------------------------------------- what a backend sees
    def state_at(self, t_s: int) -> BoundaryState:
        """Job state at instant t_s <= now (lag, parallelism, restarts, start of the current run)."""
        if t_s == self._t:
            start = self._run_start if self._running else None
            return BoundaryState(
                self.backlog_records, self.parallelism, self._restarts, start, self.managed_mb
            )
        self._check_past(t_s)
        h = self.history
        start = int(h.series("run_start_at")[t_s])
        return BoundaryState(
            int(h.series("lag_at")[t_s]),
            int(h.series("parallelism_at")[t_s]),
            int(h.series("restarts_at")[t_s]),
            None if start < 0 else start,
            float(h.series("managed_mb_at")[t_s]),
        )

    def workers_at(self, t_s: int) -> list[WorkerInfo]:
        """Workers deployed at instant t_s <= now, in subtask order."""
        if t_s == self._t:
            return list(self._deployment.workers)
        self._check_past(t_s)
        return self._deployment.workers_at(t_s, int(self.history.series("parallelism_at")[t_s]))

    # ----------------------------------------------------------------------------- actions
    def advance_to(self, t_s: float) -> None:
        """Simulate every whole second up to instant t_s (fractions are floored: 1-s resolution)."""
        target = self._instant(t_s)
        if target < self._t:
            raise ValueError(f"cannot go back in time: now {self._t} s, asked for {t_s} s")
        while self._t < target:
            self._step()

    def scale_to(self, n: int, now_s: float) -> None:
        """Rescale at now_s (advancing to it if needed): stop, roll back to the last checkpoint (a scale-out
        with `scale_out_at_checkpoint`: to now), restart.

        Same n is a no-op; a new n during a downtime restarts the downtime.
        """
        n = self._validate_parallelism(n)
        if self.granularity == "vertex":  # every vertex at n: one per-vertex rescale
            names = (v.name for v in self.topology.vertices)
            self.scale_vertices(dict(zip(names, self._capped(n), strict=True)), now_s)
            return
        t = self._act_at(now_s)
        if n == self.parallelism:
            return
        p = self.params
        if n > self.parallelism:
            downtime_s = self._draw_downtime(p.scale_out_downtime_mean_s, p.scale_out_downtime_sd_s)
            if p.scale_out_at_checkpoint and self._running:
                self._checkpoint = self._position
        else:
            downtime_s = self._draw_downtime(p.scale_in_downtime_mean_s, p.scale_in_downtime_sd_s)
        self._resize(n, t)
        self._rescales += 1
        self._stop(t, downtime_s)

    def scale_vertices(self, parallelism: Mapping[str, int], now_s: float) -> None:
        """Per-vertex rescale at now_s (vertex granularity): vertex name → parallelism, vertices not named
        keep theirs. TaskManagers follow (max parallelism, one slot each); the job restarts from a fresh
        checkpoint after the per-vertex downtime. The same parallelism everywhere is a no-op."""
        if self.granularity != "vertex":
            raise ValueError("scale_vertices needs a twin at vertex granularity")
        names = [v.name for v in self.topology.vertices]
        unknown = sorted(set(parallelism) - set(names))
        if unknown:
            raise ValueError(f"unknown vertices {unknown}: the job has {names}")
        target = list(self._deployment.vertex_parallelism)
        for i, vertex in enumerate(self.topology.vertices):
            if vertex.name in parallelism:
                p = parallelism[vertex.name]
                if isinstance(p, bool) or int(p) != p or not 1 <= p <= vertex.max_parallelism:
                    raise ValueError(
                        f"vertex {vertex.name}: parallelism must be an integer in 1..{vertex.max_parallelism}, "
                        f"got {p!r}"
                    )
                target[i] = int(p)
        n = self._validate_parallelism(max(target))
        t = self._act_at(now_s)
        if tuple(target) == self._deployment.vertex_parallelism:
            return
        p = self.params
        drawn = self._downtime_rng.normal(p.vertex_downtime_mean_s, p.vertex_downtime_sd_s)
        downtime_s = round(max(p.min_vertex_downtime_s, drawn))
        self._deployment.vertex_parallelism = tuple(target)
        self._resize(n, t)
        self._rescales += 1
        self._checkpoint = self._position  # Flink 2.x restarts from the checkpoint it waits for
        self._stop(t, downtime_s)
        self.completed_rescales.append(TwinRescale(t, t + downtime_s, dict(zip(names, target, strict=True))))

    def reconfigure(self, n: int, managed_mb: float, now_s: float) -> None:
        """Restart at n workers with `managed_mb` managed memory per slot (a plain rescale when the memory
        stays). New memory restarts every TaskManager, so the stop is a scale-out's (pods start)."""
        if not (math.isfinite(managed_mb) and managed_mb >= 0):
            raise ValueError(f"managed_mb must be a finite size >= 0, got {managed_mb!r}")
        if managed_mb == self.managed_mb:
            self.scale_to(n, now_s)
            return
        n = self._validate_parallelism(n)
        t = self._act_at(now_s)
        p = self.params
        downtime_s = self._draw_downtime(p.scale_out_downtime_mean_s, p.scale_out_downtime_sd_s)
        self._deployment.managed_mb = float(managed_mb)
        self._resize(n, t)
        self._rescales += 1
        self._memory_changes += 1
        self._stop(t, downtime_s)

    def inject_failure(self, now_s: float) -> bool:
        """Fail the running job at now_s (restart at the same n); False if it was already down."""
        t = self._act_at(now_s)
        if not self._running:
            return False
        self._fail(t)
        return True

    # ----------------------------------------------------------------------------- persistence
    _SNAPSHOT_FIELDS = (
        "_t", "_log_end", "_position", "_high_water", "_checkpoint", "_processed_total", "_carry",
        "_running", "_run_start", "_resume_at", "_restarts", "_rescales",
    )  # fmt: skip

    def snapshot(self) -> dict[str, object]:
        """The job's state a restarted daemon must find again: time, Kafka offsets (so the backlog),
        checkpoint, run state, scale-out and memory (JSON-serialisable)."""
        state = {name.lstrip("_"): getattr(self, name) for name in self._SNAPSHOT_FIELDS}
        state |= {"parallelism": self.parallelism, "managed_mb": self.managed_mb}
        if self.granularity == "vertex":
            state["vertex_parallelism"] = list(self._deployment.vertex_parallelism)
        return state

    def restore(self, state: dict[str, object]) -> None:
        """Continue the job of `snapshot()`: simulate up to its time (the history a metrics window reads),
        then take over its offsets and run state. Build the twin at the snapshot's parallelism first.
        A stored state may be damaged or edited: everything is checked before anything is set, and a value
        that is not a finite number in its range raises ValueError (the caller then replays the trace)."""

        def count(name: str, value: object) -> int:  # a time, an offset, a count: whole, >= 0
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"snapshot: {name} must be a whole number >= 0, got {value!r}")
            if value < 0 or value != int(value):
                raise ValueError(f"snapshot: {name} must be a whole number >= 0, got {value!r}")
            return int(value)

        def size(name: str) -> float:  # finite, >= 0
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
                raise ValueError(f"snapshot: {name} must be a finite number >= 0, got {value!r}")
            return float(value)

        if count("parallelism", state["parallelism"]) != self.parallelism:
            raise ValueError(f"twin at parallelism {self.parallelism}, snapshot at {state['parallelism']}")
        t = count("t", state["t"])
        if t > self.duration_s:
            raise ValueError(f"snapshot at {t} s lies past the trace's end ({self.duration_s} s)")
        values: dict[str, object] = {f"_{name}": count(name, state[name]) for name in (
            "t", "log_end", "position", "high_water", "checkpoint", "processed_total", "run_start", "restarts",
            "rescales",
        )}  # fmt: skip
        values["_carry"] = size("carry")
        if not isinstance(state["running"], bool):
            raise ValueError(f"snapshot: running must be true or false, got {state['running']!r}")
        values["_running"] = state["running"]
        values["_resume_at"] = None if state["resume_at"] is None else count("resume_at", state["resume_at"])
        if not values["_checkpoint"] <= values["_position"] <= values["_high_water"] <= values["_log_end"]:
            raise ValueError(
                "snapshot: offsets out of order (checkpoint <= position <= high water <= log end)"
            )
        arrived = self._log_end + sum(self._arrivals[self._t : t])  # this trace's records by t
        if values["_log_end"] != arrived:  # the offsets of another trace (or seed): a backlog it never had
            raise ValueError(
                f"snapshot: log_end {values['_log_end']} records by {t} s, this trace has {arrived}"
            )
        managed_mb = size("managed_mb")
        vertices = state.get("vertex_parallelism") if self.granularity == "vertex" else None
        if vertices is not None:
            if not isinstance(vertices, list) or len(vertices) != len(self.topology.vertices):
                raise ValueError(
                    f"snapshot: vertex_parallelism must list {len(self.topology.vertices)} values"
                )
            vertices = tuple(count("vertex_parallelism", p) for p in vertices)
            for p, vertex in zip(vertices, self.topology.vertices, strict=True):
                if not 1 <= p <= vertex.max_parallelism:
                    raise ValueError(
                        f"snapshot: vertex {vertex.name} at {p}, not in 1..{vertex.max_parallelism}"
                    )
        self.advance_to(t)
        if vertices is not None:
            self._deployment.vertex_parallelism = vertices
            self._resize(max(vertices), t)
        if managed_mb != self.managed_mb:
            self._deployment.managed_mb = managed_mb
            self._resize(self.parallelism, t)
        for name, value in values.items():
            setattr(self, name, value)

    # ----------------------------------------------------------------------------- internals
    def _step(self) -> None:
        t = self._t
        n = self._deployment.size
        h = self.history
        h.ensure(t, n)
        h.series("lag_at")[t] = self._log_end - self._position
        h.series("parallelism_at")[t] = n
        h.series("restarts_at")[t] = self._restarts
        h.series("run_start_at")[t] = self._run_start if self._running else -1
        h.series("managed_mb_at")[t] = self._deployment.managed_mb

        arrivals = self._arrivals[t] if t < len(self._arrivals) else 0
        self._log_end += arrivals
        h.series("arrivals")[t] = arrivals
        worst_s = 0.0
        if self._running:
            available = self._log_end - self._position
            budget = self._capacity_rps + self._carry
            h.series("saturated")[t] = budget < available
            if budget >= available:
                processed = available
                self._carry = 0.0
            else:
                processed = int(budget)
                self._carry = budget - processed
            if processed > 0:
                worst_s = self.latency.record_processed(t, self._position, self._position + processed)
                self._position += processed
                self._high_water = max(self._high_water, self._position)
                self._processed_total += processed
            elif available > 0:
                worst_s = self.latency.waiting_age(t, self._position)
            self._record_workers(t, n, processed)
            if processed > 0 and self.profile.stateful:
                self._record_state(t, processed)
            h.series("processed")[t] = processed
            h.series("running")[t] = True
            if (t + 1 - self._run_start) % self.params.checkpoint_interval_s == 0:
                self._checkpoint = self._position
        else:
            self._down_seconds += 1
            if self._log_end > self._position:
                worst_s = self.latency.waiting_age(t, self._position)
        h.series("worst_latency_s")[t] = worst_s
        self._worker_seconds += n
        self._managed_mb_seconds += n * self._deployment.managed_mb
        self._subtask_seconds += self._subtasks
        self._subtask_mb_seconds += self._subtask_mb
        if self._running:
            self._cpu_used_seconds += float(np.sum(self.history.cpu[t, :n]))
        self._t = t + 1
        h.length = self._t

        if not self._running:
            if self._resume_at is not None and self._resume_at <= self._t:
                self._start_run(self._t)
        elif self._failure_p > 0 and self._failure_rng.random() < self._failure_p:
            self._fail(self._t)

    def _record_workers(self, t: int, n: int, processed: int) -> None:
        noise = self._noise
        noise *= self._phi
        noise += self._innovation_sd * self._cpu_rng.standard_normal(n)
        cpu = self._cpu_per_record * processed
        cpu += noise
        cpu += self._cpu_at_idle
        np.clip(cpu, 0.0, 1.0, out=cpu)
        self.history.cpu[t, :n] = cpu
        self.history.throughput[t, :n] = self._shares * processed

    def _record_state(self, t: int, processed: int) -> None:
        """The state backend's tickers and latency sums for this second (cumulative in Prometheus)."""
        h, rates = self.history, self._state
        processed = processed * self._state_ratio  # records the stateful vertex receives
        h.series("state_hits")[t] = processed * rates.hits
        h.series("state_misses")[t] = processed * rates.misses
        h.series("state_accesses")[t] = processed * rates.accesses
        h.series("state_latency_ns_sum")[t] = processed * rates.latency_ns

    def _stop(self, t: int, downtime_s: int) -> None:
        self._running = False
        self._position = self._checkpoint
        self._carry = 0.0
        self._restarts += 1
        self._resume_at = t + downtime_s
        if downtime_s <= 0:
            self._start_run(t)

    def _start_run(self, t: int) -> None:
        self._running = True
        self._run_start = t
        self._resume_at = None
        self._checkpoint = self._position  # the restored state is the first checkpoint of the new run

    def _fail(self, t: int) -> None:
        p = self.params
        self._stop(t, self._draw_downtime(p.failure_downtime_mean_s, p.failure_downtime_sd_s))

    def _draw_downtime(self, mean_s: float, sd_s: float) -> int:
        drawn = self._downtime_rng.normal(mean_s, sd_s) if sd_s > 0 else mean_s
        return round(max(self.params.min_downtime_s, drawn))

    def _resize(self, n: int, t: int) -> None:
        """Change the workers and cache what the per-second step needs about them."""
        self._deployment.resize(n, t)
        self.history.ensure(t, n)
        kept = self._noise[:n]  # surviving workers keep their noise state; new ones start stationary
        fresh = self._cpu_rng.standard_normal(n - len(kept)) * self.params.cpu_noise_sd
        self._noise = np.concatenate((kept, fresh))
        p = self.params
        load = self._load = self._deployment.load()
        self._loads.append((t, load))
        self._subtasks = sum(load.parallelism)
        self._subtask_mb = subtask_memory_mb(self.topology, load.parallelism)
        self._shares = load.source_shares
        self._capacity_rps = load.capacity_rps
        cpu_range = p.saturation_cpu - p.idle_cpu  # a fully used core reads as the saturation CPU
        self._cpu_per_record = cpu_range * load.cpu_per_record
        self._cpu_at_idle = p.idle_cpu + cpu_range * load.fixed_cpu
        stateful = self.topology.vertices[self.topology.stateful_index]
        self._state_ratio = self.topology.input_ratios[self.topology.stateful_index]
        record_time_ns = 1e9 * stateful.cost / self._deployment.worker_capacity_rps
        self._state = state_rates(
            self.profile, self._deployment.managed_mb, load.state_shares, record_time_ns
        )

    def _capped(self, n: int) -> tuple[int, ...]:
        """Every vertex at n, capped by its max parallelism."""
        return tuple(min(n, v.max_parallelism) for v in self.topology.vertices)

    def _validate_parallelism(self, n: int) -> int:
        if isinstance(n, bool) or int(n) != n or not 1 <= n <= self.max_parallelism:
            raise ValueError(f"parallelism must be an integer in 1..{self.max_parallelism}, got {n!r}")
        return int(n)

    @staticmethod
    def _instant(t_s: float) -> int:
        if not math.isfinite(t_s):
            raise ValueError(f"time must be finite, got {t_s!r}")
        return math.floor(t_s + 1e-9)

    def _act_at(self, now_s: float) -> int:
        t = self._instant(now_s)
        if t < self._t:
            raise ValueError(f"cannot act in the past: now {self._t} s, asked for {now_s} s")
        self.advance_to(t)
        return t

    def _check_past(self, t_s: int) -> None:
        if not 0 <= t_s <= self._t:
            raise ValueError(f"instant {t_s} s is outside the simulated range 0..{self._t} s")


def _hash_keys(topology: Topology, seed: np.random.SeedSequence) -> dict[int, KeyGroups]:
    """Key groups of every keyed vertex; the first uses `seed` itself (the one-operator twin's draws)."""
    keyed = [i for i, v in enumerate(topology.vertices) if v.keyed]
    seeds = [seed, *seed.spawn(max(len(keyed) - 1, 0))]
    return {
        i: KeyGroups.hashed(v.num_keys, v.max_parallelism, np.random.default_rng(s), v.zipf_exponent)
        for (i, v), s in zip(((i, topology.vertices[i]) for i in keyed), seeds, strict=False)
    }
