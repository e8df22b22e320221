"""Real local Flink as the Capacity Estimator's testbed: the load job (jobs/TraceLoadJob.java) on a
reactive-mode cluster of `slots` TaskManagers of one slot each, fresh for every deployment.

The load job's source emits what its trace file makes due and counts what it could not emit yet as
pending, up to what falls due in a second; beyond it skips records, as StreamBed's rate-limited sources
abide by backpressure rather than catch up (`LoadJob.source_backlog_ms`). Pending records here also count the records in flight inside the job (sent by a vertex, not yet received by the next), which
Flink's network buffers hold by the thousand when records are small. A phase schedule is
programmed into the trace a few seconds ahead, so each phase starts at a known whole second of the job's
clock. At every phase boundary the testbed reads Flink's REST API: the source's emitted records and
pending records, and per vertex and subtask the records in and the accumulated busy milliseconds
(`accumulateBusyTimeMs`), and the TaskManagers' CPU time; a phase's rates are the differences over the
wall time between the two reads.
Counters, not Flink's per-second meters: those average over the last 60 s and would blur the phases.
Flink's REST API answers from its previous fetch of the metrics, so a read repeats until the source's
`clockMs` gauge is newer than the read's start and every vertex's counters come from that one fetch; that
gauge's instant is the reading's time.

The cluster's processes die with the planner (PR_SET_PDEATHSIG), and a process that exits is named with
its log as soon as it is missed; a run's first deployment stops what an earlier, killed run on the same
directory left (`clear_workdir`).
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import requests

from backends.flinkrest import FlinkRest, GraphUnavailable
from backends.localflink import LocalFlinkCluster, TaskManagersFailed
from backends.standalone import (
    LOAD_JOB_CLASS,
    TraceFile,
    cluster_settings,
    free_port,
    free_port_range,
    write_conf,
)
from planning.testbed import Phase, PhaseReading, VertexReading

LEAD_S = 3.0
"""A programmed schedule starts this far ahead: the job re-reads its trace at most once a second."""
REPORTER_PORTS = 8
KEYED = "HASH"
POLL_S = 0.1
"""The REST API answers from its last fetch of the TaskManagers' metrics and starts a new one when that
is older than `metrics.fetcher.update-interval` (set to 500 ms): a request starts a fetch, and reads
every `POLL_S` take it as soon as it has landed. Polling well inside the 500 ms starts no second fetch
meanwhile, so the reading's instant stays a fraction of a second after the phase boundary (a read after
the interval would start the next fetch, land on it, and count more of the next phase)."""
FRESH_TIMEOUT_S = 15.0
PROCESS_BASE_MB = 960.0
"""A testbed TaskManager's process memory besides its managed memory."""
JOBMANAGER_MB = 768.0
"""The JobManager's process size (`jobmanager.memory.process.size` of backends/standalone.py)."""
_PR_SET_PDEATHSIG = 1

SMALL_BUFFERS_CONF = {
    # Little data in flight between the vertices, so a rate change reaches the sink in seconds: 4 KiB
    # network buffers (16 of the load job's 256-byte events), two per channel. Buffer debloating would
    # shrink them too, but it makes a sink that waits per record report part of its waiting as idle time.
    "taskmanager.memory.segment-size": "4kb",
    "taskmanager.network.memory.buffers-per-channel": "2",
    "taskmanager.network.memory.floating-buffers-per-gate": "2",
    "taskmanager.network.memory.max-buffers-per-channel": "2",
    # under backpressure an aligned checkpoint barrier queues behind the data and stalls the vertices below
    # it while they align: the saturated vertex would show idle time it does not have
    "execution.checkpointing.unaligned.enabled": "true",
}


class FlinkTestbedError(RuntimeError):
    """The testbed could not deploy or read the job (the message says what and where its logs are)."""


def available_memory_mb() -> float:
    """MemAvailable of /proc/meminfo (MB); infinite where the kernel does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return math.inf


def largest_deployment(process_base_mb: float, memory_mb: float, available_mb: float) -> int:
    """Most one-slot TaskManagers of `memory_mb` managed memory this machine holds beside the JobManager:
    more would swap or be killed mid-measurement, and a measured MST would be the machine's, not the job's."""
    if math.isinf(available_mb):
        return 2**31
    return max(0, math.floor((available_mb - JOBMANAGER_MB) / (process_base_mb + memory_mb)))


class _TestbedCluster(LocalFlinkCluster):
    """A cluster whose processes die with the planner, even on SIGKILL (the daemon's outlive it). Linux
    ties PR_SET_PDEATHSIG to the thread that spawned the process: deploy from the thread that runs the
    whole plan (the planner's main thread)."""

    def _before_exec(self) -> Callable[[], None]:
        return _die_with(os.getpid())


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int):
    """A child's pre-exec: SIGKILL when `parent` exits (Linux's PR_SET_PDEATHSIG; kept across exec)."""

    def arm() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the planner died before the line above
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


def clear_workdir(flink_home: Path, workdir: Path) -> None:
    """Stop the processes an earlier run on this directory left (its planner was killed: they are
    orphans, never to be adopted as this run's) and remove its deployments."""
    for state in sorted(workdir.glob("deployment-*/state")):
        LocalFlinkCluster(flink_home, state.parent / "conf", state).stop_all()
        shutil.rmtree(state.parent, ignore_errors=True)


@dataclass(frozen=True)
class LoadJob:
    """The job under test: its class in the distribution's usrlib/ and its arguments (the testbed adds
    `--trace FILE`). The default is foresail's multi-vertex load job."""

    job_class: str = LOAD_JOB_CLASS
    args: tuple[str, ...] = ("--topology", "chain")
    source_backlog_ms: int | None = 1000
    """foresail's load job only: its source keeps at most what falls due in this long and skips the rest,
    as StreamBed's rate-limited sources abide by backpressure (§IV, "Load injection") instead of catching up. A kept
    backlog (None: every due record, as Kafka would keep them) made each cooldown after a test above
    capacity wait while it drained, up to minutes after a warm-up far above it."""

    def command_args(self, trace: Path) -> list[str]:
        """The job's arguments with its trace (and, for the load job, its source's backlog bound)."""
        bound = self.job_class == LOAD_JOB_CLASS and self.source_backlog_ms is not None
        backlog = ["--max-behind-ms", str(self.source_backlog_ms)] if bound else []
        return ["--trace", str(trace), *backlog, *self.args]


@dataclass(frozen=True)
class FlinkTestbedSettings:
    flink_home: Path
    workdir: Path
    max_rate_rps: float
    """The warm-up's full rate: well past what the largest configuration tried carries."""
    job: LoadJob = LoadJob()
    flink_conf: Mapping[str, str] = field(default_factory=lambda: dict(SMALL_BUFFERS_CONF))
    """Flink settings added to the testbed's."""
    process_base_mb: float = PROCESS_BASE_MB
    """TaskManager process memory besides the managed memory per slot."""
    start_timeout_s: float = 180.0


@dataclass(frozen=True)
class _Counters:
    at_s: float
    emitted: float
    pending: float
    records_in: dict[str, tuple[float, ...]]
    """Vertex name → records in per subtask (cumulative)."""
    records_out: dict[str, float]
    busy_ms: dict[str, tuple[float, ...]]
    cpu_s: float = math.nan
    """CPU seconds the TaskManagers' JVMs used so far, summed (NaN: not read)."""


class LocalFlinkTestbed:
    """`Testbed` on real Flink processes of this machine (see the module docstring)."""

    def __init__(self, settings: FlinkTestbedSettings) -> None:
        if not (math.isfinite(settings.max_rate_rps) and settings.max_rate_rps > 0):
            raise ValueError(f"max_rate_rps must be a rate > 0, got {settings.max_rate_rps}")
        self.settings = settings
        self._deployments = 0
        self._cluster: LocalFlinkCluster | None = None
        self._rest: FlinkRest | None = None
        self._trace: TraceFile | None = None
        self._job_id = ""
        self._slots = 0
        self._started: list[int] = []
        """The TaskManagers the deployment runs on: one gone means the cluster, not the job, failed."""
        self._vertices: list[tuple[str, str, int, int]] = []
        """(id, name, parallelism, key groups or 0) in topological order, the source first."""
        self._upstream: dict[str, str] = {}
        """Vertex name → its input vertex's name, for vertices with exactly one input."""

    @property
    def max_rate_rps(self) -> float:
        return self.settings.max_rate_rps

    def deploy(self, slots: int, memory_mb: float) -> None:
        self.close()
        s = self.settings
        if not (s.flink_home / "usrlib").is_dir():
            raise FlinkTestbedError(f"no usrlib/ in {s.flink_home}: build the load job into it first")
        if self._deployments == 0:
            clear_workdir(s.flink_home, s.workdir)
        self._deployments += 1
        workdir = s.workdir / f"deployment-{self._deployments}-{slots}x{memory_mb:g}mb"
        rest_port = free_port()
        conf = cluster_settings(workdir, rest_port, free_port_range(REPORTER_PORTS), REPORTER_PORTS)
        conf |= {"metrics.fetcher.update-interval": "500", **s.flink_conf}
        write_conf(s.flink_home, workdir / "conf", conf)
        cluster = _TestbedCluster(s.flink_home, workdir / "conf", workdir / "state")
        cluster.set_memory(memory_mb, s.process_base_mb + memory_mb)
        self._cluster, self._rest = cluster, FlinkRest(f"http://127.0.0.1:{rest_port}")
        self._trace = TraceFile(workdir / "trace.txt", 0)
        cluster.start_application(s.job.job_class, s.job.command_args(self._trace.path))
        try:
            cluster.scale_to(slots)
        except TaskManagersFailed as error:
            raise FlinkTestbedError(str(error)) from error
        self._started = cluster.taskmanagers()
        self._await_running(slots, workdir)
        self._slots = slots
        self._trace.anchor(self._await(self._trace_start_s, workdir, "the load job's trace clock"))

    def run(self, phases: list[Phase]) -> list[PhaseReading]:
        if self._trace is None:
            raise FlinkTestbedError("deploy a configuration before running phases")
        schedule = [(round(p.rate_rps), max(1, round(p.duration_s))) for p in phases]
        boundary_s = self._trace.program(schedule, LEAD_S)  # the last rate holds until the next run
        readings = []
        _sleep_until(boundary_s)
        before = self._counters()
        for phase, (_, seconds) in zip(phases, schedule, strict=True):
            boundary_s += seconds
            _sleep_until(boundary_s)
            after = self._counters()
            readings.append(self._reading(phase, before, after))
            before = after
        return readings

    def close(self) -> None:
        """Stop the deployed cluster (the next `deploy` starts a fresh one)."""
        if self._cluster is not None:
            self._cluster.stop_all()
        self._cluster = self._rest = self._trace = None
        self._started = []

    def _dead_process(self) -> str | None:
        """Which of the deployment's processes exited, with its log; None: all run."""
        cluster = self._cluster
        if cluster is None:
            return None
        if cluster.jobmanager() is None:
            return f"the JobManager exited; its log: {cluster.state_dir / 'jobmanager.log'}"
        alive = set(cluster.taskmanagers())
        dead = [pid for pid in self._started if pid not in alive]
        if not dead:
            return None
        log = cluster.logs.get(dead[0], cluster.state_dir)
        return f"{len(dead)} of {len(self._started)} TaskManagers exited; the log of one: {log}"

    def _raise_if_dead(self) -> None:
        dead = self._dead_process()
        if dead is not None:
            raise FlinkTestbedError(dead)

    # ---- reading Flink --------------------------------------------------------------------------
    def _reading(self, phase: Phase, before: _Counters, after: _Counters) -> PhaseReading:
        span_s = max(after.at_s - before.at_s, 1e-3)
        vertices = []
        for _, name, parallelism, key_groups in self._vertices:
            records = [b - a for a, b in zip(before.records_in[name], after.records_in[name], strict=True)]
            busy = [b - a for a, b in zip(before.busy_ms[name], after.busy_ms[name], strict=True)]
            total = sum(records)
            busyness = sum(busy) / (1000.0 * span_s * parallelism) if parallelism else math.nan
            shares = tuple(r / total for r in records) if total > 0 else ()
            per_subtask = tuple(b / (1000.0 * span_s) for b in busy)
            vertices.append(
                VertexReading(name, total / span_s, busyness, parallelism, shares, key_groups, per_subtask)
            )
        cores = len(os.sched_getaffinity(0))
        return PhaseReading(
            injected_rps=phase.rate_rps,
            achieved_rps=(after.emitted - before.emitted) / span_s,
            pending_start=before.pending,
            pending_end=after.pending,
            vertices=tuple(vertices),
            cpu_load=(after.cpu_s - before.cpu_s) / span_s / max(self._slots, 1) / cores,
        )

    def _counters(self) -> _Counters:
        """Every vertex's counters from one fetch of the TaskManagers' metrics that began after this call
        did (the source's `clockMs` gauge says when they were read, and that instant is the reading's
        time). A read spans several requests, and any of them may start the next fetch: when one lands
        between the source's read and a later vertex's, the edges' in-flight records mix two instants
        (at 200 records/s half a second is 100 records, more than twice what a 20 s test's pending
        records may grow). The source is read again last, and the read repeats until both source reads
        show the same clocks."""
        requested_ms = time.time() * 1000
        source_id = self._vertices[0][0]
        self._vertex_metrics(source_id)  # starts a fetch (the answer is the previous one)
        deadline = time.monotonic() + FRESH_TIMEOUT_S
        while True:  # the source alone until its fetch is fresh; then the rest, and the source again
            time.sleep(POLL_S)
            self._raise_if_dead()  # a dead process is said at once, not as metrics that stay stale
            source = self._vertex_metrics(source_id)
            clocks = _clocks(source)
            if max(clocks.values(), default=math.nan) >= requested_ms:
                values = {vertex_id: self._vertex_metrics(vertex_id) for vertex_id, *_ in self._vertices[1:]}
                if _clocks(self._vertex_metrics(source_id)) == clocks:
                    break
            if time.monotonic() > deadline:
                raise FlinkTestbedError(
                    f"Flink's REST API served no consistent metrics newer than {FRESH_TIMEOUT_S:.0f} s (or "
                    "the job reports no clockMs gauge: it is not foresail's load job)"
                )
        values[source_id] = source
        clock_ms = max(clocks.values())
        records_in, records_out, busy_ms = {}, {}, {}
        for vertex_id, name, parallelism, _ in self._vertices:
            got = values[vertex_id]
            records_in[name] = tuple(got.get(f"{i}.numRecordsIn", 0.0) for i in range(parallelism))
            records_out[name] = sum(got.get(f"{i}.numRecordsOut", 0.0) for i in range(parallelism))
            busy_ms[name] = tuple(got.get(f"{i}.accumulateBusyTimeMs", 0.0) for i in range(parallelism))
        if "0.numRecordsOut" not in source:
            raise FlinkTestbedError("Flink reports no numRecordsOut for the source")
        emitted = records_out[self._vertices[0][1]]
        pending = sum(v for k, v in source.items() if k.endswith(".pendingRecords"))
        pending += self._in_flight(emitted, records_in, records_out)
        return _Counters(
            clock_ms / 1000, emitted, pending, records_in, records_out, busy_ms, self._cpu_seconds()
        )

    def _cpu_seconds(self) -> float:
        """The TaskManagers' summed `Status.JVM.CPU.Time` (a counter, ns) from the same fetch as the vertices'
        counters: over a phase it gives the mean of the `Status.JVM.CPU.Load` gauge the daemon reads (CPU
        time over wall time and this machine's cores, where the TaskManagers run). NaN when Flink does
        not answer it: the CPU is optional (the plan then seeds no CPU per busy second)."""
        if self._rest is None:
            return math.nan
        try:
            answer = self._get("/taskmanagers/metrics", {"get": "Status.JVM.CPU.Time", "agg": "sum"})
            return float(answer[0]["sum"]) / 1e9
        except (requests.RequestException, IndexError, KeyError, TypeError, ValueError):
            return math.nan

    def _in_flight(
        self, emitted: float, records_in: dict[str, tuple[float, ...]], records_out: dict[str, float]
    ) -> float:
        """Records sent but not yet received on the edges into single-input vertices, in source records
        (each edge's count × source records per record it carries). Small records fill Flink's network
        buffers by the thousand: uncounted, a rate above capacity would pass while they fill."""
        total = 0.0
        for name, upstream in self._upstream.items():
            sent = records_out.get(upstream, 0.0)
            if sent > 0:
                total += max(0.0, sent - sum(records_in[name])) * emitted / sent
        return total

    def _vertex_metrics(self, vertex_id: str) -> dict[str, float]:
        """Every numeric metric of the vertex's subtasks, by Flink's id (`<subtask>.<name>`)."""
        base = f"/jobs/{self._job_id}/vertices/{vertex_id}/metrics"
        wanted = (
            "numRecordsIn",
            "numRecordsOut",
            "accumulateBusyTimeMs",
            "pendingRecords",
            "traceStartMs",
            "clockMs",
        )
        try:
            ids = [m["id"] for m in self._get(base) if m["id"].split(".")[-1] in wanted]
            answer = self._get(base, {"get": ",".join(ids)}) if ids else []
        except (requests.RequestException, KeyError, TypeError, ValueError) as error:
            self._raise_if_dead()
            raise FlinkTestbedError(f"reading vertex {vertex_id}'s metrics: {error!r:.160}") from error
        values = {}
        for metric in answer:
            try:
                values[metric["id"]] = float(metric["value"])
            except (KeyError, TypeError, ValueError):
                continue
        return values

    def _trace_start_s(self) -> float | None:
        source = self._vertices[0][0]
        values = self._vertex_metrics(source)
        starts = [v for k, v in values.items() if k.endswith(".traceStartMs") and v > 0]
        return max(starts) / 1000 if starts else None

    def _await_running(self, slots: int, workdir: Path) -> None:
        def running() -> bool:
            status = self._rest.job_status()
            if status is None or not status.running or status.parallelism != slots:
                return False
            graph = self._rest.job_graph()
            keyed = {e.target_id for e in graph.edges if e.ship_strategy == KEYED}
            names = {v.vertex_id: v.name for v in graph.vertices}
            inputs: dict[str, list[str]] = {}
            for edge in graph.edges:
                inputs.setdefault(names[edge.target_id], []).append(names[edge.source_id])
            self._upstream = {v: u[0] for v, u in inputs.items() if len(u) == 1}
            self._job_id = self._rest.live_job_id() or ""
            self._vertices = [
                (v.vertex_id, v.name, v.parallelism, v.max_parallelism if v.vertex_id in keyed else 0)
                for v in graph.vertices
            ]
            return bool(self._job_id)

        self._await(running, workdir, f"the job running at parallelism {slots}")

    def _await(self, condition, workdir: Path, what: str):
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            self._raise_if_dead()
            try:
                value = condition()
            except (requests.RequestException, GraphUnavailable, FlinkTestbedError):
                value = None
            if value:
                return value
            time.sleep(0.5)
        raise FlinkTestbedError(
            f"timed out after {self.settings.start_timeout_s:.0f} s waiting for {what}; logs in "
            f"{workdir / 'state'}"
        )

    def _get(self, path: str, params: dict | None = None):
        answer = requests.get(f"{self._rest.url}{path}", params=params, timeout=5)
        answer.raise_for_status()
        return answer.json()


def _sleep_until(wall_s: float) -> None:
    """The testbed's measurements are wall-clock phases: wait out the rest of one."""
    remaining = wall_s - time.time()
    if remaining > 0:
        time.sleep(remaining)


def _clocks(values: Mapping[str, float]) -> dict[str, float]:
    """The source subtasks' `clockMs` gauges: they change with every fetch of their TaskManager."""
    return {k: v for k, v in values.items() if k.endswith(".clockMs")}
